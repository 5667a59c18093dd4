import CZeroMQ

/// The one poll loop every long-running process runs (the broker, each
/// worker, the edge's fleet of phones): sockets registered with the handler
/// that reads them, and the loop's ``Timers`` beside them. A turn sleeps
/// until a socket is readable or the next timer is due, calls the handler of
/// each readable socket (in the order they were registered), then runs the
/// timers that are due. Handlers drain their socket without blocking, as
/// each loop did by hand before.
///
/// The poll set is built again only when a registration changes, not every
/// turn. A socket registered inside a handler is polled from the next turn;
/// a socket unregistered inside a handler gets no more calls, in this turn
/// either. One thread, no locks.
public final class Reactor {
    /// The loop's timers, the one implementation (``Timers``).
    public let timers: Timers

    private struct Registration {
        let socket: Socket
        let handler: (Socket) -> Void
    }

    private var registrations: [Registration] = []
    /// The poll items of `registrations`; nil when they changed since.
    private var items: [zmq_pollitem_t]?
    /// The registrations `items` was built from.
    private var polled: [Registration] = []
    /// Bumped by every change, so a turn knows an unregistration happened
    /// inside one of its handlers.
    private var generation = 0
    /// Times the poll set was built (tests check it is not every turn).
    private(set) var builds = 0

    /// `now` is the timers' monotonic clock in milliseconds
    /// (`Clock.monotonicMillis`).
    public convenience init(now: @escaping () -> Int64) {
        self.init(timers: Timers(now: now))
    }

    public init(timers: Timers) {
        self.timers = timers
    }

    /// Calls `handler` with `socket` on every turn it is readable. A socket
    /// registered again gets the new handler (in its old place).
    public func register(_ socket: Socket, _ handler: @escaping (Socket) -> Void) {
        if let k = registrations.firstIndex(where: { $0.socket === socket }) {
            registrations[k] = Registration(socket: socket, handler: handler)
        } else {
            registrations.append(Registration(socket: socket, handler: handler))
        }
        changed()
    }

    /// Stops polling `socket`; a socket not registered is ignored.
    public func unregister(_ socket: Socket) {
        guard let k = registrations.firstIndex(where: { $0.socket === socket }) else { return }
        registrations.remove(at: k)
        changed()
    }

    /// Whether `socket` is polled.
    public func isRegistered(_ socket: Socket) -> Bool {
        registrations.contains { $0.socket === socket }
    }

    /// Sockets polled.
    public var count: Int { registrations.count }

    private func changed() {
        items = nil
        generation &+= 1
    }

    /// One turn: polls for at most `timeoutCap` ms (less when a timer is due
    /// sooner), calls the handlers of the readable sockets, runs the timers
    /// that are due. An interrupting signal ends the poll early, with no
    /// socket readable.
    public func turn(timeoutCap: Int64) throws(ZMQError) {
        if items == nil {
            polled = registrations
            builds += 1
            items = polled.map { zmq_pollitem_t(socket: $0.socket.handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0) }
        }
        let timeout = Int(timers.timeout(cap: timeoutCap))
        let rc = items!.withUnsafeMutableBufferPointer { zmq_poll($0.baseAddress, Int32($0.count), timeout) }
        if rc < 0 {
            let e = ZMQError("zmq_poll")
            if !e.interrupted { throw e }
        } else if rc > 0, let ready = items {
            let startGeneration = generation
            for k in ready.indices where (ready[k].revents & Int16(ZMQ_POLLIN)) != 0 {
                let r = polled[k]
                // An earlier handler of this turn may have unregistered it.
                if generation != startGeneration && !isRegistered(r.socket) { continue }
                // Registered again with another handler: that one runs.
                let handler = generation == startGeneration ? r.handler
                    : registrations.first(where: { $0.socket === r.socket })!.handler
                handler(r.socket)
            }
        }
        timers.runDue()
    }

    /// Turns until `stop` returns true (it is asked before every turn).
    /// Each poll waits at most `timeoutCap` ms, so a flag set by a signal
    /// (``Shutdown``) is seen that soon.
    public func run(timeoutCap: Int64 = 100, until stop: () -> Bool) throws(ZMQError) {
        while !stop() { try turn(timeoutCap: timeoutCap) }
    }
}
