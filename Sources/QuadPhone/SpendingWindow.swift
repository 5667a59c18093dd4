import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// SpendiQ's window (the SpendiQ seed, issue 17 point 4): the phone keeps
/// the detailed records of the last 7 days (`spend_detail`: one row per
/// purchase, rental or return and category, with its amount, app, time and
/// status) and daily totals for 30 days (`spend_daily`). Details older than
/// 7 days are folded into their day's totals and dropped, so the 30-day
/// figure stays right after the details are gone; days older than 30 are
/// dropped. Queued purchases count at once as estimated; a refusal takes
/// them out; a reply makes them confirmed with the service's amounts.
enum SpendingWindow {
    static let dayMs: Int64 = 86_400_000
    /// Days of detailed records kept (the seed's rolling window).
    static let detailDays: Int64 = 7
    /// Days the totals cover.
    static let totalDays: Int64 = 30
    /// Orders asked per orders.mine page when the window is rebuilt.
    static let rebuildPageSize: Int64 = 100
    /// Pages asked at most in one rebuild (100 × 100 orders in 30 days).
    static let rebuildMaxPages = 100

    static let migration = Migration(30, """
        -- ref: the order (or the rental returned, for kind 'return');
        -- direction: spent or received; status: estimated (queued, from the
        -- phone's saved prices) or confirmed (the service's amounts).
        CREATE TABLE spend_detail (
            ref TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('purchase', 'rental', 'return')),
            category TEXT NOT NULL,
            direction TEXT NOT NULL DEFAULT 'spent',
            app TEXT NOT NULL,
            amount REAL NOT NULL,
            at_ms BIGINT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('estimated', 'confirmed')),
            PRIMARY KEY (ref, kind, category)
        );
        CREATE INDEX spend_detail_time ON spend_detail (at_ms);
        -- day: at_ms / 86400000 (UTC days).
        CREATE TABLE spend_daily (
            day BIGINT NOT NULL,
            direction TEXT NOT NULL,
            app TEXT NOT NULL,
            category TEXT NOT NULL,
            amount REAL NOT NULL,
            PRIMARY KEY (day, direction, app, category)
        );
        """)

    /// Amounts by category of an order: its lines' totals (or price ×
    /// quantity), scaled to the order's total (which has the fees); the whole
    /// total as "other" when its lines carry no prices.
    static func byCategory(items: JSON, total: Double) -> [String: Double] {
        var parts: [String: Double] = [:]
        for line in items.array ?? [] {
            let amount = line["line_total"]?.double ?? ((line["price"]?.double ?? 0) * Double(line["quantity"]?.int ?? 1))
            guard amount > 0 else { continue }
            parts[line["category"]?.string ?? "other", default: 0] += amount
        }
        let sum = parts.values.reduce(0, +)
        guard sum > 0 else { return ["other": total] }
        return parts.mapValues { $0 * total / sum }
    }

    /// Writes (replacing) an order's rows from the phone's `orders` table:
    /// estimated while it is queued, confirmed once answered; a refused or
    /// cancelled order has none.
    static func record(_ db: Database, order id: String) throws {
        try db.execute("DELETE FROM spend_detail WHERE ref = $1 AND kind IN ('purchase', 'rental')", .text(id))
        guard let o = try db.queryOne("SELECT * FROM orders WHERE id = $1", .text(id)),
              !["rejected", "cancelled"].contains(o.string("status")) else { return }
        let status = o["pending"].isNull && o.int("estimated") == 0 ? "confirmed" : "estimated"
        try insert(db, ref: id, kind: o.string("mode") == "rent" ? "rental" : "purchase", items: .stored(o.string("items")),
                   total: o.double("total"), at: o.int("created_ms"), status: status)
    }

    static func insert(_ db: Database, ref: String, kind: String, items: JSON, total: Double, at: Int64, status: String) throws {
        for (category, amount) in byCategory(items: items, total: total) {
            try db.execute("""
                INSERT INTO spend_detail (ref, kind, category, app, amount, at_ms, status) VALUES ($1, $2, $3, 'unitrade', $4, $5, $6)
                ON CONFLICT (ref, kind, category) DO UPDATE SET amount = excluded.amount, at_ms = excluded.at_ms, status = excluded.status
                """, .text(ref), .text(kind), .text(category), .double(amount), .int(at), .text(status))
        }
    }

    /// A confirmed return: its late charge, if any, is spent on the day it was returned.
    static func recordReturn(_ db: Database, rental: String, lateCharge: Double?, at: Int64) throws {
        guard let lateCharge, lateCharge > 0 else { return }
        try db.execute("""
            INSERT INTO spend_detail (ref, kind, category, app, amount, at_ms, status) VALUES ($1, 'return', 'late_charge', 'unitrade', $2, $3, 'confirmed')
            ON CONFLICT (ref, kind, category) DO UPDATE SET amount = excluded.amount
            """, .text(rental), .double(lateCharge), .int(at))
    }

    /// Folds the details older than 7 days into their day's totals and drops
    /// them, drops days older than 30, and takes in the phone's orders of
    /// the last 7 days not recorded yet (made before this window existed, or
    /// read from orders.mine by the orders view) and takes out the ones
    /// since refused or cancelled. Estimated rows are never folded: they
    /// wait for their answer.
    static func update(_ db: Database, now: Int64) throws {
        let detailSince = now - detailDays * dayMs
        try db.transaction {
            try db.execute("""
                INSERT INTO spend_daily (day, direction, app, category, amount)
                SELECT at_ms / \(dayMs), direction, app, category, SUM(amount) FROM spend_detail
                WHERE at_ms < $1 AND status = 'confirmed' GROUP BY at_ms / \(dayMs), direction, app, category
                ON CONFLICT (day, direction, app, category) DO UPDATE SET amount = spend_daily.amount + excluded.amount
                """, .int(detailSince))
            try db.execute("DELETE FROM spend_detail WHERE at_ms < $1 AND status = 'confirmed'", .int(detailSince))
            try db.execute("DELETE FROM spend_daily WHERE day < $1", .int(now / dayMs - totalDays))
            try db.execute("""
                DELETE FROM spend_detail WHERE kind IN ('purchase', 'rental')
                AND ref IN (SELECT id FROM orders WHERE status IN ('rejected', 'cancelled'))
                """)
            let missing = try db.query("""
                SELECT id FROM orders WHERE created_ms >= $1 AND status NOT IN ('rejected', 'cancelled')
                AND id NOT IN (SELECT ref FROM spend_detail)
                """, .int(detailSince))
            for m in missing { try record(db, order: m.string("id")) }
        }
    }

    /// The 30-day totals: the days' totals plus the details, by app and category.
    static func totals(_ db: Database, now: Int64) throws -> (spent: Double, received: Double, estimated: Double,
                                                             byApp: [String: Double], byCategory: [String: Double]) {
        let since = now - totalDays * dayMs
        let rows = try db.query("""
            SELECT direction, app, category, SUM(amount) AS amount, 0 AS estimated FROM spend_daily WHERE day >= $1
            GROUP BY direction, app, category
            UNION ALL
            SELECT direction, app, category, SUM(amount) AS amount, SUM(CASE WHEN status = 'estimated' THEN amount ELSE 0 END) AS estimated
            FROM spend_detail WHERE at_ms >= $2 GROUP BY direction, app, category
            """, .int(since / dayMs), .int(since))
        var spent = 0.0, received = 0.0, estimated = 0.0
        var byApp: [String: Double] = [:], byCategory: [String: Double] = [:]
        for r in rows {
            let amount = r.double("amount")
            estimated += r.double("estimated")
            if r.string("direction") == "received" { received += amount; continue }
            spent += amount
            byApp[r.string("app"), default: 0] += amount
            byCategory[r.string("category"), default: 0] += amount
        }
        return (spent, received, estimated, byApp, byCategory)
    }

    static func details(_ db: Database, now: Int64) throws -> [JSON] {
        try db.query("SELECT * FROM spend_detail WHERE at_ms >= $1 ORDER BY at_ms DESC, ref, category", .int(now - detailDays * dayMs)).map {
            ["ref": .string($0.string("ref")), "kind": .string($0.string("kind")), "category": .string($0.string("category")),
             "app": .string($0.string("app")), "direction": .string($0.string("direction")), "amount": .double(cents($0.double("amount"))),
             "at": .int($0.int("at_ms")), "status": .string($0.string("status"))]
        }
    }

    /// A new phone (or one that never rebuilt its window) rebuilds it from
    /// the service: every order of the last 30 days, page by page; the days'
    /// totals are replaced, the details of the last 7 days written as
    /// confirmed (queued ones on this phone stay as they are).
    static func rebuild(_ db: Database, orders: [JSON], now: Int64) throws {
        let since = now - totalDays * dayMs, detailSince = now - detailDays * dayMs
        try db.transaction {
            try db.execute("DELETE FROM spend_daily")
            for o in orders {
                guard let id = o["order"]?.string, let at = o["created_at"]?.int, at >= since,
                      !["rejected", "cancelled"].contains(o["status"]?.string ?? "") else { continue }
                let items = o["items"] ?? .array([])
                let total = o["total"]?.double ?? 0
                let kind = o["mode"]?.string == "rent" ? "rental" : "purchase"
                if at >= detailSince {
                    try db.execute("DELETE FROM spend_detail WHERE ref = $1 AND kind = $2", .text(id), .text(kind))
                    try insert(db, ref: id, kind: kind, items: items, total: total, at: at, status: "confirmed")
                } else {
                    for (category, amount) in byCategory(items: items, total: total) {
                        try db.execute("""
                            INSERT INTO spend_daily (day, direction, app, category, amount) VALUES ($1, 'spent', 'unitrade', $2, $3)
                            ON CONFLICT (day, direction, app, category) DO UPDATE SET amount = spend_daily.amount + excluded.amount
                            """, .int(at / dayMs), .text(category), .double(amount))
                    }
                }
            }
            try db.setMeta("spend_rebuilt_ms", String(now))
            try db.setMeta("orders_synced_ms", String(now))
        }
    }

    static func cents(_ x: Double) -> Double { (x * 100).rounded() / 100 }

    /// What the student's listings earned, as the phone last read it
    /// (`catalog.listings.mine`: revenue less the marketplace's fee, per
    /// listing), so that only what is new is received again.
    static let receivedMigration = Migration(34, """
        CREATE TABLE listing_earnings (
            listing TEXT PRIMARY KEY,
            net REAL NOT NULL
        );
        """)

    /// The sales and rentals the student's listings received since the
    /// phone last read them: each listing's growth in revenue less fee is a
    /// confirmed `received` record of its category, at the time the phone
    /// learns it (the details fold into the day's totals like any other, so
    /// a sale is never counted twice). Returns the amount received now.
    @discardableResult
    static func recordReceived(_ db: Database, listings: [JSON], now: Int64) throws -> Double {
        var got = 0.0
        try db.transaction {
            for l in listings {
                guard let id = l["id"]?.string else { continue }
                let net = cents((l["revenue"]?.double ?? 0) - (l["fee"]?.double ?? 0))
                let before = try db.queryOne("SELECT net FROM listing_earnings WHERE listing = $1", .text(id))?.double("net") ?? 0
                guard net > before + 0.001 else { continue }
                let kind = (l["rented"]?.int ?? 0) + (l["returned"]?.int ?? 0) > 0 && (l["sold"]?.int ?? 0) == 0 ? "rental" : "purchase"
                try db.execute("""
                    INSERT INTO spend_detail (ref, kind, category, direction, app, amount, at_ms, status) VALUES ($1, $2, $3, 'received', 'unitrade', $4, $5, 'confirmed')
                    ON CONFLICT (ref, kind, category) DO UPDATE SET amount = spend_detail.amount + excluded.amount
                    """, .text("\(id)@\(now)"), .text(kind), .text(l["product"]?["category"]?.string ?? "other"), .double(net - before), .int(now))
                try db.execute("""
                    INSERT INTO listing_earnings (listing, net) VALUES ($1, $2) ON CONFLICT (listing) DO UPDATE SET net = excluded.net
                    """, .text(id), .double(net))
                got += net - before
            }
        }
        return got
    }
}

extension Phone {
    /// The spending view: online on a phone whose window was never built
    /// from the service (a sign-in on a new phone), orders.mine is read
    /// first, every page of the last 30 days; otherwise at once from the phone.
    func spendingView(_ done: @escaping (ViewResult) -> Void) {
        let rebuilt = (try? db.meta("spend_rebuilt_ms")) ?? nil
        guard rebuilt == nil, radioOn, hasValidToken else { fetchEarnings { [weak self] in self.map { done($0.spending()) } }; return }
        var orders: [JSON] = []
        let since = now - SpendingWindow.totalDays * SpendingWindow.dayMs
        func page(_ offset: Int64, _ n: Int) {
            request("orders.mine", ["offset": .int(offset), "limit": .int(SpendingWindow.rebuildPageSize)],
                    timeoutMs: settings.readTimeoutMs) { [weak self] result in
                guard let self else { return }
                guard case .success(let reply) = result, reply.quadError == nil else {
                    var r = self.spending()
                    r.notice = [r.notice, "could not rebuild the totals from the service; they are this phone's only"]
                        .compactMap { $0 }.joined(separator: "; ")
                    done(r)
                    return
                }
                let got = reply.body["orders"]?.array ?? []
                orders += got
                let total = reply.body["total"]?.int ?? 0
                let next = offset + Int64(got.count)
                // Newest first: a page reaching past 30 days is the last one needed.
                let older = got.contains { ($0["created_at"]?.int ?? .max) < since }
                if !got.isEmpty && next < total && !older && n + 1 < SpendingWindow.rebuildMaxPages {
                    page(next, n + 1)
                } else {
                    try? SpendingWindow.rebuild(self.db, orders: orders, now: self.now)
                    self.lastSyncMs = self.now
                    self.fetchStays { self.fetchEarnings { done(self.spending()) } }
                }
            }
        }
        page(0, 0)
    }
}

extension Phone {
    /// A new phone's parking history: the stays `reservations.mine` lists
    /// (its last 100) that this phone's file does not hold, kept as they
    /// ended, so ParkWise's estimate covers what the driver parked elsewhere.
    func fetchStays(_ then: @escaping () -> Void) {
        guard isOnline, hasValidToken else { then(); return }
        request("reservations.mine", ["limit": 100], timeoutMs: settings.readTimeoutMs) { [weak self] result in
            guard let self else { return }
            if case .success(let reply) = result, reply.quadError == nil {
                let active = reply.body["active"].flatMap { $0.isNull ? nil : $0 }
                for r in (active.map { [$0] } ?? []) + (reply.body["history"]?.array ?? []) {
                    // A reservation the phone holds takes this state unless
                    // its copy is newer (HoldVersions.swift).
                    try? SavedHolds.take(self.db, r)
                    guard let id = r["id"]?.string, r["status"]?.string == "checked_out", let held = r["held_at"]?.int,
                          let inAt = r["checked_in_at"]?.int, let ended = r["ended_at"]?.int else { continue }
                    _ = try? self.db.execute("""
                        INSERT INTO parking (id, status, lot, spot, level, signal, held_ms, deadline_ms, checked_in_ms, ended_ms, version)
                        VALUES ($1, 'checked_out', $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO NOTHING
                        """, .text(id), .text(r["lot"]?.string ?? ""), .text(r["spot"]?.string ?? ""), .text(r["level"]?.string ?? ""),
                                             .text(r["signal"]?.string ?? ""), .int(held), .int(r["deadline"]?.int ?? held), .int(inAt), .int(ended),
                                             .int(SavedHolds.version(r)))
                }
            }
            then()
        }
    }

    /// Reads what the student's listings earned (`catalog.listings.mine`,
    /// every page) into the window's received records, then `then`; offline,
    /// without a session, or within a minute of the last read, at once.
    func fetchEarnings(_ then: @escaping () -> Void) {
        let last = ((try? db.meta("earnings_read_ms")) ?? nil).flatMap { Int64($0) } ?? 0
        guard isOnline, hasValidToken, now - last >= 60_000 else { then(); return }
        var listings: [JSON] = []
        func page(_ offset: Int64, _ n: Int) {
            request("catalog.listings.mine", ["offset": .int(offset), "limit": 100], timeoutMs: settings.readTimeoutMs) { [weak self] result in
                guard let self else { return }
                guard case .success(let reply) = result, reply.quadError == nil else { then(); return }
                let got = reply.body["listings"]?.array ?? []
                listings += got
                if !got.isEmpty, offset + Int64(got.count) < (reply.body["total"]?.int ?? 0), n + 1 < SpendingWindow.rebuildMaxPages {
                    page(offset + Int64(got.count), n + 1)
                    return
                }
                try? SpendingWindow.recordReceived(self.db, listings: listings, now: self.now)
                try? self.db.setMeta("earnings_read_ms", String(self.now))
                then()
            }
        }
        page(0, 0)
    }

    /// The window's keys added to the spending view's body (the old keys
    /// stay as they were): `spent` (the 30-day total from the window's
    /// tables), `received`, `estimated` (the part of `spent` still queued),
    /// `by_app`, `by_category`, `details` (the last 7 days), `synced_at`
    /// (the last read of orders.mine) and `stale`.
    func window(_ body: inout [String: JSON], _ notices: inout [String], now: Int64) {
        try? SpendingWindow.update(db, now: now)
        guard let t = try? SpendingWindow.totals(db, now: now) else { return }
        let c = SpendingWindow.cents
        var byApp = t.byApp.mapValues { JSON.double(c($0)) }
        // ParkWise does not bill: its figure is the phone's estimate
        // (Actions.parkingPerHour per started hour), shown beside UniTrade's.
        byApp["parkwise"] = body["parking"] ?? .double(0)
        body["spent"] = .double(c(t.spent))
        body["received"] = .double(c(t.received))
        body["estimated"] = .double(c(t.estimated))
        body["by_app"] = .object(byApp)
        body["by_category"] = .object(t.byCategory.mapValues { .double(c($0)) })
        body["details"] = .array((try? SpendingWindow.details(db, now: now)) ?? [])
        body["detail_days"] = .int(SpendingWindow.detailDays)
        let synced = ((try? db.meta("orders_synced_ms")) ?? nil).flatMap { Int64($0) }
        body["synced_at"] = synced.map { .int($0) } ?? .null
        // Never synced counts as stale too (the older notice says so).
        let stale = synced.map { now - $0 > settings.staleAfterMs } ?? true
        body["stale"] = .bool(stale)
        if stale, let synced {
            notices.append("the 30-day totals may be out of date: no sync for \(Phone.age(now - synced))")
        }
    }
}
