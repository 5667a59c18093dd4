import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// The phone's cart never goes back to an older version (issue 30, point
/// 1). The orders service gives each user's cart a `version`, the number
/// its own counter gave the cart's last change (orders.cart.add, .set,
/// .remove, .clear, an order from the cart taking its lines out): the
/// phone keeps the version of the cart it last took (`cart_version` in
/// meta, phone migration 57), and a cart action's reply replaces the
/// phone's cart only at the same version or a newer one. An older one (a
/// retry's stored answer, read before a change the phone has taken since)
/// is dropped and counted (`cart_older` in meta). The cart reaches a phone
/// only so: no event carries it, and the phone reads no orders.cart.view.
enum SavedCart: OlderCopies {
    static let versionKey = "cart_version"
    static let olderKey = "cart_older"

    static func version(_ cart: JSON) -> Int64 { cart["version"]?.int ?? 0 }

    /// The version of the cart the phone last took from the service.
    static func held(_ db: Database) throws -> Int64 { Int64(try db.meta(versionKey) ?? "0") ?? 0 }

    /// Whether the phone holds its cart at a newer version than `cart`, a
    /// reply's: then the reply is older, dropped, and counted.
    static func holdsNewer(_ db: Database, than cart: JSON) throws -> Bool {
        guard try held(db) > version(cart) else { return false }
        try counted(db)
        return true
    }

    /// Keeps `cart`'s version as the phone's, once the phone took it.
    static func took(_ db: Database, _ cart: JSON) throws {
        try db.setMeta(versionKey, String(version(cart)))
    }
}
