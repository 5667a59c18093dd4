import QuadWire
@_exported import QuadSchema

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

// MARK: - The contract's validator

extension Validator {
    /// The contract's own schemas, each made on its first `$ref` (as its
    /// file's text, parsed: what a reader of `protos/` gets).
    public static let contract = Validator(documents: .contract())
}

extension SchemaDocuments {
    /// The contract's schemas, none made yet.
    static func contract() -> SchemaDocuments {
        SchemaDocuments { path in Contract.file(at: path).map { (try? JSON.parse($0)) ?? .null } }
    }
}

extension Contract {
    /// Every schema of the contract, by `protos/` path, as JSON.
    public static var documents: [(String, JSON)] {
        files.map { file in (file.path, (try? JSON.parse(file.text)) ?? .null) }
    }
}

// MARK: - Checking bodies against the contract

extension Contract {
    /// The first reason `body` is not a request of `type`, or nil when it
    /// is one, or when the contract does not declare `type` (the handler's
    /// not_found answers that).
    public static func validate(_ type: String, _ body: JSON) -> Validator.Failure? {
        guard let (validator, checker) = compiledRequest(type) else { return nil }
        return validator.run(body, checker, at: "body")
    }
}

extension Contract {
    /// The request checker of `type`, compiled on its first request.
    static func compiledRequest(_ type: String) -> (Validator, Checker)? {
        // Asked on every request: the cache first, the declaration and its
        // schema's path (two strings built) only to compile it.
        if let known = CheckerCache.shared.known(type) { return known }
        guard let op = operation(type), let path = schemaPaths(type)?.request else { return nil }
        return CheckerCache.shared.checker(type) {
            var v = Validator.contract.of(type)
            v.checksText = true
            return (v, v.compiled(op.request.schema, base: path))
        }
    }
}

extension Contract {
    /// The first reason `body` is not a reply of `type` as declared, or nil
    /// (also for a type the contract does not declare): what debug builds
    /// and the service suites check every reply against.
    public static func validateReply(_ type: String, _ body: JSON) -> Validator.Failure? {
        guard let op = operation(type), let path = schemaPaths(type)?.reply else { return nil }
        let (validator, checker) = CheckerCache.shared.checker("\(type) reply") {
            let v = Validator.contract.of("\(type) reply")
            return (v, v.compiled(op.reply.schema, base: path))
        }
        return validator.run(body, checker, at: "body")
    }
}
