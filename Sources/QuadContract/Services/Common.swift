import QuadWire

extension Contract {
    /// The common part of the contract.
    public enum Common {}
}

extension Contract.Common {
    /// Largest page `events.since` returns (`max_events_page`).
    public static let maxEventsPage: Int64 = 1000

    /// events.since: after which seq, and how many.
    public struct EventsSinceRequest: Body {
        public var after: Int64 = 0
        public var limit: Int64 = 500
        public init() {}
        public init(after: Int64, limit: Int64) { (self.after, self.limit) = (after, limit) }
        public static let fields: [Field<Self>] = [
            .field(\.after, "after", .int(min: 0, default: 0).optional),
            .field(\.limit, "limit", .int(1...maxEventsPage, default: 500).limit("max_events_page").optional),
        ]
    }

    public static let eventsSince = TypedOperation<EventsSinceRequest, JSONBody>(
        "events.since", .query, auth: .admin,
        request: EventsSinceRequest.shape
            .described("Catch-up: the service's events with seq greater than after, oldest first, at most limit (max_events_page, 1000). For services (the broker's internal frontend) and admins: the public frontend refuses it to anyone else (events carry user ids)."),
        reply: .object([
            "events": .array(of: .allOf([
                    .ref("../envelope.schema.json"),
                    .any.keyword("properties", json: ["kind": ["const": "event"]]).keyword("required", json: ["seq", "ts"]),
                ]), max: 1000),
            "last": .int(min: 0),
            "oldest": .int(min: 1),
            "missed": .int(min: 1).optional,
        ])
            .described("The events as they were published, in seq order, and the highest seq written so far: when last is greater than the last event returned, ask again after it. oldest is the lowest seq the source still keeps (published events past outbox_retention_ms, or beyond outbox_max_rows, are pruned); when after + 1 < oldest, missed says how many events the subscriber can no longer get."))

    /// sys.health's reply: which service, and, for admins and services, which process.
    public struct Health: Body {
        public var service = ""
        public var instance: String?
        public var status = "ok"
        public var pid: Int64?
        public init() {}
        public init(service: String, instance: String?, status: String, pid: Int64?) {
            (self.service, self.instance, self.status, self.pid) = (service, instance, status, pid)
        }
        public static let fields: [Field<Self>] = [
            .field(\.service, "service", .string(pattern: "^[a-z0-9_-]+$")),
            .field(\.instance, "instance", .string(1...128)
                .described("The worker's name, as in src (catalog/1); admins and Quad's services only.").optional),
            .field(\.status, "status", .choice(["ok", "degraded"])),
            .field(\.pid, "pid", .int(min: 1).optional),
        ]
    }

    public static let sysHealth = TypedOperation<NoFields, Health>(
        "sys.health", .query, auth: .none,
        request: NoFields.shape
            .described("No parameters: the body is an empty object (or absent). Answered by the worker that receives it."),
        reply: Health.shape
            .described("The worker that answered is alive and serving."))

    /// sys.metrics's reply: the answering worker's counters.
    public struct Metrics: Body {
        public struct Latency: Body {
            public var p50: Int64 = 0
            public var p99: Int64 = 0
            public var window: Int64 = 0
            public init() {}
            public init(p50: Int64, p99: Int64, window: Int64) { (self.p50, self.p99, self.window) = (p50, p99, window) }
            public static let fields: [Field<Self>] = [
                .field(\.p50, "p50", .int(min: 0)),
                .field(\.p99, "p99", .int(min: 0)),
                .field(\.window, "window", .int(min: 0)
                    .described("How many recent requests the percentiles cover.")),
            ]
        }
        public struct Slow: Body {
            public var count: Int64 = 0
            public var slowestType: String?
            public var maxUs: Int64 = 0
            public var thresholdMs: Int64 = 0
            public init() {}
            public init(count: Int64, slowestType: String?, maxUs: Int64, thresholdMs: Int64) {
                (self.count, self.slowestType, self.maxUs, self.thresholdMs) = (count, slowestType, maxUs, thresholdMs)
            }
            public static let fields: [Field<Self>] = [
                .field(\.count, "count", .int(min: 0).described("Handlers, call callbacks and timers that held the loop longer than slow_handler_ms.")),
                .field(\.slowestType, "slowest_type", .string(1...128).nullable.described("What held the loop longest, or null when nothing was slow.")),
                .field(\.maxUs, "max_us", .int(min: 0).described("The longest hold, in microseconds.")),
                .field(\.thresholdMs, "threshold_ms", .int(min: 0).described("slow_handler_ms.")),
            ]
        }
        public var served: Int64 = 0
        public var errors: [String: Int64] = [:]
        public var latency = Latency()
        public var uptimeMs: Int64 = 0
        public var instance: String?
        public var slowHandlers = Slow()
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.served, "served", .int(min: 0)),
            .field(\.errors, "errors", .map(of: .int(min: 1))
                .described("Error replies by code.").keyword("propertyNames", .ref("../error.schema.json#/properties/code"))),
            .field(\.latency, "latency_us", Latency.shape),
            .field(\.uptimeMs, "uptime_ms", .int(min: 0)),
            .field(\.instance, "instance", .string(1...128).optional),
            .field(\.slowHandlers, "slow_handlers", Slow.shape),
        ]
    }

    public static let sysMetrics = TypedOperation<NoFields, Metrics>(
        "sys.metrics", .query, auth: .none,
        request: NoFields.shape
            .described("No parameters: the body is an empty object (or absent). Answered by the worker that receives it."),
        reply: Metrics.shape
            .described("Counters of the worker that answered, since it started, and latency percentiles over its last window requests (handler time, in microseconds)."))

    /// sys.types's reply: the service and every type it answers.
    public struct Types: Body {
        /// One type the service answers, as the contract declares it.
        public struct Row: Body {
            public var type = ""
            public var kind = ""
            public var auth = ""
            public var request = ""
            public var reply = ""
            public init() {}
            public init(type: String, kind: String, auth: String, request: String, reply: String) {
                (self.type, self.kind, self.auth, self.request, self.reply) = (type, kind, auth, request, reply)
            }
            public static let fields: [Field<Self>] = [
                .field(\.type, "type", .string(1...128).described("The request type, as sent: catalog.products.list.")),
                .field(\.kind, "kind", .choice(["query", "mutation"]).described("A mutation is idempotent by the envelope id.")),
                .field(\.auth, "auth", .choice(["none", "user", "admin", "service"]).described("Who may send it (x-quad-auth).")),
                .field(\.request, "request", .string(1...200).described("The request body's schema, a path under protos/.")),
                .field(\.reply, "reply", .string(1...200).described("The reply body's schema, a path under protos/.")),
            ]
        }
        public var service = ""
        public var types: [Row] = []
        public init() {}
        public init(service: String, types: [Row]) { (self.service, self.types) = (service, types) }
        public static let fields: [Field<Self>] = [
            .field(\.service, "service", .string(pattern: "^[a-z0-9_-]+$")),
            .field(\.types, "types", .array(of: Row.shape)),
        ]
    }

    public static let sysTypes = TypedOperation<NoFields, Types>(
        "sys.types", .query, auth: .none,
        request: NoFields.shape
            .described("No parameters: the body is an empty object (or absent)."),
        reply: Types.shape
            .described("Every request type the service answers, from the contract (Sources/QuadContract), by type."))

    public static let operations: [Operation] = [eventsSince.operation, sysHealth.operation, sysMetrics.operation, sysTypes.operation]
}
