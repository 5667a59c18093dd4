import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker and the runtime, as real processes on ipc:// endpoints.
@Suite("Broker and workers", .serialized)
struct BrokerTests {
    func stackWithTally(workers: Int) throws -> TestStack {
        let stack = try TestStack(name: "broker")
        try stack.startBroker()
        for n in 1...max(1, workers) where workers > 0 {
            try stack.startWorker("quad-tally", instance: "tally/\(n)")
        }
        if workers > 0 { #expect(try stack.waitForWorkers("tally", count: workers)) }
        return stack
    }

    @Test func balancesRequestsOverTwoWorkers() throws {
        let stack = try stackWithTally(workers: 2)
        let client = try stack.client()
        var by: [String: Int] = [:]
        for _ in 0..<40 { by[try client.request("tally.whoami")["by"]?.string ?? "?", default: 0] += 1 }
        #expect(Set(by.keys) == ["tally/1", "tally/2"])
        #expect(by.values.allSatisfy { $0 >= 10 }, "uneven: \(by)")
    }

    @Test func leastRecentlyUsedIdleWorkerTakesTheNextRequest() throws {
        let stack = try stackWithTally(workers: 2)
        // Two slow requests at once must run on both workers side by side.
        let b = try stack.client()
        let start = Clock.monotonicMillis()
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = try? stack.client().call(.request("tally.slow", body: ["ms": 600]), timeoutMs: 5000, attempts: 1)
            done.signal()
        }.start()
        let second = try b.call(.request("tally.slow", body: ["ms": 600]), timeoutMs: 5000, attempts: 1)
        done.wait()
        #expect(second.kind == .reply)
        #expect(Clock.monotonicMillis() - start < 1150, "two slow requests were serialized on one worker")
    }

    @Test func aKilledWorkerIsDroppedAndRequestsGoToTheOther() throws {
        let stack = try stackWithTally(workers: 2)
        stack.kill("tally/1")
        #expect(try stack.waitForWorkers("tally", count: 1, timeoutMs: 3000), "dead worker not dropped after 3 missed heartbeats")
        let client = try stack.client()
        for _ in 0..<20 { #expect(try client.request("tally.whoami", timeoutMs: 2000)["by"]?.string == "tally/2") }
    }

    @Test func aServiceThatLostItsWorkersGets503AtTheDeadline() throws {
        let stack = try stackWithTally(workers: 1)
        stack.kill("tally/1")
        #expect(try stack.waitForWorkers("tally", count: 0, timeoutMs: 5000))
        let client = try stack.client()
        let start = Clock.monotonicMillis()
        let reply = try client.call(.request("tally.whoami"), timeoutMs: 400, attempts: 1)
        let elapsed = Clock.monotonicMillis() - start
        let error = try #require(reply.quadError)
        #expect(error.status == 503 && error.code == .unavailable)
        #expect(error.message.contains("no live worker of service 'tally'"))
        #expect(elapsed >= 400 && elapsed < 1500, "answered after \(elapsed) ms")
    }

    @Test func aRequestWaitsForAServiceDuringTheStartUpGraceAndGets404After() throws {
        let stack = try TestStack(name: "grace")
        try stack.startBroker(extra: ["--service-grace-ms", "2000"])
        // Sent before tally's first worker is up: it waits for it.
        let early = DispatchSemaphore(value: 0)
        let got = NSLock()
        nonisolated(unsafe) var by: String?
        Thread {
            let answer = try? stack.client().request("tally.whoami", timeoutMs: 4000, attempts: 1)
            got.withLock { by = answer?["by"]?.string }
            early.signal()
        }.start()
        usleep(300_000)
        try stack.startWorker("quad-tally", instance: "tally/1")
        early.wait()
        #expect(got.withLock { by } == "tally/1")
        // After the grace, a service that never registered is answered at once.
        let client = try stack.client()
        var answer = try client.call(.request("nobody.here"), timeoutMs: 3000, attempts: 1)
        while answer.quadError?.status == 503 { answer = try client.call(.request("nobody.here"), timeoutMs: 3000, attempts: 1) }
        let start = Clock.monotonicMillis()
        answer = try client.call(.request("nobody.here"), timeoutMs: 3000, attempts: 1)
        let error = try #require(answer.quadError)
        #expect(error.status == 404 && error.message.contains("no service named nobody"), "\(error)")
        #expect(Clock.monotonicMillis() - start < 1000)
        let names = try stack.internalClient().request("sys.services")["services"]?.array?.compactMap { $0["name"]?.string }
        #expect(names == ["tally"])
    }

    @Test func aRepeatedMutationIDHasOneEffectAndTheSameReply() throws {
        let stack = try stackWithTally(workers: 2)
        let client = try stack.client()
        let request = Envelope.request("tally.add", body: ["key": "k", "n": 5])
        let first = try client.call(request)
        let second = try client.call(request)
        #expect(first.body == second.body)
        #expect(first.body["total"]?.int == 5)
        let state = try client.request("tally.get", ["key": "k"])
        #expect(state["total"]?.int == 5)
        #expect(state["adds"]?.int == 1)
        // A refusal is remembered too: the same id gets the same 400.
        let bad = Envelope.request("tally.add", body: ["key": "k", "n": 0])
        #expect(try client.call(bad).quadError?.code == .badRequest)
        #expect(try client.call(bad).quadError?.code == .badRequest)
    }

    @Test func aWorkerRestartedUnderLoadLosesNoRetriedRequest() throws {
        let stack = try stackWithTally(workers: 2)
        let client = try stack.client()
        var expected: [String] = []
        for n in 0..<300 {
            if n == 100 { stack.kill("tally/1") }
            if n == 150 { try stack.startWorker("quad-tally", instance: "tally/3") }
            if n == 200 { stack.kill("tally/2") }
            let request = Envelope.request("tally.add", body: ["key": "load", "n": 1])
            let reply = try client.call(request, timeoutMs: 1500, attempts: 6)
            #expect(reply.kind == .reply, "request \(n): \(reply.body)")
            expected.append(request.id)
        }
        let state = try client.request("tally.get", ["key": "load"], timeoutMs: 3000)
        #expect(state["total"]?.int == 300)
        let applied = state["applied"]?.array?.compactMap(\.string) ?? []
        #expect(applied == expected, "each request applied once, in order")
    }

    @Test func theOutboxPublishesEveryEventOnceInSeqOrderAndLateSubscribersCatchUp() throws {
        let stack = try stackWithTally(workers: 2)
        let context = ZMQContext()
        let sub = try context.socket(.sub)
        try sub.connect(stack.endpoints.eventsOut)
        try sub.subscribe("tally/")
        usleep(300_000)  // let the subscription reach the publishers
        let client = try stack.client()
        for n in 1...50 { _ = try client.request("tally.add", ["key": "ev", "n": .int(Int64(n))]) }
        var seqs: [Int64] = []
        var poller = Poller()
        poller.add(sub)
        let until = Clock.monotonicMillis() + 5000
        while seqs.count < 50 && Clock.monotonicMillis() < until {
            guard try poller.poll(timeoutMs: 100)[0] else { continue }
            while let frames = try sub.receive(dontWait: true) {
                let e = try Envelope.decode(frames[1])
                #expect(e.kind == .event && e.type == "tally.added" && e.src == "tally")
                seqs.append(e.seq ?? -1)
            }
        }
        // Every event once. Two workers relay the one outbox, each through
        // its own PUB connection, so the broker's XSUB may interleave their
        // pages: a subscriber gets each seq once but not always in order,
        // and applies them in order itself (EventFeed: a gap waits for its
        // event or a catch-up; FeedBatchTests).
        #expect(seqs.sorted() == Array(1...50) && Set(seqs).count == 50, "\(seqs)")
        // A subscriber that was not there asks for what it missed (a
        // service's request: the public frontend refuses it).
        let missed = try stack.internalClient().request("tally.events.since", ["after": 40, "limit": 100])
        let events = try (missed["events"]?.array ?? []).map { try Envelope.decode($0) }
        #expect(events.map { $0.seq } == Array(41...50))
        #expect(events.map { $0.body["n"]?.int } == Array(41...50))
        #expect(missed["last"]?.int == 50)
    }

    @Test func malformedTrafficGetsErrorsAndTheBrokerKeepsServing() throws {
        let stack = try stackWithTally(workers: 1)
        let context = ZMQContext()
        let raw = try context.socket(.dealer)
        try raw.setCurveClient(serverKey: try #require(stack.brokerKey))
        try raw.connect(stack.endpoints.frontend)
        try raw.setReceiveTimeout(2000)
        func mdp(_ envelope: [UInt8]) -> [[UInt8]] { Majordomo.request(service: "tally", envelope) }
        let cases: [([[UInt8]], String)] = [
            (mdp([0xFF, 0xFE, 0x00]), "bad_request"),
            (mdp(Array("not json".utf8)), "bad_request"),
            (mdp(Array(#"{"v":1,"id":"m1","kind":"request"}"#.utf8)), "bad_request"),
            (mdp(Array(#"{"v":3,"id":"m2","type":"tally.get","kind":"request"}"#.utf8)), "bad_request"),
            (mdp(Array(#"{"v":1,"id":"m3","type":"tally.get","kind":"reply"}"#.utf8)), "bad_request"),
            ([[], []], "bad_request"),
            ([Envelope.request("tally.get").encoded()], "bad_request"),
            (mdp(Envelope.request("tally.get", body: ["pad": .string(String(repeating: "x", count: 1_200_000))]).encoded()), "too_large"),
        ]
        for (frames, code) in cases {
            try raw.send(frames)
            let reply = try #require(try raw.receive(), "no reply to a malformed message")
            let e = try Envelope.decode(reply.last ?? [])
            #expect(e.kind == .error)
            #expect(e.quadError?.code.wire == code, "\(e.body)")
        }
        // The worker gets a bad body and answers 400 by name.
        let client = try stack.client()
        let reply = try client.call(.request("tally.add", body: ["key": 5]))
        #expect(reply.quadError?.message == "body.key must be a string of 1 to 64 characters")
        #expect(try client.request("tally.whoami")["by"]?.string == "tally/1")
    }

    @Test func sigtermFinishesInFlightWorkAndExitsZero() throws {
        let stack = try stackWithTally(workers: 1)
        let client = try stack.client()
        let request = Envelope.request("tally.slow", body: ["ms": 800])
        let worker = try #require(stack.process("tally/1"))
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { kill(worker.processIdentifier, SIGTERM) }
        let reply = try client.call(request, timeoutMs: 5000, attempts: 1)
        #expect(reply.kind == .reply)
        worker.waitUntilExit()
        #expect(worker.terminationStatus == 0)
        #expect(try stack.waitForWorkers("tally", count: 0, timeoutMs: 2000))
    }

    @Test func sysServicesListsWorkersAndQueueDepth() throws {
        let stack = try stackWithTally(workers: 2)
        // Instance names and pids are for services and admins.
        let reply = try stack.internalClient().request("sys.services")
        let tally = try #require(reply["services"]?.array?.first { $0["name"]?.string == "tally" })
        #expect(tally["queue"]?.int == 0)
        #expect(Set(tally["workers"]?.array?.compactMap { $0["instance"]?.string } ?? []) == ["tally/1", "tally/2"])
        let health = try stack.client().request("tally.sys.health")
        #expect(health["status"]?.string == "ok")
        let metrics = try stack.client().request("tally.sys.metrics")
        #expect(metrics["latency_us"]?["p99"]?.int != nil)
    }
}

@Suite("Event feeds", .serialized)
struct EventFeedTests {
    @Test func aFollowerAppliesEveryEventOnceAcrossItsOwnCrash() throws {
        let stack = try TestStack(name: "feed")
        try stack.startBroker()
        try stack.startWorker("quad-tally", instance: "tally/1")
        let follower = ["QUAD_TALLY_NAME": "mirror"]
        try stack.startWorker("quad-tally", instance: "mirror/1", extra: ["--mirror", "tally"], environment: follower)
        #expect(try stack.waitForWorkers("tally", count: 1))
        #expect(try stack.waitForWorkers("mirror", count: 1))
        let client = try stack.client()
        func mirrored() throws -> (Int64, Int64) {
            let r = try client.request("mirror.mirror", ["key": "k"])
            return (r["total"]?.int ?? -1, r["events"]?.int ?? -1)
        }
        func waitFor(_ want: (Int64, Int64)) throws -> (Int64, Int64) {
            let until = Clock.monotonicMillis() + 8000
            var got = try mirrored()
            while got != want && Clock.monotonicMillis() < until { usleep(100_000); got = try mirrored() }
            return got
        }
        for n in 1...20 { _ = try client.request("tally.add", ["key": "k", "n": .int(Int64(n))]) }
        #expect(try waitFor((210, 20)) == (210, 20))
        // The follower dies; events published meanwhile are missed by pub/sub.
        stack.kill("mirror/1")
        for _ in 1...15 { _ = try client.request("tally.add", ["key": "k", "n": 2]) }
        try stack.startWorker("quad-tally", instance: "mirror/2", extra: ["--mirror", "tally"], environment: follower)
        #expect(try stack.waitForWorkers("mirror", count: 1))
        #expect(try waitFor((240, 35)) == (240, 35), "catch-up after restart applies each missed event once")
        // A second follower worker on the same store applies nothing twice.
        try stack.startWorker("quad-tally", instance: "mirror/3", extra: ["--mirror", "tally"], environment: follower)
        #expect(try stack.waitForWorkers("mirror", count: 2))
        for _ in 1...10 { _ = try client.request("tally.add", ["key": "k", "n": 1]) }
        #expect(try waitFor((250, 45)) == (250, 45))
    }
}

@Suite("Trust boundary", .serialized)
struct TrustTests {
    @Test func onlyTheInternalFrontendMayCarryUserAndRole() throws {
        let stack = try TestStack(name: "trust")
        try stack.startBroker()
        try stack.startWorker("quad-tally", instance: "tally/1")
        #expect(try stack.waitForWorkers("tally", count: 1))
        var forged = Envelope.request("tally.sys.health")
        forged.user = "someone-else"
        forged.role = "admin"
        // From outside, the broker drops what a client claims.
        let outside = try stack.client().call(forged)
        #expect(outside.kind == .reply)
        // The worker logs the user it was given; only the internal call has one.
        var internalCall = Envelope.request("tally.sys.health")
        internalCall.user = "u-1"
        internalCall.role = "service"
        #expect(try stack.internalClient().call(internalCall).kind == .reply)
        usleep(200_000)
        let log = stack.log("tally/1")
        #expect(!log.contains("someone-else"))
        #expect(log.contains("\"user\":\"u-1\""))
    }
}
