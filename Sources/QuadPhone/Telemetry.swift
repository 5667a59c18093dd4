import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

/// The events of the business questions, each stored in the phone's file
/// before it is sent, then sent in batches to `telemetry.ingest` while the
/// phone is online. A batch is fixed when it is formed (its envelope id and
/// its events), so a retry sends the same batch under the same id; the
/// collector deduplicates by event id, so an event is counted once however
/// often it travels. Any answer removes the batch from the queue; events
/// the collector rejects are logged.
///
/// Event shape: `{id, phone, user, session, name, ts, offline, queued_ms, props}`.
extension Phone {
    /// Names and their props, as the collector and analytics expect them.
    static let telemetryNames: Set<String> = [
        "view.opened", "search.performed", "forecast.opened", "spot.search", "nearby.opened", "nearby.chosen",
        "favorite.added", "purchase.made", "hold.created", "checkin.done", "offline.started", "offline.ended",
        "action.synced", "session.started", "session.ended", "app.crash", "arrival.changed", "nearby.confirmed", "mark.set", "mark.cleared",
    ]

    /// Records one event: stored at once, sent later.
    package func record(_ name: String, _ props: JSON, session: String? = nil) {
        assert(Phone.telemetryNames.contains(name), "unknown telemetry event \(name)")
        guard recording else { return }
        let id = MessageID.make()
        do {
            try db.execute("""
                INSERT INTO telemetry (id, name, ts, offline, user_id, session, props) VALUES ($1, $2, $3, $4, $5, $6, $7)
                """, .text(id), .text(name), .int(now), .of(!isOnline), .of(user), .text(session ?? sessionID), .text(props.text))
            if let n = telemetryCount { telemetryCount = n + 1 }
        } catch {
            telemetryCount = nil
            Log.error("edge/\(self.name)", "cannot store telemetry event \(name): \(error)")
        }
    }

    package var telemetryQueued: Int {
        if let n = telemetryCount { return n }
        guard let n = try? db.count("SELECT COUNT(*) AS n FROM telemetry") else { return 0 }
        telemetryCount = n
        return n
    }

    func scheduleTelemetry() {
        agenda.repeating(every: settings.telemetryEveryMs) { [weak self] in
            guard let self, !self.stopped else { return false }
            self.forgetUnusedStatements()
            self.flushTelemetry()
            return true
        }
    }

    /// Sends the oldest batch, unless one is in flight, the radio is off, or
    /// a backoff is running (`force` cuts it short: the network is back).
    package func flushTelemetry(force: Bool = false) {
        guard telemetryInFlight == nil, radioOn, !stopped else { return }
        guard force || Clock.monotonicMillis() >= telemetryRetryAt else { return }
        guard telemetryQueued > 0 else { return }
        guard let batch = formBatch() else {
            telemetryCount = nil  // counted one that is not there (a transaction rolled back): count again
            return
        }
        let rows = (try? db.query("SELECT * FROM telemetry WHERE batch = $1 ORDER BY ts, id", .text(batch))) ?? []
        guard !rows.isEmpty else { return }
        // Sent as it was first sent. A new batch goes without a session only
        // when none of its events was recorded under one (those wait for the
        // session to be renewed: sent without, the collector would keep them
        // as no one's).
        let anonymous: Bool
        if let sent = telemetryBatchSent, sent.batch == batch {
            anonymous = sent.anonymous
            if !anonymous && !hasValidToken { return }
        } else {
            anonymous = !hasValidToken
            if anonymous && rows.contains(where: { $0.optionalString("user_id") != nil }) { return }
            telemetryBatchSent = (batch, anonymous)
        }
        let formed = Phone.millis(ofUUIDv7: batch) ?? now
        let events: [JSON] = rows.map { r in
            [
                "id": .string(r.string("id")), "phone": .string(name), "user": r.optionalString("user_id").map { .string($0) } ?? .null,
                "session": .string(r.string("session")), "name": .string(r.string("name")), "ts": .int(r.int("ts")),
                "offline": .bool(r.int("offline") != 0), "queued_ms": .int(max(0, formed - r.int("ts"))),
                "props": .stored(r.string("props")),
            ]
        }
        telemetryInFlight = batch
        stats.telemetrySent += events.count
        request("telemetry.ingest", ["events": .array(events)], id: batch, timeoutMs: settings.actionTimeoutMs,
                anonymous: anonymous) { [weak self] result in
            guard let self, self.telemetryInFlight == batch else { return }
            self.telemetryInFlight = nil
            switch result {
            // Any 5xx is the collector's failure, not the events' (a 500 on
            // a full disk, before the store said 503 for it, lost the
            // batches it answered): they stay queued and go again, under
            // the same batch id, after the backoff.
            case .success(let reply) where (reply.quadError?.status ?? 0) < 500:
                self.settleBatch(batch, reply: reply, count: events.count)
                self.telemetryAttempt = 0
                self.telemetryRetryAt = 0
                if self.telemetryQueued > 0 { self.agenda.after(0) { self.flushTelemetry() } }
            default:
                let delay = self.settings.backoff.delay(attempt: self.telemetryAttempt, using: &self.rng)
                self.telemetryAttempt += 1
                self.telemetryRetryAt = Clock.monotonicMillis() + delay
                // The retry has a timer of its own: the periodic flush may
                // be a minute away, and the network may have answered again
                // (and found the batch still waiting) before this backoff ended.
                self.agenda.after(delay) { [weak self] in self?.flushTelemetry() }
            }
        }
    }

    /// The batch to send: one formed earlier and not answered yet, or a new
    /// one of the oldest unbatched events.
    func formBatch() -> String? {
        if let open = try? db.queryOne("SELECT batch FROM telemetry WHERE batch IS NOT NULL ORDER BY ts LIMIT 1") {
            return open.string("batch")
        }
        let batch = MessageID.make()
        let n = (try? db.execute("""
            UPDATE telemetry SET batch = $1 WHERE id IN (SELECT id FROM telemetry WHERE batch IS NULL ORDER BY ts, id LIMIT $2)
            """, .text(batch), .int(Int64(settings.telemetryBatch)))) ?? 0
        return n > 0 ? batch : nil
    }

    func settleBatch(_ batch: String, reply: Envelope, count: Int) {
        // The batch's id is bound to whoever first sent it: signed in now,
        // or with another key, the phone is another caller. Its events go
        // again in a new batch; the collector stores each event id once.
        if let error = reply.quadError, error.status == 409, error.details["reason"]?.string == "id_taken" {
            _ = try? db.execute("UPDATE telemetry SET batch = NULL WHERE batch = $1", .text(batch))
            Log.info("edge/\(name)", "telemetry batch \(batch) was first sent by another caller (before a sign-in): its \(count) events go again in a new batch")
            return
        }
        if let removed = try? db.execute("DELETE FROM telemetry WHERE batch = $1", .text(batch)), let n = telemetryCount, n >= removed {
            telemetryCount = n - removed
        } else {
            telemetryCount = nil
        }
        stats.telemetryAnswers += 1
        lastTelemetryAnswerMs = Clock.monotonicMillis()
        if let error = reply.quadError {
            stats.telemetryRejected += count
            Log.error("edge/\(name)", "telemetry batch \(batch) of \(count) events refused: \(error)")
            return
        }
        stats.telemetryAccepted += Int(reply.body["accepted"]?.int ?? 0)
        stats.telemetryDuplicate += Int(reply.body["duplicate"]?.int ?? 0)
        let rejected = reply.body["rejected"]?.array ?? []
        stats.telemetryRejected += rejected.count
        if !rejected.isEmpty {
            Log.error("edge/\(name)", "telemetry: \(rejected.count) events rejected by the collector: \(JSON.array(Array(rejected.prefix(5))).text)")
        }
    }

    /// The Unix milliseconds at the front of a UUIDv7.
    static func millis(ofUUIDv7 id: String) -> Int64? {
        let hex = id.replacingOccurrences(of: "-", with: "").prefix(12)
        return hex.count == 12 ? Int64(hex, radix: 16) : nil
    }
}
