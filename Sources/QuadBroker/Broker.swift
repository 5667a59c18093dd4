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
    /// The broker's CURVE secret key file for the public frontend, created
    /// (0600, with `.pub` beside it) when missing; nil: no CURVE (`--curve
    /// off`, for debugging only).
    public var curveKeyPath: String? = BrokerKeys.defaultSecretKeyPath()
    /// A file of the services' CURVE public keys (Z85, one per line): with
    /// it, the backend, the event sockets and the internal frontend speak
    /// CURVE with the same key pair and admit only those keys, for services
    /// on other hosts (``InternalCurve``); nil: no CURVE there (they are
    /// `ipc://` in a private folder, or loopback).
    public var serviceKeysPath: String?
    /// A file of client public keys (Z85, one per line) that alone may
    /// connect to the frontend; nil: any client key.
    public var allowKeysPath: String?
    /// A file of client public keys (Z85, one per line) exempt from the
    /// per-address budgets (`handshake_rate_per_address`,
    /// `address_rate_per_second`): the keys of quadctl and the launcher's
    /// health checks, which a stranger on the same address must not starve.
    public var trustedKeysPath: String?
    /// Requests per second a user, a client key, a connection and a phone
    /// (`src`, counted within its source address: a made-up `src` only
    /// splits a budget, never adds one) may each send on the public
    /// frontend (`rate_per_second`); 0: no limit.
    public var ratePerSecond: Double = 50
    /// How many requests each may send at once above the rate (`rate_burst`).
    public var rateBurst: Double = 100
    /// Request types the public frontend refuses unless the token is an
    /// admin's (401 without a token, 403 with another's): `*.events.since`
    /// means that type of every service (events carry user ids).
    public var internalOnlyTypes: [String] = ["*.events.since"]
    /// Most workers one request may take down (`max_deliveries`): a request
    /// whose workers keep dying while holding it (a poison pill: a body that
    /// crashes its service) is answered 500 rather than given to the next
    /// worker, and so is a retry of it under the same id, for 10 minutes.
    public var maxDeliveries = 3
    /// Milliseconds after the broker starts during which a request for a
    /// service that never registered waits in the queue for its first
    /// worker (a stack still starting); after it, such a request is answered
    /// 404 at once (`service_grace_ms`).
    public var serviceGraceMs: Int64 = 5000
    /// Longest deadline honoured (`max_deadline_ms`): a request asking for
    /// more is queued for this long, not refused.
    public var maxDeadlineMs: Int64 = 30_000
    /// Most bytes of requests queued for one service (`max_queue_bytes`);
    /// more get 503.
    public var maxQueueBytes = 16 << 20
    /// Messages the frontend buffers per connection on the way in
    /// (`frontend_receive_hwm`): past it libzmq stops reading that
    /// connection and TCP pushes back. (A multipart message counts once
    /// however many frames it has; see the README on what that leaves.)
    public var frontendReceiveHWM: Int32 = 100
    /// Milliseconds a client key that sent a message with the wrong number
    /// of frames is refused new connections (`malformed_ban_ms`); 0: no ban.
    public var malformedBanMs: Int64 = 60_000
    /// New connections per second one client key may open (burst 10 times
    /// that) (`handshake_rate_per_key`); 0: no limit.
    public var handshakeRatePerKey: Double = 2
    /// New connections per second one address may open (burst 10 times
    /// that; loopback included, ipc has no address)
    /// (`handshake_rate_per_address`); 0: no limit.
    public var handshakeRatePerAddress: Double = 20
    /// Requests per second without a signed-in user that one source address
    /// (TCP; loopback included) may send on the public frontend
    /// (`address_rate_per_second`), across all its keys and connections: a
    /// campus NAT puts many phones behind one, and a signed-in user is
    /// charged to the user instead; 0: no limit.
    public var addressRatePerSecond: Double = 500
    /// Requests one address may send at once above that (`address_rate_burst`).
    public var addressRateBurst: Double = 1000
    /// Most revoked tokens and users remembered (`max_revocations`).
    public var maxRevocations = 100_000
    /// How often the broker asks accounts for every revocation in force
    /// (`revocation_refresh_ms`), besides each time an accounts worker registers.
    public var revocationRefreshMs: Int64 = 10_000

    public init(endpoints: Endpoints) { self.endpoints = endpoints }
}

/// The broker: routes requests from clients to live workers of the service
/// named by the first segment of `type`, least recently used first; queues
/// them while none is idle; answers 503 when a deadline passes with none;
/// relays events from publishers to subscribers (XSUB/XPUB). One thread, one
/// poll loop. On the public frontend it checks each request's session token
/// against accounts' public key (and accounts' revocations) and sets `user`,
/// `role` and `caller` by splicing the header: a body's bytes are never
/// decoded into something else and never re-encoded.
public final class Broker {
    struct Pending {
        let client: [UInt8]
        let id: String
        let bytes: [UInt8]
        let type: String
        let expires: Int64
        /// Who asked (the verified user, else the broker-set caller): only
        /// the same owner's retry may replace a queued request.
        let owner: String
        /// A signed-in user's or one of Quad's services' request: served
        /// before anonymous ones (``Service``).
        var isFirstClass: Bool { !owner.isEmpty && !owner.hasPrefix("key:") && !owner.hasPrefix("conn:") }
        var service: Substring { type.split(separator: ".", maxSplits: 1).first ?? Substring(type) }
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

    /// A service some worker registered (READY): only those have state.
    /// Its queue holds signed-in users' and services' requests first, in
    /// order, then anonymous ones, in order: a flood of anonymous requests
    /// (which cost a stranger nothing but a key pair) waits behind every
    /// signed-in user, who is limited per user instead.
    final class Service {
        let name: String
        var idle: [[UInt8]] = []  // least recently used first
        private(set) var queue: [Pending] = []
        /// How many of `queue`'s first requests are first class.
        private(set) var firstClass = 0
        var queuedBytes = 0
        var routed: Int64 = 0
        var expired: Int64 = 0
        init(name: String) { self.name = name }

        func enqueue(_ p: Pending, front: Bool = false) {
            if p.isFirstClass {
                queue.insert(p, at: front ? 0 : firstClass)
                firstClass += 1
            } else if front {
                queue.insert(p, at: firstClass)
            } else {
                queue.append(p)
            }
            queuedBytes += p.bytes.count
        }

        func dequeue() -> Pending {
            let p = queue.removeFirst()
            if p.isFirstClass { firstClass -= 1 }
            queuedBytes -= p.bytes.count
            return p
        }

        /// Puts `p` in the place of the queued request at `k`, the same
        /// owner's (so of the same class).
        func replace(at k: Int, with p: Pending) {
            queuedBytes += p.bytes.count - queue[k].bytes.count
            queue[k] = p
        }

        /// Takes out the requests that `matching` says, in order.
        func remove(where matching: (Pending) -> Bool) -> [Pending] {
            let gone = queue.filter(matching)
            guard !gone.isEmpty else { return [] }
            queue.removeAll(where: matching)
            firstClass -= gone.filter(\.isFirstClass).count
            queuedBytes -= gone.reduce(0) { $0 + $1.bytes.count }
            return gone
        }

        func removeExpired(now: Int64) -> [Pending] { remove { $0.expires <= now } }
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
    /// Requests for services not registered yet, during `service_grace_ms`
    /// after start; the first READY of their service takes them.
    let early = Service(name: "")
    let timers = Timers(now: Clock.monotonicMillis)
    let started = Clock.monotonicMillis()
    var eventsRelayed: Int64 = 0
    var requestsIn: Int64 = 0
    let name = "broker"
    let tokens: TokenVerifier
    var revocations: Revocations
    /// The broker's own `accounts.revocations` request out now, and whether
    /// an answer ever came.
    var revocationQuery: (id: String, expires: Int64)?
    var revocationsLoaded = false
    /// The ZAP handler and the frontend's handshake events, with CURVE on.
    let authenticator: Authenticator?
    let monitor: SocketMonitor?
    /// The frontend's public key (Z85), with CURVE on.
    public let publicKey: String?
    /// The key pair's secret half when the internal sockets speak CURVE.
    let internalSecretKey: [UInt8]?
    var limiter: RateLimiter
    var addressLimiter: RateLimiter
    var rateLimited: Int64 = 0
    var malformed: Int64 = 0
    /// Requests whose worker died or went silent holding them, by id: how
    /// many workers, since when.
    var casualties: [String: (count: Int, since: Int64)] = [:]
    /// Log lines about clients (refused handshakes, rate limits), throttled.
    let throttled: LogThrottle
    static let revokedTopic: [UInt8] = Array("accounts/accounts.session.revoked".utf8)
    /// Whether the frontend is TCP, whose peers have addresses.
    let hasAddresses: Bool

    public init(settings: BrokerSettings, context: ZMQContext = ZMQContext()) throws {
        self.settings = settings
        self.context = context
        let socketLimit = Int64(settings.maxMessageBytes) * 2
        hasAddresses = settings.endpoints.frontend.hasPrefix("tcp://")
        frontend = try context.socket(.router)
        try frontend.setMaxMessageSize(socketLimit)
        try frontend.setRouterMandatory(false)
        try frontend.setReceiveHWM(settings.frontendReceiveHWM)
        let throttled = LogThrottle(source: "broker")
        self.throttled = throttled
        let internalKey: [UInt8]?
        if let keyPath = settings.curveKeyPath {
            let pair = try BrokerKeys.loadOrCreate(at: keyPath)
            Log.info("broker", "\(pair.created ? "created" : "loaded") CURVE key \(keyPath), public key \(pair.publicKey) in \(BrokerKeys.publicKeyPath(forSecretKey: keyPath))")
            // The ZAP handler must be bound before a client can handshake.
            authenticator = try Authenticator(context: context, allowPath: settings.allowKeysPath,
                                              serviceKeysPath: settings.serviceKeysPath, log: throttled,
                                              handshakesPerKey: settings.handshakeRatePerKey,
                                              handshakesPerAddress: settings.endpoints.frontend.hasPrefix("tcp://") ? settings.handshakeRatePerAddress : 0)
            if let path = settings.trustedKeysPath {
                authenticator?.trusted = Set(try BrokerKeys.allowList(at: path).compactMap { Curve.encode($0) })
            }
            try frontend.setCurveServer(secretKey: pair.secretKey)
            try frontend.setZAPDomain(Authenticator.domain)
            monitor = try SocketMonitor(frontend, name: "frontend")
            publicKey = pair.publicKey
            internalKey = settings.serviceKeysPath == nil ? nil : pair.secretKey
        } else {
            authenticator = nil
            monitor = nil
            publicKey = nil
            internalKey = nil
        }
        internalSecretKey = internalKey
        /// The internal sockets as CURVE servers with their own ZAP domain.
        func secureInternal(_ socket: Socket) throws {
            guard let key = internalKey else { return }
            try socket.setCurveServer(secretKey: key)
            try socket.setZAPDomain(Authenticator.internalDomain)
        }
        try frontend.bind(settings.endpoints.frontend)
        backend = try context.socket(.router)
        try backend.setMaxMessageSize(socketLimit)
        try secureInternal(backend)
        try backend.bind(settings.endpoints.backend)
        eventsIn = try context.socket(.xsub)
        try eventsIn.setMaxMessageSize(socketLimit)
        // Room for a worker's relay burst (10 pages of 1000 events) on the
        // way in and out; past the mark XPUB drops for that subscriber, who
        // catches up with events.since.
        try eventsIn.setReceiveHWM(100_000)
        try secureInternal(eventsIn)
        try eventsIn.bind(settings.endpoints.eventsIn)
        // The broker's own subscription: publishers send revocations to it
        // whether or not any subscriber wants them.
        try eventsIn.send([[1] + Broker.revokedTopic])
        eventsOut = try context.socket(.xpub)
        try eventsOut.setSendHWM(100_000)
        try secureInternal(eventsOut)
        try eventsOut.bind(settings.endpoints.eventsOut)
        internalFrontend = try context.socket(.router)
        try internalFrontend.setMaxMessageSize(socketLimit)
        try secureInternal(internalFrontend)
        try internalFrontend.bind(settings.endpoints.internal)
        limiter = RateLimiter(perSecond: settings.ratePerSecond, burst: settings.rateBurst)
        addressLimiter = RateLimiter(perSecond: settings.addressRatePerSecond, burst: settings.addressRateBurst)
        revocations = Revocations(maxEntries: settings.maxRevocations)
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
        timers.every(10_000) { [unowned self] in
            let now = Clock.monotonicMillis()
            self.limiter.sweep(now: now)
            self.addressLimiter.sweep(now: now)
            self.authenticator?.sweep(now: now)
            self.revocations.sweep(now: Int64(Clock.nowMillis()))
        }
        timers.every(settings.revocationRefreshMs) { [unowned self] in self.askRevocations() }
        timers.every(60_000) { [unowned self] in
            let old = Clock.monotonicMillis() - 600_000
            self.casualties = self.casualties.filter { $0.value.since > old }
        }
        timers.after(max(0, settings.serviceGraceMs)) { [unowned self] in self.endGrace() }
        if let authenticator { timers.every(2000) { authenticator.reloadIfChanged() } }
        Log.info(name, "frontend \(settings.endpoints.frontend), backend \(settings.endpoints.backend), events in \(settings.endpoints.eventsIn) out \(settings.endpoints.eventsOut), internal \(settings.endpoints.internal)")
        if let publicKey {
            let who = authenticator?.allowed.map { "only the \($0.count) client key(s) in \(settings.allowKeysPath ?? "")" } ?? "any client key (tokens say who the user is)"
            Log.info(name, "frontend: CURVE with public key \(publicKey); admits \(who)")
        } else {
            Log.info(name, "frontend: CURVE OFF (--curve off): requests and tokens cross the network in clear text; for debugging only")
        }
        if internalSecretKey != nil {
            Log.info(name, "internal sockets: CURVE, admitting only the \(authenticator?.serviceKeys.count ?? 0) service key(s) in \(settings.serviceKeysPath ?? "")")
        }
        Log.info(name, limiter.isOn
                 ? "rate limit on the frontend: \(settings.ratePerSecond) requests per second per user, client key, connection and phone, bursts of \(Int64(limiter.burst)); \(settings.addressRatePerSecond) per second per address"
                 : "rate limit off (--rate-per-second 0)")
        var poller = Poller()
        poller.add(frontend)
        poller.add(backend)
        poller.add(eventsIn)
        poller.add(eventsOut)
        poller.add(internalFrontend)
        let zapIndex = authenticator.map { poller.add($0.socket) }
        let monitorIndex = monitor.map { poller.add($0.socket) }
        while !Shutdown.isRequested && !shouldStop() {
            let ready: [Bool]
            do { ready = try poller.poll(timeoutMs: Int(timers.timeout(cap: 100))) } catch {
                Log.error(name, "poll: \(error)")
                return 1
            }
            if let k = zapIndex, ready[k] { authenticator?.drain() }
            if let k = monitorIndex, ready[k] { readHandshakeEvents() }
            if ready[1] { drainBackend() }
            if ready[0] { drainFrontend(frontend, origin: Broker.public) }
            if ready[4] { drainFrontend(internalFrontend, origin: Broker.internal) }
            if ready[2] { relay(from: eventsIn, to: eventsOut, events: true) }
            if ready[3] { relay(from: eventsOut, to: eventsIn, events: false) }
            timers.runDue()
        }
        for w in workers.values { sendWorker(w.identity, .disconnect) }
        Log.info(name, "stopped")
        return 0
    }

    // MARK: CURVE

    /// Logs why clients failed the frontend's handshake (a wrong or missing
    /// broker key), at most once per kind every few seconds.
    func readHandshakeEvents() {
        var n = 0
        while n < 1000, let event = monitor?.next() {
            n += 1
            // ZAP refusals are logged by the authenticator, with the key.
            if event.kind == .authFailed { continue }
            throttled.info("handshake-\(event.kind)-\(event.value)", "a client failed the CURVE handshake on the frontend: \(event.reason)",
                           fields: ["endpoint": event.endpoint])
        }
    }

    // MARK: Events

    func relay(from: Socket, to: Socket, events: Bool) {
        var n = 0
        while n < 1000, let frames = try? from.receive(dontWait: true) {
            if events, frames.count == 2, frames[0].starts(with: Broker.revokedTopic) { revoked(frames[1]) }
            // A subscriber's unsubscribe from the broker's own topic would
            // drop it upstream: XSUB counts each subscription, so it stays.
            try? to.send(frames)
            n += 1
        }
        if events { eventsRelayed += Int64(n) }
    }

    /// An `accounts.session.revoked` event: applied at once.
    func revoked(_ bytes: [UInt8]) {
        guard let event = try? Envelope.decode(bytes, maxBytes: settings.maxMessageBytes), event.kind == .event,
              event.type == "accounts.session.revoked", let entry = Revocations.entry(event.body) else {
            throttled.error("revocation-malformed", "an accounts.session.revoked event could not be read: ignored")
            return
        }
        revocations.add(entry, now: Int64(Clock.nowMillis()))
        Log.line(["src": name, "level": "info", "msg": "token revocation applied", "user": entry.user, "jti": entry.jti ?? "",
                  "before_ms": entry.beforeMs ?? 0])
    }

    /// Asks an accounts worker for every revocation in force, through the
    /// backend under the broker's own route; one question at a time.
    func askRevocations() {
        guard let accounts = services["accounts"], workers.values.contains(where: { $0.service == "accounts" }) else { return }
        let now = Clock.monotonicMillis()
        if let q = revocationQuery, q.expires > now { return }
        var request = Envelope.request("accounts.revocations", src: name, deadline: 5000)
        request.role = "service"
        request.caller = "service:\(name)"
        revocationQuery = (request.id, now + 5000)
        accounts.enqueue(Pending(client: [Broker.own], id: request.id, bytes: request.encoded(), type: request.type,
                                 expires: now + 5000, owner: "service:\(name)"), front: true)
        dispatch(accounts)
    }

    /// The answer to ``askRevocations()``.
    func ownReply(_ bytes: [UInt8]) {
        guard let answer = try? Envelope.decode(bytes, maxBytes: .max), answer.corr == revocationQuery?.id else { return }
        revocationQuery = nil
        if let error = answer.quadError {
            throttled.error("revocations-error", "accounts.revocations failed: \(error.message); revocations known so far stay in force")
            // An accounts that does not know the question has none to tell.
            if error.code == "not_found" { revocationsLoaded = true }
            return
        }
        guard let list = answer.body["revocations"]?.array else {
            throttled.error("revocations-malformed", "accounts.revocations answered without a revocations list")
            return
        }
        let now = Int64(Clock.nowMillis())
        for item in list { if let e = Revocations.entry(item) { revocations.add(e, now: now) } }
        if !revocationsLoaded { Log.info(name, "token revocations loaded from accounts: \(revocations.count) in force") }
        revocationsLoaded = true
    }

    // MARK: Clients

    /// A client's route is its frontend (one byte) then its routing id, so a
    /// worker's reply finds its way back through the right socket; the
    /// broker's own requests (``own``) have no routing id: their replies
    /// are the broker's.
    /// The route's first byte also says whether the client's messages start
    /// with an empty delimiter (``delimited``), so its answers do too.
    static let `public`: UInt8 = 0
    static let `internal`: UInt8 = 1
    static let own: UInt8 = 2
    static let delimited: UInt8 = 0x80

    /// Which frontend a route came in on (``public``, ``internal``, ``own``).
    static func origin(_ route: [UInt8]) -> UInt8 { (route.first ?? own) & ~delimited }

    func drainFrontend(_ socket: Socket, origin: UInt8) {
        var n = 0
        // The routing id and the MDP frames; frames past them are counted, not copied.
        while n < 1000, let (frames, count, metadata) = try? socket.receiveWithMetadata(dontWait: true, keepingAtMost: Majordomo.framesToKeep) {
            n += 1
            requestsIn += 1
            guard let identity = frames.first else { continue }
            switch Majordomo.parseRequest(frames.dropFirst(), count: count - 1) {
            case let .success(request):
                let client = [origin | (request.form == .delimited ? Broker.delimited : 0)] + identity
                accept(client: client, service: request.service, bytes: request.body, metadata: metadata)
            case let .failure(refusal):
                let client = [origin | (refusal.form == .delimited ? Broker.delimited : 0)] + identity
                refuseFrames(client, refusal, count: count - 1, metadata: metadata, origin: origin)
            }
        }
    }

    /// A message that is not an MDP/0.2 REQUEST with one envelope frame:
    /// 400, and its client key may not connect again for `malformed_ban_ms`.
    func refuseFrames(_ client: [UInt8], _ refusal: Majordomo.Refusal, count: Int, metadata: MessageMetadata, origin: UInt8) {
        malformed += 1
        var why = refusal.error.message
        if origin == Broker.public, let key = metadata.userID, let authenticator, settings.malformedBanMs > 0 {
            authenticator.ban(key, forMs: settings.malformedBanMs)
            why += "; this client key may not open a new connection for \(settings.malformedBanMs) ms (malformed_ban_ms)"
            throttled.info("malformed-\(key)", "client key \(key) sent a malformed message of \(count) frames: refused, key banned for \(settings.malformedBanMs) ms",
                           fields: ["address": metadata.peerAddress ?? ""])
        }
        replyError(client, .badRequest(why), corr: nil, service: refusal.service)
    }

    /// Sends `bytes` to the client at `route`, as an MDP FINAL (or PARTIAL)
    /// from `service`.
    func deliver(_ route: [UInt8], _ bytes: [UInt8], service: some StringProtocol, partial: Bool = false) {
        let origin = Broker.origin(route)
        if origin == Broker.own {
            if !partial { ownReply(bytes) }
            return
        }
        let socket = origin == Broker.internal ? internalFrontend : frontend
        let form: Majordomo.Form = (route.first ?? 0) & Broker.delimited != 0 ? .delimited : .bare
        try? socket.send([Array(route.dropFirst())] + Majordomo.reply(service: service, bytes, partial: partial, form: form), dontWait: true)
    }

    /// An error envelope from the broker; its FINAL names `service`, or
    /// else the service of `type`.
    func replyError(_ client: [UInt8], _ error: QuadError, corr: String?, type: String = "error", service: String? = nil) {
        deliver(client, Envelope.error(error, corr: corr, type: type, src: name).encoded(),
                service: service ?? (type == "error" ? "" : String(type.split(separator: ".", maxSplits: 1).first ?? "")))
    }

    /// A REQUEST to `service` (its own frame) with the envelope `bytes`,
    /// whose header alone is read.
    func accept(client: [UInt8], service frame: String, bytes: [UInt8], metadata: MessageMetadata = MessageMetadata()) {
        var envelope: Envelope
        do { envelope = try Envelope.decodeHeader(bytes, maxBytes: settings.maxMessageBytes) } catch {
            replyError(client, error, corr: Envelope.salvageID(bytes), service: frame)
            return
        }
        guard envelope.kind == .request else {
            replyError(client, .badRequest("expected kind 'request', got '\(envelope.kind.rawValue)'"), corr: envelope.id, type: envelope.type, service: frame)
            return
        }
        // The service frame is what routes; the type must agree with it, or
        // a worker would get a request that is not its service's. The
        // broker's own types (`sys.*`) go to the service frame `sys`.
        guard envelope.service == frame else {
            replyError(client, .badRequest("type '\(envelope.type)' is not a request of service '\(frame)' (the MDP service frame): "
                                           + "a type must start with '\(frame).'; the broker's own sys.* types go to service 'sys'",
                                           details: ["service": .string(frame), "type": .string(envelope.type)]),
                       corr: envelope.id, type: envelope.type, service: frame)
            return
        }
        let fromOutside = Broker.origin(client) == Broker.public
        // Budgets a client cannot multiply: its connection, its CURVE key
        // (libzmq's word, from the handshake), its address; `src` is the
        // client's own word, so it only splits its address's budget.
        // On ipc libzmq's Peer-Address is "host:uid:gid:pid", not a host:
        // only a TCP frontend's peers have an address to budget.
        let address = hasAddresses ? metadata.peerAddress ?? "" : ""
        if fromOutside && limiter.isOn {
            let now = Clock.monotonicMillis()
            var buckets: [(key: String, who: String, scope: String)] = [("c:" + hex(Array(client.dropFirst())), "from this connection", "connection")]
            if let key = metadata.userID { buckets.append(("k:" + key, "for client key \(key)", "key")) }
            if let src = envelope.src, !src.isEmpty { buckets.append(("s:\(address)|" + src, "from phone '\(src)'", "src")) }
            for b in buckets {
                if let wait = limiter.take(b.key, now: now) {
                    refuseRate(client, envelope, limiter.refusal(b.who, scope: b.scope, retryAfterMs: wait), key: b.key)
                    return
                }
            }
        }
        // `user`, `role` and `caller` are the broker's to set, never a
        // client's: from the public frontend they come only from a verified
        // token (which stops here) and the connection. Services on the
        // internal frontend pass theirs on.
        var header: [String: String?] = [:]
        if fromOutside {
            envelope.user = nil
            envelope.role = nil
            if let token = envelope.token, !token.isEmpty {
                do throws(QuadError) {
                    let claims = try tokens.check(token)
                    if revocations.isRevoked(claims) {
                        throw .unauthorized("token revoked: this session was ended (logout, or a password or role change); log in again")
                    }
                    if !revocationsLoaded, revocationQuery != nil {
                        throw .unavailable("the broker is loading token revocations from accounts: retry in a moment")
                    }
                    envelope.user = claims.user
                    envelope.role = claims.role
                } catch {
                    replyError(client, error, corr: envelope.id, type: envelope.type)
                    return
                }
            }
            envelope.token = nil
            envelope.caller = metadata.userID.map { "key:" + $0 } ?? "conn:" + hex(Array(client.dropFirst()))
            header = ["user": envelope.user, "role": envelope.role, "caller": envelope.caller, "token": nil]
        } else if envelope.caller == nil {
            envelope.caller = "service:" + (envelope.src ?? "?")
            header = ["caller": envelope.caller]
        }
        if fromOutside, let user = envelope.user, limiter.isOn, let wait = limiter.take("u:" + user, now: Clock.monotonicMillis()) {
            refuseRate(client, envelope, limiter.refusal("for user '\(user)'", scope: "user", retryAfterMs: wait), key: "u:" + user)
            return
        }
        // Anonymous requests share their address's budget (a signed-in
        // user has one of its own); the operator's trusted keys do not.
        if fromOutside, envelope.user == nil, !address.isEmpty, addressLimiter.isOn,
           !(metadata.userID.map { authenticator?.trusted.contains($0) == true } ?? false),
           let wait = addressLimiter.take("a:" + address, now: Clock.monotonicMillis()) {
            refuseRate(client, envelope, addressLimiter.refusal("without a signed-in user from address \(address)", scope: "address", retryAfterMs: wait,
                                                                names: "address_rate_per_second, address_rate_burst"), key: "a:" + address)
            return
        }
        if fromOutside && envelope.role != "admin" && isInternalOnly(envelope.type) {
            let why = "\(envelope.type) is for Quad's services and admins only"
            replyError(client, envelope.user == nil ? .unauthorized(why + ": sign in as an admin") : .forbidden(why), corr: envelope.id, type: envelope.type)
            return
        }
        let service = frame
        if service == "sys" {
            deliver(client, system(envelope, privileged: !fromOutside || envelope.role == "admin").encoded(), service: service)
            return
        }
        if let c = casualties[envelope.id], c.count >= settings.maxDeliveries {
            replyError(client, poisoned(envelope.id, type: envelope.type, workers: c.count), corr: envelope.id, type: envelope.type)
            return
        }
        let s: Service
        if let known = services[service] {
            s = known
        } else if Clock.monotonicMillis() - started < settings.serviceGraceMs {
            s = early
        } else {
            replyError(client, .notFound("no service named \(service): no worker of it ever registered with this broker"), corr: envelope.id, type: envelope.type)
            return
        }
        let spliced = header.isEmpty ? bytes : Envelope.rewritingHeader(bytes, set: header)
        if spliced.count > settings.maxMessageBytes {
            replyError(client, .tooLarge("message is \(spliced.count) bytes with the header the broker sets, over the limit max_message_bytes=\(settings.maxMessageBytes)",
                                         details: ["limit": "max_message_bytes", "max": .int(Int64(settings.maxMessageBytes)), "actual": .int(Int64(spliced.count))]),
                       corr: envelope.id, type: envelope.type)
            return
        }
        let deadline = min(envelope.deadline ?? settings.defaultDeadlineMs, settings.maxDeadlineMs)
        let pending = Pending(client: client, id: envelope.id, bytes: spliced, type: envelope.type,
                              expires: Clock.monotonicMillis() + deadline, owner: envelope.user.map { "user:" + $0 } ?? envelope.caller ?? "")
        // A retry of a request still queued replaces it rather than queueing
        // twice, when it is the same caller's; another caller's request with
        // the same id is refused and never replaces the first.
        if let k = s.queue.firstIndex(where: { $0.id == pending.id }) {
            guard s.queue[k].owner == pending.owner else {
                replyError(client, .conflict("this request id was used by another caller"), corr: envelope.id, type: envelope.type)
                return
            }
            s.replace(at: k, with: pending)
            dispatch(s)
            return
        }
        let what = s === early ? "service '\(service)' (not registered yet)" : "service '\(service)'"
        if s.queue.count >= settings.maxQueue {
            replyError(client, .unavailable("\(what) has \(s.queue.count) requests queued, the limit max_queue=\(settings.maxQueue)"), corr: envelope.id, type: envelope.type)
            return
        }
        if s.queuedBytes + pending.bytes.count > settings.maxQueueBytes {
            replyError(client, .unavailable("\(what) has \(s.queuedBytes) bytes of requests queued, the limit max_queue_bytes=\(settings.maxQueueBytes)"),
                       corr: envelope.id, type: envelope.type)
            return
        }
        s.enqueue(pending)
        if s !== early { dispatch(s) }
    }

    /// The start-up grace is over: requests still waiting for a service
    /// that never registered get 404.
    func endGrace() {
        while !early.queue.isEmpty {
            let p = early.dequeue()
            replyError(p.client, .notFound("no service named \(p.service): no worker of it registered within service_grace_ms=\(settings.serviceGraceMs) of the broker's start"),
                       corr: p.id, type: p.type)
        }
    }

    /// The answer to a request that took down `workers` workers.
    func poisoned(_ id: String, type: String, workers: Int) -> QuadError {
        .internal("request \(id) (\(type)) was held by \(workers) workers of its service that died or went silent: "
                  + "not given to another (max_deliveries=\(settings.maxDeliveries))")
    }

    func refuseRate(_ client: [UInt8], _ envelope: Envelope, _ error: QuadError, key: String) {
        rateLimited += 1
        throttled.info("rate-\(key)", "rate limit: \(error.message)", fields: ["type": envelope.type])
        replyError(client, error, corr: envelope.id, type: envelope.type)
    }

    func isInternalOnly(_ type: String) -> Bool {
        settings.internalOnlyTypes.contains { pattern in
            if pattern.hasPrefix("*.") { return type.hasSuffix(pattern.dropFirst(1)) }
            if pattern.hasSuffix(".*") { return type.hasPrefix(pattern.dropLast(1)) }
            return type == pattern
        }
    }

    func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    func dispatch(_ s: Service) {
        while !s.queue.isEmpty, !s.idle.isEmpty {
            let identity = s.idle.removeFirst()
            guard let worker = workers[identity] else { continue }
            let pending = s.dequeue()
            worker.current = pending
            s.routed += 1
            do {
                try backend.send([identity] + Majordomo.frames(.request(client: pending.client, bodies: [pending.bytes]), form: workerForm(identity)))
            } catch {
                worker.current = nil
                s.enqueue(pending, front: true)
                remove(worker, reason: "send failed: \(error)")
            }
        }
    }

    func expireQueued() {
        let now = Clock.monotonicMillis()
        for s in Array(services.values) + [early] where !s.queue.isEmpty {
            let expired = s.removeExpired(now: now)
            guard !expired.isEmpty else { continue }
            s.expired += Int64(expired.count)
            for p in expired {
                let live = workers.values.filter { $0.service == p.service }.count
                let why = live == 0 ? "no live worker of service '\(p.service)'" : "all \(live) workers of service '\(p.service)' busy"
                replyError(p.client, .unavailable("\(why) before the request's deadline"), corr: p.id, type: p.type)
            }
        }
    }

    // MARK: Workers

    /// Workers whose messages start with an empty delimiter (REQ-emulating
    /// MDP peers): what the broker sends them starts with one too. Kept
    /// for registered workers only (pruned on the heartbeat).
    var delimitedWorkers: Set<[UInt8]> = []

    func workerForm(_ identity: [UInt8]) -> Majordomo.Form {
        delimitedWorkers.contains(identity) ? .delimited : .bare
    }

    func sendWorker(_ identity: [UInt8], _ message: Majordomo.WorkerMessage, dontWait: Bool = false) {
        try? backend.send([identity] + Majordomo.frames(message, form: workerForm(identity)), dontWait: dontWait)
    }

    func drainBackend() {
        var n = 0
        while n < 1000, let frames = try? backend.receive(dontWait: true) {
            n += 1
            guard let identity = frames.first, let (form, message) = Majordomo.parseWorker(frames.dropFirst()) else { continue }
            if form == .delimited { delimitedWorkers.insert(identity) } else { delimitedWorkers.remove(identity) }
            if let w = workers[identity] { w.expires = Clock.monotonicMillis() + settings.heartbeatMs * WorkerProtocol.liveness }
            switch message {
            case let .ready(service, info):
                register(identity: identity, service: String(decoding: service, as: UTF8.self), info: info ?? [])
            case let .partial(client, bodies):
                // More of the answer follows: the request stays the worker's.
                guard let w = workers[identity], bodies.count == 1 else { continue }
                deliver(client, bodies[0], service: w.service, partial: true)
            case let .final(client, bodies):
                // Quad's envelope is one frame; a FINAL of another shape
                // still ends the request, with an error the client can read.
                let bytes = bodies.count == 1 ? bodies[0] : Envelope.error(
                    .internal("the worker answered with \(bodies.count) body frames; an answer is one envelope frame"),
                    corr: bodies.first.flatMap { Envelope.salvageID($0) }, src: name).encoded()
                guard let w = workers[identity], let s = services[w.service] else {
                    // A reply from a worker we dropped: still deliver it.
                    let service = (try? Envelope.decodeHeader(bytes, maxBytes: .max)).map { String($0.service) } ?? ""
                    deliver(client, bytes, service: service)
                    sendWorker(identity, .disconnect)
                    continue
                }
                deliver(client, bytes, service: w.service)
                if let id = w.current?.id, casualties[id] != nil { casualties[id] = nil }
                w.current = nil
                w.served += 1
                s.idle.append(identity)
                dispatch(s)
            case .heartbeat:
                if workers[identity] == nil { sendWorker(identity, .disconnect) }
            case .disconnect:
                if let w = workers[identity] { remove(w, reason: "worker said DISCONNECT") }
                // The confirmation: nothing more goes to this worker.
                sendWorker(identity, .disconnect)
                delimitedWorkers.remove(identity)
            case .request:
                break
            }
        }
    }

    func register(identity: [UInt8], service name: String, info: [UInt8]) {
        guard name != "sys", Majordomo.isServiceName(name) else {
            sendWorker(identity, .disconnect)
            return
        }
        if let old = workers[identity] { remove(old, reason: "registered again") }
        // A foreign MDP worker sends no info: it is named by its routing id.
        let details: JSON = info.isEmpty ? .null : (try? JSON.parse(info)) ?? .null
        let w = Worker(identity: identity, service: name, instance: details["instance"]?.string ?? "\(name)/mdp-\(hex(identity))",
                       pid: details["pid"]?.int ?? 0, expires: Clock.monotonicMillis() + settings.heartbeatMs * WorkerProtocol.liveness)
        workers[identity] = w
        let s: Service
        if let known = services[name] {
            s = known
        } else {
            s = Service(name: name)
            services[name] = s
            // Requests that waited for this service's first worker.
            for p in early.remove(where: { $0.service == name }) { s.enqueue(p) }
        }
        s.idle.append(identity)
        Log.line(["src": self.name, "level": "info", "msg": "worker ready", "service": name, "instance": w.instance, "pid": w.pid])
        if name == "accounts" {
            // A new accounts worker may know of revocations the broker missed.
            revocationQuery = nil
            askRevocations()
        }
        dispatch(s)
    }

    /// Drops a worker. A request it held goes back to the front of its
    /// queue: the client's id makes a second delivery safe; unless workers
    /// died holding it `max_deliveries` times, when it is answered 500.
    func remove(_ w: Worker, reason: String, died: Bool = false) {
        workers[w.identity] = nil
        guard let s = services[w.service] else { return }
        s.idle.removeAll { $0 == w.identity }
        Log.line(["src": name, "level": "info", "msg": "worker removed", "service": w.service, "instance": w.instance, "reason": reason])
        if let p = w.current {
            let now = Clock.monotonicMillis()
            // A worker that leaves (DISCONNECT) still answers what it holds:
            // only one that died counts.
            var count = casualties[p.id]?.count ?? 0
            if died {
                count += 1
                casualties[p.id] = (count, casualties[p.id]?.since ?? now)
            }
            if died && count >= settings.maxDeliveries {
                let error = poisoned(p.id, type: p.type, workers: count)
                Log.line(["src": name, "level": "error", "msg": error.message, "service": w.service, "id": p.id, "type": p.type])
                replyError(p.client, error, corr: p.id, type: p.type)
            } else if p.expires > now {
                s.enqueue(p, front: true)
            }
        }
        dispatch(s)
    }

    func heartbeat() {
        let now = Clock.monotonicMillis()
        for w in Array(workers.values) {
            if w.expires < now {
                remove(w, reason: "missed \(WorkerProtocol.liveness) heartbeats", died: true)
            } else {
                sendWorker(w.identity, .heartbeat, dontWait: true)
            }
        }
        delimitedWorkers = delimitedWorkers.filter { workers[$0] != nil }
    }

    // MARK: sys.*

    /// `privileged`: an admin or a service, who may see instance names and
    /// pids; others see each service's name, workers (busy or not) and queue.
    func system(_ request: Envelope, privileged: Bool) -> Envelope {
        switch request.type {
        case "sys.services":
            let list: [JSON] = services.values.sorted { $0.name < $1.name }.map { s in
                let ws = workers.values.filter { $0.service == s.name }.sorted { $0.instance < $1.instance }
                return [
                    "name": .string(s.name), "queue": .int(Int64(s.queue.count)), "routed": .int(s.routed),
                    "expired": .int(s.expired),
                    "workers": .array(ws.map { w in
                        privileged
                            ? ["instance": .string(w.instance), "pid": .int(w.pid), "served": .int(w.served), "busy": .bool(w.current != nil)]
                            : ["served": .int(w.served), "busy": .bool(w.current != nil)]
                    }),
                ]
            }
            return request.reply(["services": .array(list)], src: name)
        case "sys.health":
            var body: [String: JSON] = [
                "status": "ok", "service": "broker", "uptime_ms": .int(Clock.monotonicMillis() - started),
                "workers": .int(Int64(workers.count)), "requests": .int(requestsIn), "events": .int(eventsRelayed),
                "curve": .bool(publicKey != nil), "rate_limited": .int(rateLimited),
            ]
            if privileged {
                body["pid"] = .int(Int64(getpid()))
                body["malformed"] = .int(malformed)
                body["revocations"] = .int(Int64(revocations.count))
            }
            return request.reply(.object(body), src: name)
        default:
            return request.error(.notFound("unknown request type '\(request.type)': the broker answers sys.services and sys.health"), src: name)
        }
    }
}
