import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

/// What a phone showed, for the session guarantees the chaos checker holds
/// each phone to (issue 30, point 3; deploy/checker.py's `sessions`).
///
/// With ``EdgeSettings/recordShown`` (`quad-edge run --record-views`, what
/// `deploy/chaos run` passes), each phone keeps a log in its own file, the
/// table `shown`, one row per versioned object:
///
/// | kind | when | object, version |
/// |---|---|---|
/// | `view` | a view is shown (after its saved copies and queued actions are applied) | each product (`product:ID`), order (`order:ID`), parking reservation (`reservation:ID`), notification (`notification:ID`) and favorite (`favorite:PRODUCT`) in it, at the version it shows; each level of a lot (`level:LOT/ID`) at its seq |
/// | `act` | an action is queued | the object it acts on (the order returned or cancelled, the product bought), at the newest version the phone held of it then |
/// | `ack` | a service acknowledged the action | each object of the answer with its version (the order an `orders.place` made) |
///
/// Rows are in the order the phone did these things (`n`). The checker
/// reads them after the run: monotonic reads (no view of an object shows a
/// version older than one shown before), read-your-writes (once an action
/// is acknowledged, no later view shows the object it made at an older
/// version, and the orders view lists every order acknowledged before it),
/// writes-follow-reads (a write on an object is applied after the version
/// the phone read before it), and convergence (after the last heal and the
/// day's final read, ``CampusDay/finalRead()``, each phone's saved copies
/// equal the services' state).
///
/// Off by default: the log costs a write per view. The table is made only
/// when the log is on, so a phone without it keeps no schema for it.
extension Phone {
    static let shownTable = """
        CREATE TABLE IF NOT EXISTS shown (
            n INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
            view TEXT NOT NULL, object TEXT NOT NULL, version INTEGER NOT NULL, action TEXT)
        """

    /// The versioned objects in `body`, depth first: an object with an
    /// integer `version` is an order when its `order` is a string (the
    /// orders service's id field); with a string `id`, a parking
    /// reservation when it names a `spot`, a notification when it has a
    /// `text` and a `read`, else a product; with a string `product` and no
    /// `id`, the user's favorite of that product (a favorites list item, the
    /// reply to favorites.add or .remove). Something still queued (no
    /// version yet) is not one.
    static func versioned(_ body: JSON) -> [(object: String, version: Int64)] {
        var out: [(String, Int64)] = []
        func walk(_ j: JSON) {
            switch j {
            case .object(let fields):
                if let v = fields["version"]?.int {
                    if let order = fields["order"]?.string {
                        out.append(("order:" + order, v))
                    } else if let id = fields["id"]?.string {
                        if fields["spot"] != nil {
                            out.append(("reservation:" + id, v))
                        } else if fields["text"] != nil && fields["read"] != nil {
                            out.append(("notification:" + id, v))
                        } else {
                            out.append(("product:" + id, v))
                        }
                    } else if let product = fields["product"]?.string {
                        out.append(("favorite:" + product, v))
                    }
                }
                for (_, value) in fields { walk(value) }
            case .array(let items):
                for item in items { walk(item) }
            default:
                break
            }
        }
        walk(body)
        return out
    }

    private func logShown(_ kind: String, _ view: String, _ rows: [(object: String, version: Int64)], action: String? = nil) {
        guard settings.recordShown, !rows.isEmpty else { return }
        let now = self.now
        do {
            try db.transaction {
                for r in rows {
                    try db.execute("INSERT INTO shown (at_ms, kind, view, object, version, action) VALUES ($1, $2, $3, $4, $5, $6)",
                                   .int(now), .text(kind), .text(view), .text(r.object), .int(r.version), .of(action))
                }
            }
        } catch {
            Log.error("edge/\(name)", "cannot log what the \(view) view showed: \(error)")
        }
    }

    /// A view as the student sees it: its versioned objects.
    func logView(_ result: ViewResult) {
        guard settings.recordShown else { return }
        var rows = Phone.versioned(result.body)
        // A lot's levels, each at the seq of its last change.
        if result.view == "levels", let lot = result.body["lot"]?.string {
            for level in result.body["levels"]?.array ?? [] {
                if let id = level["id"]?.string, let seq = level["seq"]?.int { rows.append(("level:\(lot)/\(id)", seq)) }
            }
        }
        // The orders view is a list the checker holds to every order
        // acknowledged before it: logged even when it lists none.
        if result.view == "orders" && result.error == nil { rows.append(("view:orders", 0)) }
        logShown("view", result.view, rows)
    }

    /// A queued action: the object it acts on, at the newest version the
    /// phone held of it.
    func logAct(_ id: String, _ type: String, _ body: JSON) {
        guard settings.recordShown else { return }
        var rows: [(String, Int64)] = []
        if let order = body["order"]?.string, let held = try? SavedOrders.held(db, order) {
            rows.append(("order:" + order, held.version))
        } else if let product = body["product"]?.string {
            rows.append(("product:" + product, productVersion(product)))
        }
        logShown("act", type, rows, action: id)
    }

    /// An acknowledged action: the versioned objects of its answer.
    func logAck(_ id: String, _ type: String, reply: JSON) {
        guard settings.recordShown else { return }
        logShown("ack", type, Phone.versioned(reply), action: id)
    }

    /// The products the phone saved a product view of.
    package func savedProductIDs() -> [String] {
        let prefix = "catalog.product.get "
        let rows = (try? db.query("SELECT key FROM saved WHERE key LIKE 'catalog.product.get %'")) ?? []
        return rows.compactMap { r in
            let key = r.string("key")
            guard key.hasPrefix(prefix) else { return nil }
            return (try? JSON.parse(String(key.dropFirst(prefix.count))))?["id"]?.string
        }
    }

    /// Makes the log's table (when the log is on).
    static func prepareShown(_ db: Database) throws {
        try db.executeScript(shownTable)
    }
}
