import QuadWire

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
    ]
}

/// Idempotency records: a mutation's id and its reply, written in the same
/// transaction as the change, so a repeated id gets the stored reply and
/// never a second effect.
public enum Idempotency {
    /// The reply stored for `id`, if this request was already applied.
    public static func storedReply(_ db: Database, id: String) throws -> Envelope? {
        guard let row = try db.queryOne("SELECT reply FROM idempotency WHERE id = $1", .text(id)) else { return nil }
        return try? Envelope.decode(Array(row.string("reply").utf8), maxBytes: .max)
    }

    public static func store(_ db: Database, id: String, type: String, reply: Envelope) throws {
        try db.execute("INSERT INTO idempotency (id, type, reply, created_ms) VALUES ($1, $2, $3, $4)",
                       .text(id), .text(type), .text(String(decoding: reply.encoded(), as: UTF8.self)), .int(Int64(Clock.nowMillis())))
    }
}

/// A stored event, as the relay publishes it and `events.since` returns it.
public struct StoredEvent: Sendable, Equatable {
    public let seq: Int64
    public let id: String
    public let type: String
    public let ts: Int64
    public let body: JSON

    public func envelope(src: String) -> Envelope {
        Envelope(id: id, type: type, kind: .event, ts: ts, src: src, seq: seq, body: body)
    }
}

/// The transactional outbox: events are written in the same transaction as
/// the change that caused them, numbered by a per-service `seq` that grows
/// in commit order (the counter row is locked by the writing transaction).
public enum Outbox {
    /// Appends an event inside the caller's transaction; returns its seq.
    @discardableResult
    public static func append(_ db: Database, type: String, body: JSON, id: String = MessageID.make()) throws -> Int64 {
        guard let row = try db.queryOne("UPDATE outbox_seq SET seq = seq + 1 WHERE one = 1 RETURNING seq") else {
            throw StoreError(.other, "outbox_seq row missing")
        }
        let seq = row.int("seq")
        try db.execute("INSERT INTO outbox (seq, id, type, ts, body) VALUES ($1, $2, $3, $4, $5)",
                       .int(seq), .text(id), .text(type), .int(Int64(Clock.nowMillis())), .text(body.text))
        return seq
    }

    static func events(_ rows: [Row]) -> [StoredEvent] {
        rows.map { r in
            StoredEvent(seq: r.int("seq"), id: r.string("id"), type: r.string("type"), ts: r.int("ts"),
                        body: (try? JSON.parse(r.string("body"))) ?? .null)
        }
    }

    /// Events after `after`, in seq order, at most `limit`: the catch-up read.
    public static func since(_ db: Database, after: Int64, limit: Int) throws -> [StoredEvent] {
        events(try db.query("SELECT seq, id, type, ts, body FROM outbox WHERE seq > $1 ORDER BY seq LIMIT $2", .int(after), .int(Int64(limit))))
    }

    /// The highest seq written.
    public static func lastSeq(_ db: Database) throws -> Int64 {
        try db.queryOne("SELECT seq FROM outbox_seq WHERE one = 1")?.int("seq") ?? 0
    }

    /// Publishes unpublished events in seq order through `publish`, marking
    /// them in the same transaction. The write lock makes one worker relay at
    /// a time; a crash before commit republishes, and subscribers drop
    /// repeats by seq.
    @discardableResult
    public static func relay(_ db: Database, limit: Int = 500, publish: (StoredEvent) throws -> Void) throws -> Int {
        // A cheap unlocked peek first, so idle workers do not take the lock.
        guard try db.queryOne("SELECT seq FROM outbox WHERE published = 0 LIMIT 1") != nil else { return 0 }
        return try db.transaction {
            // SQLite's BEGIN IMMEDIATE already excludes other relays; on
            // PostgreSQL an advisory lock does, without blocking writers.
            if db.dialect == .postgres { _ = try db.query("SELECT pg_advisory_xact_lock(7007001)") }
            let pending = events(try db.query("SELECT seq, id, type, ts, body FROM outbox WHERE published = 0 ORDER BY seq LIMIT $1", .int(Int64(limit))))
            for e in pending { try publish(e) }
            if let last = pending.last {
                try db.execute("UPDATE outbox SET published = 1 WHERE published = 0 AND seq <= $1", .int(last.seq))
            }
            return pending.count
        }
    }
}
