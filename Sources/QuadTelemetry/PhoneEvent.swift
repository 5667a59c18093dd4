import QuadWire

/// One telemetry event as a phone records it, validated by hand against the
/// same rules as `protos/telemetry/event.schema.json` and the per-name
/// schemas in `protos/telemetry/events/`. The two are kept in agreement by
/// tests on both sides (the Swift tests and `Tests/e2e/test_telemetry_schemas.py`
/// validate the same examples, and the Python test fuzzes both validators).
///
/// The user an event is attributed to is never the phone's word: ``user`` is
/// nil when an event is read from a body, and ``Telemetry`` sets it from the
/// envelope's `user`, which the broker takes from the verified token. A
/// `user` field in the body is still accepted (older phones send one) and
/// checked for shape, then ignored.
public struct PhoneEvent: Sendable, Equatable {
    public let id: String
    public let phone: String
    /// The verified user the event is attributed to; nil for a guest, and
    /// for an event just read from a body.
    public private(set) var user: String?
    public let session: String
    public let name: String
    public let ts: Int64
    public let offline: Bool
    public let queuedMs: Int64?
    public let props: [String: JSON]

    /// The earliest and latest `ts` accepted: 2000-01-01 and 2100-01-01.
    public static let minTs: Int64 = 946_684_800_000
    public static let maxTs: Int64 = 4_102_444_800_000
    /// Longest `queued_ms` accepted: a year.
    public static let maxQueuedMs: Int64 = 31_536_000_000
    /// Longest phone, user and session ids and string props.
    public static let maxIDLength = 64
    public static let maxPropLength = 64

    /// What a prop may hold.
    public enum Kind: Sendable, Equatable {
        case string
        case integer(min: Int64, max: Int64)
        case boolean
        case oneOf([String])

        var described: String {
            switch self {
            case .string: return "a string of 1 to \(PhoneEvent.maxPropLength) characters"
            case .integer(let lo, let hi): return "an integer from \(lo) to \(hi)"
            case .boolean: return "true or false"
            case .oneOf(let values): return "one of \(values.joined(separator: ", "))"
            }
        }
    }

    static let count = Kind.integer(min: 0, max: 1_000_000)
    static let duration = Kind.integer(min: 0, max: PhoneEvent.maxQueuedMs)

    /// Every event name and its props, all required, no others allowed.
    public static let names: [String: [(String, Kind)]] = [
        "view.opened": [("view", .string)],
        "search.performed": [("query_length", .integer(min: 0, max: 1000)), ("results", count)],
        "forecast.opened": [("lot", .string)],
        "spot.search": [("lot", .string)],
        "nearby.opened": [],
        "nearby.chosen": [("lot", .string)],
        "favorite.added": [("product", .string), ("screen", .string)],
        "purchase.made": [("order", .string), ("screen", .oneOf(["home", "favorites", "search", "cart"])),
                          ("mode", .oneOf(["buy", "rent"])), ("category", .string)],
        "hold.created": [("lot", .string), ("level", .string)],
        "checkin.done": [("lot", .string), ("on_time", .boolean)],
        "offline.started": [],
        "offline.ended": [("duration_ms", duration)],
        "action.synced": [("action", .string), ("waited_ms", duration), ("offline", .boolean)],
        "session.started": [],
        "session.ended": [("flow", .string)],
        "app.crash": [("view", .string), ("flow", .string)],
        "arrival.changed": [("lot", .string), ("hour", .integer(min: 0, max: 23))],
        "nearby.confirmed": [("lot", .string), ("parked", .boolean)],
        "mark.set": [("view", .string), ("flow", .string)],
        "mark.cleared": [("view", .string), ("flow", .string)],
    ]

    static let fields: Set<String> = ["id", "phone", "user", "session", "name", "ts", "offline", "queued_ms", "props"]

    /// Reads and validates one event; the error names the first field that
    /// breaks a rule, relative to the event (`props.lot is required`).
    public init(_ value: JSON) throws(QuadError) {
        guard case .object(let f) = value else { throw .badRequest("the event must be an object, got \(value.typeName)") }
        func string(_ key: String, max: Int) throws(QuadError) -> String {
            guard let v = f[key] else { throw .badRequest("\(key) is required") }
            guard let s = v.string else { throw .badRequest("\(key) must be a string, got \(v.typeName)") }
            let n = s.unicodeScalars.count
            guard n >= 1, n <= max else { throw .badRequest("\(key) must be 1 to \(max) characters, got \(n)") }
            return s
        }
        let id = try string("id", max: 36)
        guard PhoneEvent.isUUID(id) else { throw .badRequest("id must be a UUID (8-4-4-4-12 hexadecimal digits), got '\(id)'") }
        phone = try string("phone", max: PhoneEvent.maxIDLength)
        // Checked for shape only: attribution comes from the token.
        if let u = f["user"], !u.isNull { _ = try string("user", max: PhoneEvent.maxIDLength) }
        user = nil
        session = try string("session", max: PhoneEvent.maxIDLength)
        guard let nv = f["name"] else { throw .badRequest("name is required") }
        guard let name = nv.string else { throw .badRequest("name must be a string, got \(nv.typeName)") }
        guard let spec = PhoneEvent.names[name] else {
            throw .badRequest("name '\(name)' is not a known event: expected one of \(PhoneEvent.names.keys.sorted().joined(separator: ", "))")
        }
        guard let tv = f["ts"] else { throw .badRequest("ts is required") }
        guard let ts = tv.int, !tv.isBoolLike else { throw .badRequest("ts must be an integer (ms since 1970), got \(tv.typeName)") }
        guard (PhoneEvent.minTs...PhoneEvent.maxTs).contains(ts) else {
            throw .badRequest("ts must be between \(PhoneEvent.minTs) and \(PhoneEvent.maxTs) (ms since 1970), got \(ts)")
        }
        guard let ov = f["offline"] else { throw .badRequest("offline is required") }
        guard let offline = ov.bool else { throw .badRequest("offline must be true or false, got \(ov.typeName)") }
        var queued: Int64?
        if let qv = f["queued_ms"] {
            guard let q = qv.int else { throw .badRequest("queued_ms must be an integer, got \(qv.typeName)") }
            guard (0...PhoneEvent.maxQueuedMs).contains(q) else { throw .badRequest("queued_ms must be from 0 to \(PhoneEvent.maxQueuedMs), got \(q)") }
            queued = q
        }
        guard let pv = f["props"] else { throw .badRequest("props is required (an object, {} when empty)") }
        guard case .object(let props) = pv else { throw .badRequest("props must be an object, got \(pv.typeName)") }
        // The refusals below sort what they name; they are built only for
        // an event that has something to refuse (most have nothing).
        if f.keys.contains(where: { !PhoneEvent.fields.contains($0) }),
           let extra = f.keys.filter({ !PhoneEvent.fields.contains($0) }).sorted().first {
            throw .badRequest("\(extra) is not a field of a telemetry event")
        }
        for (key, kind) in spec {
            guard let v = props[key] else { throw .badRequest("props.\(key) is required for \(name)") }
            guard PhoneEvent.check(v, kind) else { throw .badRequest("props.\(key) must be \(kind.described), got \(PhoneEvent.shown(v))") }
        }
        // Every prop of `spec` is there (checked above), so there is another
        // exactly when props has more keys than spec names.
        let allowed = props.count > spec.count ? Set(spec.map(\.0)) : []
        if props.count > spec.count, let extra = props.keys.filter({ !allowed.contains($0) }).sorted().first {
            throw .badRequest("props.\(extra) is not a prop of \(name)\(allowed.isEmpty ? " (it has none)" : ": expected \(spec.map(\.0).joined(separator: ", "))")")
        }
        self.id = id.lowercased()
        self.name = name
        self.ts = ts
        self.offline = offline
        self.queuedMs = queued
        self.props = props
    }

    public init(id: String, phone: String, user: String?, session: String, name: String, ts: Int64, offline: Bool,
                queuedMs: Int64?, props: [String: JSON]) {
        self.id = id
        self.phone = phone
        self.user = user
        self.session = session
        self.name = name
        self.ts = ts
        self.offline = offline
        self.queuedMs = queuedMs
        self.props = props
    }

    /// The same event attributed to `user`, the verified user of the
    /// envelope that carried it (nil: a guest).
    public func attributed(to user: String?) -> PhoneEvent {
        var e = self
        e.user = user
        return e
    }

    static func check(_ v: JSON, _ kind: Kind) -> Bool {
        switch kind {
        case .string:
            guard let s = v.string else { return false }
            return (1...maxPropLength).contains(s.unicodeScalars.count)
        case .integer(let lo, let hi):
            guard let i = v.int, !v.isBoolLike else { return false }
            return (lo...hi).contains(i)
        case .boolean:
            return v.bool != nil
        case .oneOf(let values):
            guard let s = v.string else { return false }
            return values.contains(s)
        }
    }

    static func shown(_ v: JSON) -> String {
        switch v {
        case .string(let s): return "'\(s.prefix(80))'"
        case .int, .double: return v.text
        default: return v.typeName
        }
    }

    /// 8-4-4-4-12 hexadecimal digits, either case.
    static func isUUID(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count == 36 else { return false }
        for (k, c) in u.enumerated() {
            if k == 8 || k == 13 || k == 18 || k == 23 {
                if c != UInt8(ascii: "-") { return false }
            } else if !((c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102)) {
                return false
            }
        }
        return true
    }

    /// The event as it is stored and compared: keys sorted, the id in lower
    /// case. Two deliveries of one event are the same when these are equal.
    public var json: JSON {
        var f: [String: JSON] = [
            "id": .string(id), "phone": .string(phone), "user": user.map { .string($0) } ?? .null, "session": .string(session),
            "name": .string(name), "ts": .int(ts), "offline": .bool(offline), "props": .object(props),
        ]
        if let queuedMs { f["queued_ms"] = .int(queuedMs) }
        return .object(f)
    }

    public var canonical: String { json.text }
}

extension JSON {
    /// Booleans are never numbers here; kept for clarity at call sites.
    var isBoolLike: Bool { if case .bool = self { return true }; return false }
}
