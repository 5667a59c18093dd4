import Foundation
import QuadCatalogCopy
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The saga of an order with the catalog, which owns the stock, as a state
/// machine on the worker's loop: each step sends its call to the catalog
/// and returns; the catalog's answer (or the call's timeout) runs the next
/// step, and the worker serves other requests and heartbeats in between.
///
/// 1. record the order `pending`, in its own committed transaction, before
///    asking the catalog anything;
/// 2. `catalog.stock.hold` under the order id (all items or none), with
///    `confirm`: the catalog takes the units and confirms the hold in one
///    transaction. The order becomes `held`, priced at the catalog's prices,
///    and `orders.placed` is published;
/// 3. then `confirmed`: the bought units leave the cart, `orders.confirmed`
///    is published and the reply is stored as the answer to the order id,
///    in the same transaction. An order found `held` (a hold made in two
///    steps, under the fault injection's pause or before a crash) asks
///    `catalog.stock.confirm` first.
///
/// A refusal of the catalog (409 not enough stock, 404 unknown product, a
/// hold that expired) rejects the order with the catalog's reason and
/// publishes `orders.rejected`, the answer stored in the same transaction.
/// Each catalog call is idempotent by order id, so any step may run twice:
/// after a crash the recovery timer re-sends the hold (which answers the
/// state the hold is in) and goes on. An order that stays open past the
/// deadline is released and rejected instead.
///
/// The client of `orders.place` waits for the outcome while it comes within
/// the request's deadline; past it (a catalog that does not answer), it is
/// answered 503 "pending, retry with the same id" and the saga goes on. A
/// retry of the id while its order is in flight never starts a second saga:
/// on the worker that drives it, it waits for the same outcome; on another
/// worker, it watches the store for the stored answer (or takes the order
/// over once the first worker's lease runs out).
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
        /// Fault injection for tests: wait (on the loop's timers) between the hold and the confirmation.
        var pauseAfterHoldMs: Int64 = 0
        /// Each attempt of a call to the catalog (Lazy Pirate, same id).
        var callTimeoutMs: Int64 = 1_000
        var callAttempts = 2
        /// How often a retry on a worker that does not drive its order looks for the outcome.
        var watchEveryMs: Int64 = 50
        /// Longest rental in days (`max_rent_days`).
        var maxRentDays: Int64 = Contract.Orders.maxRentDays
    }

    typealias Done = (Result<Envelope, QuadError>) -> Void
    /// Sends a request to another service and returns at once; the
    /// continuation runs on the loop (the worker's ``Worker/send(_:timeoutMs:attempts:_:)``).
    typealias Call = (Envelope, Int64, Int, @escaping Done) -> Void
    /// Runs an action on the loop after some milliseconds (``Worker/after(_:_:)``).
    typealias Schedule = (Int64, @escaping () -> Void) -> Void

    let db: Database
    let settings: Settings
    let call: Call
    let after: Schedule
    let source: String
    /// The orders this worker is driving now, with the answers that wait
    /// for their outcome: the request that started each, and its retries.
    var driving: [String: [Answer]] = [:]
    /// Cancelled orders whose release is on its way to the catalog.
    var releasing: Set<String> = []
    /// Whether the catalog takes `confirm` in `catalog.stock.hold`. A
    /// catalog of an older build refuses the field (400, "body.confirm is
    /// not a field"): this worker then holds and confirms in two calls, as
    /// before, for as long as it runs (a rolling upgrade that reached
    /// orders before catalog places its orders all the same).
    var catalogConfirmsInHold = true

    init(db: Database, settings: Settings, source: String, after: @escaping Schedule, call: @escaping Call) {
        self.db = db
        self.settings = settings
        self.source = source
        self.after = after
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

    /// `orders.place`: the request id is the order id. Answers later: it
    /// must not hold the store's write lock, nor the loop, across calls to
    /// the catalog; it keeps the idempotency record itself.
    func place(_ req: Request, _ body: Contract.Orders.Place, _ answer: Answer) throws {
        let user = try req.requireUser()
        let id = req.id
        let owner = Self.owner(user)
        let start: Start
        do {
            let plan = try PlacePlan(body, maxRentDays: settings.maxRentDays, today: Date(timeIntervalSince1970: Double(Self.now) / 1000))
            start = try db.transaction { () throws -> Start in
                // The record is claimed once: someone else's id, or an id of
                // another type, is a 409 here, before anything of its order is read.
                if let stored = try Idempotency.claim(db, id: id, type: "orders.place", owner: owner) { return .answered(stored) }
                if let existing = try OrderRecord.load(db, id) {
                    guard existing.user == user else { return .foreign }
                    // Driven here already: the retry waits for the same outcome.
                    if driving[id] != nil { return .busy }
                    return try claim(id) ? .drive : .busy
                }
                let items = plan.source == "cart" ? try Cart.lines(db, user: user) : [OrderItem(product: plan.product!, quantity: plan.quantity)]
                guard !items.isEmpty else { throw QuadError.conflict("the cart is empty: add products with orders.cart.add first") }
                let now = Self.now
                try db.execute("""
                    INSERT INTO orders (id, user_id, status, source, mode, screen, return_date, semester, items, created_ms, updated_ms, lease_until, days)
                    VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $9, $10, $11)
                    """, .text(id), .text(user), .text(plan.source), .text(plan.mode), .text(plan.screen), .of(plan.returnDate),
                    .text(try Buyers.semester(db, user).text), .text(OrderRecord.itemsText(items)), .int(now), .int(now + settings.leaseMs), .of(plan.days))
                return .drive
            }
        } catch let error as QuadError where error.status < 500 {
            // A refusal is the answer to this id, as for any mutation.
            throw try remember(id, Envelope.request("orders.place", id: id).error(error, src: source), owner: owner).quadError ?? error
        }
        switch start {
        case .answered(let stored):
            answer.send(Reply(stored))
        case .foreign:
            throw QuadError.conflict("the request id '\(id)' already names another user's order: send a new id")
        case .busy where driving[id] != nil:
            wait(for: id, answer)
        case .busy:
            // Another worker is placing it (a retry that overtook the first
            // attempt): watch for its outcome rather than answer nothing.
            watch(id, owner: owner, answer, until: Clock.monotonicMillis() + waitMs(req.envelope))
        case .drive:
            wait(for: id, answer)
            drive(id)
        }
    }

    /// How long the client of `request` may wait for the outcome: a little
    /// less than its deadline, so that our 503 reaches it before it gives up,
    /// and never longer than the saga itself may take (`place_deadline_seconds`):
    /// each waiting answer is kept on the loop until then.
    func waitMs(_ request: Envelope) -> Int64 {
        guard let deadline = request.deadline else { return settings.callTimeoutMs * Int64(settings.callAttempts) + 500 }
        return min(settings.deadlineMs, max(50, deadline - min(500, deadline / 5)))
    }

    static func pending(_ id: String) -> QuadError {
        .unavailable("order '\(id)' is pending: the catalog did not answer yet; it will be confirmed or rejected, retry with the same id for its outcome")
    }

    /// `answer` waits for the outcome of order `id`, which this worker
    /// drives, at most as long as its request's deadline allows.
    func wait(for id: String, _ answer: Answer) {
        driving[id, default: []].append(answer)
        after(waitMs(answer.request)) {
            guard !answer.isSent else { return }
            self.driving[id]?.removeAll { $0 === answer }
            answer.fail(Self.pending(id))
        }
    }

    /// Looks in the store for the outcome of order `id`, which another
    /// worker drives, until `until`; takes the order over if that worker's
    /// lease runs out (it died).
    func watch(_ id: String, owner: String, _ answer: Answer, until: Int64) {
        do {
            if let stored = try Idempotency.claim(db, id: id, type: "orders.place", owner: owner) { return answer.send(Reply(stored)) }
            if driving[id] != nil { return wait(for: id, answer) }
            if try claim(id) {
                wait(for: id, answer)
                return drive(id)
            }
        } catch {
            return answer.fail(error)
        }
        guard Clock.monotonicMillis() < until else {
            return answer.fail(QuadError.unavailable("order '\(id)' is being placed by another worker: retry with the same id for its outcome"))
        }
        after(settings.watchEveryMs) { self.watch(id, owner: owner, answer, until: until) }
    }

    /// The order's saga stopped: with its final answer, or nil when the
    /// catalog did not answer (the order stays open for the recovery).
    /// Every answer waiting for it gets the same.
    func finish(_ id: String, _ outcome: Envelope?) {
        for answer in driving.removeValue(forKey: id) ?? [] {
            if let outcome { answer.send(Reply(outcome)) } else { answer.fail(Self.pending(id)) }
        }
    }

    /// A step failed in the store: the order stays open (its lease runs out
    /// and the recovery resumes it); who waits gets the failure.
    func fail(_ id: String, _ error: Error) {
        Log.error(source, "order \(id): \(error)")
        for answer in driving.removeValue(forKey: id) ?? [] { answer.fail(error) }
    }

    /// Runs `step` and turns what it throws into the order's failure.
    func guarded(_ id: String, _ step: () throws -> Void) {
        do { try step() } catch { fail(id, error) }
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
    /// holds its lease. Each step ends with a call to the catalog, whose
    /// answer runs the next; ``finish(_:_:)`` ends it.
    func drive(_ id: String, abandon: Bool = false) {
        if driving[id] == nil { driving[id] = [] }
        guarded(id) {
            guard let order = try OrderRecord.load(db, id) else { return finish(id, nil) }
            if abandon && order.isOpen { return giveUp(order) }
            switch order.status {
            case .pending: hold(order)
            case .held: confirm(order)
            default: finish(id, try finalAnswer(order))
            }
        }
    }

    func hold(_ order: OrderRecord) {
        let id = order.id
        let items: JSON = .array(order.items.map { ["product": .string($0.product), "quantity": .int($0.quantity)] })
        // The mode lets the catalog refuse a listing not traded so (a rent-only one bought) and hold a rental at its rent rate.
        // One call when nothing waits between hold and confirmation: the
        // catalog takes the units and confirms in one transaction. Only the
        // fault injection's pause needs the two steps apart.
        var body: [String: JSON] = ["order": .string(id), "items": items, "mode": .string(order.mode)]
        let oneCall = settings.pauseAfterHoldMs == 0 && catalogConfirmsInHold
        if oneCall { body["confirm"] = .bool(true) }
        ask("catalog.stock.hold", .object(body), order: order) { [self] held in
            guard let held else { return finish(id, nil) }
            guarded(id) {
                switch held {
                case .failure(let refusal) where oneCall && refusal.status == 400 && refusal.message.contains("body.confirm is not a field"):
                    Log.info(source, "the catalog does not take confirm in catalog.stock.hold (an older build): orders are held and confirmed in two calls")
                    catalogConfirmsInHold = false
                    hold(order)
                case .failure(let refusal):
                    finish(id, try reject(order, refusal))
                case .success(let hold):
                    let status = Contract.Catalog.Stock.Hold.Status(rawValue: hold["status"]?.string ?? "")
                    switch status {
                    case .held?, .confirmed?:
                        // Every line must come back priced: a line the hold did
                        // not price is refused, never sold at 0. What the hold
                        // took goes back first.
                        let unpriced = Self.unpriced(order.items, hold)
                        guard unpriced.isEmpty else { return refuseUnpriced(order, unpriced) }
                        let held = try recordHeld(order, hold)
                        guard held.status == .held else { return finish(id, try finalAnswer(held)) }
                        if status == .confirmed { return finish(id, try recordConfirmed(held)) }
                        if settings.pauseAfterHoldMs > 0 {
                            Log.info(source, "fault injection: pausing \(settings.pauseAfterHoldMs) ms between hold and confirm of order \(id)")
                            after(settings.pauseAfterHoldMs) { self.confirm(held) }
                        } else {
                            confirm(held)
                        }
                    case .released?, .expired?, nil:
                        finish(id, try reject(order, .conflict("the stock hold for order '\(id)' has \(status == .expired ? "expired" : "been released")")))
                    }
                }
            }
        }
    }

    func refuseUnpriced(_ order: OrderRecord, _ unpriced: [String]) {
        ask("catalog.stock.release", ["order": .string(order.id)], order: order) { [self] released in
            guard let released else { return finish(order.id, nil) }
            if case .failure(let refusal) = released, refusal.status != 404 {
                Log.error(source, "order \(order.id): release refused: \(refusal)")
            }
            let names = unpriced.map { "'\($0)'" }.joined(separator: ", ")
            guarded(order.id) {
                finish(order.id, try reject(order, .conflict("the catalog's stock hold for order '\(order.id)' did not price \(names): the order is refused and nothing is held",
                                                             details: ["unpriced": .array(unpriced.map { .string($0) })])))
            }
        }
    }

    func confirm(_ order: OrderRecord) {
        ask("catalog.stock.confirm", ["order": .string(order.id)], order: order) { [self] confirmed in
            guard let confirmed else { return finish(order.id, nil) }
            guarded(order.id) {
                switch confirmed {
                case .failure(let refusal): finish(order.id, try reject(order, refusal))
                case .success: finish(order.id, try recordConfirmed(order))
                }
            }
        }
    }

    /// Calls the catalog; `then` gets its answer on the loop. A refusal
    /// (400, 404, 409, 410) is the catalog's answer; no answer, or a
    /// failure, postpones the order and gives nil.
    func ask(_ type: String, _ body: JSON, order: OrderRecord, _ then: @escaping (Result<JSON, QuadError>?) -> Void) {
        var request = Envelope.request(type, body: body)
        request.role = "service"
        request.user = order.user
        call(request, settings.callTimeoutMs, settings.callAttempts) { [self] result in
            switch result {
            case .success(let reply):
                guard let error = reply.quadError else { return then(.success(reply.body)) }
                if [400, 404, 409, 410].contains(error.status) { return then(.failure(error)) }
                postpone(order.id, "\(type): \(error)")
            case .failure(let error):
                postpone(order.id, "\(type): \(error)")
            }
            then(nil)
        }
    }

    func postpone(_ id: String, _ why: String) {
        Log.info(source, "order \(id) stays open: \(why); retrying in \(settings.retryMs) ms")
        do {
            try db.execute("UPDATE orders SET lease_until = $2 WHERE id = $1", .text(id), .int(Self.now + settings.retryMs))
        } catch {
            // The lease runs out by itself; the recovery comes a little later.
            Log.error(source, "order \(id): lease not shortened: \(error)")
        }
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
            if order.mode == "rent", let price = item.price {
                // A rental is priced by the day: the hold's rent rate where
                // it gives one, else the demo catalog's (price / 30).
                let rate = item.rentRate ?? Contract.Catalog.seedRentRate(price: price)
                item.rentRate = rate
                item.price = Cents.amount(Cents.of(rate) * (order.days ?? 1))
            }
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
            var current = try OrderRecord.load(db, order.id)!
            if moved == 1 { current.version = try OrderRecord.publish(db, order.id, type: Contract.Orders.placed.type, body: current.event.json) }
            return current
        }
    }

    /// The catalog confirmed: the order is bought, the reply stored.
    func recordConfirmed(_ order: OrderRecord) throws -> Envelope? {
        try db.transaction {
            let moved = try db.execute("UPDATE orders SET status = 'confirmed', updated_ms = $2 WHERE id = $1 AND status = 'held'",
                                       .text(order.id), .int(Self.now))
            var current = try OrderRecord.load(db, order.id)!
            if moved == 1 {
                current.version = try OrderRecord.publish(db, order.id, type: Contract.Orders.confirmed.type, body: current.event.json)
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
            if moved == 1 {
                try OrderRecord.publish(db, order.id, type: Contract.Orders.rejected.type,
                                  body: Contract.Orders.Rejected(order: order.id, user: order.user, reason: refusal.message, code: refusal.code.wire).json)
                var details = refusal.details.object ?? [:]
                details["order"] = .string(order.id)
                var answer = refusal
                answer.details = .object(details)
                return try remember(order.id, Envelope.request("orders.place", id: order.id).error(answer, src: source), owner: Self.owner(order.user))
            }
            return try finalAnswer(try OrderRecord.load(db, order.id)!)
        }
    }

    /// Past the deadline: release whatever the catalog may hold, then reject.
    func giveUp(_ order: OrderRecord) {
        ask("catalog.stock.release", ["order": .string(order.id)], order: order) { [self] released in
            guard let released else { return finish(order.id, nil) }
            if case .failure(let refusal) = released, refusal.status != 404 {
                Log.error(source, "order \(order.id): release refused: \(refusal)")
            }
            let seconds = settings.deadlineMs / 1000
            guarded(order.id) {
                finish(order.id, try reject(order, .conflict("order '\(order.id)' could not be placed within \(seconds) s: the catalog did not answer in time; nothing is held")))
            }
        }
    }

    /// The stored answer of a finished order; built from the order if none is
    /// stored (an order finished by a worker that died before storing it).
    /// ``remember(_:_:owner:)`` claims the record once: the answer stored
    /// first wins, this one is built only for an order that ended without it.
    func finalAnswer(_ order: OrderRecord) throws -> Envelope? {
        let owner = Self.owner(order.user)
        let request = Envelope.request("orders.place", id: order.id)
        switch order.status {
        case .confirmed, .cancelled:
            return try remember(order.id, request.reply(order.reply.json, src: source), owner: owner)
        case .rejected:
            return try remember(order.id, request.error(.conflict(order.reason ?? "rejected", details: ["order": .string(order.id)]), src: source), owner: owner)
        default:
            return nil
        }
    }

    // MARK: orders.cancel

    /// `orders.cancel`: a confirmed order of the caller becomes `cancelled`
    /// and its stock goes back to the catalog. The cancellation commits
    /// first, with a release to send, and is the answer; the release is sent
    /// at once, without waiting for it, and, if the catalog does not answer,
    /// again by the recovery until it does.
    func cancel(_ req: Request, _ body: Contract.Orders.OrderRequest) throws -> Contract.Orders.Order {
        let user = try req.requireUser()
        let owner = Self.owner(user)
        let type = req.envelope.type
        if let stored = try Idempotency.claim(db, id: req.id, type: type, owner: owner) { return try Self.answer(stored) }
        let reply: Envelope
        let id: String
        do {
            id = body.order
            reply = try db.transaction {
                if let stored = try Idempotency.claim(db, id: req.id, type: type, owner: owner) { return stored }
                guard let order = try OrderRecord.load(db, id), order.user == user else { throw QuadError.notFound("you have no order '\(id)'") }
                switch order.status {
                case .confirmed:
                    let now = Self.now
                    try db.execute("""
                        UPDATE orders SET status = 'cancelled', release_pending = 1, updated_ms = $2, lease_until = $3
                        WHERE id = $1 AND status = 'confirmed'
                        """, .text(id), .int(now), .int(now + settings.leaseMs))
                    try OrderRecord.publish(db, id, type: Contract.Orders.cancelled.type, body: Contract.Orders.Cancelled(order: id, user: user).json)
                    let answer = req.envelope.reply(try OrderRecord.load(db, id)!.reply.json, src: source)
                    try Idempotency.store(db, id: req.id, type: type, owner: owner, reply: answer)
                    return answer
                case .cancelled:
                    throw QuadError.conflict("order '\(id)' is already cancelled")
                case .returned:
                    throw QuadError.conflict("order '\(id)' was rented and returned: there is nothing to cancel")
                case .rejected:
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

    /// A stored reply as a handler's result: its order, or its error thrown.
    static func answer(_ e: Envelope) throws -> Contract.Orders.Order {
        if let error = e.quadError { throw error }
        return try Contract.Orders.Order(json: e.body)
    }

    /// Sends the release of a cancelled order's stock; clears the flag once
    /// the catalog acknowledged it (a 404 means it holds nothing for it).
    func release(_ id: String) throws {
        guard let order = try OrderRecord.load(db, id) else { return }
        releasing.insert(id)
        ask("catalog.stock.release", ["order": .string(id)], order: order) { [self] answer in
            releasing.remove(id)
            guard let answer else { return }
            if case .failure(let refusal) = answer, refusal.status != 404 {
                Log.error(source, "order \(id): release refused: \(refusal)")
            }
            do {
                try db.execute("UPDATE orders SET release_pending = 0, lease_until = 0 WHERE id = $1", .text(id))
            } catch {
                Log.error(source, "order \(id): release not recorded (it is sent again): \(error)")
            }
        }
    }

    // MARK: Recovery

    /// Resumes open orders and unsent releases whose lease ran out: those
    /// of a worker that crashed, or that the catalog did not answer. It only
    /// sends calls, so a catalog that does not answer costs the loop
    /// nothing; `batch` bounds how many it starts per round. Orders this
    /// worker drives already (a fault injection's pause) are left alone.
    func recover(batch: Int64 = 10) throws {
        let now = Self.now
        let open = try db.query("""
            SELECT id, created_ms FROM orders WHERE status IN ('pending', 'held') AND lease_until <= $1 ORDER BY created_ms LIMIT $2
            """, .int(now), .int(batch))
        for row in open {
            let id = row.string("id")
            guard driving[id] == nil, try claim(id) else { continue }
            Log.info(source, "recovering order \(id)")
            drive(id, abandon: now - row.int("created_ms") > settings.deadlineMs)
        }
        let releases = try db.query("SELECT id FROM orders WHERE release_pending = 1 AND lease_until <= $1 LIMIT $2", .int(now), .int(batch))
        for row in releases where !releasing.contains(row.string("id")) {
            if try claim(row.string("id")) { try release(row.string("id")) }
        }
    }
}

/// The body of `orders.place` with what its shape cannot check: which
/// fields go with the source and the mode (the contract says so too, in
/// ``Contract/Orders/place``'s shape) and that a rental is for 1 to
/// `max_rent_days` days: given as days, or as a return date (a real day),
/// it is kept as both.
struct PlacePlan {
    let source: String
    let product: String?
    let quantity: Int64
    let mode: String
    let returnDate: String?
    let days: Int64?
    let screen: String

    init(_ body: Contract.Orders.Place, maxRentDays: Int64 = Contract.Orders.maxRentDays, today: Date = Date()) throws(QuadError) {
        source = body.source
        if source == "buy_now" {
            guard let product = body.product else { throw .badRequest("body.product is required for source 'buy_now'") }
            self.product = product
            quantity = body.quantity
        } else {
            // The shape refuses a quantity from the cart; its default (1) cannot be told from an absent one here.
            if body.product != nil {
                throw .badRequest("body.product and body.quantity are for source 'buy_now': an order from the cart takes the cart's lines")
            }
            product = nil
            quantity = 0
        }
        mode = body.mode
        screen = body.screen ?? (source == "cart" ? "cart" : "home")
        if mode == "rent" {
            switch (body.days, body.returnDate) {
            case (let days?, nil):
                guard days >= 1 else { throw .badRequest("body.days must be at least 1: a rental lasts 1 to \(maxRentDays) days (max_rent_days), got \(days)") }
                guard days <= maxRentDays else {
                    throw .badRequest("body.days must be at most \(maxRentDays) (max_rent_days), got \(days)")
                }
                self.days = days
                returnDate = PlacePlan.dayFormatter().string(from: today.addingTimeInterval(Double(days) * 86_400))
            case (nil, let date?):
                try PlacePlan.checkReturnDate(date, maxRentDays: maxRentDays, today: today)
                returnDate = date
                days = Rentals.day(of: date).map { $0 - Rentals.day(ms: Int64(today.timeIntervalSince1970 * 1000)) }
            case (nil, nil):
                throw .badRequest("body.days or body.return_date is required to rent: days from 1 to \(maxRentDays) (max_rent_days), or an ISO date (YYYY-MM-DD) after today")
            case (_?, _?):
                throw .badRequest("body.days and body.return_date may not both be given: send one")
            }
        } else {
            if body.returnDate != nil { throw .badRequest("body.return_date is only for mode 'rent'") }
            if body.days != nil { throw .badRequest("body.days is only for mode 'rent'") }
            returnDate = nil
            days = nil
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
    static func checkReturnDate(_ date: String, maxRentDays: Int64, today: Date) throws(QuadError) {
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
