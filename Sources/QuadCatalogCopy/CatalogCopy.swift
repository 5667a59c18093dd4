import QuadContract
import QuadStore
import QuadWire

/// A service's own copy of the catalog: what a list or a cart shows beside
/// each product (name, price, category, image, stock), kept from catalog's
/// `catalog.product.changed` and `catalog.stock.changed` events, so a
/// request never calls the catalog. Favorites and orders keep one each.
public enum CatalogCopy {
    public static let migration = """
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

    public static let events: Set<String> = [Contract.Catalog.productChanged.type, Contract.Catalog.stockChanged.type]

    /// Applies one catalog event, inside the feed's transaction. Each body
    /// is read with its contract type; one that does not decode (an older
    /// or a foreign publisher's) is skipped, as a copy that lags would.
    public static func apply(_ db: Database, _ event: Envelope) throws {
        switch event.type {
        case Contract.Catalog.productChanged.type:
            guard let p = try? Contract.Catalog.Product(json: event.body) else { return }
            try db.execute("""
                INSERT INTO catalog_products (id, name, price_value, currency, category, image_url, stock)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (id) DO UPDATE SET name = excluded.name, price_value = excluded.price_value, currency = excluded.currency,
                    category = excluded.category, image_url = excluded.image_url, stock = excluded.stock
                """, .text(p.id), .text(p.name), .double(p.price.value), .text(p.price.currency),
                .text(p.category), .text(p.imageUrl), .int(p.stock))
        case Contract.Catalog.stockChanged.type:
            guard let change = try? Contract.Catalog.Stock.Changed(json: event.body) else { return }
            try db.execute("UPDATE catalog_products SET stock = $1 WHERE id = $2", .int(change.stock), .text(change.product))
        default:
            return
        }
    }

    /// Whether `product` may be referred to. The copy can lag the catalog by
    /// the time an event takes to arrive, and is empty until the first
    /// catch-up: an empty copy accepts every id rather than refuse real
    /// products at start; a loaded copy refuses ids it does not hold.
    public static func admits(_ db: Database, _ product: String) throws -> Bool {
        if try db.queryOne("SELECT 1 AS x FROM catalog_products WHERE id = $1", .text(product)) != nil { return true }
        return try db.queryOne("SELECT 1 AS x FROM catalog_products LIMIT 1") == nil
    }

    /// What a list shows of a product, or null when the copy does not hold it.
    public static func summary(_ db: Database, _ product: String) throws -> JSON {
        guard let r = try db.queryOne("SELECT * FROM catalog_products WHERE id = $1", .text(product)) else { return .null }
        return summary(r)
    }

    public static func summary(_ r: Row) -> JSON {
        [
            "name": .string(r.string("name")),
            "price": ["value": .double(r.double("price_value")), "currency": .string(r.string("currency"))],
            "category": .string(r.string("category")), "imageUrl": .string(r.string("image_url")),
            "stock": .int(r.int("stock")),
        ]
    }

    public static func currency(_ db: Database, _ product: String) throws -> String? {
        try db.queryOne("SELECT currency FROM catalog_products WHERE id = $1", .text(product))?.optionalString("currency")
    }
}
