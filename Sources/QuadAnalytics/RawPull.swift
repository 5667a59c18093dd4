import QuadMessaging
import QuadRuntime
import QuadStore
import QuadWire

/// Pulls telemetry's raw events with `telemetry.raw.since`, a page at a
/// time, after the cursor kept in this store. Each page is applied in one
/// transaction with the cursor, events keyed by id, so a restart, a second
/// worker or a repeated page never applies an event twice, and a partition
/// only delays: the next pull starts where the store says.
///
/// Raw events never travel on the event bus (``Telemetry``'s
/// `telemetry.batch` is a summary); a batch event only wakes the puller.
/// Requests are asynchronous, sent as the worker's other calls to services
/// are (``Worker/send(_:timeoutMs:attempts:_:)``: the one requester's rules),
/// due from a timer of the worker's loop, so the loop keeps serving while
/// telemetry is slow or gone.
public final class RawPull {
    let db: Database
    let clock: CampusClock
    let ask: EventFeed.Ask
    let name: String
    /// The pull waiting for its answer (its id).
    var inFlight: String?
    var nextPull: Int64 = 0
    /// Set when telemetry said it stored more, or a page came back full.
    public var wake = true
    public private(set) var applied: Int64 = 0
    public private(set) var lastError: String?

    public static let page: Int64 = 1000
    static let timeoutMs: Int64 = 3000
    static let idlePullMs: Int64 = 1000

    public init(db: Database, name: String, clock: CampusClock, ask: @escaping EventFeed.Ask) {
        self.db = db
        self.clock = clock
        self.name = name
        self.ask = ask
    }

    public func cursor() throws -> Int64 {
        try db.queryOne("SELECT seq FROM raw_cursor WHERE one = 1")?.int("seq") ?? 0
    }

    /// Sends the next request when one is due (none is waiting, and
    /// telemetry said it stored more, or the last page came back full, or
    /// the idle wait is over). Returns how many new events the answers
    /// since the last tick stored.
    @discardableResult
    public func tick() -> Int {
        let added = fresh
        fresh = 0
        if inFlight == nil && (wake || Clock.monotonicMillis() >= nextPull) { send() }
        return added
    }

    /// Events stored by answers since the last ``tick()``.
    var fresh = 0

    /// Takes the answer to a pull.
    func take(_ reply: Envelope) {
        if let error = reply.quadError {
            if lastError != error.message { Log.info(name, "telemetry pull deferred: \(error.message)") }
            lastError = error.message
            nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
            return
        }
        lastError = nil
        do {
            let (n, full) = try apply(reply.body)
            fresh += n
            if full { wake = true } else { nextPull = Clock.monotonicMillis() + RawPull.idlePullMs }
        } catch {
            Log.error(name, "telemetry page not applied: \(error)")
            nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
        }
    }

    /// Applies one page in one transaction with the cursor; returns the
    /// events stored and whether more may follow at once.
    func apply(_ body: JSON) throws -> (Int, Bool) {
        let events = body["events"]?.array ?? []
        let n = try db.transaction { () throws -> Int in
            var after = try cursor()
            if let last = body["last"]?.int, last < after {
                // Telemetry's store was replaced: its seqs start again. Events
                // are keyed by id here, so reading from the start counts none twice.
                Log.info(name, "telemetry's last seq \(last) is behind our cursor \(after): pulling again from the start")
                try db.execute("UPDATE raw_cursor SET seq = 0 WHERE one = 1")
                after = 0
            }
            let fresh = events.filter { ($0["seq"]?.int ?? 0) > after }
            guard let top = fresh.compactMap({ $0["seq"]?.int }).max() else { return 0 }
            let n = try Facts.applyTelemetry(db, fresh, clock: clock)
            try db.execute("UPDATE raw_cursor SET seq = $1 WHERE one = 1 AND seq < $1", .int(top))
            return n
        }
        applied += Int64(n)
        return (n, body["more"]?.bool ?? (Int64(events.count) >= RawPull.page))
    }

    func send() {
        let after: Int64
        do { after = try cursor() } catch {
            Log.error(name, "telemetry pull not sent: \(error)")
            nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
            return
        }
        var request = Envelope.request("telemetry.raw.since", body: ["after": .int(after), "limit": .int(RawPull.page)],
                                       src: name, deadline: RawPull.timeoutMs)
        // Through the internal frontend a service states its own role.
        request.role = "service"
        inFlight = request.id
        wake = false
        // One attempt: a pull not answered is sent again at the next tick,
        // from the cursor as it is then.
        ask(request, RawPull.timeoutMs) { [weak self] result in
            guard let self, self.inFlight == request.id else { return }
            self.inFlight = nil
            switch result {
            case .success(let reply): self.take(reply)
            case .failure(let error):
                if self.lastError != error.message { Log.info(self.name, "telemetry pull not answered: \(error.message)") }
                self.lastError = error.message
                self.nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
            }
        }
    }
}
