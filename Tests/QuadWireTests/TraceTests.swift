import Testing
@testable import QuadWire

/// W3C Trace Context's `traceparent` as envelopes carry it.
@Suite("Trace context")
struct TraceTests {
    static let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func aValidTraceparentIsReadFieldByField() throws {
        let p = try #require(TraceParent(TraceTests.valid))
        #expect(p.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(p.parentID == "00f067aa0ba902b7")
        #expect(p.flags == "01")
        // A later version may carry more fields after a dash: its first four are read.
        #expect(TraceParent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later")?.traceID == p.traceID)
    }

    @Test(arguments: [
        "", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero parent
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff is invalid
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // version 00 is exactly 55
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // a later version's extra field starts with a dash
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + String(repeating: "0", count: 300),
    ])
    func aMalformedTraceparentIsNotRead(_ text: String) {
        #expect(TraceParent(text) == nil)
    }

    @Test func aChildKeepsTheTraceAndNamesTheSenderAsParent() throws {
        let span = Span.child(of: TraceTests.valid)
        #expect(span.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(span.parentID == "00f067aa0ba902b7")
        #expect(span.spanID.count == 16 && span.spanID != "00f067aa0ba902b7")
        let sent = try #require(TraceParent(span.traceparent))
        #expect(sent.traceID == span.traceID && sent.parentID == span.spanID)
        let call = span.child()
        #expect(call.traceID == span.traceID && call.parentID == span.spanID)
    }

    @Test(arguments: [nil, "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"])
    func noReadableTraceparentStartsANewTrace(_ text: String?) throws {
        let a = Span.child(of: text)
        let b = Span.child(of: text)
        #expect(a.parentID == nil)
        #expect(a.traceID.count == 32 && a.traceID != b.traceID)
        #expect(TraceParent(a.traceparent) != nil)
    }

    @Test func anEnvelopeKeepsItsTraceparentAndOneWithoutIsStillValid() throws {
        var e = Envelope.request("orders.place", body: ["x": 1])
        #expect(try Envelope.decode(e.encoded()).traceparent == nil)
        #expect(!String(decoding: e.encoded(), as: UTF8.self).contains("traceparent"))
        e.traceparent = TraceTests.valid
        #expect(try Envelope.decode(e.encoded()) == e)
        #expect(try Envelope.decodeHeader(e.encoded()).traceparent == TraceTests.valid)
    }

    /// W3C: a receiver that cannot parse it starts a new trace. Never a 400.
    @Test(arguments: [#""garbage""#, "42", "null", #"{"a":1}"#, #"["00"]"#, #""00-00000000000000000000000000000000-00f067aa0ba902b7-01""#])
    func aMalformedTraceparentInAnEnvelopeIsReadAsAbsent(_ value: String) throws {
        let bytes = Array(#"{"v":1,"id":"1","type":"a.b","kind":"request","traceparent":\#(value)}"#.utf8)
        #expect(try Envelope.decode(bytes).traceparent == nil)
        #expect(try Envelope.decodeHeader(bytes).traceparent == nil)
    }
}
