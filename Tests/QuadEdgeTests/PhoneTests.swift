import Foundation
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A broker stand-in on `inproc://`: a ROUTER that records every request it
/// gets and answers with what the test says, after a delay. The phone and
/// it share one thread, as on the edge's loop.
final class FakeBroker {
    struct Seen {
        let id: String
        let type: String
        let body: JSON
        let at: Int64
        /// When the phone sent it (the envelope's `ts`, set at each send):
        /// `at` is when this loop read it, later by however long the
        /// machine kept the loop from running.
        let sentAt: Int64
    }

    let socket: Socket
    let endpoint: String
    var seen: [Seen] = []
    /// What to answer: a reply body, an error, or nothing (the request is lost).
    var answer: (Envelope, Int) -> Result<JSON, QuadError>? = { _, _ in .success([:]) }
    var delayMs: Int64 = 0
    /// A cut: nothing is answered, not even the phone's probes.
    var blackout = false
    /// Telemetry batches whose answer is lost (the collector stored them).
    var dropTelemetry = 0
    /// Telemetry batches answered with a 500 (the collector failed, stored nothing).
    var failTelemetry = 0
    var pending: [(due: Int64, route: [[UInt8]], reply: Envelope)] = []
    var inFlightActions = 0
    var maxInFlightActions = 0
    var refreshed = 0
    /// accounts.refresh's answer, when set (else a new token each time).
    var refreshAnswer: ((Envelope) -> Result<JSON, QuadError>)?
    /// The envelope token of each request, by id.
    var tokens: [String: String] = [:]
    /// Reply bodies for read requests, by type (analytics.driver...).
    var queries: [String: JSON] = [:]
    /// Read requests of a type answered 503 first, this many times.
    var failQueries: [String: Int] = [:]

    init(context: ZMQContext) throws {
        endpoint = "inproc://fake-broker-\(UInt32.random(in: 0...UInt32.max))"
        socket = try context.socket(.router)
        try socket.bind(endpoint)
    }

    var actions: [Seen] { seen.filter { Actions.queued.contains($0.type) } }

    func attempts(_ id: String) -> Int { seen.filter { $0.id == id }.count }

    func receive() {
        // One due time for every request read now: requests that arrived
        // together are answered together, however slowly this loop runs (a
        // due time taken per request fell on two milliseconds on a loaded
        // CI machine, and answers meant to arrive together did not).
        let due = Clock.monotonicMillis() + delayMs
        while let frames = try? socket.receive(dontWait: true) {
            guard let request = try? Majordomo.envelope(endingFrames: frames) else { continue }
            if blackout { seen.append(Seen(id: request.id, type: request.type, body: request.body, at: Clock.monotonicMillis(), sentAt: request.ts)); continue }
            seen.append(Seen(id: request.id, type: request.type, body: request.body, at: Clock.monotonicMillis(), sentAt: request.ts))
            tokens[request.id] = request.token
            let isAction = Actions.queued.contains(request.type)
            let n = seen.filter { $0.id == request.id }.count
            let result: Result<JSON, QuadError>?
            switch request.type {
            case _ where isAction: result = answer(request, n)
            case _ where (failQueries[request.type] ?? 0) > 0:
                failQueries[request.type]! -= 1
                result = .failure(.unavailable("no catalog worker is free"))
            case _ where queries[request.type] != nil: result = .success(queries[request.type]!)
            case "telemetry.ingest" where dropTelemetry > 0:
                dropTelemetry -= 1
                result = nil
            case "telemetry.ingest" where failTelemetry > 0:
                failTelemetry -= 1
                result = .failure(.internal("store: postgres: could not extend file: No space left on device"))
            case "telemetry.ingest": result = .success(["accepted": .int(Int64(request.body["events"]?.array?.count ?? 0)), "duplicate": 0, "conflicting": 0, "rejected": []])
            case "accounts.login": result = .success(["token": "t", "user": "u-1", "role": "student", "expires_at": .int(Int64(Clock.nowMillis()) + 3_600_000)])
            case "accounts.register":
                // As accounts answers since a registration is a session: the profile, a token, its expiry.
                result = .success(["user": "u-1", "email": request.body["email"] ?? "", "name": request.body["name"] ?? "", "role": "student",
                                   "token": "t-registered", "expires_at": .int(Int64(Clock.nowMillis()) + 3_600_000)])
            case "accounts.refresh" where refreshAnswer != nil:
                refreshed += 1
                result = refreshAnswer?(request)
            case "accounts.refresh":
                refreshed += 1
                result = .success(["token": .string("t-refreshed-\(refreshed)"), "user": "u-1", "role": "student",
                                   "expires_at": .int(Int64(Clock.nowMillis()) + 3_600_000)])
            default: result = .failure(.notFound("not here"))
            }
            guard let result else { continue }
            if isAction {
                inFlightActions += 1
                maxInFlightActions = max(maxInFlightActions, inFlightActions)
            }
            let reply: Envelope = switch result {
            case .success(let body): request.reply(body, src: "fake")
            case .failure(let error): request.error(error, src: "fake")
            }
            pending.append((due, [frames[0]], reply))
        }
    }

    func sendDue() {
        let now = Clock.monotonicMillis()
        let due = pending.filter { $0.due <= now }
        pending.removeAll { $0.due <= now }
        for p in due {
            if Actions.queued.contains(p.reply.type) { inFlightActions -= 1 }
            try? socket.send(p.route + Majordomo.reply(service: p.reply.service, p.reply.encoded()))
        }
    }
}

/// One phone on a loop the test turns by hand, against ``FakeBroker``.
final class PhoneRig {
    let context = ZMQContext()
    let reactor = Reactor(now: Clock.monotonicMillis)
    var agenda: Timers { reactor.timers }
    let broker: FakeBroker
    let phone: Phone
    let dir: String

    init(settings adjust: (inout EdgeSettings) -> Void = { _ in }) throws {
        dir = NSTemporaryDirectory() + "quad-phone-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        broker = try FakeBroker(context: context)
        var settings = EdgeSettings(frontend: broker.endpoint)
        settings.actionTimeoutMs = 300
        settings.readTimeoutMs = 200
        settings.backoffBaseMs = 50
        settings.backoffCapMs = 400
        settings.telemetryEveryMs = 60_000
        settings.idleAfterMs = 200
        adjust(&settings)
        phone = try Phone(name: "phone-t", path: dir + "/phone-t.db", context: context, reactor: reactor, settings: settings, seed: 42)
        reactor.register(broker.socket) { [broker] _ in broker.receive() }
        // Signed in already: these tests are about the outbox.
        phone.registered = true
        phone.token = "t"
        phone.expiresAt = Int64(Clock.nowMillis()) + 3_600_000
    }

    deinit {
        phone.close()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Turns the loop until `done` or the time runs out.
    func run(forMs: Int64, until done: () -> Bool = { false }) {
        let end = Clock.monotonicMillis() + forMs
        while Clock.monotonicMillis() < end && !done() {
            // The phone's link registers itself while its radio is on.
            try? reactor.turn(timeoutCap: 10)
            broker.sendDue()
        }
    }

    var outbox: Int { phone.queueLength }
}

@Suite("A phone's outbox and views", .serialized)
struct PhoneTests {
    @Test func twoTriggersAtOnceNeverSendTheSameActionTwice() throws {
        // A window of several services at once (one in flight per service).
        let rig = try PhoneRig { $0.sendWindow = 8 }
        rig.broker.delayMs = 40
        rig.phone.airplane = true
        rig.phone.start()
        var ids: [String] = []
        for k in 1...5 {
            guard case .queued(let id) = rig.phone.act("favorites.add", ["product": .string("p-000\(k)")]) else { Issue.record("not queued"); return }
            ids.append(id)
        }
        // Network back, an action added and a phone start, in the same turn.
        rig.phone.setAirplane(false)
        if case .queued(let id) = rig.phone.act("orders.cart.add", ["product": "p-0009"]) { ids.append(id) }
        rig.phone.trigger(.phoneStarted)
        rig.phone.trigger(.networkBack)
        rig.run(forMs: 5000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        #expect(rig.broker.actions.map(\.id) == ids, "each action sent once, in order")
        #expect(rig.broker.maxInFlightActions == 2, "one action in flight per service: the last favorite and the cart line together")
    }

    /// A drain after the radio comes back counts, apart, how long the new
    /// connection took before the first action went on the wire; a drain
    /// on a connection opened before it began counts none.
    @Test func aDrainAfterTheRadioComesBackCountsItsNewConnectionApart() throws {
        let rig = try PhoneRig()
        rig.broker.delayMs = 40
        rig.phone.start()
        rig.phone.setAirplane(true)
        guard case .queued = rig.phone.act("favorites.add", ["product": "p-0001"]) else { Issue.record("not queued"); return }
        rig.phone.setAirplane(false)
        rig.run(forMs: 30_000) { rig.outbox == 0 && !rig.phone.stats.drains.isEmpty }
        try #require(rig.phone.stats.drains.count == 1, "one drain: \(rig.phone.stats.drains)")
        try #require(rig.phone.stats.drainConnects.count == 1, "its connection counted: \(rig.phone.stats.drainConnects)")
        let (drain, connect) = (rig.phone.stats.drains[0], rig.phone.stats.drainConnects[0])
        #expect(connect >= 0 && connect <= drain, "the connection (\(connect) ms) is part of the drain (\(drain) ms)")
        #expect(drain >= 40, "the drain waited for the answer, 40 ms late: \(drain) ms")
        // Unreachable without losing the radio: the drain that follows
        // goes on the connection it already had.
        rig.broker.blackout = true
        guard case .queued = rig.phone.act("favorites.add", ["product": "p-0002"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 30_000) { !rig.phone.reachable }
        try #require(!rig.phone.reachable, "the blackout was noticed")
        rig.broker.blackout = false
        rig.run(forMs: 30_000) { rig.outbox == 0 && rig.phone.stats.drains.count == 2 }
        try #require(rig.phone.stats.drains.count == 2, "a second drain: \(rig.phone.stats.drains)")
        #expect(rig.phone.stats.drainConnects.count == 1, "no new connection in the second: \(rig.phone.stats.drainConnects)")
    }

    @Test func aDrainKeepsItsStatementsPreparedCountsEachAttemptOnceAndGoesBackToIdleSizes() throws {
        let rig = try PhoneRig()
        rig.phone.airplane = true
        rig.phone.start()
        var ids: [String] = []
        for k in 1...30 {
            guard case .queued(let id) = rig.phone.act("favorites.add", ["product": .string("p-\(1000 + k)")]) else { Issue.record("not queued"); return }
            ids.append(id)
        }
        // The first actions of the drain parse its statements; the next ones
        // parse none: 30 actions, each with a dozen statements, parse fewer
        // than the cache holds.
        let parsedBefore = rig.phone.db.statementsParsed
        rig.phone.setAirplane(false)
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        #expect(rig.broker.actions.map(\.id) == ids, "each action sent once, in order")
        let parsed = rig.phone.db.statementsParsed - parsedBefore
        #expect(parsed < PhoneStore.phoneStatementCacheCapacity, "the drain's statements are parsed once, not per action: \(parsed) parsed for 30 actions")
        #expect(rig.phone.draining, "the drain's sizes stay a while after the outbox empties")
        rig.run(forMs: 30_000) { !rig.phone.draining }
        // At each telemetry tick the statements not run since the one
        // before go: one run in between stays, an idle phone keeps none.
        rig.phone.forgetUnusedStatements(force: true)
        #expect(rig.phone.db.preparedStatements > 0)
        _ = try rig.phone.db.queryOne("SELECT COUNT(*) AS n FROM outbox")
        rig.phone.forgetUnusedStatements(force: true)
        #expect(rig.phone.db.preparedStatements == 1, "the statement run since the last tick stays")
        rig.phone.forgetUnusedStatements(force: true)
        #expect(rig.phone.db.preparedStatements == 0, "an idle phone keeps none")
        let journal = try rig.phone.db.queryOne("PRAGMA journal_mode")?.string("journal_mode")
        #expect(journal == PhoneStore.idleJournal.lowercased(), "an idle phone's file has no WAL index (\(journal ?? "?"))")
        let attempts = try rig.phone.db.query("SELECT attempts FROM action_log WHERE outcome = 'done'").map { $0.int("attempts") }
        #expect(attempts.count == 30 && attempts.allSatisfy { $0 == 1 }, "each send counted once, before it went: \(attempts)")
    }

    /// A drain is one round trip after another: the turn of the loop that
    /// reads an action's answer confirms it and sends the next action, not
    /// a later turn (each extra turn polled every phone's socket once more
    /// per action drained). Order and once-only stay as they were.
    @Test func theTurnThatReadsAnAnswerConfirmsItAndSendsTheNextAction() throws {
        let rig = try PhoneRig()
        rig.phone.airplane = true
        rig.phone.start()
        var ids: [String] = []
        for k in 1...5 {
            guard case .queued(let id) = rig.phone.act("favorites.add", ["product": .string("p-200\(k)")]) else { Issue.record("not queued"); return }
            ids.append(id)
        }
        rig.phone.setAirplane(false)
        var checked = 0
        let end = Clock.monotonicMillis() + 30_000
        while Clock.monotonicMillis() < end && rig.outbox > 0 {
            try rig.reactor.turn(timeoutCap: 10)
            guard case .sending(let inFlight) = rig.phone.sender, inFlight.count == 1, let sent = inFlight.first,
                  rig.broker.pending.contains(where: { $0.reply.corr == sent }) else {
                rig.broker.sendDue()
                continue
            }
            rig.broker.sendDue()
            guard !rig.broker.pending.contains(where: { $0.reply.corr == sent }) else { continue }
            // The answer is on the phone's socket: the next turn reads it.
            let answered = rig.phone.link.answered
            try rig.reactor.turn(timeoutCap: 1000)
            guard rig.phone.link.answered > answered else { continue }
            checked += 1
            let stillQueued = try rig.phone.db.count("SELECT COUNT(*) AS n FROM outbox WHERE id = $1", .text(sent))
            #expect(stillQueued == 0, "confirmed in the turn that read its answer")
            if let next = rig.phone.head() {
                #expect(rig.phone.sender == .sending([next.id]), "the next action sent in that same turn")
            } else {
                #expect(rig.phone.sender == .idle)
            }
        }
        #expect(rig.outbox == 0)
        #expect(checked == 5, "every answer seen arriving (\(checked))")
        #expect(rig.broker.actions.map(\.id) == ids, "each action sent once, in order")
    }

    @Test func duringACutTheSameIDIsRetriedWithGrowingBackoffAndSentAgainWhenTheNetworkAnswers() throws {
        let rig = try PhoneRig()
        rig.phone.start()
        rig.run(forMs: 200)
        rig.broker.blackout = true
        guard case .queued(let first) = rig.phone.act("favorites.add", ["product": "p-0001"]),
              case .queued(let second) = rig.phone.act("favorites.remove", ["product": "p-0001"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 10_000) { rig.broker.attempts(first) >= 4 }
        #expect(!rig.phone.reachable && !rig.phone.airplane, "a cut the phone cannot see: timeouts")
        #expect(rig.broker.actions.map(\.id) == [first, first, first, first], "the same id, and the second waits behind the first")
        // The phone's send times: the times this loop read them vary by a
        // busy machine's scheduling, more than the backoff's 25 ms.
        let times = rig.broker.actions.map(\.sentAt)
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 - 550 }  // each attempt waits 300 ms + 250 ms of grace
        // Backoff with jitter: at least half of 50, 100, 200 ms (less 1 ms:
        // two clocks in whole milliseconds); at most the 400 ms cap.
        #expect(gaps.count == 3 && gaps[0] >= 24 && gaps[1] >= 49 && gaps[2] >= 99 && gaps.allSatisfy { $0 < 400 + 60 }, "\(gaps)")
        // The network heals: the next probe's answer sends the head at once.
        rig.broker.blackout = false
        rig.run(forMs: 5_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0 && rig.phone.reachable)
        #expect(Set(rig.broker.actions.map(\.id)) == [first, second])
        #expect(rig.broker.actions.last?.id == second)
    }

    @Test func aRefusalRollsBackTheOptimisticStateAndLeavesTheReason() throws {
        let rig = try PhoneRig()
        rig.broker.answer = { request, attempt in
            switch (request.type, request.body["product"]?.string) {
            case ("favorites.add", "p-0404"): return .failure(.notFound("no product with id 'p-0404' in the catalog"))
            case ("orders.place", _) where attempt == 1: return .failure(.unavailable("order is pending: retry with the same id"))
            case ("orders.place", _): return .failure(.conflict("not enough stock: p-0002 (requested 1, available 0)"))
            default: return .success(["status": "confirmed"])
            }
        }
        rig.phone.airplane = true
        rig.phone.start()
        rig.phone.act("favorites.add", ["product": "p-0404"])
        rig.phone.act("favorites.add", ["product": "p-0001"])
        rig.phone.act("orders.cart.add", ["product": "p-0002", "quantity": 2])
        rig.phone.act("orders.place", ["source": "cart", "mode": "buy", "screen": "cart"])
        // Shown at once: two favorites pending, the cart emptied into a pending order.
        #expect(try rig.phone.db.count("SELECT COUNT(*) AS n FROM favorites WHERE pending IS NOT NULL") == 2)
        #expect(try rig.phone.db.count("SELECT COUNT(*) AS n FROM cart") == 0)
        #expect(try rig.phone.db.queryOne("SELECT status FROM orders")?.string("status") == "pending")
        rig.phone.setAirplane(false)
        rig.run(forMs: 5000) { rig.outbox == 0 }
        #expect(try rig.phone.db.query("SELECT product FROM favorites").map { $0.string("product") } == ["p-0001"])
        #expect(try rig.phone.db.queryOne("SELECT quantity FROM cart WHERE product = 'p-0002'")?.int("quantity") == 2, "the cart is back")
        let order = try #require(try rig.phone.db.queryOne("SELECT status, reason FROM orders"))
        #expect(order.string("status") == "rejected" && order.string("reason").contains("not enough stock"))
        let texts = rig.phone.messages().compactMap { $0["text"]?.string }
        #expect(texts.count == 2)
        #expect(texts[0].contains("p-0404") && texts[0].contains("no product"))
        #expect(texts[1].contains("not enough stock"))
        let place = try #require(rig.broker.actions.last)
        #expect(rig.broker.attempts(place.id) == 2, "a 503 is not an answer: the same id again")
    }

    @Test func theThirtyDayTotalCountsQueuedPurchasesAtOnceAndSaysWhenItMayBeStale() throws {
        let rig = try PhoneRig()
        let db = rig.phone.db
        try db.execute("INSERT INTO catalog (id, name, price, currency, category, collection, stock, search) VALUES ('p-0001', 'Lamp', 20, 'USD', 'Personal', 'Dorm', 3, 'lamp')")
        let now = Int64(Clock.nowMillis())
        try db.execute("""
            INSERT INTO orders (id, status, source, mode, screen, items, total, currency, estimated, created_ms)
            VALUES ('old', 'confirmed', 'buy_now', 'buy', 'home', '[]', 500, 'USD', 0, $1), ('recent', 'confirmed', 'buy_now', 'buy', 'home', '[]', 12.5, 'USD', 0, $2),
                   ('refused', 'rejected', 'buy_now', 'buy', 'home', '[]', 99, 'USD', 0, $2)
            """, .int(now - 31 * 86_400_000), .int(now - 86_400_000))
        try db.execute("INSERT INTO parking (id, status, held_ms, checked_in_ms, ended_ms) VALUES ('r1', 'checked_out', $1, $1, $2)",
                       .int(now - 7_200_000), .int(now - 3_000_000))
        rig.phone.airplane = true
        rig.phone.start()
        rig.phone.act("orders.place", ["source": "buy_now", "product": "p-0001", "quantity": 2, "mode": "buy", "screen": "home"])
        let r = rig.phone.spending()
        #expect(r.source == .local)
        // 12.50 + 2 × 20 queued + parking 2 started hours × 1.50.
        #expect(r.body["orders"]?.double == 52.5 && r.body["parking"]?.double == 3 && r.body["total"]?.double == 55.5, "\(r.body)")
        #expect(r.notice?.contains("1 purchase not confirmed yet") == true)
        #expect(r.notice?.contains("not synced") == true)
        try db.setMeta("orders_synced_ms", String(now - 8 * 86_400_000))
        #expect(rig.phone.spending().notice?.contains("may be outdated: last synced 8 days ago") == true)
    }

    @Test func offlineAViewShowsItsSavedCopyAndOnlineOnlyActionsAreRefused() throws {
        let rig = try PhoneRig()
        rig.phone.start()
        rig.phone.save(Phone.key("reservations.levels", ["lot": "central"]), ["levels": ["P1", "P2"]])
        rig.phone.setAirplane(true)
        var shown: ViewResult?
        rig.phone.open("levels", ["lot": "central"]) { shown = $0 }
        rig.run(forMs: 1000) { shown != nil }
        #expect(shown?.source == .saved && shown?.body["levels"] == ["P1", "P2"])
        #expect(shown?.notice?.hasPrefix("offline: showing the copy saved") == true)
        shown = nil
        rig.phone.open("forecast", ["lot": "north"]) { shown = $0 }
        rig.run(forMs: 1000) { shown != nil }
        #expect(shown?.source == ViewResult.Source.none && shown?.notice?.contains("nothing is saved") == true)
        guard case .refused(let error) = rig.phone.act("orders.cancel", ["order": "o-1"]) else { Issue.record("not refused"); return }
        #expect(error.message.contains("needs a connection") && error.message.contains("choice is kept"))
        #expect(try rig.phone.db.meta("draft:orders.cancel") != nil)
    }

    @Test func eventsAreStoredBeforeSendingAndABatchIsResentAsItWas() throws {
        let rig = try PhoneRig()
        rig.phone.airplane = true
        rig.phone.start()
        for _ in 0..<3 { rig.phone.record("view.opened", ["view": "home"]) }
        #expect(rig.phone.telemetryQueued == 5, "session.started, offline.started and three views, stored before any sending")
        // The collector stores the first batch but its answer is lost.
        rig.broker.dropTelemetry = 1
        rig.phone.setAirplane(false)
        // Until the event (both batches answered), with a deadline a loaded machine cannot miss.
        rig.run(forMs: 30_000) { rig.phone.telemetryQueued == 0 }
        #expect(rig.phone.telemetryQueued == 0)
        let batches = rig.broker.seen.filter { $0.type == "telemetry.ingest" }
        try #require(batches.count >= 2)
        #expect(batches[0].id == batches[1].id && batches[0].body == batches[1].body, "the same batch, the same id, the same events")
        let events = batches[0].body["events"]?.array ?? []
        #expect(events.count == 6, "the five queued and offline.ended")
        for e in events {
            #expect(Phone.telemetryNames.contains(e["name"]?.string ?? ""))
            #expect(e["phone"]?.string == "phone-t" && e["session"]?.string == rig.phone.sessionID && e["queued_ms"]?.int != nil)
            #expect(e["offline"]?.bool != nil && e["ts"]?.int != nil && e["user"] != nil)
        }
        // Events recorded while the batch was out went in a later batch.
        #expect(batches.dropFirst(2).contains { $0.id != batches[0].id } || batches.count == 2)
    }

    @Test func aBatchTheCollectorFailsWithA500IsKeptAndSentAgain() throws {
        let rig = try PhoneRig()
        rig.phone.airplane = true
        rig.phone.start()
        rig.phone.record("view.opened", ["view": "home"])
        let queued = rig.phone.telemetryQueued
        rig.broker.failTelemetry = 2
        rig.phone.setAirplane(false)
        rig.run(forMs: 30_000) { rig.phone.telemetryQueued == 0 }
        let batches = rig.broker.seen.filter { $0.type == "telemetry.ingest" }
        try #require(batches.count >= 3, "two 500s, then the batch again: \(batches.count) sent")
        #expect(rig.phone.telemetryQueued == 0, "stored by the third answer")
        #expect(batches[0].id == batches[2].id && batches[0].body == batches[2].body, "the same batch after each 500, nothing dropped")
        #expect((batches[0].body["events"]?.array?.count ?? 0) >= queued)
        #expect(rig.phone.stats.telemetryRejected == 0)
    }

    /// A backoff drawn while the network did not answer (here a sign-in
    /// that timed out, with a 20 s backoff) ends the moment the network
    /// answers again: the queue drains at once, not 10 to 20 s later.
    @Test func aPhoneWhoseNetworkAnswersAgainDrainsAtOnceWhateverBackoffItWasIn() throws {
        let rig = try PhoneRig { s in
            s.backoffBaseMs = 20_000
            s.backoffCapMs = 20_000
        }
        rig.phone.token = nil  // registered, but its session is gone: the sender must log in first
        rig.phone.expiresAt = 0
        rig.broker.blackout = true
        rig.phone.start()
        guard case .queued = rig.phone.act("favorites.add", ["product": "p-0001"]) else { Issue.record("not queued"); return }
        // Until the event: the sign-in timed out and the sender is backing off.
        rig.run(forMs: 30_000) { if case .backingOff = rig.phone.sender { return true } else { return false } }
        guard case .backingOff = rig.phone.sender else { Issue.record("never backed off: \(rig.phone.sender)"); return }
        #expect(!rig.phone.reachable && rig.broker.seen.contains { $0.type == "accounts.login" })
        // The network heals, and something the phone sent is answered.
        rig.broker.blackout = false
        let healed = Clock.monotonicMillis()
        rig.phone.request("sys.health", [:], timeoutMs: 300, anonymous: true) { _ in }
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        let waited = Clock.monotonicMillis() - healed
        #expect(rig.outbox == 0 && rig.phone.reachable)
        #expect(waited < 5_000, "drained \(waited) ms after the network answered; the backoff it was in lasts 10 to 20 s")
    }

    /// A phone that registers never logs in: the registration's answer is
    /// its session, and the first action goes with that token.
    @Test func aRegistrationGivesTheSessionWithoutALogin() throws {
        let rig = try PhoneRig()
        rig.phone.registered = false
        rig.phone.token = nil
        rig.phone.expiresAt = 0
        rig.phone.start()
        guard case .queued(let id) = rig.phone.act("favorites.add", ["product": "p-0001"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        #expect(rig.broker.seen.filter { $0.type == "accounts.register" }.count == 1)
        #expect(!rig.broker.seen.contains { $0.type == "accounts.login" }, "no login after a registration")
        #expect(rig.broker.tokens[id] == "t-registered", "the action went with the registration's token")
        let stored = try #require(try rig.phone.db.queryOne("SELECT registered, user_id FROM session"))
        #expect(stored.int("registered") == 1 && stored.string("user_id") == "u-1")
        #expect(try Keychain(path: rig.dir + "/phone-t.keychain")[.sessionToken] == "t-registered", "the token is in the keychain")
    }

    /// A phone with a session renews it before it ends with
    /// accounts.refresh (its token in the body and on the envelope), and
    /// never logs in again.
    @Test func aSessionIsRefreshedBeforeItEndsNeverReplacedByALogin() throws {
        // Renewed when less than an hour is left: at once, for a token of an hour.
        let rig = try PhoneRig { s in s.refreshBeforeMs = 3_600_000 - 500 }
        rig.phone.token = "t"
        rig.phone.expiresAt = Int64(Clock.nowMillis()) + 3_600_000
        rig.phone.scheduleRefresh()
        rig.phone.start()
        rig.run(forMs: 30_000) { rig.phone.token == "t-refreshed-1" }
        #expect(rig.phone.token == "t-refreshed-1")
        let refresh = try #require(rig.broker.seen.first { $0.type == "accounts.refresh" })
        #expect(refresh.body["token"]?.string == "t" && rig.broker.tokens[refresh.id] == "t")
        guard case .queued(let id) = rig.phone.act("favorites.add", ["product": "p-0001"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        #expect(rig.broker.tokens[id] == "t-refreshed-1")
        #expect(!rig.broker.seen.contains { $0.type == "accounts.login" || $0.type == "accounts.register" })
        #expect(try Keychain(path: rig.dir + "/phone-t.keychain")[.sessionToken] == "t-refreshed-1")
    }

    /// A phone whose token expired while it was offline renews its session
    /// with its refresh token (no envelope token, no password); a refresh
    /// refused with 401 says "sign in again" and the phone logs in with its
    /// student's password, which its file never held.
    @Test func anExpiredSessionIsRenewedWithTheRefreshTokenAndA401SignsInAgain() throws {
        let rig = try PhoneRig()
        rig.phone.token = "t-old"
        rig.phone.refreshToken = "rt1.first"
        rig.phone.expiresAt = Int64(Clock.nowMillis()) - 1_000
        rig.broker.refreshAnswer = { request in
            guard request.body["refresh_token"]?.string == "rt1.first" else { return .failure(.unauthorized("body.refresh_token was used already")) }
            return .success(["token": "t-new", "user": "u-1", "role": "student", "refresh_token": "rt1.second",
                             "expires_at": .int(Int64(Clock.nowMillis()) + 3_600_000)])
        }
        rig.phone.start()
        guard case .queued(let first) = rig.phone.act("favorites.add", ["product": "p-0001"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        let refresh = try #require(rig.broker.seen.first { $0.type == "accounts.refresh" })
        #expect(refresh.body == ["refresh_token": "rt1.first"] && rig.broker.tokens[refresh.id] == nil, "the refresh token alone: \(refresh.body)")
        #expect(rig.broker.tokens[first] == "t-new" && !rig.broker.seen.contains { $0.type == "accounts.login" })
        let keychain = try Keychain(path: rig.dir + "/phone-t.keychain")
        #expect(keychain[.sessionToken] == "t-new" && keychain[.refreshToken] == "rt1.second")

        // The next refresh is refused: sign in again, with the password.
        rig.broker.refreshAnswer = { _ in .failure(.unauthorized("body.refresh_token was revoked: sign in again")) }
        rig.phone.expiresAt = Int64(Clock.nowMillis()) - 1_000
        guard case .queued(let second) = rig.phone.act("favorites.add", ["product": "p-0002"]) else { Issue.record("not queued"); return }
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        let login = try #require(rig.broker.seen.first { $0.type == "accounts.login" })
        let password = try #require(login.body["password"]?.string)
        #expect(password.hasPrefix("pw-") && rig.broker.tokens[second] == "t")
        #expect(rig.phone.messages().contains { ($0["text"]?.string ?? "").hasPrefix("Sign in again: the session could not be renewed") })
        #expect(rig.phone.stats.signInAgain == 1)
        let bytes = try #require(FileManager.default.contents(atPath: rig.dir + "/phone-t.db"))
        #expect(bytes.range(of: Data(password.utf8)) == nil, "the password is not in the phone's file")
    }

    /// A queue of actions for different services goes out at once, one per
    /// service, and the answers that arrive together are confirmed in one
    /// store transaction; the actions of one service still go one after
    /// the other, in order.
    @Test func queuedActionsForDifferentServicesGoTogetherAndTheirAnswersAreConfirmedInOneTransaction() throws {
        let rig = try PhoneRig { $0.sendWindow = 8 }
        rig.broker.delayMs = 100
        rig.phone.airplane = true
        rig.phone.start()
        var ids: [String] = []
        for (type, body) in [("favorites.add", ["product": "p-0001"]), ("orders.cart.add", ["product": "p-0002", "quantity": 1]),
                             ("reservations.car.save", ["lat": 40.4, "lon": -3.7, "level": "P1"]), ("favorites.add", ["product": "p-0003"])] as [(String, JSON)] {
            guard case .queued(let id) = rig.phone.act(type, body) else { Issue.record("\(type) not queued"); return }
            ids.append(id)
        }
        rig.phone.setAirplane(false)
        let before = rig.phone.stats.confirmTransactions
        rig.run(forMs: 30_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        #expect(rig.broker.actions.map(\.id) == ids, "each once, in the order made")
        #expect(rig.broker.maxInFlightActions == 3, "favorites, orders and reservations at once; the second favorite after the first")
        #expect(rig.phone.stats.confirmTransactions - before == 2, "three answers in one transaction, then the second favorite's")
        #expect(try rig.phone.db.count("SELECT COUNT(*) AS n FROM action_log WHERE outcome = 'done'") == 4)
    }
}

/// "Synced" as the student sees it (issue 30): every view says whether all
/// changes are saved or how many wait since when, and the phone keeps what
/// it is synced through.
@Suite("A phone's sync status", .serialized)
struct SyncStatusTests {
    @Test func everyViewSaysWhatWaitsAndTheLastAcknowledgedActionIsKept() throws {
        let rig = try PhoneRig()
        rig.broker.answer = { request, _ in
            switch request.type {
            case "orders.place": return .success(["id": .string(request.id), "status": "confirmed", "total": 40])
            default: return .success([:])
            }
        }
        rig.phone.airplane = true
        rig.phone.start()
        func view(_ name: String) -> ViewResult? {
            var shown: ViewResult?
            rig.phone.open(name) { shown = $0 }
            rig.run(forMs: 5000) { shown != nil }
            return shown
        }
        let before = try #require(view("cart")?.sync)
        #expect(before["synced"] == true && before["waiting"] == 0 && before["waiting_since"] == .null, "\(before)")
        #expect(before["text"]?.string == "All changes saved" && before["synced_through"] == .null)

        guard case .queued(let fav) = rig.phone.act("favorites.add", ["product": "p-0001"]),
              case .queued = rig.phone.act("orders.cart.add", ["product": "p-0002", "quantity": 2]),
              case .queued(let place) = rig.phone.act("orders.place", ["source": "cart", "mode": "buy", "screen": "cart"]) else {
            Issue.record("not queued"); return
        }
        for name in ["cart", "orders", "favorites", "messages"] {
            let sync = try #require(view(name)?.sync, "the \(name) view has no sync status")
            #expect(sync["synced"] == false && sync["waiting"] == 3, "\(name): \(sync)")
            #expect(sync["waiting_since"]?.int != nil, "\(name): \(sync)")
            let text = sync["text"]?.string ?? ""
            #expect(text.hasPrefix("3 changes not saved yet") && text.contains("airplane mode is on"), "\(name): \(text)")
        }
        #expect(rig.phone.state["sync"]?["waiting"] == 3)

        rig.phone.setAirplane(false)
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        let after = try #require(view("cart")?.sync)
        #expect(after["synced"] == true && after["waiting"] == 0 && after["text"]?.string == "All changes saved", "\(after)")
        let through = try #require(after["synced_through"])
        #expect(through["action"]?.string == place && through["type"] == "orders.place", "\(through)")
        #expect(through["made"]?["order"]?["id"]?.string == place && through["made"]?["order"]?["status"] == "confirmed", "\(through)")
        #expect(rig.broker.actions.map(\.id).first == fav)
        // Kept in the phone's file, written with the action's confirmation.
        #expect(try rig.phone.db.meta(Phone.syncedThroughKey)?.contains(place) == true)
    }
}

/// A phone never shows an older product than one it held (issue 30 pt 1):
/// the reply, the saved catalog and the live feed are compared by the
/// catalog's version (its last event's seq), whichever comes first.
@Suite("Versions on a phone's saved products", .serialized)
struct ProductVersionTests {
    static func stock(_ id: String, _ stock: Int64, seq: Int64) -> Envelope {
        var e = Envelope(id: MessageID.make(), type: "catalog.product.stock", kind: .event, ts: 0, src: "catalog",
                         body: ["product": .string(id), "stock": .int(stock)])
        e.seq = seq
        return e
    }

    @Test func anOlderReplyListOrUpdateNeverReplacesANewerCopy() throws {
        let rig = try PhoneRig()
        // What the service answers a read of the product (its stock and version).
        func answer(version: Int64, stock: Int64) {
            rig.broker.queries["catalog.product.get"] = ["id": "p-0001", "name": "Lamp", "stock": .int(stock), "version": .int(version)]
        }
        answer(version: 5, stock: 9)
        rig.phone.start()
        func view() -> ViewResult? {
            var shown: ViewResult?
            rig.phone.open("product", ["id": "p-0001"]) { shown = $0 }
            rig.run(forMs: 5000) { shown != nil }
            return shown
        }
        let first = try #require(view())
        #expect(first.source == .network && first.body["version"] == 5, "\(first.json)")

        // A live update at seq 7 (the stock went to 4), then the service
        // answers a read it made before it: version 6, stock 5.
        rig.phone.applyLive(Self.stock("p-0001", 4, seq: 7))
        #expect(rig.phone.liveStats.applied == 1)
        answer(version: 6, stock: 5)
        let second = try #require(view())
        #expect(second.source == .live && second.body["stock"] == 4 && second.body["version"] == 7, "\(second.json)")
        #expect(rig.phone.savedProduct("p-0001")?["version"] == 7)

        // The same update again (through the other broker), and an older one.
        rig.phone.applyLive(Self.stock("p-0001", 4, seq: 7))
        rig.phone.applyLive(Self.stock("p-0001", 8, seq: 6))
        #expect(rig.phone.liveStats.duplicates == 1 && rig.phone.liveStats.stale == 1)
        #expect(rig.phone.savedProduct("p-0001")?["stock"] == 4)

        // A newer answer replaces it.
        answer(version: 8, stock: 3)
        let third = try #require(view())
        #expect(third.source == .network && third.body["stock"] == 3)
        #expect(rig.phone.productVersion("p-0001") == 8)
        // And a live update older than that answer is dropped.
        rig.phone.applyLive(Self.stock("p-0001", 7, seq: 8))
        #expect(rig.phone.savedProduct("p-0001")?["stock"] == 3 && rig.phone.liveStats.duplicates == 2)
    }

    /// A catalog download lost to a busy service (503) is tried again by
    /// the phone itself, with a backoff, not only when its network comes
    /// back: an idle phone ends with its catalog.
    @Test func aCatalogDownloadThatFailedIsTriedAgainByItself() throws {
        let rig = try PhoneRig()
        rig.broker.queries["catalog.products.list"] = [
            "products": [["id": "p-0003", "name": "Cup", "price": ["value": 3, "currency": "USD"], "category": "Study",
                          "collection": "Desk", "stock": 5, "version": 4]], "total": 1]
        rig.broker.failQueries["catalog.products.list"] = 2
        rig.phone.start()
        rig.phone.prefetchCatalog(force: true)
        rig.run(forMs: 60_000) { rig.phone.catalogAgeMs != nil }
        #expect(rig.phone.catalogAgeMs != nil, "the catalog was saved after two failures")
        #expect(rig.broker.seen.filter { $0.type == "catalog.products.list" }.count == 3)
        #expect(rig.phone.catalogFailures == 0)
    }

    @Test func theSavedCatalogKeepsAStockNewerThanTheListItSaves() throws {
        let rig = try PhoneRig()
        let db = rig.phone.db
        try db.execute("INSERT INTO catalog (id, name, price, currency, category, collection, stock, search, version) VALUES ('p-0002', 'Pen', 2, 'USD', 'Study', 'Desk', 10, 'pen', 3)")
        rig.phone.start()
        rig.phone.applyLive(Self.stock("p-0002", 1, seq: 12))
        #expect(try db.queryOne("SELECT stock, version FROM catalog WHERE id = 'p-0002'").map { [$0.int("stock"), $0.int("version")] } == [1, 12])
        // The list the service gave before that update: version 11, stock 2.
        rig.broker.queries["catalog.products.list"] = [
            "products": [["id": "p-0002", "name": "Pen", "price": ["value": 2, "currency": "USD"], "category": "Study",
                          "collection": "Desk", "stock": 2, "version": 11],
                         ["id": "p-0003", "name": "Cup", "price": ["value": 3, "currency": "USD"], "category": "Study",
                          "collection": "Desk", "stock": 5, "version": 4]], "total": 2]
        rig.phone.fetchCatalogPage(offset: 0, rows: [])
        rig.run(forMs: 5000) { (try? db.count("SELECT COUNT(*) AS n FROM catalog WHERE id = 'p-0003'")) == 1 }
        #expect(try db.queryOne("SELECT stock, version FROM catalog WHERE id = 'p-0002'").map { [$0.int("stock"), $0.int("version")] } == [1, 12],
                "the newer stock stays")
        #expect(try db.queryOne("SELECT stock, version FROM catalog WHERE id = 'p-0003'").map { [$0.int("stock"), $0.int("version")] } == [5, 4])
    }
}
