import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// "For You": products for the calling user, ranked by how much they care
/// for each category, from the categories of their profile, their favorites
/// and their purchases. All three come from other services' events, kept in
/// local tables, so a request never calls another service.
extension Catalog {
    static let forYouMigrations: [Migration] = [
        Migration(3, """
            CREATE TABLE user_categories (user_id TEXT NOT NULL, category TEXT NOT NULL, PRIMARY KEY (user_id, category));
            CREATE TABLE user_favorites (user_id TEXT NOT NULL, product TEXT NOT NULL, PRIMARY KEY (user_id, product));
            CREATE TABLE user_purchases (user_id TEXT NOT NULL, order_id TEXT NOT NULL, product TEXT NOT NULL, quantity BIGINT NOT NULL,
                                         PRIMARY KEY (order_id, product));
            CREATE INDEX user_purchases_user ON user_purchases (user_id);
            """),
    ]

    /// Weights of each signal in a category's score.
    static let profileWeight: Int64 = 3
    static let favoriteWeight: Int64 = 2
    static let purchaseWeight: Int64 = 2

    /// Applies an event of accounts, favorites or orders to the projections.
    static func applyForYou(_ db: Database, _ e: Envelope) throws {
        let b = e.body
        typealias A = Contract.Accounts
        typealias F = Contract.Favorites
        switch e.type {
        case A.userRegistered.type, A.userUpdated.type:
            guard let profile = try? A.PublicProfile(json: b) else { return }
            try applySeller(db, profile)
            try db.execute("DELETE FROM user_categories WHERE user_id = $1", .text(profile.user))
            for c in profile.categories where Catalog.categories.contains(c) {
                try db.execute("INSERT INTO user_categories (user_id, category) VALUES ($1, $2) ON CONFLICT DO NOTHING", .text(profile.user), .text(c))
            }
        case F.added.type:
            guard let f = try? F.Changed(json: b) else { return }
            try db.execute("INSERT INTO user_favorites (user_id, product) VALUES ($1, $2) ON CONFLICT DO NOTHING", .text(f.user), .text(f.product))
        case F.removed.type:
            guard let f = try? F.Changed(json: b) else { return }
            try db.execute("DELETE FROM user_favorites WHERE user_id = $1 AND product = $2", .text(f.user), .text(f.product))
        // orders' events are read by field: their bodies are orders' to type.
        case "orders.confirmed":
            try applySales(db, e)
            guard let user = b["user"]?.string, let order = b["order"]?.string else { return }
            for item in b["items"]?.array ?? [] {
                guard let product = item["product"]?.string else { continue }
                try db.execute("INSERT INTO user_purchases (user_id, order_id, product, quantity) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                               .text(user), .text(order), .text(product), .int(item["quantity"]?.int ?? 1))
            }
        case "orders.cancelled":
            try applySales(db, e)
            guard let order = b["order"]?.string else { return }
            try db.execute("DELETE FROM user_purchases WHERE order_id = $1", .text(order))
        case "orders.returned":
            try applySales(db, e)
        default:
            return
        }
    }

    static let forYouEvents: Set<String> = [
        "accounts.user.registered", "accounts.user.updated", "favorites.added", "favorites.removed", "orders.confirmed", "orders.cancelled",
        "orders.returned",
    ]

    /// The calling user's category scores and the products they rank.
    static func forYou(_ db: Database, user: String, limit: Int64) throws -> Contract.Catalog.ForYou.Reply {
        var scores: [String: Int64] = [:]
        for r in try db.query("SELECT category FROM user_categories WHERE user_id = $1", .text(user)) {
            scores[r.string("category"), default: 0] += profileWeight
        }
        for r in try db.query("SELECT p.category AS category, COUNT(*) AS n FROM user_favorites f JOIN products p ON p.id = f.product WHERE f.user_id = $1 GROUP BY p.category", .text(user)) {
            scores[r.string("category"), default: 0] += favoriteWeight * r.int("n")
        }
        for r in try db.query("SELECT p.category AS category, COUNT(*) AS n FROM user_purchases u JOIN products p ON p.id = u.product WHERE u.user_id = $1 GROUP BY p.category", .text(user)) {
            scores[r.string("category"), default: 0] += purchaseWeight * r.int("n")
        }
        let ranked = scores.filter { $0.value > 0 }.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
        var products: [Contract.Catalog.Product] = []
        if !ranked.isEmpty {
            // Products in the user's categories, best category first; what
            // they already favor or bought is left out; in stock only.
            let cases = ranked.enumerated().map { "WHEN '\($0.element.key)' THEN \($0.offset)" }.joined(separator: " ")
            let names = ranked.map { "'\($0.key)'" }.joined(separator: ", ")
            let rows = try db.query("""
                SELECT * FROM products
                WHERE category IN (\(names)) AND stock > 0 AND visible = 1
                  AND id NOT IN (SELECT product FROM user_favorites WHERE user_id = $1)
                  AND id NOT IN (SELECT product FROM user_purchases WHERE user_id = $1)
                ORDER BY CASE category \(cases) END, name, id
                LIMIT $2
                """, .text(user), .int(limit))
            products = rows.map(product)
        }
        return .init(products: products, categories: ranked.map { .init(name: $0.key, score: $0.value) })
    }
}
