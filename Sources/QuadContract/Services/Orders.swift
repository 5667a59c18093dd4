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
    /// Longest rental by default (`max_rent_days`; orders' --max-rent-days
    /// sets it, at most ``maxRentDaysCap``).
    public static let maxRentDays: Int64 = 90
    public static let maxRentDaysCap: Int64 = 365

    /// The statuses of an order, in the order it may take them: pending
    /// (recorded, the catalog not asked yet), held (the catalog took the
    /// units), then confirmed (bought or rented), rejected (refused, with a
    /// reason), cancelled (a confirmed order undone) or returned (a rental
    /// given back).
    public enum Status: String, WireEnum, Sendable {
        case pending, held, confirmed, rejected, cancelled, returned

        /// Still in the saga: the catalog's answer decides it.
        public var isOpen: Bool { self == .pending || self == .held }
    }

    static let statuses = Status.words

    /// The caller's cart (``Cart``, defined once as ``cartSchema``) as
    /// every cart operation answers it.
    static let cartReply: Shape = .ref("cart.schema.json")

    /// The caller's cart as the phone shows it (``cartSchema``).
    public struct Cart: Body {
        /// One product in the cart; name to fee are there only when
        /// orders' copy of the catalog holds the product.
        public struct Line: Body {
            public var product = ""
            public var quantity: Int64 = 0
            public var available = false
            public var name: String?
            public var category: String?
            public var imageUrl: String?
            public var stock: Int64?
            public var unitPrice: Double?
            public var lineTotal: Double?
            public var feeRate: Double?
            public var fee: Double?
            public init() {}
            public init(product: String, quantity: Int64, available: Bool) {
                (self.product, self.quantity, self.available) = (product, quantity, available)
            }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.quantity, "quantity", .int(1...99)),
                .field(\.available, "available", .bool
                    .described("The copy's stock covers the quantity.")),
                .field(\.name, "name", .string().optional),
                .field(\.category, "category", .ref("../catalog/product.schema.json#/$defs/category").optional),
                .field(\.imageUrl, "imageUrl", .string().optional),
                .field(\.stock, "stock", .int(min: 0).optional),
                .field(\.unitPrice, "unit_price", .number(min: 0).optional),
                .field(\.lineTotal, "line_total", .number(min: 0)
                    .described("unit_price times quantity.").optional),
                .field(\.feeRate, "fee_rate", .number(min: 0, max: 100)
                    .described("Percent.").optional),
                .field(\.fee, "fee", .number(min: 0).optional),
            ]
            /// A priced line has every field of the product.
            static let schema = shape.keyword("dependentRequired", json: ["unit_price": ["name", "category", "imageUrl", "stock", "line_total", "fee_rate", "fee"]])
        }
        public var lines: [Line] = []
        public var units: Int64 = 0
        public var currency = "USD"
        public var subtotal: Double = 0
        public var fee: Double = 0
        public var total: Double = 0
        /// The number of the cart's last change (see `version`'s description).
        public var version: Int64?
        public init() {}
        public init(lines: [Line], units: Int64, currency: String, subtotal: Double, fee: Double, total: Double, version: Int64? = nil) {
            (self.lines, self.units, self.currency, self.subtotal, self.fee, self.total, self.version) = (lines, units, currency, subtotal, fee, total, version)
        }
        public static let fields: [Field<Self>] = [
            .field(\.lines, "lines", .array(of: Line.schema, max: 50)),
            .field(\.units, "units", .int(min: 0)
                .described("Units over all lines.")),
            .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$")),
            .field(\.subtotal, "subtotal", .number(min: 0)),
            .field(\.fee, "fee", .number(min: 0)),
            .field(\.total, "total", .number(min: 0)
                .described("subtotal plus fee.")),
            .field(\.version, "version", .int(min: 0)
                .described("The cart's version: the number the orders service's counter of this user's cart gave its last change (orders.cart.add, .set, .remove or .clear that changed it, or an order from the cart taking its lines out when confirmed), 0 when it never changed; a request that changes nothing takes no number. A change of the cart publishes no event, so the version is not an outbox seq. Of two copies of the cart, the one with the higher version is the newer, whichever answer each came in.").optional),
        ]
    }

    /// An order as orders.place, orders.get, orders.cancel and orders.mine
    /// answer it (``orderSchema``).
    public struct Order: Body {
        /// One line: what was asked and, once the catalog holds the stock,
        /// the price it held at, the category, the line's total and fee.
        public struct Item: Body {
            public var product = ""
            public var quantity: Int64 = 0
            public var price: Double?
            public var category: String?
            public var lineTotal: Double?
            public var fee: Double?
            public var rentRate: Double?
            public init() {}
            public init(product: String, quantity: Int64, price: Double?, category: String?, lineTotal: Double?, fee: Double?, rentRate: Double? = nil) {
                (self.product, self.quantity, self.price, self.category, self.lineTotal, self.fee) = (product, quantity, price, category, lineTotal, fee)
                self.rentRate = rentRate
            }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.quantity, "quantity", .int(1...99)),
                .field(\.price, "price", .number(min: 0)
                    .described("Unit price the catalog held at; of a rental, rent_rate times the days rented.").optional),
                .field(\.category, "category", .ref("../catalog/product.schema.json#/$defs/category").optional),
                .field(\.lineTotal, "line_total", .number(min: 0).optional),
                .field(\.fee, "fee", .number(min: 0).optional),
                .field(\.rentRate, "rent_rate", .number(min: 0)
                    .described("Rentals only: the price of one unit for one day (the product's rent_rate when held), what a late day costs too.").optional),
            ]
            /// A priced line has its category, total and fee.
            static let schema = shape.keyword("dependentRequired", json: ["price": ["category", "line_total", "fee"]])
        }
        public var order = ""
        public var status: Status = .pending
        public var source = "cart"
        public var mode = "buy"
        public var screen = "cart"
        /// As accounts published it: a string, a number, or null.
        public var semester: JSON = .null
        public var returnDate: String?
        public var items: [Item] = []
        public var currency: String?
        public var subtotal: Double?
        public var fee: Double?
        public var total: Double?
        public var reason: String?
        public var days: Int64?
        public var returnedAt: Int64?
        public var lateDays: Int64?
        public var lateCharge: Double?
        public var createdAt: Int64 = 0
        public var updatedAt: Int64 = 0
        /// The seq of the orders service's last event about it (see `version`'s description).
        public var version: Int64?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.order, "order", .string(1...64)),
            .field(\.status, "status", .choice(statuses)),
            .field(\.source, "source", .choice(["cart", "buy_now"])),
            .field(\.mode, "mode", .choice(["buy", "rent"])),
            .field(\.screen, "screen", .choice(["home", "favorites", "search", "cart"])
                .described("The screen the order was placed from (UniTrade's purchase_screen).")),
            .field(\.semester, "semester", .ref("#/$defs/semester")),
            .field(\.returnDate, "return_date", .string(pattern: "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format: "date")
                .described("When a rental is due back (mode rent only).").optional),
            .field(\.items, "items", .array(of: Item.schema, min: 1, max: 50)),
            .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$").optional),
            .field(\.subtotal, "subtotal", .number(min: 0).optional),
            .field(\.fee, "fee", .number(min: 0)
                .described("UniTrade's transaction fee: a percentage of each line by category.").optional),
            .field(\.total, "total", .number(min: 0)
                .described("subtotal plus fee.").optional),
            .field(\.reason, "reason", .string()
                .described("Why it was rejected, in the catalog's words.").optional),
            .field(\.days, "days", .int(min: 1)
                .described("Rentals only: how many days it is rented for (return_date is the day it is due back).").optional),
            .field(\.returnedAt, "returned_at", .int(min: 0)
                .described("A returned rental: when it came back, ms since epoch.").optional),
            .field(\.lateDays, "late_days", .int(min: 0)
                .described("A returned rental: the days after return_date it came back (UTC days).").optional),
            .field(\.lateCharge, "late_charge", .number(min: 0)
                .described("A returned rental: late_days times each line's rent_rate and quantity; included in total.").optional),
            .field(\.createdAt, "created_at", .int(min: 0)
                .described("ms since epoch.")),
            .field(\.updatedAt, "updated_at", .int(min: 0)),
            .field(\.version, "version", .int(min: 0).described("The order's version: the seq of the orders service's last event about it (orders.placed, orders.confirmed, orders.rejected, orders.cancelled or orders.returned, whose envelope seq is the new version), 0 while pending. Of two copies of an order, the one with the higher version is the newer, whichever way each came (the reply to an action, orders.get, orders.mine, orders.rentals).").optional),
        ]
    }

    /// orders.place: what to order (the cart's lines, or quantity units of
    /// one product for Buy Now), to buy or rent, and from which screen.
    /// Which fields go with which source and mode is in ``place``'s shape.
    public struct Place: Body {
        public var source = "cart"
        public var product: String?
        public var quantity: Int64 = 1
        public var mode = "buy"
        public var returnDate: String?
        public var days: Int64?
        public var screen: String?
        public init() {}
        public init(source: String, product: String? = nil, quantity: Int64 = 1, mode: String = "buy", returnDate: String? = nil, days: Int64? = nil, screen: String? = nil) {
            (self.source, self.product, self.quantity, self.mode, self.returnDate, self.screen) = (source, product, quantity, mode, returnDate, screen)
            self.days = days
        }
        public static let fields: [Field<Self>] = [
            .field(\.source, "source", .choice(["cart", "buy_now"])),
            .field(\.product, "product", .string(1...64)
                .described("buy_now only.").optional),
            .field(\.quantity, "quantity", .int(1...maxQuantity, default: 1).limit("max_quantity")
                .described("buy_now only.").optional),
            .field(\.mode, "mode", .choice(["buy", "rent"]).default("buy").optional),
            .field(\.returnDate, "return_date", .string(pattern: "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format: "date")
                .described("To rent, this or days: the day it is due back, after today (UTC), at most max_rent_days (90 by default) ahead. Refused to buy.").optional),
            .field(\.days, "days", .int(min: 1).limit("max_rent_days")
                .described("To rent, this or return_date: for how many days, 1 to max_rent_days (90 by default, orders' --max-rent-days). Refused to buy.").optional),
            .field(\.screen, "screen", .choice(["home", "favorites", "search", "cart"])
                .described("The screen the order is placed from; cart by default from the cart, home for Buy Now.").optional),
        ]
    }

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

    public static let cancel = TypedOperation<OrderRequest, Order>(
        "orders.cancel", .mutation, auth: .user,
        request: OrderRequest.shape
            .described("Cancels one of the caller's confirmed orders and gives its stock back to the catalog (idempotent by envelope id). not_found (404) for an order that is not the caller's; conflict (409) when it is already cancelled, was rejected, or is still being placed. Publishes orders.cancelled."),
        reply: .ref("order.schema.json")
            .described("The order, now cancelled."))

    public static let cartAdd = TypedOperation<CartAdd, Cart>(
        "orders.cart.add", .mutation, auth: .user,
        request: CartAdd.shape
            .described("Adds quantity units of a product to the caller's cart (a mutation: idempotent by envelope id). not_found (404) for a product orders' copy of the catalog does not hold, once that copy is loaded. conflict (409) past max_quantity (99 of one product) or max_cart_lines (50 products). Answers the cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartClear = TypedOperation<NoFields, Cart>(
        "orders.cart.clear", .mutation, auth: .user,
        request: NoFields.shape
            .described("Empties the caller's cart (a mutation: idempotent by envelope id). Answers the empty cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartRemove = TypedOperation<CartRemove, Cart>(
        "orders.cart.remove", .mutation, auth: .user,
        request: CartRemove.shape
            .described("Removes a product's line from the caller's cart; removing what is not there changes nothing (a mutation: idempotent by envelope id). Answers the cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartSet = TypedOperation<CartSet, Cart>(
        "orders.cart.set", .mutation, auth: .user,
        request: CartSet.shape
            .described("Sets the quantity of a product in the caller's cart; 0 removes the line (a mutation: idempotent by envelope id). Answers the cart."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let cartView = TypedOperation<NoFields, Cart>(
        "orders.cart.view", .query, auth: .user,
        request: NoFields.shape
            .described("The caller's cart. Only the caller's: a body naming a user is refused with forbidden (403)."),
        reply: cartReply
            .described("The caller's cart as it is now."))

    public static let get = TypedOperation<OrderRequest, Order>(
        "orders.get", .query, auth: .user,
        request: OrderRequest.shape
            .described("One of the caller's orders; not_found (404) for any other, whoever it belongs to."),
        reply: .ref("order.schema.json"))

    public enum Mine {
        public struct Request: Body {
            public var offset: Int64 = 0
            public var limit: Int64 = 20
            public var status: Status?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.offset, "offset", .int(min: 0, default: 0).optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
                .field(\.status, "status", .choice(statuses).optional),
            ]
        }
        /// One page of orders.
        public struct Reply: Body {
            public var orders: [Order] = []
            public var total: Int64 = 0
            public var offset: Int64 = 0
            public var limit: Int64 = 0
            public init() {}
            public init(orders: [Order], total: Int64, offset: Int64, limit: Int64) {
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

    public static let place = TypedOperation<Place, Order>(
        "orders.place", .mutation, auth: .user,
        request: Place.shape
            .described("Places an order to buy or rent (for days, 1 to max_rent_days, or until return_date; priced at each product's rent_rate per day, with the fee on top): the cart's lines (source cart) or quantity units of one product (source buy_now, UniTrade's Buy Now). The envelope id is the order id: a retry with the same id gets the same answer and never a second order. Orders records the order, asks the catalog to hold the stock under the order id (all lines or none), then to confirm it; the reply is the confirmed order. A refusal of the catalog rejects the order and is the answer: conflict (409) 'not enough stock: p-0001 (requested 2, available 1)' with details {order, short: [{product, requested, available}]}, not_found (404) for an unknown product, with details {order}. conflict (409) for an empty cart. unavailable (503) when the catalog did not answer: the order stays pending and is confirmed or rejected by the service later; retry with the same id for the outcome. Bought lines leave the cart on confirmation. Records the screen and the buyer's semester; publishes orders.placed, then orders.confirmed or orders.rejected.")
            .and(
                .when(.any.keyword("properties", json: ["source": ["const": "buy_now"]]), then: .any.keyword("required", json: ["product"]), otherwise: .not(.anyOf([
                            .any.keyword("required", json: ["product"]),
                            .any.keyword("required", json: ["quantity"]),
                        ])
                            .described("body.product and body.quantity are for source 'buy_now': an order from the cart takes the cart's lines"))),
                .when(.any.keyword("properties", json: ["mode": ["const": "rent"]]).keyword("required", json: ["mode"]),
                      then: .any.requiresOne(of: ["days", "return_date"]).exclusive("days", "return_date"),
                      otherwise: .not(.anyOf([.any.keyword("required", json: ["return_date"]), .any.keyword("required", json: ["days"])])
                        .described("body.return_date and body.days are only for mode 'rent'")))
            ),
        reply: .ref("order.schema.json")
            .described("The order, confirmed, priced at the catalog's prices with the fee."))

    /// orders.rentals: a page of the caller's rentals, each with its state.
    public enum Rentals {
        public struct Request: Body {
            public var offset: Int64 = 0
            public var limit: Int64 = 20
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.offset, "offset", .int(min: 0, default: 0).optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
            ]
        }
        /// One rental: the order, and where it stands today (UTC days).
        public struct Rental: Body {
            /// Where a rental stands today.
            public enum State: String, WireEnum, Sendable { case active, overdue, returned }
            public var order = Order()
            public var state: State = .active
            public var dueDate = ""
            public var dueInDays: Int64?
            public init() {}
            public init(order: Order, state: State, dueDate: String, dueInDays: Int64?) {
                (self.order, self.state, self.dueDate, self.dueInDays) = (order, state, dueDate, dueInDays)
            }
            public static let fields: [Field<Self>] = [
                .field(\.order, "order", .ref("order.schema.json")),
                .field(\.state, "state", .choice(State.words)
                    .described("active: due today or later; overdue: past its due date and not returned; returned.")),
                .field(\.dueDate, "due_date", .string(pattern: "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format: "date")),
                .field(\.dueInDays, "due_in_days", .int()
                    .described("Not returned: days from today to the due date (0 due today, negative overdue).").optional),
            ]
        }
        public struct Reply: Body {
            public var rentals: [Rental] = []
            public var total: Int64 = 0
            public var offset: Int64 = 0
            public var limit: Int64 = 0
            public init() {}
            public init(rentals: [Rental], total: Int64, offset: Int64, limit: Int64) {
                (self.rentals, self.total, self.offset, self.limit) = (rentals, total, offset, limit)
            }
            public static let fields: [Field<Self>] = [
                .field(\.rentals, "rentals", .array(of: Rental.shape, max: 100)),
                .field(\.total, "total", .int(min: 0)),
                .field(\.offset, "offset", .int(min: 0)),
                .field(\.limit, "limit", .int(1...100)),
            ]
        }
    }

    public static let rentals = TypedOperation<Rentals.Request, Rentals.Reply>(
        "orders.rentals", .query, auth: .user,
        request: Rentals.Request.shape
            .described("A page of the caller's rentals (confirmed or returned orders of mode rent), newest first, each with its state: active (due in due_in_days), overdue, or returned."))

    public static let returnRental = TypedOperation<OrderRequest, Order>(
        "orders.return", .mutation, auth: .user,
        request: OrderRequest.shape
            .described("Returns one of the caller's rentals: the order becomes returned and its units go back to the catalog's stock (the release is sent until the catalog acknowledges it). A return after return_date is charged late_days at each line's rent_rate (late_charge, added to total). Idempotent by order: a second return, with any envelope id, answers the same returned order and changes nothing. not_found (404) for an order that is not the caller's; conflict (409) for an order bought (not rented), cancelled, rejected or still being placed. Publishes orders.returned."),
        reply: .ref("order.schema.json")
            .described("The order, now returned, with returned_at, late_days and late_charge."))

    /// orders.returned: a rental came back.
    public struct Returned: Body {
        public var order = ""
        public var user = ""
        public var items: [Placed.Item] = []
        public var currency = "USD"
        public var returnDate = ""
        public var returnedAt: Int64 = 0
        public var lateDays: Int64 = 0
        public var lateCharge: Double = 0
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.order, "order", .string(1...64)),
            .field(\.user, "user", .string(1...128)),
            .field(\.items, "items", .array(of: Placed.Item.shape, min: 1, max: 50)),
            .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$")),
            .field(\.returnDate, "return_date", .string(format: "date")
                .described("The day it was due back.")),
            .field(\.returnedAt, "returned_at", .int(min: 0)
                .described("ms since epoch.")),
            .field(\.lateDays, "late_days", .int(min: 0)),
            .field(\.lateCharge, "late_charge", .number(min: 0)),
        ]
    }

    public static let returned = TypedEvent<Returned>("orders.returned", body: Returned.shape
            .described("A rental was returned by its renter; its units go back to the catalog's stock. late_charge is what the late days cost."))

    /// orders.cancelled: whose order was cancelled.
    public struct Cancelled: Body {
        public var order = ""
        public var user = ""
        public init() {}
        public init(order: String, user: String) { (self.order, self.user) = (order, user) }
        public static let fields: [Field<Self>] = [
            .field(\.order, "order", .string(1...64)),
            .field(\.user, "user", .string(1...128)),
        ]
    }

    public static let cancelled = TypedEvent<Cancelled>("orders.cancelled", body: Cancelled.shape
            .described("A confirmed order was cancelled by its buyer; its stock goes back to the catalog."))

    public static let confirmed = TypedEvent<Placed>("orders.confirmed", body: Placed.shape
            .described("The order is bought (or rented): the catalog confirmed its stock. The body repeats orders.placed's."))

    /// What orders.placed and orders.confirmed say of the order.
    public struct Placed: Body {
        /// One line, priced at the price the catalog held at.
        public struct Item: Body {
            public var product = ""
            public var quantity: Int64 = 0
            public var price: Double = 0
            public var category = "Others"
            public init() {}
            public init(product: String, quantity: Int64, price: Double, category: String) {
                (self.product, self.quantity, self.price, self.category) = (product, quantity, price, category)
            }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.quantity, "quantity", .int(1...99)),
                .field(\.price, "price", .number(min: 0)
                    .described("Unit price.")),
                .field(\.category, "category", .ref("../catalog/product.schema.json#/$defs/category")),
            ]
        }
        public var order = ""
        public var user = ""
        public var items: [Item] = []
        public var mode = "buy"
        public var screen = "cart"
        public var source = "cart"
        /// As accounts published it: a string, a number, or null.
        public var semester: JSON = .null
        public var currency = "USD"
        public var subtotal: Double = 0
        public var fee: Double = 0
        public var total: Double = 0
        public var returnDate: String?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.order, "order", .string(1...64)),
            .field(\.user, "user", .string(1...128)),
            .field(\.items, "items", .array(of: Item.shape, min: 1, max: 50)),
            .field(\.mode, "mode", .choice(["buy", "rent"])),
            .field(\.screen, "screen", .choice(["home", "favorites", "search", "cart"])),
            .field(\.source, "source", .choice(["cart", "buy_now"])),
            .field(\.semester, "semester", .ref("order.schema.json#/$defs/semester")),
            .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$")),
            .field(\.subtotal, "subtotal", .number(min: 0)),
            .field(\.fee, "fee", .number(min: 0)),
            .field(\.total, "total", .number(min: 0)),
            .field(\.returnDate, "return_date", .string(format: "date")
                .described("mode rent only.").optional),
        ]
    }

    public static let placed = TypedEvent<Placed>("orders.placed", body: Placed.shape
            .described("The catalog holds the order's stock: the order is in, priced at the catalog's prices. orders.confirmed follows, or orders.rejected if the hold is lost (it expired before confirmation). An order the catalog refuses outright has orders.rejected alone."))

    /// orders.rejected: which order, why, and the code its buyer got.
    public struct Rejected: Body {
        public var order = ""
        public var user = ""
        public var reason = ""
        public var code = ""
        public init() {}
        public init(order: String, user: String, reason: String, code: String) {
            (self.order, self.user, self.reason, self.code) = (order, user, reason, code)
        }
        public static let fields: [Field<Self>] = [
            .field(\.order, "order", .string(1...64)),
            .field(\.user, "user", .string(1...128)),
            .field(\.reason, "reason", .string(min: 1)),
            .field(\.code, "code", .string(pattern: "^[a-z_]+$")),
        ]
    }

    public static let rejected = TypedEvent<Rejected>("orders.rejected", body: Rejected.shape
            .described("The order was not placed, for reason (the catalog's words: not enough stock, unknown product, a hold that expired, or no answer from the catalog within the deadline); code is the error code the buyer got. Nothing of it stays held."))

    public static let cartSchema = Definition("orders/cart.schema.json", title: "Cart", Cart.shape
            .described("The caller's cart as the phone shows it, oldest line first, priced from the orders service's own copy of the catalog (kept from catalog events; it can lag the catalog by the time an event takes to arrive). The fee is UniTrade's transaction fee, a percentage of each line by category (orders' --fees). A line whose product the copy does not hold has no price and counts in no total. Amounts are decimal numbers of currency, exact to the cent."))

    public static let orderSchema = Definition("orders/order.schema.json", title: "Order", Order.shape
            .described("An order as orders.place, orders.get and orders.mine answer it. Its id is the envelope id of the orders.place that created it. Status: pending (recorded, the catalog not asked yet), held (the catalog holds its stock), confirmed, rejected (with the catalog's reason), cancelled, returned (a rental that came back). Prices, line totals, fees, subtotal, fee and total appear once the catalog has held the stock, at the prices it held at.").keyword("dependentRequired", json: ["currency": ["subtotal", "fee", "total"]])
            .definitions([
                "semester": .any.types(["string", "integer", "null"])
                    .described("The buyer's semester when the order was placed, as accounts published it; null when orders has not heard of the buyer from accounts."),
            ]))

    public static let operations: [Operation] = [cancel.operation, cartAdd.operation, cartClear.operation, cartRemove.operation, cartSet.operation,
                                                 cartView.operation, get.operation, mine.operation, place.operation, rentals.operation,
                                                 returnRental.operation]
    public static let events: [Event] = [cancelled.event, confirmed.event, placed.event, rejected.event, returned.event]
    public static let definitions: [Definition] = [cartSchema, orderSchema]
}
