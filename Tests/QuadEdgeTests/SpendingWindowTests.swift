import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// Issue 17 point 4, SpendiQ's window on the phone: 7 days of details,
/// 30 days of totals, queued purchases estimated, the stale notice, and a
/// new phone rebuilding both from the service.
@Suite("SpendiQ's window", .serialized)
struct SpendingWindowTests {
    static let day: Int64 = 86_400_000

    static func plantOrder(_ db: Database, _ id: String, total: Double, at: Int64, category: String, mode: String = "buy") throws {
        let items: JSON = [["product": "p-0001", "quantity": 1, "price": .double(total), "category": .string(category), "line_total": .double(total)]]
        try db.execute("""
            INSERT INTO orders (id, status, source, mode, screen, items, total, currency, estimated, created_ms)
            VALUES ($1, 'confirmed', 'buy_now', $2, 'home', $3, $4, 'USD', 0, $5)
            """, .text(id), .text(mode), .text(items.text), .double(total), .int(at))
    }

    @Test func detailsOlderThanSevenDaysAreDroppedAndTheThirtyDayTotalsStay() throws {
        let rig = try PhoneRig()
        let db = rig.phone.db
        let start = Int64(Clock.nowMillis())
        try db.setMeta("orders_synced_ms", String(start))
        try Self.plantOrder(db, "lamp", total: 20, at: start - 2 * Self.day, category: "Personal")
        try Self.plantOrder(db, "book", total: 12.5, at: start - 1 * Self.day, category: "Books", mode: "rent")
        let first = rig.phone.spending(nowMs: start).body
        #expect(first["spent"]?.double == 32.5, "\(first)")
        #expect(first["details"]?.array?.count == 2)
        #expect(first["by_category"]?["Books"]?.double == 12.5 && first["by_app"]?["unitrade"]?.double == 32.5, "\(first)")
        #expect(first["details"]?.array?.first?["kind"]?.string == "rental")
        // Nine days later: both details are older than 7 days and gone from
        // the phone; the 30-day figure is the same, from the days' totals.
        // The orders table forgets them too (the orders view's history is not the window).
        try db.execute("DELETE FROM orders")
        let later = start + 9 * Self.day
        try db.setMeta("orders_synced_ms", String(later))
        let after = rig.phone.spending(nowMs: later).body
        #expect(try db.count("SELECT COUNT(*) AS n FROM spend_detail") == 0, "details older than 7 days are dropped")
        #expect(after["details"]?.array?.isEmpty == true)
        #expect(after["spent"]?.double == 32.5 && after["by_category"]?["Personal"]?.double == 20, "\(after)")
        #expect(try db.count("SELECT COUNT(*) AS n FROM spend_daily") == 2)
        // Past 30 days the days' totals go too.
        let gone = rig.phone.spending(nowMs: start + 32 * Self.day).body
        let daysLeft = try db.count("SELECT COUNT(*) AS n FROM spend_daily")
        #expect(gone["spent"]?.double == 0 && daysLeft == 0, "\(gone)")
    }

    @Test func whatTheStudentsListingsEarnedIsReceivedOnceAndKeptPastTheDetails() throws {
        let rig = try PhoneRig()
        let db = rig.phone.db
        let start = Int64(Clock.nowMillis())
        try db.setMeta("orders_synced_ms", String(start))
        func listing(_ revenue: Double, _ fee: Double, sold: Int64) -> JSON {
            ["id": "l-0123456789abcdef0123456789abcdef", "product": ["category": "Tech"], "revenue": .double(revenue), "fee": .double(fee),
             "sold": .int(sold), "rented": 0, "returned": 0]
        }
        // A first sale: 40 less a fee of 3.20.
        #expect(try SpendingWindow.recordReceived(db, listings: [listing(40, 3.2, sold: 1)], now: start) == 36.8)
        // Read again with nothing new: nothing more received.
        #expect(try SpendingWindow.recordReceived(db, listings: [listing(40, 3.2, sold: 1)], now: start + 1000) == 0)
        let first = rig.phone.spending(nowMs: start + 1000).body
        #expect(first["received"]?.double == 36.8 && first["spent"]?.double == 0, "\(first)")
        // Eight days later the detail is folded into its day; a second sale
        // then adds only its own share.
        let later = start + 8 * Self.day
        try db.setMeta("orders_synced_ms", String(later))
        _ = rig.phone.spending(nowMs: later)
        #expect(try db.count("SELECT COUNT(*) AS n FROM spend_detail") == 0)
        #expect(try SpendingWindow.recordReceived(db, listings: [listing(80, 6.4, sold: 2)], now: later) == 36.8)
        let after = rig.phone.spending(nowMs: later).body
        #expect(after["received"]?.double == 73.6, "\(after)")
        #expect(after["details"]?.array?.count == 1)
    }

    @Test func aWindowLastSyncedTenDaysAgoSaysItsTotalsMayBeOutOfDate() throws {
        let rig = try PhoneRig()
        let now = Int64(Clock.nowMillis())
        try rig.phone.db.setMeta("orders_synced_ms", String(now - 2 * Self.day))
        let fresh = rig.phone.spending(nowMs: now)
        #expect(fresh.body["stale"]?.bool == false, "\(fresh.body)")
        #expect(fresh.notice?.contains("may be out of date") != true)
        try rig.phone.db.setMeta("orders_synced_ms", String(now - 10 * Self.day))
        let stale = rig.phone.spending(nowMs: now)
        #expect(stale.body["stale"]?.bool == true, "\(stale.body)")
        #expect(stale.notice?.contains("the 30-day totals may be out of date: no sync for 10 days") == true, "\(stale.notice ?? "")")
        #expect(stale.body["synced_at"]?.int == now - 10 * Self.day)
    }

    @Test func aQueuedPurchaseCountsAsEstimatedAndARefusalTakesItOut() throws {
        let rig = try PhoneRig()
        let db = rig.phone.db
        try db.execute("INSERT INTO catalog (id, name, price, currency, category, collection, stock, search) VALUES ('p-0001', 'Lamp', 20, 'USD', 'Personal', 'Dorm', 3, 'lamp')")
        rig.broker.answer = { _, _ in .failure(.conflict("not enough stock")) }
        rig.phone.airplane = true
        rig.phone.start()
        rig.phone.act("orders.place", ["source": "buy_now", "product": "p-0001", "quantity": 2, "mode": "buy", "screen": "home"])
        #expect(try db.count("SELECT COUNT(*) AS n FROM spend_detail WHERE status = 'estimated'") == 1, "recorded as the action is made")
        let queued = rig.phone.spending().body
        #expect(queued["spent"]?.double == 40 && queued["estimated"]?.double == 40, "\(queued)")
        #expect(queued["details"]?.array?.first?["status"]?.string == "estimated")
        rig.phone.setAirplane(false)
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        let refused = rig.phone.spending().body
        #expect(refused["spent"]?.double == 0 && refused["estimated"]?.double == 0 && refused["details"]?.array?.isEmpty == true, "\(refused)")
    }

    @Test func aPurchaseTheServiceConfirmsTakesItsAmountAndIsNoLongerEstimated() throws {
        let rig = try PhoneRig()
        let db = rig.phone.db
        try db.execute("INSERT INTO catalog (id, name, price, currency, category, collection, stock, search) VALUES ('p-0001', 'Lamp', 20, 'USD', 'Personal', 'Dorm', 3, 'lamp')")
        rig.broker.answer = { _, _ in .success(["status": "confirmed", "total": 41.2, "currency": "USD",
                                                "items": [["product": "p-0001", "quantity": 2, "price": 20, "category": "Personal", "line_total": 40, "fee": 1.2]]]) }
        rig.phone.start()
        rig.phone.act("orders.place", ["source": "buy_now", "product": "p-0001", "quantity": 2, "mode": "buy", "screen": "home"])
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        let body = rig.phone.spending().body
        #expect(body["spent"]?.double == 41.2 && body["estimated"]?.double == 0, "\(body)")
        #expect(body["details"]?.array?.first?["status"]?.string == "confirmed")
    }
}

/// A sign-in on a new phone, through the real services.
@Suite final class SpendingRebuildTests {
    @Test func aNewPhoneForAUserWithHistoryRebuildsItsTotalsFromTheService() throws {
        let edge = try EdgeStack("spending")
        _ = try edge.signIn()
        for product in ["p-0021", "p-0014", "p-0306"] {
            _ = try edge.act("orders.place", ["source": "buy_now", "product": .string(product), "mode": "buy", "screen": "home"])
        }
        // And one stay in a campus lot, for ParkWise's estimate.
        _ = try edge.act("reservations.hold", ["lot": "central"])
        _ = try edge.act("reservations.checkin", [:])
        _ = try edge.act("reservations.checkout", [:])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let orders = try edge.store("orders")
        let confirmed = try orders.query("SELECT total_cents FROM orders WHERE status NOT IN ('rejected', 'cancelled')").map { Double($0.int("total_cents")) / 100 }
        orders.close()
        try #require(confirmed.count == 3, "the three orders were placed")
        let expected = SpendingWindow.cents(confirmed.reduce(0, +))

        // The same student on a new phone: a file with only the session (no token).
        edge.stack.kill("edge", signal: SIGTERM)
        let file = edge.phonesDir + "/phone-001.db"
        var session: Row?
        do {
            let old = try SQLiteDatabase(path: file)
            session = try old.queryOne("SELECT * FROM session")
            old.close()
        }
        let s = try #require(session)
        // A new phone: no file, no keychain; the student remembers the password.
        let keychainPath = Keychain.path(forPhoneFile: file)
        for path in ["", "-wal", "-shm", "-journal"].map({ file + $0 }) + ["", "-key"].map({ keychainPath + $0 }) {
            try? FileManager.default.removeItem(atPath: path)
        }
        let fresh = try PhoneStore.open(file, keychain: try Keychain(path: keychainPath),
                                        students: try Students(path: Students.path(forPhonesDir: edge.phonesDir)))
        try fresh.execute("""
            INSERT INTO session (one, phone, email, name, register_id, registered, user_id) VALUES (1, $1, $2, $3, $4, 1, $5)
            """, .text(s.string("phone")), .text(s.string("email")), .text(s.string("name")),
            .text(s.string("register_id")), .text(s.string("user_id")))
        fresh.close()
        try edge.startEdge()
        // The phone signs in with its first action, then opens the view.
        _ = try edge.signIn()
        let shown = try edge.view("spending")
        let body = try #require(shown["body"])
        #expect(body["spent"]?.double == expected, "rebuilt from orders.mine: \(shown)")
        #expect(body["details"]?.array?.count == 3 && body["details"]?.array?.allSatisfy { $0["status"]?.string == "confirmed" } == true, "\(body)")
        #expect(body["stale"]?.bool == false && body["synced_at"]?.int != nil, "\(body)")
        // The stay made on the old phone, from reservations.mine.
        #expect(body["stays"]?.int == 1 && body["by_app"]?["parkwise"]?.double == 1.5, "rebuilt from reservations.mine: \(body)")
        // Kept on the phone: offline it shows the same totals.
        try edge.airplane(true)
        #expect(try edge.view("spending")["body"]?["spent"]?.double == expected)
    }
}
