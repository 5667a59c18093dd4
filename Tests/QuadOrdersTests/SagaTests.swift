import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadOrders

/// The catalog's side of the saga as a test double: stock, holds by order
/// id with the contract's idempotency, and calls that can be made to go
/// unanswered, as when the catalog is partitioned away.
final class FakeCatalog {
    var stock: [String: Int64] = [:]
    var prices: [String: (Double, String)] = [:]
    var holds: [String: (status: String, items: [(String, Int64)])] = [:]
    /// Request types that get no answer (the caller times out).
    var silent: Set<String> = []
    /// false: a catalog of a build before the one-call hold, which refuses
    /// `confirm` as a field it does not know (the contract's 400).
    var takesConfirm = true
    /// Products whose hold lines come back without a price, or not at all.
    var unpriced: Set<String> = []
    var dropped: Set<String> = []
    var calls: [String] = []
    /// When set, answers wait in `heldBack` until the test gives them
    /// (``answerHeldBack()``), as a slow catalog's would.
    var holdBack = false
    var heldBack: [(Envelope, (Result<Envelope, QuadError>) -> Void)] = []
    /// What the saga scheduled on the loop's timers; tests run them by hand.
    var timers: [(Int64, () -> Void)] = []

    /// The saga's asynchronous call: answered at once, or held back.
    func answer(_ e: Envelope, _ done: @escaping (Result<Envelope, QuadError>) -> Void) {
        if holdBack { return heldBack.append((e, done)) }
        do { done(.success(try call(e))) } catch { done(.failure(error as? QuadError ?? .internal("\(error)"))) }
    }

    /// Gives the answers held back so far, in order.
    func answerHeldBack() {
        let waiting = heldBack
        heldBack = []
        for (e, done) in waiting {
            do { done(.success(try call(e))) } catch { done(.failure(error as? QuadError ?? .internal("\(error)"))) }
        }
    }

    func call(_ e: Envelope) throws -> Envelope {
        calls.append(e.type)
        if silent.contains(e.type) { throw QuadError.timeout("no answer to \(e.type) within 2 attempts of 50 ms") }
        #expect(e.role == "service")
        let order = e.body["order"]?.string ?? ""
        switch e.type {
        case "catalog.stock.hold":
            if !takesConfirm && e.body["confirm"] != nil {
                return e.error(.badRequest("body.confirm is not a field of catalog.stock.hold: expected items, mode, order"))
            }
            if holds[order] == nil {
                let items = (e.body["items"]?.array ?? []).map { ($0["product"]!.string!, $0["quantity"]!.int!) }
                for (p, _) in items where stock[p] == nil { return e.error(.notFound("no product with id '\(p)'")) }
                let short = items.filter { stock[$0.0]! < $0.1 }
                if let (p, q) = short.first {
                    return e.error(.conflict("not enough stock: \(p) (requested \(q), available \(stock[p]!))",
                                             details: ["short": [["product": .string(p), "requested": .int(q), "available": .int(stock[p]!)]]]))
                }
                for (p, q) in items { stock[p]! -= q }
                // As catalog does: with confirm, held and confirmed in one call.
                holds[order] = (e.body["confirm"]?.bool == true ? "confirmed" : "held", items)
            }
            return e.reply(state(order))
        case "catalog.stock.confirm":
            guard let hold = holds[order] else { return e.error(.notFound("no stock hold for order '\(order)'")) }
            guard hold.status != "released" else { return e.error(.conflict("the stock hold for order '\(order)' has been released")) }
            holds[order]!.status = "confirmed"
            return e.reply(state(order))
        case "catalog.stock.release":
            guard let hold = holds[order] else { return e.error(.notFound("no stock hold for order '\(order)'")) }
            if hold.status != "released" {
                for (p, q) in hold.items { stock[p]! += q }
                holds[order]!.status = "released"
            }
            return e.reply(state(order))
        default:
            return e.error(.notFound("unknown request type '\(e.type)'"))
        }
    }

    func state(_ order: String) -> JSON {
        let hold = holds[order]!
        return ["order": .string(order), "status": .string(hold.status), "expires_at": 0, "items": .array(hold.items.filter { !dropped.contains($0.0) }.map { p, q in
            unpriced.contains(p) ? ["product": .string(p), "quantity": .int(q), "category": .string(prices[p]?.1 ?? "Others")]
                : ["product": .string(p), "quantity": .int(q), "price": .double(prices[p]?.0 ?? 1), "category": .string(prices[p]?.1 ?? "Others")]
        })]
    }
}

/// Orders' handlers on a fresh SQLite file, with the fake catalog behind the saga.
func ordersService(_ catalog: FakeCatalog, leaseMs: Int64 = 60_000) throws -> (Handlers, OrderSaga, Database) {
    let dir = NSTemporaryDirectory() + "quad-orders-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    let db = try SQLiteDatabase(path: dir + "/orders.db")
    try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
    try Migrations.apply(db, Orders.migrations, scope: "orders")
    var settings = OrderSaga.Settings(fees: try FeeSchedule(parsing: FeeSchedule.defaultText))
    settings.leaseMs = leaseMs
    settings.retryMs = 0
    settings.callTimeoutMs = 50
    let saga = OrderSaga(db: db, settings: settings, source: "orders/test", after: { ms, action in catalog.timers.append((ms, action)) }) { e, _, _, done in
        catalog.answer(e, done)
    }
    let h = Handlers(service: "orders", instance: "orders/test", db: db)
    Orders.register(h, db: db, saga: saga)
    return (h, saga, db)
}

extension Handlers {
    /// Calls `type` as `user`; returns the reply or error envelope.
    func send(_ type: String, _ body: JSON = [:], user: String?, id: String = MessageID.make()) -> Envelope {
        var e = Envelope.request(type, body: body, id: id)
        e.user = user
        return handle(e)
    }
}

func event(_ type: String, _ body: JSON, seq: Int64 = 1) -> Envelope {
    Envelope(type: type, kind: .event, src: String(type.split(separator: ".")[0]), seq: seq, body: body)
}

@Suite("Orders: saga and rules, with a test double of the catalog")
struct SagaTests {
    @Test func feesAreAPercentByCategoryRoundedToTheCent() throws {
        let fees = try FeeSchedule(parsing: FeeSchedule.defaultText)
        #expect(fees.rate("Tech") == 8 && fees.rate("Study") == 5 && fees.rate("Unheard-of") == 10)
        #expect(fees.fee(cents: 69_900, category: "Tech") == 5_592)
        #expect(fees.fee(cents: 1_250, category: "Personal") == 88)  // 87.5 rounds up
        #expect(try FeeSchedule(parsing: "Tech=7.5").fee(cents: 1_000, category: "Study") == 100)  // no Others: 10 %
        for bad in ["", "Tech", "Tech=x", "Tech=101", "=5"] {
            #expect(throws: QuadError.self) { try FeeSchedule(parsing: bad) }
        }
    }

    @Test func aRentalNeedsAReturnDateAfterToday() throws {
        let today = PlacePlan.dayFormatter().date(from: "2025-03-10")!
        // As the worker hands it over: checked by the contract, decoded, then planned.
        func plan(_ body: JSON) throws -> PlacePlan {
            if let failure = Contract.validate("orders.place", body) { throw QuadError.badRequest(failure.message) }
            return try PlacePlan(Contract.Orders.Place(json: body), today: today)
        }
        let rent = try plan(["source": "buy_now", "product": "p-0001", "mode": "rent", "return_date": "2025-03-11", "screen": "favorites"])
        #expect(rent.returnDate == "2025-03-11" && rent.screen == "favorites" && rent.quantity == 1)
        #expect(try plan(["source": "cart"]).screen == "cart")
        let refusals: [(JSON, String)] = [
            (["source": "buy_now", "product": "p-0001", "mode": "rent"], "body.return_date is required"),
            (["source": "buy_now", "product": "p-0001", "mode": "rent", "return_date": "2025-03-10"], "must be after today: 2025-03-11 or later"),
            (["source": "buy_now", "product": "p-0001", "mode": "rent", "return_date": "2025-02-30"], "must be an ISO date"),
            (["source": "buy_now", "product": "p-0001", "mode": "rent", "return_date": "2026-03-11"], "max_rent_days"),
            (["source": "buy_now", "product": "p-0001", "return_date": "2025-03-12"], "only for mode 'rent'"),
            (["source": "cart", "product": "p-0001"], "are for source 'buy_now'"),
            (["source": "buy_now"], "body.product is required"),
            (["source": "buy_now", "product": "p-0001", "quantity": 100], "max_quantity"),
            (["source": "buy_now", "product": "p-0001", "screen": "checkout"], "body.screen must be one of home, favorites, search, cart"),
            (["product": "p-0001"], "body.source is required"),
            (["source": "cart", "coupon": "FREE"], "body.coupon is not a field of orders.place"),
        ]
        for (body, message) in refusals {
            let error = try #require(throws: QuadError.self) { try plan(body) }
            #expect(error.status == 400 && error.message.contains(message), "\(body): \(error.message)")
        }
    }

    /// The cart and the order as replied, and every orders event, are their
    /// contract's types: each decodes as its ``Body`` and encodes back to
    /// the JSON that went out (the wire did not change with the types).
    @Test func repliesAndEventsAreTheirContractTypes() throws {
        typealias C = Contract.Orders
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 5]
        catalog.prices = ["p-1": (10.25, "Study")]
        let (h, _, db) = try ordersService(catalog)
        // The copy of the catalog is empty: the line has no price.
        let cart = h.send("orders.cart.add", ["product": "p-1", "quantity": 2], user: "ana")
        let typedCart = try C.Cart(json: cart.body)
        #expect(typedCart.lines.map(\.available) == [false] && typedCart.lines.first?.unitPrice == nil && typedCart.json == cart.body)
        #expect(cart.body["lines"]?.array?.first?.object?.keys.sorted() == ["available", "product", "quantity"], "unpriced fields absent, not null")
        let placed = h.send("orders.place", ["source": "cart"], user: "ana")
        let order = try C.Order(json: placed.body)
        #expect(order.status == .confirmed && order.items.first?.lineTotal == 20.5 && order.semester == .null)
        #expect(order.json == placed.body && placed.body.object?["semester"] == .null, "semester is null, not absent")
        let cancelled = h.send("orders.cancel", ["order": .string(order.order)], user: "ana")
        #expect(try C.Order(json: cancelled.body).status == .cancelled)
        #expect(h.send("orders.place", ["source": "buy_now", "product": "p-2"], user: "ana").quadError?.status == 404)
        let events = try Outbox.since(db, after: 0, limit: 10).map { try Envelope.decode(try #require($0.encoded)) }
        #expect(events.map(\.type) == [C.placed.type, C.confirmed.type, C.cancelled.type, C.rejected.type])
        let retyped: [JSON] = try events.map { e in
            switch e.type {
            case C.placed.type, C.confirmed.type: try C.Placed(json: e.body).json
            case C.cancelled.type: try C.Cancelled(json: e.body).json
            default: try C.Rejected(json: e.body).json
            }
        }
        #expect(retyped == events.map(\.body))
        let confirmed = try C.Placed(json: events[1].body)
        #expect(confirmed.user == "ana" && confirmed.items.map(\.category) == ["Study"] && confirmed.returnDate == nil)
        #expect(events[1].body.object?["return_date"] == nil, "no return_date when buying")
        #expect(try C.Rejected(json: events[3].body).code == "not_found")
    }

    @Test func anOrderRecordsTheBuyersSemesterFromAccountsEvents() throws {
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 5]
        catalog.prices = ["p-1": (10, "Study")]
        let (h, _, db) = try ordersService(catalog)
        try Buyers.apply(db, event("accounts.user.registered", ["user": "ana", "name": "Ana", "semester": "5", "categories": ["Study"]]))
        let first = h.send("orders.place", ["source": "buy_now", "product": "p-1"], user: "ana")
        #expect(first.body["semester"] == "5")
        #expect(first.body["fee"] == 0.5 && first.body["total"] == 10.5)
        try Buyers.apply(db, event("accounts.user.updated", ["user": "ana", "categories": ["Tech"]]))
        #expect(try Buyers.semester(db, "ana") == "5", "an update without semester keeps it")
        try Buyers.apply(db, event("accounts.user.updated", ["user": "ana", "semester": 6]))
        #expect(h.send("orders.place", ["source": "buy_now", "product": "p-1"], user: "ana").body["semester"] == 6)
        #expect(h.send("orders.place", ["source": "buy_now", "product": "p-1"], user: "bo").body["semester"] == .null)
    }

    @Test func anUnansweredConfirmLeavesTheOrderOpenAndTheRecoveryFinishesIt() throws {
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 1]
        let (h, saga, db) = try ordersService(catalog, leaseMs: 100)
        // A catalog of an older build: the saga learns it and confirms apart.
        catalog.takesConfirm = false
        catalog.silent = ["catalog.stock.confirm"]
        let place = Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-1"])
        var asAna = place
        asAna.user = "ana"
        let first = h.handle(asAna)
        #expect(first.quadError?.status == 503)
        #expect(first.quadError?.message.contains("is pending") == true)
        #expect(try OrderRecord.load(db, place.id)?.status == .held)
        // The catalog is back; the lease runs out; the recovery confirms.
        catalog.silent = []
        usleep(150_000)
        try saga.recover()
        #expect(try OrderRecord.load(db, place.id)?.status == .confirmed)
        #expect(catalog.holds[place.id]?.status == "confirmed" && catalog.stock["p-1"] == 0)
        #expect(catalog.calls.prefix(3) == ["catalog.stock.hold", "catalog.stock.hold", "catalog.stock.confirm"],
                "refused with confirm, then held and confirmed apart: \(catalog.calls)")
        #expect(!saga.catalogConfirmsInHold)
        // A retry of the request gets the outcome.
        let retry = h.handle(asAna)
        #expect(retry.kind == .reply && retry.body["status"] == "confirmed")
        // Events: placed, then confirmed, once each.
        let types = try Outbox.since(db, after: 0, limit: 100).map(\.type)
        #expect(types == ["orders.placed", "orders.confirmed"])
    }

    /// A line the catalog's hold did not price is a refusal, never a line
    /// at 0: the order is rejected with the reason and the stock released.
    @Test(arguments: ["no price", "no line"])
    func anOrderLineTheHoldDidNotPriceIsRefused(_ how: String) throws {
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 3, "p-2": 3]
        catalog.prices = ["p-1": (10, "Study"), "p-2": (20, "Tech")]
        if how == "no price" { catalog.unpriced = ["p-2"] } else { catalog.dropped = ["p-2"] }
        let (h, _, db) = try ordersService(catalog)
        #expect(h.send("orders.cart.add", ["product": "p-1", "quantity": 1], user: "ana").kind == .reply)
        #expect(h.send("orders.cart.add", ["product": "p-2", "quantity": 2], user: "ana").kind == .reply)
        let placed = h.send("orders.place", ["source": "cart"], user: "ana")
        let error = try #require(placed.quadError)
        #expect(error.status == 409 && error.message.contains("did not price 'p-2'"), "\(error)")
        #expect(placed.body["total"] == nil)
        let order = try #require(try OrderRecord.load(db, placed.corr ?? ""))
        #expect(order.status == .rejected)
        #expect(catalog.holds[order.id]?.status == "released" && catalog.stock == ["p-1": 3, "p-2": 3])
        #expect(try Outbox.since(db, after: 0, limit: 10).map(\.type) == ["orders.rejected"])
        // The retry gets the same refusal.
        var retry = Envelope.request("orders.place", body: ["source": "cart"], id: order.id)
        retry.user = "ana"
        #expect(h.handle(retry).quadError?.message == error.message)
    }

    @Test func anOrderTheCatalogNeverAnsweredIsReleasedAndRejectedAfterTheDeadline() throws {
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 3]
        let (h, saga, db) = try ordersService(catalog, leaseMs: 0)
        catalog.silent = ["catalog.stock.hold"]
        let placed = h.send("orders.place", ["source": "buy_now", "product": "p-1"], user: "ana")
        #expect(placed.quadError?.status == 503)
        catalog.silent = []
        // Past the deadline the recovery releases instead of resuming.
        try db.execute("UPDATE orders SET created_ms = created_ms - 3600000")
        try saga.recover()
        let order = try #require(try OrderRecord.load(db, placed.corr ?? ""))
        #expect(order.status == .rejected && order.reason?.contains("could not be placed within 60 s") == true)
        #expect(catalog.calls.suffix(1) == ["catalog.stock.release"] && catalog.stock["p-1"] == 3)
        #expect(try Outbox.since(db, after: 0, limit: 10).map(\.type) == ["orders.rejected"])
    }
}
