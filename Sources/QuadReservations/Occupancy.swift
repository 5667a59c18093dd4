import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The occupancy of the campus over a day, as a fraction of spots taken:
/// a weekday rises from 7:00, peaks mid-morning, dips at lunch and empties
/// in the evening; Saturdays are light and Sundays nearly empty.
enum DailyCurve {
    /// Fraction of spots taken at each hour (0 to 23), linear in between.
    static let weekday: [Double] = [0.04, 0.03, 0.03, 0.03, 0.03, 0.05, 0.14, 0.42, 0.76, 0.92, 0.96, 0.95,
                                    0.84, 0.88, 0.92, 0.88, 0.74, 0.56, 0.42, 0.30, 0.18, 0.10, 0.06, 0.05]
    static let saturday: [Double] = [0.03, 0.02, 0.02, 0.02, 0.02, 0.03, 0.06, 0.14, 0.26, 0.34, 0.38, 0.38,
                                     0.32, 0.26, 0.20, 0.16, 0.12, 0.09, 0.07, 0.05, 0.04, 0.03, 0.03, 0.03]
    static let sunday: [Double] = [0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.03, 0.04, 0.06, 0.08, 0.09, 0.09,
                                   0.08, 0.08, 0.07, 0.06, 0.05, 0.04, 0.04, 0.03, 0.03, 0.02, 0.02, 0.02]

    /// The fraction of a level's spots of `kind` taken at `ms`: P1 fills
    /// first and P3 last, nearby lots see the overflow, accessible spots and
    /// chargers stay freer; a small noise per 15 minutes, the same on every run.
    static func taken(lotKind: String, busy: Double = 1, floor: Int64, kind: String, level: String, ms: Int64, clock: CampusTime) -> Double {
        let weekday = clock.weekday(ms)
        let curve = weekday == 0 ? sunday : weekday == 6 ? saturday : self.weekday
        let minute = clock.minuteOfDay(ms)
        let h = Int(minute / 60)
        let f = Double(minute % 60) / 60
        var x = curve[h] + (curve[(h + 1) % 24] - curve[h]) * f
        if weekday == 5 && h >= 13 { x *= 0.85 }  // Friday afternoons empty early
        x *= [1: 1.08, 2: 1.0, 3: 0.86][floor] ?? 1
        if lotKind == "nearby" { x = x * 0.7 + 0.08 }
        x *= busy
        x *= ["accessible": 0.55, "ev": 0.9][kind] ?? 1
        let slot = floorDiv(ms, Snapshots.intervalMs)
        x += (noise("\(level)|\(kind)|\(slot)") - 0.5) * 0.1
        return min(1, max(0, x))
    }

    /// FNV-1a of `key`, as a number in [0, 1).
    static func noise(_ key: String) -> Double {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in key.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return Double(hash % 1_000_003) / 1_000_003
    }
}

/// Snapshots of each level's free spots, every 15 simulated minutes.
enum Snapshots {
    static let intervalMs: Int64 = 15 * 60_000

    /// Stores one snapshot of a level; returns false when the level already
    /// has one at `at` (a second worker, a replay).
    @discardableResult
    static func record(_ db: Database, level: String, lot: String, at: Int64, free: [String: Int64], total: [String: Int64], clock: CampusTime) throws -> Bool {
        try db.execute("""
            INSERT INTO snapshots (level, lot, at_ms, weekday, hour, free_regular, free_accessible, free_ev, total_regular, total_accessible, total_ev)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING
            """, .text(level), .text(lot), .int(at), .int(clock.weekday(at)), .int(clock.hour(at)),
            .int(free["regular"] ?? 0), .int(free["accessible"] ?? 0), .int(free["ev"] ?? 0),
            .int(total["regular"] ?? 0), .int(total["accessible"] ?? 0), .int(total["ev"] ?? 0)) == 1
    }

    /// The `occupancy.snapshot` of a level's snapshot.
    static func event(level: Simulator.LevelInfo, at: Int64, free: [String: Int64], total: [String: Int64], clock: CampusTime) -> Contract.Occupancy.Snapshot {
        func counts(_ c: [String: Int64]) -> Contract.Reservations.Counts { .init(regular: c["regular"] ?? 0, accessible: c["accessible"] ?? 0, ev: c["ev"] ?? 0) }
        return Contract.Occupancy.Snapshot(lot: level.lot, level: level.name, levelID: level.id, at: at, local: clock.iso(at), free: counts(free), total: counts(total))
    }

    static func snapshot(_ r: Row, levelName: String, clock: CampusTime) -> Contract.Occupancy.Snapshot {
        let at = r.int("at_ms")
        return Contract.Occupancy.Snapshot(
            lot: r.string("lot"), level: levelName, levelID: r.string("level"), at: at, local: clock.iso(at),
            free: .init(regular: r.int("free_regular"), accessible: r.int("free_accessible"), ev: r.int("free_ev")),
            total: .init(regular: r.int("total_regular"), accessible: r.int("total_accessible"), ev: r.int("total_ev")))
    }
}

/// Moves simulated cars in and out after the ``DailyCurve`` on a clock that
/// may run faster than the wall (`--sim-speed`), and takes a snapshot of
/// every level each 15 simulated minutes, published as `occupancy.snapshot`.
/// Of several workers on one store, the one holding the lease simulates.
final class Simulator {
    struct LevelInfo {
        let id: String
        let lot: String
        let lotKind: String
        let busy: Double
        let name: String
        let floor: Int64
    }

    let db: Database
    let settings: Settings
    let owner: String
    var levels: [String: LevelInfo] = [:]
    static let leaseMs: Int64 = 3000

    init(db: Database, settings: Settings, owner: String) {
        self.db = db
        self.settings = settings
        self.owner = owner
    }

    var clock: CampusTime { settings.clock }

    /// Sets the simulated clock to now on a store's first start, with
    /// `--history-days` of past snapshots so a forecast has samples at once,
    /// the last day's published.
    func start() throws {
        for r in try db.query("SELECT l.id, l.lot, l.name, l.floor, o.kind FROM levels l JOIN lots o ON o.id = l.lot") {
            let busy = Campus.lots.first { $0.id == r.string("lot") }?.busy ?? 1
            levels[r.string("id")] = LevelInfo(id: r.string("id"), lot: r.string("lot"), lotKind: r.string("kind"), busy: busy, name: r.string("name"), floor: r.int("floor"))
        }
        let real = Int64(Clock.nowMillis())
        let now = settings.simStart ?? real
        try db.transaction {
            guard try db.queryOne("SELECT one FROM simulator WHERE one = 1") == nil else { return }
            let next = floorDiv(now, Snapshots.intervalMs) * Snapshots.intervalMs + Snapshots.intervalMs
            guard try db.execute("""
                INSERT INTO simulator (one, sim_ms, real_ms, next_snapshot_ms, owner, lease_until_ms) VALUES (1, $1, $2, $3, '', 0) ON CONFLICT DO NOTHING
                """, .int(now), .int(real), .int(next)) == 1 else { return }
            try backfill(until: now)
        }
    }

    /// How far back the history is published as `occupancy.snapshot` on a
    /// store's first start: a day, so the dashboard's hourly heatmaps have
    /// every hour of the campus from the start (the forecast reads all of
    /// `--history-days` from the store).
    static let publishedHistoryMs: Int64 = 86_400_000

    /// Past snapshots as the curve says they were; those of the last day
    /// (``publishedHistoryMs``) are published too, as the simulator
    /// publishes the ones it takes.
    func backfill(until now: Int64) throws {
        guard settings.historyDays > 0 else { return }
        let totals = try totalsByLevel()
        let ordered = levels.values.sorted { ($0.lot, $0.floor) < ($1.lot, $1.floor) }
        var at = floorDiv(now - settings.historyDays * 86_400_000, Snapshots.intervalMs) * Snapshots.intervalMs + Snapshots.intervalMs
        while at < now {
            for level in ordered {
                let total = totals[level.id] ?? [:]
                var free: [String: Int64] = [:]
                for (kind, n) in total {
                    let taken = DailyCurve.taken(lotKind: level.lotKind, busy: level.busy, floor: level.floor, kind: kind, level: level.id, ms: at, clock: clock)
                    free[kind] = n - Int64((Double(n) * taken).rounded())
                }
                guard try Snapshots.record(db, level: level.id, lot: level.lot, at: at, free: free, total: total, clock: clock),
                      at >= now - Simulator.publishedHistoryMs else { continue }
                try Outbox.append(db, type: Contract.Occupancy.snapshot.type,
                                  body: Snapshots.event(level: level, at: at, free: free, total: total, clock: clock).json)
            }
            at += Snapshots.intervalMs
        }
    }

    func totalsByLevel() throws -> [String: [String: Int64]] {
        var out: [String: [String: Int64]] = [:]
        for r in try db.query("SELECT level, kind, COUNT(*) AS n FROM spots GROUP BY level, kind") { out[r.string("level"), default: [:]][r.string("kind")] = r.int("n") }
        return out
    }

    /// One step: advance the clock, move cars toward the curve, take the
    /// snapshot when one is due.
    func tick() throws {
        let real = Int64(Clock.nowMillis())
        // Unlocked peek: another live worker holds the lease.
        if let row = try db.queryOne("SELECT owner, lease_until_ms FROM simulator WHERE one = 1"),
           row.string("owner") != owner && row.int("lease_until_ms") > real { return }
        try db.transaction {
            guard try db.execute("""
                UPDATE simulator SET owner = $1, lease_until_ms = $2 WHERE one = 1 AND (owner = $1 OR lease_until_ms < $3)
                """, .text(owner), .int(real + Simulator.leaseMs), .int(real)) == 1,
                let state = try db.queryOne("SELECT sim_ms, real_ms, next_snapshot_ms FROM simulator WHERE one = 1") else { return }
            let now = state.int("sim_ms") + Int64(Double(max(0, real - state.int("real_ms"))) * settings.simSpeed)
            try db.execute("UPDATE simulator SET sim_ms = $1, real_ms = $2 WHERE one = 1", .int(now), .int(real))
            try move(at: now)
            if now >= state.int("next_snapshot_ms") {
                // After a pause, only the latest slot: no invented history.
                let slot = floorDiv(now, Snapshots.intervalMs) * Snapshots.intervalMs
                try snapshot(at: slot)
                try db.execute("UPDATE simulator SET next_snapshot_ms = $1 WHERE one = 1", .int(slot + Snapshots.intervalMs))
            }
        }
    }

    /// Parks or removes simulated cars so each level and kind matches the
    /// curve; drivers' holds count as taken, and cars only ever go to free spots.
    func move(at now: Int64) throws {
        var moved: Set<String> = []
        let rows = try db.query("""
            SELECT level, kind, COUNT(*) AS total, SUM(sim_car) AS cars,
                   SUM(CASE WHEN sim_car = 0 AND reservation IS NULL THEN 1 ELSE 0 END) AS free
            FROM spots GROUP BY level, kind
            """)
        for r in rows {
            guard let level = levels[r.string("level")] else { continue }
            let kind = r.string("kind")
            let total = r.int("total"), cars = r.int("cars"), free = r.int("free")
            let drivers = total - cars - free
            let taken = Int64((Double(total) * DailyCurve.taken(lotKind: level.lotKind, busy: level.busy, floor: level.floor, kind: kind, level: level.id, ms: now, clock: clock)).rounded())
            let want = max(0, taken - drivers)
            if want > cars {
                try db.execute("""
                    UPDATE spots SET sim_car = 1 WHERE id IN (
                        SELECT id FROM spots WHERE level = $1 AND kind = $2 AND sim_car = 0 AND reservation IS NULL ORDER BY random() LIMIT $3)
                    """, .text(level.id), .text(kind), .int(min(want - cars, free)))
                moved.insert(level.id)
            } else if want < cars {
                try db.execute("""
                    UPDATE spots SET sim_car = 0 WHERE id IN (SELECT id FROM spots WHERE level = $1 AND kind = $2 AND sim_car = 1 ORDER BY random() LIMIT $3)
                    """, .text(level.id), .text(kind), .int(cars - want))
                moved.insert(level.id)
            }
        }
        for level in moved.sorted() { try LiveLevels.publish(db, level: level) }
    }

    func snapshot(at: Int64) throws {
        var free: [String: [String: Int64]] = [:]
        var total: [String: [String: Int64]] = [:]
        for r in try db.query("SELECT s.level, s.kind, COUNT(*) AS total, \(Places.freeSQL) AS free FROM spots s GROUP BY s.level, s.kind") {
            free[r.string("level"), default: [:]][r.string("kind")] = r.int("free")
            total[r.string("level"), default: [:]][r.string("kind")] = r.int("total")
        }
        for level in levels.values.sorted(by: { ($0.lot, $0.floor) < ($1.lot, $1.floor) }) {
            let f = free[level.id] ?? [:], t = total[level.id] ?? [:]
            guard try Snapshots.record(db, level: level.id, lot: level.lot, at: at, free: f, total: t, clock: clock) else { continue }
            try Outbox.append(db, type: Contract.Occupancy.snapshot.type, body: Snapshots.event(level: level, at: at, free: f, total: t, clock: clock).json)
        }
    }
}

/// The occupancy history and the forecast built from it.
enum Forecast {
    typealias C = Contract.Reservations

    /// Longest span one `reservations.occupancy` answers (`max_range_days`).
    static let maxRangeDays: Int64 = 7

    static func register(_ h: Handlers, db: Database, settings: Settings) {
        let clock = settings.clock
        h.query(C.occupancy) { _, body in
            let lot = try Places.requireLot(db, body.lot)
            let now = try Reservations.campusNow(db, settings: settings)
            let to = try Moment.read(body.to, field: "to", clock: clock, now: now) ?? now
            let from = try Moment.read(body.from, field: "from", clock: clock, now: now) ?? to - 86_400_000
            // Rules across two fields, which the contract's schema cannot say.
            guard from < to else { throw QuadError.badRequest("body.from must be before body.to") }
            guard to - from <= maxRangeDays * 86_400_000 else {
                throw QuadError.badRequest("body.to must be within \(maxRangeDays) days of body.from (max_range_days)")
            }
            var names: [String: String] = [:]
            for r in try db.query("SELECT id, name FROM levels WHERE lot = $1", .text(lot)) { names[r.string("id")] = r.string("name") }
            var sql = "SELECT * FROM snapshots WHERE lot = $1 AND at_ms >= $2 AND at_ms <= $3"
            var params: [SQLValue] = [.text(lot), .int(from), .int(to)]
            if let level = body.level { params.append(.text(Campus.levelID(lot, level))); sql += " AND level = $4" }
            let rows = try db.query(sql + " ORDER BY at_ms, level", params)
            return C.Occupancy.Reply(lot: lot, from: from, to: to,
                                     snapshots: rows.map { Snapshots.snapshot($0, levelName: names[$0.string("level")] ?? "", clock: clock) })
        }

        h.query(C.forecast) { _, body in
            let lot = try Places.requireLot(db, body.lot)
            let now = try Reservations.campusNow(db, settings: settings)
            let arrival = try Moment.read(body.arrival, field: "arrival", clock: clock, now: now) ?? now
            return try forecast(db, lot: lot, arrival: arrival, kind: body.kind ?? "regular", clock: clock)
        }
    }

    /// Free spots expected per level at `arrival`: the mean of the snapshots
    /// taken on the same weekday in the same hour, to one decimal, with the
    /// number of snapshots behind it. The recommended level is the one with
    /// the most free spots of `kind` expected (the upper one on a tie).
    static func forecast(_ db: Database, lot: String, arrival: Int64, kind: String, clock: CampusTime) throws -> C.Forecast.Reply {
        let weekday = clock.weekday(arrival), hour = clock.hour(arrival)
        var sums: [String: Row] = [:]
        for r in try db.query("""
            SELECT level, COUNT(*) AS n, SUM(free_regular) AS regular, SUM(free_accessible) AS accessible, SUM(free_ev) AS ev
            FROM snapshots WHERE lot = $1 AND weekday = $2 AND hour = $3 GROUP BY level
            """, .text(lot), .int(weekday), .int(hour)) { sums[r.string("level")] = r }
        let totals = try Places.counts(db, by: "level", lot: lot)
        var samples: Int64 = 0
        var best: (name: String, free: Double)?
        var anyData = false
        let levels = try db.query("SELECT id, name, floor, signal FROM levels WHERE lot = $1 ORDER BY floor", .text(lot)).map { r in
            let id = r.string("id"), name = r.string("name")
            let n = sums[id]?.int("n") ?? 0
            samples += n
            var expected: C.Expected?
            if n > 0, let sum = sums[id] {
                anyData = true
                expected = C.Expected(regular: mean(sum.int("regular"), n), accessible: mean(sum.int("accessible"), n), ev: mean(sum.int("ev"), n))
                let free = mean(sum.int(kind), n)
                if free >= 1, free > (best?.free ?? 0) { best = (name, free) }
            }
            return C.Forecast.Level(id: id, name: name, floor: r.int("floor"), signal: r.string("signal"),
                                    samples: n, expectedFree: expected, total: Places.counts(totals[id], free: false))
        }
        var reply = C.Forecast.Reply()
        (reply.lot, reply.arrival, reply.arrivalLocal) = (lot, arrival, clock.iso(arrival))
        (reply.weekday, reply.hour, reply.kind) = (CampusTime.weekdays[Int(weekday)], hour, kind)
        (reply.samples, reply.levels) = (samples, levels)
        reply.recommendedLevel = best?.name
        reply.expectedFull = anyData && best == nil
        return reply
    }

    /// A mean to one decimal.
    static func mean(_ sum: Int64, _ n: Int64) -> Double { (Double(sum) / Double(n) * 10).rounded() / 10 }
}
