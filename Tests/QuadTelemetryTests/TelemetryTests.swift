import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadTelemetry

let pgURL = ProcessInfo.processInfo.environment["QUAD_TEST_PG"]
let stores: [Bool] = pgURL == nil ? [false] : [false, true]

/// A fresh store: a SQLite file, or the test PostgreSQL server in a schema of its own.
func store(postgres: Bool) throws -> Database {
    if postgres {
        let url = try #require(pgURL)
        let schema = "t\(UInt32.random(in: 0...UInt32.max))"
        try PostgresDatabase(url: url).executeScript("CREATE SCHEMA \(schema)")
        return try PostgresDatabase(url: url + "?options=-csearch_path%3D\(schema)")
    }
    let dir = NSTemporaryDirectory() + "quad-telemetry-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return try SQLiteDatabase(path: dir + "/telemetry.db")
}

func telemetry(postgres: Bool = false) throws -> (Handlers, Database) {
    let db = try store(postgres: postgres)
    try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
    try Migrations.apply(db, Telemetry.migrations, scope: "telemetry")
    let h = Handlers(service: "telemetry", instance: "telemetry/test", db: db)
    Telemetry.register(h, db: db)
    return (h, db)
}

extension Handlers {
    func call(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, id: String = MessageID.make()) throws -> JSON {
        var e = Envelope.request(type, body: body, id: id)
        e.user = user
        e.role = role
        let reply = handle(e)
        if let error = reply.quadError { throw error }
        return reply.body
    }
}

/// A valid event; `k` makes its id and time.
func event(_ k: Int, name: String = "view.opened", props: JSON = ["view": "home"], user: JSON = "u-1", offline: Bool = false) -> JSON {
    let hex = String(format: "%012x", k)
    return [
        "id": .string("019ad9a2-0000-7000-8000-\(hex)"), "phone": "ph-1", "user": user, "session": "s-1",
        "name": .string(name), "ts": .int(1_764_583_200_000 + Int64(k)), "offline": .bool(offline), "props": props,
    ]
}

func count(_ db: Database, _ table: String) throws -> Int64 {
    try db.queryOne("SELECT COUNT(*) AS n FROM \(table)")?.int("n") ?? -1
}

let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("protos/examples/telemetry")

@Suite("Telemetry ingest")
struct IngestTests {
    @Test(arguments: stores)
    func storesOnceByIDAndToldDuplicatesFromConflicts(postgres: Bool) throws {
        let (h, db) = try telemetry(postgres: postgres)
        let batch: JSON = .array((0..<10).map { event($0) })
        let first = try h.call("telemetry.ingest", ["events": batch])
        #expect(first == ["accepted": 10, "duplicate": 0, "conflicting": 0, "rejected": []])
        // The same events under a new envelope id: natural duplicates.
        let again = try h.call("telemetry.ingest", ["events": batch])
        #expect(again == ["accepted": 0, "duplicate": 10, "conflicting": 0, "rejected": []])
        // The same envelope id: the stored reply, nothing counted twice.
        let id = MessageID.make()
        let a = try h.call("telemetry.ingest", ["events": [event(10)]], id: id)
        let b = try h.call("telemetry.ingest", ["events": [event(10)]], id: id)
        #expect(a == b && a["accepted"] == 1)
        // Same id, another payload: kept aside, counted, not applied.
        let changed = event(3, props: ["view": "cart"])
        let c = try h.call("telemetry.ingest", ["events": [changed, changed, event(11)]])
        #expect(c == ["accepted": 1, "duplicate": 0, "conflicting": 2, "rejected": []])
        #expect(try count(db, "events") == 12)
        #expect(try db.queryOne("SELECT props FROM events WHERE id = $1", .text("019ad9a2-0000-7000-8000-000000000003"))?.string("props") == #"{"view":"home"}"#)
        let kept = try db.query("SELECT id, times, payload FROM event_conflicts")
        #expect(kept.count == 1 && kept[0].int("times") == 2)
        #expect(try JSON.parse(kept[0].string("payload")) == (try PhoneEvent(changed)).json)
        // Inside one batch: the first delivery wins; a repeat is a duplicate,
        // another payload under the same id a conflict.
        let inside = try h.call("telemetry.ingest", ["events": [event(20), event(20), event(20, props: ["view": "search"])]])
        #expect(inside == ["accepted": 1, "duplicate": 1, "conflicting": 1, "rejected": []])
        let stats = try h.call("telemetry.stats", role: "service")
        #expect(stats["events"] == 13 && stats["conflicts"] == 2)
        #expect(stats["totals"] == ["batches": 5, "accepted": 13, "duplicate": 11, "conflicting": 3, "rejected": 0])
    }

    @Test func anUpperCaseIDIsTheSameEvent() throws {
        let (h, _) = try telemetry()
        var upper = event(1).object!
        upper["id"] = .string("019AD9A2-0000-7000-8000-000000000001")
        _ = try h.call("telemetry.ingest", ["events": [event(1)]])
        #expect(try h.call("telemetry.ingest", ["events": [.object(upper)]])["duplicate"] == 1)
    }

    @Test func rejectsInvalidEventsOneByOneWithTheirReason() throws {
        let (h, db) = try telemetry()
        var noLot = event(2, name: "spot.search", props: ["lot": "ML"]).object!
        noLot["props"] = [:]
        let reply = try h.call("telemetry.ingest", ["events": [
            event(1), .object(noLot), ["phone": "p"], event(3, name: "purchase.made", props: ["order": "o", "screen": "explore", "mode": "buy", "category": "Lab"]),
            event(4, user: .null),
        ]])
        #expect(reply["accepted"] == 2)
        #expect(reply["rejected"] == [
            ["index": 1, "id": "019ad9a2-0000-7000-8000-000000000002", "reason": "props.lot is required for spot.search"],
            ["index": 2, "id": nil, "reason": "id is required"],
            ["index": 3, "id": "019ad9a2-0000-7000-8000-000000000003", "reason": "props.screen must be one of home, favorites, search, cart, got 'explore'"],
        ])
        #expect(try count(db, "events") == 2)
        #expect(try db.queryOne("SELECT user_id FROM events WHERE id = $1", .text("019ad9a2-0000-7000-8000-000000000004"))?["user_id"] == .null)
    }

    @Test func batchLimitsAreNamedInTheError() throws {
        let (h, db) = try telemetry()
        let tooMany: JSON = .array((0..<501).map { event($0) })
        #expect { try h.call("telemetry.ingest", ["events": tooMany]) } throws: { e in
            let q = e as? QuadError
            return q?.status == 413 && q?.message == "body.events has 501 items, over the limit of 500 (max_batch_events)"
        }
        // 500 events of about 2.2 kB: over 1 MiB in all (the size is checked before the events).
        let big: JSON = .array((0..<500).map { k in
            var e = event(k).object!
            e["pad"] = .string(String(repeating: "x", count: 2200))
            return .object(e)
        })
        #expect { try h.call("telemetry.ingest", ["events": big]) } throws: { e in
            let q = e as? QuadError
            return q?.status == 413 && q?.message.hasSuffix("over the limit max_batch_bytes=1048576") == true
        }
        #expect { try h.call("telemetry.ingest", ["events": []]) } throws: { ($0 as? QuadError)?.message == "body.events must have at least 1 item" }
        #expect { try h.call("telemetry.ingest", [:]) } throws: { ($0 as? QuadError)?.message == "body.events is required" }
        #expect(try count(db, "events") == 0)
        // Exactly 500 is fine.
        #expect(try h.call("telemetry.ingest", ["events": .array((0..<500).map { event($0) })])["accepted"] == 500)
    }

    @Test(arguments: stores)
    func publishesASummaryPerBatchWithoutEventsOrUserIDs(postgres: Bool) throws {
        let (h, db) = try telemetry(postgres: postgres)
        _ = try h.call("telemetry.ingest", ["events": [event(1), event(2, name: "spot.search", props: ["lot": "ML"]), event(3, user: "u-secret-77")]])
        _ = try h.call("telemetry.ingest", ["events": [event(1)]])  // all duplicates: no event
        let out = try Outbox.since(db, after: 0, limit: 10)
        #expect(out.count == 1)
        let e = try #require(out.first)
        #expect(e.type == "telemetry.batch")
        #expect(e.body["by_name"] == ["view.opened": 2, "spot.search": 1])
        #expect(e.body["accepted"] == 3 && e.body["events"] == 3)
        #expect(e.body["raw_seq"] == ["first": 1, "last": 3])
        #expect(!e.body.text.contains("u-secret-77") && !e.body.text.contains("u-1"))
    }

    @Test(arguments: stores)
    func rawEventsArePagedInSeqOrderForServicesOnly(postgres: Bool) throws {
        let (h, _) = try telemetry(postgres: postgres)
        for k in 0..<5 { _ = try h.call("telemetry.ingest", ["events": .array((0..<10).map { event(k * 10 + $0) })]) }
        #expect(throws: QuadError.forbidden("")) { try h.call("telemetry.raw.since", [:], user: "u-1", role: "student") }
        var after: Int64 = 0
        var seen: [String] = []
        while true {
            let page = try h.call("telemetry.raw.since", ["after": .int(after), "limit": 7], role: "service")
            let events = page["events"]?.array ?? []
            if events.isEmpty { break }
            let seqs = events.compactMap { $0["seq"]?.int }
            #expect(seqs == seqs.sorted() && seqs.first! > after)
            seen += events.compactMap { $0["id"]?.string }
            after = seqs.last!
            #expect(page["last"] == 50)
        }
        #expect(seen == (0..<50).map { "019ad9a2-0000-7000-8000-" + String(format: "%012x", $0) })
        #expect { try h.call("telemetry.raw.since", ["limit": 2001], role: "service") } throws: {
            ($0 as? QuadError)?.message == "body.limit must be between 1 and 2000 (max_raw_page)"
        }
    }
}

@Suite("Telemetry bodies are their contract types")
struct TelemetryBodyTests {
    typealias C = Contract.Telemetry

    @Test func repliesAndTheBatchEventReadAsTheirTypes() throws {
        let (h, db) = try telemetry()
        let id = MessageID.make()
        let reply = try C.IngestReply(json: try h.call("telemetry.ingest", ["events": [event(1), event(1), ["phone": "p"]]], id: id))
        #expect(reply.accepted == 1 && reply.duplicate == 1 && reply.conflicting == 0)
        #expect(reply.rejected.count == 1 && reply.rejected[0].index == 2 && reply.rejected[0].id == nil && reply.rejected[0].reason == "id is required")
        let out = try #require(try Outbox.since(db, after: 0, limit: 10).first)
        #expect(out.type == C.batch.type)
        let summary = try C.BatchSummary(json: out.body)
        #expect(summary.batch == id && summary.events == 3 && summary.accepted == 1 && summary.rejected == 1)
        #expect(summary.byName == ["view.opened": 1] && summary.rawSeq.first == 1 && summary.rawSeq.last == 1)
        let page = try C.RawPage(json: try h.call("telemetry.raw.since", ["after": 0], role: "service"))
        #expect(page.events.count == 1 && page.last == 1 && page.events[0]["seq"] == 1)
        let stats = try C.Stats(json: try h.call("telemetry.stats", role: "service"))
        #expect(stats.events == 1 && stats.byName == ["view.opened": 1] && stats.totals.batches == 1 && stats.totals.rejected == 1)
    }
}

@Suite("Telemetry is attributed by the token")
struct AttributionTests {
    @Test(arguments: stores)
    func aUserInTheBodyIsNeverTheAttribution(postgres: Bool) throws {
        let (h, db) = try telemetry(postgres: postgres)
        // A student claims another user's id in the body, and a guest does too.
        let claimed: JSON = "u-victim-0001"
        let mine = try h.call("telemetry.ingest", ["events": [event(1, user: claimed), event(2, user: claimed)]], user: "u-student-7", role: "student")
        #expect(mine["accepted"] == 2)
        let anon = try h.call("telemetry.ingest", ["events": [event(3, user: claimed)]])
        #expect(anon["accepted"] == 1)
        // Without a user field at all: still accepted (the field is optional now).
        var bare = event(4).object!
        bare["user"] = nil
        #expect(try h.call("telemetry.ingest", ["events": [.object(bare)]], user: "u-student-7", role: "student")["accepted"] == 1)
        let rows = try db.query("SELECT id, user_id FROM events ORDER BY seq")
        #expect(rows.map { $0.optionalString("user_id") } == ["u-student-7", "u-student-7", nil, "u-student-7"])
        #expect(try count(db, "events") == 4)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM events WHERE user_id = 'u-victim-0001'")?.int("n") == 0)
        // What analytics pulls carries the verified user only.
        let page = try h.call("telemetry.raw.since", [:], role: "service")
        #expect(page["events"]?.array?.map { $0["user"] ?? "missing" } == ["u-student-7", "u-student-7", .null, "u-student-7"])
        #expect(!page.text.contains("u-victim"))
        // The same events resent by the same student are duplicates; the
        // claimed user changing in the body changes nothing.
        let again = try h.call("telemetry.ingest", ["events": [event(1, user: "u-someone-else"), event(2, user: .null)]], user: "u-student-7", role: "student")
        #expect(again == ["accepted": 0, "duplicate": 2, "conflicting": 0, "rejected": []])
        // A body user of the wrong shape is still refused, as before.
        let bad = try h.call("telemetry.ingest", ["events": [event(5, user: 7)]], user: "u-student-7", role: "student")
        #expect(bad["rejected"]?.array?.first?["reason"] == "user must be a string, got number")
    }
}

@Suite("Telemetry's reply records are pruned")
struct PruneTests {
    @Test(arguments: stores)
    func replyAndConflictRecordsPastTheirRetentionAreDeletedAndEventsKept(postgres: Bool) throws {
        let (h, db) = try telemetry(postgres: postgres)
        for k in 0..<30 { _ = try h.call("telemetry.ingest", ["events": [event(k)]]) }
        _ = try h.call("telemetry.ingest", ["events": [event(0, props: ["view": "cart"])]])
        _ = try h.call("telemetry.stats", role: "service")
        #expect(try count(db, "idempotency") == 31)
        #expect(try count(db, "event_conflicts") == 1)
        // Another service's record (if one shared the store) is not touched.
        try db.execute("INSERT INTO idempotency (id, type, reply, created_ms) VALUES ('other', 'orders.place', '{}', 0)")
        let now = Int64(Clock.nowMillis())
        // Nothing is old enough yet.
        #expect(try Telemetry.prune(db, replyRetentionMs: 60_000, conflictRetentionMs: 60_000, now: now) == (replies: 0, conflicts: 0))
        // Records made before the cut go; the events stay.
        try db.execute("UPDATE idempotency SET created_ms = created_ms - 120000 WHERE id IN (SELECT id FROM idempotency WHERE type = 'telemetry.ingest' ORDER BY id LIMIT 20)")
        #expect(try Telemetry.prune(db, replyRetentionMs: 60_000, conflictRetentionMs: 60_000, now: now) == (20, 0))
        #expect(try Telemetry.prune(db, replyRetentionMs: 0, conflictRetentionMs: 0, now: now + 1) == (11, 1))
        #expect(try count(db, "idempotency") == 1)
        #expect(try count(db, "event_conflicts") == 0)
        #expect(try count(db, "events") == 30)
        // A resend of a batch whose record was pruned stores nothing twice.
        #expect(try h.call("telemetry.ingest", ["events": [event(3)]]) == ["accepted": 0, "duplicate": 1, "conflicting": 0, "rejected": []])
    }
}

@Suite("Telemetry event rules")
struct EventRuleTests {
    /// The same files Tests/e2e/test_telemetry_schemas.py checks with jsonschema.
    @Test func theSchemaExamplesAreValidAndTheInvalidCasesAreNot() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: examples.path).filter { $0.hasPrefix("event.schema+") }
        #expect(files.count == PhoneEvent.names.count)
        var names: Set<String> = []
        for f in files {
            let e = try JSON.parse(Array(try Data(contentsOf: examples.appendingPathComponent(f))))
            let parsed = try PhoneEvent(e)
            names.insert(parsed.name)
        }
        #expect(names == Set(PhoneEvent.names.keys))
        // Ingest takes an event's own encoding as its canonical payload when
        // its id is in lower case: the two must be the same text.
        for f in files {
            let e = try JSON.parse(Array(try Data(contentsOf: examples.appendingPathComponent(f))))
            #expect(String(decoding: e.encoded(), as: UTF8.self) == (try PhoneEvent(e)).attributed(to: e["user"]?.string).canonical, "\(f)")
        }
        let withDoubles = try JSON.parse(#"{"id":"019ad9a2-0000-7000-8000-000000000001","phone":"p","user":null,"session":"s","name":"offline.ended","ts":1.7645832e12,"offline":true,"queued_ms":5.0,"props":{"duration_ms":3000.0}}"#)
        #expect(String(decoding: withDoubles.encoded(), as: UTF8.self) == (try PhoneEvent(withDoubles)).canonical)
        let cases = try JSON.parse(Array(try Data(contentsOf: examples.appendingPathComponent("_invalid-events.json"))))["cases"]?.array ?? []
        #expect(cases.count > 30)
        for c in cases {
            #expect(throws: QuadError.self, "\(c["why"]?.string ?? "?")") { try PhoneEvent(c["event"] ?? .null) }
        }
    }

    @Test func everyPropsSchemaMatchesTheSwiftTable() throws {
        let dir = examples.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("telemetry/events")
        for (name, spec) in PhoneEvent.names {
            let schema = try JSON.parse(Array(try Data(contentsOf: dir.appendingPathComponent("\(name).schema.json"))))
            #expect(schema["required"] == .array(spec.map { .string($0.0) }), "\(name)")
            #expect(schema["additionalProperties"] == false)
            for (key, kind) in spec {
                let p = schema["properties"]?[key] ?? .null
                switch kind {
                case .string: #expect(p["type"] == "string" && p["minLength"] == 1 && p["maxLength"] == .int(Int64(PhoneEvent.maxPropLength)), "\(name).\(key)")
                case .integer(let lo, let hi): #expect(p["type"] == "integer" && p["minimum"] == .int(lo) && p["maximum"] == .int(hi), "\(name).\(key)")
                case .boolean: #expect(p["type"] == "boolean", "\(name).\(key)")
                case .oneOf(let values): #expect(p["enum"] == .array(values.map { .string($0) }), "\(name).\(key)")
                }
            }
        }
    }
}

@Suite("Telemetry's reply records under load, as processes", .serialized)
struct PruneUnderLoadTests {
    @Test func theReplyRecordTableStopsGrowingUnderASteadyLoad() throws {
        let stack = try TestStack(name: "prune")
        try stack.startBroker()
        try stack.startWorker("quad-telemetry", instance: "telemetry/1", extra: ["--reply-retention-ms", "300", "--prune-every-ms", "100"])
        #expect(try stack.waitForWorkers("telemetry", count: 1))
        let phone = try stack.client(source: "edge/load")
        let db = try SQLiteDatabase(path: stack.dir + "/telemetry.db")
        var samples: [Int64] = []
        var sent = 0
        let started = Clock.monotonicMillis()
        var nextSample = started + 250
        // A steady load for 6 s: a batch of one new event per request.
        while Clock.monotonicMillis() - started < 6000 {
            _ = try phone.request("telemetry.ingest", ["events": [event(sent)]], timeoutMs: 2000, attempts: 5)
            sent += 1
            if Clock.monotonicMillis() >= nextSample {
                samples.append(try count(db, "idempotency"))
                nextSample += 250
            }
        }
        let final = try count(db, "idempotency")
        Log.info("test", "prune: \(sent) batches in 6 s, reply records sampled \(samples), \(final) at the end")
        #expect(sent >= 200, "too little load to tell: \(sent) batches")
        // Every event is kept; the replies are not.
        #expect(try count(db, "events") == Int64(sent))
        #expect(final <= Int64(sent / 4), "\(final) reply records kept of \(sent)")
        // Flat, not growing: the second half never holds much more than the
        // first. The margin allows a prune pass that a loaded machine (CI's
        // lanes side by side) ran late; a table that grew with the load would
        // hold about as many rows as batches sent in the second half (hundreds).
        let half = samples.count / 2
        let early = samples[..<half].max() ?? 0, late = samples[half...].max() ?? 0
        #expect(late <= early * 2 + 200, "early \(early), late \(late): \(samples)")
        #expect(eventually { stack.log("telemetry/1").contains("pruned ") })
        // Once the load stops, the records past their retention all go.
        #expect(eventually { ((try? count(db, "idempotency")) ?? .max) == 0 }, "reply records left after the load: \((try? count(db, "idempotency")) ?? -1)")
    }
}
