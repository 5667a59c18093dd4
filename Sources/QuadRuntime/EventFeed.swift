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

    let db: Database
    let sources: [String]
    let wants: (Envelope) -> Bool
    let apply: Apply
    let requests: Socket
    let name: String
    /// The catch-up request in flight per source: its id and when it expires.
    var inFlight: [String: (id: String, expires: Int64)] = [:]
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

    init(db: Database, sources: [String], wants: @escaping (Envelope) -> Bool, requests: Socket, name: String, apply: @escaping Apply) throws {
        self.db = db
        self.sources = sources
        self.wants = wants
        self.apply = apply
        self.requests = requests
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
        let now = Clock.monotonicMillis()
        if let pending = inFlight[src], pending.expires > now { return }
        do {
            let request = Envelope.request("\(src).events.since", body: ["after": .int(try cursor(src)), "limit": .int(EventFeed.page)],
                                           src: name, deadline: EventFeed.catchUpTimeoutMs)
            try requests.send(Majordomo.request(request), dontWait: true)
            inFlight[src] = (request.id, now + EventFeed.catchUpTimeoutMs)
        } catch {
            Log.error(name, "catch-up from \(src) not sent: \(error)")
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

    /// Handles catch-up replies waiting on the request socket.
    func receiveReplies() {
        while let frames = try? requests.receive(dontWait: true) {
            guard let last = frames.last, let reply = try? Envelope.decode(last, maxBytes: .max),
                  let src = inFlight.first(where: { $0.value.id == reply.corr })?.key else { continue }
            inFlight[src] = nil
            heard[src] = nil
            if let error = reply.quadError {
                Log.info(name, "catch-up from \(src) deferred: \(error.message)")
                continue
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
                        try db.execute("""
                            INSERT INTO event_cursors (source, seq) VALUES ($1, $2)
                            ON CONFLICT (source) DO UPDATE SET seq = excluded.seq
                            """, .text(src), .int(oldest - 1))
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
}

extension Worker {
    /// Subscribes this worker to the events of `sources` (service names).
    /// `apply` runs inside the transaction that advances the cursor; it
    /// sees only events for which `wants` is true. `wants` is asked of the
    /// event's header (its body is not parsed yet: decide by type).
    public func subscribe(to sources: [String], catchUpEveryMs: Int64 = 5000,
                          wants: @escaping (Envelope) -> Bool = { _ in true }, apply: @escaping EventFeed.Apply) throws {
        guard let db = handlers.db else { throw QuadError.internal("a feed needs a store") }
        let requests = try context.socket(.dealer)
        try InternalCurve.secure(requests)
        try connectToEvery(requests, endpoints.internal)
        let feed = try EventFeed(db: db, sources: sources, wants: wants, requests: requests, name: handlers.instance, apply: apply)
        let sub = try context.socket(.sub)
        try InternalCurve.secure(sub)
        // Every broker relays every event: the feed hears each through all
        // of them and applies the first copy of each (source, seq); the
        // others are `seq <= cursor`, skipped in ``receive(_:)-(_)``.
        for endpoint in Endpoints.list(endpoints.eventsOut) { try sub.connect(endpoint) }
        for s in sources { try sub.subscribe(EventFeed.topic(s)) }
        feeds.append((feed, sub))
        // Either socket readable: the feed reads both.
        reactor.register(sub) { [unowned self] _ in self.receiveEvents(feed, sub) }
        reactor.register(requests) { [unowned self] _ in self.receiveEvents(feed, sub) }
        timers.after(0) { feed.catchUpAll() }
        // With several brokers the request socket sends to live connections
        // only (ZMQ_IMMEDIATE): a catch-up asked before the first handshake
        // is refused, so the start's is asked again until each is sent.
        var tries = 0
        timers.repeating(every: 50) {
            tries += 1
            guard feed.inFlight.count < feed.sources.count, tries <= 100 else { return false }
            feed.catchUpAll()
            return true
        }
        timers.every(catchUpEveryMs) { [unowned self] in if !self.leaving { feed.catchUpSilent(quietMs: catchUpEveryMs) } }
    }

    func receiveEvents(_ feed: EventFeed, _ socket: Socket) {
        feed.drain(socket)
        feed.receiveReplies()
        relayOutbox()
    }
}
