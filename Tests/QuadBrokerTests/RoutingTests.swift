import Testing
@testable import QuadBroker
import QuadWire

/// A ``Routing`` driven by hand: time is a number the test moves, workers
/// and clients are byte strings, and what the broker would do is the list of
/// actions each event returns.
struct Harness {
    var routing: Routing
    var now: Int64 = 0

    init(_ configure: (inout Routing.Limits) -> Void = { _ in }) {
        var limits = Routing.Limits()
        limits.heartbeatMs = 1000
        limits.liveness = 3
        limits.defaultDeadlineMs = 5000
        limits.serviceGraceMs = 5000
        configure(&limits)
        routing = Routing(limits: limits, now: 0)
    }

    @discardableResult
    mutating func handle(_ event: Routing.Event) -> [Routing.Action] { routing.handle(event, now: now) }

    /// Moves time to `t` and ticks.
    @discardableResult
    mutating func tick(at t: Int64) -> [Routing.Action] {
        now = t
        return handle(.tick)
    }

    @discardableResult
    mutating func ready(_ worker: String, _ service: String = "cat") -> [Routing.Action] {
        handle(.workerReady(identity: Array(worker.utf8), service: service, instance: "\(service)/\(worker)", pid: 1))
    }

    @discardableResult
    mutating func ask(_ id: String, type: String = "cat.get", from client: String = "c", owner: String = "conn:01",
                      deadline: Int64? = nil, size: Int = 10) -> [Routing.Action] {
        handle(.clientRequest(request(id, type: type, from: client, owner: owner, deadline: deadline, size: size)))
    }

    @discardableResult
    mutating func answer(_ worker: String, to client: String = "c", _ body: String = "ok") -> [Routing.Action] {
        handle(.workerReply(identity: Array(worker.utf8), client: Array(client.utf8), bytes: Array(body.utf8)))
    }

    @discardableResult
    mutating func answerLater(_ worker: String, to client: String = "c", id: String, _ body: String = "later") -> [Routing.Action] {
        handle(.workerReply(identity: Array(worker.utf8), client: Array(client.utf8), bytes: Array(body.utf8), corr: id))
    }

    @discardableResult
    mutating func deferral(_ worker: String, for client: String = "c") -> [Routing.Action] {
        handle(.workerDefer(identity: Array(worker.utf8), client: Array(client.utf8)))
    }

    func request(_ id: String, type: String = "cat.get", from client: String = "c", owner: String = "conn:01",
                 deadline: Int64? = nil, size: Int = 10) -> Routing.Request {
        Routing.Request(client: Array(client.utf8), id: id, type: type, bytes: Array(repeating: UInt8(ascii: "x"), count: size),
                        deadlineMs: deadline, owner: owner)
    }
}

/// What the actions say, in words a test can compare.
extension [Routing.Action] {
    /// (worker, request id) of each request sent to a worker.
    var sent: [(String, String)] {
        compactMap {
            if case let .sendToWorker(identity, request) = $0 { (String(decoding: identity, as: UTF8.self), request.id) } else { nil }
        }
    }
    var sentIDs: [String] { sent.map(\.1) }
    /// (code, corr) of each error answered to a client.
    var errors: [(code: QuadError.Code, corr: String?, error: QuadError)] {
        compactMap { if case let .replyError(_, error, corr, _) = $0 { (error.code, corr, error) } else { nil } }
    }
    var delivered: [String] {
        compactMap { if case let .sendToClient(_, bytes, _, _, _) = $0 { String(decoding: bytes, as: UTF8.self) } else { nil } }
    }
    var heartbeats: [String] {
        compactMap { if case let .sendHeartbeat(identity) = $0 { String(decoding: identity, as: UTF8.self) } else { nil } }
    }
    var disconnected: [String] {
        compactMap { if case let .disconnectWorker(identity) = $0 { String(decoding: identity, as: UTF8.self) } else { nil } }
    }
}

@Suite("Routing")
struct RoutingTests {
    // MARK: Deferral (DEFER, protos/README.md)

    @Test func aDeferredRequestFreesTheWorkerAndItsLaterAnswerGoesToItsClient() {
        var h = Harness()
        h.ready("A")
        h.ask("saga", from: "phone", deadline: 10_000)
        h.ask("next", from: "phone")
        // DEFER: A takes its next request at once; the first is still A's.
        let taken = h.deferral("A", for: "phone")
        #expect(taken.sent.map(\.0) == ["A"] && taken.sentIDs == ["next"])
        #expect(h.routing.workers[Array("A".utf8)]?.deferred.map(\.request.id) == ["saga"])
        // The same client has two requests at A: each answer goes by its id.
        let later = h.answerLater("A", to: "phone", id: "saga", "saga done")
        #expect(later.delivered == ["saga done"])
        #expect(later.contains { if case let .sendToClient(_, _, _, _, corr) = $0 { corr == "saga" } else { false } })
        #expect(h.routing.workers[Array("A".utf8)]?.current?.request.id == "next", "the deferred answer is not the one A holds")
        #expect(h.answerLater("A", to: "phone", id: "next", "next done").delivered == ["next done"])
        #expect(h.routing.workers[Array("A".utf8)]?.deferred.isEmpty == true)
        #expect(h.routing.workers[Array("A".utf8)]?.current == nil)
    }

    @Test func aDeferredRequestPastItsDeadlineIsAnswered504AndItsLateAnswerDropped() throws {
        var h = Harness { $0.maxDeadlineMs = 30_000 }
        h.ready("A")
        h.ask("saga", deadline: 2000)
        h.deferral("A")
        #expect(h.tick(at: 1999).errors.isEmpty)
        let timedOut = try #require(h.tick(at: 2000).errors.first)
        #expect(timedOut.code == .timeout && timedOut.corr == "saga" && timedOut.error.status == 504)
        #expect(h.tick(at: 2500).errors.isEmpty, "answered once")
        h.now = 3000
        let late = h.answerLater("A", id: "saga")
        #expect(late.delivered.isEmpty)
        #expect(h.routing.lateReplies == 1)
        // One whose answer never comes is forgotten max_deadline_ms after its 504.
        h.ask("gone", deadline: 1000)  // until 4000
        h.deferral("A")
        #expect(h.tick(at: 4000).errors.map(\.corr) == ["gone"])
        #expect(h.routing.workers[Array("A".utf8)]?.deferred.map(\.request.id) == ["gone"])
        h.now = 33_000
        h.handle(.workerHeartbeat(identity: Array("A".utf8)))
        h.tick(at: 33_999)
        #expect(h.routing.workers[Array("A".utf8)]?.deferred.map(\.request.id) == ["gone"])
        h.tick(at: 34_000)
        #expect(h.routing.workers[Array("A".utf8)]?.deferred.isEmpty == true)
    }

    @Test func aWorkerThatDiesHoldingDeferredRequestsHasThemRequeuedThenRefusedPastMaxDeliveries() throws {
        var h = Harness { $0.maxDeliveries = 2 }
        h.ready("A")
        h.ask("pill", deadline: 30_000)
        h.deferral("A")
        h.ask("held", deadline: 30_000)  // A's current
        // A goes silent: both come back to the queue, the next worker takes them.
        #expect(h.tick(at: 3001).errors.isEmpty)
        h.ready("B")
        let first = h.routing.workers[Array("B".utf8)]?.current?.request.id
        #expect(first == "pill" || first == "held")
        h.deferral("B")
        #expect(h.routing.workers[Array("B".utf8)]?.deferred.count == 1 && h.routing.workers[Array("B".utf8)]?.current != nil)
        // B dies too: both have now killed two workers; refused 500, not given to a third.
        let refused = h.tick(at: 3001 + 3001).errors
        #expect(Set(refused.map(\.corr)) == ["pill", "held"] && refused.allSatisfy { $0.code == .`internal` })
        #expect(refused.first?.error.message.contains("max_deliveries=2") == true)
        h.ready("C")
        #expect(h.routing.workers[Array("C".utf8)]?.current == nil)
    }

    @Test func aDeferOfARequestTheWorkerDoesNotHoldIsIgnored() {
        var h = Harness()
        h.ready("A")
        let stray = h.deferral("A", for: "nobody")
        #expect(stray.sent.isEmpty && stray.errors.isEmpty)
        #expect(h.routing.workers[Array("A".utf8)]?.deferred.isEmpty == true)
        #expect(h.deferral("Z").disconnected == ["Z"])
    }

    // MARK: Least recently used

    @Test func aRequestGoesToTheLeastRecentlyUsedIdleWorker() {
        var h = Harness()
        h.ready("A")
        h.ready("B")
        #expect(h.ask("r1").sent.map(\.0) == ["A"])
        #expect(h.answer("A").delivered == ["ok"])
        // A just worked; B has waited longer.
        #expect(h.ask("r2").sent.map(\.0) == ["B"])
        #expect(h.answer("B").delivered == ["ok"])
        #expect(h.ask("r3").sent.map(\.0) == ["A"])
    }

    @Test func requestsFromEachWorkerAreCountedAsServedAndRouted() {
        var h = Harness()
        h.ready("A")
        h.ask("r1")
        h.answer("A")
        #expect(h.routing.workers[Array("A".utf8)]?.served == 1)
        #expect(h.routing.services["cat"]?.routed == 1)
    }

    // MARK: Queue

    @Test func signedInUsersAndServicesAreServedBeforeAnonymousRequestsInOrder() {
        var h = Harness()
        h.ready("A")
        #expect(h.ask("busy").sentIDs == ["busy"])
        #expect(h.ask("anon1", owner: "key:abc").sent.isEmpty)
        h.ask("user1", owner: "user:u1")
        h.ask("anon2", owner: "conn:02")
        h.ask("svc1", owner: "service:orders")
        var order: [String] = []
        for _ in 0..<4 { order += h.answer("A").sentIDs }
        #expect(order == ["user1", "svc1", "anon1", "anon2"])
    }

    @Test func aRequestWaitsInTheQueueUntilAWorkerIsIdle() {
        var h = Harness()
        h.ready("A")
        h.ask("r1")
        #expect(h.ask("r2").sent.isEmpty)
        #expect(h.routing.services["cat"]?.queue.count == 1)
        let actions = h.answer("A")
        #expect(actions.delivered == ["ok"])
        #expect(actions.sentIDs == ["r2"])
    }

    @Test func maxQueueRefusesTheRequestPastIt() {
        var h = Harness { $0.maxQueue = 2 }
        h.ready("A")
        h.ask("busy")
        h.ask("q1")
        h.ask("q2")
        let refused = h.ask("q3").errors
        #expect(refused.map(\.code) == [.unavailable])
        #expect(refused.first?.error.status == 503)
        #expect(refused.first?.error.message.contains("max_queue=2") == true)
        #expect(h.routing.services["cat"]?.queue.count == 2)
    }

    @Test func aFullQueueOfAnonymousRequestsMakesRoomForASignedInUser() {
        var h = Harness { $0.maxQueue = 2; $0.maxQueueBytes = 1000 }
        h.ready("A")
        h.ask("busy")
        h.ask("anon1", owner: "key:abc")
        h.ask("anon2", owner: "key:abc")
        // The newest anonymous request gives its place, answered 503.
        let made = h.ask("user1", owner: "user:u1").errors
        #expect(made.map(\.code) == [.unavailable])
        #expect(made.first?.error.message.contains("max_queue=2") == true)
        #expect(h.routing.services["cat"]?.queue.items.map(\.request.id) == ["user1", "anon1"])
        // A full queue of first-class requests still refuses the next one.
        h.ask("user2", owner: "user:u2")
        #expect(h.routing.services["cat"]?.queue.items.map(\.request.id) == ["user1", "user2"])
        #expect(h.ask("user3", owner: "user:u3").errors.map(\.code) == [.unavailable])
        // And bytes: anonymous requests make room by size too.
        var b = Harness { $0.maxQueueBytes = 100 }
        b.ready("A")
        b.ask("busy")
        b.ask("anon1", owner: "key:abc", size: 50)
        b.ask("anon2", owner: "key:abc", size: 50)
        #expect(b.ask("user1", owner: "user:u1", size: 40).errors.count == 1)
        #expect(b.routing.services["cat"]?.queue.items.map(\.request.id) == ["user1", "anon1"])
        #expect(b.routing.services["cat"]?.queue.bytes == 90)
    }

    @Test func maxQueueBytesRefusesARequestThatWouldPassIt() {
        var h = Harness { $0.maxQueueBytes = 100 }
        h.ready("A")
        h.ask("busy", size: 90)  // in flight: no longer queued
        #expect(h.ask("q1", size: 60).errors.isEmpty)
        let refused = h.ask("q2", size: 41).errors
        #expect(refused.map(\.code) == [.unavailable])
        #expect(refused.first?.error.message.contains("max_queue_bytes=100") == true)
        #expect(h.ask("q3", size: 40).errors.isEmpty)
        #expect(h.routing.services["cat"]?.queue.bytes == 100)
    }

    @Test func maxMessageBytesRefusesARequestGrownByTheHeader() {
        var h = Harness { $0.maxMessageBytes = 64 }
        h.ready("A")
        let refused = h.ask("big", size: 65)
        #expect(refused.errors.map(\.code) == [.tooLarge])
        #expect(refused.sent.isEmpty)
        #expect(h.ask("fits", size: 64).sentIDs == ["fits"])
    }

    // MARK: Retries

    @Test func aRetryFromTheSameOwnerReplacesItsQueuedCopy() {
        var h = Harness()
        h.ready("A")
        h.ask("busy")
        h.ask("r1", owner: "user:u1", size: 10)
        #expect(h.ask("r1", owner: "user:u1", size: 20).errors.isEmpty)
        #expect(h.routing.services["cat"]?.queue.count == 1)
        #expect(h.routing.services["cat"]?.queue.bytes == 20)
        let next = h.answer("A")
        #expect(next.sentIDs == ["r1"])
        #expect(h.answer("A").sent.isEmpty)  // delivered once, not twice
        if case let .sendToWorker(_, request)? = next.first(where: { if case .sendToWorker = $0 { true } else { false } }) {
            #expect(request.bytes.count == 20)  // the retry's bytes
        }
    }

    @Test func anotherOwnersRequestWithTheSameIDNeverReplacesIt() {
        var h = Harness()
        h.ready("A")
        h.ask("busy")
        h.ask("r1", owner: "user:u1", size: 10)
        let refused = h.ask("r1", from: "intruder", owner: "user:u2", size: 20).errors
        #expect(refused.map(\.code) == [.conflict])
        #expect(h.routing.services["cat"]?.queue.items.first?.request.owner == "user:u1")
        #expect(h.routing.services["cat"]?.queue.bytes == 10)
    }

    // MARK: Deadlines

    @Test func aQueuedRequestPastItsDeadlineIsAnswered503() {
        var h = Harness()
        h.ready("A")
        h.ask("busy", deadline: 60_000)
        h.ask("late", deadline: 1000)
        #expect(h.tick(at: 999).errors.isEmpty)
        let expired = h.tick(at: 1000).errors
        #expect(expired.map(\.code) == [.unavailable])
        #expect(expired.map(\.corr) == ["late"])
        #expect(expired.first?.error.message.contains("all 1 workers of service 'cat' busy before the request's deadline") == true)
        #expect(h.routing.services["cat"]?.expired == 1)
        #expect(h.routing.services["cat"]?.queue.isEmpty == true)
    }

    @Test func theDeadlineIsCappedByMaxDeadlineAndDefaultsToDefaultDeadline() {
        var h = Harness { $0.maxDeadlineMs = 2000; $0.defaultDeadlineMs = 1500 }
        h.ready("A")
        h.ask("busy", deadline: 100_000)
        h.ask("capped", deadline: 100_000)
        h.ask("default")
        #expect(h.tick(at: 1499).errors.isEmpty)
        #expect(h.tick(at: 1500).errors.map(\.corr) == ["default"])
        #expect(h.tick(at: 1999).errors.isEmpty)
        let capped = h.tick(at: 2000).errors
        #expect(capped.map(\.code) == [.unavailable, .timeout])
        #expect(capped.map(\.corr) == ["capped", "busy"])
    }

    @Test func aRequestPastItsDeadlineInAWorkerIsAnswered504AndTheLateReplyDropped() throws {
        var h = Harness()
        h.ready("A")
        h.ask("slow", deadline: 2000)
        h.ask("next")
        #expect(h.tick(at: 1999).errors.isEmpty)
        let timedOut = h.tick(at: 2000).errors
        let error = try #require(timedOut.first)
        #expect(timedOut.count == 1)
        #expect(error.code == .timeout)
        #expect(error.corr == "slow")
        #expect(error.error.status == 504)
        #expect(error.error.message.contains("'cat'") && error.error.message.contains("2000 ms"))
        #expect(error.error.details["service"] == "cat")
        #expect(error.error.details["deadline_ms"] == 2000)
        // Not answered twice.
        #expect(h.tick(at: 2050).errors.filter { $0.corr == "slow" }.isEmpty)
        // The worker answers late: the reply is dropped and counted, and
        // the worker, idle again, takes the next request.
        h.now = 2100
        let late = h.answer("A", "late reply")
        #expect(late.delivered.isEmpty)
        #expect(late.sentIDs == ["next"])
        #expect(h.routing.lateReplies == 1)
        #expect(h.routing.services["cat"]?.timedOut == 1)
        // And its next answer, on time, is delivered.
        #expect(h.answer("A", "on time").delivered == ["on time"])
    }

    @Test func aWorkerThatDiesHoldingATimedOutRequestDoesNotAnswerItTwice() {
        var h = Harness()
        h.ready("A")
        h.ask("slow", deadline: 1000)
        #expect(h.tick(at: 1000).errors.map(\.code) == [.timeout])
        let dead = h.tick(at: 3001)  // A silent for 3 heartbeats
        #expect(dead.errors.isEmpty)
        #expect(h.routing.services["cat"]?.queue.isEmpty == true)
    }

    // MARK: Liveness and requeue

    @Test func aWorkerSilentForThreeHeartbeatsIsDroppedAndItsRequestRequeued() {
        var h = Harness()
        h.ready("A")
        h.ask("r1", deadline: 30_000)
        h.now = 1000
        h.ready("B")
        h.ask("r2", deadline: 30_000)  // B takes it
        h.answer("B")  // B idle, alive until 4000
        #expect(h.tick(at: 3000).sent.isEmpty)  // A's last word at 0: alive until 3000
        let after = h.tick(at: 3001)
        #expect(after.sent.map(\.0) == ["B"])
        #expect(after.sentIDs == ["r1"])
        #expect(h.routing.workers[Array("A".utf8)] == nil)
        #expect(h.routing.casualties["r1"]?.count == 1)
    }

    @Test func anyWordFromAWorkerKeepsItAlive() {
        var h = Harness()
        h.ready("A")
        for t in stride(from: Int64(2500), through: 10_000, by: 2500) {
            h.now = t
            h.handle(.workerHeartbeat(identity: Array("A".utf8)))
            _ = h.tick(at: t + 1)
        }
        #expect(h.routing.workers[Array("A".utf8)] != nil)
        _ = h.tick(at: 13_001)
        #expect(h.routing.workers[Array("A".utf8)] == nil)
    }

    @Test func theBrokerSendsEachWorkerAHeartbeatEveryInterval() {
        var h = Harness()
        h.ready("A")
        h.ready("B")
        #expect(h.tick(at: 999).heartbeats.isEmpty)
        #expect(h.tick(at: 1000).heartbeats == ["A", "B"])
        #expect(h.tick(at: 1500).heartbeats.isEmpty)
        #expect(h.tick(at: 2000).heartbeats == ["A", "B"])
    }

    @Test func aHeartbeatOrReplyFromAnUnknownWorkerIsToldToDisconnectAndTheReplyStillDelivered() {
        var h = Harness()
        #expect(h.handle(.workerHeartbeat(identity: Array("X".utf8))).disconnected == ["X"])
        let reply = h.answer("X", "answer")
        #expect(reply.delivered == ["answer"])
        #expect(reply.disconnected == ["X"])
    }

    @Test func aWorkerThatSaysDisconnectIsAcknowledgedAndItsRequestRequeuedUncounted() {
        var h = Harness()
        h.ready("A")
        h.ask("r1")
        let bye = h.handle(.workerDisconnect(identity: Array("A".utf8)))
        #expect(bye.contains(.acknowledgeDisconnect(identity: Array("A".utf8))))
        #expect(h.routing.casualties["r1"] == nil)
        #expect(h.ready("B").sentIDs == ["r1"])
    }

    @Test func aFailedSendDropsTheWorkerAndRequeuesItsRequest() {
        var h = Harness()
        h.ready("A")
        h.ready("B")
        #expect(h.ask("r1").sent.map(\.0) == ["A"])
        let retried = h.handle(.workerUnreachable(identity: Array("A".utf8), reason: "send failed"))
        #expect(retried.sent.map(\.0) == ["B"])
        #expect(retried.sentIDs == ["r1"])
    }

    @Test func aWorkerRegistersOnlyForAServiceName() {
        var h = Harness()
        for bad in ["", "sys", "cat.get", "c at"] {
            #expect(h.ready("W", bad).disconnected == ["W"], "service '\(bad)'")
        }
        #expect(h.routing.workers.isEmpty)
    }

    // MARK: Poison pill

    @Test func aRequestThatKilledMaxDeliveriesWorkersIsRefusedAndSoAreItsRetries() throws {
        var h = Harness { $0.maxDeliveries = 3 }
        var t: Int64 = 0
        var refused: [(code: QuadError.Code, corr: String?, error: QuadError)] = []
        h.ask("pill", deadline: 30_000)  // queued: no worker yet (grace)
        for k in 1...3 {
            h.now = t
            #expect(h.ready("W\(k)").sentIDs == ["pill"], "worker \(k) gets the pill")
            t += 3001
            refused = h.tick(at: t).errors
            if k < 3 { #expect(refused.isEmpty) }
        }
        let error = try #require(refused.first)
        #expect(error.code == .`internal`)
        #expect(error.corr == "pill")
        #expect(error.error.message.contains("max_deliveries=3"))
        h.ready("W4")
        let retry = h.ask("pill", deadline: 30_000)
        #expect(retry.errors.map(\.code) == [.`internal`])
        #expect(retry.sent.isEmpty)
        // Another request still goes to the live worker.
        #expect(h.ask("fine").sent.map(\.0) == ["W4"])
    }

    @Test func aReplyClearsTheRequestsCasualties() {
        var h = Harness { $0.maxDeliveries = 2 }
        h.ready("W1")
        h.ask("r", deadline: 30_000)
        h.now = 1
        h.ready("W2")
        h.ask("other", deadline: 30_000)  // W2 busy with it
        h.answer("W2")  // W2 idle again, alive until 3001
        let requeued = h.tick(at: 3001)  // W1 died holding "r"
        #expect(requeued.sentIDs == ["r"])
        #expect(h.routing.casualties["r"]?.count == 1)
        h.answer("W2")
        #expect(h.routing.casualties["r"] == nil)
    }

    @Test func casualtiesAreForgottenAfterTenMinutes() {
        var h = Harness { $0.maxDeliveries = 1; $0.casualtyMemoryMs = 600_000 }
        h.ready("W1")
        h.ask("pill", deadline: 30_000)
        #expect(h.tick(at: 3001).errors.map(\.code) == [.`internal`])
        h.now = 3001
        h.ready("W2")
        #expect(h.ask("pill").errors.map(\.code) == [.`internal`])
        h.handle(.workerHeartbeat(identity: Array("W2".utf8)))
        var t: Int64 = 3001
        while t < 604_000 {
            t += 1000
            h.now = t
            h.handle(.workerHeartbeat(identity: Array("W2".utf8)))
            _ = h.tick(at: t)
        }
        #expect(h.ask("pill").sentIDs == ["pill"])
    }

    // MARK: Service grace

    @Test func aRequestForAServiceNotYetRegisteredWaitsForItsFirstWorkerDuringTheGrace() {
        var h = Harness { $0.serviceGraceMs = 5000 }
        #expect(h.ask("early", type: "late.start", deadline: 30_000).errors.isEmpty)
        h.now = 4000
        #expect(h.ready("L", "late").sentIDs == ["early"])
    }

    @Test func afterTheGraceARequestForANeverRegisteredServiceIsAnswered404() {
        var h = Harness { $0.serviceGraceMs = 5000 }
        h.ask("waiting", type: "ghost.get", deadline: 30_000)
        let ended = h.tick(at: 5000).errors
        #expect(ended.map(\.code) == [.notFound])
        #expect(ended.first?.error.message.contains("service_grace_ms=5000") == true)
        let refused = h.ask("after", type: "ghost.get").errors
        #expect(refused.map(\.code) == [.notFound])
        #expect(refused.first?.error.message.contains("no worker of it ever registered") == true)
    }

    @Test func aServiceThatRegisteredKeepsQueueingWithoutWorkers() {
        var h = Harness { $0.serviceGraceMs = 0 }
        h.ready("A")
        h.handle(.workerDisconnect(identity: Array("A".utf8)))
        // Known service, no worker: queued, then 503 at the deadline.
        #expect(h.ask("r", deadline: 1000).errors.isEmpty)
        let expired = h.tick(at: 1000).errors
        #expect(expired.map(\.code) == [.unavailable])
        #expect(expired.first?.error.message.contains("no live worker of service 'cat'") == true)
    }

    // MARK: The broker's own requests

    @Test func theBrokersOwnRequestGoesToTheFrontOfTheQueue() {
        var h = Harness()
        h.ready("A", "accounts")
        h.ask("busy", type: "accounts.get")
        h.ask("u1", type: "accounts.get", owner: "user:u1")
        h.handle(.brokerRequest(h.request("own", type: "accounts.revocations", from: "\u{2}", owner: "service:broker", deadline: 5000)))
        #expect(h.answer("A").sentIDs == ["own"])
        #expect(h.routing.hasWorkers(of: "accounts"))
        #expect(!h.routing.hasWorkers(of: "catalog"))
    }
}
