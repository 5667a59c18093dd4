import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Holds with a countdown. A hold claims a spot with a conditional UPDATE
/// (free, no car on it) and inserts the reservation under two partial
/// unique indexes: one active reservation per user, one holder per spot.
/// Nothing is read and then written: the store decides every race.
///
/// held --checkin before the deadline--> checked_in --checkout--> checked_out
/// held --deadline passes--> expired; held --cancel--> cancelled
///
/// Each move has its event, and the event's seq is the reservation's
/// version (issue 30 pt 1), written in the transaction of the move, so that
/// a phone can tell which of two copies of a hold is newer whichever way
/// each came (the reply to a step, reservations.mine).
enum Holds {
    static let active = "('held', 'checked_in')"

    static let migrations = [
        Migration(3, "ALTER TABLE reservations ADD COLUMN version BIGINT NOT NULL DEFAULT 0"),
    ]

    typealias C = Contract.Reservations

    static func register(_ h: Handlers, db: Database, settings: Settings) {
        let clock = settings.clock
        h.mutation(C.hold) { req, body in
            let user = try req.requireUser()
            let now = Int64(Clock.nowMillis())
            let spot: String
            // The contract has refused a spot given with filters, and a
            // body with none of spot, lot and destination.
            if let wanted = body.spot {
                spot = try claim(db, spot: wanted, reservation: req.id, user: user)
            } else {
                let search = try SpotSearch(db, lot: body.lot, destination: body.destination, kind: body.kind, level: body.level, signal: body.signal)
                var best = search.bestSQL()
                best.params.append(.text(req.id))
                // On PostgreSQL a concurrent hold may take the chosen spot
                // between the subquery and the UPDATE: choose again.
                var claimed: Row?
                for _ in 0..<3 where claimed == nil {
                    claimed = try db.queryOne("""
                        UPDATE spots SET reservation = $\(best.params.count)
                        WHERE id = (\(best.sql)) AND reservation IS NULL AND sim_car = 0 RETURNING id
                        """, best.params)
                    if claimed == nil, try search.count(db) == 0 { break }
                }
                guard let claimed else {
                    throw QuadError.conflict("no free spot \(search.described): reservations.nearby lists nearby lots with room")
                }
                spot = claimed.string("id")
            }
            let deadline = now + settings.holdSeconds * 1000
            guard try db.queryOne("""
                INSERT INTO reservations (id, user_id, spot, status, held_ms, deadline_ms) VALUES ($1, $2, $3, 'held', $4, $5)
                ON CONFLICT DO NOTHING RETURNING id
                """, .text(req.id), .text(user), .text(spot), .int(now), .int(deadline)) != nil else {
                // Rolled back with the claim above when this throws.
                if let mine = try db.queryOne("SELECT id, spot, status, deadline_ms FROM reservations WHERE user_id = $1 AND status IN \(active)", .text(user)) {
                    let what = C.Reservation.Status(rawValue: mine.string("status")) == .held ? "a hold on spot \(mine.string("spot")) until \(clock.iso(mine.int("deadline_ms")))"
                        : "your car on spot \(mine.string("spot"))"
                    throw QuadError.conflict("you already have an active reservation (\(what)): one at a time; check in, check out or cancel it first",
                                             details: ["reservation": .string(mine.string("id"))])
                }
                throw QuadError.conflict("spot \(spot) is already held by another driver")
            }
            var reservation = try load(db, id: req.id, user: user, now: now, clock: clock)
            reservation.version = try publish(db, C.held, reservation, user: user)
            try LiveLevels.publish(db, spot: spot)
            return C.Hold.Reply(reservation: reservation, holdSeconds: settings.holdSeconds)
        }

        h.mutation(C.checkin) { req, body in
            let user = try req.requireUser()
            let now = Int64(Clock.nowMillis())
            let row = try target(db, user: user, id: body.reservation, doing: "check in")
            let id = row.string("id")
            let changed = try db.execute("""
                UPDATE reservations SET status = 'checked_in', checked_in_ms = $1 WHERE id = $2 AND status = 'held' AND deadline_ms > $1
                """, .int(now), .text(id))
            guard changed == 1 else { throw refusal(row, doing: "check in", clock: clock) }
            var reservation = try load(db, id: id, user: user, now: now, clock: clock)
            reservation.version = try publish(db, C.checkedin, reservation, user: user)
            return C.StepReply(reservation: reservation)
        }

        h.mutation(C.checkout) { req, body in
            let user = try req.requireUser()
            let now = Int64(Clock.nowMillis())
            let row = try target(db, user: user, id: body.reservation, doing: "check out")
            let id = row.string("id")
            guard try db.execute("UPDATE reservations SET status = 'checked_out', ended_ms = $1 WHERE id = $2 AND status = 'checked_in'",
                                 .int(now), .text(id)) == 1 else {
                throw refusal(row, doing: "check out", clock: clock)
            }
            try db.execute("UPDATE spots SET reservation = NULL WHERE id = $1 AND reservation = $2", .text(row.string("spot")), .text(id))
            try LiveLevels.publish(db, spot: row.string("spot"))
            var reservation = try load(db, id: id, user: user, now: now, clock: clock)
            reservation.version = try publish(db, C.checkedout, reservation, user: user)
            return C.StepReply(reservation: reservation)
        }

        h.mutation(C.cancel) { req, body in
            let user = try req.requireUser()
            let now = Int64(Clock.nowMillis())
            let row = try target(db, user: user, id: body.reservation, doing: "cancel")
            let id = row.string("id")
            guard try db.execute("""
                UPDATE reservations SET status = 'cancelled', ended_ms = $1 WHERE id = $2 AND status = 'held' AND deadline_ms > $1
                """, .int(now), .text(id)) == 1 else {
                throw refusal(row, doing: "cancel", clock: clock)
            }
            try db.execute("UPDATE spots SET reservation = NULL WHERE id = $1 AND reservation = $2", .text(row.string("spot")), .text(id))
            try LiveLevels.publish(db, spot: row.string("spot"))
            var reservation = try load(db, id: id, user: user, now: now, clock: clock)
            reservation.version = try publish(db, C.cancelled, reservation, user: user)
            return C.StepReply(reservation: reservation)
        }

        h.query(C.mine) { req, body in
            let user = try req.requireUser()
            let limit = body.limit
            let now = Int64(Clock.nowMillis())
            let rows = try db.query("\(selectSQL) WHERE r.user_id = $1 ORDER BY r.held_ms DESC, r.id DESC LIMIT $2", .text(user), .int(limit + 1))
            let ongoing: Set<C.Reservation.Status> = [.held, .checkedIn]
            func isOngoing(_ row: Row) -> Bool { C.Reservation.Status(rawValue: row.string("status")).map(ongoing.contains) ?? false }
            let active = rows.first(where: isOngoing)
            let history = rows.filter { !isOngoing($0) }.prefix(Int(limit))
            let stays = try db.queryOne("""
                SELECT COUNT(*) AS n, COALESCE(SUM(ended_ms - checked_in_ms), 0) AS ms FROM reservations WHERE user_id = $1 AND status = 'checked_out'
                """, .text(user))
            return C.Mine.Reply(active: try active.map { try json($0, now: now, clock: clock) },
                                history: try history.map { try json($0, now: now, clock: clock) },
                                stays: C.Mine.Stays(count: stays?.int("n") ?? 0, seconds: (stays?.int("ms") ?? 0) / 1000))
        }
    }

    /// Claims a named spot for `reservation`: a conditional UPDATE that only
    /// a free spot passes.
    static func claim(_ db: Database, spot: String, reservation: String, user: String) throws -> String {
        if try db.execute("UPDATE spots SET reservation = $1 WHERE id = $2 AND reservation IS NULL AND sim_car = 0", .text(reservation), .text(spot)) == 1 {
            return spot
        }
        // Refused: say why.
        guard let row = try db.queryOne("""
            SELECT s.sim_car, r.user_id FROM spots s LEFT JOIN reservations r ON r.id = s.reservation WHERE s.id = $1
            """, .text(spot)) else {
            throw QuadError.notFound("no spot '\(spot)' (body.spot)")
        }
        if row.optionalString("user_id") == user { throw QuadError.conflict("you already hold spot \(spot)") }
        if row.int("sim_car") != 0 && row["user_id"].isNull { throw QuadError.conflict("spot \(spot) is taken: a car is parked on it") }
        throw QuadError.conflict("spot \(spot) is already held by another driver")
    }

    /// The reservation a check-in, check-out or cancel is about: the one
    /// named, which must be the caller's, or the caller's active (else latest).
    static func target(_ db: Database, user: String, id: String?, doing: String) throws -> Row {
        if let id {
            guard let row = try db.queryOne("SELECT id, spot, status, deadline_ms FROM reservations WHERE id = $1 AND user_id = $2", .text(id), .text(user)) else {
                throw QuadError.notFound("you have no reservation '\(id)' (body.reservation)")
            }
            return row
        }
        guard let row = try db.queryOne("""
            SELECT id, spot, status, deadline_ms FROM reservations WHERE user_id = $1
            ORDER BY CASE WHEN status IN \(active) THEN 0 ELSE 1 END, held_ms DESC, id DESC LIMIT 1
            """, .text(user)) else {
            throw QuadError.notFound("you have no reservation to \(doing): hold a spot first")
        }
        return row
    }

    /// The 409 for a step that does not apply in the reservation's state.
    static func refusal(_ row: Row, doing: String, clock: CampusTime) -> QuadError {
        let spot = row.string("spot")
        let details: JSON = ["reservation": .string(row.string("id")), "status": .string(row.string("status"))]
        let status = C.Reservation.Status(rawValue: row.string("status"))
        switch status {
        case .held?, .expired?:
            if doing == "check out" && status == .held {
                return .conflict("you have not checked in at spot \(spot) yet: check in first, or cancel the hold", details: details)
            }
            return .conflict("the hold on spot \(spot) expired at \(clock.iso(row.int("deadline_ms"))): the spot is free again; hold a spot again",
                             details: ["reservation": .string(row.string("id")), "status": .string(C.Reservation.Status.expired.rawValue)])
        case .checkedIn?:
            return doing == "cancel"
                ? .conflict("you are already parked at spot \(spot): check out instead", details: details)
                : .conflict("you already checked in at spot \(spot)", details: details)
        case .checkedOut?: return .conflict("you already left spot \(spot): this reservation is over", details: details)
        default: return .conflict("the hold on spot \(spot) was cancelled", details: details)
        }
    }

    static let selectSQL = """
        SELECT r.id, r.user_id, r.spot, r.status, r.held_ms, r.deadline_ms, r.checked_in_ms, r.ended_ms, r.version,
               s.lot, s.kind, l.name AS level_name, l.signal
        FROM reservations r JOIN spots s ON s.id = r.spot JOIN levels l ON l.id = s.level
        """

    static func load(_ db: Database, id: String, user: String, now: Int64, clock: CampusTime) throws -> C.Reservation {
        guard let row = try db.queryOne("\(selectSQL) WHERE r.id = $1", .text(id)) else { throw QuadError.internal("reservation \(id) vanished") }
        return try json(row, now: now, clock: clock)
    }

    /// A row of the store; a status the contract does not name is a store
    /// this build cannot read, and says which reservation.
    static func json(_ r: Row, now: Int64, clock: CampusTime) throws -> C.Reservation {
        var out = C.Reservation()
        (out.id, out.spot, out.lot) = (r.string("id"), r.string("spot"), r.string("lot"))
        (out.level, out.signal, out.kind) = (r.string("level_name"), r.string("signal"), r.string("kind"))
        guard let status = C.Reservation.Status(rawValue: r.string("status")) else {
            throw QuadError.internal("reservation '\(r.string("id"))' has the status '\(r.string("status"))' in the store, which this build does not know")
        }
        out.status = status
        (out.heldAt, out.deadline) = (r.int("held_ms"), r.int("deadline_ms"))
        out.deadlineLocal = clock.iso(out.deadline)
        out.secondsLeft = out.status == .held ? max(0, (out.deadline - now + 999) / 1000) : 0
        (out.checkedInAt, out.endedAt) = (r["checked_in_ms"].int, r["ended_ms"].int)
        if out.status == .checkedOut, let checkedIn = out.checkedInAt, let ended = out.endedAt { out.staySeconds = (ended - checkedIn) / 1000 }
        out.version = r.int("version")
        return out
    }

    /// Appends the event of a reservation's step to the outbox and makes
    /// its seq the reservation's version, in the transaction of the step.
    /// The event's reservation carries no version: its envelope's seq is it.
    @discardableResult
    static func publish(_ db: Database, _ event: TypedEvent<C.ReservationEvent>, _ reservation: C.Reservation, user: String) throws -> Int64 {
        var moved = reservation
        moved.version = nil
        let seq = try Outbox.append(db, type: event.type, body: C.ReservationEvent(user: user, reservation: moved).json)
        try db.execute("UPDATE reservations SET version = $2 WHERE id = $1", .text(reservation.id), .int(seq))
        return seq
    }

    /// Expires every hold whose deadline passed: once each, whichever worker
    /// gets there first (the UPDATE only matches holds still `held`), with
    /// its `reservations.expired` event in the same transaction.
    @discardableResult
    static func expireDue(_ db: Database, now: Int64, clock: CampusTime) throws -> Int {
        // A cheap unlocked peek first, so idle workers do not take the lock.
        guard try db.queryOne("SELECT id FROM reservations WHERE status = 'held' AND deadline_ms <= $1 LIMIT 1", .int(now)) != nil else { return 0 }
        return try db.transaction {
            let expired = try db.query("""
                UPDATE reservations SET status = 'expired', ended_ms = $1 WHERE status = 'held' AND deadline_ms <= $1 RETURNING id, user_id, spot
                """, .int(now))
            for r in expired {
                try db.execute("UPDATE spots SET reservation = NULL WHERE id = $1 AND reservation = $2", .text(r.string("spot")), .text(r.string("id")))
                let user = r.string("user_id")
                try publish(db, C.expired, try load(db, id: r.string("id"), user: user, now: now, clock: clock), user: user)
            }
            // The levels last, after every spot: a level's lock is never
            // held while waiting for a spot's.
            for spot in Set(expired.map { $0.string("spot") }).sorted() { try LiveLevels.publish(db, spot: spot) }
            return expired.count
        }
    }
}

/// Find my car: where the driver left it (GPS does not reach P2 and P3, so
/// the level and a note say the rest).
enum Car {
    static func register(_ h: Handlers, db: Database) {
        h.mutation(Contract.Reservations.carSave) { req, body in
            let user = try req.requireUser()
            let (lat, lon, level, note) = (body.lat, body.lon, body.level, body.note ?? "")
            let now = Int64(Clock.nowMillis())
            try db.execute("""
                INSERT INTO cars (user_id, lat, lon, level, note, saved_ms) VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (user_id) DO UPDATE SET lat = excluded.lat, lon = excluded.lon, level = excluded.level, note = excluded.note, saved_ms = excluded.saved_ms
                """, .text(user), .double(lat), .double(lon), .of(level), .text(note), .int(now))
            return Contract.Reservations.CarReply(car: car(try db.queryOne("SELECT * FROM cars WHERE user_id = $1", .text(user))!))
        }
        h.query(Contract.Reservations.carGet) { req, _ in
            let user = try req.requireUser()
            guard let row = try db.queryOne("SELECT * FROM cars WHERE user_id = $1", .text(user)) else {
                throw QuadError.notFound("no car saved yet: reservations.car.save stores where you parked")
            }
            return Contract.Reservations.CarReply(car: car(row))
        }
    }

    static func car(_ r: Row) -> Contract.Reservations.Car {
        Contract.Reservations.Car(lat: r.double("lat"), lon: r.double("lon"), level: r.optionalString("level"),
                                  note: r.string("note"), savedAt: r.int("saved_ms"))
    }
}
