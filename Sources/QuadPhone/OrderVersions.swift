import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// An order's saved copies never go back to an older version (issue 30,
/// point 1). The orders service gives each order a `version`, the seq of
/// its last event (orders.placed, .confirmed, .rejected, .cancelled,
/// .returned): the phone's `orders` table keeps it with the order as the
/// service last gave it (phone migration 54), and an order's state, however
/// it comes (the reply to an orders.place, orders.return or orders.cancel,
/// an orders.mine or orders.rentals read), replaces the phone's copy only
/// at the same version or a newer one. An older one is dropped and counted
/// (`orders_older` in meta). Orders reach a phone only so: their events go
/// to notifications, whose news a phone keeps in its inbox, not in its
/// orders. An order the phone placed and still has queued (`pending`) has
/// no version yet and stays as the phone shows it until its answer comes.
enum SavedOrders: OlderCopies {
    static let olderKey = "orders_older"

    /// The version of order `id` the phone holds, and the order as the
    /// service last gave it (nil before this build, or for one it only
    /// placed); nil when it has no row of it.
    static func held(_ db: Database, _ id: String) throws -> (version: Int64, body: JSON?, pending: Bool)? {
        guard let r = try db.queryOne("SELECT version, body, pending FROM orders WHERE id = $1", .text(id)) else { return nil }
        return (r.int("version"), r.optionalString("body").map { .stored($0) }, !r["pending"].isNull)
    }

    static func version(_ order: JSON) -> Int64 { order["version"]?.int ?? 0 }

    /// Whether the phone holds order `id` at a newer version than `order`,
    /// an answer about it: then the answer is older, dropped, and counted.
    static func holdsNewer(_ db: Database, _ id: String, than order: JSON) throws -> Bool {
        guard let held = try held(db, id), held.version > version(order) else { return false }
        try counted(db)
        return true
    }

    /// Takes an order the service gave (a reply, a rental) into the
    /// phone's row of it, unless that row is queued or newer; false when
    /// the phone holds a newer one.
    @discardableResult
    static func take(_ db: Database, _ order: JSON) throws -> Bool {
        guard let id = order["order"]?.string else { return false }
        guard try !holdsNewer(db, id, than: order) else { return false }
        try db.execute("""
            UPDATE orders SET status = COALESCE($2, status), total = COALESCE($3, total), currency = COALESCE($4, currency),
                version = $5, body = $6
            WHERE id = $1 AND pending IS NULL AND version <= $5
            """, .text(id), .of(order["status"]?.string), .of(order["total"]?.double), .of(order["currency"]?.string),
            .int(version(order)), .text(order.text))
        return true
    }

    /// The phone's copy of `order` when it is newer than it (and not
    /// queued); nil when `order` is as new as what the phone holds.
    static func newer(_ db: Database, than order: JSON) -> JSON? {
        guard let id = order["order"]?.string, let held = try? held(db, id), !held.pending,
              held.version > version(order), let body = held.body else { return nil }
        return body
    }

    /// An orders.mine list with every order the phone holds an answer of
    /// (acknowledged, not queued) and the list lacks, newest first: an
    /// order placed and acknowledged after the list was saved, or after
    /// the service read it. A full list (`limit` orders) gets only those
    /// newer than the oldest it has.
    static func withAcknowledged(_ db: Database, _ listed: [JSON], limit: Int) -> [JSON] {
        let ids = Set(listed.compactMap { $0["order"]?.string })
        let oldest: Int64 = listed.count >= limit ? listed.compactMap { $0["created_at"]?.int }.min() ?? 0 : 0
        let rows = (try? db.query("SELECT id, body FROM orders WHERE pending IS NULL AND body IS NOT NULL AND created_ms >= $1 ORDER BY created_ms DESC",
                                  .int(oldest))) ?? []
        let missing = rows.filter { !ids.contains($0.string("id")) }.compactMap { r -> JSON? in
            guard let text = r.optionalString("body") else { return nil }
            return .stored(text)
        }
        return missing + listed
    }

    /// `answer` of orders.mine or orders.rentals with each order older than
    /// the phone's copy replaced by that copy (from the phone's orders, or
    /// `saved`, the previous answer of the same read); with how many were.
    static func newest(_ db: Database, _ type: String, _ answer: JSON, saved: JSON?) -> (body: JSON, older: Int) {
        guard case .object(var body) = answer else { return (answer, 0) }
        var older = 0
        switch type {
        case "orders.mine":
            guard let orders = body["orders"]?.array else { return (answer, 0) }
            body["orders"] = .array(orders.map { o in
                guard let copy = newer(db, than: o) else { return o }
                older += 1
                return copy
            })
        case "orders.rentals":
            guard let rentals = body["rentals"]?.array else { return (answer, 0) }
            var before: [String: JSON] = [:]
            for r in saved?["rentals"]?.array ?? [] { if let id = r["order"]?["order"]?.string { before[id] = r } }
            body["rentals"] = .array(rentals.map { r in
                let order = r["order"] ?? .null
                var newest = r
                if let id = order["order"]?.string, let b = before[id], version(b["order"] ?? .null) > version(order) { newest = b }
                if let copy = newer(db, than: newest["order"] ?? .null), case .object(var fields) = newest {
                    // The phone's orders hold a newer state (an orders.return answered, or orders.mine read since).
                    fields["order"] = copy
                    if copy["status"]?.string == "returned" {
                        fields["state"] = .string("returned")
                        fields["due_in_days"] = nil
                    }
                    newest = .object(fields)
                }
                if newest != r { older += 1 }
                return newest
            })
        default:
            return (answer, 0)
        }
        return (.object(body), older)
    }
}

extension Phone {
    /// An orders.mine or orders.rentals answer as the phone saves and shows
    /// it: no order in it older than the phone's copy. The rentals it gives
    /// that are newer than the phone's orders update them.
    func newestOrders(_ type: String, _ key: String, _ answer: JSON) -> JSON {
        guard type == "orders.mine" || type == "orders.rentals" else { return answer }
        let (body, older) = SavedOrders.newest(db, type, answer, saved: saved(key)?.body)
        if older > 0 { try? SavedOrders.counted(db, older) }
        if type == "orders.rentals" {
            try? db.transaction {
                for r in body["rentals"]?.array ?? [] { if let o = r["order"] { try SavedOrders.take(db, o) } }
            }
        }
        return body
    }
}

/// The saved copies of one kind (orders, holds, favorites, the cart) whose
/// answers older than the phone's copy are dropped and counted in meta
/// under `olderKey`.
protocol OlderCopies {
    static var olderKey: String { get }
}

extension OlderCopies {
    /// Counts `n` answers dropped for being older than the phone's copy.
    static func counted(_ db: Database, _ n: Int = 1) throws {
        let was = Int(try db.meta(olderKey) ?? "0") ?? 0
        try db.setMeta(olderKey, String(was + n))
    }

    /// How many answers older than the phone's copy were dropped.
    static func olderDropped(_ db: Database) -> Int { Int((try? db.meta(olderKey)) ?? nil ?? "0") ?? 0 }
}
