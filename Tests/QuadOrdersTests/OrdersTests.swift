import Foundation
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker, the catalog and orders as real processes on real SQLite
/// files. Requests go through the internal frontend with `user` set, as the
/// broker sets it from a verified token on the public one.
final class Market: @unchecked Sendable {
    // Its own client serves the test's thread; racing threads bring theirs.
    let stack: TestStack
    let client: Client

    init(_ name: String, orders: Int = 1, extra: [String] = []) throws {
        stack = try TestStack(name: name)
        // One-second heartbeats: a worker waiting on the catalog is not taken for dead.
        client = try stack.internalClient()
        try stack.startBroker(heartbeatMs: 1000)
        try stack.startWorker("quad-catalog", instance: "catalog/1", heartbeatMs: 1000)
        for n in 1...orders { try startOrders("orders/\(n)", extra: extra) }
        #expect(try stack.waitForWorkers("catalog", count: 1))
        #expect(try stack.waitForWorkers("orders", count: orders))
        try waitForCatalogCopy()
    }

    func startOrders(_ instance: String, extra: [String] = []) throws {
        try stack.startWorker("quad-orders", instance: instance, heartbeatMs: 1000, extra: extra)
    }

    /// Orders refuses an unknown product once its copy of the catalog is loaded.
    func waitForCatalogCopy() throws {
        let until = Clock.monotonicMillis() + 10_000
        while Clock.monotonicMillis() < until {
            if call("orders.cart.add", ["product": "p-none"], user: "probe").quadError?.status == 404 { return }
            usleep(100_000)
        }
        Issue.record("orders never loaded the catalog's products")
    }

    func call(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, id: String = MessageID.make(),
              timeoutMs: Int64 = 5000, attempts: Int = 2, on client: Client? = nil) -> Envelope {
        var e = Envelope.request(type, body: body, id: id)
        e.user = user
        e.role = role
        do { return try (client ?? self.client).call(e, timeoutMs: timeoutMs, attempts: attempts) } catch {
            return e.error(error)
        }
    }

    /// The reply body, or the test fails with the error.
    func ok(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws -> JSON {
        let reply = call(type, body, user: user, role: role)
        if let error = reply.quadError {
            Issue.record("\(type) \(body.text): \(error)", sourceLocation: sourceLocation)
            throw error
        }
        return reply.body
    }

    func product(_ id: String) throws -> JSON { try ok("catalog.product.get", ["id": .string(id)]) }
    func stock(_ id: String) throws -> Int64 { try product(id)["stock"]?.int ?? -1 }

    func setStock(_ id: String, _ units: Int64) throws {
        let delta = units - (try stock(id))
        if delta != 0 { _ = try ok("catalog.stock.adjust", ["id": .string(id), "delta": .int(delta)], role: "admin") }
    }

    /// Polls `probe` until it is true or `ms` pass.
    func eventually(_ ms: Int64 = 10_000, _ probe: () throws -> Bool) rethrows -> Bool {
        let until = Clock.monotonicMillis() + ms
        while Clock.monotonicMillis() < until {
            if try probe() { return true }
            usleep(50_000)
        }
        return try probe()
    }
}

/// Thread-safe collection of replies from racing clients.
final class Replies: @unchecked Sendable {
    // Appended to from many threads under the lock.
    let lock = NSLock()
    var all: [(user: String, reply: Envelope)] = []
    func add(_ user: String, _ e: Envelope) { lock.withLock { all.append((user, e)) } }
}

func buyNow(_ product: String, quantity: Int64 = 1, screen: String = "home") -> JSON {
    ["source": "buy_now", "product": .string(product), "quantity": .int(quantity), "screen": .string(screen)]
}

@Suite("Orders as processes", .serialized)
struct OrdersTests {
    @Test func fiftyBuyersRaceForTheLastUnitAndExactlyOneGetsIt() throws {
        let market = try Market("race", orders: 2)
        try market.setStock("p-0002", 1)
        let replies = Replies()
        let go = DispatchSemaphore(value: 0)
        let ready = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for n in 0..<50 {
            done.enter()
            Thread {
                let client = try? market.stack.internalClient()
                ready.signal()
                go.wait()
                replies.add("buyer-\(n)", market.call("orders.place", buyNow("p-0002"), user: "buyer-\(n)", timeoutMs: 8000, attempts: 2, on: client))
                done.leave()
            }.start()
        }
        for _ in 0..<50 { ready.wait() }
        for _ in 0..<50 { go.signal() }
        #expect(done.wait(timeout: .now() + 60) == .success)
        let confirmed = replies.all.map(\.reply).filter { $0.kind == .reply }
        let refused = replies.all.compactMap(\.reply.quadError)
        #expect(confirmed.count == 1 && confirmed.first?.body["status"] == "confirmed", "\(confirmed.map(\.body))")
        #expect(refused.count == 49)
        #expect(refused.allSatisfy { $0.status == 409 && $0.message == "not enough stock: p-0002 (requested 1, available 0)" },
                "\(Set(refused.map(\.message)))")
        #expect(refused.allSatisfy { $0.details["short"]?.array?.first?["available"] == 0 && $0.details["order"]?.string != nil })
        #expect(try market.stock("p-0002") == 0)
        // Every refused order is kept as rejected, with the catalog's reason.
        for (user, e) in replies.all where e.kind == .error {
            let order = try market.ok("orders.get", ["order": e.quadError?.details["order"] ?? ""], user: user)
            #expect(order["status"] == "rejected" && order["reason"]?.string?.hasPrefix("not enough stock") == true)
        }
        // And nothing went below zero on the way: one hold taken, none returned.
        let events = try market.ok("catalog.events.since", ["after": 0, "limit": 1000])["events"]?.array ?? []
        let moves = events.filter { $0["type"] == "catalog.stock.changed" && $0["body"]?["product"] == "p-0002" }
        #expect(moves.allSatisfy { ($0["body"]?["stock"]?.int ?? -1) >= 0 })
        #expect(moves.filter { $0["body"]?["reason"] == "hold" }.count == 1)
    }

    @Test func theSamePlaceIDSentTwiceIsOneOrderWithTheSameReply() throws {
        let market = try Market("same-id", orders: 2)
        try market.setStock("p-0004", 5)
        let id = MessageID.make()
        // The same envelope twice at once, on two workers, then once more.
        let replies = Replies()
        let done = DispatchGroup()
        for _ in 0..<2 {
            done.enter()
            Thread {
                let client = try? market.stack.internalClient()
                replies.add("ana", market.call("orders.place", buyNow("p-0004", quantity: 2), user: "ana", id: id, timeoutMs: 5000, attempts: 3, on: client))
                done.leave()
            }.start()
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let third = market.call("orders.place", buyNow("p-0004", quantity: 2), user: "ana", id: id)
        #expect(replies.all.count == 2)
        #expect(replies.all.allSatisfy { $0.reply.kind == .reply && $0.reply.body == third.body }, "\(replies.all.map(\.reply.body)) vs \(third.body)")
        #expect(third.body["order"]?.string == id && third.body["status"] == "confirmed")
        #expect(try market.stock("p-0004") == 3)
        let mine = try market.ok("orders.mine", [:], user: "ana")
        #expect(mine["total"] == 1)
        // A refusal is remembered too: the same id gets the same 409, even once stock is back.
        let big = MessageID.make()
        let refused = market.call("orders.place", buyNow("p-0004", quantity: 9), user: "ana", id: big)
        try market.setStock("p-0004", 50)
        let again = market.call("orders.place", buyNow("p-0004", quantity: 9), user: "ana", id: big)
        #expect(refused.quadError?.status == 409 && refused.body == again.body)
        #expect(try market.stock("p-0004") == 50)
    }

    @Test func aCrashBetweenHoldAndConfirmEndsConfirmedOrRejectedWithNothingHeld() throws {
        // The fault-injection knob holds the first worker between hold and confirm.
        let market = try Market("crash", extra: ["--pause-after-hold-ms", "8000", "--saga-lease-ms", "500"])
        try market.setStock("p-0005", 4)
        let id = MessageID.make()
        Thread {
            let pending = try? market.stack.internalClient()
            _ = market.call("orders.place", buyNow("p-0005", screen: "search"), user: "ana", id: id, timeoutMs: 1000, attempts: 1, on: pending)
        }.start()
        #expect(try market.eventually { try market.stock("p-0005") == 3 }, "the hold never happened")
        market.stack.kill("orders/1")
        try market.startOrders("orders/2", extra: ["--saga-lease-ms", "500"])
        var status: JSON?
        #expect(market.eventually(15_000) {
            status = market.call("orders.get", ["order": .string(id)], user: "ana").body["status"]
            return status == "confirmed" || status == "rejected"
        }, "order still \(String(describing: status))")
        // The catalog's view of the hold agrees, and no unit stays held.
        let hold = try market.ok("catalog.stock.hold", ["order": .string(id), "items": [["product": "p-0005", "quantity": 1]]], role: "service")
        if status == "confirmed" {
            #expect(hold["status"] == "confirmed")
            #expect(try market.stock("p-0005") == 3)
        } else {
            #expect(hold["status"] == "released" || hold["status"] == "expired")
            #expect(try market.stock("p-0005") == 4)
        }
        // The request, retried under its id, gets the outcome.
        let retry = market.call("orders.place", buyNow("p-0005", screen: "search"), user: "ana", id: id)
        #expect(retry.kind == .reply ? retry.body["status"] == status : status == "rejected")
        #expect(eventually { market.stack.log("orders/2").contains("recovering order \(id)") || market.stack.log("orders/2").contains(id) })
    }

    @Test func aUserCannotReadOrChangeAnotherUsersCartOrOrders() throws {
        let market = try Market("private")
        try market.setStock("p-0010", 5)
        _ = try market.ok("orders.cart.add", ["product": "p-0010", "quantity": 2], user: "ana")
        let order = try market.ok("orders.place", buyNow("p-0010"), user: "ana")
        let id = try #require(order["order"])
        // Bob sees his own, empty, cart and no orders.
        #expect(try market.ok("orders.cart.view", [:], user: "bob")["lines"] == [])
        #expect(try market.ok("orders.mine", [:], user: "bob")["total"] == 0)
        // Ana's order does not exist for him.
        #expect(market.call("orders.get", ["order": id], user: "bob").quadError?.status == 404)
        #expect(market.call("orders.cancel", ["order": id], user: "bob").quadError?.status == 404)
        // Removing from "the" cart only touches his own.
        _ = try market.ok("orders.cart.remove", ["product": "p-0010"], user: "bob")
        _ = try market.ok("orders.cart.clear", [:], user: "bob")
        #expect(try market.ok("orders.cart.view", [:], user: "ana")["lines"]?.array?.first?["quantity"] == 2)
        // Naming a user in the body is refused; no user at all is 401.
        #expect(market.call("orders.cart.view", ["user": "ana"], user: "bob").quadError?.status == 403)
        #expect(market.call("orders.mine", ["user": "ana"], user: "bob").quadError?.status == 403)
        #expect(market.call("orders.cart.view").quadError?.status == 401)
        #expect(market.call("orders.place", buyNow("p-0010")).quadError?.status == 401)
        // Ana's order is intact.
        #expect(try market.ok("orders.get", ["order": id], user: "ana")["status"] == "confirmed")
    }

    @Test func theCartTotalsTheFeeAndAnOrderFromItRentsCancelsAndPublishes() throws {
        let market = try Market("cart")
        try market.setStock("p-0001", 10)  // Tech: 8 %
        try market.setStock("p-0014", 10)  // Study: 5 %
        let phone = try market.product("p-0001")
        let book = try market.product("p-0014")
        #expect(phone["category"] == "Tech" && book["category"] == "Study")
        _ = try market.ok("orders.cart.add", ["product": "p-0001"], user: "ana")
        _ = try market.ok("orders.cart.add", ["product": "p-0001"], user: "ana")
        _ = try market.ok("orders.cart.add", ["product": "p-0014", "quantity": 5], user: "ana")
        let cart = try market.ok("orders.cart.set", ["product": "p-0014", "quantity": 3], user: "ana")
        let phoneCents = Int64((phone["price"]!["value"]!.double! * 100).rounded())
        let bookCents = Int64((book["price"]!["value"]!.double! * 100).rounded())
        let fee = Int64((Double(phoneCents * 2) * 0.08).rounded()) + Int64((Double(bookCents * 3) * 0.05).rounded())
        let lines = cart["lines"]?.array ?? []
        #expect(lines.map { $0["product"] } == ["p-0001", "p-0014"])
        #expect(lines.map { $0["quantity"] } == [2, 3])
        #expect(lines.first?["unit_price"] == phone["price"]!["value"] && lines.first?["fee_rate"] == 8)
        #expect(lines.first?["line_total"] == .double(Double(phoneCents * 2) / 100))
        #expect(cart["subtotal"] == .double(Double(phoneCents * 2 + bookCents * 3) / 100))
        #expect(cart["fee"] == .double(Double(fee) / 100))
        #expect(cart["total"] == .double(Double(phoneCents * 2 + bookCents * 3 + fee) / 100))
        #expect(cart["units"] == 5)
        // Quantities are bounded; 0 removes; unknown products are refused.
        #expect(market.call("orders.cart.add", ["product": "p-0001", "quantity": 98], user: "ana").quadError?.message.contains("max_quantity") == true)
        #expect(market.call("orders.cart.add", ["product": "p-9999"], user: "ana").quadError?.status == 404)
        // Renting needs a return date in the future.
        #expect(market.call("orders.place", ["source": "cart", "mode": "rent"], user: "ana").quadError?.status == 400)
        #expect(market.call("orders.place", ["source": "cart", "mode": "rent", "return_date": "2001-01-01"], user: "ana").quadError?.status == 400)
        let day = ISODay.inDays(7)
        let order = try market.ok("orders.place", ["source": "cart", "mode": "rent", "return_date": .string(day)], user: "ana")
        #expect(order["status"] == "confirmed" && order["mode"] == "rent" && order["screen"] == "cart" && order["return_date"] == .string(day))
        // A rental is priced by the day: each product's rent rate (its price
        // over 30, to the cent) times 7 days, with the category's fee on top.
        func rent(_ cents: Int64, _ units: Int64) -> Int64 { max(1, Int64((Double(cents) / 30).rounded())) * 7 * units }
        let rentSubtotal = rent(phoneCents, 2) + rent(bookCents, 3)
        let rentFee = Int64((Double(rent(phoneCents, 2)) * 0.08).rounded()) + Int64((Double(rent(bookCents, 3)) * 0.05).rounded())
        #expect(order["days"] == 7 && order["subtotal"] == .double(Double(rentSubtotal) / 100), "\(order)")
        #expect(order["fee"] == .double(Double(rentFee) / 100) && order["total"] == .double(Double(rentSubtotal + rentFee) / 100), "\(order)")
        #expect(order["semester"] == .null, "no accounts events: semester unknown")
        #expect(try market.stock("p-0001") == 8 && market.stock("p-0014") == 7)
        // The bought lines left the cart.
        #expect(try market.ok("orders.cart.view", [:], user: "ana")["lines"] == [])
        #expect(market.call("orders.place", ["source": "cart"], user: "ana").quadError?.message == "the cart is empty: add products with orders.cart.add first")
        // Paging over my orders, newest first.
        _ = try market.ok("orders.place", buyNow("p-0014", screen: "favorites"), user: "ana")
        let page = try market.ok("orders.mine", ["limit": 1], user: "ana")
        #expect(page["total"] == 2 && page["orders"]?.array?.first?["screen"] == "favorites")
        #expect(try market.ok("orders.mine", ["limit": 1, "offset": 1], user: "ana")["orders"]?.array?.first?["order"] == order["order"])
        #expect(market.call("orders.mine", ["limit": 101], user: "ana").quadError?.message.contains("max_page_size") == true)
        // Cancel gives the stock back; a second cancel is refused.
        let cancelled = try market.ok("orders.cancel", ["order": order["order"]!], user: "ana")
        #expect(cancelled["status"] == "cancelled")
        #expect(try market.eventually { try market.stock("p-0001") == 10 && market.stock("p-0014") == 9 })
        #expect(market.call("orders.cancel", ["order": order["order"]!], user: "ana").quadError?.status == 409)
        // The events, with what analytics asks of them.
        let events = try market.ok("orders.events.since", ["after": 0])["events"]?.array ?? []
        let mine = events.filter { $0["body"]?["order"] == order["order"] }
        #expect(mine.map { $0["type"] } == ["orders.placed", "orders.confirmed", "orders.cancelled"])
        let confirmed = try #require(mine.dropFirst().first?["body"])
        #expect(confirmed["user"] == "ana" && confirmed["screen"] == "cart" && confirmed["mode"] == "rent" && confirmed["semester"] == .null)
        #expect(confirmed["fee"] == order["fee"] && confirmed["total"] == order["total"] && confirmed["return_date"] == .string(day))
        #expect(confirmed["items"]?.array?.map { $0["category"] } == ["Tech", "Study"])
    }
}

enum ISODay {
    /// The ISO date `days` from today (UTC).
    static func inDays(_ days: Int) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date().addingTimeInterval(Double(days) * 86_400))
    }
}
