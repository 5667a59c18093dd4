import QuadWire
import Testing

@Suite("Error codes")
struct QuadErrorTests {
    /// Each constructor's code, its wire text and status; a body read back
    /// gives the same code, compared as a value.
    @Test func everyCodeTravelsAndComesBackTheSame() throws {
        let made: [(QuadError, String, Int)] = [
            (.badRequest("m"), "bad_request", 400), (.unauthorized("m"), "unauthorized", 401), (.forbidden("m"), "forbidden", 403),
            (.notFound("m"), "not_found", 404), (.conflict("m"), "conflict", 409), (.gone("m"), "gone", 410),
            (.tooLarge("m"), "too_large", 413), (.tooManyRequests("m"), "too_many_requests", 429),
            (.internal("m"), "internal", 500), (.unavailable("m"), "unavailable", 503), (.timeout("m"), "timeout", 504),
        ]
        #expect(Set(made.map(\.0.code)) == Set(QuadError.Code.all), "a constructor for every code, and no code without one")
        for (error, wire, status) in made {
            #expect(error.code.wire == wire && error.status == status && error.code.isKnown)
            let back = try #require(QuadError(body: error.body))
            #expect(back.code == error.code && back.status == status && back.message == "m")
            #expect(QuadError.Code(wire: wire) == error.code)
        }
    }

    /// A code this build does not send (a newer peer's) is kept as it came,
    /// and equals no code of Quad's.
    @Test func aForeignCodeIsKeptAsItCame() throws {
        let body: JSON = ["code": "payment_required", "status": 402, "message": "pay first"]
        let e = try #require(QuadError(body: body))
        #expect(e.code.wire == "payment_required" && !e.code.isKnown && e.status == 402)
        #expect(!QuadError.Code.all.contains(e.code))
        #expect(e.body["code"] == "payment_required")
        #expect("\(e)" == "payment_required (402): pay first")
    }
}
