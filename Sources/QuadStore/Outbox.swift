/// The tables every service keeps beside its own: idempotency records and
/// the transactional outbox with its per-service sequence.
public enum ServiceTables {
    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE idempotency (
                id TEXT PRIMARY KEY,
                type TEXT NOT NULL,
                reply TEXT NOT NULL,
                created_ms BIGINT NOT NULL
            );
            CREATE TABLE outbox (
                seq BIGINT PRIMARY KEY,
                id TEXT NOT NULL,
                type TEXT NOT NULL,
                ts BIGINT NOT NULL,
                body TEXT NOT NULL,
                published INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX outbox_unpublished ON outbox (published, seq);
            CREATE TABLE outbox_seq (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
            INSERT INTO outbox_seq (one, seq) VALUES (1, 0);
            """),
        // Records belong to whoever made them (issue 12). Records written
        // before this have no owner: nobody's, so a repeat of their id is
        // refused rather than answered to a stranger.
        Migration(2, """
            ALTER TABLE idempotency ADD COLUMN owner TEXT NOT NULL DEFAULT '';
            CREATE INDEX idempotency_created ON idempotency (created_ms);
            """),
        // An event's envelope, encoded once when it is written (issue 13):
        // the relay sends these bytes as they are. Rows written before
        // have none and are built from their columns, as before.
        Migration(3, "ALTER TABLE outbox ADD COLUMN envelope TEXT"),
        // What the relay has published is a prefix of the outbox by seq
        // (seqs are taken under outbox_seq's row lock, held to commit, so
        // they commit in order): one cursor row says where it ends. Marking
        // each row instead rewrote every relayed row and its index entry,
        // about 400 KB of WAL per 1,000 events, and the checkpoints that
        // followed were most of the time events spent on their way (issue 13).
        Migration(4, """
            CREATE TABLE outbox_relayed (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
            INSERT INTO outbox_relayed (one, seq) SELECT 1, COALESCE(MAX(seq), 0) FROM outbox WHERE published = 1;
            DROP INDEX outbox_unpublished;
            ALTER TABLE outbox DROP COLUMN published;
            """),
    ]
}

/// Idempotency records: a mutation's id, its type, who sent it and its
/// reply's bytes, written in the same transaction as the change. The store
/// keeps and finds them; what a record means (whose it is, the 409 for
/// anyone else's) is the runtime's (QuadRuntime's `Idempotency.claim`).
public enum Idempotency {
    /// A stored record: the type and owner it was first sent with, and the
    /// reply's bytes as they were sent.
    public struct Record: Sendable, Equatable {
        public let type: String
        public let owner: String
        public let reply: [UInt8]
    }

    /// The record for `id`; nil when the id is unused.
    public static func record(_ db: Database, id: String) throws -> Record? {
        guard let row = try db.queryOne("SELECT type, owner, reply FROM idempotency WHERE id = $1", .text(id)) else { return nil }
        return Record(type: row.string("type"), owner: row.string("owner"), reply: Array(row.string("reply").utf8))
    }

    /// Keeps `encoded`, the reply's bytes as they are sent, so a retry gets
    /// the very same bytes. `createdMs` (ms since epoch) is what
    /// ``prune(_:before:limit:)`` compares.
    public static func store(_ db: Database, id: String, type: String, owner: String, encoded: [UInt8], createdMs: Int64) throws {
        try db.execute("INSERT INTO idempotency (id, type, owner, reply, created_ms) VALUES ($1, $2, $3, $4, $5)",
                       .text(id), .text(type), .text(owner), .text(String(decoding: encoded, as: UTF8.self)), .int(createdMs))
    }

    /// Deletes records older than `before` (ms since epoch), at most
    /// `limit` in one short transaction; returns how many went.
    @discardableResult
    public static func prune(_ db: Database, before: Int64, limit: Int) throws -> Int {
        try db.transaction {
            try db.execute("""
                DELETE FROM idempotency WHERE id IN (
                    SELECT id FROM idempotency WHERE created_ms < $1 ORDER BY created_ms LIMIT $2)
                """, .int(before), .int(Int64(limit)))
        }
    }
}

/// A stored event, as the relay publishes it and `events.since` returns it:
/// its columns and the bytes it was given. Reading them as an envelope is
/// the runtime's (QuadRuntime's `StoredEvent.envelope(src:)`).
public struct StoredEvent: Sendable, Equatable {
    public let seq: Int64
    public let id: String
    public let type: String
    public let ts: Int64
    /// The envelope as it was encoded when the event was written; nil for
    /// a row written before the outbox kept it, or written with a body only.
    public let encoded: [UInt8]?
    /// The body column: the event's body as text for a row without
    /// ``encoded``; empty otherwise.
    public let bodyColumn: String

    public init(seq: Int64, id: String, type: String, ts: Int64, encoded: [UInt8]?, bodyColumn: String) {
        self.seq = seq
        self.id = id
        self.type = type
        self.ts = ts
        self.encoded = encoded
        self.bodyColumn = bodyColumn
    }
}

/// The transactional outbox: events are written in the same transaction as
/// the change that caused them, numbered by a per-service `seq` that grows
/// in commit order (the counter row is locked by the writing transaction).
/// The store keeps each event's bytes as it is given them.
public enum Outbox {
    /// Appends an event inside the caller's transaction; returns its seq.
    /// `envelope` encodes the event once its seq is known: those bytes are
    /// what the relay sends and `events.since` returns, as they are.
    @discardableResult
    public static func append(_ db: Database, id: String, type: String, ts: Int64,
                              envelope: (_ seq: Int64) throws -> [UInt8]) throws -> Int64 {
        let seq = try nextSeq(db)
        let bytes = try envelope(seq)
        // The body lives inside the envelope; the body column (kept for
        // rows of older builds) stays empty.
        try db.execute("INSERT INTO outbox (seq, id, type, ts, body, envelope) VALUES ($1, $2, $3, $4, '', $5)",
                       .int(seq), .text(id), .text(type), .int(ts), .text(String(decoding: bytes, as: UTF8.self)))
        return seq
    }

    /// Appends an event of which only the body is kept (a store that does
    /// not say whose events it holds); the relay builds its envelope.
    @discardableResult
    public static func append(_ db: Database, id: String, type: String, ts: Int64, bodyText: String) throws -> Int64 {
        let seq = try nextSeq(db)
        try db.execute("INSERT INTO outbox (seq, id, type, ts, body) VALUES ($1, $2, $3, $4, $5)",
                       .int(seq), .text(id), .text(type), .int(ts), .text(bodyText))
        return seq
    }

    static func nextSeq(_ db: Database) throws -> Int64 {
        guard let row = try db.queryOne("UPDATE outbox_seq SET seq = seq + 1 WHERE one = 1 RETURNING seq") else {
            throw StoreError(.other, "outbox_seq row missing")
        }
        return row.int("seq")
    }

    static let columns = "seq, id, type, ts, body, envelope"

    /// ``columns`` for a relay page: on SQLite the envelope read as a blob,
    /// its bytes as stored, with no String built and validated per event.
    static func relayColumns(_ db: Database) -> String {
        db.dialect == .postgres ? columns : "seq, id, type, ts, body, CAST(envelope AS BLOB) AS envelope"
    }

    /// Rows of ``columns`` (or ``relayColumns(_:)``), read by position.
    static func events(_ rows: [Row]) -> [StoredEvent] {
        rows.map { r in
            let v = r.values
            let encoded: [UInt8]?
            switch v[5] {
            case .blob(let bytes): encoded = bytes
            case .text(let text): encoded = Array(text.utf8)
            default: encoded = nil
            }
            return StoredEvent(seq: v[0].int ?? 0, id: v[1].string ?? "", type: v[2].string ?? "", ts: v[3].int ?? 0,
                               encoded: encoded, bodyColumn: v[4].string ?? "")
        }
    }

    /// Events after `after`, in seq order, at most `limit`: the catch-up read.
    public static func since(_ db: Database, after: Int64, limit: Int) throws -> [StoredEvent] {
        events(try db.query("SELECT \(columns) FROM outbox WHERE seq > $1 ORDER BY seq LIMIT $2", .int(after), .int(Int64(limit))))
    }

    /// The lowest seq still kept, or `lastSeq + 1` when none is: a
    /// subscriber whose cursor is below this minus one missed events that
    /// were pruned (``prune(_:before:maxRows:limit:)``).
    public static func oldestSeq(_ db: Database) throws -> Int64 {
        if let row = try db.queryOne("SELECT MIN(seq) AS seq FROM outbox"), !row["seq"].isNull { return row.int("seq") }
        return try lastSeq(db) + 1
    }

    /// Deletes published events written before `before` (ms since epoch),
    /// and published events beyond the newest `maxRows`, oldest first, at
    /// most `limit` in one short transaction. It reads only the first
    /// `limit` rows by seq and stops at the first that must stay (not yet
    /// published, or young), so it never scans the table. Returns how many went.
    @discardableResult
    public static func prune(_ db: Database, before: Int64, maxRows: Int64, limit: Int) throws -> Int {
        try db.transaction {
            let last = try lastSeq(db)
            let relayed = try relayedSeq(db)
            var upTo: Int64?
            for row in try db.query("SELECT seq, ts FROM outbox ORDER BY seq LIMIT $1", .int(Int64(limit))) {
                let seq = row.int("seq")
                guard seq <= relayed, row.int("ts") < before || last - seq >= maxRows else { break }
                upTo = seq
            }
            guard let upTo else { return 0 }
            return try db.execute("DELETE FROM outbox WHERE seq <= $1", .int(upTo))
        }
    }

    /// The highest seq the relay has published: every event at or below it
    /// has gone out, none above it has.
    public static func relayedSeq(_ db: Database) throws -> Int64 {
        try db.queryOne("SELECT seq FROM outbox_relayed WHERE one = 1")?.int("seq") ?? 0
    }

    /// How many events wait for the relay.
    public static func unpublishedCount(_ db: Database) throws -> Int64 {
        try db.queryOne("SELECT COUNT(*) AS n FROM outbox WHERE seq > (SELECT seq FROM outbox_relayed WHERE one = 1)")?.int("n") ?? 0
    }

    /// The highest seq written.
    public static func lastSeq(_ db: Database) throws -> Int64 {
        try db.queryOne("SELECT seq FROM outbox_seq WHERE one = 1")?.int("seq") ?? 0
    }

    /// Publishes unpublished events in seq order through `publish`, moving
    /// the relay's cursor past them in the same transaction (one row
    /// written, however many events). The write lock makes one worker relay
    /// at a time; a crash before commit republishes, and subscribers drop
    /// repeats by seq.
    @discardableResult
    public static func relay(_ db: Database, limit: Int = 500, publish: (StoredEvent) throws -> Void) throws -> Int {
        // A cheap unlocked peek first, so idle workers do not take the lock.
        guard try db.queryOne("SELECT o.seq FROM outbox o, outbox_relayed r WHERE r.one = 1 AND o.seq > r.seq LIMIT 1") != nil else { return 0 }
        return try db.transaction {
            // SQLite's BEGIN IMMEDIATE already excludes other relays; on
            // PostgreSQL an advisory lock does, without blocking writers.
            if db.dialect == .postgres { _ = try db.query("SELECT pg_advisory_xact_lock(7007001)") }
            var after = try relayedSeq(db)
            var sent = 0
            // The page is read a slice at a time, each slice published as
            // soon as it is read: the first events of a page are on their
            // way while the rest is read, so a subscriber is not left idle
            // for a whole page's read (and the commit) at every page.
            let sql = "SELECT \(relayColumns(db)) FROM outbox WHERE seq > $1 ORDER BY seq LIMIT $2"
            while sent < limit {
                let want = min(relaySlice, limit - sent)
                let slice = events(try db.query(sql, .int(after), .int(Int64(want))))
                for e in slice { try publish(e) }
                sent += slice.count
                if let last = slice.last { after = last.seq }
                if slice.count < want { break }
            }
            if sent > 0 {
                try db.execute("UPDATE outbox_relayed SET seq = $1 WHERE one = 1", .int(after))
            }
            return sent
        }
    }

    /// Events read per statement within one relay page.
    static let relaySlice = 100
}
