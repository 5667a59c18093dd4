import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadTelemetry

/// How a batch reaches the store: a few prepared multi-row INSERTs on
/// SQLite, COPY into a staging table on PostgreSQL; the same outcome.
@Suite("Telemetry ingest path")
struct IngestPathTests {
    @Test func batchesOfEverySizeRunAFewPreparedStatementsOnly() throws {
        let (h, db) = try telemetry()
        let sqlite = try #require(db as? SQLiteDatabase)
        var k = 0
        for size in 1...120 {
            let batch = (0..<size).map { _ in k += 1; return event(k) }
            _ = try h.call("telemetry.ingest", ["events": .array(batch)], user: "u-1")
        }
        // Again, all duplicates: the digest lookups take the same few texts.
        k = 0
        for size in 1...120 {
            let batch = (0..<size).map { _ in k += 1; return event(k) }
            #expect(try h.call("telemetry.ingest", ["events": .array(batch)], user: "u-1")["duplicate"] == .int(Int64(size)))
        }
        #expect(try count(db, "events") == Int64(k))
        #expect(sqlite.preparedStatements < 20, "\(sqlite.preparedStatements) statements kept for one kind of request")
    }

    /// The props column is cut from the event's own encoding: values that
    /// hold quotes, braces, backslashes and the text `"props":` itself are
    /// stored exactly as props encode, on every event of the batch.
    @Test func propsAreStoredAsTheyEncodeWhateverTheyHold() throws {
        let (h, db) = try telemetry()
        let tricky = [#"x"props":{"a":[1]}}\"#, "{[\\\"", #"}"props":"#, "plain"]
        var batch: [JSON] = []
        for (k, text) in tricky.enumerated() {
            guard case .object(var e) = event(k + 1, props: ["view": .string(text)]) else { continue }
            e["phone"] = .string(#"ph"props":{"#)
            batch.append(.object(e))
        }
        #expect(try h.call("telemetry.ingest", ["events": .array(batch)], user: "u-1")["accepted"] == .int(Int64(tricky.count)))
        let rows = try db.query("SELECT props FROM events ORDER BY seq")
        #expect(rows.map { $0.string("props") } == tricky.map { JSON.object(["view": .string($0)]).text })
        for text in tricky {
            let encoded = event(1, props: ["view": .string(text), "n": [1, ["k": "}"]]]).encoded()
            #expect(Telemetry.propsText(in: encoded) == JSON.object(["view": .string(text), "n": [1, ["k": "}"]]]).text)
        }
    }

    @Test(.enabled(if: pgURL != nil, "needs QUAD_TEST_PG"))
    func postgresCopiesABatchThroughItsStagingTableAndKeepsTheDedup() throws {
        let (h, db) = try telemetry(postgres: true)
        // Text that COPY's format must escape: tab, newline, CR, backslash.
        let awkward: JSON = ["view": "a\tb\nc\rd\\e \"q\" é"]
        let batch = (1...250).map { event($0, props: $0 == 7 ? awkward : ["view": "home"]) }
        let first = try h.call("telemetry.ingest", ["events": .array(batch)], user: "u-1")
        #expect(first["accepted"] == 250)
        #expect(try db.queryOne("SELECT to_regclass('pg_temp.events_incoming') IS NOT NULL AS staged")?.int("staged") == 1)
        let id = try #require(batch[6]["id"]?.string)
        let stored = try #require(try db.queryOne("SELECT props FROM events WHERE id = $1", .text(id)))
        #expect(try JSON.parse(stored.string("props")) == awkward)
        // The same again, and half new: dedup by id, as with INSERT.
        let again = try h.call("telemetry.ingest", ["events": .array(Array(batch[125...]) + (251...375).map { event($0) })], user: "u-1")
        #expect(again["accepted"] == 125 && again["duplicate"] == 125)
        #expect(try count(db, "events") == 375)
        // The staging table is empty once the batch committed.
        #expect(try count(db, "events_incoming") == 0)
    }

    @Test(.enabled(if: pgURL != nil, "needs QUAD_TEST_PG"))
    func postgresCopyRefusesNULAndLeavesNothing() throws {
        let db = try #require(try store(postgres: true) as? PostgresDatabase)
        try db.executeScript("CREATE TABLE c (a TEXT, b BIGINT, n TEXT)")
        try db.copy(into: "c", columns: ["a", "b", "n"], rows: [[.text("x\\y"), .int(1), .null], [.text(""), .int(2), .text("\\N")]])
        #expect(try db.query("SELECT a, b, n FROM c ORDER BY b").map { [$0["a"], $0["b"], $0["n"]] } == [[.text("x\\y"), .int(1), .null], [.text(""), .int(2), .text("\\N")]])
        #expect(throws: StoreError.self) { try db.copy(into: "c", columns: ["a", "b", "n"], rows: [[.text("ok"), .int(3), .null], [.text("a\u{0}b"), .int(4), .null]]) }
        #expect(try count(db, "c") == 2)
        // The session is usable after the refused COPY.
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM c WHERE b = $1", .int(1))?.int("n") == 1)
    }
}
