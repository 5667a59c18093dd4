import Foundation

/// A JSON value. Bodies travel as this type so the runtime can validate and
/// re-encode them without knowing each service's shapes.
public enum JSON: Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])

    public subscript(key: String) -> JSON? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }

    public var string: String? { if case .string(let s) = self { return s }; return nil }
    public var bool: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var array: [JSON]? { if case .array(let a) = self { return a }; return nil }
    public var object: [String: JSON]? { if case .object(let o) = self { return o }; return nil }
    public var isNull: Bool { self == .null }

    /// An integer, also from a double with no fraction.
    public var int: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.rounded() == d && abs(d) < 9.0e15: return Int64(d)
        default: return nil
        }
    }

    public var double: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }

    /// Numbers compare by value: `3` equals `3.0`, as in JSON itself.
    public static func == (a: JSON, b: JSON) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.int(let x), .int(let y)): return x == y
        case (.int, .double), (.double, .int), (.double, .double): return a.double == b.double
        case (.string(let x), .string(let y)): return x == y
        case (.array(let x), .array(let y)): return x == y
        case (.object(let x), .object(let y)): return x == y
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let b): hasher.combine(b)
        case .int, .double: hasher.combine(double)
        case .string(let s): hasher.combine(s)
        case .array(let a): hasher.combine(a)
        case .object(let o): hasher.combine(o)
        }
    }

    /// The name of this value's JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}

// MARK: - Parsing

extension JSON {
    /// Maximum nesting of arrays and objects accepted from the wire.
    public static let maxDepth = 64

    /// Parses UTF-8 JSON text. Throws ``QuadError`` with code `bad_request`
    /// naming what is wrong: not UTF-8, not JSON, or nested too deep.
    public static func parse(_ bytes: [UInt8]) throws(QuadError) -> JSON {
        var parser = JSONParser(bytes: bytes)
        return try parser.parseDocument()
    }

    /// Parses text that is being refused anyway, to find what to answer
    /// it with (its `id`): strings may hold U+0000 here, and nothing
    /// parsed this way may be stored or acted on.
    static func parseForSalvage(_ bytes: [UInt8]) throws(QuadError) -> JSON {
        var parser = JSONParser(bytes: bytes)
        parser.allowsNUL = true
        return try parser.parseDocument()
    }

    public static func parse(_ text: String) throws(QuadError) -> JSON {
        try parse(Array(text.utf8))
    }
}

/// A small strict JSON parser (RFC 8259) over bytes. It reports the byte
/// offset of the first problem and refuses nesting beyond ``JSON/maxDepth``,
/// so hostile input can neither crash nor exhaust the stack.
struct JSONParser {
    let bytes: [UInt8]
    var i = 0
    var depth = 0
    /// Only for salvaging the id of a message refused for its NULs.
    var allowsNUL = false

    init(bytes: [UInt8]) { self.bytes = bytes }

    func fail(_ what: String) -> QuadError {
        .badRequest("not JSON: \(what) at byte \(i)")
    }

    mutating func parseDocument() throws(QuadError) -> JSON {
        skipSpace()
        let value = try parseValue()
        skipSpace()
        if i != bytes.count { throw fail("unexpected trailing data") }
        return value
    }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    mutating func parseValue() throws(QuadError) -> JSON {
        guard i < bytes.count else { throw fail("unexpected end") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character")
        }
    }

    mutating func literal(_ word: String) throws(QuadError) {
        let w = Array(word.utf8)
        guard i + w.count <= bytes.count else { throw fail("unexpected end") }
        for k in 0..<w.count where bytes[i + k] != w[k] { throw fail("invalid literal") }
        i += w.count
    }

    mutating func enter() throws(QuadError) {
        depth += 1
        if depth > JSON.maxDepth { throw .badRequest("JSON nested deeper than \(JSON.maxDepth) levels") }
    }

    mutating func parseObject() throws(QuadError) -> JSON {
        try enter()
        i += 1
        var fields: [String: JSON] = [:]
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; depth -= 1; return .object(fields) }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try parseString()
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            i += 1
            skipSpace()
            fields[key] = try parseValue()
            skipSpace()
            guard i < bytes.count else { throw fail("unexpected end") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "}") { i += 1; break }
            throw fail("expected ',' or '}'")
        }
        depth -= 1
        return .object(fields)
    }

    mutating func parseArray() throws(QuadError) -> JSON {
        try enter()
        i += 1
        var items: [JSON] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; depth -= 1; return .array(items) }
        while true {
            skipSpace()
            items.append(try parseValue())
            skipSpace()
            guard i < bytes.count else { throw fail("unexpected end") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "]") { i += 1; break }
            throw fail("expected ',' or ']'")
        }
        depth -= 1
        return .array(items)
    }

    mutating func parseString() throws(QuadError) -> String {
        i += 1
        let start = i
        // Fast path: no escapes.
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                let slice = bytes[start..<i]
                i += 1
                guard let s = String(validating: slice, as: UTF8.self) else { throw .badRequest("not UTF-8: invalid byte sequence in a string before byte \(i)") }
                return s
            }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw c == 0 && !allowsNUL ? .badRequest("strings must not contain U+0000 (NUL): a NUL byte at byte \(i)") : fail("control character in string") }
            i += 1
        }
        var out = [UInt8](bytes[start..<i])
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                i += 1
                guard let s = String(validating: out, as: UTF8.self) else { throw .badRequest("not UTF-8: invalid byte sequence in a string before byte \(i)") }
                return s
            }
            if c < 0x20 { throw c == 0 && !allowsNUL ? .badRequest("strings must not contain U+0000 (NUL): a NUL byte at byte \(i)") : fail("control character in string") }
            if c != UInt8(ascii: "\\") { out.append(c); i += 1; continue }
            i += 1
            guard i < bytes.count else { throw fail("unexpected end") }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else { throw fail("lone surrogate") }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw fail("lone surrogate")
                }
                // A C API (SQLite, libpq, strlen) would cut the string at a
                // NUL and store or compare a shorter one than was checked:
                // such strings are refused here, for every envelope at once.
                if scalar == 0 && !allowsNUL {
                    throw .badRequest("strings must not contain U+0000 (NUL): \\u0000 at byte \(i - 6)")
                }
                guard let u = Unicode.Scalar(scalar) else { throw fail("invalid escape") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default: throw fail("invalid escape")
            }
        }
        throw fail("unterminated string")
    }

    mutating func hex4() throws(QuadError) -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("unexpected end") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[i]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v * 16 + d
            i += 1
        }
        return v
    }

    mutating func parseNumber() throws(QuadError) -> JSON {
        let start = i
        var isInteger = true
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) else { throw fail("invalid number") }
        if bytes[i] == UInt8(ascii: "0") { i += 1 } else { while i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) { i += 1 } }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            isInteger = false
            i += 1
            guard i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) else { throw fail("invalid number") }
            while i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            isInteger = false
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) else { throw fail("invalid number") }
            while i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) { i += 1 }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        if isInteger, let v = Int64(text) { return .int(v) }
        guard let d = Double(text), d.isFinite else { throw fail("number out of range") }
        return .double(d)
    }
}

// MARK: - Writing

extension JSON {
    /// Compact JSON text with keys in sorted order, so equal values encode to
    /// equal bytes.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    public var text: String { String(decoding: encoded(), as: UTF8.self) }

    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): JSON.writeInt(i, into: &out)
        case .double(let d):
            if d.rounded() == d && abs(d) < 1e15 { out.append(contentsOf: String(Int64(d)).utf8) } else { out.append(contentsOf: "\(d)".utf8) }
        case .string(let s): JSON.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (n, item) in items.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            // The pairs sorted together: no hash lookup per key afterwards
            // (a profile of telemetry.ingest had 12% in hashing here).
            for (n, field) in fields.sorted(by: { $0.key < $1.key }).enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                JSON.writeString(field.key, into: &out)
                out.append(UInt8(ascii: ":"))
                field.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Decimal digits written straight into `out`, with no String made.
    public static func writeInt(_ i: Int64, into out: inout [UInt8]) {
        if i == 0 { out.append(UInt8(ascii: "0")); return }
        if i < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so Int64.min has one too.
        var m = i.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: 20 digits fit
        let count = withUnsafeMutableBytes(of: &digits) { raw -> Int in
            var k = raw.count
            while m > 0 {
                k -= 1
                raw[k] = UInt8(ascii: "0") + UInt8(m % 10)
                m /= 10
            }
            out.append(contentsOf: raw[k...])
            return raw.count - k
        }
        _ = count
    }

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole.
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(contentsOf: s.utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        for c in s.utf8 {
            switch c {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(c)
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(c)
            case 0x0A: out.append(contentsOf: "\\n".utf8)
            case 0x0D: out.append(contentsOf: "\\r".utf8)
            case 0x09: out.append(contentsOf: "\\t".utf8)
            case 0..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hexDigits[Int(c >> 4)])
                out.append(hexDigits[Int(c & 0xF)])
            default: out.append(c)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

// MARK: - Codable bridge

extension JSON: Codable {
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int64.self) { self = .int(i) }
        else if let d = try? c.decode(Double.self) { self = .double(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSON].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSON].self)) }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// Converts any `Encodable` into a JSON value.
    public init<T: Encodable>(encoding value: T) throws {
        let data = try JSONEncoder().encode(value)
        self = try JSON.parse(Array(data))
    }

    /// Decodes this value as `T`, turning decoding failures into `bad_request`
    /// errors that name the field.
    public func decode<T: Decodable>(_ type: T.Type) throws(QuadError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(encoded()))
        } catch let error as DecodingError {
            throw .badRequest(JSON.describe(error))
        } catch {
            throw .badRequest("body: \(error)")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [CodingKey]) -> String {
            let p = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return p.isEmpty ? "body" : "body.\(p)"
        }
        switch error {
        case .keyNotFound(let key, let ctx): return "\(path(ctx.codingPath + [key])) is required"
        case .typeMismatch(let type, let ctx): return "\(path(ctx.codingPath)) must be of type \(type)"
        case .valueNotFound(let type, let ctx): return "\(path(ctx.codingPath)) must be a \(type), not null"
        case .dataCorrupted(let ctx): return "\(path(ctx.codingPath)): \(ctx.debugDescription)"
        @unknown default: return "body is invalid"
        }
    }
}
