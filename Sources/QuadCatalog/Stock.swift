import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// A stock hold's state, as the contract names it (the store keeps its raw value).
typealias HoldStatus = Contract.Catalog.Stock.Hold.Status

/// Stock holds for orders. A hold takes all its items or none, with the
/// capacity checked inside the store (`UPDATE ... WHERE stock >= q`), so a
/// unit is never sold twice. Each call is idempotent by order id; a hold
/// neither confirmed nor released expires and returns its stock.
extension Catalog {
    static let stockMigrations: [Migration] = [
        Migration(2, """
            CREATE TABLE holds (
                order_id TEXT PRIMARY KEY,
                status TEXT NOT NULL,
                created_ms BIGINT NOT NULL,
                expires_ms BIGINT NOT NULL
            );
            CREATE INDEX holds_expiring ON holds (status, expires_ms);
            CREATE TABLE hold_items (
                order_id TEXT NOT NULL,
                product TEXT NOT NULL,
                quantity BIGINT NOT NULL,
                price DOUBLE PRECISION NOT NULL,
                category TEXT NOT NULL,
                PRIMARY KEY (order_id, product)
            );
            """),
        // A hold belongs to the user the order is for (issue 12): a service
        // asking for another user under the same order id learns nothing.
        Migration(4, "ALTER TABLE holds ADD COLUMN user_id TEXT NOT NULL DEFAULT ''"),
    ]

    /// 409 unless the hold of `order` is for the user the request acts for.
    /// Admins may act on any hold (an operator releasing stock by hand), and
    /// so may a service acting for no user (a check of the whole system).
    static func checkHolder(_ db: Database, _ req: Request, order: String) throws {
        guard req.role != "admin", let user = req.user, !user.isEmpty,
              let row = try db.queryOne("SELECT user_id FROM holds WHERE order_id = $1", .text(order)) else { return }
        // Holds made before holders were recorded have none, and stay usable.
        let holder = row.string("user_id")
        if !holder.isEmpty && holder != user {
            throw QuadError.conflict("order '\(order)' is another user's: its stock hold is not yours to see or change")
        }
    }

    /// Most lines in one hold (`max_hold_items`) and units per line (`max_hold_quantity`).
    public static let maxHoldItems = Contract.Catalog.maxHoldItems
    public static let maxHoldQuantity = Contract.Catalog.maxHoldQuantity

    static func registerStock(_ h: Handlers, db: Database, holdTTLms: Int64) {
        typealias C = Contract.Catalog
        // The contract has checked every bound (order 1 to 64, 1 to
        // max_hold_items lines, quantities 1 to max_hold_quantity) before a
        // handler runs; what is left is the store's.
        h.mutation(C.stockHold) { req, body in
            try req.requireService()
            let order = body.order
            try checkHolder(db, req, order: order)
            if let existing = try holdState(db, order) { return existing }
            // Lines naming the same product are one line of their sum.
            var wanted: [(product: String, quantity: Int64)] = []
            for item in body.items {
                if let n = wanted.firstIndex(where: { $0.product == item.product }) { wanted[n].quantity += item.quantity } else { wanted.append((item.product, item.quantity)) }
            }
            // A student's listing: never its seller's, never closed, only as it is traded.
            let mode = body.mode ?? "buy"
            for (product, _) in wanted where product.hasPrefix("l-") {
                try checkListingHold(db, product: product, buyer: req.user, mode: mode)
            }
            var short: [JSON] = []
            for (product, q) in wanted {
                let taken = try db.queryOne("UPDATE products SET stock = stock - $1 WHERE id = $2 AND stock >= $1 RETURNING stock", .int(q), .text(product))
                if taken == nil {
                    guard let row = try db.queryOne("SELECT stock FROM products WHERE id = $1", .text(product)) else {
                        throw QuadError.notFound("no product with id '\(product)'")
                    }
                    short.append(["product": .string(product), "requested": .int(q), "available": .int(row.int("stock"))])
                }
            }
            if !short.isEmpty {
                // Throwing rolls back every unit taken above: all or none.
                let names = short.map { "\($0["product"]!.string!) (requested \($0["requested"]!.int!), available \($0["available"]!.int!))" }
                throw QuadError.conflict("not enough stock: \(names.joined(separator: ", "))", details: ["short": .array(short)])
            }
            let now = Int64(Clock.nowMillis())
            // With confirm, held and confirmed at once: the saga's one call when it needs no pause between the two.
            let confirmed = body.confirm == true
            try db.execute("INSERT INTO holds (order_id, status, created_ms, expires_ms, user_id, mode, confirmed_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                           .text(order), .text((confirmed ? HoldStatus.confirmed : .held).rawValue), .int(now), .int(now + holdTTLms), .text(req.user ?? ""), .text(mode),
                           confirmed ? .int(now) : .null)
            for (product, q) in wanted {
                let row = try db.queryOne("SELECT price_value, category, stock, trade_mode, rent_rate FROM products WHERE id = $1", .text(product))!
                // A rental is held at the rate of now, as a sale at the price of now: a later edit of the listing changes neither.
                let rate: Double? = mode != "rent" ? nil
                    : row.optionalString("trade_mode") != nil ? row["rent_rate"].double : Contract.Catalog.seedRentRate(price: row.double("price_value"))
                try db.execute("INSERT INTO hold_items (order_id, product, quantity, price, category, rent_rate) VALUES ($1, $2, $3, $4, $5, $6)",
                               .text(order), .text(product), .int(q), .double(row.double("price_value")), .text(row.string("category")), .of(rate))
                try stockChanged(db, product: product, stock: row.int("stock"), delta: -q, reason: "hold", order: order)
            }
            return try holdState(db, order)!
        }

        h.mutation(C.stockConfirm) { req, body in
            try req.requireService()
            let order = body.order
            try checkHolder(db, req, order: order)
            let now = Int64(Clock.nowMillis())
            if try db.execute("UPDATE holds SET status = 'confirmed', confirmed_ms = $2 WHERE order_id = $1 AND status = 'held' AND expires_ms > $2", .text(order), .int(now)) == 0 {
                try expireDue(db, order: order)
                guard let state = try holdState(db, order) else { throw QuadError.notFound("no stock hold for order '\(order)'") }
                if state.status != .confirmed { throw QuadError.conflict("the stock hold for order '\(order)' has \(state.status == .expired ? "expired" : "been released")") }
                return state
            }
            return try holdState(db, order)!
        }

        h.mutation(C.stockRelease) { req, body in
            try req.requireService()
            let order = body.order
            try checkHolder(db, req, order: order)
            guard try holdState(db, order) != nil else { throw QuadError.notFound("no stock hold for order '\(order)'") }
            try returnStock(db, order: order, from: [.held, .confirmed], to: .released)
            return try holdState(db, order)!
        }

        h.query(C.stockGet) { req, body in
            try req.requireService()
            let order = body.order
            try checkHolder(db, req, order: order)
            guard let state = try holdState(db, order) else { throw QuadError.notFound("no stock hold for order '\(order)'") }
            return state
        }
    }

    static func holdState(_ db: Database, _ order: String) throws -> Contract.Catalog.Stock.Hold? {
        guard let hold = try db.queryOne("SELECT status, expires_ms FROM holds WHERE order_id = $1", .text(order)) else { return nil }
        let items = try db.query("SELECT product, quantity, price, category, rent_rate FROM hold_items WHERE order_id = $1 ORDER BY product", .text(order))
        guard let status = HoldStatus(rawValue: hold.string("status")) else {
            throw QuadError.internal("the stock hold of order '\(order)' has the status '\(hold.string("status"))' in the store, which this build does not know")
        }
        return .init(order: order, status: status, expiresAt: hold.int("expires_ms"), items: items.map {
            .init(product: $0.string("product"), quantity: $0.int("quantity"), price: $0.double("price"), category: $0.string("category"),
                  rentRate: $0["rent_rate"].double)
        })
    }

    /// Moves a hold from one of `from` to `to` and gives its units back, in
    /// the caller's transaction. The conditional UPDATE makes a second call a no-op.
    static func returnStock(_ db: Database, order: String, from: [HoldStatus], to: HoldStatus) throws {
        let placeholders = from.indices.map { "$\($0 + 3)" }.joined(separator: ", ")
        let changed = try db.execute("UPDATE holds SET status = $1 WHERE order_id = $2 AND status IN (\(placeholders))",
                                     [.text(to.rawValue), .text(order)] + from.map { .text($0.rawValue) })
        guard changed == 1 else { return }
        for item in try db.query("SELECT product, quantity FROM hold_items WHERE order_id = $1", .text(order)) {
            let q = item.int("quantity")
            // A closed listing's units that come back are unlisted: its stock stays 0.
            if item.string("product").hasPrefix("l-"), try unlistReturned(db, product: item.string("product"), quantity: q) { continue }
            let row = try db.queryOne("UPDATE products SET stock = stock + $1 WHERE id = $2 RETURNING stock", .int(q), .text(item.string("product")))
            try stockChanged(db, product: item.string("product"), stock: row?.int("stock") ?? 0, delta: q, reason: to.rawValue, order: order)
        }
    }

    /// Expires the hold of `order` if it is past its deadline (or every such hold).
    static func expireDue(_ db: Database, order: String? = nil) throws {
        let now = Int64(Clock.nowMillis())
        let due = try db.query("SELECT order_id FROM holds WHERE status = 'held' AND expires_ms <= $1 AND ($2 = '' OR order_id = $2) LIMIT 200",
                               .int(now), .text(order ?? ""))
        for row in due { try returnStock(db, order: row.string("order_id"), from: [.held], to: .expired) }
    }

    static func stockChanged(_ db: Database, product: String, stock: Int64, delta: Int64, reason: String, order: String?) throws {
        let body = Contract.Catalog.Stock.Changed(product: product, stock: stock, delta: delta, reason: reason, order: order)
        try Outbox.append(db, type: Contract.Catalog.stockChanged.type, body: body.json)
        let seq = try Outbox.append(db, type: Contract.Catalog.productStock.type, body: Contract.Catalog.Stock.Live(product: product, stock: stock).json)
        try db.execute("UPDATE products SET version = $2 WHERE id = $1", .text(product), .int(seq))
    }
}
