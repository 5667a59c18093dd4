import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// One line of an order: what was asked, and once the catalog holds the
/// stock, the price and category it held at and the line's fee.
struct OrderItem: Equatable {
    var product: String
    var quantity: Int64
    var price: Double?
    var category: String?
    var feeCents: Int64?
    /// A rental's price of one unit for one day; `price` is then this times the days.
    var rentRate: Double?

    var lineCents: Int64? { price.map { Cents.of($0) * quantity } }

    init(product: String, quantity: Int64, price: Double? = nil, category: String? = nil, feeCents: Int64? = nil, rentRate: Double? = nil) {
        self.product = product
        self.quantity = quantity
        self.price = price
        self.category = category
        self.feeCents = feeCents
        self.rentRate = rentRate
    }

    init?(_ j: JSON) {
        guard let product = j["product"]?.string, let quantity = j["quantity"]?.int else { return nil }
        self.init(product: product, quantity: quantity, price: j["price"]?.double, category: j["category"]?.string,
                  feeCents: j["fee"]?.double.map(Cents.of), rentRate: j["rent_rate"]?.double)
    }

    /// As stored and as replied: price, category, line_total and fee once held.
    var reply: Contract.Orders.Order.Item {
        .init(product: product, quantity: quantity, price: price, category: category,
              lineTotal: lineCents.map(Cents.amount), fee: feeCents.map(Cents.amount), rentRate: rentRate)
    }

    /// As events carry it: {product, quantity, price, category}.
    var event: Contract.Orders.Placed.Item {
        .init(product: product, quantity: quantity, price: price ?? 0, category: category ?? "Others")
    }
}

/// An order as stored. Its status moves `pending` (recorded, nothing asked
/// of the catalog yet) → `held` (the catalog holds its stock; prices known)
/// → `confirmed`, or to `rejected` from either; `confirmed` → `cancelled`.
/// A rental moves on from `confirmed` to `returned` (``Rentals``).
/// Every move is a conditional UPDATE on the status it leaves, so two
/// workers finishing the same order move it once.
struct OrderRecord {
    var id: String
    var user: String
    var status: Contract.Orders.Status
    var source: String
    var mode: String
    var screen: String
    var returnDate: String?
    var semester: JSON
    var items: [OrderItem]
    var currency: String?
    var subtotalCents: Int64
    var feeCents: Int64
    var totalCents: Int64
    var reason: String?
    var createdMs: Int64
    var updatedMs: Int64
    /// Rentals: the days rented for; once returned, when, and the late days and their charge.
    var days: Int64?
    var returnedMs: Int64?
    var lateDays: Int64
    var lateCents: Int64
    /// The seq of the last event the outbox published about it
    /// (``publish(_:_:type:body:)``); 0 while nothing was (pending).
    var version: Int64

    static let migration = """
        CREATE TABLE orders (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            status TEXT NOT NULL,
            source TEXT NOT NULL,
            mode TEXT NOT NULL,
            screen TEXT NOT NULL,
            return_date TEXT,
            semester TEXT NOT NULL,
            items TEXT NOT NULL,
            currency TEXT,
            subtotal_cents BIGINT NOT NULL DEFAULT 0,
            fee_cents BIGINT NOT NULL DEFAULT 0,
            total_cents BIGINT NOT NULL DEFAULT 0,
            reason TEXT,
            created_ms BIGINT NOT NULL,
            updated_ms BIGINT NOT NULL,
            lease_until BIGINT NOT NULL,
            release_pending INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX orders_by_user ON orders (user_id, created_ms);
        CREATE INDEX orders_open ON orders (status, lease_until);
        CREATE INDEX orders_releasing ON orders (release_pending, lease_until);
        """

    /// Rentals with a life (issue 16): the days rented, and the return.
    static let rentalMigration = """
        ALTER TABLE orders ADD COLUMN days BIGINT;
        ALTER TABLE orders ADD COLUMN returned_ms BIGINT;
        ALTER TABLE orders ADD COLUMN late_days BIGINT NOT NULL DEFAULT 0;
        ALTER TABLE orders ADD COLUMN late_cents BIGINT NOT NULL DEFAULT 0;
        CREATE INDEX orders_rentals ON orders (user_id, mode, created_ms);
        """

    /// An order's version (issue 30 pt 1): the seq of the last event
    /// published about it, written in the transaction that changed it, so
    /// that a phone can tell which of two copies of an order is newer
    /// whichever way each came (a reply, orders.mine, orders.rentals).
    static let versionMigration = "ALTER TABLE orders ADD COLUMN version BIGINT NOT NULL DEFAULT 0"

    /// Appends an event about order `id` to the outbox and makes its seq
    /// the order's version, in the caller's transaction.
    @discardableResult
    static func publish(_ db: Database, _ id: String, type: String, body: JSON) throws -> Int64 {
        let seq = try Outbox.append(db, type: type, body: body)
        try db.execute("UPDATE orders SET version = $2 WHERE id = $1", .text(id), .int(seq))
        return seq
    }

    var isOpen: Bool { status.isOpen }

    static func load(_ db: Database, _ id: String) throws -> OrderRecord? {
        try db.queryOne("SELECT * FROM orders WHERE id = $1", .text(id)).map { try OrderRecord($0) }
    }

    /// A row of the store; a status the contract does not name is a store
    /// this build cannot read, and says which order.
    init(_ r: Row) throws {
        id = r.string("id")
        user = r.string("user_id")
        guard let status = Contract.Orders.Status(rawValue: r.string("status")) else {
            throw QuadError.internal("order '\(r.string("id"))' has the status '\(r.string("status"))' in the store, which this build does not know")
        }
        self.status = status
        source = r.string("source")
        mode = r.string("mode")
        screen = r.string("screen")
        returnDate = r.optionalString("return_date")
        semester = (try? JSON.parse(r.string("semester"))) ?? .null
        items = ((try? JSON.parse(r.string("items")))?.array ?? []).compactMap(OrderItem.init)
        currency = r.optionalString("currency")
        subtotalCents = r.int("subtotal_cents")
        feeCents = r.int("fee_cents")
        totalCents = r.int("total_cents")
        reason = r.optionalString("reason")
        createdMs = r.int("created_ms")
        updatedMs = r.int("updated_ms")
        days = r["days"].int
        returnedMs = r["returned_ms"].int
        lateDays = r.int("late_days")
        lateCents = r.int("late_cents")
        version = r["version"].int ?? 0
    }

    /// An order as `orders.get`, `orders.mine`, `orders.cancel` and
    /// `orders.place` answer it. Amounts appear once the catalog has priced
    /// it (status held or later).
    var reply: Contract.Orders.Order {
        var o = Contract.Orders.Order()
        (o.order, o.status, o.source, o.mode, o.screen, o.semester) = (id, status, source, mode, screen, semester)
        (o.returnDate, o.reason, o.items) = (returnDate, reason, items.map(\.reply))
        (o.createdAt, o.updatedAt) = (createdMs, updatedMs)
        (o.days, o.version) = (days, version)
        if let returnedMs {
            (o.returnedAt, o.lateDays, o.lateCharge) = (returnedMs, lateDays, Cents.amount(lateCents))
        }
        if let currency {
            o.currency = currency
            (o.subtotal, o.fee, o.total) = (Cents.amount(subtotalCents), Cents.amount(feeCents), Cents.amount(totalCents))
        }
        return o
    }

    /// The body of `orders.placed` and `orders.confirmed`.
    var event: Contract.Orders.Placed {
        var e = Contract.Orders.Placed()
        (e.order, e.user, e.items, e.mode, e.screen, e.source) = (id, user, items.map(\.event), mode, screen, source)
        (e.semester, e.currency, e.returnDate) = (semester, currency ?? "USD", returnDate)
        (e.subtotal, e.fee, e.total) = (Cents.amount(subtotalCents), Cents.amount(feeCents), Cents.amount(totalCents))
        return e
    }

    /// The items as the `items` column keeps them: as replied.
    static func itemsText(_ items: [OrderItem]) -> String { JSON.array(items.map { $0.reply.json }).text }
}
