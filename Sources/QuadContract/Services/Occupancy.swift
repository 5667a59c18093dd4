import QuadWire

extension Contract {
    /// The occupancy part of the contract.
    public enum Occupancy {}
}

extension Contract.Occupancy {
    public static let snapshot = Event("occupancy.snapshot", body: .ref("../reservations/parking.schema.json#/$defs/snapshot")
            .described("Published by the reservations service (topic reservations/occupancy.snapshot) for each level every 15 minutes of the simulated campus clock."))

    public static let events: [Event] = [snapshot]
}
