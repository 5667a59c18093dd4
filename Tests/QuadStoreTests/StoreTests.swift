import Foundation
import Testing
@testable import QuadStore
import QuadRuntime
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

    /// The relay moves one cursor row, not a flag on every event; what is
    /// past the cursor is what waits, and pruning never passes it.
    @Test func theRelayMovesACursorAndPruningStopsAtIt() throws {
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            try db.transaction { for n in 1...5 { try Outbox.append(db, type: "t.e", body: ["n": .int(Int64(n))]) } }
            #expect(try Outbox.unpublishedCount(db) == 5)
            #expect(try Outbox.relay(db, limit: 3) { _ in } == 3)
            #expect(try Outbox.relayedSeq(db) == 3)
            #expect(try Outbox.unpublishedCount(db) == 2)
            // Everything is old enough to go; only the relayed three may.
            #expect(try Outbox.prune(db, before: Int64.max, maxRows: 0, limit: 100) == 3)
            #expect(try Outbox.oldestSeq(db) == 4)
            var next: [Int64] = []
            #expect(try Outbox.relay(db) { next.append($0.seq) } == 2)
            #expect(next == [4, 5])
            #expect(try Outbox.unpublishedCount(db) == 0)
        }
    }

    /// A page is read in slices (``Outbox/relaySlice``) and published as
    /// each is read: across slices it keeps seq order, stops at the page's
    /// limit, and a publish that fails in a later slice leaves the cursor
    /// where it was, so the whole page goes out again.
    @Test func aPageReadInSlicesKeepsOrderAndTheCursor() throws {
        struct Down: Error {}
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            let total = Outbox.relaySlice * 2 + 50
            try db.transaction { for n in 1...total { try Outbox.append(db, type: "t.e", body: ["n": .int(Int64(n))]) } }
            var published: [Int64] = []
            let limit = Outbox.relaySlice + 30
            #expect(try Outbox.relay(db, limit: limit) { published.append($0.seq) } == limit)
            #expect(published == (1...Int64(limit)).map { $0 })
            #expect(try Outbox.relayedSeq(db) == Int64(limit))
            #expect(throws: Down.self) {
                try Outbox.relay(db, limit: 1000) { e in if e.seq == Int64(limit + Outbox.relaySlice + 5) { throw Down() } }
            }
            #expect(try Outbox.relayedSeq(db) == Int64(limit))
            var rest: [Int64] = []
            #expect(try Outbox.relay(db, limit: 1000) { rest.append($0.seq) } == total - limit)
            #expect(rest == (Int64(limit + 1)...Int64(total)).map { $0 })
            #expect(try Outbox.relayedSeq(db) == Int64(total))
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

    @Test func idempotencyRecordsKeepTheReplyForTheirOwnerOnly() throws {
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            let request = Envelope.request("x.y", body: ["a": 1])
            let reply = request.reply(["secret": "alice's"])
            try db.transaction { try Idempotency.store(db, id: request.id, type: request.type, owner: "user:alice", reply: reply) }
            #expect(try Idempotency.claim(db, id: request.id, type: "x.y", owner: "user:alice") == reply)
            #expect(try Idempotency.claim(db, id: "other", type: "x.y", owner: "user:alice") == nil)
            for (type, owner, says) in [("x.y", "user:bob", "used by another caller"), ("x.y", "key:abc", "used by another caller"),
                                        ("x.y", "anonymous", "used by another caller"), ("x.z", "user:alice", "another request type"),
                                        ("x.z", "user:bob", "used by another caller")] {
                do {
                    _ = try Idempotency.claim(db, id: request.id, type: type, owner: owner)
                    Issue.record("\(owner) got \(type)'s record")
                } catch let e as QuadError {
                    #expect(e.code == .conflict && e.status == 409 && e.message.contains(says))
                    #expect(!"\(e.message) \(e.details)".contains("alice's"))
                }
            }
        }
    }

    @Test func anOwnerIsTheUserElseTheBrokersCaller() {
        #expect(Idempotency.owner(user: "u1", role: "student", caller: "key:K") == "user:u1")
        #expect(Idempotency.owner(user: nil, role: nil, caller: "key:K") == "key:K")
        #expect(Idempotency.owner(user: nil, role: nil, caller: nil) == "anonymous")
        #expect(Idempotency.owner(user: "u1", role: "service", caller: "service:orders/1") == "service:orders/1 for user:u1")
        // A service acting for a user does not share the user's own records.
        #expect(Idempotency.owner(user: "u1", role: "service", caller: nil) != Idempotency.owner(user: "u1", role: nil, caller: nil))
    }

    /// A store made before owners existed gets the column; its records,
    /// which have no owner, are nobody's: a repeat is refused, not answered.
    @Test func theOwnerMigrationUpgradesAnExistingStore() throws {
        for db in try stores() {
            try Migrations.apply(db, Array(ServiceTables.migrations.prefix(1)), scope: "quad")
            try db.execute("INSERT INTO idempotency (id, type, reply, created_ms) VALUES ($1, $2, $3, $4)",
                           .text("old-1"), .text("x.y"), .text(String(decoding: Envelope.request("x.y").reply([:]).encoded(), as: UTF8.self)), .int(1))
            #expect(try Migrations.apply(db, ServiceTables.migrations, scope: "quad") == ServiceTables.migrations.count - 1)
            #expect(throws: QuadError.self) { try Idempotency.claim(db, id: "old-1", type: "x.y", owner: "user:alice") }
            try Idempotency.store(db, id: "new-1", type: "x.y", owner: "user:alice", reply: Envelope.request("x.y").reply([:]))
            #expect(try Idempotency.claim(db, id: "new-1", type: "x.y", owner: "user:alice") != nil)
        }
    }

    /// Text and blobs are bound and read by length: a NUL in the middle
    /// comes back whole on SQLite; PostgreSQL's text cannot hold one, so
    /// it is refused there, never stored cut; a blob with NULs round-trips on both.
    @Test func aNULInTheMiddleIsKeptWholeOrRefused() throws {
        let text = "p-0001\u{0}DROP"
        let blob: [UInt8] = [0x61, 0, 0x62, 0, 0]
        for db in try stores() {
            try db.executeScript("CREATE TABLE z (k INTEGER, t TEXT, b \(db.dialect == .postgres ? "BYTEA" : "BLOB"))")
            try db.execute("INSERT INTO z (k, b) VALUES (1, $1)", .blob(blob))
            try db.execute("INSERT INTO z (k, b) VALUES (2, $1)", .blob([]))
            #expect(try db.queryOne("SELECT b FROM z WHERE k = 1")?["b"] == .blob(blob))
            #expect(try db.queryOne("SELECT b FROM z WHERE k = 2")?["b"] == .blob([]))
            #expect(try db.queryOne("SELECT b FROM z WHERE b = $1", .blob(blob))?["b"] == .blob(blob))
            try db.execute("INSERT INTO z (k, t) VALUES (4, $1)", .text(""))
            #expect(try db.queryOne("SELECT t FROM z WHERE k = 4")?["t"] == .text(""))
            switch db.dialect {
            case .sqlite:
                try db.execute("INSERT INTO z (k, t) VALUES (3, $1)", .text(text))
                let back = try #require(try db.queryOne("SELECT t, length(CAST(t AS BLOB)) AS n FROM z WHERE k = 3"))
                #expect(back["t"] == .text(text))
                #expect(back.int("n") == Int64(text.utf8.count))
                // The cut string does not match it.
                #expect(try db.queryOne("SELECT k FROM z WHERE t = $1", .text("p-0001")) == nil)
                #expect(try db.queryOne("SELECT k FROM z WHERE t = $1", .text(text))?.int("k") == 3)
            case .postgres:
                do {
                    try db.execute("INSERT INTO z (k, t) VALUES (3, $1)", .text(text))
                    Issue.record("PostgreSQL stored a text with a NUL")
                } catch let e as StoreError {
                    #expect(e.message.contains("U+0000"))
                }
                #expect(try db.query("SELECT k FROM z WHERE k = 3").isEmpty)
            }
        }
    }

    @Test func pruningDeletesOldRecordsAndPublishedEventsInBatches() throws {
        for db in try stores() {
            try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
            for n in 0..<30 {
                try Idempotency.store(db, id: "r\(n)", type: "x.y", owner: "anonymous", reply: Envelope.request("x.y").reply([:]))
            }
            try db.transaction { for n in 1...30 { try Outbox.append(db, type: "t.e", body: ["n": .int(Int64(n))]) } }
            #expect(try Outbox.oldestSeq(db) == 1)
            let future = Int64(Clock.nowMillis()) + 60_000
            // Unpublished events stay, whatever their age.
            #expect(try Outbox.prune(db, before: future, maxRows: 1_000_000, limit: 10) == 0)
            try Outbox.relay(db, limit: 20) { _ in }
            #expect(try Outbox.prune(db, before: future, maxRows: 1_000_000, limit: 10) == 10)
            #expect(try Outbox.prune(db, before: future, maxRows: 1_000_000, limit: 100) == 10)
            #expect(try Outbox.oldestSeq(db) == 21)
            // Young events go past the cap only.
            try Outbox.relay(db) { _ in }
            #expect(try Outbox.prune(db, before: 0, maxRows: 4, limit: 100) == 6)
            #expect(try Outbox.since(db, after: 0, limit: 100).map(\.seq) == [27, 28, 29, 30])
            #expect(try Outbox.prune(db, before: 0, maxRows: 4, limit: 100) == 0)
            #expect(try Idempotency.prune(db, before: 0, limit: 100) == 0)
            #expect(try Idempotency.prune(db, before: future, limit: 25) == 25)
            #expect(try Idempotency.prune(db, before: future, limit: 25) == 5)
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM idempotency")?.int("n") == 0)
            // Everything gone: the next event is still numbered after the last.
            #expect(try Outbox.prune(db, before: future, maxRows: 1_000_000, limit: 100) == 4)
            #expect(try Outbox.oldestSeq(db) == 31)
            try db.transaction { try Outbox.append(db, type: "t.e", body: [:]) }
            #expect(try Outbox.lastSeq(db) == 31)
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
