import QuadWire

extension Contract {
    /// The telemetry part of the contract.
    public enum Telemetry {}
}

extension Contract.Telemetry {
    /// Most events in one batch (`max_batch_events`) and in one page of raw.since (`max_raw_page`).
    public static let maxBatchEvents = 500
    public static let maxRawPage: Int64 = 2000

    /// telemetry.ingest: the batch. The events stay `JSON` values: each is
    /// checked by hand (QuadTelemetry's `PhoneEvent`), one by one, so that
    /// an invalid one is rejected with its reason while the rest are
    /// stored; decoding them into a struct here would refuse the batch.
    public struct IngestRequest: Body {
        public var events: [JSON] = []
        public init() {}
        public init(events: [JSON]) { self.events = events }
        public static let fields: [Field<Self>] = [
            .field(\.events, "events", .array(of: .object(open: true)
                    .described("An event: telemetry/event.schema.json, checked one by one."), min: 1, max: maxBatchEvents).limit("max_batch_events").overIsTooLarge),
        ]
    }

    /// An event of the batch that was not stored, and why.
    public struct Rejection: Body {
        public var index: Int64 = 0
        public var id: String?
        public var reason = ""
        public init() {}
        public init(index: Int64, id: String?, reason: String) { (self.index, self.id, self.reason) = (index, id, reason) }
        public static let fields: [Field<Self>] = [
            .field(\.index, "index", .int(0...499)),
            .field(\.id, "id", .string().nullable),
            .field(\.reason, "reason", .string(min: 1)),
        ]
    }

    /// telemetry.ingest: what became of each event.
    public struct IngestReply: Body {
        public var accepted: Int64 = 0
        public var duplicate: Int64 = 0
        public var conflicting: Int64 = 0
        public var rejected: [Rejection] = []
        public init() {}
        public init(accepted: Int64, duplicate: Int64, conflicting: Int64, rejected: [Rejection]) {
            (self.accepted, self.duplicate, self.conflicting, self.rejected) = (accepted, duplicate, conflicting, rejected)
        }
        public static let fields: [Field<Self>] = [
            .field(\.accepted, "accepted", .int(0...500)),
            .field(\.duplicate, "duplicate", .int(0...500)),
            .field(\.conflicting, "conflicting", .int(0...500)),
            .field(\.rejected, "rejected", .array(of: Rejection.shape, max: 500)),
        ]
    }

    public static let ingest = TypedOperation<IngestRequest, IngestReply>(
        "telemetry.ingest", .mutation, auth: .none,
        request: IngestRequest.shape
            .described("A batch of phone events (a mutation: idempotent by envelope id, so a phone's retry gets the same answer). At most 500 events (max_batch_events) and 1 MiB of encoded events (max_batch_bytes, not expressible here): over either, too_large (413) naming the limit, and nothing is stored. Each event is validated on its own against telemetry/event.schema.json: an invalid one is rejected with its reason and the rest are stored. Anyone may send (guests' phones too); the user id inside events is the phone's word, kept for analytics only. Publishes one telemetry.batch summary when any event was accepted."),
        reply: IngestReply.shape
            .described("What became of each event of the batch: accepted (stored now), duplicate (stored before with the same payload: nothing to do), conflicting (stored before with another payload: kept aside and counted, not applied), rejected (invalid, with the index in the batch, the id when readable, and the reason). accepted + duplicate + conflicting + len(rejected) is the number of events sent."))

    /// telemetry.raw.since: where to start and how many; absent, from the
    /// first event, 1000 at a time.
    public struct RawSinceRequest: Body {
        public var after: Int64?
        public var limit: Int64?
        public init() {}
        public init(after: Int64?, limit: Int64?) { (self.after, self.limit) = (after, limit) }
        public static let fields: [Field<Self>] = [
            .field(\.after, "after", .int(min: 0).optional),
            .field(\.limit, "limit", .int(1...maxRawPage).limit("max_raw_page").optional),
        ]
    }

    /// telemetry.raw.since: a page of stored events. Each stays a `JSON`
    /// object (the fields of telemetry/event.schema.json plus its seq), as
    /// the collector reads it back.
    public struct RawPage: Body {
        public var events: [JSON] = []
        public var last: Int64 = 0
        public var more = false
        public init() {}
        public init(events: [JSON], last: Int64, more: Bool) { (self.events, self.last, self.more) = (events, last, more) }
        public static let fields: [Field<Self>] = [
            .field(\.events, "events", .array(of: .object([
                    "seq": .int(min: 1),
                    "id": .string(),
                    "name": .string(),
                    "ts": .int(),
                ], open: true).keyword("required", json: ["phone", "user", "session", "offline", "props"])
                    .described("A stored event: the fields of telemetry/event.schema.json (the id in lower case) plus its seq."), max: 2000)),
            .field(\.last, "last", .int(min: 0)),
            .field(\.more, "more", .bool),
        ]
    }

    public static let rawSince = TypedOperation<RawSinceRequest, RawPage>(
        "telemetry.raw.since", .query, auth: .service,
        request: RawSinceRequest.shape
            .described("For Quad's services (role service, through the broker's internal frontend) and admins: the stored raw events after seq `after`, in seq order, at most `limit` (max_raw_page) and about 768 KiB. Seqs grow in commit order, with gaps. This is how analytics gets the events; they never travel on the event bus."),
        reply: RawPage.shape
            .described("The events, each as stored (telemetry/event.schema.json) plus its seq; last is the highest seq stored; more says whether to ask again at once."))

    /// telemetry.stats: over every batch, what ingest answered.
    public struct Totals: Body {
        public var batches: Int64 = 0
        public var accepted: Int64 = 0
        public var duplicate: Int64 = 0
        public var conflicting: Int64 = 0
        public var rejected: Int64 = 0
        public init() {}
        public init(batches: Int64, accepted: Int64, duplicate: Int64, conflicting: Int64, rejected: Int64) {
            (self.batches, self.accepted, self.duplicate, self.conflicting, self.rejected) = (batches, accepted, duplicate, conflicting, rejected)
        }
        public static let fields: [Field<Self>] = [
            .field(\.batches, "batches", .int(min: 0)),
            .field(\.accepted, "accepted", .int(min: 0)),
            .field(\.duplicate, "duplicate", .int(min: 0)),
            .field(\.conflicting, "conflicting", .int(min: 0)),
            .field(\.rejected, "rejected", .int(min: 0)),
        ]
    }

    /// telemetry.stats: what the collector holds.
    public struct Stats: Body {
        public var events: Int64 = 0
        public var conflicts: Int64 = 0
        public var byName: [String: Int64] = [:]
        public var totals = Totals()
        public init() {}
        public init(events: Int64, conflicts: Int64, byName: [String: Int64], totals: Totals) {
            (self.events, self.conflicts, self.byName, self.totals) = (events, conflicts, byName, totals)
        }
        public static let fields: [Field<Self>] = [
            .field(\.events, "events", .int(min: 0)),
            .field(\.conflicts, "conflicts", .int(min: 0)),
            .field(\.byName, "by_name", .map(of: .int(min: 0))),
            .field(\.totals, "totals", Totals.shape),
        ]
    }

    public static let stats = TypedOperation<NoFields, Stats>(
        "telemetry.stats", .query, auth: .service,
        request: NoFields.shape
            .described("For admins and Quad's services: what the collector holds."),
        reply: Stats.shape
            .described("events: stored events; conflicts: distinct conflicting versions kept aside; by_name: stored events by name; totals: over every batch, what ingest answered."))

    /// The seqs of telemetry.raw.since a batch took.
    public struct SeqRange: Body {
        public var first: Int64 = 1
        public var last: Int64 = 1
        public init() {}
        public init(first: Int64, last: Int64) { (self.first, self.last) = (first, last) }
        public static let fields: [Field<Self>] = [
            .field(\.first, "first", .int(min: 1)),
            .field(\.last, "last", .int(min: 1)),
        ]
    }

    /// telemetry.batch: the summary of one batch, never its events.
    public struct BatchSummary: Body {
        public var batch = ""
        public var events: Int64 = 0
        public var accepted: Int64 = 0
        public var duplicate: Int64 = 0
        public var conflicting: Int64 = 0
        public var rejected: Int64 = 0
        public var byName: [String: Int64] = [:]
        public var rawSeq = SeqRange()
        public init() {}
        public init(batch: String, events: Int64, accepted: Int64, duplicate: Int64, conflicting: Int64, rejected: Int64,
                    byName: [String: Int64], rawSeq: SeqRange) {
            (self.batch, self.events, self.accepted, self.duplicate, self.conflicting, self.rejected, self.byName, self.rawSeq)
                = (batch, events, accepted, duplicate, conflicting, rejected, byName, rawSeq)
        }
        public static let fields: [Field<Self>] = [
            .field(\.batch, "batch", .string(1...64)
                .described("The envelope id of the telemetry.ingest request.")),
            .field(\.events, "events", .int(1...500)),
            .field(\.accepted, "accepted", .int(1...500)),
            .field(\.duplicate, "duplicate", .int(min: 0)),
            .field(\.conflicting, "conflicting", .int(min: 0)),
            .field(\.rejected, "rejected", .int(min: 0)),
            .field(\.byName, "by_name", .map(of: .int(min: 1)).keyword("propertyNames", .choice(["view.opened", "search.performed", "forecast.opened", "spot.search", "nearby.opened", "nearby.chosen", "favorite.added", "purchase.made", "hold.created", "checkin.done", "offline.started", "offline.ended", "action.synced", "session.started", "session.ended", "app.crash", "arrival.changed", "nearby.confirmed", "mark.set", "mark.cleared"]))),
            .field(\.rawSeq, "raw_seq", SeqRange.shape),
        ]
    }

    public static let batch = TypedEvent<BatchSummary>("telemetry.batch", body: BatchSummary.shape
            .described("One per batch that stored at least one event: a summary with counts by event name, never the events themselves nor any user id. raw_seq is the range of telemetry.raw.since seqs the batch took (some may be unused); analytics takes this event as its cue to pull."))

    public static let eventSchema = Definition("telemetry/event.schema.json", title: "a telemetry event from a phone", .object([
            "id": .string(36...36, pattern: "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
                .described("The event's id, made by the phone: a UUID (v7 preferred, any version accepted), either case."),
            "phone": .string(1...64)
                .described("The phone's install id."),
            "user": .string(1...64).nullable
                .described("Ignored: the event is attributed to the user of the token that sent the batch (the broker's verified user), or to nobody for a guest. Accepted for older phones, which send their user here, and checked for shape only; never stored as the attribution.").optional,
            "session": .string(1...64)
                .described("The app session: from opening the app to closing it."),
            "name": .string().keyword("enum", json: ["view.opened", "search.performed", "forecast.opened", "spot.search", "nearby.opened", "nearby.chosen", "favorite.added", "purchase.made", "hold.created", "checkin.done", "offline.started", "offline.ended", "action.synced", "session.started", "session.ended", "app.crash", "arrival.changed", "nearby.confirmed", "mark.set", "mark.cleared"]),
            "ts": .int(946684800000...4102444800000)
                .described("When it happened, on the phone's clock, ms since 1970 (2000-01-01 to 2100-01-01)."),
            "offline": .bool
                .described("Whether the phone had no signal when it happened."),
            "queued_ms": .int(0...31536000000)
                .described("How long the event waited on the phone before this batch was sent.").optional,
            "props": .object(open: true)
                .described("The event's own fields, by name: telemetry/events/<name>.schema.json."),
        ])
            .described("One event as a phone records it, before it knows whether it has signal. The common fields are checked here; the props of each name by telemetry/events/<name>.schema.json. quad-telemetry implements the same rules by hand (Sources/QuadTelemetry/PhoneEvent.swift) and rejects an event that breaks one with the reason, without refusing the batch. The id is the idempotency key: a second delivery with the same payload is a natural duplicate, with another payload a conflict (kept aside, never applied). Ids are compared in lower case.")
            .and(
                .when(.any.keyword("properties", json: ["name": ["const": "view.opened"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/view.opened.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "search.performed"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/search.performed.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "forecast.opened"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/forecast.opened.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "spot.search"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/spot.search.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "nearby.opened"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/nearby.opened.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "nearby.chosen"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/nearby.chosen.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "favorite.added"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/favorite.added.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "purchase.made"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/purchase.made.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "hold.created"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/hold.created.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "checkin.done"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/checkin.done.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "offline.started"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/offline.started.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "offline.ended"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/offline.ended.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "action.synced"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/action.synced.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "session.started"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/session.started.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "session.ended"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/session.ended.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "app.crash"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/app.crash.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "arrival.changed"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/arrival.changed.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "nearby.confirmed"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/nearby.confirmed.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "mark.set"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/mark.set.schema.json"]])),
                .when(.any.keyword("properties", json: ["name": ["const": "mark.cleared"]]).keyword("required", json: ["name"]), then: .any.keyword("properties", json: ["props": ["$ref": "events/mark.cleared.schema.json"]]))
            ))

    public static let eventsActionSyncedSchema = Definition("telemetry/events/action.synced.schema.json", title: "props of telemetry event action.synced", .object([
            "action": .string(1...64)
                .described("The action's request type, such as reservations.checkin."),
            "waited_ms": .int(0...31536000000)
                .described("How long it waited on the phone before the answer."),
            "offline": .bool
                .described("Whether it was made without signal."),
        ])
            .described("A queued action reached the backend and got an answer."))

    public static let eventsAppCrashSchema = Definition("telemetry/events/app.crash.schema.json", title: "props of telemetry event app.crash", .object([
            "view": .string(1...64)
                .described("The view it was on."),
            "flow": .string(1...64)
                .described("The flow it was in: reservation when the Reserve screen mark was still set."),
        ])
            .described("On opening, the app found the previous session did not close normally (BQ11)."))

    public static let eventsArrivalChangedSchema = Definition("telemetry/events/arrival.changed.schema.json", title: "props of telemetry event arrival.changed", .object([
            "lot": .string(1...64)
                .described("The lot id."),
            "hour": .int(0...23)
                .described("The arrival hour the driver chose, campus time."),
        ])
            .described("The driver changed the arrival time on the forecast (BQ8)."))

    public static let eventsMarkSetSchema = Definition("telemetry/events/mark.set.schema.json", title: "props of telemetry event mark.set", .object([
            "view": .string(1...64)
                .described("The view that set it: reservation (the Reserve screen)."),
            "flow": .string(1...64)
                .described("The flow it marks: reservation."),
        ])
            .described("The Reserve screen opened and saved its crash mark on the phone (BQ11)."))

    public static let eventsMarkClearedSchema = Definition("telemetry/events/mark.cleared.schema.json", title: "props of telemetry event mark.cleared", .object([
            "view": .string(1...64)
                .described("The view that had set it."),
            "flow": .string(1...64)
                .described("The flow it marked."),
        ])
            .described("The Reserve screen closed, or the app went to the background, and the crash mark was removed (BQ11)."))

    public static let eventsNearbyConfirmedSchema = Definition("telemetry/events/nearby.confirmed.schema.json", title: "props of telemetry event nearby.confirmed", .object([
            "lot": .string(1...64)
                .described("The nearby lot id."),
            "parked": .bool
                .described("The driver's answer: whether they parked in that lot."),
        ])
            .described("After Navigate, the app asked the driver once whether they parked in the nearby lot, and they answered (BQ9)."))

    public static let eventsCheckinDoneSchema = Definition("telemetry/events/checkin.done.schema.json", title: "props of telemetry event checkin.done", .object([
            "lot": .string(1...64)
                .described("The lot id."),
            "on_time": .bool
                .described("Whether it came before the hold's countdown ended."),
        ])
            .described("The driver checked in (or confirmed they parked) at a lot (BQ9)."))

    public static let eventsFavoriteAddedSchema = Definition("telemetry/events/favorite.added.schema.json", title: "props of telemetry event favorite.added", .object([
            "product": .string(1...64)
                .described("The product id."),
            "screen": .string(1...64)
                .described("The screen it was saved from."),
        ])
            .described("A product was saved as a favorite."))

    public static let eventsForecastOpenedSchema = Definition("telemetry/events/forecast.opened.schema.json", title: "props of telemetry event forecast.opened", .object([
            "lot": .string(1...64)
                .described("The lot id."),
        ])
            .described("The driver opened the occupancy forecast of a lot (BQ8)."))

    public static let eventsHoldCreatedSchema = Definition("telemetry/events/hold.created.schema.json", title: "props of telemetry event hold.created", .object([
            "lot": .string(1...64)
                .described("The lot id."),
            "level": .string(1...64)
                .described("The level's name (P1, P2, P3)."),
        ])
            .described("The driver held a spot."))

    public static let eventsNearbyChosenSchema = Definition("telemetry/events/nearby.chosen.schema.json", title: "props of telemetry event nearby.chosen", .object([
            "lot": .string(1...64)
                .described("The nearby lot id."),
        ])
            .described("The driver chose a nearby lot and tapped Navigate (BQ9)."))

    public static let eventsNearbyOpenedSchema = Definition("telemetry/events/nearby.opened.schema.json", title: "props of telemetry event nearby.opened", .noFields
            .described("The campus was full and the driver opened the nearby lots. It has no props."))

    public static let eventsOfflineEndedSchema = Definition("telemetry/events/offline.ended.schema.json", title: "props of telemetry event offline.ended", .object([
            "duration_ms": .int(0...31536000000)
                .described("How long the phone was offline."),
        ])
            .described("The signal came back."))

    public static let eventsOfflineStartedSchema = Definition("telemetry/events/offline.started.schema.json", title: "props of telemetry event offline.started", .noFields
            .described("The phone lost its signal. It has no props."))

    public static let eventsPurchaseMadeSchema = Definition("telemetry/events/purchase.made.schema.json", title: "props of telemetry event purchase.made", .object([
            "order": .string(1...64)
                .described("The order id."),
            "screen": .string().keyword("enum", json: ["home", "favorites", "search", "cart"])
                .described("The screen the purchase started from."),
            "mode": .string().keyword("enum", json: ["buy", "rent"])
                .described("Bought or rented."),
            "category": .string(1...64)
                .described("The product's category."),
        ])
            .described("The student bought or rented (the order was accepted)."))

    public static let eventsSearchPerformedSchema = Definition("telemetry/events/search.performed.schema.json", title: "props of telemetry event search.performed", .object([
            "query_length": .int(0...1000)
                .described("Characters in the query."),
            "results": .int(0...1000000)
                .described("Products it found."),
        ])
            .described("A product search ran (the query itself is not sent)."))

    public static let eventsSessionEndedSchema = Definition("telemetry/events/session.ended.schema.json", title: "props of telemetry event session.ended", .object([
            "flow": .string(1...64)
                .described("The flow it was in: reservation when the Reserve screen was open, else browse, marketplace..."),
        ])
            .described("The app was closed or sent to the background."))

    public static let eventsSessionStartedSchema = Definition("telemetry/events/session.started.schema.json", title: "props of telemetry event session.started", .noFields
            .described("The app was opened. It has no props."))

    public static let eventsSpotSearchSchema = Definition("telemetry/events/spot.search.schema.json", title: "props of telemetry event spot.search", .object([
            "lot": .string(1...64)
                .described("The lot id."),
        ])
            .described("The driver searched for a free spot in a lot (BQ8)."))

    public static let eventsViewOpenedSchema = Definition("telemetry/events/view.opened.schema.json", title: "props of telemetry event view.opened", .object([
            "view": .string(1...64)
                .described("The view's name: home, favorites, search, cart, product, forecast, reserve, find-car, nearby, profile..."),
        ])
            .described("A screen of the app was opened."))

    public static let operations: [Operation] = [ingest.operation, rawSince.operation, stats.operation]
    public static let events: [Event] = [batch.event]
    public static let definitions: [Definition] = [eventSchema, eventsActionSyncedSchema, eventsAppCrashSchema, eventsArrivalChangedSchema, eventsCheckinDoneSchema, eventsFavoriteAddedSchema, eventsForecastOpenedSchema, eventsHoldCreatedSchema, eventsMarkClearedSchema, eventsMarkSetSchema, eventsNearbyChosenSchema, eventsNearbyConfirmedSchema, eventsNearbyOpenedSchema, eventsOfflineEndedSchema, eventsOfflineStartedSchema, eventsPurchaseMadeSchema, eventsSearchPerformedSchema, eventsSessionEndedSchema, eventsSessionStartedSchema, eventsSpotSearchSchema, eventsViewOpenedSchema]
}
