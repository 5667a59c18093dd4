import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// Rentals with a life (issue 16, point 2), on real processes: a broker,
/// accounts, catalog and orders. A student rents a seeded book for 3 days,
/// sees it in orders.rentals, and returns it "5 days later": orders is
/// restarted under libfaketime (Debian's faketime, as the chaos tool's
/// clock fault runs it) with its wall clock 5 days ahead, so the return is
/// 2 days late and charged 2 days at the book's rent rate; the unit is back
/// in stock once, whatever the retries; orders.returned is on the bus.
@Suite("Rentals", .serialized)
struct RentalTests {
    static let libfaketime = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                              "/usr/lib/faketime/libfaketime.so.1"].first { FileManager.default.fileExists(atPath: $0) }

    /// A subscriber on the broker's events-out: every event of orders and catalog it heard.
    final class Bus {
        let context = ZMQContext()
        let sub: Socket
        var heard: [Envelope] = []
        init(_ stack: TestStack) throws {
            sub = try context.socket(.sub)
            try sub.connect(stack.endpoints.eventsOut)
            try sub.subscribe("orders/")
            try sub.subscribe("catalog/")
        }
        func drain() {
            while let frames = try? sub.receive(dontWait: true), frames.count == 2 {
                if let e = try? Envelope.decode(frames[1]) { heard.append(e) }
            }
        }
        func events(_ type: String, order: String) -> [Envelope] {
            drain()
            return heard.filter { $0.type == type && $0.body["order"]?.string == order }
        }
    }

    static func cents(_ x: Double?) -> Int64? { x.map { Int64(($0 * 100).rounded()) } }

    @Test func aBookRentedForThreeDaysAndReturnedFiveDaysLaterPaysTwoLateDaysAndComesBackToStockOnce() throws {
        for name in ["broker", "accounts", "catalog", "orders"] {
            try #require(FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(name)"), "quad-\(name) is not built")
        }
        let faketime = try #require(Self.libfaketime, "libfaketime is not installed (apt-get install faketime)")
        let stack = try TestStack(name: "rentals")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"])
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        // Its store where orders finds it by QUAD_HOME alone (see the restart below).
        let ordersDB = stack.dir + "/db/orders.db"
        try FileManager.default.createDirectory(atPath: stack.dir + "/db", withIntermediateDirectories: true)
        try stack.startWorker("quad-orders", instance: "orders/1", db: ordersDB)
        for service in ["accounts", "catalog", "orders"] {
            #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000), "\(service) did not register")
        }
        let bus = try Bus(stack)

        func signIn(_ who: String) throws -> Client {
            let c = try stack.client(source: "rentals-\(who)")
            let email = "rent-\(who)@uni.edu", password = "rental-pass-\(who)-4e1b"
            _ = try c.request("accounts.register", ["email": .string(email), "password": .string(password), "name": .string("Renter \(who)"), "semester": 3],
                              timeoutMs: 8000, attempts: 1)
            c.token = try #require(try c.request("accounts.login", ["email": .string(email), "password": .string(password)], timeoutMs: 8000, attempts: 1)["token"]?.string)
            return c
        }
        let alice = try signIn("alice")
        let bob = try signIn("bob")

        // A seeded book in stock, with its rent rate: its price over 30 days.
        let found = try alice.request("catalog.search", ["q": "textbook", "in_stock": true, "limit": 50], timeoutMs: 5000)
        let book = try #require(found["products"]?.array?.first { $0["type"]?.string == "Book" && ($0["stock"]?.int ?? 0) >= 2 })
        let product = try #require(book["id"]?.string)
        let price = try #require(book["price"]?["value"]?.double)
        let rate = try #require(book["rent_rate"]?.double, "a seeded product has a rent_rate: \(book)")
        #expect(Self.cents(rate) == max(1, Int64((price * 100 / 30).rounded())), "rent_rate \(rate) of price \(price)")
        func stock() throws -> Int64? { try alice.request("catalog.product.get", ["id": .string(product)], timeoutMs: 5000)["stock"]?.int }
        let before = try #require(try stock())

        // Bad rentals are refused before anything is held.
        func refusal(_ body: JSON) -> QuadError? {
            do { _ = try alice.request("orders.place", body, timeoutMs: 8000, attempts: 1); return nil } catch { return error }
        }
        let zero = refusal(["source": "buy_now", "product": .string(product), "mode": "rent", "days": 0])
        #expect(zero?.status == 400 && zero?.message.contains("days") == true, "\(String(describing: zero))")
        let tooLong = refusal(["source": "buy_now", "product": .string(product), "mode": "rent", "days": 91])
        #expect(tooLong?.status == 400 && tooLong?.message.contains("max_rent_days") == true && tooLong?.message.contains("90") == true, "\(String(describing: tooLong))")
        let both = refusal(["source": "buy_now", "product": .string(product), "mode": "rent", "days": 3, "return_date": "2099-01-01"])
        #expect(both?.status == 400, "\(String(describing: both))")
        let daysToBuy = refusal(["source": "buy_now", "product": .string(product), "days": 3])
        #expect(daysToBuy?.status == 400, "\(String(describing: daysToBuy))")
        #expect(try stock() == before)

        // Rented for 3 days: priced 3 days at the rate, with the fee on top.
        let dayAtRent = Clock.nowMillis() / 86_400_000
        let rented = try alice.request("orders.place", ["source": "buy_now", "product": .string(product), "mode": "rent", "days": 3, "screen": "search"],
                                       timeoutMs: 15_000, attempts: 1)
        let order = try #require(rented["order"]?.string)
        #expect(rented["status"]?.string == "confirmed", "\(rented)")
        #expect(rented["days"]?.int == 3)
        let line = try #require(rented["items"]?.array?.first)
        #expect(Self.cents(line["rent_rate"]?.double) == Self.cents(rate), "\(line)")
        #expect(Self.cents(line["line_total"]?.double) == Self.cents(rate)! * 3, "\(line)")
        let totalAtRent = try #require(Self.cents(rented["total"]?.double))
        #expect(totalAtRent == Self.cents(line["line_total"]?.double)! + Self.cents(line["fee"]?.double)!)
        let due = try #require(rented["return_date"]?.string)
        #expect(try stock() == before - 1)

        let listed = try alice.request("orders.rentals", timeoutMs: 5000)
        let rental = try #require(listed["rentals"]?.array?.first)
        #expect(rental["order"]?["order"]?.string == order)
        #expect(rental["state"]?.string == "active" && rental["due_in_days"]?.int == 3 && rental["due_date"]?.string == due, "\(rental)")
        #expect(try bob.request("orders.rentals", timeoutMs: 5000)["rentals"]?.array?.isEmpty == true)

        // Another user's order is not found, never refused as someone else's.
        #expect(throws: QuadError.self) { try bob.request("orders.return", ["order": .string(order)], timeoutMs: 5000, attempts: 1) }
        let foreign = try bob.call(.request("orders.return", body: ["order": .string(order)]), timeoutMs: 5000, attempts: 1).quadError
        #expect(foreign?.status == 404 && foreign?.message.contains("another") == false, "\(String(describing: foreign))")
        let nowhere = try alice.call(.request("orders.return", body: ["order": "no-such-order"]), timeoutMs: 5000, attempts: 1).quadError
        #expect(nowhere?.status == 404)

        // A purchase is not a rental: 409.
        let bought = try alice.request("orders.place", ["source": "buy_now", "product": .string(product), "quantity": 1], timeoutMs: 15_000, attempts: 1)
        let sale = try #require(bought["order"]?.string)
        let notRented = try alice.call(.request("orders.return", body: ["order": .string(sale)]), timeoutMs: 5000, attempts: 1).quadError
        #expect(notRented?.status == 409 && notRented?.message.contains("not rented") == true, "\(String(describing: notRented))")
        #expect(try stock() == before - 2)

        // Five days later: orders runs with its wall clock 5 days ahead.
        stack.kill("orders/1", signal: SIGTERM)
        // Started so by a Swift parent, a process under libfaketime was seen
        // to start without its arguments (CommandLine.arguments empty): the
        // endpoints go in the environment too, and the store is the one
        // QUAD_HOME names, so it starts right either way.
        let e = stack.endpoints
        try stack.startWorker("quad-orders", instance: "orders/1", db: ordersDB, environment: [
            "LD_PRELOAD": faketime, "FAKETIME": "+5d", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1",
            "QUAD_FRONTEND": e.frontend, "QUAD_BACKEND": e.backend, "QUAD_EVENTS_IN": e.eventsIn, "QUAD_EVENTS_OUT": e.eventsOut, "QUAD_INTERNAL": e.internal,
        ])
        #expect(try stack.waitForWorkers("orders", count: 1, timeoutMs: 30_000), "orders did not come back under libfaketime")
        var overdue: JSON?
        #expect(try eventually {
            overdue = (try? alice.request("orders.rentals", timeoutMs: 3000, attempts: 1))?["rentals"]?.array?.first { $0["order"]?["order"]?.string == order }
            return overdue?["state"]?.string == "overdue"
        }, "\(String(describing: overdue))")
        #expect(overdue?["due_in_days"]?.int == -2, "\(String(describing: overdue))")

        // Returned late: 2 late days at the rate (3 if the UTC day turned during the test).
        let returnID = MessageID.make()
        let returned = try alice.call(.request("orders.return", body: ["order": .string(order)], id: returnID), timeoutMs: 15_000, attempts: 1)
        #expect(returned.quadError == nil, "\(String(describing: returned.quadError))")
        let lateDays: Int64 = 2 + Int64(Clock.nowMillis() / 86_400_000 - dayAtRent)
        #expect(returned.body["status"]?.string == "returned", "\(returned.body)")
        #expect(returned.body["late_days"]?.int == lateDays, "\(returned.body)")
        #expect(Self.cents(returned.body["late_charge"]?.double) == Self.cents(rate)! * lateDays, "\(returned.body)")
        #expect(Self.cents(returned.body["total"]?.double) == totalAtRent + Self.cents(rate)! * lateDays, "\(returned.body)")
        #expect(returned.body["returned_at"]?.int != nil)
        #expect(try eventually { try stock() == before - 1 }, "the rented unit never came back")

        // The same return again, with the same id and with a new one: the same answer, no second effect.
        let again = try alice.call(.request("orders.return", body: ["order": .string(order)], id: returnID), timeoutMs: 15_000, attempts: 1)
        #expect(again.quadError == nil && again.body == returned.body, "\(again.body)")
        let anew = try alice.call(.request("orders.return", body: ["order": .string(order)]), timeoutMs: 15_000, attempts: 1)
        #expect(anew.quadError == nil && anew.body == returned.body, "\(anew.body)")

        // orders.returned is on the bus, once.
        #expect(eventually { !bus.events("orders.returned", order: order).isEmpty }, "orders.returned never heard")
        let event = bus.events("orders.returned", order: order).first
        #expect(event?.body["late_days"]?.int == lateDays && event?.body["return_date"]?.string == due, "\(String(describing: event?.body))")

        // One stock increase: once a later hold's event is heard, the rental's
        // release has been published exactly once.
        let later = try alice.request("orders.place", ["source": "buy_now", "product": .string(product), "quantity": 1], timeoutMs: 15_000, attempts: 1)
        let laterOrder = try #require(later["order"]?.string)
        #expect(eventually { !bus.events("catalog.stock.changed", order: laterOrder).isEmpty }, "the later hold was never heard")
        let releases = bus.events("catalog.stock.changed", order: order).filter { ($0.body["delta"]?.int ?? 0) > 0 }
        #expect(releases.count == 1, "\(releases.map(\.body))")
        #expect(bus.events("orders.returned", order: order).count == 1)
        #expect(try stock() == before - 2)

        let afterwards = try alice.request("orders.rentals", timeoutMs: 5000)["rentals"]?.array?.first { $0["order"]?["order"]?.string == order }
        #expect(afterwards?["state"]?.string == "returned" && afterwards?["due_in_days"] == nil, "\(String(describing: afterwards))")
        #expect(try alice.request("orders.get", ["order": .string(order)], timeoutMs: 5000)["status"]?.string == "returned")
    }

    /// A return whose release never reached the catalog (catalog stopped)
    /// and whose orders worker then dies: the return is committed with its
    /// release still to send, and the next orders worker sends it once the
    /// catalog is back. The unit comes back once.
    @Test func aReturnWhoseReleaseWasNeverSentBeforeOrdersDiedStillBringsTheUnitBack() throws {
        for name in ["broker", "accounts", "catalog", "orders"] {
            try #require(FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(name)"), "quad-\(name) is not built")
        }
        let stack = try TestStack(name: "rental-crash")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"])
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        try stack.startWorker("quad-orders", instance: "orders/1", extra: ["--catalog-timeout-ms", "300", "--recover-every-ms", "200"])
        for service in ["accounts", "catalog", "orders"] {
            #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000), "\(service) did not register")
        }
        let c = try stack.client(source: "rental-crash")
        _ = try c.request("accounts.register", ["email": "crash-renter@uni.edu", "password": "crash-pass-77d1", "name": "Crash Renter", "semester": 1], timeoutMs: 8000, attempts: 1)
        c.token = try #require(try c.request("accounts.login", ["email": "crash-renter@uni.edu", "password": "crash-pass-77d1"], timeoutMs: 8000, attempts: 1)["token"]?.string)
        let found = try c.request("catalog.search", ["q": "textbook", "in_stock": true, "limit": 50], timeoutMs: 5000)
        let product = try #require(found["products"]?.array?.first { $0["type"]?.string == "Book" && ($0["stock"]?.int ?? 0) >= 1 }?["id"]?.string)
        func stock() throws -> Int64? { try c.request("catalog.product.get", ["id": .string(product)], timeoutMs: 5000, attempts: 1)["stock"]?.int }
        let before = try #require(try stock())
        let rented = try c.request("orders.place", ["source": "buy_now", "product": .string(product), "mode": "rent", "days": 2], timeoutMs: 15_000, attempts: 1)
        let order = try #require(rented["order"]?.string)
        #expect(try stock() == before - 1)

        // The catalog goes away; the return is answered all the same.
        stack.kill("catalog/1", signal: SIGKILL)
        let returned = try c.request("orders.return", ["order": .string(order)], timeoutMs: 15_000, attempts: 1)
        #expect(returned["status"]?.string == "returned" && returned["late_days"]?.int == 0, "\(returned)")
        // Orders dies before any release reached the catalog.
        stack.kill("orders/1", signal: SIGKILL)
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        #expect(try stack.waitForWorkers("catalog", count: 1, timeoutMs: 30_000))
        #expect(try stock() == before - 1, "the unit came back with no orders worker to send its release")
        try stack.startWorker("quad-orders", instance: "orders/1", extra: ["--catalog-timeout-ms", "300", "--recover-every-ms", "200"])
        #expect(try eventually { (try? stock()) == before }, "the release of the return was never sent again")
        // The same answer again, and still one unit back.
        let again = try c.request("orders.return", ["order": .string(order)], timeoutMs: 15_000, attempts: 2)
        #expect(again == returned, "\(again)")
        #expect(try stock() == before)
    }
}
