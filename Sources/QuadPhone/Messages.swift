import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

/// The phone's news (its user's notifications): an inbox in the phone's
/// file, filled from `notifications.since` after the cursor it keeps, when
/// the phone is online and signed in (at sign-in, when the network comes
/// back, and every few seconds of a campus day), and shown in the messages
/// view, which marks what it shows read (`notifications.read`, up to the
/// last seq shown). Offline, the view shows what the file holds.
extension Phone {
    /// Largest page asked of `notifications.since`; more pages follow at once.
    static let newsPage: Int64 = 100
    /// How often a campus day's phones ask for their news.
    package static let newsEveryMs: Int64 = 5000

    static let inboxMigration = Migration(40, """
        -- One row per notification received. user_id: whose the service
        -- says it is (the report compares it with the phone's user); ref:
        -- the order, reservation or listing it is about.
        CREATE TABLE inbox (
            id TEXT PRIMARY KEY,
            seq BIGINT NOT NULL,
            user_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            ref TEXT NOT NULL,
            ts BIGINT NOT NULL,
            read INTEGER NOT NULL DEFAULT 0,
            received_ms BIGINT NOT NULL
        );
        CREATE INDEX inbox_by_seq ON inbox (seq);
        """)

    /// Asks for the news after the phone's cursor, page after page, and
    /// keeps it; nothing while offline, without a session, or while a fetch
    /// is in flight.
    package func fetchNews() {
        guard isOnline, hasValidToken, user != nil, !fetchingNews else { return }
        fetchingNews = true
        let after = Int64((try? db.meta("news_cursor")).flatMap { $0 }.flatMap { Int64($0) } ?? 0)
        request("notifications.since", ["after": .int(after), "limit": .int(Phone.newsPage)], timeoutMs: settings.readTimeoutMs) { [weak self] result in
            guard let self else { return }
            self.fetchingNews = false
            guard case .success(let reply) = result, reply.quadError == nil else { return }
            let more = reply.body["more"]?.bool == true
            do {
                try self.db.transaction {
                    for n in reply.body["items"]?.array ?? [] { try self.keep(n) }
                    if let last = reply.body["last"]?.int, last > after { try self.db.setMeta("news_cursor", String(last)) }
                }
            } catch {
                Log.error("edge/\(self.name)", "news not kept: \(error)")
                return
            }
            if more { self.fetchNews() }
        }
    }

    /// A notification the live feed brought (`notifications.news` on the
    /// broker's updates socket, for this user only): kept at once, the way
    /// `notifications.since` would have; the cursor stays where
    /// `notifications.since` left it, so nothing between is skipped.
    /// Whether it was new to the inbox (not heard through the other broker,
    /// nor fetched already).
    @discardableResult
    func keepNews(_ event: Envelope) -> Bool {
        let n = event.body
        let kept = (try? keep(n)) ?? false
        if kept, let ts = n["ts"]?.int, liveStats.newsLatencies.count < LiveFeed.maxLatencies {
            liveStats.newsLatencies.append(max(0, Int64(Clock.nowMillis()) - ts))
        }
        // A sale of the student's listing: what it earned is read again.
        if kept, n["kind"]?.string == "listing_sold" {
            try? db.setMeta("earnings_read_ms", nil)
            fetchEarnings {}
        }
        return kept
    }

    /// Keeps one notification (an item of `notifications.since` or the body
    /// of a `notifications.news` event) in the inbox; whether it was new.
    /// One the inbox holds already takes this copy only when it is newer
    /// (issue 30 pt 1): a notification's `version` is its seq when made
    /// (a news event's copy, which has none) and rises when it is marked
    /// read; an older copy (a page read before a mark) is dropped and
    /// counted (`news_older` in meta), so a notification read never shows unread again.
    @discardableResult
    func keep(_ n: JSON) throws -> Bool {
        guard let id = n["id"]?.string, let seq = n["seq"]?.int else { return false }
        let version = n["version"]?.int ?? seq
        if let held = try db.queryOne("SELECT version FROM inbox WHERE id = $1", .text(id))?.int("version") {
            if held > version {
                try db.setMeta(Phone.newsOlderKey, String(Phone.newsOlderDropped(db) + 1))
            } else if version > held {
                try db.execute("UPDATE inbox SET read = $2, version = $3 WHERE id = $1", .text(id), .int(n["read"]?.bool == true ? 1 : 0), .int(version))
            }
            return false
        }
        return try db.execute("""
            INSERT INTO inbox (id, seq, user_id, kind, text, ref, ts, read, received_ms, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
            ON CONFLICT (id) DO NOTHING
            """, .text(id), .int(seq), .text(n["user"]?.string ?? ""), .text(n["kind"]?.string ?? ""), .text(n["text"]?.string ?? ""),
                                .text(n["ref"]?.string ?? ""), .int(n["ts"]?.int ?? 0), .int(n["read"]?.bool == true ? 1 : 0), .int(now), .int(version)) == 1
    }

    static let newsOlderKey = "news_older"

    /// How many copies of a notification older than the inbox's were dropped.
    static func newsOlderDropped(_ db: Database) -> Int { Int((try? db.meta(newsOlderKey)) ?? nil ?? "0") ?? 0 }

    /// The inbox, newest first.
    func news(limit: Int = 100) -> [JSON] {
        let rows = (try? db.query("SELECT * FROM inbox ORDER BY seq DESC LIMIT $1", .int(Int64(limit)))) ?? []
        return rows.map { r in
            ["id": .string(r.string("id")), "seq": .int(r.int("seq")), "kind": .string(r.string("kind")), "text": .string(r.string("text")),
             "ref": .string(r.string("ref")), "ts": .int(r.int("ts")), "read": .bool(r.int("read") == 1), "version": .int(r.int("version"))]
        }
    }

    /// The messages view was shown: what it showed is marked read at the
    /// service, and here once the service says so (a mark that fails is
    /// made again the next time the view opens online).
    func markNewsRead() {
        guard isOnline, hasValidToken,
              let upTo = (try? db.queryOne("SELECT MAX(seq) AS s FROM inbox WHERE read = 0"))??["s"].int else { return }
        request("notifications.read", ["up_to": .int(upTo)], timeoutMs: settings.readTimeoutMs) { [weak self] result in
            guard let self, case .success(let reply) = result, reply.quadError == nil else { return }
            // What this phone showed unread was marked by this request, at the reply's version.
            _ = try? self.db.execute("UPDATE inbox SET read = 1, version = CASE WHEN read = 0 THEN MAX(version, $2) ELSE version END WHERE seq <= $1",
                                     .int(upTo), .int(reply.body["version"]?.int ?? 0))
        }
    }
}

/// What the campus-day report says of the phones' news, from their files:
/// how many notifications they received, by kind, and how many were not
/// their user's: kept under another user, or about an order or a hold the
/// phone never made (an order's and a hold's id is the envelope id of the
/// phone's own `orders.place` or `reservations.hold`).
package enum NewsReport {
    static let ownActionKinds = ["order_confirmed", "order_rejected", "hold_warning", "hold_expired", "rental_due", "rental_overdue"]

    package static func json(_ phones: [Phone]) -> JSON {
        var received: Int64 = 0
        var foreign: Int64 = 0
        var unread: Int64 = 0
        var phonesWithNews: Int64 = 0
        var byKind: [String: Int64] = [:]
        let kinds = ownActionKinds.map { "'\($0)'" }.joined(separator: ", ")
        for p in phones {
            guard let rows = try? p.db.query("SELECT kind, COUNT(*) AS n, SUM(read) AS r FROM inbox GROUP BY kind") else { continue }
            let n = rows.reduce(Int64(0)) { $0 + $1.int("n") }
            received += n
            unread += n - rows.reduce(Int64(0)) { $0 + $1.int("r") }
            if n > 0 { phonesWithNews += 1 }
            for r in rows { byKind[r.string("kind"), default: 0] += r.int("n") }
            let own = (try? p.db.queryOne("SELECT user_id FROM session WHERE one = 1"))??.string("user_id") ?? ""
            foreign += Int64((try? p.db.count("""
                SELECT COUNT(*) AS n FROM inbox WHERE user_id <> $1
                   OR (kind IN (\(kinds)) AND ref NOT IN (SELECT id FROM outbox UNION SELECT id FROM action_log))
                """, .text(own))) ?? 0)
        }
        return [
            "received": .int(received), "unread": .int(unread), "phones": .int(phonesWithNews),
            "by_kind": .object(byKind.mapValues { .int($0) }),
            "not_theirs": .int(foreign),
        ]
    }
}
