import Foundation
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A phone never shows an older favorite or parking hold than one it held
/// (issue 30 pt 1): the service's version of a favorite or a reservation
/// (the seq of its last event) decides between a favorites.list or
/// reservations.mine answer, an action's reply and the phone's saved
/// copies, whichever comes last.
@Suite("Versions on a phone's saved favorites and holds", .serialized)
struct FavoriteAndHoldVersionTests {
    static func favorites(_ rig: PhoneRig) throws -> [String: Int64] {
        let shown = try #require(OrderVersionTests.view(rig, "favorites"))
        var out: [String: Int64] = [:]
        for item in shown.body["items"]?.array ?? [] { out[item["product"]?.string ?? ""] = item["version"]?.int ?? -1 }
        return out
    }

    static func rows(_ rig: PhoneRig) throws -> [String] {
        try rig.phone.db.query("SELECT product FROM favorites ORDER BY product").map { $0.string("product") }
    }

    static func list(_ version: Int64, _ items: (String, Int64)...) -> JSON {
        ["items": .array(items.map { ["product": .string($0.0), "added_at": 1_000, "summary": .null, "version": .int($0.1)] }),
         "total": .int(Int64(items.count)), "offset": 0, "limit": 200, "version": .int(version)]
    }

    @Test func anOlderFavoritesListNeverUndoesANewerAddOrRemoveAndANewerOneDoes() throws {
        let rig = try PhoneRig()
        var versions: [String: Int64] = ["p-1": 9, "p-2": 12, "p-3": 20]
        rig.broker.answer = { request, _ in
            let product = request.body["product"]?.string ?? ""
            return .success(["product": .string(product), "favorite": .bool(request.type == "favorites.add"), "changed": true, "users": 1,
                             "version": .int(versions[product] ?? 0)])
        }
        rig.phone.start()
        rig.broker.queries["favorites.list"] = Self.list(5, ("p-1", 5))
        #expect(try Self.favorites(rig) == ["p-1": 5])

        // Removed at version 9; then a list read before it (p-1 still there at 5): p-1 stays removed.
        guard case .queued = rig.phone.act("favorites.remove", ["product": "p-1"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try Self.favorites(rig) == [:] && Self.rows(rig) == [])
        #expect(SavedFavorites.olderDropped(rig.phone.db) == 1)
        #expect(try Self.rows(rig) == [], "the phone's favorites are not undone either")

        // Added at 12; then a list read before it (version 9, without p-2): p-2 stays.
        guard case .queued = rig.phone.act("favorites.add", ["product": "p-2"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        rig.broker.queries["favorites.list"] = Self.list(9)
        #expect(try Self.favorites(rig) == ["p-2": 12])
        #expect(try Self.rows(rig) == ["p-2"] && SavedFavorites.olderDropped(rig.phone.db) == 2)
        // The same version again, and a newer list: taken as they are.
        rig.broker.queries["favorites.list"] = Self.list(12, ("p-2", 12))
        #expect(try Self.favorites(rig) == ["p-2": 12] && SavedFavorites.olderDropped(rig.phone.db) == 2)
        rig.broker.queries["favorites.list"] = Self.list(15)
        #expect(try Self.favorites(rig) == [:] && Self.rows(rig) == [], "removed at 15, after the phone's add at 12")
        rig.broker.queries["favorites.list"] = Self.list(12, ("p-2", 12))
        #expect(try Self.favorites(rig) == [:] && Self.rows(rig) == [], "a list older than the removal the phone saw")
        #expect(SavedFavorites.olderDropped(rig.phone.db) == 3)

        // A remove's reply older than the phone's copy (p-4 read at 25, a
        // stored answer at 22) settles the action only: the copy stays at 25.
        rig.broker.queries["favorites.list"] = Self.list(25, ("p-4", 25))
        #expect(try Self.favorites(rig) == ["p-4": 25])
        versions["p-4"] = 22
        guard case .queued = rig.phone.act("favorites.remove", ["product": "p-4"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try SavedFavorites.held(rig.phone.db, "p-4") == 25 && SavedFavorites.olderDropped(rig.phone.db) == 4)

        // Offline, the saved list shows the phone's newer copies: p-3, added at 30 since.
        rig.broker.queries["favorites.list"] = Self.list(26)
        #expect(try Self.favorites(rig) == [:])
        versions["p-3"] = 30
        guard case .queued = rig.phone.act("favorites.add", ["product": "p-3"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        rig.phone.setAirplane(true)
        let offline = try #require(OrderVersionTests.view(rig, "favorites"))
        #expect(offline.source == .saved && offline.body["items"]?.array?.map { $0["product"] } == ["p-3"], "\(offline.body)")
    }

    /// Issue 30 pt 2: while changes wait, the view is the service's latest
    /// list the phone holds with them applied on top, in order; nothing
    /// undoes them, and no network read is made for it.
    @Test func queuedFavoriteChangesAreShownOnTheServicesLatestListAndNeverUndone() throws {
        let rig = try PhoneRig()
        rig.broker.answer = { _, _ in nil }  // every change's answer lost: they stay queued
        rig.phone.start()
        // The student added p-9 on another phone: the service's list has it.
        rig.broker.queries["favorites.list"] = Self.list(8, ("p-9", 8), ("p-1", 5), ("p-2", 4))
        #expect(try Self.favorites(rig) == ["p-9": 8, "p-1": 5, "p-2": 4])
        guard case .queued = rig.phone.act("favorites.remove", ["product": "p-1"]) else { Issue.record("not queued"); return }
        guard case .queued = rig.phone.act("favorites.add", ["product": "p-3"]) else { Issue.record("not queued"); return }
        let reads = rig.broker.seen.filter { $0.type == "favorites.list" }.count
        let shown = try #require(OrderVersionTests.view(rig, "favorites"))
        let items = shown.body["items"]?.array ?? []
        #expect(items.map { $0["product"]?.string ?? "" } == ["p-3", "p-9", "p-2"], "the service's list, the removal and the add on top: \(shown.body)")
        #expect(shown.source == .saved && items.first?["pending"] == true && shown.body["total"]?.int == 3)
        #expect(shown.notice?.contains("waiting to be sent") == true, "\(String(describing: shown.notice))")
        #expect(rig.broker.seen.filter { $0.type == "favorites.list" }.count == reads, "no network read while changes wait")
        #expect(try rig.outbox == 2 && Self.rows(rig) == ["p-2", "p-3", "p-9"], "the phone's own favorites wait for the answers")
        // Offline, the same.
        rig.phone.setAirplane(true)
        let offline = try #require(OrderVersionTests.view(rig, "favorites"))
        #expect(offline.source == .saved && offline.body["items"]?.array?.map { $0["product"]?.string ?? "" } == ["p-3", "p-9", "p-2"], "\(offline.body)")
    }

    static func reservation(_ id: String, _ status: String, version: Int64) -> JSON {
        var r: JSON = ["id": .string(id), "spot": "central-P1-030", "lot": "central", "level": "P1", "signal": "good", "kind": "regular",
                       "status": .string(status), "held_at": 1_000, "deadline": 601_000, "deadline_local": "2026-12-06T10:10:00-05:00",
                       "seconds_left": 0, "checked_in_at": .null, "ended_at": .null, "stay_seconds": .null, "version": .int(version)]
        if status != "held" { r = r.setting("checked_in_at", 2_000) }
        if status == "checked_out" { r = r.setting("ended_at", 3_600_000).setting("stay_seconds", 3598) }
        return r
    }

    static func row(_ rig: PhoneRig, _ id: String) throws -> [String]? {
        try rig.phone.db.queryOne("SELECT status, version, pending FROM parking WHERE id = $1", .text(id))
            .map { [$0.string("status"), String($0.int("version")), $0.optionalString("pending") ?? "-"] }
    }

    /// The phone reads reservations.mine when it rebuilds its spending window (``Phone/fetchStays(_:)``).
    static func readMine(_ rig: PhoneRig, active: JSON = .null, history: [JSON] = []) {
        rig.broker.queries["reservations.mine"] = ["active": active, "history": .array(history), "stays": ["count": 0, "seconds": 0]]
        var read = false
        rig.phone.fetchStays { read = true }
        rig.run(forMs: 5000) { read }
    }

    @Test func anOlderReservationsMineAnswerNeverUndoesAStepAndANewerOneDoes() throws {
        let rig = try PhoneRig()
        var hold = ""
        rig.broker.answer = { request, _ in
            switch request.type {
            case "reservations.hold": return .success(["reservation": Self.reservation(request.id, "held", version: 3), "hold_seconds": 600])
            case "reservations.checkin": return .success(["reservation": Self.reservation(hold, "checked_in", version: 7)])
            default: return .success([:])
            }
        }
        rig.phone.start()
        guard case .queued(let id) = rig.phone.act("reservations.hold", ["lot": "central"]) else { Issue.record("not queued"); return }
        hold = id
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try Self.row(rig, id) == ["held", "3", "-"])
        guard case .queued = rig.phone.act("reservations.checkin", [:]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try Self.row(rig, id) == ["checked_in", "7", "-"])

        // A list read before the check-in (still held at 3): the phone keeps 7.
        Self.readMine(rig, active: Self.reservation(id, "held", version: 3))
        #expect(try Self.row(rig, id) == ["checked_in", "7", "-"])
        #expect(SavedHolds.olderDropped(rig.phone.db) == 1)
        let shown = try #require(OrderVersionTests.view(rig, "reservation")).body["active"]
        #expect(shown?["status"] == "checked_in" && shown?["version"] == 7, "\(shown?.text ?? "none")")

        // The same version changes nothing; a newer one (checked out at 12 on another phone) is taken.
        Self.readMine(rig, active: Self.reservation(id, "checked_in", version: 7))
        #expect(try Self.row(rig, id) == ["checked_in", "7", "-"] && SavedHolds.olderDropped(rig.phone.db) == 1)
        Self.readMine(rig, history: [Self.reservation(id, "checked_out", version: 12)])
        #expect(try Self.row(rig, id) == ["checked_out", "12", "-"] && SavedHolds.olderDropped(rig.phone.db) == 1)
    }

    /// A step's reply older than the phone's copy (the phone read a newer
    /// state since the step was made) settles the step only.
    @Test func aStepsReplyOlderThanThePhonesCopySettlesTheStepOnly() throws {
        let rig = try PhoneRig()
        var hold = ""
        rig.broker.answer = { request, _ in
            switch request.type {
            case "reservations.hold": return .success(["reservation": Self.reservation(request.id, "held", version: 3), "hold_seconds": 600])
            case "reservations.checkout": return .success(["reservation": Self.reservation(hold, "checked_out", version: 5)])
            default: return .success([:])
            }
        }
        rig.phone.start()
        guard case .queued(let id) = rig.phone.act("reservations.hold", ["lot": "central"]) else { Issue.record("not queued"); return }
        hold = id
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        // Checked in at 8 from another phone, read here.
        Self.readMine(rig, active: Self.reservation(id, "checked_in", version: 8))
        #expect(try Self.row(rig, id) == ["checked_in", "8", "-"])
        // A check-out answered at 5 (an answer stored before the read): the
        // phone keeps its copy at 8 as the step showed it, and the step is settled.
        guard case .queued = rig.phone.act("reservations.checkout", [:]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(try Self.row(rig, id) == ["checked_out", "8", "-"])
        #expect(SavedHolds.olderDropped(rig.phone.db) == 1)
    }
}
