import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing

/// Issue 17: a cart the phone changes offline (orders.cart.set, remove,
/// clear), queued in the outbox, shown at once, through the real services.
@Suite final class CartEditTests {
    /// The service's cart of `user`, oldest line first, as product: quantity.
    func serviceCart(_ edge: EdgeStack, _ user: String) throws -> [String: Int64] {
        let db = try edge.store("orders")
        defer { db.close() }
        var lines: [String: Int64] = [:]
        for r in try db.query("SELECT product, quantity FROM cart_lines WHERE user_id = $1", .text(user)) { lines[r.string("product")] = r.int("quantity") }
        return lines
    }

    /// The phone's cart view as product: quantity.
    func phoneCart(_ edge: EdgeStack) throws -> [String: Int64] {
        let shown = try edge.view("cart")
        var lines: [String: Int64] = [:]
        for l in shown["body"]?["lines"]?.array ?? [] { lines[l["product"]?.string ?? ""] = l["quantity"]?.int ?? 0 }
        return lines
    }

    @Test func addSetAndRemoveMadeOfflineReachTheServiceInOrderOnceEach() throws {
        let edge = try EdgeStack("cart-edits")
        let user = try edge.signIn()
        try edge.airplane(true)
        var ids: [String] = []
        ids.append(try edge.act("orders.cart.add", ["product": "p-0004", "quantity": 1]))
        ids.append(try edge.act("orders.cart.add", ["product": "p-0005", "quantity": 2]))
        ids.append(try edge.act("orders.cart.set", ["product": "p-0004", "quantity": 3]))
        ids.append(try edge.act("orders.cart.remove", ["product": "p-0005"]))
        #expect(try phoneCart(edge) == ["p-0004": 3], "shown at once, offline")
        #expect(try edge.view("cart")["notice"]?.string?.contains("waiting to be sent") == true)
        #expect(try edge.state()["pending"]?.int == 4)
        // Refused on the phone at once, with the limit's name: nothing queued.
        #expect(throws: QuadError.self) { try edge.act("orders.cart.set", ["product": "p-0004", "quantity": 100]) }
        do {
            _ = try edge.act("orders.cart.set", ["product": "p-0004", "quantity": 100])
        } catch let error as QuadError {
            #expect(error.code == .badRequest && error.message.contains("max_quantity"), "\(error)")
        }
        #expect(try edge.state()["pending"]?.int == 4)

        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try serviceCart(edge, user) == ["p-0004": 3], "the service applied add, add, set, remove in that order")
        #expect(try phoneCart(edge) == serviceCart(edge, user))
        #expect(try edge.answered("orders", ids) == Set(ids), "each applied once, by its id")
        let log = try edge.log().filter { ids.contains($0["id"]?.string ?? "") }
        #expect(log.count == 4 && log.allSatisfy { $0["outcome"]?.string == "done" }, "\(log)")
    }

    @Test func aSetTheServiceRefusesIsRolledBackWithTheReason() throws {
        let edge = try EdgeStack("cart-refused")
        let user = try edge.signIn()
        try edge.act("orders.cart.add", ["product": "p-0004", "quantity": 2])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        try edge.airplane(true)
        // A product the orders service's copy of the catalog does not hold:
        // the phone cannot tell (its catalog is a cache), the service refuses it.
        let refusedID = try edge.act("orders.cart.set", ["product": "p-9999", "quantity": 2])
        #expect(try phoneCart(edge) == ["p-0004": 2, "p-9999": 2], "shown at once")
        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let log = try edge.log()
        let refused = try #require(log.first { $0["id"]?.string == refusedID })
        #expect(refused["outcome"]?.string == "rejected" && refused["code"]?.string == "not_found", "\(refused)")
        #expect(try phoneCart(edge) == ["p-0004": 2], "the refused line is gone, the cart as it was")
        #expect(try serviceCart(edge, user) == ["p-0004": 2])
        let texts = try edge.messages().compactMap { $0["text"]?.string }
        #expect(texts.contains { $0.contains("Setting p-9999 to 2 in your cart") && $0.contains("no product") }, "\(texts)")
    }

    @Test func aClearMadeOfflineEmptiesTheServiceCart() throws {
        let edge = try EdgeStack("cart-clear")
        let user = try edge.signIn()
        try edge.act("orders.cart.add", ["product": "p-0004", "quantity": 1])
        try edge.act("orders.cart.add", ["product": "p-0006", "quantity": 4])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try serviceCart(edge, user) == ["p-0004": 1, "p-0006": 4])
        try edge.airplane(true)
        let id = try edge.act("orders.cart.clear", [:])
        #expect(try phoneCart(edge) == [:], "emptied at once, offline")
        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try serviceCart(edge, user) == [:])
        #expect(try phoneCart(edge) == [:])
        #expect(try edge.log().first { $0["id"]?.string == id }?["outcome"]?.string == "done")
    }

    @Test func aCartReplyMakesTheServicesCartThePhones() throws {
        let edge = try EdgeStack("cart-truth")
        let user = try edge.signIn()
        // A line the phone never saw (put there by another of the user's devices).
        let client = try edge.stack.internalClient()
        var other = Envelope.request("orders.cart.add", body: ["product": "p-0007", "quantity": 2])
        other.user = user
        #expect(try client.call(other, timeoutMs: 5000).kind == .reply)
        try edge.act("orders.cart.set", ["product": "p-0004", "quantity": 3])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try serviceCart(edge, user) == ["p-0007": 2, "p-0004": 3])
        #expect(try phoneCart(edge) == serviceCart(edge, user), "the service's cart is the truth once nothing is queued")
    }

    /// The action log keeps what the chaos checker's cart ledger and the
    /// campus day's report read: the cart each cart action was answered
    /// (the same as the reply orders keeps for its id) and whether it was
    /// made offline.
    @Test func theActionLogKeepsTheCartEachEditWasAnsweredAndWhetherItWasMadeOffline() throws {
        // Shared: the test reads the phone's file while quad-edge runs.
        let edge = try EdgeStack("cart-log", edgeArguments: ["--file-locking", "shared"])
        _ = try edge.signIn()
        let add = try edge.act("orders.cart.add", ["product": "p-0004", "quantity": 1])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        try edge.airplane(true)
        let set = try edge.act("orders.cart.set", ["product": "p-0004", "quantity": 3])
        let other = try edge.act("orders.cart.add", ["product": "p-0006", "quantity": 2])
        let remove = try edge.act("orders.cart.remove", ["product": "p-0006"])
        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)

        let phone = try SQLiteDatabase(path: edge.phonesDir + "/phone-001.db")
        defer { phone.close() }
        let orders = try edge.store("orders")
        defer { orders.close() }
        func told(_ id: String) throws -> JSON? {
            try phone.queryOne("SELECT cart FROM action_log WHERE id = $1", .text(id))?.optionalString("cart").map { try JSON.parse($0) }
        }
        func kept(_ id: String) throws -> JSON? {
            let reply = try #require(try orders.queryOne("SELECT reply FROM idempotency WHERE id = $1", .text(id)), "no record of \(id)")
            var cart: [String: JSON] = [:]
            for line in try JSON.parse(reply.string("reply"))["body"]?["lines"]?.array ?? [] {
                cart[line["product"]?.string ?? ""] = .int(line["quantity"]?.int ?? 0)
            }
            return .object(cart)
        }
        #expect(try told(add) == ["p-0004": 1])
        #expect(try told(set) == ["p-0004": 3])
        #expect(try told(other) == ["p-0004": 3, "p-0006": 2])
        #expect(try told(remove) == ["p-0004": 3])
        for id in [add, set, other, remove] { #expect(try told(id) == kept(id), "the phone was told what orders keeps for \(id)") }
        let offline = try phone.query("SELECT id, offline FROM action_log").reduce(into: [String: Int64]()) { $0[$1.string("id")] = $1.int("offline") }
        #expect(offline[add] == 0 && offline[set] == 1 && offline[other] == 1 && offline[remove] == 1, "\(offline)")
    }
}
