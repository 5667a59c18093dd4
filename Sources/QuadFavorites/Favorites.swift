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
///
/// Each favorite, a (user, product) pair, has a version (issue 30 pt 1):
/// the seq of the last `favorites.added` or `favorites.removed` about it,
/// written in the transaction that published it, so that a phone can tell
/// which of two copies is newer whichever way each came (a reply, a list).
/// It is kept in `favorite_versions`, not on the favorite's row, because a
/// removal deletes that row and its version must outlive it: "not a
/// favorite since version 9" is a copy too.
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
        Migration(2, """
            CREATE TABLE favorite_versions (
                user_id TEXT NOT NULL,
                product TEXT NOT NULL,
                version BIGINT NOT NULL,
                PRIMARY KEY (user_id, product)
            );
            """),
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
        typealias C = Contract.Favorites

        h.mutation(C.add) { req, body in
            let user = try req.requireUser()
            let product = body.product
            guard try CatalogCopy.admits(db, product) else { throw QuadError.notFound("no product with id '\(product)' in the catalog") }
            let added = try db.execute("INSERT INTO favorites (user_id, product, created_ms) VALUES ($1, $2, $3) ON CONFLICT (user_id, product) DO NOTHING",
                                       .text(user), .text(product), .int(Int64(Clock.nowMillis()))) == 1
            if added {
                // Throwing rolls the insert back.
                guard try db.queryOne("SELECT COUNT(*) AS n FROM favorites WHERE user_id = $1", .text(user))?.int("n") ?? 0 <= maxFavorites else {
                    throw QuadError.conflict("a user keeps at most \(maxFavorites) favorites (max_favorites): remove one first")
                }
                return C.Change(product: product, favorite: true, changed: true, users: try users(db, product),
                                version: try publish(db, C.added, user: user, product: product))
            }
            return C.Change(product: product, favorite: true, changed: false, users: try users(db, product),
                            version: try version(db, user: user, product: product))
        }

        h.mutation(C.remove) { req, body in
            let user = try req.requireUser()
            let product = body.product
            let removed = try db.execute("DELETE FROM favorites WHERE user_id = $1 AND product = $2", .text(user), .text(product)) == 1
            let version = removed ? try publish(db, C.removed, user: user, product: product) : try version(db, user: user, product: product)
            return C.Change(product: product, favorite: false, changed: removed, users: try users(db, product), version: version)
        }

        h.query(C.list) { req, body in
            let user = try req.requireUser()
            // The list's version first: a change after it shows in the rows
            // at its own version, never as a list newer than it says.
            let listVersion = try db.queryOne("SELECT MAX(version) AS v FROM favorite_versions WHERE user_id = $1", .text(user))?["v"].int ?? 0
            let total = try db.queryOne("SELECT COUNT(*) AS n FROM favorites WHERE user_id = $1", .text(user))?.int("n") ?? 0
            let rows = try db.query("""
                SELECT f.product AS product, f.created_ms AS created_ms, COALESCE(v.version, 0) AS version, p.id AS id, p.name AS name,
                       p.price_value AS price_value, p.currency AS currency, p.category AS category, p.image_url AS image_url, p.stock AS stock
                FROM favorites f LEFT JOIN catalog_products p ON p.id = f.product
                    LEFT JOIN favorite_versions v ON v.user_id = f.user_id AND v.product = f.product
                WHERE f.user_id = $1 ORDER BY f.created_ms DESC, f.product LIMIT $2 OFFSET $3
                """, .text(user), .int(body.limit), .int(body.offset))
            let items = rows.map { r in
                C.List.Item(product: r.string("product"), addedAt: r.int("created_ms"), summary: r["id"].isNull ? nil : CatalogCopy.summary(r),
                            version: r.int("version"))
            }
            return C.List.Reply(items: items, total: total, offset: body.offset, limit: body.limit, version: listVersion)
        }

        h.query(C.count) { _, body in
            C.CountReply(product: body.product, users: try users(db, body.product))
        }

        h.query(C.top) { _, body in
            var params: [SQLValue] = [.int(body.limit)]
            var filter = ""
            if let c = body.category {
                params.append(.text(c))
                filter = "WHERE f.product IN (SELECT id FROM catalog_products WHERE category = $2)"
            }
            let rows = try db.query("""
                SELECT f.product AS product, COUNT(*) AS users FROM favorites f \(filter)
                GROUP BY f.product ORDER BY users DESC, f.product LIMIT $1
                """, params)
            return C.Top.Reply(products: try rows.map { r in
                let summary = try CatalogCopy.summary(db, r.string("product"))
                return C.Top.Product(product: r.string("product"), users: r.int("users"), summary: summary.isNull ? nil : summary)
            })
        }
    }

    /// Appends `event` about the user's favorite `product` to the outbox
    /// and makes its seq the favorite's version, in the caller's transaction.
    static func publish(_ db: Database, _ event: TypedEvent<Contract.Favorites.Changed>, user: String, product: String) throws -> Int64 {
        let seq = try Outbox.append(db, type: event.type, body: Contract.Favorites.Changed(user: user, product: product).json)
        try db.execute("""
            INSERT INTO favorite_versions (user_id, product, version) VALUES ($1, $2, $3)
            ON CONFLICT (user_id, product) DO UPDATE SET version = excluded.version
            """, .text(user), .text(product), .int(seq))
        return seq
    }

    /// The favorite's version: the seq of its last event, 0 when it never had one.
    static func version(_ db: Database, user: String, product: String) throws -> Int64 {
        try db.queryOne("SELECT version FROM favorite_versions WHERE user_id = $1 AND product = $2", .text(user), .text(product))?.int("version") ?? 0
    }

    static func users(_ db: Database, _ product: String) throws -> Int64 {
        try db.queryOne("SELECT COUNT(*) AS n FROM favorites WHERE product = $1", .text(product))?.int("n") ?? 0
    }
}
