import Foundation
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadOrders
@testable import QuadRuntime

/// An order's version is the seq of the last event published about it
/// (issue 30 pt 1), written in the transaction that changed it: it rises
/// with each move (placed and confirmed, cancelled, rejected, returned),
/// and every answer that gives the order (the action's reply, orders.get,
/// orders.mine, orders.rentals, a retry's stored answer) gives it.
@Suite("Orders: an order's version")
struct OrderVersionTests {
    /// Orders' handlers on a fresh store (SQLite, or a schema of its own on
    /// PostgreSQL), with the fake catalog behind the saga.
    static func service(_ catalog: FakeCatalog, postgres: Bool) throws -> (Handlers, Database) {
        let db = try TestStore.open("orders", migrations: Orders.migrations, postgres: postgres)
        var settings = OrderSaga.Settings(fees: try FeeSchedule(parsing: FeeSchedule.defaultText))
        (settings.retryMs, settings.callTimeoutMs) = (0, 50)
        let saga = OrderSaga(db: db, settings: settings, source: "orders/test", after: { ms, action in catalog.timers.append((ms, action)) }) { e, _, _, done in
            catalog.answer(e, done)
        }
        let h = Handlers(service: "orders", instance: "orders/test", db: db)
        Orders.register(h, db: db, saga: saga)
        return (h, db)
    }

    /// The seq of the last event of `type` the outbox holds about `order`.
    static func lastEvent(_ db: Database, _ type: String, order: String) throws -> Int64? {
        var (after, last): (Int64, Int64?) = (0, nil)
        while true {
            let page = try Outbox.since(db, after: after, limit: 500)
            guard let end = page.last?.seq else { return last }
            for e in page where e.type == type {
                if try Envelope.decode(try #require(e.encoded)).body["order"]?.string == order { last = e.seq }
            }
            after = end
        }
    }

    @Test(arguments: [false, true])
    func anOrdersVersionRisesWithEachMoveAndIsTheSeqOfItsLastEvent(postgres: Bool) throws {
        if postgres && ProcessInfo.processInfo.environment["QUAD_TEST_PG"] == nil { return }
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 5, "p-2": 1, "p-3": 0]
        catalog.prices = ["p-1": (30, "Study"), "p-2": (90, "Study")]
        catalog.holdBack = true
        let (h, db) = try Self.service(catalog, postgres: postgres)
        func version(_ order: String) throws -> Int64? { try h.call("orders.get", ["order": .string(order)], user: "ana")["version"]?.int }

        // Bought: pending (nothing published yet), then placed and confirmed.
        let place = Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-1"], user: "ana")
        let delivered = Delivered()
        h.respondLater(place, deliver: delivered.take)
        #expect(try version(place.id) == 0, "pending: no event about it yet")
        catalog.answerHeldBack()
        catalog.holdBack = false
        let placed = try #require(try Self.lastEvent(db, "orders.placed", order: place.id))
        let confirmed = try #require(try Self.lastEvent(db, "orders.confirmed", order: place.id))
        #expect(confirmed > placed)
        #expect(delivered.replies.first?.body["version"]?.int == confirmed, "the reply: \(delivered.replies.first?.body.text ?? "none")")
        #expect(try version(place.id) == confirmed)

        // Cancelled: the orders.cancelled event's seq, in the reply and in every read after it.
        let cancelled = try h.call("orders.cancel", ["order": .string(place.id)], user: "ana")
        let cancelledSeq = try #require(try Self.lastEvent(db, "orders.cancelled", order: place.id))
        #expect(cancelledSeq > confirmed && cancelled["version"]?.int == cancelledSeq, "\(cancelled.text)")
        #expect(try version(place.id) == cancelledSeq)
        let mine = try h.call("orders.mine", ["limit": 10], user: "ana")["orders"]?.array ?? []
        #expect(mine.first { $0["order"]?.string == place.id }?["version"]?.int == cancelledSeq)
        // A retry of the place answers what it answered (the order as confirmed, at that version).
        h.respondLater(place, deliver: delivered.take)
        #expect(delivered.replies.last?.body["version"]?.int == confirmed)

        // Rejected: the orders.rejected event's seq.
        let refused = Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-3"], user: "ana")
        h.respondLater(refused, deliver: delivered.take)
        let rejectedSeq = try #require(try Self.lastEvent(db, "orders.rejected", order: refused.id))
        #expect(try rejectedSeq > cancelledSeq && version(refused.id) == rejectedSeq)

        // Rented, then returned: the orders.returned event's seq, in orders.rentals too.
        let rent = Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-2", "mode": "rent", "days": 3], user: "ana")
        h.respondLater(rent, deliver: delivered.take)
        let rentConfirmed = try #require(try Self.lastEvent(db, "orders.confirmed", order: rent.id))
        #expect(delivered.replies.last?.body["version"]?.int == rentConfirmed && rentConfirmed > rejectedSeq)
        func rental() throws -> JSON? {
            try h.call("orders.rentals", ["limit": 10], user: "ana")["rentals"]?.array?.first { $0["order"]?["order"]?.string == rent.id }
        }
        #expect(try rental()?["order"]?["version"]?.int == rentConfirmed)
        let returned = try h.call("orders.return", ["order": .string(rent.id)], user: "ana")
        let returnedSeq = try #require(try Self.lastEvent(db, "orders.returned", order: rent.id))
        #expect(returnedSeq > rentConfirmed && returned["version"]?.int == returnedSeq, "\(returned.text)")
        #expect(try rental()?["order"]?["version"]?.int == returnedSeq)
        #expect(try version(rent.id) == returnedSeq)
        // A second return changes nothing, the version neither.
        #expect(try h.call("orders.return", ["order": .string(rent.id)], user: "ana")["version"]?.int == returnedSeq)
    }
}
