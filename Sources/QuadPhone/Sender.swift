import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

/// What starts the sender.
enum Trigger: String {
    case actionAdded, phoneStarted
    /// The radio is on again (airplane mode off, signal back): a waiting
    /// action goes at once.
    case networkBack
    /// An answer came after timeouts: the network is back. A backoff after
    /// a timeout ends at once; one after a 503/504 (the network answered,
    /// the service was busy) runs its course, so a busy service is not
    /// pressed harder.
    case reachable
}

/// The outbox and its one sender. An action is written to the outbox with
/// its envelope id and its optimistic update in one transaction, then the
/// sender drains the outbox in order, in batches of at most one action per
/// service (so each service sees a phone's actions in the order they were
/// made), the answers that arrive together confirmed in one transaction:
///
/// - idle → sending(ids) when there is an action and a radio;
/// - sending → idle when every action of the batch is settled (a reply
///   confirms, a refusal rolls back and leaves a message), then the next;
/// - sending → backingOff after a timeout or a 503/504: the same action, the
///   same id, after an exponential backoff with jitter and a cap;
/// - backingOff → sending when the backoff ends or the network comes back
///   (or answers again after the backoff began while it did not).
///
/// Every trigger (an action added, the network back, the phone started)
/// only moves an idle or backing-off sender, so no action is ever sent twice
/// at once.
extension Phone {
    /// The user does something that changes something.
    @discardableResult
    package func act(_ type: String, _ body: JSON) -> ActOutcome {
        if let reason = Actions.onlineOnly[type] {
            guard isOnline else {
                stats.refused[type, default: 0] += 1
                try? db.setMeta("draft:\(type)", body.text)
                return .refused(.unavailable("\(reason). Your choice is kept; try again when you are online."))
            }
            return .sent(sendNow(type, body))
        }
        let id = MessageID.make()
        let now = self.now
        logAct(id, type, body)
        do {
            try db.transaction {
                let (send, undo, after) = try Actions.prepare(db, id: id, type: type, body: body, now: now)
                try db.execute("""
                    INSERT INTO outbox (id, type, body, created_ms, offline, undo, after_id) VALUES ($1, $2, $3, $4, $5, $6, $7)
                    """, .text(id), .text(type), .text(send.text), .int(now), .of(!isOnline), .text(undo.text), .of(after))
                try db.execute("INSERT INTO action_log (id, type, created_ms, outcome, offline) VALUES ($1, $2, $3, 'pending', $4)",
                               .text(id), .text(type), .int(now), .of(!isOnline))
            }
            outboxCount = outboxCount.map { $0 + 1 }
        } catch let error as QuadError {
            return .refused(error)
        } catch {
            return .refused(.internal("the phone could not store the action: \(error)"))
        }
        stats.created += 1
        stats.maxQueue = max(stats.maxQueue, queueLength)
        trigger(.actionAdded)
        return .queued(id)
    }

    /// An online-only action, sent at once; its answer becomes a message.
    func sendNow(_ type: String, _ body: JSON) -> String {
        let id = MessageID.make()
        logAct(id, type, body)
        request(type, body, id: id, timeoutMs: settings.actionTimeoutMs) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let reply):
                if let error = reply.quadError { self.leaveMessage(action: id, type: type, body: body, error: error) }
                else {
                    try? self.db.setMeta("draft:\(type)", nil)
                    self.logAck(id, type, reply: reply.body)
                    // An orders.cancel answers the order cancelled: the phone's copy takes it (OrderVersions.swift).
                    if type == "orders.cancel" { _ = try? SavedOrders.take(self.db, reply.body) }
                }
            case .failure(let failure):
                self.leaveMessage(action: id, type: type, body: body, error: Phone.error(failure))
            }
        }
        return id
    }

    package var queueLength: Int {
        if let n = outboxCount { return n }
        guard let n = try? db.count("SELECT COUNT(*) AS n FROM outbox") else { return 0 }
        outboxCount = n
        return n
    }

    func head() -> QueuedAction? {
        (try? db.queryOne("SELECT * FROM outbox ORDER BY seq LIMIT 1")).flatMap { $0 }.map(QueuedAction.init)
    }

    func trigger(_ why: Trigger) {
        switch sender {
        case .idle:
            pump()
        case .backingOff(let timer) where why == .networkBack || (why == .reachable && backingOffAfterTimeout):
            agenda.cancel(timer)
            sender = .idle
            pump()
        default:
            break  // already sending, signing in, or waiting out a backoff
        }
    }

    /// Sends the head of the outbox, if the phone can. `prepared` is a batch
    /// whose attempts were already counted in the transaction that confirmed
    /// the batch before it (``confirmAnswers()``): it goes at once.
    func pump(prepared: [QueuedAction]? = nil) {
        guard sender == .idle else { return }
        if let prepared, !prepared.isEmpty {
            transmit(prepared)
            return
        }
        guard let action = head() else {
            idleSoon()
            if let start = stats.drainStartMs {
                let ms = Clock.monotonicMillis() - start
                stats.drains.append(ms)
                if stats.drainStartWithoutSession { stats.drainsWithoutSession.append(ms) }
                stats.drainCauses.append(DrainCause(ms: ms, sent: stats.drainSent, backoffs: stats.drainBackoffs))
                if stats.drainConnectPending, let c = link.connectMs { stats.drainConnects.append(c) }
                stats.drainConnectPending = false
                stats.drainStartMs = nil
            }
            onDrained(self)
            return
        }
        guard radioOn else { return }  // the network-back trigger starts it again
        guard hasValidToken else {
            sender = .signingIn
            signIn { [weak self] error in
                guard let self else { return }
                self.sender = .idle
                if let error, error.status < 500, error.status != 401, error.status != 429 {  // 429: accounts is busy; the backoff waits
                    Log.error("edge/\(self.name)", "cannot sign in: \(error)")
                }
                guard let error else {
                    self.signInAttempts = 0
                    self.pump()
                    return
                }
                // Its own count, so a busy accounts (429: its hash budget or
                // the throttle) sees fewer and fewer tries, never sooner
                // than the retry_after_ms it asked for.
                self.signInAttempts += 1
                let asked = error.details["retry_after_ms"]?.int ?? 0
                self.backOff(action, why: error.message, attempt: self.signInAttempts - 1, atLeastMs: asked)
            }
            return
        }
        let batch = sendable(from: action)
        // One transaction for the batch's attempt counts.
        _ = try? db.transaction { try countAttempts(batch) }
        transmit(batch)
    }

    /// Counts one more attempt for each action of `batch`, inside the
    /// caller's transaction, before the batch is sent: a count written
    /// after the send could be lost to a kill between the two.
    func countAttempts(_ batch: [QueuedAction]) throws {
        for a in batch {
            try db.execute("UPDATE outbox SET attempts = attempts + 1 WHERE id = $1", .text(a.id))
            try db.execute("UPDATE action_log SET attempts = attempts + 1 WHERE id = $1", .text(a.id))
        }
    }

    /// Sends a batch whose attempts are counted.
    func transmit(_ batch: [QueuedAction]) {
        drainMode(true)
        sender = .sending(Set(batch.map(\.id)))
        answers = []
        unanswered = batch.count
        metrics?.actionsSent(batch)
        if stats.drainStartMs != nil { stats.drainSent += batch.count }
        for a in batch {
            request(a.type, a.body, id: a.id, timeoutMs: settings.actionTimeoutMs) { [weak self] result in
                self?.settle(a, result)
            }
        }
    }

    /// While the sender works through the outbox, the phone's connection
    /// keeps a larger page cache (the outbox, action log and telemetry
    /// pages were read again from the OS for every action) and its journal
    /// PhoneStore.drainJournal (one commit per action, without fsync). Both
    /// go back to the idle ones once the outbox is empty, so an idle phone
    /// costs what it did (PhoneStore.open). Its prepared statements stay
    /// (no statement is running between actions, which a change of the
    /// journal mode needs): emptying the cache at each switch made every
    /// drain parse its statements again.
    func drainMode(_ on: Bool) {
        guard draining != on else { return }
        draining = on
        // The switch itself without fsync: synchronous is OFF whenever the
        // journal mode changes (a checkpoint into the file going idle, the
        // header's rollback transaction going to WAL).
        _ = try? db.executeScript(on
            ? "PRAGMA cache_size=-\(PhoneStore.drainCacheKiB); PRAGMA journal_mode=\(PhoneStore.drainJournal); PRAGMA synchronous=\(PhoneStore.drainSynchronous)"
            : "PRAGMA synchronous=\(PhoneStore.idleSynchronous); PRAGMA journal_mode=\(PhoneStore.idleJournal); PRAGMA cache_size=-\(PhoneStore.idleCacheKiB)")
    }

    /// A phone keeps the statements it uses, not those it used once: every
    /// ``statementsKeptMs`` (checked at its telemetry ticks), the
    /// statements not run since the time before are finalized. An idle
    /// phone keeps none, or the one or two something runs every few
    /// seconds; a phone in use parses none twice. (Forgetting them all
    /// after five quiet seconds, as before, never happened on a phone that
    /// ran any statement every few seconds: an idle phone online on the
    /// bench's stack kept all 32, 214 KiB a phone instead of 164.)
    func forgetUnusedStatements(force: Bool = false) {
        let at = Clock.monotonicMillis()
        guard force || at - statementsForgotMs >= Phone.statementsKeptMs else { return }
        statementsForgotMs = at
        db.dropStatements(unusedSince: statementMark)
        statementMark = db.statementMark
    }
    static let statementsKeptMs: Int64 = 10_000

    /// Goes back to the idle sizes and journal once the outbox has stayed
    /// empty for `idleAfterMs`, not at once: switching the journal costs a
    /// checkpoint and the making of the WAL and its index, and a phone in
    /// use (a campus day) empties its outbox after nearly every action;
    /// switching twice per action slowed the 200-phone day's drain after
    /// reconnect from p95 0.5 s to 2 s on the same machine.
    func idleSoon() {
        guard draining, idleTimer == nil else { return }
        idleTimer = agenda.after(settings.idleAfterMs) { [weak self] in
            guard let self else { return }
            self.idleTimer = nil
            guard self.sender == .idle, self.queueLength == 0 else { return }
            self.drainMode(false)
        }
    }

    /// The actions sent together: the head of the outbox and, behind it,
    /// the next ones as long as each is for a service not in the batch yet,
    /// at most `sendWindow`. One in flight per service: each service gets a
    /// phone's actions in the order they were made (a hold before its
    /// check-in, a cart line before the order placed from the cart),
    /// whatever its workers; different services do not depend on each
    /// other's order.
    func sendable(from head: QueuedAction) -> [QueuedAction] {
        guard settings.sendWindow > 1 else { return [head] }
        let rows = (try? db.query("SELECT * FROM outbox ORDER BY seq LIMIT $1", .int(Int64(settings.sendWindow)))) ?? []
        var batch: [QueuedAction] = []
        var services: Set<Substring> = []
        for a in rows.map(QueuedAction.init) {
            let service = a.type.split(separator: ".", maxSplits: 1).first ?? Substring(a.type)
            guard !services.contains(service) else { break }
            services.insert(service)
            batch.append(a)
        }
        return batch.first?.id == head.id ? batch : [head]
    }

    /// An answer (or a failure) of an action in flight. The answer that
    /// settles the batch is confirmed at once, and the next batch sent, in
    /// the same turn of the loop that read it: a drain is one round trip
    /// after another, and waiting for the next turn (one more poll of every
    /// phone's socket) was part of each one. While some of the batch is
    /// still out, the answers that arrive together are confirmed together,
    /// in one store transaction, on the next turn of the loop (or at once,
    /// with the rest, if the last of the batch is read first); once every
    /// action of the batch is settled, the sender goes on (or backs off).
    func settle(_ action: QueuedAction, _ result: Result<Envelope, LinkFailure>) {
        guard case .sending(let ids) = sender, ids.contains(action.id), !answers.contains(where: { $0.0.id == action.id }) else { return }
        answers.append((action, result))
        unanswered -= 1
        if unanswered == 0 {
            confirmAnswers()
            return
        }
        guard confirmTimer == nil else { return }
        confirmTimer = agenda.after(0) { [weak self] in
            self?.confirmTimer = nil
            self?.confirmAnswers()
        }
    }

    func confirmAnswers() {
        agenda.cancel(confirmTimer)
        confirmTimer = nil
        guard case .sending = sender, !answers.isEmpty else { return }
        let arrived = answers.sorted { $0.0.seq < $1.0.seq }
        answers = []
        var retry: (QueuedAction, String, Bool)?
        stats.confirmTransactions += 1
        var next: [QueuedAction] = []
        let committed = (try? db.transaction { () throws -> Void in
            for (action, result) in arrived {
                switch result {
                case .failure(.offline):
                    break  // stays queued; the network-back trigger sends it
                case .failure(let failure):
                    if retry == nil { retry = (action, "\(failure)", true) }
                case .success(let reply):
                    if let error = reply.quadError {
                        switch error.status {
                        case 401 where token == nil && authRetries < 3:
                            authRetries += 1  // the token expired: sign in again, same id
                        case 503, 504:
                            // No worker took it, or the outcome is not known yet
                            // (an order still being placed): the same id again.
                            if retry == nil { retry = (action, error.message, false) }
                        default:
                            reject(action, error)
                        }
                    } else {
                        finish(action, reply: reply.body)
                    }
                }
            }
            // The batch is settled and the sender goes on: the next batch's
            // attempts are counted in this same transaction, one commit per
            // action drained instead of two. A savepoint of its own: a count
            // that fails leaves the confirmations above committed, and the
            // next batch goes through pump()'s own transaction.
            if retry == nil, pendingRetry == nil, unanswered == 0, radioOn, hasValidToken, let action = head() {
                let batch = sendable(from: action)
                next = (try? db.transaction { () throws -> [QueuedAction] in try countAttempts(batch); return batch }) ?? []
            }
        }) != nil
        if let retry { pendingRetry = pendingRetry ?? retry }
        guard unanswered == 0 else { return }
        sender = .idle
        if let (action, why, afterTimeout) = pendingRetry {
            pendingRetry = nil
            backOff(action, why: why, afterTimeout: afterTimeout)
        } else {
            pump(prepared: committed ? next : nil)
        }
    }

    /// Waits before the same action goes again. A backoff that began after
    /// a timeout, or while the phone could not reach the network, ends the
    /// moment the network answers again (``trigger(_:)`` with `.reachable`)
    /// or the radio comes back (`.networkBack`): a phone whose connection
    /// returns never waits out a delay it drew while cut off.
    func backOff(_ action: QueuedAction, why: String, afterTimeout: Bool = false, attempt: Int? = nil, atLeastMs: Int64 = 0) {
        backingOffAfterTimeout = afterTimeout || !reachable || !radioOn
        let attempts = (try? db.queryOne("SELECT attempts FROM outbox WHERE id = $1", .text(action.id))?.int("attempts")) ?? 1
        _ = try? db.execute("UPDATE outbox SET last_error = $2 WHERE id = $1", .text(action.id), .text(why))
        let delay = max(atLeastMs, settings.backoff.delay(attempt: attempt ?? Int(max(0, attempts - 1)), using: &rng))
        if stats.drainStartMs != nil { stats.drainBackoffs += 1 }
        sender = .backingOff(agenda.after(delay) { [weak self] in
            guard let self, case .backingOff = self.sender else { return }
            self.sender = .idle
            self.pump()
        })
    }

    /// A reply: the action is done; the phone's copy takes the service's values.
    func finish(_ action: QueuedAction, reply: JSON) {
        let now = self.now
        authRetries = 0
        do {
            try db.transaction {
                try Actions.confirm(db, action, reply: reply)
                try db.execute("DELETE FROM outbox WHERE id = $1", .text(action.id))
                try db.execute("UPDATE action_log SET outcome = 'done', finished_ms = $2, cart = $3 WHERE id = $1",
                               .text(action.id), .int(now), .of(Actions.answeredCart(action, reply: reply)))
                try db.setMeta("last_sync", String(now))
                try db.setMeta(Phone.syncedThroughKey, Phone.syncedThrough(action, reply: reply, at: now).text)
            }
        } catch {
            Log.error("edge/\(name)", "cannot record the reply to \(action.type) \(action.id): \(error)")
        }
        logAck(action.id, action.type, reply: reply)
        outboxCount = nil
        lastSyncMs = now
        stats.done += 1
        metrics?.action("acknowledged", action.type)
        record("action.synced", ["action": .string(action.type), "waited_ms": .int(max(0, now - action.createdMs)), "offline": .bool(action.offline)])
        if action.type == "reservations.hold", let r = reply["reservation"], let lot = r["lot"]?.string, let level = r["level"]?.string {
            // Created when the service made it: its lot and level are known then.
            record("hold.created", ["lot": .string(lot), "level": .string(level)])
        }
    }

    /// A refusal: the optimistic update is rolled back, the steps queued
    /// after it on the same reservation are dropped, and the user gets a
    /// message with the service's reason.
    func reject(_ action: QueuedAction, _ error: QuadError) {
        let now = self.now
        authRetries = 0
        var dropped: [QueuedAction] = []
        do {
            try db.transaction {
                try Actions.rollback(db, action, error: error)
                try db.execute("DELETE FROM outbox WHERE id = $1", .text(action.id))
                try db.execute("UPDATE action_log SET outcome = 'rejected', finished_ms = $2, code = $3, reason = $4 WHERE id = $1",
                               .text(action.id), .int(now), .text(error.code.wire), .text(error.message))
                try db.setMeta("last_sync", String(now))
                if let reservation = Actions.reservation(of: action) {
                    dropped = try db.query("SELECT * FROM outbox WHERE after_id = $1 AND seq > $2 ORDER BY seq", .text(reservation), .int(action.seq))
                        .map(QueuedAction.init)
                    let why = "not sent: \(Actions.describe(action.type, action.body).lowercased()) was refused (\(error.message))"
                    for d in dropped {
                        try db.execute("DELETE FROM outbox WHERE id = $1", .text(d.id))
                        try db.execute("UPDATE action_log SET outcome = 'rejected', finished_ms = $2, code = 'dropped', reason = $3 WHERE id = $1",
                                       .text(d.id), .int(now), .text(why))
                    }
                }
            }
        } catch {
            Log.error("edge/\(name)", "cannot roll back \(action.type) \(action.id): \(error)")
        }
        outboxCount = nil
        lastSyncMs = now
        stats.rejected += 1 + dropped.count
        metrics?.action("failed", action.type)
        for d in dropped { metrics?.action("failed", d.type) }
        leaveMessage(action: action.id, type: action.type, body: action.body, error: error)
    }

    func leaveMessage(action: String, type: String, body: JSON, error: QuadError) {
        let text = "\(Actions.describe(type, body)) was not accepted: \(error.message)"
        _ = try? db.execute("INSERT INTO messages (ts, action, type, code, status, reason, text) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        .int(now), .text(action), .text(type), .text(error.code.wire), .int(Int64(error.status)), .text(error.message), .text(text))
        onMessage(self, ["action": .string(action), "type": .string(type), "code": .string(error.code.wire), "text": .string(text)])
    }

    /// The messages left for the user, oldest first.
    package func messages(limit: Int = 100) -> [JSON] {
        ((try? db.query("SELECT * FROM messages ORDER BY seq DESC LIMIT $1", .int(Int64(limit)))) ?? []).reversed().map { r in
            [
                "ts": .int(r.int("ts")), "action": .string(r.string("action")), "type": .string(r.string("type")),
                "code": .string(r.string("code")), "status": .int(r.int("status")), "reason": .string(r.string("reason")),
                "text": .string(r.string("text")),
            ]
        }
    }
}
