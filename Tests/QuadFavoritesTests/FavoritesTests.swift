import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
import QuadCatalogCopy
@testable import QuadFavorites

extension Envelope {
    static func call(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, id: String = MessageID.make()) -> Envelope {
        var e = Envelope.request(type, body: body, id: id)
        e.user = user
        e.role = role
        return e
    }
}

@Suite("Favorites' handlers on a SQLite file")
struct FavoritesHandlerTests {
    func favorites() throws -> (Handlers, Database) {
        let dir = NSTemporaryDirectory() + "quad-favorites-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let db = try SQLiteDatabase(path: dir + "/favorites.db")
        try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
        try Migrations.apply(db, Favorites.migrations, scope: "favorites")
        let h = Handlers(service: "favorites", instance: "favorites/test", db: db)
        Favorites.register(h, db: db)
        return (h, db)
    }

    @Test func unknownProductsAreRefusedOnceTheCatalogCopyIsLoaded() throws {
        let (h, db) = try favorites()
        // Before the first catalog event arrives, any id is taken.
        #expect(h.handle(.call("favorites.add", ["product": "p-early"], user: "ana")).kind == .reply)
        try CatalogCopy.apply(db, Envelope(type: "catalog.product.changed", kind: .event, src: "catalog", seq: 1, body: [
            "id": "p-1", "name": "Lab Coat", "price": ["value": 25, "currency": "USD"], "info": [:], "type": "Clothing",
            "imageUrl": "https://img/p-1.jpg", "category": "Lab", "collection": "Lab Gear", "stock": 3,
        ]))
        #expect(h.handle(.call("favorites.add", ["product": "p-1"], user: "ana")).kind == .reply)
        let unknown = h.handle(.call("favorites.add", ["product": "p-2"], user: "ana"))
        #expect(unknown.quadError?.status == 404 && unknown.quadError?.message == "no product with id 'p-2' in the catalog")
        // The list shows a summary where the copy has one, null where not.
        try CatalogCopy.apply(db, Envelope(type: "catalog.stock.changed", kind: .event, src: "catalog", seq: 2, body: ["product": "p-1", "stock": 2, "delta": -1, "reason": "adjust"]))
        let items = h.handle(.call("favorites.list", [:], user: "ana")).body["items"]?.array ?? []
        #expect(items.map { $0["product"] } == ["p-1", "p-early"])
        #expect(items.first?["summary"] == ["name": "Lab Coat", "price": ["value": 25, "currency": "USD"], "category": "Lab",
                                           "imageUrl": "https://img/p-1.jpg", "stock": 2])
        #expect(items.last?["summary"] == .null)
    }

    @Test func refusalsNameTheFieldAndTheLimit() throws {
        let (h, _) = try favorites()
        let cases: [(Envelope, Int, String)] = [
            (.call("favorites.add", ["product": "p-1"]), 401, "favorites.add needs a signed-in user"),
            (.call("favorites.add", [:], user: "ana"), 400, "body.product is required"),
            (.call("favorites.add", ["product": 7], user: "ana"), 400, "body.product must be a string, got number"),
            (.call("favorites.list", ["limit": 500], user: "ana"), 400, "body.limit must be between 1 and 200 (max_page_size)"),
            (.call("favorites.list", ["user": "bob"], user: "ana"), 403, "favorites.list acts on the signed-in user only: body.user cannot name a user"),
            (.call("favorites.remove", ["product": "p-1", "extra": 1], user: "ana"), 400, "body.extra is not a field of favorites.remove: expected product"),
            (.call("favorites.top", ["limit": 51]), 400, "body.limit must be between 1 and 50 (max_top)"),
            // One grapheme cluster of 100,001 Unicode scalars: over the limit of 64.
            (.call("favorites.add", ["product": .string("p" + String(repeating: "\u{0301}", count: 100_000))], user: "ana"), 400,
             "body.product must be 1 to 64 characters"),
        ]
        for (request, status, message) in cases {
            let error = h.handle(request).quadError
            #expect(error?.status == status && error?.message == message, "\(request.type) \(request.body.text): \(String(describing: error))")
        }
    }
}

@Suite("Favorites as processes", .serialized)
struct FavoritesProcessTests {
    @Test func addRemoveAreIdempotentListsCarrySummariesAndCountsAreUsers() throws {
        let stack = try TestStack(name: "favorites")
        try stack.startBroker(heartbeatMs: 1000)
        try stack.startWorker("quad-catalog", instance: "catalog/1", heartbeatMs: 1000)
        try stack.startWorker("quad-favorites", instance: "favorites/1", heartbeatMs: 1000)
        #expect(try stack.waitForWorkers("catalog", count: 1))
        #expect(try stack.waitForWorkers("favorites", count: 1))
        let client = try stack.internalClient()
        func call(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, id: String = MessageID.make()) throws -> Envelope {
            try client.call(.call(type, body, user: user, role: role, id: id), timeoutMs: 5000)
        }
        func eventually(_ probe: () throws -> Bool) rethrows -> Bool {
            let until = Clock.monotonicMillis() + 10_000
            while Clock.monotonicMillis() < until {
                if try probe() { return true }
                usleep(50_000)
            }
            return false
        }
        // The copy of the catalog is loaded when an unknown id is refused.
        #expect(try eventually { try call("favorites.add", ["product": "p-none"], user: "probe").quadError?.status == 404 })

        let add = Envelope.call("favorites.add", ["product": "p-0001"], user: "ana")
        let first = try client.call(add)
        // Its version is the seq of its favorites.added (FavoriteVersionTests).
        let version = try #require(first.body["version"]?.int)
        #expect(first.body == ["product": "p-0001", "favorite": true, "changed": true, "users": 1, "version": .int(version)] && version > 0)
        #expect(try client.call(add).body == first.body, "the same id gets the same reply")
        #expect(try call("favorites.add", ["product": "p-0001"], user: "ana").body["changed"] == false, "adding twice keeps one row")
        _ = try call("favorites.add", ["product": "p-0003"], user: "ana")
        _ = try call("favorites.add", ["product": "p-0001"], user: "bob")
        #expect(try call("favorites.count", ["product": "p-0001"]).body == ["product": "p-0001", "users": 2])
        #expect(try call("favorites.top", ["limit": 1]).body["products"]?.array?.first?["users"] == 2)

        // Ana's list, newest first, with the catalog's name, price, category, image and stock.
        let product = try call("catalog.product.get", ["id": "p-0001"]).body
        let list = try call("favorites.list", ["limit": 10], user: "ana").body
        #expect(list["total"] == 2)
        let items = list["items"]?.array ?? []
        #expect(items.map { $0["product"] } == ["p-0003", "p-0001"])
        let summary = try #require(items.last?["summary"])
        for key in ["name", "price", "category", "imageUrl", "stock"] { #expect(summary[key] == product[key], "\(key)") }
        #expect(try call("favorites.list", ["limit": 1, "offset": 1], user: "ana").body["items"]?.array?.first?["product"] == "p-0001")

        // The copy follows the catalog's stock.
        let stock = product["stock"]?.int ?? 0
        _ = try call("catalog.stock.adjust", ["id": "p-0001", "delta": 5], role: "admin")
        #expect(try eventually {
            try call("favorites.list", [:], user: "ana").body["items"]?.array?.last?["summary"]?["stock"]?.int == stock + 5
        })

        // Bob removes his favorite, twice: one change. Ana's stay.
        #expect(try call("favorites.remove", ["product": "p-0001"], user: "bob").body["changed"] == true)
        #expect(try call("favorites.remove", ["product": "p-0001"], user: "bob").body["changed"] == false)
        #expect(try call("favorites.remove", ["product": "p-0003"], user: "bob").body["changed"] == false)
        #expect(try call("favorites.list", [:], user: "bob").body["total"] == 0)
        #expect(try call("favorites.list", [:], user: "ana").body["total"] == 2)
        #expect(try call("favorites.count", ["product": "p-0001"]).body["users"] == 1)
        // Nobody reads another's list; nobody acts without a user.
        #expect(try call("favorites.list", ["user": "ana"], user: "bob").quadError?.status == 403)
        #expect(try call("favorites.list").quadError?.status == 401)
        #expect(try call("favorites.remove", ["product": "p-0001"]).quadError?.status == 401)

        // One event per change, none for the repeats.
        let events = try call("favorites.events.since", ["after": 0]).body["events"]?.array ?? []
        let changes = events.filter { $0["body"]?["user"] != "probe" }.map { "\($0["type"]!.string!) \($0["body"]!["user"]!.string!) \($0["body"]!["product"]!.string!)" }
        #expect(changes == ["favorites.added ana p-0001", "favorites.added ana p-0003", "favorites.added bob p-0001", "favorites.removed bob p-0001"])
    }
}
