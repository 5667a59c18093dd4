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

/// Who may hear an event besides Quad's services (`x-quad-audience` in
/// its schema). The broker's public updates socket carries the events of
/// `everyone` under `pub/<type>/<key>` and those of `user` under
/// `user/<id>/<type>`, the latter only to a subscriber who showed that
/// user's session token; `services` events never leave the internal sockets.
public enum Audience: Sendable, Equatable {
    /// Quad's services only (the default).
    case services
    /// Anyone: phones subscribe by the body's `key` field (a level, a product).
    case everyone(key: String)
    /// The one user named by the body's `field`.
    case user(field: String)

    /// The schema keyword's value.
    public var name: String {
        switch self {
        case .services: "services"
        case .everyone: "everyone"
        case .user: "user"
        }
    }
}

/// One event topic and its body.
public struct Event: Sendable {
    public let type: String
    public let body: Shape
    public let audience: Audience

    public init(_ type: String, body: Shape, audience: Audience = .services) {
        self.type = type
        self.body = body
        self.audience = audience
    }

    /// The topic the broker's public updates socket carries this event
    /// under, for a body: nil for a services-only event, or a body without
    /// a usable key (a string of letters, digits, `-`, `_` and `.`, at most
    /// 64 characters: never a separator of topics).
    public func publicTopic(_ body: JSON) -> String? {
        func part(_ name: String) -> String? {
            guard let v = body[name]?.string, !v.isEmpty, v.utf8.count <= 64,
                  v.utf8.allSatisfy({ (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) || $0 == 45 || $0 == 95 || $0 == 46 }) else { return nil }
            return v
        }
        switch audience {
        case .services: return nil
        case .everyone(let key): return part(key).map { "pub/\(type)/\($0)" }
        case .user(let field): return part(field).map { "user/\($0)/\(type)" }
        }
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

    /// What each service answers of its own, by type. This list and
    /// ``events`` and ``definitions`` are the whole, for `protos/` and
    /// tests; a worker's lookups read its ``Part`` only (a service added
    /// here is added there too: `PartTests` checks the parts make the whole).
    public static let operations: [Operation] =
        Accounts.operations + Analytics.operations + Catalog.operations + Favorites.operations + Notifications.operations + Orders.operations
        + Reservations.operations + Telemetry.operations + BrokerSys.operations

    /// What every service answers as `<service>.<type>`.
    public static let common: [Operation] = Common.operations

    public static let events: [Event] =
        Accounts.events + Catalog.events + Favorites.events + Notifications.events + Orders.events + Occupancy.events + Reservations.events + Telemetry.events

    public static let definitions: [Definition] =
        Wire.definitions + Accounts.definitions + Analytics.definitions + Catalog.definitions + Edge.definitions + Favorites.definitions
        + Orders.definitions + Reservations.definitions + Telemetry.definitions

    /// The operation a request of `type` is, if the contract declares it:
    /// the service's own, or one every service answers.
    public static func operation(_ type: String) -> Operation? {
        if let op = Part.named(type.prefix { $0 != "." })?.byType[type] { return op }
        let rest = type.drop { $0 != "." }.dropFirst()
        guard !rest.isEmpty, type.first != "." else { return nil }
        if let op = Part.common.byType[String(rest)], type.prefix(while: { $0 != "." }) != "sys" { return op }
        return nil
    }

    /// The `protos/` path of the request and reply schemas of `type`.
    public static func schemaPaths(_ type: String) -> (request: String, reply: String)? {
        if let op = Part.named(type.prefix { $0 != "." })?.byType[type] { return ("\(op.service)/\(op.op).request.json", "\(op.service)/\(op.op).reply.json") }
        if let op = operation(type) { return ("common/\(op.type).request.json", "common/\(op.type).reply.json") }
        return nil
    }

    /// The event topic of `type`, if declared.
    public static func event(_ type: String) -> Event? { Part.named(type.prefix { $0 != "." })?.events.first { $0.type == type } }
}

// MARK: - One service's part

extension Contract {
    /// One service's part of the contract: what its types and its `protos/`
    /// paths start with (`catalog`, `catalog/`), built on its first use.
    /// A worker asks the contract about its own types only, so it builds its
    /// own part, the common one and those its schemas refer to; before, its
    /// first request built every service's operations, events and schemas
    /// (about 2.5 MB of private memory in every service).
    struct Part: Sendable {
        let operations: [Operation]
        let events: [Event]
        let definitions: [Definition]
        let byType: [String: Operation]

        init(_ operations: [Operation] = [], events: [Event] = [], definitions: [Definition] = []) {
            self.operations = operations
            self.events = events
            self.definitions = definitions
            byType = Dictionary(operations.map { ($0.type, $0) }, uniquingKeysWith: { a, _ in a })
        }

        // One static each: Swift builds a static on its first read, so
        // reading one part builds no other.
        static let accounts = Part(Contract.Accounts.operations, events: Contract.Accounts.events, definitions: Contract.Accounts.definitions)
        static let analytics = Part(Contract.Analytics.operations, definitions: Contract.Analytics.definitions)
        static let catalog = Part(Contract.Catalog.operations, events: Contract.Catalog.events, definitions: Contract.Catalog.definitions)
        static let favorites = Part(Contract.Favorites.operations, events: Contract.Favorites.events, definitions: Contract.Favorites.definitions)
        static let notifications = Part(Contract.Notifications.operations, events: Contract.Notifications.events)
        static let orders = Part(Contract.Orders.operations, events: Contract.Orders.events, definitions: Contract.Orders.definitions)
        static let reservations = Part(Contract.Reservations.operations, events: Contract.Reservations.events,
                                       definitions: Contract.Reservations.definitions)
        static let telemetry = Part(Contract.Telemetry.operations, events: Contract.Telemetry.events, definitions: Contract.Telemetry.definitions)
        static let occupancy = Part(events: Contract.Occupancy.events)
        static let edge = Part(definitions: Contract.Edge.definitions)
        static let brokerSys = Part(Contract.BrokerSys.operations)
        /// The files at the top of `protos/` (the envelope, the error body).
        static let wire = Part(definitions: Contract.Wire.definitions)
        /// What every service answers, by the type after the service (`sys.health`).
        static let common = Part(Contract.common)

        /// The part whose types start with `name.` (`sys` is the broker's
        /// own), or whose `protos/` paths start with `name/`; "" for the
        /// files at the top of `protos/`. ``Contract/common`` is not one:
        /// its types are `<service>.<type>`.
        static func named(_ name: Substring) -> Part? {
            switch name {
            case "accounts": return accounts
            case "analytics": return analytics
            case "catalog": return catalog
            case "favorites": return favorites
            case "notifications": return notifications
            case "orders": return orders
            case "reservations": return reservations
            case "telemetry": return telemetry
            case "occupancy": return occupancy
            case "edge": return edge
            case "sys": return brokerSys
            case "": return wire
            default: return nil
            }
        }

        /// Every part but ``common``, by name, as ``named(_:)`` finds them.
        static let names: [Substring] = ["accounts", "analytics", "catalog", "favorites", "notifications", "orders", "reservations", "telemetry", "occupancy",
                                          "edge", "sys", ""]
    }
}

// MARK: - protos/

extension Contract {
    /// Every schema file of `protos/`, by path, as the text it is written
    /// with (two-space indent, keys in a fixed order).
    public static var files: [(path: String, text: String)] {
        var out: [(String, JSON)] = []
        for op in operations {
            let paths = schemaPaths(op.type)!
            out.append((paths.request, requestDocument(op, at: paths.request, title: "\(op.type) request")))
            out.append((paths.reply, document(paths.reply, title: "\(op.type) reply", op.reply)))
        }
        for op in common {
            out.append(("common/\(op.type).request.json", requestDocument(op, at: "common/\(op.type).request.json", title: "<service>.\(op.type) request")))
            out.append(("common/\(op.type).reply.json", document("common/\(op.type).reply.json", title: "<service>.\(op.type) reply", op.reply)))
        }
        for event in events { out.append((event.path, eventDocument(event))) }
        for d in definitions { out.append((d.path, document(d.path, title: d.title, d.shape))) }
        return out.sorted { $0.0 < $1.0 }.map { ($0.0, SchemaText.render($0.1) + "\n") }
    }

    /// The schema file at `path` of `protos/`, as ``files`` writes it, built
    /// from its own part of the contract only; nil when there is none.
    public static func file(at path: String) -> String? {
        let name = path.contains("/") ? path.prefix { $0 != "/" } : ""
        let doc: JSON?
        if name == "common" {
            doc = Part.common.operations.lazy.compactMap { op -> JSON? in
                if path == "common/\(op.type).request.json" { return requestDocument(op, at: path, title: "<service>.\(op.type) request") }
                if path == "common/\(op.type).reply.json" { return document(path, title: "<service>.\(op.type) reply", op.reply) }
                return nil
            }.first
        } else if let part = Part.named(name) {
            doc = part.document(at: path)
        } else {
            doc = nil
        }
        return doc.map { SchemaText.render($0) + "\n" }
    }

    /// A schema file's JSON: `shape`'s keywords and the keywords every file has.
    static func document(_ path: String, title: String, _ shape: Shape, _ extra: [String: JSON] = [:]) -> JSON {
        var k = shape.keywords
        k["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        k["$id"] = .string(idBase + path)
        k["title"] = .string(title)
        for (key, value) in extra { k[key] = value }
        return .object(k)
    }

    /// An event's schema file: its body and, beyond Quad's services, who may hear it.
    static func eventDocument(_ event: Event) -> JSON {
        let audience: [String: JSON] = event.audience == .services ? [:] : ["x-quad-audience": .string(event.audience.name)]
        return document(event.path, title: "\(event.type) event", event.body, audience)
    }

    /// A request's schema file: its body, its kind and who may send it.
    static func requestDocument(_ op: Operation, at path: String, title: String) -> JSON {
        var a: [String: JSON] = ["x-quad-kind": .string(op.kind.rawValue)]
        if op.auth != .none { a["x-quad-auth"] = .string(op.auth.rawValue) }
        return document(path, title: title, op.request, a)
    }
}

extension Contract.Part {
    /// The schema file at `path` among this part's, as JSON, before it is
    /// written as text.
    func document(at path: String) -> JSON? {
        for op in operations {
            guard let paths = Contract.schemaPaths(op.type) else { continue }
            if paths.request == path { return Contract.requestDocument(op, at: path, title: "\(op.type) request") }
            if paths.reply == path { return Contract.document(path, title: "\(op.type) reply", op.reply) }
        }
        if let event = events.first(where: { $0.path == path }) { return Contract.eventDocument(event) }
        if let d = definitions.first(where: { $0.path == path }) { return Contract.document(path, title: d.title, d.shape) }
        return nil
    }
}
