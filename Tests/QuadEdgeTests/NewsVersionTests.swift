import Foundation
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A notification read never shows unread again (issue 30 pt 1): the
/// notifications service's version of a notification (its seq when made,
/// a higher number once marked read) decides between a notifications.since
/// page, a live notifications.news event and the reply to the phone's own
/// notifications.read, whichever comes last.
@Suite("Versions on a phone's inbox", .serialized)
struct NewsVersionTests {
    static func notification(_ id: String, seq: Int64, read: Bool = false, version: Int64? = nil) -> JSON {
        var n: JSON = ["id": .string(id), "user": "u-1", "seq": .int(seq), "kind": "order_confirmed", "text": "Your order is confirmed.",
                       "ref": "o-1", "ts": 1_000, "read": .bool(read)]
        if let version { n = n.setting("version", .int(version)) }
        return n
    }

    static func row(_ rig: PhoneRig, _ id: String) throws -> [Int64]? {
        try rig.phone.db.queryOne("SELECT read, version FROM inbox WHERE id = $1", .text(id)).map { [$0.int("read"), $0.int("version")] }
    }

    static func fetch(_ rig: PhoneRig, _ items: JSON...) {
        rig.broker.queries["notifications.since"] = ["items": .array(items), "last": .int(items.last?["seq"]?.int ?? 0), "more": false, "unread": 0]
        rig.phone.fetchNews()
        rig.run(forMs: 5000) { !rig.phone.fetchingNews }
    }

    @Test func aPageReadBeforeAMarkNeverShowsANotificationUnreadAgain() throws {
        let rig = try PhoneRig()
        rig.phone.user = "u-1"
        rig.broker.queries["notifications.read"] = ["marked": 2, "unread": 0, "version": 5]
        rig.phone.start()
        Self.fetch(rig, Self.notification("n-1", seq: 1, version: 1), Self.notification("n-2", seq: 2, version: 2))
        #expect(try Self.row(rig, "n-1") == [0, 1] && Self.row(rig, "n-2") == [0, 2])

        // Shown, so marked read: the service's answer says at version 5.
        let shown = try #require(OrderVersionTests.view(rig, "messages"))
        #expect(shown.body["news"]?.array?.count == 2)
        rig.run(forMs: 5000) { (try? Self.row(rig, "n-2")) == [1, 5] }
        #expect(try Self.row(rig, "n-1") == [1, 5] && Self.row(rig, "n-2") == [1, 5])

        // A page read before the mark, and the live event of n-1 (its copy as made): dropped, counted.
        Self.fetch(rig, Self.notification("n-1", seq: 1, version: 1), Self.notification("n-2", seq: 2, version: 2))
        #expect(!rig.phone.keepNews(Envelope(type: "notifications.news", kind: .event, body: Self.notification("n-1", seq: 1))))
        #expect(try Self.row(rig, "n-1") == [1, 5] && Self.row(rig, "n-2") == [1, 5])
        #expect(Phone.newsOlderDropped(rig.phone.db) == 3)

        // The same version changes nothing; a newer copy is taken; a new one is kept as it comes.
        Self.fetch(rig, Self.notification("n-2", seq: 2, read: true, version: 5), Self.notification("n-3", seq: 3, version: 3))
        #expect(try Self.row(rig, "n-2") == [1, 5] && Self.row(rig, "n-3") == [0, 3] && Phone.newsOlderDropped(rig.phone.db) == 3)
        Self.fetch(rig, Self.notification("n-3", seq: 3, read: true, version: 8))
        #expect(try Self.row(rig, "n-3") == [1, 8] && Phone.newsOlderDropped(rig.phone.db) == 3)
    }
}
