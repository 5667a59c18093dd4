import QuadWire
import Testing

/// `Envelope.rewritingHeader`, the broker's way of setting `user`, `role`
/// and `caller` without re-encoding a body.
@Suite("Header splice")
struct BrokerHeaderSpliceTests {
    @Test func everyOccurrenceOfASetKeyGoesAndTheRestIsCopiedByteForByte() throws {
        let body = #"{"s":"\b\u00e9\/","n":1.50,"a":[ 1 ,{"user":"inner"} ]}"#
        let text = #"{ "v":1, "id":"m1","user":"a","type":"t.x","kind":"request","us\u0065r":"b","token":"tk","body":"# + body + #","role":"admin" }"#
        let out = Envelope.rewritingHeader(Array(text.utf8), set: ["user": "u-1", "role": nil, "token": nil, "caller": "key:K"])
        let outText = String(decoding: out, as: UTF8.self)
        #expect(outText.contains(#""body":"# + body), "\(outText)")
        let e = try Envelope.decode(out)
        #expect(e.user == "u-1" && e.role == nil && e.token == nil && e.caller == "key:K" && e.id == "m1" && e.type == "t.x")
        #expect(e.body["a"]?.array?[1]["user"]?.string == "inner", "a nested key of the same name is the body's")
        #expect(outText.components(separatedBy: "\"user\"").count - 1 == 2, "one header user, one in the body: \(outText)")
    }

    @Test func anEmptyObjectAndNonObjectsAreSafe() throws {
        #expect(String(decoding: Envelope.rewritingHeader(Array("{}".utf8), set: ["caller": "c"]), as: UTF8.self) == #"{"caller":"c"}"#)
        for junk in ["", "[1]", "{\"a\":", "{\"a\":\"\\\"}", "{\"a\" 1}", "nul"] {
            #expect(Envelope.rewritingHeader(Array(junk.utf8), set: ["user": "u"]) == Array(junk.utf8))
        }
    }

    @Test func theHeaderDecodesAsTheWholeEnvelopeDoesWithoutTheBody() throws {
        var e = Envelope.request("catalog.search", body: ["q": "\u{8}é", "deep": [[1, [2]]]], src: "edge/a", deadline: 900, token: "t.k")
        e.caller = "key:K"
        let header = try Envelope.decodeHeader(e.encoded())
        var expected = e
        expected.body = [:]
        #expect(header == expected)
        // Duplicates: the last wins, as in the full decoder.
        let dup = Array(#"{"v":1,"id":"a","type":"x.y","kind":"request","type":"z.w","body":[1,"}"]}"#.utf8)
        #expect(try Envelope.decodeHeader(dup).type == "z.w")
        for junk in ["", "nul", "[]", #"{"v":1}"#, #"{"v":2,"id":"a","type":"x.y","kind":"request"}"#, #"{"v":1,"id":"a","type":"X","kind":"request"}"#,
                     #"{"v":1,"id":"a","type":"x.y","kind":"request","deadline":0}"#, #"{"v":1,"id":"a","type":"x.y","kind":"request","body":[1"#] {
            #expect(throws: QuadError.self) { try Envelope.decodeHeader(Array(junk.utf8)) }
        }
    }
}
