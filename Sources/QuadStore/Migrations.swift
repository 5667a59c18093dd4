/// Numbered schema changes, applied once each, in order, in one transaction
/// per step, so workers starting together agree on the schema.
public struct Migration: Sendable {
    public let version: Int
    public let sqlite: String
    public let postgres: String

    /// A migration whose SQL is the same on both stores.
    public init(_ version: Int, _ sql: String) {
        self.version = version
        self.sqlite = sql
        self.postgres = sql
    }

    public init(_ version: Int, sqlite: String, postgres: String) {
        self.version = version
        self.sqlite = sqlite
        self.postgres = postgres
    }
}

public enum Migrations {
    /// Applies the migrations not yet applied; returns how many ran.
    @discardableResult
    public static func apply(_ db: Database, _ migrations: [Migration], scope: String = "app") throws -> Int {
        try SQLiteDatabase.retryingBusy(forMs: 10_000) { try applyAll(db, migrations, scope: scope) }
    }

    static func applyAll(_ db: Database, _ migrations: [Migration], scope: String) throws -> Int {
        try db.executeScript("CREATE TABLE IF NOT EXISTS schema_migrations (scope TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (scope, version))")
        var ran = 0
        for m in migrations.sorted(by: { $0.version < $1.version }) {
            try db.transaction {
                // Serialize workers starting together on one PostgreSQL database.
                if db.dialect == .postgres { try db.executeScript("LOCK TABLE schema_migrations IN EXCLUSIVE MODE") }
                let done = try db.queryOne("SELECT 1 AS x FROM schema_migrations WHERE scope = $1 AND version = $2", .text(scope), .int(Int64(m.version)))
                if done != nil { return }
                try db.executeScript(db.dialect == .postgres ? m.postgres : m.sqlite)
                try db.execute("INSERT INTO schema_migrations (scope, version) VALUES ($1, $2)", .text(scope), .int(Int64(m.version)))
                ran += 1
            }
        }
        return ran
    }
}
