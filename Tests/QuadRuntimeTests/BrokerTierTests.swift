import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// Two brokers, both serving (issue 14): real brokers and workers as
/// processes, on `ipc://` endpoints of their own.
@Suite("Broker tier", .serialized)
struct BrokerTierTests {
    @Test func aWorkerServesEveryBrokerAndComesBackToOneThatRestarts() throws {
        let stack = try TestStack(name: "tier-worker")
        #expect(try stack.startTwoBrokersWithTally())

        // Each broker alone hands the one worker requests.
        let viaFirst = try stack.client(broker: 0)
        let viaSecond = try stack.client(broker: 1)
        #expect(try viaFirst.request("tally.add", ["key": "k", "n": 1])["by"]?.string == "tally/1")
        #expect(try viaSecond.request("tally.add", ["key": "k", "n": 2])["by"]?.string == "tally/1")
        #expect(try viaFirst.request("tally.get", ["key": "k"])["total"]?.int == 3)

        // The second broker dies: the first goes on serving meanwhile.
        stack.kill(TestStack.brokerName(1))
        for n in 1...5 { _ = try viaFirst.request("tally.add", ["key": "k", "n": .int(Int64(n))], timeoutMs: 2000) }
        // It comes back (no state: the worker must say READY again).
        try stack.startBroker(index: 1)
        #expect(try stack.waitForWorkers("tally", count: 1, timeoutMs: 30_000, broker: 1))
        let again = try stack.client(broker: 1)
        #expect(try again.request("tally.get", ["key": "k"], timeoutMs: 5000)["total"]?.int == 18)
        // The worker said why it connected again: the restarted broker did
        // not know it, or it had been silent.
        let log = stack.log("tally/1")
        #expect(log.contains("broker \(stack.endpoints(broker: 1).backend) does not know this worker")
                || log.contains("broker \(stack.endpoints(broker: 1).backend) silent"))
    }

    @Test func aWorkerPublishesEachEventToEveryBroker() throws {
        let stack = try TestStack(name: "tier-events")
        #expect(try stack.startTwoBrokersWithTally())

        // A subscriber on each broker's events-out alone.
        let context = ZMQContext()
        var subs: [Socket] = []
        for index in 0..<2 {
            let sub = try context.socket(.sub)
            try sub.connect(stack.endpoints(broker: index).eventsOut)
            try sub.subscribe("tally/")
            subs.append(sub)
        }
        // Subscriptions travel to the worker's PUB through each broker: add
        // until both hear one, then count what each hears of 20 more.
        let client = try stack.client(broker: 0)
        var heard = [Set<Int64>(), Set<Int64>()]
        func drain() {
            for (k, sub) in subs.enumerated() {
                while let frames = try? sub.receive(dontWait: true), frames.count == 2 {
                    if let e = try? Envelope.decode(frames[1]), e.type == "tally.added", let seq = e.seq { heard[k].insert(seq) }
                }
            }
        }
        #expect(eventually {
            _ = try? client.request("tally.add", ["key": "warm", "n": 1])
            drain()
            return !heard[0].isEmpty && !heard[1].isEmpty
        })
        let first = (heard[0].max() ?? 0) + 1
        for n in 1...20 { _ = try client.request("tally.add", ["key": "e", "n": .int(Int64(n))]) }
        let wanted = Set(first..<(first + 20))
        #expect(eventually { drain(); return wanted.isSubset(of: heard[0]) && wanted.isSubset(of: heard[1]) },
                "first broker heard \(heard[0].intersection(wanted).count), second \(heard[1].intersection(wanted).count) of 20")
    }

    @Test func aFollowerOfEveryBrokerAppliesEachEventOnceAndHearsThroughTheOneLeft() throws {
        let stack = try TestStack(name: "tier-feed")
        try stack.startBroker(index: 0)
        try stack.startBroker(index: 1)
        try stack.startWorker("quad-tally", instance: "tally/1", brokers: 2)
        try stack.startWorker("quad-tally", instance: "follower/1", extra: ["--mirror", "tally"],
                              environment: ["QUAD_TALLY_NAME": "follower"], brokers: 2)
        #expect(try stack.waitForWorkers("tally", count: 1, broker: 0))
        #expect(try stack.waitForWorkers("follower", count: 1, broker: 1))
        let client = try stack.client(broker: 1)
        for _ in 1...30 { _ = try client.request("tally.add", ["key": "m", "n": 1]) }
        // Each event came twice (once per broker) and counts once.
        #expect(eventually {
            (try? client.request("follower.mirror", ["key": "m"]))?["events"]?.int == 30
        })
        // The broker the client used dies; the follower hears the next ones
        // through the other.
        stack.kill(TestStack.brokerName(1))
        let left = try stack.client(broker: 0)
        for _ in 1...10 { _ = try left.request("tally.add", ["key": "m", "n": 1], timeoutMs: 2000) }
        #expect(eventually {
            (try? left.request("follower.mirror", ["key": "m"], timeoutMs: 1000))?["events"]?.int == 40
        })
        #expect(try left.request("follower.mirror", ["key": "m"])["total"]?.int == 40)
    }

    @Test func aCallToAnotherServiceWaitingOnAKilledBrokerGoesThroughTheOtherAtOnce() throws {
        let stack = try TestStack(name: "tier-calls")
        try stack.startBroker(index: 0)
        try stack.startBroker(index: 1)
        try stack.startWorker("quad-tally", instance: "tally/1", brokers: 2)
        try stack.startWorker("quad-tally", instance: "sink/1", environment: ["QUAD_TALLY_NAME": "sink"], brokers: 2)
        for (service, broker) in [("tally", 0), ("tally", 1), ("sink", 0), ("sink", 1)] {
            #expect(try stack.waitForWorkers(service, count: 1, broker: broker))
        }
        // The client talks to the second broker only; tally's calls to sink
        // go through the first (the first of its list) until it dies.
        let client = try stack.client(broker: 1)
        var ids: [String] = []
        for _ in 1...10 {
            if let id = try client.request("tally.forward", ["to": "sink", "key": "f", "n": 1])["id"]?.string { ids.append(id) }
        }
        // A call caught on the first broker: sink is paused with it in hand
        // (the broker shows sink busy), then that broker dies.
        stack.kill("sink/1", signal: SIGSTOP)
        let traffic = Traffic()
        let frontend = stack.endpoints(broker: 1).frontend
        let key = stack.brokerKey
        let thread = Thread {
            guard let c = try? Client(endpoint: frontend, source: "tier", serverKey: key) else { return }
            // Ten seconds and one attempt: the answer must not wait out
            // tally's own attempt (2.5 s) on the dead broker.
            let reply = try? c.request("tally.forward", ["to": "sink", "key": "f", "n": 1], timeoutMs: 10_000, attempts: 1)
            traffic.lock.withLock {
                if let id = reply?["id"]?.string { traffic.acknowledged.append(id) } else { traffic.failures.append("no answer") }
                traffic.done = true
            }
        }
        thread.start()
        let first = try stack.client(broker: 0)
        #expect(eventually {
            let services = (try? first.request("sys.services", timeoutMs: 500, attempts: 1))?["services"]?.array ?? []
            let sink = services.first { $0["name"]?.string == "sink" }?["workers"]?.array ?? []
            return sink.contains { $0["busy"]?.bool == true }
        }, "the call never reached sink through the first broker")
        stack.kill(TestStack.brokerName(0))
        let killed = Clock.monotonicMillis()
        stack.kill("sink/1", signal: SIGCONT)
        #expect(eventually(15_000) { traffic.lock.withLock { traffic.done } })
        let ms = Clock.monotonicMillis() - killed
        print("a call caught on a killed broker: answered \(ms) ms after the kill")
        #expect(ms < 2000, "answered \(ms) ms after the kill")
        let acknowledged = traffic.lock.withLock { traffic.acknowledged }
        #expect(acknowledged.count == 1)
        ids += acknowledged
        let state = try client.request("sink.get", ["key": "f"])
        let applied = state["applied"]?.array?.compactMap(\.string) ?? []
        #expect(applied.count == Set(applied).count && Set(applied) == Set(ids), "\(applied.count) applied, \(ids.count) acknowledged")
    }

    /// What a client thread saw: requests acknowledged, and the slowest.
    final class Traffic: @unchecked Sendable {
        let lock = NSLock()
        var acknowledged: [String] = []
        var failures: [String] = []
        var slowestMs: Int64 = 0
        var failovers = 0
        var done = false
        /// The frontend the client sends to next.
        var current = 0
        var count: Int { lock.withLock { acknowledged.count } }
    }

    @Test func aClientOfBothFrontendsIsAnsweredByTheOtherWhenItsBrokerIsKilled() throws {
        let stack = try TestStack(name: "tier-client")
        #expect(try stack.startTwoBrokersWithTally())
        let traffic = Traffic()
        let frontends = stack.endpoints(brokers: 2).frontend
        let key = stack.brokerKey
        let thread = Thread {
            guard let client = try? Client(endpoint: frontends, source: "tier", serverKey: key) else { return }
            for _ in 0..<300 {
                traffic.lock.withLock { traffic.current = client.current }
                let request = Envelope.request("tally.add", body: ["key": "kill", "n": 1])
                let started = Clock.monotonicMillis()
                // Ten seconds an attempt: a failover found by waiting out
                // a timeout would show as a request slower than that.
                do {
                    let reply = try client.call(request, timeoutMs: 10_000, attempts: 3)
                    let ms = Clock.monotonicMillis() - started
                    traffic.lock.withLock {
                        if reply.quadError == nil { traffic.acknowledged.append(request.id) } else { traffic.failures.append("\(reply.quadError!)") }
                        traffic.slowestMs = max(traffic.slowestMs, ms)
                    }
                } catch {
                    traffic.lock.withLock { traffic.failures.append("\(error)") }
                }
            }
            traffic.lock.withLock { traffic.failovers = client.failovers; traffic.done = true }
        }
        thread.start()
        // The broker the client talks to dies mid-traffic.
        #expect(eventually { traffic.count >= 50 })
        let used = traffic.lock.withLock { traffic.current }
        stack.kill(TestStack.brokerName(used))
        let atKill = traffic.count
        #expect(atKill < 300, "the traffic was over before the broker died")
        #expect(eventually(120_000) { traffic.lock.withLock { traffic.done } })
        let (acknowledged, failures, slowest, failovers) = traffic.lock.withLock {
            (traffic.acknowledged, traffic.failures, traffic.slowestMs, traffic.failovers)
        }
        #expect(failures.isEmpty, "\(failures.prefix(5))")
        #expect(acknowledged.count == 300)
        #expect(failovers >= 1)
        print("broker killed after \(atKill) of 300 acknowledged; slowest request \(slowest) ms; \(failovers) failovers")
        // Answered by the other within 2 s, not after the 10 s attempt.
        #expect(slowest < 2000, "slowest request took \(slowest) ms")
        // Every acknowledged request applied exactly once.
        let state = try stack.client(broker: 1 - used).request("tally.get", ["key": "kill"], timeoutMs: 5000)
        let applied = state["applied"]?.array?.compactMap(\.string) ?? []
        #expect(applied.count == Set(applied).count, "an id applied twice")
        #expect(Set(applied) == Set(acknowledged))
        #expect(state["total"]?.int == 300)
    }

    @Test func aClientFailsOverFromAStoppedBrokerAfterOneAttempt() throws {
        let stack = try TestStack(name: "tier-stop")
        #expect(try stack.startTwoBrokersWithTally())
        let client = try stack.client(brokers: 2)
        _ = try client.request("tally.add", ["key": "s", "n": 1])
        // A broker that stops answering without closing its connections
        // (paused: as a partition looks): the attempt times out, and the
        // same request goes to the other.
        let used = client.current
        stack.kill(TestStack.brokerName(used), signal: SIGSTOP)
        defer { stack.kill(TestStack.brokerName(used), signal: SIGCONT) }
        let request = Envelope.request("tally.add", body: ["key": "s", "n": 1])
        let started = Clock.monotonicMillis()
        let reply = try client.call(request, timeoutMs: 1000, attempts: 3)
        let ms = Clock.monotonicMillis() - started
        #expect(reply.quadError == nil && reply.body["total"]?.int == 2)
        #expect(ms < 1000 + 1500, "answered after \(ms) ms")
        #expect(client.failovers >= 1 && client.current == 1 - used)
        // The next goes straight to the one that answered.
        let next = Clock.monotonicMillis()
        _ = try client.request("tally.add", ["key": "s", "n": 1], timeoutMs: 1000, attempts: 1)
        #expect(Clock.monotonicMillis() - next < 900)
    }
}
