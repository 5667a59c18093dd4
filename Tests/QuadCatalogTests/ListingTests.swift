import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadCatalog

/// Students' listings (issue 16, point 1), on the catalog's handlers and a
/// real SQLite file: created, found, changed, withdrawn, taken down, and
/// what the seller sees of what sold; every bad input refused, naming its limit.
@Suite("Listings")
struct ListingTests {
    static let seller = "u-seller-5c1d9e"
    static let buyer = "u-buyer-77aa01"

    /// SQLite always; PostgreSQL too when the run has one (QUAD_TEST_PG, as deploy/test sets).
    static let stores: [Bool] = [false] + (TestStore.postgresURL != nil ? [true] : [])

    /// A catalog with images, where accounts has told it the seller's name.
    func market(postgres: Bool = false) throws -> (Handlers, Database) {
        let (h, db) = try catalog(postgres: postgres)
        Catalog.registerImages(h, db: db)
        try db.transaction {
            try Catalog.applyForYou(db, Envelope(type: "accounts.user.registered", kind: .event,
                                                 body: ["user": .string(Self.seller), "name": "Ada Lovelace", "semester": 3, "categories": ["Study"]]))
            try Catalog.applyForYou(db, Envelope(type: "accounts.user.registered", kind: .event,
                                                 body: ["user": .string(Self.buyer), "name": "Bo Buyer", "semester": 2, "categories": ["Study"]]))
        }
        return (h, db)
    }

    static let calculator: JSON = [
        "name": "Used TI-84 calculator", "category": "Study", "collection": "Study Tools", "price": ["value": 50, "currency": "USD"],
        "info": ["color": "Black", "processor": "TI-84"], "type": "Calculator", "condition": "Used", "quantity": 2, "mode": "both", "rent_rate": 2.5,
    ]

    static func with(_ base: JSON, _ changes: [String: JSON?]) -> JSON {
        var o = base.object ?? [:]
        for (k, v) in changes { o[k] = v }
        return .object(o)
    }

    func create(_ h: Handlers, _ body: JSON = calculator, user: String = seller) throws -> JSON {
        try h.call("catalog.listings.create", body, user: user)
    }

    func hold(_ h: Handlers, _ product: String, order: String, quantity: Int64 = 1, mode: String = "buy", user: String = buyer) throws -> JSON {
        try h.call("catalog.stock.hold", ["order": .string(order), "items": [["product": .string(product), "quantity": .int(quantity)]], "mode": .string(mode)],
                   user: user, role: "service")
    }

    func refusal(_ f: () throws -> JSON) -> QuadError? {
        do { _ = try f(); return nil } catch let e as QuadError { return e } catch { return .internal("\(error)") }
    }

    func mine(_ h: Handlers, user: String = seller) throws -> [JSON] {
        try h.call("catalog.listings.mine", [:], user: user)["listings"]?.array ?? []
    }

    /// listed = in stock + held + sold (+ rented), from the tables the chaos checker reads.
    func unitsAddUp(_ db: Database, _ id: String) throws -> Bool {
        let listed = try db.queryOne("SELECT quantity FROM listings WHERE id = $1", .text(id))!.int("quantity")
        let stock = try db.queryOne("SELECT stock FROM products WHERE id = $1", .text(id))!.int("stock")
        let taken = try db.queryOne("""
            SELECT COALESCE(SUM(i.quantity), 0) AS n FROM hold_items i JOIN holds h ON h.order_id = i.order_id
            WHERE i.product = $1 AND h.status IN ('held', 'confirmed')
            """, .text(id))!.int("n")
        return listed == stock + taken
    }

    /// Every event in catalog's outbox: its type and body.
    func events(_ db: Database) throws -> [(type: String, body: JSON)] {
        try Outbox.since(db, after: 0, limit: 10_000).map { e in
            if let bytes = e.encoded, let env = try? Envelope.decode(bytes) { return (e.type, env.body) }
            return (e.type, (try? JSON.parse(e.bodyColumn)) ?? .null)
        }
    }

    @Test(arguments: stores)
    func aListingIsAProductFoundBySearchShownWithItsSellersNameNeverTheirId(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let png = try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png)], user: Self.seller)
        let image = try #require(png["id"]?.string)
        let studyBefore = try h.call("catalog.categories")["categories"]?.array?.first { $0["name"] == "Study" }?["count"]?.int ?? 0
        let made = try create(h, Self.with(Self.calculator, ["images": [.string(image)]]))
        let id = try #require(made["id"]?.string)
        #expect(id.hasPrefix("l-") && id.count == 34, "\(id)")
        #expect(made["status"] == "active" && made["quantity"] == 2 && made["in_stock"] == 2, "\(made)")
        let product = try #require(made["product"])
        #expect(product["seller"] == "Ada Lovelace" && product["condition"] == "Used" && product["mode"] == "both" && product["rent_rate"] == 2.5)
        #expect(product["imageUrl"]?.string?.hasSuffix("/images/\(image)") == true)
        #expect(product["images"]?.array?.first?.string?.hasSuffix("/images/\(image)") == true)

        // Found by search, in the listing of its collection, counted in its category, in For You.
        let found = try h.call("catalog.search", ["q": "ti-84 used calculator", "limit": 50])
        let hit = try #require(found["products"]?.array?.first { $0["id"]?.string == id })
        #expect(hit["seller"] == "Ada Lovelace")
        #expect(try h.call("catalog.products.list", ["collection": "Study Tools", "limit": 200])["products"]?.array?.contains { $0["id"]?.string == id } == true)
        #expect(try h.call("catalog.categories")["categories"]?.array?.first { $0["name"] == "Study" }?["count"]?.int == studyBefore + 1)
        let forYou = try h.call("catalog.foryou", ["limit": 200], user: Self.buyer)
        #expect(forYou["products"]?.array?.contains { $0["id"]?.string == id } == true)
        // Nothing a buyer reads names the seller's id.
        for text in [found.text, forYou.text, try h.call("catalog.product.get", ["id": .string(id)]).text] {
            #expect(!text.contains(Self.seller), "\(text)")
        }
        // Nor does any event.
        for e in try events(db) where e.body.text.contains(id) {
            #expect(!e.body.text.contains(Self.seller), "\(e.type): \(e.body)")
        }
        let types = try events(db).filter { $0.body.text.contains(id) }.map(\.type)
        #expect(types.contains("catalog.listing.created") && types.contains("catalog.product.changed"), "\(types)")

        // A new name from accounts reaches the listing.
        try db.transaction {
            try Catalog.applyForYou(db, Envelope(type: "accounts.user.updated", kind: .event,
                                                 body: ["user": .string(Self.seller), "name": "Ada L.", "semester": 3, "categories": []]))
        }
        #expect(try h.call("catalog.product.get", ["id": .string(id)])["seller"] == "Ada L.")
    }

    @Test func aSellerNobodyHasNamedIsAStudentNeverTheirId() throws {
        let (h, _) = try market()
        let made = try create(h, user: "u-unheard-of-3141")
        #expect(made["product"]?["seller"] == "a student")
        #expect(!made.text.contains("u-unheard-of-3141"))
    }

    static let badInputs: [(String, [String: JSON?], Int, String)] = [
        ("price 0", ["price": ["value": 0, "currency": "USD"]], 400, "max_listing_price"),
        ("price over the limit", ["price": ["value": 10000.01, "currency": "USD"]], 400, "max_listing_price"),
        ("price negative", ["price": ["value": -5, "currency": "USD"]], 400, "body.price.value"),
        ("quantity 0", ["quantity": 0], 400, "max_listing_quantity"),
        ("quantity over the limit", ["quantity": 21], 400, "max_listing_quantity"),
        ("rent without a rent rate", ["mode": "rent", "rent_rate": nil], 400, "max_rent_rate"),
        ("both without a rent rate", ["mode": "both", "rent_rate": nil], 400, "rent_rate is required"),
        ("a rent rate for sale only", ["mode": "sale", "rent_rate": 3], 400, "only for mode"),
        ("rent rate 0", ["rent_rate": 0], 400, "max_rent_rate"),
        ("rent rate over the limit", ["rent_rate": 501], 400, "max_rent_rate"),
        ("five images", ["images": .array((0..<5).map { .string(String(repeating: String($0), count: 64)) })], 400, "max_listing_images"),
        ("an image that is no sha256", ["images": ["cat.png"]], 400, "body.images[0]"),
        ("an unknown image", ["images": [.string(String(repeating: "ab", count: 32))]], 404, String(repeating: "ab", count: 32)),
        ("a name too long", ["name": .string(String(repeating: "x", count: 121))], 400, "max_listing_name_length"),
        ("an empty name", ["name": ""], 400, "body.name"),
        ("a collection too long", ["collection": .string(String(repeating: "c", count: 65))], 400, "max_listing_collection_length"),
        ("a type too long", ["type": .string(String(repeating: "t", count: 65))], 400, "max_listing_type_length"),
        ("an info value too long", ["info": ["color": .string(String(repeating: "b", count: 101))]], 400, "max_listing_info_length"),
        ("an info field products do not have", ["info": ["owner": "me"]], 400, "body.info"),
        ("a condition of its own", ["condition": "Broken"], 400, "body.condition"),
        ("a mode of its own", ["mode": "swap"], 400, "body.mode"),
        ("a category of its own", ["category": "Food"], 400, "body.category"),
        ("another currency", ["price": ["value": 5, "currency": "EUR"]], 400, "body.price.currency"),
        ("a seller field", ["seller": "someone else"], 400, "seller"),
    ]

    @Test(arguments: badInputs)
    func aBadListingIsRefusedNamingItsLimitAndNothingIsListed(_ bad: (String, [String: JSON?], Int, String)) throws {
        let (h, db) = try market()
        let error = refusal { try create(h, Self.with(Self.calculator, bad.1)) }
        #expect(error?.status == bad.2, "\(bad.0): \(String(describing: error))")
        #expect(error?.message.contains(bad.3) == true, "\(bad.0): \(String(describing: error))")
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM listings")?.int("n") == 0)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM products")?.int("n") == Int64(Catalog.seedCount))
    }

    @Test func theLimitsAreSettings() throws {
        let (h, db) = try catalog()
        var s = Catalog.ListingSettings()
        (s.maxPrice, s.maxQuantity, s.maxPerSeller) = (100, 3, 2)
        Catalog.registerListings(h, db: db, settings: s)
        #expect(refusal { try create(h, Self.with(Self.calculator, ["price": ["value": 101, "currency": "USD"]])) }?.message.contains("at most 100 (max_listing_price)") == true)
        #expect(refusal { try create(h, Self.with(Self.calculator, ["quantity": 4])) }?.message.contains("1 to 3 (max_listing_quantity)") == true)
        _ = try create(h)
        _ = try create(h)
        let third = refusal { try create(h) }
        #expect(third?.status == 409 && third?.message.contains("max_listings_per_seller") == true, "\(String(describing: third))")
        #expect(throws: QuadError.self) { try Catalog.listingSettings(["max-listing-price": "0"]) }
        #expect(try Catalog.listingSettings(["max-listing-images": "6"]).maxImages == 6)
        #expect(throws: QuadError.self) { try Catalog.listingSettings(["max-listing-quantity": "2.5"]) }
        #expect(throws: QuadError.self) { try Catalog.listingSettings(["max-listing-images": "17"]) }
    }

    @Test(arguments: stores)
    func onlyTheSellerChangesOrWithdrawsItAndAnotherUserIsToldItDoesNotExist(postgres: Bool) throws {
        let (h, _) = try market(postgres: postgres)
        let id = try #require(try create(h)["id"]?.string)
        let foreign = refusal { try h.call("catalog.listings.update", ["listing": .string(id), "price": ["value": 1, "currency": "USD"]], user: Self.buyer) }
        #expect(foreign?.status == 404, "\(String(describing: foreign))")
        let nowhere = refusal { try h.call("catalog.listings.update", ["listing": "l-0000", "name": "x"], user: Self.buyer) }
        #expect(foreign?.message.replacingOccurrences(of: id, with: "l-0000") == nowhere?.message, "the same words for a listing that does not exist")
        #expect(refusal { try h.call("catalog.listings.withdraw", ["listing": .string(id)], user: Self.buyer) }?.status == 404)
        #expect(try h.call("catalog.product.get", ["id": .string(id)])["price"]?["value"] == 50)
        #expect(try mine(h, user: Self.buyer).isEmpty)

        let changed = try h.call("catalog.listings.update", ["listing": .string(id), "name": "TI-84 Plus", "condition": "Good", "mode": "sale",
                                                             "price": ["value": 45, "currency": "USD"]], user: Self.seller)
        #expect(changed["product"]?["name"] == "TI-84 Plus" && changed["product"]?["condition"] == "Good" && changed["product"]?["price"]?["value"] == 45)
        #expect(changed["product"]?["mode"] == "sale" && changed["product"]?["rent_rate"] == nil, "a sale-only listing has no rent rate: \(changed)")
        let rentNoRate = refusal { try h.call("catalog.listings.update", ["listing": .string(id), "mode": "rent"], user: Self.seller) }
        #expect(rentNoRate?.status == 400 && rentNoRate?.message.contains("max_rent_rate") == true)
        #expect(refusal { try h.call("catalog.listings.update", ["listing": .string(id), "price": ["value": 0, "currency": "USD"]], user: Self.seller) }?.status == 400)
        #expect(try h.call("catalog.search", ["q": "ti-84 plus good", "limit": 50])["products"]?.array?.contains { $0["id"]?.string == id } == true)
    }

    @Test(arguments: stores)
    func aTakedownIsForAdminsAndItsReasonIsTheSellers(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let id = try #require(try create(h)["id"]?.string)
        let bySeller = refusal { try h.call("catalog.listings.takedown", ["listing": .string(id), "reason": "mine"], user: Self.seller) }
        #expect(bySeller?.status == 403, "\(String(describing: bySeller))")
        #expect(refusal { try h.call("catalog.listings.takedown", ["listing": .string(id), "reason": ""], user: "u-admin", role: "admin") }?.status == 400)
        let long = refusal { try h.call("catalog.listings.takedown", ["listing": .string(id), "reason": .string(String(repeating: "r", count: 501))], user: "u-admin", role: "admin") }
        #expect(long?.message.contains("max_takedown_reason_length") == true)
        #expect(refusal { try h.call("catalog.listings.takedown", ["listing": "l-none", "reason": "x"], user: "u-admin", role: "admin") }?.status == 404)

        let down = try h.call("catalog.listings.takedown", ["listing": .string(id), "reason": "Exam answers are not for sale"], user: "u-admin", role: "admin")
        #expect(down["status"] == "taken_down" && down["in_stock"] == 0 && down["quantity"] == 0, "\(down)")
        let seen = try #require(try mine(h).first)
        #expect(seen["status"] == "taken_down" && seen["reason"] == "Exam answers are not for sale")
        #expect(try h.call("catalog.search", ["q": "ti-84", "limit": 50])["products"]?.array?.contains { $0["id"]?.string == id } == false)
        let body = try #require(try events(db).last { $0.type == "catalog.listing.closed" }).body
        #expect(body["reason"] == "taken_down" && body["note"] == "Exam answers are not for sale" && body["listing"]?.string == id)
        #expect(refusal { try h.call("catalog.listings.withdraw", ["listing": .string(id)], user: Self.seller) }?.status == 409)
        #expect(refusal { try h.call("catalog.listings.update", ["listing": .string(id), "name": "back"], user: Self.seller) }?.status == 409)
    }

    @Test(arguments: stores)
    func aWithdrawalUnlistsWhatIsInStockAndLeavesHoldsAndSalesStanding(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let id = try #require(try create(h, Self.with(Self.calculator, ["quantity": 3]))["id"]?.string)
        _ = try hold(h, id, order: "o-sold")
        _ = try h.call("catalog.stock.confirm", ["order": "o-sold"], user: Self.buyer, role: "service")
        _ = try hold(h, id, order: "o-held")
        let out = try h.call("catalog.listings.withdraw", ["listing": .string(id)], user: Self.seller)
        #expect(out["status"] == "withdrawn" && out["in_stock"] == 0 && out["sold"] == 1 && out["held"] == 1 && out["quantity"] == 2, "\(out)")
        #expect(try unitsAddUp(db, id))
        #expect(try db.queryOne("SELECT unlisted FROM listings WHERE id = $1", .text(id))?.int("unlisted") == 1)
        // A second call, under another envelope id: the same answer, one event.
        let again = try h.call("catalog.listings.withdraw", ["listing": .string(id)], user: Self.seller)
        #expect(again == out)
        #expect(try events(db).filter { $0.type == "catalog.listing.closed" }.count == 1)
        // Not listed, not searchable; still readable by id, at stock 0.
        #expect(try h.call("catalog.search", ["q": "ti-84", "limit": 50])["products"]?.array?.contains { $0["id"]?.string == id } == false)
        #expect(try h.call("catalog.product.get", ["id": .string(id)])["stock"] == 0)
        // The held unit comes back after: unlisted, never in stock again.
        _ = try h.call("catalog.stock.release", ["order": "o-held"], user: Self.buyer, role: "service")
        #expect(try stock(h, id) == 0)
        #expect(try unitsAddUp(db, id))
        let after = try #require(try mine(h).first)
        #expect(after["quantity"] == 1 && after["sold"] == 1 && after["held"] == 0)
        let late = refusal { try hold(h, id, order: "o-late") }
        #expect(late?.status == 409 && late?.message.contains("withdrawn") == true, "\(String(describing: late))")
    }

    @Test(arguments: stores)
    func aHoldKeepsItsPriceThroughAnUpdateAndTheQuantityNeverGoesBelowHeldAndSold(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let id = try #require(try create(h, Self.with(Self.calculator, ["quantity": 3]))["id"]?.string)
        let held = try hold(h, id, order: "o-1", quantity: 2)
        #expect(held["items"]?.array?.first?["price"] == 50)
        _ = try h.call("catalog.listings.update", ["listing": .string(id), "price": ["value": 80, "currency": "USD"]], user: Self.seller)
        let confirmed = try h.call("catalog.stock.confirm", ["order": "o-1"], user: Self.buyer, role: "service")
        #expect(confirmed["status"] == "confirmed" && confirmed["items"]?.array?.first?["price"] == 50, "confirmed at the held price: \(confirmed)")
        #expect(try hold(h, id, order: "o-2")["items"]?.array?.first?["price"] == 80)

        // 2 sold and 1 held: 3 may stay, 2 may not.
        let below = refusal { try h.call("catalog.listings.update", ["listing": .string(id), "quantity": 2], user: Self.seller) }
        #expect(below?.status == 409 && below?.message.contains("below 3") == true, "\(String(describing: below))")
        #expect(try stock(h, id) == 0)
        let more = try h.call("catalog.listings.update", ["listing": .string(id), "quantity": 5], user: Self.seller)
        #expect(more["quantity"] == 5 && more["in_stock"] == 2 && more["sold"] == 2 && more["held"] == 1, "\(more)")
        #expect(try unitsAddUp(db, id))
        let over = refusal { try h.call("catalog.listings.update", ["listing": .string(id), "quantity": 21], user: Self.seller) }
        #expect(over?.status == 400 && over?.message.contains("max_listing_quantity") == true)
    }

    @Test(arguments: stores)
    func aSellerCannotHoldTheirOwnAndAListingIsTradedOnlyAsItsModeSays(postgres: Bool) throws {
        let (h, _) = try market(postgres: postgres)
        let both = try #require(try create(h)["id"]?.string)
        let own = refusal { try hold(h, both, order: "o-own", user: Self.seller) }
        #expect(own?.status == 409 && own?.message.contains("your own") == true && own?.message.contains(both) == true, "\(String(describing: own))")
        let ownRent = refusal { try hold(h, both, order: "o-own-rent", mode: "rent", user: Self.seller) }
        #expect(ownRent?.status == 409 && ownRent?.message.contains("rent their own") == true)
        #expect(try stock(h, both) == 2)

        let sale = try #require(try create(h, Self.with(Self.calculator, ["mode": "sale", "rent_rate": nil]))["id"]?.string)
        let rentSale = refusal { try hold(h, sale, order: "o-r", mode: "rent") }
        #expect(rentSale?.status == 409 && rentSale?.message.contains("for sale only") == true, "\(String(describing: rentSale))")
        let rentOnly = try #require(try create(h, Self.with(Self.calculator, ["mode": "rent"]))["id"]?.string)
        let buyRent = refusal { try hold(h, rentOnly, order: "o-b", mode: "buy") }
        #expect(buyRent?.status == 409 && buyRent?.message.contains("for rent only") == true, "\(String(describing: buyRent))")

        // A rental is held at the listing's rent rate, and keeps it through an edit.
        let rented = try hold(h, rentOnly, order: "o-rent", mode: "rent")
        #expect(rented["items"]?.array?.first?["rent_rate"] == 2.5, "\(rented)")
        _ = try h.call("catalog.listings.update", ["listing": .string(rentOnly), "rent_rate": 4], user: Self.seller)
        #expect(try h.call("catalog.stock.get", ["order": "o-rent"], user: Self.buyer, role: "service")["items"]?.array?.first?["rent_rate"] == 2.5)
        // A purchase's hold carries no rate; a seeded product's rental the seed's.
        #expect(try hold(h, both, order: "o-buy")["items"]?.array?.first?["rent_rate"] == nil)
        let seeded = try hold(h, "p-0002", order: "o-seed", mode: "rent")
        #expect(seeded["items"]?.array?.first?["rent_rate"]?.double == Contract.Catalog.seedRentRate(price: seeded["items"]?.array?.first?["price"]?.double ?? 0))
    }

    @Test(arguments: stores)
    func theSellerSeesWhatSoldWhatIsRentedAndReturnedAndTheFeeKept(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let id = try #require(try create(h, Self.with(Self.calculator, ["quantity": 4]))["id"]?.string)
        _ = try hold(h, id, order: "o-buy", quantity: 2)
        _ = try h.call("catalog.stock.confirm", ["order": "o-buy"], user: Self.buyer, role: "service")
        _ = try hold(h, id, order: "o-rent-1", mode: "rent")
        _ = try h.call("catalog.stock.confirm", ["order": "o-rent-1"], user: Self.buyer, role: "service")
        _ = try hold(h, id, order: "o-rent-2", mode: "rent")
        _ = try h.call("catalog.stock.confirm", ["order": "o-rent-2"], user: Self.buyer, role: "service")
        // orders.return releases a confirmed rental's hold: the unit is back in stock.
        _ = try h.call("catalog.stock.release", ["order": "o-rent-2"], user: Self.buyer, role: "service")
        // What orders published of the confirmed orders: 2 × 50 bought, 3 days at 2.50 rented, twice; one rental then cancelled.
        try db.transaction {
            for (order, mode, price, q) in [("o-buy", "buy", 50.0, 2), ("o-rent-1", "rent", 7.5, 1), ("o-rent-2", "rent", 7.5, 1), ("o-other", "rent", 7.5, 1)] {
                try Catalog.applyForYou(db, Envelope(type: "orders.confirmed", kind: .event, body: [
                    "order": .string(order), "user": .string(Self.buyer), "mode": .string(mode),
                    "items": [["product": .string(id), "quantity": .int(Int64(q)), "price": .double(price), "category": "Study"], ["product": "p-0001", "quantity": 1, "price": 9, "category": "Tech"]],
                ]))
            }
            try Catalog.applyForYou(db, Envelope(type: "orders.cancelled", kind: .event, body: ["order": "o-other", "user": .string(Self.buyer)]))
        }
        // Each sale of the listing is announced once (a second delivery of an order adds none), naming its seller, never its buyer.
        try db.transaction {
            try Catalog.applyForYou(db, Envelope(type: "orders.confirmed", kind: .event, body: [
                "order": "o-buy", "user": .string(Self.buyer), "mode": "buy", "items": [["product": .string(id), "quantity": 2, "price": 50, "category": "Study"]],
            ]))
        }
        let sold = try db.query("SELECT body, envelope FROM outbox WHERE type = 'catalog.listing.sold' ORDER BY seq").map { r in
            r.string("body").isEmpty ? (try JSON.parse(r.string("envelope")))["body"] ?? .null : try JSON.parse(r.string("body"))
        }
        #expect(sold.map { $0["order"]?.string ?? "" } == ["o-buy", "o-rent-1", "o-rent-2", "o-other"])
        #expect(sold.map { $0["quantity"]?.int ?? 0 } == [2, 1, 1, 1] && sold.map { $0["mode"]?.string ?? "" } == ["buy", "rent", "rent", "rent"])
        #expect(sold.allSatisfy { $0["seller"]?.string == Self.seller && $0["listing"]?.string == id && !$0.text.contains(Self.buyer) }, "\(sold)")
        #expect(try sold.allSatisfy { try Contract.Catalog.Listings.Sold(json: $0).name.isEmpty == false })
        let seen = try #require(try mine(h).first)
        #expect(seen["status"] == "active" && seen["quantity"] == 4 && seen["in_stock"] == 1, "\(seen)")
        #expect(seen["sold"] == 2 && seen["rented"] == 1 && seen["returned"] == 1 && seen["held"] == 0, "\(seen)")
        #expect(seen["revenue"]?.double == 115 && seen["fee_rate"] == 5 && seen["fee"]?.double == 5.76, "\(seen)")
        #expect(try unitsAddUp(db, id))
        // Sold out: every unit sold or out.
        _ = try hold(h, id, order: "o-last")
        #expect(try mine(h).first?["status"] == "sold_out")
    }

    @Test(arguments: stores)
    func anAdjustOfAListingListsOrUnlistsItsUnits(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let id = try #require(try create(h)["id"]?.string)
        _ = try h.call("catalog.stock.adjust", ["id": .string(id), "delta": 3], user: "u-admin", role: "admin")
        #expect(try unitsAddUp(db, id))
        #expect(try mine(h).first?["quantity"] == 5)
        _ = try h.call("catalog.listings.update", ["listing": .string(id), "quantity": 4], user: Self.seller)
        _ = try h.call("catalog.stock.adjust", ["id": .string(id), "delta": -1], user: "u-admin", role: "admin")
        #expect(try unitsAddUp(db, id))
        // Every unit ever listed: 2, then 3 more; 2 of them unlisted since.
        let l = try #require(try db.queryOne("SELECT quantity, unlisted FROM listings WHERE id = $1", .text(id)))
        #expect(l.int("quantity") == 3 && l.int("unlisted") == 2)
        _ = try h.call("catalog.listings.withdraw", ["listing": .string(id)], user: Self.seller)
        #expect(refusal { try h.call("catalog.stock.adjust", ["id": .string(id), "delta": 1], user: "u-admin", role: "admin") }?.status == 409)
    }

    /// Issue 26 point 8: "newest" is by when a product was listed, so a
    /// student's listing comes before every seeded product (whose ids sort
    /// after every listing's), and every product says when it was listed.
    @Test(arguments: stores)
    func newestListsTheLatestListingFirstAndTheSeededProductsAfterEveryListing(postgres: Bool) throws {
        let (h, _) = try market(postgres: postgres)
        let first = try #require(try create(h)["id"]?.string)
        let second = try #require(try create(h, Self.with(Self.calculator, ["name": "Used lab coat", "category": "Lab", "collection": "Lab Gear"]))["id"]?.string)
        let page = try h.call("catalog.products.list", ["sort": "newest", "limit": 200])["products"]?.array ?? []
        #expect(page.prefix(2).compactMap { $0["id"]?.string } == [second, first], "\(page.prefix(3).compactMap { $0["id"]?.string })")
        #expect(page.dropFirst(2).first?["id"]?.string == "p-0306", "then the seeded products, the highest id first")
        let listed = page.compactMap { $0["listed_at"]?.int }
        #expect(listed.count == page.count, "every product says when it was listed")
        #expect(listed == listed.sorted(by: >))
        // A category's page too.
        let lab = try h.call("catalog.products.list", ["sort": "newest", "category": "Lab", "limit": 5])["products"]?.array ?? []
        #expect(lab.first?["id"]?.string == second)
    }

    /// A store seeded before products had a listed-at time gives its seeded
    /// products the moment before its first listing.
    @Test(arguments: stores)
    func aStoreSeededBeforeListedAtGivesItsSeededProductsATimeBeforeItsFirstListing(postgres: Bool) throws {
        let db = try TestStore.open("catalog", migrations: Catalog.migrations.filter { $0.version <= 51 }, postgres: postgres)
        try Catalog.seedIfEmpty(db)
        try db.execute("UPDATE products SET listed_ms = NULL")
        try db.execute("UPDATE products SET listed_ms = 1700000000000 WHERE id = 'p-0003'")  // a listing's time, as it was
        try Migrations.apply(db, Catalog.migrations, scope: "catalog")
        let times = try db.query("SELECT id, listed_ms FROM products ORDER BY id").map { ($0.string("id"), $0["listed_ms"].int) }
        #expect(times.count == Catalog.seedCount)
        #expect(times.allSatisfy { $0.0 == "p-0003" ? $0.1 == 1_700_000_000_000 : $0.1 == 1_699_999_999_999 }, "\(times.prefix(4))")
    }

    /// Issue 26 point 8: a rental of a listing that comes back late charges
    /// its late days at rent_rate (orders.returned); the charge is the
    /// seller's revenue too, counted once however often the event comes.
    @Test(arguments: stores)
    func aLateReturnsChargeIsInTheSellersRevenueOnce(postgres: Bool) throws {
        let (h, db) = try market(postgres: postgres)
        let id = try #require(try create(h)["id"]?.string)
        for order in ["o-late", "o-on-time"] {
            _ = try hold(h, id, order: order, mode: "rent")
            _ = try h.call("catalog.stock.confirm", ["order": .string(order)], user: Self.buyer, role: "service")
        }
        // The subscription takes orders.returned from orders' events.
        #expect(Catalog.forYouEvents.contains(Contract.Orders.returned.type))
        func returned(_ order: String, lateDays: Int64) -> Envelope {
            var e = Contract.Orders.Returned()
            (e.order, e.user, e.currency, e.returnDate, e.returnedAt) = (order, Self.buyer, "USD", "2026-12-01", 1_765_000_000_000)
            e.items = [.init(product: id, quantity: 1, price: 7.5, category: "Study")]
            (e.lateDays, e.lateCharge) = (lateDays, 2.5 * Double(lateDays))
            return Envelope(type: Contract.Orders.returned.type, kind: .event, body: e.json)
        }
        try db.transaction {
            for order in ["o-late", "o-on-time"] {
                try Catalog.applyForYou(db, Envelope(type: "orders.confirmed", kind: .event, body: [
                    "order": .string(order), "user": .string(Self.buyer), "mode": "rent",
                    "items": [["product": .string(id), "quantity": 1, "price": 7.5, "category": "Study"]],
                ]))
            }
        }
        #expect(try mine(h).first?["revenue"]?.double == 15)
        // Four days late: 4 × 2.50 more; the one on time adds nothing; a second delivery nothing either.
        for _ in 0..<2 {
            try db.transaction {
                try Catalog.applyForYou(db, returned("o-late", lateDays: 4))
                try Catalog.applyForYou(db, returned("o-on-time", lateDays: 0))
            }
        }
        let seen = try #require(try mine(h).first)
        #expect(seen["revenue"]?.double == 25, "\(seen)")
        // The fee on each line: 5 % of 7.50 twice and of the late 10.00.
        #expect(seen["fee"]?.double == 1.26, "\(seen)")
        #expect(Contract.validateReply("catalog.listings.mine", try h.call("catalog.listings.mine", [:], user: Self.seller)).map { "\($0)" } == nil)
    }
}
