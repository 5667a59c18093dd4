import QuadWire
import QuadMessaging

/// The broker's routing rules as a value: it takes events (a worker is
/// ready, a worker replied, a client asked, time passed) and returns the
/// actions the broker must take (send this request to that worker, answer
/// that client with this error). It does no I/O and reads no clock, so every
/// rule is tested without a socket or a sleep (the way postgres-nio tests its
/// connection state machine); ``Broker`` only moves bytes between its
/// sockets and this value. Events and actions carry decoded values, never
/// frames: the framing is the socket edge's business.
///
/// The rules:
/// - a request goes to the least recently used idle worker of its service;
/// - while none is idle it waits in its service's queue, signed-in users'
///   and services' requests before anonymous ones (``Queue``);
/// - a queued request past its deadline is answered 503, and one held by a
///   worker past its deadline is answered 504 (the worker's late reply is
///   then dropped and counted, and the worker is idle again once it answers);
/// - a worker silent for `liveness` heartbeats is dead: the request it held
///   goes back to the front of the queue, unless `max_deliveries` workers
///   died holding it (a poison pill), when it and its retries are answered 500;
/// - a request for a service that never registered waits for its first
///   worker during `service_grace_ms` after the start, and is answered 404
///   after that;
/// - a retry of a queued request replaces it when it is the same owner's,
///   and is refused (409) when it is another's;
/// - `max_queue` and `max_queue_bytes` bound each service's queue (503).
struct Routing {
    /// The settings the rules read, from ``BrokerSettings``.
    struct Limits: Sendable {
        var heartbeatMs: Int64 = 1000
        /// Heartbeats a worker may miss before it is taken for dead.
        var liveness: Int64 = 3
        var defaultDeadlineMs: Int64 = 5000
        var maxDeadlineMs: Int64 = 30_000
        var maxQueue = 10_000
        var maxQueueBytes = 16 << 20
        var maxMessageBytes = Envelope.defaultMaxBytes
        var maxDeliveries = 3
        var serviceGraceMs: Int64 = 5000
        /// How long the count of workers a request took down is kept.
        var casualtyMemoryMs: Int64 = 600_000

        init() {}

        init(_ s: BrokerSettings, liveness: Int64) {
            heartbeatMs = s.heartbeatMs
            self.liveness = liveness
            defaultDeadlineMs = s.defaultDeadlineMs
            maxDeadlineMs = s.maxDeadlineMs
            maxQueue = s.maxQueue
            maxQueueBytes = s.maxQueueBytes
            maxMessageBytes = s.maxMessageBytes
            maxDeliveries = s.maxDeliveries
            serviceGraceMs = s.serviceGraceMs
        }
    }

    /// A request as the broker read it from its header: all the rules need.
    struct Request: Equatable, Sendable {
        /// Where the answer goes (the broker's route to the client).
        var client: [UInt8]
        var id: String
        var type: String
        /// The envelope, with the header the broker set, forwarded untouched;
        /// or, with `body`, its header alone.
        var bytes: [UInt8]
        /// The body's frame of an envelope in two frames, as the client sent
        /// it: passed on, never read.
        var body: Frame?
        /// The deadline the client asked for, if any.
        var deadlineMs: Int64?
        /// Who asked (`user:<id>`, else the broker-set caller): only the same
        /// owner's retry may replace a queued request.
        var owner: String

        init(client: [UInt8], id: String, type: String, bytes: [UInt8], body: Frame? = nil, deadlineMs: Int64? = nil, owner: String) {
            self.client = client
            self.id = id
            self.type = type
            self.bytes = bytes
            self.body = body
            self.deadlineMs = deadlineMs
            self.owner = owner
        }

        /// Its size: the envelope's, in one frame or two.
        var size: Int { bytes.count + (body?.count ?? 0) }

        /// A signed-in user's or one of Quad's services' request: served
        /// before anonymous ones.
        var isFirstClass: Bool { !owner.isEmpty && !owner.hasPrefix("key:") && !owner.hasPrefix("conn:") }
        var service: String { String(type.split(separator: ".", maxSplits: 1).first ?? Substring(type)) }
    }

    enum Event: Sendable {
        /// READY: a worker offers `service`.
        case workerReady(identity: [UInt8], service: String, instance: String, pid: Int64)
        /// REPLY: a worker answered the client at `client`; `corr`, when
        /// the broker read it from the answer's header, is the id of the
        /// request it answers (read when the worker holds deferred requests).
        /// `bytes` is the answer's envelope, or its header when `body` (the
        /// body's frame, passed on unread) is set.
        case workerReply(identity: [UInt8], client: [UInt8], bytes: [UInt8], body: Frame? = nil, corr: String? = nil)
        /// DEFER: a worker took the request it holds for `client` and will
        /// answer it later; it is free for its next request meanwhile.
        case workerDefer(identity: [UInt8], client: [UInt8])
        case workerHeartbeat(identity: [UInt8])
        /// DISCONNECT: a worker leaves (it is not dead: what it held is not
        /// counted against the request).
        case workerDisconnect(identity: [UInt8])
        /// A ``Action/sendToWorker(identity:request:)`` failed: the worker
        /// is dropped and its request goes back to the queue.
        case workerUnreachable(identity: [UInt8], reason: String)
        /// A client's request, already authenticated and rate-limited.
        case clientRequest(Request)
        /// The broker's own request (to accounts): to the front of the queue.
        case brokerRequest(Request)
        /// Time passed: deadlines, heartbeats, liveness, the start-up grace.
        case tick
    }

    enum Action: Equatable, Sendable {
        case sendToWorker(identity: [UInt8], request: Request)
        /// A worker's reply, to the client at `route`; `corr` is the id of
        /// the request it answers when the routing knows it (a worker it
        /// knows answering the request it holds).
        case sendToClient(route: [UInt8], bytes: [UInt8], body: Frame? = nil, service: String?, corr: String?)
        case replyError(route: [UInt8], error: QuadError, corr: String?, type: String)
        case sendHeartbeat(identity: [UInt8])
        /// Tells a worker the broker does not know it (DISCONNECT).
        case disconnectWorker(identity: [UInt8])
        /// Answers a worker's DISCONNECT (BYE).
        case acknowledgeDisconnect(identity: [UInt8])
        /// A log line: `level`, `msg` and fields.
        case log([String: JSON])
    }

    /// A request waiting or in flight, with the time it must be answered by.
    struct Pending: Equatable, Sendable {
        var request: Request
        var expires: Int64
        /// How long it was given (for the 504's message).
        var deadlineMs: Int64
        /// Answered 504 while a worker held it: the worker's reply is late.
        var timedOut = false
    }

    /// A service's queue: signed-in users' and services' requests first, in
    /// order, then anonymous ones, in order: a flood of anonymous requests
    /// (which cost a stranger nothing but a key pair) waits behind every
    /// signed-in user, who is limited per user instead.
    struct Queue: Sendable {
        private(set) var items: [Pending] = []
        /// How many of `items`' first requests are first class.
        private(set) var firstClass = 0
        private(set) var bytes = 0

        var count: Int { items.count }
        var isEmpty: Bool { items.isEmpty }

        mutating func enqueue(_ p: Pending, front: Bool = false) {
            if p.request.isFirstClass {
                items.insert(p, at: front ? 0 : firstClass)
                firstClass += 1
            } else if front {
                items.insert(p, at: firstClass)
            } else {
                items.append(p)
            }
            bytes += p.request.size
        }

        mutating func dequeue() -> Pending? {
            guard !items.isEmpty else { return nil }
            let p = items.removeFirst()
            if p.request.isFirstClass { firstClass -= 1 }
            bytes -= p.request.size
            return p
        }

        func index(ofID id: String) -> Int? { items.firstIndex { $0.request.id == id } }

        /// Puts `p` in the place of the queued request at `k`, the same
        /// owner's (so of the same class).
        mutating func replace(at k: Int, with p: Pending) {
            bytes += p.request.size - items[k].request.size
            items[k] = p
        }

        /// Takes out the newest anonymous request (the last one queued), to
        /// make room for a first-class one; nil when every request is first class.
        mutating func evictNewestAnonymous() -> Pending? {
            guard items.count > firstClass, let p = items.popLast() else { return nil }
            bytes -= p.request.size
            return p
        }

        /// Takes out the requests that `matching` says, in order.
        mutating func remove(where matching: (Pending) -> Bool) -> [Pending] {
            let gone = items.filter(matching)
            guard !gone.isEmpty else { return [] }
            items.removeAll(where: matching)
            firstClass -= gone.filter(\.request.isFirstClass).count
            bytes -= gone.reduce(0) { $0 + $1.request.size }
            return gone
        }
    }

    /// A service some worker registered (READY): only those have state.
    struct Service: Sendable {
        let name: String
        /// Least recently used first.
        var idle: [[UInt8]] = []
        var queue = Queue()
        var routed: Int64 = 0
        /// Requests that waited past their deadline in the queue (503).
        var expired: Int64 = 0
        /// Requests a worker held past their deadline (504).
        var timedOut: Int64 = 0
        init(name: String) { self.name = name }
    }

    struct Worker: Sendable {
        let identity: [UInt8]
        let service: String
        let instance: String
        let pid: Int64
        /// When it is taken for dead unless it says something.
        var expires: Int64
        var current: Pending?
        /// Requests it took to answer later (DEFER), with their deadlines:
        /// answered 504 at the deadline, requeued or refused if it dies,
        /// as ``current`` is.
        var deferred: [Pending] = []
        var served: Int64 = 0
    }

    let limits: Limits
    let started: Int64
    private(set) var workers: [[UInt8]: Worker] = [:]
    private(set) var services: [String: Service] = [:]
    /// Requests for services not registered yet, during `service_grace_ms`
    /// after the start; the first READY of their service takes them.
    private(set) var early = Queue()
    private(set) var graceOver = false
    /// Requests whose worker died or went silent holding them, by id: how
    /// many workers, since when.
    private(set) var casualties: [String: (count: Int, since: Int64)] = [:]
    /// Replies that came after their request was answered 504.
    private(set) var lateReplies: Int64 = 0
    private var nextHeartbeat: Int64

    init(limits: Limits, now: Int64) {
        self.limits = limits
        started = now
        nextHeartbeat = now + limits.heartbeatMs
    }

    /// Whether `service` has a live worker.
    func hasWorkers(of service: String) -> Bool { workers.values.contains { $0.service == service } }

    mutating func handle(_ event: Event, now: Int64) -> [Action] {
        var out: [Action] = []
        switch event {
        case let .workerReady(identity, service, instance, pid):
            register(identity, service: service, instance: instance, pid: pid, now: now, &out)
        case let .workerReply(identity, client, bytes, body, corr):
            reply(identity, client: client, bytes: bytes, body: body, corr: corr, now: now, &out)
        case let .workerDefer(identity, client):
            deferCurrent(identity, client: client, now: now, &out)
        case let .workerHeartbeat(identity):
            if workers[identity] == nil {
                out.append(.disconnectWorker(identity: identity))
            } else {
                touch(identity, now: now)
            }
        case let .workerDisconnect(identity):
            if let w = workers[identity] { remove(w, reason: "worker said DISCONNECT", died: false, now: now, &out) }
            out.append(.acknowledgeDisconnect(identity: identity))
        case let .workerUnreachable(identity, reason):
            if let w = workers[identity] { remove(w, reason: reason, died: false, now: now, &out) }
        case let .clientRequest(request):
            accept(request, now: now, &out)
        case let .brokerRequest(request):
            guard services[request.service] != nil else { break }
            let deadline = min(request.deadlineMs ?? limits.defaultDeadlineMs, limits.maxDeadlineMs)
            services[request.service]!.queue.enqueue(Pending(request: request, expires: now + deadline, deadlineMs: deadline), front: true)
            dispatch(request.service, &out)
        case .tick:
            tick(now: now, &out)
        }
        return out
    }

    // MARK: Workers

    private mutating func touch(_ identity: [UInt8], now: Int64) {
        workers[identity]?.expires = now + limits.heartbeatMs * limits.liveness
    }

    private mutating func register(_ identity: [UInt8], service name: String, instance: String, pid: Int64, now: Int64, _ out: inout [Action]) {
        guard !name.isEmpty, name != "sys", Envelope.isValidType(name), !name.utf8.contains(UInt8(ascii: ".")) else {
            out.append(.disconnectWorker(identity: identity))
            return
        }
        if let old = workers[identity] { remove(old, reason: "registered again", died: false, now: now, &out) }
        workers[identity] = Worker(identity: identity, service: name, instance: instance, pid: pid,
                                   expires: now + limits.heartbeatMs * limits.liveness)
        if services[name] == nil {
            var s = Service(name: name)
            // Requests that waited for this service's first worker.
            for p in early.remove(where: { $0.request.service == name }) { s.queue.enqueue(p) }
            services[name] = s
        }
        services[name]!.idle.append(identity)
        out.append(.log(["level": "info", "msg": "worker ready", "service": .string(name), "instance": .string(instance), "pid": .int(pid)]))
        dispatch(name, &out)
    }

    private mutating func reply(_ identity: [UInt8], client: [UInt8], bytes: [UInt8], body: Frame?, corr: String?, now: Int64, _ out: inout [Action]) {
        guard var w = workers[identity], services[w.service] != nil else {
            // A reply from a worker we dropped: still deliver it.
            out.append(.sendToClient(route: client, bytes: bytes, body: body, service: nil, corr: nil))
            out.append(.disconnectWorker(identity: identity))
            return
        }
        w.expires = now + limits.heartbeatMs * limits.liveness
        // The answer to a deferred request: the worker's slot is not its.
        func answers(_ p: Pending) -> Bool { p.request.client == client && (corr == nil || corr == p.request.id) }
        if !(w.current.map(answers) ?? false), let k = w.deferred.firstIndex(where: answers) {
            let p = w.deferred.remove(at: k)
            if p.timedOut {
                lateReplies += 1
                out.append(.log(["level": "info", "msg": "late reply dropped", "service": .string(w.service), "instance": .string(w.instance),
                                 "id": .string(p.request.id), "type": .string(p.request.type), "late_ms": .int(now - p.expires)]))
            } else {
                out.append(.sendToClient(route: client, bytes: bytes, body: body, service: w.service, corr: p.request.id))
            }
            casualties[p.request.id] = nil
            w.served += 1
            workers[identity] = w
            return
        }
        if w.current == nil {
            // Nothing of this worker's answers it: delivered as it is.
            workers[identity] = w
            out.append(.sendToClient(route: client, bytes: bytes, body: body, service: w.service, corr: nil))
            return
        }
        if let p = w.current, p.timedOut {
            // The client was answered 504 at the deadline: this reply is
            // late; the worker is free again.
            lateReplies += 1
            out.append(.log(["level": "info", "msg": "late reply dropped", "service": .string(w.service), "instance": .string(w.instance),
                             "id": .string(p.request.id), "type": .string(p.request.type), "late_ms": .int(now - p.expires)]))
        } else {
            out.append(.sendToClient(route: client, bytes: bytes, body: body, service: w.service, corr: w.current?.request.id))
        }
        if let id = w.current?.request.id { casualties[id] = nil }
        w.current = nil
        w.served += 1
        workers[identity] = w
        services[w.service]!.idle.append(identity)
        dispatch(w.service, &out)
    }

    /// DEFER: the worker keeps the request it holds for `client` to answer
    /// later, under the same deadline, and takes its next one now.
    private mutating func deferCurrent(_ identity: [UInt8], client: [UInt8], now: Int64, _ out: inout [Action]) {
        guard var w = workers[identity], services[w.service] != nil else {
            out.append(.disconnectWorker(identity: identity))
            return
        }
        w.expires = now + limits.heartbeatMs * limits.liveness
        guard let p = w.current, p.request.client == client else {
            workers[identity] = w
            out.append(.log(["level": "error", "msg": "DEFER of a request the worker does not hold: ignored", "service": .string(w.service),
                             "instance": .string(w.instance)]))
            return
        }
        w.deferred.append(p)
        w.current = nil
        workers[identity] = w
        services[w.service]!.idle.append(identity)
        dispatch(w.service, &out)
    }

    /// Drops a worker. A request it held goes back to the front of its
    /// queue: the client's id makes a second delivery safe; unless workers
    /// died holding it `max_deliveries` times, when it is answered 500.
    private mutating func remove(_ w: Worker, reason: String, died: Bool, now: Int64, _ out: inout [Action]) {
        workers[w.identity] = nil
        guard services[w.service] != nil else { return }
        services[w.service]!.idle.removeAll { $0 == w.identity }
        out.append(.log(["level": "info", "msg": "worker removed", "service": .string(w.service), "instance": .string(w.instance), "reason": .string(reason)]))
        for p in (w.current.map { [$0] } ?? []) + w.deferred {
            // A worker that leaves (DISCONNECT) still answers what it holds:
            // only one that died counts.
            var count = casualties[p.request.id]?.count ?? 0
            if died {
                count += 1
                casualties[p.request.id] = (count, casualties[p.request.id]?.since ?? now)
            }
            if died && count >= limits.maxDeliveries {
                let error = poisoned(p.request, workers: count)
                out.append(.log(["level": "error", "msg": .string(error.message), "service": .string(w.service),
                                 "id": .string(p.request.id), "type": .string(p.request.type)]))
                if !p.timedOut { out.append(.replyError(route: p.request.client, error: error, corr: p.request.id, type: p.request.type)) }
            } else if !p.timedOut && p.expires > now {
                services[w.service]!.queue.enqueue(p, front: true)
            }
        }
        dispatch(w.service, &out)
    }

    /// The answer to a request that took down `workers` workers.
    func poisoned(_ r: Request, workers: Int) -> QuadError {
        .internal("request \(r.id) (\(r.type)) was held by \(workers) workers of its service that died or went silent: "
                  + "not given to another (max_deliveries=\(limits.maxDeliveries))")
    }

    /// Gives queued requests to idle workers, least recently used first.
    private mutating func dispatch(_ name: String, _ out: inout [Action]) {
        // Taken out of the dictionary while it changes, so that its queue is
        // never copied.
        guard var s = services.removeValue(forKey: name) else { return }
        defer { services[name] = s }
        while !s.queue.isEmpty, !s.idle.isEmpty {
            let identity = s.idle.removeFirst()
            guard workers[identity] != nil, let p = s.queue.dequeue() else { continue }
            workers[identity]!.current = p
            s.routed += 1
            out.append(.sendToWorker(identity: identity, request: p.request))
        }
    }

    /// Runs `body` on the queue of `name`, or on ``early``, in place.
    private mutating func withQueue<R>(_ name: String, early isEarly: Bool, _ body: (inout Queue) -> R) -> R {
        isEarly ? body(&early) : body(&services[name]!.queue)
    }

    // MARK: Clients

    private mutating func accept(_ r: Request, now: Int64, _ out: inout [Action]) {
        func refuse(_ error: QuadError) { out.append(.replyError(route: r.client, error: error, corr: r.id, type: r.type)) }
        if let c = casualties[r.id], c.count >= limits.maxDeliveries {
            refuse(poisoned(r, workers: c.count))
            return
        }
        let name = r.service
        let isEarly: Bool
        if services[name] != nil {
            isEarly = false
        } else if !graceOver && now - started < limits.serviceGraceMs {
            isEarly = true
        } else {
            refuse(.notFound("no service named \(name): no worker of it ever registered with this broker"))
            return
        }
        if r.size > limits.maxMessageBytes {
            refuse(.tooLarge("message is \(r.size) bytes with the header the broker sets, over the limit max_message_bytes=\(limits.maxMessageBytes)",
                             details: ["limit": "max_message_bytes", "max": .int(Int64(limits.maxMessageBytes)), "actual": .int(Int64(r.size))]))
            return
        }
        let deadline = min(r.deadlineMs ?? limits.defaultDeadlineMs, limits.maxDeadlineMs)
        let pending = Pending(request: r, expires: now + deadline, deadlineMs: deadline)
        let limits = limits
        var evicted: [Pending] = []
        let refusal: QuadError? = withQueue(name, early: isEarly) { queue in
            // A retry of a request still queued replaces it rather than
            // queueing twice, when it is the same owner's; another owner's
            // request with the same id is refused and never replaces the first.
            if let k = queue.index(ofID: r.id) {
                guard queue.items[k].request.owner == r.owner else { return .conflict("this request id was used by another caller") }
                queue.replace(at: k, with: pending)
                return nil
            }
            let what = isEarly ? "service '\(name)' (not registered yet)" : "service '\(name)'"
            // A full queue never shuts out signed-in users and services:
            // anonymous requests make room for them, the newest first, and
            // are answered 503 naming the limit.
            if r.isFirstClass {
                while queue.count >= limits.maxQueue || queue.bytes + r.size > limits.maxQueueBytes,
                      let p = queue.evictNewestAnonymous() {
                    evicted.append(p)
                }
            }
            if queue.count >= limits.maxQueue {
                return .unavailable("\(what) has \(queue.count) requests queued, the limit max_queue=\(limits.maxQueue)")
            }
            if queue.bytes + r.size > limits.maxQueueBytes {
                return .unavailable("\(what) has \(queue.bytes) bytes of requests queued, the limit max_queue_bytes=\(limits.maxQueueBytes)")
            }
            queue.enqueue(pending)
            return nil
        }
        for p in evicted {
            let limit = "max_queue=\(limits.maxQueue), max_queue_bytes=\(limits.maxQueueBytes)"
            out.append(.replyError(route: p.request.client, error: .unavailable(
                "service '\(name)' is at its queue limit (\(limit)): an anonymous request gave its place to a signed-in user's; retry later"),
                corr: p.request.id, type: p.request.type))
        }
        if let refusal {
            refuse(refusal)
        } else if !isEarly {
            dispatch(name, &out)
        }
    }

    // MARK: Time

    private mutating func tick(now: Int64, _ out: inout [Action]) {
        // The start-up grace is over: requests still waiting for a service
        // that never registered get 404.
        if !graceOver && now - started >= limits.serviceGraceMs {
            graceOver = true
            while let p = early.dequeue() {
                out.append(.replyError(route: p.request.client,
                                       error: .notFound("no service named \(p.request.service): no worker of it registered within service_grace_ms=\(limits.serviceGraceMs) of the broker's start"),
                                       corr: p.request.id, type: p.request.type))
            }
        }
        expireQueued(now: now, &out)
        expireInFlight(now: now, &out)
        for w in workers.values.filter({ $0.expires < now }).sorted(by: { $0.identity.lexicographicallyPrecedes($1.identity) }) {
            remove(w, reason: "missed \(limits.liveness) heartbeats", died: true, now: now, &out)
        }
        if now >= nextHeartbeat {
            nextHeartbeat = now + limits.heartbeatMs
            for identity in workers.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) { out.append(.sendHeartbeat(identity: identity)) }
            let old = now - limits.casualtyMemoryMs
            if !casualties.isEmpty { casualties = casualties.filter { $0.value.since > old } }
        }
    }

    /// Queued requests past their deadline: 503.
    private mutating func expireQueued(now: Int64, _ out: inout [Action]) {
        func answer(_ expired: [Pending]) {
            for p in expired {
                let service = p.request.service
                let live = workers.values.filter { $0.service == service }.count
                let why = live == 0 ? "no live worker of service '\(service)'" : "all \(live) workers of service '\(service)' busy"
                out.append(.replyError(route: p.request.client, error: .unavailable("\(why) before the request's deadline"),
                                       corr: p.request.id, type: p.request.type))
            }
        }
        for name in services.keys.sorted() where !services[name]!.queue.isEmpty {
            let expired = services[name]!.queue.remove { $0.expires <= now }
            services[name]!.expired += Int64(expired.count)
            answer(expired)
        }
        if !early.isEmpty { answer(early.remove { $0.expires <= now }) }
    }

    /// Requests a worker holds past their deadline: the client gets 504 now
    /// (not silence), the worker keeps the request until it answers. A
    /// deferred request is answered so too, and forgotten once its late
    /// answer is no longer expected (``Limits/maxDeadlineMs`` after it).
    private mutating func expireInFlight(now: Int64, _ out: inout [Action]) {
        let holding = workers.compactMap { $0.value.deferred.isEmpty ? nil : $0.key }
        for identity in holding.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            let w = workers[identity]!
            for k in w.deferred.indices where !w.deferred[k].timedOut && w.deferred[k].expires <= now {
                let p = w.deferred[k]
                workers[identity]!.deferred[k].timedOut = true
                services[w.service]?.timedOut += 1
                timeout(p, worker: w, &out)
            }
            workers[identity]!.deferred.removeAll { $0.timedOut && $0.expires + limits.maxDeadlineMs <= now }
        }
        let late = workers.values.filter { w in w.current.map { !$0.timedOut && $0.expires <= now } ?? false }
        for w in late.sorted(by: { $0.identity.lexicographicallyPrecedes($1.identity) }) {
            guard let p = w.current else { continue }
            workers[w.identity]!.current!.timedOut = true
            services[w.service]?.timedOut += 1
            timeout(p, worker: w, &out)
        }
    }

    /// The 504 of a request `w` held past its deadline.
    private func timeout(_ p: Pending, worker w: Worker, _ out: inout [Action]) {
        let error = QuadError(code: .timeout, status: 504,
                              message: "service '\(w.service)' did not answer \(p.request.type) within its deadline of \(p.deadlineMs) ms",
                              details: ["service": .string(w.service), "deadline_ms": .int(p.deadlineMs)])
        out.append(.replyError(route: p.request.client, error: error, corr: p.request.id, type: p.request.type))
        out.append(.log(["level": "info", "msg": "request timed out in its worker", "service": .string(w.service), "instance": .string(w.instance),
                         "id": .string(p.request.id), "type": .string(p.request.type), "deadline_ms": .int(p.deadlineMs)]))
    }
}
