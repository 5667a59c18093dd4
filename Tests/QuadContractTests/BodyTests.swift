import QuadContract
import QuadWire
import Testing

/// A body type's one list of fields gives its schema, its decoding and its
/// encoding: these checks fail when any of the three drifts from the others.
@Suite struct BodyTests {
    /// A small body with every kind of field: required, defaulted,
    /// optional, nullable, nested, an array of bodies, and open JSON.
    struct Sample: Body {
        var name = ""
        var limit: Int64 = 20
        var note: String?
        var summary: JSON?
        var inner = Inner()
        var rows: [Inner] = []
        var extra: JSON = .null
        static let fields: [Field<Self>] = [
            .field(\.name, "name", .string(1...8)),
            .field(\.limit, "limit", .int(1...50, default: 20).limit("max_page_size").optional),
            .field(\.note, "note", .string(max: 10).optional),
            .field(\.summary, "summary", .oneOf([.object(["x": .int()]), .null])),
            .field(\.inner, "inner", Inner.shape),
            .field(\.rows, "rows", .array(of: Inner.shape, max: 3)),
            .field(\.extra, "extra", .any),
        ]
    }
    struct Inner: Body, Equatable {
        var ok = false
        var ratio: Double?
        static let fields: [Field<Self>] = [
            .field(\.ok, "ok", .bool),
            .field(\.ratio, "ratio", .number(min: 0).optional),
        ]
    }

    @Test func fieldsGiveTheSchema() {
        let schema = Sample.shape.schema
        #expect(schema["type"] == "object")
        #expect(schema["additionalProperties"] == false)
        // Required in declaration order; optional fields left out.
        #expect(schema["required"] == ["name", "summary", "inner", "rows", "extra"])
        #expect(schema["properties"]?["limit"] == ["type": "integer", "minimum": 1, "maximum": 50, "default": 20, "x-quad-limit": "max_page_size"])
        #expect(schema["properties"]?["inner"]?["required"] == ["ok"])
        #expect(schema["properties"]?["rows"]?["items"] == Inner.shape.schema)
    }

    @Test func decodingTakesDefaultsAndOptionals() throws {
        let s = try Sample(json: ["name": "ana", "summary": .null, "inner": ["ok": true], "rows": [["ok": false, "ratio": 0.5]], "extra": ["any": [1, 2]]])
        #expect(s.name == "ana")
        #expect(s.limit == 20)  // the shape's default
        #expect(s.note == nil)
        #expect(s.summary == nil)
        #expect(s.inner == Inner(ok: true, ratio: nil))
        #expect(s.rows == [Inner(ok: false, ratio: 0.5)])
        #expect(s.extra == ["any": [1, 2]])
    }

    @Test func encodingRoundTrips() throws {
        var s = Sample()
        s.name = "bo"
        s.limit = 7
        s.summary = ["x": 1]
        s.rows = [Inner(ok: true, ratio: 1.5)]
        let json = s.json
        // An optional nil is left out; a nullable nil is written as null.
        #expect(json["note"] == nil)
        #expect(Sample(summary: nil).json["summary"] == .null)
        #expect(json["inner"] == ["ok": false])
        #expect(Validator.contract.failure(of: json, against: Sample.shape, in: "test.json") == nil)
        let back = try Sample(json: json)
        #expect(back.json == json)
    }

    @Test func refusalsNameTheFieldAndTheLimit() throws {
        let over = Validator.contract.failure(of: ["name": "ana", "limit": 51, "summary": .null, "inner": ["ok": true], "rows": [], "extra": 1],
                                              against: Sample.shape, in: "test.json")
        #expect(over?.message.contains("body.limit") == true)
        #expect(over?.message.contains("max_page_size") == true)
        // Decoding a body that skipped the validator still names the field.
        #expect(throws: QuadError.self) { try Sample(json: ["name": 3]) }
        let nested = #expect(throws: QuadError.self) {
            try Sample(json: ["name": "a", "summary": .null, "inner": ["ok": "yes"], "rows": [], "extra": 1])
        }
        #expect(nested?.message == "body.inner.ok must be a boolean")
        let inRow = #expect(throws: QuadError.self) {
            try Sample(json: ["name": "a", "summary": .null, "inner": ["ok": true], "rows": [["ok": 1]], "extra": 1])
        }
        #expect(inRow?.message == "body.rows[0].ok must be a boolean")
    }

    /// Favorites' operations are typed, and their types give the shapes
    /// `protos/` holds (the protos test checks the bytes).
    @Test func favoritesOperationsAreTheirTypes() throws {
        let list = Contract.Favorites.list
        #expect(list.operation.request.schema["properties"] == Contract.Favorites.List.Request.shape.schema["properties"])
        let request = try Contract.Favorites.List.Request(json: [:])
        #expect(request.offset == 0 && request.limit == 50)
        let reply = Contract.Favorites.List.Reply(items: [.init(product: "p1", addedAt: 5, summary: nil)], total: 1, offset: 0, limit: 50)
        #expect(Contract.validateReply("favorites.list", reply.json) == nil)
        #expect(Contract.validateReply("favorites.list", ["items": [], "total": -1, "offset": 0, "limit": 50])?.message.contains("body.total") == true)
    }
}

extension BodyTests {
    /// accounts and catalog: each body declared once. A revocation is one
    /// type in a logout's reply, each accounts.revocations entry and the
    /// accounts.session.revoked event; the two profile events share one
    /// body; the stock calls answer one hold type.
    @Test func accountsAndCatalogBodiesAreDeclaredOnce() throws {
        typealias A = Contract.Accounts
        let revocation = A.Revocation.shape.schema["properties"]
        #expect(A.logout.operation.reply.schema["properties"] == revocation)
        #expect(A.sessionRevoked.event.body.schema["properties"] == revocation)
        #expect(A.revocations.operation.reply.schema["properties"]?["revocations"]?["items"]?["properties"] == revocation)
        #expect(A.userRegistered.event.body.schema["properties"] == A.PublicProfile.shape.schema["properties"])
        #expect(A.userUpdated.event.body.schema["properties"] == A.PublicProfile.shape.schema["properties"])
        #expect(Contract.validateReply("accounts.logout", A.Revocation(user: "0192f3a4-5b6c-7d8e-9f01-23456789abcd", jti: nil, beforeMs: 1, untilMs: 2).json) == nil)

        typealias S = Contract.Catalog.Stock
        let hold = S.Hold(order: "o-1", status: .held, expiresAt: 5, items: [.init(product: "p-1", quantity: 2, price: 12, category: "Lab")])
        for type in ["catalog.stock.hold", "catalog.stock.confirm", "catalog.stock.release", "catalog.stock.get"] {
            #expect(Contract.validateReply(type, hold.json) == nil, "\(type)")
        }
        #expect(try S.Hold(json: hold.json) == hold)
        var over = hold
        over.items[0].quantity = 0
        #expect(Contract.validateReply("catalog.stock.get", over.json)?.message.contains("body.items[0].quantity") == true)
        #expect(Contract.validate("catalog.stock.hold", S.HoldRequest(order: "o-1", items: []).json)?.message.hasPrefix("body.items must have at least 1 item") == true)
    }
}

extension BodyTests.Sample {
    init(summary: JSON?) { self.init(); self.summary = summary }
}

extension BodyTests {
    /// The escape hatch keeps a reply whole through the generic path a
    /// handler's reply takes, and a map decodes member by member.
    @Test func openPartsStayWhole() throws {
        func roundTrip<B: Body>(_ body: B) throws -> JSON { try B(json: body.json).json }
        let answer: JSON = ["id": "holds_outcome", "rows": [[1, "a", .null]], "from": 0, "to": 5]
        #expect(try roundTrip(JSONBody(answer)) == answer)
        let summary = Contract.Analytics.Summary.Reply(generatedAt: 1, from: 0, to: 2, questions: [answer], facts: ["orders": 3])
        #expect(try roundTrip(summary) == summary.json)
        #expect(summary.json["facts"] == ["orders": 3])
        let bad = #expect(throws: QuadError.self) { try Contract.Analytics.Summary.Reply(json: ["generated_at": 1, "from": 0, "to": 2, "questions": [], "facts": ["orders": "x"]]) }
        #expect(bad?.message == "body.facts.orders must be an integer")
    }
}
