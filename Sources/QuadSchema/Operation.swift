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
    package var op: String { String(type.drop { $0 != "." }.dropFirst()) }
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
