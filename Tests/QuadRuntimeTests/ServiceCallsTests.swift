import Foundation
import QuadMessaging
@testable import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// A worker's calls to other services, on real sockets: a ROUTER plays the
/// broker's internal frontend, and the test turns the loop as the worker does.
final class CallRig {
    let context = ZMQContext()
    let callee: Socket
    let calls: ServiceCalls
    let timers = Timers(now: Clock.monotonicMillis)

    init(maxInFlight: Int = ServiceCalls.defaultMaxInFlight) throws {
        let endpoint = "inproc://calls-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        callee = try context.socket(.router)
        try callee.bind(endpoint)
        try callee.setReceiveTimeout(10_000)
        let dealer = try context.socket(.dealer)
        try dealer.connect(endpoint)
        calls = ServiceCalls(socket: dealer, timers: timers, source: "test/1", metrics: Metrics(), maxInFlight: maxInFlight)
    }

    /// Turns the loop (poll, replies, timers) until `probe` holds or 10 s pass.
    func turn(until probe: () -> Bool) -> Bool {
        let until = Clock.monotonicMillis() + 10_000
        while !probe() && Clock.monotonicMillis() < until {
            var poller = Poller()
            poller.add(calls.socket)
            if let ready = try? poller.poll(timeoutMs: Int(timers.timeout(cap: 50))), ready[0] { calls.receive() }
            timers.runDue()
        }
        return probe()
    }

    /// Turns the loop for `ms`, whatever comes.
    func turn(forMs ms: Int64) {
        let until = Clock.monotonicMillis() + ms
        _ = turn { Clock.monotonicMillis() >= until }
    }

    /// The next request the callee got, with its route.
    func request() throws -> (route: [UInt8], bytes: [UInt8], envelope: Envelope) {
        // An MDP REQUEST: route, "MDPC02", 0x01, service, the envelope's header, its body.
        let frames = try #require(try callee.receive())
        #expect(frames.count == 6 && frames[1] == Array("MDPC02".utf8))
        return (frames[0], frames[4] + frames[5], try Envelope.decode(header: frames[4], body: frames[5]))
    }

    func answer(_ route: [UInt8], _ reply: Envelope) throws { try callee.send([route] + Majordomo.reply(service: reply.service, reply.encoded())) }
}

/// What each call's continuation got, by request id.
final class Outcomes {
    var all: [String: [Result<Envelope, QuadError>]] = [:]
    func done(_ id: String) -> (Result<Envelope, QuadError>) -> Void { { self.all[id, default: []].append($0) } }
}

@Suite("Calls to other services from a worker's loop")
struct ServiceCallsTests {
    @Test func eachReplyGoesToItsCallByCorrAndOnlyOnce() throws {
        let rig = try CallRig()
        let outcomes = Outcomes()
        let a = Envelope.request("catalog.stock.hold", body: ["order": "a"])
        let b = Envelope.request("catalog.stock.hold", body: ["order": "b"])
        rig.calls.send(a, timeoutMs: 5000, attempts: 1, outcomes.done(a.id))
        rig.calls.send(b, timeoutMs: 5000, attempts: 1, outcomes.done(b.id))
        let first = try rig.request()
        let second = try rig.request()
        #expect(first.envelope.src == "test/1" && first.envelope.deadline == 5000)
        // Answered out of order, one of them twice, and one answer to nobody.
        try rig.answer(second.route, second.envelope.reply(["order": "b"]))
        try rig.answer(first.route, Envelope.request("x").reply(["stray": true]))
        try rig.answer(first.route, first.envelope.reply(["order": "a"]))
        try rig.answer(first.route, first.envelope.reply(["order": "a", "again": true]))
        #expect(rig.turn { outcomes.all.count == 2 })
        rig.turn(forMs: 200)  // time for the repeat to arrive
        #expect(outcomes.all[a.id]?.count == 1 && outcomes.all[b.id]?.count == 1)
        #expect((try? outcomes.all[a.id]?.first?.get())?.body == ["order": "a"])
        #expect((try? outcomes.all[b.id]?.first?.get())?.body == ["order": "b"])
        #expect(rig.calls.pending.isEmpty)
    }

    @Test func anUnansweredAttemptIsSentAgainUnderTheSameIDThenTimesOut() throws {
        let rig = try CallRig()
        let outcomes = Outcomes()
        let call = Envelope.request("catalog.stock.confirm", body: ["order": "a"])
        let started = Clock.monotonicMillis()
        rig.calls.send(call, timeoutMs: 100, attempts: 2, outcomes.done(call.id))
        let first = try rig.request()
        #expect(rig.turn { outcomes.all[call.id] != nil })
        let second = try rig.request()
        #expect(first.bytes == second.bytes && second.envelope.id == call.id, "a retry is the same request")
        let error = try #require(outcomes.all[call.id]?.first.flatMap { r -> QuadError? in if case .failure(let e) = r { return e } else { return nil } })
        #expect(error.status == 504 && error.message == "no answer to catalog.stock.confirm within 2 attempts of 100 ms")
        #expect(Clock.monotonicMillis() - started >= 200)
        // A reply after the last attempt finds no call: nothing runs twice.
        try rig.answer(second.route, second.envelope.reply([:]))
        rig.turn(forMs: 200)
        #expect(outcomes.all[call.id]?.count == 1)
    }

    @Test func theBrokers503IsRetriedAtOnceAndTheNextAnswerTaken() throws {
        let rig = try CallRig()
        let outcomes = Outcomes()
        let call = Envelope.request("catalog.stock.hold", body: ["order": "a"])
        rig.calls.send(call, timeoutMs: 5000, attempts: 2, outcomes.done(call.id))
        let first = try rig.request()
        try rig.answer(first.route, first.envelope.error(.unavailable("no live worker of service 'catalog' before the request's deadline")))
        #expect(rig.turn { rig.calls.rules.attempt(of: call.id) == 2 })
        let second = try rig.request()
        #expect(second.bytes == first.bytes)
        try rig.answer(second.route, second.envelope.reply(["status": "held"]))
        #expect(rig.turn { outcomes.all[call.id] != nil })
        #expect((try? outcomes.all[call.id]?.first?.get())?.body == ["status": "held"])
    }

    @Test func pastMaxCallsInFlightACallIsRefusedAtOnce() throws {
        let rig = try CallRig(maxInFlight: 1)
        let outcomes = Outcomes()
        let a = Envelope.request("catalog.stock.hold")
        let b = Envelope.request("catalog.stock.hold")
        rig.calls.send(a, timeoutMs: 5000, attempts: 1, outcomes.done(a.id))
        rig.calls.send(b, timeoutMs: 5000, attempts: 1, outcomes.done(b.id))
        guard case .failure(let error) = try #require(outcomes.all[b.id]?.first) else { Issue.record("not refused"); return }
        #expect(error.status == 503 && error.message.contains("max_calls_in_flight=1"))
        #expect(outcomes.all[a.id] == nil)
    }
}

@Suite("Handlers that answer later, and slow handlers")
struct DeferredAndSlowTests {
    @Test func aDeferredHandlerAnswersOnceWhenItsWorkComesBack() throws {
        let h = Handlers(service: "t", instance: "t/1", db: nil)
        var parked: Answer?
        h.deferred("t.later") { _, answer in parked = answer }
        var delivered: [Envelope] = []
        let request = Envelope.request("t.later", body: [:])
        h.respondLater(request) { delivered.append($0.envelope) }
        #expect(delivered.isEmpty)
        let answer = try #require(parked)
        answer.reply(["done": true])
        answer.reply(["done": "twice"])
        #expect(delivered.count == 1 && delivered.first?.corr == request.id && delivered.first?.body == ["done": true])
        #expect(h.metrics.served == 1)
        // An in-line caller is told it answers later, not left waiting.
        let inLine = h.handle(.request("t.later"))
        #expect(inLine.quadError?.status == 503 && inLine.quadError?.message.contains("answers later") == true)
        // A deferred handler that throws is answered at once with its error.
        h.deferred("t.refuses") { _, _ in throw QuadError.badRequest("body.x is required") }
        h.respondLater(.request("t.refuses")) { delivered.append($0.envelope) }
        #expect(delivered.last?.quadError?.message == "body.x is required")
    }

    @Test func aHandlerThatHoldsTheLoopPastSlowHandlerMsIsCountedInMetrics() throws {
        let h = Handlers(service: "t", instance: "t/1", db: nil)
        h.query("t.fast") { _ in [:] }
        h.query("t.slow") { _ in
            usleep(150_000)  // the subject: a handler that holds the loop 150 ms
            return [:]
        }
        _ = try h.call("t.fast")
        _ = try h.call("t.slow")
        _ = try h.call("t.fast")
        let slow = try #require(try h.call("t.sys.metrics")["slow_handlers"])
        #expect(slow["count"] == 1 && slow["slowest_type"] == "t.slow" && slow["threshold_ms"] == 100, "\(slow.text)")
        #expect((slow["max_us"]?.int ?? 0) >= 150_000)
    }
}
