import Foundation
import Testing
@testable import QuadMessaging

@Suite("ZeroMQ layer")
struct SocketTests {
    @Test func multipartFramesAreBinarySafe() throws {
        let ctx = ZMQContext()
        let a = try ctx.socket(.pair)
        let b = try ctx.socket(.pair)
        try a.bind("inproc://frames")
        try b.connect("inproc://frames")
        let frames: [[UInt8]] = [[], [0, 1, 2, 0, 255], Array(repeating: 7, count: 3 << 20), Array("é".utf8)]
        try a.send(frames)
        let got = try #require(try b.receive())
        #expect(got == frames)
    }

    @Test func routerDealerCarryRoutingIDs() throws {
        let ctx = ZMQContext()
        let router = try ctx.socket(.router)
        try router.bind("inproc://route")
        let dealer = try ctx.socket(.dealer)
        try dealer.setRoutingID(Array("worker-1".utf8))
        try dealer.connect("inproc://route")
        try dealer.send([Array("hello".utf8)])
        let got = try #require(try router.receive())
        #expect(got == [Array("worker-1".utf8), Array("hello".utf8)])
        try router.send([got[0], Array("back".utf8)])
        #expect(try dealer.receive() == [Array("back".utf8)])
    }

    @Test func pollerReportsReadySocketsAndTimesOut() throws {
        let ctx = ZMQContext()
        let push = try ctx.socket(.push)
        let pull = try ctx.socket(.pull)
        try pull.bind("inproc://poll")
        try push.connect("inproc://poll")
        var poller = Poller()
        poller.add(pull)
        let start = Date()
        #expect(try poller.poll(timeoutMs: 50) == [false])
        #expect(Date().timeIntervalSince(start) >= 0.04)
        try push.send([[1]])
        #expect(try poller.poll(timeoutMs: 1000) == [true])
        #expect(try pull.receive(dontWait: true) == [[1]])
        #expect(try pull.receive(dontWait: true) == nil)
    }

    @Test func maxMessageSizeDropsOversizeFramesAtTheSocket() throws {
        let ctx = ZMQContext()
        let pull = try ctx.socket(.pull)
        try pull.setMaxMessageSize(1024)
        try pull.bind("tcp://127.0.0.1:*")
        let push = try ctx.socket(.push)
        try push.connect(pull.lastEndpoint)
        try push.send([Array(repeating: 1, count: 4096)])
        try pull.setReceiveTimeout(300)
        #expect(try pull.receive() == nil)
    }

    @Test func pubSubFiltersByTopicThroughXSubXPub() throws {
        let ctx = ZMQContext()
        let xsub = try ctx.socket(.xsub)
        try xsub.bind("inproc://in")
        let xpub = try ctx.socket(.xpub)
        try xpub.bind("inproc://out")
        let sub = try ctx.socket(.sub)
        try sub.connect("inproc://out")
        try sub.subscribe("catalog.")
        let pub = try ctx.socket(.pub)
        try pub.connect("inproc://in")
        // Forward the subscription upstream, as the broker's proxy does.
        try xpub.setReceiveTimeout(1000)
        let subscription = try #require(try xpub.receive())
        try xsub.send(subscription)
        var delivered: [[UInt8]]?
        for _ in 0..<50 where delivered == nil {
            try pub.send([Array("orders.placed".utf8), [1]])
            try pub.send([Array("catalog.stock.changed".utf8), [2]])
            usleep(10_000)
            while let m = try xsub.receive(dontWait: true) { try xpub.send(m) }
            delivered = try sub.receive(dontWait: true)
        }
        #expect(delivered == [Array("catalog.stock.changed".utf8), [2]])
    }

    @Test func errorsComeFromZMQStrerror() throws {
        let ctx = ZMQContext()
        let s = try ctx.socket(.rep)
        #expect(throws: ZMQError.self) { try s.bind("nonsense://x") }
        do { try s.bind("nonsense://x") } catch {
            #expect(error.message.contains("not supported") || error.message.contains("Protocol"))
        }
    }

    @Test func timersRunInOrderAndRepeat() {
        var now: Int64 = 0
        let timers = Timers(now: { now })
        var log: [String] = []
        timers.every(10) { log.append("tick") }
        timers.after(15) { log.append("once") }
        #expect(timers.timeout(cap: 100) == 10)
        now = 10; timers.runDue()
        now = 15; timers.runDue()
        now = 20; timers.runDue()
        now = 40; timers.runDue()
        #expect(log == ["tick", "once", "tick", "tick"])
    }

    @Test func curveKeysRoundTripThroughZ85() throws {
        let pair = try Curve.keyPair()
        #expect(Curve.decode(pair.publicKey)?.count == 32)
        #expect(Curve.decode("short") == nil)
    }
}
