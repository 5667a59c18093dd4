import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// The nemesis's `edge` fault: `quad-edge run` SIGKILLed in the middle of
/// the campus day and started again with the same arguments (the remaining
/// duration) on the same phone files. Every process is real; the test reads
/// the phones' files and the services' stores.
@Suite("A campus day through a SIGKILL of quad-edge", .serialized)
struct EdgeRestartTests {
    /// What deploy/checker.py --install-history puts in each phone's file,
    /// as the checker itself prints it (`--history-sql`), never a copy.
    static func historySQL() throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", root + "/deploy/checker.py", "--history-sql"]
        let out = Pipe()
        p.standardOutput = out
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let sql = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0, sql.contains("CREATE TRIGGER") else {
            throw QuadError(code: .internal, status: 500, message: "deploy/checker.py --history-sql exited \(p.terminationStatus) printing: \(sql.prefix(200))")
        }
        return sql
    }

    static let phones = 8

    func files(_ dir: String) -> [String] {
        (1...EdgeRestartTests.phones).map { String(format: "\(dir)/student-%03d.db", $0) }
    }

    @Test func aDayKilledMidwayGoesOnWithTheSameAccountsAndAnswersEveryQueuedActionOnce() throws {
        let edge = try EdgeStack("restart", holdSeconds: 8)
        try edge.edge("edge.stop")
        let dir = edge.stack.dir + "/campus-phones"
        let control = "ipc://\(edge.stack.dir)/campus-control"
        func arguments(duration: Int, report: String) -> [String] {
            ["run", "--frontend", edge.stack.endpoints.frontend, "--dir", dir, "--phones", String(EdgeRestartTests.phones), "--prefix", "student",
             "--control", control, "--seed", "5", "--speed", "20", "--duration", String(duration), "--hold-seconds", "8",
             "--action-timeout-ms", "1000", "--backoff-cap-ms", "2000", "--telemetry-every-ms", "500", "--drain-timeout", "120",
             "--report", report]
        }
        let first = try edge.stack.start("campus-1", executable: "quad-edge", arguments: arguments(duration: 40, report: edge.stack.dir + "/report-1.json"))
        let client = try Client(endpoint: control, source: "restart-test")
        func report() -> JSON? { try? client.request("edge.report", timeoutMs: 1000, attempts: 1) }

        // Into the day: the students have made actions.
        var until = Clock.monotonicMillis() + 90_000
        while (report()?["actions"]?["created"]?.int ?? 0) < 20 {
            try #require(first.isRunning && Clock.monotonicMillis() < until, "no day under way:\n\(edge.stack.log("campus-1").suffix(2000))")
            usleep(200_000)
        }
        let users = try #require(try client.request("edge.state", timeoutMs: 2000, attempts: 1)["phones"]?.array).map { $0["user"]?.string }
        #expect(users.count == EdgeRestartTests.phones && users.allSatisfy { $0 != nil }, "every phone signed in before the day: \(users)")
        // The broker stops answering: actions are sent and not answered, then the process dies.
        edge.signal("broker", SIGSTOP)
        until = Clock.monotonicMillis() + 30_000
        while (report()?["actions"]?["pending"]?.int ?? 0) < 3 && Clock.monotonicMillis() < until { usleep(200_000) }
        usleep(1_500_000)  // each head of an outbox sent at least once, unanswered
        edge.stack.kill("campus-1", signal: SIGKILL)

        // What the killed process left in the phones' files.
        var sentUnanswered: [String: String] = [:]  // id: type
        var createdBefore = 0
        let historySQL = try EdgeRestartTests.historySQL()
        for file in files(dir) {
            let db = try SQLiteDatabase(path: file)
            defer { db.close() }
            for r in try db.query("SELECT a.id, a.type FROM action_log a JOIN outbox o ON o.id = a.id WHERE a.outcome = 'pending' AND o.attempts > 0") {
                sentUnanswered[r.string("id")] = r.string("type")
            }
            createdBefore += Int(try db.queryOne("SELECT COUNT(*) AS n FROM action_log")?.int("n") ?? 0)
            #expect(try db.queryOne("SELECT value FROM meta WHERE key = 'campus_day'") != nil, "\(file): the day's mark is in the file")
            try db.executeScript(historySQL)
        }
        try #require(!sentUnanswered.isEmpty, "some actions were sent and not answered at the kill")
        edge.signal("broker", SIGCONT)

        // Started again with the same arguments and the remaining duration.
        let restartedWall = Int64(Clock.nowMillis())
        let second = try edge.stack.start("campus-2", executable: "quad-edge", arguments: arguments(duration: 12, report: edge.stack.dir + "/report-2.json"))
        let deadline = Date().addingTimeInterval(240)
        while second.isRunning && Date() < deadline { usleep(200_000) }
        #expect(!second.isRunning, "the resumed day did not end in 4 minutes")
        if second.isRunning { second.terminate() }
        second.waitUntilExit()
        let output = edge.stack.log("campus-2")
        #expect(second.terminationStatus == 0, "exit \(second.terminationStatus):\n\(output.suffix(3000))")

        // The report covers the whole day and says it was resumed.
        let json = try JSON.parse(try String(contentsOfFile: edge.stack.dir + "/report-2.json", encoding: .utf8))
        #expect(json["resumed"] != nil, "the report says whether the day was resumed")
        let resumed = json["resumed"] ?? [:]
        #expect(resumed["restarts"]?.int == 1)
        #expect(resumed["resumed_phones"]?.int == Int64(EdgeRestartTests.phones))
        #expect(json["accounted"]?.bool == true && json["actions"]?["pending"]?.int == 0, "\(json)")
        #expect(output.contains("Resumed after 1 restart"))

        // The phones' files: the same accounts, nothing left, the history recorder still there.
        var createdAll = 0
        var done: [String: String] = [:]
        var outcomes: [String: String] = [:]
        for (k, file) in files(dir).enumerated() {
            let db = try SQLiteDatabase(path: file)
            defer { db.close() }
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM outbox")?.int("n") == 0, "\(file): outbox empty at the end")
            #expect(try db.queryOne("SELECT user_id FROM session")?.optionalString("user_id") == users[k], "\(file): the same account after the restart")
            for r in try db.query("SELECT id, type, outcome FROM action_log") {
                outcomes[r.string("id")] = r.string("outcome")
                if r.string("outcome") == "done" { done[r.string("id")] = r.string("type") }
            }
            createdAll += Int(try db.queryOne("SELECT COUNT(*) AS n FROM action_log")?.int("n") ?? 0)
            let triggers = Set(try db.query("SELECT name FROM sqlite_master WHERE type = 'trigger'").map { $0.string("name") })
            #expect(triggers.isSuperset(of: ["chaos_action_made", "chaos_event_recorded"]), "\(file): the history triggers survive the restart: \(triggers)")
            let missed = try db.queryOne("""
                SELECT COUNT(*) AS n FROM action_log WHERE created_ms >= $1 AND id NOT IN (SELECT id FROM chaos_actions)
                """, .int(restartedWall))?.int("n")
            #expect(missed == 0, "\(file): every action of the resumed process is in the history")
        }
        #expect(json["actions"]?["created"]?.int == Int64(createdAll), "the report counts every action of the day, before and after the kill (\(createdBefore) before it)")
        #expect(createdAll > createdBefore, "the students went on after the restart")

        // No second registration: one account per phone.
        let accounts = try edge.store("accounts")
        defer { accounts.close() }
        #expect(try accounts.queryOne("SELECT COUNT(*) AS n FROM users WHERE email LIKE 'student-%'")?.int("n") == Int64(EdgeRestartTests.phones))

        // Every action sent and not answered at the kill was answered after
        // it, under its id, and applied once.
        for (id, type) in sentUnanswered {
            #expect(outcomes[id] == "done" || outcomes[id] == "rejected", "\(type) \(id) settled after the restart: \(outcomes[id] ?? "missing")")
        }
        var byService: [String: [String]] = [:]
        // orders.return is idempotent by the rental, not by envelope id
        // (Sources/QuadOrders/Rentals.swift registers it without a record):
        // a day whose students return a rental has no record to find for it.
        for (id, type) in done where type != "orders.return" { byService[String(type.split(separator: ".")[0]), default: []].append(id) }
        for (service, ids) in byService {
            let answered = try edge.answered(service, ids)
            #expect(answered.count == ids.count, "\(service): every done action has its one idempotency record (\(ids.count - answered.count) missing)")
        }
        // The rows the services made with an action's id as their key: one
        // per done action, none the phones do not know of.
        let userList = users.compactMap { $0 }.map { "'\($0)'" }.joined(separator: ",")
        for (service, table, type) in [("orders", "orders", "orders.place"), ("reservations", "reservations", "reservations.hold")] {
            let db = try edge.store(service)
            defer { db.close() }
            let rows = try db.query("SELECT id FROM \(table) WHERE user_id IN (\(userList))").map { $0.string("id") }
            #expect(Set(rows).count == rows.count)
            let doneIDs = Set(done.filter { $0.value == type }.keys)
            #expect(doneIDs.isSubset(of: Set(rows)), "\(type): every done action made its row")
            #expect(Set(rows).isSubset(of: Set(outcomes.keys)), "\(type): no row for an action the phones never made")
        }
        let telemetry = try edge.store("telemetry")
        defer { telemetry.close() }
        #expect(try telemetry.queryOne("SELECT COUNT(*) AS n FROM events WHERE name = 'app.crash' AND phone LIKE 'student-%'")?.int("n")
                == Int64(EdgeRestartTests.phones), "each phone's killed session is reported as one crash")
        #expect(try edge.telemetryConflicts() == 0, "a batch resent after the restart carries the same events")
    }

    /// Killed while every phone's registration is on its way (accounts
    /// stopped, so none is answered): the next process has a new CURVE key,
    /// so the resent registration is another caller's to accounts (its id
    /// is taken by the first process's). Every phone still ends with one
    /// account, its own, and the day drains.
    @Test func killedMidSignInEveryPhoneEndsWithOneAccount() throws {
        let edge = try EdgeStack("restart-sign-in")
        try edge.edge("edge.stop")
        let dir = edge.stack.dir + "/campus-phones"
        func arguments(report: String) -> [String] {
            ["run", "--frontend", edge.stack.endpoints.frontend, "--dir", dir, "--phones", String(EdgeRestartTests.phones), "--prefix", "student",
             "--control", "none", "--seed", "9", "--speed", "20", "--duration", "8", "--hold-seconds", "8",
             "--action-timeout-ms", "1000", "--backoff-cap-ms", "2000", "--telemetry-every-ms", "500", "--drain-timeout", "60",
             "--sign-in-timeout", "30", "--report", report,
             // Shared: registerIDs() reads the phones' files while the first process runs.
             "--file-locking", "shared"]
        }
        edge.signal("accounts/1", SIGSTOP)
        _ = try edge.stack.start("campus-1", executable: "quad-edge", arguments: arguments(report: edge.stack.dir + "/report-1.json"))
        // Every phone's file is made and its registration sent (the first
        // sign-ins at once, the rest as the window's time out).
        var until = Clock.monotonicMillis() + 30_000
        func registerIDs() -> [String] {
            files(dir).compactMap { file in
                guard let db = try? SQLiteDatabase(path: file) else { return nil }
                defer { db.close() }
                return (try? db.queryOne("SELECT register_id FROM session"))??.string("register_id")
            }
        }
        while registerIDs().count < EdgeRestartTests.phones && Clock.monotonicMillis() < until { usleep(200_000) }
        usleep(3_000_000)  // the registrations wait for the stopped accounts
        edge.stack.kill("campus-1", signal: SIGKILL)
        let firstIDs = registerIDs()
        try #require(firstIDs.count == EdgeRestartTests.phones)
        // Accounts wakes up: it applies the dead process's registrations.
        edge.signal("accounts/1", SIGCONT)
        let accounts = try edge.store("accounts")
        defer { accounts.close() }
        func registered() -> Int64 { (try? accounts.queryOne("SELECT COUNT(*) AS n FROM users WHERE email LIKE 'student-%'"))??.int("n") ?? 0 }
        until = Clock.monotonicMillis() + 20_000
        while registered() == 0 && Clock.monotonicMillis() < until { usleep(100_000) }
        try #require(registered() > 0, "some registrations of the killed process were applied")

        let second = try edge.stack.start("campus-2", executable: "quad-edge", arguments: arguments(report: edge.stack.dir + "/report-2.json"))
        let deadline = Date().addingTimeInterval(180)
        while second.isRunning && Date() < deadline { usleep(200_000) }
        #expect(!second.isRunning, "the day did not end in 3 minutes")
        if second.isRunning { second.terminate() }
        second.waitUntilExit()
        #expect(second.terminationStatus == 0, "exit \(second.terminationStatus):\n\(edge.stack.log("campus-2").suffix(3000))")
        #expect(registered() == Int64(EdgeRestartTests.phones), "one account per phone, none made twice")
        let users = try accounts.query("SELECT id, email FROM users WHERE email LIKE 'student-%'")
        for file in files(dir) {
            let db = try SQLiteDatabase(path: file)
            defer { db.close() }
            let session = try #require(try db.queryOne("SELECT email, user_id FROM session"))
            let mine = users.filter { $0.string("email") == session.string("email") }
            #expect(mine.count == 1 && mine.first?.string("id") == session.optionalString("user_id"), "\(file): signed in as its own one account")
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM outbox")?.int("n") == 0, "\(file): outbox empty at the end")
        }
    }
}
