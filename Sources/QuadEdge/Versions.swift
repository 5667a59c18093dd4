import Foundation
import QuadStore
import QuadWire

/// A product's saved copies never go back to an older version (issue 30,
/// point 1). The catalog gives each product a `version`, the seq of its
/// last event (``catalog.product.stock`` and ``catalog.product.changed``
/// carry it as their envelope seq): the product view's saved copy, the
/// saved catalog's row and the live feed's last seq are compared by it,
/// whichever way a copy came (a reply, the catalog's list, a live update
/// through either broker, a catch-up), and only a newer one replaces what
/// the phone has.
extension Phone {
    /// The newest version of product `id` the phone holds: the live feed's
    /// last seq, the saved catalog's row, the product view's saved copy.
    func productVersion(_ id: String) -> Int64 {
        var v = productSeqs[id] ?? 0
        if let row = try? db.queryOne("SELECT version FROM catalog WHERE id = $1", .text(id)) { v = max(v, row.int("version")) }
        if let copy = savedProduct(id), let version = copy["version"]?.int { v = max(v, version) }
        return v
    }

    /// The product view's saved copy of `id` (``saved(_:)`` under its key).
    func savedProduct(_ id: String) -> JSON? { saved(Phone.productKey(id))?.body }

    static func productKey(_ id: String) -> String { key("catalog.product.get", ["id": .string(id)]) }

    /// Saves a product the service answered, unless the phone holds a newer
    /// version of it; returns what the phone now holds (the answer, or the
    /// newer copy), and whether that is the answer.
    func saveProduct(_ key: String, _ reply: JSON) -> (body: JSON, isReply: Bool) {
        guard let id = reply["id"]?.string else { write(key, reply); return (reply, true) }
        let version = reply["version"]?.int ?? 0
        if let copy = savedProduct(id), let held = copy["version"]?.int, held > version {
            return (copy, false)
        }
        write(key, reply)
        productSeqs[id] = max(productSeqs[id] ?? 0, version)
        // The saved catalog's row takes the newer stock too.
        _ = try? db.execute("UPDATE catalog SET stock = $2, version = $3 WHERE id = $1 AND version < $3",
                            .text(id), .int(reply["stock"]?.int ?? 0), .int(version))
        return (reply, true)
    }

    /// A live update of product `id`'s stock at version `seq`: applied to
    /// every saved copy older than it. False when the phone already holds
    /// `seq` or newer (a repeat through the other broker, or a late one),
    /// with the version held.
    func applyProductStock(_ id: String, stock: Int64, seq: Int64) -> (applied: Bool, held: Int64) {
        // The feed's last seq first, in memory: the same update heard
        // through the other broker costs no read of the file.
        if let last = productSeqs[id], seq <= last { return (false, last) }
        let held = productVersion(id)
        guard seq > held else { return (false, held) }
        productSeqs[id] = seq
        _ = try? db.execute("UPDATE catalog SET stock = $2, version = $3 WHERE id = $1", .text(id), .int(stock), .int(seq))
        if case .object(var product)? = savedProduct(id) {
            product["stock"] = .int(stock)
            product["version"] = .int(seq)
            write(Phone.productKey(id), .object(product))
        }
        return (true, held)
    }

    /// The saved catalog's rows by id (version and stock), read before a
    /// new list replaces them: a row the list has at an older version keeps
    /// the phone's newer stock.
    func savedCatalogVersions() -> [String: (version: Int64, stock: Int64)] {
        var held: [String: (version: Int64, stock: Int64)] = [:]
        for r in (try? db.query("SELECT id, version, stock FROM catalog WHERE version > 0")) ?? [] {
            held[r.string("id")] = (r.int("version"), r.int("stock"))
        }
        return held
    }
}
