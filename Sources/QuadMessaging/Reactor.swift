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
///
/// `zmq_poll` asks every socket for its state on every turn: 4 to 9 µs a
/// socket here, 9 ms a turn for 2,000 sockets. A loop of thousands (the
/// edge's phones) is ``scalable``: epoll over each socket's `ZMQ_FD`, so a
/// turn costs what is ready, not what is registered. The broker's and the
/// workers' loops are too: with ten sockets, asking each one on each turn
/// was a sixth of the broker's time per request. `ZMQ_FD` only says
/// that a socket's state may have changed, and a send or a receive outside
/// the turn may take that news; so a socket is also looked at in the turn
/// after any send or receive on it (Socket.onTouch).
public final class Reactor {
    /// The loop's timers, the one implementation (``Timers``).
    public let timers: Timers

    private struct Registration {
        let socket: Socket
        let handler: (Socket) -> Void
    }

    /// The sockets whose handler also runs when they become writable
    /// (``wantWritable(_:_:)``).
    private var writers: Set<ObjectIdentifier> = []

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

    /// A loop for thousands of sockets (see above); on Linux only, else the
    /// same as ``init(now:)``.
    public convenience init(now: @escaping () -> Int64, scalable: Bool) {
        self.init(timers: Timers(now: now))
        #if os(Linux)
        if scalable {
            let fd = quad_epoll_create()
            if fd >= 0 { epoll = Epoll(fd: fd) }
        }
        #endif
    }

    deinit {
        #if os(Linux)
        if let epoll { quad_close_fd(epoll.fd) }
        #endif
    }

    /// The scalable mode's state: each registration's tag (in registration
    /// order, kept when a socket is registered again), its descriptor, and
    /// the sockets touched since the last turn.
    private struct Epoll {
        let fd: Int32
        var next: UInt64 = 1
        var tags: [ObjectIdentifier: UInt64] = [:]
        var byTag: [UInt64: (socket: Socket, fd: Int32, handler: (Socket) -> Void)] = [:]
        var touched: [Socket] = []
        var buffer = [UInt64](repeating: 0, count: 512)
    }
    private var epoll: Epoll?
    public var isScalable: Bool { epoll != nil }

    /// Calls `handler` with `socket` on every turn it is readable. A socket
    /// registered again gets the new handler (in its old place).
    public func register(_ socket: Socket, _ handler: @escaping (Socket) -> Void) {
        if epoll != nil { scalableRegister(socket, handler); return }
        if let k = registrations.firstIndex(where: { $0.socket === socket }) {
            registrations[k] = Registration(socket: socket, handler: handler)
        } else {
            registrations.append(Registration(socket: socket, handler: handler))
        }
        changed()
    }

    /// Whether `socket`'s handler also runs on a turn where the socket
    /// can take a message (ZMQ_POLLOUT), as well as when one waits: a
    /// sender whose socket refused a message (ZMQ_IMMEDIATE with no
    /// connection yet, a full queue) sends it then, instead of polling.
    /// Off again once it has nothing waiting, or a writable socket would
    /// wake every turn.
    public func wantWritable(_ socket: Socket, _ on: Bool) {
        let id = ObjectIdentifier(socket)
        guard on != writers.contains(id) else { return }
        if on { writers.insert(id) } else { writers.remove(id) }
        if epoll != nil {
            // Asked in the next turn: it may be writable already.
            if on { epoll!.touched.append(socket) }
        } else {
            changed()
        }
    }

    /// Whether `socket`'s handler has something to do now: a message to
    /// read, or room to send one it asked to be woken for.
    private func ready(_ socket: Socket) -> Bool {
        let wanted = writers.contains(ObjectIdentifier(socket)) ? Int32(ZMQ_POLLIN | ZMQ_POLLOUT) : Int32(ZMQ_POLLIN)
        return socket.events & wanted != 0
    }

    /// Stops polling `socket`; a socket not registered is ignored.
    public func unregister(_ socket: Socket) {
        writers.remove(ObjectIdentifier(socket))
        if epoll != nil { scalableUnregister(socket); return }
        guard let k = registrations.firstIndex(where: { $0.socket === socket }) else { return }
        registrations.remove(at: k)
        changed()
    }

    /// Whether `socket` is polled.
    public func isRegistered(_ socket: Socket) -> Bool {
        if let epoll { return epoll.tags[ObjectIdentifier(socket)] != nil }
        return registrations.contains { $0.socket === socket }
    }

    /// How long one turn may spend on due timers before the sockets are
    /// polled again (nil: until none is due). The edge's loop sets it: a
    /// thousand phones' timers (students' actions, telemetry, retries)
    /// held every answer that arrived meanwhile until they had all run.
    public var timerBudgetMs: Int64?

    /// Sockets polled.
    public var count: Int { epoll?.tags.count ?? registrations.count }

    private func changed() {
        items = nil
        generation &+= 1
    }

    /// One turn: polls for at most `timeoutCap` ms (less when a timer is due
    /// sooner), calls the handlers of the readable sockets, runs the timers
    /// that are due. An interrupting signal ends the poll early, with no
    /// socket readable.
    public func turn(timeoutCap: Int64) throws(ZMQError) {
        if epoll != nil { try scalableTurn(timeoutCap: timeoutCap); return }
        if items == nil {
            polled = registrations
            builds += 1
            items = polled.map {
                let events = writers.contains(ObjectIdentifier($0.socket)) ? ZMQ_POLLIN | ZMQ_POLLOUT : ZMQ_POLLIN
                return zmq_pollitem_t(socket: $0.socket.handle, fd: 0, events: Int16(events), revents: 0)
            }
        }
        let timeout = Int(timers.timeout(cap: timeoutCap))
        let rc = items!.withUnsafeMutableBufferPointer { zmq_poll($0.baseAddress, Int32($0.count), timeout) }
        if rc < 0 {
            let e = ZMQError("zmq_poll")
            if !e.interrupted { throw e }
        } else if rc > 0, let ready = items {
            let startGeneration = generation
            for k in ready.indices where ready[k].revents != 0 {
                let r = polled[k]
                // An earlier handler of this turn may have unregistered it.
                if generation != startGeneration && !isRegistered(r.socket) { continue }
                // Registered again with another handler: that one runs.
                let handler = generation == startGeneration ? r.handler
                    : registrations.first(where: { $0.socket === r.socket })!.handler
                handler(r.socket)
            }
        }
        timers.runDue(budgetMs: timerBudgetMs)
    }

    /// Turns until `stop` returns true (it is asked before every turn).
    /// Each poll waits at most `timeoutCap` ms, so a flag set by a signal
    /// (``Shutdown``) is seen that soon.
    public func run(timeoutCap: Int64 = 100, until stop: () -> Bool) throws(ZMQError) {
        while !stop() { try turn(timeoutCap: timeoutCap) }
    }
}

// MARK: The scalable mode (epoll)

extension Reactor {
    private func scalableRegister(_ socket: Socket, _ handler: @escaping (Socket) -> Void) {
        #if os(Linux)
        let id = ObjectIdentifier(socket)
        if let tag = epoll!.tags[id] {
            epoll!.byTag[tag]!.handler = handler
            return
        }
        let tag = epoll!.next
        epoll!.next += 1
        let fd = socket.fileDescriptor
        epoll!.tags[id] = tag
        epoll!.byTag[tag] = (socket, fd, handler)
        _ = quad_epoll_add(epoll!.fd, fd, tag)
        socket.onTouch = { [unowned self] s in self.epoll?.touched.append(s) }
        // Whatever it holds already is read in the next turn.
        epoll!.touched.append(socket)
        generation &+= 1
        #endif
    }

    private func scalableUnregister(_ socket: Socket) {
        #if os(Linux)
        guard let tag = epoll!.tags.removeValue(forKey: ObjectIdentifier(socket)), let r = epoll!.byTag.removeValue(forKey: tag) else { return }
        _ = quad_epoll_del(epoll!.fd, r.fd)
        socket.onTouch = nil
        generation &+= 1
        #endif
    }

    private func scalableTurn(timeoutCap: Int64) throws(ZMQError) {
        #if os(Linux)
        // The sockets touched since the last turn, and those epoll says
        // changed: each asked (ZMQ_EVENTS) whether a message waits.
        var candidates = Set<UInt64>()
        let touched = epoll!.touched
        epoll!.touched = []
        for s in touched { if let tag = epoll!.tags[ObjectIdentifier(s)], ready(s) { candidates.insert(tag) } }
        let timeout = candidates.isEmpty ? Int32(timers.timeout(cap: timeoutCap)) : 0
        let ep = epoll!.fd
        let n = epoll!.buffer.withUnsafeMutableBufferPointer { quad_epoll_wait(ep, $0.baseAddress, Int32($0.count), timeout) }
        if n < 0 {
            guard quad_epoll_interrupted() != 0 else { throw ZMQError("epoll_wait") }
        } else {
            for k in 0..<Int(n) { candidates.insert(epoll!.buffer[k]) }
        }
        for tag in candidates.sorted() {
            // An earlier handler of this turn may have unregistered it.
            guard let r = epoll?.byTag[tag], ready(r.socket) else { continue }
            r.handler(r.socket)
        }
        #endif
        timers.runDue(budgetMs: timerBudgetMs)
    }
}
