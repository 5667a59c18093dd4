import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// The analytics service: its own store of facts, fed by the other
/// services' events (pub/sub with catch-up, at most once each) and by the
/// raw telemetry it pulls from the collector; the business questions, each
/// one SQL query in `questions/<id>.sql`, answered over ZeroMQ
/// (`analytics.summary`, `analytics.question`, admins only) and over HTTP
/// with a dashboard. Answers are aggregates: no user id leaves.
public enum Analytics: ServiceDomain {
    public static let name = "analytics"
    public static let summary = "the business questions over the services' events and the telemetry, with a dashboard"

    public static let options: [(String, String, String?)] = [
        ("http", "dashboard address HOST:PORT, or off (default: $QUAD_ANALYTICS_HTTP, else 127.0.0.1:7780)", nil),
        ("admin-token", "token the dashboard asks for (default: $QUAD_ADMIN_TOKEN, else one kept in $QUAD_HOME/keys/analytics.token)", nil),
        ("refresh-ms", "how often the dashboard's answers are recomputed when facts changed", "5000"),
        ("utc-offset-minutes", "campus time zone, for the day, week and hour the questions group by", "-300"),
    ]

    public static var migrations: [Migration] { Facts.migrations }

    /// The questions, loaded once per process.
    static let shipped: Result<[Question], Error> = Result { try Question.bundled() }

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let instance = worker.handlers.instance
        guard let offset = Int64(options["utc-offset-minutes"] ?? "-300"), (-720...840).contains(offset) else {
            Flags.usageError("--utc-offset-minutes must be an integer from -720 to 840", usage: "Run quad-analytics --help for the options.\n")
        }
        guard let refresh = Int64(options["refresh-ms"] ?? "5000"), refresh >= 100 else {
            Flags.usageError("--refresh-ms must be an integer of at least 100", usage: "Run quad-analytics --help for the options.\n")
        }
        let env = ProcessInfo.processInfo.environment
        let address = options["http"] ?? env["QUAD_ANALYTICS_HTTP"].flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1:7780"
        if address != "off" {
            do { _ = try DashboardServer.parse(address) } catch { Flags.usageError(error.message, usage: "Run quad-analytics --help for the options.\n") }
        }
        let clock = CampusClock(offsetMinutes: offset)
        let questions = try shipped.get()
        let state = State()
        register(worker.handlers, db: db, questions: questions)

        let pull = try RawPull(db: db, endpoint: worker.endpoints.internal, name: instance, clock: clock)
        try worker.subscribe(to: Facts.sources, wants: { Facts.events.contains($0.type) }) { event in
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
        let server = DashboardServer(snapshot: snapshot, token: token)
        do {
            let port = try server.start(address)
            state.server = server
            let host = address.split(separator: ":").first.map(String.init) ?? "127.0.0.1"
            Log.line(["src": instance, "level": "info", "msg": "dashboard on http://\(host):\(port)/dashboard/ (admin token from \(source))",
                      "http": "http://\(host):\(port)", "token_source": source])
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
        h.query("analytics.summary") { req in
            try req.requireAdmin()
            let (from, to) = try period(req.body, allowed: ["from", "to"], type: "analytics.summary")
            return try summarize(db, questions: questions, from: from, to: to)
        }
        h.query("analytics.question") { req in
            try req.requireAdmin()
            let (from, to) = try period(req.body, allowed: ["id", "from", "to"], type: "analytics.question")
            guard let v = req.body["id"] else { throw QuadError.badRequest("body.id is required: one of \(questions.map(\.id).joined(separator: ", "))") }
            guard let id = v.string else { throw QuadError.badRequest("body.id must be a string, got \(v.typeName)") }
            guard let q = questions.first(where: { $0.id == id }) else {
                throw QuadError.notFound("no question '\(id)': expected one of \(questions.map(\.id).joined(separator: ", "))")
            }
            var answer = try q.answer(db, from: from, to: to).json
            if case .object(var f) = answer {
                f["from"] = .int(from)
                f["to"] = .int(to)
                answer = .object(f)
            }
            return answer
        }
    }

    /// `from` (inclusive) and `to` (exclusive), ms since 1970; the whole
    /// history by default.
    static func period(_ body: JSON, allowed: Set<String>, type: String) throws(QuadError) -> (Int64, Int64) {
        guard case .object(let f) = body else { throw .badRequest("the body must be an object") }
        if let extra = f.keys.sorted().first(where: { !allowed.contains($0) }) { throw .badRequest("body.\(extra) is not a field of \(type)") }
        func ms(_ key: String, _ d: Int64) throws(QuadError) -> Int64 {
            guard let v = f[key], !v.isNull else { return d }
            guard let i = v.int, !v.isBoolean, i >= 0 else { throw .badRequest("body.\(key) must be an integer >= 0 (ms since 1970), got \(v.text)") }
            return i
        }
        let from = try ms("from", 0), to = try ms("to", Int64.max)
        guard from < to else { throw .badRequest("body.from must be before body.to") }
        return (from, to)
    }

    /// Every question's answer for `[from, to)`, and how many facts they read.
    public static func summarize(_ db: Database, questions: [Question], from: Int64, to: Int64) throws -> JSON {
        var answers: [JSON] = []
        for q in questions { answers.append(try q.answer(db, from: from, to: to).json) }
        var facts: [String: JSON] = [:]
        for table in ["tel_events", "orders", "favorites", "holds", "occupancy", "tel_batches"] {
            facts[table] = .int(try db.queryOne("SELECT COUNT(*) AS n FROM \(table)")?.int("n") ?? 0)
        }
        return [
            "generated_at": .int(Int64(Clock.nowMillis())), "from": .int(from), "to": .int(to),
            "questions": .array(answers), "facts": .object(facts),
        ]
    }
}
