import QuadWire

/// A request, reply or event body as a Swift type. Each field is declared
/// once, in ``fields``, with its key path, its wire name and its ``Shape``;
/// from that one list come the object's JSON Schema (so `protos/` and the
/// ``Validator``), decoding a checked body into the struct, and encoding
/// the struct back to JSON. A field cannot be in the schema and missing
/// from the struct, or the other way round.
///
/// ```swift
/// struct Request: Body {
///     var offset: Int64 = 0
///     var limit: Int64 = 50
///     static let fields: [Field<Self>] = [
///         .field(\.offset, "offset", .int(min: 0, default: 0).optional),
///         .field(\.limit, "limit", .int(1...200, default: 50).limit("max_page_size").optional),
///     ]
/// }
/// ```
///
/// A field whose shape is ``Shape/optional`` may be absent: it decodes to
/// its shape's `default` when it has one, else to nil (its Swift type is
/// then an optional), and a nil is left out when encoded. A nil in a
/// field that is not optional is written as `null` (a `oneOf [..., null]`).
public protocol Body: WireValue {
    init()
    static var fields: [Field<Self>] { get }
    /// Whether fields the type does not name are allowed in (and kept
    /// out of) the body; false unless the type says so.
    static var open: Bool { get }
    /// Decoding and encoding; the defaults go field by field (a type that
    /// is all escape hatch, ``JSONBody``, keeps the JSON whole).
    init(json: JSON) throws(QuadError)
    var json: JSON { get }
}

extension Body {
    public static var open: Bool { false }

    /// The object shape the fields declare, in their order (which is the
    /// order of `required`).
    public static var shape: Shape { .object(fields: fields.map { ($0.name, $0.shape) }, open: open) }

    /// Decodes a body already checked against ``shape`` (a handler's
    /// request, after the ``Validator``); a body that does not fit is a
    /// bad_request naming the field.
    public init(json: JSON) throws(QuadError) {
        guard case .object(let values) = json else { throw .badRequest("body must be an object, got \(json.typeName)") }
        var value = Self()
        for field in Self.fields {
            var given = values[field.name]
            if given == nil || given == .null && field.shape.isOptional, let d = field.shape.keywords["default"] { given = d }
            do { try field.decode(&value, given) } catch {
                // A nested part's message goes on with its path: body.inner.ok, body.rows[0].ok.
                throw .badRequest(wirePath("body.\(field.name)", error.message))
            }
        }
        self = value
    }

    /// The body as JSON, each field under its wire name.
    public var json: JSON {
        var out: [String: JSON] = [:]
        for field in Self.fields {
            if let v = field.encode(self) { out[field.name] = v } else if !field.shape.isOptional { out[field.name] = .null }
        }
        return .object(out)
    }

    public init(wire: JSON?) throws(QuadError) {
        guard let wire else { throw .badRequest("is required") }
        do { try self.init(json: wire) } catch {
            throw .badRequest(error.message.hasPrefix("body.") ? String(error.message.dropFirst(4)) : error.message)
        }
    }

    public var wire: JSON? { json }
}

/// One field of a ``Body``: its wire name, its shape, and how it is read
/// from and written to the struct (through its key path).
public struct Field<Root>: Sendable {
    public let name: String
    public let shape: Shape
    let decode: @Sendable (inout Root, JSON?) throws(QuadError) -> Void
    let encode: @Sendable (Root) -> JSON?

    /// The field `name`, kept at `path`, of `shape`.
    public static func field<V: WireValue>(_ path: WritableKeyPath<Root, V> & Sendable, _ name: String, _ shape: Shape) -> Field {
        Field(name: name, shape: shape,
              decode: { (root: inout Root, json: JSON?) throws(QuadError) in root[keyPath: path] = try V(wire: json) },
              encode: { $0[keyPath: path].wire })
    }
}

/// A Swift value that is one JSON value of a body: a string, an integer,
/// a number, a boolean, an array or optional of these, a nested ``Body``,
/// or `JSON` itself for the parts a contract leaves open.
public protocol WireValue: Sendable {
    /// Reads the value; nil is an absent field. Throws a message that
    /// reads after `body.<field> ` ("must be a string").
    init(wire: JSON?) throws(QuadError)
    /// The value as JSON; nil leaves an optional field out.
    var wire: JSON? { get }
}

extension String: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let s = wire?.string else { throw .badRequest(wire == nil ? "is required" : "must be a string") }
        self = s
    }
    public var wire: JSON? { .string(self) }
}

extension Int64: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let i = wire?.int else { throw .badRequest(wire == nil ? "is required" : "must be an integer") }
        self = i
    }
    public var wire: JSON? { .int(self) }
}

extension Double: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let d = wire?.double else { throw .badRequest(wire == nil ? "is required" : "must be a number") }
        self = d
    }
    public var wire: JSON? { JSON.number(self) }
}

extension Bool: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let b = wire?.bool else { throw .badRequest(wire == nil ? "is required" : "must be a boolean") }
        self = b
    }
    public var wire: JSON? { .bool(self) }
}

/// A state a body carries (an order's status, a hold's): one of a few
/// words on the wire, a case in the code. The field's shape is
/// `.choice(Self.words)`; reading any other word is refused naming them.
public protocol WireEnum: WireValue, RawRepresentable, CaseIterable, Hashable where RawValue == String {}

extension WireEnum {
    /// Every word of the state, in the order of its cases.
    public static var words: [String] { allCases.map(\.rawValue) }

    public init(wire: JSON?) throws(QuadError) {
        guard let word = wire?.string else { throw .badRequest(wire == nil ? "is required" : "must be a string") }
        guard let value = Self(rawValue: word) else {
            throw .badRequest("must be one of \(Self.words.joined(separator: ", ")), got '\(word.prefix(64))'")
        }
        self = value
    }

    public var wire: JSON? { .string(rawValue) }
}

/// The escape hatch: a part of a body the contract leaves open (an
/// analytics answer, a product's free-form attributes), kept as it came.
extension JSON: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let wire else { throw .badRequest("is required") }
        self = wire
    }
    public var wire: JSON? { self }
}

extension Optional: WireValue where Wrapped: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let wire, wire != .null else { self = nil; return }
        self = try Wrapped(wire: wire)
    }
    public var wire: JSON? { self?.wire }
}

extension Array: WireValue where Element: WireValue {
    public init(wire: JSON?) throws(QuadError) {
        guard let items = wire?.array else { throw .badRequest(wire == nil ? "is required" : "must be an array") }
        var out: [Element] = []
        out.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            do { out.append(try Element(wire: item)) } catch { throw .badRequest(wirePath("[\(i)]", error.message)) }
        }
        self = out
    }
    public var wire: JSON? { .array(map { $0.wire ?? .null }) }
}

extension Dictionary: WireValue where Key == String, Value: WireValue {
    /// A map (`Shape.map(of:)`): every member a value of one type.
    public init(wire: JSON?) throws(QuadError) {
        guard let members = wire?.object else { throw .badRequest(wire == nil ? "is required" : "must be an object") }
        var out: [String: Value] = [:]
        for (key, member) in members {
            do { out[key] = try Value(wire: member) } catch { throw .badRequest(wirePath(".\(key)", error.message)) }
        }
        self = out
    }
    public var wire: JSON? { .object(mapValues { $0.wire ?? .null }) }
}

/// A reply the contract leaves open as a whole (an `allOf` of a shared
/// definition, an analytics answer): the JSON as the handler built it.
public struct JSONBody: Body {
    public var value: JSON = .object([:])
    public init() {}
    public init(_ value: JSON) { self.value = value }
    public static let fields: [Field<Self>] = []
    public static var open: Bool { true }
    public init(json: JSON) throws(QuadError) { value = json }
    public var json: JSON { value }
}

/// A body with no fields: `{}`.
public struct NoFields: Body {
    public init() {}
    public static let fields: [Field<Self>] = []
}

/// An operation with the Swift types of its request and reply: what a
/// handler registered for it receives and returns.
public struct TypedOperation<Request: Body, Reply: Body>: Sendable {
    public let operation: Operation

    /// The shapes default to the types' own; pass them to add what a type
    /// does not say (`.described(...)`, `.exclusive(a, b)`).
    public init(_ type: String, _ kind: OperationKind, auth: Auth, request: Shape = Request.shape, reply: Shape = Reply.shape) {
        operation = Operation(type, kind, auth: auth, request: request, reply: reply)
    }

    public var type: String { operation.type }
}

/// An event topic with the Swift type of its body.
public struct TypedEvent<B: Body>: Sendable {
    public let event: Event

    public init(_ type: String, body: Shape = B.shape, audience: Audience = .services) { event = Event(type, body: body, audience: audience) }

    public var type: String { event.type }
}

/// `head` and what a part of it said: `body.rows` and `[0].ok must be a
/// boolean` read as one path; a plain message comes after a space.
func wirePath(_ head: String, _ message: String) -> String {
    message.first == "." || message.first == "[" ? head + message : head + " " + message
}
