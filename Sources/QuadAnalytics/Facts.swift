import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// Campus time for grouping: the local day, Monday of the week and hour of
/// an instant, computed once when a fact is stored so the questions' SQL
/// stays in the subset SQLite and PostgreSQL share.
public struct CampusClock: Sendable {
    public let offsetMinutes: Int64

    public init(offsetMinutes: Int64) { self.offsetMinutes = offsetMinutes }

    func local(_ ms: Int64) -> Int64 { ms + offsetMinutes * 60_000 }
    func days(_ ms: Int64) -> Int64 { Self.floorDiv(local(ms), 86_400_000) }

    /// `2025-03-03`.
    public func day(_ ms: Int64) -> String { Self.date(days(ms)) }
    /// The Monday of the week holding `ms`, `2025-03-03`. 1970-01-01 was a Thursday.
    public func week(_ ms: Int64) -> String {
        let d = days(ms)
        return Self.date(d - Self.floorMod(d + 3, 7))
    }
    public func hour(_ ms: Int64) -> Int64 { Self.floorMod(local(ms), 86_400_000) / 3_600_000 }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }
    static func floorMod(_ a: Int64, _ b: Int64) -> Int64 { a - floorDiv(a, b) * b }

    /// Days since 1970-01-01 as a civil date (Howard Hinnant's algorithm).
    static func date(_ days: Int64) -> String {
        let z = days + 719_468
        let era = floorDiv(z, 146_097)
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        func pad(_ n: Int64, _ w: Int) -> String { let s = String(n); return String(repeating: "0", count: max(0, w - s.count)) + s }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))"
    }
}

/// Analytics' own store: the facts the questions read, projected from the
/// other services' events and from the raw telemetry. User ids are kept
/// here to join facts; no answer ever carries one (the questions return
/// aggregates only, and a test greps every output for planted ids).
public enum Facts {
    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE tel_events (
                id TEXT PRIMARY KEY,
                seq BIGINT NOT NULL,
                driver TEXT NOT NULL,
                phone TEXT NOT NULL,
                user_id TEXT,
                session TEXT NOT NULL,
                name TEXT NOT NULL,
                ts BIGINT NOT NULL,
                day TEXT NOT NULL,
                hour INTEGER NOT NULL,
                offline INTEGER NOT NULL,
                queued_ms BIGINT,
                view TEXT,
                lot TEXT,
                flow TEXT,
                screen TEXT,
                mode TEXT,
                category TEXT,
                action TEXT,
                product TEXT,
                order_id TEXT,
                level TEXT,
                waited_ms BIGINT,
                duration_ms BIGINT,
                synced_offline INTEGER,
                on_time INTEGER,
                props TEXT NOT NULL
            );
            CREATE INDEX tel_name_ts ON tel_events (name, ts);
            CREATE INDEX tel_driver_day ON tel_events (driver, day, name, ts);
            CREATE INDEX tel_session ON tel_events (session, name, ts);
            CREATE TABLE raw_cursor (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
            INSERT INTO raw_cursor (one, seq) VALUES (1, 0);
            CREATE TABLE tel_batches (
                batch TEXT PRIMARY KEY, ts BIGINT NOT NULL, events BIGINT NOT NULL, accepted BIGINT NOT NULL,
                duplicate BIGINT NOT NULL, conflicting BIGINT NOT NULL, rejected BIGINT NOT NULL
            );

            CREATE TABLE orders (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                status TEXT NOT NULL,
                mode TEXT,
                screen TEXT,
                semester BIGINT,
                fee_cents BIGINT NOT NULL DEFAULT 0,
                total_cents BIGINT NOT NULL DEFAULT 0,
                placed_ms BIGINT,
                confirmed_ms BIGINT,
                day TEXT,
                week TEXT,
                reason TEXT,
                updated_ms BIGINT NOT NULL
            );
            CREATE INDEX orders_user ON orders (user_id, status);
            CREATE TABLE order_items (
                order_id TEXT NOT NULL,
                product TEXT NOT NULL,
                quantity BIGINT NOT NULL,
                price_cents BIGINT NOT NULL,
                category TEXT NOT NULL,
                PRIMARY KEY (order_id, product)
            );
            CREATE INDEX order_items_product ON order_items (product);
            CREATE TABLE favorites (
                user_id TEXT NOT NULL,
                product TEXT NOT NULL,
                added_ms BIGINT NOT NULL,
                removed_ms BIGINT,
                PRIMARY KEY (user_id, product)
            );
            CREATE TABLE products (id TEXT PRIMARY KEY, category TEXT NOT NULL);
            CREATE TABLE users (id TEXT PRIMARY KEY, semester BIGINT, registered_ms BIGINT NOT NULL);

            CREATE TABLE holds (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                lot TEXT NOT NULL,
                level TEXT NOT NULL,
                kind TEXT NOT NULL,
                status TEXT NOT NULL,
                held_ms BIGINT NOT NULL,
                deadline_ms BIGINT,
                checked_in_ms BIGINT,
                ended_ms BIGINT,
                day TEXT NOT NULL
            );
            CREATE INDEX holds_held ON holds (held_ms);
            CREATE TABLE occupancy (
                level_id TEXT NOT NULL,
                lot TEXT NOT NULL,
                level TEXT NOT NULL,
                at_ms BIGINT NOT NULL,
                day TEXT NOT NULL,
                hour INTEGER NOT NULL,
                free_regular BIGINT NOT NULL,
                free_accessible BIGINT NOT NULL,
                free_ev BIGINT NOT NULL,
                total_regular BIGINT NOT NULL,
                total_accessible BIGINT NOT NULL,
                total_ev BIGINT NOT NULL,
                PRIMARY KEY (level_id, at_ms)
            );
            """),
        // Students' listings (issue 16): one row per listing, from
        // catalog.listing.created, closed by catalog.listing.closed. A row
        // may start from its closed event (created_ms null until created
        // arrives): the questions read only listings whose creation is known.
        Migration(2, """
            CREATE TABLE listings (
                id TEXT PRIMARY KEY,
                category TEXT NOT NULL,
                mode TEXT,
                created_ms BIGINT,
                closed_ms BIGINT,
                reason TEXT
            );
            CREATE INDEX listings_created ON listings (created_ms);
            """),
        // The driver's answer after Navigate to a nearby lot
        // (nearby.confirmed, the ParkWise seed's BQ9): parked there or not.
        Migration(3, "ALTER TABLE tel_events ADD COLUMN parked INTEGER"),
    ]

    /// The services whose events analytics projects.
    public static let sources = ["orders", "favorites", "reservations", "telemetry", "catalog", "accounts"]

    /// The event types that change a fact; the feed skips the rest (their
    /// seq still advances the cursor).
    public static let events: Set<String> = [
        "orders.placed", "orders.confirmed", "orders.rejected", "orders.cancelled", "orders.returned",
        "favorites.added", "favorites.removed",
        "reservations.held", "reservations.checkedin", "reservations.checkedout", "reservations.expired", "reservations.cancelled",
        "occupancy.snapshot", "telemetry.batch", "catalog.product.changed", "accounts.user.registered", "accounts.user.updated",
        // Not catalog.stock.changed and the rest: catalog publishes those
        // at every sale; the feed skips them without parsing their bodies.
        "catalog.listing.created", "catalog.listing.closed",
    ]

    static func cents(_ v: JSON?) -> Int64 {
        guard let d = v?.double, d.isFinite else { return 0 }
        return Int64((d * 100).rounded())
    }

    static func semester(_ v: JSON?) -> SQLValue {
        if let i = v?.int, !(v?.isBoolean ?? false) { return .int(i) }
        if let s = v?.string, let i = Int64(s.trimmingCharacters(in: .whitespaces)) { return .int(i) }
        return .null
    }

    /// Applies one event of another service, inside the feed's transaction.
    /// Events arrive in seq order per source, but not across sources (a
    /// listing's sale can come before catalog's word of the listing), and
    /// one may come twice: every upsert gives the same row whatever the
    /// order and however often, and the questions join facts of different
    /// sources only when they read them. A missing or odd field skips the event.
    public static func apply(_ db: Database, _ e: Envelope, clock: CampusClock) throws {
        let b = e.body
        switch e.type {
        case "orders.placed", "orders.confirmed":
            guard let order = b["order"]?.string, let user = b["user"]?.string else { return }
            let confirmed = e.type == "orders.confirmed"
            try db.execute("""
                INSERT INTO orders (id, user_id, status, mode, screen, semester, fee_cents, total_cents, placed_ms, confirmed_ms, day, week, updated_ms)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $9)
                ON CONFLICT (id) DO UPDATE SET status = CASE WHEN orders.status IN ('cancelled', 'rejected', 'confirmed', 'returned') THEN orders.status ELSE excluded.status END,
                    mode = excluded.mode, screen = excluded.screen, semester = COALESCE(excluded.semester, orders.semester),
                    fee_cents = excluded.fee_cents,
                    total_cents = CASE WHEN orders.status = 'returned' THEN orders.total_cents ELSE excluded.total_cents END,
                    confirmed_ms = COALESCE(excluded.confirmed_ms, orders.confirmed_ms), day = COALESCE(excluded.day, orders.day),
                    week = COALESCE(excluded.week, orders.week), updated_ms = excluded.updated_ms
                """, .text(order), .text(user), .text(confirmed ? "confirmed" : "placed"), .of(b["mode"]?.string), .of(b["screen"]?.string),
                semester(b["semester"]), .int(cents(b["fee"])), .int(cents(b["total"])), .int(e.ts),
                confirmed ? .int(e.ts) : .null, confirmed ? .text(clock.day(e.ts)) : .null, confirmed ? .text(clock.week(e.ts)) : .null)
            for item in b["items"]?.array ?? [] {
                guard let product = item["product"]?.string else { continue }
                try db.execute("""
                    INSERT INTO order_items (order_id, product, quantity, price_cents, category) VALUES ($1, $2, $3, $4, $5)
                    ON CONFLICT (order_id, product) DO UPDATE SET quantity = excluded.quantity, price_cents = excluded.price_cents, category = excluded.category
                    """, .text(order), .text(product), .int(item["quantity"]?.int ?? 1), .int(cents(item["price"])),
                    .text(item["category"]?.string ?? "Others"))
            }
        case "orders.rejected", "orders.cancelled":
            guard let order = b["order"]?.string, let user = b["user"]?.string else { return }
            let status = e.type == "orders.rejected" ? "rejected" : "cancelled"
            try db.execute("""
                INSERT INTO orders (id, user_id, status, reason, updated_ms) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (id) DO UPDATE SET status = excluded.status, reason = COALESCE(excluded.reason, orders.reason), updated_ms = excluded.updated_ms
                """, .text(order), .text(user), .text(status), .of(b["reason"]?.string), .int(e.ts))
        case "orders.returned":
            // A rental came back: still a sale (the questions count
            // confirmed and returned orders alike), now with its late
            // charge in the total. A duplicate sets the same row again.
            guard let order = b["order"]?.string, let user = b["user"]?.string else { return }
            try db.execute("""
                INSERT INTO orders (id, user_id, status, updated_ms) VALUES ($1, $2, 'returned', $3)
                ON CONFLICT (id) DO UPDATE SET status = CASE WHEN orders.status IN ('cancelled', 'rejected') THEN orders.status ELSE 'returned' END,
                    total_cents = orders.total_cents + CASE WHEN orders.status = 'returned' THEN 0 ELSE $4 END, updated_ms = excluded.updated_ms
                """, .text(order), .text(user), .int(e.ts), .int(cents(b["late_charge"])))
        case "favorites.added":
            guard let user = b["user"]?.string, let product = b["product"]?.string else { return }
            try db.execute("""
                INSERT INTO favorites (user_id, product, added_ms) VALUES ($1, $2, $3)
                ON CONFLICT (user_id, product) DO UPDATE SET removed_ms = NULL
                """, .text(user), .text(product), .int(e.ts))
        case "favorites.removed":
            guard let user = b["user"]?.string, let product = b["product"]?.string else { return }
            try db.execute("UPDATE favorites SET removed_ms = $3 WHERE user_id = $1 AND product = $2", .text(user), .text(product), .int(e.ts))
        case "catalog.product.changed":
            guard let id = b["id"]?.string, let category = b["category"]?.string else { return }
            try db.execute("INSERT INTO products (id, category) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET category = excluded.category",
                           .text(id), .text(category))
        case "catalog.listing.created":
            // The earliest creation wins, whatever the order events come in.
            guard let id = b["listing"]?.string, let category = b["category"]?.string else { return }
            try db.execute("""
                INSERT INTO listings (id, category, mode, created_ms) VALUES ($1, $2, $3, $4)
                ON CONFLICT (id) DO UPDATE SET
                    category = CASE WHEN listings.created_ms IS NULL OR excluded.created_ms < listings.created_ms THEN excluded.category ELSE listings.category END,
                    mode = CASE WHEN listings.created_ms IS NULL OR excluded.created_ms < listings.created_ms THEN excluded.mode ELSE listings.mode END,
                    created_ms = CASE WHEN listings.created_ms IS NULL OR excluded.created_ms < listings.created_ms THEN excluded.created_ms ELSE listings.created_ms END
                """, .text(id), .text(category), .of(b["mode"]?.string), .int(b["created_at"]?.int ?? e.ts))
        case "catalog.listing.closed":
            // A listing closes once; the earliest close and its reason win.
            guard let id = b["listing"]?.string, let category = b["category"]?.string else { return }
            try db.execute("""
                INSERT INTO listings (id, category, closed_ms, reason) VALUES ($1, $2, $3, $4)
                ON CONFLICT (id) DO UPDATE SET
                    reason = CASE WHEN listings.closed_ms IS NULL OR excluded.closed_ms < listings.closed_ms THEN excluded.reason ELSE listings.reason END,
                    closed_ms = CASE WHEN listings.closed_ms IS NULL OR excluded.closed_ms < listings.closed_ms THEN excluded.closed_ms ELSE listings.closed_ms END
                """, .text(id), .text(category), .int(b["closed_at"]?.int ?? e.ts), .of(b["reason"]?.string))
        case "accounts.user.registered", "accounts.user.updated":
            guard let user = b["user"]?.string else { return }
            try db.execute("""
                INSERT INTO users (id, semester, registered_ms) VALUES ($1, $2, $3)
                ON CONFLICT (id) DO UPDATE SET semester = COALESCE(excluded.semester, users.semester)
                """, .text(user), semester(b["semester"]), .int(e.ts))
        case "reservations.held", "reservations.checkedin", "reservations.checkedout", "reservations.expired", "reservations.cancelled":
            try applyHold(db, e, clock: clock)
        case "occupancy.snapshot":
            try applySnapshot(db, b, clock: clock)
        case "telemetry.batch":
            guard let batch = b["batch"]?.string else { return }
            try db.execute("""
                INSERT INTO tel_batches (batch, ts, events, accepted, duplicate, conflicting, rejected) VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (batch) DO NOTHING
                """, .text(batch), .int(e.ts), .int(b["events"]?.int ?? 0), .int(b["accepted"]?.int ?? 0), .int(b["duplicate"]?.int ?? 0),
                .int(b["conflicting"]?.int ?? 0), .int(b["rejected"]?.int ?? 0))
        default:
            return
        }
    }

    static let holdStatus = [
        "reservations.held": "held", "reservations.checkedin": "checked_in", "reservations.checkedout": "checked_out",
        "reservations.expired": "expired", "reservations.cancelled": "cancelled",
    ]

    static func applyHold(_ db: Database, _ e: Envelope, clock: CampusClock) throws {
        let r = e.body["reservation"] ?? .null
        guard let user = e.body["user"]?.string, let id = r["id"]?.string, let status = holdStatus[e.type] else { return }
        let held = r["held_at"]?.int ?? e.ts
        let checkedIn = r["checked_in_at"]?.int ?? (e.type == "reservations.checkedin" ? e.ts : nil)
        try db.execute("""
            INSERT INTO holds (id, user_id, lot, level, kind, status, held_ms, deadline_ms, checked_in_ms, ended_ms, day)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
            ON CONFLICT (id) DO UPDATE SET status = excluded.status, checked_in_ms = COALESCE(excluded.checked_in_ms, holds.checked_in_ms),
                ended_ms = COALESCE(excluded.ended_ms, holds.ended_ms)
            """, .text(id), .text(user), .text(r["lot"]?.string ?? "?"), .text(r["level"]?.string ?? "?"), .text(r["kind"]?.string ?? "regular"),
            .text(status), .int(held), .of(r["deadline"]?.int), .of(checkedIn), .of(r["ended_at"]?.int), .text(clock.day(held)))
    }

    static func applySnapshot(_ db: Database, _ b: JSON, clock: CampusClock) throws {
        guard let lot = b["lot"]?.string, let level = b["level"]?.string, let at = b["at"]?.int else { return }
        // The service's own local time names the day and hour when it is given.
        var day = clock.day(at), hour = clock.hour(at)
        if let local = b["local"]?.string, local.utf8.count >= 13, let h = Int64(local.dropFirst(11).prefix(2)) {
            day = String(local.prefix(10))
            hour = h
        }
        let free = b["free"] ?? .null, total = b["total"] ?? .null
        try db.execute("""
            INSERT INTO occupancy (level_id, lot, level, at_ms, day, hour, free_regular, free_accessible, free_ev, total_regular, total_accessible, total_ev)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (level_id, at_ms) DO NOTHING
            """, .text(b["level_id"]?.string ?? "\(lot)-\(level)"), .text(lot), .text(level), .int(at), .text(day), .int(hour),
            .int(free["regular"]?.int ?? 0), .int(free["accessible"]?.int ?? 0), .int(free["ev"]?.int ?? 0),
            .int(total["regular"]?.int ?? 0), .int(total["accessible"]?.int ?? 0), .int(total["ev"]?.int ?? 0))
    }

    // MARK: telemetry

    /// Stores raw telemetry events (as `telemetry.raw.since` returns them),
    /// once each by id, in the caller's transaction. Returns how many were new.
    @discardableResult
    public static func applyTelemetry(_ db: Database, _ events: [JSON], clock: CampusClock) throws -> Int {
        var added = 0
        for e in events {
            guard let id = e["id"]?.string, let name = e["name"]?.string, let ts = e["ts"]?.int,
                  let phone = e["phone"]?.string, let session = e["session"]?.string else { continue }
            let user = e["user"]?.string
            let p = e["props"] ?? .object([:])
            func text(_ k: String) -> SQLValue { .of(p[k]?.string) }
            func int(_ k: String) -> SQLValue { .of(p[k]?.int) }
            func flag(_ k: String) -> SQLValue { p[k]?.bool.map { .int($0 ? 1 : 0) } ?? .null }
            added += try db.execute("""
                INSERT INTO tel_events (id, seq, driver, phone, user_id, session, name, ts, day, hour, offline, queued_ms,
                    view, lot, flow, screen, mode, category, action, product, order_id, level, waited_ms, duration_ms, synced_offline, on_time, parked, props)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28)
                ON CONFLICT (id) DO NOTHING
                """, .text(id), .int(e["seq"]?.int ?? 0), .text(user ?? "phone:" + phone), .text(phone), .of(user), .text(session), .text(name),
                .int(ts), .text(clock.day(ts)), .int(clock.hour(ts)), .of(e["offline"]?.bool ?? false), .of(e["queued_ms"]?.int),
                text("view"), text("lot"), text("flow"), text("screen"), text("mode"), text("category"), text("action"), text("product"),
                text("order"), text("level"), int("waited_ms"), int("duration_ms"), flag("offline"), flag("on_time"), flag("parked"), .text(p.text))
        }
        return added
    }
}

extension JSON {
    var isBoolean: Bool { if case .bool = self { return true }; return false }
}
