import Testing
@testable import QuadWire

@Suite("Envelope")
struct EnvelopeTests {
    @Test func roundTripKeepsEveryField() throws {
        let e = Envelope(id: MessageID.make(), type: "orders.place", kind: .request, corr: "c-1", ts: 1_700_000_000_123,
                         src: "edge/alice", deadline: 2500, token: "tok", user: "u-1", role: "student", seq: 7,
                         body: ["product": "p-0001", "quantity": 2, "price": 9.5, "tags": ["a", "é"], "none": nil])
        let decoded = try Envelope.decode(e.encoded())
        #expect(decoded == e)
        #expect(decoded.service == "orders")
    }

    @Test func encodingIsDeterministic() {
        let e = Envelope(id: "x", type: "a.b", kind: .event, ts: 1, body: ["b": 1, "a": 2])
        #expect(String(decoding: e.encoded(), as: UTF8.self) == #"{"body":{"a":2,"b":1},"id":"x","kind":"event","ts":1,"type":"a.b","v":1}"#)
    }

    static let malformed: [(String, [UInt8], String, String)] = [
        ("not UTF-8", [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D], "bad_request", "not UTF-8"),
        ("not JSON", Array("{\"v\":1,".utf8), "bad_request", "not JSON"),
        ("empty", [], "bad_request", "empty message"),
        ("not an object", Array("[1,2]".utf8), "bad_request", "must be a JSON object"),
        ("missing id", Array(#"{"v":1,"type":"a.b","kind":"request"}"#.utf8), "bad_request", "'id' is required"),
        ("missing type", Array(#"{"v":1,"id":"1","kind":"request"}"#.utf8), "bad_request", "'type' is required"),
        ("wrong-typed type", Array(#"{"v":1,"id":"1","type":42,"kind":"request"}"#.utf8), "bad_request", "'type' must be a string, got number"),
        ("wrong-typed deadline", Array(#"{"v":1,"id":"1","type":"a.b","kind":"request","deadline":"soon"}"#.utf8), "bad_request", "'deadline' must be an integer"),
        ("unknown version", Array(#"{"v":2,"id":"1","type":"a.b","kind":"request"}"#.utf8), "bad_request", "unknown protocol version v=2"),
        ("missing version", Array(#"{"id":"1","type":"a.b","kind":"request"}"#.utf8), "bad_request", "'v' is required"),
        ("unknown kind", Array(#"{"v":1,"id":"1","type":"a.b","kind":"ping"}"#.utf8), "bad_request", "unknown kind 'ping'"),
        ("bad type text", Array(#"{"v":1,"id":"1","type":"A..b","kind":"request"}"#.utf8), "bad_request", "dot-separated"),
        ("deeply nested", Array(("{\"v\":1,\"id\":\"1\",\"type\":\"a.b\",\"kind\":\"request\",\"body\":" + String(repeating: "[", count: 100_000)).utf8), "bad_request", "nested deeper than 64"),
        ("trailing data", Array(#"{"v":1,"id":"1","type":"a.b","kind":"request"} x"#.utf8), "bad_request", "trailing data"),
        ("long id", Array(("{\"v\":1,\"id\":\"" + String(repeating: "i", count: 65) + "\",\"type\":\"a.b\",\"kind\":\"request\"}").utf8), "bad_request", "'id' is longer than 64 bytes"),
    ]

    @Test(arguments: malformed)
    func malformedInputGetsANamedError(_ c: (String, [UInt8], String, String)) {
        #expect(throws: QuadError.self, "\(c.0)") { try Envelope.decode(c.1) }
        do {
            _ = try Envelope.decode(c.1)
        } catch {
            #expect(error.code.wire == c.2 && error.code.isKnown, "\(c.0): \(error)")
            #expect(error.message.contains(c.3), "\(c.0): '\(error.message)' should contain '\(c.3)'")
        }
    }

    @Test func oversizeIsTooLargeAndNamesTheLimit() {
        let big = Envelope.request("catalog.x", body: ["blob": .string(String(repeating: "x", count: Envelope.defaultMaxBytes))]).encoded()
        do {
            _ = try Envelope.decode(big)
            Issue.record("an envelope over 1 MiB was accepted")
        } catch {
            #expect(error.code == .tooLarge)
            #expect(error.status == 413)
            #expect(error.message.contains("max_message_bytes=1048576"))
        }
    }

    @Test func errorEnvelopeCarriesCodeStatusMessage() throws {
        let request = Envelope.request("catalog.product.get", body: ["id": "nope"])
        let reply = request.error(.notFound("no product with id 'nope'"))
        let decoded = try Envelope.decode(reply.encoded())
        #expect(decoded.kind == .error)
        #expect(decoded.corr == request.id)
        let e = try #require(decoded.quadError)
        #expect(e.status == 404 && e.code == .notFound && e.message == "no product with id 'nope'")
    }

    @Test func salvagesTheIDOfAnUndecodableEnvelope() {
        #expect(Envelope.salvageID(Array(#"{"v":9,"id":"abc","type":"a"}"#.utf8)) == "abc")
        #expect(Envelope.salvageID(Array("garbage".utf8)) == nil)
    }
}

@Suite("JSON")
struct JSONTests {
    @Test(arguments: [
        #"{"a":[1,2.5,-3e2,true,false,null,"x\n\"\u00e9\ud83d\ude00"]}"#,
        #"[]"#, #"{}"#, #""plain""#, "0", "-0.5",
    ])
    func parsesAndReencodesToTheSameValue(_ text: String) throws {
        let value = try JSON.parse(text)
        #expect(try JSON.parse(value.encoded()) == value)
    }

    @Test func escapesAndUnicode() throws {
        let v = try JSON.parse(#""\ud83d\ude00 \u00e9 \t""#)
        #expect(v.string == "😀 é \t")
    }

    @Test(arguments: ["{", "[1,]", "{\"a\" 1}", "tru", "01", "1.", "\"\\x\"", "\"\u{01}\"", "\"\\ud800\"", "1e999"])
    func rejectsInvalidJSON(_ text: String) {
        #expect(throws: QuadError.self) { try JSON.parse(text) }
    }

    @Test func decodesTypedBodiesWithFieldNames() {
        struct Body: Decodable { let id: String; let quantity: Int }
        do {
            let body: JSON = ["id": "p-1"]
            _ = try body.decode(Body.self)
            Issue.record("decoded a body without quantity")
        } catch let error as QuadError {
            #expect(error.message == "body.quantity is required")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }
}

/// U+0000 is refused wherever a string is, keys included, escaped or raw:
/// a C API would cut the string there.
@Suite("Strings hold no NUL")
struct NULStringTests {
    @Test(arguments: [
        #"{"v":1,"id":"a","type":"orders.place","kind":"request","body":{"product":"p-0001\u0000"}}"#,
        #"{"v":1,"id":"a","type":"orders.place","kind":"request","body":{"items":[{"product":"\u0000p"}]}}"#,
        #"{"v":1,"id":"a","type":"orders.place","kind":"request","body":{"pro\u0000duct":"p-0001"}}"#,
        #"{"v":1,"id":"a\u0000","type":"orders.place","kind":"request"}"#,
        #"{"v":1,"id":"a","type":"orders.place","kind":"request","body":{"note":"x\n\u0000"}}"#,
    ])
    func anEscapedNULIsABadRequestThatSaysWhere(_ text: String) {
        do {
            _ = try Envelope.decode(Array(text.utf8))
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.code == .badRequest && error.status == 400)
            #expect(error.message.contains("U+0000 (NUL)"), "\(error.message)")
            #expect(error.message.contains("at byte"), "\(error.message)")
        }
    }

    @Test func aRawNULByteIsRefusedToo() {
        var bytes = Array(#"{"a":"xy"}"#.utf8)
        bytes.insert(0, at: 7)
        #expect(throws: QuadError.self) { try JSON.parse(bytes) }
        do { _ = try JSON.parse(bytes) } catch { #expect(error.message.contains("U+0000")) }
    }

    /// The refusal still reaches its sender: the id is found for `corr`.
    @Test func theRefusalCarriesTheIDOfTheRequest() {
        let text = #"{"v":1,"id":"req-7","type":"orders.place","kind":"request","body":{"product":"p-0001\u0000"}}"#
        #expect(Envelope.salvageID(Array(text.utf8)) == "req-7")
    }

    @Test func otherEscapesStillDecode() throws {
        #expect(try JSON.parse(#""\u0001\u00e9\ud83d\ude00""#) == .string("\u{1}é😀"))
    }
}

@Suite("MessageID")
struct MessageIDTests {
    @Test func idsAreVersion7AndSortByTime() {
        let a = MessageID.make(now: 1_000)
        let b = MessageID.make(now: 2_000)
        #expect(a < b)
        #expect(a.count == 36)
        let chars = Array(a)
        #expect(chars[14] == "7")
        #expect("89ab".contains(chars[19]))
        #expect(Set((0..<1000).map { _ in MessageID.make() }).count == 1000)
    }
}
