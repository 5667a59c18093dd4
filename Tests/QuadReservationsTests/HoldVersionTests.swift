import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadReservations

/// A reservation's version is the seq of the last event published about it
/// (issue 30 pt 1), written in the transaction of the step: held, checked
/// in, checked out, cancelled and expired each move it, and every answer
/// that gives a hold (a step's reply, a retry's stored answer,
/// reservations.mine's active and history) gives it. The event's own
/// reservation has none: its envelope's seq is the version.
@Suite("Reservations: a hold's version")
struct HoldVersionTests {
    /// The seq of the last event of `type` about reservation `id`, and that event's reservation.
    static func lastEvent(_ db: Database, _ type: String, reservation id: String) throws -> (seq: Int64, reservation: JSON)? {
        try Outbox.since(db, after: 0, limit: 500).last { $0.type == type && $0.body["reservation"]?["id"]?.string == id }
            .map { ($0.seq, $0.body["reservation"] ?? .null) }
    }

    @Test(arguments: Desk.stores) func aHoldsVersionRisesWithEachStepAndIsTheSeqOfItsLastEvent(store: String) throws {
        let desk = try Desk(store)
        func mine(_ user: String = "ana") throws -> JSON { try desk.ok("reservations.mine", user: user) }
        func inHistory(_ id: String, _ user: String = "ana") throws -> Int64? {
            try mine(user)["history"]?.array?.first { $0["id"]?.string == id }?["version"]?.int
        }

        // Held, checked in, checked out: each the seq of its event, in the reply and in reservations.mine.
        let hold = Envelope.request("reservations.hold", body: ["spot": "central-P1-030"], user: "ana")
        let held = desk.handlers.handle(hold).body["reservation"] ?? .null
        let id = try #require(held["id"]?.string)
        let heldEvent = try #require(try Self.lastEvent(desk.db, "reservations.held", reservation: id))
        #expect(held["version"]?.int == heldEvent.seq, "\(held.text)")
        #expect(heldEvent.reservation["version"] == nil, "the event's seq is its version")
        #expect(try mine()["active"]?["version"]?.int == heldEvent.seq)
        #expect(desk.handlers.handle(hold).body["reservation"]?["version"]?.int == heldEvent.seq, "a retry answers what it answered")

        let checkedIn = try desk.ok("reservations.checkin", ["reservation": .string(id)])["reservation"]?["version"]?.int
        let checkinSeq = try #require(try Self.lastEvent(desk.db, "reservations.checkedin", reservation: id)?.seq)
        #expect(checkedIn == checkinSeq && checkinSeq > heldEvent.seq)
        #expect(try mine()["active"]?["version"]?.int == checkinSeq)

        let checkedOut = try desk.ok("reservations.checkout", ["reservation": .string(id)])["reservation"]?["version"]?.int
        let checkoutSeq = try #require(try Self.lastEvent(desk.db, "reservations.checkedout", reservation: id)?.seq)
        #expect(checkedOut == checkoutSeq && checkoutSeq > checkinSeq)
        #expect(try mine()["active"] == .null && inHistory(id) == checkoutSeq)
        // A step refused changes nothing, the version neither.
        #expect(desk.error("reservations.checkout", ["reservation": .string(id)])?.status == 409)
        #expect(try inHistory(id) == checkoutSeq)

        // Cancelled: the reservations.cancelled event's seq.
        let second = try #require(try desk.ok("reservations.hold", ["spot": "central-P1-031"])["reservation"]?["id"]?.string)
        let cancelled = try desk.ok("reservations.cancel", ["reservation": .string(second)])["reservation"]?["version"]?.int
        let cancelSeq = try #require(try Self.lastEvent(desk.db, "reservations.cancelled", reservation: second)?.seq)
        #expect(try cancelled == cancelSeq && cancelSeq > checkoutSeq && inHistory(second) == cancelSeq)

        // Expired (released by the sweep, with no request): the reservations.expired event's seq.
        let third = try #require(try desk.ok("reservations.hold", ["spot": "central-P1-032"], user: "bruno")["reservation"]?["id"]?.string)
        let thirdHeld = try #require(try mine("bruno")["active"]?["version"]?.int)
        try desk.db.execute("UPDATE reservations SET deadline_ms = deadline_ms - 600000 WHERE id = $1", .text(third))
        #expect(try Holds.expireDue(desk.db, now: Int64(Clock.nowMillis()), clock: desk.settings.clock) == 1)
        let expiredSeq = try #require(try Self.lastEvent(desk.db, "reservations.expired", reservation: third)?.seq)
        #expect(try expiredSeq > thirdHeld && inHistory(third, "bruno") == expiredSeq)
        #expect(try inHistory(id) == checkoutSeq, "another's expiry moves no other hold")
    }
}
