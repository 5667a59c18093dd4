import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadReservations

/// The reservations service without a broker: its handlers on a real
/// SQLite file, called with envelopes as the worker would.
final class Desk {
    /// The stores the tests run on: SQLite always, PostgreSQL too when
    /// QUAD_TEST_PG names a server (deploy/test starts one).
    static let stores = ["sqlite"] + (ProcessInfo.processInfo.environment["QUAD_TEST_PG"] == nil ? [] : ["postgres"])

    let db: Database
    let handlers: Handlers
    let settings: Reservations.Settings

    init(_ store: String = "sqlite", holdSeconds: Int64 = 600) throws {
        if store == "postgres", let url = ProcessInfo.processInfo.environment["QUAD_TEST_PG"] {
            let admin = try PostgresDatabase(url: url)
            let schema = "resv\(UInt32.random(in: 0...UInt32.max))"
            try admin.executeScript("CREATE SCHEMA \(schema)")
            admin.close()
            db = try PostgresDatabase(url: url + (url.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)")
        } else {
            let dir = NSTemporaryDirectory() + "quad-resv-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            db = try SQLiteDatabase(path: dir + "/reservations.db")
        }
        try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
        try Migrations.apply(db, Reservations.migrations, scope: "reservations")
        try Campus.seedIfEmpty(db)
        var settings = Reservations.Settings()
        settings.holdSeconds = holdSeconds
        settings.simulate = false
        self.settings = settings
        handlers = Handlers(service: "reservations", instance: "reservations/test", db: db)
        Reservations.register(handlers, db: db, settings: settings)
    }

    func call(_ type: String, _ body: JSON = [:], user: String? = "ana", id: String = MessageID.make()) -> Envelope {
        var request = Envelope.request(type, body: body, id: id)
        request.user = user
        return handlers.handle(request)
    }

    /// The reply body, or the error as a thrown ``QuadError``.
    func ok(_ type: String, _ body: JSON = [:], user: String? = "ana") throws -> JSON {
        let reply = call(type, body, user: user)
        if let error = reply.quadError { throw error }
        return reply.body
    }

    func error(_ type: String, _ body: JSON = [:], user: String? = "ana") -> QuadError? { call(type, body, user: user).quadError }
}

@Suite("Reservations handlers")
struct HandlerTests {
    @Test(arguments: Desk.stores) func theCampusIsSeededWithLotsLevelsAndKindsOfSpots(store: String) throws {
        let desk = try Desk(store)
        let lots = try desk.ok("reservations.lots")["lots"]?.array ?? []
        #expect(lots.compactMap { $0["id"]?.string } == ["central", "north", "calle19", "aguas", "germania"])
        let nearby = lots.filter { $0["kind"]?.string == "nearby" }
        #expect(nearby.allSatisfy { ($0["distance_m"]?.int ?? 0) > 0 && !($0["address"]?.string ?? "").isEmpty })
        let levels = try desk.ok("reservations.levels", ["lot": "central"])["levels"]?.array ?? []
        #expect(levels.compactMap { $0["name"]?.string } == ["P1", "P2", "P3"])
        #expect(levels.compactMap { $0["signal"]?.string } == ["good", "none", "none"])
        for level in levels {
            #expect(level["free"] == level["total"], "a fresh campus is empty")
            #expect((level["total"]?["accessible"]?.int ?? 0) > 0 && (level["total"]?["ev"]?.int ?? 0) > 0)
        }
        // Seeding twice changes nothing.
        try Campus.seedIfEmpty(desk.db)
        #expect(try desk.db.queryOne("SELECT COUNT(*) AS n FROM spots")?.int("n") == 288 + 40 + 30 + 24)
    }

    @Test(arguments: Desk.stores) func findRecommendsTheShortestWalkThatMatchesTheFilters(store: String) throws {
        let desk = try Desk(store)
        let ev = try desk.ok("reservations.spots.find", ["destination": "W", "kind": "ev", "limit": 3])
        #expect(ev["recommended"]?["id"]?.string == "north-P1-007", "first charger on P1 of the lot nearest W")
        #expect(ev["spots"]?.array?.allSatisfy { $0["kind"]?.string == "ev" } == true)
        #expect(ev["count"]?.int == 24, "6 + 4 + 2 chargers in each of two campus lots")
        let underground = try desk.ok("reservations.spots.find", ["lot": "central", "level": "P3", "kind": "accessible"])
        #expect(underground["recommended"]?["id"]?.string == "central-P3-001")
        #expect(underground["recommended"]?["signal"]?.string == "none")
        let withSignal = try desk.ok("reservations.spots.find", ["lot": "central", "signal": true, "limit": 100])
        #expect(withSignal["spots"]?.array?.allSatisfy { $0["level"]?.string == "P1" } == true)
        // A held spot is no longer offered.
        _ = try desk.ok("reservations.hold", ["spot": "north-P1-007"])
        let again = try desk.ok("reservations.spots.find", ["destination": "W", "kind": "ev", "limit": 3])
        #expect(again["recommended"]?["id"]?.string == "north-P1-008")
        #expect(again["count"]?.int == 23)
    }

    @Test(arguments: Desk.stores) func aDriversDayHoldCheckInCheckOutAndHistory(store: String) throws {
        let desk = try Desk(store)
        let held = try desk.ok("reservations.hold", ["destination": "ML", "kind": "regular"])
        let reservation = try #require(held["reservation"])
        #expect(reservation["status"]?.string == "held")
        #expect(reservation["spot"]?.string == "central-P1-013", "first regular spot of the lot nearest ML")
        #expect((590...600).contains(reservation["seconds_left"]?.int ?? 0))
        let level = try desk.ok("reservations.levels", ["lot": "central"])["levels"]?.array?.first
        #expect(level?["free"]?["regular"]?.int == 35)
        let parked = try desk.ok("reservations.checkin")["reservation"]
        #expect(parked?["status"]?.string == "checked_in")
        #expect(desk.error("reservations.cancel")?.message == "you are already parked at spot central-P1-013: check out instead")
        let left = try desk.ok("reservations.checkout", ["reservation": reservation["id"]!])["reservation"]
        #expect(left?["status"]?.string == "checked_out")
        #expect(left?["stay_seconds"]?.int != nil)
        let mine = try desk.ok("reservations.mine")
        #expect(mine["active"] == .null)
        #expect(mine["history"]?.array?.count == 1)
        #expect(mine["stays"]?["count"]?.int == 1)
        #expect(try desk.ok("reservations.levels", ["lot": "central"])["levels"]?.array?.first?["free"]?["regular"]?.int == 36)
        let events = try Outbox.since(desk.db, after: 0, limit: 10)
        // The hold and the check-out change the level's free spots: the
        // phones' live map hears each, with the counts and in order.
        #expect(events.map(\.type) == ["reservations.held", "reservations.level.changed", "reservations.checkedin", "reservations.level.changed", "reservations.checkedout"])
        let levels = events.filter { $0.type == "reservations.level.changed" }
        #expect(levels.map { $0.body["free"]?["regular"]?.int } == [35, 36])
        #expect(levels.allSatisfy { $0.body["level"]?.string == "central-P1" && $0.body["user"] == nil })
        let seqs = try desk.ok("reservations.levels", ["lot": "central"])["levels"]?.array?.first?["seq"]?.int
        #expect(seqs == levels.last.map { $0.seq }, "reservations.levels gives the seq of the level's last update")
    }

    /// Each reply and event is the contract's Swift type of it: decoded
    /// into that type and encoded again, it is the same bytes the handler
    /// sent (no field the type drops, none it adds, nulls where they were).
    @Test(arguments: Desk.stores) func everyReplyAndEventIsItsDeclaredType(store: String) throws {
        typealias C = Contract.Reservations
        let desk = try Desk(store)
        func same<Q, R>(_ op: TypedOperation<Q, R>, _ body: JSON = [:]) throws {
            let reply = try desk.ok(op.type, body)
            #expect(try R(json: reply).json.encoded() == reply.encoded(), "\(op.type)")
        }
        try same(C.lots)
        try same(C.lots, ["kind": "nearby"])
        try same(C.nearby, ["kind": "ev"])
        try same(C.spotsFind, ["destination": "W", "kind": "ev", "limit": 3])
        try same(C.spotsFind, ["lot": "central", "level": "P1", "kind": "accessible", "signal": true])
        // Nothing free: recommended is null, not left out.
        try desk.db.execute("UPDATE spots SET sim_car = 1 WHERE lot = 'north' AND kind = 'ev'")
        let none = try desk.ok(C.spotsFind.type, ["lot": "north", "kind": "ev"])
        #expect(none["recommended"] == .null && none.object?.keys.contains("recommended") == true && none["destination"] == nil)
        try same(C.spotsFind, ["lot": "north", "kind": "ev"])
        try same(C.hold, ["lot": "central", "kind": "regular"])
        try same(C.checkin)
        try same(C.checkout)
        try same(C.hold, ["spot": "central-P2-020"])
        try same(C.cancel)
        try same(C.mine)
        try same(C.levels, ["lot": "north"])
        try same(C.carSave, ["lat": 4.6, "lon": -74.06, "level": "P2", "note": "by the stairs"])
        try same(C.carSave, ["lat": 4.6, "lon": -74.06])
        #expect(try desk.ok(C.carGet.type)["car"]?["level"] == .null, "a car saved without a level says null")
        try same(C.carGet)
        let clock = desk.settings.clock
        let monday = try #require(Moment.parse("2025-03-03T08:30:00-05:00", clock: clock, now: 0))
        for at in stride(from: monday - 7 * 86_400_000, through: monday, by: 900_000) {
            try Snapshots.record(desk.db, level: "central-P1", lot: "central", at: at, free: ["regular": 3, "accessible": 1, "ev": 2],
                                 total: ["regular": 36, "accessible": 4, "ev": 6], clock: clock)
        }
        try same(C.forecast, ["lot": "central", "arrival": "2025-03-03T08:30:00-05:00"])
        try same(C.forecast, ["lot": "central", "arrival": "03:00", "kind": "ev"])
        try same(C.occupancy, ["lot": "central", "from": .int(monday - 86_400_000), "to": .int(monday)])
        try same(C.occupancy, ["lot": "central", "level": "P1", "from": "2025-03-03 07:00", "to": "2025-03-03T08:30:00-05:00"])
        let events = try Outbox.since(desk.db, after: 0, limit: 100)
        #expect(events.map(\.type) == ["reservations.held", "reservations.level.changed", "reservations.checkedin", "reservations.level.changed",
                                        "reservations.checkedout", "reservations.held", "reservations.level.changed", "reservations.level.changed",
                                        "reservations.cancelled"])
        for event in events {
            if event.type == C.levelChanged.type {
                #expect(try C.LevelChanged(json: event.body).json.encoded() == event.body.encoded(), "\(event.type)")
                continue
            }
            #expect(try C.ReservationEvent(json: event.body).json.encoded() == event.body.encoded(), "\(event.type)")
            #expect(Contract.event(event.type) != nil)
        }
    }

    @Test(arguments: Desk.stores) func oneActiveHoldPerUserAndOneHolderPerSpot(store: String) throws {
        let desk = try Desk(store)
        let first = try desk.ok("reservations.hold", ["spot": "central-P2-020"])
        let second = try #require(desk.error("reservations.hold", ["spot": "central-P2-021"]))
        #expect(second.status == 409)
        #expect(second.message.hasPrefix("you already have an active reservation (a hold on spot central-P2-020 until"))
        #expect(second.details["reservation"] == first["reservation"]?["id"])
        let taken = try #require(desk.error("reservations.hold", ["spot": "central-P2-020"], user: "bruno"))
        #expect(taken.status == 409 && taken.message == "spot central-P2-020 is already held by another driver")
        // After a cancel both are free to go again.
        #expect(try desk.ok("reservations.cancel")["reservation"]?["status"]?.string == "cancelled")
        #expect(try desk.ok("reservations.hold", ["spot": "central-P2-020"], user: "bruno")["reservation"]?["status"]?.string == "held")
        #expect(try desk.ok("reservations.hold", ["spot": "central-P2-021"])["reservation"]?["status"]?.string == "held")
        // The store itself refuses a second active row, whatever the code does.
        #expect(throws: StoreError.self) {
            try desk.db.execute("INSERT INTO reservations (id, user_id, spot, status, held_ms, deadline_ms) VALUES ('x', 'ana', 'north-P1-001', 'held', 0, 1)")
        }
        #expect(throws: StoreError.self) {
            try desk.db.execute("INSERT INTO reservations (id, user_id, spot, status, held_ms, deadline_ms) VALUES ('y', 'carla', 'central-P2-020', 'checked_in', 0, 1)")
        }
    }

    @Test(arguments: Desk.stores) func aRepeatedEnvelopeIDHoldsOnceAndGetsTheSameReply(store: String) throws {
        let desk = try Desk(store)
        let id = MessageID.make()
        let first = desk.call("reservations.hold", ["lot": "north", "kind": "accessible"], id: id)
        let second = desk.call("reservations.hold", ["lot": "north", "kind": "accessible"], id: id)
        #expect(first.kind == .reply && first.body == second.body)
        #expect(try desk.db.queryOne("SELECT COUNT(*) AS n FROM reservations")?.int("n") == 1)
        #expect(try Outbox.since(desk.db, after: 0, limit: 10).map(\.type) == ["reservations.held", "reservations.level.changed"])
    }

    @Test(arguments: Desk.stores) func aSpotWithACarOnItCannotBeHeldAndAFullCampusPointsToNearbyLots(store: String) throws {
        let desk = try Desk(store)
        try desk.db.execute("UPDATE spots SET sim_car = 1 WHERE id = 'central-P1-001'")
        #expect(desk.error("reservations.hold", ["spot": "central-P1-001"])?.message == "spot central-P1-001 is taken: a car is parked on it")
        try desk.db.execute("UPDATE spots SET sim_car = 1 WHERE lot IN ('central', 'north') AND kind = 'ev'")
        let refused = try #require(desk.error("reservations.hold", ["lot": "central", "kind": "ev"]))
        #expect(refused.status == 409 && refused.message.contains("reservations.nearby"))
        let nearby = try desk.ok("reservations.nearby", ["kind": "ev"])
        #expect(nearby["campus"]?["full"] == true)
        #expect(nearby["lots"]?.array?.compactMap { $0["distance_m"]?.int } == [450, 650, 900])
        #expect(nearby["lots"]?.array?.first?["free"]?["ev"]?.int == 2)
        #expect(try desk.ok("reservations.nearby")["campus"]?["full"] == false)
    }

    @Test(arguments: Desk.stores) func theSweepExpiresOnlyHoldsPastTheirDeadlineOnce(store: String) throws {
        let desk = try Desk(store)
        let ana = try desk.ok("reservations.hold", ["spot": "central-P1-030"])["reservation"]
        _ = try desk.ok("reservations.hold", ["spot": "central-P1-031"], user: "bruno")
        try desk.db.execute("UPDATE reservations SET deadline_ms = deadline_ms - 600000 WHERE user_id = 'ana'")
        let now = Int64(Clock.nowMillis())
        #expect(try Holds.expireDue(desk.db, now: now, clock: desk.settings.clock) == 1)
        #expect(try Holds.expireDue(desk.db, now: now + 1000, clock: desk.settings.clock) == 0, "once")
        let expired = try Outbox.since(desk.db, after: 0, limit: 10).filter { $0.type == "reservations.expired" }
        #expect(expired.map { $0.body["reservation"]?["id"] } == [ana?["id"]])
        #expect(expired.first?.body["reservation"]?["status"]?.string == "expired")
        let refused = try #require(desk.error("reservations.checkin"))
        #expect(refused.status == 409 && refused.message.hasPrefix("the hold on spot central-P1-030 expired at "))
        #expect(try desk.ok("reservations.hold", ["spot": "central-P1-030"], user: "carla")["reservation"]?["status"]?.string == "held")
        #expect(try desk.ok("reservations.mine", user: "bruno")["active"]?["status"]?.string == "held")
    }

    @Test(arguments: Desk.stores) func oneSimulatorRunsPerStoreAndSnapshotsEachLevelOncePerSlot(store: String) throws {
        let desk = try Desk(store)
        var settings = desk.settings
        settings.simulate = true
        settings.historyDays = 1
        let first = Simulator(db: desk.db, settings: settings, owner: "reservations/1")
        let second = Simulator(db: desk.db, settings: settings, owner: "reservations/2")
        try first.start()
        try second.start()
        let history = try #require(try desk.db.queryOne("SELECT COUNT(*) AS n FROM snapshots")?.int("n"))
        #expect((95 * 9...96 * 9).contains(history), "one day of history for 9 levels, written once: \(history)")
        try first.tick()
        let lease = try desk.db.queryOne("SELECT owner, sim_ms FROM simulator")
        #expect(lease?.string("owner") == "reservations/1")
        try second.tick()
        #expect(try desk.db.queryOne("SELECT owner FROM simulator")?.string("owner") == "reservations/1", "the lease holder simulates")
        // Fifteen simulated minutes on, a slot is due: every level gets one snapshot and one event.
        let before = try Outbox.lastSeq(desk.db)
        try desk.db.execute("UPDATE simulator SET sim_ms = sim_ms + 900000")
        try first.tick()
        try first.tick()
        let events = try Outbox.since(desk.db, after: before, limit: 100).filter { $0.type == "occupancy.snapshot" }
        #expect(events.count == 9)
        #expect(Set(events.compactMap { $0.body["level_id"]?.string }).count == 9)
        let at = try #require(events.first?.body["at"]?.int)
        #expect(at % 900_000 == 0)
        for event in events {
            #expect(try Contract.Occupancy.Snapshot(json: event.body).json.encoded() == event.body.encoded())
        }
        // Cars only ever stand on free spots: a held spot is never taken by the simulator.
        let spot = try #require(try desk.ok("reservations.hold", ["lot": "north", "level": "P1"])["reservation"]?["spot"]?.string)
        for _ in 0..<4 {
            try desk.db.execute("UPDATE simulator SET sim_ms = sim_ms + 10800000")
            try first.tick()
            #expect(try desk.db.queryOne("SELECT sim_car FROM spots WHERE id = $1", .text(spot))?.int("sim_car") == 0)
        }
    }

    /// Issue 26 point 7: a new campus's simulator publishes its last day of
    /// history, every 15 minutes of every level, so analytics' hourly
    /// heatmaps have every hour from the start; older history stays in the
    /// store for the forecast, unpublished.
    @Test(arguments: Desk.stores) func aNewCampusPublishesItsLastDayOfSnapshotsForTheDashboard(store: String) throws {
        let desk = try Desk(store)
        var settings = desk.settings
        settings.simulate = true
        settings.historyDays = 3
        // A Wednesday at noon on campus: the day before it was a weekday.
        let now: Int64 = 1_796_230_800_000
        settings.simStart = now
        let simulator = Simulator(db: desk.db, settings: settings, owner: "reservations/1")
        try simulator.start()
        let stored = try #require(try desk.db.queryOne("SELECT COUNT(*) AS n FROM snapshots")?.int("n"))
        #expect((3 * 95 * 9...3 * 96 * 9).contains(stored), "three days of history for 9 levels: \(stored)")
        let events = try Outbox.since(desk.db, after: 0, limit: 10_000).filter { $0.type == "occupancy.snapshot" }
        #expect((95 * 9...96 * 9).contains(events.count), "the last day's, each level every 15 minutes: \(events.count)")
        let snapshots = try events.map { try Contract.Occupancy.Snapshot(json: $0.body) }
        #expect(snapshots.allSatisfy { $0.at >= now - 86_400_000 && $0.at <= now && $0.at % 900_000 == 0 })
        #expect(Set(snapshots.map(\.levelID)).count == 9)
        // Every campus hour of the day, each with its four quarters on every level.
        let hours = Dictionary(grouping: snapshots) { desk.settings.clock.hour($0.at) }
        #expect(hours.count == 24, "\(hours.keys.sorted())")
        #expect(hours.values.allSatisfy { (27...36).contains($0.count) })
        // What they say is what the store keeps (the forecast's samples).
        for s in snapshots.prefix(20) {
            let row = try #require(try desk.db.queryOne("SELECT free_regular, total_regular FROM snapshots WHERE level = $1 AND at_ms = $2", .text(s.levelID), .int(s.at)))
            #expect(row.int("free_regular") == s.free.regular && row.int("total_regular") == s.total.regular)
        }
        // Busy by day, empty at night: the heatmap has real spread.
        let taken = { (h: Int64) in hours[h]!.reduce(0.0) { $0 + Double($1.total.regular - $1.free.regular) / Double(max(1, $1.total.regular)) } / Double(hours[h]!.count) }
        #expect(taken(3) < 0.2 && [9, 10, 11].map(taken).max()! > taken(3) + 0.2, "night \(taken(3)), morning \([9, 10, 11].map(taken))")
        // A second start (another worker, a restart) publishes nothing more.
        try Simulator(db: desk.db, settings: settings, owner: "reservations/2").start()
        #expect(try Outbox.since(desk.db, after: 0, limit: 10_000).filter { $0.type == "occupancy.snapshot" }.count == events.count)
    }

    @Test(arguments: Desk.stores) func findMyCar(store: String) throws {
        let desk = try Desk(store)
        #expect(desk.error("reservations.car.get")?.status == 404)
        _ = try desk.ok("reservations.car.save", ["lat": 4.6014, "lon": -74.066, "level": "P2", "note": "next to the blue pillar"])
        let car = try desk.ok("reservations.car.save", ["lat": 4.6015, "lon": -74.0661, "level": "P3", "note": "by the lift"])
        #expect(try desk.ok("reservations.car.get")["car"] == car["car"])
        #expect(try desk.ok("reservations.car.get")["car"]?["level"]?.string == "P3")
        #expect(desk.error("reservations.car.get", user: "bruno")?.status == 404, "each driver sees only their own car")
    }

    @Test func withoutAUserTheDriverRequestsAre401() throws {
        let desk = try Desk()
        for type in ["reservations.hold", "reservations.checkin", "reservations.checkout", "reservations.cancel", "reservations.mine",
                     "reservations.car.save", "reservations.car.get"] {
            #expect(desk.error(type, ["spot": "central-P1-001"], user: nil)?.status == 401, "\(type)")
        }
        #expect(desk.call("reservations.lots", user: nil).kind == .reply)
    }

    @Test(arguments: [
        ("reservations.hold", ["spto": "central-P1-001"] as JSON, "body.spto is not a field of reservations.hold"),
        ("reservations.hold", [:] as JSON, "body.spot, body.lot or body.destination is required"),
        ("reservations.hold", ["spot": 5] as JSON, "body.spot must be a string, got number"),
        ("reservations.hold", ["lot": "central", "kind": "truck"] as JSON, "body.kind must be one of regular, accessible, ev, got 'truck'"),
        ("reservations.hold", ["spot": "central-P1-001", "lot": "central"] as JSON, "body.spot and body.lot are exclusive"),
        ("reservations.hold", ["lot": "central", "destination": "ML"] as JSON, "body.lot and body.destination are exclusive"),
        ("reservations.hold", ["lot": "central", "level": "P9"] as JSON, "body.level must be one of P1, P2, P3, got 'P9'"),
        ("reservations.hold", ["lot": "central", "signal": "yes"] as JSON, "body.signal must be true or false, got string"),
        ("reservations.levels", [:] as JSON, "body.lot is required"),
        ("reservations.levels", ["lot": ""] as JSON, "body.lot must be 1 to 64 characters"),
        ("reservations.spots.find", ["lot": "central", "limit": 0] as JSON, "body.limit must be between 1 and 100"),
        ("reservations.spots.find", ["kind": "ev"] as JSON, "body.lot or body.destination is required"),
        ("reservations.forecast", ["lot": "central", "arrival": "tomorrow"] as JSON, "body.arrival must be epoch milliseconds, an ISO 8601"),
        ("reservations.forecast", ["lot": "central", "arrival": "25:00"] as JSON, "body.arrival must be epoch milliseconds, an ISO 8601"),
        ("reservations.occupancy", ["lot": "central", "from": 2000, "to": 1000] as JSON, "body.from must be before body.to"),
        ("reservations.occupancy", ["lot": "central", "from": 0, "to": 864_000_000] as JSON, "body.to must be within 7 days of body.from"),
        ("reservations.car.save", ["lon": 0] as JSON, "body.lat is required"),
        ("reservations.car.save", ["lat": 91, "lon": 0] as JSON, "body.lat must be between -90 and 90"),
        ("reservations.car.save", ["lat": 4.6, "lon": "west"] as JSON, "body.lon must be a number, got string"),
        ("reservations.car.save", ["lat": 4.6, "lon": -74, "note": .string(String(repeating: "n", count: 201))] as JSON, "body.note must be at most 200 characters"),
        // One letter and 100,000 combining marks is one grapheme cluster
        // (String.count == 1) and 200 KB: limits count Unicode scalars.
        ("reservations.car.save", ["lat": 4.6, "lon": -74, "note": .string("n" + String(repeating: "\u{0301}", count: 100_000))] as JSON,
         "body.note must be at most 200 characters"),
        ("reservations.checkin", ["reservation": .string("r" + String(repeating: "\u{0301}", count: 100_000))] as JSON,
         "body.reservation must be 1 to 64 characters"),
        ("reservations.forecast", ["lot": "central", "arrival": .string("0" + String(repeating: "\u{0301}", count: 100_000))] as JSON,
         "body.arrival must be epoch milliseconds, an ISO 8601"),
        ("reservations.mine", ["limit": "all"] as JSON, "body.limit must be an integer, got string"),
        ("reservations.checkin", ["reservation": ""] as JSON, "body.reservation must be 1 to 64 characters"),
        ("reservations.lots", ["kind": "moon"] as JSON, "body.kind must be one of campus, nearby, got 'moon'"),
    ])
    func badInputIs400NamingTheField(type: String, body: JSON, message: String) throws {
        let desk = try Desk()
        let error = try #require(desk.error(type, body))
        #expect(error.status == 400 && error.code == .badRequest)
        #expect(error.message.hasPrefix(message), "\(error.message)")
    }

    @Test(arguments: Desk.stores) func unknownPlacesAre404(store: String) throws {
        let desk = try Desk(store)
        #expect(desk.error("reservations.levels", ["lot": "mars"])?.message == "no lot 'mars' (body.lot); lots: central, north, calle19, aguas, germania")
        #expect(desk.error("reservations.hold", ["spot": "central-P9-001"])?.status == 404)
        #expect(desk.error("reservations.spots.find", ["destination": "XX"])?.status == 404)
        #expect(desk.error("reservations.checkin")?.message == "you have no reservation to check in: hold a spot first")
    }

    @Test func campusTimeReadsAndWritesBogotaTime() throws {
        let clock = CampusTime(offsetMinutes: -300)
        let monday = try #require(Moment.parse("2025-03-03T08:30:00-05:00", clock: clock, now: 0))
        #expect(monday == 1_741_008_600_000)
        #expect(Moment.parse("2025-03-03T13:30:00Z", clock: clock, now: 0) == monday)
        #expect(Moment.parse("2025-03-03 08:30", clock: clock, now: 0) == monday, "no offset: campus time")
        #expect(Moment.parse("08:30", clock: clock, now: monday + 3_600_000) == monday, "HH:MM: today on campus")
        #expect(clock.weekday(monday) == 1 && clock.hour(monday) == 8)
        #expect(clock.iso(monday) == "2025-03-03T08:30:00-05:00")
        // Just before local midnight on Sunday is still Sunday, 23 h.
        #expect(clock.weekday(monday - 8 * 3_600_000 - 31 * 60_000 - 1) == 0)
        #expect(clock.hour(monday - 8 * 3_600_000 - 31 * 60_000 - 1) == 23)
    }

    @Test func theDailyCurveIsBusyOnWeekdayMorningsAndQuietAtNight() {
        let clock = CampusTime(offsetMinutes: -300)
        let monday = Int64(1_741_008_600_000) - 30 * 60_000  // 08:00
        func taken(_ ms: Int64, floor: Int64 = 1) -> Double {
            DailyCurve.taken(lotKind: "campus", floor: floor, kind: "regular", level: "central-P1", ms: ms, clock: clock)
        }
        #expect(taken(monday + 2 * 3_600_000) > 0.85, "10:00 on a Monday")
        #expect(taken(monday - 6 * 3_600_000) < 0.12, "02:00")
        #expect(taken(monday - 86_400_000 + 2 * 3_600_000) < 0.2, "Sunday 10:00")
        #expect(taken(monday + 2 * 3_600_000, floor: 1) > taken(monday + 2 * 3_600_000, floor: 3), "P1 fills first")
    }
}
