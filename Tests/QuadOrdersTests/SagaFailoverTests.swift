import Foundation
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// An order placed through one broker whose broker dies in the middle of
/// the saga (issue 14, point 1): two real brokers, real accounts, catalog
/// and orders workers as processes, each registered with both brokers.
/// The saga waits between the stock hold and its confirmation
/// (`--pause-after-hold-ms`); the broker the client sent `orders.place`
/// through is SIGKILLed in that window, the client sends the same id
/// through the other broker, and the worker that drives the order answers
/// the retry with the same outcome: one order, one unit of stock.
@Suite("A saga whose broker dies", .serialized)
struct SagaFailoverTests {
    final class Outcome: @unchecked Sendable {
        let lock = NSLock()
        var reply: Envelope?
        var failure: String?
        var ms: Int64 = 0
        var failovers = 0
        var used: Int?
        var done: Bool { lock.withLock { reply != nil || failure != nil } }
    }

    @Test func anOrderResentThroughTheOtherBrokerMidSagaIsPlacedOnce() throws {
        for name in ["accounts", "catalog", "orders"] {
            try #require(FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(name)"), "quad-\(name) is not built")
        }
        let stack = try TestStack(name: "saga-failover")
        try stack.startBroker(index: 0)
        try stack.startBroker(index: 1)
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"], brokers: 2)
        try stack.startWorker("quad-catalog", instance: "catalog/1", brokers: 2)
        try stack.startWorker("quad-orders", instance: "orders/1", extra: ["--pause-after-hold-ms", "4000"], brokers: 2)
        for service in ["accounts", "catalog", "orders"] {
            for b in 0..<2 { #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000, broker: b), "\(service) not on broker \(b)") }
        }

        let setup = try stack.client(brokers: 2)
        _ = try setup.request("accounts.register", ["email": "saga-failover@uni.edu", "password": "failover-pass-51c9", "name": "Saga Failover", "semester": 2],
                              timeoutMs: 8000, attempts: 1)
        let login = try setup.request("accounts.login", ["email": "saga-failover@uni.edu", "password": "failover-pass-51c9"], timeoutMs: 8000, attempts: 1)
        let token = try #require(login["token"]?.string)
        let listed = try setup.request("catalog.products.list", ["in_stock": true, "limit": 10], timeoutMs: 8000, attempts: 1)
        let product = try #require(listed["products"]?.array?.first { ($0["stock"]?.int ?? 0) >= 2 }?["id"]?.string)
        func stock() throws -> Int64? { try setup.request("catalog.product.get", ["id": .string(product)], timeoutMs: 5000)["stock"]?.int }
        let before = try #require(try stock())
        setup.token = token
        // Orders knows the product from catalog's events before it can sell it.
        #expect(try eventually {
            (try? setup.call(.request("orders.cart.add", body: ["product": .string(product), "quantity": 1]), timeoutMs: 3000, attempts: 1))?.kind == .reply
        })
        _ = try setup.request("orders.cart.clear", timeoutMs: 5000)

        // The order goes out through one broker, chosen by the client.
        let frontends = stack.endpoints(brokers: 2).frontend
        let key = stack.brokerKey
        let request = Envelope.request("orders.place", body: ["source": "buy_now", "product": .string(product), "quantity": 1])
        let outcome = Outcome()
        let thread = Thread {
            let started = Clock.monotonicMillis()
            do {
                let client = try Client(endpoint: frontends, source: "saga-failover", serverKey: key)
                client.token = token
                outcome.lock.withLock { outcome.used = client.current }
                let reply = try client.call(request, timeoutMs: 15_000, attempts: 3)
                outcome.lock.withLock { outcome.reply = reply; outcome.ms = Clock.monotonicMillis() - started; outcome.failovers = client.failovers }
            } catch {
                outcome.lock.withLock { outcome.failure = "\(error)" }
            }
        }
        thread.start()
        let used = try #require(eventually { outcome.lock.withLock { outcome.used != nil } } ? outcome.lock.withLock { outcome.used } : nil)
        // The catalog holds the unit; the saga waits 4 s before confirming.
        #expect(try eventually(15_000) { try stock() == before - 1 }, "the stock was never held")
        #expect(!outcome.done, "answered before the broker could die")
        let killedAt = Clock.monotonicMillis()
        stack.kill(TestStack.brokerName(used))
        #expect(eventually(60_000) { outcome.done })

        let (reply, failure, failovers) = outcome.lock.withLock { (outcome.reply, outcome.failure, outcome.failovers) }
        #expect(failure == nil, "\(failure ?? "")")
        let answer = try #require(reply)
        #expect(answer.quadError == nil, "\(answer.quadError.map { "\($0)" } ?? "")")
        #expect(answer.body["status"]?.string == "confirmed", "\(answer.body)")
        #expect(failovers >= 1, "the client never left the killed broker")
        print("broker \(used) killed mid-saga; answered through broker \(1 - used) \(Clock.monotonicMillis() - killedAt) ms after the kill")

        // One order, one unit: the retry joined the saga, it did not start another.
        let other = try stack.client(broker: 1 - used)
        other.token = token
        let mine = try other.request("orders.mine", timeoutMs: 5000)
        let orders = mine["orders"]?.array ?? []
        #expect(orders.count == 1, "\(orders.count) orders")
        #expect(orders.first?["id"]?.string == answer.body["id"]?.string)
        #expect(try stock() == before - 1)
        // The same id again is the stored answer, not a second order.
        let again = try other.call(request, timeoutMs: 5000, attempts: 1)
        #expect(again.body["id"]?.string == answer.body["id"]?.string)
        #expect(try other.request("orders.mine", timeoutMs: 5000)["orders"]?.array?.count == 1)
        #expect(try stock() == before - 1)
    }
}
