import Foundation
import QuadMessaging
@testable import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// A subscriber applies what it has received in one transaction per batch.
@Suite("Feed batches")
struct FeedBatchTests {
    struct Bus {
        let context = ZMQContext()
        let pub: Socket
        let sub: Socket
        let requests: Socket
        let source: Socket
        /// The feed's catch-up requests go out through these calls, on
        /// `requests`, to `source`.
        let calls: ServiceCalls
        var ask: EventFeed.Ask {
            { [calls] request, timeoutMs, done in calls.send(request, timeoutMs: timeoutMs, attempts: 1, done) }
        }

        init() throws {
            let tag = "feed-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            pub = try context.socket(.pub)
            try pub.bind("inproc://\(tag)-pub")
            sub = try context.socket(.sub)
            try sub.connect("inproc://\(tag)-pub")
            try sub.subscribe("src/")
            try sub.setReceiveTimeout(100)
            source = try context.socket(.router)
            try source.bind("inproc://\(tag)-requests")
            try source.setReceiveTimeout(30_000)
            requests = try context.socket(.dealer)
            try requests.connect("inproc://\(tag)-requests")
            calls = ServiceCalls(socket: requests, timers: Timers(now: Clock.monotonicMillis), source: "feed/1", metrics: Metrics())
            // Until a probe gets through, the subscription is not in place.
            let until = Clock.monotonicMillis() + 30_000
            while Clock.monotonicMillis() < until {
                try pub.send([Array("src/probe".utf8), Array("probe".utf8)])
                if try sub.receive() != nil { break }
            }
            while try sub.receive(dontWait: true) != nil {}
        }

        func publish(_ seqs: [Int64]) throws {
            for seq in seqs {
                let e = Envelope(type: "src.changed", kind: .event, src: "src", seq: seq, body: ["n": .int(seq)])
                try pub.send([Array("src/src.changed".utf8), e.encoded()])
            }
        }
    }

    @Test func eventsReceivedTogetherAreAppliedInOneTransaction() throws {
        let db = try TestStore.open("feed", migrations: [Migration(1, "CREATE TABLE seen (seq BIGINT PRIMARY KEY)")])
        let path = try #require((db as? SQLiteDatabase)?.path)
        let observer = try SQLiteDatabase(path: path)
        let bus = try Bus()
        // What another connection sees of the cursor while each event is
        // applied: with one transaction per batch, nothing until the end.
        var committedDuring: [Int64] = []
        let feed = try EventFeed(db: db, sources: ["src"], wants: { _ in true }, ask: bus.ask, name: "feed/1") { e in
            try db.execute("INSERT INTO seen (seq) VALUES ($1)", .int(e.seq ?? 0))
            committedDuring.append(try observer.queryOne("SELECT seq FROM event_cursors WHERE source = 'src'")?.int("seq") ?? 0)
        }
        try bus.publish(Array(1...100))
        feed.drain(bus.sub)
        #expect(feed.applied == 100)
        #expect(committedDuring == Array(repeating: 0, count: 100))
        #expect(try observer.queryOne("SELECT seq FROM event_cursors WHERE source = 'src'")?.int("seq") == 100)
        #expect(try observer.queryOne("SELECT COUNT(*) AS n FROM seen")?.int("n") == 100)
    }

    @Test func aBatchAppliesEachEventOnceAndAsksForAGap() throws {
        let db = try TestStore.open("feed", migrations: [Migration(1, "CREATE TABLE seen (seq BIGINT PRIMARY KEY)")])
        let bus = try Bus()
        let feed = try EventFeed(db: db, sources: ["src"], wants: { _ in true }, ask: bus.ask, name: "feed/1") { e in
            try db.execute("INSERT INTO seen (seq) VALUES ($1)", .int(e.seq ?? 0))
        }
        // Repeats, and a gap after 5: 1...5 are applied once each, and the
        // feed asks the source for what follows 5.
        try bus.publish([1, 2, 2, 3, 1, 4, 5, 7, 8])
        feed.drain(bus.sub)
        #expect(feed.applied == 5)
        #expect(try db.query("SELECT seq FROM seen ORDER BY seq").map { $0.int("seq") } == [1, 2, 3, 4, 5])
        let frames = try #require(try bus.source.receive())
        let request = try Majordomo.envelope(endingFrames: frames)
        #expect(request.type == "src.events.since" && request.body["after"] == .int(5))
    }

    @Test func anEventWhoseApplyFailsIsRolledBackAloneAndHoldsBackItsSource() throws {
        let db = try TestStore.open("feed", migrations: [Migration(1, "CREATE TABLE seen (seq BIGINT PRIMARY KEY)")])
        let bus = try Bus()
        struct Refused: Error {}
        let feed = try EventFeed(db: db, sources: ["src"], wants: { _ in true }, ask: bus.ask, name: "feed/1") { e in
            try db.execute("INSERT INTO seen (seq) VALUES ($1)", .int(e.seq ?? 0))
            if e.seq == 3 { throw Refused() }
        }
        try bus.publish([1, 2, 3, 4])
        feed.drain(bus.sub)
        #expect(try db.query("SELECT seq FROM seen ORDER BY seq").map { $0.int("seq") } == [1, 2])
        #expect(try db.queryOne("SELECT seq FROM event_cursors WHERE source = 'src'")?.int("seq") == 2)
    }

    @Test func theTimerAsksOnlyASourceThatFellSilent() throws {
        let db = try TestStore.open("feed", migrations: [Migration(1, "CREATE TABLE seen (seq BIGINT PRIMARY KEY)")])
        let bus = try Bus()
        let feed = try EventFeed(db: db, sources: ["src"], wants: { _ in true }, ask: bus.ask, name: "feed/1") { e in
            try db.execute("INSERT INTO seen (seq) VALUES ($1)", .int(e.seq ?? 0))
        }
        try bus.publish([1, 2, 3])
        feed.drain(bus.sub)
        #expect(feed.applied == 3)
        // Events arriving in order, no gap: the timer's catch-up is not sent
        // (it would have asked after 3).
        feed.catchUpSilent(quietMs: 60_000)
        try bus.publish([4])
        feed.drain(bus.sub)
        #expect(feed.applied == 4)
        // Silent for longer than quietMs (0 here): asked, from the cursor.
        feed.catchUpSilent(quietMs: 0)
        let frames = try #require(try bus.source.receive())
        let request = try Majordomo.envelope(endingFrames: frames)
        #expect(request.type == "src.events.since" && request.body["after"] == .int(4))
        #expect(try bus.source.receive(dontWait: true) == nil)
        // A feed that never heard of its source asks at once.
        let other = try TestStore.open("feed", migrations: [])
        let fresh = try EventFeed(db: other, sources: ["src"], wants: { _ in true }, ask: bus.ask, name: "feed/2") { _ in }
        fresh.catchUpSilent(quietMs: 60_000)
        let asked = try #require(try bus.source.receive())
        let first = try Majordomo.envelope(endingFrames: asked)
        #expect(first.body["after"] == .int(0))
    }

    /// Not a timed test: prints events applied per second, one transaction
    /// per event against one per drained batch.
    /// `QUAD_FEED_BENCH=1 swift test --filter FeedBatchTests/figures`
    @Test(.enabled(if: ProcessInfo.processInfo.environment["QUAD_FEED_BENCH"] == "1", "set QUAD_FEED_BENCH=1"))
    func figures() throws {
        let n = 10_000
        for batched in [false, true] {
            let db = try TestStore.open("feed", migrations: [Migration(1, "CREATE TABLE seen (seq BIGINT PRIMARY KEY)")])
            let bus = try Bus()
            try bus.sub.setReceiveHWM(0)
            try bus.pub.setSendHWM(0)
            let feed = try EventFeed(db: db, sources: ["src"], wants: { _ in true }, ask: bus.ask, name: "feed/1") { e in
                try db.execute("INSERT INTO seen (seq) VALUES ($1)", .int(e.seq ?? 0))
            }
            try bus.publish(Array(1...Int64(n)))
            let start = DispatchTime.now().uptimeNanoseconds
            if batched {
                while feed.applied < n { feed.drain(bus.sub) }
            } else {
                while feed.applied < n, let frames = try bus.sub.receive(dontWait: true) {
                    feed.receive(try Envelope.decode(frames[1]))
                }
            }
            let rate = Int(Double(n) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9))
            print("feed \(batched ? "one transaction per batch (up to \(EventFeed.batch))" : "one transaction per event"): \(n) events \(rate) /s")
        }
    }
}
