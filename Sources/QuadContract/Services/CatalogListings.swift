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

        /// catalog.listing.sold: units of a listing were bought or rented.
        /// It names the seller, who is told, and never the buyer.
        public struct Sold: Body, Equatable {
            public var listing = ""
            public var order = ""
            public var seller = ""
            public var name = ""
            public var quantity: Int64 = 0
            public var mode = "buy"
            public var soldAt: Int64 = 0
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.listing, "listing", .string(1...64)),
                .field(\.order, "order", .string(1...64).described("The order that bought it: the sale's key, not its buyer.")),
                .field(\.seller, "seller", .string(1...128).described("The seller's user id (stays inside the backend).")),
                .field(\.name, "name", .string(max: ListingLimits.nameLength).described("The listing's name, as its seller wrote it.")),
                .field(\.quantity, "quantity", .int(min: 1)),
                .field(\.mode, "mode", .choice(["buy", "rent"])),
                .field(\.soldAt, "sold_at", .int(min: 0).described("ms since epoch.")),
            ]
        }
    }

    public static let listingCreated = TypedEvent<Listings.Created>("catalog.listing.created", body: Listings.Created.shape
            .described("A student listed an item for sale, rent or both; it is a product of the catalog from now on (catalog.product.changed follows)."))

    public static let listingClosed = TypedEvent<Listings.Closed>("catalog.listing.closed", body: Listings.Closed.shape
            .described("A listing was withdrawn by its seller or taken down by an admin; what was already held or sold stands."))

    public static let listingSold = TypedEvent<Listings.Sold>("catalog.listing.sold", body: Listings.Sold.shape
            .described("A confirmed order bought or rented units of a listing: once per order and listing (the key of the sale), in the transaction that records the sale. It names the seller and never the buyer; notifications tells the seller."))

    static let listingEvents: [Event] = [listingCreated.event, listingClosed.event, listingSold.event]
}

// MARK: - The operations of listings

extension Contract.Catalog {
    /// The conditions a listed item may be in (UniTrade's).
    public static let listingConditions = ["New", "Like new", "Good", "Used"]
    /// What a listing is, as its seller sees it in catalog.listings.mine.
    public enum ListingStatus: String, WireEnum, Sendable {
        case active, soldOut = "sold_out", withdrawn, takenDown = "taken_down"
    }
    public static let listingStatuses = ListingStatus.words

    /// The bounds of a listing. The numeric ones are catalog settings (a
    /// flag each, at most the cap beside it); the text lengths are fixed by
    /// the contract.
    public enum ListingLimits {
        /// Highest price.value (`max_listing_price`, --max-listing-price).
        public static let maxPrice = 10_000.0
        public static let maxPriceCap = 1_000_000.0
        /// Most units of one listing (`max_listing_quantity`, --max-listing-quantity).
        public static let maxQuantity: Int64 = 20
        public static let maxQuantityCap: Int64 = 100
        /// Highest rent rate per day (`max_rent_rate`, --max-rent-rate).
        public static let maxRentRate = 500.0
        public static let maxRentRateCap = 100_000.0
        /// Most images of one listing (`max_listing_images`, --max-listing-images).
        public static let maxImages: Int64 = 4
        public static let maxImagesCap: Int64 = 16
        /// Most listings one seller may ever make, withdrawn ones included
        /// (`max_listings_per_seller`, --max-listings-per-seller): a student
        /// cannot grow the catalog's store without bound.
        public static let maxPerSeller: Int64 = 100
        public static let maxPerSellerCap: Int64 = 100_000
        /// Text lengths, in Unicode scalars (fixed by the contract).
        public static let nameLength = 120          // max_listing_name_length
        public static let collectionLength = 64     // max_listing_collection_length
        public static let typeLength = 64           // max_listing_type_length
        public static let infoValueLength = 100     // max_listing_info_length
        public static let reasonLength = 500        // max_takedown_reason_length
    }

    /// A listing's `info`: Product.info's fields, each a bounded string.
    static let listingInfo: Shape = .object([
        "color": .string(max: ListingLimits.infoValueLength).limit("max_listing_info_length").optional,
        "storage": .string(max: ListingLimits.infoValueLength).limit("max_listing_info_length").optional,
        "memory": .string(max: ListingLimits.infoValueLength).limit("max_listing_info_length").optional,
        "processor": .string(max: ListingLimits.infoValueLength).limit("max_listing_info_length").optional,
        "type": .string(max: ListingLimits.infoValueLength).limit("max_listing_info_length").optional,
    ]).described("Free-form specifications like a product's info: color, storage, memory, processor, type; each optional, at most 100 characters (max_listing_info_length).")

    /// A listing's price: more than 0, at most max_listing_price, in the marketplace's currency.
    static let listingPrice: Shape = .object([
        "value": .number(min: 0).keyword("exclusiveMinimum", json: 0).cents.limit("max_listing_price")
            .described("More than 0 and at most max_listing_price (10000 by default, catalog's --max-listing-price), in whole cents (0.01); bad_request naming it otherwise."),
        "currency": .choice(["USD"]).described("The marketplace's currency, the seeded catalog's: every line of an order is in it."),
    ])

    static let listingImages: Shape = .array(of: .string(pattern: "^[0-9a-f]{64}$").described("The id (SHA-256) catalog.images.put answered."),
                                             max: Int(ListingLimits.maxImagesCap))
        .limit("max_listing_images")
        .described("Up to max_listing_images (4 by default, catalog's --max-listing-images) images already stored with catalog.images.put, by id, the first the product's imageUrl; an id catalog does not hold is not_found (404) naming it.")

    static let listingRentRate: Shape = .number(min: 0).keyword("exclusiveMinimum", json: 0).cents.limit("max_rent_rate")
        .described("The price of renting one unit for one day, in whole cents (0.01): more than 0, at most max_rent_rate (500 by default, catalog's --max-rent-rate). Required for mode rent and both; refused for sale.")

    static let listingQuantity: Shape = .int(min: 1).limit("max_listing_quantity")
        .described("Units listed: 1 to max_listing_quantity (20 by default, catalog's --max-listing-quantity).")

    public enum ListingOps {
        /// catalog.listings.create.
        public struct Create: Body {
            public var name = ""
            public var category = ""
            public var collection = ""
            public var price = Product.Price()
            public var info: JSON = .object([:])
            public var type = ""
            public var condition = ""
            public var quantity: Int64 = 1
            public var mode = "sale"
            public var rentRate: Double?
            public var images: [String] = []
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.name, "name", .string(1...ListingLimits.nameLength).limit("max_listing_name_length")),
                .field(\.category, "category", .ref("product.schema.json#/$defs/category")),
                .field(\.collection, "collection", .string(1...ListingLimits.collectionLength).limit("max_listing_collection_length")
                    .described("The collection it is shown under: an existing one or a new one.")),
                .field(\.price, "price", listingPrice),
                .field(\.info, "info", listingInfo.default([:]).optional),
                .field(\.type, "type", .string(1...ListingLimits.typeLength).limit("max_listing_type_length")
                    .described("The kind of item (Calculator, Book, Kit).")),
                .field(\.condition, "condition", .choice(listingConditions)),
                .field(\.quantity, "quantity", listingQuantity.default(1).optional),
                .field(\.mode, "mode", .choice(listingModes).described("sale (bought only), rent (rented only) or both.")),
                .field(\.rentRate, "rent_rate", listingRentRate.optional),
                .field(\.images, "images", listingImages.default([]).optional),
            ]
        }

        /// catalog.listings.update: what changes; an absent field stays.
        public struct Update: Body {
            public var listing = ""
            public var name: String?
            public var price: Product.Price?
            public var info: JSON?
            public var condition: String?
            public var quantity: Int64?
            public var mode: String?
            public var rentRate: Double?
            public var images: [String]?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.listing, "listing", .string(1...64).described("The listing's id (its product id, l-...).")),
                .field(\.name, "name", .string(1...ListingLimits.nameLength).limit("max_listing_name_length").optional),
                .field(\.price, "price", listingPrice.described("The price for new holds; a hold or sale already made keeps the price it was made at.").optional),
                .field(\.info, "info", listingInfo.optional),
                .field(\.condition, "condition", .choice(listingConditions).optional),
                .field(\.quantity, "quantity", listingQuantity
                    .described("Units listed, 1 to max_listing_quantity, and at least those held or sold now (conflict, 409, otherwise): the stock changes by the difference.").optional),
                .field(\.mode, "mode", .choice(listingModes).optional),
                .field(\.rentRate, "rent_rate", listingRentRate.optional),
                .field(\.images, "images", listingImages.optional),
            ]
        }

        /// catalog.listings.withdraw.
        public struct Withdraw: Body {
            public var listing = ""
            public init() {}
            public static let fields: [Field<Self>] = [.field(\.listing, "listing", .string(1...64))]
        }

        /// catalog.listings.takedown.
        public struct Takedown: Body {
            public var listing = ""
            public var reason = ""
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.listing, "listing", .string(1...64)),
                .field(\.reason, "reason", .string(1...ListingLimits.reasonLength).lines.limit("max_takedown_reason_length")
                    .described("Why, as the seller reads it in catalog.listings.mine.")),
            ]
        }

        /// catalog.listings.mine.
        public struct Mine: Body {
            public var offset: Int64 = 0
            public var limit: Int64 = 20
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.offset, "offset", .int(min: 0, default: 0).optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 20).limit("max_page_size").optional),
            ]
        }

        /// A listing as its seller (or the admin who took it down) sees it.
        public struct Listing: Body, Equatable {
            public var id = ""
            public var product = Product()
            public var status: ListingStatus = .active
            public var quantity: Int64 = 0
            public var inStock: Int64 = 0
            public var held: Int64 = 0
            public var sold: Int64 = 0
            public var rented: Int64 = 0
            public var returned: Int64 = 0
            public var revenue = 0.0
            public var fee = 0.0
            public var feeRate = 0.0
            public var currency = "USD"
            public var images: [String] = []
            public var reason: String?
            public var closedAt: Int64?
            public var updatedAt: Int64 = 0
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string(1...64).described("The listing's id: its product id, l- and 32 hex digits.")),
                .field(\.product, "product", .ref("product.schema.json").described("The product as buyers see it (stock 0 once withdrawn or taken down).")),
                .field(\.status, "status", .choice(listingStatuses)
                    .described("active, sold_out (nothing in stock now), withdrawn by its seller, taken_down by an admin (reason says why).")),
                .field(\.quantity, "quantity", .int(min: 0)
                    .described("Units listed now: always in_stock + held + sold + rented. A withdrawal or take-down unlists what was in stock, and what comes back after it.")),
                .field(\.inStock, "in_stock", .int(min: 0).described("Units buyers can take now.")),
                .field(\.held, "held", .int(min: 0).described("Units held by orders being placed.")),
                .field(\.sold, "sold", .int(min: 0).described("Units bought (confirmed, not cancelled).")),
                .field(\.rented, "rented", .int(min: 0).described("Units rented and not yet returned.")),
                .field(\.returned, "returned", .int(min: 0).described("Units rented and returned (back in stock while the listing is active).")),
                .field(\.revenue, "revenue", .number(min: 0)
                    .described("What buyers paid for it: the line totals of its confirmed orders (sales, and rentals at rent_rate times the days), not cancelled, as orders published them, and the late charge of each rental returned late (its late_days at the line's rent_rate, from orders.returned).")),
                .field(\.fee, "fee", .number(min: 0).described("The marketplace's fee kept on that revenue: fee_rate percent of each line, rounded to the cent.")),
                .field(\.feeRate, "fee_rate", .number(min: 0, max: 100).described("The fee's percent for the listing's category (listingFeeRates in the contract: orders' default --fees).")),
                .field(\.currency, "currency", .string(pattern: "^[A-Z]{3}$")),
                .field(\.images, "images", .array(of: .string(pattern: "^[0-9a-f]{64}$"), max: Int(ListingLimits.maxImagesCap))
                    .described("The ids of its images, in order; product.images has their URLs.")),
                .field(\.reason, "reason", .string(max: ListingLimits.reasonLength).described("taken_down only: the admin's reason.").optional),
                .field(\.closedAt, "closed_at", .int(min: 0).described("When it was withdrawn or taken down, ms since epoch.").optional),
                .field(\.updatedAt, "updated_at", .int(min: 0).described("Its last change, ms since epoch.")),
            ]
        }

        public struct MineReply: Body {
            public var listings: [Listing] = []
            public var total: Int64 = 0
            public var offset: Int64 = 0
            public var limit: Int64 = 0
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.listings, "listings", .array(of: Listing.shape, max: Int(maxPageSize))),
                .field(\.total, "total", .int(min: 0)),
                .field(\.offset, "offset", .int(min: 0)),
                .field(\.limit, "limit", .int(1...maxPageSize)),
            ]
        }
    }

    /// The marketplace fee by category, in percent: orders' default --fees
    /// ("Study=5,Tech=8,Creative=6,Lab=5,Personal=7,Others=10"), here so
    /// catalog can show a seller the fee kept without reaching into orders.
    /// An orders started with other --fees charges its own; this is what
    /// catalog.listings.mine reports.
    public static let listingFeeRates: [String: Double] = ["Study": 5, "Tech": 8, "Creative": 6, "Lab": 5, "Personal": 7, "Others": 10]

    public static let listingsCreate = TypedOperation<ListingOps.Create, ListingOps.Listing>(
        "catalog.listings.create", .mutation, auth: .user,
        request: ListingOps.Create.shape
            .described("A signed-in student lists an item for sale, rent or both. It becomes a product (id l-...) that catalog.products.list, catalog.search, catalog.categories and catalog.foryou show like the seeded ones, with the seller's display name (never an id or email). Every bound names its setting: bad_request (400) for a price of 0 or over max_listing_price, a quantity of 0 or over max_listing_quantity, a rent rate missing for mode rent or both, given for sale, or over max_rent_rate, more than max_listing_images images; not_found (404) naming an image id catalog does not hold; conflict (409) past max_listings_per_seller. Idempotent by envelope id. Publishes catalog.listing.created and catalog.product.changed."),
        reply: ListingOps.Listing.shape.described("The listing as created."))

    public static let listingsUpdate = TypedOperation<ListingOps.Update, ListingOps.Listing>(
        "catalog.listings.update", .mutation, auth: .user,
        request: ListingOps.Update.shape
            .described("Its seller changes an active listing: name, price, rent_rate, info, condition, quantity, images, mode; absent fields stay. What is already held or sold keeps its price. not_found (404) for a listing that is not the caller's (another's is never revealed); conflict (409) for a withdrawn or taken-down listing, or a quantity below what is held and sold; bad_request (400) as for create (a mode rent or both needs a rent_rate, given or kept). Publishes catalog.product.changed."),
        reply: ListingOps.Listing.shape.described("The listing as changed."))

    public static let listingsWithdraw = TypedOperation<ListingOps.Withdraw, ListingOps.Listing>(
        "catalog.listings.withdraw", .mutation, auth: .user,
        request: ListingOps.Withdraw.shape
            .described("Its seller withdraws a listing: status withdrawn, stock 0 for new buyers; holds and sales already made stand. A second call answers the listing as it is. not_found (404) for a listing that is not the caller's; conflict (409) for one taken down. Publishes catalog.listing.closed (reason withdrawn) and catalog.product.changed."),
        reply: ListingOps.Listing.shape.described("The listing as withdrawn."))

    public static let listingsTakedown = TypedOperation<ListingOps.Takedown, ListingOps.Listing>(
        "catalog.listings.takedown", .mutation, auth: .admin,
        request: ListingOps.Takedown.shape
            .described("Admins only: takes a listing down with a reason its seller sees in catalog.listings.mine; stock 0 for new buyers, holds and sales already made stand. forbidden (403) for anyone else; not_found (404) for no such listing. A second call answers it as it is (the first reason kept). Publishes catalog.listing.closed (reason taken_down, note the reason) and catalog.product.changed."),
        reply: ListingOps.Listing.shape.described("The listing as taken down."))

    public static let listingsMine = TypedOperation<ListingOps.Mine, ListingOps.MineReply>(
        "catalog.listings.mine", .query, auth: .user,
        request: ListingOps.Mine.shape.described("A page of the caller's listings, newest first."),
        reply: ListingOps.MineReply.shape
            .described("The caller's listings, newest first, each with its status, what is listed, in stock, held, sold, rented and returned, the revenue and the fee kept, and a take-down's reason; total counts them all."))

    static let listingOperations: [Operation] = [listingsCreate.operation, listingsUpdate.operation, listingsWithdraw.operation,
                                                 listingsTakedown.operation, listingsMine.operation]
}
