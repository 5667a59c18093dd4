import QuadMessaging
import QuadStore
import QuadWire

/// Events of other services, applied at most once each and in `seq` order
/// per source. Pub/sub is the fast path; `<source>.events.since` is what
/// makes it reliable: the feed catches up at start, on a gap, and after a
/// source has been silent for a while (which finds events lost at the tail
/// of a partition). A source whose events arrive in order is not asked:
/// that catch-up would find nothing and cost the publisher a page.
/// The last applied seq per source is stored with the change it caused, in
/// one transaction, so a crash or a second worker never applies one twice.
/// Catch-up requests are asynchronous: the worker's loop keeps serving
/// while a source is slow or gone.
public final class EventFeed {
    public typealias Apply = (Envelope) throws -> Void
    /// Sends a request to another service and calls back on the loop with
    /// its answer: the worker's ``ServiceCalls`` (the one requester's
    /// rules: the next broker when one is silent or gone).
    public typealias Ask = (_ request: Envelope, _ timeoutMs: Int64, _ done: @escaping (Result<Envelope, QuadError>) -> Void) -> Void

    let db: Database
    let sources: [String]
    let wants: (Envelope) -> Bool
    let apply: Apply
    let ask: Ask
    let name: String
    /// The catch-up request in flight per source (its id), until it is
    /// answered or given up.
    var inFlight: [String: String] = [:]
    /// The worker is leaving: no catch-up is asked or applied any more (the
    /// next start catches up from the cursors).
    var stopped = false
    public private(set) var applied: Int64 = 0
    /// When each source was last known to be caught up with (monotonic
    /// ms): an event of it applied in order, or a catch-up that came back
    /// short. Absent: never, or something failed since.
    var heard: [String: Int64] = [:]
    /// Events a source pruned before this feed applied them (its cursor
    /// was older than the source's `outbox_retention_ms`): lost to this
    /// subscriber, counted and logged, never waited for.
    public private(set) var missed: Int64 = 0
    /// Per source, the highest seq seen (in an event or a catch-up page)
    /// and the seq applied up to: their difference is the feed's lag.
    var seen: [String: Int64] = [:]
    var at: [String: Int64] = [:]

    /// Events of `source` seen but not applied yet.
    public func lag(_ source: String) -> Int64 { max(0, (seen[source] ?? 0) - (at[source] ?? seen[source] ?? 0)) }
    /// Page size of a catch-up request, and how long to wait for one.
    static let page: Int64 = 500
    static let catchUpTimeoutMs: Int64 = 3000

    public static let migrations = [
        Migration(1, "CREATE TABLE event_cursors (source TEXT PRIMARY KEY, seq BIGINT NOT NULL)"),
    ]

    init(db: Database, sources: [String], wants: @escaping (Envelope) -> Bool, ask: @escaping Ask, name: String, apply: @escaping Apply) throws {
        self.db = db
        self.sources = sources
        self.wants = wants
        self.apply = apply
        self.ask = ask
        self.name = name
        try Migrations.apply(db, EventFeed.migrations, scope: "quad.feed")
    }

    /// The pub/sub topic prefix of every event of `service`.
    public static func topic(_ service: String) -> String { service + "/" }

    func cursor(_ source: String) throws -> Int64 {
        try db.queryOne("SELECT seq FROM event_cursors WHERE source = $1", .text(source))?.int("seq") ?? 0
    }

    /// Most events applied in one transaction: what a drain of the SUB
    /// socket takes at once before the loop serves requests again.
    static let batch = 500

    /// Takes what is waiting on `socket` (at most ``batch`` events) and
    /// applies it in one transaction.
    func drain(_ socket: Socket) {
        var events: [Envelope] = []
        var n = 0
        while n < EventFeed.batch, let frames = try? socket.receive(dontWait: true) {
            n += 1
            // The header first (source, seq, type: what order and
            // once-only need, and what `wants` reads); the body is parsed
            // only for an event this feed applies. One it does not want
            // still moves its source's cursor, from the header alone.
            guard frames.count == 2, let header = try? Envelope.decodeHeader(frames[1], maxBytes: .max), header.kind == .event else { continue }
            if !wants(header) { events.append(header); continue }
            guard let e = try? Envelope.decode(frames[1], maxBytes: .max) else { continue }
            events.append(e)
        }
        receive(events)
    }

    /// Applies one event if it is the next of its source; on a gap, catches up.
    func receive(_ event: Envelope) { receive([event]) }

    /// Applies each event that is the next of its source, in order, in one
    /// transaction with the cursors: one commit for the batch, not one per
    /// event. An event whose apply fails is rolled back alone (a savepoint)
    /// and holds back the rest of its source until catch-up; a gap asks
    /// the source for what is missing.
    func receive(_ events: [Envelope]) {
        guard !events.isEmpty else { return }
        var gaps: [String] = []
        var advanced: Set<String> = []
        var failed: Set<String> = []
        var committed: [String: Int64] = [:]
        do {
            try db.transaction {
                var cursors: [String: Int64] = [:]
                var held: Set<String> = []
                for event in events {
                    guard let src = event.src, let seq = event.seq, sources.contains(src), !held.contains(src) else { continue }
                    let last = try cursors[src] ?? cursor(src)
                    seen[src] = max(seen[src] ?? 0, seq)
                    if at[src] == nil { at[src] = last }
                    if seq <= last { continue }  // seen already
                    if seq > last + 1 {  // a gap
                        held.insert(src)
                        gaps.append(src)
                        continue
                    }
                    do {
                        // Only an event this feed applies costs a savepoint
                        // and a statement; one it does not want moves the
                        // cursor in memory alone.
                        if wants(event) {
                            try db.transaction { try apply(event) }
                            applied += 1
                        }
                        cursors[src] = seq
                        committed[src] = seq
                        advanced.insert(src)
                    } catch {
                        held.insert(src)
                        failed.insert(src)
                        Log.error(name, "event \(event.type) seq \(seq) from \(src) not applied: \(error)")
                    }
                }
                // Each source's cursor is written once, at the last event
                // the batch applied of it, in the batch's transaction.
                for (src, seq) in cursors { try saveCursor(src, seq) }
            }
        } catch {
            // Nothing of the batch is kept: what the sources still hold
            // comes again by catch-up.
            Log.error(name, "\(events.count) events not applied: \(error)")
            gaps = Array(Set(events.compactMap(\.src)).filter(sources.contains))
            failed.formUnion(gaps)
            advanced = []
            committed = [:]
        }
        // Committed in order: caught up with those sources as of now. A
        // source with a failure or a gap is asked, not trusted.
        let now = Clock.monotonicMillis()
        for src in advanced { heard[src] = now }
        for (src, seq) in committed { at[src] = max(at[src] ?? 0, seq) }
        for src in failed.union(gaps) { heard[src] = nil }
        for src in gaps { catchUp(src) }
    }

    func record(_ event: Envelope, src: String, seq: Int64) throws {
        if wants(event) {
            try apply(event)
            applied += 1
        }
        try saveCursor(src, seq)
    }

    func saveCursor(_ src: String, _ seq: Int64) throws {
        try db.execute("""
            INSERT INTO event_cursors (source, seq) VALUES ($1, $2)
            ON CONFLICT (source) DO UPDATE SET seq = excluded.seq
            """, .text(src), .int(seq))
    }

    /// Asks `src` for what follows our cursor, unless a request is pending.
    func catchUp(_ src: String) {
        guard inFlight[src] == nil, !stopped else { return }
        let after: Int64
        do { after = try cursor(src) } catch {
            Log.error(name, "catch-up from \(src) not sent: \(error)")
            return
        }
        let request = Envelope.request("\(src).events.since", body: ["after": .int(after), "limit": .int(EventFeed.page)],
                                       src: name, deadline: EventFeed.catchUpTimeoutMs)
        inFlight[src] = request.id
        // One attempt: a catch-up not answered is asked again by the next
        // gap or the timer's, from the cursor as it is then.
        ask(request, EventFeed.catchUpTimeoutMs) { [weak self] result in
            guard let self, self.inFlight[src] == request.id, !self.stopped else { return }
            self.inFlight[src] = nil
            switch result {
            case .success(let reply): self.take(reply, from: src)
            case .failure(let error):
                self.heard[src] = nil
                Log.info(self.name, "catch-up from \(src) not answered: \(error.message)")
            }
        }
    }

    func catchUpAll() {
        for s in sources { catchUp(s) }
    }

    /// The timer's catch-up: only the sources not heard from for `quietMs`
    /// (a gap, a failure and the start ask at once, elsewhere).
    func catchUpSilent(quietMs: Int64) {
        let now = Clock.monotonicMillis()
        for s in sources where heard[s].map({ now - $0 >= quietMs }) ?? true { catchUp(s) }
    }

    /// Applies a catch-up page from `src`.
    func take(_ reply: Envelope, from src: String) {
        heard[src] = nil
        if let error = reply.quadError {
            Log.info(name, "catch-up from \(src) deferred: \(error.message)")
            return
        }
        do {
            let events = try (reply.body["events"]?.array ?? []).map { try Envelope.decode($0) }
            let oldest = reply.body["oldest"]?.int
            try db.transaction {
                var last = try cursor(src)
                // The source no longer keeps what follows our cursor: say
                // so, and go on from what it keeps, or a feed that was
                // away too long would ask for the same gap for ever.
                if let oldest, oldest > last + 1 {
                    missed += oldest - last - 1
                    Log.error(name, "events \(last + 1)...\(oldest - 1) of \(src) were pruned before this worker applied them (outbox_retention_ms of \(src)): going on from \(oldest)")
                    try saveCursor(src, oldest - 1)
                    last = oldest - 1
                }
                for e in events {
                    guard let seq = e.seq, seq > last else { continue }
                    try record(e, src: src, seq: seq)
                    last = seq
                }
            }
            if Int64(events.count) == EventFeed.page { catchUp(src) } else { heard[src] = Clock.monotonicMillis() }
        } catch {
            Log.error(name, "catch-up from \(src) not applied: \(error)")
        }
    }
}

extension Worker {
    /// Subscribes this worker to the events of `sources` (service names).
    /// `apply` runs inside the transaction that advances the cursor; it
    /// sees only events for which `wants` is true. `wants` is asked of the
    /// event's header (its body is not parsed yet: decide by type).
    public func subscribe(to sources: [String], catchUpEveryMs: Int64 = 5000,
                          wants: @escaping (Envelope) -> Bool = { _ in true }, apply: @escaping EventFeed.Apply) throws {
        guard let db = handlers.db else { throw QuadError.internal("a feed needs a store") }
        // Catch-up requests go out as the worker's other calls do.
        let feed = try EventFeed(db: db, sources: sources, wants: wants, ask: { [unowned self] request, timeoutMs, done in
            self.send(request, timeoutMs: timeoutMs, attempts: 1, done)
        }, name: handlers.instance, apply: apply)
        let sub = try context.socket(.sub)
        try InternalCurve.secure(sub)
        // Every broker relays every event: the feed hears each through all
        // of them and applies the first copy of each (source, seq); the
        // others are `seq <= cursor`, skipped in ``receive(_:)-(_)``.
        for endpoint in Endpoints.list(endpoints.eventsOut) { try sub.connect(endpoint) }
        for s in sources { try sub.subscribe(EventFeed.topic(s)) }
        feeds.append((feed, sub))
        reactor.register(sub) { [unowned self] _ in self.receiveEvents(feed, sub) }
        timers.after(0) { feed.catchUpAll() }
        timers.every(catchUpEveryMs) { [unowned self] in if !self.leaving { feed.catchUpSilent(quietMs: catchUpEveryMs) } }
    }

    func receiveEvents(_ feed: EventFeed, _ socket: Socket) {
        feed.drain(socket)
        relayOutbox()
    }
}
