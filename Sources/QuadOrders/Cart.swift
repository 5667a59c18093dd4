import QuadCatalogCopy
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Each user's cart (ShopEase's cart with quantities): lines of product and
/// quantity, shown with unit prices, line totals, the fee and the total
/// from the local copy of the catalog. Every change answers with the cart
/// as it is now, so a phone redraws from the reply.
///
/// Each user's cart has a version (issue 30 pt 1) from a counter of its
/// own in `cart_versions`, one per user, taken in the transaction of each
/// change of the cart (an add, a set, a remove, a clear, a confirmed order
/// taking its lines out): a change of the cart publishes no event, so no
/// outbox seq could be the version. A request that changes nothing takes
/// no number. Every answer that gives the cart gives its version, read in
/// the same statement as its lines.
enum Cart {
    static let migration = """
        CREATE TABLE cart_lines (
            user_id TEXT NOT NULL,
            product TEXT NOT NULL,
            quantity BIGINT NOT NULL CHECK (quantity > 0),
            added_ms BIGINT NOT NULL,
            PRIMARY KEY (user_id, product)
        );
        """

    static let versionMigration = """
        CREATE TABLE cart_versions (
            user_id TEXT PRIMARY KEY,
            version BIGINT NOT NULL
        );
        """

    /// Most lines in a cart (`max_cart_lines`): what the catalog holds in one order.
    static let maxLines: Int64 = 50
    /// Most units of one product in a cart or an order (`max_quantity`).
    static let maxQuantity = Contract.Orders.maxQuantity

    static func register(_ h: Handlers, db: Database, fees: FeeSchedule) {
        typealias C = Contract.Orders

        h.mutation(C.cartAdd) { req, body in
            let user = try req.requireUser()
            let (product, quantity) = (body.product, body.quantity)
            guard try CatalogCopy.admits(db, product) else { throw QuadError.notFound("no product with id '\(product)' in the catalog") }
            let added = try db.execute("""
                UPDATE cart_lines SET quantity = quantity + $3 WHERE user_id = $1 AND product = $2 AND quantity + $3 <= $4
                """, .text(user), .text(product), .int(quantity), .int(maxQuantity))
            if added == 0 {
                if let line = try db.queryOne("SELECT quantity FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(product)) {
                    throw QuadError.conflict("the cart would hold \(line.int("quantity") + quantity) of '\(product)', over \(maxQuantity) (max_quantity)")
                }
                try insertLine(db, user: user, product: product, quantity: quantity)
            }
            try bump(db, user: user)
            return try view(db, user: user, fees: fees)
        }

        h.mutation(C.cartSet) { req, body in
            let user = try req.requireUser()
            let (product, quantity) = (body.product, body.quantity)
            let changed: Bool
            if quantity == 0 {
                changed = try db.execute("DELETE FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(product)) > 0
            } else if let line = try db.queryOne("SELECT quantity FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(product)) {
                changed = line.int("quantity") != quantity
                if changed {
                    try db.execute("UPDATE cart_lines SET quantity = $3 WHERE user_id = $1 AND product = $2", .text(user), .text(product), .int(quantity))
                }
            } else {
                guard try CatalogCopy.admits(db, product) else { throw QuadError.notFound("no product with id '\(product)' in the catalog") }
                try insertLine(db, user: user, product: product, quantity: quantity)
                changed = true
            }
            if changed { try bump(db, user: user) }
            return try view(db, user: user, fees: fees)
        }

        h.mutation(C.cartRemove) { req, body in
            let user = try req.requireUser()
            if try db.execute("DELETE FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(body.product)) > 0 {
                try bump(db, user: user)
            }
            return try view(db, user: user, fees: fees)
        }

        h.mutation(C.cartClear) { req, _ in
            let user = try req.requireUser()
            if try db.execute("DELETE FROM cart_lines WHERE user_id = $1", .text(user)) > 0 {
                try bump(db, user: user)
            }
            return try view(db, user: user, fees: fees)
        }

        h.query(C.cartView) { req, _ in
            try view(db, user: try req.requireUser(), fees: fees)
        }
    }

    static func insertLine(_ db: Database, user: String, product: String, quantity: Int64) throws {
        let lines = try db.queryOne("SELECT COUNT(*) AS n FROM cart_lines WHERE user_id = $1", .text(user))?.int("n") ?? 0
        guard lines < maxLines else {
            throw QuadError.conflict("the cart already holds \(maxLines) products (max_cart_lines): place or remove some first")
        }
        try db.execute("INSERT INTO cart_lines (user_id, product, quantity, added_ms) VALUES ($1, $2, $3, $4)",
                       .text(user), .text(product), .int(quantity), .int(Int64(Clock.nowMillis())))
    }

    /// The lines of `user`'s cart, oldest first, as an order from the cart takes them.
    static func lines(_ db: Database, user: String) throws -> [OrderItem] {
        try db.query("SELECT product, quantity FROM cart_lines WHERE user_id = $1 ORDER BY added_ms, product", .text(user)).map {
            OrderItem(product: $0.string("product"), quantity: $0.int("quantity"))
        }
    }

    /// Takes the units an order bought out of the cart, after it is confirmed;
    /// what the user added since stays. The cart takes a new version when
    /// that changed it, in the caller's transaction.
    static func takeOut(_ db: Database, user: String, items: [OrderItem]) throws {
        var changed = 0
        for item in items {
            changed += try db.execute("DELETE FROM cart_lines WHERE user_id = $1 AND product = $2 AND quantity <= $3", .text(user), .text(item.product), .int(item.quantity))
            changed += try db.execute("UPDATE cart_lines SET quantity = quantity - $3 WHERE user_id = $1 AND product = $2", .text(user), .text(item.product), .int(item.quantity))
        }
        if changed > 0 { try bump(db, user: user) }
    }

    /// Gives `user`'s cart the next number of its counter, in the caller's
    /// transaction, and returns it.
    @discardableResult
    static func bump(_ db: Database, user: String) throws -> Int64 {
        guard let row = try db.queryOne("""
            INSERT INTO cart_versions (user_id, version) VALUES ($1, 1)
            ON CONFLICT (user_id) DO UPDATE SET version = cart_versions.version + 1
            RETURNING version
            """, .text(user)) else { throw QuadError.internal("cart_versions gave no version") }
        return row.int("version")
    }

    /// The cart as the phone shows it. A line whose product the local copy
    /// does not hold yet has no price and counts in no total. Its version
    /// comes in the same statement as its lines (one row with no line when
    /// the cart is empty), so that on PostgreSQL, where each statement reads
    /// what is committed when it starts, a change committed between two reads
    /// cannot give lines of one version under the number of another.
    static func view(_ db: Database, user: String, fees: FeeSchedule) throws -> Contract.Orders.Cart {
        let all = try db.query("""
            SELECT COALESCE(v.version, 0) AS version, c.product AS product, c.quantity AS quantity, p.id AS id, p.name AS name,
                   p.price_value AS price_value, p.currency AS currency, p.category AS category, p.image_url AS image_url, p.stock AS stock
            FROM (SELECT CAST($1 AS TEXT) AS user_id) u
                LEFT JOIN cart_versions v ON v.user_id = u.user_id
                LEFT JOIN cart_lines c ON c.user_id = u.user_id
                LEFT JOIN catalog_products p ON p.id = c.product
            ORDER BY c.added_ms, c.product
            """, .text(user))
        let version = all.first?.int("version") ?? 0
        let rows = all.filter { !$0["product"].isNull }
        var subtotal: Int64 = 0
        var fee: Int64 = 0
        var units: Int64 = 0
        var currency: String?
        let lines: [Contract.Orders.Cart.Line] = rows.map { r in
            let quantity = r.int("quantity")
            units += quantity
            var line = Contract.Orders.Cart.Line(product: r.string("product"), quantity: quantity, available: false)
            guard !r["id"].isNull else { return line }
            let category = r.string("category")
            let lineCents = Cents.of(r.double("price_value")) * quantity
            let lineFee = fees.fee(cents: lineCents, category: category)
            subtotal += lineCents
            fee += lineFee
            currency = currency ?? r.string("currency")
            (line.name, line.category, line.imageUrl) = (r.string("name"), category, r.string("image_url"))
            line.stock = r.int("stock")
            line.available = r.int("stock") >= quantity
            (line.unitPrice, line.lineTotal) = (r.double("price_value"), Cents.amount(lineCents))
            (line.feeRate, line.fee) = (fees.rate(category), Cents.amount(lineFee))
            return line
        }
        return .init(lines: lines, units: units, currency: currency ?? "USD",
                     subtotal: Cents.amount(subtotal), fee: Cents.amount(fee), total: Cents.amount(subtotal + fee), version: version)
    }
}
