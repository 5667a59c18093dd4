import QuadCatalogCopy
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The orders service: a cart per user, and orders to buy or rent (rentals
/// priced by the day and returned: ``Rentals``), placed
/// from the cart or as Buy Now of one product, with the catalog holding and
/// confirming the stock in one call (``OrderSaga``). An order records the screen
/// it was placed from, the buyer's semester (from accounts' events) and the
/// transaction fee, a percentage by category (``FeeSchedule``).
public enum Orders: ServiceDomain {
    public static let name = "orders"
    public static let summary = "carts, and orders to buy or rent, held and confirmed with the catalog"

    /// Largest page of `orders.mine` (`max_page_size`).
    public static let maxPageSize = Contract.Orders.maxPageSize

    public static let options: [(String, String, String?)] = [
        ("fees", "transaction fee in percent by category", FeeSchedule.defaultText),
        ("catalog-timeout-ms", "how long each of two attempts of a call to the catalog waits", "1000"),
        ("saga-lease-ms", "how long a worker owns an order it is placing before the recovery may take it over", "10000"),
        ("recover-every-ms", "how often open orders and unsent stock releases are resumed", "1000"),
        ("place-deadline-seconds", "an order still not placed after this long is released and rejected instead of resumed (keep it under catalog's --hold-ttl-seconds)", "60"),
        ("max-rent-days", "longest rental in days (max_rent_days): orders.place refuses more", String(Contract.Orders.maxRentDays)),
        ("pause-after-hold-ms", "fault injection for tests: wait this long (serving other requests) between a stock hold and its confirmation", "0"),
    ]

    public static let migrations: [Migration] = [
        Migration(1, OrderRecord.migration + Cart.migration + CatalogCopy.migration + Buyers.migration),
        Migration(2, OrderRecord.rentalMigration),
        Migration(3, OrderRecord.versionMigration),
        Migration(4, Cart.versionMigration),
    ]

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        // Calls to the catalog go out on the worker's loop and come back to
        // it: the worker serves other requests while the catalog thinks.
        let saga = try OrderSaga(db: db, settings: settings(options), source: worker.handlers.instance,
                                 after: { [unowned worker] ms, action in worker.after(ms, action) },
                                 call: { [unowned worker] request, timeoutMs, attempts, done in
                                     worker.send(request, timeoutMs: timeoutMs, attempts: attempts, done)
                                 })
        register(worker.handlers, db: db, saga: saga)
        try worker.subscribe(to: ["catalog"], wants: { CatalogCopy.events.contains($0.type) }) { event in
            try CatalogCopy.apply(db, event)
        }
        try worker.subscribe(to: ["accounts"], wants: { Buyers.events.contains($0.type) }) { event in
            try Buyers.apply(db, event)
        }
        worker.every(Int64(options["recover-every-ms"].flatMap(Int64.init) ?? 1000)) { try saga.recover() }
    }

    static func settings(_ options: [String: String]) throws -> OrderSaga.Settings {
        func number(_ name: String, _ range: ClosedRange<Int64>) throws -> Int64 {
            guard let text = options[name], let n = Int64(text), range.contains(n) else {
                throw QuadError.badRequest("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(options[name] ?? "")'")
            }
            return n
        }
        var s = OrderSaga.Settings(fees: try FeeSchedule(parsing: options["fees"] ?? FeeSchedule.defaultText))
        s.callTimeoutMs = try number("catalog-timeout-ms", 50...60_000)
        s.leaseMs = try number("saga-lease-ms", 100...600_000)
        s.deadlineMs = try number("place-deadline-seconds", 1...86_400) * 1000
        s.pauseAfterHoldMs = try number("pause-after-hold-ms", 0...60_000)
        s.maxRentDays = try number("max-rent-days", 1...Contract.Orders.maxRentDaysCap)
        _ = try number("recover-every-ms", 10...600_000)
        return s
    }

    /// Registers the handlers; split from ``install`` so tests can drive
    /// them without a broker.
    static func register(_ h: Handlers, db: Database, saga: OrderSaga) {
        typealias C = Contract.Orders
        Cart.register(h, db: db, fees: saga.settings.fees)
        // Not mutations: the saga must not hold the write transaction across
        // calls to the catalog. Each keeps its idempotency record itself.
        // A place answers once the catalog has (``OrderSaga``).
        h.deferred(C.place) { req, body, answer in try saga.place(req, body, answer) }
        h.query(C.cancel) { req, body in try saga.cancel(req, body) }
        Rentals.register(h, db: db, saga: saga)

        h.query(C.get) { req, body in
            let user = try req.requireUser()
            let id = body.order
            guard let order = try OrderRecord.load(db, id), order.user == user || req.role == "admin" else {
                throw QuadError.notFound("you have no order '\(id)'")
            }
            return order.reply
        }

        h.query(C.mine) { req, body in
            let user = try req.requireUser()
            let (offset, limit) = (body.offset, body.limit)
            var filter = "user_id = $1"
            var params: [SQLValue] = [.text(user)]
            if let status = body.status {
                params.append(.text(status.rawValue))
                filter += " AND status = $2"
            }
            let total = try db.queryOne("SELECT COUNT(*) AS n FROM orders WHERE \(filter)", params)?.int("n") ?? 0
            params += [.int(limit), .int(offset)]
            let rows = try db.query("""
                SELECT * FROM orders WHERE \(filter) ORDER BY created_ms DESC, id DESC LIMIT $\(params.count - 1) OFFSET $\(params.count)
                """, params)
            return C.Mine.Reply(orders: try rows.map { try OrderRecord($0).reply }, total: total, offset: offset, limit: limit)
        }
    }
}
