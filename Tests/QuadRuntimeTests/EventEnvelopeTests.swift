import Foundation
import QuadMessaging
@testable import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// Events: encoded once in the outbox, relayed after the reply has gone.
@Suite("Event envelopes")
struct EventEnvelopeTests {
    func service() throws -> (Handlers, Database) {
        let db = try TestStore.open("ev", migrations: [])
        let handlers = Handlers(service: "ev", instance: "ev/1", db: db)
        handlers.mutation("ev.say") { req in
            try Outbox.append(db, type: "ev.said", body: req.body)
            return ["ok": true]
        }
        return (handlers, db)
    }

    @Test func eventsSinceReturnsTheStoredEnvelopes() throws {
        let (handlers, db) = try service()
        _ = try handlers.call("ev.say", ["word": "hi"], user: "alice")
        // A member only the stored bytes have: `events.since` parses the
        // stored envelope, it does not build one from the columns.
        let stored = try #require(try db.queryOne("SELECT envelope FROM outbox WHERE seq = 1")).string("envelope")
        try db.execute("UPDATE outbox SET envelope = $1 WHERE seq = 1", .text("{\"x\":7," + stored.dropFirst()))
        let events = try #require(try handlers.call("ev.events.since", ["after": 0])["events"]?.array)
        #expect(events.count == 1)
        #expect(events.first?["x"] == .int(7))
        let event = try Envelope.decode(try #require(events.first))
        #expect(event.src == "ev" && event.seq == 1 && event.body == ["word": "hi"])
    }

    @Test func eventsSinceCopiesTheStoredBytesAndReadsAsTheParsedFormDid() throws {
        let (handlers, db) = try service()
        for w in ["hi", "ho", "h\u{e9} \"q\""] { _ = try handlers.call("ev.say", ["word": .string(w)], user: "alice") }
        func since(_ after: Int64) -> Reply { handlers.reply(to: .request("ev.events.since", body: ["after": .int(after), "limit": 10])) }
        // What the reply was before: each stored envelope parsed, and the
        // whole encoded as one value.
        func parsedForm(after: Int64) throws -> JSON {
            let events = try Outbox.since(db, after: after, limit: 10)
            var f: [String: JSON] = ["events": .array(events.map { $0.json(src: "ev") }), "last": .int(try Outbox.lastSeq(db)),
                                     "oldest": .int(try Outbox.oldestSeq(db))]
            let oldest = try Outbox.oldestSeq(db)
            if oldest - after > 1 { f["missed"] = .int(oldest - after - 1) }
            return .object(f)
        }
        let reply = since(0)
        let envelope = reply.envelope
        #expect(envelope.kind == .reply && envelope.src == "ev/1" && envelope.type == "ev.events.since")
        #expect(envelope.body == (try parsedForm(after: 0)))
        // The same bytes the encoder writes for that value: identical for clients.
        #expect(reply.bytes == envelope.encoded())
        #expect(since(1).envelope.body == (try parsedForm(after: 1)))
        #expect(since(3).envelope.body == (try parsedForm(after: 3)))
        #expect(since(3).envelope.body["events"] == [])
        // Pruned events are still counted as missed.
        try db.execute("DELETE FROM outbox WHERE seq = 1")
        #expect(since(0).envelope.body == (try parsedForm(after: 0)))
        #expect(since(0).envelope.body["missed"] == 1)
        // A stored envelope written with a space the encoder never writes
        // goes out as it is stored: copied, not parsed and encoded again.
        let stored = try #require(try db.queryOne("SELECT envelope FROM outbox WHERE seq = 2")).string("envelope")
        let spaced = "{ " + stored.dropFirst()
        try db.execute("UPDATE outbox SET envelope = $1 WHERE seq = 2", .text(spaced))
        let bytes = since(0).bytes
        let needle = Array(spaced.utf8)
        #expect((0...(bytes.count - needle.count)).contains { bytes[$0..<$0 + needle.count].elementsEqual(needle) })
        #expect(since(0).envelope.body == (try parsedForm(after: 0)))
    }

    /// Not a timed test: prints pages of 500 events answered per second,
    /// the reply built from the stored bytes against the old way (each
    /// envelope parsed, the whole encoded again).
    /// `QUAD_EVENTS_BENCH=1 swift test --filter EventEnvelopeTests/figures`
    @Test(.enabled(if: ProcessInfo.processInfo.environment["QUAD_EVENTS_BENCH"] == "1", "set QUAD_EVENTS_BENCH=1"))
    func figures() throws {
        let (handlers, db) = try service()
        try db.transaction {
            for k in 0..<500 {
                try Outbox.append(db, type: "ev.said", body: ["product": .string("p-\(k)"), "users": .int(Int64(k)), "favorite": true,
                                                              "changed": true, "user": "u-0000000000000001"])
            }
        }
        let request = Envelope.request("ev.events.since", body: ["after": 0, "limit": 500])
        let n = 200
        var start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<n { _ = handlers.reply(to: request).bytes }
        let copied = Double(n) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<n {
            let events = try Outbox.since(db, after: 0, limit: 500)
            let body: JSON = ["events": .array(events.map { $0.json(src: "ev") }), "last": .int(try Outbox.lastSeq(db)), "oldest": .int(try Outbox.oldestSeq(db))]
            _ = Reply(request.reply(body, src: "ev/1")).bytes
        }
        let parsed = Double(n) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        print("events.since, pages of 500: from the stored bytes \(Int(copied))/s, parsed and encoded again \(Int(parsed))/s")
    }

    @Test func theRelayRunsAfterTheReplyIsSentNotInsideTheHandler() throws {
        let (handlers, db) = try service()
        let tag = "ev-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let endpoints = Endpoints(frontend: "inproc://\(tag)-f", backend: "inproc://\(tag)-b", eventsIn: "inproc://\(tag)-ei",
                                  eventsOut: "inproc://\(tag)-eo", internal: "inproc://\(tag)-i")
        let context = ZMQContext()
        let broker = try context.socket(.router)
        try broker.bind(endpoints.backend)
        try broker.setReceiveTimeout(30_000)
        let worker = try Worker(handlers: handlers, endpoints: endpoints, context: context)
        try worker.connect()
        _ = try broker.receive()  // READY
        func unpublished() throws -> Int64 { try Outbox.unpublishedCount(db) }

        // Handling a mutation commits its event and leaves it to the worker.
        _ = handlers.reply(to: .request("ev.say", body: ["word": "one"], user: "alice"))
        #expect(try unpublished() == 1)

        // Serving one sends the reply, then publishes what the outbox holds.
        let request = Envelope.request("ev.say", body: ["word": "two"], user: "alice")
        worker.serve(client: Array("client-1".utf8), bytes: request.encoded())
        let frames = try #require(try broker.receive())
        // MDP/0.2's FINAL: routing id, "MDPW02", 0x04, client, "", envelope.
        #expect(frames.count == 6 && frames[2] == [0x04] && frames[3] == Array("client-1".utf8))
        #expect(try Envelope.decode(frames[5]).corr == request.id)
        #expect(try unpublished() == 0)

        // A request in two frames (header, body): a mutation's answer was
        // encoded whole for its idempotency record, and goes as that one
        // frame (clients read both forms), never encoded twice.
        let split = Envelope.request("ev.say", body: ["word": "three"], user: "alice")
        let parts = split.encodedParts()
        worker.serve(client: Array("client-2".utf8), bodies: [parts.header, parts.body])
        let answer = try #require(try broker.receive())
        #expect(answer.count == 6 && answer[3] == Array("client-2".utf8))
        let reply = try Envelope.decode(answer[5])
        #expect(reply.corr == split.id && reply.kind == .reply)
        // A header that carries a body too, or a body that is not JSON: a 400 naming why.
        let both = Array(#"{"v":1,"id":"x1","type":"ev.say","kind":"request","body":{}}"#.utf8)
        worker.serve(client: Array("client-3".utf8), bodies: [both, parts.body])
        let refusal = try Majordomo.envelope(endingFrames: try #require(try broker.receive()))
        #expect(refusal.quadError?.status == 400 && refusal.quadError?.message.contains("must not carry 'body'") == true)
        worker.serve(client: Array("client-4".utf8), bodies: [parts.header, Array("{nope".utf8)])
        let brokenFrames = try #require(try broker.receive())
        #expect(brokenFrames.count == 7, "an answer not encoded before goes in two frames, as it was asked")
        let broken = try Majordomo.envelope(endingFrames: brokenFrames)
        #expect(broken.quadError?.status == 400 && broken.corr == split.id, "\(broken)")
    }
}
