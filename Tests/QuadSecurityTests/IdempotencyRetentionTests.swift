import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// Stores stay bounded (issue 12, point 9): under a steady load of
/// mutations, a worker started with a short `idempotency_retention_ms` and
/// `outbox_retention_ms` keeps its idempotency and outbox tables small,
/// and `events.since` tells a subscriber that was away which events it can
/// no longer have.
@Suite("Idempotency records and events are pruned", .serialized)
struct IdempotencyRetentionTests {
    static func rows(_ db: Database, _ table: String) throws -> Int64 {
        try SQLiteDatabase.retryingBusy(forMs: 5000) { try db.queryOne("SELECT COUNT(*) AS n FROM \(table)")?.int("n") ?? 0 }
    }

    @Test func theTablesStopGrowingUnderASteadyLoad() throws {
        let stack = try TestStack(name: "retention")
        try stack.startBroker()
        try stack.startWorker("quad-favorites", instance: "favorites/1", extra: [
            "--idempotency-retention-ms", "300", "--outbox-retention-ms", "300", "--prune-every-ms", "50", "--prune-batch", "200",
        ])
        try #require(try stack.waitForWorkers("favorites", count: 1, timeoutMs: 30_000), "favorites did not start: \(stack.log("favorites/1").suffix(500))")
        // A service calling for a user: no accounts needed.
        let client = try stack.internalClient()
        let db = try SQLiteDatabase(path: stack.dir + "/favorites.db")
        let total = 2000
        var peak: (records: Int64, events: Int64) = (0, 0)
        var samples: [(Int, Int64, Int64)] = []
        for n in 0..<total {
            let type = n % 2 == 0 ? "favorites.add" : "favorites.remove"
            var request = Envelope.request(type, body: ["product": "p-prune"], user: "u-prune", role: "service")
            request.user = "u-prune"
            let reply = try client.call(request, timeoutMs: 8000, attempts: 2)
            #expect(reply.kind == .reply, "\(type) #\(n): \(reply.body.text)")
            if n % 100 == 99 {
                let r = try Self.rows(db, "idempotency"), e = try Self.rows(db, "outbox")
                samples.append((n + 1, r, e))
                peak = (max(peak.records, r), max(peak.events, e))
            }
        }
        print("retention: (mutations, idempotency rows, outbox rows) every 100: \(samples)")
        // Without pruning both tables would hold 2000 rows by now.
        #expect(peak.records < Int64(total) * 3 / 4 && peak.events < Int64(total) * 3 / 4, "peak \(peak) over \(total) mutations: \(samples)")
        // The second half of the run grows no higher than the first did,
        // give or take what a loaded machine adds: a prune pass that runs
        // late leaves a few hundred more (CI beside the e2e lanes: 97 in the
        // first half, 262 in the second, back to 7 at the end). Pruning that
        // stopped would leave a thousand more.
        let firstHalf = samples.prefix(samples.count / 2).map { max($0.1, $0.2) }.max() ?? 0
        let secondHalf = samples.suffix(samples.count / 2).map { max($0.1, $0.2) }.max() ?? 0
        #expect(secondHalf <= firstHalf * 2 + 400, "still growing: \(samples)")
        // Once the load stops, what is past retention goes.
        var left: (Int64, Int64) = (-1, -1)
        let until = Clock.monotonicMillis() + 30_000
        while Clock.monotonicMillis() < until {
            left = (try Self.rows(db, "idempotency"), try Self.rows(db, "outbox"))
            if left == (0, 0) { break }
            usleep(100_000)
        }
        #expect(left == (0, 0), "rows left after the retention: \(left)")

        // A subscriber whose cursor is older than what is kept is told.
        let since = try client.request("favorites.events.since", ["after": 0, "limit": 10], timeoutMs: 8000, attempts: 1)
        let last = try #require(since["last"]?.int)
        #expect(last == Int64(total))
        #expect(since["oldest"]?.int == last + 1 && since["missed"]?.int == last, "\(since.text)")
        #expect(since["events"]?.array?.isEmpty == true)
        // The next mutation is still numbered after the pruned ones.
        _ = try client.call(.request("favorites.add", body: ["product": "p-after"], user: "u-prune", role: "service"), timeoutMs: 8000, attempts: 1)
        let next = try client.request("favorites.events.since", ["after": .int(last), "limit": 10], timeoutMs: 8000, attempts: 1)
        #expect(next["events"]?.array?.first?["seq"]?.int == last + 1 && next["missed"] == nil, "\(next.text)")

        // A subscriber that starts now (catalog follows favorites for For
        // You) learns that events 1...last are gone, says so, and goes on
        // from what is kept instead of waiting for them for ever.
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        let catalogDB = stack.dir + "/catalog.db"
        var cursor: Int64 = -1
        let deadline = Clock.monotonicMillis() + 30_000
        while Clock.monotonicMillis() < deadline {
            if FileManager.default.fileExists(atPath: catalogDB), let c = try? SQLiteDatabase(path: catalogDB),
               let row = try? c.queryOne("SELECT seq FROM event_cursors WHERE source = 'favorites'") {
                cursor = row.int("seq")
                c.close()
                if cursor == last + 1 { break }
            }
            usleep(100_000)
        }
        #expect(cursor == last + 1, "catalog's cursor on favorites: \(cursor)")
        // The worker writes its log lines at the end of the loop's turn,
        // after the cursor is stored: wait for the line too.
        // Up to `last` at least: on a slow machine the retention may have
        // taken event last + 1 too before the worker asked.
        func saidGap() -> Bool {
            stack.log("catalog/1").split(separator: "\n").contains { line in
                guard let r = line.range(of: "events 1..."), let end = line.range(of: " of favorites were pruned before this worker applied them") else { return false }
                return Int64(line[r.upperBound..<end.lowerBound]).map { $0 >= last } ?? false
            }
        }
        #expect(eventually { saidGap() },
                "\(stack.log("catalog/1").split(separator: "\n").filter { $0.contains("favorites") || $0.contains("pruned") }.suffix(20).joined(separator: "\n"))")
        stack.stopAll()
    }
}
