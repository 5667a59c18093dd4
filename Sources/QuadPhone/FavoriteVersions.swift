import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// A favorite's saved copies never go back to an older version (issue 30,
/// point 1). The favorites service gives each favorite of a product a
/// `version`, the seq of its last event (favorites.added, .removed), in the
/// reply to favorites.add and favorites.remove and in each favorites.list
/// item, and the list its own version, the newest of the user's favorites,
/// removals included. The phone keeps each product's version in
/// `favorite_versions` (phone migration 55), apart from its `favorites`
/// rows, because "not a favorite since version 9" is a copy too and must
/// outlive the row. An answer replaces the phone's copy of a favorite only
/// at the same version or a newer one; an older one is dropped and counted
/// (`favorites_older` in meta). A favorite the list lacks is one removed
/// before the list was read unless the phone holds it at a version newer
/// than the list's: then it was added after, and stays. Favorites reach a
/// phone only so: no live update carries them.
enum SavedFavorites: OlderCopies {
    static let olderKey = "favorites_older"

    static func version(_ answer: JSON) -> Int64 { answer["version"]?.int ?? 0 }

    /// The version of the phone's copy of `product` (a favorite or not one), 0 when it has none.
    static func held(_ db: Database, _ product: String) throws -> Int64 {
        try db.queryOne("SELECT version FROM favorite_versions WHERE product = $1", .text(product))?.int("version") ?? 0
    }

    /// Whether the phone holds `product` at a newer version than `answer`
    /// (a reply about it): then the answer is older, dropped, and counted.
    static func holdsNewer(_ db: Database, _ product: String, than answer: JSON) throws -> Bool {
        guard try held(db, product) > version(answer) else { return false }
        try counted(db)
        return true
    }

    /// Records `version` as the phone's copy of `product`, never lowering it.
    static func record(_ db: Database, _ product: String, _ version: Int64) throws {
        try db.execute("""
            INSERT INTO favorite_versions (product, version) VALUES ($1, $2)
            ON CONFLICT (product) DO UPDATE SET version = MAX(version, excluded.version)
            """, .text(product), .int(version))
    }

    /// Takes the reply to favorites.add or favorites.remove into the
    /// phone's copy of its product, unless the phone holds a newer one: then
    /// the reply settles the action only.
    static func take(_ db: Database, reply: JSON, action: String, favorite: Bool) throws {
        guard let product = reply["product"]?.string else { return }
        if favorite { try db.execute("UPDATE favorites SET pending = NULL WHERE pending = $1", .text(action)) }
        guard try !holdsNewer(db, product, than: reply) else { return }
        // A remove answered: a row is there again only if a later add is queued.
        if !favorite { try db.execute("DELETE FROM favorites WHERE product = $1 AND pending IS NULL", .text(product)) }
        try record(db, product, version(reply))
    }

    /// `answer` of favorites.list as the phone shows it: no favorite in it
    /// older than the phone's copy (one the phone holds removed at a newer
    /// version is left out, one it holds added after the list was read is
    /// put in); with how many were.
    static func newest(_ db: Database, _ answer: JSON) -> (body: JSON, older: Int) {
        guard case .object(var body) = answer, let items = body["items"]?.array,
              let rows = try? db.query("""
                SELECT f.product, f.added_ms, COALESCE(v.version, 0) AS version, f.pending IS NOT NULL AS queued
                FROM favorites f LEFT JOIN favorite_versions v ON v.product = f.product
                """),
              let removed = try? db.query("SELECT product, version FROM favorite_versions WHERE product NOT IN (SELECT product FROM favorites)")
        else { return (answer, 0) }
        let listVersion = version(answer)
        var mine: [String: Row] = [:]
        for r in rows { mine[r.string("product")] = r }
        var gone: [String: Int64] = [:]
        for r in removed { gone[r.string("product")] = r.int("version") }
        var older = 0
        var shown: [JSON] = []
        for item in items {
            guard let product = item["product"]?.string else { continue }
            if let since = gone[product], since > version(item) {
                older += 1
                continue
            }
            if let row = mine[product], row.int("version") > version(item), case .object(var fields) = item {
                (fields["version"], fields["added_at"]) = (.int(row.int("version")), .int(row.int("added_ms")))
                older += 1
                shown.append(.object(fields))
                continue
            }
            shown.append(item)
        }
        let listed = Set(items.compactMap { $0["product"]?.string })
        let added = rows.filter { !listed.contains($0.string("product")) && $0.int("queued") == 0 && $0.int("version") > listVersion }
            .sorted { ($0.int("added_ms"), $1.string("product")) > ($1.int("added_ms"), $0.string("product")) }
        older += added.count
        shown = added.map { ["product": .string($0.string("product")), "added_at": .int($0.int("added_ms")), "summary": .null, "version": .int($0.int("version"))] } + shown
        body["items"] = .array(shown)
        body["total"] = .int((body["total"]?.int ?? 0) + Int64(shown.count - items.count))
        return (.object(body), older)
    }

    /// `shown` (a list as ``newest`` gave it) with the favorite changes
    /// still queued applied on top, oldest first: an add puts its product
    /// first (marked `pending`) unless listed, a remove takes it out.
    static func rebased(_ db: Database, _ shown: JSON) -> JSON {
        guard case .object(var body) = shown, var items = body["items"]?.array,
              let queued = try? db.query("SELECT type, body, created_ms FROM outbox WHERE type IN ('favorites.add', 'favorites.remove') ORDER BY seq")
        else { return shown }
        for change in queued {
            guard let product = (try? JSON.parse(change.string("body")))?["product"]?.string else { continue }
            let at = items.firstIndex { $0["product"]?.string == product }
            if change.string("type") == "favorites.remove" {
                if let at { items.remove(at: at) }
            } else if let at, case .object(var fields) = items[at] {
                fields["pending"] = true
                items[at] = .object(fields)
            } else if at == nil {
                items.insert(["product": .string(product), "added_at": .int(change.int("created_ms")), "summary": .null, "pending": true], at: 0)
            }
        }
        body["items"] = .array(items)
        body["total"] = .int(Int64(items.count))
        return .object(body)
    }

    /// Makes the phone's favorites those of `shown` (a list as ``newest``
    /// gave it), recording each one's version and, for each favorite left
    /// out, that it is not one as of the list's version.
    static func take(_ db: Database, list shown: JSON) throws {
        let items = shown["items"]?.array ?? []
        try db.transaction {
            let listed = Set(items.compactMap { $0["product"]?.string })
            for r in try db.query("SELECT product FROM favorites WHERE pending IS NULL") where !listed.contains(r.string("product")) {
                try db.execute("DELETE FROM favorites WHERE product = $1", .text(r.string("product")))
                try record(db, r.string("product"), version(shown))
            }
            for item in items {
                guard let product = item["product"]?.string else { continue }
                try db.execute("INSERT INTO favorites (product, added_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                               .text(product), .int(item["added_at"]?.int ?? 0))
                try record(db, product, version(item))
            }
        }
    }
}

extension Phone {
    /// A favorites.list answer as the phone saves and shows it: no favorite
    /// in it older than the phone's copy. While no favorite change waits to
    /// be sent, the phone's favorites become the ones it shows.
    func newestFavorites(_ type: String, _ answer: JSON) -> JSON {
        guard type == "favorites.list" else { return answer }
        let (body, older) = SavedFavorites.newest(db, answer)
        if older > 0 { try? SavedFavorites.counted(db, older) }
        if pendingNotice(["favorites.add", "favorites.remove"]) == nil { try? SavedFavorites.take(db, list: body) }
        return body
    }
}
