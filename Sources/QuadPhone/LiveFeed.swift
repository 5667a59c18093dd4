import Foundation
import QuadMessaging
import QuadRuntime
import QuadWire
import QuadPhoneKit

/// What a phone hears without asking: ONE XSUB, to the updates socket of
/// the broker its requests go to (CURVE with the phone's own key pair, as
/// its requests), subscribed to the broker's heartbeat, to the levels of
/// the lots the student looked at (at most ``maxLots``) and to the products
/// the student is looking at (at most ``maxProducts``): what a phone hears
/// is bounded by what its student watches, not by the campus (every lot's
/// levels were 9,000 updates a second for 1,000 phones, most of them for
/// lots nobody on those phones was looking at). The student's own
/// news comes on the phone's request link instead, once it asked for it
/// (``Phone/openNews()``: `sys.news` with its session token). The socket sends the subscriptions again after a
/// reconnect, and the feed follows the phone's link when it moves to
/// another broker (``move(to:)``). The feed is live while something (a
/// heartbeat at least, every second) arrived within ``quietMs``; a phone
/// whose feed is not live polls instead, and one whose feed stays quiet
/// for ``moveAfterQuietMs`` moves to the next broker (Phone.liveTick).
package final class LiveFeed {
    let context: ZMQContext
    let endpoints: [String]
    let reactor: Reactor
    let serverKey: [UInt8]?
    let clientKeys: CurveKeys?
    private(set) var socket: Socket?
    /// The updates socket listened to (an index of ``endpoints``).
    private(set) var current = 0
    /// When the socket was opened (monotonic ms).
    private(set) var openedMs: Int64 = 0
    /// The public topics subscribed to, in the order they were added.
    private(set) var topics: [String] = ["pub/hb"]
    /// The products watched, most recent last (at most ``maxProducts``).
    private(set) var products: [String] = []
    /// The lots whose levels are watched, most recent last (at most ``maxLots``).
    private(set) var lots: [String] = []
    /// When something last arrived (monotonic ms).
    private(set) var lastHeardMs: Int64?
    /// Events received (heartbeats aside), and how long each took from its
    /// service's outbox to here (the envelope's `ts` to now, wall clock).
    package private(set) var received = 0
    /// The same, by event type.
    package private(set) var receivedByType: [String: Int] = [:]
    package private(set) var latencies: [Int64] = []
    var onEvent: (Envelope) -> Void = { _ in }

    static let quietMs: Int64 = 3_000
    /// A feed silent this long (no heartbeat: the broker is gone or cut
    /// off) moves the phone to the next broker.
    static let moveAfterQuietMs: Int64 = 6_000
    /// The longest silence a move waits for after moves that did not last:
    /// each move the phone made without staying ``settledMs`` at a broker
    /// doubles the wait (6, 12, 24, 48, then 60 s). A campus of thousands
    /// of phones on two lagging brokers otherwise moved every phone back
    /// and forth every 6 s, and the sockets each move closed piled up
    /// waiting for libzmq's reaper until a process ran out of them.
    static let maxMoveAfterQuietMs: Int64 = 60_000
    /// Heard from a broker this long after moving to it: the move lasted,
    /// and the next one waits ``moveAfterQuietMs`` again.
    static let settledMs: Int64 = 60_000
    /// How often a phone asks again for its news channel (`sys.news`: one
    /// the broker lost, restarted, is opened again).
    static let renewNewsMs: Int64 = 30_000
    /// The product on screen and the few before it: a stock change of a
    /// product seen long ago is read with the product when it is opened
    /// again (16 made a 1,000-phone day hear 170k stock changes, most for
    /// products off every screen).
    static let maxProducts = 4
    static let maxLots = 2
    static let maxLatencies = 20_000
    static let productTypes = ["catalog.product.stock", "catalog.product.changed"]

    init(context: ZMQContext, endpoints: [String], reactor: Reactor, serverKey: [UInt8]?, clientKeys: CurveKeys?) {
        self.context = context
        self.endpoints = endpoints
        self.reactor = reactor
        self.serverKey = serverKey
        self.clientKeys = clientKeys
    }

    var isUp: Bool { socket != nil }
    /// Heard from within ``quietMs``: updates arrive; no need to poll.
    package var isLive: Bool { isUp && lastHeardMs.map { Clock.monotonicMillis() - $0 < LiveFeed.quietMs } ?? false }
    /// Heard from this broker since the socket opened, then nothing for
    /// ``moveAfterQuietMs``: the broker went away. A feed that never heard
    /// its first heartbeat (a handshake the broker holds back while a
    /// thousand phones connect) is not moved: that would only add
    /// handshakes; a broker that never answers moves the phone through its
    /// requests' timeouts instead.
    var isSilent: Bool {
        guard isUp, let heard = lastHeardMs else { return false }
        return Clock.monotonicMillis() - max(openedMs, heard) >= moveAfterMs
    }

    /// Something arrived at `now`: heard ``settledMs`` after the socket
    /// opened, the last move lasted.
    func heard(at now: Int64) {
        lastHeardMs = now
        if unsettledMoves > 0 && now - openedMs >= LiveFeed.settledMs { unsettledMoves = 0 }
    }

    /// Moves since the phone last stayed ``settledMs`` at a broker.
    private(set) var unsettledMoves = 0
    /// This phone's share of jitter on the wait, 0 to 0.5 (set once from
    /// its seed): a thousand phones that lost one broker do not all move in
    /// the same second.
    var jitter = 0.0

    /// The jitter of the phone of `seed`: 0 to 0.5, in steps of 0.0005.
    static func jitter(seed: UInt64) -> Double {
        var draw = SeededRandom(seed: seed ^ 0x6d6f7665)
        return Double(draw.next() % 1_000) / 2_000
    }
    /// The silence that moves the phone now: ``moveAfterQuietMs`` doubled
    /// for each move that did not last, at most ``maxMoveAfterQuietMs``,
    /// plus the phone's jitter.
    /// The same doubling and cap as the outbox's retries (``Backoff``);
    /// the jitter is the phone's own, fixed, instead of a new draw per move.
    var moveAfterMs: Int64 {
        let wait = LiveFeed.moveBackoff.ceilingMs(attempt: unsettledMoves)
        return wait + Int64(Double(wait) * jitter)
    }
    static let moveBackoff = Backoff(baseMs: moveAfterQuietMs, capMs: maxMoveAfterQuietMs)

    /// Opens the socket (the radio is on) to broker `index`'s updates
    /// socket (the phone's link's broker), and subscribes.
    func up(at index: Int) throws(ZMQError) {
        guard socket == nil, !endpoints.isEmpty else { return }
        let target = index % endpoints.count
        let s = try context.socket(.xsub)
        try s.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        // A peer gone without a word (a cut cable, a firewall) is found
        // by ZMTP's heartbeats and dialed again.
        try s.setHeartbeat(intervalMs: 2_000, timeoutMs: 6_000)
        // No pipe before the handshake: a phone whose broker cannot be
        // reached does not hold libzmq's two 16 KiB pipe chunks for nothing
        // (33 KiB of its ~116 KiB). XSUB keeps the subscriptions sent below
        // and gives them to the pipe when it comes.
        try s.setImmediate(true)
        try Link.secure(s, serverKey: serverKey, clientKeys: clientKeys)
        try s.connect(endpoints[target])
        socket = s
        current = target
        openedMs = Clock.monotonicMillis()
        reactor.register(s) { [unowned self] s in self.receive(s) }
        for t in topics + products.flatMap(LiveFeed.productTopics) + lots.map(LiveFeed.lotTopic) { send(1, t) }
    }

    /// Counts the silence again from now, after a move (or with nothing to
    /// move to): the next silence must be longer.
    func heardNothing() {
        openedMs = Clock.monotonicMillis()
        unsettledMoves += 1
    }

    /// Closes the socket (the radio is off).
    func down() {
        if let socket { reactor.unregister(socket) }
        socket = nil
        lastHeardMs = nil
    }

    /// Listens to broker `index`'s updates socket instead (the phone's
    /// link moved there); the subscriptions go with it.
    func move(to index: Int) throws(ZMQError) {
        guard socket != nil, endpoints.count > 1, index % endpoints.count != current else { return }
        down()
        try up(at: index)
    }

    static func productTopics(_ id: String) -> [String] { productTypes.map { "pub/\($0)/\(id)" } }

    /// Watches a product's stock and changes; the oldest of more than
    /// ``maxProducts`` is let go.
    func watch(product id: String) {
        if let i = products.firstIndex(of: id) { products.remove(at: i); products.append(id); return }
        products.append(id)
        for t in LiveFeed.productTopics(id) { send(1, t) }
        if products.count > LiveFeed.maxProducts {
            for t in LiveFeed.productTopics(products.removeFirst()) { send(0, t) }
        }
    }

    static func lotTopic(_ id: String) -> String { "pub/reservations.level.changed/\(id)" }

    /// Whether `lot`'s levels are watched (its saved copy is kept current).
    func watches(lot: String) -> Bool { lots.contains(lot) }

    /// Watches a lot's levels; the oldest of more than ``maxLots`` is let go.
    func watch(lot id: String) {
        if let i = lots.firstIndex(of: id) { lots.remove(at: i); lots.append(id); return }
        lots.append(id)
        send(1, LiveFeed.lotTopic(id))
        if lots.count > LiveFeed.maxLots { send(0, LiveFeed.lotTopic(lots.removeFirst())) }
    }

    /// Stops watching a lot (its live map left the screen a while ago).
    func unwatch(lot id: String) {
        guard let i = lots.firstIndex(of: id) else { return }
        lots.remove(at: i)
        send(0, LiveFeed.lotTopic(id))
    }

    func send(_ verb: UInt8, _ topic: String) {
        try? socket?.send([[verb] + Array(topic.utf8)], dontWait: true)
    }

    /// Reads what arrived on `socket`: an event envelope after its topic.
    func receive(_ socket: Socket) {
        while self.socket === socket, let frames = try? socket.receive(dontWait: true) {
            guard frames.count == 2, let event = DecodedEvents.shared.decode(frames[1]), event.kind == .event else { continue }
            heard(at: Clock.monotonicMillis())
            guard event.type != "broker.heartbeat" else { continue }
            received += 1
            receivedByType[event.type, default: 0] += 1
            if latencies.count < LiveFeed.maxLatencies { latencies.append(max(0, Int64(Clock.nowMillis()) - event.ts)) }
            onEvent(event)
        }
    }
}

/// Where updates land: the phone's saved copies, each applied only over an
/// older one (a level's `seq`, a product's last event), so a late or
/// repeated update never shows a state older than the one on screen.
extension Phone {
    /// Counters of what the feed did on this phone.
    package struct LiveStats {
        package var applied = 0
        /// Heard again (through the other broker): the seq already applied.
        package var duplicates = 0
        /// Older than the saved copy: dropped.
        package var stale = 0
        package var polls = 0
        package var catchUps = 0
        package var news = 0
        package var newsForOthers = 0
        /// From a notification's creation to its arrival here, for those the feed brought first.
        package var newsLatencies: [Int64] = []

        package init() {}

        /// Another phone's counters added to these.
        package mutating func add(_ o: LiveStats) {
            (applied, duplicates, stale, polls) = (applied + o.applied, duplicates + o.duplicates, stale + o.stale, polls + o.polls)
            (catchUps, news, newsForOthers) = (catchUps + o.catchUps, news + o.news, newsForOthers + o.newsForOthers)
            newsLatencies += o.newsLatencies
        }
    }

    func applyLive(_ event: Envelope) {
        switch event.type {
        case "reservations.level.changed":
            guard let seq = event.seq, let lot = event.body["lot"]?.string else { return }
            let key = Phone.key("reservations.levels", ["lot": .string(lot)])
            if heldLevels[key] == nil {
                guard let copy = saved(key) else { return }
                var seqs: [String: Int64] = [:]
                for l in copy.body["levels"]?.array ?? [] { if let id = l["id"]?.string { seqs[id] = l["seq"]?.int ?? 0 } }
                heldLevels[key] = HeldLevels(seqs: seqs)
            }
            guard let level = event.body["level"]?.string, let held = heldLevels[key]?.seqs[level] else { liveStats.stale += 1; return }
            guard seq > held else { if seq == held { liveStats.duplicates += 1 } else { liveStats.stale += 1 }; return }
            heldLevels[key]?.seqs[level] = seq
            heldLevels[key]?.pending[level] = ["id": .string(level), "free": event.body["free"] ?? .null, "total": event.body["total"] ?? .null, "seq": .int(seq)]
            liveStats.applied += 1
            if levelsTimer == nil {
                levelsTimer = agenda.after(Phone.levelsWriteMs) { [weak self] in
                    self?.levelsTimer = nil
                    self?.writeHeldLevels()
                }
            }
        case "catalog.product.stock", "catalog.product.changed":
            let id = event.body["product"]?.string ?? event.body["id"]?.string
            guard let seq = event.seq, let id, let stock = event.body["stock"]?.int else { return }
            // Against the newest version the phone holds, from any source
            // (a reply or the saved catalog may be newer than the feed's last).
            let (applied, held) = applyProductStock(id, stock: stock, seq: seq)
            guard applied else { if seq == held { liveStats.duplicates += 1 } else { liveStats.stale += 1 }; return }
            liveStats.applied += 1
        default:
            guard event.type.hasSuffix(".news") else { return }
            if event.body["user"]?.string != user { liveStats.newsForOthers += 1; return }
            if keepNews(event) { liveStats.news += 1 } else { liveStats.duplicates += 1 }
            onNews(self, event)
        }
    }

    /// How long the feed's level updates may wait in memory before their
    /// saved copy is written (a read of the copy writes them at once). A
    /// killed phone loses at most this much of its live map, which its
    /// next snapshot brings back; 1,000 phones writing each update (2,900 a
    /// second, each a read, a parse and a write of the lot's copy) kept the
    /// edge's one loop busy all the time.
    static let levelsWriteMs: Int64 = 5_000
    /// How long (the phone's clock) a lot's levels stay watched after its
    /// live map was last looked at, unless it is the lot of the student's
    /// reservation: a phone hears the lots on its screen, not every lot it
    /// ever showed.
    static let lotWatchMs: Int64 = 120_000

    /// Writes the held level updates into their saved copies (of `key` only, when given).
    func writeHeldLevels(_ only: String? = nil) {
        for (key, held) in heldLevels where !held.pending.isEmpty && (only == nil || only == key) {
            heldLevels[key]?.pending = [:]
            guard let r = try? db.queryOne("SELECT body FROM saved WHERE key = $1", .text(key)) else { continue }
            if let merged = Phone.mergeLevels(.stored(r.string("body")), with: ["levels": .array(Array(held.pending.values))]) { write(key, merged) }
        }
    }

    /// `body`'s levels over `saved`'s, each only where its `seq` is higher
    /// (a level without one is older than any): nil when nothing in `body`
    /// is newer.
    static func mergeLevels(_ saved: JSON, with body: JSON) -> JSON? {
        guard case .object(var out) = saved, var levels = saved["levels"]?.array else { return nil }
        var changed = false
        for new in body["levels"]?.array ?? [] {
            guard let id = new["id"]?.string, let i = levels.firstIndex(where: { $0["id"]?.string == id }) else { continue }
            guard (new["seq"]?.int ?? 0) > (levels[i]["seq"]?.int ?? 0), case .object(var level) = levels[i] else { continue }
            for k in ["free", "total", "seq"] { if let v = new[k], v != .null { level[k] = v } }
            levels[i] = .object(level)
            changed = true
        }
        guard changed else { return nil }
        out["levels"] = .array(levels)
        return .object(out)
    }

    /// A snapshot of a lot's levels to save over the copy the feed keeps:
    /// a level the copy holds at a higher seq stays as it is.
    func keepingNewerLevels(_ key: String, _ snapshot: JSON) -> JSON {
        guard case .object(var s) = snapshot, let fresh = snapshot["levels"]?.array,
              let copy = saved(key), let held = copy.body["levels"]?.array else { return snapshot }
        let byID = Dictionary(held.compactMap { l in l["id"]?.string.map { ($0, l) } }, uniquingKeysWith: { a, _ in a })
        s["levels"] = .array(fresh.map { l in
            guard let id = l["id"]?.string, let mine = byID[id], (mine["seq"]?.int ?? 0) > (l["seq"]?.int ?? 0) else { return l }
            liveStats.stale += 1
            return mine
        })
        return .object(s)
    }

    /// Once a second: a phone online whose feed went quiet polls the lot it
    /// looks at every 5 s (the seed's live map); a feed that comes back
    /// after a silence is caught up with a snapshot of what it missed.
    func liveTick() {
        // Nothing heard, not even the broker's heartbeat: that broker is
        // gone or cut off; the link and the feed move to the next one.
        if let live, radioOn, live.isSilent {
            do { try link.move() } catch { socketFailed(error, what: "its request socket") }
            // With nowhere else to go, the feed waits on (it dials again by
            // itself); the silence is counted again from now either way.
            live.heardNothing()
            newsOpenedWithRadio = false
        }
        // A live map the student left a while ago (and not the lot of its
        // reservation) is no longer watched: its next look reads it again.
        if let live, live.lots.contains(where: { now - (lotLookedAt[$0] ?? 0) > Phone.lotWatchMs }) {
            let keep = (try? Actions.activeParking(db))??.optionalString("lot")
            for lot in live.lots where lot != keep && now - (lotLookedAt[lot] ?? 0) > Phone.lotWatchMs {
                live.unwatch(lot: lot)
                lotLookedAt[lot] = nil
            }
        }
        guard let live, isOnline else { liveWasQuiet = true; return }
        if live.isLive, now - lastNewsRenewMs >= LiveFeed.renewNewsMs { openNews() }
        if live.isLive {
            if liveWasQuiet {
                liveWasQuiet = false
                liveStats.catchUps += 1
                // A silence may have been a broker's restart: it lost the
                // channel (after the radio came on, it was asked for already).
                if newsOpenedWithRadio { newsOpenedWithRadio = false } else { openNews() }
                prefetchOnNetworkBack()
                fetchNews()
            }
            return
        }
        liveWasQuiet = true
        guard let lot = watchedLot, now - lot.atMs < 60_000, now - lastPollMs >= 5_000 else { return }
        lastPollMs = now
        liveStats.polls += 1
        let body: JSON = ["lot": .string(lot.id)]
        request("reservations.levels", body, timeoutMs: settings.readTimeoutMs) { [weak self] result in
            if case .success(let reply) = result, reply.quadError == nil { self?.save(Phone.key("reservations.levels", body), reply.body) }
        }
    }
}

/// A lot's levels as the feed last set them: each level's seq, and the
/// updates not yet in the saved copy.
struct HeldLevels {
    var seqs: [String: Int64]
    var pending: [String: JSON] = [:]
}

/// The events of a process's feeds, each decoded once. One event reaches
/// every phone of a quad-edge that watches its topic, the same bytes on
/// hundreds of sockets one after the other (a level change, to the ~330
/// phones of a 1,000-phone day watching that lot); the phones share the
/// decoded envelope, a value, instead of parsing it again each.
final class DecodedEvents: @unchecked Sendable {
    static let shared = DecodedEvents()
    /// The last events decoded, by their bytes, and their order.
    private var recent: [[UInt8]: Envelope] = [:]
    private var order: [[UInt8]] = []
    private var next = 0
    private let lock = NSLock()
    static let capacity = 128

    /// `bytes` decoded, from the recent ones when it is one of them; nil
    /// for bytes that are no envelope.
    func decode(_ bytes: [UInt8]) -> Envelope? {
        lock.lock()
        defer { lock.unlock() }
        if let known = recent[bytes] { return known }
        guard let event = try? Envelope.decode(bytes, maxBytes: .max) else { return nil }
        if order.count < DecodedEvents.capacity {
            order.append(bytes)
        } else {
            recent[order[next]] = nil
            order[next] = bytes
            next = (next + 1) % DecodedEvents.capacity
        }
        recent[bytes] = event
        return event
    }
}
