/// A span of a trace, as W3C Trace Context names them
/// (https://www.w3.org/TR/trace-context/): the trace every process of one
/// request shares, this process's span of it, and the span that caused it.
/// An envelope carries it as `traceparent`,
/// `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`, where the
/// "parent" is the sender's own span: the receiver makes a span of its own
/// whose parent that is (``child(of:)``), and puts its own id in what it
/// sends on (``traceparent``).
public struct Span: Sendable, Equatable {
    /// 32 lowercase hex digits, never all zeros.
    public let traceID: String
    /// 16 lowercase hex digits, never all zeros.
    public let spanID: String
    /// The sender's span, when the trace came with the request.
    public let parentID: String?
    /// The trace flags as received (`01`: sampled); Quad logs every span.
    public let flags: String

    public init(traceID: String, spanID: String, parentID: String?, flags: String = "01") {
        self.traceID = traceID
        self.spanID = spanID
        self.parentID = parentID
        self.flags = flags
    }

    /// The `traceparent` that names this span as the parent of what it sends.
    public var traceparent: String { "00-\(traceID)-\(spanID)-\(flags)" }

    /// A new span of the trace `traceparent` names, its parent the sender's
    /// span; a new trace (no parent) when there is none or it cannot be
    /// read: W3C's rule for a receiver that cannot parse the header.
    public static func child(of traceparent: String?) -> Span {
        if let traceparent, let p = TraceParent(traceparent) {
            return Span(traceID: p.traceID, spanID: Span.newID(bytes: 8), parentID: p.parentID, flags: p.flags)
        }
        return Span(traceID: Span.newID(bytes: 16), spanID: Span.newID(bytes: 8), parentID: nil)
    }

    /// A new span of this span's trace whose parent is this one (a call
    /// this process makes inside its own span).
    public func child() -> Span { Span(traceID: traceID, spanID: Span.newID(bytes: 8), parentID: spanID, flags: flags) }

    /// `bytes` random bytes as lowercase hex, never all zeros (W3C calls an
    /// all-zero id invalid), written straight into the string's buffer.
    static func newID(bytes count: Int) -> String {
        var raw: (UInt64, UInt64) = (0, 0)
        return withUnsafeMutableBytes(of: &raw) { buffer -> String in
            let b = buffer.bindMemory(to: UInt8.self)
            repeat {
                MessageID.fillRandom(UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]))
            } while (0..<count).allSatisfy { b[$0] == 0 }
            return String(unsafeUninitializedCapacity: count * 2) { out in
                for k in 0..<count {
                    out[2 * k] = MessageID.hexDigits[Int(b[k] >> 4)]
                    out[2 * k + 1] = MessageID.hexDigits[Int(b[k] & 0x0F)]
                }
                return count * 2
            }
        }
    }
}

/// A `traceparent` header read strictly as W3C Trace Context level 1 says:
/// version `00` is exactly 55 characters; a later version (not `ff`) may be
/// longer, its first four fields read the same way; hex is lowercase; the
/// trace id and the parent id are not all zeros. Anything else is nil.
public struct TraceParent: Sendable, Equatable {
    public let traceID: String
    public let parentID: String
    public let flags: String

    /// The longest `traceparent` kept from an envelope: longer ones (a
    /// later version's extra fields past this) are read as unreadable.
    public static let maxLength = 256

    public init?(_ text: String) {
        // The length first: a megabyte-long value is not copied to be refused.
        guard text.utf8.count >= 55, text.utf8.count <= TraceParent.maxLength else { return nil }
        let u = Array(text.utf8)
        func isHex(_ range: Range<Int>) -> Bool {
            range.allSatisfy { (u[$0] >= 0x30 && u[$0] <= 0x39) || (u[$0] >= 0x61 && u[$0] <= 0x66) }
        }
        func isZero(_ range: Range<Int>) -> Bool { range.allSatisfy { u[$0] == 0x30 } }
        let dash = UInt8(ascii: "-")
        guard isHex(0..<2), u[2] == dash, isHex(3..<35), u[35] == dash, isHex(36..<52), u[52] == dash, isHex(53..<55) else { return nil }
        let version = (u[0], u[1])
        if version == (0x66, 0x66) { return nil }
        if version == (0x30, 0x30) {
            guard u.count == 55 else { return nil }
        } else if u.count > 55, u[55] != dash {
            return nil
        }
        guard !isZero(3..<35), !isZero(36..<52) else { return nil }
        traceID = String(decoding: u[3..<35], as: UTF8.self)
        parentID = String(decoding: u[36..<52], as: UTF8.self)
        flags = String(decoding: u[53..<55], as: UTF8.self)
    }
}

extension Span {
    /// The span of the request this thread is handling now: bound by a
    /// worker around each request's handler and each continuation of it
    /// (a call's answer, a timer it set), so that the calls it makes and
    /// the events it writes carry its trace, and so does every log line.
    @TaskLocal public static var current: Span?
}
