import QuadWire

extension Contract {
    /// The wire part of the contract.
    public enum Wire {}
}

extension Contract.Wire {
    public static let envelopeSchema = Definition("envelope.schema.json", title: "Quad envelope", .object([
            "v": .const(1)
                .described("Protocol version. Anything else is answered with bad_request."),
            "id": .string(1...64)
                .described("Unique message id, a time-ordered UUIDv7 by convention. For a mutation it is also the idempotency key: a retry reuses it."),
            "type": .string(max: 128, pattern: "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$")
                .described("Dot-separated segments; the first names the service that answers (catalog.product.get). The broker answers sys.*."),
            "kind": .choice(["request", "reply", "error", "event"]),
            "corr": .string(max: 64)
                .described("On reply and error: the id of the request answered.").optional,
            "ts": .int(min: 0)
                .described("The sender's wall clock, ms since the Unix epoch.").optional,
            "src": .string(max: 128)
                .described("The sender: edge/alice, orders/2, broker.").optional,
            "deadline": .int(1...3600000)
                .described("On requests: how many ms the sender will wait. The broker answers unavailable when it passes with no worker.").optional,
            "token": .string(max: 4096)
                .described("On requests from outside: the session token the phone holds.").optional,
            "user": .string(max: 128)
                .described("The verified user id. Set by the broker only; never trusted from a client.").optional,
            "role": .string(max: 32)
                .described("The verified user's role (user, admin). Set by the broker only.").optional,
            "seq": .int(min: 1)
                .described("On events: strictly increasing per publishing service, starting at 1.").optional,
            "traceparent": .string(max: 256)
                .described("W3C Trace Context traceparent, 00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>: the trace of the request this message belongs to, with the sender's span as parent. Optional; the broker starts a trace for a request without one, and one it cannot read is replaced by a new trace, never refused.").optional,
            "body": .any
                .described("Any JSON. Its schema is named by type and kind (see protos/README.md); on kind error it is error.schema.json.").optional,
        ])
            .described("The one message of Quad: a UTF-8 JSON object in one ZeroMQ frame, the body of the Majordomo Protocol MDP/0.2 (RFC 18): a request is [\"MDPC02\", 0x01, service, envelope] and its answer [\"MDPC02\", 0x04, service, envelope], where service is the first segment of type (protos/README.md, Framing). Events go as [topic, envelope] over the broker's XSUB/XPUB. At most 1 MiB encoded (max_message_bytes); larger messages are answered with too_large (413).")
            .and(
                .when(.any.keyword("properties", json: ["kind": ["const": "reply"]]).keyword("required", json: ["kind"]), then: .any.keyword("required", json: ["corr"])),
                .when(.any.keyword("properties", json: ["kind": ["const": "error"]]).keyword("required", json: ["kind"]), then: .any.keyword("required", json: ["body"]).keyword("properties", json: ["body": ["$ref": "error.schema.json"]]))
                    .described("An error answers a request and carries corr, except an error for a message so broken that no id could be read from it."),
                .when(.any.keyword("properties", json: ["kind": ["const": "event"]]).keyword("required", json: ["kind"]), then: .any.keyword("required", json: ["seq"]))
            ))

    public static let errorSchema = Definition("error.schema.json", title: "Error body", .object([
            "code": .choice(["bad_request", "unauthorized", "forbidden", "not_found", "conflict", "gone", "too_large", "too_many_requests", "unavailable", "timeout", "internal"]),
            "status": .choice(values: [400, 401, 403, 404, 409, 410, 413, 429, 503, 504, 500]),
            "message": .string()
                .described("Names the problem, for people."),
            "details": .any
                .described("Anything machine-readable about the problem (the limit exceeded, the conflicting hold); null when there is none.").optional,
        ])
            .described("The body of an envelope of kind error. A phone decides to keep or drop an action from status: 4xx drops it and shows message, 5xx keeps it and retries.")
            .and(
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "bad_request"]]), then: .any.keyword("properties", json: ["status": ["const": 400]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "unauthorized"]]), then: .any.keyword("properties", json: ["status": ["const": 401]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "forbidden"]]), then: .any.keyword("properties", json: ["status": ["const": 403]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "not_found"]]), then: .any.keyword("properties", json: ["status": ["const": 404]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "conflict"]]), then: .any.keyword("properties", json: ["status": ["const": 409]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "gone"]]), then: .any.keyword("properties", json: ["status": ["const": 410]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "too_large"]]), then: .any.keyword("properties", json: ["status": ["const": 413]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "too_many_requests"]]), then: .any.keyword("properties", json: ["status": ["const": 429]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "unavailable"]]), then: .any.keyword("properties", json: ["status": ["const": 503]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "timeout"]]), then: .any.keyword("properties", json: ["status": ["const": 504]])),
                .when(.any.keyword("required", json: ["code"]).keyword("properties", json: ["code": ["const": "internal"]]), then: .any.keyword("properties", json: ["status": ["const": 500]]))
            ))

    public static let definitions: [Definition] = [envelopeSchema, errorSchema]
}
