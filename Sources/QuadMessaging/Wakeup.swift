import CZeroMQ
import Synchronization

/// How threads beside a loop hand it work: they ring its ``Doorbell``,
/// which sends one empty message on an `inproc://` PUSH socket; the PULL end
/// is registered in the loop's ``Reactor``, which runs the handler on the
/// loop the next time it polls. The loop sleeps in its poll until then:
/// nothing on it checks an inbox on a timer.
///
/// Rings coalesce: while one is on its way, others send nothing, and the
/// handler takes everything that was handed over (it runs after the flag is
/// cleared, so work handed over during it rings again). Two sockets of the
/// reactor's context, whatever the number of threads.
public final class Wakeup {
    /// What the other threads hold.
    public let doorbell: Doorbell
    private let receiver: Socket
    private weak var reactor: Reactor?

    private static let made = Atomic<Int>(0)

    /// Two sockets of `context`, the receiving one registered in `reactor`
    /// with `handler`. Made and ended on the loop.
    public init(context: ZMQContext, reactor: Reactor, _ handler: @escaping () -> Void) throws(ZMQError) {
        let endpoint = "inproc://quad-wakeup-\(Wakeup.made.add(1, ordering: .relaxed).newValue)"
        receiver = try context.socket(.pull)
        try receiver.bind(endpoint)
        let sender = try context.socket(.push)
        try sender.connect(endpoint)
        let doorbell = Doorbell(sender)
        self.doorbell = doorbell
        self.reactor = reactor
        reactor.register(receiver) { socket in
            while (try? socket.receive(dontWait: true)) != nil {}
            doorbell.answered()
            handler()
        }
    }

    deinit { reactor?.unregister(receiver) }
}

/// The side of a ``Wakeup`` that any thread may ring.
public final class Doorbell: @unchecked Sendable {
    /// Used by any thread, under `state`'s lock (a ZeroMQ socket is not
    /// thread-safe; the lock is also the memory barrier its use across
    /// threads needs).
    private let sender: Socket
    /// Whether a ring is on its way, and the rings sent.
    private let state = Mutex<(pending: Bool, rings: Int)>((false, 0))

    init(_ sender: Socket) { self.sender = sender }

    /// Wakes the loop; from any thread. Never blocks: with a ring already on
    /// its way this sends nothing; with the loop's end gone, the message is
    /// dropped.
    public func ring() {
        state.withLock { state in
            guard !state.pending else { return }
            state.pending = true
            state.rings += 1
            try? sender.send([[]], dontWait: true)
        }
    }

    /// Rings sent (fewer than ``ring()`` calls when they coalesced).
    public var sent: Int { state.withLock { $0.rings } }

    fileprivate func answered() { state.withLock { $0.pending = false } }
}
