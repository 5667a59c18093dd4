import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// quad-edge against the real stack, every process real, every store a real
/// SQLite file; the tests look at what the services stored.
@Suite("The edge agent on a running stack", .serialized)
struct EdgeStackTests {
    /// The phone's own actions among the favorites changes (the sign-in's first favorite left out).
    func changes(_ edge: EdgeStack, _ user: String) throws -> [String] {
        try edge.favoriteChanges(user: user).filter { !$0.hasSuffix("p-0306") }
    }

    /// Against the real accounts: a new phone registers, and its first
    /// action goes with the registration's session; accounts never sees a
    /// login (each would be a second Argon2id hash).
    @Test func aPhoneThatRegistersActsWithoutEverLoggingIn() throws {
        let edge = try EdgeStack("register")
        let user = try edge.signIn()
        #expect(try edge.favoriteChanges(user: user) == ["add p-0306"], "the first action went with the registration's token")
        let requests = edge.stack.log("accounts/1").split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
        #expect(requests.contains { $0["type"]?.string == "accounts.register" && $0["status"]?.int == 200 })
        #expect(!requests.contains { $0["type"]?.string == "accounts.login" }, "no login: the registration answered with a session")
    }

    @Test func aHundredActionsInAirplaneModeReachTheServicesInOrderOnceEach() throws {
        let edge = try EdgeStack("airplane")
        let user = try edge.signIn()
        try edge.airplane(true)
        var mix = ActionMix()
        var ids: [String] = []
        for k in 0..<100 {
            let (type, body) = mix.next(k)
            ids.append(try edge.act(type, body))
        }
        let offline = try edge.state()
        #expect(offline["online"]?.bool == false && offline["airplane"]?.bool == true)
        #expect(offline["pending"]?.int == 100)
        #expect((offline["oldest_pending_age_ms"]?.int ?? -1) >= 0)
        // Shown at once, as done and pending.
        let favorites = try edge.view("favorites")
        #expect(favorites["source"]?.string == "local")
        #expect(favorites["notice"]?.string?.contains("waiting to be sent") == true)
        #expect(try changes(edge, user).isEmpty, "nothing reached favorites in airplane mode")

        try edge.airplane(false)
        let drained = try edge.waitDrained()
        #expect(drained["drained"]?.bool == true, "\(drained)")
        #expect(try changes(edge, user) == mix.expectedChanges, "favorites applied the changes in the order they were made, once each")
        #expect(try edge.cartQuantity(user: user, product: "p-0020") == Int64(mix.cartAdds))
        let favoriteIDs = zip(ids, (0..<100).map { $0 % 5 != 4 }).filter(\.1).map(\.0)
        let cartIDs = zip(ids, (0..<100).map { $0 % 5 == 4 }).filter(\.1).map(\.0)
        #expect(try edge.answered("favorites", favoriteIDs).count == 80)
        #expect(try edge.answered("orders", cartIDs).count == 20)
        let log = try edge.log().filter { ids.contains($0["id"]?.string ?? "") }
        #expect(log.count == 100 && log.allSatisfy { $0["outcome"]?.string == "done" })
        #expect(log.map { $0["id"]?.string ?? "" } == ids, "the phone's log keeps the order the user made them in")
    }

    @Test func aRealNetworkCutLosesAndDuplicatesNothing() throws {
        let edge = try EdgeStack("partition")
        let user = try edge.signIn()
        // The broker stops answering: the phone does not know, it sees timeouts.
        edge.signal("broker", SIGSTOP)
        var mix = ActionMix()
        for k in 0..<30 {
            let (type, body) = mix.next(k)
            try edge.act(type, body)
            if k % 10 == 0 { usleep(300_000) }
        }
        usleep(3_000_000)
        let cut = try edge.state()
        #expect(cut["airplane"]?.bool == false, "not airplane mode")
        #expect(cut["reachable"]?.bool == false && cut["online"]?.bool == false, "the phone saw timeouts: \(cut)")
        #expect(cut["pending"]?.int == 30)
        let attempts = try edge.log().compactMap { $0["attempts"]?.int }.max() ?? 0
        #expect(attempts >= 2, "the head of the outbox was retried under its id")
        // Views fall back to their saved copies while the network is cut.
        edge.signal("broker", SIGCONT)
        let drained = try edge.waitDrained(telemetry: true)
        #expect(drained["drained"]?.bool == true, "\(drained)")
        #expect(try changes(edge, user) == mix.expectedChanges)
        #expect(try edge.cartQuantity(user: user, product: "p-0020") == Int64(mix.cartAdds))
        let healed = try edge.state()
        #expect(healed["online"]?.bool == true && healed["pending"]?.int == 0)
        // Telemetry: each action synced once, the offline period recorded, no conflicting resend.
        let events = try edge.telemetry()
        #expect(events["action.synced"] == 31, "\(events)")
        #expect((events["offline.started"] ?? 0) >= 1 && (events["offline.ended"] ?? 0) >= 1)
        #expect(try edge.telemetryConflicts() == 0)
    }

    @Test func killedWithActionsAndTelemetryPendingItSendsThemAllOnceAfterARestart() throws {
        let edge = try EdgeStack("sigkill")
        let user = try edge.signIn()
        edge.signal("broker", SIGSTOP)
        var mix = ActionMix()
        for k in 0..<20 {
            let (type, body) = mix.next(k)
            try edge.act(type, body)
        }
        _ = try edge.view("search", ["q": "calculator"])
        usleep(2_500_000)  // attempts sent and unanswered, telemetry batches in flight
        let before = try edge.state()
        #expect(before["pending"]?.int == 20 && (before["telemetry_queued"]?.int ?? 0) > 0, "\(before)")
        edge.signal("edge", SIGKILL)
        // The broker wakes up with the dead phone's attempts in its queue:
        // some reach the services, their answers go nowhere.
        edge.signal("broker", SIGCONT)
        usleep(1_000_000)
        try edge.startEdge()
        let drained = try edge.waitDrained(telemetry: true)
        #expect(drained["drained"]?.bool == true, "\(drained)")
        #expect(try changes(edge, user) == mix.expectedChanges, "each action applied once, in order, across the crash")
        #expect(try edge.cartQuantity(user: user, product: "p-0020") == Int64(mix.cartAdds))
        let head = try #require(try edge.log().first { $0["type"]?.string != nil && $0["id"]?.string != nil && ($0["attempts"]?.int ?? 0) >= 2 },
                                "the head of the outbox was attempted before the kill and again after it")
        #expect(head["outcome"]?.string == "done")
        let events = try edge.telemetry()
        #expect(events["action.synced"] == 21, "\(events)")
        #expect(events["session.started"] == 2)
        #expect(events["app.crash"] == 1, "the killed session is reported as a crash")
        #expect(events["search.performed"] == 1)
        #expect(try edge.telemetryConflicts() == 0, "a resent batch carries the same events")
    }

    @Test func aHoldThatExpiresOfflineGetsA409TheUserSeesWhyAndTheSpotIsFree() throws {
        let edge = try EdgeStack("expiry", holdSeconds: 3)
        _ = try edge.signIn()
        // The hold is made without signal and goes out when the signal returns.
        try edge.airplane(true)
        let hold = try edge.act("reservations.hold", ["lot": "central", "level": "P2"])
        #expect(try edge.view("reservation")["body"]?["active"]?["pending"]?.bool == true)
        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let held = try #require(try edge.view("reservation")["body"]?["active"])
        #expect(held["id"]?.string == hold && held["status"]?.string == "held")
        let spot = try #require(held["spot"]?.string)
        // Down on P2 there is no signal: the check-in is queued, shown as done.
        try edge.airplane(true)
        try edge.act("reservations.checkin", [:])
        try edge.act("reservations.checkout", [:])
        #expect(try edge.view("reservation")["body"]?["active"]?["status"]?.string == "checked_out")
        usleep(4_000_000)
        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let messages = try edge.messages()
        let message = try #require(messages.last)
        #expect(message["status"]?.int == 409 && message["type"]?.string == "reservations.checkin")
        #expect(message["text"]?.string?.contains("expired") == true, "\(message)")
        let after = try #require(try edge.view("reservation")["body"]?["active"])
        #expect(after["status"]?.string == "expired" && after["pending"]?.bool == false, "rolled back to what the service says: \(after)")
        let log = try edge.log()
        #expect(log.last?["type"]?.string == "reservations.checkout" && log.last?["outcome"]?.string == "rejected", "the check-out queued behind it is dropped")
        // The spot is free again for everyone.
        let db = try edge.store("reservations")
        defer { db.close() }
        #expect(try db.queryOne("SELECT reservation FROM spots WHERE id = $1", .text(spot))?["reservation"].isNull == true)
        #expect(try db.queryOne("SELECT status FROM reservations WHERE id = $1", .text(hold))?.string("status") == "expired")
        let free = try edge.stack.client().request("reservations.spots.find", ["lot": "central", "level": "P2", "limit": 100])
        #expect(free["spots"]?.array?.contains { $0["id"]?.string == spot } == true)
    }

    @Test func viewsShowSavedCopiesWithTheirAgeAndComputeLocally() throws {
        let edge = try EdgeStack("views")
        _ = try edge.signIn()
        // Online: the network; the parking home prefetches the levels.
        #expect(try edge.view("home")["source"]?.string == "network")
        #expect(try edge.view("parking")["source"]?.string == "network")
        let spots = try edge.view("spots", ["lot": "north", "kind": "ev"])
        #expect(spots["source"]?.string == "network")
        #expect(try edge.view("spots", ["lot": "north", "kind": "ev"])["source"]?.string == "memory")
        usleep(500_000)
        try edge.airplane(true)
        // Saved copy first for a day: no network needed, no notice.
        #expect(try edge.view("parking")["source"]?.string == "saved")
        // Prefetched while online, shown with its age without signal.
        let levels = try edge.view("levels", ["lot": "central"])
        #expect(levels["source"]?.string == "saved" && levels["notice"]?.string?.contains("saved") == true, "\(levels)")
        #expect((levels["age_ms"]?.int ?? -1) >= 0)
        // Search and filters over the saved catalog.
        let search = try edge.view("search", ["q": "calculator", "max_price": 50])
        #expect(search["source"]?.string == "local")
        let found = search["body"]?["products"]?.array ?? []
        #expect(!found.isEmpty && found.allSatisfy { ($0["price"]?["value"]?.double ?? 99) <= 50 })
        // A purchase made offline counts in the 30-day total at once, marked.
        let before = try edge.view("spending")["body"]?["total"]?.double ?? -1
        try edge.act("orders.place", ["source": "buy_now", "product": "p-0019", "mode": "buy", "screen": "home"])
        let spending = try edge.view("spending")
        #expect((spending["body"]?["total"]?.double ?? 0) > before)
        #expect(spending["notice"]?.string?.contains("not confirmed yet") == true, "\(spending)")
        // Online only: refused at once, with the reason.
        let refused = try edge.control.call(.request("edge.act", body: ["phone": "phone-001", "type": "orders.cancel", "body": ["order": "x"]]))
        #expect(refused.quadError?.status == 503 && refused.quadError?.message.contains("needs a connection") == true)
        try edge.airplane(false)
        let drained = try edge.waitDrained()
        #expect(drained["drained"]?.bool == true)
        let confirmed = try edge.view("spending")
        #expect(confirmed["body"]?["queued"]?.int == 0)
        // What the control socket says agrees with protos/edge/control.schema.json.
        let schema = try ControlSchema()
        schema.check("phone_state", try edge.state())
        schema.check("state.reply", try edge.edge("edge.state"))
        schema.check("wait.reply", drained)
        schema.check("view.reply", levels)
        schema.check("view.reply", confirmed)
        schema.check("act.reply", try edge.edge("edge.act", ["phone": "phone-001", "type": "favorites.add", "body": ["product": "p-0003"]]))
        schema.check("messages.reply", try edge.edge("edge.messages", ["phone": "phone-001"]))
        let log = try edge.edge("edge.log", ["phone": "phone-001"])
        schema.check("log.reply", log)
        for entry in log["actions"]?.array ?? [] { schema.check("log.reply/actions", entry) }
        schema.check("report.reply", try edge.edge("edge.report"))
    }

    @Test func twoHundredPhonesRunACampusDayAndEveryActionIsAccountedFor() throws {
        // Pictures served over HTTP: the students' product and lot views go through the caches.
        let edge = try EdgeStack("campus", holdSeconds: 8, serviceArguments: ["catalog": ["--images-http", "127.0.0.1:0"],
                                                                              "reservations": ["--images-http", "127.0.0.1:0"]])
        // The control process is not needed: the day runs in its own process.
        try edge.edge("edge.stop")
        let report = edge.stack.dir + "/campus-report.json"
        // 45 s of day: a rental is rented, confirmed, then returned by a
        // student who opens the rentals screen; in 30 s on a machine busy
        // with other tests, no student got that far once in CI.
        let day = try edge.stack.start("campus", executable: "quad-edge", arguments: [
            "run", "--frontend", edge.stack.endpoints.frontend, "--dir", edge.stack.dir + "/campus-phones", "--phones", "200",
            "--control", "none", "--seed", "11", "--speed", "20", "--duration", "45", "--hold-seconds", "8", "--report", report,
        ])
        let deadline = Date().addingTimeInterval(240)
        while day.isRunning && Date() < deadline { usleep(200_000) }
        #expect(!day.isRunning, "the campus day did not end in 4 minutes")
        if day.isRunning { day.terminate() }
        day.waitUntilExit()
        let output = edge.stack.log("campus")
        #expect(day.terminationStatus == 0, "exit \(day.terminationStatus):\n\(output.suffix(3000))")
        let json = try JSON.parse(try String(contentsOfFile: report, encoding: .utf8))
        let actions = try #require(json["actions"])
        let created = actions["created"]?.int ?? 0
        #expect(created >= 200, "a day of 200 students makes hundreds of actions: \(created)")
        #expect(actions["pending"]?.int == 0)
        // Students change their carts (a quantity, a line out, the cart emptied), each edit settled.
        let edits = try #require(json["cart_edits"], "the report counts cart edits")
        let made = edits["made"]?.int ?? 0
        #expect(made > 0, "\(edits)")
        #expect((edits["done"]?.int ?? 0) + (edits["rejected"]?.int ?? 0) == made, "\(edits)")
        // Those made offline (in dead zones), each confirmed or rolled back, the rollbacks with their reasons.
        let offline = edits["offline_outcomes"] ?? [:]
        #expect((edits["offline"]?.int ?? 0) > 0, "\(edits)")
        #expect((offline["done"]?.int ?? 0) + (offline["rejected"]?.int ?? 0) == edits["offline"]?.int && offline["pending"]?.int == 0, "\(edits)")
        let rollbacks = edits["rejected_reasons"]?.array ?? []
        #expect(rollbacks.reduce(0) { $0 + ($1["count"]?.int ?? 0) } == edits["rejected"]?.int, "\(edits)")
        #expect(rollbacks.allSatisfy { !($0["reason"]?.string ?? "").isEmpty }, "\(edits)")
        #expect(output.contains("Cart edits: "))
        #expect(created == (actions["done"]?.int ?? 0) + (actions["rejected"]?.int ?? 0))
        #expect(json["accounted"]?.bool == true)
        for r in json["rejected"]?.array ?? [] { #expect(!(r["reason"]?.string ?? "").isEmpty && r["code"]?.string != nil) }
        #expect(output.contains("Every action is accounted for."))
        #expect(output.contains("campus day"), "a progress line while it runs")
        // Issue 17 point 5: every phone's files read whole, no secret in them.
        let keychains = try #require(json["keychain_check"], "the report checks the phones' files")
        #expect(keychains["phones_clean"]?.int == 200 && keychains["phones_with_secret"]?.int == 0, "\(keychains)")
        #expect(output.contains("Keychain check: 200 phones clean, 0 with a secret"))

        // Issue 16: pictures fetched once, then hits; rentals made and returned; listings tried.
        let images = try #require(json["images"])
        #expect((images["fetched"]?.int ?? 0) > 0 && (images["bytes_fetched"]?.int ?? 0) > 0, "\(images)")
        #expect((images["hits"]?["disk"]?.int ?? 0) + (images["hits"]?["memory"]?.int ?? 0) > 0, "hits after the first fetch: \(images)")
        #expect(images["refused"]?.int == 0)
        #expect(output.contains("Pictures: "))
        let rentals = try #require(json["rentals"])
        #expect((rentals["made"]?.int ?? 0) > 0, "\(rentals)")
        let returnActions = rentals["return_actions"] ?? [:]
        #expect((returnActions["done"]?.int ?? 0) > 0, "students returned rentals: \(rentals)")
        #expect(rentals["returned"]?.int == returnActions["done"]?.int, "every return done shows returned on the phone: \(rentals)")
        let market = try #require(json["marketplace"])
        let listings = market["listings"] ?? [:]
        let tried = listings["attempted"]?.int ?? 0
        #expect(tried > 0 && tried == (listings["created"]?.int ?? 0) + (listings["rejected"]?.int ?? 0) + (listings["no_answer"]?.int ?? 0), "\(listings)")
        // The students' news reached their phones, each only its own user's.
        let news = try #require(json["notifications"], "the report counts the phones' news")
        #expect((news["received"]?.int ?? 0) > 0 && news["not_theirs"]?.int == 0, "\(news)")

        // Issue 26 point 7: the students differ as the seeds' users do, and
        // their purchases spread over the semesters (UniTrade's UQ2).
        let accounts = try edge.store("accounts")
        defer { accounts.close() }
        let students = try accounts.query("SELECT semester, categories FROM users WHERE email LIKE '%@edge.quad.campus'")
        #expect(students.count == 201, "the day's 200 and the control process's phone")
        #expect(Set(students.map { $0.int("semester") }) == Set(1...10), "semesters 1 to 10")
        #expect(Set(students.map { $0.string("categories") }).count >= 30, "different preferred categories")
        let orders = try edge.store("orders")
        defer { orders.close() }
        let bought = try orders.query("SELECT semester, COUNT(*) AS n FROM orders WHERE status IN ('confirmed', 'returned') GROUP BY semester")
        #expect(bought.count >= 8, "purchases by semester: \(bought.map { "\($0.string("semester")): \($0.int("n"))" })")
    }

    @Test func quadctlPhoneTalksToTheControlSocket() throws {
        let edge = try EdgeStack("quadctl")
        func quadctl(_ args: [String]) throws -> (Int32, String) {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: TestStack.binDir + "/quadctl")
            p.arguments = ["phone"] + args + ["--control", edge.controlEndpoint]
            let pipe = Pipe()
            p.standardOutput = pipe
            p.standardError = pipe
            try p.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return (p.terminationStatus, String(decoding: data, as: UTF8.self))
        }
        let (status, out) = try quadctl(["state"])
        try #require(!out.contains("unknown command 'phone'") && !out.contains("unknown option --control"),
                     "quadctl does not dispatch 'phone' yet: main.swift must call PhoneCommand.run (see Sources/quadctl/Phone.swift)")
        #expect(status == 0 && out.contains("phone-001"), "\(out)")
        #expect(try quadctl(["airplane", "on", "phone-001"]).0 == 0)
        #expect(try edge.state()["airplane"]?.bool == true)
        let (acted, text) = try quadctl(["act", "phone-001", "favorites.add", #"{"product":"p-0005"}"#])
        #expect(acted == 0 && text.hasPrefix("queued"), "\(text)")
        #expect(try quadctl(["airplane", "off"]).0 == 0)
        let (waited, drained) = try quadctl(["wait", "phone-001", "--timeout", "20000"])
        #expect(waited == 0 && drained.contains("drained"), "\(drained)")
    }
}
