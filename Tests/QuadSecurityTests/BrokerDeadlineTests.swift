import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// A handler that runs past its request's deadline is not silently dropped
/// by the broker: the client is answered 504 at the deadline, naming the
/// service and the deadline, and the worker's late reply is dropped and
/// counted (`late_replies` in `sys.health`), the worker serving again.
@Suite("Broker deadlines in a worker", .serialized)
struct BrokerDeadlineTests {
    @Test func aRequestPastItsDeadlineInAWorkerIsAnswered504AndTheLateReplyDroppedAndCounted() throws {
        let stack = try TestStack(name: "late")
        // Heartbeats 1 s apart: a worker busy for 1.5 s is not taken for dead.
        try stack.startBroker(heartbeatMs: 1000)
        try stack.startWorker("quad-tally", instance: "tally/1", heartbeatMs: 1000)
        #expect(try stack.waitForWorkers("tally", count: 1, timeoutMs: 15_000))
        let key = try #require(stack.brokerKey)
        let context = ZMQContext()
        let peer = try RawPeer(context, stack.endpoints.frontend, serverKey: key)
        let slow = Envelope.request("tally.slow", body: ["ms": 1500], deadline: 400)
        let answer = try #require(try peer.call(slow, within: 30_000), "no answer at all")
        let error = try #require(answer.quadError, "the worker's late reply reached the client, not the broker's 504: \(answer.body)")
        #expect(error.status == 504 && error.code == .timeout && answer.src == "broker", "\(error)")
        #expect(error.message.contains("'tally'") && error.message.contains("400 ms"), "\(error)")
        // The reply comes after 1.5 s: dropped, counted.
        let service = try stack.internalClient()
        let until = Clock.monotonicMillis() + 30_000
        var late: Int64 = 0
        while late < 1, Clock.monotonicMillis() < until {
            late = try service.request("sys.health", timeoutMs: 5000)["late_replies"]?.int ?? 0
            if late < 1 { usleep(50_000) }
        }
        #expect(late == 1, "the late reply was not counted")
        #expect(peer.receive(within: 300) == nil, "a second answer reached the client")
        // The worker is idle again and serves the next request.
        #expect(try service.request("tally.whoami", timeoutMs: 5000)["by"]?.string == "tally/1")
        let services = try service.request("sys.services")["services"]?.array ?? []
        #expect(services.first { $0["name"]?.string == "tally" }?["timed_out"]?.int == 1)
    }

    /// The runtime's client retries the broker's 504 as it retried a
    /// request that got no answer before the broker sent one.
    @Test func theClientRetriesTheBrokers504() throws {
        let stack = try TestStack(name: "late-retry")
        try stack.startBroker(heartbeatMs: 1000)
        try stack.startWorker("quad-tally", instance: "tally/1", heartbeatMs: 1000)
        #expect(try stack.waitForWorkers("tally", count: 1, timeoutMs: 15_000))
        let service = try stack.internalClient()
        func requestsIn() throws -> Int64 { try service.request("sys.health", timeoutMs: 5000)["requests"]?.int ?? -1 }
        let before = try requestsIn()
        let answer = try stack.client().call(.request("tally.slow", body: ["ms": 600]), timeoutMs: 400, attempts: 2)
        #expect(answer.quadError?.status == 504 || answer.kind == .reply, "\(answer.body)")
        // Two attempts and the two sys.health questions.
        #expect(try requestsIn() - before == 3, "the 504 was not retried")
    }
}
