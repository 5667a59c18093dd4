import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// `quad-telemetry bench`: ingest throughput on this machine, through the
/// service's own handler (validation, idempotency record, outbox, one
/// transaction per batch), next to a plain batched INSERT of the same rows
/// into the same store. Prints one JSON line per measure.
extension Telemetry {
    public static func benchCommand(_ arguments: [String]) -> Int32 {
        var flags = Flags(program: "quad-telemetry bench",
                          summary: "quad-telemetry bench: telemetry.ingest throughput against a plain batched INSERT in the same store")
        flags.option("db", "SQLite file (made fresh) or postgres:// URL (a schema of its own is made)", default: NSTemporaryDirectory() + "quad-telemetry-bench-\(getpid()).db")
        flags.option("events", "events to ingest", default: "100000")
        flags.option("batch", "events per batch", default: "500")
        let total: Int, size: Int
        do throws(UsageError) {
            try flags.parse(arguments)
            (total, size) = (try flags.int("events"), try flags.int("batch"))
            guard total > 0, (1...maxBatchEvents).contains(size) else { throw UsageError("--events must be > 0 and --batch 1 to \(maxBatchEvents)", usage: flags.usage) }
        } catch { return error.report() }
        do {
            var location = flags["db"]!
            if location.contains("://") {
                let schema = "bench_\(UInt32.random(in: 0...UInt32.max))"
                try openDatabase(location).executeScript("CREATE SCHEMA \(schema)")
                location += (location.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)"
            } else {
                try? FileManager.default.removeItem(atPath: location)
            }
            let db = try openDatabase(location)
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            try Migrations.apply(db, migrations, scope: name)
            try db.executeScript("CREATE TABLE plain (id TEXT PRIMARY KEY, phone TEXT NOT NULL, user_id TEXT, session TEXT NOT NULL, name TEXT NOT NULL, ts BIGINT NOT NULL, offline INTEGER NOT NULL, props TEXT NOT NULL)")
            let handlers = Handlers(service: name, instance: "telemetry/bench", db: db)
            register(handlers, db: db)

            let start = UInt64(Clock.nowMillis())
            let events: [JSON] = (0..<total).map { k in
                let name = ["view.opened", "spot.search", "action.synced"][k % 3]
                let props: JSON = name == "view.opened" ? ["view": "home"] : name == "spot.search" ? ["lot": "ML"]
                    : ["action": "reservations.checkin", "waited_ms": .int(Int64(k % 90_000)), "offline": .bool(k % 2 == 0)]
                return [
                    "id": .string(MessageID.make(now: start + UInt64(k / 50))), "phone": .string("ph-\(k % 300)"), "user": .string("u-\(k % 250)"),
                    "session": .string("s-\(k / 40)"), "name": .string(name), "ts": .int(Int64(start) + Int64(k)), "offline": .bool(k % 2 == 0),
                    "props": props,
                ]
            }
            let batches = stride(from: 0, to: total, by: size).map { Array(events[$0..<min(total, $0 + size)]) }
            let store = location.contains("://") ? "postgres" : "sqlite"

            func measure(_ what: String, _ body: () throws -> Void) rethrows {
                let t0 = Clock.monotonicMicros()
                try body()
                let s = Double(Clock.monotonicMicros() - t0) / 1e6
                print(JSON.object(["store": .string(store), "measure": .string(what), "events": .int(Int64(total)), "batch": .int(Int64(size)),
                                   "seconds": .double((s * 1000).rounded() / 1000), "events_per_s": .int(Int64(Double(total) / s))]).text)
            }
            try measure("plain batched INSERT, one transaction per batch") {
                for b in batches {
                    try db.transaction {
                        var params: [SQLValue] = []
                        var rows: [String] = []
                        for e in b {
                            let p = params.count
                            rows.append("(" + (1...8).map { "$\(p + $0)" }.joined(separator: ", ") + ")")
                            params += [.text(e["id"]!.string!), .text(e["phone"]!.string!), .of(e["user"]?.string), .text(e["session"]!.string!),
                                       .text(e["name"]!.string!), .int(e["ts"]!.int!), .of(e["offline"]!.bool!), .text(e["props"]!.text)]
                        }
                        try db.execute("INSERT INTO plain (id, phone, user_id, session, name, ts, offline, props) VALUES \(rows.joined(separator: ", "))", params)
                    }
                }
            }
            for (what, label) in [("telemetry.ingest, new events", "ingest"), ("telemetry.ingest, the same events again (all duplicates)", "again")] {
                var counted = 0
                try measure(what) {
                    for b in batches {
                        let reply = handlers.handle(Envelope.request("telemetry.ingest", body: ["events": .array(b)]))
                        if let error = reply.quadError { throw error }
                        counted += Int(reply.body[label == "ingest" ? "accepted" : "duplicate"]?.int ?? 0)
                    }
                }
                guard counted == total else { throw QuadError.internal("\(what): counted \(counted) of \(total)") }
            }
            db.close()
            return 0
        } catch {
            FileHandle.standardError.write(Data("quad-telemetry bench: \(error)\n".utf8))
            return 1
        }
    }
}
