import QuadRuntime
import QuadStore
import QuadWire

/// What orders knows of its buyers: the semester an order records (UniTrade
/// asks which semester buys most), kept from accounts' events. A buyer
/// whose account events have not arrived has semester null.
enum Buyers {
    static let migration = """
        CREATE TABLE buyers (
            user_id TEXT PRIMARY KEY,
            semester TEXT NOT NULL
        );
        """

    static let events: Set<String> = ["accounts.user.registered", "accounts.user.updated"]

    /// Applies one accounts event; an update without `semester` keeps the one known.
    static func apply(_ db: Database, _ event: Envelope) throws {
        guard let user = event.body["user"]?.string, let semester = event.body["semester"] else { return }
        try db.execute("""
            INSERT INTO buyers (user_id, semester) VALUES ($1, $2)
            ON CONFLICT (user_id) DO UPDATE SET semester = excluded.semester
            """, .text(user), .text(semester.text))
    }

    /// The buyer's semester as accounts published it (a string or a number), or null.
    static func semester(_ db: Database, _ user: String) throws -> JSON {
        guard let row = try db.queryOne("SELECT semester FROM buyers WHERE user_id = $1", .text(user)) else { return .null }
        return (try? JSON.parse(row.string("semester"))) ?? .null
    }
}
