import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The analytics service: its own store of facts, fed by the other
/// services' events (pub/sub with catch-up, at most once each) and by the
/// raw telemetry it pulls from the collector; the business questions, each
/// one SQL query in `questions/<id>.sql`, answered over ZeroMQ
/// (`analytics.summary`, `analytics.question`, admins only) and over HTTP
/// with a dashboard; the Type 2 answers go back to drivers
/// (`analytics.driver`, any signed-in user). Answers are aggregates: no
/// user id leaves.
public enum Analytics: ServiceDomain {
    public static let name = "analytics"
    public static let summary = "the business questions over the services' events and the telemetry, with a dashboard"

    public static let options: [(String, String, String?)] = [
        ("http", "dashboard address HOST:PORT, or off (default: $QUAD_ANALYTICS_HTTP, else 127.0.0.1:7780)", nil),
        ("admin-token", "token scripts send as Authorization: Bearer (default: $QUAD_ADMIN_TOKEN, else one kept in $QUAD_HOME/keys/analytics.token); people sign in at /signin", nil),
        ("http-max-connections", "open dashboard connections in all (http_max_connections)", "64"),
        ("http-max-connections-per-address", "open dashboard connections from one client address (http_max_connections_per_address)", "8"),
        ("http-connection-timeout-seconds", "seconds a dashboard connection may stay idle (http_connection_timeout_seconds)", "10"),
        ("http-max-signins", "sign-ins checked with accounts at once (http_max_signins)", "4"),
        ("http-max-sessions", "dashboard sessions kept; past it the one ending soonest goes (http_max_sessions)", "256"),
        ("http-session-seconds", "longest dashboard session, also ended by its token's end (http_session_seconds)", "3600"),
        ("http-tls-cert", "PEM certificate file: serve the dashboard over HTTPS (cookies then Secure); with --http-tls-key", nil),
        ("http-tls-key", "PEM private key file for --http-tls-cert", nil),
        ("refresh-ms", "how often the dashboard's answers are recomputed when facts changed", "5000"),
        ("utc-offset-minutes", "campus time zone, for the day, week and hour the questions group by", "-300"),
    ]

    public static var migrations: [Migration] { Facts.migrations }

    /// The questions, loaded once per process.
    static let shipped: Result<[Question], Error> = Result { try Question.bundled() }

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let instance = worker.handlers.instance
        /// A bad setting stops the worker with a message naming the flag (libraries never exit).
        func integer(_ name: String, _ d: Int64, _ range: ClosedRange<Int64>) throws -> Int64 {
            guard let text = options[name] else { return d }
            guard let v = Int64(text), range.contains(v) else {
                throw QuadError.badRequest("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
            }
            return v
        }
        let offset = try integer("utc-offset-minutes", -300, -720...840)
        let refresh = try integer("refresh-ms", 5000, 100...86_400_000)
        var limits = DashboardServer.Limits()
        limits.connections = Int(try integer("http-max-connections", Int64(limits.connections), 1...10_000))
        limits.connectionsPerAddress = Int(try integer("http-max-connections-per-address", Int64(limits.connectionsPerAddress), 1...10_000))
        limits.timeoutSeconds = Int(try integer("http-connection-timeout-seconds", Int64(limits.timeoutSeconds), 1...3600))
        limits.signInsAtOnce = Int(try integer("http-max-signins", Int64(limits.signInsAtOnce), 1...1000))
        limits.sessions = Int(try integer("http-max-sessions", Int64(limits.sessions), 1...1_000_000))
        limits.sessionSeconds = Int(try integer("http-session-seconds", Int64(limits.sessionSeconds), 60...604_800))
        var tls: (key: String, cert: String)?
        switch (options["http-tls-key"], options["http-tls-cert"]) {
        case (nil, nil): tls = nil
        case let (key?, cert?):
            do {
                tls = (try String(contentsOfFile: key, encoding: .utf8), try String(contentsOfFile: cert, encoding: .utf8))
            } catch { throw QuadError.badRequest("--http-tls-key/--http-tls-cert: cannot read \(key) or \(cert): \(error)") }
        default: throw QuadError.badRequest("--http-tls-cert and --http-tls-key go together")
        }
        let env = ProcessInfo.processInfo.environment
        let address = options["http"] ?? env["QUAD_ANALYTICS_HTTP"].flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1:7780"
        if address != "off" { _ = try DashboardServer.parse(address) }
        let clock = CampusClock(offsetMinutes: offset)
        let questions = try shipped.get()
        let state = State()
        register(worker.handlers, db: db, questions: questions)

        let revoked = Contract.Accounts.sessionRevoked.type
        let pull = RawPull(db: db, name: instance, clock: clock, ask: { request, timeoutMs, done in
            worker.send(request, timeoutMs: timeoutMs, attempts: 1, done)
        })
        try worker.subscribe(to: Facts.sources, wants: { Facts.events.contains($0.type) || $0.type == revoked }) { event in
            if event.type == revoked {
                // Not a fact: a dashboard session ends with its token.
                guard let r = try? Contract.Accounts.Revocation(json: event.body) else { return }
                if let ended = state.server?.revoke(user: r.user, tokenID: r.jti, issuedBefore: r.beforeMs), ended > 0 {
                    Log.info(instance, "\(ended) dashboard session(s) of \(r.user) ended: their token was revoked")
                }
                return
            }
            try Facts.apply(db, event, clock: clock)
            state.changed = true
            if event.type == "telemetry.batch" { pull.wake = true }
        }
        worker.every(50) {
            if pull.tick() > 0 { state.changed = true }
        }

        guard address != "off" else {
            Log.info(instance, "dashboard off (--http off)")
            return
        }
        let snapshot = DashboardSnapshot()
        let refreshSnapshot = {
            let summary = try summarize(db, questions: questions, from: 0, to: Int64.max)
            snapshot.update(summary: summary)
            state.changed = false
        }
        try refreshSnapshot()
        worker.every(refresh) { if state.changed { try refreshSnapshot() } }
        let (token, source) = try AdminToken.resolve(option: options["admin-token"])
        let server = DashboardServer(snapshot: snapshot, token: token,
                                     signIn: AccountsSignIn.through(endpoint: worker.endpoints.internal, source: instance), limits: limits, tls: tls, name: instance)
        do {
            let port = try server.start(address)
            state.server = server
            let host = address.split(separator: ":").first.map(String.init) ?? "127.0.0.1"
            let scheme = tls == nil ? "http" : "https"
            Log.line(["src": instance, "level": "info",
                      "msg": "dashboard on \(scheme)://\(host):\(port)/dashboard/ (sign in at /signin; admin token for scripts from \(source))",
                      "http": "\(scheme)://\(host):\(port)", "token_source": source])
        } catch {
            // A second worker on one host finds the port taken: it still
            // serves the questions over ZeroMQ; the first serves the page.
            Log.error(instance, "dashboard not served: \(error)")
        }
    }

    /// What the worker's timers and feeds share.
    final class State {
        var changed = true
        var server: DashboardServer?
    }

    /// Registers the handlers; split from ``install`` so tests drive them without a broker.
    public static func register(_ h: Handlers, db: Database, questions: [Question]) {
        typealias C = Contract.Analytics
        h.query(C.summary) { req, body in
            try req.requireAdmin()
            let (from, to) = try period(from: body.from, to: body.to)
            return try summary(db, questions: questions, from: from, to: to)
        }
        h.query(C.question) { req, body in
            try req.requireAdmin()
            let (from, to) = try period(from: body.from, to: body.to)
            guard let q = questions.first(where: { $0.id == body.id }) else {
                throw QuadError.notFound("no question '\(body.id)': expected one of \(questions.map(\.id).joined(separator: ", "))")
            }
            var answer = try q.answer(db, from: from, to: to).json
            if case .object(var f) = answer {
                f["from"] = .int(from)
                f["to"] = .int(to)
                answer = .object(f)
            }
            return JSONBody(answer)
        }
        h.query(C.driver) { req, body in
            _ = try req.requireUser()
            let to = body.to ?? Int64.max
            let from = body.from ?? max(0, min(to, Int64(Clock.nowMillis())) - driverWindowMs)
            guard from < to else { throw QuadError.badRequest("body.from must be before body.to") }
            return try driverAnswers(db, questions: questions, from: from, to: to)
        }
    }

    /// The period `analytics.driver` answers for by default: the last 30 days.
    static let driverWindowMs: Int64 = 30 * 86_400_000

    /// The Type 2 answers, the ones that go back to the driver. Each is an
    /// aggregate over the whole campus (levels, lots, hours), the same as
    /// its dashboard card: the caller's id is not even read.
    static func driverAnswers(_ db: Database, questions: [Question], from: Int64, to: Int64) throws -> Contract.Analytics.Driver.Reply {
        let answers = try questions.filter { $0.app == "ParkWise" && $0.type == 2 }.map { try $0.answer(db, from: from, to: to).json }
        return .init(generatedAt: Int64(Clock.nowMillis()), from: from, to: to, answers: answers)
    }

    /// `from` (inclusive) and `to` (exclusive), ms since 1970; the whole
    /// history by default. The contract checked each bound; their order is checked here.
    static func period(from: Int64?, to: Int64?) throws(QuadError) -> (Int64, Int64) {
        let from = from ?? 0, to = to ?? Int64.max
        guard from < to else { throw .badRequest("body.from must be before body.to") }
        return (from, to)
    }

    /// Every question's answer for `[from, to)`, and how many facts they read.
    public static func summarize(_ db: Database, questions: [Question], from: Int64, to: Int64) throws -> JSON {
        try summary(db, questions: questions, from: from, to: to).json
    }

    static func summary(_ db: Database, questions: [Question], from: Int64, to: Int64) throws -> Contract.Analytics.Summary.Reply {
        var answers: [JSON] = []
        for q in questions { answers.append(try q.answer(db, from: from, to: to).json) }
        var facts: [String: Int64] = [:]
        for table in ["tel_events", "orders", "favorites", "holds", "occupancy", "tel_batches", "listings"] {
            facts[table] = try db.queryOne("SELECT COUNT(*) AS n FROM \(table)")?.int("n") ?? 0
        }
        return .init(generatedAt: Int64(Clock.nowMillis()), from: from, to: to, questions: answers, facts: facts)
    }
}
