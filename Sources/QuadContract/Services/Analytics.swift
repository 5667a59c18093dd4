import QuadWire

extension Contract {
    /// The analytics part of the contract.
    public enum Analytics {}
}

extension Contract.Analytics {
    static let fromField: Shape = .int(min: 0).described("Start of the period, inclusive, ms since 1970 (default 0).").optional
    static let toField: Shape = .int(min: 1).described("End of the period, exclusive, ms since 1970 (default: no end).").optional

    public enum Question {
        public struct Request: Body {
            public var id = ""
            public var from: Int64?
            public var to: Int64?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string().keyword("enum", json: ["buy_vs_rent", "car_found_offline", "carts_abandoned", "drivers_signed_in", "favorites_to_purchases", "fee_per_week", "forecast_before_search", "hold_to_checkin", "holds_outcome", "listings_sold_within_week", "lot_full_by_hour", "nearby_parked", "occupancy_by_level_hour", "offline_actions", "purchase_screen", "purchases_by_semester", "recommended_level", "sessions_in_reservation_flow", "special_spots_demand", "special_spots_free"])),
                .field(\.from, "from", fromField),
                .field(\.to, "to", toField),
            ]
        }
    }

    public static let question = TypedOperation<Question.Request, JSONBody>(
        "analytics.question", .query, auth: .admin,
        request: Question.Request.shape
            .described("Admins only. One business question for the period [from, to); not_found (404) naming the known ids for another id."),
        reply: .allOf([
            .ref("answer.schema.json"),
        ])
            .described("The question's answer, with the period it covers.").keyword("required", json: ["from", "to"]))

    public enum Summary {
        public struct Request: Body {
            public var from: Int64?
            public var to: Int64?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.from, "from", fromField),
                .field(\.to, "to", toField),
            ]
        }
        public struct Reply: Body {
            public var generatedAt: Int64 = 0
            public var from: Int64 = 0
            public var to: Int64 = 1
            /// Each an `answer.schema.json`, built by the analytics library.
            public var questions: [JSON] = []
            /// Facts held, by table.
            public var facts: [String: Int64] = [:]
            public init() {}
            public init(generatedAt: Int64, from: Int64, to: Int64, questions: [JSON], facts: [String: Int64]) {
                (self.generatedAt, self.from, self.to, self.questions, self.facts) = (generatedAt, from, to, questions, facts)
            }
            public static let fields: [Field<Self>] = [
                .field(\.generatedAt, "generated_at", .int(min: 0)),
                .field(\.from, "from", .int(min: 0)),
                .field(\.to, "to", .int(min: 1)),
                .field(\.questions, "questions", .array(of: .ref("answer.schema.json"))),
                .field(\.facts, "facts", .map(of: .int(min: 0))),
            ]
        }
    }

    public static let summary = TypedOperation<Summary.Request, Summary.Reply>(
        "analytics.summary", .query, auth: .admin,
        request: Summary.Request.shape
            .described("Admins only. Every business question answered for the period [from, to), in dashboard order. GET /api/v1/analytics/summary on the dashboard's HTTP port answers the same for the whole history (recomputed every few seconds when facts changed)."),
        reply: Summary.Reply.shape
            .described("The answers, and how many facts analytics holds by table (how far the feeds have come)."))

    public static let answerSchema = Definition("analytics/answer.schema.json", title: "the answer to one business question", .object([
            "id": .string().keyword("enum", json: ["buy_vs_rent", "car_found_offline", "carts_abandoned", "drivers_signed_in", "favorites_to_purchases", "fee_per_week", "forecast_before_search", "hold_to_checkin", "holds_outcome", "listings_sold_within_week", "lot_full_by_hour", "nearby_parked", "occupancy_by_level_hour", "offline_actions", "purchase_screen", "purchases_by_semester", "recommended_level", "sessions_in_reservation_flow", "special_spots_demand", "special_spots_free"]),
            "title": .string(min: 1),
            "app": .string().keyword("enum", json: ["UniTrade", "ParkWise", "Campus"])
                .described("The app it is about; Campus for both."),
            "number": .string(pattern: "^(BQ|UQ)[1-9][0-9]?$")
                .described("The app's number for it: ParkWise's BQ1 to BQ12, as its seed numbers them; UniTrade's UQ1 (purchase screen) and UQ2 (purchases by semester).").optional,
            "type": .int(1...4)
                .described("The seed's question type: 1 the app's speed and stability, 2 answered back to the user in the app (ParkWise's through analytics.driver), 3 how users (drivers, students) use a feature, 4 the campus's business.").optional,
            "owner": .string(min: 1)
                .described("The team member who answers for it, with their platform and views.").optional,
            "description": .string(),
            "chart": .array(of: .string(), min: 3)
                .keyword("prefixItems", [
                    .choice(["bar", "heat"]),
                ]),
            "columns": .array(of: .string(pattern: "^[a-z_]+$"), min: 1),
            "rows": .array(of: .array(of: .any.types(["string", "number", "null"]))),
            "from": .int(min: 0).optional,
            "to": .int(min: 1).optional,
        ])
            .described("One question's SQL result: named columns and rows of values (aggregates only: counts, sums, shares, days, lots, categories; never a user id or email). chart says how the dashboard draws it: [\"bar\", LABEL, VALUE...] or [\"heat\", ROW, COLUMN, VALUE], naming columns. A null value is unknown (a buyer without a known semester) or not defined (a share of nothing)."))

    public enum Driver {
        public struct Request: Body {
            public var from: Int64?
            public var to: Int64?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.from, "from", .int(min: 0).described("Start of the period, inclusive, ms since 1970 (default: 30 days before now).").optional),
                .field(\.to, "to", toField),
            ]
        }
        public struct Reply: Body {
            public var generatedAt: Int64 = 0
            public var from: Int64 = 0
            public var to: Int64 = 1
            /// Each an `answer.schema.json` of a Type 2 question.
            public var answers: [JSON] = []
            public init() {}
            public init(generatedAt: Int64, from: Int64, to: Int64, answers: [JSON]) {
                (self.generatedAt, self.from, self.to, self.answers) = (generatedAt, from, to, answers)
            }
            public static let fields: [Field<Self>] = [
                .field(\.generatedAt, "generated_at", .int(min: 0)),
                .field(\.from, "from", .int(min: 0)),
                .field(\.to, "to", .int(min: 1)),
                .field(\.answers, "answers", .array(of: .ref("answer.schema.json"), max: 12)),
            ]
        }
    }

    public static let driver = TypedOperation<Driver.Request, Driver.Reply>(
        "analytics.driver", .query, auth: .user,
        request: Driver.Request.shape
            .described("Any signed-in user. The answers of ParkWise's Type 2 questions (BQ2, BQ6, BQ10, BQ12: which level and hour, which lot is full when, where accessible and EV spots are free) for the period [from, to), the last 30 days by default, as the phone shows them to the driver. Aggregates of the whole campus only: no user id, nothing about one driver, not even the caller."),
        reply: Driver.Reply.shape
            .described("The Type 2 answers, by number."))

    public static let operations: [Operation] = [question.operation, summary.operation, driver.operation]
    public static let definitions: [Definition] = [answerSchema]
}
