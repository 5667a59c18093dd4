import QuadWire

extension Contract {
    /// The reservations part of the contract.
    public enum Reservations {}
}

extension Contract.Reservations {
    /// Largest page of reservations.mine and reservations.spots.find (`max_page_size`).
    public static let maxPageSize: Int64 = 100

    /// reservations.checkin, checkout and cancel: which reservation.
    public struct StepRequest: Body {
        public var reservation: String?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.reservation, "reservation", .string(1...64)
                .described("The reservation; the caller's active one (else latest) when absent.").optional),
        ]
    }

    /// reservations.checkin, checkout and cancel: the reservation after the
    /// step, as ``reservationSchema`` has it.
    public struct StepReply: Body {
        public var reservation: JSON = .null
        public init() {}
        public init(reservation: JSON) { self.reservation = reservation }
        public static let fields: [Field<Self>] = [.field(\.reservation, "reservation", .ref("reservation.schema.json"))]
    }

    /// reservations.car.get and car.save: the car (`parking.schema.json#/$defs/car`).
    public struct CarReply: Body {
        public var car: JSON = .null
        public init() {}
        public init(car: JSON) { self.car = car }
        public static let fields: [Field<Self>] = [.field(\.car, "car", .ref("parking.schema.json#/$defs/car"))]
    }

    public struct CarSaveRequest: Body {
        public var lat: Double = 0
        public var lon: Double = 0
        public var level: String?
        public var note: String?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.lat, "lat", .number(min: -90, max: 90)),
            .field(\.lon, "lon", .number(min: -180, max: 180)),
            .field(\.level, "level", .string(1...16)
                .described("The level (P1 to P3) or any short label.").optional),
            .field(\.note, "note", .string(max: 200).optional),
        ]
    }

    /// reservations.levels: the lot's levels, live.
    public enum Levels {
        public struct Request: Body {
            public var lot = ""
            public init() {}
            public static let fields: [Field<Self>] = [.field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID"))]
        }
        public struct Reply: Body {
            public var lot = ""
            public var levels: [JSON] = []
            public var at: Int64 = 0
            public var local = ""
            public init() {}
            public init(lot: String, levels: [JSON], at: Int64, local: String) { (self.lot, self.levels, self.at, self.local) = (lot, levels, at, local) }
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.levels, "levels", .array(of: .ref("parking.schema.json#/$defs/level"))),
                .field(\.at, "at", .int(min: 0)
                    .described("Epoch milliseconds.")),
                .field(\.local, "local", .ref("parking.schema.json#/$defs/local")),
            ]
        }
    }

    public enum Mine {
        public struct Request: Body {
            public var limit: Int64 = 20
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size")
                    .described("Most history entries.").optional),
            ]
        }
        /// The finished stays: how many, and their seconds summed.
        public struct Stays: Body {
            public var count: Int64 = 0
            public var seconds: Int64 = 0
            public init() {}
            public init(count: Int64, seconds: Int64) { (self.count, self.seconds) = (count, seconds) }
            public static let fields: [Field<Self>] = [
                .field(\.count, "count", .int(min: 0)),
                .field(\.seconds, "seconds", .int(min: 0)),
            ]
        }
        public struct Reply: Body {
            public var active: JSON?
            public var history: [JSON] = []
            public var stays = Stays()
            public init() {}
            public init(active: JSON?, history: [JSON], stays: Stays) { (self.active, self.history, self.stays) = (active, history, stays) }
            public static let fields: [Field<Self>] = [
                .field(\.active, "active", .oneOf([.ref("reservation.schema.json"), .null])),
                .field(\.history, "history", .array(of: .ref("reservation.schema.json"), max: 100)),
                .field(\.stays, "stays", Stays.shape),
            ]
        }
    }

    public static let cancel = TypedOperation<StepRequest, StepReply>(
        "reservations.cancel", .mutation, auth: .user,
        request: StepRequest.shape
            .described("Signed-in drivers (a mutation: idempotent by envelope id). Gives up a hold before its deadline and frees the spot. conflict (409) once checked in, expired or over. not_found (404) for a reservation that is not the caller's. Publishes reservations.cancelled."),
        reply: StepReply.shape
            .described("The reservation after the step."))

    public static let carGet = TypedOperation<NoFields, CarReply>(
        "reservations.car.get", .query, auth: .user,
        request: NoFields.shape
            .described("Signed-in drivers. Where the caller's car is; not_found (404) before the first reservations.car.save."),
        reply: CarReply.shape
            .described("The car as last saved."))

    public static let carSave = TypedOperation<CarSaveRequest, CarReply>(
        "reservations.car.save", .mutation, auth: .user,
        request: CarSaveRequest.shape
            .described("Signed-in drivers (a mutation: idempotent by envelope id). Saves where the car is; a new save replaces the last."),
        reply: CarReply.shape
            .described("The car as saved."))

    public static let checkin = TypedOperation<StepRequest, StepReply>(
        "reservations.checkin", .mutation, auth: .user,
        request: StepRequest.shape
            .described("Signed-in drivers (a mutation: idempotent by envelope id). \"I parked\" before the deadline: the hold becomes checked_in. After the deadline: conflict (409), the hold expired and the spot is free again. not_found (404) for a reservation that is not the caller's. Publishes reservations.checkedin."),
        reply: StepReply.shape
            .described("The reservation after the step."))

    public static let checkout = TypedOperation<StepRequest, StepReply>(
        "reservations.checkout", .mutation, auth: .user,
        request: StepRequest.shape
            .described("Signed-in drivers (a mutation: idempotent by envelope id). \"I left\": frees the spot and records the stay. conflict (409) unless checked in. not_found (404) for a reservation that is not the caller's. Publishes reservations.checkedout."),
        reply: StepReply.shape
            .described("The reservation after the step."))

    public static let forecast = Operation(
        "reservations.forecast", .query, auth: .none,
        request: .object([
            "lot": .ref("parking.schema.json#/$defs/lotID"),
            "arrival": .ref("parking.schema.json#/$defs/moment")
                .described("Default: now on the simulated campus.").optional,
            "kind": .ref("parking.schema.json#/$defs/kind").optional,
        ])
            .described("Free spots expected per level of a lot at an arrival time: the mean of the snapshots of the same weekday and hour (campus time), with the number of samples, and the recommended level."),
        reply: .object([
            "lot": .ref("parking.schema.json#/$defs/lotID"),
            "arrival": .int(min: 0)
                .described("Epoch milliseconds."),
            "arrival_local": .ref("parking.schema.json#/$defs/local"),
            "weekday": .choice(["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]),
            "hour": .int(0...23),
            "kind": .ref("parking.schema.json#/$defs/kind"),
            "samples": .int(min: 0),
            "levels": .array(of: .object([
                    "id": .string(1...64),
                    "name": .ref("parking.schema.json#/$defs/levelName"),
                    "floor": .int(min: 1),
                    "signal": .ref("parking.schema.json#/$defs/signal"),
                    "samples": .int(min: 0),
                    "expected_free": .oneOf([
                        .ref("parking.schema.json#/$defs/expected"),
                        .null,
                    ]),
                    "total": .ref("parking.schema.json#/$defs/counts"),
                ])),
            "recommended_level": .oneOf([
                .ref("parking.schema.json#/$defs/levelName"),
                .null,
            ]),
            "expected_full": .bool,
        ])
            .described("recommended_level has the most free spots of kind expected (at least one; the upper level on a tie), null when none; expected_full says the snapshots expect no free spot; samples 0 means no snapshot of that weekday and hour yet."))

    public static let hold = Operation(
        "reservations.hold", .mutation, auth: .user,
        request: .object([
            "spot": .string(1...64).optional,
            "lot": .ref("parking.schema.json#/$defs/lotID").optional,
            "destination": .string(1...64)
                .described("A building: ML, SD, W, LL; spots of every campus lot, by walk.").optional,
            "kind": .ref("parking.schema.json#/$defs/kind")
                .described("regular unless given: accessible spots and chargers go only to drivers who ask.").optional,
            "level": .ref("parking.schema.json#/$defs/levelName").optional,
            "signal": .bool
                .described("Only levels with mobile signal (not P2, P3).").optional,
        ])
            .described("Signed-in drivers (a mutation: idempotent by envelope id). Holds a spot for --hold-seconds (10 minutes by default): the one named, or the best free one for the filters. conflict (409) when the spot is taken or held, when no spot matches, or when the driver already has an active reservation; not_found (404) for an unknown spot, lot or destination. Publishes reservations.held.")
            .requiresOne(of: ["spot", "lot", "destination"])
            .exclusive("spot", "lot").exclusive("spot", "destination").exclusive("lot", "destination")
            .exclusive("spot", "kind").exclusive("spot", "level").exclusive("spot", "signal"),
        reply: .object([
            "reservation": .ref("reservation.schema.json"),
            "hold_seconds": .int(min: 1),
        ])
            .described("The reservation, held, with its deadline."))

    public static let levels = TypedOperation<Levels.Request, Levels.Reply>(
        "reservations.levels", .query, auth: .none,
        request: Levels.Request.shape
            .described("The levels of a lot with their free spots per kind, live (the Live map). not_found (404) for an unknown lot."),
        reply: Levels.Reply.shape
            .described("Levels from P1 down, at the simulated campus time."))

    public static let lots = Operation(
        "reservations.lots", .query, auth: .none,
        request: .object([
            "kind": .choice(["campus", "nearby"])
                .described("Only campus or only nearby lots.").optional,
        ])
            .described("The lots: campus lots and nearby off-campus lots (with distance and address), with live free spots per kind, and the destination buildings with their walks."),
        reply: .object([
            "lots": .array(of: .object([
                    "id": .ref("parking.schema.json#/$defs/lotID"),
                    "name": .string(min: 1),
                    "kind": .choice(["campus", "nearby"]),
                    "address": .string(min: 1),
                    "distance_m": .int(min: 0)
                        .described("From campus; 0 for campus lots."),
                    "lat": .number(),
                    "lon": .number(),
                    "levels": .array(of: .ref("parking.schema.json#/$defs/levelName")),
                    "total": .ref("parking.schema.json#/$defs/counts"),
                    "free": .ref("parking.schema.json#/$defs/counts"),
                ])),
            "destinations": .array(of: .object([
                    "id": .string(1...64),
                    "name": .string(min: 1),
                    "walks": .array(of: .object([
                            "lot": .ref("parking.schema.json#/$defs/lotID"),
                            "walk_m": .int(min: 0),
                        ])),
                ])),
        ])
            .described("Lots in display order and the destinations."))

    public static let mine = TypedOperation<Mine.Request, Mine.Reply>(
        "reservations.mine", .query, auth: .user,
        request: Mine.Request.shape
            .described("Signed-in drivers. The caller's active reservation and history, newest first."),
        reply: Mine.Reply.shape
            .described("active is held or checked_in, or null; stays counts and sums the finished stays."))

    public static let nearby = Operation(
        "reservations.nearby", .query, auth: .none,
        request: .object([
            "kind": .ref("parking.schema.json#/$defs/kind").optional,
        ])
            .described("Nearby off-campus lots by distance with their free spots, and whether campus is full for the kind asked (regular by default)."),
        reply: .object([
            "kind": .ref("parking.schema.json#/$defs/kind"),
            "campus": .object([
                "free": .ref("parking.schema.json#/$defs/counts"),
                "total": .ref("parking.schema.json#/$defs/counts"),
                "full": .bool,
            ]),
            "lots": .array(of: .object([
                    "id": .ref("parking.schema.json#/$defs/lotID"),
                    "name": .string(),
                    "address": .string(),
                    "distance_m": .int(min: 0),
                    "lat": .number(),
                    "lon": .number(),
                    "total": .ref("parking.schema.json#/$defs/counts"),
                    "free": .ref("parking.schema.json#/$defs/counts"),
                    "has_free": .bool
                        .described("A spot of kind is free here."),
                ])),
        ])
            .described("Campus free and total spots, full when no spot of kind is free; the nearby lots nearest first."))

    public static let occupancy = Operation(
        "reservations.occupancy", .query, auth: .none,
        request: .object([
            "lot": .ref("parking.schema.json#/$defs/lotID"),
            "level": .ref("parking.schema.json#/$defs/levelName").optional,
            "from": .ref("parking.schema.json#/$defs/moment").optional,
            "to": .ref("parking.schema.json#/$defs/moment").optional,
        ])
            .described("The snapshots of a lot (or one level) between from and to, at most 7 days apart (max_range_days). Defaults: to now on the simulated campus, from a day before to."),
        reply: .object([
            "lot": .ref("parking.schema.json#/$defs/lotID"),
            "from": .int(min: 0)
                .described("Epoch milliseconds."),
            "to": .int(min: 0)
                .described("Epoch milliseconds."),
            "snapshots": .array(of: .ref("parking.schema.json#/$defs/snapshot")),
        ])
            .described("Snapshots in time order."))

    public static let spotsFind = Operation(
        "reservations.spots.find", .query, auth: .none,
        request: .object([
            "lot": .ref("parking.schema.json#/$defs/lotID").optional,
            "destination": .string(1...64)
                .described("A building: ML, SD, W, LL; spots of every campus lot, by walk.").optional,
            "kind": .ref("parking.schema.json#/$defs/kind")
                .described("regular unless given: accessible spots and chargers go only to drivers who ask.").optional,
            "level": .ref("parking.schema.json#/$defs/levelName").optional,
            "signal": .bool
                .described("Only levels with mobile signal (not P2, P3).").optional,
            "limit": .int(1...maxPageSize, default: 20).limit("max_page_size").optional,
        ])
            .described("Free spots in a lot or near a destination building, best first (shortest walk, 40 m per level underground), with the recommended one. Give lot or destination, not both; not_found (404) for an unknown one.")
            .requiresOne(of: ["lot", "destination"]).exclusive("lot", "destination"),
        reply: .object([
            "lot": .ref("parking.schema.json#/$defs/lotID").optional,
            "destination": .string(1...64).optional,
            "kind": .ref("parking.schema.json#/$defs/kind"),
            "count": .int(min: 0),
            "spots": .array(of: .ref("parking.schema.json#/$defs/spot")),
            "recommended": .oneOf([
                .ref("parking.schema.json#/$defs/spot"),
                .null,
            ]),
        ])
            .described("count is every free spot matching; spots the best limit of them; recommended the first, or null when none is free (see reservations.nearby)."))

    /// The body of every event of a driver's reservation: the driver and the
    /// reservation, in the state the event names.
    static func reservationEvent(_ type: String, status: String, _ description: String) -> Event {
        Event(type, body: .object([
                "user": .string(min: 1)
                    .described("The driver (stays inside the backend)."),
                "reservation": .allOf([
                    .ref("reservation.schema.json"),
                    .any.keyword("properties", json: ["status": ["const": .string(status)]]),
                ]),
            ])
                .described(description))
    }

    public static let cancelled = reservationEvent("reservations.cancelled", status: "cancelled", "A driver gave up a hold; the spot is free.")

    public static let checkedin = reservationEvent("reservations.checkedin", status: "checked_in", "A driver checked in before the deadline: the hold is fulfilled.")

    public static let checkedout = reservationEvent("reservations.checkedout", status: "checked_out", "A driver left: the spot is free and the stay recorded.")

    public static let expired = reservationEvent("reservations.expired", status: "expired", "A hold reached its deadline without check-in: the service released the spot. Published once per hold.")

    public static let held = reservationEvent("reservations.held", status: "held", "A driver held a spot until the deadline.")

    public static let parkingSchema = Definition("reservations/parking.schema.json", title: "Parking definitions", .any
            .described("Shared pieces of the reservations service's bodies: the kinds of spot, counts per kind, a spot, a level, a lot, a moment, a snapshot, a car.")
            .definitions([
                "kind": .choice(["regular", "accessible", "ev"])
                    .described("regular, accessible (a permit is needed) or ev (a charger)."),
                "levelName": .choice(["P1", "P2", "P3"])
                    .described("P1 is at street level with signal; P2 and P3 are underground without signal."),
                "signal": .choice(["good", "weak", "none"])
                    .described("Mobile signal on the level: good, weak or none."),
                "lotID": .string(1...64)
                    .described("A lot: central, north (campus), calle19, aguas, germania (nearby)."),
                "ms": .int(min: 0)
                    .described("Epoch milliseconds."),
                "local": .string(pattern: "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}[+-]\\d{2}:\\d{2}$")
                    .described("The same moment in campus time, ISO 8601 with the offset."),
                "moment": .oneOf([
                    .int(0...4102444800000),
                    .string(pattern: "^([0-1]?\\d|2[0-3]):[0-5]\\d$|^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])[T ]([01]\\d|2[0-3]):[0-5]\\d(:[0-5]\\d(\\.\\d{1,9})?)?(Z|[+-]\\d{2}:?\\d{2})?$"),
                ])
                    .described("Epoch milliseconds, an ISO 8601 date-time (campus time when it has no offset), or HH:MM for that time today on campus.")
                    .expecting("must be epoch milliseconds, an ISO 8601 date-time (2025-03-03T08:30:00-05:00) or HH:MM"),
                "counts": .object([
                    "regular": .int(min: 0),
                    "accessible": .int(min: 0),
                    "ev": .int(min: 0),
                ])
                    .described("Spots per kind."),
                "expected": .object([
                    "regular": .number(min: 0),
                    "accessible": .number(min: 0),
                    "ev": .number(min: 0),
                ])
                    .described("Mean free spots per kind, to one decimal."),
                "spot": .object([
                    "id": .string(1...64)
                        .described("As on the sign: <lot>-<level>-<number>."),
                    "lot": .ref("#/$defs/lotID"),
                    "level": .ref("#/$defs/levelName"),
                    "level_id": .string(1...64),
                    "signal": .ref("#/$defs/signal"),
                    "number": .int(min: 1),
                    "kind": .ref("#/$defs/kind"),
                    "walk_m": .int(min: 0),
                ])
                    .described("A free spot, with the walk to the destination (or the lot's exit), each level underground counted as 40 m more."),
                "level": .object([
                    "id": .string(1...64),
                    "name": .ref("#/$defs/levelName"),
                    "floor": .int(min: 1),
                    "signal": .ref("#/$defs/signal"),
                    "total": .ref("#/$defs/counts"),
                    "free": .ref("#/$defs/counts"),
                ])
                    .described("A level of a lot with its spots and the free ones, live."),
                "snapshot": .object([
                    "lot": .ref("#/$defs/lotID"),
                    "level": .ref("#/$defs/levelName"),
                    "level_id": .string(1...64),
                    "at": .int(min: 0)
                        .described("Start of the slot, a multiple of 15 minutes, epoch ms.").keyword("multipleOf", json: 900000),
                    "local": .ref("#/$defs/local"),
                    "free": .ref("#/$defs/counts"),
                    "total": .ref("#/$defs/counts"),
                ])
                    .described("Free and total spots of one level at one 15-minute slot of the simulated campus clock."),
                "car": .object([
                    "lat": .number(min: -90, max: 90),
                    "lon": .number(min: -180, max: 180),
                    "level": .string(max: 16).nullable,
                    "note": .string(max: 200),
                    "saved_at": .int(min: 0)
                        .described("Epoch milliseconds."),
                ])
                    .described("Where the driver left the car. GPS does not reach P2 and P3, so the level and a note say the rest."),
            ]))

    public static let reservationSchema = Definition("reservations/reservation.schema.json", title: "Reservation", .object([
            "id": .string(1...64)
                .described("The id of the reservations.hold envelope that made it."),
            "spot": .string(1...64),
            "lot": .ref("parking.schema.json#/$defs/lotID"),
            "level": .ref("parking.schema.json#/$defs/levelName"),
            "signal": .ref("parking.schema.json#/$defs/signal"),
            "kind": .ref("parking.schema.json#/$defs/kind"),
            "status": .choice(["held", "checked_in", "checked_out", "expired", "cancelled"]),
            "held_at": .int(min: 0)
                .described("Epoch milliseconds."),
            "deadline": .int(min: 0)
                .described("Epoch milliseconds."),
            "deadline_local": .ref("parking.schema.json#/$defs/local"),
            "seconds_left": .int(min: 0)
                .described("Of the hold, when the reply was made; 0 unless held."),
            "checked_in_at": .int(min: 0).nullable,
            "ended_at": .int(min: 0).nullable
                .described("Checked out, expired or cancelled at."),
            "stay_seconds": .int(min: 0).nullable
                .described("From check-in to check-out, once checked out."),
        ])
            .described("A hold on a spot and what became of it: held until the deadline, then checked_in (the driver parked) and checked_out (left), or expired, or cancelled. At most one active (held or checked_in) per user and per spot."))

    public static let operations: [Operation] = [cancel.operation, carGet.operation, carSave.operation, checkin.operation, checkout.operation, forecast, hold, levels.operation, lots, mine.operation, nearby, occupancy, spotsFind]
    public static let events: [Event] = [cancelled, checkedin, checkedout, expired, held]
    public static let definitions: [Definition] = [parkingSchema, reservationSchema]
}
