import QuadWire

extension Contract {
    /// The analytics part of the contract.
    public enum Analytics {}
}

extension Contract.Analytics {
    public static let question = Operation(
        "analytics.question", .query, auth: .admin,
        request: .object([
            "id": .string().keyword("enum", json: ["buy_vs_rent", "carts_abandoned", "favorites_to_purchases", "fee_per_week", "forecast_before_search", "hold_to_checkin", "holds_outcome", "nearby_parked", "occupancy_by_level_hour", "offline_actions", "purchase_screen", "purchases_by_semester", "sessions_in_reservation_flow", "special_spots_demand"]),
            "from": .int(min: 0)
                .described("Start of the period, inclusive, ms since 1970 (default 0).").optional,
            "to": .int(min: 1)
                .described("End of the period, exclusive, ms since 1970 (default: no end).").optional,
        ])
            .described("Admins only. One business question for the period [from, to); not_found (404) naming the known ids for another id."),
        reply: .allOf([
            .ref("answer.schema.json"),
        ])
            .described("The question's answer, with the period it covers.").keyword("required", json: ["from", "to"]))

    public static let summary = Operation(
        "analytics.summary", .query, auth: .admin,
        request: .object([
            "from": .int(min: 0)
                .described("Start of the period, inclusive, ms since 1970 (default 0).").optional,
            "to": .int(min: 1)
                .described("End of the period, exclusive, ms since 1970 (default: no end).").optional,
        ])
            .described("Admins only. Every business question answered for the period [from, to), in dashboard order. GET /api/v1/analytics/summary on the dashboard's HTTP port answers the same for the whole history (recomputed every few seconds when facts changed)."),
        reply: .object([
            "generated_at": .int(min: 0),
            "from": .int(min: 0),
            "to": .int(min: 1),
            "questions": .array(of: .ref("answer.schema.json")),
            "facts": .map(of: .int(min: 0)),
        ])
            .described("The answers, and how many facts analytics holds by table (how far the feeds have come)."))

    public static let answerSchema = Definition("analytics/answer.schema.json", title: "the answer to one business question", .object([
            "id": .string().keyword("enum", json: ["buy_vs_rent", "carts_abandoned", "favorites_to_purchases", "fee_per_week", "forecast_before_search", "hold_to_checkin", "holds_outcome", "nearby_parked", "occupancy_by_level_hour", "offline_actions", "purchase_screen", "purchases_by_semester", "sessions_in_reservation_flow", "special_spots_demand"]),
            "title": .string(min: 1),
            "app": .string().keyword("enum", json: ["UniTrade", "ParkWise"]),
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

    public static let operations: [Operation] = [question, summary]
    public static let definitions: [Definition] = [answerSchema]
}
