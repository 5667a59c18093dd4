import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadNotifications

/// A notification's version (issue 30 pt 1) comes from the service's own
/// counter: its seq when made, and the number a notifications.read took
/// when it marked it read, written in the same transaction. A mark that
/// marks nothing takes no number and moves no version.
extension NotificationsTests {
    @Test(arguments: stores)
    func aNotificationsVersionIsItsSeqThenTheNumberOfTheMarkThatReadIt(postgres: Bool) throws {
        let (h, db) = try service(postgres: postgres)
        try apply(db, "orders.confirmed", Self.order("o-1", user: "ana"))
        try apply(db, "orders.confirmed", Self.order("o-2", user: "ana"))
        try apply(db, "orders.confirmed", Self.order("o-3", user: "bob"))
        func versions(_ user: String) throws -> [Int64] { try inbox(h, user).map { $0["version"]?.int ?? -1 } }
        let made = try inbox(h, "ana")
        let seqs = made.map { $0["seq"]?.int ?? 0 }
        #expect(try versions("ana") == seqs && seqs.count == 2, "made: its seq")
        let bobs = try versions("bob")

        // The first marked read by id: a new number, above every seq so far, in the reply and the inbox.
        let first = try h.call("notifications.read", ["ids": [made[0]["id"] ?? .null]], user: "ana")
        let marked = try #require(first["version"]?.int)
        #expect(first["marked"] == 1 && marked > seqs.max()! && marked > bobs.max()!, "\(first.text)")
        #expect(try versions("ana") == [marked, seqs[1]])
        // Both up to the second's seq: only the unread one moves, to a newer number.
        let second = try h.call("notifications.read", ["up_to": .int(seqs[1])], user: "ana")
        let again = try #require(second["version"]?.int)
        #expect(second["marked"] == 1 && again > marked)
        #expect(try versions("ana") == [marked, again] && inbox(h, "ana").allSatisfy { $0["read"] == true })
        // Marking read ones again marks nothing and moves nothing; another user's stay.
        let none = try h.call("notifications.read", ["up_to": .int(seqs[1])], user: "ana")
        #expect(none["marked"] == 0 && none["version"] == nil)
        #expect(try versions("ana") == [marked, again] && versions("bob") == bobs)
        // The next notification's seq, and so its version, is past every mark's.
        try apply(db, "orders.confirmed", Self.order("o-4", user: "ana"))
        #expect(try (inbox(h, "ana").last?["version"]?.int ?? 0) > again)
    }
}
