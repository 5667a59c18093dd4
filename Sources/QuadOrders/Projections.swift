import QuadRuntime
import QuadStore
import QuadWire

/// The orders' own copy of the catalog: names, prices, categories and stock
/// for the cart view, kept from catalog's `catalog.product.changed` and
/// `catalog.stock.changed` events. An order's price is not taken from
/// here: the catalog's stock hold answers with the price it holds at.
enum CatalogCopy {
    static let migration = """
        CREATE TABLE catalog_products (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            price_value DOUBLE PRECISION NOT NULL,
            currency TEXT NOT NULL,
            category TEXT NOT NULL,
            image_url TEXT NOT NULL,
            stock BIGINT NOT NULL
        );
        """

    static let events: Set<String> = ["catalog.product.changed", "catalog.stock.changed"]

    /// Applies one catalog event, inside the feed's transaction.
    static func apply(_ db: Database, _ event: Envelope) throws {
        let b = event.body
        switch event.type {
        case "catalog.product.changed":
            guard let id = b["id"]?.string, let name = b["name"]?.string, let price = b["price"]?["value"]?.double else { return }
            try db.execute("""
                INSERT INTO catalog_products (id, name, price_value, currency, category, image_url, stock)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (id) DO UPDATE SET name = excluded.name, price_value = excluded.price_value, currency = excluded.currency,
                    category = excluded.category, image_url = excluded.image_url, stock = excluded.stock
                """, .text(id), .text(name), .double(price), .text(b["price"]?["currency"]?.string ?? "USD"),
                .text(b["category"]?.string ?? "Others"), .text(b["imageUrl"]?.string ?? ""), .int(b["stock"]?.int ?? 0))
        case "catalog.stock.changed":
            guard let id = b["product"]?.string, let stock = b["stock"]?.int else { return }
            try db.execute("UPDATE catalog_products SET stock = $1 WHERE id = $2", .int(stock), .text(id))
        default:
            return
        }
    }

    /// Whether `product` may go into a cart. The copy can lag the catalog by
    /// the time an event takes to arrive, and is empty until the first
    /// catch-up: an empty copy accepts every id rather than refuse real
    /// products at start; a loaded copy refuses ids it does not hold. The
    /// catalog has the last word when the order is placed.
    static func admits(_ db: Database, _ product: String) throws -> Bool {
        if try db.queryOne("SELECT 1 AS x FROM catalog_products WHERE id = $1", .text(product)) != nil { return true }
        return try db.queryOne("SELECT 1 AS x FROM catalog_products LIMIT 1") == nil
    }

    static func currency(_ db: Database, _ product: String) throws -> String? {
        try db.queryOne("SELECT currency FROM catalog_products WHERE id = $1", .text(product))?.optionalString("currency")
    }
}

/// What orders knows of its buyers: the semester an order records (UniTrade
/// asks which semester buys most), kept from accounts' events. A buyer
/// whose account events have not arrived has semester null.
enum Buyers {
    static let migration = """
        CREATE TABLE buyers (
            user_id TEXT PRIMARY KEY,
            semester TEXT NOT NULL
        );
        """

    static let events: Set<String> = ["accounts.user.registered", "accounts.user.updated"]

    /// Applies one accounts event; an update without `semester` keeps the one known.
    static func apply(_ db: Database, _ event: Envelope) throws {
        guard let user = event.body["user"]?.string, let semester = event.body["semester"] else { return }
        try db.execute("""
            INSERT INTO buyers (user_id, semester) VALUES ($1, $2)
            ON CONFLICT (user_id) DO UPDATE SET semester = excluded.semester
            """, .text(user), .text(semester.text))
    }

    /// The buyer's semester as accounts published it (a string or a number), or null.
    static func semester(_ db: Database, _ user: String) throws -> JSON {
        guard let row = try db.queryOne("SELECT semester FROM buyers WHERE user_id = $1", .text(user)) else { return .null }
        return (try? JSON.parse(row.string("semester"))) ?? .null
    }
}
