import Foundation
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadOrders
@testable import QuadRuntime

/// Answers that a deferred handler gives, collected by the test.
final class Delivered {
    var replies: [Envelope] = []
    func take(_ reply: Reply) { replies.append(reply.envelope) }
}

@Suite("Orders: the saga never holds the loop")
struct SagaOnTheLoopTests {
    /// The retry of an order still in flight on this worker starts no
    /// second saga: it waits for the first one's outcome, and both get it.
    @Test func aRetryWhileTheOrderIsInFlightGetsTheSameOutcomeFromOneSaga() throws {
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 2]
        catalog.prices = ["p-1": (10, "Study")]
        catalog.holdBack = true
        let (h, _, db) = try ordersService(catalog)
        let place = Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-1"], user: "ana")
        let delivered = Delivered()
        h.respondLater(place, deliver: delivered.take)
        #expect(delivered.replies.isEmpty, "answered before the catalog did: \(delivered.replies.map(\.body))")
        #expect(try OrderRecord.load(db, place.id)?.status == .pending)
        // The worker is free meanwhile: other requests are served.
        #expect(h.send("orders.cart.view", [:], user: "ana").kind == .reply)
        h.respondLater(place, deliver: delivered.take)
        #expect(delivered.replies.isEmpty)
        #expect(catalog.heldBack.map(\.0.type) == ["catalog.stock.hold"], "a second saga: \(catalog.heldBack.map(\.0.type))")
        catalog.answerHeldBack()  // the hold, confirmed in the same call
        #expect(try OrderRecord.load(db, place.id)?.status == .confirmed)
        #expect(delivered.replies.count == 2)
        #expect(delivered.replies.allSatisfy { $0.kind == .reply && $0.corr == place.id && $0.body["status"] == "confirmed" })
        #expect(delivered.replies.first?.body == delivered.replies.last?.body)
        #expect(catalog.calls == ["catalog.stock.hold"] && catalog.stock["p-1"] == 1)
        #expect(try Outbox.since(db, after: 0, limit: 10).map(\.type) == ["orders.placed", "orders.confirmed"])
        // The stored answer is the one a later retry gets.
        h.respondLater(place, deliver: delivered.take)
        #expect(delivered.replies.count == 3 && delivered.replies.last?.body == delivered.replies.first?.body)
    }

    /// A client whose deadline passes before the catalog answers gets 503
    /// "pending" at its deadline; the saga goes on and stores the outcome.
    @Test func aPlaceStillWaitingAtItsDeadlineIsAnswered503AndTheSagaGoesOn() throws {
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 1]
        catalog.holdBack = true
        let (h, _, db) = try ordersService(catalog)
        let place = Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-1"], deadline: 2000, user: "ana")
        let delivered = Delivered()
        h.respondLater(place, deliver: delivered.take)
        let (waitMs, deadline) = try #require(catalog.timers.first)
        #expect(waitMs < 2000 && waitMs >= 1500, "waits \(waitMs) ms of a 2000 ms deadline")
        deadline()
        let error = try #require(delivered.replies.first?.quadError)
        #expect(error.status == 503 && error.message.contains("retry with the same id"), "\(error)")
        catalog.answerHeldBack()  // the hold, confirmed in the same call
        #expect(catalog.heldBack.isEmpty, "a second call to the catalog: \(catalog.heldBack.map(\.0.type))")
        #expect(try OrderRecord.load(db, place.id)?.status == .confirmed)
        #expect(delivered.replies.count == 1, "a second answer to one request")
        h.respondLater(place, deliver: delivered.take)
        #expect(delivered.replies.last?.body["status"] == "confirmed")
    }
}

/// The worker's loop with real processes: a catalog paused with SIGSTOP
/// does not stop the orders worker that waits on it.
@Suite("Orders: one worker keeps serving while the catalog is paused", .serialized)
struct PausedCatalogTests {
    /// The one orders worker's pid, from `sys.services`.
    static func ordersPids(_ market: Market) -> [Int64] {
        let reply = market.call("sys.services", timeoutMs: 2000, attempts: 1)
        let orders = reply.body["services"]?.array?.first { $0["name"] == "orders" }
        return (orders?["workers"]?.array ?? []).compactMap { $0["pid"]?.int }
    }

    static func confirmedEvents(_ market: Market, _ id: String) throws -> Int {
        let events = try market.ok("orders.events.since", ["after": 0, "limit": 1000])["events"]?.array ?? []
        return events.filter { $0["type"] == "orders.confirmed" && $0["body"]?["order"] == .string(id) }.count
    }

    @Test func theOrdersWorkerAnswersTheCartWhileAPlaceWaitsOnAPausedCatalog() throws {
        let market = try Market("paused", extra: ["--catalog-timeout-ms", "4000"])
        try market.setStock("p-0006", 3)
        _ = try market.ok("orders.cart.add", ["product": "p-0007", "quantity": 2], user: "bo")
        let pids = Self.ordersPids(market)
        try #require(pids.count == 1)
        let catalog = try #require(market.stack.process("catalog/1"))
        let id = MessageID.make()
        let placed = Replies()
        let done = DispatchSemaphore(value: 0)
        kill(catalog.processIdentifier, SIGSTOP)
        defer { kill(catalog.processIdentifier, SIGCONT) }
        Thread {
            let own = try? market.stack.internalClient()
            placed.add("ana", market.call("orders.place", buyNow("p-0006"), user: "ana", id: id, timeoutMs: 20_000, attempts: 1, on: own))
            done.signal()
        }.start()
        // The order is recorded and its hold sent; the worker goes on.
        #expect(market.eventually { market.call("orders.get", ["order": .string(id)], user: "ana", timeoutMs: 2000, attempts: 1).body["status"] == "pending" })
        // Past three heartbeat intervals (1 s each) of the broker's liveness:
        // every cart view is answered by the same worker, still registered.
        let until = Clock.monotonicMillis() + 3500
        var served = 0
        while Clock.monotonicMillis() < until {
            let started = Clock.monotonicMillis()
            let view = market.call("orders.cart.view", [:], user: "bo", timeoutMs: 2000, attempts: 1)
            #expect(view.kind == .reply && view.body["lines"]?.array?.first?["quantity"] == 2, "cart view: \(view.body.text)")
            #expect(Clock.monotonicMillis() - started < 2000)
            served += 1
            usleep(100_000)  // pacing, not waiting for anything
        }
        #expect(served >= 5)
        #expect(placed.lock.withLock { placed.all.isEmpty }, "the place was answered while the catalog was paused")
        #expect(Self.ordersPids(market) == pids, "the orders worker was dropped by the broker or replaced")
        kill(catalog.processIdentifier, SIGCONT)
        #expect(done.wait(timeout: .now() + 30) == .success)
        let reply = try #require(placed.lock.withLock { placed.all.first?.reply })
        #expect(reply.kind == .reply && reply.body["status"] == "confirmed" && reply.body["order"] == .string(id), "\(reply.body.text)")
        #expect(try market.stock("p-0006") == 2)
        #expect(try market.ok("orders.mine", [:], user: "ana")["total"] == 1)
        #expect(try Self.confirmedEvents(market, id) == 1)
    }

    @Test func aPlaceTheCatalogNeverAnswersGets503WithinItsDeadlineAndItsRetryConfirmsOnce() throws {
        let market = try Market("silent", extra: ["--catalog-timeout-ms", "2000", "--saga-lease-ms", "500", "--recover-every-ms", "200"])
        try market.setStock("p-0008", 3)
        let catalog = try #require(market.stack.process("catalog/1"))
        let id = MessageID.make()
        kill(catalog.processIdentifier, SIGSTOP)
        defer { kill(catalog.processIdentifier, SIGCONT) }
        // Two attempts of 2 s at the catalog are longer than this client waits.
        let started = Clock.monotonicMillis()
        let first = market.call("orders.place", buyNow("p-0008"), user: "ana", id: id, timeoutMs: 3000, attempts: 1)
        let took = Clock.monotonicMillis() - started
        let error = try #require(first.quadError)
        #expect(first.src == "orders/1", "not the worker's answer (a client-side timeout?): \(first.body.text) after \(took) ms")
        #expect(error.status == 503 && error.message.contains("retry with the same id"), "\(error)")
        #expect(took < 3000, "answered after \(took) ms, past the 3000 ms deadline")
        #expect(market.call("orders.cart.view", [:], user: "ana", timeoutMs: 2000, attempts: 1).kind == .reply)
        kill(catalog.processIdentifier, SIGCONT)
        var last = first
        #expect(market.eventually(30_000) {
            last = market.call("orders.place", buyNow("p-0008"), user: "ana", id: id, timeoutMs: 5000, attempts: 1)
            return last.kind == .reply
        }, "the retry never confirmed: \(last.body.text)")
        #expect(last.body["status"] == "confirmed" && last.body["order"] == .string(id))
        #expect(try market.stock("p-0008") == 2)
        #expect(try market.ok("orders.mine", [:], user: "ana")["total"] == 1)
        #expect(try Self.confirmedEvents(market, id) == 1)
        let again = market.call("orders.place", buyNow("p-0008"), user: "ana", id: id)
        #expect(again.body == last.body)
    }
}
