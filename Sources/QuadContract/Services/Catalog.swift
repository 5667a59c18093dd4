import QuadWire

extension Contract {
    /// The catalog part of the contract.
    public enum Catalog {}
}

extension Contract.Catalog {
    public enum Categories {
        public struct Row: Body {
            public var name = ""
            public var count: Int64 = 0
            public var inStock: Int64?
            public init() {}
            public init(name: String, count: Int64, inStock: Int64?) { (self.name, self.count, self.inStock) = (name, count, inStock) }
            public static let fields: [Field<Self>] = [
                .field(\.name, "name", .ref("product.schema.json#/$defs/category")),
                .field(\.count, "count", .int(min: 0)),
                .field(\.inStock, "in_stock", .int(min: 0).described("How many of them have stock > 0.").optional),
            ]
        }
        public struct Reply: Body {
            public var categories: [Row] = []
            public init() {}
            public init(categories: [Row]) { self.categories = categories }
            public static let fields: [Field<Self>] = [.field(\.categories, "categories", .array(of: Row.shape))]
        }
    }

    public static let categories = TypedOperation<NoFields, Categories.Reply>(
        "catalog.categories", .query, auth: .none,
        request: NoFields.shape
            .described("No parameters: the body is an empty object (or absent)."),
        reply: Categories.Reply.shape
            .described("Every category with the number of products in it, in the order of the enum."))

    public enum Collections {
        public struct Row: Body {
            public var name = ""
            public var count: Int64 = 0
            public init() {}
            public init(name: String, count: Int64) { (self.name, self.count) = (name, count) }
            public static let fields: [Field<Self>] = [
                .field(\.name, "name", .string(min: 1)),
                .field(\.count, "count", .int(min: 0)),
            ]
        }
        public struct Reply: Body {
            public var collections: [Row] = []
            public init() {}
            public init(collections: [Row]) { self.collections = collections }
            public static let fields: [Field<Self>] = [.field(\.collections, "collections", .array(of: Row.shape))]
        }
    }

    public static let collections = TypedOperation<NoFields, Collections.Reply>(
        "catalog.collections", .query, auth: .none,
        request: NoFields.shape
            .described("No parameters: the body is an empty object (or absent)."),
        reply: Collections.Reply.shape
            .described("Every collection with the number of products in it, by name."))

    public struct ProductGet: Body {
        public var id = ""
        public init() {}
        public static let fields: [Field<Self>] = [.field(\.id, "id", .string(1...64))]
    }

    public static let productGet = TypedOperation<ProductGet, Product>(
        "catalog.product.get", .query, auth: .none,
        request: ProductGet.shape
            .described("One product by id; not_found (404) when there is none."),
        reply: .ref("product.schema.json")
            .described("The product itself."))

    /// Largest page of products (`max_page_size`).
    public static let maxPageSize: Int64 = 200
    /// Longest text query (`max_query_length`).
    public static let maxQueryLength = 200
    /// Most lines in one stock hold (`max_hold_items`) and units per line (`max_hold_quantity`).
    public static let maxHoldItems = 50
    public static let maxHoldQuantity: Int64 = 100
    /// How a listing may be sorted: by name, price up or down, most stock first, newest first.
    public static let sortOrders = ["name", "price", "-price", "stock", "newest"]

    /// The filters of a listing; `catalog.search` takes the same.
    public struct ListRequest: Body {
        public var category: String?
        public var collection: String?
        public var q: String?
        public var inStock = false
        public var minPrice: Double?
        public var maxPrice: Double?
        public var sort = "name"
        public var offset: Int64 = 0
        public var limit: Int64 = 20
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.category, "category", .ref("product.schema.json#/$defs/category").optional),
            .field(\.collection, "collection", .string(1...64).optional),
            .field(\.q, "q", .string(max: maxQueryLength).limit("max_query_length")
                .described("Case-insensitive search over name, type and info: every word (up to 8) must appear.").optional),
            .field(\.inStock, "in_stock", .bool.described("Only products with stock > 0.").default(false).optional),
            .field(\.minPrice, "min_price", .number(min: 0, max: 1_000_000_000).described("Lowest price.value, inclusive.").optional),
            .field(\.maxPrice, "max_price", .number(min: 0, max: 1_000_000_000).described("Highest price.value, inclusive.").optional),
            .field(\.sort, "sort", .choice(sortOrders).described("name (default), price (lowest first), -price (highest first), stock (most first), newest (latest listed_at first, then the highest id).")
                .default("name").optional),
            .field(\.offset, "offset", .int(min: 0, default: 0).optional),
            .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
        ]
    }

    static let listRequest: Shape = ListRequest.shape
        .described("A page of products, filtered by category, collection, a text query over name, type and info, stock and price; all filters combine with AND.")

    /// One page of a listing.
    public struct ListReply: Body {
        public var products: [Product] = []
        public var total: Int64 = 0
        public var offset: Int64 = 0
        public var limit: Int64 = 0
        public init() {}
        public init(products: [Product], total: Int64, offset: Int64, limit: Int64) {
            (self.products, self.total, self.offset, self.limit) = (products, total, offset, limit)
        }
        public static let fields: [Field<Self>] = [
            .field(\.products, "products", .array(of: .ref("product.schema.json"), max: Int(maxPageSize))),
            .field(\.total, "total", .int(min: 0)),
            .field(\.offset, "offset", .int(min: 0)),
            .field(\.limit, "limit", .int(1...maxPageSize)),
        ]
    }

    static let listReply: Shape = ListReply.shape
        .described("One page: products in the order asked for, total matching the filters, and the offset and limit applied.")

    public static let productsList = TypedOperation<ListRequest, ListReply>("catalog.products.list", .query, auth: .none, request: listRequest, reply: listReply)

    public static let search = TypedOperation<ListRequest, ListReply>("catalog.search", .query, auth: .none,
        request: listRequest.described("The same as catalog.products.list: a page of products matching the filters."),
        reply: listReply)

    public enum ForYou {
        public struct Request: Body {
            public var limit: Int64 = 20
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
            ]
        }
        public struct Score: Body {
            public var name = ""
            public var score: Int64 = 0
            public init() {}
            public init(name: String, score: Int64) { (self.name, self.score) = (name, score) }
            public static let fields: [Field<Self>] = [
                .field(\.name, "name", .ref("product.schema.json#/$defs/category")),
                .field(\.score, "score", .int(min: 0)),
            ]
        }
        public struct Reply: Body {
            public var products: [Product] = []
            public var categories: [Score] = []
            public init() {}
            public init(products: [Product], categories: [Score]) { (self.products, self.categories) = (products, categories) }
            public static let fields: [Field<Self>] = [
                .field(\.products, "products", .array(of: .ref("product.schema.json"), max: Int(maxPageSize))),
                .field(\.categories, "categories", .array(of: Score.shape).described("The user's categories with their scores, best first.")),
            ]
        }
    }

    public static let foryou = TypedOperation<ForYou.Request, ForYou.Reply>(
        "catalog.foryou", .query, auth: .user,
        request: ForYou.Request.shape
            .described("Products for the signed-in user: in the categories of their profile, favorites and purchases, best first; what they already favor or bought is left out; in stock only."))

    /// The stock a saga holds for orders: catalog.stock.hold, confirm,
    /// release and get, and the catalog.stock.changed event.
    public enum Stock {
        /// One line of a hold request.
        public struct Line: Body {
            public var product = ""
            public var quantity: Int64 = 0
            public init() {}
            public init(product: String, quantity: Int64) { (self.product, self.quantity) = (product, quantity) }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.quantity, "quantity", .int(1...maxHoldQuantity).limit("max_hold_quantity")),
            ]
        }

        /// catalog.stock.hold: the order and what it takes.
        public struct HoldRequest: Body {
            public var order = ""
            public var items: [Line] = []
            public var mode: String?
            public var confirm: Bool?
            public init() {}
            public init(order: String, items: [Line], mode: String? = nil, confirm: Bool? = nil) {
                (self.order, self.items, self.mode, self.confirm) = (order, items, mode, confirm)
            }
            public static let fields: [Field<Self>] = [
                .field(\.order, "order", .string(1...64).described("The order id the hold is for; holding again answers the hold as it is.")),
                .field(\.items, "items", .array(of: Line.shape, min: 1, max: maxHoldItems).limit("max_hold_items")),
                .field(\.mode, "mode", .choice(["buy", "rent"])
                    .described("What the order does with the units: buy (the default) or rent. A listing for sale only cannot be rented, one for rent only cannot be bought (conflict, 409); a rental is held at the product's rent_rate.").optional),
                .field(\.confirm, "confirm", .bool
                    .described("True: the units are taken and the hold confirmed in the same transaction (status confirmed), what catalog.stock.hold then catalog.stock.confirm do in two calls. A hold that already exists is answered as it is.").optional),
            ]
        }

        /// catalog.stock.confirm, release and get: the order only.
        public struct OrderRequest: Body {
            public var order = ""
            public init() {}
            public init(order: String) { self.order = order }
            public static let fields: [Field<Self>] = [.field(\.order, "order", .string(1...64).described("The order id the hold is for."))]
        }

        /// One line of a hold as it is kept: with the unit price and category when held.
        public struct HeldItem: Body, Equatable {
            public var product = ""
            public var quantity: Int64 = 0
            public var price = 0.0
            public var category = ""
            public var rentRate: Double?
            public init() {}
            public init(product: String, quantity: Int64, price: Double, category: String, rentRate: Double? = nil) {
                (self.product, self.quantity, self.price, self.category, self.rentRate) = (product, quantity, price, category, rentRate)
            }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.quantity, "quantity", .int(1...maxHoldQuantity)),
                .field(\.price, "price", .number(min: 0).described("The unit price when held.")),
                .field(\.category, "category", .string()),
                .field(\.rentRate, "rent_rate", .number(min: 0).described("A rental's hold only: the rent rate per day when held, what orders prices it at.").optional),
            ]
        }

        /// The stock hold of one order: the reply of every stock.* call but adjust.
        public struct Hold: Body, Equatable {
            /// held (the units taken until it expires), confirmed (sold or
            /// rented), released (given back by the order), expired (given
            /// back when its time ran out).
            public enum Status: String, WireEnum, Sendable { case held, confirmed, released, expired }
            public var order = ""
            public var status: Status = .held
            public var expiresAt: Int64 = 0
            public var items: [HeldItem] = []
            public init() {}
            public init(order: String, status: Status, expiresAt: Int64, items: [HeldItem]) {
                (self.order, self.status, self.expiresAt, self.items) = (order, status, expiresAt, items)
            }
            public static let fields: [Field<Self>] = [
                .field(\.order, "order", .string(1...64)),
                .field(\.status, "status", .choice(Status.words)),
                .field(\.expiresAt, "expires_at", .int(min: 0).described("When a held hold expires, ms since epoch.")),
                .field(\.items, "items", .array(of: HeldItem.shape, max: maxHoldItems)),
            ]
        }

        /// The body of catalog.product.stock: what anyone may know.
        public struct Live: Body, Equatable {
            public var product = ""
            public var stock: Int64 = 0
            public init() {}
            public init(product: String, stock: Int64) { (self.product, self.stock) = (product, stock) }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)
                    .described("The product id.")),
                .field(\.stock, "stock", .int(min: 0)),
            ]
        }

        /// The body of catalog.stock.changed.
        public struct Changed: Body, Equatable {
            public var product = ""
            public var stock: Int64 = 0
            public var delta: Int64 = 0
            public var reason = ""
            public var order: String?
            public init() {}
            public init(product: String, stock: Int64, delta: Int64, reason: String, order: String?) {
                (self.product, self.stock, self.delta, self.reason, self.order) = (product, stock, delta, reason, order)
            }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)
                    .described("The product id.")),
                .field(\.stock, "stock", .int(min: 0)),
                .field(\.delta, "delta", .int()),
                .field(\.reason, "reason", .choice(["hold", "released", "expired", "adjust", "listing"])
                    .described("What moved it: an order's hold, its release or expiry, an admin's catalog.stock.adjust, or a student's listing (a new quantity, a withdrawal or take-down).")),
                .field(\.order, "order", .string(1...64)
                    .described("The order whose hold moved it; absent for an adjust.").optional),
            ]
        }
    }

    static let holdState: Shape = Stock.Hold.shape
        .described("The stock hold of one order: its status, when it expires, and what it holds at which price.")

    public static let stockHold = TypedOperation<Stock.HoldRequest, Stock.Hold>(
        "catalog.stock.hold", .mutation, auth: .service,
        request: Stock.HoldRequest.shape
            .described("Quad's services only (the orders saga): takes the stock of every item, all or none, until the hold expires (hold_ttl_seconds); conflict (409) with details.short when some product has too little."),
        reply: holdState)

    public static let stockConfirm = TypedOperation<Stock.OrderRequest, Stock.Hold>(
        "catalog.stock.confirm", .mutation, auth: .service,
        request: Stock.OrderRequest.shape.described("Quad's services only: the order is placed; its held stock is sold. conflict (409) when the hold expired or was released."),
        reply: holdState)

    public static let stockRelease = TypedOperation<Stock.OrderRequest, Stock.Hold>(
        "catalog.stock.release", .mutation, auth: .service,
        request: Stock.OrderRequest.shape.described("Quad's services only: gives the stock of a held or confirmed hold back."),
        reply: holdState)

    public static let stockGet = TypedOperation<Stock.OrderRequest, Stock.Hold>(
        "catalog.stock.get", .query, auth: .service,
        request: Stock.OrderRequest.shape.described("Quad's services only: the hold of an order, as it is."),
        reply: holdState)

    public enum StockAdjust {
        public struct Request: Body {
            public var id = ""
            public var delta: Int64 = 0
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string(1...64)),
                .field(\.delta, "delta", .int(-1000000...1000000)),
            ]
        }
        public struct Reply: Body {
            public var id = ""
            public var stock: Int64 = 0
            public init() {}
            public init(id: String, stock: Int64) { (self.id, self.stock) = (id, stock) }
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string(1...64)),
                .field(\.stock, "stock", .int(min: 0)),
            ]
        }
    }

    public static let stockAdjust = TypedOperation<StockAdjust.Request, StockAdjust.Reply>(
        "catalog.stock.adjust", .mutation, auth: .admin,
        request: StockAdjust.Request.shape
            .described("Admins only (a mutation: idempotent by envelope id). Adds delta to a product's stock; conflict (409) when stock would go below 0, not_found (404) for an unknown product. Publishes catalog.stock.changed."),
        reply: StockAdjust.Reply.shape
            .described("The product's stock after the change."))

    public static let productChanged = TypedEvent<Product>("catalog.product.changed", body: .ref("product.schema.json")
            .described("A product was created or changed (price, stock, anything): the body is the product as it is now, so a subscriber replaces its copy without asking. Public: phones subscribe to pub/catalog.product.changed/<id> on the broker's updates socket."),
        audience: .everyone(key: "id"))

    public static let productStock = TypedEvent<Stock.Live>("catalog.product.stock", body: Stock.Live.shape
            .described("A product's stock as it is now, written with every catalog.stock.changed, without the order that moved it. Public: phones looking at the product subscribe to pub/catalog.product.stock/<product> on the broker's updates socket and apply it when its seq is above the one they hold."),
        audience: .everyone(key: "product"))

    public static let stockChanged = TypedEvent<Stock.Changed>("catalog.stock.changed", body: Stock.Changed.shape
            .described("A product's stock changed by delta and is now stock."))

    /// One product of the marketplace (`product.schema.json`).
    public struct Product: Body, Equatable {
        public struct Price: Body, Equatable {
            public var value = 0.0
            public var currency = ""
            public init() {}
            public init(value: Double, currency: String) { (self.value, self.currency) = (value, currency) }
            public static let fields: [Field<Self>] = [
                .field(\.value, "value", .number(min: 0)),
                .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$").described("ISO 4217 code.")),
            ]
        }
        public var id = ""
        public var name = ""
        public var price = Price()
        /// Free-form specifications, kept as the seed or admin wrote them.
        public var info: JSON = .object([:])
        public var type = ""
        public var imageUrl = ""
        public var category = ""
        public var collection = ""
        public var stock: Int64 = 0
        /// What one day of renting it costs (``seedRentRate(price:)`` for the demo catalog).
        public var rentRate: Double?
        /// A student's listing only: who sells it, by display name (never an id or email).
        public var seller: String?
        public var condition: String?
        public var mode: String?
        /// A listing's pictures, as URLs like imageUrl; the first is imageUrl.
        public var images: [String]?
        public var listedAt: Int64?
        /// The seq of the catalog's last event about it (see `version`'s description).
        public var version: Int64?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.id, "id", .string(1...64)),
            .field(\.name, "name", .string(1...200)),
            .field(\.price, "price", Price.shape),
            .field(\.info, "info", .object([
                "color": .string().optional,
                "storage": .string().optional,
                "memory": .string().optional,
                "processor": .string().optional,
                "type": .string().optional,
            ])
                .described("Free-form specifications; every field is optional.")),
            .field(\.type, "type", .string().described("The kind of product (Electronic, Book, Kit).")),
            .field(\.imageUrl, "imageUrl", .string()),
            .field(\.category, "category", .ref("#/$defs/category")),
            .field(\.collection, "collection", .string(min: 1).described("The collection it is shown under (ShopEase's first screen).")),
            .field(\.stock, "stock", .int(min: 0).described("Units available: not held by an order, not sold.")),
            .field(\.rentRate, "rent_rate", .number(min: 0)
                .described("The price of renting one unit for one day, in price.currency (the transaction fee comes on top). The demo catalog's: price.value / 30, rounded to the cent. Absent for a listing that is for sale only.").optional),
            .field(\.seller, "seller", .string(1...128)
                .described("A student's listing only: the seller's display name as accounts published it ('a student' until catalog has heard it); never a user id or an email.").optional),
            .field(\.condition, "condition", .choice(["New", "Like new", "Good", "Used"]).described("A student's listing only.").optional),
            .field(\.mode, "mode", .choice(["sale", "rent", "both"])
                .described("A student's listing only: sale (can be bought, not rented), rent (rented, not bought) or both. Seeded products can be both.").optional),
            .field(\.images, "images", .array(of: .string(min: 1), max: 16)
                .described("A student's listing only: the URLs of its pictures (as imageUrl's), in order.").optional),
            .field(\.listedAt, "listed_at", .int(min: 0).described("When it was listed, ms since epoch: a student's listing when its seller made it, a product of the demo catalog when the catalog was seeded (older than every listing). The newest sort's key.").optional),
            .field(\.version, "version", .int(min: 0).described("The product's version: the seq of the catalog's last event about it (catalog.product.stock or catalog.product.changed, whose envelope seq is the new version), 0 while unchanged since seeded. Of two copies of a product, the one with the higher version is the newer, whichever way each came (a reply, a list, a live update, a catch-up).").optional),
        ]
    }

    /// The rent rate per day of a demo product: its price over 30 days,
    /// rounded half away from zero to the cent (at least 1 cent for a
    /// product with a price, so a rental never costs nothing).
    public static func seedRentRate(price: Double) -> Double {
        guard price > 0 else { return 0 }
        return max(1, (price * 100 / 30).rounded()) / 100
    }

    public static let productSchema = Definition("catalog/product.schema.json", title: "Product", Product.shape
            .described("One product of the marketplace, after ShopEase's product (id, name, price, info, type, imageUrl) with UniTrade's category, a collection and the stock on hand.")
            .definitions([
                "category": .choice(["Study", "Tech", "Creative", "Lab", "Personal", "Others"])
                    .described("UniTrade's categories. For You is not one: it is computed per user."),
            ]))

    public static let operations: [Operation] = [categories.operation, collections.operation, productGet.operation, productsList.operation,
        search.operation, foryou.operation, stockAdjust.operation, stockHold.operation, stockConfirm.operation, stockRelease.operation, stockGet.operation] + imageOperations + listingOperations
    public static let events: [Event] = [productChanged.event, productStock.event, stockChanged.event] + listingEvents
    public static let definitions: [Definition] = [productSchema]
}
