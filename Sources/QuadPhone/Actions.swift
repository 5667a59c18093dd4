import Foundation
import QuadContract
import QuadStore
import QuadWire
import QuadPhoneKit

/// One action waiting in a phone's outbox.
struct QueuedAction {
    let seq: Int64
    let id: String
    let type: String
    let body: JSON
    let createdMs: Int64
    let offline: Bool
    var attempts: Int
    let undo: JSON
    let after: String?

    init(_ r: Row) {
        seq = r.int("seq")
        id = r.string("id")
        type = r.string("type")
        body = .stored(r.string("body"))
        createdMs = r.int("created_ms")
        offline = r.int("offline") != 0
        attempts = Int(r.int("attempts"))
        undo = .stored(r.string("undo"))
        after = r.optionalString("after_id")
    }
}

/// The user's actions that change something, what each shows at once
/// (the optimistic update, in the same transaction as the outbox row), and
/// how the answer settles it: a reply confirms it, a refusal rolls it back
/// and leaves a message with the service's reason.
package enum Actions {
    /// Queued: written to the outbox, shown as done and pending, sent when
    /// the network allows.
    static let queued: Set<String> = [
        "favorites.add", "favorites.remove", "orders.cart.add", "orders.cart.set", "orders.cart.remove", "orders.cart.clear",
        "orders.place", "orders.return",
        "reservations.hold", "reservations.checkin", "reservations.checkout", "reservations.cancel", "reservations.car.save",
    ]

    /// Online only, with the reason given when there is no network: only the
    /// service can decide them, so they are refused at once rather than queued.
    static let onlineOnly: [String: String] = [
        "orders.cancel": "cancelling an order needs a connection: the service returns the stock and decides the refund",
    ]

    /// The campus tariff the phone uses to estimate what parking cost, per
    /// started hour (the parking service does not bill; the phone shows an estimate).
    static let parkingPerHour = 1.5

    /// Checks `body`, fills what the phone knows (the reservation a check-in
    /// is for), applies the optimistic update and returns the body to send,
    /// what undoes the update, and the queued action this one depends on.
    static func prepare(_ db: Database, id: String, type: String, body: JSON, now: Int64) throws -> (body: JSON, undo: JSON, after: String?) {
        switch type {
        case "favorites.add":
            let product = try string(body, "product", type)
            let was = try db.queryOne("SELECT added_ms, pending FROM favorites WHERE product = $1", .text(product))
            try db.execute("""
                INSERT INTO favorites (product, added_ms, pending) VALUES ($1, $2, $3)
                ON CONFLICT (product) DO UPDATE SET pending = excluded.pending
                """, .text(product), .int(now), .text(id))
            return (["product": .string(product)], ["was": .bool(was != nil)], nil)
        case "favorites.remove":
            let product = try string(body, "product", type)
            let was = try db.queryOne("SELECT added_ms FROM favorites WHERE product = $1", .text(product))
            try db.execute("DELETE FROM favorites WHERE product = $1", .text(product))
            return (["product": .string(product)], ["was": .bool(was != nil), "added_ms": .int(was?.int("added_ms") ?? now)], nil)
        case "orders.cart.add":
            let product = try string(body, "product", type)
            let quantity = body["quantity"]?.int ?? 1
            let most = Contract.Orders.maxQuantity
            guard (1...most).contains(quantity) else { throw QuadError.badRequest("body.quantity must be an integer from 1 to \(most) (max_quantity)") }
            try db.execute("""
                INSERT INTO cart (product, quantity, added_ms) VALUES ($1, $2, $3)
                ON CONFLICT (product) DO UPDATE SET quantity = cart.quantity + excluded.quantity
                """, .text(product), .int(quantity), .int(now))
            return (["product": .string(product), "quantity": .int(quantity)], ["quantity": .int(quantity)], nil)
        case "orders.cart.set":
            // As the service does it: 0 removes the line; a product not in
            // the cart gets a line of its own (the service may refuse it: an
            // unknown product, a full cart; the rollback takes it out).
            let product = try cartProduct(body, type)
            guard let quantity = body["quantity"]?.int else { throw QuadError.badRequest("body.quantity is required for orders.cart.set (0 removes the line)") }
            let most = Contract.Orders.maxQuantity
            guard (0...most).contains(quantity) else { throw QuadError.badRequest("body.quantity must be an integer from 0 to \(most) (max_quantity)") }
            let undo = try cartLine(db, product)
            if quantity == 0 {
                try db.execute("DELETE FROM cart WHERE product = $1", .text(product))
            } else {
                try db.execute("""
                    INSERT INTO cart (product, quantity, added_ms) VALUES ($1, $2, $3)
                    ON CONFLICT (product) DO UPDATE SET quantity = excluded.quantity
                    """, .text(product), .int(quantity), .int(now))
            }
            return (["product": .string(product), "quantity": .int(quantity)], ["was": undo], nil)
        case "orders.cart.remove":
            // Removing what is not there changes nothing, here as on the service.
            let product = try cartProduct(body, type)
            let undo = try cartLine(db, product)
            try db.execute("DELETE FROM cart WHERE product = $1", .text(product))
            return (["product": .string(product)], ["was": undo], nil)
        case "orders.cart.clear":
            let lines = try db.query("SELECT product, quantity, added_ms FROM cart ORDER BY added_ms, product")
            try db.execute("DELETE FROM cart")
            return ([:], ["cart": .array(lines.map { ["product": .string($0.string("product")), "quantity": .int($0.int("quantity")), "added_ms": .int($0.int("added_ms"))] })], nil)
        case "orders.place":
            return try preparePlace(db, id: id, body: body, now: now)
        case "orders.return":
            // Shown as returning at once; the order's id is the rental's
            // (the orders.place that made it), so the same return made twice
            // on the phone is refused here, and a retry of the one queued
            // goes under its own id (the service is idempotent by order too).
            let rental = try string(body, "order", type)
            let was = try db.queryOne("SELECT status, reason FROM returns WHERE rental = $1", .text(rental))
            if let status = was?.string("status"), status == "returning" || status == "returned" {
                throw QuadError.conflict("this rental is already \(status): it is returned once")
            }
            if let o = try db.queryOne("SELECT mode, status FROM orders WHERE id = $1", .text(rental)), o.string("mode") != "rent" {
                throw QuadError.conflict("order \(rental) was bought, not rented: only a rental is returned")
            }
            try db.execute("""
                INSERT INTO returns (rental, action, status, pending) VALUES ($1, $2, 'returning', $2)
                ON CONFLICT (rental) DO UPDATE SET action = excluded.action, status = 'returning', pending = excluded.pending, reason = NULL
                """, .text(rental), .text(id))
            return (["order": .string(rental)], ["was": was == nil ? .null : .string(was!.string("status"))], nil)
        case "reservations.hold":
            guard body["lot"] != nil || body["destination"] != nil || body["spot"] != nil else {
                throw QuadError.badRequest("body.lot, body.destination or body.spot is required")
            }
            if let active = try activeParking(db) {
                throw QuadError.conflict("you already have an active reservation (\(active.string("status")) \(active.optionalString("spot") ?? "pending")): one at a time; check in, check out or cancel it first")
            }
            try db.execute("""
                INSERT INTO parking (id, status, lot, destination, spot, level, held_ms, pending) VALUES ($1, 'held', $2, $3, $4, $5, $6, $1)
                """, .text(id), .of(body["lot"]?.string), .of(body["destination"]?.string), .of(body["spot"]?.string),
                .of(body["level"]?.string), .int(now))
            return (body, [:], nil)
        case "reservations.checkin", "reservations.checkout", "reservations.cancel":
            let (from, to, doing): ([String], String, String) = switch type {
            case "reservations.checkin": (["held"], "checked_in", "check in")
            case "reservations.checkout": (["checked_in"], "checked_out", "check out")
            default: (["held"], "cancelled", "cancel")
            }
            let row: Row
            if let named = body["reservation"]?.string {
                guard let r = try db.queryOne("SELECT * FROM parking WHERE id = $1", .text(named)) else {
                    throw QuadError.notFound("this phone has no reservation '\(named)'")
                }
                row = r
            } else {
                guard let r = try activeParking(db) else { throw QuadError.conflict("no reservation to \(doing): hold a spot first") }
                row = r
            }
            let status = row.string("status")
            guard from.contains(status) else {
                throw QuadError.conflict("cannot \(doing): the reservation is \(status.replacingOccurrences(of: "_", with: " "))")
            }
            let column = type == "reservations.checkin" ? "checked_in_ms" : "ended_ms"
            try db.execute("UPDATE parking SET status = $2, \(column) = $3, pending = $4 WHERE id = $1",
                           .text(row.string("id")), .text(to), .int(now), .text(id))
            // The reservation's id is the id of the hold that made it, known
            // before the hold is sent: a refusal of any step of it drops the
            // steps queued after it.
            return (["reservation": .string(row.string("id"))], ["status": .string(status)], row.string("id"))
        case "reservations.car.save":
            guard body["lat"]?.double != nil, body["lon"]?.double != nil else { throw QuadError.badRequest("body.lat and body.lon are required") }
            try db.setMeta("car", body.setting("saved_at", .int(now)).text)
            return (body, [:], nil)
        default:
            throw QuadError.badRequest("'\(type)' is not an action a phone queues; actions: \(queued.sorted().joined(separator: ", "))")
        }
    }

    static func preparePlace(_ db: Database, id: String, body: JSON, now: Int64) throws -> (body: JSON, undo: JSON, after: String?) {
        let source = body["source"]?.string ?? "buy_now"
        let mode = body["mode"]?.string ?? "buy"
        guard ["cart", "buy_now"].contains(source) else { throw QuadError.badRequest("body.source must be cart or buy_now") }
        guard ["buy", "rent"].contains(mode) else { throw QuadError.badRequest("body.mode must be buy or rent") }
        let screen = body["screen"]?.string ?? (source == "cart" ? "cart" : "home")
        var items: [(product: String, quantity: Int64)] = []
        var undo: JSON = [:]
        if source == "cart" {
            let lines = try db.query("SELECT product, quantity, added_ms FROM cart ORDER BY added_ms, product")
            guard !lines.isEmpty else { throw QuadError.conflict("the cart is empty: add products first") }
            items = lines.map { ($0.string("product"), $0.int("quantity")) }
            undo = ["cart": .array(lines.map { ["product": .string($0.string("product")), "quantity": .int($0.int("quantity")), "added_ms": .int($0.int("added_ms"))] })]
            try db.execute("DELETE FROM cart")
        } else {
            items = [(try string(body, "product", "orders.place"), body["quantity"]?.int ?? 1)]
        }
        var total = 0.0
        var currency = "USD"
        var lines: [JSON] = []
        for item in items {
            var line: [String: JSON] = ["product": .string(item.product), "quantity": .int(item.quantity)]
            if let p = try db.queryOne("SELECT price, currency, category FROM catalog WHERE id = $1", .text(item.product)) {
                total += p.double("price") * Double(item.quantity)
                currency = p.string("currency")
                line["price"] = .double(p.double("price"))
                line["category"] = .string(p.string("category"))
            }
            lines.append(.object(line))
        }
        try db.execute("""
            INSERT INTO orders (id, status, source, mode, screen, items, total, currency, estimated, created_ms, pending)
            VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, 1, $8, $1)
            """, .text(id), .text(source), .text(mode), .text(screen), .text(JSON.array(lines).text), .double(total), .text(currency), .int(now))
        var send: [String: JSON] = ["source": .string(source), "mode": .string(mode), "screen": .string(screen)]
        if source == "buy_now" {
            send["product"] = .string(items[0].product)
            send["quantity"] = .int(items[0].quantity)
        }
        // A rental's length goes as the student gave it: days, or a return date.
        if let date = body["return_date"] { send["return_date"] = date }
        if let days = body["days"] { send["days"] = days }
        try SpendingWindow.record(db, order: id)
        return (.object(send), undo, nil)
    }

    /// A reply settles the action: the phone's copy takes the service's values.
    static func confirm(_ db: Database, _ a: QueuedAction, reply: JSON) throws {
        switch a.type {
        case "favorites.add", "favorites.remove":
            // A reply older than the phone's copy of the favorite settles the action only (FavoriteVersions.swift).
            try SavedFavorites.take(db, reply: reply, action: a.id, favorite: a.type == "favorites.add")
        case "orders.cart.add", "orders.cart.set", "orders.cart.remove", "orders.cart.clear":
            try takeServiceCart(db, a, reply: reply)
        case "orders.place":
            // A reply older than the phone's copy of the order settles the action only (OrderVersions.swift).
            guard try !SavedOrders.holdsNewer(db, a.id, than: reply) else {
                try db.execute("UPDATE orders SET pending = NULL WHERE id = $1", .text(a.id))
                try SpendingWindow.record(db, order: a.id)
                break
            }
            let total = reply["total"]?.double
            try db.execute("""
                UPDATE orders SET status = $2, pending = NULL, total = COALESCE($3, total), currency = COALESCE($4, currency),
                    estimated = CASE WHEN $3 IS NULL THEN estimated ELSE 0 END, items = COALESCE($5, items), version = $6, body = $7
                WHERE id = $1
                """, .text(a.id), .text(reply["status"]?.string ?? "confirmed"), .of(total), .of(reply["currency"]?.string),
                .of(reply["items"].map { $0.text }), .int(SavedOrders.version(reply)), .text(reply.text))
            try SpendingWindow.record(db, order: a.id)
        case "orders.return":
            let rental = a.body["order"]?.string ?? ""
            try db.execute("""
                UPDATE returns SET status = 'returned', pending = NULL, reason = NULL, returned_ms = $2, late_days = $3, late_charge = $4
                WHERE rental = $1
                """, .text(rental), .of(reply["returned_at"]?.int), .of(reply["late_days"]?.int), .of(reply["late_charge"]?.double))
            if try !SavedOrders.holdsNewer(db, rental, than: reply) {
                try db.execute("UPDATE orders SET status = 'returned', total = COALESCE($2, total), version = $3, body = $4 WHERE id = $1 AND pending IS NULL",
                               .text(rental), .of(reply["total"]?.double), .int(SavedOrders.version(reply)), .text(reply.text))
            }
            try SpendingWindow.recordReturn(db, rental: rental, lateCharge: reply["late_charge"]?.double, at: reply["returned_at"]?.int ?? a.createdMs)
        case "reservations.hold", "reservations.checkin", "reservations.checkout", "reservations.cancel":
            let r = reply["reservation"] ?? .null
            let id = r["id"]?.string ?? a.body["reservation"]?.string ?? a.id
            // A reply older than the phone's copy of the reservation settles the action only (HoldVersions.swift).
            guard try !SavedHolds.holdsNewer(db, id, than: r) else {
                try db.execute("UPDATE parking SET pending = NULL WHERE id = $1 AND pending = $2", .text(id), .text(a.id))
                break
            }
            try db.execute("""
                UPDATE parking SET status = COALESCE($2, status), spot = COALESCE($3, spot), lot = COALESCE($4, lot), level = COALESCE($5, level),
                    signal = COALESCE($6, signal), deadline_ms = COALESCE($7, deadline_ms), checked_in_ms = COALESCE($8, checked_in_ms),
                    ended_ms = COALESCE($9, ended_ms), pending = CASE WHEN pending = $10 THEN NULL ELSE pending END, version = $11
                WHERE id = $1
                """, .text(id), .of(r["status"]?.string), .of(r["spot"]?.string), .of(r["lot"]?.string), .of(r["level"]?.string),
                .of(r["signal"]?.string), .of(r["deadline"]?.int), .of(r["checked_in_at"]?.int), .of(r["ended_at"]?.int), .text(a.id),
                .int(SavedHolds.version(r)))
        default:
            break
        }
    }

    /// A refusal undoes what the phone showed.
    static func rollback(_ db: Database, _ a: QueuedAction, error: QuadError) throws {
        switch a.type {
        case "favorites.add":
            if a.undo["was"]?.bool == true {
                try db.execute("UPDATE favorites SET pending = NULL WHERE product = $1 AND pending = $2", .text(a.body["product"]?.string ?? ""), .text(a.id))
            } else {
                try db.execute("DELETE FROM favorites WHERE product = $1 AND pending = $2", .text(a.body["product"]?.string ?? ""), .text(a.id))
            }
        case "favorites.remove":
            if a.undo["was"]?.bool == true {
                try db.execute("INSERT INTO favorites (product, added_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                               .text(a.body["product"]?.string ?? ""), .int(a.undo["added_ms"]?.int ?? a.createdMs))
            }
        case "orders.cart.add":
            let product = a.body["product"]?.string ?? ""
            try db.execute("UPDATE cart SET quantity = quantity - $2 WHERE product = $1", .text(product), .int(a.undo["quantity"]?.int ?? 0))
            try db.execute("DELETE FROM cart WHERE quantity <= 0")
        case "orders.cart.set", "orders.cart.remove":
            // The line as it was before this action: back, or gone if it was not there.
            let product = a.body["product"]?.string ?? ""
            if let was = a.undo["was"], let quantity = was["quantity"]?.int {
                try db.execute("""
                    INSERT INTO cart (product, quantity, added_ms) VALUES ($1, $2, $3)
                    ON CONFLICT (product) DO UPDATE SET quantity = excluded.quantity, added_ms = excluded.added_ms
                    """, .text(product), .int(quantity), .int(was["added_ms"]?.int ?? a.createdMs))
            } else {
                try db.execute("DELETE FROM cart WHERE product = $1", .text(product))
            }
        case "orders.cart.clear":
            for line in a.undo["cart"]?.array ?? [] {
                try db.execute("""
                    INSERT INTO cart (product, quantity, added_ms) VALUES ($1, $2, $3)
                    ON CONFLICT (product) DO UPDATE SET quantity = cart.quantity + excluded.quantity
                    """, .text(line["product"]?.string ?? ""), .int(line["quantity"]?.int ?? 0), .int(line["added_ms"]?.int ?? a.createdMs))
            }
        case "orders.place":
            try db.execute("UPDATE orders SET status = 'rejected', pending = NULL, reason = $2 WHERE id = $1", .text(a.id), .text(error.message))
            try SpendingWindow.record(db, order: a.id)
            for line in a.undo["cart"]?.array ?? [] {
                try db.execute("""
                    INSERT INTO cart (product, quantity, added_ms) VALUES ($1, $2, $3)
                    ON CONFLICT (product) DO UPDATE SET quantity = cart.quantity + excluded.quantity
                    """, .text(line["product"]?.string ?? ""), .int(line["quantity"]?.int ?? 0), .int(line["added_ms"]?.int ?? a.createdMs))
            }
        case "orders.return":
            // Back to what it was (the service decides), with the reason shown on the rental.
            try db.execute("UPDATE returns SET status = 'refused', pending = NULL, reason = $2 WHERE rental = $1 AND pending = $3",
                           .text(a.body["order"]?.string ?? ""), .text(error.message), .text(a.id))
        case "reservations.hold":
            try db.execute("UPDATE parking SET status = 'refused', pending = NULL, reason = $2 WHERE id = $1", .text(a.id), .text(error.message))
        case "reservations.checkin", "reservations.checkout", "reservations.cancel":
            // The service says what the reservation is now (an expired hold);
            // otherwise it goes back to what it was.
            // The steps queued after this one on the same reservation are
            // dropped with it (``dependents``), so this is its state now.
            let status = error.details["status"]?.string ?? a.undo["status"]?.string ?? "held"
            let id = a.body["reservation"]?.string ?? ""
            let reset = a.type == "reservations.checkin" ? "checked_in_ms = NULL, ended_ms = NULL" : "ended_ms = NULL"
            try db.execute("UPDATE parking SET status = $2, pending = NULL, reason = $3, \(reset) WHERE id = $1",
                           .text(id), .text(status), .text(error.message))
        default:
            break
        }
    }

    /// What the user sees in the message about a refused action.
    static func describe(_ type: String, _ body: JSON) -> String {
        switch type {
        case "favorites.add": return "Adding \(body["product"]?.string ?? "a product") to your favorites"
        case "favorites.remove": return "Removing \(body["product"]?.string ?? "a product") from your favorites"
        case "orders.cart.add": return "Adding \(body["product"]?.string ?? "a product") to your cart"
        case "orders.cart.set": return "Setting \(body["product"]?.string ?? "a product") to \(body["quantity"]?.int ?? 0) in your cart"
        case "orders.cart.remove": return "Removing \(body["product"]?.string ?? "a product") from your cart"
        case "orders.cart.clear": return "Emptying your cart"
        case "orders.place":
            let what = body["source"]?.string == "cart" ? "your cart" : (body["product"]?.string ?? "a product")
            return "Your order to \(body["mode"]?.string ?? "buy") \(what)"
        case "orders.return": return "Returning your rental \(body["order"]?.string ?? "")"
        case "reservations.hold": return "Your parking hold\(body["lot"]?.string.map { " in \($0)" } ?? "")"
        case "reservations.checkin": return "Your check-in"
        case "reservations.checkout": return "Your check-out"
        case "reservations.cancel": return "Cancelling your hold"
        case "reservations.car.save": return "Saving where you parked"
        default: return type
        }
    }

    /// The reservation an action is a step of: a refusal drops the later
    /// queued steps of the same reservation, which were based on it.
    static func reservation(of a: QueuedAction) -> String? {
        a.type == "reservations.hold" ? a.id : a.after
    }

    /// The cart operations' product: what the contract accepts (1 to 64 characters).
    static func cartProduct(_ body: JSON, _ type: String) throws -> String {
        let product = try string(body, "product", type)
        guard product.count <= 64 else { throw QuadError.badRequest("body.product must be 1 to 64 characters for \(type)") }
        return product
    }

    /// A cart line as the undo keeps it (null when the product is not in the cart).
    static func cartLine(_ db: Database, _ product: String) throws -> JSON {
        guard let r = try db.queryOne("SELECT quantity, added_ms FROM cart WHERE product = $1", .text(product)) else { return .null }
        return ["quantity": .int(r.int("quantity")), "added_ms": .int(r.int("added_ms"))]
    }

    /// Every cart operation answers the service's cart: the phone takes it
    /// as the truth, unless another cart change (or an order from the cart)
    /// is still queued (any order, to keep it simple), whose optimistic update the service's cart does not
    /// show yet; the last of them to settle brings the phone's cart in line.
    /// A cart older than the one the phone last took settles the action
    /// only (CartVersions.swift). A line keeps the phone's added_ms (the
    /// order it is shown in).
    static func takeServiceCart(_ db: Database, _ a: QueuedAction, reply: JSON) throws {
        guard let lines = reply["lines"]?.array else { return }
        let later = try db.queryOne("""
            SELECT 1 AS one FROM outbox WHERE id <> $1 AND (type LIKE 'orders.cart.%' OR type = 'orders.place') LIMIT 1
            """, .text(a.id))
        guard later == nil, try !SavedCart.holdsNewer(db, than: reply) else { return }
        try SavedCart.took(db, reply)
        var kept: [String: Int64] = [:]
        for r in try db.query("SELECT product, added_ms FROM cart") { kept[r.string("product")] = r.int("added_ms") }
        try db.execute("DELETE FROM cart")
        for (i, line) in lines.enumerated() {
            guard let product = line["product"]?.string, let quantity = line["quantity"]?.int, quantity > 0 else { continue }
            // The service lists its lines oldest first: a line new to the phone goes after the ones it had, in that order.
            try db.execute("INSERT INTO cart (product, quantity, added_ms) VALUES ($1, $2, $3) ON CONFLICT (product) DO NOTHING",
                           .text(product), .int(quantity), .int(kept[product] ?? (a.createdMs + Int64(i))))
        }
    }

    /// The cart a cart action's reply gives (product → quantity, as JSON
    /// text), for the action log; nil for any other action.
    static func answeredCart(_ a: QueuedAction, reply: JSON) -> String? {
        guard ["orders.cart.add", "orders.cart.set", "orders.cart.remove", "orders.cart.clear"].contains(a.type),
              let lines = reply["lines"]?.array else { return nil }
        var cart: [String: JSON] = [:]
        for line in lines {
            guard let product = line["product"]?.string, let quantity = line["quantity"]?.int else { continue }
            cart[product] = .int(quantity)
        }
        return JSON.object(cart).text
    }

    package static func activeParking(_ db: Database) throws -> Row? {
        try db.queryOne("SELECT * FROM parking WHERE status IN ('held', 'checked_in') ORDER BY held_ms DESC LIMIT 1")
    }

    static func string(_ body: JSON, _ key: String, _ type: String) throws -> String {
        guard let s = body[key]?.string, !s.isEmpty else { throw QuadError.badRequest("body.\(key) is required for \(type)") }
        return s
    }
}
