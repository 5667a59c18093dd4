import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// A parking reservation's saved copy never goes back to an older version
/// (issue 30, point 1). The reservations service gives each reservation a
/// `version`, the seq of its last event (reservations.held, .checkedin,
/// .checkedout, .cancelled, .expired): the phone's `parking` table keeps it
/// (phone migration 55), and a reservation's state, however it comes (the
/// reply to a step, a reservations.mine read), replaces the phone's copy
/// only at the same version or a newer one. An older one is dropped and
/// counted (`holds_older` in meta). A step still queued (`pending`) stays
/// as the phone shows it until its answer comes. Holds reach a phone only
/// so: their events go to notifications, whose news a phone keeps in its
/// inbox, not in its parking.
enum SavedHolds: OlderCopies {
    static let olderKey = "holds_older"

    static func version(_ reservation: JSON) -> Int64 { reservation["version"]?.int ?? 0 }

    /// Whether the phone holds reservation `id` at a newer version than
    /// `reservation`, an answer about it: then the answer is older, dropped, and counted.
    static func holdsNewer(_ db: Database, _ id: String, than reservation: JSON) throws -> Bool {
        guard let held = try db.queryOne("SELECT version FROM parking WHERE id = $1", .text(id)), held.int("version") > version(reservation) else {
            return false
        }
        try counted(db)
        return true
    }

    /// Takes a reservation reservations.mine gave into the phone's row of
    /// it, unless that row is queued or newer; a reservation the phone has
    /// no row of is left to the caller.
    static func take(_ db: Database, _ r: JSON) throws {
        guard let id = r["id"]?.string, try !holdsNewer(db, id, than: r) else { return }
        try db.execute("""
            UPDATE parking SET status = COALESCE($2, status), spot = COALESCE($3, spot), lot = COALESCE($4, lot), level = COALESCE($5, level),
                signal = COALESCE($6, signal), deadline_ms = COALESCE($7, deadline_ms), checked_in_ms = COALESCE($8, checked_in_ms),
                ended_ms = COALESCE($9, ended_ms), version = $10
            WHERE id = $1 AND pending IS NULL AND version <= $10
            """, .text(id), .of(r["status"]?.string), .of(r["spot"]?.string), .of(r["lot"]?.string), .of(r["level"]?.string),
            .of(r["signal"]?.string), .of(r["deadline"]?.int), .of(r["checked_in_at"]?.int), .of(r["ended_at"]?.int), .int(version(r)))
    }
}
