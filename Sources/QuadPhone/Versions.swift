import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

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
        if let copy = savedProduct(id), let held = copy["version"]?.int, held > version || keepsFirstCopies {
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
        guard seq > held, !(keepsFirstCopies && savedProduct(id) != nil) else { return (false, held) }
        productSeqs[id] = seq
        _ = try? db.execute("UPDATE catalog SET stock = $2, version = $3 WHERE id = $1", .text(id), .int(stock), .int(seq))
        if case .object(var product)? = savedProduct(id) {
            product["stock"] = .int(stock)
            product["version"] = .int(seq)
            write(Phone.productKey(id), .object(product))
        }
        return (true, held)
    }

    /// A saved copy (a product, or a list of `products`) with each product
    /// the phone holds a newer version of at that version and its stock:
    /// a view never shows a product older than one it showed before
    /// (monotonic reads, SessionLog.swift). The saved catalog's row and the
    /// product view's saved copy are kept at the newest version the phone
    /// learned (``saveProduct(_:_:)``, ``applyProductStock(_:stock:seq:)``).
    func withNewestProducts(_ body: JSON) -> JSON {
        func newest(_ p: JSON) -> JSON {
            guard case .object(var f) = p, let id = f["id"]?.string, let shown = f["version"]?.int else { return p }
            var best: (version: Int64, stock: Int64)?
            if let row = (try? db.queryOne("SELECT version, stock FROM catalog WHERE id = $1", .text(id))) ?? nil, row.int("version") > shown {
                best = (row.int("version"), row.int("stock"))
            }
            if let copy = savedProduct(id), let v = copy["version"]?.int, v > (best?.version ?? shown), let stock = copy["stock"]?.int {
                best = (v, stock)
            }
            guard let best else { return p }
            f["version"] = .int(best.version)
            f["stock"] = .int(best.stock)
            return .object(f)
        }
        guard case .object(var fields) = body else { return body }
        if fields["id"]?.string != nil { return newest(body) }
        guard let list = fields["products"]?.array else { return body }
        fields["products"] = .array(list.map(newest))
        return .object(fields)
    }

    /// A list of products the service answered (home, search, For You):
    /// the saved catalog's rows of them that are older take its version and
    /// stock, in one statement (none is written when none is older).
    func takeListedProducts(_ body: JSON) {
        guard let list = body["products"]?.array, !list.isEmpty else { return }
        var values: [SQLValue] = []
        var tuples: [String] = []
        for p in list {
            guard let id = p["id"]?.string, let version = p["version"]?.int, version > 0, let stock = p["stock"]?.int else { continue }
            if let last = productSeqs[id], last >= version { continue }
            let k = values.count
            values += [.text(id), .int(stock), .int(version)]
            tuples.append("($\(k + 1), $\(k + 2), $\(k + 3))")
        }
        guard !tuples.isEmpty else { return }
        _ = try? db.execute("""
            UPDATE catalog SET stock = v.column2, version = v.column3
            FROM (VALUES \(tuples.joined(separator: ", "))) AS v
            WHERE catalog.id = v.column1 AND catalog.version < v.column3
            """, values)
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
