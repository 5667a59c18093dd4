import Foundation
import Testing
@testable import QuadStore

@Suite("Prepared statements")
struct StatementCacheTests {
    @Test func sqliteKeepsAtMostItsCapacity() throws {
        let db = try SQLiteDatabase(path: temporaryPath("cache.db"))
        try db.executeScript("CREATE TABLE k (id INTEGER PRIMARY KEY, v TEXT)")
        for n in 0..<5 { try db.execute("INSERT INTO k (id, v) VALUES ($1, $2)", .int(Int64(n)), .text("v\(n)")) }
        #expect(db.preparedStatements == 1)
        // Distinct texts (ad-hoc questions) do not grow it past its bound,
        // and what was evicted is prepared again when it comes back.
        for n in 0..<100 { _ = try db.query("SELECT v FROM k WHERE id = \(n % 5) AND \(n) = \(n)") }
        #expect(db.preparedStatements == SQLiteDatabase.defaultStatementCacheCapacity)
        try db.execute("INSERT INTO k (id, v) VALUES ($1, $2)", .int(9), .text("back"))
        #expect(try db.queryOne("SELECT v FROM k WHERE id = $1", .int(9))?.string("v") == "back")
    }

    @Test func aQuietConnectionGivesItsPageCacheBackAndReadsAgainWhatItNeeds() throws {
        let path = temporaryPath("release.db")
        let writer = try SQLiteDatabase(path: path)
        try writer.executeScript("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        try writer.transaction {
            for n in 0..<4000 { try writer.execute("INSERT INTO t (id, v) VALUES ($1, $2)", .int(Int64(n)), .text(String(repeating: "x", count: 200))) }
        }
        writer.close()
        let db = try SQLiteDatabase(path: path)
        func total() throws -> Int64? { try db.queryOne("SELECT SUM(LENGTH(v)) AS n FROM t")?.int("n") }
        #expect(try total() == 800_000)
        let warm = db.cacheBytes
        #expect(warm > 400_000, "reading 800 KB of rows fills the page cache: \(warm) bytes")
        db.releaseMemory()
        #expect(db.cacheBytes < warm / 4, "released: \(db.cacheBytes) of \(warm) bytes kept")
        #expect(try total() == 800_000)
    }

    @Test func sqliteReusedStatementsKeepTextByByteLength() throws {
        let db = try SQLiteDatabase(path: temporaryPath("nul.db"))
        try db.executeScript("CREATE TABLE t (v TEXT)")
        for v in ["a\u{0}b", "", "é\u{0}"] { try db.execute("INSERT INTO t (v) VALUES ($1)", .text(v)) }
        #expect(try db.query("SELECT v FROM t ORDER BY rowid").map { $0.string("v") } == ["a\u{0}b", "", "é\u{0}"])
    }

    @Test(.enabled(if: postgresURL != nil, "needs QUAD_TEST_PG"))
    func postgresPreparesEachStatementOncePerSession() throws {
        let db = try #require(try stores().last as? PostgresDatabase)
        try db.executeScript("CREATE TABLE k (id BIGINT PRIMARY KEY, v TEXT, b BYTEA)")
        for n in 0..<5 { try db.execute("INSERT INTO k (id, v) VALUES ($1, $2)", .int(Int64(n)), .text("v\(n)")) }
        let prepared = try db.query("SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO k %'")
        #expect(prepared.count == 1)
        // A blob is sent as bytea: the same text with other parameter types
        // is another prepared statement, not a wrong reuse.
        try db.execute("UPDATE k SET b = $1 WHERE id = $2", .blob([0, 1, 2]), .int(1))
        try db.execute("UPDATE k SET b = $1 WHERE id = $2", .null, .int(2))
        #expect(try db.queryOne("SELECT b FROM k WHERE id = $1", .int(1))?["b"] == .blob([0, 1, 2]))
        #expect(try db.queryOne("SELECT b FROM k WHERE id = $1", .int(2))?["b"] == .null)
    }

    @Test(.enabled(if: postgresURL != nil, "needs QUAD_TEST_PG"))
    func postgresSessionLostIsOpenedAgainWithoutItsStatements() throws {
        let db = try #require(try stores().last as? PostgresDatabase)
        try db.executeScript("CREATE TABLE k (id BIGINT PRIMARY KEY)")
        try db.execute("INSERT INTO k (id) VALUES ($1)", .int(1))
        let pid = try #require(try db.queryOne("SELECT pg_backend_pid() AS pid")).int("pid")
        let admin = try PostgresDatabase(url: try #require(postgresURL))
        _ = try admin.query("SELECT pg_terminate_backend($1)", .int(pid))
        // The statement that meets the dead session fails with a 503 (the
        // store is away); a later one runs on a new session, where its name
        // is prepared again. The reconnection never blocks a call longer
        // than resetStepMs, so on a loaded machine it may take several
        // calls: waited for, with a generous deadline.
        var answered: Int64?
        let until = PostgresDatabase.monotonicMillis() + 30_000
        while answered == nil && PostgresDatabase.monotonicMillis() < until {
            do {
                answered = try db.queryOne("SELECT id FROM k WHERE id = $1", .int(1))?.int("id")
            } catch let error as StoreError {
                #expect(error.kind == .connection, "\(error)")
                usleep(20_000)
            }
        }
        #expect(answered == 1, "no answer on a new session within 30 s")
        #expect(try db.queryOne("SELECT pg_backend_pid() AS pid")?.int("pid") != pid)
    }

    /// Not a timed test: prints rows per second with the cache off and on.
    /// `QUAD_STORE_BENCH=1 swift test --filter StatementCacheTests/figures`
    @Test(.enabled(if: ProcessInfo.processInfo.environment["QUAD_STORE_BENCH"] == "1", "set QUAD_STORE_BENCH=1"))
    func figures() throws {
        func rate(_ n: Int, _ body: (Int) throws -> Void) rethrows -> Int {
            let start = DispatchTime.now().uptimeNanoseconds
            for k in 0..<n { try body(k) }
            return Int(Double(n) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9))
        }
        for db in try stores() {
            let n = db.dialect == .sqlite ? 100_000 : 20_000
            for capacity in [0, 64] {
                if let s = db as? SQLiteDatabase { s.statementCacheCapacity = capacity }
                if let p = db as? PostgresDatabase { p.statementCacheCapacity = capacity }
                try db.executeScript("DROP TABLE IF EXISTS b; CREATE TABLE b (id TEXT PRIMARY KEY, n BIGINT NOT NULL, v TEXT NOT NULL)")
                let ids = (0..<n).map { _ in MessageIDForBench.make() }
                // Inserts in transactions of 1,000, so the figure is the
                // statement's cost, not the commit's.
                let inserts = try rate(n / 1000) { k in
                    try db.transaction {
                        for j in 0..<1000 { try db.execute("INSERT INTO b (id, n, v) VALUES ($1, $2, $3)", .text(ids[k * 1000 + j]), .int(Int64(j)), .text("value \(j)")) }
                    }
                } * 1000
                let lookups = try rate(n) { k in _ = try db.queryOne("SELECT n, v FROM b WHERE id = $1", .text(ids[k])) }
                print("statement-cache \(db.dialect) capacity=\(capacity): \(n) inserts \(inserts) rows/s, \(n) lookups \(lookups) /s")
            }
        }
    }
}

/// Time-ordered keys, as the services' ids are.
enum MessageIDForBench {
    nonisolated(unsafe) static var n: UInt64 = 0
    static func make() -> String {
        n += 1
        return String(format: "%016llx-%08x", n, UInt32.random(in: 0...UInt32.max))
    }
}
