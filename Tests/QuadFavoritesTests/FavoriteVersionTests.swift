import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadFavorites

/// A favorite's version is the seq of the last event published about it
/// (issue 30 pt 1), written in the transaction that changed it: it rises
/// with each add and remove, outlives a removal, and every answer that
/// gives a favorite (the reply to favorites.add or favorites.remove, a
/// retry's stored answer, favorites.list's items and the list itself)
/// gives it.
@Suite("Favorites: a favorite's version")
struct FavoriteVersionTests {
    /// The seq of the last event of `type` the outbox holds about `user`'s favorite of `product`.
    static func lastEvent(_ db: Database, _ type: String, user: String, product: String) throws -> Int64? {
        var (after, last): (Int64, Int64?) = (0, nil)
        while true {
            let page = try Outbox.since(db, after: after, limit: 500)
            guard let end = page.last?.seq else { return last }
            for e in page where e.type == type {
                let body = try Envelope.decode(try #require(e.encoded)).body
                if body["user"]?.string == user && body["product"]?.string == product { last = e.seq }
            }
            after = end
        }
    }

    @Test(arguments: [false, true])
    func aFavoritesVersionRisesWithEachChangeAndIsTheSeqOfItsLastEvent(postgres: Bool) throws {
        if postgres && TestStore.postgresURL == nil { return }
        let db = try TestStore.open("favorites", migrations: Favorites.migrations, postgres: postgres)
        let h = Handlers(service: "favorites", instance: "favorites/test", db: db)
        Favorites.register(h, db: db)
        func list(_ user: String) throws -> JSON { try h.call("favorites.list", ["limit": 50], user: user) }
        func listed(_ user: String, _ product: String) throws -> Int64? {
            try list(user)["items"]?.array?.first { $0["product"]?.string == product }?["version"]?.int
        }

        // Added: the favorites.added event's seq, in the reply and in the list.
        let add = Envelope.request("favorites.add", body: ["product": "p-1"], user: "ana")
        let added = h.handle(add).body
        let addedSeq = try #require(try Self.lastEvent(db, "favorites.added", user: "ana", product: "p-1"))
        #expect(added["changed"] == true && added["version"]?.int == addedSeq, "\(added.text)")
        #expect(try listed("ana", "p-1") == addedSeq)
        #expect(try list("ana")["version"]?.int == addedSeq)
        // Added again: nothing changes, the version neither; a retry answers what it answered.
        #expect(try h.call("favorites.add", ["product": "p-1"], user: "ana")["version"]?.int == addedSeq)
        #expect(h.handle(add).body["version"]?.int == addedSeq)

        // Another favorite and another user's: each its own version; the list's is the newest of the user's.
        let second = try h.call("favorites.add", ["product": "p-2"], user: "ana")["version"]?.int
        let secondSeq = try #require(try Self.lastEvent(db, "favorites.added", user: "ana", product: "p-2"))
        #expect(second == secondSeq && secondSeq > addedSeq)
        let bobs = try h.call("favorites.add", ["product": "p-1"], user: "bob")["version"]?.int
        #expect(try bobs == Self.lastEvent(db, "favorites.added", user: "bob", product: "p-1") && (bobs ?? 0) > secondSeq)
        #expect(try listed("ana", "p-1") == addedSeq && list("ana")["version"]?.int == secondSeq)
        #expect(try list("bob")["version"]?.int == bobs && list("carl")["version"]?.int == 0)

        // Removed: the favorites.removed event's seq, which the list's version
        // keeps though the favorite is gone from it, and a second remove answers.
        let removed = try h.call("favorites.remove", ["product": "p-1"], user: "ana")
        let removedSeq = try #require(try Self.lastEvent(db, "favorites.removed", user: "ana", product: "p-1"))
        #expect(removed["changed"] == true && removed["version"]?.int == removedSeq && removedSeq > (bobs ?? 0), "\(removed.text)")
        #expect(try listed("ana", "p-1") == nil && list("ana")["version"]?.int == removedSeq)
        #expect(try h.call("favorites.remove", ["product": "p-1"], user: "ana")["version"]?.int == removedSeq)
        #expect(try h.call("favorites.remove", ["product": "p-9"], user: "ana")["version"]?.int == 0, "never a favorite")
        #expect(try listed("bob", "p-1") == bobs, "bob's favorite of the same product keeps its version")

        // Added back: a newer version than the removal.
        let back = try h.call("favorites.add", ["product": "p-1"], user: "ana")["version"]?.int
        #expect(try back == Self.lastEvent(db, "favorites.added", user: "ana", product: "p-1") && (back ?? 0) > removedSeq)
        #expect(try listed("ana", "p-1") == back && list("ana")["version"]?.int == back)
    }
}
