/// Quad's one message: a UTF-8 JSON object behind the ZeroMQ routing frames.
/// See `protos/envelope.schema.json` for the contract.
public struct Envelope: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        case request, reply, error, event
    }

    /// The protocol version this code speaks.
    public static let version: Int64 = 1
    /// Default limit on one envelope's encoded size: 1 MiB.
    public static let defaultMaxBytes = 1 << 20
    /// Limits on header strings.
    public static let maxTypeLength = 128
    public static let maxIDLength = 64
    public static let maxSourceLength = 128
    public static let maxTokenLength = 4096
    /// `caller` holds a 40-character Z85 key or a routing id in hex.
    public static let maxCallerLength = 160

    public var v: Int64 = Envelope.version
    public var id: String
    public var type: String
    public var kind: Kind
    public var corr: String?
    public var ts: Int64
    public var src: String?
    public var deadline: Int64?
    public var token: String?
    public var user: String?
    public var role: String?
    /// Who sent the request, as the broker saw it (set by the broker only):
    /// `key:<Z85 CURVE key>` for an anonymous client of the public frontend,
    /// `conn:<hex routing id>` without CURVE, `service:<src>` on the
    /// internal frontend. Idempotency records of callers without a `user`
    /// are bound to it.
    public var caller: String?
    public var seq: Int64?
    /// The W3C Trace Context `traceparent` of the request this message
    /// belongs to (``Span``): the broker starts a trace for a request that
    /// has none and passes it on with its own span, workers pass it to what
    /// they call and to the events they write. Optional on the wire: one
    /// that cannot be read (``TraceParent``) is read as absent, never
    /// refused, so its receiver starts a new trace, as W3C says.
    public var traceparent: String?
    public var body: JSON

    public init(id: String = MessageID.make(), type: String, kind: Kind, corr: String? = nil, ts: Int64 = Int64(Clock.nowMillis()),
                src: String? = nil, deadline: Int64? = nil, token: String? = nil, user: String? = nil, role: String? = nil,
                caller: String? = nil, seq: Int64? = nil, traceparent: String? = nil, body: JSON = .object([:])) {
        self.id = id
        self.type = type
        self.kind = kind
        self.corr = corr
        self.ts = ts
        self.src = src
        self.deadline = deadline
        self.token = token
        self.user = user
        self.role = role
        self.caller = caller
        self.seq = seq
        self.traceparent = traceparent
        self.body = body
    }

    /// A request.
    /// A request. `user` and `role` count only on the broker's internal
    /// frontend (a service calling a service) and in tests of handlers.
    public static func request(_ type: String, body: JSON = .object([:]), id: String = MessageID.make(), src: String? = nil,
                               deadline: Int64? = 5000, token: String? = nil, user: String? = nil, role: String? = nil) -> Envelope {
        Envelope(id: id, type: type, kind: .request, src: src, deadline: deadline, token: token, user: user, role: role, body: body)
    }

    /// The reply to this request.
    public func reply(_ body: JSON, src: String? = nil) -> Envelope {
        Envelope(type: type, kind: .reply, corr: id, src: src, body: body)
    }

    /// The error reply to this request.
    public func error(_ error: QuadError, src: String? = nil) -> Envelope {
        Envelope(type: type, kind: .error, corr: id, src: src, body: error.body)
    }

    /// An error reply to a message that could not be read: `corr` is the id
    /// when one could be found in it.
    public static func error(_ error: QuadError, corr: String?, type: String = "error", src: String? = nil) -> Envelope {
        Envelope(type: type, kind: .error, corr: corr, src: src, body: error.body)
    }

    /// The error carried by an error envelope.
    public var quadError: QuadError? {
        kind == .error ? QuadError(body: body) ?? .internal("malformed error body") : nil
    }

    /// The first segment of `type`: the service that answers it.
    public var service: Substring {
        type.split(separator: ".", maxSplits: 1).first ?? Substring(type)
    }

    // MARK: Encoding

    public var json: JSON {
        var f: [String: JSON] = [
            "v": .int(v), "id": .string(id), "type": .string(type), "kind": .string(kind.rawValue),
            "ts": .int(ts), "body": body,
        ]
        if let corr { f["corr"] = .string(corr) }
        if let src { f["src"] = .string(src) }
        if let deadline { f["deadline"] = .int(deadline) }
        if let token { f["token"] = .string(token) }
        if let user { f["user"] = .string(user) }
        if let role { f["role"] = .string(role) }
        if let caller { f["caller"] = .string(caller) }
        if let seq { f["seq"] = .int(seq) }
        if let traceparent { f["traceparent"] = .string(traceparent) }
        return .object(f)
    }

    public func encoded() -> [UInt8] { json.encoded() }

    /// The envelope in two frames, as Quad's own peers send it: the header
    /// (every field but `body`, a JSON object) and the body's JSON. The
    /// broker reads and rewrites only the first and passes the second on
    /// as it came (protos/README.md, Framing).
    public func encodedParts() -> (header: [UInt8], body: [UInt8]) { (encodedHeader(), body.encoded()) }

    /// The header frame alone: every field but `body`, a JSON object.
    public func encodedHeader() -> [UInt8] {
        var f = json.object ?? [:]
        f["body"] = nil
        return JSON.object(f).encoded()
    }

    // MARK: Decoding

    /// Decodes and validates one envelope. Every failure is a ``QuadError``
    /// whose message names the problem: size, UTF-8, JSON, a missing or
    /// wrong-typed field, an unknown version or kind.
    public static func decode(_ bytes: [UInt8], maxBytes: Int = Envelope.defaultMaxBytes) throws(QuadError) -> Envelope {
        try checkFrame(bytes, maxBytes: maxBytes)
        let value = try JSON.parse(bytes)
        return try decode(value)
    }

    /// Decodes an envelope sent in two frames (``encodedParts()``): the
    /// header as ``decode(_:maxBytes:)`` checks it (a `body` in it is
    /// refused: the body is the second frame), then the body's JSON. The two
    /// together are held to `maxBytes`.
    public static func decode(header: [UInt8], body: [UInt8], maxBytes: Int = Envelope.defaultMaxBytes) throws(QuadError) -> Envelope {
        try checkFrame(header, maxBytes: maxBytes)
        if header.count + body.count > maxBytes { throw tooLarge(header.count + body.count, maxBytes: maxBytes) }
        guard String(validating: body, as: UTF8.self) != nil else { throw .badRequest("not UTF-8: the body frame must be UTF-8 JSON text") }
        let value = try JSON.parse(header)
        if value["body"] != nil { throw .badRequest("the header frame must not carry 'body': the body is the frame after it") }
        var envelope = try decode(value)
        do { envelope.body = body.isEmpty ? .object([:]) : try JSON.parse(body) } catch {
            throw .badRequest("the body frame is not JSON: \(error.message)")
        }
        return envelope
    }

    /// What every envelope frame must be before it is read: at most
    /// `max_message_bytes`, not empty, UTF-8.
    static func checkFrame(_ bytes: [UInt8], maxBytes: Int) throws(QuadError) {
        if bytes.count > maxBytes { throw tooLarge(bytes.count, maxBytes: maxBytes) }
        if bytes.isEmpty { throw .badRequest("empty message: expected a JSON envelope") }
        guard String(validating: bytes, as: UTF8.self) != nil else {
            throw .badRequest("not UTF-8: the envelope must be UTF-8 JSON text")
        }
    }

    /// A message of `n` bytes over `max_message_bytes`.
    static func tooLarge(_ n: Int, maxBytes: Int) -> QuadError {
        .tooLarge("message is \(n) bytes, over the limit max_message_bytes=\(maxBytes)",
                  details: ["limit": "max_message_bytes", "max": .int(Int64(maxBytes)), "actual": .int(Int64(n))])
    }

    public static func decode(_ value: JSON) throws(QuadError) -> Envelope {
        guard case .object(let f) = value else { throw .badRequest("envelope must be a JSON object, got \(value.typeName)") }

        func string(_ key: String, max: Int, required: Bool) throws(QuadError) -> String? {
            guard let raw = f[key], raw != .null else {
                if required { throw .badRequest("envelope field '\(key)' is required") }
                return nil
            }
            guard let s = raw.string else { throw .badRequest("envelope field '\(key)' must be a string, got \(raw.typeName)") }
            if s.utf8.count > max { throw .badRequest("envelope field '\(key)' is longer than \(max) bytes") }
            if required && s.isEmpty { throw .badRequest("envelope field '\(key)' must not be empty") }
            return s
        }
        func integer(_ key: String, required: Bool) throws(QuadError) -> Int64? {
            guard let raw = f[key], raw != .null else {
                if required { throw .badRequest("envelope field '\(key)' is required") }
                return nil
            }
            guard let n = raw.int else { throw .badRequest("envelope field '\(key)' must be an integer, got \(raw.typeName)") }
            return n
        }

        let v = try integer("v", required: true)!
        guard v == Envelope.version else { throw .badRequest("unknown protocol version v=\(v): this server speaks v=\(Envelope.version)") }
        let id = try string("id", max: maxIDLength, required: true)!
        let type = try string("type", max: maxTypeLength, required: true)!
        guard isValidType(type) else {
            throw .badRequest("envelope field 'type' must be dot-separated segments of [a-z0-9_-], got '\(type)'")
        }
        let kindText = try string("kind", max: 16, required: true)!
        guard let kind = Kind(rawValue: kindText) else {
            throw .badRequest("unknown kind '\(kindText)': expected one of request, reply, error, event")
        }
        let deadline = try integer("deadline", required: false)
        if let deadline, deadline <= 0 || deadline > 3_600_000 {
            throw .badRequest("envelope field 'deadline' must be between 1 and 3600000 ms, got \(deadline)")
        }
        let body = f["body"] ?? .object([:])
        return Envelope(
            id: id, type: type, kind: kind,
            corr: try string("corr", max: maxIDLength, required: false),
            ts: try integer("ts", required: false) ?? 0,
            src: try string("src", max: maxSourceLength, required: false),
            deadline: deadline,
            token: try string("token", max: maxTokenLength, required: false),
            user: try string("user", max: maxSourceLength, required: false),
            role: try string("role", max: 32, required: false),
            caller: try string("caller", max: maxCallerLength, required: false),
            seq: try integer("seq", required: false),
            traceparent: readableTraceparent(f["traceparent"]),
            body: body)
    }

    /// `traceparent` when it is a string W3C Trace Context can read; nil
    /// otherwise (absent, another JSON type, malformed): never an error.
    static func readableTraceparent(_ value: JSON?) -> String? {
        guard let s = value?.string, TraceParent(s) != nil else { return nil }
        return s
    }

    public static func isValidType(_ type: String) -> Bool {
        var previousDot = true
        for c in type.utf8 {
            switch c {
            case UInt8(ascii: "."):
                if previousDot { return false }
                previousDot = true
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
                previousDot = false
            default: return false
            }
        }
        return !previousDot
    }

    /// Best effort to find the `id` of a message that failed to decode, so the
    /// error reply can still be correlated by the sender.
    public static func salvageID(_ bytes: [UInt8]) -> String? {
        guard bytes.count <= defaultMaxBytes * 16, let value = try? JSON.parseForSalvage(bytes), let id = value["id"]?.string,
              id.utf8.count <= maxIDLength else { return nil }
        return id
    }
}

// MARK: Header splice

extension Envelope {
    /// `bytes` (an envelope that ``decode(_:maxBytes:)`` accepted) with the
    /// top-level members named in `set` replaced: every occurrence of each
    /// such key is dropped (duplicates included, and keys spelled with
    /// escapes, compared by their decoded text), then each key whose value
    /// is non-nil is appended as a JSON string. Every other member is copied
    /// byte for byte, so the body is never decoded or re-encoded: a body
    /// full of escapes arrives exactly as it was sent, no bigger. Bytes that
    /// are not a JSON object come back unchanged.
    public static func rewritingHeader(_ bytes: [UInt8], set: [String: String?]) -> [UInt8] {
        var scanner = HeaderScanner(bytes: bytes)
        guard let members = scanner.members() else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 64 * set.count)
        out.append(UInt8(ascii: "{"))
        for m in members where set.index(forKey: m.key) == nil {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: bytes[m.range])
        }
        for key in set.keys.sorted() {
            guard let value = set[key] ?? nil else { continue }
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            JSON.writeString(key, into: &out)
            out.append(UInt8(ascii: ":"))
            JSON.writeString(value, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension Envelope {
    /// The header fields, which are all the broker reads.
    static let headerKeys: Set<String> = ["v", "id", "type", "kind", "corr", "ts", "src", "deadline", "token", "user", "role", "caller", "seq", "traceparent"]

    /// Decodes and validates an envelope's header as ``decode(_:maxBytes:)``
    /// does, without building its body (`body` is `null` in the result):
    /// the body's bytes are skipped, not parsed, so a megabyte body costs a
    /// scan, not a tree of values. Its JSON is the receiving service's to
    /// check (it answers 400 for a broken one). For a router that forwards
    /// the bytes as they came, with ``rewritingHeader(_:set:)``.
    public static func decodeHeader(_ bytes: [UInt8], maxBytes: Int = Envelope.defaultMaxBytes) throws(QuadError) -> Envelope {
        try checkFrame(bytes, maxBytes: maxBytes)
        var scanner = HeaderScanner(bytes: bytes)
        guard let members = scanner.members() else {
            // Not an object of members: the full parser says what is wrong.
            return try decode(JSON.parse(bytes))
        }
        var fields: [String: JSON] = [:]
        for m in members where headerKeys.contains(m.key) {
            var parser = JSONParser(bytes: bytes)
            parser.i = m.range.lowerBound
            _ = try parser.parseString()
            parser.skipSpace()
            parser.i += 1  // the ':' the scanner found
            parser.skipSpace()
            fields[m.key] = try parser.parseValue()
        }
        return try decode(.object(fields))
    }
}

extension Envelope {
    /// Whether a JSON object's text has a top-level `body` member: what
    /// the header frame of an envelope in two frames must not have.
    public static func headerCarriesBody(_ bytes: [UInt8]) -> Bool {
        var scanner = HeaderScanner(bytes: bytes)
        return scanner.members()?.contains { $0.key == "body" } ?? false
    }
}

/// Finds the members of a JSON text's top-level object without building
/// their values: each key decoded, each member's byte range (key to end of
/// value). Values are skipped structurally (strings to their closing quote,
/// brackets by depth); the text was validated before, so this only has to
/// be right on valid JSON and safe (nil, never a crash) on anything else.
struct HeaderScanner {
    let bytes: [UInt8]
    var i = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    /// Past the string starting at `i` (a quote); false when unterminated.
    mutating func skipString() -> Bool {
        i += 1
        while i < bytes.count {
            switch bytes[i] {
            case UInt8(ascii: "\""): i += 1; return true
            case UInt8(ascii: "\\"): i += 2
            default: i += 1
            }
        }
        return false
    }

    mutating func skipValue() -> Bool {
        guard i < bytes.count else { return false }
        switch bytes[i] {
        case UInt8(ascii: "\""): return skipString()
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: "\""):
                    if !skipString() { return false }
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { i += 1; return true }
                default: break
                }
                i += 1
            }
            return false
        default:
            // A number or a literal: up to the next delimiter.
            let start = i
            while i < bytes.count, !(bytes[i] == UInt8(ascii: ",") || bytes[i] == UInt8(ascii: "}") || bytes[i] == UInt8(ascii: "]")
                                      || bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09) { i += 1 }
            return i > start
        }
    }

    mutating func members() -> [(key: String, range: Range<Int>)]? {
        skipSpace()
        guard i < bytes.count, bytes[i] == UInt8(ascii: "{") else { return nil }
        i += 1
        var out: [(key: String, range: Range<Int>)] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") { return out }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return nil }
            let start = i
            guard skipString() else { return nil }
            // Keys are short; the full parser decodes their escapes.
            var keyParser = JSONParser(bytes: Array(bytes[start..<i]))
            guard let key = try? keyParser.parseString() else { return nil }
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
            i += 1
            skipSpace()
            guard skipValue() else { return nil }
            out.append((key, start..<i))
            skipSpace()
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "}") { return out }
            return nil
        }
    }
}
