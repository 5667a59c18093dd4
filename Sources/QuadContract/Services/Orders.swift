import QuadWire

extension Contract {
    /// The orders part of the contract.
    public enum Orders {}
}

extension Contract.Orders {
    /// Most units of one product in a cart or an order (`max_quantity`),
    /// and the largest page of orders.mine (`max_page_size`).
    public static let maxQuantity: Int64 = 99
    public static let maxPageSize: Int64 = 100

    /// The caller's cart (``cartSchema``) as every cart operation answers
    /// it: built as JSON by the service, checked against the schema in
    /// debug builds.
    static let cartReply: Shape = .ref("cart.schema.json")

    /// orders.get and orders.cancel: which order.
    public struct OrderRequest: Body {
        public var order = ""
        public init() {}
        public init(order: String) { self.order = order }
        public static let fields: [Field<Self>] = [.field(\.order, "order", .string(1...64))]
    }

    /// orders.cart.add: the product and how many units to add.
    public struct CartAdd: Body {
        public var product = ""
        public var quantity: Int64 = 1
        public init() {}
        public init(product: String, quantity: Int64) { (self.product, self.quantity) = (product, quantity) }
        public static let fields: [Field<Self>] = [
            .field(\.product, "product", .string(1...64)),
            .field(\.quantity, "quantity", .int(1...maxQuantity, default: 1).limit("max_quantity").optional),
        ]
    }

    /// orders.cart.set: the product and its new quantity (0 removes the line).
    public struct CartSet: Body {
        public var product = ""
        public var quantity: Int64 = 0
        public init() {}
        public init(product: String, quantity: Int64) { (self.product, self.quantity) = (product, quantity) }
        public static let fields: [Field<Self>] = [
            .field(\.product, "product", .string(1...64)),
            .field(\.quantity, "quantity", .int(0...maxQuantity).limit("max_quantity")),
        ]
    }

    /// orders.cart.remove: the product whose line goes.
    public struct CartRemove: Body {
        public var product = ""
        public init() {}
        public init(product: String) { self.product = product }
        public static let fields: [Field<Self>] = [.field(\.product, "product", .string(1...64))]
    }

    public static let cancel = TypedOperation<OrderRequest, JSONBody>(
        "orders.cancel", .mutation, auth: .user,
        request: OrderRequest.shape
            .described("Cancels one of the caller's confirmed orders and gives its stock back to the catalog (idempotent by envelope id). not_found (404) for an order that is not the caller's; conflict (409) when it is already cancelled, was rejected, or is still being placed. Publishes orders.cancelled."),
        reply: .ref("order.schema.json")
            .described("The order, now cancelled."))

    public static let cartAdd = TypedOperation<CartAdd, JSONBody>(
        "orders.cart.add", .mutation, auth: .user,
        request: CartAdd.shape
            .described("Adds quantity units of a product to the caller's cart (a mutation: idempotent by envelope id). not_found (404) for a product orders' copy of the catalog does not hold, once that copy is loaded. conflict (409) past max_quantity (99 of one product) or max_cart_lines (50 products). Answers the cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartClear = TypedOperation<NoFields, JSONBody>(
        "orders.cart.clear", .mutation, auth: .user,
        request: NoFields.shape
            .described("Empties the caller's cart (a mutation: idempotent by envelope id). Answers the empty cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartRemove = TypedOperation<CartRemove, JSONBody>(
        "orders.cart.remove", .mutation, auth: .user,
        request: CartRemove.shape
            .described("Removes a product's line from the caller's cart; removing what is not there changes nothing (a mutation: idempotent by envelope id). Answers the cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartSet = TypedOperation<CartSet, JSONBody>(
        "orders.cart.set", .mutation, auth: .user,
        request: CartSet.shape
            .described("Sets the quantity of a product in the caller's cart; 0 removes the line (a mutation: idempotent by envelope id). Answers the cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartView = TypedOperation<NoFields, JSONBody>(
        "orders.cart.view", .query, auth: .user,
        request: NoFields.shape
            .described("The caller's cart. Only the caller's: a body naming a user is refused with forbidden (403)."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let get = TypedOperation<OrderRequest, JSONBody>(
        "orders.get", .query, auth: .user,
        request: OrderRequest.shape
            .described("One of the caller's orders; not_found (404) for any other, whoever it belongs to."),
        reply: .ref("order.schema.json"))

    public enum Mine {
        public struct Request: Body {
            public var offset: Int64 = 0
            public var limit: Int64 = 20
            public var status: String?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.offset, "offset", .int(min: 0, default: 0).optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
                .field(\.status, "status", .choice(["pending", "held", "confirmed", "rejected", "cancelled"]).optional),
            ]
        }
        /// One page of orders; each order is the service's JSON of it
        /// (``orderSchema``, checked in debug builds).
        public struct Reply: Body {
            public var orders: [JSON] = []
            public var total: Int64 = 0
            public var offset: Int64 = 0
            public var limit: Int64 = 0
            public init() {}
            public init(orders: [JSON], total: Int64, offset: Int64, limit: Int64) {
                (self.orders, self.total, self.offset, self.limit) = (orders, total, offset, limit)
            }
            public static let fields: [Field<Self>] = [
                .field(\.orders, "orders", .array(of: .ref("order.schema.json"), max: 100)),
                .field(\.total, "total", .int(min: 0)),
                .field(\.offset, "offset", .int(min: 0)),
                .field(\.limit, "limit", .int(1...100)),
            ]
        }
    }

    public static let mine = TypedOperation<Mine.Request, Mine.Reply>(
        "orders.mine", .query, auth: .user,
        request: Mine.Request.shape
            .described("A page of the caller's orders, newest first, optionally of one status (UniTrade's My Orders)."))

    public static let place = Operation(
        "orders.place", .mutation, auth: .user,
        request: .object([
            "source": .choice(["cart", "buy_now"]),
            "product": .string(1...64)
                .described("buy_now only.").optional,
            "quantity": .int(1...99, default: 1)
                .described("buy_now only.").optional,
            "mode": .choice(["buy", "rent"]).default("buy").optional,
            "return_date": .string(pattern: "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format: "date")
                .described("Required to rent, refused to buy: a day after today (UTC), at most 365 days ahead (max_rent_days).").optional,
            "screen": .choice(["home", "favorites", "search", "cart"])
                .described("The screen the order is placed from; cart by default from the cart, home for Buy Now.").optional,
        ])
            .described("Places an order to buy or rent: the cart's lines (source cart) or quantity units of one product (source buy_now, UniTrade's Buy Now). The envelope id is the order id: a retry with the same id gets the same answer and never a second order. Orders records the order, asks the catalog to hold the stock under the order id (all lines or none), then to confirm it; the reply is the confirmed order. A refusal of the catalog rejects the order and is the answer: conflict (409) 'not enough stock: p-0001 (requested 2, available 1)' with details {order, short: [{product, requested, available}]}, not_found (404) for an unknown product, with details {order}. conflict (409) for an empty cart. unavailable (503) when the catalog did not answer: the order stays pending and is confirmed or rejected by the service later; retry with the same id for the outcome. Bought lines leave the cart on confirmation. Records the screen and the buyer's semester; publishes orders.placed, then orders.confirmed or orders.rejected.")
            .and(
                .when(.any.keyword("properties", json: ["source": ["const": "buy_now"]]), then: .any.keyword("required", json: ["product"]), otherwise: .not(.anyOf([
                            .any.keyword("required", json: ["product"]),
                            .any.keyword("required", json: ["quantity"]),
                        ]))),
                .when(.any.keyword("properties", json: ["mode": ["const": "rent"]]).keyword("required", json: ["mode"]), then: .any.keyword("required", json: ["return_date"]), otherwise: .not(.any.keyword("required", json: ["return_date"])))
            ),
        reply: .ref("order.schema.json")
            .described("The order, confirmed, priced at the catalog's prices with the fee."))

    public static let cancelled = Event("orders.cancelled", body: .object([
            "order": .string(1...64),
            "user": .string(1...128),
        ])
            .described("A confirmed order was cancelled by its buyer; its stock goes back to the catalog."))

    public static let confirmed = Event("orders.confirmed", body: orderPlaced
            .described("The order is bought (or rented): the catalog confirmed its stock. The body repeats orders.placed's."))

    /// What orders.placed and orders.confirmed say of the order.
    static let orderPlaced: Shape = .object([
        "order": .string(1...64),
        "user": .string(1...128),
        "items": .array(of: .object([
                "product": .string(1...64),
                "quantity": .int(1...99),
                "price": .number(min: 0)
                    .described("Unit price."),
                "category": .ref("../catalog/product.schema.json#/$defs/category"),
            ]), min: 1, max: 50),
        "mode": .choice(["buy", "rent"]),
        "screen": .choice(["home", "favorites", "search", "cart"]),
        "source": .choice(["cart", "buy_now"]),
        "semester": .ref("order.schema.json#/$defs/semester"),
        "currency": .string(pattern: "^[A-Z]{3}$"),
        "subtotal": .number(min: 0),
        "fee": .number(min: 0),
        "total": .number(min: 0),
        "return_date": .string(format: "date")
            .described("mode rent only.").optional,
    ])

    public static let placed = Event("orders.placed", body: orderPlaced
            .described("The catalog holds the order's stock: the order is in, priced at the catalog's prices. orders.confirmed follows, or orders.rejected if the hold is lost (it expired before confirmation). An order the catalog refuses outright has orders.rejected alone."))

    public static let rejected = Event("orders.rejected", body: .object([
            "order": .string(1...64),
            "user": .string(1...128),
            "reason": .string(min: 1),
            "code": .string(pattern: "^[a-z_]+$"),
        ])
            .described("The order was not placed, for reason (the catalog's words: not enough stock, unknown product, a hold that expired, or no answer from the catalog within the deadline); code is the error code the buyer got. Nothing of it stays held."))

    public static let cartSchema = Definition("orders/cart.schema.json", title: "Cart", .object([
            "lines": .array(of: .object([
                    "product": .string(1...64),
                    "quantity": .int(1...99),
                    "available": .bool
                        .described("The copy's stock covers the quantity."),
                    "name": .string().optional,
                    "category": .ref("../catalog/product.schema.json#/$defs/category").optional,
                    "imageUrl": .string().optional,
                    "stock": .int(min: 0).optional,
                    "unit_price": .number(min: 0).optional,
                    "line_total": .number(min: 0)
                        .described("unit_price times quantity.").optional,
                    "fee_rate": .number(min: 0, max: 100)
                        .described("Percent.").optional,
                    "fee": .number(min: 0).optional,
                ]).keyword("dependentRequired", json: ["unit_price": ["name", "category", "imageUrl", "stock", "line_total", "fee_rate", "fee"]]), max: 50),
            "units": .int(min: 0)
                .described("Units over all lines."),
            "currency": .string(pattern: "^[A-Z]{3}$"),
            "subtotal": .number(min: 0),
            "fee": .number(min: 0),
            "total": .number(min: 0)
                .described("subtotal plus fee."),
        ])
            .described("The caller's cart as the phone shows it, oldest line first, priced from the orders service's own copy of the catalog (kept from catalog events; it can lag the catalog by the time an event takes to arrive). The fee is UniTrade's transaction fee, a percentage of each line by category (orders' --fees). A line whose product the copy does not hold has no price and counts in no total. Amounts are decimal numbers of currency, exact to the cent."))

    public static let orderSchema = Definition("orders/order.schema.json", title: "Order", .object([
            "order": .string(1...64),
            "status": .choice(["pending", "held", "confirmed", "rejected", "cancelled"]),
            "source": .choice(["cart", "buy_now"]),
            "mode": .choice(["buy", "rent"]),
            "screen": .choice(["home", "favorites", "search", "cart"])
                .described("The screen the order was placed from (UniTrade's purchase_screen)."),
            "semester": .ref("#/$defs/semester"),
            "return_date": .string(pattern: "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format: "date")
                .described("When a rental is due back (mode rent only).").optional,
            "items": .array(of: .object([
                    "product": .string(1...64),
                    "quantity": .int(1...99),
                    "price": .number(min: 0)
                        .described("Unit price the catalog held at.").optional,
                    "category": .ref("../catalog/product.schema.json#/$defs/category").optional,
                    "line_total": .number(min: 0).optional,
                    "fee": .number(min: 0).optional,
                ]).keyword("dependentRequired", json: ["price": ["category", "line_total", "fee"]]), min: 1, max: 50),
            "currency": .string(pattern: "^[A-Z]{3}$").optional,
            "subtotal": .number(min: 0).optional,
            "fee": .number(min: 0)
                .described("UniTrade's transaction fee: a percentage of each line by category.").optional,
            "total": .number(min: 0)
                .described("subtotal plus fee.").optional,
            "reason": .string()
                .described("Why it was rejected, in the catalog's words.").optional,
            "created_at": .int(min: 0)
                .described("ms since epoch."),
            "updated_at": .int(min: 0),
        ])
            .described("An order as orders.place, orders.get and orders.mine answer it. Its id is the envelope id of the orders.place that created it. Status: pending (recorded, the catalog not asked yet), held (the catalog holds its stock), confirmed, rejected (with the catalog's reason), cancelled. Prices, line totals, fees, subtotal, fee and total appear once the catalog has held the stock, at the prices it held at.").keyword("dependentRequired", json: ["currency": ["subtotal", "fee", "total"]])
            .definitions([
                "semester": .any.types(["string", "integer", "null"])
                    .described("The buyer's semester when the order was placed, as accounts published it; null when orders has not heard of the buyer from accounts."),
            ]))

    public static let operations: [Operation] = [cancel.operation, cartAdd.operation, cartClear.operation, cartRemove.operation, cartSet.operation,
                                                 cartView.operation, get.operation, mine.operation, place]
    public static let events: [Event] = [cancelled, confirmed, placed, rejected]
    public static let definitions: [Definition] = [cartSchema, orderSchema]
}
