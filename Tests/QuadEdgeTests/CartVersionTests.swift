import Foundation
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A phone never shows an older cart than one it took (issue 30 pt 1): the
/// orders service's version of the cart (its own counter's number for the
/// cart's last change) decides between a cart action's reply and the cart
/// the phone last took from the service.
@Suite("Versions on a phone's cart", .serialized)
struct CartVersionTests {
    /// A cart as the orders service answers it, at `version`.
    static func cart(_ version: Int64, _ lines: (String, Int64)...) -> JSON {
        ["lines": .array(lines.map { ["product": .string($0.0), "quantity": .int($0.1), "available": false] }),
         "units": .int(lines.reduce(0) { $0 + $1.1 }), "currency": "USD", "subtotal": 0, "fee": 0, "total": 0, "version": .int(version)]
    }

    /// The phone's cart, product: quantity.
    static func lines(_ rig: PhoneRig) throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for r in try rig.phone.db.query("SELECT product, quantity FROM cart") { out[r.string("product")] = r.int("quantity") }
        return out
    }

    static func act(_ rig: PhoneRig, _ type: String, _ body: JSON) -> Bool {
        guard case .queued = rig.phone.act(type, body) else { return false }
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        return rig.outbox == 0
    }

    @Test func anOlderCartReplyNeverUndoesANewerCartAndTheSameOrANewerOneIsTaken() throws {
        let rig = try PhoneRig()
        var next = Self.cart(3, ("p-1", 1))
        rig.broker.answer = { _, _ in .success(next) }
        rig.phone.start()

        // Added: the reply's cart at 3 is taken, and its version kept.
        #expect(Self.act(rig, "orders.cart.add", ["product": "p-1"]))
        #expect(try Self.lines(rig) == ["p-1": 1] && SavedCart.held(rig.phone.db) == 3)

        // A set answered with a cart at 2 (a stored answer read before the
        // add): dropped and counted; the phone's cart stays as it shows it.
        next = Self.cart(2, ("p-1", 5), ("p-9", 1))
        #expect(Self.act(rig, "orders.cart.set", ["product": "p-1", "quantity": 2]))
        #expect(try Self.lines(rig) == ["p-1": 2] && SavedCart.held(rig.phone.db) == 3)
        #expect(SavedCart.olderDropped(rig.phone.db) == 1)

        // The same version is taken as it is (p-2 added on another phone shows).
        next = Self.cart(3, ("p-1", 2), ("p-2", 1))
        #expect(Self.act(rig, "orders.cart.add", ["product": "p-1", "quantity": 1]))
        #expect(try Self.lines(rig) == ["p-1": 2, "p-2": 1] && SavedCart.held(rig.phone.db) == 3)
        #expect(SavedCart.olderDropped(rig.phone.db) == 1)

        // A newer one is taken, and its version kept.
        next = Self.cart(6, ("p-2", 1))
        #expect(Self.act(rig, "orders.cart.remove", ["product": "p-1"]))
        #expect(try Self.lines(rig) == ["p-2": 1] && SavedCart.held(rig.phone.db) == 6)
        // A clear answered with a cart older than that: dropped, the cart stays cleared.
        next = Self.cart(5, ("p-2", 1))
        #expect(Self.act(rig, "orders.cart.clear", [:]))
        #expect(try Self.lines(rig) == [:] && SavedCart.held(rig.phone.db) == 6 && SavedCart.olderDropped(rig.phone.db) == 2)
        #expect(OrderVersionTests.view(rig, "cart")?.body["version"] == 6, "the cart view shows the version")
    }

    /// While a later cart action waits, a reply's cart is not taken, nor
    /// its version kept, nor counted: the last to settle brings the cart in line.
    @Test func aReplyWhileALaterCartActionWaitsIsNeitherTakenNorKept() throws {
        let rig = try PhoneRig()
        rig.broker.answer = { _, _ in nil }  // answers lost: both stay queued
        rig.phone.start()
        guard case .queued = rig.phone.act("orders.cart.add", ["product": "p-1"]),
              case .queued = rig.phone.act("orders.cart.add", ["product": "p-2"]) else { Issue.record("not queued"); return }
        #expect(try Self.lines(rig) == ["p-1": 1, "p-2": 1] && rig.outbox == 2)
        var answered = 0
        rig.broker.answer = { request, _ in
            answered += 1
            return .success(answered == 1 ? Self.cart(4, ("p-1", 1)) : Self.cart(5, ("p-1", 1), ("p-2", 1)))
        }
        rig.run(forMs: 20_000) { rig.outbox == 0 }
        #expect(try rig.outbox == 0 && Self.lines(rig) == ["p-1": 1, "p-2": 1] && SavedCart.held(rig.phone.db) == 5)
        #expect(SavedCart.olderDropped(rig.phone.db) == 0)
    }
}
