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
/// Requests are asynchronous, on a DEALER of our own to the broker's
/// internal frontend, checked from a timer of the worker's loop, so the
/// loop keeps serving while telemetry is slow or gone.
public final class RawPull {
    let db: Database
    let clock: CampusClock
    let socket: Socket
    let name: String
    let context: ZMQContext
    var inFlight: (id: String, expires: Int64)?
    var nextPull: Int64 = 0
    /// Set when telemetry said it stored more, or a page came back full.
    public var wake = true
    public private(set) var applied: Int64 = 0
    public private(set) var lastError: String?

    public static let page: Int64 = 1000
    static let timeoutMs: Int64 = 3000
    static let idlePullMs: Int64 = 1000

    public init(db: Database, endpoint: String, name: String, clock: CampusClock, context: ZMQContext = ZMQContext()) throws {
        self.db = db
        self.clock = clock
        self.name = name
        self.context = context
        socket = try context.socket(.dealer)
        try socket.setLinger(0)
        try InternalCurve.secure(socket)
        // Every broker's internal frontend (a comma-separated list); with
        // several, sends go only to live ones (ZMQ_IMMEDIATE), and a pull
        // that timed out goes to the next.
        let all = Endpoints.list(endpoint)
        if all.count > 1 { try socket.setImmediate(true) }
        for e in all { try socket.connect(e) }
    }

    public func cursor() throws -> Int64 {
        try db.queryOne("SELECT seq FROM raw_cursor WHERE one = 1")?.int("seq") ?? 0
    }

    /// Reads replies and sends the next request when one is due; returns
    /// how many new events were stored.
    @discardableResult
    public func tick() -> Int {
        var added = 0
        while let frames = try? socket.receive(dontWait: true) {
            guard let last = frames.last, let reply = try? Envelope.decode(last, maxBytes: .max), reply.corr == inFlight?.id else { continue }
            inFlight = nil
            if let error = reply.quadError {
                if lastError != error.message { Log.info(name, "telemetry pull deferred: \(error.message)") }
                lastError = error.message
                nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
                continue
            }
            lastError = nil
            do {
                let (n, full) = try apply(reply.body)
                added += n
                if full { wake = true } else { nextPull = Clock.monotonicMillis() + RawPull.idlePullMs }
            } catch {
                Log.error(name, "telemetry page not applied: \(error)")
                nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
            }
        }
        let now = Clock.monotonicMillis()
        if let pending = inFlight, pending.expires > now { return added }
        if inFlight != nil || wake || now >= nextPull { send() }
        return added
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
        do {
            var request = Envelope.request("telemetry.raw.since", body: ["after": .int(try cursor()), "limit": .int(RawPull.page)],
                                           src: name, deadline: RawPull.timeoutMs)
            // Through the internal frontend a service states its own role.
            request.role = "service"
            try socket.send(Majordomo.request(request), dontWait: true)
            inFlight = (request.id, Clock.monotonicMillis() + RawPull.timeoutMs)
            wake = false
        } catch {
            Log.error(name, "telemetry pull not sent: \(error)")
            nextPull = Clock.monotonicMillis() + RawPull.idlePullMs
        }
    }
}
