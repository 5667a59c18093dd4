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

    var lineCents: Int64? { price.map { Cents.of($0) * quantity } }

    init(product: String, quantity: Int64, price: Double? = nil, category: String? = nil, feeCents: Int64? = nil) {
        self.product = product
        self.quantity = quantity
        self.price = price
        self.category = category
        self.feeCents = feeCents
    }

    init?(_ j: JSON) {
        guard let product = j["product"]?.string, let quantity = j["quantity"]?.int else { return nil }
        self.init(product: product, quantity: quantity, price: j["price"]?.double, category: j["category"]?.string,
                  feeCents: j["fee"]?.double.map(Cents.of))
    }

    /// As stored and as replied: price, category, line_total and fee once held.
    var json: JSON {
        var f: [String: JSON] = ["product": .string(product), "quantity": .int(quantity)]
        if let price { f["price"] = .double(price) }
        if let category { f["category"] = .string(category) }
        if let lineCents { f["line_total"] = Cents.json(lineCents) }
        if let feeCents { f["fee"] = Cents.json(feeCents) }
        return .object(f)
    }

    /// As events carry it: {product, quantity, price, category}.
    var eventJSON: JSON {
        ["product": .string(product), "quantity": .int(quantity), "price": .double(price ?? 0), "category": .string(category ?? "Others")]
    }
}

/// An order as stored. Its status moves `pending` (recorded, nothing asked
/// of the catalog yet) → `held` (the catalog holds its stock; prices known)
/// → `confirmed`, or to `rejected` from either; `confirmed` → `cancelled`.
/// Every move is a conditional UPDATE on the status it leaves, so two
/// workers finishing the same order move it once.
struct OrderRecord {
    var id: String
    var user: String
    var status: String
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

    static let open: Set<String> = ["pending", "held"]
    var isOpen: Bool { OrderRecord.open.contains(status) }

    static func load(_ db: Database, _ id: String) throws -> OrderRecord? {
        try db.queryOne("SELECT * FROM orders WHERE id = $1", .text(id)).map(OrderRecord.init)
    }

    init(_ r: Row) {
        id = r.string("id")
        user = r.string("user_id")
        status = r.string("status")
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
    }

    /// An order as `orders.get`, `orders.mine` and `orders.place` answer it.
    /// Amounts appear once the catalog has priced it (status held or later).
    var json: JSON {
        var f: [String: JSON] = [
            "order": .string(id), "status": .string(status), "source": .string(source), "mode": .string(mode),
            "screen": .string(screen), "semester": semester, "items": .array(items.map(\.json)),
            "created_at": .int(createdMs), "updated_at": .int(updatedMs),
        ]
        if let returnDate { f["return_date"] = .string(returnDate) }
        if let reason { f["reason"] = .string(reason) }
        if let currency {
            f["currency"] = .string(currency)
            f["subtotal"] = Cents.json(subtotalCents)
            f["fee"] = Cents.json(feeCents)
            f["total"] = Cents.json(totalCents)
        }
        return .object(f)
    }

    /// The body of `orders.placed` and `orders.confirmed`.
    var eventBody: JSON {
        var f: [String: JSON] = [
            "order": .string(id), "user": .string(user), "items": .array(items.map(\.eventJSON)), "mode": .string(mode),
            "screen": .string(screen), "source": .string(source), "semester": semester, "currency": .string(currency ?? "USD"),
            "subtotal": Cents.json(subtotalCents), "fee": Cents.json(feeCents), "total": Cents.json(totalCents),
        ]
        if let returnDate { f["return_date"] = .string(returnDate) }
        return .object(f)
    }

    static func itemsText(_ items: [OrderItem]) -> String { JSON.array(items.map(\.json)).text }
}
