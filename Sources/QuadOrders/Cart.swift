import QuadCatalogCopy
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Each user's cart (ShopEase's cart with quantities): lines of product and
/// quantity, shown with unit prices, line totals, the fee and the total
/// from the local copy of the catalog. Every change answers with the cart
/// as it is now, so a phone redraws from the reply.
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
            return try view(db, user: user, fees: fees)
        }

        h.mutation(C.cartSet) { req, body in
            let user = try req.requireUser()
            let (product, quantity) = (body.product, body.quantity)
            if quantity == 0 {
                try db.execute("DELETE FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(product))
            } else if try db.execute("UPDATE cart_lines SET quantity = $3 WHERE user_id = $1 AND product = $2",
                                     .text(user), .text(product), .int(quantity)) == 0 {
                guard try CatalogCopy.admits(db, product) else { throw QuadError.notFound("no product with id '\(product)' in the catalog") }
                try insertLine(db, user: user, product: product, quantity: quantity)
            }
            return try view(db, user: user, fees: fees)
        }

        h.mutation(C.cartRemove) { req, body in
            let user = try req.requireUser()
            try db.execute("DELETE FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(body.product))
            return try view(db, user: user, fees: fees)
        }

        h.mutation(C.cartClear) { req, _ in
            let user = try req.requireUser()
            try db.execute("DELETE FROM cart_lines WHERE user_id = $1", .text(user))
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
    /// what the user added since stays.
    static func takeOut(_ db: Database, user: String, items: [OrderItem]) throws {
        for item in items {
            try db.execute("DELETE FROM cart_lines WHERE user_id = $1 AND product = $2 AND quantity <= $3", .text(user), .text(item.product), .int(item.quantity))
            try db.execute("UPDATE cart_lines SET quantity = quantity - $3 WHERE user_id = $1 AND product = $2", .text(user), .text(item.product), .int(item.quantity))
        }
    }

    /// The cart as the phone shows it. A line whose product the local copy
    /// does not hold yet has no price and counts in no total.
    static func view(_ db: Database, user: String, fees: FeeSchedule) throws -> Contract.Orders.Cart {
        let rows = try db.query("""
            SELECT c.product AS product, c.quantity AS quantity, p.id AS id, p.name AS name, p.price_value AS price_value,
                   p.currency AS currency, p.category AS category, p.image_url AS image_url, p.stock AS stock
            FROM cart_lines c LEFT JOIN catalog_products p ON p.id = c.product
            WHERE c.user_id = $1 ORDER BY c.added_ms, c.product
            """, .text(user))
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
                     subtotal: Cents.amount(subtotal), fee: Cents.amount(fee), total: Cents.amount(subtotal + fee))
    }
}
