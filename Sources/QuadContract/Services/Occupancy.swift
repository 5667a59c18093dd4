import QuadWire

extension Contract {
    /// The occupancy part of the contract.
    public enum Occupancy {}
}

extension Contract.Occupancy {
    /// Free and total spots of one level at one 15-minute slot
    /// (`reservations/parking.schema.json#/$defs/snapshot`): the body of
    /// occupancy.snapshot and the items of reservations.occupancy. Its
    /// references are inside the parking schema, where it is declared.
    public struct Snapshot: Body {
        public var lot = ""
        public var level = ""
        public var levelID = ""
        public var at: Int64 = 0
        public var local = ""
        public var free = Contract.Reservations.Counts()
        public var total = Contract.Reservations.Counts()
        public init() {}
        public init(lot: String, level: String, levelID: String, at: Int64, local: String, free: Contract.Reservations.Counts, total: Contract.Reservations.Counts) {
            (self.lot, self.level, self.levelID, self.at, self.local, self.free, self.total) = (lot, level, levelID, at, local, free, total)
        }
        public static let fields: [Field<Self>] = [
            .field(\.lot, "lot", .ref("#/$defs/lotID")),
            .field(\.level, "level", .ref("#/$defs/levelName")),
            .field(\.levelID, "level_id", .string(1...64)),
            .field(\.at, "at", .int(min: 0)
                .described("Start of the slot, a multiple of 15 minutes, epoch ms.").keyword("multipleOf", json: 900000)),
            .field(\.local, "local", .ref("#/$defs/local")),
            .field(\.free, "free", .ref("#/$defs/counts")),
            .field(\.total, "total", .ref("#/$defs/counts")),
        ]
    }

    public static let snapshot = TypedEvent<Snapshot>("occupancy.snapshot", body: .ref("../reservations/parking.schema.json#/$defs/snapshot")
            .described("Published by the reservations service (topic reservations/occupancy.snapshot) for each level every 15 minutes of the simulated campus clock."))

    public static let events: [Event] = [snapshot.event]
}
