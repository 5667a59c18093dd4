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
    }
}
