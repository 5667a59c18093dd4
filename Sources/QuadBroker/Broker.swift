import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadWire

/// Settings of a broker, each with a default that just works on loopback.
public struct BrokerSettings: Sendable {
    public var endpoints: Endpoints
    public var heartbeatMs: Int64 = WorkerProtocol.heartbeatMs
    /// Largest envelope accepted (`max_message_bytes`); larger ones get 413.
    public var maxMessageBytes = Envelope.defaultMaxBytes
    /// Deadline used when a request carries none.
    public var defaultDeadlineMs: Int64 = 5000
    /// Most requests queued for one service (`max_queue`); more get 503.
    public var maxQueue = 10_000
    /// accounts' Ed25519 public key file, which session tokens are checked
    /// against. It may appear after the broker starts (accounts creates it).
    public var accountsKeyPath = KeyFiles.defaultPublicKeyPath()

    public init(endpoints: Endpoints) { self.endpoints = endpoints }
}

/// The broker: routes requests from clients to live workers of the service
/// named by the first segment of `type`, least recently used first; queues
/// them while none is idle; answers 503 when a deadline passes with none;
/// relays events from publishers to subscribers (XSUB/XPUB). One thread, one
/// poll loop. On the public frontend it checks each request's session token
/// against accounts' public key and sets `user` and `role` from it.
public final class Broker {
    struct Pending {
        let client: [UInt8]
        let id: String
        let bytes: [UInt8]
        let type: String
        let expires: Int64
    }

    final class Worker {
        let identity: [UInt8]
        let service: String
        let instance: String
        let pid: Int64
        var expires: Int64
        var current: Pending?
        var served: Int64 = 0

        init(identity: [UInt8], service: String, instance: String, pid: Int64, expires: Int64) {
            self.identity = identity
            self.service = service
            self.instance = instance
            self.pid = pid
            self.expires = expires
        }
    }

    final class Service {
        let name: String
        var idle: [[UInt8]] = []  // least recently used first
        var queue: [Pending] = []
        var routed: Int64 = 0
        var expired: Int64 = 0
        init(name: String) { self.name = name }
    }

    let settings: BrokerSettings
    let context: ZMQContext
    let frontend: Socket
    let backend: Socket
    let eventsIn: Socket
    let eventsOut: Socket
    let internalFrontend: Socket
    var workers: [[UInt8]: Worker] = [:]
    var services: [String: Service] = [:]
    let timers = Timers(now: Clock.monotonicMillis)
    let started = Clock.monotonicMillis()
    var eventsRelayed: Int64 = 0
    var requestsIn: Int64 = 0
    let name = "broker"
    let tokens: TokenVerifier

    public init(settings: BrokerSettings, context: ZMQContext = ZMQContext()) throws {
        self.settings = settings
        self.context = context
        let socketLimit = Int64(settings.maxMessageBytes) * 2
        frontend = try context.socket(.router)
        try frontend.setMaxMessageSize(socketLimit)
        try frontend.setRouterMandatory(false)
        try frontend.bind(settings.endpoints.frontend)
        backend = try context.socket(.router)
        try backend.setMaxMessageSize(socketLimit)
        try backend.bind(settings.endpoints.backend)
        eventsIn = try context.socket(.xsub)
        try eventsIn.setMaxMessageSize(socketLimit)
        try eventsIn.bind(settings.endpoints.eventsIn)
        eventsOut = try context.socket(.xpub)
        try eventsOut.bind(settings.endpoints.eventsOut)
        internalFrontend = try context.socket(.router)
        try internalFrontend.setMaxMessageSize(socketLimit)
        try internalFrontend.bind(settings.endpoints.internal)
        tokens = TokenVerifier(keyPath: settings.accountsKeyPath, log: { [name] in Log.info(name, $0) })
    }

    /// The endpoints actually bound (useful after binding port `*`).
    public var boundEndpoints: Endpoints {
        Endpoints(frontend: frontend.lastEndpoint, backend: backend.lastEndpoint,
                  eventsIn: eventsIn.lastEndpoint, eventsOut: eventsOut.lastEndpoint, internal: internalFrontend.lastEndpoint)
    }

    /// Runs until SIGTERM/SIGINT (or `shouldStop` returns true); returns the exit code.
    public func run(shouldStop: () -> Bool = { false }) -> Int32 {
        Shutdown.install()
        timers.every(settings.heartbeatMs) { [unowned self] in self.heartbeat() }
        timers.every(50) { [unowned self] in self.expireQueued() }
        tokens.loadKey()
        timers.every(1000) { [unowned self] in if !self.tokens.hasKey { self.tokens.loadKey() } }
        Log.info(name, "frontend \(settings.endpoints.frontend), backend \(settings.endpoints.backend), events in \(settings.endpoints.eventsIn) out \(settings.endpoints.eventsOut), internal \(settings.endpoints.internal)")
        var poller = Poller()
        poller.add(frontend)
        poller.add(backend)
        poller.add(eventsIn)
        poller.add(eventsOut)
        poller.add(internalFrontend)
        while !Shutdown.isRequested && !shouldStop() {
            let ready: [Bool]
            do { ready = try poller.poll(timeoutMs: Int(timers.timeout(cap: 100))) } catch {
                Log.error(name, "poll: \(error)")
                return 1
            }
            if ready[1] { drainBackend() }
            if ready[0] { drainFrontend(frontend, origin: Broker.public) }
            if ready[4] { drainFrontend(internalFrontend, origin: Broker.internal) }
            if ready[2] { relay(from: eventsIn, to: eventsOut, events: true) }
            if ready[3] { relay(from: eventsOut, to: eventsIn, events: false) }
            timers.runDue()
        }
        for w in workers.values { try? backend.send([w.identity, WorkerProtocol.header, WorkerProtocol.disconnect]) }
        Log.info(name, "stopped")
        return 0
    }

    // MARK: Events

    func relay(from: Socket, to: Socket, events: Bool) {
        var n = 0
        while n < 1000, let frames = try? from.receive(dontWait: true) {
            try? to.send(frames)
            n += 1
        }
        if events { eventsRelayed += Int64(n) }
    }

    // MARK: Clients

    /// A client's route is its frontend (one byte) then its routing id, so a
    /// worker's reply finds its way back through the right socket.
    static let `public`: UInt8 = 0
    static let `internal`: UInt8 = 1

    func drainFrontend(_ socket: Socket, origin: UInt8) {
        var n = 0
        while n < 1000, let frames = try? socket.receive(dontWait: true) {
            n += 1
            requestsIn += 1
            guard let identity = frames.first else { continue }
            let client = [origin] + identity
            guard frames.count == 2 else {
                replyError(client, .badRequest("expected one envelope frame, got \(frames.count - 1) frames"), corr: nil)
                continue
            }
            accept(client: client, bytes: frames[1])
        }
    }

    /// Sends `bytes` to the client at `route`.
    func deliver(_ route: [UInt8], _ bytes: [UInt8]) {
        guard let origin = route.first else { return }
        let socket = origin == Broker.internal ? internalFrontend : frontend
        try? socket.send([Array(route.dropFirst()), bytes], dontWait: true)
    }

    func replyError(_ client: [UInt8], _ error: QuadError, corr: String?, type: String = "error") {
        deliver(client, Envelope.error(error, corr: corr, type: type, src: name).encoded())
    }

    func accept(client: [UInt8], bytes: [UInt8]) {
        var envelope: Envelope
        do { envelope = try Envelope.decode(bytes, maxBytes: settings.maxMessageBytes) } catch {
            replyError(client, error, corr: Envelope.salvageID(bytes))
            return
        }
        guard envelope.kind == .request else {
            replyError(client, .badRequest("expected kind 'request', got '\(envelope.kind.rawValue)'"), corr: envelope.id, type: envelope.type)
            return
        }
        var bytes = bytes
        // `user` and `role` are the broker's to set, never a client's: from
        // the public frontend they come only from a verified token (which
        // stops here). Services on the internal frontend pass theirs on.
        if client.first == Broker.public && (envelope.user != nil || envelope.role != nil || envelope.token != nil) {
            envelope.user = nil
            envelope.role = nil
            if let token = envelope.token, !token.isEmpty {
                do {
                    let claims = try tokens.check(token)
                    envelope.user = claims.user
                    envelope.role = claims.role
                } catch {
                    replyError(client, error, corr: envelope.id, type: envelope.type)
                    return
                }
            }
            envelope.token = nil
            bytes = envelope.encoded()
        }
        let service = String(envelope.service)
        if service == "sys" {
            deliver(client, system(envelope).encoded())
            return
        }
        let s = self.service(service)
        if s.queue.count >= settings.maxQueue {
            replyError(client, .unavailable("service '\(service)' has \(s.queue.count) requests queued, the limit max_queue=\(settings.maxQueue)"), corr: envelope.id, type: envelope.type)
            return
        }
        let deadline = envelope.deadline ?? settings.defaultDeadlineMs
        let pending = Pending(client: client, id: envelope.id, bytes: bytes, type: envelope.type, expires: Clock.monotonicMillis() + deadline)
        // A retry of a request still queued replaces it rather than queueing twice.
        if let k = s.queue.firstIndex(where: { $0.id == pending.id }) {
            s.queue[k] = pending
        } else {
            s.queue.append(pending)
        }
        dispatch(s)
    }

    func service(_ name: String) -> Service {
        if let s = services[name] { return s }
        let s = Service(name: name)
        services[name] = s
        return s
    }

    func dispatch(_ s: Service) {
        while !s.queue.isEmpty, !s.idle.isEmpty {
            let identity = s.idle.removeFirst()
            guard let worker = workers[identity] else { continue }
            let pending = s.queue.removeFirst()
            worker.current = pending
            s.routed += 1
            do {
                try backend.send([identity, WorkerProtocol.header, WorkerProtocol.request, pending.client, pending.bytes])
            } catch {
                worker.current = nil
                s.queue.insert(pending, at: 0)
                remove(worker, reason: "send failed: \(error)")
            }
        }
    }

    func expireQueued() {
        let now = Clock.monotonicMillis()
        for s in services.values where !s.queue.isEmpty {
            let expired = s.queue.filter { $0.expires <= now }
            guard !expired.isEmpty else { continue }
            s.queue.removeAll { $0.expires <= now }
            s.expired += Int64(expired.count)
            let live = workers.values.filter { $0.service == s.name }.count
            for p in expired {
                let why = live == 0 ? "no live worker of service '\(s.name)'" : "all \(live) workers of service '\(s.name)' busy"
                replyError(p.client, .unavailable("\(why) before the request's deadline"), corr: p.id, type: p.type)
            }
        }
    }

    // MARK: Workers

    func drainBackend() {
        var n = 0
        while n < 1000, let frames = try? backend.receive(dontWait: true) {
            n += 1
            guard frames.count >= 3, frames[1] == WorkerProtocol.header else { continue }
            let identity = frames[0]
            let command = frames[2]
            if let w = workers[identity] { w.expires = Clock.monotonicMillis() + settings.heartbeatMs * WorkerProtocol.liveness }
            switch command {
            case WorkerProtocol.ready where frames.count >= 4:
                register(identity: identity, service: String(decoding: frames[3], as: UTF8.self), info: frames.count > 4 ? frames[4] : [])
            case WorkerProtocol.reply where frames.count == 5:
                guard let w = workers[identity] else {
                    // A reply from a worker we dropped: still deliver it.
                    deliver(frames[3], frames[4])
                    try? backend.send([identity, WorkerProtocol.header, WorkerProtocol.disconnect])
                    continue
                }
                deliver(frames[3], frames[4])
                w.current = nil
                w.served += 1
                let s = service(w.service)
                s.idle.append(identity)
                dispatch(s)
            case WorkerProtocol.heartbeat:
                if workers[identity] == nil {
                    try? backend.send([identity, WorkerProtocol.header, WorkerProtocol.disconnect])
                }
            case WorkerProtocol.disconnect:
                if let w = workers[identity] { remove(w, reason: "worker said DISCONNECT") }
                try? backend.send([identity, WorkerProtocol.header, WorkerProtocol.bye])
            default:
                break
            }
        }
    }

    func register(identity: [UInt8], service name: String, info: [UInt8]) {
        guard !name.isEmpty, name != "sys", Envelope.isValidType(name), !name.contains(".") else {
            try? backend.send([identity, WorkerProtocol.header, WorkerProtocol.disconnect])
            return
        }
        if let old = workers[identity] { remove(old, reason: "registered again") }
        let details = (try? JSON.parse(info)) ?? .null
        let w = Worker(identity: identity, service: name, instance: details["instance"]?.string ?? "\(name)/?",
                       pid: details["pid"]?.int ?? 0, expires: Clock.monotonicMillis() + settings.heartbeatMs * WorkerProtocol.liveness)
        workers[identity] = w
        let s = service(name)
        s.idle.append(identity)
        Log.line(["src": self.name, "level": "info", "msg": "worker ready", "service": name, "instance": w.instance, "pid": w.pid])
        dispatch(s)
    }

    /// Drops a worker. A request it held goes back to the front of its
    /// queue: the client's id makes a second delivery safe.
    func remove(_ w: Worker, reason: String) {
        workers[w.identity] = nil
        let s = service(w.service)
        s.idle.removeAll { $0 == w.identity }
        if let p = w.current, p.expires > Clock.monotonicMillis() { s.queue.insert(p, at: 0) }
        Log.line(["src": name, "level": "info", "msg": "worker removed", "service": w.service, "instance": w.instance, "reason": reason])
        dispatch(s)
    }

    func heartbeat() {
        let now = Clock.monotonicMillis()
        for w in Array(workers.values) {
            if w.expires < now {
                remove(w, reason: "missed \(WorkerProtocol.liveness) heartbeats")
            } else {
                try? backend.send([w.identity, WorkerProtocol.header, WorkerProtocol.heartbeat], dontWait: true)
            }
        }
    }

    // MARK: sys.*

    func system(_ request: Envelope) -> Envelope {
        switch request.type {
        case "sys.services":
            let list: [JSON] = services.values.sorted { $0.name < $1.name }.map { s in
                let ws = workers.values.filter { $0.service == s.name }.sorted { $0.instance < $1.instance }
                return [
                    "name": .string(s.name), "queue": .int(Int64(s.queue.count)), "routed": .int(s.routed),
                    "expired": .int(s.expired),
                    "workers": .array(ws.map { w in
                        ["instance": .string(w.instance), "pid": .int(w.pid), "served": .int(w.served), "busy": .bool(w.current != nil)]
                    }),
                ]
            }
            return request.reply(["services": .array(list)], src: name)
        case "sys.health":
            return request.reply([
                "status": "ok", "service": "broker", "pid": .int(Int64(getpid())), "uptime_ms": .int(Clock.monotonicMillis() - started),
                "workers": .int(Int64(workers.count)), "requests": .int(requestsIn), "events": .int(eventsRelayed),
            ], src: name)
        default:
            return request.error(.notFound("unknown request type '\(request.type)': the broker answers sys.services and sys.health"), src: name)
        }
    }
}
