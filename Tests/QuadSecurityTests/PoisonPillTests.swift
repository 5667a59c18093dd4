import Foundation
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// A request whose workers keep dying (or hanging) while they hold it is a
/// poison pill: given to the next worker each time, one bad body would take
/// down every worker of its service in turn. The broker gives a request to
/// at most `max_deliveries` workers that die holding it, then answers 500,
/// and answers a retry of it (same id) the same way.
@Suite("Poison pills", .serialized)
struct PoisonPillTests {
    @Test func aRequestThatTakesDownItsWorkersIsAnswered500AfterMaxDeliveries() throws {
        let stack = try TestStack(name: "poison")
        try stack.startBroker(extra: ["--max-deliveries", "3"])
        for n in 1...4 { try stack.startWorker("quad-tally", instance: "tally/\(n)") }
        #expect(try stack.waitForWorkers("tally", count: 4))
        let client = try stack.client()
        // A handler that blocks its worker's loop past 3 heartbeats (200 ms
        // each here) looks to the broker like a worker that died.
        let pill = Envelope.request("tally.slow", body: ["ms": 5000])
        let started = Clock.monotonicMillis()
        let answer = try client.call(pill, timeoutMs: 15_000, attempts: 1)
        let error = try #require(answer.quadError, "\(answer.body)")
        #expect(error.status == 500 && error.message.contains("max_deliveries=3") && answer.src == "broker", "\(error)")
        #expect(Clock.monotonicMillis() - started < 5000, "answered only after a worker finished")
        // The fourth worker never got it; a retry under the same id is refused at once.
        let again = try client.call(pill, timeoutMs: 2000, attempts: 1)
        #expect(again.quadError?.message.contains("max_deliveries") == true)
        #expect(eventually { stack.log("broker").contains("not given to another (max_deliveries=3)") })
        // Other requests are served, and the workers come back.
        #expect(try client.request("tally.whoami", timeoutMs: 3000)["by"]?.string != nil)
        #expect(try stack.waitForWorkers("tally", count: 4, timeoutMs: 15_000))
    }
}
