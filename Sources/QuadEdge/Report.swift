import Foundation
import QuadStore
import QuadWire
import QuadPhone
import QuadPhoneKit

/// The campus day's account of every action, from the phones' own files:
/// each action made since the start is done, rejected with a reason, or
/// still pending; nothing else.
enum Report {
    /// The `q` quantile of `sorted` (ascending), null when it is empty.
    static func percentile(_ q: Double, of sorted: [Int64]) -> JSON {
        sorted.isEmpty ? .null : .int(sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))])
    }

    static func make(_ fleet: Fleet, since: Int64, final: Bool, day: CampusDay?) -> JSON {
        var byType: [String: [String: Int64]] = [:]
        var reasons: [String: (type: String, code: String, example: String, count: Int64)] = [:]
        var created: Int64 = 0, done: Int64 = 0, rejected: Int64 = 0, pending: Int64 = 0
        var maxQueue = 0
        var drains: [Int64] = []
        var drainsWithoutSession: [Int64] = []
        var drainCauses: [DrainCause] = []
        var drainConnects: [Int64] = []
        var reads: [String: Int] = [:]
        var readsByView: [String: [String: Int]] = [:]
        var refused: [String: Int] = [:]
        var t = (sent: 0, accepted: 0, duplicate: 0, rejected: 0, queued: 0, answers: 0)
        var images = ImageStats()
        var rentals: [String: Int64] = [:]
        var returns: [String: Int64] = [:]
        var lateDays: Int64 = 0
        var edits = CartEdits()
        for p in fleet.phones {
            edits.add(p.db, since: since)
            images.add(p.images.stats)
            for r in (try? p.db.query("SELECT status, COUNT(*) AS n FROM orders WHERE mode = 'rent' AND created_ms >= $1 GROUP BY status", .int(since))) ?? [] {
                rentals[r.string("status"), default: 0] += r.int("n")
            }
            for r in (try? p.db.query("SELECT status, COUNT(*) AS n, COALESCE(SUM(late_days), 0) AS late FROM returns GROUP BY status")) ?? [] {
                returns[r.string("status"), default: 0] += r.int("n")
                lateDays += r.int("late")
            }
            for r in (try? p.db.query("""
                SELECT type, outcome, COUNT(*) AS n FROM action_log WHERE created_ms >= $1 GROUP BY type, outcome
                """, .int(since))) ?? [] {
                let n = r.int("n")
                byType[r.string("type"), default: [:]][r.string("outcome"), default: 0] += n
                created += n
                switch r.string("outcome") {
                case "done": done += n
                case "rejected": rejected += n
                default: pending += n
                }
            }
            for r in (try? p.db.query("SELECT type, code, reason FROM action_log WHERE outcome = 'rejected' AND created_ms >= $1", .int(since))) ?? [] {
                let pattern = r.string("type") + " " + r.string("code") + " " + Report.pattern(r.string("reason"))
                if let e = reasons[pattern] { reasons[pattern] = (e.type, e.code, e.example, e.count + 1) } else {
                    reasons[pattern] = (r.string("type"), r.string("code"), r.string("reason"), 1)
                }
            }
            maxQueue = max(maxQueue, p.stats.maxQueue)
            drains += p.stats.drains
            drainsWithoutSession += p.stats.drainsWithoutSession
            drainCauses += p.stats.drainCauses
            drainConnects += p.stats.drainConnects
            for (k, v) in p.stats.reads {
                let parts = k.split(separator: "/", maxSplits: 1).map(String.init)
                reads[parts.last ?? k, default: 0] += v
                readsByView[parts.first ?? k, default: [:]][parts.last ?? k, default: 0] += v
            }
            for (k, v) in p.stats.refused { refused[k, default: 0] += v }
            t.sent += p.stats.telemetrySent
            t.accepted += p.stats.telemetryAccepted
            t.duplicate += p.stats.telemetryDuplicate
            t.rejected += p.stats.telemetryRejected
            t.answers += p.stats.telemetryAnswers
            t.queued += p.telemetryQueued
        }
        let outbox = Int64(fleet.phones.reduce(0) { $0 + $1.queueLength })
        drains.sort()
        drainsWithoutSession.sort()
        drainConnects.sort()
        func pct(_ q: Double, _ drains: [Int64]) -> JSON { Report.percentile(q, of: drains) }
        let rejectedList: [JSON] = reasons.values.sorted { $0.count > $1.count }.map {
            ["type": .string($0.type), "code": .string($0.code), "reason": .string($0.example), "count": .int($0.count)]
        }
        var f: [String: JSON] = [
            "final": .bool(final),
            "phones": .int(Int64(fleet.phones.count)),
            "elapsed_ms": .int(Int64(Clock.nowMillis()) - since),
            "actions": [
                "created": .int(created), "done": .int(done), "rejected": .int(rejected), "pending": .int(pending),
                "by_type": .object(byType.mapValues { m in .object(m.mapValues { .int($0) }) }),
            ],
            "rejected": .array(rejectedList),
            "refused_online_only": .object(refused.mapValues { .int(Int64($0)) }),
            "max_queue": ["phone": .int(Int64(maxQueue)), "all_phones": .int(Int64(day?.maxTotalPending ?? 0))],
            "drain": [
                "after_reconnect_ms": ["count": .int(Int64(drains.count)), "p50": pct(0.5, drains), "p95": pct(0.95, drains), "max": drains.last.map { .int($0) } ?? .null],
                // Among them, the reconnects of phones that had no session yet: their drain waited for a first sign-in.
                "without_session_ms": ["count": .int(Int64(drainsWithoutSession.count)), "p50": pct(0.5, drainsWithoutSession),
                                       "p95": pct(0.95, drainsWithoutSession), "max": drainsWithoutSession.last.map { .int($0) } ?? .null],
                "by_cause": DrainCause.json(drainCauses),
                // Of those, how long the phone's new connection took (TCP and CURVE handshake, radio on to the first action on the wire).
                "connect_ms": ["count": .int(Int64(drainConnects.count)), "p50": pct(0.5, drainConnects), "p95": pct(0.95, drainConnects),
                               "max": drainConnects.last.map { .int($0) } ?? .null],
                "end_of_day_ms": day?.finalDrainMs.map { .int($0) } ?? .null,
                "outbox_left": .int(outbox),
            ],
            "reads": .object(reads.mapValues { .int(Int64($0)) }),
            "reads_by_view": .object(readsByView.mapValues { m in .object(m.mapValues { .int(Int64($0)) }) }),
            "telemetry": [
                "sent": .int(Int64(t.sent)), "accepted": .int(Int64(t.accepted)), "duplicate": .int(Int64(t.duplicate)),
                "rejected": .int(Int64(t.rejected)), "batches_answered": .int(Int64(t.answers)), "queued": .int(Int64(t.queued)),
            ],
            "accounted": .bool(created == done + rejected + pending && (!final || pending == 0)),
            // The phones' pictures (ImageCache.swift): hits by tier, misses,
            // bytes fetched and served from the caches, evictions, refusals.
            "images": Report.images(images),
            // The users' news the phones received (Messages.swift), and how many were not their user's.
            "notifications": NewsReport.json(fleet.phones),
            // Rentals the phones made since the day began (from their files)
            // by status, the returns by outcome (returned, returning while
            // queued, refused with a reason), and the orders.return actions.
            "rentals": [
                "made": .int(rentals.values.reduce(0, +)),
                "by_status": .object(rentals.mapValues { .int($0) }),
                "returned": .int(returns["returned"] ?? 0),
                "returns": .object(returns.mapValues { .int($0) }),
                "late_days": .int(lateDays),
                "return_actions": .object((byType["orders.return"] ?? [:]).mapValues { .int($0) }),
            ],
        ]
        f["live"] = Report.live(fleet.phones)
        f["histograms"] = Report.histograms(fleet.phones, drains: drains, drainsWithoutSession: drainsWithoutSession, drainConnects: drainConnects, signIn: day?.signInTimes ?? [])
        // The drivers' answers (DriverInsights.swift): how often the view
        // showed them, from where, and how many the last one showed.
        let insights = readsByView["insights"] ?? [:]
        f["driver_answers"] = [
            "shown": .int(Int64(insights.filter { $0.key != "none" }.values.reduce(0, +))),
            "by_source": .object(insights.mapValues { .int(Int64($0)) }),
            "answers": .int(Int64(fleet.phones.map(\.stats.driverAnswersLast).max() ?? 0)),
        ]
        f["cart_edits"] = edits.json
        // Issue 30 point 5: what a device lost (its file damaged or rolled
        // back: StorageFaults.swift), apart from what the system lost (the
        // actions above and the checkers' counts, which stay whole). Over
        // each phone's life, from its keychain; only once a phone lost
        // something (not in protos/edge/control.schema.json's report yet).
        if let lost = Report.deviceLost(fleet.phones) { f["device_lost"] = lost }
        // Issue 17 point 5: no phone's file holds a secret (KeychainCheck).
        if final { f["keychain_check"] = KeychainCheck.report(fleet.phones) }
        if let day {
            f["seed"] = .int(Int64(bitPattern: day.options.seed))
            f["speed"] = .double(day.options.speed)
            f["duration_ms"] = .int(day.dayDurationMs)
            // A day that a killed process left and this one went on with:
            // the actions (from the phones' files) count over the whole day;
            // what only a process's memory held counts since this start.
            f["resumed"] = [
                "restarts": .int(Int64(day.restarts)),
                "resumed_phones": .int(Int64(day.resumedPhones)),
                "day_started_ms": .int(day.dayStartedWall),
                "this_run_started_ms": .int(day.startedWall),
                "since_this_run": .array(Report.sinceThisRun.map { .string($0) }),
            ]
            f["activities"] = .int(Int64(day.students.reduce(0) { $0 + $1.activities }))
            f["marketplace"] = [
                "rentals_placed": .int(Int64(day.rentalsPlaced)), "returns_queued": .int(Int64(day.returnsQueued)),
                "listings": day.listings.json,
            ]
            f["sign_in_before_day"] = day.options.signInFirst
                ? ["ms": day.signInMs.map { .int($0) } ?? .null, "phones_with_session": .int(Int64(day.signedInBeforeDay)),
                   "p50_ms": pct(0.5, day.signInTimes.sorted()), "p95_ms": pct(0.95, day.signInTimes.sorted()),
                   "rate_limited": .int(Int64(day.signInRateLimited)), "failed_tries": .int(Int64(day.signInFailures))] : .null
        }
        return .object(f)
    }

    /// The phones' storage faults summed, with how many phones had one; nil when none had.
    static func deviceLost(_ phones: [Phone]) -> JSON? {
        let hit = phones.filter { $0.storageFaults.any }
        guard !hit.isEmpty else { return nil }
        let sum = hit.reduce(StorageFaultCounts()) { $0 + $1.storageFaults }
        return sum.json.setting("phones", .int(Int64(hit.count)))
    }

    /// The report's figures that a process keeps in memory only, so a
    /// resumed day's report has them since its own start: everything else
    /// (`actions`, `rejected`, `accounted`, `drain/outbox_left`,
    /// `telemetry/queued`) is read from the phones' files and covers the
    /// whole day.
    static let sinceThisRun = ["activities", "max_queue", "drain/after_reconnect_ms", "drain/without_session_ms", "drain/end_of_day_ms",
                               "reads", "reads_by_view", "refused_online_only", "telemetry/sent", "telemetry/accepted",
                               "telemetry/duplicate", "telemetry/rejected", "telemetry/batches_answered", "sign_in_before_day",
                               "images", "marketplace", "live", "histograms"]

    /// The live feeds (LiveFeed.swift): events received and their latency
    /// from the service's outbox to the phone, what they changed, the
    /// updates dropped as older than the saved copy, the polls of phones
    /// whose feed was quiet, the catch-ups after a silence, and the news
    /// heard (none may be another user's).
    static func live(_ phones: [Phone]) -> JSON {
        var latencies: [Int64] = []
        var s = Phone.LiveStats()
        var received = 0, feeds = 0, liveNow = 0, moves = 0, resent = 0
        var byType: [String: Int] = [:]
        for p in phones {
            moves += p.link.moves
            resent += p.link.failovers
            guard let feed = p.live else { continue }
            feeds += 1
            if feed.isLive { liveNow += 1 }
            received += feed.received
            for (type, n) in feed.receivedByType { byType[type, default: 0] += n }
            latencies += feed.latencies
            s.add(p.liveStats)
        }
        latencies.sort()
        let newsLatencies = s.newsLatencies.sorted()
        func pct(_ q: Double, of list: [Int64]) -> JSON { Report.percentile(q, of: list) }
        func pct(_ q: Double) -> JSON { pct(q, of: latencies) }
        return [
            "phones_with_feed": .int(Int64(feeds)), "live_now": .int(Int64(liveNow)),
            "received": .int(Int64(received)), "received_by_type": .object(byType.mapValues { .int(Int64($0)) }), "applied": .int(Int64(s.applied)), "duplicates": .int(Int64(s.duplicates)), "stale_dropped": .int(Int64(s.stale)),
            "latency_ms": ["p50": pct(0.5), "p95": pct(0.95), "max": latencies.last.map { .int($0) } ?? .null],
            "polls": .int(Int64(s.polls)), "catch_ups": .int(Int64(s.catchUps)),
            "news": ["received": .int(Int64(s.news)), "for_another_user": .int(Int64(s.newsForOthers)),
                     "latency_ms": ["p50": pct(0.5, of: newsLatencies), "p95": pct(0.95, of: newsLatencies)]],
            "broker_moves": .int(Int64(moves)), "resent_after_move": .int(Int64(resent)),
        ]
    }

    static func images(_ s: ImageStats) -> JSON {
        var j = s.json.object ?? [:]
        let hits = s.memoryHits + s.diskHits
        j["hit_ratio"] = hits + s.misses == 0 ? .null : .double((Double(hits) / Double(hits + s.misses) * 1000).rounded() / 1000)
        return .object(j)
    }

    /// A refusal's message with its particulars (ids, times, numbers) blanked,
    /// so the same reason given for different spots counts as one.
    static func pattern(_ reason: String) -> String {
        reason.split(separator: " ").map { word -> String in
            word.contains(where: \.isNumber) ? "…" : String(word)
        }.joined(separator: " ")
    }

    /// The report in words.
    static func words(_ r: JSON) -> String {
        let a = r["actions"] ?? [:]
        var lines: [String] = []
        let phones = r["phones"]?.int ?? 0
        let seconds = Double(r["duration_ms"]?.int ?? r["elapsed_ms"]?.int ?? 0) / 1000
        lines.append("Campus day: \(phones) phone\(phones == 1 ? "" : "s"), seed \(r["seed"]?.int ?? 0), speed \(r["speed"]?.double ?? 1)x, \(String(format: "%.0f", seconds)) s, \(r["activities"]?.int ?? 0) activities.")
        if let resumed = r["resumed"], let restarts = resumed["restarts"]?.int, restarts > 0 {
            lines.append("Resumed after \(restarts) restart\(restarts == 1 ? "" : "s") (quad-edge killed and started again): \(resumed["resumed_phones"]?.int ?? 0) of \(phones) phones went on with the day. Actions count over the whole day, from the phones' files; activities, reads, drains and telemetry sent count since the last start.")
        }
        lines.append("Actions: \(a["created"]?.int ?? 0) made; \(a["done"]?.int ?? 0) done, \(a["rejected"]?.int ?? 0) rejected with a reason, \(a["pending"]?.int ?? 0) still pending.")
        if let byType = a["by_type"]?.object {
            for (type, m) in byType.sorted(by: { $0.key < $1.key }) {
                lines.append("  \(type): \(m["done"]?.int ?? 0) done, \(m["rejected"]?.int ?? 0) rejected, \(m["pending"]?.int ?? 0) pending")
            }
        }
        let rejected = r["rejected"]?.array ?? []
        if !rejected.isEmpty {
            lines.append("Rejected, by reason:")
            for x in rejected.prefix(12) {
                lines.append("  \(x["count"]?.int ?? 0) × \(x["type"]?.string ?? "") (\(x["code"]?.string ?? "")): \(x["reason"]?.string ?? "")")
            }
            if rejected.count > 12 { lines.append("  … and \(rejected.count - 12) other reasons") }
        }
        if let refused = r["refused_online_only"]?.object, !refused.isEmpty {
            lines.append("Refused at once (online only, kept as drafts): " + refused.map { "\($0.key) \($0.value.int ?? 0)" }.sorted().joined(separator: ", "))
        }
        if let signIn = r["sign_in_before_day"], let ms = signIn["ms"]?.int {
            var line = "Before the day: \(signIn["phones_with_session"]?.int ?? 0) of \(phones) phones signed in, in \(ms) ms"
            if let p50 = signIn["p50_ms"]?.int, let p95 = signIn["p95_ms"]?.int { line += " (a phone's sign-in: median \(p50) ms, p95 \(p95) ms)" }
            line += "; \(signIn["rate_limited"]?.int ?? 0) told to wait (429)."
            lines.append(line)
        }
        let q = r["max_queue"] ?? [:]
        lines.append("Longest outbox: \(q["phone"]?.int ?? 0) actions on one phone, \(q["all_phones"]?.int ?? 0) on all phones at once.")
        let d = r["drain"] ?? [:]
        let after = d["after_reconnect_ms"] ?? [:]
        if (after["count"]?.int ?? 0) > 0 {
            var line = "Drain after reconnect: \(after["count"]?.int ?? 0) reconnects with a queue; median \(after["p50"]?.int ?? 0) ms, p95 \(after["p95"]?.int ?? 0) ms, max \(after["max"]?.int ?? 0) ms."
            if let c = d["connect_ms"], (c["count"]?.int ?? 0) > 0 {
                line += " Of it, the new connection (TCP and CURVE handshake, radio on to the first action on the wire): median \(c["p50"]?.int ?? 0) ms, p95 \(c["p95"]?.int ?? 0) ms."
            }
            lines.append(line)
            let w = d["without_session_ms"] ?? [:]
            if (w["count"]?.int ?? 0) > 0 {
                lines.append("  of which \(w["count"]?.int ?? 0) on phones without a session yet (waiting for a first sign-in): median \(w["p50"]?.int ?? 0) ms, p95 \(w["p95"]?.int ?? 0) ms.")
            }
        }
        if let end = d["end_of_day_ms"]?.int {
            lines.append("End of day: every phone back online; outboxes drained in \(end) ms, \(d["outbox_left"]?.int ?? 0) actions left.")
        }
        if let reads = r["reads"]?.object {
            lines.append("Views shown from: " + reads.map { "\($0.key) \($0.value.int ?? 0)" }.sorted().joined(separator: ", ") + ".")
        }
        if let i = r["images"] {
            let h = i["hits"] ?? [:]
            lines.append("Pictures: \(h["memory"]?.int ?? 0) memory hits, \(h["disk"]?.int ?? 0) disk hits, \(i["misses"]?.int ?? 0) misses; \(i["fetched"]?.int ?? 0) fetched (\(i["bytes_fetched"]?.int ?? 0) bytes), \(i["bytes_from_cache"]?.int ?? 0) bytes from the caches; \(i["evictions"]?.int ?? 0) evicted, \(i["refused"]?.int ?? 0) refused, \(i["placeholders"]?.int ?? 0) placeholders shown.")
        }
        if let rent = r["rentals"] {
            let returns = (rent["returns"]?.object ?? [:]).map { "\($0.key) \($0.value.int ?? 0)" }.sorted().joined(separator: ", ")
            lines.append("Rentals: \(rent["made"]?.int ?? 0) made, \(rent["returned"]?.int ?? 0) returned\(returns.isEmpty ? "" : " (returns: \(returns))"), \(rent["late_days"]?.int ?? 0) late days charged.")
        }
        if let l = r["live"], (l["phones_with_feed"]?.int ?? 0) > 0 {
            let lat = l["latency_ms"] ?? [:]
            lines.append("Live updates: \(l["received"]?.int ?? 0) received (latency p50 \(lat["p50"]?.int.map { "\($0) ms" } ?? "-"), p95 \(lat["p95"]?.int.map { "\($0) ms" } ?? "-")), \(l["applied"]?.int ?? 0) applied, \(l["duplicates"]?.int ?? 0) heard twice, \(l["stale_dropped"]?.int ?? 0) older than the saved copy dropped; \(l["polls"]?.int ?? 0) polls while a feed was quiet, \(l["catch_ups"]?.int ?? 0) catch-ups; news \(l["news"]?["received"]?.int ?? 0) received by the feed (latency p50 \(l["news"]?["latency_ms"]?["p50"]?.int.map { "\($0) ms" } ?? "-"), p95 \(l["news"]?["latency_ms"]?["p95"]?.int.map { "\($0) ms" } ?? "-")), \(l["news"]?["for_another_user"]?.int ?? 0) for another user.")
        }
        if let c = r["cart_edits"], (c["made"]?.int ?? 0) > 0 {
            let o = c["offline_outcomes"] ?? [:]
            lines.append("Cart edits: \(c["made"]?.int ?? 0) made, \(c["done"]?.int ?? 0) confirmed, \(c["rejected"]?.int ?? 0) rolled back; \(c["offline"]?.int ?? 0) made offline: \(o["done"]?.int ?? 0) confirmed, \(o["rejected"]?.int ?? 0) rolled back, \(o["pending"]?.int ?? 0) still queued.")
            for x in c["rejected_reasons"]?.array ?? [] {
                lines.append("  rolled back: \(x["count"]?.int ?? 0) × \(x["type"]?.string ?? "") (\(x["code"]?.string ?? ""), \(x["offline"]?.int ?? 0) offline): \(x["reason"]?.string ?? "")")
            }
        }
        if let l = r["marketplace"]?["listings"], (l["attempted"]?.int ?? 0) > 0 {
            let reasons = (l["reasons"]?.object ?? [:]).map { "\($0.value.int ?? 0) × \($0.key)" }.sorted().joined(separator: "; ")
            lines.append("Listings: \(l["attempted"]?.int ?? 0) tried, \(l["created"]?.int ?? 0) listed, \(l["rejected"]?.int ?? 0) refused\(reasons.isEmpty ? "" : " (\(reasons))"), \(l["no_answer"]?.int ?? 0) unanswered.")
        }
        if let k = r["keychain_check"] {
            lines.append("Keychain check: \(k["phones_clean"]?.int ?? 0) phones clean, \(k["phones_with_secret"]?.int ?? 0) with a secret in their files.")
        }
        let t = r["telemetry"] ?? [:]
        lines.append("Telemetry: \(t["sent"]?.int ?? 0) events sent in \(t["batches_answered"]?.int ?? 0) answered batches; \(t["accepted"]?.int ?? 0) accepted, \(t["duplicate"]?.int ?? 0) duplicates, \(t["rejected"]?.int ?? 0) rejected, \(t["queued"]?.int ?? 0) still queued.")
        lines.append(r["accounted"]?.bool == true ? "Every action is accounted for." : "NOT every action is accounted for.")
        return lines.joined(separator: "\n")
    }
}

/// The students' cart edits (set a quantity, remove a line, empty the
/// cart), from the phones' action logs since the day began: by type and
/// outcome, the ones made offline by outcome (confirmed, rolled back, still
/// queued), and the rollbacks by reason.
struct CartEdits {
    var byType: [String: [String: Int64]] = [:]
    var offline: [String: Int64] = [:]
    var reasons: [String: (type: String, code: String, example: String, count: Int64, offline: Int64)] = [:]

    mutating func add(_ db: Database, since: Int64) {
        let rows = (try? db.query("""
            SELECT type, outcome, COALESCE(offline, 0) AS offline, COALESCE(code, '') AS code, COALESCE(reason, '') AS reason, COUNT(*) AS n
            FROM action_log WHERE type IN ('orders.cart.set', 'orders.cart.remove', 'orders.cart.clear') AND created_ms >= $1
            GROUP BY type, outcome, offline, code, reason
            """, .int(since))) ?? []
        for r in rows {
            let (type, outcome, n) = (r.string("type"), r.string("outcome"), r.int("n"))
            let wasOffline = r.int("offline") != 0
            byType[type, default: [:]][outcome, default: 0] += n
            if wasOffline { offline[outcome, default: 0] += n }
            guard outcome == "rejected" else { continue }
            let key = type + " " + r.string("code") + " " + Report.pattern(r.string("reason"))
            var e = reasons[key] ?? (type, r.string("code"), r.string("reason"), 0, 0)
            e.count += n
            if wasOffline { e.offline += n }
            reasons[key] = e
        }
    }

    var json: JSON {
        func total(_ outcome: String) -> Int64 { byType.values.reduce(0) { $0 + ($1[outcome] ?? 0) } }
        let rollbacks: [JSON] = reasons.values.sorted { ($0.count, $0.type) > ($1.count, $1.type) }.map {
            ["type": .string($0.type), "code": .string($0.code), "reason": .string($0.example), "count": .int($0.count), "offline": .int($0.offline)]
        }
        return [
            "made": .int(byType.values.reduce(0) { $0 + $1.values.reduce(0, +) }),
            "offline": .int(offline.values.reduce(0, +)),
            "done": .int(total("done")),
            "rejected": .int(total("rejected")),
            "by_type": .object(byType.mapValues { m in .object(m.mapValues { .int($0) }) }),
            "offline_outcomes": ["done": .int(offline["done"] ?? 0), "rejected": .int(offline["rejected"] ?? 0), "pending": .int(offline["pending"] ?? 0)],
            "rejected_reasons": .array(rollbacks),
        ]
    }
}

extension DrainCause {
    /// The drains grouped by what they held, each with its count, p50 and
    /// p95: `no_backoff_sent_1`, `no_backoff_sent_2_3`, `no_backoff_sent_4_plus`,
    /// `backed_off`. What makes the tail: many actions one after another,
    /// or waiting out a backoff.
    static func json(_ causes: [DrainCause]) -> JSON {
        var groups: [String: [Int64]] = [:]
        for c in causes {
            let key = c.backoffs > 0 ? "backed_off" : c.sent <= 1 ? "no_backoff_sent_1" : c.sent <= 3 ? "no_backoff_sent_2_3" : "no_backoff_sent_4_plus"
            groups[key, default: []].append(c.ms)
        }
        return .object(groups.mapValues { ms in
            let sorted = ms.sorted()
            return ["count": .int(Int64(sorted.count)), "p50": Report.percentile(0.5, of: sorted), "p95": Report.percentile(0.95, of: sorted)]
        })
    }
}
