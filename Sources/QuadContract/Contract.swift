import QuadWire

/// Who may send a request (`x-quad-auth` in its schema).
public enum Auth: String, Sendable, CaseIterable {
    /// Anyone, signed in or not.
    case none
    /// A signed-in user; the request acts on that user only.
    case user
    /// A user whose role is admin.
    case admin
    /// One of Quad's own services (the internal frontend), or an admin.
    case service
}

/// Whether a request changes state. A mutation is idempotent by its
/// envelope id: a retry under the same id gets the first reply.
public enum OperationKind: String, Sendable {
    case query, mutation
}

/// One request type: its body, its reply's body, and who may send it.
public struct Operation: Sendable {
    /// `catalog.products.list`; for the operations every service answers
    /// (``Common``), the part after the service: `sys.health`.
    public let type: String
    public let kind: OperationKind
    public let auth: Auth
    public let request: Shape
    public let reply: Shape

    public init(_ type: String, _ kind: OperationKind, auth: Auth, request: Shape, reply: Shape) {
        self.type = type
        self.kind = kind
        self.auth = auth
        self.request = request
        self.reply = reply
    }

    /// The service that answers it (the type's first segment).
    public var service: String { String(type.prefix { $0 != "." }) }
    var op: String { String(type.drop { $0 != "." }.dropFirst()) }
}

/// One event topic and its body.
public struct Event: Sendable {
    public let type: String
    public let body: Shape

    public init(_ type: String, body: Shape) {
        self.type = type
        self.body = body
    }

    public var path: String { "\(type.prefix { $0 != "." })/\(type.drop { $0 != "." }.dropFirst()).event.json" }
}

/// A shape that several schemas share, written to its own file
/// (`catalog/product.schema.json`) and named by `$ref`.
public struct Definition: Sendable {
    public let path: String
    public let title: String
    public let shape: Shape

    public init(_ path: String, title: String, _ shape: Shape) {
        self.path = path
        self.title = title
        self.shape = shape
    }
}

/// The whole contract: every request, reply and event body of every
/// service, and the shared definitions they refer to. `protos/` is written
/// from it (``files``) and requests are checked against it (``Validator``).
public enum Contract {
    /// The base of every schema's `$id`.
    public static let idBase = "https://quad.local/protos/"

    /// What each service answers of its own, by type.
    public static let operations: [Operation] =
        Accounts.operations + Analytics.operations + Catalog.operations + Favorites.operations + Orders.operations
        + Reservations.operations + Telemetry.operations + BrokerSys.operations

    /// What every service answers as `<service>.<type>`.
    public static let common: [Operation] = Common.operations

    public static let events: [Event] =
        Accounts.events + Catalog.events + Favorites.events + Orders.events + Occupancy.events + Reservations.events + Telemetry.events

    public static let definitions: [Definition] =
        Wire.definitions + Accounts.definitions + Analytics.definitions + Catalog.definitions + Edge.definitions + Favorites.definitions
        + Orders.definitions + Reservations.definitions + Telemetry.definitions

    static let byType: [String: Operation] = Dictionary(operations.map { ($0.type, $0) }, uniquingKeysWith: { a, _ in a })
    static let commonByOp: [String: Operation] = Dictionary(common.map { ($0.type, $0) }, uniquingKeysWith: { a, _ in a })

    /// The operation a request of `type` is, if the contract declares it:
    /// the service's own, or one every service answers.
    public static func operation(_ type: String) -> Operation? {
        if let op = byType[type] { return op }
        let rest = type.drop { $0 != "." }.dropFirst()
        guard !rest.isEmpty, type.first != "." else { return nil }
        if let op = commonByOp[String(rest)], type.prefix(while: { $0 != "." }) != "sys" { return op }
        return nil
    }

    /// The `protos/` path of the request and reply schemas of `type`.
    public static func schemaPaths(_ type: String) -> (request: String, reply: String)? {
        if let op = byType[type] { return ("\(op.service)/\(op.op).request.json", "\(op.service)/\(op.op).reply.json") }
        if let op = operation(type) { return ("common/\(op.type).request.json", "common/\(op.type).reply.json") }
        return nil
    }

    /// The event topic of `type`, if declared.
    public static func event(_ type: String) -> Event? { events.first { $0.type == type } }
}

// MARK: - protos/

extension Contract {
    /// Every schema file of `protos/`, by path, as the text it is written
    /// with (two-space indent, keys in a fixed order).
    public static var files: [(path: String, text: String)] {
        var out: [(String, JSON)] = []
        func document(_ path: String, title: String, _ shape: Shape, _ extra: [String: JSON] = [:]) {
            var k = shape.keywords
            k["$schema"] = "https://json-schema.org/draft/2020-12/schema"
            k["$id"] = .string(idBase + path)
            k["title"] = .string(title)
            for (key, value) in extra { k[key] = value }
            out.append((path, .object(k)))
        }
        func annotations(_ op: Operation) -> [String: JSON] {
            var a: [String: JSON] = ["x-quad-kind": .string(op.kind.rawValue)]
            if op.auth != .none { a["x-quad-auth"] = .string(op.auth.rawValue) }
            return a
        }
        for op in operations {
            let paths = schemaPaths(op.type)!
            document(paths.request, title: "\(op.type) request", op.request, annotations(op))
            document(paths.reply, title: "\(op.type) reply", op.reply)
        }
        for op in common {
            document("common/\(op.type).request.json", title: "<service>.\(op.type) request", op.request, annotations(op))
            document("common/\(op.type).reply.json", title: "<service>.\(op.type) reply", op.reply)
        }
        for event in events { document(event.path, title: "\(event.type) event", event.body) }
        for d in definitions { document(d.path, title: d.title, d.shape) }
        return out.sorted { $0.0 < $1.0 }.map { ($0.0, SchemaText.render($0.1) + "\n") }
    }
}
