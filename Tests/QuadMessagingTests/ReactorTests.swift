import Foundation
import Testing
@testable import QuadMessaging

/// Milliseconds of a monotonic clock, for the reactor's timers.
private func monotonicMillis() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

/// PULL sockets bound on inproc, each with a PUSH connected to it.
private final class Pipes {
    let context = ZMQContext()
    var pulls: [Socket] = []
    var pushes: [Socket] = []

    init(_ count: Int) throws {
        let tag = UInt32.random(in: 0...UInt32.max)
        for k in 0..<count {
            let pull = try context.socket(.pull)
            try pull.bind("inproc://reactor-\(tag)-\(k)")
            let push = try context.socket(.push)
            try push.connect("inproc://reactor-\(tag)-\(k)")
            pulls.append(pull)
            pushes.append(push)
        }
    }

    func send(_ k: Int) throws { try pushes[k].send([[UInt8(k)]]) }
}

/// Reads everything waiting on `socket`.
private func drain(_ socket: Socket) -> Int {
    var n = 0
    while (try? socket.receive(dontWait: true)) != nil { n += 1 }
    return n
}

@Suite("Reactor: one poll loop, sockets and timers")
struct ReactorTests {
    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func callsTheHandlerOfEachReadableSocketWithThatSocket(scalable: Bool) throws {
        let pipes = try Pipes(3)
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var calls: [Int: Int] = [:]
        for (k, pull) in pipes.pulls.enumerated() {
            reactor.register(pull) { s in
                #expect(s === pull)
                calls[k, default: 0] += drain(s)
            }
        }
        try pipes.send(0)
        try pipes.send(2)
        try pipes.send(2)
        // Waits for the first readable socket; inproc delivers at once, but
        // a loaded machine gets more turns.
        let deadline = monotonicMillis() + 30_000
        while calls[0] == nil || calls[2, default: 0] < 2, monotonicMillis() < deadline {
            try reactor.turn(timeoutCap: 1000)
        }
        #expect(calls == [0: 1, 2: 2])
        // Nothing readable: no handler runs, and the turn ends at its cap.
        let before = calls
        try reactor.turn(timeoutCap: 20)
        #expect(calls == before)
    }

    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func timersRunBesideSocketsInDueOrderAndBoundThePoll(scalable: Bool) throws {
        let pipes = try Pipes(1)
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var log: [String] = []
        reactor.register(pipes.pulls[0]) { s in if drain(s) > 0 { log.append("socket") } }
        reactor.timers.after(600) { log.append("late") }
        reactor.timers.after(10) { log.append("early") }
        reactor.timers.after(30) {
            log.append("send")
            try? pipes.send(0)
        }
        let started = monotonicMillis()
        // A cap far above the timers: the poll sleeps only until the next one.
        try reactor.run(timeoutCap: 60_000, until: { log.count >= 4 || monotonicMillis() - started > 30_000 })
        #expect(log == ["early", "send", "socket", "late"])
        #expect(monotonicMillis() - started < 30_000)
    }

    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func aSocketUnregisteredInsideAHandlerGetsNoMoreCalls(scalable: Bool) throws {
        let pipes = try Pipes(2)
        let (a, b) = (pipes.pulls[0], pipes.pulls[1])
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var aCalls = 0, bCalls = 0
        reactor.register(a) { s in
            aCalls += 1
            _ = drain(s)
            reactor.unregister(b)
            reactor.unregister(s)
        }
        reactor.register(b) { _ in bCalls += 1 }
        try pipes.send(1)
        try pipes.send(0)
        // b was readable in the turn a unregistered it: its handler must not run.
        let deadline = monotonicMillis() + 30_000
        while aCalls == 0, monotonicMillis() < deadline { try reactor.turn(timeoutCap: 1000) }
        #expect(aCalls == 1)
        #expect(bCalls == 0)
        #expect(reactor.count == 0)
        // b is still readable (nobody read it), a gets more: neither is polled.
        try pipes.send(0)
        try reactor.turn(timeoutCap: 50)
        #expect(aCalls == 1 && bCalls == 0)
        #expect(drain(b) == 1)
    }

    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func aSocketRegisteredInsideAHandlerIsPolledFromTheNextTurn(scalable: Bool) throws {
        let pipes = try Pipes(2)
        let (a, b) = (pipes.pulls[0], pipes.pulls[1])
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var bCalls = 0
        var turnOfA: Int?
        var turns = 0
        reactor.register(a) { s in
            _ = drain(s)
            turnOfA = turns
            reactor.register(b) { s in bCalls += drain(s) }
        }
        try pipes.send(1)
        try pipes.send(0)
        let deadline = monotonicMillis() + 30_000
        while turnOfA == nil, monotonicMillis() < deadline {
            try reactor.turn(timeoutCap: 1000)
            turns += 1
        }
        // b was readable already, and was not polled in the turn that added it.
        #expect(turnOfA != nil)
        #expect(bCalls == 0)
        try reactor.turn(timeoutCap: 1000)
        #expect(bCalls == 1)
    }

    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func registeringAgainReplacesTheHandler(scalable: Bool) throws {
        let pipes = try Pipes(1)
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var who: [String] = []
        reactor.register(pipes.pulls[0]) { s in _ = drain(s); who.append("first") }
        reactor.register(pipes.pulls[0]) { s in _ = drain(s); who.append("second") }
        #expect(reactor.count == 1)
        try pipes.send(0)
        let deadline = monotonicMillis() + 30_000
        while who.isEmpty, monotonicMillis() < deadline { try reactor.turn(timeoutCap: 1000) }
        #expect(who == ["second"])
    }

    /// A DEALER with ZMQ_IMMEDIATE refuses a message (EAGAIN) until its
    /// connection is up; asked to, the loop wakes its handler when it can
    /// take one, and stops when the asking ends.
    @Test(arguments: [false, true]) func aSocketThatAsksIsWokenWhenItCanSend(scalable: Bool) throws {
        let context = ZMQContext()
        // An IPC path nothing listens on yet (inproc attaches a connection
        // to an endpoint not bound yet at once).
        let path = NSTemporaryDirectory() + "quad-reactor-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        defer { unlink(path) }
        let endpoint = "ipc://" + path
        let dealer = try context.socket(.dealer)
        try dealer.setImmediate(true)
        try dealer.connect(endpoint)
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var wakes = 0
        var sent = false
        reactor.register(dealer) { s in
            wakes += 1
            _ = drain(s)
            if !sent, (try? s.send([[1]], dontWait: true)) != nil {
                sent = true
                reactor.wantWritable(s, false)
            }
        }
        // No peer yet: the message is refused, not queued.
        #expect(throws: ZMQError.self) { try dealer.send([[1]], dontWait: true) }
        reactor.wantWritable(dealer, true)
        for _ in 0..<3 { try reactor.turn(timeoutCap: 20) }
        #expect(wakes == 0 && !sent)
        let router = try context.socket(.router)
        let deadline = monotonicMillis() + 30_000
        try router.bind(endpoint)
        while !sent, monotonicMillis() < deadline { try reactor.turn(timeoutCap: 1000) }
        #expect(sent)
        var got: [[UInt8]]?
        while got == nil, monotonicMillis() < deadline { got = try router.receive(dontWait: true); if got == nil { usleep(1000) } }
        #expect(got?.last == [1])
        // Writable still, but no longer asked: no more wakes.
        let before = wakes
        for _ in 0..<3 { try reactor.turn(timeoutCap: 20) }
        #expect(wakes == before)
    }

    @Test func thePollSetIsBuiltOnlyWhenRegistrationsChange() throws {
        let pipes = try Pipes(3)
        let reactor = Reactor(now: monotonicMillis)
        reactor.register(pipes.pulls[0]) { s in _ = drain(s) }
        reactor.register(pipes.pulls[1]) { s in _ = drain(s) }
        for _ in 0..<20 {
            try pipes.send(0)
            try reactor.turn(timeoutCap: 5)
        }
        #expect(reactor.builds == 1)
        reactor.register(pipes.pulls[2]) { s in _ = drain(s) }
        try reactor.turn(timeoutCap: 1)
        try reactor.turn(timeoutCap: 1)
        #expect(reactor.builds == 2)
        reactor.unregister(pipes.pulls[0])
        try reactor.turn(timeoutCap: 1)
        #expect(reactor.builds == 3)
    }

    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func runStopsWhenAskedAndAsksBeforeEveryTurn(scalable: Bool) throws {
        let reactor = Reactor(now: monotonicMillis, scalable: scalable)
        var ticks = 0
        reactor.timers.every(1) { ticks += 1 }
        let started = monotonicMillis()
        try reactor.run(timeoutCap: 1000, until: { ticks >= 3 || monotonicMillis() - started > 30_000 })
        #expect(ticks == 3)
        // Already stopped: not one turn.
        try reactor.run(until: { true })
        #expect(ticks == 3)
    }

    /// The edge's loop: hundreds of sockets, messages arriving while the
    /// loop also sends on them outside their handlers (a send may take the
    /// news ZMQ_FD carried): every message is read, none waits for a turn
    /// that never comes.
    @Test func aScalableLoopReadsEveryMessageOfManySockets() throws {
        let context = ZMQContext()
        let reactor = Reactor(now: monotonicMillis, scalable: true)
        #expect(reactor.isScalable)
        let tag = UInt32.random(in: 0...UInt32.max)
        let count = 300
        var servers: [Socket] = []
        var clients: [Socket] = []
        var answers = 0
        for k in 0..<count {
            let server = try context.socket(.router)
            try server.bind("inproc://scalable-\(tag)-\(k)")
            let client = try context.socket(.dealer)
            try client.connect("inproc://scalable-\(tag)-\(k)")
            servers.append(server)
            clients.append(client)
            // The server echoes at once, inside its handler.
            reactor.register(server) { s in
                while let frames = try? s.receive(dontWait: true) { try? s.send(frames, dontWait: true) }
            }
            reactor.register(client) { s in answers += drain(s) }
        }
        // Sends from timers, outside any handler, on sockets whose answers
        // to earlier sends are arriving.
        let rounds = 20
        var sent = 0
        for r in 0..<rounds {
            reactor.timers.after(Int64(r)) {
                for c in clients { if (try? c.send([[1]], dontWait: true)) != nil { sent += 1 } }
            }
        }
        let deadline = monotonicMillis() + 60_000
        while (sent < rounds * count || answers < sent), monotonicMillis() < deadline { try reactor.turn(timeoutCap: 100) }
        #expect(sent == rounds * count)
        #expect(answers == sent)
        #expect(reactor.count == 2 * count)
        for s in servers + clients { reactor.unregister(s) }
        #expect(reactor.count == 0)
    }
}
