import Foundation
import QuadContract
import QuadImages
import QuadRuntime
import QuadStore
import QuadWire

/// Students' own listings (issue 16): a listing IS a product row (id `l-`
/// and 32 hex digits), so listing, search, categories and For You show it
/// like a seeded product, and the stock holds of orders take it as any
/// other. What only a listing has is in `listings`: its seller (by user id,
/// never sent out), its status, and the units it lists.
///
/// The units of a listing always add up, at every commit:
/// `listings.quantity = products.stock + units held + units confirmed`
/// (held and confirmed as in `holds`/`hold_items`). A rental that comes
/// back returns its unit to `products.stock`; once the listing is withdrawn
/// or taken down, the units in stock, and those that come back later, are
/// unlisted instead (`quantity` goes down, `unlisted` up), so a closed
/// listing's stock stays 0. A seller's lower quantity (or an admin's
/// negative adjust) unlists too, so `quantity + unlisted` is every unit
/// ever listed.
extension Catalog {
    /// Version 51 and on: after the products' 1 to 4 and the images' 50.
    static let listingMigrations: [Migration] = [
        Migration(51, """
            ALTER TABLE products ADD COLUMN seller_name TEXT;
            ALTER TABLE products ADD COLUMN item_condition TEXT;
            ALTER TABLE products ADD COLUMN trade_mode TEXT;
            ALTER TABLE products ADD COLUMN rent_rate DOUBLE PRECISION;
            ALTER TABLE products ADD COLUMN images TEXT;
            ALTER TABLE products ADD COLUMN listed_ms BIGINT;
            ALTER TABLE products ADD COLUMN visible BIGINT NOT NULL DEFAULT 1;
            CREATE TABLE listings (
                id TEXT PRIMARY KEY,
                seller_id TEXT NOT NULL,
                status TEXT NOT NULL,
                quantity BIGINT NOT NULL CHECK (quantity >= 0),
                unlisted BIGINT NOT NULL DEFAULT 0,
                reason TEXT,
                created_ms BIGINT NOT NULL,
                updated_ms BIGINT NOT NULL,
                closed_ms BIGINT
            );
            CREATE INDEX listings_seller ON listings (seller_id, id);
            CREATE TABLE sellers (user_id TEXT PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE listing_sales (
                order_id TEXT NOT NULL,
                product TEXT NOT NULL,
                quantity BIGINT NOT NULL,
                line_cents BIGINT NOT NULL,
                mode TEXT NOT NULL,
                PRIMARY KEY (order_id, product)
            );
            CREATE INDEX listing_sales_product ON listing_sales (product);
            ALTER TABLE holds ADD COLUMN mode TEXT NOT NULL DEFAULT 'buy';
            ALTER TABLE holds ADD COLUMN confirmed_ms BIGINT;
            ALTER TABLE hold_items ADD COLUMN rent_rate DOUBLE PRECISION;
            """),
        // Every product has a listed-at time, the "newest" sort's key: a
        // store seeded before it had one gives its seeded products the
        // moment before its first listing (else now), so they stay older
        // than every listing. A late return's charge, per rented line.
        Migration(52, sqlite: listedAtSQL(now: "CAST(strftime('%s', 'now') AS INTEGER) * 1000"),
                  postgres: listedAtSQL(now: "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)")),
    ]

    static func listedAtSQL(now: String) -> String {
        """
        UPDATE products SET listed_ms = COALESCE((SELECT MIN(l.listed_ms) - 1 FROM products l WHERE l.listed_ms IS NOT NULL), \(now))
        WHERE listed_ms IS NULL;
        CREATE INDEX products_listed ON products (listed_ms, id);
        CREATE TABLE listing_late_charges (
            order_id TEXT NOT NULL,
            product TEXT NOT NULL,
            late_days BIGINT NOT NULL,
            line_cents BIGINT NOT NULL,
            PRIMARY KEY (order_id, product)
        );
        CREATE INDEX listing_late_charges_product ON listing_late_charges (product);
        """
    }

    /// The settings of listings, each a flag of quad-catalog.
    public struct ListingSettings: Sendable {
        typealias L = Contract.Catalog.ListingLimits
        public var maxPrice = L.maxPrice
        public var maxQuantity = L.maxQuantity
        public var maxRentRate = L.maxRentRate
        public var maxImages = L.maxImages
        public var maxPerSeller = L.maxPerSeller
        public init() {}
    }

    static let listingOptions: [(String, String, String?)] = [
        ("max-listing-price", "highest price of a student's listing (max_listing_price)", "10000"),
        ("max-listing-quantity", "most units of one listing (max_listing_quantity)", "20"),
        ("max-rent-rate", "highest rent rate per day of a listing (max_rent_rate)", "500"),
        ("max-listing-images", "most images of one listing (max_listing_images)", "4"),
        ("max-listings-per-seller", "most listings one student may make, withdrawn ones included (max_listings_per_seller)", "100"),
    ]

    static func listingSettings(_ options: [String: String]) throws -> ListingSettings {
        typealias L = Contract.Catalog.ListingLimits
        func number(_ name: String, _ range: ClosedRange<Double>, _ d: Double) throws -> Double {
            guard let text = options[name] else { return d }
            guard let v = Double(text), range.contains(v) else {
                throw QuadError.badRequest("--\(name) must be a number from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
            }
            return v
        }
        func integer(_ name: String, _ range: ClosedRange<Int64>, _ d: Int64) throws -> Int64 {
            guard let text = options[name] else { return d }
            guard let v = Int64(text), range.contains(v) else {
                throw QuadError.badRequest("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
            }
            return v
        }
        var s = ListingSettings()
        s.maxPrice = try number("max-listing-price", 0.01...L.maxPriceCap, s.maxPrice)
        s.maxQuantity = try integer("max-listing-quantity", 1...L.maxQuantityCap, s.maxQuantity)
        s.maxRentRate = try number("max-rent-rate", 0.01...L.maxRentRateCap, s.maxRentRate)
        s.maxImages = try integer("max-listing-images", 0...L.maxImagesCap, s.maxImages)
        s.maxPerSeller = try integer("max-listings-per-seller", 1...L.maxPerSellerCap, s.maxPerSeller)
        return s
    }

    /// Who a seller is shown as when accounts has not told catalog their name.
    static let unknownSeller = "a student"

    static func registerListings(_ h: Handlers, db: Database, settings: ListingSettings) {
        typealias C = Contract.Catalog
        h.mutation(C.listingsCreate) { req, body in
            let user = try req.requireUser()
            return try createListing(db, body, seller: user, envelope: req.id, settings: settings)
        }
        h.mutation(C.listingsUpdate) { req, body in
            try updateListing(db, body, seller: try req.requireUser(), settings: settings)
        }
        h.mutation(C.listingsWithdraw) { req, body in
            let user = try req.requireUser()
            _ = try sellersListing(db, body.listing, seller: user)
            return try closeListing(db, body.listing, status: .withdrawn, reason: nil)
        }
        h.mutation(C.listingsTakedown) { req, body in
            try req.requireAdmin()
            guard try db.queryOne("SELECT 1 AS x FROM listings WHERE id = $1", .text(body.listing)) != nil else {
                throw QuadError.notFound("no listing '\(body.listing)'")
            }
            return try closeListing(db, body.listing, status: .takenDown, reason: body.reason)
        }
        h.query(C.listingsMine) { req, body in
            let user = try req.requireUser()
            let total = try db.queryOne("SELECT COUNT(*) AS n FROM listings WHERE seller_id = $1", .text(user))?.int("n") ?? 0
            let rows = try db.query("SELECT id FROM listings WHERE seller_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3",
                                    .text(user), .int(body.limit), .int(body.offset))
            var reply = C.ListingOps.MineReply()
            reply.listings = try rows.map { try listing(db, $0.string("id")) }
            (reply.total, reply.offset, reply.limit) = (total, body.offset, body.limit)
            return reply
        }
    }

    // MARK: Checks

    static func checkPrice(_ price: Contract.Catalog.Product.Price, _ s: ListingSettings) throws {
        guard price.value > 0, price.value <= s.maxPrice, price.value.isFinite else {
            throw QuadError.badRequest("body.price.value must be more than 0 and at most \(show(s.maxPrice)) (max_listing_price), got \(show(price.value))",
                                       details: ["limit": "max_listing_price", "max": .double(s.maxPrice)])
        }
    }

    static func checkQuantity(_ q: Int64, _ s: ListingSettings) throws {
        guard q >= 1, q <= s.maxQuantity else {
            throw QuadError.badRequest("body.quantity must be 1 to \(s.maxQuantity) (max_listing_quantity), got \(q)",
                                       details: ["limit": "max_listing_quantity", "max": .int(s.maxQuantity)])
        }
    }

    /// The rent rate a listing of `mode` keeps: required to rent, refused for sale only.
    static func rentRate(mode: String, given: Double?, kept: Double?, _ s: ListingSettings) throws -> Double? {
        if mode == "sale" {
            if given != nil { throw QuadError.badRequest("body.rent_rate is only for mode 'rent' or 'both': a listing for sale only is never rented") }
            return nil
        }
        guard let rate = given ?? kept else {
            throw QuadError.badRequest("body.rent_rate is required for mode '\(mode)': more than 0 and at most \(show(s.maxRentRate)) a day (max_rent_rate)",
                                       details: ["limit": "max_rent_rate", "max": .double(s.maxRentRate)])
        }
        guard rate > 0, rate <= s.maxRentRate, rate.isFinite else {
            throw QuadError.badRequest("body.rent_rate must be more than 0 and at most \(show(s.maxRentRate)) (max_rent_rate), got \(show(rate))",
                                       details: ["limit": "max_rent_rate", "max": .double(s.maxRentRate)])
        }
        return rate
    }

    /// Images are ids of images kept already, at most max_listing_images, none twice.
    static func checkImages(_ db: Database, _ ids: [String], _ s: ListingSettings) throws {
        guard Int64(ids.count) <= s.maxImages else {
            throw QuadError.badRequest("body.images has \(ids.count) items, over the limit of \(s.maxImages) (max_listing_images)",
                                       details: ["limit": "max_listing_images", "max": .int(s.maxImages)])
        }
        for (n, id) in ids.enumerated() {
            if ids[..<n].contains(id) { throw QuadError.badRequest("body.images[\(n)] repeats an earlier image") }
            guard try db.queryOne("SELECT 1 AS x FROM images WHERE sha256 = $1", .text(id)) != nil else {
                throw QuadError.notFound("no image with id '\(id)': upload it with catalog.images.put first")
            }
        }
    }

    static func show(_ d: Double) -> String { d.rounded() == d && abs(d) < 1e15 ? String(Int64(d)) : String(d) }

    /// The caller's listing, or 404: another's is answered as if there were
    /// none, so nobody learns which ids are listings of someone else.
    static func sellersListing(_ db: Database, _ id: String, seller: String) throws -> Row {
        guard let row = try db.queryOne("SELECT * FROM listings WHERE id = $1 AND seller_id = $2", .text(id), .text(seller)) else {
            throw QuadError.notFound("you have no listing '\(id)'")
        }
        return row
    }

    // MARK: Changes

    static func searchText(name: String, type: String, category: String, collection: String, info: JSON, condition: String) -> String {
        let values = (info.object ?? [:]).sorted { $0.key < $1.key }.compactMap { $0.value.string }
        return [name, type, category, collection, values.joined(separator: " "), condition].joined(separator: " ").lowercased()
    }

    /// The stored picture of a listing: its first image, else its collection's (a seeded one's), else none.
    static func listingImagePath(_ images: [String], collection: String) -> String {
        images.first.map(imagePath) ?? seededImagePath(collection)
    }

    static func createListing(_ db: Database, _ b: Contract.Catalog.ListingOps.Create, seller: String, envelope: String,
                              settings s: ListingSettings) throws -> Contract.Catalog.ListingOps.Listing {
        try checkPrice(b.price, s)
        try checkQuantity(b.quantity, s)
        let rate = try rentRate(mode: b.mode, given: b.rentRate, kept: nil, s)
        try checkImages(db, b.images, s)
        let made = try db.queryOne("SELECT COUNT(*) AS n FROM listings WHERE seller_id = $1", .text(seller))?.int("n") ?? 0
        guard made < s.maxPerSeller else {
            throw QuadError.conflict("you have made \(made) listings, the most one student may (max_listings_per_seller=\(s.maxPerSeller))")
        }
        let now = Int64(Clock.nowMillis())
        // Time-ordered, and unique by seller and envelope.
        let id = "l-" + String(format: "%012llx", UInt64(now)) + SHA256.hex(Array("\(seller)\n\(envelope)".utf8)).prefix(20)
        let name = try db.queryOne("SELECT name FROM sellers WHERE user_id = $1", .text(seller))?.string("name") ?? unknownSeller
        let info = b.info
        try db.execute("""
            INSERT INTO products (id, name, price_value, currency, info, type, image_url, category, collection, stock, search,
                                  seller_name, item_condition, trade_mode, rent_rate, images, listed_ms, visible)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 1)
            """, .text(id), .text(b.name), .double(b.price.value), .text(b.price.currency), .text(info.text), .text(b.type),
            .text(listingImagePath(b.images, collection: b.collection)), .text(b.category), .text(b.collection), .int(b.quantity),
            .text(searchText(name: b.name, type: b.type, category: b.category, collection: b.collection, info: info, condition: b.condition)),
            .text(name), .text(b.condition), .text(b.mode), .of(rate), .text(JSON.array(b.images.map { .string($0) }).text), .int(now))
        try db.execute("""
            INSERT INTO listings (id, seller_id, status, quantity, unlisted, created_ms, updated_ms) VALUES ($1, $2, 'active', $3, 0, $4, $4)
            """, .text(id), .text(seller), .int(b.quantity), .int(now))
        var e = Contract.Catalog.Listings.Created()
        (e.listing, e.category, e.collection, e.mode, e.price, e.currency) = (id, b.category, b.collection, b.mode, b.price.value, b.price.currency)
        (e.rentRate, e.quantity, e.createdAt) = (rate, b.quantity, now)
        try Outbox.append(db, type: Contract.Catalog.listingCreated.type, body: e.json)
        try productChanged(db, id)
        return try listing(db, id)
    }

    static func updateListing(_ db: Database, _ b: Contract.Catalog.ListingOps.Update, seller: String,
                              settings s: ListingSettings) throws -> Contract.Catalog.ListingOps.Listing {
        let id = b.listing
        let kept = try sellersListing(db, id, seller: seller)
        let status = try listingStatus(kept, id)
        guard status == .active else {
            throw QuadError.conflict("listing '\(id)' is \(status == .withdrawn ? "withdrawn" : "taken down"): it cannot change")
        }
        let p = try db.queryOne("SELECT * FROM products WHERE id = $1", .text(id))!
        if let price = b.price { try checkPrice(price, s) }
        let mode = b.mode ?? p.string("trade_mode")
        // Switching to sale drops the rate kept; a rate given for sale is refused.
        let rate = try rentRate(mode: mode, given: b.rentRate, kept: mode == "sale" ? nil : p["rent_rate"].double, s)
        if let images = b.images { try checkImages(db, images, s) }
        if let q = b.quantity {
            try checkQuantity(q, s)
            let delta = q - kept.int("quantity")
            if delta != 0 {
                // The units held and sold stay theirs: the stock moves by the difference, never below 0.
                guard let row = try db.queryOne("UPDATE products SET stock = stock + $1 WHERE id = $2 AND stock + $1 >= 0 RETURNING stock",
                                                .int(delta), .text(id)) else {
                    let taken = kept.int("quantity") - p.int("stock")
                    throw QuadError.conflict("listing '\(id)' has \(taken) units held or sold: its quantity cannot go below \(taken), got \(q)",
                                             details: ["listing": .string(id), "held_or_sold": .int(taken)])
                }
                try db.execute("UPDATE listings SET quantity = $1, unlisted = unlisted + $3 WHERE id = $2", .int(q), .text(id), .int(max(0, -delta)))
                try stockChanged(db, product: id, stock: row.int("stock"), delta: delta, reason: "listing", order: nil)
            }
        }
        let name = b.name ?? p.string("name")
        let info = b.info ?? ((try? JSON.parse(p.string("info"))) ?? .object([:]))
        let condition = b.condition ?? p.string("item_condition")
        let images = b.images ?? storedImages(p)
        let price = b.price ?? .init(value: p.double("price_value"), currency: p.string("currency"))
        let now = Int64(Clock.nowMillis())
        // A hold already made keeps the price in hold_items: only new holds see this one.
        try db.execute("""
            UPDATE products SET name = $2, price_value = $3, currency = $4, info = $5, item_condition = $6, trade_mode = $7, rent_rate = $8,
                images = $9, image_url = $10, search = $11 WHERE id = $1
            """, .text(id), .text(name), .double(price.value), .text(price.currency), .text(info.text), .text(condition), .text(mode), .of(rate),
            .text(JSON.array(images.map { .string($0) }).text), .text(listingImagePath(images, collection: p.string("collection"))),
            .text(searchText(name: name, type: p.string("type"), category: p.string("category"), collection: p.string("collection"),
                             info: info, condition: condition)))
        try db.execute("UPDATE listings SET updated_ms = $2 WHERE id = $1", .text(id), .int(now))
        try productChanged(db, id)
        return try listing(db, id)
    }

    /// Withdraws or takes down a listing: what is in stock is unlisted, the
    /// product leaves listing and search; holds and sales stand. A second
    /// call answers it as it is.
    static func closeListing(_ db: Database, _ id: String, status: Contract.Catalog.ListingStatus, reason: String?) throws -> Contract.Catalog.ListingOps.Listing {
        let kept = try db.queryOne("SELECT status FROM listings WHERE id = $1", .text(id))!
        switch (try listingStatus(kept, id), status) {
        case (.active, _):
            break
        case (.withdrawn, .takenDown):
            // An admin may still take down what its seller withdrew: the reason is for the seller.
            try db.execute("UPDATE listings SET status = 'taken_down', reason = $2, updated_ms = $3 WHERE id = $1 AND status = 'withdrawn'",
                           .text(id), .text(reason ?? ""), .int(Int64(Clock.nowMillis())))
            try closedEvent(db, id, status: status, reason: reason)
            return try listing(db, id)
        case (.takenDown, .withdrawn):
            throw QuadError.conflict("listing '\(id)' was taken down by an admin: there is nothing to withdraw")
        default:
            return try listing(db, id)
        }
        let now = Int64(Clock.nowMillis())
        // The stock as it is in this transaction (SQLite's write lock, or a
        // row lock on PostgreSQL taken by the UPDATE): read, then cleared
        // only if still that, so a hold taken between is never unlisted.
        var unlisted: Int64 = 0
        while true {
            let stock = try db.queryOne("SELECT stock FROM products WHERE id = $1", .text(id))!.int("stock")
            if try db.execute("UPDATE products SET stock = 0, visible = 0 WHERE id = $1 AND stock = $2", .text(id), .int(stock)) == 1 {
                unlisted = stock
                break
            }
        }
        try db.execute("""
            UPDATE listings SET status = $2, reason = $3, quantity = quantity - $4, unlisted = unlisted + $4, updated_ms = $5, closed_ms = $5
            WHERE id = $1
            """, .text(id), .text(status.rawValue), .of(reason), .int(unlisted), .int(now))
        if unlisted > 0 { try stockChanged(db, product: id, stock: 0, delta: -unlisted, reason: "listing", order: nil) }
        try closedEvent(db, id, status: status, reason: reason)
        try productChanged(db, id)
        return try listing(db, id)
    }

    /// The status a listing's row keeps (active, withdrawn or taken_down;
    /// sold_out is what a seller is shown of an active one with none in stock).
    static func listingStatus(_ row: Row, _ id: String) throws -> Contract.Catalog.ListingStatus {
        guard let status = Contract.Catalog.ListingStatus(rawValue: row.string("status")) else {
            throw QuadError.internal("listing '\(id)' has the status '\(row.string("status"))' in the store, which this build does not know")
        }
        return status
    }

    static func closedEvent(_ db: Database, _ id: String, status: Contract.Catalog.ListingStatus, reason: String?) throws {
        var e = Contract.Catalog.Listings.Closed()
        let category = try db.queryOne("SELECT category FROM products WHERE id = $1", .text(id))?.string("category") ?? "Others"
        (e.listing, e.category, e.reason, e.note, e.closedAt) = (id, category, status.rawValue, reason, Int64(Clock.nowMillis()))
        try Outbox.append(db, type: Contract.Catalog.listingClosed.type, body: e.json)
    }

    static func productChanged(_ db: Database, _ id: String) throws {
        guard let row = try db.queryOne("SELECT * FROM products WHERE id = $1", .text(id)) else { return }
        // The event's seq is the product's new version (the body's would be the old one).
        var changed = product(row)
        changed.version = nil
        let seq = try Outbox.append(db, type: Contract.Catalog.productChanged.type, body: changed.json)
        try db.execute("UPDATE products SET version = $2 WHERE id = $1", .text(id), .int(seq))
    }

    static func storedImages(_ r: Row) -> [String] {
        guard let text = r.optionalString("images"), let ids = try? JSON.parse(text) else { return [] }
        return (ids.array ?? []).compactMap(\.string)
    }

    // MARK: Reading

    /// A listing as its seller sees it: the product, the units by where they
    /// are (from the holds), the money (from orders' events).
    static func listing(_ db: Database, _ id: String) throws -> Contract.Catalog.ListingOps.Listing {
        guard let l = try db.queryOne("SELECT * FROM listings WHERE id = $1", .text(id)),
              let p = try db.queryOne("SELECT * FROM products WHERE id = $1", .text(id)) else {
            throw QuadError.notFound("no listing '\(id)'")
        }
        var out = Contract.Catalog.ListingOps.Listing()
        out.id = id
        out.product = product(p)
        out.quantity = l.int("quantity")
        out.inStock = p.int("stock")
        let units = try db.query("""
            SELECT h.status AS status, h.mode AS mode, CASE WHEN h.confirmed_ms IS NULL THEN 0 ELSE 1 END AS was_confirmed, SUM(i.quantity) AS n
            FROM hold_items i JOIN holds h ON h.order_id = i.order_id
            WHERE i.product = $1
            GROUP BY h.status, h.mode, CASE WHEN h.confirmed_ms IS NULL THEN 0 ELSE 1 END
            """, .text(id))
        for u in units {
            let n = u.int("n")
            switch (HoldStatus(rawValue: u.string("status")), u.string("mode"), u.int("was_confirmed")) {
            case (.held?, _, _): out.held += n
            case (.confirmed?, "rent", _): out.rented += n
            case (.confirmed?, _, _): out.sold += n
            case (.released?, "rent", 1): out.returned += n
            default: break
            }
        }
        let status = try listingStatus(l, id)
        out.status = status == .active && out.inStock == 0 ? .soldOut : status
        let category = p.string("category")
        out.feeRate = Contract.Catalog.listingFeeRates[category] ?? Contract.Catalog.listingFeeRates["Others"] ?? 10
        var revenue: Int64 = 0, fee: Int64 = 0
        // Each line on its own, the late charge of a rental returned late too.
        for sale in try db.query("""
            SELECT line_cents FROM listing_sales WHERE product = $1
            UNION ALL SELECT line_cents FROM listing_late_charges WHERE product = $1
            """, .text(id)) {
            let cents = sale.int("line_cents")
            revenue += cents
            fee += Int64((Double(cents) * out.feeRate / 100).rounded())
        }
        (out.revenue, out.fee, out.currency) = (Double(revenue) / 100, Double(fee) / 100, p.string("currency"))
        out.images = storedImages(p)
        out.reason = status == .takenDown ? l.optionalString("reason") : nil
        out.closedAt = l["closed_ms"].int
        out.updatedAt = l.int("updated_ms")
        return out
    }

    // MARK: Events of other services

    /// A seller's display name, from accounts' events: kept, and written
    /// into their listings (each republished), never their id.
    static func applySeller(_ db: Database, _ profile: Contract.Accounts.PublicProfile) throws {
        let name = profile.name.isEmpty ? unknownSeller : profile.name
        try db.execute("INSERT INTO sellers (user_id, name) VALUES ($1, $2) ON CONFLICT (user_id) DO UPDATE SET name = excluded.name",
                       .text(profile.user), .text(name))
        for row in try db.query("SELECT p.id AS id FROM products p JOIN listings l ON l.id = p.id WHERE l.seller_id = $1 AND (p.seller_name IS NULL OR p.seller_name <> $2)",
                                .text(profile.user), .text(name)) {
            try db.execute("UPDATE products SET seller_name = $2 WHERE id = $1", .text(row.string("id")), .text(name))
            try productChanged(db, row.string("id"))
        }
    }

    /// What a listing's confirmed orders brought in, as orders published
    /// them (its prices: a rental's is rent_rate times the days); a
    /// cancelled order's lines leave it; a rental returned late adds its
    /// late days at the line's rent_rate (orders.returned), once.
    static func applySales(_ db: Database, _ e: Envelope) throws {
        let b = e.body
        switch e.type {
        case "orders.confirmed":
            guard let order = b["order"]?.string else { return }
            let mode = b["mode"]?.string ?? "buy"
            for item in b["items"]?.array ?? [] {
                guard let product = item["product"]?.string, product.hasPrefix("l-"),
                      let price = item["price"]?.double, let q = item["quantity"]?.int else { continue }
                let recorded = try db.execute("""
                    INSERT INTO listing_sales (order_id, product, quantity, line_cents, mode) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING
                    """, .text(order), .text(product), .int(q), .int(Int64((price * 100).rounded()) * q), .text(mode)) == 1
                if recorded { try announceSale(db, listing: product, order: order, quantity: q, mode: mode) }
            }
        case "orders.cancelled":
            guard let order = b["order"]?.string else { return }
            try db.execute("DELETE FROM listing_sales WHERE order_id = $1", .text(order))
        case "orders.returned":
            // The late days at each line's rate as this catalog held it (the
            // rate orders charged them at), the listings' lines only.
            guard let r = try? Contract.Orders.Returned(json: b), r.lateDays > 0 else { return }
            for line in try db.query("""
                SELECT product, quantity, rent_rate FROM hold_items WHERE order_id = $1 AND product LIKE 'l-%' AND rent_rate IS NOT NULL
                """, .text(r.order)) {
                let cents = Int64((line.double("rent_rate") * 100).rounded()) * line.int("quantity") * r.lateDays
                try db.execute("""
                    INSERT INTO listing_late_charges (order_id, product, late_days, line_cents) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING
                    """, .text(r.order), .text(line.string("product")), .int(r.lateDays), .int(cents))
            }
        default:
            return
        }
    }

    /// `catalog.listing.sold` for a sale just recorded, in its transaction:
    /// the seller is named so they can be told; the buyer never is.
    static func announceSale(_ db: Database, listing: String, order: String, quantity: Int64, mode: String) throws {
        guard let l = try db.queryOne("SELECT l.seller_id AS seller_id, p.name AS name FROM listings l JOIN products p ON p.id = l.id WHERE l.id = $1",
                                      .text(listing)) else { return }
        var sold = Contract.Catalog.Listings.Sold()
        (sold.listing, sold.order, sold.seller, sold.name, sold.quantity, sold.mode, sold.soldAt) =
            (listing, order, l.string("seller_id"), l.string("name"), quantity, mode == "rent" ? "rent" : "buy", Int64(Clock.nowMillis()))
        try Outbox.append(db, type: Contract.Catalog.listingSold.type, body: sold.json)
    }

    // MARK: Holds of listings

    /// The refusals of a hold that only a listing has: its own seller, a
    /// closed listing, a mode it is not for. 409 with the reason, naming it.
    static func checkListingHold(_ db: Database, product: String, buyer: String?, mode: String) throws {
        guard let l = try db.queryOne("SELECT l.seller_id AS seller_id, l.status AS status, p.trade_mode AS trade_mode FROM listings l JOIN products p ON p.id = l.id WHERE l.id = $1",
                                      .text(product)) else { return }
        if let buyer, !buyer.isEmpty, l.string("seller_id") == buyer {
            throw QuadError.conflict("listing '\(product)' is your own: a seller cannot \(mode == "rent" ? "rent" : "buy") their own listing",
                                     details: ["listing": .string(product), "reason": "own_listing"])
        }
        switch try listingStatus(l, product) {
        case .withdrawn: throw QuadError.conflict("listing '\(product)' was withdrawn by its seller", details: ["listing": .string(product), "reason": "withdrawn"])
        case .takenDown: throw QuadError.conflict("listing '\(product)' was taken down", details: ["listing": .string(product), "reason": "taken_down"])
        default: break
        }
        switch (l.string("trade_mode"), mode) {
        case ("sale", "rent"):
            throw QuadError.conflict("listing '\(product)' is for sale only: it cannot be rented", details: ["listing": .string(product), "reason": "not_for_rent"])
        case ("rent", "buy"):
            throw QuadError.conflict("listing '\(product)' is for rent only: it cannot be bought", details: ["listing": .string(product), "reason": "not_for_sale"])
        default:
            break
        }
    }

    /// Units of a closed listing that come back (a hold released after a
    /// withdrawal): unlisted, not put back in stock. True when it was one.
    static func unlistReturned(_ db: Database, product: String, quantity: Int64) throws -> Bool {
        try db.execute("UPDATE listings SET quantity = quantity - $1, unlisted = unlisted + $1 WHERE id = $2 AND status <> 'active'",
                       .int(quantity), .text(product)) == 1
    }
}
