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
    ]

    public static var migrations: [Migration] { productMigrations + stockMigrations + forYouMigrations }

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
        try seedIfEmpty(db)
        register(worker.handlers, db: db, holdTTLms: ttl * 1000)
        // Holds expire on time even while nobody calls.
        worker.every(500) { try db.transaction { try expireDue(db) } }
        try worker.subscribe(to: ["accounts", "favorites", "orders"], wants: { forYouEvents.contains($0.type) }) { event in
            try applyForYou(db, event)
        }
    }

    /// Registers the catalog's handlers; split from ``install`` so tests can
    /// drive the handlers without a broker.
    public static func register(_ h: Handlers, db: Database, holdTTLms: Int64 = 120_000) {
        registerStock(h, db: db, holdTTLms: holdTTLms)
        h.query("catalog.products.list") { req in try list(db, req.body) }
        h.query("catalog.search") { req in try list(db, req.body) }
        h.query("catalog.foryou") { req in
            let user = try req.requireUser()
            let limit = req.body["limit"]?.int ?? 20
            guard (1...maxPageSize).contains(limit) else { throw QuadError.badRequest("body.limit must be between 1 and \(maxPageSize) (max_page_size)") }
            return try forYou(db, user: user, limit: limit)
        }
        h.query("catalog.product.get") { req in
            let id = try requiredString(req.body, "id", max: 64)
            guard let row = try db.queryOne("SELECT * FROM products WHERE id = $1", .text(id)) else {
                throw QuadError.notFound("no product with id '\(id)'")
            }
            return product(row)
        }
        h.query("catalog.categories") { _ in
            let rows = try db.query("SELECT category AS name, COUNT(*) AS n, SUM(CASE WHEN stock > 0 THEN 1 ELSE 0 END) AS available FROM products GROUP BY category")
            var counts: [String: (Int64, Int64)] = [:]
            for r in rows { counts[r.string("name")] = (r.int("n"), r.int("available")) }
            return ["categories": .array(categories.map { c in
                ["name": .string(c), "count": .int(counts[c]?.0 ?? 0), "in_stock": .int(counts[c]?.1 ?? 0)]
            })]
        }
        h.query("catalog.collections") { _ in
            let rows = try db.query("SELECT collection AS name, COUNT(*) AS n FROM products GROUP BY collection ORDER BY collection")
            return ["collections": .array(rows.map { ["name": .string($0.string("name")), "count": .int($0.int("n"))] })]
        }
        h.mutation("catalog.stock.adjust") { req in
            try req.requireAdmin()
            let id = try requiredString(req.body, "id", max: 64)
            guard let delta = req.body["delta"]?.int, (-1_000_000...1_000_000).contains(delta) else {
                throw QuadError.badRequest("body.delta must be an integer between -1000000 and 1000000")
            }
            guard let row = try db.queryOne("UPDATE products SET stock = stock + $1 WHERE id = $2 AND stock + $1 >= 0 RETURNING stock", .int(delta), .text(id)) else {
                if try db.queryOne("SELECT 1 AS x FROM products WHERE id = $1", .text(id)) == nil { throw QuadError.notFound("no product with id '\(id)'") }
                throw QuadError.conflict("stock of '\(id)' cannot go below 0")
            }
            let stock = row.int("stock")
            try stockChanged(db, product: id, stock: stock, delta: delta, reason: "adjust", order: nil)
            return ["id": .string(id), "stock": .int(stock)]
        }
    }

    static func requiredString(_ body: JSON, _ key: String, max: Int) throws(QuadError) -> String {
        guard let value = body[key] else { throw .badRequest("body.\(key) is required") }
        guard let s = value.string else { throw .badRequest("body.\(key) must be a string, got \(value.typeName)") }
        guard !s.isEmpty, s.unicodeScalars.count <= max else { throw .badRequest("body.\(key) must be 1 to \(max) characters") }
        return s
    }

    static func optionalString(_ body: JSON, _ key: String, max: Int) throws(QuadError) -> String? {
        guard let value = body[key], !value.isNull else { return nil }
        guard let s = value.string else { throw .badRequest("body.\(key) must be a string, got \(value.typeName)") }
        guard s.unicodeScalars.count <= max else { throw .badRequest("body.\(key) is longer than \(max) characters (max_query_length)") }
        return s
    }

    static func list(_ db: Database, _ body: JSON) throws -> JSON {
        let category = try optionalString(body, "category", max: 64)
        let collection = try optionalString(body, "collection", max: 64)
        let q = try optionalString(body, "q", max: maxQueryLength)
        let offset = body["offset"]?.int ?? 0
        let limit = body["limit"]?.int ?? 20
        if let v = body["offset"], v.int == nil { throw QuadError.badRequest("body.offset must be an integer, got \(v.typeName)") }
        if let v = body["limit"], v.int == nil { throw QuadError.badRequest("body.limit must be an integer, got \(v.typeName)") }
        guard offset >= 0 else { throw QuadError.badRequest("body.offset must be >= 0") }
        guard (1...maxPageSize).contains(limit) else { throw QuadError.badRequest("body.limit must be between 1 and \(maxPageSize) (max_page_size)") }
        let minPrice = try number(body, "min_price")
        let maxPrice = try number(body, "max_price")
        let inStock = try flag(body, "in_stock")
        let sort = try optionalString(body, "sort", max: 32) ?? "name"
        guard let order = sortOrders[sort] else {
            throw QuadError.badRequest("body.sort must be one of \(sortOrders.keys.sorted().joined(separator: ", ")), got '\(sort)'")
        }
        if let category, !categories.contains(category) {
            throw QuadError.badRequest("unknown category '\(category)': expected one of \(categories.joined(separator: ", "))")
        }
        var conditions: [String] = []
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
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let total = try db.queryOne("SELECT COUNT(*) AS n FROM products \(filter)", params)?.int("n") ?? 0
        params.append(.int(limit))
        params.append(.int(offset))
        let rows = try db.query("SELECT * FROM products \(filter) ORDER BY \(order) LIMIT $\(params.count - 1) OFFSET $\(params.count)", params)
        return ["products": .array(rows.map(product)), "total": .int(total), "offset": .int(offset), "limit": .int(limit)]
    }

    /// Sort orders of a listing, by name in the request.
    static let sortOrders = [
        "name": "name, id", "price": "price_value, id", "-price": "price_value DESC, id",
        "stock": "stock DESC, id", "newest": "id DESC",
    ]

    static func number(_ body: JSON, _ key: String) throws(QuadError) -> Double? {
        guard let v = body[key], !v.isNull else { return nil }
        guard let d = v.double, d >= 0, d <= 1e9 else { throw .badRequest("body.\(key) must be a number from 0 to 1000000000") }
        return d
    }

    static func flag(_ body: JSON, _ key: String) throws(QuadError) -> Bool {
        guard let v = body[key], !v.isNull else { return false }
        guard let b = v.bool else { throw .badRequest("body.\(key) must be true or false, got \(v.typeName)") }
        return b
    }

    static func escapeLike(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
    }

    /// A product row as the seeds' model.
    static func product(_ r: Row) -> JSON {
        [
            "id": .string(r.string("id")), "name": .string(r.string("name")),
            "price": ["value": .double(r.double("price_value")), "currency": .string(r.string("currency"))],
            "info": (try? JSON.parse(r.string("info"))) ?? .object([:]),
            "type": .string(r.string("type")), "imageUrl": .string(r.string("image_url")),
            "category": .string(r.string("category")), "collection": .string(r.string("collection")),
            "stock": .int(r.int("stock")),
        ]
    }
}
