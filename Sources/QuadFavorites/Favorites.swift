import QuadCatalogCopy
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The favorites service: each user's saved products (UniTrade's Favorites
/// screen), listed with product summaries from a local copy of the catalog,
/// and how many users favor each product.
///
/// Adding and removing are idempotent twice over: by envelope id (a retry
/// gets the stored reply) and by state (adding a favorite twice keeps one
/// row). `favorites.added` and `favorites.removed` are published only when
/// the state changed, so a follower that counts them stays exact.
public enum Favorites: ServiceDomain {
    public static let name = "favorites"
    public static let summary = "each user's favorite products, with product summaries and counts"

    /// Largest page of `favorites.list` (`max_page_size`).
    public static let maxPageSize = Contract.Favorites.maxPageSize
    /// Largest `favorites.top` (`max_top`).
    public static let maxTop = Contract.Favorites.maxTop
    /// UniTrade's categories, as the catalog has them.
    static let categories = ["Study", "Tech", "Creative", "Lab", "Personal", "Others"]
    /// Most favorites one user keeps (`max_favorites`).
    public static let maxFavorites: Int64 = 1000

    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE favorites (
                user_id TEXT NOT NULL,
                product TEXT NOT NULL,
                created_ms BIGINT NOT NULL,
                PRIMARY KEY (user_id, product)
            );
            CREATE INDEX favorites_by_product ON favorites (product);
            CREATE INDEX favorites_by_time ON favorites (user_id, created_ms);
            """ + CatalogCopy.migration),
    ]

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        register(worker.handlers, db: db)
        try worker.subscribe(to: ["catalog"], wants: { CatalogCopy.events.contains($0.type) }) { event in
            try CatalogCopy.apply(db, event)
        }
    }

    /// Registers the handlers; split from ``install`` so tests can drive
    /// them without a broker.
    public static func register(_ h: Handlers, db: Database) {
        h.mutation("favorites.add") { req in
            let user = try req.requireUser()
            let product = try Fields(req, allowed: ["product"]).string("product")
            guard try CatalogCopy.admits(db, product) else { throw QuadError.notFound("no product with id '\(product)' in the catalog") }
            let added = try db.execute("INSERT INTO favorites (user_id, product, created_ms) VALUES ($1, $2, $3) ON CONFLICT (user_id, product) DO NOTHING",
                                       .text(user), .text(product), .int(Int64(Clock.nowMillis()))) == 1
            if added {
                // Throwing rolls the insert back.
                guard try db.queryOne("SELECT COUNT(*) AS n FROM favorites WHERE user_id = $1", .text(user))?.int("n") ?? 0 <= maxFavorites else {
                    throw QuadError.conflict("a user keeps at most \(maxFavorites) favorites (max_favorites): remove one first")
                }
                try Outbox.append(db, type: "favorites.added", body: ["user": .string(user), "product": .string(product)])
            }
            return ["product": .string(product), "favorite": true, "changed": .bool(added), "users": .int(try users(db, product))]
        }

        h.mutation("favorites.remove") { req in
            let user = try req.requireUser()
            let product = try Fields(req, allowed: ["product"]).string("product")
            let removed = try db.execute("DELETE FROM favorites WHERE user_id = $1 AND product = $2", .text(user), .text(product)) == 1
            if removed {
                try Outbox.append(db, type: "favorites.removed", body: ["user": .string(user), "product": .string(product)])
            }
            return ["product": .string(product), "favorite": false, "changed": .bool(removed), "users": .int(try users(db, product))]
        }

        h.query("favorites.list") { req in
            let user = try req.requireUser()
            let f = try Fields(req, allowed: ["offset", "limit"])
            let offset = try f.int("offset", default: 0, in: 0...Int64(Int32.max))
            let limit = try f.int("limit", default: 50, in: 1...maxPageSize, limit: "max_page_size")
            let total = try db.queryOne("SELECT COUNT(*) AS n FROM favorites WHERE user_id = $1", .text(user))?.int("n") ?? 0
            let rows = try db.query("""
                SELECT f.product AS product, f.created_ms AS created_ms, p.id AS id, p.name AS name, p.price_value AS price_value,
                       p.currency AS currency, p.category AS category, p.image_url AS image_url, p.stock AS stock
                FROM favorites f LEFT JOIN catalog_products p ON p.id = f.product
                WHERE f.user_id = $1 ORDER BY f.created_ms DESC, f.product LIMIT $2 OFFSET $3
                """, .text(user), .int(limit), .int(offset))
            let items: [JSON] = rows.map { r in
                ["product": .string(r.string("product")), "added_at": .int(r.int("created_ms")),
                 "summary": r["id"].isNull ? .null : CatalogCopy.summary(r)]
            }
            return ["items": .array(items), "total": .int(total), "offset": .int(offset), "limit": .int(limit)]
        }

        h.query("favorites.count") { req in
            let product = try Fields(req, allowed: ["product"]).string("product")
            return ["product": .string(product), "users": .int(try users(db, product))]
        }

        h.query("favorites.top") { req in
            let f = try Fields(req, allowed: ["limit", "category"])
            let limit = try f.int("limit", default: 10, in: 1...maxTop, limit: "max_top")
            let category = try f.optionalString("category", max: 32)
            if let category, !categories.contains(category) {
                throw QuadError.badRequest("unknown category '\(category)': expected one of \(categories.joined(separator: ", "))")
            }
            var params: [SQLValue] = [.int(limit)]
            var filter = ""
            if let c = category {
                params.append(.text(c))
                filter = "WHERE f.product IN (SELECT id FROM catalog_products WHERE category = $2)"
            }
            let rows = try db.query("""
                SELECT f.product AS product, COUNT(*) AS users FROM favorites f \(filter)
                GROUP BY f.product ORDER BY users DESC, f.product LIMIT $1
                """, params)
            return ["products": .array(try rows.map { r in
                ["product": .string(r.string("product")), "users": .int(r.int("users")), "summary": try CatalogCopy.summary(db, r.string("product"))]
            })]
        }
    }

    static func users(_ db: Database, _ product: String) throws -> Int64 {
        try db.queryOne("SELECT COUNT(*) AS n FROM favorites WHERE product = $1", .text(product))?.int("n") ?? 0
    }
}
