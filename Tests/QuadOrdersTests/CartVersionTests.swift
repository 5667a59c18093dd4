import Foundation
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadOrders
@testable import QuadRuntime

/// A cart's version (issue 30 pt 1) comes from a counter of the user's own
/// (`cart_versions`), taken in the transaction of each change of the cart:
/// an add, a set, a remove, a clear, and a confirmed order from the cart
/// taking its lines out. A request that changes nothing takes no number.
/// Every answer that gives the cart (the four changes, orders.cart.view, a
/// retry's stored answer) gives it.
@Suite("Orders: a cart's version")
struct CartVersionTests {
    @Test(arguments: [false, true])
    func aCartsVersionRisesWithEachChangeOfItAndOnlyThen(postgres: Bool) throws {
        if postgres && ProcessInfo.processInfo.environment["QUAD_TEST_PG"] == nil { return }
        let catalog = FakeCatalog()
        catalog.stock = ["p-1": 5, "p-2": 5, "p-3": 5]
        catalog.prices = ["p-1": (30, "Study"), "p-2": (90, "Study"), "p-3": (10, "Tech")]
        let (h, db) = try OrderVersionTests.service(catalog, postgres: postgres)
        func view(_ user: String) throws -> JSON { try h.call("orders.cart.view", [:], user: user) }
        func counter(_ user: String) throws -> Int64? {
            try db.queryOne("SELECT version FROM cart_versions WHERE user_id = $1", .text(user))?.int("version")
        }

        // Never changed: version 0, and no counter yet.
        #expect(try view("ana")["version"]?.int == 0 && counter("ana") == nil)

        // Each change takes the next number; the reply and the view give it.
        let add = Envelope.request("orders.cart.add", body: ["product": "p-1", "quantity": 2], user: "ana")
        let added = h.handle(add).body
        #expect(try added["version"]?.int == 1 && counter("ana") == 1, "\(added.text)")
        #expect(try view("ana")["version"]?.int == 1)
        #expect(try h.call("orders.cart.add", ["product": "p-1"], user: "ana")["version"]?.int == 2, "more of a line")
        #expect(try h.call("orders.cart.add", ["product": "p-2"], user: "ana")["version"]?.int == 3, "a new line")
        #expect(try h.call("orders.cart.set", ["product": "p-2", "quantity": 4], user: "ana")["version"]?.int == 4)
        #expect(try h.call("orders.cart.set", ["product": "p-3", "quantity": 1], user: "ana")["version"]?.int == 5, "a set that adds a line")
        #expect(try h.call("orders.cart.remove", ["product": "p-3"], user: "ana")["version"]?.int == 6)
        // A retry answers what it answered, at the version it had.
        #expect(h.handle(add).body["version"]?.int == 1)

        // Requests that change nothing take no number.
        #expect(try h.call("orders.cart.set", ["product": "p-2", "quantity": 4], user: "ana")["version"]?.int == 6, "the same quantity")
        #expect(try h.call("orders.cart.set", ["product": "p-3", "quantity": 0], user: "ana")["version"]?.int == 6, "0 of what is not there")
        #expect(try h.call("orders.cart.remove", ["product": "p-3"], user: "ana")["version"]?.int == 6, "removing what is not there")
        #expect(try h.call("orders.cart.clear", [:], user: "bob")["version"]?.int == 0, "clearing an empty cart")
        #expect(try counter("bob") == nil)

        // Another user's cart counts on its own.
        #expect(try h.call("orders.cart.add", ["product": "p-1"], user: "bob")["version"]?.int == 1)
        #expect(try view("ana")["version"]?.int == 6)

        // An order from the cart takes its lines out when confirmed: a new version.
        let placed = h.send("orders.place", ["source": "cart"], user: "ana")
        #expect(placed.kind == .reply && placed.body["status"] == "confirmed", "\(placed.body.text)")
        let after = try view("ana")
        #expect(try after["lines"]?.array?.isEmpty == true && after["version"]?.int == 7 && counter("ana") == 7, "\(after.text)")
        // A confirmed order that finds nothing of its lines left changes nothing.
        try Cart.takeOut(db, user: "ana", items: [OrderItem(product: "p-1", quantity: 1)])
        #expect(try counter("ana") == 7)

        // Cleared: a new number; cleared again: none.
        _ = try h.call("orders.cart.add", ["product": "p-3"], user: "ana")
        #expect(try h.call("orders.cart.clear", [:], user: "ana")["version"]?.int == 9)
        #expect(try h.call("orders.cart.clear", [:], user: "ana")["version"]?.int == 9)
        #expect(try view("bob")["version"]?.int == 1 && view("bob")["lines"]?.array?.count == 1)
    }
}
