import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing

/// Issue 16 on the phone, through the real services: rentals with their
/// due date and state saved for offline, returns queued in the outbox,
/// and pictures through the caches.
@Suite final class MarketplaceEdgeTests {
    static func utcDay(plus days: Int) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date().addingTimeInterval(Double(days) * 86_400))
    }

    func stock(_ edge: EdgeStack, _ product: String) throws -> Int64 {
        let db = try edge.store("catalog")
        defer { db.close() }
        return try #require(try db.queryOne("SELECT stock FROM products WHERE id = $1", .text(product))?.int("stock"))
    }

    /// Opens `view` until `ok` holds of what it shows (30 s at most).
    func viewUntil(_ edge: EdgeStack, _ view: String, _ params: JSON = [:], _ ok: (JSON) -> Bool) throws -> JSON {
        let until = Clock.monotonicMillis() + 30_000
        var last: JSON = [:]
        while Clock.monotonicMillis() < until {
            last = try edge.view(view, params)
            if ok(last) { return last }
            usleep(200_000)
        }
        Issue.record("\(view) never showed what was expected: \(last)")
        return last
    }

    static func rental(_ shown: JSON, _ order: String) -> JSON? {
        shown["body"]?["rentals"]?.array?.first { $0["order"]?["order"]?.string == order }
    }

    @Test func aRentalShowsItsDueDateOfflineAndItsReturnIsQueuedShownAndAppliedOnce() throws {
        let edge = try EdgeStack("rentals")
        _ = try edge.signIn()
        let before = try stock(edge, "p-0021")
        let order = try edge.act("orders.place", ["source": "buy_now", "product": "p-0021", "mode": "rent", "screen": "home",
                                                  "return_date": .string(Self.utcDay(plus: 3))])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let online = try viewUntil(edge, "rentals") { Self.rental($0, order) != nil }
        #expect(online["source"]?.string == "network")
        let r = try #require(Self.rental(online, order))
        #expect(r["state"]?.string == "active" && r["due_in_days"]?.int == 3 && r["shown"]?.string == "due in 3 days", "\(r)")
        #expect(r["due_date"]?.string == Self.utcDay(plus: 3))
        #expect(try stock(edge, "p-0021") == before - 1)

        // Offline: the saved copy, the state worked out on the phone.
        try edge.airplane(true)
        let offline = try edge.view("rentals")
        #expect(offline["source"]?.string == "saved", "\(offline)")
        #expect(Self.rental(offline, order)?["shown"]?.string == "due in 3 days")
        let returnID = try edge.act("orders.return", ["order": .string(order)])
        let returning = try edge.view("rentals")
        #expect(Self.rental(returning, order)?["state"]?.string == "returning", "shown at once: \(returning)")
        #expect(returning["notice"]?.string?.contains("waiting to be sent") == true)
        // The same rental twice: refused on the phone, nothing queued.
        #expect(throws: QuadError.self) { try edge.act("orders.return", ["order": .string(order)]) }
        #expect(try edge.state()["pending"]?.int == 1)
        // A return the service refuses (no such order of this user): rolled back with the reason.
        let unknown = "0190f4c2-8b2c-7d3e-9f40-000000000000"
        let refusedID = try edge.act("orders.return", ["order": .string(unknown)])

        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let log = try edge.log()
        #expect(log.first { $0["id"]?.string == returnID }?["outcome"]?.string == "done", "\(log)")
        let refused = try #require(log.first { $0["id"]?.string == refusedID })
        #expect(refused["outcome"]?.string == "rejected" && refused["code"]?.string == "not_found", "\(refused)")
        #expect(try edge.messages().contains { ($0["text"]?.string ?? "").contains("Returning your rental \(unknown)") })

        let back = try viewUntil(edge, "rentals") { Self.rental($0, order)?["state"]?.string == "returned" }
        #expect(back["source"]?.string == "network")
        #expect(Self.rental(back, order)?["due_in_days"] == nil)
        // The unit is back in stock, once.
        let until = Clock.monotonicMillis() + 30_000
        while try stock(edge, "p-0021") != before, Clock.monotonicMillis() < until { usleep(200_000) }
        #expect(try stock(edge, "p-0021") == before)
        let orders = try edge.store("orders")
        defer { orders.close() }
        #expect(try orders.queryOne("SELECT status FROM orders WHERE id = $1", .text(order))?.string("status") == "returned")
        let returned = try Outbox.since(orders, after: 0, limit: Int.max).filter { $0.type == "orders.returned" && $0.body["order"]?.string == order }
        #expect(returned.count == 1)
    }

    @Test func picturesComeFromTheNetworkOnceThenFromTheCachesAndOfflineAPlaceholderSaysWhy() throws {
        let edge = try EdgeStack("pictures", serviceArguments: ["catalog": ["--images-http", "127.0.0.1:0"],
                                                                "reservations": ["--images-http", "127.0.0.1:0"]])
        let first = try edge.view("product", ["id": "p-0014"])
        #expect(first["source"]?.string == "network")
        let picture = try #require(first["images"]?.array?.first, "\(first)")
        #expect(picture["source"]?.string == "network" && (picture["bytes"]?.int ?? 0) > 0, "\(picture)")
        #expect(picture["url"]?.string == first["body"]?["imageUrl"]?.string)
        #expect(try edge.view("product", ["id": "p-0014"])["images"]?.array?.first?["source"]?.string == "disk")
        let counters = try #require(try edge.state()["images"], "the phone's own counters in edge.state")
        #expect(counters["misses"]?.int == 1 && counters["hits"]?["disk"]?.int == 1 && counters["fetched"]?.int == 1, "\(counters)")
        #expect(counters["bytes_fetched"]?.int == picture["bytes"]?.int && counters["bytes_from_cache"]?.int == picture["bytes"]?.int)

        let lots = try edge.view("parking")
        let photos = try #require(lots["images"]?.array)
        #expect(!photos.isEmpty && photos.allSatisfy { $0["source"]?.string == "network" }, "\(photos)")
        let again = try #require(try edge.view("parking")["images"]?.array)
        #expect(again.allSatisfy { $0["source"]?.string == "memory" }, "ParkWise's memory cache: \(again)")

        // The network coming back saves the whole catalog (pictures' URLs too).
        try edge.airplane(true)
        try edge.airplane(false)
        let until = Clock.monotonicMillis() + 30_000
        while true {
            let state = try edge.state()
            if state["catalog_saved_age_ms"]?.int != nil { break }
            try #require(Clock.monotonicMillis() < until, "the catalog was never saved after the network came back: \(state)")
            usleep(200_000)
        }
        try edge.airplane(true)
        let saved = try edge.view("search", ["limit": 200])
        #expect(saved["source"]?.string == "local", "\(saved)")
        let seen = first["body"]?["imageUrl"]?.string
        // Pictures are one per collection: a product with another picture.
        let unseen = try #require(saved["body"]?["products"]?.array?.first { $0["imageUrl"]?.string != seen && $0["imageUrl"] != nil }?["id"]?.string,
                                  "the saved catalog keeps pictures: \(saved)")

        let offline = try edge.view("product", ["id": "p-0014"])
        #expect(offline["source"]?.string == "saved" && offline["images"]?.array?.first?["source"]?.string == "disk", "\(offline)")
        // A product never opened: from the saved catalog, its picture not in the cache.
        let other = try edge.view("product", ["id": .string(unseen)])
        #expect(other["source"]?.string == "local", "\(other)")
        let shown = try #require(other["images"]?.array?.first, "\(other)")
        #expect(shown["source"]?.string == "placeholder" && shown["reason"]?.string == "offline: image not in cache", "\(other)")
    }
    /// A student's listing made after the phone saved its catalog: online,
    /// search finds it (the service searches) with its seller's name and
    /// condition; after a pull to refresh of home, offline, the saved
    /// catalog shows the same fields.
    @Test func aNewListingIsFoundWithItsSellerOnlineAndFromTheSavedCatalog() throws {
        let edge = try EdgeStack("listing-search")
        _ = try edge.signIn()
        let client = try edge.stack.internalClient()
        var create = Envelope.request("catalog.listings.create", body: [
            "name": "Used Zorblax calculator", "category": "Study", "collection": "Study Tools", "price": ["value": 40, "currency": "USD"],
            "info": ["processor": "Zorblax 9"], "type": "Calculator", "condition": "Used", "quantity": 1, "mode": "both", "rent_rate": 2,
        ])
        create.user = "seller-1"
        let created = try client.call(create, timeoutMs: 10_000)
        let id = try #require(created.body["id"]?.string, "\(created)")

        let online = try edge.view("search", ["q": "zorblax"])
        #expect(online["source"]?.string == "network", "\(online)")
        let found = try #require(online["body"]?["products"]?.array?.first { $0["id"]?.string == id }, "\(online)")
        #expect(found["seller"]?.string != nil && found["condition"]?.string == "Used" && found["mode"]?.string == "both", "\(found)")

        // Pull to refresh: the catalog is saved again, with the listing.
        let pulled = Clock.monotonicMillis()
        _ = try edge.edge("edge.view", ["phone": "phone-001", "view": "home", "refresh": true])
        let until = pulled + 30_000
        while true {
            let state = try edge.state()
            if let age = state["catalog_saved_age_ms"]?.int, age < Clock.monotonicMillis() - pulled { break }
            try #require(Clock.monotonicMillis() < until, "the catalog was not saved again after a pull to refresh: \(state)")
            usleep(200_000)
        }
        try edge.airplane(true)
        let offline = try edge.view("search", ["q": "zorblax"])
        #expect(offline["source"]?.string == "local", "\(offline)")
        let local = try #require(offline["body"]?["products"]?.array?.first { $0["id"]?.string == id }, "the refreshed catalog has no \(id): \(offline)")
        for k in ["seller", "condition", "mode", "rent_rate", "type", "info", "listed_at"] {
            #expect(local[k] == found[k], "\(k): saved \(local[k].map { "\($0)" } ?? "nil"), network \(found[k].map { "\($0)" } ?? "nil")")
        }
    }
}
