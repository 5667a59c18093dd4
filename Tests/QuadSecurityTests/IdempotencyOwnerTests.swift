import Foundation
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// A stored reply belongs to whoever made it (issue 12, point 1), through a
/// real broker and real workers: Alice's mutation ids, sent again by Bob,
/// by an anonymous client, or by Alice under another type, get 409 and
/// nothing of her reply; Alice's own repeat gets her reply.
@Suite("Idempotency records belong to their caller", .serialized)
struct IdempotencyOwnerTests {
    struct Person {
        let user: String
        let token: String
    }

    static func signUp(_ full: FullStack, _ email: String, _ name: String) throws -> Person {
        let c = try full.client()
        _ = try c.request("accounts.register", ["email": .string(email), "password": "owner-pass-2b7e41", "name": .string(name), "semester": 3],
                          timeoutMs: 8000, attempts: 1)
        let login = try c.request("accounts.login", ["email": .string(email), "password": "owner-pass-2b7e41"], timeoutMs: 8000, attempts: 1)
        return Person(user: try #require(login["user"]?.string), token: try #require(login["token"]?.string))
    }

    static func send(_ full: FullStack, _ type: String, _ body: JSON, token: String?, id: String) throws -> Envelope {
        try full.client(token: token).call(.request(type, body: body, id: id), timeoutMs: 8000, attempts: 1)
    }

    @Test func anotherCallersRepeatOfAnIDGets409AndNothingOfTheFirstReply() throws {
        let full = try FullStack("idem-owner")
        for needed in ["accounts", "catalog", "favorites", "orders", "reservations"] {
            try #require(full.running.contains(needed), "quad-\(needed) is not built")
        }
        let alice = try Self.signUp(full, "alice-idem@uni.edu", "Alice Idem")
        let bob = try Self.signUp(full, "bob-idem@uni.edu", "Bob Idem")
        let listed = try full.client().request("catalog.products.list", ["in_stock": true, "limit": 10], timeoutMs: 8000, attempts: 1)
        let products = (listed["products"]?.array ?? []).filter { ($0["stock"]?.int ?? 0) >= 3 }.compactMap { $0["id"]?.string }
        try #require(products.count >= 3)
        // Favorites and orders know products from catalog's events.
        #expect(try full.eventually(30_000) {
            (try? Self.send(full, "favorites.add", ["product": .string(products[2])], token: bob.token, id: MessageID.make()))?.kind == .reply
        })
        #expect(try full.eventually(30_000) {
            (try? Self.send(full, "orders.cart.add", ["product": .string(products[2]), "quantity": 1], token: bob.token, id: MessageID.make()))?.kind == .reply
        })
        _ = try Self.send(full, "orders.cart.clear", [:], token: bob.token, id: MessageID.make())
        _ = try Self.send(full, "favorites.remove", ["product": .string(products[2])], token: bob.token, id: MessageID.make())

        // Each with another mutation of the same service (records live in
        // the service's store) for the same id under another type.
        let mutations: [(type: String, body: JSON, secret: String?, other: (String, JSON))] = [
            ("favorites.add", ["product": .string(products[0])], nil, ("favorites.remove", ["product": .string(products[0])])),
            ("orders.cart.add", ["product": .string(products[1]), "quantity": 2], nil, ("orders.cart.clear", [:])),
            ("orders.place", ["source": "buy_now", "product": .string(products[0]), "quantity": 1], nil, ("orders.cart.clear", [:])),
            ("reservations.car.save", ["lat": 4.6, "lon": -74.06, "level": "P1", "note": "alice-secret-note"], "alice-secret-note",
             ("reservations.hold", ["destination": "ML"])),
            ("reservations.hold", ["destination": "ML"], nil, ("reservations.car.save", ["lat": 4.6, "lon": -74.06])),
            ("accounts.profile.update", ["name": "Alice Secret Name"], "Alice Secret Name", ("accounts.profile.update", ["semester": 5])),
        ]
        var checked = 0
        for m in mutations {
            let id = MessageID.make()
            let first = try Self.send(full, m.type, m.body, token: alice.token, id: id)
            #expect(first.kind == .reply, "\(m.type) as Alice: \(first.body.text)")
            let firstText = first.body.text
            #expect(firstText.contains(alice.user) || m.secret.map(firstText.contains) == true || first.body.object?.isEmpty == false)

            for (who, token) in [("Bob", Optional(bob.token)), ("an anonymous client", nil)] {
                let repeatAnswer = try Self.send(full, m.type, m.body, token: token, id: id)
                let error = repeatAnswer.quadError
                let text = repeatAnswer.body.text
                if token == nil {
                    // Not signed in: 409 (the id is taken) or 401, never her reply.
                    #expect(error?.status == 409 || error?.status == 401, "\(m.type) repeated by \(who): \(text)")
                } else {
                    #expect(error?.status == 409 && error?.code == .conflict, "\(m.type) repeated by \(who): \(text)")
                    #expect(error?.message.contains("this request id was used by another caller") == true, "\(text)")
                }
                #expect(!text.contains(alice.user), "\(m.type): \(who) learnt Alice's user id: \(text)")
                if let secret = m.secret { #expect(!text.contains(secret), "\(m.type): \(who) learnt Alice's data: \(text)") }
                for key in ["total", "items", "spot", "reservation", "semester", "favorites", "lines"] {
                    #expect(repeatAnswer.body[key] == nil, "\(m.type): \(who) got '\(key)' of Alice's reply: \(text)")
                }
            }
            // Alice under another type: 409 too.
            let (otherType, otherBody) = m.other
            let crossed = try Self.send(full, otherType, otherBody, token: alice.token, id: id)
            if otherType == m.type {
                // The same type with another body is a repeat: her reply, no second effect.
                #expect(crossed.kind == .reply && crossed.body == first.body, "\(m.type) repeated with another body: \(crossed.body.text)")
            } else {
                #expect(crossed.quadError?.status == 409 && crossed.quadError?.message.contains("another request type") == true,
                        "\(m.type)'s id as \(otherType): \(crossed.kind) \(crossed.body.text)")
            }
            // Alice's own repeat gets her reply, unchanged.
            let again = try Self.send(full, m.type, m.body, token: alice.token, id: id)
            #expect(again.kind == .reply && again.body == first.body, "\(m.type) repeated by Alice: \(again.body.text)")
            checked += 1
        }
        #expect(checked == mutations.count)
        // Bob's own state is untouched by the repeats: no favorite, empty
        // cart, no order, no car saved.
        let bobClient = try full.client(token: bob.token)
        #expect(try bobClient.request("favorites.list", [:], timeoutMs: 8000, attempts: 1)["total"]?.int ?? 0 == 0)
        #expect(try bobClient.request("orders.mine", [:], timeoutMs: 8000, attempts: 1)["total"]?.int == 0)
        let cart = try bobClient.request("orders.cart.view", [:], timeoutMs: 8000, attempts: 1)
        #expect((cart["lines"]?.array ?? cart["items"]?.array ?? []).isEmpty, "\(cart.text)")
        let car = try bobClient.call(.request("reservations.car.get"), timeoutMs: 8000, attempts: 1)
        #expect(car.quadError?.status == 404 && !car.body.text.contains("alice-secret-note"), "\(car.body.text)")
    }

    /// Two anonymous clients (two CURVE keys) and one request id: the
    /// record of the first is bound to its key (the broker's `caller`), so
    /// the second learns nothing of the account the first made.
    @Test func anAnonymousClientsRecordIsBoundToItsKey() throws {
        let full = try FullStack("idem-anon")
        try #require(full.running.contains("accounts"), "quad-accounts is not built")
        let id = MessageID.make()
        let body: JSON = ["email": "carol-idem@uni.edu", "password": "carol-pass-5d1e09", "name": "Carol Idem", "semester": 2]
        let first = try full.client()
        let made = try first.call(.request("accounts.register", body: body, id: id), timeoutMs: 8000, attempts: 1)
        #expect(made.kind == .reply, "\(made.body.text)")
        let carol = try #require(made.body["user"]?.string ?? made.body["id"]?.string)
        let stranger = try full.client()
        let answer = try stranger.call(.request("accounts.register", body: body, id: id), timeoutMs: 8000, attempts: 1)
        #expect(answer.quadError?.status == 409 && answer.quadError?.message.contains("used by another caller") == true, "\(answer.body.text)")
        #expect(!answer.body.text.contains(carol))
        // The first client's retry gets its own reply.
        let retry = try first.call(.request("accounts.register", body: body, id: id), timeoutMs: 8000, attempts: 1)
        #expect(retry.kind == .reply && retry.body == made.body)
    }
}
