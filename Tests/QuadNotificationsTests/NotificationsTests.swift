import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadNotifications

/// The notifications service's handlers and its events, on a real store:
/// a SQLite file always, the run's PostgreSQL too when it has one.
@Suite("Notifications on SQLite and PostgreSQL")
struct NotificationsTests {
    /// SQLite always; PostgreSQL too when the run has one (QUAD_TEST_PG, as deploy/test sets).
    static let stores: [Bool] = [false] + (TestStore.postgresURL != nil ? [true] : [])
    static let now: Int64 = 1_764_633_600_000  // 2025-12-02T00:00:00Z

    func service(postgres: Bool) throws -> (Handlers, Database) {
        let db = try TestStore.open("notifications", migrations: Notifications.migrations, postgres: postgres)
        let h = Handlers(service: "notifications", instance: "notifications/test", db: db)
        Notifications.register(h, db: db)
        return (h, db)
    }

    func apply(_ db: Database, _ type: String, _ body: JSON, settings: Notifications.Settings = .init()) throws {
        try db.transaction { try Notifications.apply(db, Envelope(type: type, kind: .event, ts: Self.now, body: body), settings: settings) }
    }

    func sweep(_ db: Database, at now: Int64, settings: Notifications.Settings = .init()) throws -> Int {
        try db.transaction { try Notifications.sweep(db, now: now, settings: settings) }
    }

    /// Every notification of `user`, oldest first, as notifications.since pages them.
    func inbox(_ h: Handlers, _ user: String) throws -> [JSON] {
        try h.call("notifications.since", ["limit": 200], user: user)["items"]?.array ?? []
    }

    /// The bodies of the `notifications.news` events in the outbox, in order.
    func news(_ db: Database) throws -> [JSON] {
        try db.query("SELECT body, envelope FROM outbox WHERE type = 'notifications.news' ORDER BY seq").map { r in
            r.string("body").isEmpty ? (try JSON.parse(r.string("envelope")))["body"] ?? .null : try JSON.parse(r.string("body"))
        }
    }

    static func request(_ type: String, _ body: JSON, user: String?) -> Envelope {
        var e = Envelope.request(type, body: body)
        e.user = user
        return e
    }

    static func order(_ id: String, user: String, mode: String = "buy", returnDate: String? = nil) -> JSON {
        var b: [String: JSON] = [
            "order": .string(id), "user": .string(user), "mode": .string(mode), "screen": "cart", "source": "cart", "semester": 3,
            "currency": "USD", "subtotal": 20, "fee": 1, "total": 21,
            "items": [["product": "p-0001", "quantity": 2, "price": 10, "category": "Tech"]],
        ]
        if let returnDate { b["return_date"] = .string(returnDate) }
        return .object(b)
    }

    static func reservation(_ id: String, user: String, status: String, deadline: Int64) -> JSON {
        [
            "user": .string(user),
            "reservation": [
                "id": .string(id), "spot": "central-P1-007", "lot": "central", "level": "P1", "signal": "good", "kind": "regular",
                "status": .string(status), "held_at": .int(deadline - 600_000), "deadline": .int(deadline),
                "deadline_local": "2025-12-01T19:10:00-05:00", "seconds_left": 0, "checked_in_at": .null, "ended_at": .null, "stay_seconds": .null,
            ],
        ]
    }

    @Test(arguments: stores)
    func eachKindIsMadeOnceFromItsEventsAndWrittenWithItsNewsEvent(postgres: Bool) throws {
        let (h, db) = try service(postgres: postgres)
        // Orders: confirmed, and rejected with the catalog's reason; each event twice (a second delivery, a replayed outbox).
        for _ in 0..<2 {
            try apply(db, "orders.confirmed", Self.order("o-1", user: "ana"))
            try apply(db, "orders.rejected", ["order": "o-2", "user": "ana", "reason": "not enough stock of p-0003: 0 left", "code": "conflict"])
            try apply(db, "catalog.listing.sold", ["listing": "l-9", "order": "o-5", "seller": "bob", "name": "Graphing calculator", "quantity": 1, "mode": "buy",
                                                   "sold_at": .int(Self.now)])
        }
        // A hold that expires: told once, with no warning after it.
        let deadline = Self.now + 600_000
        try apply(db, "reservations.held", Self.reservation("r-1", user: "ana", status: "held", deadline: deadline))
        try apply(db, "reservations.expired", Self.reservation("r-1", user: "ana", status: "expired", deadline: deadline))
        try apply(db, "reservations.expired", Self.reservation("r-1", user: "ana", status: "expired", deadline: deadline))
        #expect(try sweep(db, at: deadline - 60_000) == 0)
        // A rental due back on 2025-12-04: due tomorrow on the 3rd, overdue on the 5th, each told once.
        try apply(db, "orders.confirmed", Self.order("o-3", user: "ana", mode: "rent", returnDate: "2025-12-04"))
        #expect(try sweep(db, at: Self.now + 3_600_000) == 0)
        #expect(try sweep(db, at: Self.now + Days.msPerDay + 60_000) == 1)
        #expect(try sweep(db, at: Self.now + Days.msPerDay + 120_000) == 0)
        #expect(try sweep(db, at: Self.now + 2 * Days.msPerDay + 60_000) == 0)
        #expect(try sweep(db, at: Self.now + 3 * Days.msPerDay + 60_000) == 1)
        #expect(try sweep(db, at: Self.now + 4 * Days.msPerDay) == 0)
        // A rental returned in time is never overdue.
        try apply(db, "orders.confirmed", Self.order("o-4", user: "ana", mode: "rent", returnDate: "2025-12-10"))
        try apply(db, "orders.returned", ["order": "o-4", "user": "ana"])
        #expect(try sweep(db, at: Self.now + 20 * Days.msPerDay) == 0)

        let ana = try inbox(h, "ana")
        #expect(ana.map { $0["kind"]?.string ?? "" } == ["order_confirmed", "order_rejected", "hold_expired", "order_confirmed", "rental_due", "rental_overdue",
                                                         "order_confirmed"])
        #expect(ana.map { $0["ref"]?.string ?? "" } == ["o-1", "o-2", "r-1", "o-3", "o-3", "o-3", "o-4"])
        #expect(ana[0]["text"] == "Your order o-1 is confirmed: 2 items, USD 21.00.")
        #expect(ana[1]["text"] == "Your order o-2 was rejected: not enough stock of p-0003: 0 left.")
        #expect(ana[2]["text"] == "Your hold on spot central-P1-007 expired at 19:10 without a check-in: the spot was released.")
        #expect(ana[4]["text"] == "Your rental o-3 is due back tomorrow, 2025-12-04.")
        #expect(ana.allSatisfy { $0["read"] == false && $0["user"] == "ana" })
        let bob = try inbox(h, "bob")
        #expect(bob.map { $0["kind"]?.string ?? "" } == ["listing_sold"] && bob.first?["text"] == "Your listing 'Graphing calculator' was sold: 1 unit.")
        // One news event per notification, with the same id, user, kind, text, ref and time, in order.
        let events = try news(db)
        let made = (ana.map { ($0, "ana") } + bob.map { ($0, "bob") }).sorted { ($0.0["seq"]?.int ?? 0) < ($1.0["seq"]?.int ?? 0) }
        #expect(events.count == made.count)
        for (event, (n, user)) in zip(events, made) {
            var want: [String: JSON] = ["user": .string(user)]
            for key in ["id", "seq", "kind", "text", "ref", "ts"] { want[key] = n[key] }
            #expect(event == .object(want))
            #expect(try Contract.Notifications.News(json: event).user == user)
        }
    }

    @Test(arguments: stores)
    func aHoldIsWarnedTwoMinutesBeforeItsDeadlineOnceAndNeverAfterACheckInOrCancel(postgres: Bool) throws {
        let (h, db) = try service(postgres: postgres)
        let deadline = Self.now + 600_000
        for (id, user) in [("r-warned", "ana"), ("r-in", "bob"), ("r-off", "cy")] {
            try apply(db, "reservations.held", Self.reservation(id, user: user, status: "held", deadline: deadline))
        }
        try apply(db, "reservations.checkedin", Self.reservation("r-in", user: "bob", status: "checked_in", deadline: deadline))
        try apply(db, "reservations.cancelled", Self.reservation("r-off", user: "cy", status: "cancelled", deadline: deadline))
        #expect(try sweep(db, at: deadline - 121_000) == 0)
        #expect(try inbox(h, "ana").isEmpty)
        #expect(try sweep(db, at: deadline - 120_000) == 1)
        // The deadline is kept in the store: later sweeps (another worker, one after a restart) find it told.
        #expect(try sweep(db, at: deadline - 119_000) == 0)
        #expect(try sweep(db, at: deadline - 1_000) == 0)
        let ana = try inbox(h, "ana")
        #expect(ana.count == 1 && ana.first?["kind"] == "hold_warning" && ana.first?["ref"] == "r-warned")
        #expect(ana.first?["text"] == "Your hold on spot central-P1-007 ends in 2 minutes, at 19:10: check in or it is released.")
        #expect(try inbox(h, "bob").isEmpty && inbox(h, "cy").isEmpty)
        // A hold first heard of after its deadline is not warned; one heard of inside the two minutes is, at once.
        try apply(db, "reservations.held", Self.reservation("r-late", user: "dee", status: "held", deadline: Self.now))
        try apply(db, "reservations.held", Self.reservation("r-short", user: "eve", status: "held", deadline: Self.now + 90_000))
        #expect(try sweep(db, at: Self.now + 1_000) == 1)
        #expect(try inbox(h, "dee").isEmpty && inbox(h, "eve").map { $0["kind"] } == ["hold_warning"])
        #expect(try inbox(h, "eve").first?["text"]?.string?.contains("ends in 2 minutes") == true)
        // The warning's lead is a setting.
        var early = Notifications.Settings()
        early.holdWarningMs = 300_000
        try apply(db, "reservations.held", Self.reservation("r-early", user: "fay", status: "held", deadline: deadline))
        #expect(try sweep(db, at: deadline - 300_000, settings: early) == 1)
    }

    /// Makes `n` notifications for `user` (orders rejected, one each).
    func reject(_ db: Database, _ user: String, _ n: Int, from: Int = 0, settings: Notifications.Settings = .init()) throws {
        for i in from..<(from + n) {
            try apply(db, "orders.rejected", ["order": .string("o-\(user)-\(i)"), "user": .string(user), "reason": "out of stock", "code": "conflict"],
                      settings: settings)
        }
    }

    @Test(arguments: stores)
    func sinceAnswersOnlyTheCallersOwnPageByPageAfterTheCursor(postgres: Bool) throws {
        let (h, db) = try service(postgres: postgres)
        try reject(db, "ana", 3)
        try reject(db, "bob", 2)
        try reject(db, "ana", 2, from: 3)
        var after: Int64 = 0
        var seen: [String] = []
        var pages = 0
        while true {
            let page = try h.call("notifications.since", ["after": .int(after), "limit": 2], user: "ana")
            let items = page["items"]?.array ?? []
            #expect(items.count <= 2 && page["unread"] == 5)
            seen += items.map { $0["ref"]?.string ?? "" }
            after = page["last"]?.int ?? 0
            pages += 1
            if page["more"] == false { break }
        }
        #expect(seen == (0..<5).map { "o-ana-\($0)" } && pages == 3)
        // Past the end: nothing, the cursor stays.
        let end = try h.call("notifications.since", ["after": .int(after)], user: "ana")
        #expect(end["items"] == [] && end["last"]?.int == after && end["more"] == false)
        #expect(try inbox(h, "bob").map { $0["ref"]?.string ?? "" } == ["o-bob-0", "o-bob-1"])
        #expect(try inbox(h, "cy").isEmpty)
    }

    @Test(arguments: stores)
    func anotherUsersIdsAreNotFoundInTheWordsOfMissingOnesAndMarkNothing(postgres: Bool) throws {
        let (h, db) = try service(postgres: postgres)
        try reject(db, "ana", 3)
        try reject(db, "bob", 1)
        let anas = try inbox(h, "ana").map { $0["id"]?.string ?? "" }
        let bobs = try inbox(h, "bob").map { $0["id"]?.string ?? "" }
        // Bob names one of Ana's ids, alone or beside his own: 404 in the words of an id that does not exist, and nothing is marked.
        for ids in [[anas[0]], [bobs[0], anas[1]]] {
            let error = h.handle(Self.request("notifications.read", ["ids": .array(ids.map(JSON.string))], user: "bob")).quadError
            #expect(error?.status == 404 && error?.message == "you have no notification '\(anas[ids.count - 1])'")
        }
        let missing = h.handle(Self.request("notifications.read", ["ids": ["n-none"]], user: "bob")).quadError
        #expect(missing?.status == 404 && missing?.message == "you have no notification 'n-none'")
        #expect(try inbox(h, "bob").first?["read"] == false)
        #expect(try inbox(h, "ana").allSatisfy { $0["read"] == false })
        // up_to marks the caller's own only, whatever seq it names.
        let all = try h.call("notifications.read", ["up_to": 1_000_000], user: "bob")
        #expect(all["marked"] == 1 && all["unread"] == 0 && all["version"]?.int != nil, "\(all.text)")
        #expect(try inbox(h, "ana").allSatisfy { $0["read"] == false })
        // Ana marks two of hers; a second time changes nothing.
        let two = try h.call("notifications.read", ["ids": [.string(anas[0]), .string(anas[2])]], user: "ana")
        #expect(two["marked"] == 2 && two["unread"] == 1 && two["version"]?.int != nil, "\(two.text)")
        #expect(try h.call("notifications.read", ["ids": [.string(anas[0])]], user: "ana") == ["marked": 0, "unread": 1])
        #expect(try inbox(h, "ana").map { $0["read"] } == [true, false, true])
    }

    static let badInputs: [(String, JSON, String?, Int, String)] = [
        ("notifications.since", [:], nil, 401, "notifications.since needs a signed-in user"),
        ("notifications.since", ["limit": 201], "ana", 400, "body.limit must be between 1 and 200 (max_page_size)"),
        ("notifications.since", ["after": -1], "ana", 400, "body.after must be >= 0"),
        ("notifications.since", ["after": "x"], "ana", 400, "body.after must be an integer, got string"),
        ("notifications.since", ["user": "bob"], "ana", 403, "notifications.since acts on the signed-in user only: body.user cannot name a user"),
        ("notifications.read", [:], "ana", 400, "body.ids or body.up_to is required"),
        ("notifications.read", ["ids": ["a"], "up_to": 3], "ana", 400, "body.ids and body.up_to are exclusive"),
        ("notifications.read", ["ids": []], "ana", 400, "body.ids must have at least 1 item"),
        ("notifications.read", ["ids": .array((0...100).map { .string("n-\($0)") })], "ana", 400, "body.ids has 101 items, over the limit of 100 (max_read_ids)"),
        ("notifications.read", ["ids": [7]], "ana", 400, "body.ids[0] must be a string, got number"),
        ("notifications.read", ["up_to": 1, "extra": 1], "ana", 400, "body.extra is not a field of notifications.read: expected ids, up_to"),
        ("notifications.read", ["up_to": 1], nil, 401, "notifications.read needs a signed-in user"),
    ]

    @Test(arguments: badInputs)
    func badInputIsAnErrorEnvelopeNamingTheFieldAndTheLimit(_ input: (String, JSON, String?, Int, String)) throws {
        let (type, body, user, status, message) = input
        let (h, _) = try service(postgres: false)
        let error = h.handle(Self.request(type, body, user: user)).quadError
        #expect(error?.status == status && error?.message == message, "\(type) \(body.text): \(error?.message ?? "")")
    }

    @Test(arguments: stores)
    func anInboxKeepsMaxInboxRowsDroppingTheOldestReadOnesFirst(postgres: Bool) throws {
        let (h, db) = try service(postgres: postgres)
        var small = Notifications.Settings()
        small.maxInbox = 3
        try reject(db, "ana", 3, settings: small)
        let first = try inbox(h, "ana").map { $0["id"]?.string ?? "" }
        _ = try h.call("notifications.read", ["ids": [.string(first[1])]], user: "ana")
        // A fourth: the read one goes, not the oldest unread.
        try reject(db, "ana", 1, from: 3, settings: small)
        #expect(try inbox(h, "ana").map { $0["ref"]?.string ?? "" } == ["o-ana-0", "o-ana-2", "o-ana-3"])
        // None read: the oldest goes.
        try reject(db, "ana", 1, from: 4, settings: small)
        #expect(try inbox(h, "ana").map { $0["ref"]?.string ?? "" } == ["o-ana-2", "o-ana-3", "o-ana-4"])
        // Another user's inbox is not touched by Ana's bound.
        try reject(db, "bob", 2, settings: small)
        #expect(try inbox(h, "bob").count == 2 && inbox(h, "ana").count == 3)
    }

    @Test func flagsOutOfRangeAreRefusedNamingTheFlag() throws {
        #expect(throws: QuadError.self) { try Notifications.settings(["max-inbox": "0", "hold-warning-seconds": "120"]) }
        do {
            _ = try Notifications.settings(["max-inbox": "500", "hold-warning-seconds": "abc"])
        } catch let error as QuadError {
            #expect(error.message == "--hold-warning-seconds must be an integer from 1 to 3600, got 'abc'")
        }
        let s = try Notifications.settings(["max-inbox": "20", "hold-warning-seconds": "60"])
        #expect(s.maxInbox == 20 && s.holdWarningMs == 60_000)
    }
}
