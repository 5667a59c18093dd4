import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadAnalytics

let pgURL = ProcessInfo.processInfo.environment["QUAD_TEST_PG"]
/// Every question runs on SQLite, and on PostgreSQL too when QUAD_TEST_PG is set.
let stores: [Bool] = pgURL == nil ? [false] : [false, true]

func store(postgres: Bool) throws -> Database {
    if postgres {
        let url = try #require(pgURL)
        let schema = "a\(UInt32.random(in: 0...UInt32.max))"
        try PostgresDatabase(url: url).executeScript("CREATE SCHEMA \(schema)")
        return try PostgresDatabase(url: url + "?options=-csearch_path%3D\(schema)")
    }
    let dir = NSTemporaryDirectory() + "quad-analytics-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return try SQLiteDatabase(path: dir + "/analytics.db")
}

let clock = CampusClock(offsetMinutes: -300)

/// ms of 2025-12-`day` `h`:`m` campus time (UTC-5). 2025-12-01 is a Monday.
func at(_ day: Int64, _ h: Int64, _ m: Int64 = 0) -> Int64 {
    1_764_547_200_000 + (day - 1) * 86_400_000 + (h + 5) * 3_600_000 + m * 60_000
}

/// The planted people: none of these may appear in any output.
let alice = "alice-4f1c", bob = "bob-9d2e", carol = "carol-7a3b", dave = "dave-1c5e", erin = "erin-6b8f"
let guestPhone = "ph-guest-31ab"
let emails = ["alice.4f1c@uni.example", "bob.9d2e@uni.example", "carol.7a3b@uni.example"]
/// The planted listings (product ids): no answer may carry one either.
let listingIDs = ["lst-1a9f", "lst-2b8e", "lst-3c7d", "lst-4d6c", "lst-5e5b", "lst-6f4a", "lst-7a3f"]

/// Analytics' store with the facts of a known campus fortnight.
final class Planted {
    let db: Database
    let questions: [Question]
    let handlers: Handlers

    init(postgres: Bool) throws {
        db = try store(postgres: postgres)
        try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
        try Migrations.apply(db, Analytics.migrations, scope: "analytics")
        questions = try Question.bundled()
        handlers = Handlers(service: "analytics", instance: "analytics/test", db: db)
        Analytics.register(handlers, db: db, questions: questions)
    }

    func event(_ type: String, _ body: JSON, at ts: Int64) throws {
        try db.transaction { try Facts.apply(db, Envelope(type: type, kind: .event, ts: ts, body: body), clock: clock) }
    }

    var telemetrySeq: Int64 = 0
    func tel(_ name: String, driver user: String?, phone: String = "ph-1", session: String, at ts: Int64, offline: Bool = false,
             _ props: JSON = [:]) throws {
        telemetrySeq += 1
        let e: JSON = [
            "seq": .int(telemetrySeq), "id": .string(MessageID.make()), "phone": .string(phone), "user": user.map { .string($0) } ?? .null,
            "session": .string(session), "name": .string(name), "ts": .int(ts), "offline": .bool(offline), "props": props,
        ]
        try db.transaction { try Facts.applyTelemetry(db, [e], clock: clock) }
    }

    func answer(_ id: String, from: Int64 = 0, to: Int64 = Int64.max) throws -> [[JSON]] {
        let q = try #require(questions.first { $0.id == id }, "no question \(id)")
        return try q.answer(db, from: from, to: to).rows
    }

    // MARK: UniTrade

    func order(_ id: String, _ user: String, screen: String, mode: String, semester: JSON, items: [(String, Int64, Double, String)],
               fee: Double, total: Double, confirmed: Int64) throws {
        let body: JSON = [
            "order": .string(id), "user": .string(user), "screen": .string(screen), "mode": .string(mode), "semester": semester,
            "items": .array(items.map { ["product": .string($0.0), "quantity": .int($0.1), "price": .double($0.2), "category": .string($0.3)] }),
            "fee": .double(fee), "total": .double(total), "currency": "USD",
        ]
        try event("orders.placed", body, at: confirmed - 60_000)
        try event("orders.confirmed", body, at: confirmed)
    }

    func plantMarketplace() throws {
        for (p, c) in [("p1", "Study"), ("p2", "Tech"), ("p3", "Lab"), ("p4", "Study"), ("p5", "Tech")] {
            try event("catalog.product.changed", ["id": .string(p), "category": .string(c), "name": "x"], at: at(1, 0))
        }
        try event("accounts.user.registered", ["user": .string(alice), "name": "Alice", "email": .string(emails[0]), "semester": 3, "categories": []], at: at(1, 1))
        try event("accounts.user.registered", ["user": .string(bob), "name": "Bob", "email": .string(emails[1]), "semester": 5, "categories": []], at: at(1, 1))
        try event("accounts.user.registered", ["user": .string(carol), "name": "Carol", "email": .string(emails[2]), "semester": 7, "categories": []], at: at(1, 1))
        // Favorites: before the purchases, except bob's p4 (after) and the removed one.
        try event("favorites.added", ["user": .string(alice), "product": "p1"], at: at(1, 9))
        try event("favorites.added", ["user": .string(alice), "product": "p3"], at: at(1, 9))
        try event("favorites.added", ["user": .string(alice), "product": "p2"], at: at(1, 9))
        try event("favorites.removed", ["user": .string(alice), "product": "p2"], at: at(1, 9, 30))
        try event("favorites.added", ["user": .string(carol), "product": "p5"], at: at(1, 9))
        try event("favorites.added", ["user": .string(dave), "product": "p2"], at: at(1, 9))
        try event("favorites.added", ["user": .string(erin), "product": "p9"], at: at(1, 9))
        try event("favorites.added", ["user": .string(bob), "product": "p4"], at: at(10, 9))

        try order("o1", alice, screen: "home", mode: "buy", semester: 3, items: [("p1", 1, 10.0, "Study"), ("p2", 2, 5.0, "Tech")],
                  fee: 1.0, total: 21.0, confirmed: at(1, 10))
        // Sunday 22:00 campus time is Monday 03:00 UTC: still the first week.
        try order("o2", alice, screen: "home", mode: "rent", semester: 3, items: [("p3", 1, 30.0, "Lab")], fee: 3.0, total: 33.0, confirmed: at(7, 22))
        try order("o3", bob, screen: "favorites", mode: "buy", semester: .null, items: [("p4", 3, 2.0, "Study")], fee: 0.6, total: 6.6, confirmed: at(9, 10))
        try order("o4", carol, screen: "favorites", mode: "buy", semester: 7, items: [("p5", 1, 100.0, "Tech")], fee: 10.0, total: 110.0, confirmed: at(2, 10))
        try event("orders.cancelled", ["order": "o4", "user": .string(carol)], at: at(3, 10))
        try event("orders.placed", ["order": "o5", "user": .string(dave), "screen": "search", "mode": "buy", "semester": .null,
                                    "items": [["product": "p2", "quantity": 1, "price": 5.0, "category": "Tech"]], "fee": 0.25, "total": 5.25], at: at(9, 11))
        try event("orders.placed", ["order": "o6", "user": .string(dave), "screen": "cart", "mode": "buy", "semester": .null,
                                    "items": [["product": "p1", "quantity": 1, "price": 10.0, "category": "Study"]], "fee": 0.5, "total": 10.5], at: at(9, 12))
        try event("orders.rejected", ["order": "o6", "user": .string(dave), "reason": "not enough stock"], at: at(9, 12, 1))
        try order("o7", erin, screen: "favorites", mode: "rent", semester: .null, items: [("p1", 1, 10.0, "Study")], fee: 0.5, total: 10.5, confirmed: at(9, 10))
        try order("o8", bob, screen: "home", mode: "buy", semester: 5, items: [("p2", 1, 5.0, "Tech")], fee: 0.25, total: 5.25, confirmed: at(9, 10))
    }

    // MARK: ParkWise

    func reservation(_ id: String, _ user: String, lot: String, level: String, kind: String, held: Int64, checkin: Int64? = nil,
                     end: (String, Int64)? = nil) throws {
        func body(_ status: String, checkedIn: Int64?, ended: Int64?) -> JSON {
            ["user": .string(user), "reservation": [
                "id": .string(id), "spot": .string("\(lot)-\(level)-001"), "lot": .string(lot), "level": .string(level), "kind": .string(kind),
                "status": .string(status), "held_at": .int(held), "deadline": .int(held + 600_000),
                "checked_in_at": checkedIn.map { .int($0) } ?? .null, "ended_at": ended.map { .int($0) } ?? .null,
            ]]
        }
        try event("reservations.held", body("held", checkedIn: nil, ended: nil), at: held)
        if let checkin { try event("reservations.checkedin", body("checked_in", checkedIn: checkin, ended: nil), at: checkin) }
        if let (status, t) = end {
            try event("reservations.\(status)", body(status == "checkedout" ? "checked_out" : status, checkedIn: checkin, ended: t), at: t)
        }
    }

    func snapshot(_ lot: String, _ level: String, day: Int64, hour: Int64, free: (Int64, Int64, Int64), total: (Int64, Int64, Int64)) throws {
        let t = at(day, hour)
        try event("occupancy.snapshot", [
            "lot": .string(lot), "level": .string(level), "level_id": .string("\(lot)-\(level)"), "at": .int(t),
            "local": .string("2025-12-\(String(format: "%02d", day))T\(String(format: "%02d", hour)):00:00-05:00"),
            "free": ["regular": .int(free.0), "accessible": .int(free.1), "ev": .int(free.2)],
            "total": ["regular": .int(total.0), "accessible": .int(total.1), "ev": .int(total.2)],
        ], at: t)
    }

    func plantParking() throws {
        try reservation("h1", alice, lot: "ML", level: "P1", kind: "regular", held: at(1, 8), checkin: at(1, 8) + 45_000, end: ("checkedout", at(1, 12)))
        try reservation("h2", bob, lot: "ML", level: "P2", kind: "regular", held: at(1, 8), checkin: at(1, 8) + 150_000)
        try reservation("h3", carol, lot: "ML", level: "P2", kind: "accessible", held: at(1, 9), end: ("expired", at(1, 9, 10)))
        try reservation("h4", dave, lot: "SD", level: "P1", kind: "ev", held: at(2, 9), end: ("cancelled", at(2, 9, 2)))
        try reservation("h5", erin, lot: "SD", level: "P1", kind: "regular", held: at(2, 9))
        try reservation("h6", alice, lot: "SD", level: "P1", kind: "ev", held: at(3, 9), checkin: at(3, 9) + 700_000)
        try snapshot("ML", "P1", day: 1, hour: 8, free: (10, 1, 0), total: (40, 2, 2))
        try snapshot("ML", "P1", day: 1, hour: 9, free: (0, 0, 1), total: (40, 2, 2))
        try snapshot("ML", "P2", day: 1, hour: 8, free: (20, 2, 2), total: (50, 4, 0))
        try snapshot("ML", "P2", day: 1, hour: 9, free: (5, 0, 0), total: (50, 4, 0))
        try snapshot("ML", "P1", day: 2, hour: 8, free: (20, 2, 2), total: (40, 2, 2))
    }

    // MARK: telemetry

    func plantTelemetry() throws {
        // BQ8. Day 1: alice planned, bob searched first, the guest planned.
        try tel("forecast.opened", driver: alice, session: "s-a1", at: at(1, 8), ["lot": "ML"])
        try tel("spot.search", driver: alice, session: "s-a1", at: at(1, 8, 5), ["lot": "ML"])
        try tel("spot.search", driver: alice, session: "s-a1", at: at(1, 9), ["lot": "ML"])
        try tel("spot.search", driver: bob, session: "s-b1", at: at(1, 8), ["lot": "ML"])
        try tel("forecast.opened", driver: bob, session: "s-b1", at: at(1, 8, 10), ["lot": "ML"])
        try tel("forecast.opened", driver: nil, phone: guestPhone, session: "s-g1", at: at(1, 7), ["lot": "SD"])
        try tel("spot.search", driver: nil, phone: guestPhone, session: "s-g1", at: at(1, 7, 30), ["lot": "SD"])
        // Day 2: carol's forecast was the day before; alice did not look;
        // dave looked at 23:30 the evening before (04:30 UTC the same UTC day).
        try tel("forecast.opened", driver: carol, session: "s-c1", at: at(1, 20), ["lot": "ML"])
        try tel("spot.search", driver: carol, session: "s-c2", at: at(2, 8), ["lot": "ML"])
        try tel("spot.search", driver: alice, session: "s-a2", at: at(2, 10), ["lot": "ML"])
        try tel("forecast.opened", driver: dave, session: "s-d1", at: at(1, 23, 30), ["lot": "ML"])
        try tel("spot.search", driver: dave, session: "s-d2", at: at(2, 0, 10), ["lot": "ML"])
        // erin changed the arrival time, then opened the live map: planned.
        try tel("arrival.changed", driver: erin, session: "s-e2", at: at(2, 7), ["lot": "ML", "hour": 9])
        try tel("view.opened", driver: erin, session: "s-e2", at: at(2, 7, 30), ["view": "levels"])
        // Day 3: alice's live map came before her forecast.
        try tel("view.opened", driver: alice, session: "s-a3", at: at(3, 8), ["view": "levels"])
        try tel("forecast.opened", driver: alice, session: "s-a3", at: at(3, 8, 10), ["lot": "ML"])

        // BQ9: Navigate, then the driver's answer.
        try tel("nearby.chosen", driver: alice, session: "s-a3", at: at(3, 10), ["lot": "CityU"])
        try tel("nearby.confirmed", driver: alice, session: "s-a3", at: at(3, 10, 20), ["lot": "CityU", "parked": true])
        try tel("nearby.chosen", driver: bob, session: "s-b3", at: at(3, 10), ["lot": "CityU"])
        try tel("nearby.confirmed", driver: bob, session: "s-b3", at: at(3, 10, 20), ["lot": "CityU", "parked": false])
        try tel("nearby.confirmed", driver: carol, session: "s-c3", at: at(3, 9), ["lot": "Plaza", "parked": true])
        try tel("nearby.chosen", driver: carol, session: "s-c3", at: at(3, 10), ["lot": "Plaza"])
        try tel("nearby.chosen", driver: carol, session: "s-c3", at: at(3, 10, 5), ["lot": "Plaza"])
        try tel("nearby.chosen", driver: dave, session: "s-d3", at: at(3, 10), ["lot": "Plaza"])
        try tel("nearby.confirmed", driver: dave, session: "s-d4", at: at(4, 10), ["lot": "Plaza", "parked": true])
        try tel("nearby.chosen", driver: erin, session: "s-e3", at: at(3, 11), ["lot": "Plaza"])
        try tel("nearby.confirmed", driver: erin, session: "s-e3", at: at(3, 11, 30), offline: true, ["lot": "Plaza", "parked": true])

        // BQ5 and BQ1: Find my car, with and without signal, signed in and as a guest.
        try tel("view.opened", driver: alice, session: "s-a3", at: at(3, 12), offline: true, ["view": "car"])
        try tel("view.opened", driver: bob, session: "s-b3", at: at(3, 12), ["view": "car"])
        try tel("view.opened", driver: nil, phone: guestPhone, session: "s-g6", at: at(6, 10), offline: true, ["view": "car"])

        // BQ11 and carts, in sessions of their own.
        try tel("session.started", driver: alice, session: "s1", at: at(5, 9))
        try tel("view.opened", driver: alice, session: "s1", at: at(5, 9, 1), ["view": "cart"])
        try tel("mark.set", driver: alice, session: "s1", at: at(5, 9, 1), ["view": "reservation", "flow": "reservation"])
        try tel("mark.cleared", driver: alice, session: "s1", at: at(5, 9, 2), ["view": "reservation", "flow": "reservation"])
        try tel("purchase.made", driver: alice, session: "s1", at: at(5, 9, 2), ["order": "o1", "screen": "cart", "mode": "buy", "category": "Study"])
        try tel("session.ended", driver: alice, session: "s1", at: at(5, 9, 3), ["flow": "reservation"])
        try tel("session.started", driver: bob, session: "s2", at: at(5, 9))
        try tel("view.opened", driver: bob, session: "s2", at: at(5, 9, 1), ["view": "cart"])
        try tel("session.ended", driver: bob, session: "s2", at: at(5, 9, 3), ["flow": "browse"])
        try tel("session.started", driver: carol, session: "s3", at: at(5, 9))
        try tel("purchase.made", driver: carol, session: "s3", at: at(5, 9, 1), ["order": "o9", "screen": "home", "mode": "buy", "category": "Lab"])
        try tel("view.opened", driver: carol, session: "s3", at: at(5, 9, 2), ["view": "cart"])
        try tel("view.opened", driver: carol, session: "s3", at: at(5, 9, 3), ["view": "cart"])
        try tel("mark.set", driver: carol, session: "s3", at: at(5, 9, 4), ["view": "reservation", "flow": "reservation"])
        try tel("app.crash", driver: carol, session: "s3", at: at(5, 9, 9), ["view": "reservation", "flow": "reservation"])
        try tel("session.started", driver: dave, session: "s4", at: at(5, 9))
        try tel("app.crash", driver: dave, session: "s4", at: at(5, 9, 9), ["view": "home", "flow": "marketplace"])
        try tel("session.started", driver: erin, session: "s5", at: at(6, 9))
        try tel("view.opened", driver: erin, session: "s5", at: at(6, 9, 1), ["view": "cart"])
        try tel("mark.set", driver: erin, session: "s5", at: at(6, 9, 1), ["view": "reservation", "flow": "reservation"])
        try tel("purchase.made", driver: erin, session: "s5", at: at(6, 9, 2), ["order": "o7", "screen": "cart", "mode": "rent", "category": "Study"])
        try tel("session.ended", driver: erin, session: "s5", at: at(6, 9, 3), ["flow": "reservation"])
        try tel("session.started", driver: nil, phone: guestPhone, session: "s6", at: at(6, 9))
        try tel("view.opened", driver: nil, phone: guestPhone, session: "s6", at: at(6, 9, 1), ["view": "cart"])

        // Queued actions.
        try tel("action.synced", driver: alice, session: "s7", at: at(7, 9), ["action": "reservations.checkin", "waited_ms": 120_000, "offline": true])
        try tel("action.synced", driver: bob, session: "s7", at: at(7, 9), ["action": "reservations.checkin", "waited_ms": 60_000, "offline": true])
        try tel("action.synced", driver: carol, session: "s7", at: at(7, 9), ["action": "reservations.checkin", "waited_ms": 300, "offline": false])
        try tel("action.synced", driver: dave, session: "s7", at: at(7, 9), ["action": "orders.place", "waited_ms": 200, "offline": false])
        try tel("action.synced", driver: erin, session: "s7", at: at(7, 9), ["action": "orders.place", "waited_ms": 3500, "offline": true])
    }

    // MARK: students' listings

    /// A fact as a service publishes it, to deliver in any order.
    typealias Fact = (type: String, body: JSON, ts: Int64)

    /// Seven listings of a known fortnight, as catalog and orders publish
    /// them, in the order they reach analytics: duplicates included, and
    /// one listing's first sale ahead of catalog's word of the listing.
    static func listingFacts() -> [Fact] {
        var facts: [Fact] = []
        func created(_ id: String, _ category: String, mode: String = "sale", at ts: Int64) {
            facts.append(("catalog.listing.created", [
                "listing": .string(id), "category": .string(category), "collection": "Used", "mode": .string(mode), "price": 20.0,
                "currency": "USD", "quantity": 2, "created_at": .int(ts),
            ], ts + 40))
        }
        func closed(_ id: String, _ category: String, reason: String = "withdrawn", at ts: Int64) {
            facts.append(("catalog.listing.closed", ["listing": .string(id), "category": .string(category), "reason": .string(reason), "closed_at": .int(ts)], ts + 40))
        }
        func sale(_ order: String, _ user: String, _ product: String, _ category: String, mode: String = "buy", confirmed: Int64) -> JSON {
            let body: JSON = [
                "order": .string(order), "user": .string(user), "screen": "search", "mode": .string(mode), "semester": .null,
                "items": [["product": .string(product), "quantity": 1, "price": 20.0, "category": .string(category)],
                          ["product": "p1", "quantity": 1, "price": 10.0, "category": "Study"]],
                "fee": 1.5, "total": 31.5, "currency": "USD",
            ]
            facts.append(("orders.placed", body, confirmed - 60_000))
            facts.append(("orders.confirmed", body, confirmed))
            return body
        }
        // Study. L1 sells 48 h after listing; its placed and confirmed events come twice.
        created(listingIDs[0], "Study", at: at(1, 10))
        let l1 = sale("o-l1", alice, listingIDs[0], "Study", confirmed: at(3, 10))
        facts.append(("orders.placed", l1, at(3, 10) - 60_000))
        facts.append(("orders.confirmed", l1, at(3, 10)))
        // L2 sells after 9 days (216 h), and is withdrawn after that sale.
        created(listingIDs[1], "Study", at: at(1, 10))
        // L3 never sells and is withdrawn on day 4 (that event twice).
        created(listingIDs[2], "Study", at: at(1, 12))
        closed(listingIDs[2], "Study", at: at(4, 12))
        closed(listingIDs[2], "Study", at: at(4, 12))
        // L4 sells 36 h after listing, before analytics hears of the
        // listing, then sells again; its created event comes twice.
        _ = sale("o-l4a", bob, listingIDs[3], "Study", confirmed: at(3, 21))
        created(listingIDs[3], "Study", at: at(2, 9))
        created(listingIDs[3], "Study", at: at(2, 9))
        _ = sale("o-l4b", dave, listingIDs[3], "Study", confirmed: at(5, 9))
        // Tech. L5's first sale (day 3) is cancelled, and its confirmed
        // event comes again after the cancel; the next one, 120 h after listing, counts.
        created(listingIDs[4], "Tech", mode: "both", at: at(1, 8))
        let l5 = sale("o-l5a", carol, listingIDs[4], "Tech", confirmed: at(3, 8))
        facts.append(("orders.cancelled", ["order": "o-l5a", "user": .string(carol)], at(3, 9)))
        facts.append(("orders.confirmed", l5, at(3, 8)))
        _ = sale("o-l5b", erin, listingIDs[4], "Tech", mode: "rent", confirmed: at(6, 8))
        // L6: one order, rejected; never sold.
        created(listingIDs[5], "Tech", at: at(2, 8))
        let l6: JSON = ["order": "o-l6", "user": .string(dave), "screen": "home", "mode": "buy", "semester": .null,
                        "items": [["product": .string(listingIDs[5]), "quantity": 1, "price": 20.0, "category": "Tech"]], "fee": 1.0, "total": 21.0]
        facts.append(("orders.placed", l6, at(3, 8)))
        facts.append(("orders.rejected", ["order": "o-l6", "user": .string(dave), "reason": "not enough stock"], at(3, 8) + 1000))
        // L7 is rented exactly 7 days (168 h) after listing: within.
        created(listingIDs[6], "Tech", mode: "rent", at: at(2, 10))
        _ = sale("o-l7", alice, listingIDs[6], "Tech", mode: "rent", confirmed: at(9, 10))
        // L2's sale and close come last.
        _ = sale("o-l2", bob, listingIDs[1], "Study", confirmed: at(10, 10))
        closed(listingIDs[1], "Study", at: at(12, 10))
        return facts
    }

    func plantListings(_ facts: [Fact] = Planted.listingFacts()) throws {
        for f in facts { try event(f.type, f.body, at: f.ts) }
    }

    func plantAll() throws {
        try plantMarketplace()
        try plantListings()
        try plantParking()
        try plantTelemetry()
    }
}

@Suite("Business questions")
struct QuestionTests {
    @Test func theQuestionsShipWithTheirMetadata() throws {
        let qs = try Question.bundled()
        #expect(qs.map(\.id) == [
            "drivers_signed_in", "occupancy_by_level_hour", "special_spots_demand", "hold_to_checkin", "car_found_offline", "recommended_level",
            "holds_outcome", "forecast_before_search", "nearby_parked", "lot_full_by_hour", "sessions_in_reservation_flow", "special_spots_free",
            "purchase_screen", "purchases_by_semester", "buy_vs_rent", "favorites_to_purchases", "carts_abandoned", "fee_per_week",
            "listings_sold_within_week", "offline_actions",
        ])
        for q in qs {
            #expect(!q.title.isEmpty && !q.description.isEmpty && ["UniTrade", "ParkWise", "Campus"].contains(q.app), "\(q.id)")
            #expect(!q.sql.contains("--"), "\(q.id): comments are stripped")
        }
        // ParkWise's twelve, numbered as the seed numbers them, each with its type and owner.
        let parkwise = qs.filter { $0.app == "ParkWise" }
        #expect(parkwise.map(\.number) == (1...12).map { "BQ\($0)" })
        #expect(parkwise.allSatisfy { ($0.type.map { (1...4).contains($0) } ?? false) && !($0.owner ?? "").isEmpty })
        // The Type 2 ones go back to the driver: BQ2, BQ6, BQ10, BQ12.
        #expect(parkwise.filter { $0.type == 2 }.map(\.number) == ["BQ2", "BQ6", "BQ10", "BQ12"])
        #expect(parkwise.first { $0.number == "BQ11" }?.type == 1)
        // Issue 26 point 8: UniTrade's two, numbered, typed and owned as ParkWise's are; the rest have no number.
        let unitrade = qs.filter { $0.number?.hasPrefix("UQ") == true }
        #expect(unitrade.map(\.id) == ["purchase_screen", "purchases_by_semester"])
        #expect(unitrade.map(\.number) == ["UQ1", "UQ2"] && unitrade.map(\.type) == [3, 4] && unitrade.allSatisfy { $0.app == "UniTrade" })
        #expect(unitrade.allSatisfy { ($0.owner ?? "").hasPrefix("UniTrade team (Swift and Flutter: ") })
        #expect(qs.filter { $0.number != nil }.map(\.id) == parkwise.map(\.id) + unitrade.map(\.id), "the others have no number")
    }

    @Test func aBadNumberOrTypeIsRefusedWithTheFileNamed() throws {
        let head = "-- title: T\n-- app: ParkWise\n-- chart: bar a b\nSELECT 1 AS a, 2 AS b WHERE $1 < $2\n"
        #expect { try Question(id: "x", text: "-- number: Q7\n" + head) } throws: { ($0 as? QuadError)?.message.contains("questions/x.sql: number") == true }
        #expect { try Question(id: "x", text: "-- type: 7\n" + head) } throws: { ($0 as? QuadError)?.message.contains("questions/x.sql: type") == true }
        #expect(try Question(id: "x", text: "-- number: BQ7\n-- type: 3\n-- owner: O\n" + head).number == "BQ7")
        // Each app numbers with its own prefix; an app that numbers none is refused a number.
        #expect { try Question(id: "x", text: "-- number: UQ7\n" + head) } throws: { ($0 as? QuadError)?.message.contains("must be BQ followed by 1 to 99") == true }
        let unitrade = head.replacingOccurrences(of: "ParkWise", with: "UniTrade")
        #expect(try Question(id: "x", text: "-- number: UQ7\n" + unitrade).number == "UQ7")
        #expect { try Question(id: "x", text: "-- number: BQ7\n" + unitrade) } throws: { ($0 as? QuadError)?.message.contains("must be UQ followed by 1 to 99") == true }
        let campus = head.replacingOccurrences(of: "ParkWise", with: "Campus")
        #expect { try Question(id: "x", text: "-- number: BQ7\n" + campus) } throws: { ($0 as? QuadError)?.message.contains("not Campus") == true }
    }

    @Test(arguments: stores)
    func whereStudentsBuy(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantMarketplace()
        #expect(try p.answer("purchase_screen") == [["home", 3, 60], ["favorites", 2, 40]])
    }

    @Test(arguments: stores)
    func purchasesBySemester(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantMarketplace()
        // bob's o3 carries no semester: accounts says 5. erin is unknown.
        #expect(try p.answer("purchases_by_semester") == [[3, 2, 1, 4], [5, 2, 1, 4], [nil, 1, 1, 1]])
    }

    @Test(arguments: stores)
    func buyAgainstRentByCategory(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantMarketplace()
        #expect(try p.answer("buy_vs_rent") == [["Lab", 0, 1, 100], ["Study", 4, 1, 20], ["Tech", 3, 0, 0]])
    }

    @Test(arguments: stores)
    func favoritesThatTurnIntoPurchases(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantMarketplace()
        #expect(try p.answer("favorites_to_purchases") == [
            ["Lab", 1, 1, 100], ["Study", 2, 1, 50], ["Tech", 3, 1, 33.3], ["Unknown", 1, 0, 0],
        ])
        // Only favorites saved in the period count.
        #expect(try p.answer("favorites_to_purchases", from: at(10, 0), to: at(11, 0)) == [["Study", 1, 0, 0]])
    }

    @Test(arguments: stores)
    func feeCollectedPerWeek(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantMarketplace()
        #expect(try p.answer("fee_per_week") == [["2025-12-01", 2, 4, 54], ["2025-12-08", 3, 1.35, 22.35]])
    }

    /// A returned rental is still a sale: it stays in every question that
    /// counts confirmed orders, its late charge joins its total once (a
    /// duplicate event adds nothing), and the fact says returned, as the
    /// orders store does (the chaos checker compares the two).
    @Test(arguments: stores)
    func aReturnedRentalStaysASaleWithItsLateCharge(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantMarketplace()
        let returned: JSON = ["order": "o2", "user": .string(alice), "items": [["product": "p3", "quantity": 1, "price": 30.0, "category": "Lab"]],
                              "currency": "USD", "return_date": "2025-12-10", "returned_at": .int(at(12, 9)), "late_days": 2, "late_charge": 2.0]
        try p.event("orders.returned", returned, at: at(12, 9))
        try p.event("orders.returned", returned, at: at(12, 9))
        // A late duplicate of its confirmation does not take it back.
        try p.event("orders.confirmed", ["order": "o2", "user": .string(alice), "screen": "home", "mode": "rent", "semester": 3,
                                         "items": [["product": "p3", "quantity": 1, "price": 30.0, "category": "Lab"]], "fee": 3.0, "total": 33.0], at: at(7, 22))
        #expect(try p.db.queryOne("SELECT status FROM orders WHERE id = 'o2'")?.string("status") == "returned")
        #expect(try p.answer("buy_vs_rent") == [["Lab", 0, 1, 100], ["Study", 4, 1, 20], ["Tech", 3, 0, 0]])
        #expect(try p.answer("purchase_screen") == [["home", 3, 60], ["favorites", 2, 40]])
        // o2's week: 54 of sales before, 56 with its 2.00 late charge.
        #expect(try p.answer("fee_per_week") == [["2025-12-01", 2, 4, 56], ["2025-12-08", 3, 1.35, 22.35]])
    }

    @Test(arguments: stores)
    func cartsAbandoned(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        // Day 5: s1 bought after the cart, s2 left it, s3 bought only before
        // opening it. Day 6: s5 bought; s6 is still open, not counted.
        #expect(try p.answer("carts_abandoned") == [["2025-12-05", 3, 2, 66.7], ["2025-12-06", 1, 0, 0]])
    }

    @Test(arguments: stores)
    func listingsThatSellWithinSevenDays(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantListings()
        // Study: L1 (48 h) and L4 (36 h) sold in the week, L2 after 216 h,
        // L3 never and withdrawn; median of 36, 48, 216. Tech: L5 (120 h,
        // its first sale cancelled) and L7 (168 h exactly), L6 never;
        // median of 120 and 168.
        #expect(try p.answer("listings_sold_within_week") == [["Study", 4, 2, 50, 1, 48], ["Tech", 3, 2, 66.7, 0, 144]])
        // Listings created on day 2 only: L4; L6 and L7.
        #expect(try p.answer("listings_sold_within_week", from: at(2, 0), to: at(3, 0)) == [["Study", 1, 1, 100, 0, 36], ["Tech", 2, 1, 50, 0, 168]])
        #expect(try p.answer("listings_sold_within_week", from: at(20, 0), to: at(21, 0)) == [])
        let summary = try p.handlers.call("analytics.summary", role: "admin")
        #expect(summary["facts"]?["listings"] == 7)
        let answer = try p.handlers.call("analytics.question", ["id": "listings_sold_within_week"], role: "admin")
        #expect(answer["columns"] == ["category", "listed", "sold_in_week", "sold_percent", "closed_unsold", "median_hours"])
        #expect(answer["app"] == "UniTrade")
        // Its dashboard card: a bar per category and figure, the table under it.
        let html = Dashboard.html(summary)
        let card = try #require(html.components(separatedBy: "<section class=\"card\" id=\"q-listings_sold_within_week\"").dropFirst().first?
            .components(separatedBy: "</section>").first)
        #expect(card.contains("<h2>Listings that sell within 7 days, by category</h2>") && card.contains("UniTrade · listings_sold_within_week · 2 rows"))
        #expect(card.contains("<title>Study: listed 4</title>") && card.contains("<title>Tech: sold in week 2</title>"))
        #expect(card.contains("<tr><td>Tech</td><td>3</td><td>2</td><td>66.7</td><td>0</td><td>144</td></tr>"))
        // Aggregates only: no listing, order or person in the answer or the page.
        for secret in listingIDs + ["o-l1", "o-l4a", "o-l5a", alice, bob, carol, dave, erin] {
            #expect(!answer.text.contains(secret) && !summary.text.contains(secret) && !html.contains(secret), "an output carries \(secret)")
        }
    }

    /// The same facts in another order (every event last to first, so each
    /// sale and cancel before its order was placed and each close before
    /// its listing), or each delivered twice, give the same answer.
    @Test(arguments: stores)
    func listingFactsInAnyOrderAndTwiceGiveTheSameAnswer(postgres: Bool) throws {
        let facts = Planted.listingFacts()
        let expected: [[JSON]] = [["Study", 4, 2, 50, 1, 48], ["Tech", 3, 2, 66.7, 0, 144]]
        let reversed = try Planted(postgres: postgres)
        try reversed.plantListings(facts.reversed())
        #expect(try reversed.answer("listings_sold_within_week") == expected)
        let twice = try Planted(postgres: postgres)
        try twice.plantListings(facts + facts)
        #expect(try twice.answer("listings_sold_within_week") == expected)
        // Catalog's events all after the orders', as when the catalog feed lags.
        let lagging = try Planted(postgres: postgres)
        try lagging.plantListings(facts.filter { !$0.type.hasPrefix("catalog.") } + facts.filter { $0.type.hasPrefix("catalog.") })
        #expect(try lagging.answer("listings_sold_within_week") == expected)
        for p in [reversed, twice, lagging] {
            #expect(try p.db.queryOne("SELECT COUNT(*) AS n FROM listings WHERE created_ms IS NOT NULL")?.int("n") == 7)
            #expect(try p.db.queryOne("SELECT reason FROM listings WHERE id = $1", [.text(listingIDs[2])])?.string("reason") == "withdrawn")
        }
    }

    /// Analytics follows catalog's listing events, not its frequent stock ones.
    @Test func theFeedTakesCatalogsListingEventsOnly() {
        #expect(Facts.sources.contains("catalog"))
        #expect(Facts.events.isSuperset(of: ["catalog.listing.created", "catalog.listing.closed", "catalog.product.changed"]))
        #expect(!Facts.events.contains("catalog.stock.changed"))
    }

    @Test(arguments: stores)
    func holdsExpiredAgainstFulfilled(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        #expect(try p.answer("holds_outcome") == [["ML", 3, 2, 1, 0, 0, 33.3], ["SD", 3, 1, 0, 1, 1, 0]])
    }

    @Test(arguments: stores)
    func timeFromHoldToCheckIn(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        #expect(try p.answer("hold_to_checkin") == [["under 1 min", 1, 45], ["1-3 min", 1, 150], ["10 min or more", 1, 700]])
        #expect(try p.answer("hold_to_checkin", from: at(2, 0), to: at(4, 0)) == [["10 min or more", 1, 700]])
    }

    @Test(arguments: stores)
    func occupancyByLevelAndHour(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        #expect(try p.answer("occupancy_by_level_hour") == [
            ["ML P1", 8, 60.2, 2], ["ML P1", 9, 97.7, 1], ["ML P2", 8, 55.6, 1], ["ML P2", 9, 90.7, 1],
        ])
    }

    @Test(arguments: stores)
    func demandForAccessibleAndEVAgainstSupply(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        #expect(try p.answer("special_spots_demand") == [["regular", 90, 3, 0.03, 20], ["accessible", 6, 1, 0.17, 40], ["ev", 2, 2, 1, 33.3]])
        // Nothing in the period: supply 0, no division by zero.
        #expect(try p.answer("special_spots_demand", from: 0, to: 1000) == [["regular", 0, 0, nil, nil], ["accessible", 0, 0, nil, nil], ["ev", 0, 0, nil, nil]])
    }

    @Test(arguments: stores)
    func forecastBeforeTheFirstSpotSearch(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        // Day 2: erin planned by changing the arrival time before her live map.
        #expect(try p.answer("forecast_before_search") == [["2025-12-01", 3, 2, 0, 66.7], ["2025-12-02", 4, 1, 1, 25], ["2025-12-03", 1, 0, 0, 0]])
    }

    @Test(arguments: stores)
    func driversSentToNearbyLotsWhoParkedThere(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        // CityU: alice said yes, bob no. Plaza: carol's answer came before
        // her Navigate and she did not answer after it, dave answered the next day.
        #expect(try p.answer("nearby_parked") == [["CityU", 2, 2, 1, 50], ["Plaza", 3, 1, 1, 33.3]])
    }

    @Test(arguments: stores)
    func sessionsEndedInsideTheReservationFlow(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        // Day 5: alice (closed normally) and carol (crashed with the mark set)
        // opened the Reserve screen; dave crashed elsewhere. Day 6: erin's
        // session ended with the mark set but normally: not a crash.
        #expect(try p.answer("sessions_in_reservation_flow") == [["2025-12-05", 4, 2, 1, 50, 2], ["2025-12-06", 2, 1, 0, 0, 0]])
    }

    @Test(arguments: stores)
    func driversSignedInAndGuests(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        // Parking views only (the carts do not count): erin's live map on
        // day 2, alice's and bob's on day 3, the guest's Find my car on day 6.
        #expect(try p.answer("drivers_signed_in") == [["2025-12-02", 1, 1, 0, 0], ["2025-12-03", 2, 2, 0, 0], ["2025-12-06", 1, 0, 1, 100]])
    }

    @Test(arguments: stores)
    func findMyCarWithoutSignal(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        #expect(try p.answer("car_found_offline") == [["2025-12-03", 2, 1, 50, 2], ["2025-12-06", 1, 1, 100, 1]])
    }

    @Test(arguments: stores)
    func theLevelToRecommendByLotAndHour(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        // At 8: P1's mean is (11 + 24) / 2, P2 has 24 free; at 9: 1 against 5.
        #expect(try p.answer("recommended_level") == [["ML 08:00", "ML", 8, "P2", 24], ["ML 09:00", "ML", 9, "P2", 5]])
    }

    @Test(arguments: stores)
    func howLikelyEachLotIsFullByHour(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        // ML at 9 on day 1: 6 of 98 spots free, under 10 %: full.
        #expect(try p.answer("lot_full_by_hour") == [["ML", 8, 2, 0, 45.1], ["ML", 9, 1, 100, 6.1]])
    }

    @Test(arguments: stores)
    func whereAccessibleAndEVSpotsAreFree(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantParking()
        // P2 has no EV spot: its EV share is not defined.
        #expect(try p.answer("special_spots_free") == [["ML P1", 3, 1, 1, 66.7, 66.7], ["ML P2", 2, 1, 1, 50, nil]])
    }

    /// The Type 2 answers go back to any signed-in driver: aggregates only,
    /// the same as their cards; nobody signed in is refused, and so is a bad period.
    @Test(arguments: stores)
    func driversGetTheTypeTwoAnswersAndNothingAboutAnyone(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantAll()
        let reply = try p.handlers.call("analytics.driver", ["from": 0], user: alice, role: "student")
        let answers = reply["answers"]?.array ?? []
        #expect(answers.map { $0["number"]?.string } == ["BQ2", "BQ6", "BQ10", "BQ12"])
        #expect(answers.map { $0["id"]?.string } == ["occupancy_by_level_hour", "recommended_level", "lot_full_by_hour", "special_spots_free"])
        #expect(answers.allSatisfy { $0["type"] == 2 })
        #expect(answers[1]["rows"] == [["ML 08:00", "ML", 8, "P2", 24], ["ML 09:00", "ML", 9, "P2", 5]])
        #expect(reply["from"] == 0)
        for secret in [alice, bob, carol, dave, erin, guestPhone, "h1", "h3"] + emails {
            #expect(!reply.text.contains(secret), "the driver's answers carry \(secret)")
        }
        // By default the last 30 days: nothing planted there.
        let recent = try p.handlers.call("analytics.driver", user: bob, role: "student")
        let now = Int64(Clock.nowMillis())
        #expect(abs((recent["from"]?.int ?? 0) - (now - 30 * 86_400_000)) < 60_000)
        #expect((recent["answers"]?.array ?? []).allSatisfy { $0["rows"] == [] })
        // Nobody signed in: 401. A bad period or field: 400 with the reason.
        #expect { try p.handlers.call("analytics.driver") } throws: { ($0 as? QuadError)?.status == 401 }
        #expect { try p.handlers.call("analytics.driver", ["from": 10, "to": 5], user: alice) } throws: {
            ($0 as? QuadError)?.status == 400 && ($0 as? QuadError)?.message.contains("body.from must be before body.to") == true
        }
        #expect { try p.handlers.call("analytics.driver", ["from": "yesterday"], user: alice) } throws: { ($0 as? QuadError)?.status == 400 }
        // Nor can a driver ask about another one.
        #expect { try p.handlers.call("analytics.driver", ["user": .string(bob)], user: alice) } throws: {
            ($0 as? QuadError)?.status == 403 && ($0 as? QuadError)?.message.contains("signed-in user only") == true
        }
    }

    @Test(arguments: stores)
    func actionsMadeOfflineAndTheirWait(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantTelemetry()
        #expect(try p.answer("offline_actions") == [["orders.place", 2, 1, 50, 3.5, 3.5], ["reservations.checkin", 3, 2, 66.7, 90, 120]])
    }

    @Test(arguments: stores)
    func everyQuestionAnswersOnAnEmptyStore(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        let summary = try p.handlers.call("analytics.summary", role: "admin")
        let answers = summary["questions"]?.array ?? []
        #expect(answers.count == p.questions.count)
        #expect(answers.filter { $0["id"]?.string != "special_spots_demand" }.allSatisfy { $0["rows"] == [] })
        // Columns are named even without rows.
        #expect(answers.first?["columns"] == ["day", "drivers", "signed_in", "guests", "guest_percent"])
    }
}

extension Handlers {
    func call(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, id: String = MessageID.make()) throws -> JSON {
        var e = Envelope.request(type, body: body, id: id)
        e.user = user
        e.role = role
        let reply = handle(e)
        if let error = reply.quadError { throw error }
        return reply.body
    }
}
