import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The catalog service: products with the seeds' model, categories and
/// collections with live counts, listing with filters and paging.
public enum Catalog: ServiceDomain {
    public static let name = "catalog"
    public static let summary = "products, categories and collections of the campus marketplace"

    /// UniTrade's categories.
    public static let categories = ["Study", "Tech", "Creative", "Lab", "Personal", "Others"]
    /// Largest page of `catalog.products.list` (`max_page_size`).
    public static let maxPageSize = Contract.Catalog.maxPageSize
    /// Longest text query (`max_query_length`).
    public static let maxQueryLength = Contract.Catalog.maxQueryLength

    public static let options: [(String, String, String?)] = [
        ("hold-ttl-seconds", "how long a stock hold lasts unless confirmed or released", "120"),
    ] + imageOptions + listingOptions

    public static var migrations: [Migration] {
        productMigrations + stockMigrations + forYouMigrations + imageMigrations + listingMigrations + versionMigrations
    }

    /// A product's version: the seq of the last event the catalog's outbox
    /// published about it (``stockChanged``, ``productChanged``), written in
    /// the transaction that changed it. Replies carry it and live updates
    /// carry it as their seq, so a phone can tell which of two copies of a
    /// product is newer whichever way each came. 0: unchanged since seeded.
    static let versionMigrations: [Migration] = [
        Migration(53, "ALTER TABLE products ADD COLUMN version BIGINT NOT NULL DEFAULT 0"),
    ]

    static let productMigrations: [Migration] = [
        Migration(1, """
            CREATE TABLE products (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                price_value DOUBLE PRECISION NOT NULL,
                currency TEXT NOT NULL,
                info TEXT NOT NULL,
                type TEXT NOT NULL,
                image_url TEXT NOT NULL,
                category TEXT NOT NULL,
                collection TEXT NOT NULL,
                stock BIGINT NOT NULL CHECK (stock >= 0),
                search TEXT NOT NULL
            );
            CREATE INDEX products_category ON products (category, name);
            CREATE INDEX products_collection ON products (collection, name);
            """),
    ]

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        guard let ttl = Int64(options["hold-ttl-seconds"] ?? "120"), ttl >= 1 else {
            throw QuadError.badRequest("--hold-ttl-seconds must be a positive integer")
        }
        // First the images' base URL: the seed's events carry imageUrl.
        try installImages(on: worker, db: db, options: options)
        try seedIfEmpty(db)
        register(worker.handlers, db: db, holdTTLms: ttl * 1000, listings: try listingSettings(options))
        // Holds expire on time even while nobody calls.
        worker.every(500) { try db.transaction { try expireDue(db) } }
        try worker.subscribe(to: ["accounts", "favorites", "orders"], wants: { forYouEvents.contains($0.type) }) { event in
            try applyForYou(db, event)
        }
    }

    /// Registers the catalog's handlers; split from ``install`` so tests can
    /// drive the handlers without a broker.
    public static func register(_ h: Handlers, db: Database, holdTTLms: Int64 = 120_000, listings: ListingSettings = .init()) {
        registerStock(h, db: db, holdTTLms: holdTTLms)
        registerListings(h, db: db, settings: listings)
        typealias C = Contract.Catalog
        h.query(C.productsList) { _, body in try list(db, body) }
        h.query(C.search) { _, body in try list(db, body) }
        h.query(C.foryou) { req, body in
            try forYou(db, user: try req.requireUser(), limit: body.limit)
        }
        h.query(C.productGet) { _, body in
            guard let row = try db.queryOne("SELECT * FROM products WHERE id = $1", .text(body.id)) else {
                throw QuadError.notFound("no product with id '\(body.id)'")
            }
            return product(row)
        }
        h.query(C.categories) { _, _ in
            let rows = try db.query("SELECT category AS name, COUNT(*) AS n, SUM(CASE WHEN stock > 0 THEN 1 ELSE 0 END) AS available FROM products WHERE visible = 1 GROUP BY category")
            var counts: [String: (Int64, Int64)] = [:]
            for r in rows { counts[r.string("name")] = (r.int("n"), r.int("available")) }
            return C.Categories.Reply(categories: categories.map { c in .init(name: c, count: counts[c]?.0 ?? 0, inStock: counts[c]?.1 ?? 0) })
        }
        h.query(C.collections) { _, _ in
            let rows = try db.query("SELECT collection AS name, COUNT(*) AS n FROM products WHERE visible = 1 GROUP BY collection ORDER BY collection")
            return C.Collections.Reply(collections: rows.map { .init(name: $0.string("name"), count: $0.int("n")) })
        }
        h.mutation(C.stockAdjust) { req, body in
            try req.requireAdmin()
            let (id, delta) = (body.id, body.delta)
            // A listing's units add up (listed = in stock + held + sold): an
            // adjust lists or unlists them; a closed listing takes none.
            if let l = try db.queryOne("SELECT status FROM listings WHERE id = $1", .text(id)) {
                guard try Catalog.listingStatus(l, id) == .active else { throw QuadError.conflict("listing '\(id)' is \(l.string("status")): its stock stays 0") }
                try db.execute("UPDATE listings SET quantity = quantity + $1, unlisted = unlisted + $3 WHERE id = $2 AND quantity + $1 >= 0",
                               .int(delta), .text(id), .int(max(0, -delta)))
            }
            guard let row = try db.queryOne("UPDATE products SET stock = stock + $1 WHERE id = $2 AND stock + $1 >= 0 RETURNING stock", .int(delta), .text(id)) else {
                if try db.queryOne("SELECT 1 AS x FROM products WHERE id = $1", .text(id)) == nil { throw QuadError.notFound("no product with id '\(id)'") }
                throw QuadError.conflict("stock of '\(id)' cannot go below 0")
            }
            let stock = row.int("stock")
            try stockChanged(db, product: id, stock: stock, delta: delta, reason: "adjust", order: nil)
            return C.StockAdjust.Reply(id: id, stock: stock)
        }
    }

    /// A page of products; the request was checked against the contract
    /// (category, sort, bounds) before it got here.
    static func list(_ db: Database, _ body: Contract.Catalog.ListRequest) throws -> Contract.Catalog.ListReply {
        let (category, collection, q, offset, limit) = (body.category, body.collection, body.q, body.offset, body.limit)
        let (minPrice, maxPrice, inStock) = (body.minPrice, body.maxPrice, body.inStock)
        guard let order = sortOrders[body.sort] else {
            throw QuadError.badRequest("body.sort must be one of \(sortOrders.keys.sorted().joined(separator: ", ")), got '\(body.sort)'")
        }
        // Withdrawn and taken-down listings are not listed: catalog.product.get still answers them (stock 0) for orders and favorites that name them.
        var conditions: [String] = ["visible = 1"]
        var params: [SQLValue] = []
        if let category { params.append(.text(category)); conditions.append("category = $\(params.count)") }
        if let collection { params.append(.text(collection)); conditions.append("collection = $\(params.count)") }
        if let q, !q.isEmpty {
            for word in q.lowercased().split(separator: " ").prefix(8) {
                params.append(.text("%" + escapeLike(String(word)) + "%"))
                conditions.append("search LIKE $\(params.count) ESCAPE '\\'")
            }
        }
        if let minPrice { params.append(.double(minPrice)); conditions.append("price_value >= $\(params.count)") }
        if let maxPrice { params.append(.double(maxPrice)); conditions.append("price_value <= $\(params.count)") }
        if inStock { conditions.append("stock > 0") }
        let filter = "WHERE " + conditions.joined(separator: " AND ")
        let total = try db.queryOne("SELECT COUNT(*) AS n FROM products \(filter)", params)?.int("n") ?? 0
        params.append(.int(limit))
        params.append(.int(offset))
        let rows = try db.query("SELECT * FROM products \(filter) ORDER BY \(order) LIMIT $\(params.count - 1) OFFSET $\(params.count)", params)
        return .init(products: rows.map(product), total: total, offset: offset, limit: limit)
    }

    /// Sort orders of a listing, by name in the request.
    static let sortOrders = [
        "name": "name, id", "price": "price_value, id", "-price": "price_value DESC, id",
        "stock": "stock DESC, id", "newest": "listed_ms DESC, id DESC",
    ]

    static func escapeLike(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
    }

    /// A product row as the seeds' model.
    static func product(_ r: Row) -> Contract.Catalog.Product {
        var p = Contract.Catalog.Product()
        p.id = r.string("id")
        p.name = r.string("name")
        p.price = .init(value: r.double("price_value"), currency: r.string("currency"))
        p.info = (try? JSON.parse(r.string("info"))) ?? .object([:])
        p.type = r.string("type")
        p.imageUrl = imageURL(r.string("image_url"))
        p.category = r.string("category")
        p.collection = r.string("collection")
        p.stock = r.int("stock")
        if let mode = r.optionalString("trade_mode") {
            // A student's listing: its own rate (none for sale only), its seller by name.
            p.rentRate = mode == "sale" ? nil : r["rent_rate"].double
            p.seller = r.optionalString("seller_name") ?? unknownSeller
            p.condition = r.optionalString("item_condition")
            p.mode = mode
            p.images = storedImages(r).map { imageURL(imagePath($0)) }
        } else {
            p.rentRate = Contract.Catalog.seedRentRate(price: p.price.value)
        }
        p.listedAt = r["listed_ms"].int
        p.version = r["version"].int
        return p
    }
}
