import QuadWire

extension Contract {
    /// The favorites part of the contract.
    public enum Favorites {}
}

extension Contract.Favorites {
    /// Largest page of favorites.list (`max_page_size`) and of favorites.top (`max_top`).
    public static let maxPageSize: Int64 = 200
    public static let maxTop: Int64 = 50

    /// A product's summary as a list shows it, from the service's copy of
    /// the catalog (``summarySchema``), null when the copy lacks the product.
    static let summaryOrNull: Shape = .oneOf([.ref("summary.schema.json"), .null])

    /// What a favorite's `version` is, in every answer that gives one.
    static let versionDescription = "The favorite's version: the seq of the favorites service's last event about this user's favorite of this product (favorites.added or favorites.removed, whose envelope seq is the new version), 0 when it never had one. It outlives a removal. Of two copies of a favorite (a favorite, or not one), the one with the higher version is the newer, whichever way each came (the reply to favorites.add or favorites.remove, favorites.list)."

    /// favorites.add and favorites.remove: the product.
    public struct ProductRequest: Body {
        public var product = ""
        public init() {}
        public init(product: String) { self.product = product }
        public static let fields: [Field<Self>] = [.field(\.product, "product", .string(1...64))]
    }

    /// favorites.add and favorites.remove: the favorite as it now is.
    public struct Change: Body {
        public var product = ""
        public var favorite = false
        public var changed = false
        public var users: Int64 = 0
        /// The seq of the service's last event about this favorite (see `version`'s description).
        public var version: Int64?
        public init() {}
        public init(product: String, favorite: Bool, changed: Bool, users: Int64, version: Int64? = nil) {
            (self.product, self.favorite, self.changed, self.users, self.version) = (product, favorite, changed, users, version)
        }
        /// `favorite` is the constant this reply always carries.
        static func declared(favorite: Bool, minUsers: Int64) -> [Field<Self>] {
            [
                .field(\.product, "product", .string(1...64)),
                .field(\.favorite, "favorite", .const(.bool(favorite))),
                .field(\.changed, "changed", .bool),
                .field(\.users, "users", .int(min: minUsers)),
                .field(\.version, "version", .int(min: 0).described(versionDescription).optional),
            ]
        }
        public static let fields: [Field<Self>] = declared(favorite: true, minUsers: 0)
    }

    public static let add = TypedOperation<ProductRequest, Change>(
        "favorites.add", .mutation, auth: .user,
        request: ProductRequest.shape
            .described("Saves a product in the caller's favorites (a mutation: idempotent by envelope id, and by state: adding a favorite twice keeps one). not_found (404) for a product the service's copy of the catalog does not hold, once that copy is loaded; before the first catalog event arrives every id is taken. conflict (409) past max_favorites (1000). Publishes favorites.added when the favorite is new."),
        reply: .object(fields: Change.declared(favorite: true, minUsers: 1).map { ($0.name, $0.shape) }, open: false)
            .described("The product is a favorite of the caller; changed says whether this request made it one; users is how many users favor it now."))

    public struct CountReply: Body {
        public var product = ""
        public var users: Int64 = 0
        public init() {}
        public init(product: String, users: Int64) { (self.product, self.users) = (product, users) }
        public static let fields: [Field<Self>] = [
            .field(\.product, "product", .string(1...64)),
            .field(\.users, "users", .int(min: 0)),
        ]
    }

    public static let count = TypedOperation<ProductRequest, CountReply>(
        "favorites.count", .query, auth: .none,
        request: ProductRequest.shape
            .described("How many users favor a product. An aggregate: anyone may ask, and no user id is answered."))

    public enum List {
        public struct Request: Body {
            public var offset: Int64 = 0
            public var limit: Int64 = 50
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.offset, "offset", .int(min: 0, default: 0).optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 50).limit("max_page_size").optional),
            ]
        }
        public struct Item: Body {
            public var product = ""
            public var addedAt: Int64 = 0
            public var summary: JSON?
            public var version: Int64?
            public init() {}
            public init(product: String, addedAt: Int64, summary: JSON?, version: Int64? = nil) {
                (self.product, self.addedAt, self.summary, self.version) = (product, addedAt, summary, version)
            }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.addedAt, "added_at", .int(min: 0)),
                .field(\.summary, "summary", summaryOrNull),
                .field(\.version, "version", .int(min: 0).described(versionDescription).optional),
            ]
        }
        public struct Reply: Body {
            public var items: [Item] = []
            public var total: Int64 = 0
            public var offset: Int64 = 0
            public var limit: Int64 = 0
            /// The newest version of any of the caller's favorites, removed ones too.
            public var version: Int64?
            public init() {}
            public init(items: [Item], total: Int64, offset: Int64, limit: Int64, version: Int64? = nil) {
                (self.items, self.total, self.offset, self.limit, self.version) = (items, total, offset, limit, version)
            }
            public static let fields: [Field<Self>] = [
                .field(\.items, "items", .array(of: Item.shape, max: 200)),
                .field(\.total, "total", .int(min: 0)),
                .field(\.offset, "offset", .int(min: 0)),
                .field(\.limit, "limit", .int(1...200)),
                .field(\.version, "version", .int(min: 0).described("The list's version: the highest version of any of the caller's favorites, removed ones included, when the list was read. A favorite a phone holds at a higher version than this that the list lacks was added after the list was read; one at this version or lower that the list lacks was removed.").optional),
            ]
        }
    }

    public static let list = TypedOperation<List.Request, List.Reply>(
        "favorites.list", .query, auth: .user,
        request: List.Request.shape
            .described("A page of the caller's favorites, newest first. Only the caller's: a body naming a user is refused with forbidden (403)."),
        reply: List.Reply.shape
            .described("One page of favorites with when each was added (ms since epoch) and the product's summary, null when the service's copy of the catalog does not hold the product."))

    public static let remove = TypedOperation<ProductRequest, Change>(
        "favorites.remove", .mutation, auth: .user,
        request: ProductRequest.shape
            .described("Removes a product from the caller's favorites (a mutation: idempotent by envelope id, and by state: removing what is not a favorite changes nothing). Publishes favorites.removed when a favorite was removed."),
        reply: .object(fields: Change.declared(favorite: false, minUsers: 0).map { ($0.name, $0.shape) }, open: false)
            .described("The product is not a favorite of the caller; changed says whether this request removed it; users is how many users favor it now."))

    public enum Top {
        public struct Request: Body {
            public var limit: Int64 = 10
            public var category: String?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.limit, "limit", .int(1...maxTop, default: 10).limit("max_top").optional),
                .field(\.category, "category", .ref("../catalog/product.schema.json#/$defs/category").optional),
            ]
        }
        public struct Product: Body {
            public var product = ""
            public var users: Int64 = 0
            public var summary: JSON?
            public init() {}
            public init(product: String, users: Int64, summary: JSON?) { (self.product, self.users, self.summary) = (product, users, summary) }
            public static let fields: [Field<Self>] = [
                .field(\.product, "product", .string(1...64)),
                .field(\.users, "users", .int(min: 1)),
                .field(\.summary, "summary", summaryOrNull),
            ]
        }
        public struct Reply: Body {
            public var products: [Product] = []
            public init() {}
            public init(products: [Product]) { self.products = products }
            public static let fields: [Field<Self>] = [.field(\.products, "products", .array(of: Product.shape, max: 50))]
        }
    }

    public static let top = TypedOperation<Top.Request, Top.Reply>(
        "favorites.top", .query, auth: .none,
        request: Top.Request.shape
            .described("The most favored products, most users first (ties by product id), optionally within one category. An aggregate: anyone may ask."))

    /// favorites.added and favorites.removed: whose favorites, which product.
    public struct Changed: Body {
        public var user = ""
        public var product = ""
        public init() {}
        public init(user: String, product: String) { (self.user, self.product) = (user, product) }
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .string(1...128)),
            .field(\.product, "product", .string(1...64)),
        ]
    }

    public static let added = TypedEvent<Changed>("favorites.added", body: Changed.shape
            .described("A user's favorites changed: the product was added. Published only when the state changed, so counting these events gives the number of users who favor a product."))

    public static let removed = TypedEvent<Changed>("favorites.removed", body: Changed.shape
            .described("A user's favorites changed: the product was removed. Published only when the state changed, so counting these events gives the number of users who favor a product."))

    public static let summarySchema = Definition("favorites/summary.schema.json", title: "Product summary", .object([
            "name": .string(1...200),
            "price": .ref("../catalog/product.schema.json#/properties/price"),
            "category": .ref("../catalog/product.schema.json#/$defs/category"),
            "imageUrl": .string(),
            "stock": .int(min: 0),
        ])
            .described("What a list shows beside a product, from the service's own copy of the catalog (kept from catalog.product.changed and catalog.stock.changed events): it can lag the catalog by the time an event takes to arrive."))

    public static let operations: [Operation] = [add.operation, count.operation, list.operation, remove.operation, top.operation]
    public static let events: [Event] = [added.event, removed.event]
    public static let definitions: [Definition] = [summarySchema]
}
