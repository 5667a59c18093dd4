import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The MDP/0.2 frames, read and written without a socket.
@Suite("Majordomo frames")
struct MajordomoFrameTests {
    let envelope = Envelope.request("catalog.categories").encoded()

    @Test(arguments: [Majordomo.Form.bare, .delimited])
    func aRequestIsReadInEitherForm(form: Majordomo.Form) throws {
        let frames = (form == .delimited ? [[]] : []) + Majordomo.request(service: "catalog", envelope)
        #expect(frames.suffix(4) == [Array("MDPC02".utf8), [0x01], Array("catalog".utf8), envelope])
        let request = try Majordomo.parseRequest(frames[...], count: frames.count).get()
        #expect(request.form == form && request.service == "catalog" && request.body == envelope)
    }

    /// majortomo's Client numbers its REQUEST 0x02, as a worker's.
    @Test func aRequestNumberedAsMajortomoDoesIsRead() throws {
        let frames: [[UInt8]] = [[], Majordomo.clientHeader, [0x02], Array("catalog".utf8), envelope]
        #expect(try Majordomo.parseRequest(frames[...], count: frames.count).get().service == "catalog")
    }

    @Test func aRequestOfAnEnvelopeNamesTheServiceOfItsType() {
        #expect(Majordomo.request(Envelope.request("orders.cart.view"))[2] == Array("orders".utf8))
    }

    /// Quad's peers send an envelope as its header and its body; a foreign
    /// peer's one frame is read as before; both read back the same envelope.
    @Test func anEnvelopeInTwoFramesReadsAsInOne() throws {
        let e = Envelope.request("orders.cart.add", body: ["product": "p-0001", "quantity": 2], src: "phone-1", deadline: 5000)
        let frames = Majordomo.request(e)
        #expect(frames.count == 5 && frames[4] == e.body.encoded())
        guard case let .success(read) = Majordomo.parseRequest(frames[...], count: frames.count) else { Issue.record("refused"); return }
        #expect(read.header == frames[3] && read.body == frames[4])
        let two = try Envelope.decode(header: frames[3], body: frames[4])
        let one = try Envelope.decode(e.encoded())
        #expect(two == e && one == two)
        #expect(try Majordomo.envelope(endingFrames: frames) == e)
        #expect(try Majordomo.envelope(endingFrames: Majordomo.request(service: "orders", e.encoded())) == e)
        // Replies in either form.
        let reply = e.reply(["lines": 1], src: "orders/1")
        let parts = reply.encodedParts()
        let split = try #require(Majordomo.parseReply(Majordomo.reply(service: "orders", parts.header) + [parts.body]))
        #expect(try split.envelope() == reply)
        #expect(try #require(Majordomo.parseReply(Majordomo.reply(service: "orders", reply.encoded()))).envelope() == reply)
        // The two frames are held to the limit together.
        #expect(throws: QuadError.self) { try Envelope.decode(header: frames[3], body: frames[4], maxBytes: frames[3].count + 1) }
    }

    static let h = Array("MDPC02".utf8), catalog = Array("catalog".utf8), json = Array("{}".utf8)
    static let wrongRequests: [([[UInt8]], String)] = [
        ([], "do not start with it"),
        ([json], "got 1 frame"),
        ([Array("MDPC01".utf8), [0x01], catalog, json], "this broker speaks MDPC02"),
        ([h, [0x04], catalog, json], "0x01 (REQUEST"),
        ([h, [0x01]], "without a service frame"),
        ([h, [0x01], catalog], "got 0"),
        ([h, [0x01], catalog, json, json, json], "in one frame, or in two (header, body), got 3 frames"),
        ([h, [0x01], Array("Catalog".utf8), json], "must be a service name"),
        ([h, [0x01], Array("catalog.search".utf8), json], "must be a service name"),
        ([h, [0x01], [0xFF], json], "must be a service name"),
    ]

    /// Each wrong request is refused with a message saying what was wrong.
    @Test(arguments: wrongRequests)
    func aWrongRequestIsRefusedSayingWhy(frames: [[UInt8]], why: String) {
        guard case let .failure(refusal) = Majordomo.parseRequest(frames[...], count: frames.count) else {
            Issue.record("accepted \(frames)")
            return
        }
        #expect(refusal.error.status == 400)
        #expect(refusal.error.message.contains(why), "\(refusal.error.message)")
        #expect(refusal.error.message.contains("MDP/0.2"))
        #expect(refusal.form == .bare)
    }

    @Test func aRefusalOfADelimitedRequestIsAnsweredDelimited() {
        let frames: [[UInt8]] = [[], Array("MDPC02".utf8), [0x01], Array("echo".utf8), [1], [2], [3]]
        guard case let .failure(refusal) = Majordomo.parseRequest(frames[...], count: frames.count) else {
            Issue.record("accepted")
            return
        }
        #expect(refusal.form == .delimited && refusal.service == "echo")
    }

    /// Frames the broker did not keep still count: a message of 40 frames is
    /// refused even when only the first six were copied.
    @Test func framesPastTheKeptOnesAreCounted() {
        let kept = Array(Majordomo.request(service: "catalog", envelope))
        guard case let .failure(refusal) = Majordomo.parseRequest(kept[...], count: 40) else {
            Issue.record("accepted")
            return
        }
        #expect(refusal.error.message.contains("got 37"))
    }

    @Test func replies() throws {
        let final = Majordomo.reply(service: "echo", envelope, form: .delimited)
        #expect(final == [[], Array("MDPC02".utf8), [0x04], Array("echo".utf8), envelope])
        let read = try #require(Majordomo.parseReply(final))
        #expect(read.isFinal && read.service == Array("echo".utf8) && read.body == envelope)
        let partial = Majordomo.reply(service: "echo", envelope, partial: true)
        #expect(partial[1] == [0x03])
        #expect(Majordomo.parseReply(partial)?.isFinal == false)
        #expect(Majordomo.parseReply([envelope]) == nil)
        #expect(Majordomo.parseReply(Majordomo.request(service: "echo", envelope)) == nil)
    }

    @Test(arguments: [Majordomo.Form.bare, .delimited])
    func workerMessagesRoundTrip(form: Majordomo.Form) throws {
        let messages: [Majordomo.WorkerMessage] = [
            .ready(service: Array("echo".utf8), info: nil), .ready(service: Array("echo".utf8), info: Array("{}".utf8)),
            .request(client: [0, 1, 2], bodies: [envelope]), .partial(client: [1], bodies: [envelope]),
            .final(client: [1], bodies: [envelope]), .final(client: [1], bodies: [envelope, envelope]), .heartbeat, .disconnect,
        ]
        for m in messages {
            let frames = Majordomo.frames(m, form: form)
            #expect(frames[form == .delimited ? 1 : 0] == Array("MDPW02".utf8))
            let parsed = try #require(Majordomo.parseWorker(frames[...]))
            #expect(parsed.form == form && parsed.message == m)
        }
        // RFC 18's layout, byte for byte.
        #expect(Majordomo.frames(.request(client: [9], bodies: [envelope])) == [Array("MDPW02".utf8), [0x02], [9], [], envelope])
        #expect(Majordomo.frames(.ready(service: Array("echo".utf8), info: nil), form: .delimited) == [[], Array("MDPW02".utf8), [0x01], Array("echo".utf8)])
    }

    @Test func wrongWorkerMessagesAreNotRead() {
        let h = Array("MDPW02".utf8)
        for frames: [[UInt8]] in [
            [], [h], [Array("QUADW1".utf8), Array("READY".utf8), Array("echo".utf8)], [h, [0x07]], [h, [0x01]],
            [h, [0x04], [1], envelope], [h, [0x04], [1], [1], envelope], [h, [0x05], [1]], [Array("MDPC02".utf8), [0x01], Array("echo".utf8)],
        ] {
            #expect(Majordomo.parseWorker(frames[...]) == nil, "\(frames)")
        }
    }
}

/// A worker and a client that speak MDP/0.2 as a REQ-emulating peer does
/// (an empty delimiter first), against the real broker.
@Suite("Majordomo peers", .serialized)
struct MajordomoPeerTests {
    @Test func aForeignWorkerAndClientTalkThroughTheBroker() throws {
        let stack = try TestStack(name: "mdp")
        try stack.startBroker(heartbeatMs: 5000)
        let context = ZMQContext()
        let worker = try context.socket(.dealer)
        try worker.setReceiveTimeout(5000)
        try worker.connect(stack.endpoints.backend)
        // No info frame: a foreign worker names only its service.
        try worker.send([[], Majordomo.workerHeader, [0x01], Array("echo".utf8)])
        #expect(try stack.waitForWorkers("echo", count: 1))

        let client = try context.socket(.dealer)
        try client.setReceiveTimeout(5000)
        try client.setCurveClient(serverKey: try #require(stack.brokerKey))
        try client.connect(stack.endpoints.frontend)
        let request = Envelope.request("echo.say", body: ["s": "hi"])
        // A foreign client: its envelope in one frame.
        try client.send([[]] + Majordomo.request(service: "echo", request.encoded()))

        // The worker gets the request in its own form: delimiter, header,
        // REQUEST, the client's route, an empty frame, the envelope.
        var got = try #require(try worker.receive())
        while got.count == 3 { got = try #require(try worker.receive()) }  // heartbeats
        #expect(got.count == 6 && got[0] == [] && got[1] == Majordomo.workerHeader && got[2] == [0x02] && got[4] == [], "\(got.count) frames")
        let delivered = try Envelope.decode(got[5])
        #expect(delivered.id == request.id && delivered.caller?.hasPrefix("key:") == true)

        // A PARTIAL goes to the client as PARTIAL; the FINAL ends the request.
        let route = got[3]
        try worker.send([[], Majordomo.workerHeader, [0x03], route, [], delivered.reply(["part": 1], src: "echo/x").encoded()])
        try worker.send([[], Majordomo.workerHeader, [0x04], route, [], delivered.reply(["s": "hi"], src: "echo/x").encoded()])
        let partial = try #require(try client.receive())
        #expect(partial.prefix(4) == [[], Majordomo.clientHeader, [0x03], Array("echo".utf8)])
        let final = try #require(try client.receive())
        #expect(final.prefix(4) == [[], Majordomo.clientHeader, [0x04], Array("echo".utf8)])
        let reply = try Envelope.decode(try #require(final.last))
        #expect(reply.kind == .reply && reply.corr == request.id && reply.body["s"] == "hi")

        // The worker is idle again: a second request reaches it.
        let second = Envelope.request("echo.say")
        try client.send(Majordomo.request(service: "echo", second.encoded()))
        got = try #require(try worker.receive())
        while got.count == 3 { got = try #require(try worker.receive()) }
        #expect((try? Envelope.decode(got[5]))?.id == second.id)
        try worker.send([[], Majordomo.workerHeader, [0x04], got[3], [], Envelope.decode(got[5]).reply([:], src: "echo/x").encoded()])
        // This client sent no delimiter: it gets none.
        let bare = try #require(try client.receive())
        #expect(bare.count == 4 && bare[0] == Majordomo.clientHeader)

        // A type of another service under this service's frame: 400, by name.
        let stray = Envelope.request("catalog.categories")
        try client.send(Majordomo.request(service: "echo", stray.encoded()))
        let refused = try Envelope.decode(try #require(try client.receive()).last ?? [])
        #expect(refused.quadError?.status == 400 && refused.quadError?.message.contains("service 'echo'") == true, "\(refused.body)")
        // The broker's own types go to service `sys`.
        try client.send(Majordomo.request(Envelope.request("sys.health")))
        let health = try #require(try client.receive())
        #expect(health[2] == Array("sys".utf8) && (try? Envelope.decode(health[3]))?.body["service"] == "broker")

        // The worker leaves: the broker confirms with a DISCONNECT and drops it.
        try worker.send([[], Majordomo.workerHeader, [0x06]])
        got = try #require(try worker.receive())
        while got.count == 3 && got[2] == [0x05] { got = try #require(try worker.receive()) }
        #expect(got == [[], Majordomo.workerHeader, [0x06]])
        #expect(try stack.waitForWorkers("echo", count: 0))
    }
}
