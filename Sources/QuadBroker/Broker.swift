import Foundation
import QuadAuth
import QuadMessaging
import QuadMetrics
import QuadProcess
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
    /// however many frames it has; see docs/security.md on what that leaves.)
    public var frontendReceiveHWM: Int32 = 100
    /// Milliseconds a client key that sent a message with the wrong number
    /// of frames is refused new connections (`malformed_ban_ms`); 0: no ban.
    public var malformedBanMs: Int64 = 60_000
    /// New connections per second one client key may open (burst 10 times
    /// that) (`handshake_rate_per_key`); 0: no limit.
    public var handshakeRatePerKey: Double = 2
    /// New connections per second one address may open (burst 10 times
    /// that; loopback included, ipc has no address)
    /// (`handshake_rate_per_address`); 0: no limit. 200: a thousand
    /// phones behind one address (one quad-edge process, a campus NAT)
    /// connect at once and reconnect as they leave dead zones, each with
    /// its two connections; a flood from one address is still cut.
    public var handshakeRatePerAddress: Double = 200
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
    /// Where `GET /metrics` is served (`--metrics HOST:PORT`); nil: nowhere.
    public var metricsAddress: String?

    /// The public updates socket (XPUB, ``Updates``): phones subscribe to
    /// public events and their own news; nil: none. CURVE as the frontend's.
    public var updatesEndpoint: String?
    /// Whether the broker may run without the updates socket when its
    /// endpoint cannot be bound (a derived default; phones then poll).
    public var updatesOptional = false
    /// Distinct public topics the updates socket keeps subscriptions to
    /// (`max_public_topics`).
    public var maxPublicTopics = 100_000

    public init(endpoints: Endpoints) { self.endpoints = endpoints }
}

/// The broker: routes requests from clients to live workers of the service
/// named by the first segment of `type`, least recently used first; queues
/// them while none is idle; answers 503 when a deadline passes with none,
/// 504 when it passes in a worker; relays events from publishers to
/// subscribers (XSUB/XPUB). The routing rules are ``Routing``'s, a value
/// without I/O: this class moves bytes between the sockets and it. One
/// thread, one poll loop. On the public frontend it checks each request's
/// session token against accounts' public key (and accounts' revocations)
/// and sets `user`, `role` and `caller` by splicing the header: a body's
/// bytes are never decoded into something else and never re-encoded.
public final class Broker {
    let settings: BrokerSettings
    let context: ZMQContext
    let frontend: Socket
    let backend: Socket
    let eventsIn: Socket
    let eventsOut: Socket
    let internalFrontend: Socket
    /// The public updates socket, when `updatesEndpoint` is set.
    let updates: Updates?
    /// Each user's news channels (News.swift): `sys.news` opens one.
    var news = NewsChannels()
    /// The routing rules (queues, workers, deadlines): the broker feeds it
    /// what the sockets say and carries out what it answers.
    var routing: Routing
    /// The broker's one loop: its sockets and its timers. Scalable (epoll):
    /// `zmq_poll` asks each of its ten or so sockets for its state on every
    /// turn, a `poll` and a `getpid` system call each; epoll looks only at
    /// the sockets that are ready or were used (20 µs less of the broker's
    /// time per request, 4% of a round trip: BENCHMARKS.md).
    let reactor = Reactor(now: Clock.monotonicMillis, scalable: true)
    var timers: Timers { reactor.timers }
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
    /// The broker's Prometheus metrics, served at `/metrics` when
    /// `metricsAddress` is set.
    public let metrics = MetricsRegistry()
    var metricsServer: MetricsServer?
    let startedAt = Clock.monotonicMillis()
    var malformed: Int64 = 0
    /// Log lines about clients (refused handshakes, rate limits), throttled.
    let throttled: LogThrottle
    static let revokedTopic: [UInt8] = Array("accounts/accounts.session.revoked".utf8)
    /// Whether the frontend is TCP, whose peers have addresses.
    let hasAddresses: Bool
    /// The broker's span of each request it accepted and has not answered,
    /// by the client's route and the request id: logged as one line when
    /// the answer goes out (``closeSpan(_:corr:status:ended:)``). Bounded by what
    /// the broker holds (queues, workers) and, for answers a worker gives
    /// later, by the sweep of spans older than twice `max_deadline_ms`.
    var openSpans: [SpanKey: OpenSpan] = [:]
    struct SpanKey: Hashable {
        let route: [UInt8]
        let id: String
    }
    struct OpenSpan {
        let span: Span
        let type: String
        let startMicros: Int64
        let started: Int64
    }
    static let errorKind = Array(#""kind":"error""#.utf8)

    /// Whether `bytes` may be an error envelope: at most
    /// ``errorReadLimit`` bytes (an error's body is a code, a status, a
    /// message and small details) holding `"kind":"error"` (Quad's encoder
    /// writes no spaces). A larger error is logged by the broker as 200;
    /// the worker's own span line has its status.
    static func mayBeError(_ bytes: [UInt8]) -> Bool {
        guard bytes.count <= errorReadLimit else { return false }
        return bytes.withUnsafeBufferPointer { b in
            errorKind.withUnsafeBufferPointer { k in
                var i = 0
                while i + k.count <= b.count {
                    if b[i] == k[0], memcmp(b.baseAddress! + i, k.baseAddress!, k.count) == 0 { return true }
                    i += 1
                }
                return false
            }
        }
    }

    static let errorReadLimit = 4096

    public init(settings: BrokerSettings, context: ZMQContext = ZMQContext()) throws {
        self.settings = settings
        self.context = context
        routing = Routing(limits: Routing.Limits(settings, liveness: WorkerProtocol.liveness), now: Clock.monotonicMillis())
        let socketLimit = Int64(settings.maxMessageBytes) * 2
        hasAddresses = settings.endpoints.frontend.hasPrefix("tcp://")
        frontend = try context.socket(.router)
        try frontend.setMaxMessageSize(socketLimit)
        try frontend.setRouterMandatory(false)
        try frontend.setReceiveHWM(settings.frontendReceiveHWM)
        let throttled = LogThrottle(source: "broker")
        self.throttled = throttled
        let internalKey: CurveKeys?
        var frontendKey: CurveKeys?
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
            try pair.keys.serve(frontend)
            frontendKey = pair.keys
            try frontend.setZAPDomain(Authenticator.domain)
            monitor = try SocketMonitor(frontend, name: "frontend")
            publicKey = pair.publicKey
            internalKey = settings.serviceKeysPath == nil ? nil : pair.keys
        } else {
            authenticator = nil
            monitor = nil
            publicKey = nil
            internalKey = nil
        }
        internalSecretKey = internalKey?.secretKey
        /// The internal sockets as CURVE servers with their own ZAP domain.
        func secureInternal(_ socket: Socket) throws {
            guard let key = internalKey else { return }
            try key.serve(socket)
            try socket.setZAPDomain(Authenticator.internalDomain)
        }
        try frontend.bind(settings.endpoints.frontend)
        updates = try Broker.openUpdates(settings, context: context, curveKey: frontendKey, log: throttled)
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
        // And every event phones may hear: its topic starts with byte 1.
        if settings.updatesEndpoint != nil { try eventsIn.send([[1, 1]]) }
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
        // Deadlines, heartbeats and the start-up grace are the routing's:
        // it only needs to be told the time.
        timers.every(max(1, min(50, settings.heartbeatMs))) { [unowned self] in self.feed(.tick) }
        tokens.loadKey()
        timers.every(1000) { [unowned self] in if !self.tokens.hasKey { self.tokens.loadKey() } }
        timers.every(10_000) { [unowned self] in
            let now = Clock.monotonicMillis()
            self.limiter.sweep(now: now)
            self.addressLimiter.sweep(now: now)
            self.authenticator?.sweep(now: now)
            self.revocations.sweep(now: Int64(Clock.nowMillis()))
            self.sweepSpans()
        }
        timers.every(settings.revocationRefreshMs) { [unowned self] in self.askRevocations() }
        // A news channel ends within a second of its token's expiry.
        timers.every(1000) { [unowned self] in self.sweepNews() }
        if let authenticator { timers.every(2000) { authenticator.reloadIfChanged() } }
        if let address = settings.metricsAddress {
            let server = MetricsServer(registry: metrics)
            // Its sockets are bound (init bound them): ready; /healthz
            // fails when the loop stops turning its timers.
            let health = Health()
            health.ready()
            server.health = health
            timers.every(500) { health.turned() }
            do {
                try server.start(address)
                metricsServer = server
                Log.info(name, "metrics at \(server.url)")
            } catch {
                Log.error(name, "\(error)")
                return 1
            }
            describeMetrics()
            updateMetrics()
            timers.every(1000) { [unowned self] in self.updateMetrics() }
        }
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
        // The order of a turn: CURVE's ZAP requests and handshake events
        // first (a connection is admitted before its first message is read),
        // workers before clients (a freed worker takes the next request).
        if let authenticator { reactor.register(authenticator.socket) { _ in authenticator.drain() } }
        if let monitor { reactor.register(monitor.socket) { [unowned self] _ in self.readHandshakeEvents() } }
        reactor.register(backend) { [unowned self] _ in self.drainBackend() }
        reactor.register(frontend) { [unowned self] s in self.drainFrontend(s, origin: Broker.public) }
        reactor.register(internalFrontend) { [unowned self] s in self.drainFrontend(s, origin: Broker.internal) }
        reactor.register(eventsIn) { [unowned self] _ in self.relay(from: self.eventsIn, to: self.eventsOut, events: true) }
        if let updates {
            reactor.register(updates.socket) { _ in updates.drain() }
            timers.every(1000) { [unowned self] in updates.heartbeat(src: self.name) }
            Log.info(name, "updates \(settings.updatesEndpoint ?? ""): public events and each user's news to phones (\(publicKey == nil ? "no CURVE" : "CURVE as the frontend"))")
        }
        reactor.register(eventsOut) { [unowned self] _ in self.relay(from: self.eventsOut, to: self.eventsIn, events: false) }
        Memory.releaseFree()
        do { try reactor.run(until: { Shutdown.isRequested || shouldStop() }) } catch {
            Log.error(name, "poll: \(error)")
            return 1
        }
        for identity in routing.workers.keys { disconnectWorker(identity) }
        Log.info(name, "stopped")
        return 0
    }

    // MARK: Metrics

    func describeMetrics() {
        metrics.describe("quad_broker_requests_total", .counter, "Requests received on the public and internal frontends.")
        metrics.describe("quad_broker_service_requests_total", .counter,
                         "Requests routed to a service, by service (at most max_metric_series services, the rest as 'other'); sys.* is not counted.")
        metrics.describe("quad_broker_events_relayed_total", .counter, "Events relayed from publishers to subscribers.")
        metrics.describe("quad_broker_rate_limited_total", .counter, "Requests refused 429 by the rate limits.")
        metrics.describe("quad_broker_rate_limited_by_scope_total", .counter,
                         "Requests refused 429, by the budget that ran out: connection, key, src (phone), user, address.")
        metrics.describe("quad_broker_errors_total", .counter, "Error envelopes the broker itself answered, by code.")
        metrics.describe("quad_broker_workers", .gauge, "Live workers registered, per service.")
        metrics.describe("quad_broker_queue_depth", .gauge, "Requests waiting for a worker, per service.")
        metrics.describe("quad_broker_uptime_seconds", .gauge, "Seconds since this broker started.")
        metrics.describe("quad_broker_updates_published_total", .counter, "Events sent to phones on the public updates socket.")
        metrics.describe("quad_broker_updates_subscriptions_total", .counter, "Subscriptions on the updates socket, by outcome: accepted or refused (not public, a bad token, max_public_topics).")
        metrics.describe("quad_broker_news_channels", .gauge, "News channels open (sys.news): connections that hear their user's news.")
        metrics.describe("quad_broker_news_delivered_total", .counter, "News events sent on news channels.")
        metrics.describe("quad_broker_news_closed_by_session_total", .counter, "News channels closed because their token expired or was revoked.")
    }

    /// Copies the broker's counters and per-service figures into the
    /// registry, once a second (the loop's state is never read by the
    /// HTTP thread).
    func updateMetrics() {
        metrics.set("quad_broker_requests_total", [:], Double(requestsIn))
        metrics.set("quad_broker_events_relayed_total", [:], Double(eventsRelayed))
        metrics.set("quad_broker_rate_limited_total", [:], Double(rateLimited))
        metrics.set("quad_broker_uptime_seconds", [:], Double(Clock.monotonicMillis() - startedAt) / 1000)
        metrics.set("quad_broker_news_channels", [:], Double(news.count))
        metrics.set("quad_broker_news_delivered_total", [:], Double(news.delivered))
        metrics.set("quad_broker_news_closed_by_session_total", [:], Double(news.closedBySession))
        if let updates {
            metrics.set("quad_broker_updates_published_total", [:], Double(updates.published))
            metrics.set("quad_broker_updates_subscriptions_total", ["outcome": "accepted"], Double(updates.accepted))
            metrics.set("quad_broker_updates_subscriptions_total", ["outcome": "refused"], Double(updates.refused))
        }
        var workers: [String: Double] = [:]
        for w in routing.workers.values { workers[w.service, default: 0] += 1 }
        var queues: [String: Double] = [:]
        for s in routing.services.values {
            queues[s.name] = Double(s.queue.count)
            if workers[s.name] == nil { workers[s.name] = 0 }
        }
        metrics.replace("quad_broker_workers", label: "service", workers)
        metrics.replace("quad_broker_queue_depth", label: "service", queues)
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
            n += 1
            // An event phones may hear: to the updates socket on its public
            // topic, and to services on the internal one.
            if events, frames.count == 2, frames[0].first == 1 {
                let (publicTopic, internalTopic) = Updates.split(frames[0])
                if let publicTopic {
                    // A user's news: to that user's news channels only, never
                    // to the updates socket (News.swift says why).
                    if publicTopic.starts(with: Broker.userTopic) { deliverNews(publicTopic, frames[1]) } else {
                        updates?.publish(topic: publicTopic, bytes: frames[1])
                    }
                }
                try? to.send([internalTopic, frames[1]])
                continue
            }
            // A subscriber's unsubscribe from the broker's own topic would
            // drop it upstream: XSUB counts each subscription, so it stays.
            try? to.send(frames)
        }
        if events { eventsRelayed += Int64(n) }
    }

    /// The updates socket, bound, or nil: none asked for, or an optional
    /// one whose endpoint is taken (logged: phones fall back to polling).
    static func openUpdates(_ settings: BrokerSettings, context: ZMQContext, curveKey: CurveKeys?, log: LogThrottle) throws -> Updates? {
        guard let endpoint = settings.updatesEndpoint else { return nil }
        let socket = try context.socket(.xpub)
        if let curveKey {
            try curveKey.serve(socket)
            try socket.setZAPDomain(Authenticator.domain)
        }
        let updates = try Updates(socket: socket, maxTopics: settings.maxPublicTopics) { key, message in log.info(key, message) }
        let bound: ZMQError?
        do { try socket.bind(endpoint); bound = nil } catch { bound = error }
        if let bound {
            guard settings.updatesOptional else { throw bound }
            Log.error("broker", "updates socket not opened: \(endpoint): \(bound) (phones poll instead; pass --updates ENDPOINT or off)")
            return nil
        }
        return updates
    }

    /// What a session token says, once it is signed by accounts, in time,
    /// not revoked, and the revocations are known: the one check of a
    /// request's token and of a news subscription's.
    func session(_ token: String) throws(QuadError) -> TokenClaims {
        let claims = try tokens.check(token)
        if revocations.isRevoked(claims) {
            throw .unauthorized("token revoked: this session was ended (logout, or a password or role change); log in again")
        }
        if !revocationsLoaded, revocationQuery != nil {
            throw .unavailable("the broker is loading token revocations from accounts: retry in a moment")
        }
        return claims
    }


    /// An `accounts.session.revoked` event: applied at once.
    func revoked(_ bytes: [UInt8]) {
        guard let event = try? Envelope.decode(bytes, maxBytes: settings.maxMessageBytes), event.kind == .event,
              event.type == "accounts.session.revoked", let entry = Revocations.entry(event.body) else {
            throttled.error("revocation-malformed", "an accounts.session.revoked event could not be read: ignored")
            return
        }
        revocations.add(entry, now: Int64(Clock.nowMillis()))
        sweepNews()
        Log.line(["src": name, "level": "info", "msg": "token revocation applied", "user": entry.user, "jti": entry.jti ?? "",
                  "before_ms": entry.beforeMs ?? 0])
    }

    /// Asks an accounts worker for every revocation in force, through the
    /// backend under the broker's own route; one question at a time.
    func askRevocations() {
        guard routing.hasWorkers(of: "accounts") else { return }
        let now = Clock.monotonicMillis()
        if let q = revocationQuery, q.expires > now { return }
        var request = Envelope.request("accounts.revocations", src: name, deadline: 5000)
        request.role = "service"
        request.caller = "service:\(name)"
        revocationQuery = (request.id, now + 5000)
        feed(.brokerRequest(Routing.Request(client: [Broker.own], id: request.id, type: request.type, bytes: request.encoded(),
                                            deadlineMs: 5000, owner: "service:\(name)")))
    }

    /// The answer to ``askRevocations()``.
    func ownReply(_ answer: Envelope) {
        guard answer.corr == revocationQuery?.id else { return }
        revocationQuery = nil
        if let error = answer.quadError {
            throttled.error("revocations-error", "accounts.revocations failed: \(error.message); revocations known so far stay in force")
            // An accounts that does not know the question has none to tell.
            if error.code == .notFound { revocationsLoaded = true }
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
        // The span lines of what this turn answers go out in one write.
        Log.hold()
        defer { Log.flush() }
        var n = 0
        // The routing id and the MDP frames are copied; the envelope's
        // frames stay libzmq's messages (read below only when they must be);
        // frames past them are counted, not copied.
        while n < 1000, let (head, tail, count, metadata) = try? socket.receiveWithTail(
            dontWait: true, keepingAtMost: Majordomo.framesToKeep, copying: Majordomo.frontendLead, readingMetadata: true)
        {
            n += 1
            requestsIn += 1
            guard let identity = head.first else { continue }
            // The envelope's frames are read by their place, not their bytes.
            let frames = head + tail.map { _ in [UInt8]() }
            switch Majordomo.parseRequest(frames.dropFirst(), count: count - 1) {
            case let .success(request):
                let client = [origin | (request.form == .delimited ? Broker.delimited : 0)] + identity
                if tail.count == 2 {
                    // Header and body: the header is read and rewritten, the body passed on as it came.
                    accept(client: client, service: request.service, bytes: tail[0].bytes, body: tail[1], metadata: metadata)
                } else {
                    accept(client: client, service: request.service, bytes: tail.first?.bytes ?? [], metadata: metadata)
                }
            case let .failure(refusal):
                let client = [origin | (refusal.form == .delimited ? Broker.delimited : 0)] + identity
                refuseFrames(client, refusal, count: count - 1, metadata: metadata, origin: origin)
            }
        }
    }

    /// A message that is not an MDP/0.2 REQUEST with its envelope in one or two frames:
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
    /// from `service`: the envelope, or its header followed by the body's
    /// frame `body`, passed on as the worker sent it.
    func deliver(_ route: [UInt8], _ bytes: [UInt8], body: Frame? = nil, service: some StringProtocol, partial: Bool = false) {
        let origin = Broker.origin(route)
        if origin == Broker.own {
            if !partial {
                let answer = body.map { try? Envelope.decode(header: bytes, body: $0.bytes, maxBytes: .max) } ?? (try? Envelope.decode(bytes, maxBytes: .max))
                if let answer { ownReply(answer) }
            }
            return
        }
        let socket = origin == Broker.internal ? internalFrontend : frontend
        let form: Majordomo.Form = (route.first ?? 0) & Broker.delimited != 0 ? .delimited : .bare
        try? socket.send([Array(route.dropFirst())] + Majordomo.reply(service: service, bytes, partial: partial, form: form),
                         then: body.map { [$0] } ?? [], dontWait: true)
    }

    /// An error envelope from the broker; its FINAL names `service`, or
    /// else the service of `type`.
    func replyError(_ client: [UInt8], _ error: QuadError, corr: String?, type: String = "error", service: String? = nil) {
        if metricsServer != nil { metrics.add("quad_broker_errors_total", ["code": error.code.wire]) }
        let ended = Clock.monotonicMicros()
        deliver(client, Envelope.error(error, corr: corr, type: type, src: name).encoded(),
                service: service ?? (type == "error" ? "" : String(type.split(separator: ".", maxSplits: 1).first ?? "")))
        if let corr { closeSpan(client, corr: corr, status: error.status, ended: ended) }
    }

    /// A REQUEST to `service` (its own frame) with the envelope `bytes`,
    /// whose header alone is read; or, with `body`, the envelope's header
    /// `bytes` and its body's frame, passed on without being read or copied.
    func accept(client: [UInt8], service frame: String, bytes: [UInt8], body: Frame? = nil, metadata: MessageMetadata = MessageMetadata()) {
        var envelope: Envelope
        do { envelope = try Envelope.decodeHeader(bytes, maxBytes: settings.maxMessageBytes) } catch {
            replyError(client, error, corr: Envelope.salvageID(bytes), service: frame)
            return
        }
        // The broker's span: the client's trace when it sent one that can
        // be read, a new trace otherwise; the worker gets this span as its parent.
        let span = Span.child(of: envelope.traceparent)
        openSpans[SpanKey(route: client, id: envelope.id)] = OpenSpan(span: span, type: envelope.type, startMicros: Clock.nowMicros(),
                                                                      started: Clock.monotonicMicros())
        if body != nil && Envelope.headerCarriesBody(bytes) {
            replyError(client, .badRequest("the header frame carries 'body': an envelope in two frames is its header (every field but body), "
                                           + "then its body; in one frame it is the whole envelope"), corr: envelope.id, type: envelope.type, service: frame)
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
        var session: TokenClaims?
        if fromOutside {
            envelope.user = nil
            envelope.role = nil
            if let token = envelope.token, !token.isEmpty {
                do throws(QuadError) {
                    let claims = try self.session(token)
                    session = claims
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
        if envelope.type == "sys.news" {
            openNews(client, envelope, session: session, fromOutside: fromOutside)
            return
        }
        if service == "sys" {
            let answer = system(envelope, privileged: !fromOutside || envelope.role == "admin")
            let ended = Clock.monotonicMicros()
            deliver(client, answer.encoded(), service: service)
            closeSpan(client, corr: envelope.id, status: answer.quadError?.status ?? 200, ended: ended)
            return
        }
        if metricsServer != nil { metrics.add("quad_broker_service_requests_total", ["service": service]) }
        header["traceparent"] = span.traceparent
        let spliced = Envelope.rewritingHeader(bytes, set: header)
        feed(.clientRequest(Routing.Request(client: client, id: envelope.id, type: envelope.type, bytes: spliced, body: body,
                                            deadlineMs: envelope.deadline, owner: RequestOwner.of(envelope))))
    }

    func refuseRate(_ client: [UInt8], _ envelope: Envelope, _ error: QuadError, key: String) {
        rateLimited += 1
        if metricsServer != nil { metrics.add("quad_broker_rate_limited_by_scope_total", ["scope": Broker.rateScopes[key.first ?? "?"] ?? "other"]) }
        throttled.info("rate-\(key)", "rate limit: \(error.message)",
                       fields: ["type": envelope.type, "trace": openSpans[SpanKey(route: client, id: envelope.id)]?.span.traceID ?? ""])
        replyError(client, error, corr: envelope.id, type: envelope.type)
    }

    /// The budget a rate-limit key (its first letter) belongs to, as
    /// `quad_broker_rate_limited_by_scope_total` labels it.
    static let rateScopes: [Character: String] = ["c": "connection", "k": "key", "s": "src", "u": "user", "a": "address"]

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

    // MARK: Routing

    /// Feeds `event` to the routing and carries out what it answers.
    func feed(_ event: Routing.Event) {
        var actions = routing.handle(event, now: Clock.monotonicMillis())
        var k = 0
        while k < actions.count {
            switch actions[k] {
            case let .sendToWorker(identity, request):
                if let failed = sendToWorker(identity, request) {
                    actions += routing.handle(.workerUnreachable(identity: identity, reason: "send failed: \(failed)"), now: Clock.monotonicMillis())
                }
            case let .sendToClient(route, bytes, body, service, corr):
                // A FINAL addressed to no client answers no one: the worker
                // took that request on, to answer it later (a deferred reply).
                if !route.isEmpty {
                    let ended = Clock.monotonicMicros()
                    deliver(route, bytes, body: body, service: service ?? Broker.service(of: bytes))
                    answered(route, bytes, body: body, corr: corr, ended: ended)
                }
            case let .replyError(route, error, corr, type):
                replyError(route, error, corr: corr, type: type)
            case let .sendHeartbeat(identity):
                sendHeartbeat(identity)
            case let .disconnectWorker(identity):
                disconnectWorker(identity)
            case let .acknowledgeDisconnect(identity):
                acknowledgeDisconnect(identity)
            case let .log(fields):
                var line: [String: Any] = ["src": name]
                for (key, value) in fields { line[key] = value }
                Log.line(line)
            }
            k += 1
        }
    }

    // MARK: Workers (the framing of the worker protocol)

    /// Sends a request to a worker; the error when it could not be sent.
    func sendToWorker(_ identity: [UInt8], _ request: Routing.Request) -> Error? {
        do {
            try backend.send([identity] + Majordomo.frames(.request(client: request.client, bodies: [request.bytes]), form: workerForm(identity)),
                             then: request.body.map { [$0] } ?? [])
            return nil
        } catch {
            return error
        }
    }

    func sendHeartbeat(_ identity: [UInt8]) { sendWorker(identity, .heartbeat, dontWait: true) }

    func disconnectWorker(_ identity: [UInt8]) { sendWorker(identity, .disconnect) }

    /// MDP has no BYE: the broker confirms a worker's DISCONNECT with its
    /// own, and sends it nothing more.
    func acknowledgeDisconnect(_ identity: [UInt8]) {
        sendWorker(identity, .disconnect)
        delimitedWorkers.remove(identity)
    }

    /// The service an envelope's type names (a reply from a worker the
    /// broker no longer knows).
    static func service(of bytes: [UInt8]) -> String {
        (try? Envelope.decodeHeader(bytes, maxBytes: .max)).map { String($0.service) } ?? ""
    }

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
        Log.hold()
        defer { Log.flush() }
        var n = 0
        // The MDP frames are copied; an answer's envelope frames stay
        // libzmq's messages, read below only when they must be.
        while n < 1000, let (head, tail, _, _) = try? backend.receiveWithTail(dontWait: true, copying: Majordomo.backendLead) {
            n += 1
            let frames = head + tail.map { _ in [UInt8]() }  // read by their place, not their bytes
            guard let identity = frames.first, let (form, message) = Majordomo.parseWorker(frames.dropFirst()) else { continue }
            if form == .delimited { delimitedWorkers.insert(identity) } else { delimitedWorkers.remove(identity) }
            let event: Routing.Event
            switch message {
            case let .ready(service, info):
                let name = String(decoding: service, as: UTF8.self)
                guard name != "sys", Majordomo.isServiceName(name) else {
                    sendWorker(identity, .disconnect)
                    continue
                }
                // A foreign MDP worker sends no info: it is named by its routing id.
                let details: JSON = (info ?? []).isEmpty ? .null : (try? JSON.parse(info ?? [])) ?? .null
                event = .workerReady(identity: identity, service: name, instance: details["instance"]?.string ?? "\(name)/mdp-\(hex(identity))",
                                     pid: details["pid"]?.int ?? 0)
            case let .partial(client, bodies):
                // More of the answer follows: the request stays the worker's.
                guard let w = routing.workers[identity], bodies.count == tail.count, (1...2).contains(tail.count) else { continue }
                deliver(client, tail[0].bytes, body: tail.count == 2 ? tail[1] : nil, service: w.service, partial: true)
                continue
            case let .final(client, bodies):
                // An envelope is one frame, or a header and a body; a FINAL
                // of another shape still ends the request, with an error the
                // client can read.
                let fits = bodies.count == tail.count && (1...2).contains(tail.count)
                let bytes = fits ? tail[0].bytes : Envelope.error(
                    .internal("the worker answered with \(bodies.count) body frames; an answer is one envelope frame, or a header and a body"),
                    corr: tail.first.flatMap { Envelope.salvageID($0.bytes) }, src: name).encoded()
                let body = fits && tail.count == 2 ? tail[1] : nil
                // Whose answer it is, read from its header only when the
                // worker holds deferred requests (one may share a client).
                let corr = routing.workers[identity]?.deferred.isEmpty == false ? (try? Envelope.decodeHeader(bytes, maxBytes: .max))?.corr : nil
                event = .workerReply(identity: identity, client: client, bytes: bytes, body: body, corr: corr)
            case let .deferral(client):
                event = .workerDefer(identity: identity, client: client)
            case .heartbeat:
                event = .workerHeartbeat(identity: identity)
            case .disconnect:
                event = .workerDisconnect(identity: identity)
            case .request:
                continue
            }
            feed(event)
            if case let .workerReady(identity, "accounts", _, _) = event, routing.workers[identity] != nil {
                // A new accounts worker may know of revocations the broker missed.
                revocationQuery = nil
                askRevocations()
            }
        }
        delimitedWorkers = delimitedWorkers.filter { routing.workers[$0] != nil }
    }

    // MARK: News channels

    static let userTopic = Array("user/".utf8)

    /// `sys.news`: the connection that sent it hears its user's news from
    /// now on, until the token's session ends (News.swift).
    func openNews(_ client: [UInt8], _ request: Envelope, session: TokenClaims?, fromOutside: Bool) {
        let answer: Envelope
        if !fromOutside {
            answer = request.error(.badRequest("sys.news is for clients of the public frontend (a phone with its session token)"), src: name)
        } else if let session {
            do throws(QuadError) {
                try news.open(client, claims: session, now: Int64(Clock.nowMillis()))
                answer = request.reply(["news": true, "user": .string(session.user), "until": .int(session.expiresAt),
                                        "channels": .int(Int64(news.byUser[session.user]?.count ?? 0))], src: name)
            } catch {
                answer = request.error(error, src: name)
            }
        } else {
            answer = request.error(.unauthorized("sys.news needs a session token: sign in, then send it with the token"), src: name)
        }
        let ended = Clock.monotonicMicros()
        deliver(client, answer.encoded(), service: "sys")
        closeSpan(client, corr: request.id, status: answer.quadError?.status ?? 200, ended: ended)
    }

    /// A user's news event (public topic `user/<id>/<type>`): to each of
    /// that user's channels whose session is still good.
    func deliverNews(_ topic: [UInt8], _ bytes: [UInt8]) {
        let rest = topic.dropFirst(Broker.userTopic.count)
        guard let slash = rest.firstIndex(of: UInt8(ascii: "/")), slash > rest.startIndex else { return }
        let user = String(decoding: rest[rest.startIndex..<slash], as: UTF8.self)
        let revocations = self.revocations
        for route in news.routes(of: user, now: Int64(Clock.nowMillis()), isRevoked: { revocations.isRevoked($0) }) {
            deliver(route, bytes, service: "sys")
        }
    }

    func sweepNews() {
        guard news.count > 0 else { return }
        let revocations = self.revocations
        news.sweep(now: Int64(Clock.nowMillis()), isRevoked: { revocations.isRevoked($0) })
    }

    // MARK: sys.*

    /// `privileged`: an admin or a service, who may see instance names and
    /// pids; others see each service's name, workers (busy or not) and queue.
    func system(_ request: Envelope, privileged: Bool) -> Envelope {
        switch request.type {
        case "sys.services":
            let list: [JSON] = routing.services.values.sorted { $0.name < $1.name }.map { s in
                let ws = routing.workers.values.filter { $0.service == s.name }.sorted { $0.instance < $1.instance }
                return [
                    "name": .string(s.name), "queue": .int(Int64(s.queue.count)), "routed": .int(s.routed),
                    "expired": .int(s.expired), "timed_out": .int(s.timedOut),
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
                "status": "ok", "service": "broker", "uptime_ms": .int(Clock.monotonicMillis() - routing.started),
                "workers": .int(Int64(routing.workers.count)), "requests": .int(requestsIn), "events": .int(eventsRelayed),
                "late_replies": .int(routing.lateReplies),
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


// MARK: Spans

extension Broker {
    /// A worker's answer went to the client at `route`: the span of the
    /// request it answers ends, with the answer's status. The header is read
    /// only for a small answer (a worker's error is small) or one whose
    /// request the routing did not name (an answer given later). `ended`
    /// is taken before the answer is sent: once sent, the client may log
    /// its own span's end before this process runs again, and a child span
    /// must end inside its parent's.
    func answered(_ route: [UInt8], _ bytes: [UInt8], body: Frame? = nil, corr: String?, ended: Int64) {
        guard !openSpans.isEmpty else { return }
        var corr = corr
        var status = 200
        // An error's header is read (errors are small and rare); a reply's
        // only when the routing did not say whose it is. The search for
        // the error kind's bytes is memmem's: it may find them inside a
        // reply's body, and then the header read says it is a reply.
        if corr == nil || Broker.mayBeError(bytes), let header = try? Envelope.decodeHeader(bytes, maxBytes: .max) {
            if corr == nil { corr = header.corr }
            if header.kind == .error {
                let errorBody = body.flatMap { try? JSON.parse($0.bytes) } ?? (try? JSON.parse(bytes))?["body"]
                status = errorBody?["status"]?.int.map { Int($0) } ?? 500
            }
        }
        guard let corr else { return }
        closeSpan(route, corr: corr, status: status, ended: ended)
    }

    /// Logs the span line of the request `corr` from `route`, once, as
    /// ended at `ended` (monotonic µs, read before the answer was sent).
    func closeSpan(_ route: [UInt8], corr: String, status: Int, ended: Int64) {
        guard let open = openSpans.removeValue(forKey: SpanKey(route: route, id: corr)) else { return }
        Broker.logSpan(open, id: corr, status: status, micros: ended - open.started, src: name)
    }

    static func logSpan(_ open: OpenSpan, id: String, status: Int, micros: Int64, src: String) {
        Log.span(src: src, trace: open.span.traceID, span: open.span.spanID, parent: open.span.parentID, type: open.type, id: id,
                 status: status, startMicros: open.startMicros, micros: micros)
    }

    /// Spans whose answer never came by (a worker that took a request to
    /// answer later and died): logged with status 0 and dropped.
    func sweepSpans() {
        let now = Clock.monotonicMicros()
        let limit = settings.maxDeadlineMs * 2 * 1000
        for (key, open) in openSpans where now - open.started > limit {
            openSpans[key] = nil
            Broker.logSpan(open, id: key.id, status: 0, micros: now - open.started, src: name)
        }
    }
}
