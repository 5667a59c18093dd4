import Foundation
import QuadContract
import QuadMessaging
import QuadMetrics
import QuadStore
import QuadWire

/// One worker of a service: a single poll loop that registers with the
/// broker, answers requests one at a time with its ``Handlers``, exchanges
/// heartbeats, relays the outbox to the event bus, runs the service's
/// timers, and on SIGTERM leaves cleanly: DISCONNECT, answer what the broker
/// already sent until it confirms with its own DISCONNECT, relay what is
/// left, exit 0. It speaks MDP/0.2 (``Majordomo``).
///
/// With several brokers (`--backend a,b`: issue 14, every broker serving)
/// the worker is a worker of each: one ``BrokerLink`` per broker, each with
/// its own DEALER, READY, heartbeats and expiry, so a broker that dies is
/// connected to again on its own while the others go on handing out
/// requests. A reply goes back on the link its request came in on. One
/// DEALER connected to every backend would not do: it deals sends
/// round-robin, and a reply must reach the broker that holds the client's
/// route. Events go out on one PUB connected to every broker's events-in
/// (PUB copies each event to every connected broker).
public final class Worker {
    /// One broker this worker serves.
    final class BrokerLink {
        let endpoint: String
        var socket: Socket
        /// When the broker is taken for dead without a word from it.
        var expiry: Int64 = 0
        var reconnects = 0
        /// The broker spoke since the last (re)connect: it knows this worker.
        var heard = false
        /// The broker confirmed our DISCONNECT while leaving.
        var confirmed = false

        init(endpoint: String, socket: Socket) {
            self.endpoint = endpoint
            self.socket = socket
        }
    }

    public let handlers: Handlers
    public let endpoints: Endpoints
    let context: ZMQContext
    /// The worker's one loop: the broker socket, the feeds', the calls' and
    /// the late replies' sockets, and the timers beside them. Scalable
    /// (epoll), as the broker's: a turn looks only at the sockets that are
    /// ready or were used, not at every one.
    let reactor = Reactor(now: Clock.monotonicMillis, scalable: true)
    var timers: Timers { reactor.timers }
    /// Set by ``leave()``: the periodic timers (heartbeats, sweeps, catch-ups)
    /// stop, the answers owed still come in.
    var leaving = false
    /// The heap's free pages go back once the worker is quiet after work.
    var idleTrim = IdleTrim()
    /// The brokers of `endpoints.backend` (a comma-separated list), in order.
    var brokers: [BrokerLink] = []
    var publisher: Socket?
    var heartbeatMs: Int64
    public var maxMessageBytes = Envelope.defaultMaxBytes
    /// Times a silent or forgetful broker was connected to again, all brokers.
    var reconnects: Int { brokers.reduce(0) { $0 + $1.reconnects } }
    var feeds: [(EventFeed, Socket)] = []
    /// Calls to other services waiting on the loop (``send(_:timeoutMs:attempts:_:)``),
    /// made on first use.
    var calls: ServiceCalls?
    /// Where `/metrics` is served (`--metrics HOST:PORT`); nil: nowhere.
    public var metricsAddress: String?
    var metricsServer: MetricsServer?
    /// Answers owed to clients whose handler returned before giving them.
    var owed = 0
    /// Most calls to other services waiting at once (`max_calls_in_flight`).
    public var maxCallsInFlight = ServiceCalls.defaultMaxInFlight

    /// Events per relay transaction, and pages per relay call.
    static let relayPage = 1000
    static let relayPages = 10
    /// A relay is due on the loop's next turn (a backlog is going out).
    var relayAgain = false
    /// What the store keeps, and how the worker prunes the rest.
    public var retention = Retention.defaults
    var pruneAgain = false
    /// Rows pruned since start (idempotency records, events).
    public private(set) var pruned: (records: Int, events: Int) = (0, 0)

    public init(handlers: Handlers, endpoints: Endpoints, context: ZMQContext = ZMQContext(),
                heartbeatMs: Int64 = WorkerProtocol.heartbeatMs) throws {
        self.handlers = handlers
        self.endpoints = endpoints
        self.context = context
        self.heartbeatMs = heartbeatMs
        let backends = Endpoints.list(endpoints.backend)
        guard !backends.isEmpty else { throw QuadError.badRequest("no broker backend endpoint (--backend, QUAD_BACKEND)") }
        for endpoint in backends {
            brokers.append(BrokerLink(endpoint: endpoint, socket: try context.socket(.dealer)))
        }
        if handlers.db != nil {
            let pub = try context.socket(.pub)
            try pub.setLinger(2000)
            // A page burst must not overflow the pipe to the broker: PUB
            // drops what is over the mark (subscribers would catch up, late).
            try pub.setSendHWM(Int32(Worker.relayPage * Worker.relayPages * 2))
            try InternalCurve.secure(pub)
            for endpoint in Endpoints.list(endpoints.eventsIn) { try pub.connect(endpoint) }
            publisher = pub
        }
    }

    /// Runs `action` every `ms` on the worker's loop (expiry sweeps,
    /// simulators). Errors are logged, never fatal.
    public func every(_ ms: Int64, _ action: @escaping () throws -> Void) {
        timers.every(ms) { [handlers] in
            if self.leaving { return }
            let started = Clock.monotonicMicros()
            do { try action() } catch { Log.error(handlers.instance, "timer: \(error)") }
            handlers.metrics.ran("timer every \(ms) ms", micros: Clock.monotonicMicros() - started, src: handlers.instance)
            self.relayOutbox()
        }
    }

    /// Connects a DEALER that asks other services (calls, catch-ups) to
    /// every broker's internal frontend in `list`. With more than one, the
    /// socket is ZMQ_IMMEDIATE: DEALER deals its sends round-robin, and
    /// without it a broker that died would keep its share queued on a
    /// connection that is not there; with it, sends go to live brokers
    /// only, and a retry after a timeout finds another one.
    func connectToEvery(_ socket: Socket, _ list: String) throws {
        let all = Endpoints.list(list)
        if all.count > 1 { try socket.setImmediate(true) }
        for endpoint in all { try socket.connect(endpoint) }
    }

    /// Connects to every broker (at start).
    func connect() throws {
        for link in brokers { try connect(link) }
    }

    /// Connects to one broker with a fresh socket and says READY.
    func connect(_ link: BrokerLink) throws {
        reactor.unregister(link.socket)
        link.socket = try context.socket(.dealer)
        let socket = link.socket
        reactor.register(socket) { [unowned self, unowned link] _ in
            if !self.receive(link, leaving: self.leaving) { link.confirmed = true }
        }
        try socket.setMaxMessageSize(Int64(maxMessageBytes) + 65536)
        // Never blocks on the broker: a send with no connection to queue on
        // (a broker that refused the CURVE handshake) is dropped, and the
        // heartbeat's expiry connects again; nothing waits at exit either.
        try socket.setLinger(1000)
        try InternalCurve.secure(socket)
        try socket.connect(link.endpoint)
        let info: JSON = ["instance": .string(handlers.instance), "pid": .int(Int64(getpid()))]
        try? socket.send(Majordomo.frames(.ready(service: Array(handlers.service.utf8), info: info.encoded())), dontWait: true)
        link.expiry = Clock.monotonicMillis() + heartbeatMs * WorkerProtocol.liveness
        link.heard = false
    }

    /// The gauges and the counters kept elsewhere, copied into the
    /// metrics registry once a second while `/metrics` is served.
    func updateGauges() {
        let m = handlers.metrics
        let registry = m.registry
        let service = handlers.service
        registry.set("quad_uptime_seconds", ["service": service], Double(Clock.monotonicMillis() - m.started) / 1000)
        registry.set("quad_calls_in_flight", ["service": service], Double(calls?.pending.count ?? 0))
        registry.set("quad_broker_reconnects_total", ["service": service], Double(reconnects))
        if let db = handlers.db {
            if let pg = db as? PostgresDatabase { registry.set("quad_store_reconnects_total", ["service": service], Double(pg.sessions - 1)) }
            if let n = try? Outbox.unpublishedCount(db) { registry.set("quad_outbox_backlog", ["service": service], Double(n)) }
        }
        for (feed, _) in feeds {
            for source in feed.sources {
                registry.set("quad_event_lag", ["service": service, "source": source], Double(feed.lag(source)))
            }
            registry.set("quad_events_applied_total", ["service": service], Double(feed.applied))
            registry.set("quad_events_missed_total", ["service": service], Double(feed.missed))
        }
    }

    /// What comes before the topic of an event phones may hear: byte 1, its
    /// topic on the broker's updates socket (``Audience``) and byte 0;
    /// nothing for the events of Quad's services only. The broker
    /// subscribes to byte 1 and strips the head before its internal
    /// subscribers see the topic.
    static func publicTopic(_ event: StoredEvent) -> [UInt8] {
        guard let declared = Contract.event(event.type), declared.audience != .services,
              let topic = declared.publicTopic(event.body) else { return [] }
        return [1] + Array(topic.utf8) + [0]
    }

    /// Publishes what the outbox holds now; runs after each mutation and on
    /// a timer. A backlog goes out page after page, up to `relayPages`
    /// pages a call; a call that ends on a full page runs again on the
    /// loop's next turn, so requests are served in between.
    public func relayOutbox() {
        guard let db = handlers.db, let publisher else { return }
        do {
            var full = true
            let prefix = Array(EventFeed.topic(handlers.service).utf8)
            for _ in 0..<Worker.relayPages where full {
                let sent = try Outbox.relay(db, limit: Worker.relayPage) { event in
                    try publisher.send([Worker.publicTopic(event) + prefix + Array(event.type.utf8), event.bytes(src: handlers.service)])
                }
                full = sent == Worker.relayPage
            }
            if full && !relayAgain {
                relayAgain = true
                timers.after(0) { [unowned self] in
                    self.relayAgain = false
                    self.relayOutbox()
                }
            }
        } catch {
            Log.error(handlers.instance, "outbox relay: \(error)")
        }
    }

    /// Deletes one batch of idempotency records past `idempotency_retention_ms`
    /// and one of published events past `outbox_retention_ms` (or beyond
    /// `outbox_max_rows`), each in its own short transaction; a full batch
    /// runs again on the loop's next turn, so requests are served in between.
    public func prune() {
        guard let db = handlers.db else { return }
        let now = Int64(Clock.nowMillis())
        do {
            let records = try Idempotency.prune(db, before: now - retention.idempotencyMs, limit: retention.batch)
            let events = try Outbox.prune(db, before: now - retention.outboxMs, maxRows: retention.outboxMaxRows, limit: retention.batch)
            pruned.records += records
            pruned.events += events
            if (records == retention.batch || events == retention.batch) && !pruneAgain {
                pruneAgain = true
                timers.after(0) { [unowned self] in
                    self.pruneAgain = false
                    self.prune()
                }
            }
        } catch {
            Log.error(handlers.instance, "pruning: \(error)")
        }
    }

    /// Runs until SIGTERM or SIGINT; returns the exit code.
    public func run() -> Int32 {
        Shutdown.install()
        do { try connect() } catch {
            Log.error(handlers.instance, "cannot connect to broker at \(endpoints.backend): \(error)")
            return 1
        }
        Log.info(handlers.instance, "serving \(handlers.service) via \(brokers.map(\.endpoint).joined(separator: ", "))")
        if let address = metricsAddress {
            let server = MetricsServer(registry: handlers.metrics.registry)
            let health = Health()
            server.health = health
            do {
                try server.start(address)
                metricsServer = server
                handlers.metrics.exported = true
                Log.info(handlers.instance, "metrics at \(server.url)")
            } catch {
                Log.error(handlers.instance, "\(error)")
                return 1
            }
            updateGauges()
            timers.every(1000) { [unowned self] in self.updateGauges() }
            // /healthz: the loop turns; /readyz: the store is open (it is,
            // once a worker runs) and a broker answered since we said READY.
            let checkHealth = { [unowned self] in
                health.turned()
                if self.leaving {
                    health.notReady("shutting down")
                } else if self.brokers.contains(where: { $0.heard && Clock.monotonicMillis() <= $0.expiry }) {
                    health.ready()
                } else {
                    health.notReady("registered with no broker yet (\(self.brokers.map(\.endpoint).joined(separator: ", ")))")
                }
            }
            checkHealth()
            timers.every(500, checkHealth)
        }
        timers.every(heartbeatMs) { [unowned self] in
            if self.leaving { return }
            for link in self.brokers {
                try? link.socket.send(Majordomo.frames(.heartbeat), dontWait: true)
                if Clock.monotonicMillis() > link.expiry {
                    link.reconnects += 1
                    Log.info(self.handlers.instance, "broker \(link.endpoint) silent for \(self.heartbeatMs * WorkerProtocol.liveness) ms: reconnecting")
                    try? self.connect(link)
                }
            }
        }
        timers.every(100) { [unowned self] in if !self.leaving { self.relayOutbox() } }
        if handlers.db != nil { timers.every(retention.everyMs) { [unowned self] in if !self.leaving { self.prune() } } }
        // Start-up's garbage (migrations, seeds, the contract's first
        // build) and the store's cache go back before the first request;
        // then after each busy spell, a second or two after its last request.
        releaseMemory()
        timers.every(1000) { [unowned self] in if self.idleTrim.tick() { self.releaseMemory() } }

        do { try reactor.run(timeoutCap: 200, until: { Shutdown.isRequested }) } catch {
            Log.error(handlers.instance, "poll: \(error)")
            return 1
        }
        leave()
        return 0
    }

    /// Handles what is waiting on one broker's socket. Returns false when
    /// `leaving` and that broker confirmed our DISCONNECT with its own:
    /// nothing more comes from it.
    @discardableResult
    func receive(_ link: BrokerLink, leaving: Bool = false) -> Bool {
        // The requests' log lines go out after their replies, in one write.
        Log.hold()
        defer { Log.flush() }
        while let frames = try? link.socket.receive(dontWait: true) {
            link.expiry = Clock.monotonicMillis() + heartbeatMs * WorkerProtocol.liveness
            link.heard = true
            guard let (_, message) = Majordomo.parseWorker(frames[...]) else { continue }
            switch message {
            case let .request(client, bodies):
                // One envelope frame, or a header and a body; a request of
                // another shape still gets an answer (a 400), never silence.
                serve(client: client, bodies: bodies, link: link)
            case .disconnect:
                if leaving { return false }
                // The broker forgot us (it restarted, or we were silent).
                link.reconnects += 1
                Log.info(handlers.instance, "broker \(link.endpoint) does not know this worker (it restarted, or we were silent): READY again")
                try? connect(link)
            default:
                break
            }
        }
        return true
    }

    /// Answers one request that came from `link`'s broker (the first
    /// broker by default), on that broker's socket.
    func serve(client: [UInt8], bytes: [UInt8], link: BrokerLink? = nil) {
        serve(client: client, bodies: [bytes], link: link)
    }

    /// Answers a request whose envelope came in `bodies`: one frame, or its
    /// header and its body (the answer goes back in the same form).
    func serve(client: [UInt8], bodies: [[UInt8]], link: BrokerLink? = nil) {
        let link = link ?? brokers[0]
        idleTrim.note()
        let reply: Reply
        do throws(QuadError) {
            let request: Envelope
            switch bodies.count {
            case 1: request = try Envelope.decode(bodies[0], maxBytes: maxMessageBytes)
            case 2: request = try Envelope.decode(header: bodies[0], body: bodies[1], maxBytes: maxMessageBytes)
            default:
                throw .badRequest("a request's envelope is one frame, or two (header, body), after the empty frame; got \(bodies.count) frames")
            }
            if request.kind == .request, handlers.later[request.type] != nil {
                serveLater(client: client, request: request, link: link)
                return
            }
            reply = handlers.reply(to: request)
        } catch {
            reply = Reply(.error(error, corr: bodies.first.flatMap { Envelope.salvageID($0) }, src: handlers.instance))
        }
        try? link.socket.send(Majordomo.frames(.final(client: client, bodies: reply.frames(split: bodies.count == 2))), dontWait: true)
        // The events of a mutation go out after its reply: the caller does
        // not wait for the relay.
        if handlers.outboxWritten {
            handlers.outboxWritten = false
            relayOutbox()
        }
    }

    /// The store's idle cache, then the heap's free pages, back to the system.
    func releaseMemory() {
        handlers.db?.releaseMemory()
        Memory.releaseFree()
    }

    /// Graceful exit: tell the broker, answer the requests it sent before it
    /// saw that, publish what is left in the outbox.
    func leave() {
        Log.info(handlers.instance, "shutting down: disconnecting from \(brokers.count == 1 ? "broker" : "\(brokers.count) brokers")")
        for link in brokers { try? link.socket.send(Majordomo.frames(.disconnect), dontWait: true) }
        leaving = true
        // The feeds stop here: what they would apply now is caught up by
        // the next start. The broker socket and the calls' stay polled.
        for (feed, sub) in feeds {
            reactor.unregister(sub)
            feed.stopped = true
        }
        let until = Clock.monotonicMillis() + 3000
        // Answers owed (a saga waiting on the catalog) come in meanwhile;
        // what is still open after that is finished by the next worker's
        // recovery, and its client's retry gets the outcome.
        // A broker already taken for dead will not confirm: it is not waited for.
        func confirmed() -> Bool {
            let now = Clock.monotonicMillis()
            return brokers.allSatisfy { $0.confirmed || now > $0.expiry }
        }
        while (!confirmed() || owed > 0) && Clock.monotonicMillis() < until {
            do { try reactor.turn(timeoutCap: 100) } catch { break }
        }
        relayOutbox()
        handlers.db?.close()
        Log.info(handlers.instance, confirmed() ? "drained; exiting" : "broker did not confirm; exiting")
    }
}
