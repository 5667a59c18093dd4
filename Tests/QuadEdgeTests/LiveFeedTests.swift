import Foundation
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// Live updates on the phone (issue 17, point 1), through a real broker's
/// updates socket and a real reservations worker: the phone's saved copy
/// of a lot's levels follows the service while the phone is online, and
/// a phone that was cut off catches up with a snapshot and never shows a
/// level older than the one it held.
@Suite("Live updates on the phone", .serialized)
struct LiveFeedTests {
    /// Each level's seq and free counts in a `reservations.levels` body.
    static func levels(_ body: JSON) -> [String: (seq: Int64, free: JSON)] {
        var out: [String: (Int64, JSON)] = [:]
        for l in body["levels"]?.array ?? [] { if let id = l["id"]?.string { out[id] = (l["seq"]?.int ?? 0, l["free"] ?? .null) } }
        return out
    }

    @Test func aPhoneBackAfterMissing100LevelUpdatesShowsTheLatestStateAndNeverAnOlderOne() throws {
        let s = try EdgeStack("live")
        _ = try s.signIn()
        _ = try s.view("parking")
        // The feed heard the broker and the lot's levels are saved: the
        // live map is shown without a request.
        var shown = try s.view("levels", ["lot": "central"])
        let until = Clock.monotonicMillis() + 30_000
        while shown["source"]?.string != "live" {
            try #require(Clock.monotonicMillis() < until, "the levels view never came from the live feed: \(shown)\n\(s.stack.log("edge"))")
            usleep(100_000)
            shown = try s.view("levels", ["lot": "central"])
        }
        let before = Self.levels(shown["body"] ?? [:])
        try #require(!before.isEmpty)

        // While the phone is in airplane mode, a driver holds and cancels
        // 50 times: 100 level updates it does not hear.
        try s.airplane(true)
        let driver = try s.stack.client(source: "driver")
        _ = try driver.request("accounts.register", ["email": "live-driver@uni.edu", "password": "live-driver-pass-1", "name": "Live Driver", "semester": 3],
                               timeoutMs: 8000, attempts: 1)
        driver.token = try #require(try driver.request("accounts.login", ["email": "live-driver@uni.edu", "password": "live-driver-pass-1"],
                                                       timeoutMs: 8000, attempts: 1)["token"]?.string)
        for _ in 0..<50 {
            let held = try driver.request("reservations.hold", ["lot": "central"], timeoutMs: 8000, attempts: 1)
            let id = try #require(held["reservation"]?["id"]?.string)
            _ = try driver.request("reservations.cancel", ["reservation": .string(id)], timeoutMs: 8000, attempts: 1)
        }
        let truth = Self.levels(try driver.request("reservations.levels", ["lot": "central"], timeoutMs: 8000, attempts: 1))
        let store = try s.store("reservations")
        let missed = try Outbox.since(store, after: before.values.map(\.seq).max() ?? 0, limit: Int.max).filter { $0.type == "reservations.level.changed" }
        store.close()
        try #require(missed.count >= 100, "the driver's holds and cancels made \(missed.count) level updates, not 100")
        // Offline, the saved copy is what it was.
        let offline = Self.levels(try s.view("levels", ["lot": "central"])["body"] ?? [:])
        #expect(offline.mapValues(\.seq) == before.mapValues(\.seq))

        // Back online: a snapshot, then the feed. Every look at the view
        // shows each level at its seq or a later one, until the latest.
        try s.airplane(false)
        var last = before.mapValues(\.seq)
        var caught = false
        let back = Clock.monotonicMillis() + 30_000
        while !caught {
            try #require(Clock.monotonicMillis() < back, "the phone never caught up: \(last) against \(truth.mapValues(\.seq))")
            let now = Self.levels(try s.view("levels", ["lot": "central"])["body"] ?? [:])
            for (id, level) in now {
                #expect(level.seq >= last[id] ?? 0, "level \(id) went back from seq \(last[id] ?? 0) to \(level.seq)")
                last[id] = max(last[id] ?? 0, level.seq)
            }
            caught = truth.allSatisfy { now[$0.key]?.seq == $0.value.seq && now[$0.key]?.free == $0.value.free }
            if !caught { usleep(100_000) }
        }
        // Updates arrive again once the feed is back: one more hold shows.
        let held = try driver.request("reservations.hold", ["lot": "central"], timeoutMs: 8000, attempts: 1)
        let level = try #require(truth.keys.first { id in (held["reservation"]?["spot"]?.string ?? "").hasPrefix(id + "-") })
        let after = Self.levels(try driver.request("reservations.levels", ["lot": "central"], timeoutMs: 8000, attempts: 1))
        let fed = Clock.monotonicMillis() + 20_000
        while true {
            let view = try s.view("levels", ["lot": "central"])
            if view["source"]?.string == "live", Self.levels(view["body"] ?? [:])[level]?.seq == after[level]?.seq { break }
            try #require(Clock.monotonicMillis() < fed, "the hold's update never reached the phone's live map")
            usleep(100_000)
        }
        let report = try s.edge("edge.report")
        #expect((report["live"]?["received"]?.int ?? 0) >= 1)
        #expect(report["live"]?["news"]?["for_another_user"]?.int == 0)
    }

    @Test func anOrdersNewsReachesItsPhoneOverTheFeedWithoutAsking() throws {
        let s = try EdgeStack("live-news")
        let user = try s.signIn()
        // The feed is live before the order (the phone asks notifications.since
        // only at sign-in, when the network comes back and when its feed is quiet).
        let until = Clock.monotonicMillis() + 30_000
        while (try s.edge("edge.report")["live"]?["live_now"]?.int ?? 0) < 1 {
            try #require(Clock.monotonicMillis() < until, "the phone's feed never went live:\n\(s.stack.log("edge"))")
            usleep(100_000)
        }
        let order = try s.act("orders.place", ["source": "buy_now", "product": "p-0021", "quantity": 1, "mode": "buy", "screen": "home"])
        #expect(try s.waitDrained()["drained"]?.bool == true)
        var news: JSON = [:]
        while true {
            news = try s.edge("edge.report")["live"]?["news"] ?? [:]
            if (news["received"]?.int ?? 0) >= 1 { break }
            try #require(Clock.monotonicMillis() < until, "no news came over the feed: \(news)\n\(s.stack.log("notifications.1"))")
            usleep(100_000)
        }
        #expect(news["for_another_user"]?.int == 0)
        #expect(news["latency_ms"]?["p50"]?.int != nil)
        let shown = try s.view("messages")["body"]?["news"]?.array ?? []
        #expect(shown.contains { $0["kind"]?.string == "order_confirmed" && $0["ref"]?.string == order }, "\(shown)")
        let store = try s.store("notifications")
        defer { store.close() }
        #expect(try store.queryOne("SELECT user_id FROM notifications WHERE ref = $1", .text(order))?.string("user_id") == user)
    }

    @Test func anOlderLevelNeverReplacesANewerOne() {
        let saved: JSON = ["lot": "central", "levels": [["id": "central-P1", "free": ["regular": 10, "accessible": 1, "ev": 1], "seq": 40]]]
        // An update older than the copy, or the same one again: nothing changes.
        #expect(Phone.mergeLevels(saved, with: ["levels": [["id": "central-P1", "free": ["regular": 3, "accessible": 0, "ev": 0], "seq": 39]]]) == nil)
        #expect(Phone.mergeLevels(saved, with: ["levels": [["id": "central-P1", "free": ["regular": 3, "accessible": 0, "ev": 0], "seq": 40]]]) == nil)
        // A newer one replaces the counts and the seq.
        let newer = Phone.mergeLevels(saved, with: ["levels": [["id": "central-P1", "free": ["regular": 9, "accessible": 1, "ev": 1], "seq": 41]]])
        #expect(newer?["levels"]?.array?.first?["seq"]?.int == 41)
        #expect(newer?["levels"]?.array?.first?["free"]?["regular"]?.int == 9)
        // A level the copy does not know is not invented.
        #expect(Phone.mergeLevels(saved, with: ["levels": [["id": "north-P1", "seq": 99]]]) == nil)
    }
}

/// When a silent feed moves its phone to another broker: a pure rule of the
/// feed, without a socket.
@Suite("A silent feed's moves")
struct LiveFeedMoveTests {
    func feed(jitter: Double) -> LiveFeed {
        let f = LiveFeed(context: ZMQContext(), endpoints: ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"],
                         reactor: Reactor(now: { Clock.monotonicMillis() }), serverKey: nil, clientKeys: nil)
        f.jitter = jitter
        return f
    }

    @Test func eachMoveThatDidNotLastDoublesTheNextWaitUpToAMinute() {
        let f = feed(jitter: 0)
        var waits: [Int64] = [f.moveAfterMs]
        for _ in 0..<6 {
            f.heardNothing()
            waits.append(f.moveAfterMs)
        }
        #expect(waits == [6_000, 12_000, 24_000, 48_000, 60_000, 60_000, 60_000])
    }

    @Test func aPhonesJitterSpreadsTheWaitByUpToHalf() {
        #expect(feed(jitter: 0.5).moveAfterMs == 9_000)
        #expect(feed(jitter: 0.25).moveAfterMs == 7_500)
        let f = feed(jitter: 0.5)
        for _ in 0..<5 { f.heardNothing() }
        #expect(f.moveAfterMs == 90_000, "the cap, then the jitter")
    }

    @Test func aMoveThatLastedAMinuteStartsTheWaitAgain() {
        let f = feed(jitter: 0)
        f.heardNothing()
        f.heardNothing()
        let opened = f.openedMs
        // Heard soon after the move: it has not lasted yet.
        f.heard(at: opened + 1_000)
        #expect(f.unsettledMoves == 2 && f.moveAfterMs == 24_000)
        // Heard a minute after it: it lasted.
        f.heard(at: opened + LiveFeed.settledMs)
        #expect(f.unsettledMoves == 0 && f.moveAfterMs == 6_000)
    }

    @Test func phonesDrawDifferentJitters() throws {
        // Each phone's from its seed (a campus's phones have seeds 0, 1, 2, ...): spread over 0 to 0.5.
        let draws = (0..<1_000).map { LiveFeed.jitter(seed: UInt64($0)) }
        #expect(LiveFeed.jitter(seed: 7) == LiveFeed.jitter(seed: 7), "the same phone, the same jitter")
        #expect(draws.allSatisfy { (0..<0.5).contains($0) })
        #expect(Set(draws).count > 400)
        #expect(draws.filter { $0 < 0.25 }.count > 400 && draws.filter { $0 >= 0.25 }.count > 400)
    }
}
