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
    ]
}

/// Idempotency records: a mutation's id, its type, who sent it and its
/// reply, written in the same transaction as the change, so a repeated id
/// gets the stored reply and never a second effect. A record belongs to its
/// owner: the same id from anyone else, or with another type, is refused
/// with 409 and learns nothing of the first reply.
public enum Idempotency {
    /// Whom a request's record belongs to: `user:<id>` when the broker
    /// verified a user; else the broker's `caller` header (`key:<Z85>` for
    /// an anonymous client, `service:<src>` on the internal frontend); else
    /// `anonymous`. A service acting for a user (role `service`) owns its
    /// records together with that user, so neither alone can replay them.
    public static func owner(user: String?, role: String?, caller: String?) -> String {
        let who: String? = user.flatMap { $0.isEmpty ? nil : "user:" + $0 }
        if role == "service" {
            let service = caller.flatMap { $0.isEmpty ? nil : $0 } ?? "service"
            return who.map { service + " for " + $0 } ?? service
        }
        return who ?? caller.flatMap { $0.isEmpty ? nil : $0 } ?? "anonymous"
    }

    public static func owner(of envelope: Envelope) -> String {
        owner(user: envelope.user, role: envelope.role, caller: envelope.caller)
    }

    /// The 409 for an id that someone else used, or used for another type.
    /// It says nothing of the first request beyond that the id is taken: to
    /// another caller, not even its type.
    public static func taken(type: String, storedType: String, sameOwner: Bool = false) -> QuadError {
        if sameOwner && storedType != type {
            return .conflict("this request id was used for another request type: send a new id for \(type)", details: ["reason": "id_taken"])
        }
        return .conflict("this request id was used by another caller: send a new id", details: ["reason": "id_taken"])
    }

    /// The reply stored for `id` when `owner` sent it as `type`; nil when
    /// the id is unused; a 409 ``QuadError`` when the record is someone
    /// else's or of another type (the check runs before anything of the
    /// stored reply is read).
    public static func claim(_ db: Database, id: String, type: String, owner: String) throws -> Envelope? {
        try claimEncoded(db, id: id, type: type, owner: owner).flatMap { try? Envelope.decode($0, maxBytes: .max) }
    }

    /// The same, as the bytes that were sent the first time: a retry gets
    /// them back as they are, never decoded and encoded again.
    public static func claimEncoded(_ db: Database, id: String, type: String, owner: String) throws -> [UInt8]? {
        guard let row = try db.queryOne("SELECT type, owner, reply FROM idempotency WHERE id = $1", .text(id)) else { return nil }
        let storedType = row.string("type")
        let sameOwner = row.string("owner") == owner
        guard storedType == type, sameOwner else { throw taken(type: type, storedType: storedType, sameOwner: sameOwner) }
        return Array(row.string("reply").utf8)
    }

    public static func store(_ db: Database, id: String, type: String, owner: String, reply: Envelope) throws {
        try store(db, id: id, type: type, owner: owner, encoded: reply.encoded())
    }

    /// Keeps `encoded`, the reply's bytes as they are sent, so a retry gets
    /// the very same bytes.
    public static func store(_ db: Database, id: String, type: String, owner: String, encoded: [UInt8]) throws {
        try db.execute("INSERT INTO idempotency (id, type, owner, reply, created_ms) VALUES ($1, $2, $3, $4, $5)",
                       .text(id), .text(type), .text(owner), .text(String(decoding: encoded, as: UTF8.self)),
                       .int(Int64(Clock.nowMillis())))
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

/// A stored event, as the relay publishes it and `events.since` returns it.
public struct StoredEvent: Sendable, Equatable {
    public let seq: Int64
    public let id: String
    public let type: String
    public let ts: Int64
    /// The envelope as it was encoded when the event was written; nil for
    /// a row written before the outbox kept it, or with no ``Database/eventSource``.
    public let encoded: [UInt8]?
    let storedBody: String

    /// The event's body: from the encoded envelope, or the row's own column.
    public var body: JSON {
        if let encoded { return (try? JSON.parse(encoded))?["body"] ?? .null }
        return (try? JSON.parse(storedBody)) ?? .null
    }

    /// The bytes to publish: the stored envelope as it is, or (an old row)
    /// one built from the columns.
    public func bytes(src: String) -> [UInt8] { encoded ?? built(src: src).encoded() }

    /// The envelope as a value, parsed from the stored bytes when there are.
    public func envelope(src: String) -> Envelope {
        if let encoded, let e = try? Envelope.decode(encoded, maxBytes: .max) { return e }
        return built(src: src)
    }

    /// The envelope as JSON (for `events.since`), parsed from the stored bytes.
    public func json(src: String) -> JSON {
        if let encoded, let value = try? JSON.parse(encoded) { return value }
        return built(src: src).json
    }

    func built(src: String) -> Envelope {
        Envelope(id: id, type: type, kind: .event, ts: ts, src: src, seq: seq, body: (try? JSON.parse(storedBody)) ?? .null)
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
        let ts = Int64(Clock.nowMillis())
        // Encoded once, here: the body lives inside the envelope, and the
        // body column (kept for rows of older builds) stays empty.
        if let src = db.eventSource {
            let envelope = Envelope(id: id, type: type, kind: .event, ts: ts, src: src, seq: seq, body: body)
            try db.execute("INSERT INTO outbox (seq, id, type, ts, body, envelope) VALUES ($1, $2, $3, $4, '', $5)",
                           .int(seq), .text(id), .text(type), .int(ts), .text(String(decoding: envelope.encoded(), as: UTF8.self)))
        } else {
            try db.execute("INSERT INTO outbox (seq, id, type, ts, body) VALUES ($1, $2, $3, $4, $5)",
                           .int(seq), .text(id), .text(type), .int(ts), .text(body.text))
        }
        return seq
    }

    static let columns = "seq, id, type, ts, body, envelope"

    static func events(_ rows: [Row]) -> [StoredEvent] {
        rows.map { r in
            StoredEvent(seq: r.int("seq"), id: r.string("id"), type: r.string("type"), ts: r.int("ts"),
                        encoded: r.optionalString("envelope").map { Array($0.utf8) }, storedBody: r.string("body"))
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
            var upTo: Int64?
            for row in try db.query("SELECT seq, ts, published FROM outbox ORDER BY seq LIMIT $1", .int(Int64(limit))) {
                let seq = row.int("seq")
                guard row.int("published") == 1, row.int("ts") < before || last - seq >= maxRows else { break }
                upTo = seq
            }
            guard let upTo else { return 0 }
            return try db.execute("DELETE FROM outbox WHERE seq <= $1 AND published = 1", .int(upTo))
        }
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
            let pending = events(try db.query("SELECT \(columns) FROM outbox WHERE published = 0 ORDER BY seq LIMIT $1", .int(Int64(limit))))
            for e in pending { try publish(e) }
            if let last = pending.last {
                try db.execute("UPDATE outbox SET published = 1 WHERE published = 0 AND seq <= $1", .int(last.seq))
            }
            return pending.count
        }
    }
}
