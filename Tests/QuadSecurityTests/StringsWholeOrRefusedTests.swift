import Foundation
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// Strings are whole or refused (issue 12, point 2), through a real broker
/// and real workers: a product id with a trailing NUL is a 400, never an
/// order confirmed at 0; NUL anywhere is a 400; a limit in characters is
/// not a megabyte of combining marks.
@Suite("Strings are whole or refused", .serialized)
struct StringsWholeOrRefusedTests {
    @Test func aTrailingNULProductIDIsRefusedNotConfirmedAtZero() throws {
        let full = try FullStack("strings")
        for needed in ["accounts", "catalog", "favorites", "orders", "reservations"] {
            try #require(full.running.contains(needed), "quad-\(needed) is not built")
        }
        let c = try full.client()
        _ = try c.request("accounts.register", ["email": "nul@uni.edu", "password": "nul-pass-8c2d4a", "name": "Nul", "semester": 3],
                          timeoutMs: 8000, attempts: 1)
        let token = try #require(try c.request("accounts.login", ["email": "nul@uni.edu", "password": "nul-pass-8c2d4a"],
                                               timeoutMs: 8000, attempts: 1)["token"]?.string)
        let me = try full.client(token: token)
        let listed = try c.request("catalog.products.list", ["in_stock": true, "limit": 5], timeoutMs: 8000, attempts: 1)
        let product = try #require(listed["products"]?.array?.first { ($0["stock"]?.int ?? 0) >= 2 })
        let id = try #require(product["id"]?.string)
        let stock = try #require(product["stock"]?.int)
        // Orders knows the product once catalog's events reached it.
        #expect(try full.eventually(30_000) {
            (try? me.call(.request("orders.cart.add", body: ["product": .string(id), "quantity": 1]), timeoutMs: 8000, attempts: 1))?.kind == .reply
        })
        _ = try me.call(.request("orders.cart.clear"), timeoutMs: 8000, attempts: 1)

        let placed = try me.call(.request("orders.place", body: ["source": "buy_now", "product": .string(id + "\u{0}"), "quantity": 1]),
                                 timeoutMs: 8000, attempts: 1)
        #expect(placed.quadError?.status == 400 && placed.quadError?.code == .badRequest, "\(placed.kind) \(placed.body.text)")
        #expect(placed.quadError?.message.contains("U+0000") == true, "\(placed.body.text)")
        #expect(placed.body["total"] == nil && placed.body["order"] == nil && placed.body["items"] == nil)
        #expect(try me.request("orders.mine", [:], timeoutMs: 8000, attempts: 1)["total"]?.int == 0)
        let after = try c.request("catalog.product.get", ["id": .string(id)], timeoutMs: 8000, attempts: 1)
        #expect(after["stock"]?.int == stock, "the stock moved: \(after.text)")

        // NUL anywhere, to each service, in values and in keys: 400.
        let hostile: [(String, JSON)] = [
            ("favorites.add", ["product": .string(id + "\u{0}")]),
            ("orders.cart.add", ["product": .string("\u{0}" + id), "quantity": 1]),
            ("catalog.search", ["q": "phone\u{0}"]),
            ("catalog.product.get", ["id": .string(id + "\u{0}")]),
            ("reservations.car.save", ["lat": 4.6, "lon": -74.06, "note": "by the\u{0}lift"]),
            ("reservations.hold", ["destination\u{0}": "ML"]),
            ("accounts.profile.update", ["name": "Nul\u{0}Admin"]),
        ]
        for (type, body) in hostile {
            let answer = try me.call(.request(type, body: body), timeoutMs: 8000, attempts: 1)
            #expect(answer.quadError?.status == 400 && answer.quadError?.message.contains("U+0000") == true, "\(type): \(answer.body.text)")
        }
        #expect(try me.request("favorites.list", [:], timeoutMs: 8000, attempts: 1)["total"]?.int ?? 0 == 0)

        // A note of one letter and 100,000 combining marks is one grapheme
        // cluster; its limit of 200 counts Unicode scalars.
        let heavy = try me.call(.request("reservations.car.save", body: [
            "lat": 4.6, "lon": -74.06, "note": .string("n" + String(repeating: "\u{0301}", count: 100_000)),
        ]), timeoutMs: 8000, attempts: 1)
        #expect(heavy.quadError?.status == 400 && heavy.quadError?.message.contains("body.note must be at most 200 characters") == true,
                "\(heavy.body.text.prefix(300))")
        // Every process is still up.
        #expect(full.pids().count == full.running.count + 1)
    }
}
