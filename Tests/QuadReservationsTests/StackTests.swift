import Foundation
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadReservations

/// quad-reservations as real processes behind a real broker. Drivers call
/// through the internal frontend with `user` set, as the broker does once
/// it has verified a token.
@Suite("Reservations on a running stack", .serialized)
struct StackTests {
    static let quiet = ["--sim", "off"]

    func stack(_ name: String, workers: Int = 1, extra: [String] = quiet) throws -> TestStack {
        let stack = try TestStack(name: name)
        try stack.startBroker()
        for n in 1...workers { try stack.startWorker("quad-reservations", instance: "reservations/\(n)", extra: extra) }
        #expect(try stack.waitForWorkers("reservations", count: workers))
        return stack
    }

    /// Calls as `user` through the internal frontend; returns the reply or error envelope.
    func call(_ client: Client, _ type: String, _ body: JSON = [:], user: String, id: String = MessageID.make()) throws -> Envelope {
        var request = Envelope.request(type, body: body, id: id)
        request.user = user
        return try client.call(request, timeoutMs: 3000)
    }

    func events(_ client: Client, type: String) throws -> [Envelope] {
        let page = try client.request("reservations.events.since", ["after": 0, "limit": 1000])
        return try (page["events"]?.array ?? []).map { try Envelope.decode($0) }.filter { $0.type == type }
    }

    @Test func thirtyDriversRaceForOneSpotAndExactlyOneHoldsIt() throws {
        let stack = try stack("race", workers: 2)
        let results = Results()
        let start = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for n in 0..<30 {
            done.enter()
            Thread {
                defer { done.leave() }
                do {
                    let client = try stack.internalClient(source: "driver-\(n)")
                    start.wait()
                    var request = Envelope.request("reservations.hold", body: ["spot": "central-P1-020"])
                    request.user = "driver-\(n)"
                    results.add(try client.call(request, timeoutMs: 5000))
                } catch {
                    results.fail("\(error)")
                }
            }.start()
        }
        usleep(200_000)
        for _ in 0..<30 { start.signal() }
        done.wait()
        #expect(results.failures.isEmpty, "\(results.failures)")
        let replies = results.replies
        #expect(replies.count == 30)
        let winners = replies.filter { $0.kind == .reply }
        #expect(winners.count == 1)
        #expect(replies.filter { $0.quadError?.status == 409 }.count == 29)
        #expect(replies.compactMap(\.quadError).allSatisfy { $0.message == "spot central-P1-020 is already held by another driver" })
        let client = try stack.internalClient()
        #expect(try events(client, type: "reservations.held").count == 1)
        let find = try client.request("reservations.spots.find", ["lot": "central", "level": "P1", "kind": "regular", "limit": 100])
        #expect(find["count"]?.int == 35)
        #expect(find["spots"]?.array?.contains { $0["id"]?.string == "central-P1-020" } == false)
    }

    @Test func anExpiredHoldIsReleasedOnTimeAndCheckInGets409() throws {
        let stack = try stack("expiry", workers: 2, extra: Self.quiet + ["--hold-seconds", "1"])
        let context = ZMQContext()
        let sub = try context.socket(.sub)
        try sub.connect(stack.endpoints.eventsOut)
        try sub.subscribe("reservations/")
        usleep(300_000)
        let client = try stack.internalClient()
        let held = try call(client, "reservations.hold", ["spot": "north-P2-030"], user: "dora")
        let id = try #require(held.body["reservation"]?["id"]?.string)
        let deadline = try #require(held.body["reservation"]?["deadline"]?.int)
        #expect(held.body["hold_seconds"]?.int == 1)
        // Nobody calls; the service releases the spot by itself.
        var received: [Envelope] = []
        var poller = Poller()
        poller.add(sub)
        let until = Clock.monotonicMillis() + 2500
        while Clock.monotonicMillis() < until {
            guard try poller.poll(timeoutMs: 100)[0] else { continue }
            while let frames = try sub.receive(dontWait: true) { received.append(try Envelope.decode(frames[1])) }
        }
        let expired = received.filter { $0.type == "reservations.expired" }
        // Each step with its level's new counts for the phones' live map
        // (a worker that starts on a new store first publishes every level's).
        #expect(received.drop { $0.type != "reservations.held" }.map(\.type)
                == ["reservations.held", "reservations.level.changed", "reservations.expired", "reservations.level.changed"])
        #expect(expired.count == 1)
        #expect(expired.first?.body["reservation"]?["id"]?.string == id)
        // Released within a few hundred ms of the deadline, not at the next call.
        #expect((expired.first?.ts ?? 0) - deadline < 700, "released \((expired.first?.ts ?? 0) - deadline) ms after the deadline")
        let checkin = try call(client, "reservations.checkin", ["reservation": .string(id)], user: "dora")
        let error = try #require(checkin.quadError)
        #expect(error.status == 409)
        #expect(error.message.contains("expired"), "\(error.message)")
        #expect(error.message.contains("the spot is free again"))
        let find = try client.request("reservations.spots.find", ["lot": "north", "level": "P2", "limit": 100])
        #expect(find["spots"]?.array?.contains { $0["id"]?.string == "north-P2-030" } == true)
        #expect(try call(client, "reservations.hold", ["spot": "north-P2-030"], user: "ezra").kind == .reply)
        #expect(try events(client, type: "reservations.expired").count == 1)
    }

    @Test func afterASigkillHoldsKeepTheirDeadlinesAndThosePastThemExpire() throws {
        let stack = try stack("sigkill", extra: Self.quiet + ["--hold-seconds", "6"])
        let client = try stack.internalClient()
        let early = try call(client, "reservations.hold", ["spot": "central-P2-010"], user: "fay").body["reservation"]
        usleep(3_500_000)
        let late = try call(client, "reservations.hold", ["spot": "central-P2-011"], user: "gus").body["reservation"]
        let earlyDeadline = try #require(early?["deadline"]?.int)
        let lateDeadline = try #require(late?["deadline"]?.int)
        stack.kill("reservations/1")
        // Down past the first deadline, not the second.
        let wait = earlyDeadline + 300 - Int64(Clock.nowMillis())
        if wait > 0 { usleep(UInt32(wait * 1000)) }
        try stack.startWorker("quad-reservations", instance: "reservations/2", extra: Self.quiet + ["--hold-seconds", "6"])
        #expect(try stack.waitForWorkers("reservations", count: 1))
        #expect(Int64(Clock.nowMillis()) < lateDeadline - 500, "the restart took too long for this test to mean anything")
        let fay = try call(client, "reservations.mine", user: "fay").body
        #expect(fay["active"] == .null)
        #expect(fay["history"]?.array?.first?["status"]?.string == "expired")
        #expect(fay["history"]?.array?.first?["deadline"]?.int == earlyDeadline)
        let gus = try call(client, "reservations.mine", user: "gus").body
        #expect(gus["active"]?["status"]?.string == "held")
        #expect(gus["active"]?["deadline"]?.int == lateDeadline, "a restart keeps the deadline")
        let expired = try events(client, type: "reservations.expired")
        #expect(expired.compactMap { $0.body["user"]?.string } == ["fay"])
        // The restarted worker releases the other on time, with nobody calling.
        let wait2 = lateDeadline + 600 - Int64(Clock.nowMillis())
        if wait2 > 0 { usleep(UInt32(wait2 * 1000)) }
        #expect(try events(client, type: "reservations.expired").compactMap { $0.body["user"]?.string } == ["fay", "gus"])
        let check = try call(client, "reservations.checkin", user: "gus")
        #expect(check.quadError?.status == 409)
    }

    @Test func oneActiveHoldPerUserAndARepeatedIDHoldsOnce() throws {
        let stack = try stack("idem", workers: 2)
        let client = try stack.internalClient()
        let id = MessageID.make()
        let first = try call(client, "reservations.hold", ["lot": "central", "kind": "ev"], user: "hana", id: id)
        let again = try call(client, "reservations.hold", ["lot": "central", "kind": "ev"], user: "hana", id: id)
        #expect(first.kind == .reply)
        #expect(first.body == again.body, "the same envelope id gets the same reply")
        #expect(try events(client, type: "reservations.held").count == 1)
        let second = try call(client, "reservations.hold", ["lot": "central", "kind": "ev"], user: "hana")
        #expect(second.quadError?.status == 409)
        #expect(second.quadError?.message.hasPrefix("you already have an active reservation") == true)
        let bad = try call(client, "reservations.hold", ["lot": "central", "kind": "bus"], user: "hana")
        #expect(bad.quadError?.status == 400)
        #expect(bad.quadError?.message == "body.kind must be one of regular, accessible, ev, got 'bus'")
        // From the public frontend the user is stripped: no hold without a verified user.
        var forged = Envelope.request("reservations.hold", body: ["spot": "central-P1-001"])
        forged.user = "hana"
        #expect(try stack.client().call(forged).quadError?.status == 401)
    }

    @Test func theForecastIsTheMeanOfPlantedSnapshotsOfTheSameWeekdayAndHour() throws {
        let stack = try stack("forecast")
        // Plant six weeks of Monday mornings straight into the store, and
        // other hours, days and lots that must not count.
        let db = try SQLiteDatabase(path: stack.dir + "/reservations.db")
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: -5 * 3600)!
        let firstMonday = calendar.date(from: DateComponents(year: 2025, month: 2, day: 3))!  // a Monday
        func ms(week: Int, day: Int = 0, hour: Int, minute: Int) -> Int64 {
            let date = calendar.date(byAdding: DateComponents(day: week * 7 + day, hour: hour, minute: minute), to: firstMonday)!
            return Int64(date.timeIntervalSince1970 * 1000)
        }
        let clock = CampusTime(offsetMinutes: -300)
        var generator = SeededGenerator(seed: 42)
        var planted: [String: [(Int64, Int64, Int64)]] = [:]  // level -> (regular, accessible, ev) of Monday 8 h
        let totals: [String: Int64] = ["regular": 36, "accessible": 6, "ev": 6]
        for week in 0..<6 {
            for level in ["P1", "P2", "P3"] {
                for (day, hour, minute, counts) in [(0, 8, 0, true), (0, 8, 15, true), (0, 8, 30, true), (0, 8, 45, true),
                                                    (0, 9, 0, false), (0, 7, 45, false), (1, 8, 30, false)] {
                    let free = ["regular": Int64.random(in: 0...36, using: &generator), "accessible": Int64.random(in: 0...6, using: &generator),
                                "ev": Int64.random(in: 0...6, using: &generator)]
                    try Snapshots.record(db, level: "central-\(level)", lot: "central", at: ms(week: week, day: day, hour: hour, minute: minute),
                                         free: free, total: totals, clock: clock)
                    if counts { planted[level, default: []].append((free["regular"]!, free["accessible"]!, free["ev"]!)) }
                }
                try Snapshots.record(db, level: "north-\(level)", lot: "north", at: ms(week: week, hour: 8, minute: 30),
                                     free: ["regular": 0], total: totals, clock: clock)
            }
        }
        db.close()
        let client = try stack.internalClient()
        let arrival = ms(week: 7, hour: 8, minute: 40)
        let forecast = try client.request("reservations.forecast", ["lot": "central", "arrival": "2025-03-24T08:40:00-05:00", "kind": "regular"])
        #expect(forecast["arrival"]?.int == arrival)
        #expect(forecast["weekday"]?.string == "Monday" && forecast["hour"]?.int == 8)
        #expect(forecast["samples"]?.int == 72)
        func mean(_ values: [Int64]) -> Double { (Double(values.reduce(0, +)) / Double(values.count) * 10).rounded() / 10 }
        var best: (String, Double)?
        for level in forecast["levels"]?.array ?? [] {
            let name = try #require(level["name"]?.string)
            let rows = try #require(planted[name])
            #expect(level["samples"]?.int == 24)
            let expected: JSON = ["regular": .double(mean(rows.map(\.0))), "accessible": .double(mean(rows.map(\.1))), "ev": .double(mean(rows.map(\.2)))]
            #expect(level["expected_free"] == expected, "\(name)")
            let regular = mean(rows.map(\.0))
            if regular >= 1, regular > (best?.1 ?? 0) { best = (name, regular) }
        }
        #expect(forecast["levels"]?.array?.count == 3)
        #expect(forecast["recommended_level"]?.string == best?.0)
        // An hour with no snapshots says so instead of guessing.
        let empty = try client.request("reservations.forecast", ["lot": "central", "arrival": "2025-03-24T03:10:00-05:00"])
        #expect(empty["samples"]?.int == 0 && empty["recommended_level"] == .null && empty["expected_full"] == false)
        // The same snapshots, as history.
        let history = try client.request("reservations.occupancy", ["lot": "central", "level": "P2",
                                                                    "from": .int(ms(week: 2, hour: 0, minute: 0)), "to": .int(ms(week: 2, day: 1, hour: 23, minute: 59))])
        #expect(history["snapshots"]?.array?.count == 7)
        #expect(history["snapshots"]?.array?.first?["local"]?.string == "2025-02-17T07:45:00-05:00")
    }

    @Test func theSimulatorSnapshotsEveryLevelEachFifteenSimulatedMinutes() throws {
        // Two workers on one store: the one holding the lease simulates.
        let stack = try stack("sim", workers: 2, extra: ["--sim", "on", "--sim-speed", "1000", "--history-days", "8"])
        let context = ZMQContext()
        let sub = try context.socket(.sub)
        try sub.connect(stack.endpoints.eventsOut)
        try sub.subscribe("reservations/occupancy.snapshot")
        var snapshots: [Envelope] = []
        var poller = Poller()
        poller.add(sub)
        let until = Clock.monotonicMillis() + 3500
        while Clock.monotonicMillis() < until {
            guard try poller.poll(timeoutMs: 100)[0] else { continue }
            while let frames = try sub.receive(dontWait: true) { snapshots.append(try Envelope.decode(frames[1])) }
        }
        let p1 = snapshots.filter { $0.body["level_id"]?.string == "central-P1" }.compactMap { $0.body["at"]?.int }
        #expect(p1.count >= 2, "\(snapshots.count) snapshots in 3.5 s at 1000x")
        #expect(p1.allSatisfy { $0 % 900_000 == 0 })
        #expect(zip(p1, p1.dropFirst()).allSatisfy { $1 - $0 == 900_000 }, "each slot once, none skipped: \(p1)")
        #expect(Set(snapshots.compactMap { $0.body["level_id"]?.string }).count == 9, "every level of every lot")
        let client = try stack.internalClient()
        let last = try #require(p1.last)
        let history = try client.request("reservations.occupancy", ["lot": "central", "level": "P1", "from": .int(last - 3_600_000), "to": .int(last)])
        #expect(history["snapshots"]?.array?.last?["at"]?.int == last)
        // The first start wrote eight days of history: last week's same hour has samples.
        let forecast = try client.request("reservations.forecast", ["lot": "central", "arrival": .int(Int64(Clock.nowMillis()))])
        #expect((forecast["samples"]?.int ?? 0) >= 12)
    }
}

/// Replies collected from several threads.
final class Results: @unchecked Sendable {
    // Guarded by lock.
    let lock = NSLock()
    var replies: [Envelope] { lock.withLock { _replies } }
    var failures: [String] { lock.withLock { _failures } }
    private var _replies: [Envelope] = []
    private var _failures: [String] = []

    func add(_ e: Envelope) { lock.withLock { _replies.append(e) } }
    func fail(_ s: String) { lock.withLock { _failures.append(s) } }
}

/// A small deterministic generator (SplitMix64), so planted data is the same on every run.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
