import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The notifications service: each user's private news (an order
/// confirmed or rejected, a hold about to end or ended, a rental due or
/// overdue, a listing sold), made from other services' events and kept in
/// an inbox that only its user reads (`notifications.since`,
/// `notifications.read`).
///
/// Each notification is made once per fact: its natural key (the order,
/// the reservation, the sale's event) is unique in the store, and each is
/// written with its `notifications.news` event in one transaction, for the
/// broker to route to that user's phones. The timed ones (a hold's warning,
/// a rental's due day) come from deadlines kept in the store and a sweep on
/// the worker's timer: a restart loses none, and a hold checked in or
/// cancelled first is never warned.
///
/// Each notification has a version (issue 30 pt 1) from the service's own
/// counter, the one that numbers notifications (`notification_seq`): its
/// seq when made, and a new number each time a `notifications.read` marks
/// it read, written in the transaction that changed it, so that a phone
/// can tell which of two copies is newer (a `notifications.since` page
/// read before the mark, the mark's reply). Not an outbox seq, as orders'
/// versions are: marking read publishes no event. Seqs of notifications
/// already skip numbers (a fact told twice takes one and writes nothing),
/// so `notifications.since` pages the same.
public enum Notifications: ServiceDomain {
    public static let name = "notifications"
    public static let summary = "each user's private news: orders, holds, rentals, listings sold"

    typealias C = Contract.Notifications

    public static let options: [(String, String, String?)] = [
        ("max-inbox", "most notifications one user's inbox keeps (max_inbox): past it the oldest read ones are dropped, then the oldest", "500"),
        ("hold-warning-seconds", "how long before a hold's deadline its user is warned", "120"),
        ("sweep-every-ms", "how often the timed notifications (hold warnings, rentals due) are looked for", "1000"),
    ]

    /// The bounds and timings of the service, each a flag.
    public struct Settings: Sendable {
        /// Most notifications one user keeps (`max_inbox`, --max-inbox).
        public var maxInbox: Int64 = 500
        /// How long before a hold's deadline the warning goes (--hold-warning-seconds).
        public var holdWarningMs: Int64 = 120_000
        public init() {}
    }

    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE notifications (
                seq BIGINT PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                user_id TEXT NOT NULL,
                kind TEXT NOT NULL,
                text TEXT NOT NULL,
                ref TEXT NOT NULL,
                fact TEXT NOT NULL UNIQUE,
                created_ms BIGINT NOT NULL,
                read BIGINT NOT NULL DEFAULT 0
            );
            CREATE INDEX notifications_by_user ON notifications (user_id, seq);
            CREATE TABLE notification_seq (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
            INSERT INTO notification_seq (one, seq) VALUES (1, 0);
            CREATE TABLE held_spots (
                reservation TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                spot TEXT NOT NULL,
                deadline_ms BIGINT NOT NULL,
                deadline_local TEXT NOT NULL,
                warned BIGINT NOT NULL DEFAULT 0
            );
            CREATE INDEX held_spots_by_deadline ON held_spots (warned, deadline_ms);
            CREATE TABLE rentals_out (
                order_id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                return_date TEXT NOT NULL,
                due_day BIGINT NOT NULL,
                due_told BIGINT NOT NULL DEFAULT 0
            );
            CREATE INDEX rentals_out_by_day ON rentals_out (due_day);
            """),
        Migration(2, """
            ALTER TABLE notifications ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
            UPDATE notifications SET version = seq;
            """),
    ]

    /// The events it reads, by type.
    static let events: Set<String> = [
        Contract.Orders.confirmed.type, Contract.Orders.rejected.type, Contract.Orders.returned.type, Contract.Orders.cancelled.type,
        Contract.Reservations.held.type, Contract.Reservations.checkedin.type, Contract.Reservations.cancelled.type,
        Contract.Reservations.expired.type, Contract.Reservations.checkedout.type, Contract.Catalog.listingSold.type,
    ]

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let settings = try settings(options)
        guard let every = options["sweep-every-ms"].flatMap(Int64.init), (10...60_000).contains(every) else {
            throw QuadError.badRequest("--sweep-every-ms must be an integer from 10 to 60000, got '\(options["sweep-every-ms"] ?? "")'")
        }
        register(worker.handlers, db: db)
        worker.every(every) { try db.transaction { _ = try sweep(db, now: Int64(Clock.nowMillis()), settings: settings) } }
        try worker.subscribe(to: ["orders", "reservations", "catalog"], wants: { events.contains($0.type) }) { event in
            try apply(db, event, settings: settings)
        }
    }

    static func settings(_ options: [String: String]) throws -> Settings {
        func read(_ name: String, _ range: ClosedRange<Int64>) throws -> Int64 {
            guard let text = options[name], let n = Int64(text), range.contains(n) else {
                throw QuadError.badRequest("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(options[name] ?? "")'")
            }
            return n
        }
        var s = Settings()
        s.maxInbox = try read("max-inbox", 1...100_000)
        s.holdWarningMs = try read("hold-warning-seconds", 1...3600) * 1000
        return s
    }

    /// Registers the handlers; split from ``install`` so tests can drive
    /// them without a broker.
    public static func register(_ h: Handlers, db: Database) {
        h.query(C.since) { req, body in
            let user = try req.requireUser()
            let rows = try db.query("SELECT * FROM notifications WHERE user_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                                    .text(user), .int(body.after), .int(body.limit + 1))
            let items = rows.prefix(Int(body.limit)).map(notification)
            return C.Since.Reply(items: items, last: items.last?.seq ?? body.after, more: rows.count > items.count, unread: try unread(db, user))
        }

        h.mutation(C.read) { req, body in
            let user = try req.requireUser()
            var marked: Int64 = 0
            // The version of what this request marks: one number for all,
            // taken only when there is something to mark.
            var version: Int64?
            func stamp() throws -> Int64 {
                if version == nil { version = try nextSeq(db) }
                return version!
            }
            if let ids = body.ids {
                for id in Set(ids).sorted() {
                    // Another user's notification is not found: its existence is not theirs to learn.
                    guard let row = try db.queryOne("SELECT read FROM notifications WHERE id = $1 AND user_id = $2", .text(id), .text(user)) else {
                        throw QuadError.notFound("you have no notification '\(id)'")
                    }
                    guard row.int("read") == 0 else { continue }
                    marked += Int64(try db.execute("UPDATE notifications SET read = 1, version = $2 WHERE id = $1 AND read = 0", .text(id), .int(try stamp())))
                }
            } else if let upTo = body.upTo,
                      try db.queryOne("SELECT seq FROM notifications WHERE user_id = $1 AND seq <= $2 AND read = 0 LIMIT 1", .text(user), .int(upTo)) != nil {
                marked = Int64(try db.execute("UPDATE notifications SET read = 1, version = $3 WHERE user_id = $1 AND seq <= $2 AND read = 0",
                                              .text(user), .int(upTo), .int(try stamp())))
            }
            return C.Read.Reply(marked: marked, unread: try unread(db, user), version: marked > 0 ? version : nil)
        }
    }

    static func unread(_ db: Database, _ user: String) throws -> Int64 {
        try db.queryOne("SELECT COUNT(*) AS n FROM notifications WHERE user_id = $1 AND read = 0", .text(user))?.int("n") ?? 0
    }

    static func notification(_ r: Row) -> C.Notification {
        var n = C.Notification()
        (n.id, n.user, n.seq, n.kind, n.text, n.ref, n.ts, n.read) =
            (r.string("id"), r.string("user_id"), r.int("seq"), r.string("kind"), r.string("text"), r.string("ref"), r.int("created_ms"), r.int("read") == 1)
        n.version = r.int("version")
        return n
    }

    // MARK: Making notifications

    /// Writes one notification and its `notifications.news` event, unless
    /// `fact` was told already; then keeps the user's inbox to `maxInbox`.
    /// Returns whether it was written.
    @discardableResult
    static func notify(_ db: Database, user: String, kind: String, text: String, ref: String, fact: String, now: Int64,
                       settings: Settings) throws -> Bool {
        let seq = try nextSeq(db)
        let id = MessageID.make()
        guard try db.execute("""
            INSERT INTO notifications (seq, id, user_id, kind, text, ref, fact, created_ms, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $1)
            ON CONFLICT (fact) DO NOTHING
            """, .int(seq), .text(id), .text(user), .text(kind), .text(text), .text(ref), .text(fact), .int(now)) == 1 else { return false }
        try Outbox.append(db, type: C.news.type, body: C.News(user: user, id: id, seq: seq, kind: kind, text: text, ref: ref, ts: now).json)
        try trim(db, user: user, max: settings.maxInbox)
        return true
    }

    /// The next number of the service's counter: a new notification's seq,
    /// or the version a mark gives the notifications it marks.
    static func nextSeq(_ db: Database) throws -> Int64 {
        guard let seq = try db.queryOne("UPDATE notification_seq SET seq = seq + 1 WHERE one = 1 RETURNING seq")?.int("seq") else {
            throw QuadError.internal("notification_seq row missing")
        }
        return seq
    }

    /// Keeps `user`'s inbox to `max` rows: the oldest read ones go first,
    /// then, if all are unread, the oldest.
    static func trim(_ db: Database, user: String, max: Int64) throws {
        let count = try db.queryOne("SELECT COUNT(*) AS n FROM notifications WHERE user_id = $1", .text(user))?.int("n") ?? 0
        guard count > max else { return }
        for readOnly in [true, false] {
            let over = (try db.queryOne("SELECT COUNT(*) AS n FROM notifications WHERE user_id = $1", .text(user))?.int("n") ?? 0) - max
            guard over > 0 else { return }
            try db.execute("""
                DELETE FROM notifications WHERE seq IN
                (SELECT seq FROM notifications WHERE user_id = $1 \(readOnly ? "AND read = 1" : "") ORDER BY seq LIMIT $2)
                """, .text(user), .int(over))
        }
    }

    /// Applies one event of orders, reservations or catalog. A body that
    /// is not what the contract says is skipped (logged), never retried.
    static func apply(_ db: Database, _ e: Envelope, settings: Settings) throws {
        let now = e.ts > 0 ? e.ts : Int64(Clock.nowMillis())
        do {
            switch e.type {
            case Contract.Orders.confirmed.type:
                let o = try Contract.Orders.Placed(json: e.body)
                try notify(db, user: o.user, kind: "order_confirmed", text: Texts.confirmed(o), ref: o.order, fact: "order_confirmed:\(o.order)",
                           now: now, settings: settings)
                if o.mode == "rent", let date = o.returnDate, let day = Days.day(of: date) {
                    try db.execute("INSERT INTO rentals_out (order_id, user_id, return_date, due_day) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                                   .text(o.order), .text(o.user), .text(date), .int(day))
                }
            case Contract.Orders.rejected.type:
                let r = try Contract.Orders.Rejected(json: e.body)
                try notify(db, user: r.user, kind: "order_rejected", text: "Your order \(r.order) was rejected: \(r.reason).", ref: r.order,
                           fact: "order_rejected:\(r.order)", now: now, settings: settings)
            case Contract.Orders.returned.type, Contract.Orders.cancelled.type:
                guard let order = e.body["order"]?.string else { throw QuadError.badRequest("no order") }
                try db.execute("DELETE FROM rentals_out WHERE order_id = $1", .text(order))
            case Contract.Reservations.held.type:
                let h = try Contract.Reservations.ReservationEvent(json: e.body)
                try db.execute("""
                    INSERT INTO held_spots (reservation, user_id, spot, deadline_ms, deadline_local) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING
                    """, .text(h.reservation.id), .text(h.user), .text(h.reservation.spot), .int(h.reservation.deadline),
                               .text(h.reservation.deadlineLocal))
            case Contract.Reservations.expired.type:
                let h = try Contract.Reservations.ReservationEvent(json: e.body)
                try db.execute("DELETE FROM held_spots WHERE reservation = $1", .text(h.reservation.id))
                try notify(db, user: h.user, kind: "hold_expired", text: Texts.expired(h.reservation), ref: h.reservation.id,
                           fact: "hold_expired:\(h.reservation.id)", now: now, settings: settings)
            case Contract.Reservations.checkedin.type, Contract.Reservations.cancelled.type, Contract.Reservations.checkedout.type:
                guard let id = e.body["reservation"]?["id"]?.string else { throw QuadError.badRequest("no reservation.id") }
                try db.execute("DELETE FROM held_spots WHERE reservation = $1", .text(id))
            case Contract.Catalog.listingSold.type:
                let s = try Contract.Catalog.Listings.Sold(json: e.body)
                try notify(db, user: s.seller, kind: "listing_sold", text: Texts.sold(s), ref: s.listing, fact: "listing_sold:\(s.order):\(s.listing)",
                           now: now, settings: settings)
            default:
                return
            }
        } catch let error as QuadError where error.status == 400 {
            Log.error(name, "event \(e.type) \(e.id) skipped: \(error.message)")
        }
    }

    /// Makes the notifications that are due by the clock at `now`: a hold's
    /// warning once its deadline is `holdWarningMs` away (never after the
    /// deadline, never for a hold that ended), a rental due tomorrow, a
    /// rental overdue. Each row is claimed by an update before it is told,
    /// so two workers or a restart tell it once. Returns how many were made.
    static func sweep(_ db: Database, now: Int64, settings: Settings) throws -> Int {
        var made = 0
        for r in try db.query("SELECT * FROM held_spots WHERE warned = 0 AND deadline_ms <= $1 AND deadline_ms > $2",
                              .int(now + settings.holdWarningMs), .int(now)) {
            let id = r.string("reservation")
            guard try db.execute("UPDATE held_spots SET warned = 1 WHERE reservation = $1 AND warned = 0", .text(id)) == 1 else { continue }
            let minutes = max(1, (r.int("deadline_ms") - now + 59_999) / 60_000)
            let text = "Your hold on spot \(r.string("spot")) ends in \(minutes) minute\(minutes == 1 ? "" : "s"), at \(Texts.clock(r.string("deadline_local"))): check in or it is released."
            if try notify(db, user: r.string("user_id"), kind: "hold_warning", text: text, ref: id, fact: "hold_warning:\(id)",
                          now: now, settings: settings) { made += 1 }
        }
        let today = Days.day(ms: now)
        for r in try db.query("SELECT * FROM rentals_out WHERE due_day <= $1", .int(today + 1)) {
            let order = r.string("order_id")
            let date = r.string("return_date")
            if r.int("due_day") < today {
                // Overdue: the last word on it; the row goes.
                guard try db.execute("DELETE FROM rentals_out WHERE order_id = $1", .text(order)) == 1 else { continue }
                if try notify(db, user: r.string("user_id"), kind: "rental_overdue",
                              text: "Your rental \(order) was due back on \(date): it is overdue, and each late day is charged.", ref: order,
                              fact: "rental_overdue:\(order)", now: now, settings: settings) { made += 1 }
            } else if r.int("due_day") == today + 1, r.int("due_told") == 0 {
                guard try db.execute("UPDATE rentals_out SET due_told = 1 WHERE order_id = $1 AND due_told = 0", .text(order)) == 1 else { continue }
                if try notify(db, user: r.string("user_id"), kind: "rental_due", text: "Your rental \(order) is due back tomorrow, \(date).",
                              ref: order, fact: "rental_due:\(order)", now: now, settings: settings) { made += 1 }
            }
        }
        return made
    }
}

/// Calendar days as orders counts them: UTC days of the service's clock.
enum Days {
    static let msPerDay: Int64 = 86_400_000

    /// The UTC day number (days since 1970-01-01) of an instant.
    static func day(ms: Int64) -> Int64 { ms >= 0 ? ms / msPerDay : (ms - msPerDay + 1) / msPerDay }

    /// The UTC day number of an ISO date (YYYY-MM-DD), nil if it is not one.
    static func day(of date: String) -> Int64? {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f.date(from: date).map { day(ms: Int64(($0.timeIntervalSince1970 * 1000).rounded())) }
    }
}

/// The words of the notifications that need more than one line.
enum Texts {
    static func confirmed(_ o: Contract.Orders.Placed) -> String {
        let units = o.items.reduce(Int64(0)) { $0 + $1.quantity }
        let what = "\(units) item\(units == 1 ? "" : "s"), \(o.currency) \(String(format: "%.2f", o.total))"
        if o.mode == "rent", let date = o.returnDate { return "Your rental \(o.order) is confirmed: \(what), due back on \(date)." }
        return "Your order \(o.order) is confirmed: \(what)."
    }

    static func expired(_ r: Contract.Reservations.Reservation) -> String {
        "Your hold on spot \(r.spot) expired at \(clock(r.deadlineLocal)) without a check-in: the spot was released."
    }

    static func sold(_ s: Contract.Catalog.Listings.Sold) -> String {
        let what = s.name.isEmpty ? s.listing : "'\(s.name)'"
        return "Your listing \(what) was \(s.mode == "rent" ? "rented" : "sold"): \(s.quantity) unit\(s.quantity == 1 ? "" : "s")."
    }

    /// HH:MM of a campus-time ISO moment (`2025-03-03T08:30:00-05:00`), or it whole.
    static func clock(_ local: String) -> String {
        let chars = Array(local)
        return chars.count >= 16 ? String(chars[11..<16]) : local
    }
}
