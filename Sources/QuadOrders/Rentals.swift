import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Rentals with a life: a rental is a confirmed order of mode `rent`, due
/// back on its `return_date`; `orders.return` makes it `returned` and gives
/// its units back to the catalog, charging the days it came back late.
/// Days are UTC calendar days of the service's clock (`Clock.nowMillis`),
/// so a test moves "today" by running orders under libfaketime.
enum Rentals {
    static let msPerDay: Int64 = 86_400_000

    /// The UTC day number (days since 1970-01-01) of an instant.
    static func day(ms: Int64) -> Int64 { ms >= 0 ? ms / msPerDay : (ms - msPerDay + 1) / msPerDay }

    /// The UTC day number of an ISO date, nil if it is not one.
    static func day(of date: String) -> Int64? {
        PlacePlan.dayFormatter().date(from: date).map { day(ms: Int64(($0.timeIntervalSince1970 * 1000).rounded())) }
    }

    /// A rental as `orders.rentals` shows it on `today` (a day number).
    static func rental(_ order: OrderRecord, today: Int64) -> Contract.Orders.Rentals.Rental {
        let due = order.returnDate ?? ""
        guard order.status != .returned else { return .init(order: order.reply, state: .returned, dueDate: due, dueInDays: nil) }
        let left = (day(of: due) ?? today) - today
        return .init(order: order.reply, state: left < 0 ? .overdue : .active, dueDate: due, dueInDays: left)
    }

    /// The late charge of returning `order` on `today`: every day after its
    /// due date, at each line's rate per day.
    static func late(_ order: OrderRecord, today: Int64) -> (days: Int64, cents: Int64) {
        let days = max(0, today - (day(of: order.returnDate ?? "") ?? today))
        let perDay = order.items.reduce(Int64(0)) { $0 + Cents.of($1.rentRate ?? 0) * $1.quantity }
        return (days, perDay * days)
    }

    static func register(_ h: Handlers, db: Database, saga: OrderSaga) {
        typealias C = Contract.Orders
        h.query(C.rentals) { req, body in
            let user = try req.requireUser()
            let filter = "user_id = $1 AND mode = 'rent' AND status IN ('confirmed', 'returned')"
            let total = try db.queryOne("SELECT COUNT(*) AS n FROM orders WHERE \(filter)", .text(user))?.int("n") ?? 0
            let rows = try db.query("SELECT * FROM orders WHERE \(filter) ORDER BY created_ms DESC, id DESC LIMIT $2 OFFSET $3",
                                    .text(user), .int(body.limit), .int(body.offset))
            let today = day(ms: OrderSaga.now)
            return C.Rentals.Reply(rentals: try rows.map { rental(try OrderRecord($0), today: today) }, total: total, offset: body.offset, limit: body.limit)
        }
        h.query(C.returnRental) { req, body in try saga.returnRental(req, body) }
    }
}

extension OrderSaga {
    /// `orders.return`. The return commits first, in one transaction: the
    /// order becomes `returned` with its late days and charge, a release is
    /// flagged to send (`release_pending`), and `orders.returned` goes in the
    /// outbox. The release is then sent; if the catalog does not answer, or
    /// the worker dies before it is sent, the recovery sends it again until
    /// the catalog acknowledges it (its release of a hold is a no-op the
    /// second time). A second return, with the same or another envelope id,
    /// finds the order returned and answers it as it is: one effect.
    func returnRental(_ req: Request, _ body: Contract.Orders.OrderRequest) throws -> Contract.Orders.Order {
        let user = try req.requireUser()
        let id = body.order
        let (order, moved) = try db.transaction { () throws -> (OrderRecord, Bool) in
            // Another user's order is not found: its existence is not theirs to learn.
            guard let order = try OrderRecord.load(db, id), order.user == user else { throw QuadError.notFound("you have no order '\(id)'") }
            guard order.mode == "rent" else {
                throw QuadError.conflict("order '\(id)' was bought, not rented: there is nothing to return")
            }
            switch order.status {
            case .returned:
                return (order, false)
            case .confirmed:
                let now = Self.now
                let late = Rentals.late(order, today: Rentals.day(ms: now))
                let changed = try db.execute("""
                    UPDATE orders SET status = 'returned', returned_ms = $2, late_days = $3, late_cents = $4, total_cents = total_cents + $4,
                        release_pending = 1, updated_ms = $2, lease_until = $5
                    WHERE id = $1 AND status = 'confirmed'
                    """, .text(id), .int(now), .int(late.days), .int(late.cents), .int(now + settings.leaseMs))
                var current = try OrderRecord.load(db, id)!
                if changed == 1 {
                    var e = Contract.Orders.Returned()
                    (e.order, e.user, e.items, e.currency) = (id, user, current.items.map(\.event), current.currency ?? "USD")
                    (e.returnDate, e.returnedAt, e.lateDays, e.lateCharge) = (current.returnDate ?? "", now, late.days, Cents.amount(late.cents))
                    current.version = try OrderRecord.publish(db, id, type: Contract.Orders.returned.type, body: e.json)
                }
                // A deliberately broken build answers the order as it was (Faults.swift).
                return (Faults.staleAnswers ? order : current, changed == 1)
            case .cancelled:
                throw QuadError.conflict("order '\(id)' was cancelled: its stock is back already, there is nothing to return")
            case .rejected:
                throw QuadError.conflict("order '\(id)' was rejected (\(order.reason ?? "no reason")): there is nothing to return")
            default:
                throw QuadError.conflict("order '\(id)' is still being placed: return it once it is confirmed")
            }
        }
        if moved { try release(id) }
        return order.reply
    }
}
