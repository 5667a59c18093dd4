import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The telemetry collector: batches of phone events, validated one by one,
/// stored once each by event id. A second delivery of an event is a natural
/// duplicate when it carries the same payload; with another payload it is a
/// conflict, kept aside and counted, never applied. Raw events stay here:
/// the `telemetry.batch` event is a summary (counts by name), and analytics
/// pulls the raw events with `telemetry.raw.since`, an internal request.
public enum Telemetry: ServiceDomain {
    public static let name = "telemetry"
    public static let summary = "collects phones' telemetry batches, stored once each by event id"

    /// Most events in one `telemetry.ingest` (`max_batch_events`).
    public static let maxBatchEvents = Contract.Telemetry.maxBatchEvents
    /// Largest `body.events`, encoded, in bytes (`max_batch_bytes`).
    public static let maxBatchBytes = 1 << 20
    /// Largest page of `telemetry.raw.since` (`max_raw_page`), and the bytes
    /// a page stops at, so a reply stays well under the message limit.
    public static let maxRawPage = Contract.Telemetry.maxRawPage
    static let rawPageBytes = 768 * 1024
    /// Rows per INSERT statement.
    static let insertChunk = 100

    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE events (
                id TEXT PRIMARY KEY,
                seq BIGINT NOT NULL,
                phone TEXT NOT NULL,
                user_id TEXT,
                session TEXT NOT NULL,
                name TEXT NOT NULL,
                ts BIGINT NOT NULL,
                offline INTEGER NOT NULL,
                queued_ms BIGINT,
                props TEXT NOT NULL,
                digest TEXT NOT NULL,
                received_ms BIGINT NOT NULL
            );
            CREATE UNIQUE INDEX events_seq ON events (seq);
            CREATE TABLE event_conflicts (
                id TEXT NOT NULL,
                digest TEXT NOT NULL,
                payload TEXT NOT NULL,
                first_ms BIGINT NOT NULL,
                last_ms BIGINT NOT NULL,
                times BIGINT NOT NULL,
                PRIMARY KEY (id, digest)
            );
            CREATE TABLE raw_seq (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
            INSERT INTO raw_seq (one, seq) VALUES (1, 0);
            CREATE TABLE ingest_totals (
                one INTEGER PRIMARY KEY CHECK (one = 1),
                batches BIGINT NOT NULL, accepted BIGINT NOT NULL, duplicate BIGINT NOT NULL,
                conflicting BIGINT NOT NULL, rejected BIGINT NOT NULL
            );
            INSERT INTO ingest_totals (one, batches, accepted, duplicate, conflicting, rejected) VALUES (1, 0, 0, 0, 0, 0);
            """),
    ]

    /// How long the reply record of a `telemetry.ingest` is kept
    /// (`reply_retention_ms`): a phone's retry of a batch within it gets the
    /// stored reply; a later resend runs again and finds every event already
    /// stored, so it is counted as duplicates, never stored twice. Short is
    /// safe; the default is an hour.
    public static let defaultReplyRetentionMs: Int64 = 3_600_000
    /// How long a conflicting delivery kept aside in `event_conflicts` stays
    /// after it was last seen (`conflict_retention_ms`), a week.
    public static let defaultConflictRetentionMs: Int64 = 7 * 86_400_000
    /// How often the expired records are deleted (`prune_every_ms`).
    public static let defaultPruneEveryMs: Int64 = 60_000
    /// Rows deleted per statement, so a prune never holds the store for long.
    static let pruneChunk = 5000

    public static let options: [(String, String, String?)] = [
        ("reply-retention-ms", "how long a telemetry.ingest reply record is kept for a retried batch (reply_retention_ms; a later resend is counted as duplicates)",
         String(defaultReplyRetentionMs)),
        ("conflict-retention-ms", "how long a conflicting delivery kept aside stays after it was last seen (conflict_retention_ms)",
         String(defaultConflictRetentionMs)),
        ("prune-every-ms", "how often expired reply and conflict records are deleted (prune_every_ms)", String(defaultPruneEveryMs)),
    ]

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        func setting(_ name: String, _ d: Int64, min: Int64) throws -> Int64 {
            guard let text = options[name] else { return d }
            guard let v = Int64(text), v >= min else { throw QuadError.badRequest("--\(name) must be an integer of at least \(min), got '\(text)'") }
            return v
        }
        let replies = try setting("reply-retention-ms", defaultReplyRetentionMs, min: 0)
        let conflicts = try setting("conflict-retention-ms", defaultConflictRetentionMs, min: 0)
        let every = try setting("prune-every-ms", defaultPruneEveryMs, min: 10)
        register(worker.handlers, db: db)
        let instance = worker.handlers.instance
        worker.every(every) {
            let n = try prune(db, replyRetentionMs: replies, conflictRetentionMs: conflicts, now: Int64(Clock.nowMillis()))
            if n.replies + n.conflicts > 0 { Log.info(instance, "pruned \(n.replies) reply records and \(n.conflicts) conflict records") }
        }
    }

    /// Deletes the reply records of `telemetry.ingest` older than
    /// `replyRetentionMs` and the conflicts last seen before
    /// `conflictRetentionMs`, a chunk per statement. Raw events are the
    /// product's data and are never pruned here.
    @discardableResult
    public static func prune(_ db: Database, replyRetentionMs: Int64, conflictRetentionMs: Int64, now: Int64) throws -> (replies: Int, conflicts: Int) {
        var replies = 0, conflicts = 0
        while true {
            let n = try db.execute("""
                DELETE FROM idempotency WHERE id IN
                    (SELECT id FROM idempotency WHERE type = 'telemetry.ingest' AND created_ms < $1 LIMIT \(pruneChunk))
                """, .int(now - replyRetentionMs))
            replies += n
            if n < pruneChunk { break }
        }
        while true {
            let n = try db.execute("""
                DELETE FROM event_conflicts WHERE (id, digest) IN
                    (SELECT id, digest FROM event_conflicts WHERE last_ms < $1 LIMIT \(pruneChunk))
                """, .int(now - conflictRetentionMs))
            conflicts += n
            if n < pruneChunk { break }
        }
        return (replies, conflicts)
    }

    /// Registers the handlers; split from ``install`` so tests drive them without a broker.
    public static func register(_ h: Handlers, db: Database) {
        h.mutation(C.ingest) { req, body in
            // Attributed by the token: the broker's verified user, never a
            // `user` field of an event (see ``PhoneEvent``).
            try ingest(db, body.events, batch: req.id, user: req.user).reply
        }
        // Answered as bytes, each event encoded once (it was encoded to be
        // measured, then again with the page): analytics pulls every event
        // while phones send them, and on two cores this page took a sixth
        // of telemetry's time under ingest. The body was checked against
        // the contract before this runs, as every request's is.
        h.query(C.rawSince.type, encoded: { req in
            try req.requireService()
            let body = try C.RawSinceRequest(json: req.body)
            return try rawSince(db, after: body.after ?? 0, limit: body.limit ?? 1000)
        })
        h.query(C.stats) { req, _ in
            try req.requireService()
            return try stats(db)
        }
    }

    typealias C = Contract.Telemetry

    // MARK: ingest

    /// What one batch did.
    struct Outcome {
        var accepted = 0
        var duplicate = 0
        var conflicting = 0
        var rejected: [(index: Int, id: String?, reason: String)] = []
        var byName: [String: Int] = [:]
        var seqRange: (Int64, Int64)?

        /// The reply.
        var reply: C.IngestReply {
            C.IngestReply(accepted: Int64(accepted), duplicate: Int64(duplicate), conflicting: Int64(conflicting),
                          rejected: rejected.map { C.Rejection(index: Int64($0.index), id: $0.id, reason: $0.reason) })
        }
    }

    /// Validates, stores and counts one batch, in the caller's transaction;
    /// every event is attributed to `user`, the envelope's verified user
    /// (nil: a guest).
    static func ingest(_ db: Database, _ events: [JSON], batch: String, user: String?) throws -> Outcome {
        // The validator has checked the count against the contract before
        // the handler runs; this stands for callers that come without it.
        guard !events.isEmpty else { throw QuadError.badRequest("body.events must hold at least one event") }
        guard events.count <= maxBatchEvents else {
            throw QuadError.tooLarge("body.events has \(events.count) events, over the limit max_batch_events=\(maxBatchEvents)",
                                     details: ["max_batch_events": .int(Int64(maxBatchEvents)), "events": .int(Int64(events.count))])
        }
        // Each event encoded once (keys sorted, compact): the size of the
        // list is theirs plus the brackets and commas, and an event whose id
        // is already in lower case and whose `user` is the verified one is
        // its own canonical payload.
        let encoded = events.map { $0.encoded() }
        let bytes = encoded.reduce(1 + events.count) { $0 + $1.count }
        guard bytes <= maxBatchBytes else {
            throw QuadError.tooLarge("body.events is \(bytes) bytes, over the limit max_batch_bytes=\(maxBatchBytes)",
                                     details: ["max_batch_bytes": .int(Int64(maxBatchBytes)), "bytes": .int(Int64(bytes))])
        }

        var outcome = Outcome()
        // Valid events, the first delivery of each id in this batch, with
        // the digest of its canonical payload; later deliveries of an id in
        // the same batch are compared once the first one's fate is known.
        var fresh: [(event: PhoneEvent, payload: String, digest: String, props: String)] = []
        var seen: Set<String> = []
        var repeats: [(id: String, payload: String, digest: String)] = []
        let verified: JSON = user.map { .string($0) } ?? .null
        for (index, value) in events.enumerated() {
            let event: PhoneEvent
            do { event = try PhoneEvent(value).attributed(to: user) } catch {
                outcome.rejected.append((index, value["id"]?.string, error.message))
                continue
            }
            let own = value["id"]?.string == event.id && value["user"] == verified
            let payload = own ? String(decoding: encoded[index], as: UTF8.self) : event.canonical
            if seen.contains(event.id) {
                repeats.append((event.id, payload, digest(payload)))
            } else {
                seen.insert(event.id)
                // The props column is the event's `props` as encoded
                // with it, cut from those bytes rather than encoded again.
                let props = propsText(in: encoded[index]) ?? JSON.object(event.props).text
                fresh.append((event, payload, digest(payload), props))
            }
        }

        let now = Int64(Clock.nowMillis())
        var conflicts: [(id: String, payload: String, digest: String)] = []
        // The digest of the payload that stands for each id: stored before, or stored now.
        var applied: [String: String] = [:]
        if !fresh.isEmpty {
            // Seqs are taken under the counter's row lock, held to commit, so
            // they grow in commit order and `raw.since` never skips a row.
            let top = try db.queryOne("UPDATE raw_seq SET seq = seq + $1 WHERE one = 1 RETURNING seq", .int(Int64(fresh.count)))!.int("seq")
            let base = top - Int64(fresh.count)
            let rows: [[SQLValue]] = fresh.enumerated().map { k, f in
                let e = f.event
                return [.text(e.id), .int(base + Int64(k) + 1), .text(e.phone), .of(e.user), .text(e.session), .text(e.name),
                        .int(e.ts), .of(e.offline), .of(e.queuedMs), .text(f.props), .text(f.digest), .int(now)]
            }
            let inserted = try insert(db, rows)
            var stored: [(event: PhoneEvent, payload: String, digest: String, props: String)] = []
            for f in fresh {
                if inserted.contains(f.event.id) {
                    outcome.accepted += 1
                    outcome.byName[f.event.name, default: 0] += 1
                    applied[f.event.id] = f.digest
                } else {
                    stored.append(f)
                }
            }
            if !inserted.isEmpty { outcome.seqRange = (base + 1, top) }
            // Already stored by an earlier batch: the same payload or another.
            if !stored.isEmpty {
                let existing = try digests(db, ids: stored.map(\.event.id))
                for f in stored {
                    applied[f.event.id] = existing[f.event.id]
                    if existing[f.event.id] == f.digest { outcome.duplicate += 1 } else { conflicts.append((f.event.id, f.payload, f.digest)) }
                }
            }
        }
        for r in repeats {
            if applied[r.id] == r.digest { outcome.duplicate += 1 } else { conflicts.append(r) }
        }
        for c in conflicts {
            try db.execute("""
                INSERT INTO event_conflicts (id, digest, payload, first_ms, last_ms, times) VALUES ($1, $2, $3, $4, $4, 1)
                ON CONFLICT (id, digest) DO UPDATE SET times = event_conflicts.times + 1, last_ms = excluded.last_ms
                """, .text(c.id), .text(c.digest), .text(c.payload), .int(now))
        }
        outcome.conflicting = conflicts.count
        try db.execute("""
            UPDATE ingest_totals SET batches = batches + 1, accepted = accepted + $1, duplicate = duplicate + $2,
                conflicting = conflicting + $3, rejected = rejected + $4 WHERE one = 1
            """, .int(Int64(outcome.accepted)), .int(Int64(outcome.duplicate)), .int(Int64(outcome.conflicting)), .int(Int64(outcome.rejected.count)))
        if outcome.accepted > 0, let (first, last) = outcome.seqRange {
            // A summary only: no event, no user id.
            try Outbox.append(db, type: C.batch.type, body: C.BatchSummary(
                batch: batch, events: Int64(events.count), accepted: Int64(outcome.accepted),
                duplicate: Int64(outcome.duplicate), conflicting: Int64(outcome.conflicting),
                rejected: Int64(outcome.rejected.count), byName: outcome.byName.mapValues { Int64($0) },
                rawSeq: C.SeqRange(first: first, last: last)).json)
        }
        return outcome
    }

    /// The `props` object of a valid event's encoding (keys sorted,
    /// compact), as those bytes: its members before `props` are `id`,
    /// `name`, `offline` and `phone`, strings and a boolean, inside which a
    /// quote is always escaped, so the first `"props":` is the member's key.
    /// Nil when the bytes are not that (the caller encodes props instead).
    static func propsText(in bytes: [UInt8]) -> String? {
        let key = Array(#""props":"#.utf8)
        guard bytes.count > key.count else { return nil }
        var start = -1
        var i = 0
        while i + key.count < bytes.count {
            if bytes[i] == key[0], bytes[i..<i + key.count].elementsEqual(key) { start = i + key.count; break }
            i += 1
        }
        guard start >= 0, bytes[start] == UInt8(ascii: "{") else { return nil }
        var depth = 0, inString = false, escaped = false
        for k in start..<bytes.count {
            let c = bytes[k]
            if inString {
                if escaped { escaped = false } else if c == UInt8(ascii: "\\") { escaped = true } else if c == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch c {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                if depth == 0 { return String(decoding: bytes[start...k], as: UTF8.self) }
            default: break
            }
        }
        return nil
    }

    static let eventColumns = ["id", "seq", "phone", "user_id", "session", "name", "ts", "offline", "queued_ms", "props", "digest", "received_ms"]

    /// Stores the rows whose id is new; returns the ids stored. PostgreSQL:
    /// COPY into a session's staging table, then one set-based INSERT that
    /// keeps the dedup by id (ON CONFLICT). SQLite: multi-row INSERTs of a
    /// few fixed sizes (``chunks(_:)``), each prepared once per connection.
    static func insert(_ db: Database, _ rows: [[SQLValue]]) throws -> Set<String> {
        var inserted = Set<String>()
        let columns = eventColumns.joined(separator: ", ")
        if let pg = db as? PostgresDatabase {
            // A temporary table is the session's own: concurrent workers
            // never see each other's rows; emptied at commit.
            try pg.executeScript("CREATE TEMP TABLE IF NOT EXISTS events_incoming (LIKE events) ON COMMIT DELETE ROWS; TRUNCATE events_incoming")
            try pg.copy(into: "events_incoming", columns: eventColumns, rows: rows)
            for r in try pg.query("INSERT INTO events (\(columns)) SELECT \(columns) FROM events_incoming ON CONFLICT (id) DO NOTHING RETURNING id") {
                inserted.insert(r.string("id"))
            }
            return inserted
        }
        let row = "(" + eventColumns.map { _ in "?" }.joined(separator: ", ") + ")"
        for chunk in chunks(rows) {
            let sql = "INSERT INTO events (\(columns)) VALUES " + Array(repeating: row, count: chunk.count).joined(separator: ", ")
                + " ON CONFLICT (id) DO NOTHING RETURNING id"
            for r in try db.query(sql, chunk.flatMap { $0 }) { inserted.insert(r.string("id")) }
        }
        return inserted
    }

    /// `items` cut into pieces of ``insertChunk``, then 10, then 1: a
    /// batch of any size runs at most three statement texts, so each is
    /// prepared once per connection and the statement cache is not filled
    /// with one text per batch size.
    static func chunks<T>(_ items: [T]) -> [ArraySlice<T>] {
        var out: [ArraySlice<T>] = []
        var start = items.startIndex
        for size in [insertChunk, 10, 1] {
            while items.endIndex - start >= size {
                out.append(items[start..<start + size])
                start += size
            }
        }
        return out
    }

    /// The digest of the stored payload of each id.
    static func digests(_ db: Database, ids: [String]) throws -> [String: String] {
        var out: [String: String] = [:]
        for chunk in chunks(ids) {
            let marks = chunk.indices.map { "$\($0 - chunk.startIndex + 1)" }.joined(separator: ", ")
            for r in try db.query("SELECT id, digest FROM events WHERE id IN (\(marks))", chunk.map { .text($0) }) {
                out[r.string("id")] = r.string("digest")
            }
        }
        return out
    }

    static func event(_ r: Row) -> PhoneEvent {
        PhoneEvent(id: r.string("id"), phone: r.string("phone"), user: r.optionalString("user_id"), session: r.string("session"),
                   name: r.string("name"), ts: r.int("ts"), offline: r.int("offline") != 0, queuedMs: r["queued_ms"].int,
                   props: (try? JSON.parse(r.string("props")))?.object ?? [:])
    }

    /// FNV-1a, 64 bits, in hex, of an event's canonical payload: a second
    /// delivery is a duplicate when its digest equals the stored one's (two
    /// different payloads of one id collide with odds of 2^-64).
    static func digest(_ text: String) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in text.utf8 {
            h ^= UInt64(b)
            h = h &* 0x100_0000_01b3
        }
        let s = String(h, radix: 16)
        return String(repeating: "0", count: 16 - s.count) + s
    }

    // MARK: reads

    /// Raw events after `after` in seq order, at most `limit` and about
    /// ``rawPageBytes``: what analytics pulls.
    /// A page of `telemetry.raw.since` (a ``C.RawPage``), encoded: each
    /// event once, the page cut where its events reach `rawPageBytes`.
    static func rawSince(_ db: Database, after: Int64, limit: Int64) throws -> [UInt8] {
        let rows = try db.query("SELECT * FROM events WHERE seq > $1 ORDER BY seq LIMIT $2", .int(after), .int(limit))
        var list: [[UInt8]] = []
        var bytes = 0
        for r in rows {
            var e = event(r).json
            if case .object(var f) = e { f["seq"] = .int(r.int("seq")); e = .object(f) }
            let encoded = e.encoded()
            bytes += encoded.count
            list.append(encoded)
            if bytes >= rawPageBytes { break }
        }
        let last = try db.queryOne("SELECT COALESCE(MAX(seq), 0) AS last FROM events")?.int("last") ?? 0
        return Handlers.eventsPage(list, ["last": .int(last), "more": .bool(list.count < rows.count || Int64(rows.count) == limit)])
    }

    static func stats(_ db: Database) throws -> C.Stats {
        let t = try db.queryOne("SELECT * FROM ingest_totals WHERE one = 1")!
        let stored = try db.queryOne("SELECT COUNT(*) AS n FROM events")?.int("n") ?? 0
        let kept = try db.queryOne("SELECT COUNT(*) AS n, COALESCE(SUM(times), 0) AS times FROM event_conflicts")
        var byName: [String: Int64] = [:]
        for r in try db.query("SELECT name, COUNT(*) AS n FROM events GROUP BY name") { byName[r.string("name")] = r.int("n") }
        return C.Stats(events: stored, conflicts: kept?.int("n") ?? 0, byName: byName,
                       totals: C.Totals(batches: t.int("batches"), accepted: t.int("accepted"), duplicate: t.int("duplicate"),
                                        conflicting: t.int("conflicting"), rejected: t.int("rejected")))
    }

    // MARK: the validator as a command

    /// `quad-telemetry validate`: reads a JSON list of events on stdin and
    /// prints one line per event, `{"index":..,"valid":..,"reason":..}`, so
    /// the Python schema tests can compare this validator with jsonschema.
    public static func validateCommand() -> Int32 {
        let input = FileHandle.standardInput.readDataToEndOfFile()
        let value: JSON
        do { value = try JSON.parse([UInt8](input)) } catch {
            FileHandle.standardError.write(Data("quad-telemetry validate: \(error.message)\n".utf8))
            return 1
        }
        guard let list = value.array else {
            FileHandle.standardError.write(Data("quad-telemetry validate: expected a JSON list of events on stdin\n".utf8))
            return 1
        }
        var out = ""
        for (k, e) in list.enumerated() {
            let line: JSON
            do {
                _ = try PhoneEvent(e)
                line = ["index": .int(Int64(k)), "valid": true]
            } catch {
                line = ["index": .int(Int64(k)), "valid": false, "reason": .string(error.message)]
            }
            out += line.text + "\n"
        }
        FileHandle.standardOutput.write(Data(out.utf8))
        return 0
    }
}
