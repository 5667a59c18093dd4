import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Lots, levels and spots with live free counts; finding the spot to
/// recommend; nearby lots for when campus is full.
enum Places {
    typealias C = Contract.Reservations

    static func register(_ h: Handlers, db: Database, settings: Settings) {
        h.query(C.lots) { _, body in try lots(db, kind: body.kind) }
        h.query(C.levels) { _, body in
            let lot = try requireLot(db, body.lot)
            let now = try Reservations.campusNow(db, settings: settings)
            return C.Levels.Reply(lot: lot, levels: try levels(db, lot: lot), at: now, local: settings.clock.iso(now))
        }
        h.query(C.spotsFind) { _, body in
            let search = try SpotSearch(db, lot: body.lot, destination: body.destination, kind: body.kind, level: body.level, signal: body.signal)
            return C.SpotsFind.Reply(lot: search.lot, destination: search.destination, kind: search.kind,
                                     count: try search.count(db), spots: try search.free(db, limit: body.limit))
        }
        h.query(C.nearby) { _, body in try nearby(db, kind: body.kind ?? "regular") }
    }

    typealias Counts = [String: (total: Int64, free: Int64)]

    static let freeSQL = "SUM(CASE WHEN s.sim_car = 0 AND s.reservation IS NULL THEN 1 ELSE 0 END)"

    /// Total and free spots per kind, grouped by `column` (lot or level).
    static func counts(_ db: Database, by column: String, lot: String? = nil, level: String? = nil) throws -> [String: Counts] {
        let filter = lot != nil ? "WHERE s.lot = $1" : level != nil ? "WHERE s.level = $1" : ""
        let rows = try db.query("SELECT s.\(column) AS k, s.kind, COUNT(*) AS total, \(freeSQL) AS free FROM spots s \(filter) GROUP BY s.\(column), s.kind",
                                (lot ?? level).map { [.text($0)] } ?? [])
        var out: [String: Counts] = [:]
        for r in rows { out[r.string("k"), default: [:]][r.string("kind")] = (r.int("total"), r.int("free")) }
        return out
    }

    static func counts(_ c: Counts?, free: Bool) -> C.Counts {
        func n(_ kind: String) -> Int64 { free ? c?[kind]?.free ?? 0 : c?[kind]?.total ?? 0 }
        return C.Counts(regular: n("regular"), accessible: n("accessible"), ev: n("ev"))
    }

    static func requireLot(_ db: Database, _ id: String, field: String = "lot") throws -> String {
        guard try db.queryOne("SELECT id FROM lots WHERE id = $1", .text(id)) != nil else {
            let known = try db.query("SELECT id FROM lots ORDER BY position").map { $0.string("id") }
            throw QuadError.notFound("no lot '\(id)' (body.\(field)); lots: \(known.joined(separator: ", "))")
        }
        return id
    }

    static func lots(_ db: Database, kind: String?) throws -> C.Lots.Reply {
        let rows = try kind.map { try db.query("SELECT * FROM lots WHERE kind = $1 ORDER BY position", .text($0)) }
            ?? db.query("SELECT * FROM lots ORDER BY position")
        let counts = try counts(db, by: "lot")
        var levelNames: [String: [String]] = [:]
        for r in try db.query("SELECT lot, name FROM levels ORDER BY lot, floor") { levelNames[r.string("lot"), default: []].append(r.string("name")) }
        var walks: [String: [C.Lots.Walk]] = [:]
        for r in try db.query("SELECT destination, lot, walk_m FROM walks ORDER BY destination, walk_m") {
            walks[r.string("destination"), default: []].append(C.Lots.Walk(lot: r.string("lot"), walkM: r.int("walk_m")))
        }
        let destinations = try db.query("SELECT id, name FROM destinations ORDER BY id").map { r in
            C.Lots.Destination(id: r.string("id"), name: r.string("name"), walks: walks[r.string("id")] ?? [],
                               photoUrl: Photos.url(building: r.string("id")))
        }
        return C.Lots.Reply(lots: rows.map { r in
            let id = r.string("id")
            var lot = C.Lots.Lot()
            (lot.id, lot.name, lot.kind, lot.address) = (id, r.string("name"), r.string("kind"), r.string("address"))
            (lot.distanceM, lot.lat, lot.lon) = (r.int("distance_m"), r.double("lat"), r.double("lon"))
            lot.levels = levelNames[id] ?? []
            lot.photoUrl = Photos.url(lot: id)
            (lot.total, lot.free) = (self.counts(counts[id], free: false), self.counts(counts[id], free: true))
            return lot
        }, destinations: destinations)
    }

    static func levels(_ db: Database, lot: String) throws -> [C.Level] {
        let counts = try counts(db, by: "level", lot: lot)
        return try db.query("SELECT id, name, floor, signal, live_seq FROM levels WHERE lot = $1 ORDER BY floor", .text(lot)).map { r in
            let id = r.string("id")
            return C.Level(id: id, name: r.string("name"), floor: r.int("floor"), signal: r.string("signal"),
                           total: self.counts(counts[id], free: false), free: self.counts(counts[id], free: true), seq: r.int("live_seq"))
        }
    }

    static func nearby(_ db: Database, kind: String) throws -> C.Nearby.Reply {
        let counts = try counts(db, by: "lot")
        var campus: Counts = [:]
        let campusLots = try db.query("SELECT id FROM lots WHERE kind = 'campus'").map { $0.string("id") }
        for id in campusLots {
            for (k, c) in counts[id] ?? [:] { campus[k] = ((campus[k]?.total ?? 0) + c.total, (campus[k]?.free ?? 0) + c.free) }
        }
        let lots = try db.query("SELECT * FROM lots WHERE kind = 'nearby' ORDER BY distance_m, id").map { r in
            let id = r.string("id")
            var lot = C.Nearby.Lot()
            (lot.id, lot.name, lot.address) = (id, r.string("name"), r.string("address"))
            (lot.distanceM, lot.lat, lot.lon) = (r.int("distance_m"), r.double("lat"), r.double("lon"))
            (lot.total, lot.free) = (self.counts(counts[id], free: false), self.counts(counts[id], free: true))
            lot.hasFree = (counts[id]?[kind]?.free ?? 0) > 0
            return lot
        }
        let whole = C.Nearby.Campus(free: self.counts(campus, free: true), total: self.counts(campus, free: false), full: (campus[kind]?.free ?? 0) == 0)
        return C.Nearby.Reply(kind: kind, campus: whole, lots: lots)
    }
}

/// Which free spots a driver wants: in a lot or near a destination
/// building, of a kind (regular unless asked), on a level, only where the
/// phone has signal. The
/// best first: the shortest walk, with each level underground counted as
/// ``Campus/floorPenaltyM`` more metres.
struct SpotSearch {
    var lot: String?
    var destination: String?
    var kind: String
    var level: String?
    var signalOnly = false

    /// The search the filters name; 404 for a lot or destination the
    /// campus does not have. (The contract has already refused a search
    /// with neither or both of lot and destination.)
    init(_ db: Database, lot: String?, destination: String?, kind: String?, level: String?, signal: Bool?) throws {
        (self.lot, self.destination, self.level) = (lot, destination, level)
        // Accessible spots and chargers go only to drivers who ask for them.
        self.kind = kind ?? "regular"
        signalOnly = signal ?? false
        if let lot { _ = try Places.requireLot(db, lot) }
        if let destination, try db.queryOne("SELECT id FROM destinations WHERE id = $1", .text(destination)) == nil {
            let known = try db.query("SELECT id FROM destinations ORDER BY id").map { $0.string("id") }
            throw QuadError.notFound("no destination '\(destination)' (body.destination); destinations: \(known.joined(separator: ", "))")
        }
    }

    /// FROM, WHERE and the route length of free spots matching the search.
    func sql() -> (from: String, route: String, params: [SQLValue]) {
        var params: [SQLValue] = []
        var conditions = ["s.sim_car = 0", "s.reservation IS NULL"]
        var from = "spots s JOIN levels l ON l.id = s.level"
        var route = "s.walk_m + (l.floor - 1) * \(Campus.floorPenaltyM)"
        if let destination {
            params.append(.text(destination))
            from += " JOIN walks w ON w.lot = s.lot AND w.destination = $\(params.count)"
            route += " + w.walk_m"
        }
        if let lot { params.append(.text(lot)); conditions.append("s.lot = $\(params.count)") }
        params.append(.text(kind))
        conditions.append("s.kind = $\(params.count)")
        if let level { params.append(.text(level)); conditions.append("l.name = $\(params.count)") }
        if signalOnly { conditions.append("l.signal <> 'none'") }
        return ("\(from) WHERE \(conditions.joined(separator: " AND "))", route, params)
    }

    func count(_ db: Database) throws -> Int64 {
        let q = sql()
        return try db.queryOne("SELECT COUNT(*) AS n FROM \(q.from)", q.params)?.int("n") ?? 0
    }

    /// The best free spots, best first.
    func free(_ db: Database, limit: Int64) throws -> [Contract.Reservations.Spot] {
        var q = sql()
        q.params.append(.int(limit))
        return try db.query("""
            SELECT s.id, s.lot, s.level AS level_id, l.name AS level_name, l.signal, s.number, s.kind, s.walk_m, \(q.route) AS route_m
            FROM \(q.from) ORDER BY route_m, s.id LIMIT $\(q.params.count)
            """, q.params).map(SpotSearch.spot)
    }

    /// The id of the best free spot, as a subquery for a conditional UPDATE.
    func bestSQL() -> (sql: String, params: [SQLValue]) {
        let q = sql()
        return ("SELECT s.id FROM \(q.from) ORDER BY \(q.route), s.id LIMIT 1", q.params)
    }

    var described: String {
        var parts = [kind]
        if let level { parts.append("on \(level)") }
        if signalOnly { parts.append("with signal") }
        if let lot { parts.append("in \(lot)") }
        if let destination { parts.append("near \(destination)") }
        return parts.joined(separator: " ")
    }

    static func spot(_ r: Row) -> Contract.Reservations.Spot {
        Contract.Reservations.Spot(id: r.string("id"), lot: r.string("lot"), level: r.string("level_name"), levelID: r.string("level_id"),
                                   signal: r.string("signal"), number: r.int("number"), kind: r.string("kind"), walkM: r.int("route_m"))
    }
}
