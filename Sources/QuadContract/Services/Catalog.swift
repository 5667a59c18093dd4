import QuadWire

extension Contract {
    /// The catalog part of the contract.
    public enum Catalog {}
}

extension Contract.Catalog {
    public static let categories = Operation(
        "catalog.categories", .query, auth: .none,
        request: .object()
            .described("No parameters: the body is an empty object (or absent)."),
        reply: .object([
            "categories": .array(of: .object([
                    "name": .ref("product.schema.json#/$defs/category"),
                    "count": .int(min: 0),
                    "in_stock": .int(min: 0)
                        .described("How many of them have stock > 0.").optional,
                ])),
        ])
            .described("Every category with the number of products in it, in the order of the enum."))

    public static let collections = Operation(
        "catalog.collections", .query, auth: .none,
        request: .object()
            .described("No parameters: the body is an empty object (or absent)."),
        reply: .object([
            "collections": .array(of: .object([
                    "name": .string(min: 1),
                    "count": .int(min: 0),
                ])),
        ])
            .described("Every collection with the number of products in it, by name."))

    public static let productGet = Operation(
        "catalog.product.get", .query, auth: .none,
        request: .object([
            "id": .string(1...64),
        ])
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
    static let listRequest: Shape = .object([
        "category": .ref("product.schema.json#/$defs/category").optional,
        "collection": .string(1...64).optional,
        "q": .string(max: maxQueryLength).limit("max_query_length")
            .described("Case-insensitive search over name, type and info: every word (up to 8) must appear.").optional,
        "in_stock": .bool.described("Only products with stock > 0.").default(false).optional,
        "min_price": .number(min: 0, max: 1_000_000_000).described("Lowest price.value, inclusive.").optional,
        "max_price": .number(min: 0, max: 1_000_000_000).described("Highest price.value, inclusive.").optional,
        "sort": .choice(sortOrders).described("name (default), price (lowest first), -price (highest first), stock (most first), newest.")
            .default("name").optional,
        "offset": .int(min: 0, default: 0).optional,
        "limit": .int(1...maxPageSize, default: 20).limit("max_page_size").optional,
    ])
        .described("A page of products, filtered by category, collection, a text query over name, type and info, stock and price; all filters combine with AND.")

    static let listReply: Shape = .object([
        "products": .array(of: .ref("product.schema.json"), max: Int(maxPageSize)),
        "total": .int(min: 0),
        "offset": .int(min: 0),
        "limit": .int(1...maxPageSize),
    ])
        .described("One page: products in the order asked for, total matching the filters, and the offset and limit applied.")

    public static let productsList = Operation("catalog.products.list", .query, auth: .none, request: listRequest, reply: listReply)

    public static let search = Operation("catalog.search", .query, auth: .none,
        request: listRequest.described("The same as catalog.products.list: a page of products matching the filters."),
        reply: listReply)

    public static let foryou = Operation(
        "catalog.foryou", .query, auth: .user,
        request: .object([
            "limit": .int(1...maxPageSize, default: 20).limit("max_page_size").optional,
        ])
            .described("Products for the signed-in user: in the categories of their profile, favorites and purchases, best first; what they already favor or bought is left out; in stock only."),
        reply: .object([
            "products": .array(of: .ref("product.schema.json"), max: Int(maxPageSize)),
            "categories": .array(of: .object([
                "name": .ref("product.schema.json#/$defs/category"),
                "score": .int(min: 0),
            ]))
                .described("The user's categories with their scores, best first."),
        ]))

    /// The stock a saga holds for one order (the reply of every stock.* call but adjust).
    static let holdState: Shape = .object([
        "order": .string(1...64),
        "status": .choice(["held", "confirmed", "released", "expired"]),
        "expires_at": .int(min: 0).described("When a held hold expires, ms since epoch."),
        "items": .array(of: .object([
            "product": .string(1...64),
            "quantity": .int(1...maxHoldQuantity),
            "price": .number(min: 0).described("The unit price when held."),
            "category": .string(),
        ]), max: maxHoldItems),
    ])
        .described("The stock hold of one order: its status, when it expires, and what it holds at which price.")

    static let orderOnly: Shape = .object(["order": .string(1...64).described("The order id the hold is for.")])

    public static let stockHold = Operation(
        "catalog.stock.hold", .mutation, auth: .service,
        request: .object([
            "order": .string(1...64).described("The order id the hold is for; holding again answers the hold as it is."),
            "items": .array(of: .object([
                "product": .string(1...64),
                "quantity": .int(1...maxHoldQuantity).limit("max_hold_quantity"),
            ]), min: 1, max: maxHoldItems).limit("max_hold_items"),
        ])
            .described("Quad's services only (the orders saga): takes the stock of every item, all or none, until the hold expires (hold_ttl_seconds); conflict (409) with details.short when some product has too little."),
        reply: holdState)

    public static let stockConfirm = Operation(
        "catalog.stock.confirm", .mutation, auth: .service,
        request: orderOnly.described("Quad's services only: the order is placed; its held stock is sold. conflict (409) when the hold expired or was released."),
        reply: holdState)

    public static let stockRelease = Operation(
        "catalog.stock.release", .mutation, auth: .service,
        request: orderOnly.described("Quad's services only: gives the stock of a held or confirmed hold back."),
        reply: holdState)

    public static let stockGet = Operation(
        "catalog.stock.get", .query, auth: .service,
        request: orderOnly.described("Quad's services only: the hold of an order, as it is."),
        reply: holdState)

    public static let stockAdjust = Operation(
        "catalog.stock.adjust", .mutation, auth: .admin,
        request: .object([
            "id": .string(1...64),
            "delta": .int(-1000000...1000000),
        ])
            .described("Admins only (a mutation: idempotent by envelope id). Adds delta to a product's stock; conflict (409) when stock would go below 0, not_found (404) for an unknown product. Publishes catalog.stock.changed."),
        reply: .object([
            "id": .string(1...64),
            "stock": .int(min: 0),
        ])
            .described("The product's stock after the change."))

    public static let productChanged = Event("catalog.product.changed", body: .ref("product.schema.json")
            .described("A product was created or changed (price, stock, anything): the body is the product as it is now, so a subscriber replaces its copy without asking."))

    public static let stockChanged = Event("catalog.stock.changed", body: .object([
            "product": .string(1...64)
                .described("The product id."),
            "stock": .int(min: 0),
            "delta": .int(),
        ])
            .described("A product's stock changed by delta and is now stock."))

    public static let productSchema = Definition("catalog/product.schema.json", title: "Product", .object([
            "id": .string(1...64),
            "name": .string(1...200),
            "price": .object([
                "value": .number(min: 0),
                "currency": .string(pattern: "^[A-Z]{3}$")
                    .described("ISO 4217 code."),
            ]),
            "info": .object([
                "color": .string().optional,
                "storage": .string().optional,
                "memory": .string().optional,
                "processor": .string().optional,
                "type": .string().optional,
            ])
                .described("Free-form specifications; every field is optional."),
            "type": .string()
                .described("The kind of product (Electronic, Book, Kit)."),
            "imageUrl": .string(),
            "category": .ref("#/$defs/category"),
            "collection": .string(min: 1)
                .described("The collection it is shown under (ShopEase's first screen)."),
            "stock": .int(min: 0)
                .described("Units available: not held by an order, not sold."),
        ])
            .described("One product of the marketplace, after ShopEase's product (id, name, price, info, type, imageUrl) with UniTrade's category, a collection and the stock on hand.")
            .definitions([
                "category": .choice(["Study", "Tech", "Creative", "Lab", "Personal", "Others"])
                    .described("UniTrade's categories. For You is not one: it is computed per user."),
            ]))

    public static let operations: [Operation] = [categories, collections, productGet, productsList, search, foryou, stockAdjust, stockHold, stockConfirm, stockRelease, stockGet]
    public static let events: [Event] = [productChanged, stockChanged]
    public static let definitions: [Definition] = [productSchema]
}
