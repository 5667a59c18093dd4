import Foundation
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A phone never shows an older order than one it held (issue 30 pt 1):
/// the orders service's version of an order (the seq of its last event)
/// decides between an orders.mine or orders.rentals answer, an action's
/// reply and the phone's saved orders, whichever comes last.
@Suite("Versions on a phone's saved orders", .serialized)
struct OrderVersionTests {
    static func order(_ id: String, _ status: String, version: Int64, total: Double = 40, mode: String = "buy") -> JSON {
        ["order": .string(id), "status": .string(status), "source": "buy_now", "mode": .string(mode), "screen": "home",
         "items": [["product": "p-0001", "quantity": 1]], "total": .double(total), "currency": "USD", "created_at": 1_000,
         "updated_at": 1_000, "version": .int(version)]
    }

    static func view(_ rig: PhoneRig, _ name: String) -> ViewResult? {
        var shown: ViewResult?
        rig.phone.open(name) { shown = $0 }
        rig.run(forMs: 5000) { shown != nil }
        return shown
    }

    static func row(_ rig: PhoneRig, _ id: String) throws -> (status: String, version: Int64)? {
        try rig.phone.db.queryOne("SELECT status, version FROM orders WHERE id = $1", .text(id)).map { ($0.string("status"), $0.int("version")) }
    }

    @Test func anOlderOrdersMineAnswerNeverReplacesANewerOrderAndANewerOneDoes() throws {
        let rig = try PhoneRig()
        rig.phone.start()
        func answer(_ orders: JSON...) { rig.broker.queries["orders.mine"] = ["orders": .array(orders), "total": .int(Int64(orders.count)), "offset": 0, "limit": 100] }
        func shown() throws -> JSON? { try #require(Self.view(rig, "orders")).body["orders"]?.array?.first { $0["order"] == "o-1" } }

        answer(Self.order("o-1", "confirmed", version: 5))
        #expect(try shown()?["version"] == 5)
        #expect(try Self.row(rig, "o-1").map { [$0.status, String($0.version)] } == ["confirmed", "5"])

        // Cancelled at version 9, then a read answered before it (a lagging
        // answer, the order still confirmed at 5): the phone keeps 9.
        answer(Self.order("o-1", "cancelled", version: 9))
        #expect(try shown()?["status"] == "cancelled")
        answer(Self.order("o-1", "confirmed", version: 5))
        let kept = try #require(try shown())
        #expect(kept["status"] == "cancelled" && kept["version"] == 9, "\(kept)")
        #expect(try Self.row(rig, "o-1").map { [$0.status, String($0.version)] } == ["cancelled", "9"])
        #expect(SavedOrders.olderDropped(rig.phone.db) == 1)
        // The saved copy of the list is the newer one too (what the view shows offline).
        #expect(rig.phone.saved(Phone.key("orders.mine", ["limit": 100]))?.body["orders"]?.array?.first?["version"] == 9)

        // The same version again replaces it (equal), a newer one does.
        answer(Self.order("o-1", "cancelled", version: 9))
        #expect(try shown()?["version"] == 9 && SavedOrders.olderDropped(rig.phone.db) == 1)
        answer(Self.order("o-1", "cancelled", version: 12, total: 0))
        let newer = try #require(try shown())
        #expect(newer["version"] == 12 && newer["total"] == 0, "\(newer)")
        #expect(try Self.row(rig, "o-1").map { [$0.status, String($0.version)] } == ["cancelled", "12"])
    }

    /// A return answered at version 8 is not undone by an orders.mine or an
    /// orders.rentals answer read before it (the rental still confirmed at 4).
    @Test func aReturnAnsweredIsNotUndoneByAnOlderListOfOrdersOrRentals() throws {
        let rig = try PhoneRig()
        rig.broker.answer = { request, _ in
            guard request.type == "orders.return" else { return .success([:]) }
            return .success(Self.order("r-1", "returned", version: 8, total: 12, mode: "rent"))
        }
        rig.phone.start()
        let confirmed = Self.order("r-1", "confirmed", version: 4, total: 10, mode: "rent")
        rig.broker.queries["orders.mine"] = ["orders": [confirmed], "total": 1, "offset": 0, "limit": 100]
        rig.broker.queries["orders.rentals"] = ["rentals": [["order": confirmed, "state": "active", "due_date": "2099-01-01", "due_in_days": 3]],
                                                "total": 1, "offset": 0, "limit": 100]
        _ = try #require(Self.view(rig, "orders"))
        #expect(try Self.row(rig, "r-1")?.version == 4)

        guard case .queued = rig.phone.act("orders.return", ["order": "r-1"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try Self.row(rig, "r-1").map { [$0.status, String($0.version)] } == ["returned", "8"])

        let orders = try #require(Self.view(rig, "orders")).body["orders"]?.array?.first
        #expect(orders?["status"] == "returned" && orders?["version"] == 8, "\(orders?.text ?? "none")")
        let rental = try #require(Self.view(rig, "rentals")).body["rentals"]?.array?.first
        #expect(rental?["state"] == "returned" && rental?["order"]?["version"] == 8, "\(rental?.text ?? "none")")
        #expect(try Self.row(rig, "r-1").map { [$0.status, String($0.version)] } == ["returned", "8"])
        #expect(SavedOrders.olderDropped(rig.phone.db) == 2)
    }

    /// An order placed offline and still queued has no version: a list
    /// that has it (the place reached the service, its answer did not reach
    /// the phone) leaves it as the phone shows it, until its answer comes.
    @Test func anOrderStillQueuedStaysAsThePhoneShowsItUntilItsAnswer() throws {
        let rig = try PhoneRig()
        var placed: String?
        rig.broker.answer = { request, _ in
            guard request.type == "orders.place" else { return .success([:]) }
            return .success(Self.order(request.id, "confirmed", version: 3, total: 40))
        }
        rig.phone.airplane = true
        rig.phone.start()
        guard case .queued(let id) = rig.phone.act("orders.place", ["source": "buy_now", "product": "p-0001", "mode": "buy"]) else {
            Issue.record("not queued"); return
        }
        placed = id
        rig.broker.queries["orders.mine"] = ["orders": [Self.order(id, "confirmed", version: 3)], "total": 1, "offset": 0, "limit": 100]
        // Online for the read only: the action's answer is lost.
        let answer = rig.broker.answer
        rig.broker.answer = { _, _ in nil }
        rig.phone.setAirplane(false)
        let shown = try #require(Self.view(rig, "orders"))
        #expect(shown.body["queued"]?.array?.first?["order"]?.string == placed, "\(shown.body)")
        #expect(try rig.phone.db.queryOne("SELECT pending, version FROM orders WHERE id = $1", .text(id)).map { [$0.optionalString("pending") ?? "", String($0.int("version"))] } == [id, "0"])

        rig.broker.answer = answer
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try rig.phone.db.queryOne("SELECT pending, status, version FROM orders WHERE id = $1", .text(id))
            .map { [$0.optionalString("pending") ?? "none", $0.string("status"), String($0.int("version"))] } == ["none", "confirmed", "3"])
        #expect(SavedOrders.olderDropped(rig.phone.db) == 0)
    }
}
