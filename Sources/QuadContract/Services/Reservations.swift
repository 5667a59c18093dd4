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
        public var reservation = Reservation()
        public init() {}
        public init(reservation: Reservation) { self.reservation = reservation }
        public static let fields: [Field<Self>] = [.field(\.reservation, "reservation", .ref("reservation.schema.json"))]
    }

    /// reservations.car.get and car.save: the car (`parking.schema.json#/$defs/car`).
    public struct CarReply: Body {
        public var car = Car()
        public init() {}
        public init(car: Car) { self.car = car }
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
            public var levels: [Level] = []
            public var at: Int64 = 0
            public var local = ""
            public init() {}
            public init(lot: String, levels: [Level], at: Int64, local: String) { (self.lot, self.levels, self.at, self.local) = (lot, levels, at, local) }
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
            public var active: Reservation?
            public var history: [Reservation] = []
            public var stays = Stays()
            public init() {}
            public init(active: Reservation?, history: [Reservation], stays: Stays) { (self.active, self.history, self.stays) = (active, history, stays) }
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

    /// A reservation (``reservationSchema``): a hold on a spot and what
    /// became of it.
    public struct Reservation: Body {
        /// held (the countdown runs), checked_in, checked_out, expired (the
        /// countdown ran out first; a check-in is 409), cancelled.
        public enum Status: String, WireEnum, Sendable {
            case held, checkedIn = "checked_in", checkedOut = "checked_out", expired, cancelled
        }
        public var id = ""
        public var spot = ""
        public var lot = ""
        public var level = ""
        public var signal = ""
        public var kind = ""
        public var status: Status = .held
        public var heldAt: Int64 = 0
        public var deadline: Int64 = 0
        public var deadlineLocal = ""
        public var secondsLeft: Int64 = 0
        public var checkedInAt: Int64?
        public var endedAt: Int64?
        public var staySeconds: Int64?
        /// The seq of the reservations service's last event about it (see `version`'s description).
        public var version: Int64?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.id, "id", .string(1...64)
                .described("The id of the reservations.hold envelope that made it.")),
            .field(\.spot, "spot", .string(1...64)),
            .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
            .field(\.level, "level", .ref("parking.schema.json#/$defs/levelName")),
            .field(\.signal, "signal", .ref("parking.schema.json#/$defs/signal")),
            .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind")),
            .field(\.status, "status", .choice(Status.words)),
            .field(\.heldAt, "held_at", .int(min: 0)
                .described("Epoch milliseconds.")),
            .field(\.deadline, "deadline", .int(min: 0)
                .described("Epoch milliseconds.")),
            .field(\.deadlineLocal, "deadline_local", .ref("parking.schema.json#/$defs/local")),
            .field(\.secondsLeft, "seconds_left", .int(min: 0)
                .described("Of the hold, when the reply was made; 0 unless held.")),
            .field(\.checkedInAt, "checked_in_at", .int(min: 0).nullable),
            .field(\.endedAt, "ended_at", .int(min: 0).nullable
                .described("Checked out, expired or cancelled at.")),
            .field(\.staySeconds, "stay_seconds", .int(min: 0).nullable
                .described("From check-in to check-out, once checked out.")),
            .field(\.version, "version", .int(min: 0).described("The reservation's version: the seq of the reservations service's last event about it (reservations.held, reservations.checkedin, reservations.checkedout, reservations.cancelled or reservations.expired, whose envelope seq is the new version). Of two copies of a reservation, the one with the higher version is the newer, whichever way each came (the reply to reservations.hold, .checkin, .checkout or .cancel, reservations.mine). Absent from the events' own reservation: the event's seq is its version.").optional),
        ]
    }

    /// A level of a lot with its free spots, live (`parking.schema.json#/$defs/level`).
    public struct Level: Body {
        public var id = ""
        public var name = ""
        public var floor: Int64 = 0
        public var signal = ""
        public var total = Counts()
        public var free = Counts()
        public var seq: Int64?
        public init() {}
        public init(id: String, name: String, floor: Int64, signal: String, total: Counts, free: Counts, seq: Int64? = nil) {
            (self.id, self.name, self.floor, self.signal, self.total, self.free, self.seq) = (id, name, floor, signal, total, free, seq)
        }
        public static let fields: [Field<Self>] = [
            .field(\.id, "id", .string(1...64)),
            .field(\.name, "name", .ref("#/$defs/levelName")),
            .field(\.floor, "floor", .int(min: 1)),
            .field(\.signal, "signal", .ref("#/$defs/signal")),
            .field(\.total, "total", .ref("#/$defs/counts")),
            .field(\.free, "free", .ref("#/$defs/counts")),
            .field(\.seq, "seq", .int(min: 0)
                .described("The seq of the last reservations.level.changed event of this level (0: none yet): these counts are that event's. A phone applies a later event only when its seq is higher (the Clone pattern's snapshot).").optional),
        ]
    }

    /// The body of reservations.level.changed: one level's counts now.
    public struct LevelChanged: Body {
        public var lot = ""
        public var level = ""
        public var name = ""
        public var total = Counts()
        public var free = Counts()
        public init() {}
        public init(lot: String, level: String, name: String, total: Counts, free: Counts) {
            (self.lot, self.level, self.name, self.total, self.free) = (lot, level, name, total, free)
        }
        public static let fields: [Field<Self>] = [
            .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
            .field(\.level, "level", .string(1...64)
                .described("The level's id, as reservations.levels lists it.")),
            .field(\.name, "name", .ref("parking.schema.json#/$defs/levelName")),
            .field(\.total, "total", .ref("parking.schema.json#/$defs/counts")),
            .field(\.free, "free", .ref("parking.schema.json#/$defs/counts")),
        ]
    }

    public static let levelChanged = TypedEvent<LevelChanged>("reservations.level.changed", body: LevelChanged.shape
            .described("A level's free spots per kind changed (a hold, a check-out, a cancel, an expiry, the occupancy simulator's cars), written in the transaction of the change. Public: phones subscribe to pub/reservations.level.changed/<lot> on the broker's updates socket; reservations.levels gives each level's seq to start from."),
        audience: .everyone(key: "lot"))

    /// Where the driver left the car (`parking.schema.json#/$defs/car`).
    public struct Car: Body {
        public var lat: Double = 0
        public var lon: Double = 0
        public var level: String?
        public var note = ""
        public var savedAt: Int64 = 0
        public init() {}
        public init(lat: Double, lon: Double, level: String?, note: String, savedAt: Int64) {
            (self.lat, self.lon, self.level, self.note, self.savedAt) = (lat, lon, level, note, savedAt)
        }
        public static let fields: [Field<Self>] = [
            .field(\.lat, "lat", .number(min: -90, max: 90)),
            .field(\.lon, "lon", .number(min: -180, max: 180)),
            .field(\.level, "level", .string(max: 16).nullable),
            .field(\.note, "note", .string(max: 200)),
            .field(\.savedAt, "saved_at", .int(min: 0)
                .described("Epoch milliseconds.")),
        ]
    }

    /// Spots per kind (`parking.schema.json#/$defs/counts`).
    public struct Counts: Body {
        public var regular: Int64 = 0
        public var accessible: Int64 = 0
        public var ev: Int64 = 0
        public init() {}
        public init(regular: Int64, accessible: Int64, ev: Int64) { (self.regular, self.accessible, self.ev) = (regular, accessible, ev) }
        public static let fields: [Field<Self>] = [
            .field(\.regular, "regular", .int(min: 0)),
            .field(\.accessible, "accessible", .int(min: 0)),
            .field(\.ev, "ev", .int(min: 0)),
        ]
    }

    /// Mean free spots per kind, to one decimal (`parking.schema.json#/$defs/expected`).
    public struct Expected: Body {
        public var regular: Double = 0
        public var accessible: Double = 0
        public var ev: Double = 0
        public init() {}
        public init(regular: Double, accessible: Double, ev: Double) { (self.regular, self.accessible, self.ev) = (regular, accessible, ev) }
        public static let fields: [Field<Self>] = [
            .field(\.regular, "regular", .number(min: 0)),
            .field(\.accessible, "accessible", .number(min: 0)),
            .field(\.ev, "ev", .number(min: 0)),
        ]
    }

    /// A free spot with its walk (`parking.schema.json#/$defs/spot`).
    public struct Spot: Body {
        public var id = ""
        public var lot = ""
        public var level = ""
        public var levelID = ""
        public var signal = ""
        public var number: Int64 = 0
        public var kind = ""
        public var walkM: Int64 = 0
        public init() {}
        public init(id: String, lot: String, level: String, levelID: String, signal: String, number: Int64, kind: String, walkM: Int64) {
            (self.id, self.lot, self.level, self.levelID, self.signal, self.number, self.kind, self.walkM) = (id, lot, level, levelID, signal, number, kind, walkM)
        }
        public static let fields: [Field<Self>] = [
            .field(\.id, "id", .string(1...64)
                .described("As on the sign: <lot>-<level>-<number>.")),
            .field(\.lot, "lot", .ref("#/$defs/lotID")),
            .field(\.level, "level", .ref("#/$defs/levelName")),
            .field(\.levelID, "level_id", .string(1...64)),
            .field(\.signal, "signal", .ref("#/$defs/signal")),
            .field(\.number, "number", .int(min: 1)),
            .field(\.kind, "kind", .ref("#/$defs/kind")),
            .field(\.walkM, "walk_m", .int(min: 0)),
        ]
    }

    /// reservations.hold: a named spot, or filters to choose the best free one.
    public enum Hold {
        public struct Request: Body {
            public var spot: String?
            public var lot: String?
            public var destination: String?
            public var kind: String?
            public var level: String?
            public var signal: Bool?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.spot, "spot", .string(1...64).optional),
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID").optional),
                .field(\.destination, "destination", .string(1...64)
                    .described("A building: ML, SD, W, LL; spots of every campus lot, by walk.").optional),
                .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind")
                    .described("regular unless given: accessible spots and chargers go only to drivers who ask.").optional),
                .field(\.level, "level", .ref("parking.schema.json#/$defs/levelName").optional),
                .field(\.signal, "signal", .bool
                    .described("Only levels with mobile signal (not P2, P3).").optional),
            ]
        }
        public struct Reply: Body {
            public var reservation = Reservation()
            public var holdSeconds: Int64 = 0
            public init() {}
            public init(reservation: Reservation, holdSeconds: Int64) { (self.reservation, self.holdSeconds) = (reservation, holdSeconds) }
            public static let fields: [Field<Self>] = [
                .field(\.reservation, "reservation", .ref("reservation.schema.json")),
                .field(\.holdSeconds, "hold_seconds", .int(min: 1)),
            ]
        }
    }

    /// reservations.spots.find: the filters, and the best free spots.
    public enum SpotsFind {
        public struct Request: Body {
            public var lot: String?
            public var destination: String?
            public var kind: String?
            public var level: String?
            public var signal: Bool?
            public var limit: Int64 = 20
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID").optional),
                .field(\.destination, "destination", .string(1...64)
                    .described("A building: ML, SD, W, LL; spots of every campus lot, by walk.").optional),
                .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind")
                    .described("regular unless given: accessible spots and chargers go only to drivers who ask.").optional),
                .field(\.level, "level", .ref("parking.schema.json#/$defs/levelName").optional),
                .field(\.signal, "signal", .bool
                    .described("Only levels with mobile signal (not P2, P3).").optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
            ]
        }
        public struct Reply: Body {
            public var lot: String?
            public var destination: String?
            public var kind = ""
            public var count: Int64 = 0
            public var spots: [Spot] = []
            public var recommended: Spot?
            public init() {}
            public init(lot: String?, destination: String?, kind: String, count: Int64, spots: [Spot]) {
                (self.lot, self.destination, self.kind, self.count, self.spots, self.recommended) = (lot, destination, kind, count, spots, spots.first)
            }
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID").optional),
                .field(\.destination, "destination", .string(1...64).optional),
                .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind")),
                .field(\.count, "count", .int(min: 0)),
                .field(\.spots, "spots", .array(of: .ref("parking.schema.json#/$defs/spot"))),
                .field(\.recommended, "recommended", .oneOf([
                    .ref("parking.schema.json#/$defs/spot"),
                    .null,
                ])),
            ]
        }
    }

    /// reservations.lots: every lot with its free spots, and the destinations.
    public enum Lots {
        public struct Request: Body {
            public var kind: String?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.kind, "kind", .choice(["campus", "nearby"])
                    .described("Only campus or only nearby lots.").optional),
            ]
        }
        public struct Lot: Body {
            public var id = ""
            public var name = ""
            public var kind = ""
            public var address = ""
            public var distanceM: Int64 = 0
            public var lat: Double = 0
            public var lon: Double = 0
            public var levels: [String] = []
            public var total = Counts()
            public var free = Counts()
            public var photoUrl = ""
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.name, "name", .string(min: 1)),
                .field(\.photoUrl, "photo_url", photoURL),
                .field(\.kind, "kind", .choice(["campus", "nearby"])),
                .field(\.address, "address", .string(min: 1)),
                .field(\.distanceM, "distance_m", .int(min: 0)
                    .described("From campus; 0 for campus lots.")),
                .field(\.lat, "lat", .number()),
                .field(\.lon, "lon", .number()),
                .field(\.levels, "levels", .array(of: .ref("parking.schema.json#/$defs/levelName"))),
                .field(\.total, "total", .ref("parking.schema.json#/$defs/counts")),
                .field(\.free, "free", .ref("parking.schema.json#/$defs/counts")),
            ]
        }
        /// A photo of a lot or building, served by reservations like
        /// catalog's pictures (issue 16): content-addressed, immutable.
        static let photoURL: Shape = .string(min: 1)
            .described("Where its photo is: <images base URL>/images/<sha256>, a PNG served with ETag and Cache-Control immutable (a path /images/<sha256> when reservations serves no HTTP).")
        public struct Walk: Body {
            public var lot = ""
            public var walkM: Int64 = 0
            public init() {}
            public init(lot: String, walkM: Int64) { (self.lot, self.walkM) = (lot, walkM) }
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.walkM, "walk_m", .int(min: 0)),
            ]
        }
        public struct Destination: Body {
            public var id = ""
            public var name = ""
            public var walks: [Walk] = []
            public var photoUrl = ""
            public init() {}
            public init(id: String, name: String, walks: [Walk], photoUrl: String = "") {
                (self.id, self.name, self.walks, self.photoUrl) = (id, name, walks, photoUrl)
            }
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string(1...64)),
                .field(\.name, "name", .string(min: 1)),
                .field(\.photoUrl, "photo_url", photoURL),
                .field(\.walks, "walks", .array(of: Walk.shape)),
            ]
        }
        public struct Reply: Body {
            public var lots: [Lot] = []
            public var destinations: [Destination] = []
            public init() {}
            public init(lots: [Lot], destinations: [Destination]) { (self.lots, self.destinations) = (lots, destinations) }
            public static let fields: [Field<Self>] = [
                .field(\.lots, "lots", .array(of: Lot.shape)),
                .field(\.destinations, "destinations", .array(of: Destination.shape)),
            ]
        }
    }

    /// reservations.nearby: off-campus lots, and whether campus is full.
    public enum Nearby {
        public struct Request: Body {
            public var kind: String?
            public init() {}
            public static let fields: [Field<Self>] = [.field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind").optional)]
        }
        public struct Campus: Body {
            public var free = Counts()
            public var total = Counts()
            public var full = false
            public init() {}
            public init(free: Counts, total: Counts, full: Bool) { (self.free, self.total, self.full) = (free, total, full) }
            public static let fields: [Field<Self>] = [
                .field(\.free, "free", .ref("parking.schema.json#/$defs/counts")),
                .field(\.total, "total", .ref("parking.schema.json#/$defs/counts")),
                .field(\.full, "full", .bool),
            ]
        }
        public struct Lot: Body {
            public var id = ""
            public var name = ""
            public var address = ""
            public var distanceM: Int64 = 0
            public var lat: Double = 0
            public var lon: Double = 0
            public var total = Counts()
            public var free = Counts()
            public var hasFree = false
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.name, "name", .string()),
                .field(\.address, "address", .string()),
                .field(\.distanceM, "distance_m", .int(min: 0)),
                .field(\.lat, "lat", .number()),
                .field(\.lon, "lon", .number()),
                .field(\.total, "total", .ref("parking.schema.json#/$defs/counts")),
                .field(\.free, "free", .ref("parking.schema.json#/$defs/counts")),
                .field(\.hasFree, "has_free", .bool
                    .described("A spot of kind is free here.")),
            ]
        }
        public struct Reply: Body {
            public var kind = ""
            public var campus = Campus()
            public var lots: [Lot] = []
            public init() {}
            public init(kind: String, campus: Campus, lots: [Lot]) { (self.kind, self.campus, self.lots) = (kind, campus, lots) }
            public static let fields: [Field<Self>] = [
                .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind")),
                .field(\.campus, "campus", Campus.shape),
                .field(\.lots, "lots", .array(of: Lot.shape)),
            ]
        }
    }

    /// reservations.forecast: free spots expected per level at an arrival.
    public enum Forecast {
        public struct Request: Body {
            public var lot = ""
            /// A moment (`parking.schema.json#/$defs/moment`): epoch ms or
            /// a date-time string, read against the campus clock by the handler.
            public var arrival: JSON?
            public var kind: String?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.arrival, "arrival", .ref("parking.schema.json#/$defs/moment")
                    .described("Default: now on the simulated campus.").optional),
                .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind").optional),
            ]
        }
        public struct Level: Body {
            public var id = ""
            public var name = ""
            public var floor: Int64 = 0
            public var signal = ""
            public var samples: Int64 = 0
            public var expectedFree: Expected?
            public var total = Counts()
            public init() {}
            public init(id: String, name: String, floor: Int64, signal: String, samples: Int64, expectedFree: Expected?, total: Counts) {
                (self.id, self.name, self.floor, self.signal, self.samples, self.expectedFree, self.total) = (id, name, floor, signal, samples, expectedFree, total)
            }
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string(1...64)),
                .field(\.name, "name", .ref("parking.schema.json#/$defs/levelName")),
                .field(\.floor, "floor", .int(min: 1)),
                .field(\.signal, "signal", .ref("parking.schema.json#/$defs/signal")),
                .field(\.samples, "samples", .int(min: 0)),
                .field(\.expectedFree, "expected_free", .oneOf([
                    .ref("parking.schema.json#/$defs/expected"),
                    .null,
                ])),
                .field(\.total, "total", .ref("parking.schema.json#/$defs/counts")),
            ]
        }
        public struct Reply: Body {
            public var lot = ""
            public var arrival: Int64 = 0
            public var arrivalLocal = ""
            public var weekday = ""
            public var hour: Int64 = 0
            public var kind = ""
            public var samples: Int64 = 0
            public var levels: [Level] = []
            public var recommendedLevel: String?
            public var expectedFull = false
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.arrival, "arrival", .int(min: 0)
                    .described("Epoch milliseconds.")),
                .field(\.arrivalLocal, "arrival_local", .ref("parking.schema.json#/$defs/local")),
                .field(\.weekday, "weekday", .choice(["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"])),
                .field(\.hour, "hour", .int(0...23)),
                .field(\.kind, "kind", .ref("parking.schema.json#/$defs/kind")),
                .field(\.samples, "samples", .int(min: 0)),
                .field(\.levels, "levels", .array(of: Level.shape)),
                .field(\.recommendedLevel, "recommended_level", .oneOf([
                    .ref("parking.schema.json#/$defs/levelName"),
                    .null,
                ])),
                .field(\.expectedFull, "expected_full", .bool),
            ]
        }
    }

    /// reservations.occupancy: the snapshots of a lot between two moments.
    public enum Occupancy {
        public struct Request: Body {
            public var lot = ""
            public var level: String?
            /// Moments, as ``Forecast/Request/arrival``.
            public var from: JSON?
            public var to: JSON?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.level, "level", .ref("parking.schema.json#/$defs/levelName").optional),
                .field(\.from, "from", .ref("parking.schema.json#/$defs/moment").optional),
                .field(\.to, "to", .ref("parking.schema.json#/$defs/moment").optional),
            ]
        }
        public struct Reply: Body {
            public var lot = ""
            public var from: Int64 = 0
            public var to: Int64 = 0
            public var snapshots: [Contract.Occupancy.Snapshot] = []
            public init() {}
            public init(lot: String, from: Int64, to: Int64, snapshots: [Contract.Occupancy.Snapshot]) {
                (self.lot, self.from, self.to, self.snapshots) = (lot, from, to, snapshots)
            }
            public static let fields: [Field<Self>] = [
                .field(\.lot, "lot", .ref("parking.schema.json#/$defs/lotID")),
                .field(\.from, "from", .int(min: 0)
                    .described("Epoch milliseconds.")),
                .field(\.to, "to", .int(min: 0)
                    .described("Epoch milliseconds.")),
                .field(\.snapshots, "snapshots", .array(of: .ref("parking.schema.json#/$defs/snapshot"))),
            ]
        }
    }

    public static let forecast = TypedOperation<Forecast.Request, Forecast.Reply>(
        "reservations.forecast", .query, auth: .none,
        request: Forecast.Request.shape
            .described("Free spots expected per level of a lot at an arrival time: the mean of the snapshots of the same weekday and hour (campus time), with the number of samples, and the recommended level."),
        reply: Forecast.Reply.shape
            .described("recommended_level has the most free spots of kind expected (at least one; the upper level on a tie), null when none; expected_full says the snapshots expect no free spot; samples 0 means no snapshot of that weekday and hour yet."))

    public static let hold = TypedOperation<Hold.Request, Hold.Reply>(
        "reservations.hold", .mutation, auth: .user,
        request: Hold.Request.shape
            .described("Signed-in drivers (a mutation: idempotent by envelope id). Holds a spot for --hold-seconds (10 minutes by default): the one named, or the best free one for the filters. conflict (409) when the spot is taken or held, when no spot matches, or when the driver already has an active reservation; not_found (404) for an unknown spot, lot or destination. Publishes reservations.held.")
            .requiresOne(of: ["spot", "lot", "destination"])
            .exclusive("spot", "lot").exclusive("spot", "destination").exclusive("lot", "destination")
            .exclusive("spot", "kind").exclusive("spot", "level").exclusive("spot", "signal"),
        reply: Hold.Reply.shape
            .described("The reservation, held, with its deadline."))

    public static let levels = TypedOperation<Levels.Request, Levels.Reply>(
        "reservations.levels", .query, auth: .none,
        request: Levels.Request.shape
            .described("The levels of a lot with their free spots per kind, live (the Live map). not_found (404) for an unknown lot."),
        reply: Levels.Reply.shape
            .described("Levels from P1 down, at the simulated campus time."))

    public static let lots = TypedOperation<Lots.Request, Lots.Reply>(
        "reservations.lots", .query, auth: .none,
        request: Lots.Request.shape
            .described("The lots: campus lots and nearby off-campus lots (with distance and address), with live free spots per kind, and the destination buildings with their walks."),
        reply: Lots.Reply.shape
            .described("Lots in display order and the destinations."))

    public static let mine = TypedOperation<Mine.Request, Mine.Reply>(
        "reservations.mine", .query, auth: .user,
        request: Mine.Request.shape
            .described("Signed-in drivers. The caller's active reservation and history, newest first."),
        reply: Mine.Reply.shape
            .described("active is held or checked_in, or null; stays counts and sums the finished stays."))

    public static let nearby = TypedOperation<Nearby.Request, Nearby.Reply>(
        "reservations.nearby", .query, auth: .none,
        request: Nearby.Request.shape
            .described("Nearby off-campus lots by distance with their free spots, and whether campus is full for the kind asked (regular by default)."),
        reply: Nearby.Reply.shape
            .described("Campus free and total spots, full when no spot of kind is free; the nearby lots nearest first."))

    public static let occupancy = TypedOperation<Occupancy.Request, Occupancy.Reply>(
        "reservations.occupancy", .query, auth: .none,
        request: Occupancy.Request.shape
            .described("The snapshots of a lot (or one level) between from and to, at most 7 days apart (max_range_days). Defaults: to now on the simulated campus, from a day before to."),
        reply: Occupancy.Reply.shape
            .described("Snapshots in time order."))

    public static let spotsFind = TypedOperation<SpotsFind.Request, SpotsFind.Reply>(
        "reservations.spots.find", .query, auth: .none,
        request: SpotsFind.Request.shape
            .described("Free spots in a lot or near a destination building, best first (shortest walk, 40 m per level underground), with the recommended one. Give lot or destination, not both; not_found (404) for an unknown one.")
            .requiresOne(of: ["lot", "destination"]).exclusive("lot", "destination"),
        reply: SpotsFind.Reply.shape
            .described("count is every free spot matching; spots the best limit of them; recommended the first, or null when none is free (see reservations.nearby)."))

    /// The body of every event of a driver's reservation: the driver and the
    /// reservation (``reservationSchema``), in the state the event names.
    public struct ReservationEvent: Body {
        public var user = ""
        public var reservation = Reservation()
        public init() {}
        public init(user: String, reservation: Reservation) { (self.user, self.reservation) = (user, reservation) }
        /// `status` is the one the event's reservation always has.
        static func declared(status: String) -> [Field<Self>] {
            [
                .field(\.user, "user", .string(min: 1)
                    .described("The driver (stays inside the backend).")),
                .field(\.reservation, "reservation", .allOf([
                    .ref("reservation.schema.json"),
                    .any.keyword("properties", json: ["status": ["const": .string(status)]]),
                ])),
            ]
        }
        public static let fields: [Field<Self>] = declared(status: "held")
    }

    static func reservationEvent(_ type: String, status: String, _ description: String) -> TypedEvent<ReservationEvent> {
        TypedEvent(type, body: .object(fields: ReservationEvent.declared(status: status).map { ($0.name, $0.shape) }, open: false)
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
                "counts": Counts.shape
                    .described("Spots per kind."),
                "expected": Expected.shape
                    .described("Mean free spots per kind, to one decimal."),
                "spot": Spot.shape
                    .described("A free spot, with the walk to the destination (or the lot's exit), each level underground counted as 40 m more."),
                "level": Level.shape
                    .described("A level of a lot with its spots and the free ones, live."),
                "snapshot": Contract.Occupancy.Snapshot.shape
                    .described("Free and total spots of one level at one 15-minute slot of the simulated campus clock."),
                "car": Car.shape
                    .described("Where the driver left the car. GPS does not reach P2 and P3, so the level and a note say the rest."),
            ]))

    public static let reservationSchema = Definition("reservations/reservation.schema.json", title: "Reservation", Reservation.shape
            .described("A hold on a spot and what became of it: held until the deadline, then checked_in (the driver parked) and checked_out (left), or expired, or cancelled. At most one active (held or checked_in) per user and per spot."))

    public static let operations: [Operation] = [cancel.operation, carGet.operation, carSave.operation, checkin.operation, checkout.operation, forecast.operation, hold.operation, levels.operation, lots.operation, mine.operation, nearby.operation, occupancy.operation, spotsFind.operation]
    public static let events: [Event] = [cancelled.event, checkedin.event, checkedout.event, expired.event, held.event, levelChanged.event]
    public static let definitions: [Definition] = [parkingSchema, reservationSchema]
}
