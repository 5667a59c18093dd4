import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// quad-tally: a small counter service that the runtime's tests run as real
/// processes. `tally.add` is a mutation with an event, `tally.get` a query,
/// `tally.slow` holds its worker busy for a while.
enum Tally: ServiceDomain {
    /// QUAD_TALLY_NAME runs it under another service name, so one test can
    /// start a second service that follows the first one's events.
    static var name: String { ProcessInfo.processInfo.environment["QUAD_TALLY_NAME"] ?? "tally" }
    static let summary = "a counter service used to test the broker and the runtime"
    static let options: [(String, String, String?)] = [("mirror", "follow this service's tally.added events into a mirror table", nil)]
    static let migrations = [
        Migration(1, "CREATE TABLE tallies (key TEXT PRIMARY KEY, total BIGINT NOT NULL, adds BIGINT NOT NULL)"),
        Migration(2, "CREATE TABLE applied (seq INTEGER PRIMARY KEY, request TEXT NOT NULL, key TEXT NOT NULL, n BIGINT NOT NULL)"),
        Migration(3, "CREATE TABLE mirror (key TEXT PRIMARY KEY, total BIGINT NOT NULL, events BIGINT NOT NULL)"),
    ]

    /// A test double: its types are not Quad's contract.
    static let isInContract = false

    static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let h = worker.handlers
        let name = Tally.name
        if let source = options["mirror"] {
            try worker.subscribe(to: [source], wants: { $0.type == "tally.added" }) { event in
                guard let key = event.body["key"]?.string, let n = event.body["n"]?.int else { return }
                try db.execute("""
                    INSERT INTO mirror (key, total, events) VALUES ($1, $2, 1)
                    ON CONFLICT (key) DO UPDATE SET total = mirror.total + $2, events = mirror.events + 1
                    """, .text(key), .int(n))
            }
        }
        h.query("\(name).mirror") { req in
            let row = try db.queryOne("SELECT total, events FROM mirror WHERE key = $1", .text(req.body["key"]?.string ?? ""))
            return ["total": .int(row?.int("total") ?? 0), "events": .int(row?.int("events") ?? 0)]
        }
        h.mutation("\(name).add") { req in
            guard let key = req.body["key"]?.string, !key.isEmpty, key.count <= 64 else { throw QuadError.badRequest("body.key must be a string of 1 to 64 characters") }
            guard let n = req.body["n"]?.int, (1...1_000_000).contains(n) else { throw QuadError.badRequest("body.n must be an integer from 1 to 1000000") }
            let row = try db.queryOne("""
                INSERT INTO tallies (key, total, adds) VALUES ($1, $2, 1)
                ON CONFLICT (key) DO UPDATE SET total = tallies.total + $2, adds = tallies.adds + 1
                RETURNING total, adds
                """, .text(key), .int(n))!
            try db.execute("INSERT INTO applied (seq, request, key, n) VALUES ((SELECT COALESCE(MAX(seq), 0) + 1 FROM applied), $1, $2, $3)", .text(req.id), .text(key), .int(n))
            try Outbox.append(db, type: "tally.added", body: ["key": .string(key), "n": .int(n), "total": .int(row.int("total"))])
            return ["key": .string(key), "total": .int(row.int("total")), "adds": .int(row.int("adds")), "by": .string(h.instance)]
        }
        h.query("\(name).get") { req in
            guard let key = req.body["key"]?.string else { throw QuadError.badRequest("body.key is required") }
            let row = try db.queryOne("SELECT total, adds FROM tallies WHERE key = $1", .text(key))
            let applied = try db.query("SELECT request FROM applied WHERE key = $1 ORDER BY seq", .text(key)).map { JSON.string($0.string("request")) }
            return ["key": .string(key), "total": .int(row?.int("total") ?? 0), "adds": .int(row?.int("adds") ?? 0), "applied": .array(applied)]
        }
        h.query("\(name).slow") { req in
            let ms = min(max(req.body["ms"]?.int ?? 100, 0), 10_000)
            usleep(UInt32(ms * 1000))
            return ["slept_ms": .int(ms), "by": .string(h.instance)]
        }
        h.query("\(name).whoami") { _ in ["by": .string(h.instance)] }
        // A call to another service on the worker's loop, answered later:
        // `<to>.add` of the same key and n, under a fresh id.
        h.deferred("\(name).forward") { req, answer in
            guard let to = req.body["to"]?.string, Envelope.isValidType(to) else { throw QuadError.badRequest("body.to must be a service name") }
            let call = Envelope.request("\(to).add", body: ["key": req.body["key"] ?? "", "n": req.body["n"] ?? 1])
            worker.send(call, timeoutMs: 2500, attempts: 3) { result in
                switch result {
                case .success(let reply):
                    if let error = reply.quadError { answer.fail(error) } else { answer.reply(["id": .string(call.id), "by": .string(h.instance)]) }
                case .failure(let error): answer.fail(error)
                }
            }
        }
    }
}

exit(ServiceMain.run(Tally.self))
