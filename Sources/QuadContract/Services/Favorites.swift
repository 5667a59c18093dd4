import QuadWire

extension Contract {
    /// The favorites part of the contract.
    public enum Favorites {}
}

extension Contract.Favorites {
    /// Largest page of favorites.list (`max_page_size`) and of favorites.top (`max_top`).
    public static let maxPageSize: Int64 = 200
    public static let maxTop: Int64 = 50

    public static let add = Operation(
        "favorites.add", .mutation, auth: .user,
        request: .object([
            "product": .string(1...64),
        ])
            .described("Saves a product in the caller's favorites (a mutation: idempotent by envelope id, and by state: adding a favorite twice keeps one). not_found (404) for a product the service's copy of the catalog does not hold, once that copy is loaded; before the first catalog event arrives every id is taken. conflict (409) past max_favorites (1000). Publishes favorites.added when the favorite is new."),
        reply: .object([
            "product": .string(1...64),
            "favorite": .const(true),
            "changed": .bool,
            "users": .int(min: 1),
        ])
            .described("The product is a favorite of the caller; changed says whether this request made it one; users is how many users favor it now."))

    public static let count = Operation(
        "favorites.count", .query, auth: .none,
        request: .object([
            "product": .string(1...64),
        ])
            .described("How many users favor a product. An aggregate: anyone may ask, and no user id is answered."),
        reply: .object([
            "product": .string(1...64),
            "users": .int(min: 0),
        ]))

    public static let list = Operation(
        "favorites.list", .query, auth: .user,
        request: .object([
            "offset": .int(min: 0, default: 0).optional,
            "limit": .int(1...maxPageSize, default: 50).limit("max_page_size").optional,
        ])
            .described("A page of the caller's favorites, newest first. Only the caller's: a body naming a user is refused with forbidden (403)."),
        reply: .object([
            "items": .array(of: .object([
                    "product": .string(1...64),
                    "added_at": .int(min: 0),
                    "summary": .oneOf([
                        .ref("summary.schema.json"),
                        .null,
                    ]),
                ]), max: 200),
            "total": .int(min: 0),
            "offset": .int(min: 0),
            "limit": .int(1...200),
        ])
            .described("One page of favorites with when each was added (ms since epoch) and the product's summary, null when the service's copy of the catalog does not hold the product."))

    public static let remove = Operation(
        "favorites.remove", .mutation, auth: .user,
        request: .object([
            "product": .string(1...64),
        ])
            .described("Removes a product from the caller's favorites (a mutation: idempotent by envelope id, and by state: removing what is not a favorite changes nothing). Publishes favorites.removed when a favorite was removed."),
        reply: .object([
            "product": .string(1...64),
            "favorite": .const(false),
            "changed": .bool,
            "users": .int(min: 0),
        ])
            .described("The product is not a favorite of the caller; changed says whether this request removed it; users is how many users favor it now."))

    public static let top = Operation(
        "favorites.top", .query, auth: .none,
        request: .object([
            "limit": .int(1...maxTop, default: 10).limit("max_top").optional,
            "category": .ref("../catalog/product.schema.json#/$defs/category").optional,
        ])
            .described("The most favored products, most users first (ties by product id), optionally within one category. An aggregate: anyone may ask."),
        reply: .object([
            "products": .array(of: .object([
                    "product": .string(1...64),
                    "users": .int(min: 1),
                    "summary": .oneOf([
                        .ref("summary.schema.json"),
                        .null,
                    ]),
                ]), max: 50),
        ]))

    public static let added = Event("favorites.added", body: .object([
            "user": .string(1...128),
            "product": .string(1...64),
        ])
            .described("A user's favorites changed: the product was added. Published only when the state changed, so counting these events gives the number of users who favor a product."))

    public static let removed = Event("favorites.removed", body: .object([
            "user": .string(1...128),
            "product": .string(1...64),
        ])
            .described("A user's favorites changed: the product was removed. Published only when the state changed, so counting these events gives the number of users who favor a product."))

    public static let summarySchema = Definition("favorites/summary.schema.json", title: "Product summary", .object([
            "name": .string(1...200),
            "price": .ref("../catalog/product.schema.json#/properties/price"),
            "category": .ref("../catalog/product.schema.json#/$defs/category"),
            "imageUrl": .string(),
            "stock": .int(min: 0),
        ])
            .described("What a list shows beside a product, from the service's own copy of the catalog (kept from catalog.product.changed and catalog.stock.changed events): it can lag the catalog by the time an event takes to arrive."))

    public static let operations: [Operation] = [add, count, list, remove, top]
    public static let events: [Event] = [added, removed]
    public static let definitions: [Definition] = [summarySchema]
}
