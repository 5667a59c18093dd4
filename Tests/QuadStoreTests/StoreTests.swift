import Foundation
import Testing
@testable import QuadStore
import QuadWire

func temporaryPath(_ name: String) -> String {
    let dir = NSTemporaryDirectory() + "quad-store-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir + "/" + name
}

/// The PostgreSQL server of the test run (deploy/test starts one and sets
/// QUAD_TEST_PG); these tests are about PostgreSQL, so they need it.
let postgresURL = ProcessInfo.processInfo.environment["QUAD_TEST_PG"]

/// The same behaviour on both stores.
func stores() throws -> [Database] {
    var list: [Database] = [try SQLiteDatabase(path: temporaryPath("t.db"))]
    if let url = postgresURL {
        let admin = try PostgresDatabase(url: url)
        let schema = "t\(UInt32.random(in: 0...UInt32.max))"
        try admin.executeScript("CREATE SCHEMA \(schema)")
        list.append(try PostgresDatabase(url: url + (url.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)"))
    }
    return list
}

@Suite("Stores")
struct StoreTests {
    @Test func sqliteOpensInWALMode() throws {
        let db = try SQLiteDatabase(path: temporaryPath("wal.db"))
        #expect(try db.queryOne("PRAGMA journal_mode")?.string("journal_mode") == "wal")
    }

    @Test func migrationsRunOnceInOrder() throws {
        for db in try stores() {
            let ms = [Migration(2, "INSERT INTO m (x) VALUES (2)"), Migration(1, "CREATE TABLE m (x INTEGER)")]
            #expect(try Migrations.apply(db, ms) == 2)
            #expect(try Migrations.apply(db, ms) == 0)
            #expect(try db.query("SELECT x FROM m").map { $0.int("x") } == [2])
        }
    }

    @Test func typedBindingAndReading() throws {
        for db in try stores() {
            try db.executeScript("CREATE TABLE v (i BIGINT, d DOUBLE PRECISION, t TEXT, n TEXT)")
            try db.execute("INSERT INTO v (i, d, t, n) VALUES ($1, $2, $3, $4)", .int(Int64.max), .double(2.5), .text("it's é"), .null)
            let row = try #require(try db.queryOne("SELECT i, d, t, n FROM v WHERE t = $1", .text("it's é")))
            #expect(row["i"] == .int(Int64.max))
            #expect(row.double("d") == 2.5)
            #expect(row["n"] == .null)
        }
    }

    @Test func transactionRollsBackWhenTheBodyThrows() throws {
        struct Boom: Error {}
        for db in try stores() {
            try db.executeScript("CREATE TABLE r (x INTEGER)")
            #expect(throws: Boom.self) {
                try db.transaction {
                    try db.execute("INSERT INTO r (x) VALUES (1)")
                    throw Boom()
                }
            }
            #expect(try db.query("SELECT x FROM r").isEmpty)
            try db.transaction { try db.execute("INSERT INTO r (x) VALUES (2)") }
            #expect(try db.query("SELECT x FROM r").count == 1)
        }
    }

    @Test func constraintViolationsAreNamedAsSuch() throws {
        for db in try stores() {
            try db.executeScript("CREATE TABLE u (k TEXT PRIMARY KEY)")
            try db.execute("INSERT INTO u (k) VALUES ($1)", .text("a"))
            do {
                try db.execute("INSERT INTO u (k) VALUES ($1)", .text("a"))
                Issue.record("duplicate key accepted")
            } catch let e as StoreError {
                #expect(e.kind == .constraint)
            }
        }
    }

    @Test func outboxNumbersEventsAndReturnsThemSince() throws {
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            try db.transaction {
                for n in 1...5 { try Outbox.append(db, type: "t.e", body: ["n": .int(Int64(n))]) }
            }
            #expect(try Outbox.lastSeq(db) == 5)
            let late = try Outbox.since(db, after: 2, limit: 10)
            #expect(late.map(\.seq) == [3, 4, 5])
            #expect(late.map { $0.body["n"]?.int } == [3, 4, 5])
            var published: [Int64] = []
            #expect(try Outbox.relay(db) { published.append($0.seq) } == 5)
            #expect(try Outbox.relay(db) { published.append($0.seq) } == 0)
            #expect(published == [1, 2, 3, 4, 5])
        }
    }

    @Test func aFailedPublishLeavesEventsForTheNextRelay() throws {
        struct Down: Error {}
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            try db.transaction { try Outbox.append(db, type: "t.e", body: [:]) }
            #expect(throws: Down.self) { try Outbox.relay(db) { _ in throw Down() } }
            var seen: [Int64] = []
            try Outbox.relay(db) { seen.append($0.seq) }
            #expect(seen == [1])
        }
    }

    @Test func idempotencyRecordsKeepTheReply() throws {
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            let request = Envelope.request("x.y", body: ["a": 1])
            let reply = request.reply(["ok": true])
            try db.transaction { try Idempotency.store(db, id: request.id, type: request.type, reply: reply) }
            #expect(try Idempotency.storedReply(db, id: request.id) == reply)
            #expect(try Idempotency.storedReply(db, id: "other") == nil)
        }
    }

    @Test func twoConnectionsToOneSQLiteFileSerializeWriters() throws {
        let path = temporaryPath("shared.db")
        let a = try SQLiteDatabase(path: path)
        let b = try SQLiteDatabase(path: path)
        try a.executeScript("CREATE TABLE c (n INTEGER)")
        try a.execute("INSERT INTO c (n) VALUES (0)")
        let group = DispatchGroup()
        for db in [a, b] {
            let box = UncheckedBox(db)
            group.enter()
            Thread {
                for _ in 0..<200 { try? box.value.transaction { try box.value.execute("UPDATE c SET n = n + 1") } }
                group.leave()
            }.start()
        }
        group.wait()
        #expect(try a.queryOne("SELECT n FROM c")?.int("n") == 400)
    }

    @Test(.enabled(if: postgresURL != nil, "needs QUAD_TEST_PG (deploy/test starts a server)"))
    func postgresReportsConnectionErrorsClearly() {
        do {
            _ = try PostgresDatabase(url: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
            Issue.record("connected to a closed port")
        } catch let e as StoreError {
            #expect(e.kind == .connection)
            #expect(e.message.contains("postgres connect"))
        } catch { Issue.record("\(error)") }
    }
}

/// Each connection is used by one thread only in the test above.
final class UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
