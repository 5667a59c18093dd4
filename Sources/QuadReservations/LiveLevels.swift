import QuadContract
import QuadRuntime
import QuadStore

/// Each level's free spots as phones see them: a `reservations.level.changed`
/// event in the transaction of every change to a level's spots, and the
/// level's `live_seq`, the seq of its last such event, which
/// `reservations.levels` returns with the counts. A phone that holds a
/// level at seq n applies only an event above n: the Clone pattern's
/// snapshot plus updates, never an older state over a newer one.
enum LiveLevels {
    typealias C = Contract.Reservations

    static let migrations = [
        Migration(2, """
            ALTER TABLE levels ADD COLUMN live_seq BIGINT NOT NULL DEFAULT 0;
            ALTER TABLE levels ADD COLUMN live_free TEXT NOT NULL DEFAULT '';
            """),
    ]

    /// Publishes `level`'s counts when they differ from those it last
    /// published, in the caller's transaction. The level's row is locked
    /// first, so two transactions changing one level count after each
    /// other and publish in the order they commit.
    static func publish(_ db: Database, level: String) throws {
        guard let row = try db.queryOne("UPDATE levels SET live_seq = live_seq WHERE id = $1 RETURNING lot, name, live_free", .text(level)) else { return }
        let counts = try Places.counts(db, by: "level", level: level)[level]
        let (total, free) = (Places.counts(counts, free: false), Places.counts(counts, free: true))
        let text = "\(free.regular),\(free.accessible),\(free.ev)"
        guard text != row.string("live_free") else { return }
        let event = C.LevelChanged(lot: row.string("lot"), level: level, name: row.string("name"), total: total, free: free)
        let seq = try Outbox.append(db, type: C.levelChanged.type, body: event.json)
        try db.execute("UPDATE levels SET live_free = $2, live_seq = $3 WHERE id = $1", .text(level), .text(text), .int(seq))
    }

    /// Publishes the level of `spot`.
    static func publish(_ db: Database, spot: String) throws {
        guard let row = try db.queryOne("SELECT level FROM spots WHERE id = $1", .text(spot)) else { return }
        try publish(db, level: row.string("level"))
    }

    /// Every level whose counts changed while no event was written (a
    /// store from before this migration, or seeded): once at start.
    static func publishAll(_ db: Database) throws {
        try db.transaction {
            for r in try db.query("SELECT id FROM levels ORDER BY id") { try publish(db, level: r.string("id")) }
        }
    }
}
