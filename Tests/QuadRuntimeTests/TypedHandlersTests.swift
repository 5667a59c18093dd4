import QuadContract
import QuadRuntime
import QuadWire
import Testing

/// Handlers registered by their contract operation get the request as its
/// Swift type, after the validator, and return the reply's type.
@Suite struct TypedHandlersTests {
    final class Seen: @unchecked Sendable { var lists: [Contract.Catalog.ListRequest] = [] }

    func catalog(reply: Contract.Catalog.ListReply = .init(products: [], total: 0, offset: 0, limit: 20)) -> (Handlers, Seen) {
        let h = Handlers(service: "catalog", instance: "catalog/test", db: nil)
        let seen = Seen()
        h.query(Contract.Catalog.productsList) { _, body in seen.lists.append(body); return reply }
        h.query(Contract.Catalog.foryou) { req, _ in _ = try req.requireUser(); return .init(products: [], categories: []) }
        return (h, seen)
    }

    @Test func theHandlerGetsTheTypedRequestWithItsDefaults() throws {
        let (h, seen) = catalog()
        let reply = h.handle(.request("catalog.products.list", body: [:]))
        #expect(reply.kind == .reply)
        #expect(reply.body == ["products": [], "total": 0, "offset": 0, "limit": 20])
        let first = try #require(seen.lists.first)
        #expect(first.limit == 20 && first.offset == 0 && first.sort == "name" && !first.inStock && first.q == nil)
        _ = h.handle(.request("catalog.products.list", body: ["in_stock": true, "sort": "-price", "min_price": 10, "limit": 5]))
        let second = try #require(seen.lists.last)
        #expect(second.inStock && second.sort == "-price" && second.minPrice == 10 && second.limit == 5)
        // The validator still refuses first, naming the limit.
        #expect(h.handle(.request("catalog.products.list", body: ["limit": 500])).quadError?.message == "body.limit must be between 1 and 200 (max_page_size)")
        #expect(seen.lists.count == 2)
    }

    /// A stranger's body is not read: 401 whatever it holds, as for the
    /// JSON handlers.
    @Test func aStrangerHearsTheAuthRefusalFirst() {
        let (h, _) = catalog()
        #expect(h.handle(.request("catalog.foryou", body: ["limit": "many"])).quadError?.status == 401)
        #expect(h.handle(.request("catalog.foryou", body: [:])).quadError?.status == 401)
        #expect(h.handle(.request("catalog.foryou", body: ["limit": "many"], user: "u-1")).quadError?.status == 400)
        #expect(h.handle(.request("catalog.foryou", body: [:], user: "u-1")).kind == .reply)
    }

    /// A typed reply outside its contract's bounds is a 500 naming the
    /// field in a debug build, not a reply the phone cannot read.
    @Test func aReplyOutsideItsContractIsCaughtInDebugBuilds() {
        let (h, _) = catalog(reply: .init(products: [], total: -1, offset: 0, limit: 20))
        let reply = h.handle(.request("catalog.products.list", body: [:]))
        #if DEBUG
        #expect(reply.quadError?.status == 500)
        #expect(reply.quadError?.message.contains("body.total") == true)
        #else
        #expect(reply.kind == .reply)
        #endif
    }
}
