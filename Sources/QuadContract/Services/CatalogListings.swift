import QuadWire

/// Students' own listings (issue 16, point 1): the events other services
/// read. The operations (catalog.listings.create, update, withdraw, mine,
/// takedown) are declared here too.
extension Contract.Catalog {
    /// How a listing may be traded.
    public static let listingModes = ["sale", "rent", "both"]

    public enum Listings {
        /// catalog.listing.created: a student listed an item. It carries no
        /// seller id: analytics and the phones read it, and a seller is only
        /// ever shown by display name.
        public struct Created: Body, Equatable {
            public var listing = ""
            public var category = ""
            public var collection = ""
            public var mode = "sale"
            public var price = 0.0
            public var currency = "USD"
            public var rentRate: Double?
            public var quantity: Int64 = 0
            public var createdAt: Int64 = 0
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.listing, "listing", .string(1...64).described("The listing's product id.")),
                .field(\.category, "category", .ref("product.schema.json#/$defs/category")),
                .field(\.collection, "collection", .string(1...64)),
                .field(\.mode, "mode", .choice(listingModes)),
                .field(\.price, "price", .number(min: 0)),
                .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$")),
                .field(\.rentRate, "rent_rate", .number(min: 0).optional),
                .field(\.quantity, "quantity", .int(min: 0)),
                .field(\.createdAt, "created_at", .int(min: 0).described("ms since epoch.")),
            ]
        }

        /// catalog.listing.closed: a listing left the marketplace.
        public struct Closed: Body, Equatable {
            public var listing = ""
            public var category = ""
            public var reason = "withdrawn"
            public var note: String?
            public var closedAt: Int64 = 0
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.listing, "listing", .string(1...64)),
                .field(\.category, "category", .ref("product.schema.json#/$defs/category")),
                .field(\.reason, "reason", .choice(["withdrawn", "taken_down"])
                    .described("withdrawn by its seller, or taken_down by an admin.")),
                .field(\.note, "note", .string(max: 500).described("An admin's reason for a take-down, as the seller sees it.").optional),
                .field(\.closedAt, "closed_at", .int(min: 0).described("ms since epoch.")),
            ]
        }
    }

    public static let listingCreated = TypedEvent<Listings.Created>("catalog.listing.created", body: Listings.Created.shape
            .described("A student listed an item for sale, rent or both; it is a product of the catalog from now on (catalog.product.changed follows)."))

    public static let listingClosed = TypedEvent<Listings.Closed>("catalog.listing.closed", body: Listings.Closed.shape
            .described("A listing was withdrawn by its seller or taken down by an admin; what was already held or sold stands."))

    static let listingEvents: [Event] = [listingCreated.event, listingClosed.event]
}
