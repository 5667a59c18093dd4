import Foundation
import QuadCatalogCopy
import QuadRuntime
import QuadStore
import QuadWire

/// The saga of an order with the catalog, which owns the stock:
///
/// 1. record the order `pending`, in its own committed transaction, before
///    asking the catalog anything;
/// 2. `catalog.stock.hold` under the order id (all items or none): the order
///    becomes `held`, priced at the catalog's prices, and `orders.placed` is
///    published;
/// 3. `catalog.stock.confirm`: the order becomes `confirmed`, the bought
///    units leave the cart, `orders.confirmed` is published and the reply
///    is stored as the answer to the order id.
///
/// A refusal of the catalog (409 not enough stock, 404 unknown product, a
/// hold that expired) rejects the order with the catalog's reason and
/// publishes `orders.rejected`. Each catalog call is idempotent by order id,
/// so any step may run twice: after a crash the recovery timer re-sends the
/// hold (which answers the state the hold is in) and goes on. An order that
/// stays open past the deadline is released and rejected instead.
///
/// A worker drives an order under a lease (`lease_until`), so the recovery
/// of another worker does not drive the same order at the same moment; if
/// both did, the conditional status moves would still apply each step once.
final class OrderSaga {
    struct Settings {
        var fees: FeeSchedule
        /// How long a worker owns an order it drives.
        var leaseMs: Int64 = 10_000
        /// Before a step the catalog did not answer is tried again.
        var retryMs: Int64 = 1_000
        /// An order still open after this long is released and rejected.
        var deadlineMs: Int64 = 60_000
        /// Fault injection for tests: sleep between the hold and the confirmation.
        var pauseAfterHoldMs: Int64 = 0
        /// Each attempt of a call to the catalog (Lazy Pirate, same id).
        var callTimeoutMs: Int64 = 1_000
        var callAttempts = 2
    }

    typealias Call = (Envelope, Int64, Int) throws -> Envelope

    let db: Database
    let settings: Settings
    let call: Call
    let source: String

    /// `call` sends a request to another service (the worker's internal client).
    init(db: Database, settings: Settings, source: String, call: @escaping Call) {
        self.db = db
        self.settings = settings
        self.source = source
        self.call = call
    }

    static var now: Int64 { Int64(Clock.nowMillis()) }

    // MARK: orders.place

    enum Start {
        case answered(Envelope)
        case drive
        case busy
        case foreign
    }

    /// `orders.place`: the request id is the order id. Registered as a query
    /// because it must not hold the store's write lock across calls to the
    /// catalog; it keeps the idempotency record itself.
    func place(_ req: Request) throws -> JSON {
        let user = try req.requireUser()
        let id = req.id
        let owner = Self.owner(user)
        // Someone else's id, or an id of another type, is a 409 here, before
        // anything of its order is read.
        if let stored = try Idempotency.claim(db, id: id, type: "orders.place", owner: owner) { return try Self.answer(stored) }
        let start: Start
        do {
            let plan = try PlacePlan(req)
            start = try db.transaction { () throws -> Start in
                if let stored = try Idempotency.claim(db, id: id, type: "orders.place", owner: owner) { return .answered(stored) }
                if let existing = try OrderRecord.load(db, id) {
                    guard existing.user == user else { return .foreign }
                    return try claim(id) ? .drive : .busy
                }
                let items = plan.source == "cart" ? try Cart.lines(db, user: user) : [OrderItem(product: plan.product!, quantity: plan.quantity)]
                guard !items.isEmpty else { throw QuadError.conflict("the cart is empty: add products with orders.cart.add first") }
                let now = Self.now
                try db.execute("""
                    INSERT INTO orders (id, user_id, status, source, mode, screen, return_date, semester, items, created_ms, updated_ms, lease_until)
                    VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $9, $10)
                    """, .text(id), .text(user), .text(plan.source), .text(plan.mode), .text(plan.screen), .of(plan.returnDate),
                    .text(try Buyers.semester(db, user).text), .text(OrderRecord.itemsText(items)), .int(now), .int(now + settings.leaseMs))
                return .drive
            }
        } catch let error as QuadError where error.status < 500 {
            // A refusal is the answer to this id, as for any mutation.
            throw try remember(id, Envelope.request("orders.place", id: id).error(error, src: source), owner: owner).quadError ?? error
        }
        switch start {
        case .answered(let stored):
            return try Self.answer(stored)
        case .foreign:
            throw QuadError.conflict("the request id '\(id)' already names another user's order: send a new id")
        case .busy:
            // Another worker is placing it (a retry that overtook the first
            // attempt): wait a while for its outcome rather than answer nothing.
            let until = Clock.monotonicMillis() + settings.callTimeoutMs * Int64(settings.callAttempts)
            while Clock.monotonicMillis() < until {
                if let stored = try Idempotency.claim(db, id: id, type: "orders.place", owner: owner) { return try Self.answer(stored) }
                usleep(20_000)
            }
            throw QuadError.unavailable("order '\(id)' is being placed by another worker: retry with the same id for its outcome")
        case .drive:
            guard let outcome = try drive(id) else {
                throw QuadError.unavailable("order '\(id)' is pending: the catalog did not answer yet; it will be confirmed or rejected, retry with the same id for its outcome")
            }
            return try Self.answer(outcome)
        }
    }

    /// A stored reply as a handler's result: its body, or its error thrown.
    static func answer(_ e: Envelope) throws -> JSON {
        if let error = e.quadError { throw error }
        return e.body
    }

    /// The owner of the records of `user`'s orders: the same whether the
    /// user's request or the recovery of another worker writes them.
    static func owner(_ user: String) -> String { Idempotency.owner(user: user, role: nil, caller: nil) }

    /// Stores `reply` as `owner`'s answer to `id` unless one is stored;
    /// returns the one kept (a 409 when the id is someone else's).
    @discardableResult
    func remember(_ id: String, _ reply: Envelope, owner: String) throws -> Envelope {
        try db.transaction {
            if let earlier = try Idempotency.claim(db, id: id, type: reply.type, owner: owner) { return earlier }
            try Idempotency.store(db, id: id, type: reply.type, owner: owner, reply: reply)
            return reply
        }
    }

    /// Takes the lease of an open order (or one with a release to send) whose lease has run out.
    func claim(_ id: String) throws -> Bool {
        let now = Self.now
        return try db.execute("""
            UPDATE orders SET lease_until = $2
            WHERE id = $1 AND lease_until <= $3 AND (status IN ('pending', 'held') OR release_pending = 1)
            """, .text(id), .int(now + settings.leaseMs), .int(now)) == 1
    }

    // MARK: The steps

    /// Runs the saga of order `id` from the step it stands at; the caller
    /// holds its lease. Returns the order's final answer, or nil when the
    /// catalog did not answer (the order stays open for the recovery).
    func drive(_ id: String, abandon: Bool = false) throws -> Envelope? {
        guard var order = try OrderRecord.load(db, id) else { return nil }
        if abandon && order.isOpen { return try giveUp(order) }
        if order.status == "pending" {
            let items: JSON = .array(order.items.map { ["product": .string($0.product), "quantity": .int($0.quantity)] })
            guard let held = try ask("catalog.stock.hold", ["order": .string(id), "items": items], order: order) else { return nil }
            switch held {
            case .failure(let refusal):
                return try reject(order, refusal)
            case .success(let hold):
                switch hold["status"]?.string {
                case "held", "confirmed":
                    // Every line must come back priced: a line the hold did
                    // not price is refused, never sold at 0. What the hold
                    // took goes back first.
                    let unpriced = Self.unpriced(order.items, hold)
                    if !unpriced.isEmpty {
                        guard let released = try ask("catalog.stock.release", ["order": .string(id)], order: order) else { return nil }
                        if case .failure(let refusal) = released, refusal.status != 404 {
                            Log.error(source, "order \(id): release refused: \(refusal)")
                        }
                        let names = unpriced.map { "'\($0)'" }.joined(separator: ", ")
                        return try reject(order, .conflict("the catalog's stock hold for order '\(id)' did not price \(names): the order is refused and nothing is held",
                                                           details: ["unpriced": .array(unpriced.map { .string($0) })]))
                    }
                    order = try recordHeld(order, hold)
                case let status:
                    return try reject(order, .conflict("the stock hold for order '\(id)' has \(status == "expired" ? "expired" : "been released")"))
                }
            }
            if settings.pauseAfterHoldMs > 0 && order.status == "held" {
                Log.info(source, "fault injection: pausing \(settings.pauseAfterHoldMs) ms between hold and confirm of order \(id)")
                usleep(UInt32(min(settings.pauseAfterHoldMs, 60_000) * 1000))
            }
        }
        if order.status == "held" {
            guard let confirmed = try ask("catalog.stock.confirm", ["order": .string(id)], order: order) else { return nil }
            switch confirmed {
            case .failure(let refusal): return try reject(order, refusal)
            case .success: return try confirm(order)
            }
        }
        return try finalAnswer(order)
    }

    /// Calls the catalog. A refusal (400, 404, 409, 410) is the catalog's
    /// answer; no answer, or a failure, postpones the order and returns nil.
    func ask(_ type: String, _ body: JSON, order: OrderRecord) throws -> Result<JSON, QuadError>? {
        var request = Envelope.request(type, body: body)
        request.role = "service"
        request.user = order.user
        do {
            let reply = try call(request, settings.callTimeoutMs, settings.callAttempts)
            guard let error = reply.quadError else { return .success(reply.body) }
            if [400, 404, 409, 410].contains(error.status) { return .failure(error) }
            return try postpone(order.id, "\(type): \(error)")
        } catch {
            return try postpone(order.id, "\(type): \(error)")
        }
    }

    func postpone(_ id: String, _ why: String) throws -> Result<JSON, QuadError>? {
        Log.info(source, "order \(id) stays open: \(why); retrying in \(settings.retryMs) ms")
        try db.execute("UPDATE orders SET lease_until = $2 WHERE id = $1", .text(id), .int(Self.now + settings.retryMs))
        return nil
    }

    /// The products of `items` that the hold did not price: missing from
    /// it, or with no price, or one that is not a finite amount of at least 0.
    static func unpriced(_ items: [OrderItem], _ hold: JSON) -> [String] {
        let fromCatalog = (hold["items"]?.array ?? []).compactMap(OrderItem.init)
        return items.map(\.product).filter { product in
            guard let price = fromCatalog.first(where: { $0.product == product })?.price else { return true }
            return !price.isFinite || price < 0 || price > 1e12
        }
    }

    /// The catalog holds the stock: price the order at the prices it holds
    /// at, publish `orders.placed`. Every line is priced (``unpriced(_:_:)``
    /// was empty).
    func recordHeld(_ order: OrderRecord, _ hold: JSON) throws -> OrderRecord {
        var priced: [OrderItem] = []
        let fromCatalog = (hold["items"]?.array ?? []).compactMap(OrderItem.init)
        for asked in order.items {
            guard var item = fromCatalog.first(where: { $0.product == asked.product }), item.price != nil else {
                throw QuadError.internal("order '\(order.id)': product '\(asked.product)' has no price in the catalog's hold")
            }
            item.quantity = asked.quantity
            let category = item.category ?? "Others"
            item.category = category
            item.feeCents = item.lineCents.map { settings.fees.fee(cents: $0, category: category) }
            priced.append(item)
        }
        let subtotal = priced.reduce(0) { $0 + ($1.lineCents ?? 0) }
        let fee = priced.reduce(0) { $0 + ($1.feeCents ?? 0) }
        let currency = try order.items.first.flatMap { try CatalogCopy.currency(db, $0.product) } ?? "USD"
        return try db.transaction {
            let now = Self.now
            let moved = try db.execute("""
                UPDATE orders SET status = 'held', items = $2, currency = $3, subtotal_cents = $4, fee_cents = $5, total_cents = $6,
                    updated_ms = $7, lease_until = $8
                WHERE id = $1 AND status = 'pending'
                """, .text(order.id), .text(OrderRecord.itemsText(priced)), .text(currency), .int(subtotal), .int(fee), .int(subtotal + fee),
                .int(now), .int(now + settings.leaseMs))
            let current = try OrderRecord.load(db, order.id)!
            if moved == 1 { try Outbox.append(db, type: "orders.placed", body: current.eventBody) }
            return current
        }
    }

    /// The catalog confirmed: the order is bought, the reply stored.
    func confirm(_ order: OrderRecord) throws -> Envelope? {
        try db.transaction {
            let moved = try db.execute("UPDATE orders SET status = 'confirmed', updated_ms = $2 WHERE id = $1 AND status = 'held'",
                                       .text(order.id), .int(Self.now))
            let current = try OrderRecord.load(db, order.id)!
            if moved == 1 {
                try Outbox.append(db, type: "orders.confirmed", body: current.eventBody)
                if current.source == "cart" { try Cart.takeOut(db, user: current.user, items: current.items) }
            }
            return try finalAnswer(current)
        }
    }

    /// The catalog refused: the order is rejected with its reason.
    func reject(_ order: OrderRecord, _ refusal: QuadError) throws -> Envelope? {
        try db.transaction {
            let moved = try db.execute("""
                UPDATE orders SET status = 'rejected', reason = $2, updated_ms = $3 WHERE id = $1 AND status IN ('pending', 'held')
                """, .text(order.id), .text(refusal.message), .int(Self.now))
            let current = try OrderRecord.load(db, order.id)!
            if moved == 1 {
                try Outbox.append(db, type: "orders.rejected", body: [
                    "order": .string(order.id), "user": .string(order.user), "reason": .string(refusal.message), "code": .string(refusal.code),
                ])
                var details = refusal.details.object ?? [:]
                details["order"] = .string(order.id)
                var answer = refusal
                answer.details = .object(details)
                return try remember(order.id, Envelope.request("orders.place", id: order.id).error(answer, src: source), owner: Self.owner(order.user))
            }
            return try finalAnswer(current)
        }
    }

    /// Past the deadline: release whatever the catalog may hold, then reject.
    func giveUp(_ order: OrderRecord) throws -> Envelope? {
        guard let released = try ask("catalog.stock.release", ["order": .string(order.id)], order: order) else { return nil }
        if case .failure(let refusal) = released, refusal.status != 404 {
            Log.error(source, "order \(order.id): release refused: \(refusal)")
        }
        let seconds = settings.deadlineMs / 1000
        return try reject(order, .conflict("order '\(order.id)' could not be placed within \(seconds) s: the catalog did not answer in time; nothing is held"))
    }

    /// The stored answer of a finished order; built from the order if none is
    /// stored (an order finished by a worker that died before storing it).
    func finalAnswer(_ order: OrderRecord) throws -> Envelope? {
        let owner = Self.owner(order.user)
        if let stored = try Idempotency.claim(db, id: order.id, type: "orders.place", owner: owner) { return stored }
        let request = Envelope.request("orders.place", id: order.id)
        switch order.status {
        case "confirmed", "cancelled":
            return try remember(order.id, request.reply(order.json, src: source), owner: owner)
        case "rejected":
            return try remember(order.id, request.error(.conflict(order.reason ?? "rejected", details: ["order": .string(order.id)]), src: source), owner: owner)
        default:
            return nil
        }
    }

    // MARK: orders.cancel

    /// `orders.cancel`: a confirmed order of the caller becomes `cancelled`
    /// and its stock goes back to the catalog. The cancellation commits
    /// first, with a release to send; the release is sent at once and, if the
    /// catalog does not answer, again by the recovery until it does.
    func cancel(_ req: Request) throws -> JSON {
        let user = try req.requireUser()
        let owner = Self.owner(user)
        let type = req.envelope.type
        if let stored = try Idempotency.claim(db, id: req.id, type: type, owner: owner) { return try Self.answer(stored) }
        let reply: Envelope
        let id: String
        do {
            id = try Fields(req, allowed: ["order"]).string("order")
            reply = try db.transaction {
                if let stored = try Idempotency.claim(db, id: req.id, type: type, owner: owner) { return stored }
                guard let order = try OrderRecord.load(db, id), order.user == user else { throw QuadError.notFound("you have no order '\(id)'") }
                switch order.status {
                case "confirmed":
                    let now = Self.now
                    try db.execute("""
                        UPDATE orders SET status = 'cancelled', release_pending = 1, updated_ms = $2, lease_until = $3
                        WHERE id = $1 AND status = 'confirmed'
                        """, .text(id), .int(now), .int(now + settings.leaseMs))
                    try Outbox.append(db, type: "orders.cancelled", body: ["order": .string(id), "user": .string(user)])
                    let answer = req.envelope.reply(try OrderRecord.load(db, id)!.json, src: source)
                    try Idempotency.store(db, id: req.id, type: type, owner: owner, reply: answer)
                    return answer
                case "cancelled":
                    throw QuadError.conflict("order '\(id)' is already cancelled")
                case "rejected":
                    throw QuadError.conflict("order '\(id)' was rejected (\(order.reason ?? "no reason")): there is nothing to cancel")
                default:
                    throw QuadError.conflict("order '\(id)' is still being placed: cancel it once it is confirmed")
                }
            }
        } catch let error as QuadError where error.status < 500 {
            throw try remember(req.id, req.envelope.error(error, src: source), owner: owner).quadError ?? error
        }
        if reply.kind == .reply { try release(id) }
        return try Self.answer(reply)
    }

    /// Sends the release of a cancelled order's stock; clears the flag once
    /// the catalog acknowledged it (a 404 means it holds nothing for it).
    @discardableResult
    func release(_ id: String) throws -> Bool {
        guard let order = try OrderRecord.load(db, id) else { return true }
        guard let answer = try ask("catalog.stock.release", ["order": .string(id)], order: order) else { return false }
        if case .failure(let refusal) = answer, refusal.status != 404 {
            Log.error(source, "order \(id): release refused: \(refusal)")
        }
        try db.execute("UPDATE orders SET release_pending = 0, lease_until = 0 WHERE id = $1", .text(id))
        return true
    }

    // MARK: Recovery

    /// Resumes open orders and unsent releases whose lease ran out: those
    /// of a worker that crashed, or that the catalog did not answer. It runs
    /// on the worker's loop, so it stops at the first order the catalog
    /// leaves unanswered: one slow call per round, not one per order.
    func recover(batch: Int64 = 10) throws {
        let now = Self.now
        let open = try db.query("""
            SELECT id, created_ms FROM orders WHERE status IN ('pending', 'held') AND lease_until <= $1 ORDER BY created_ms LIMIT $2
            """, .int(now), .int(batch))
        for row in open {
            let id = row.string("id")
            guard try claim(id) else { continue }
            Log.info(source, "recovering order \(id)")
            guard try drive(id, abandon: now - row.int("created_ms") > settings.deadlineMs) != nil else { return }
        }
        let releases = try db.query("SELECT id FROM orders WHERE release_pending = 1 AND lease_until <= $1 LIMIT $2", .int(now), .int(batch))
        for row in releases where try claim(row.string("id")) {
            guard try release(row.string("id")) else { return }
        }
    }
}

/// The body of `orders.place`, checked.
struct PlacePlan {
    static let sources = ["cart", "buy_now"]
    static let modes = ["buy", "rent"]
    static let screens = ["home", "favorites", "search", "cart"]
    /// Furthest return date of a rental (`max_rent_days`).
    static let maxRentDays = 365

    let source: String
    let product: String?
    let quantity: Int64
    let mode: String
    let returnDate: String?
    let screen: String

    init(_ req: Request, today: Date = Date()) throws(QuadError) {
        let f = try Fields(req, allowed: ["source", "product", "quantity", "mode", "return_date", "screen"])
        source = try f.choice("source", PlacePlan.sources, default: nil)
        if source == "buy_now" {
            product = try f.string("product")
            quantity = try f.int("quantity", default: 1, in: 1...Cart.maxQuantity, limit: "max_quantity")
        } else {
            if f.has("product") || f.has("quantity") {
                throw .badRequest("body.product and body.quantity are for source 'buy_now': an order from the cart takes the cart's lines")
            }
            product = nil
            quantity = 0
        }
        mode = try f.choice("mode", PlacePlan.modes, default: "buy")
        screen = try f.choice("screen", PlacePlan.screens, default: source == "cart" ? "cart" : "home")
        if mode == "rent" {
            guard let date = try f.optionalString("return_date", max: 10) else {
                throw .badRequest("body.return_date is required to rent: an ISO date (YYYY-MM-DD) after today")
            }
            try PlacePlan.checkReturnDate(date, today: today)
            returnDate = date
        } else {
            if f.has("return_date") { throw .badRequest("body.return_date is only for mode 'rent'") }
            returnDate = nil
        }
    }

    static func dayFormatter() -> DateFormatter {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f
    }

    /// A return date is a real calendar day after today (UTC), at most `maxRentDays` ahead.
    static func checkReturnDate(_ date: String, today: Date) throws(QuadError) {
        let days = dayFormatter()
        guard date.utf8.count == 10, let day = days.date(from: date), days.string(from: day) == date else {
            throw .badRequest("body.return_date must be an ISO date YYYY-MM-DD, got '\(date)'")
        }
        let first = days.string(from: today.addingTimeInterval(86_400))
        let last = days.string(from: today.addingTimeInterval(Double(maxRentDays) * 86_400))
        guard date >= first else { throw .badRequest("body.return_date must be after today: \(first) or later, got \(date)") }
        guard date <= last else { throw .badRequest("body.return_date must be at most \(maxRentDays) days ahead (max_rent_days): \(last) or earlier, got \(date)") }
    }
}
