import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadAnalytics

let testToken = "t0ken-for-tests-0123456789"

/// A server on a free port of 127.0.0.1 with an empty summary.
func emptyServer(_ limits: DashboardServer.Limits = DashboardServer.Limits(), signIn: DashboardServer.SignIn? = nil) throws -> DashboardServer {
    let snapshot = DashboardSnapshot()
    snapshot.update(summary: ["generated_at": 1, "questions": [], "facts": [:]])
    let server = DashboardServer(snapshot: snapshot, token: testToken, signIn: signIn, limits: limits)
    try server.start("127.0.0.1:0")
    return server
}

/// Whether the server closed `fd` without answering a request sent on it.
/// A server at its total limit leaves new connections in the kernel's
/// backlog unanswered, so 3 s of silence counts as refused too.
func refusedWithoutAnswer(_ fd: Int32) -> Bool {
    var tv = timeval(tv_sec: 3, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    return !String(decoding: readAll(fd), as: UTF8.self).hasPrefix("HTTP/1.1 200")
}

@Suite("The dashboard's credential and connection limits")
struct DashboardCredentialTests {
    @Test func aCredentialInTheURLIsRefusedAndNeverFollowed() throws {
        let server = DashboardServer(snapshot: DashboardSnapshot(), token: testToken)
        for target in ["/dashboard/?token=\(testToken)", "/dashboard?token=\(testToken)", "/api/v1/analytics/summary?token=\(testToken)",
                       "/dashboard/?v=2&access_token=\(testToken)", "/signin?email=a%40b.c&password=x"] {
            let a = server.answer(HTTPRequest("GET", target))
            #expect(a.status == 401, "\(target)")
            #expect(a.headers["Location"] == nil && !String(decoding: a.body, as: UTF8.self).contains(testToken), "\(target)")
        }
        // Even with a good header beside it: the link must be fixed, not used.
        #expect(server.answer(HTTPRequest("GET", "/dashboard/?token=\(testToken)", authorization: "Bearer \(testToken)")).status == 401)
        // Without a credential a page sends to the sign-in page, with nothing in the URL.
        let page = server.answer(HTTPRequest("GET", "/dashboard/"))
        #expect(page.status == 303 && page.headers["Location"] == "/signin")
        #expect(server.answer(HTTPRequest("GET", "/api/v1/analytics/summary")).status == 401)
        // With the header, a page and its redirect never carry the token.
        let bare = server.answer(HTTPRequest("GET", "/dashboard", authorization: "Bearer \(testToken)"))
        #expect(bare.status == 301 && bare.headers["Location"] == "/dashboard/")
        let signin = server.answer(HTTPRequest("GET", "/signin"))
        #expect(signin.status == 200 && String(decoding: signin.body, as: UTF8.self).contains("<form method=\"post\" action=\"/signin\">"))
        #expect(signin.headers["Content-Security-Policy"]?.contains("form-action 'self'") == true)
    }

    @Test func aSessionIsACookieFromTheSignInFormAndSignOutEndsIt() throws {
        let signIn: DashboardServer.SignIn = { email, password in
            guard password == "right-password" else { throw QuadError.unauthorized("wrong email or password") }
            return .init(user: email == "admin@quad.campus" ? "u-admin" : "u-student", role: email == "admin@quad.campus" ? "admin" : "student",
                         expiresAt: Int64(Clock.nowMillis()) + 600_000)
        }
        let server = DashboardServer(snapshot: DashboardSnapshot(), token: testToken, signIn: signIn)
        func post(_ form: String, from client: String = "127.0.0.1") -> HTTPAnswer {
            server.answer(HTTPRequest("POST", "/signin", contentType: "application/x-www-form-urlencoded", body: Array(form.utf8), client: client))
        }
        let ok = post("email=admin%40quad.campus&password=right-password")
        #expect(ok.status == 303 && ok.headers["Location"] == "/dashboard/")
        let cookie = try #require(ok.headers["Set-Cookie"])
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/") && !cookie.contains("Secure"))
        // The session lasts no longer than the token (10 minutes here).
        let maxAge = try #require(cookie.components(separatedBy: "Max-Age=").dropFirst().first?.prefix { $0.isNumber }).description
        #expect((1...600).contains(Int(maxAge) ?? 0))
        let value = String(cookie.split(separator: ";")[0])
        #expect(server.answer(HTTPRequest("GET", "/dashboard/", cookie: "other=1; " + value)).status == 200)
        #expect(server.answer(HTTPRequest("GET", "/api/v1/analytics/summary", cookie: value)).status == 200)
        // Signing out clears the cookie and ends the session on the server.
        let out = server.answer(HTTPRequest("POST", "/signout", cookie: value))
        #expect(out.status == 303 && out.headers["Set-Cookie"]?.contains("Max-Age=0") == true)
        #expect(server.answer(HTTPRequest("GET", "/dashboard/", cookie: value)).status == 303)
        #expect(server.answer(HTTPRequest("GET", "/signout")).status == 405)
        // A wrong password: 401 and no cookie; again at once from that address: 429.
        let wrong = post("email=admin%40quad.campus&password=guess")
        #expect(wrong.status == 401 && wrong.headers["Set-Cookie"] == nil)
        let again = post("email=admin%40quad.campus&password=right-password")
        #expect(again.status == 429 && again.headers["Retry-After"] != nil && again.headers["Set-Cookie"] == nil)
        // A student with the right password is not an admin. Another address is not slowed.
        let student = post("email=s%40quad.campus&password=right-password", from: "127.0.0.2")
        #expect(student.status == 403 && student.headers["Set-Cookie"] == nil)
        #expect(post("email=&password=x", from: "127.0.0.3").status == 400)
        #expect(server.answer(HTTPRequest("POST", "/signin", contentType: "application/json", body: Array("{}".utf8))).status == 415)
        // Under TLS the cookie is Secure.
        let tlsServer = DashboardServer(snapshot: DashboardSnapshot(), token: testToken, signIn: signIn, tls: (key: "k", cert: "c"))
        let secure = tlsServer.answer(HTTPRequest("POST", "/signin", contentType: "application/x-www-form-urlencoded",
                                                  body: Array("email=admin%40quad.campus&password=right-password".utf8)))
        #expect(secure.headers["Set-Cookie"]?.hasSuffix("; Secure") == true)
    }

    @Test func aRevocationEndsOnlyTheSessionsOfItsTokenOrItsAge() {
        let sessions = Sessions(max: 8)
        let later = Int64(Clock.nowMillis()) + 600_000
        let a = sessions.start(.init(user: "u1", role: "admin", expiresAt: later, tokenID: "jti-a", issuedAt: 1_000), expires: later)
        let b = sessions.start(.init(user: "u1", role: "admin", expiresAt: later, tokenID: "jti-b", issuedAt: 5_000), expires: later)
        let c = sessions.start(.init(user: "u2", role: "admin", expiresAt: later, tokenID: "jti-c", issuedAt: 1_000), expires: later)
        #expect(sessions.revoke(user: "u1", tokenID: "jti-c", issuedBefore: nil) == 0, "another user's token id ends nothing")
        #expect(sessions.revoke(user: "u1", tokenID: "jti-a", issuedBefore: nil) == 1)
        #expect(sessions.user(a) == nil && sessions.user(b) == "u1" && sessions.user(c) == "u2")
        #expect(sessions.revoke(user: "u1", tokenID: nil, issuedBefore: 5_000) == 0, "issued at the instant is not before it")
        #expect(sessions.revoke(user: "u1", tokenID: nil, issuedBefore: 5_001) == 1)
        #expect(sessions.user(b) == nil && sessions.user(c) == "u2")
    }

    @Test func sessionsAreBoundedBySetting() throws {
        let sessions = Sessions(max: 3)
        let far = Int64(Clock.nowMillis()) + 600_000
        let ids = (0..<5).map { sessions.start(user: "u-\($0)", expires: far + Int64($0)) }
        #expect(sessions.count == 3)
        // The ones ending soonest went.
        #expect(sessions.user(ids[0]) == nil && sessions.user(ids[1]) == nil && sessions.user(ids[4]) == "u-4")
        let ended = sessions.start(user: "late", expires: Int64(Clock.nowMillis()) - 1)
        #expect(sessions.user(ended) == nil)
    }

    @Test func oneAddressCannotHoldTheServer() throws {
        var limits = DashboardServer.Limits()
        limits.connectionsPerAddress = 3
        limits.connections = 5
        // Longer than the test can take: the held connections are idle, and
        // with 60 s the server closed one in a CI run where this test took
        // 172 s (four open of the five it waits for).
        limits.timeoutSeconds = 3_600
        let server = try emptyServer(limits)
        defer { server.stop() }
        // Three idle connections from one address: its share.
        let held = (0..<3).map { _ in connectLoopback(port: server.port) }
        defer { held.forEach { close($0) } }
        #expect(held.allSatisfy { $0 >= 0 })
        // A fourth from that address is closed without an answer...
        let fourth = connectLoopback(port: server.port)
        #expect(fourth >= 0 && refusedWithoutAnswer(fourth))
        close(fourth)
        // ...while another address is served.
        let (status, _, _) = try httpRequest(port: server.port, path: "/healthz", from: "127.0.0.2")
        #expect(status == 200)
        // The server counts that request's connection until its own thread has
        // cleaned it up, after the answer: opened before then, the second of
        // the two below was over the total and closed (four open, not five,
        // in CI and under load here).
        func waitForOpen(_ count: Int) -> Int {
            let until = Clock.monotonicMillis() + 30_000
            while (server.server?.openConnections ?? 0) != count && Clock.monotonicMillis() < until { usleep(10_000) }
            return server.server?.openConnections ?? -1
        }
        try #require(waitForOpen(3) == 3, "the three held connections alone are open")
        // The total is bounded too: with five open, a third address is refused.
        let more = (0..<2).map { _ in connectLoopback(port: server.port, from: "127.0.0.2") }
        defer { more.forEach { close($0) } }
        // Once the server has accepted them (a loaded machine's accept
        // thread may take its time: a fixed 200 ms wait failed in CI).
        let open = waitForOpen(5)
        try #require(open == 5, "five connections open: \(open)")
        let third = connectLoopback(port: server.port, from: "127.0.0.3")
        #expect(third >= 0 && refusedWithoutAnswer(third))
        close(third)
    }

    @Test func anIdleConnectionIsClosedAfterTheTimeout() throws {
        var limits = DashboardServer.Limits()
        limits.timeoutSeconds = 1
        let server = try emptyServer(limits)
        defer { server.stop() }
        let fd = connectLoopback(port: server.port)
        defer { close(fd) }
        let started = Clock.monotonicMillis()
        // Nothing sent: the server closes it (recv sees the end) well before our 10 s.
        #expect(readAll(fd).isEmpty)
        #expect(Clock.monotonicMillis() - started < 8000)
    }

    @Test func anOversizedSignInFormIsRefusedBeforeItIsRead() throws {
        let server = try emptyServer(signIn: { _, _ in throw QuadError.unauthorized("no") })
        defer { server.stop() }
        let big = "email=a%40b.c&password=" + String(repeating: "x", count: 5000)
        let (status, _, _) = try httpRequest(port: server.port, method: "POST", path: "/signin",
                                             headers: ["Content-Type": "application/x-www-form-urlencoded"], body: big)
        #expect(status == 413)
        let (wrong, headers, body) = try httpRequest(port: server.port, method: "POST", path: "/signin",
                                                     headers: ["Content-Type": "application/x-www-form-urlencoded"], body: "email=a%40b.c&password=x")
        #expect(wrong == 401 && headers["set-cookie"] == nil && body.contains("wrong email or password"))
    }
}

/// Broker, accounts (with an admin and cheap hashes), telemetry and
/// analytics with its dashboard, as processes.
func dashboardStack(_ name: String, telemetryDB: String? = nil, analyticsDB: String? = nil, extra: [String] = []) throws -> TestStack {
    let stack = try TestStack(name: name)
    try stack.startBroker()
    try stack.startWorker("quad-accounts", instance: "accounts/1",
                          extra: ["--password-hashing", "minimum", "--admin", "admin@quad.campus:admin-pass-7f3a9c"])
    try stack.startWorker("quad-telemetry", instance: "telemetry/1", db: telemetryDB)
    try stack.startWorker("quad-analytics", instance: "analytics/1", db: analyticsDB,
                          extra: ["--http", "127.0.0.1:0", "--refresh-ms", "200"] + extra, environment: ["QUAD_ADMIN_TOKEN": ""])
    for service in ["accounts", "telemetry", "analytics"] {
        #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000), "\(service) did not register")
    }
    return stack
}

/// Registers a student and signs in; returns its user id and token.
func student(_ stack: TestStack, _ email: String) throws -> (user: String, token: String) {
    let c = try stack.client()
    _ = try c.request("accounts.register", ["email": .string(email), "password": "student-pass-1234", "name": "Sam", "semester": 3])
    let login = try c.request("accounts.login", ["email": .string(email), "password": "student-pass-1234"])
    let token = try #require(login["token"]?.string)
    // The broker reads accounts' public key once accounts wrote it: wait
    // until it checks tokens.
    c.token = token
    #expect(try eventually { (try? c.request("accounts.profile.get", timeoutMs: 1000, attempts: 1)) != nil }, "the broker never accepted a token")
    return (try #require(login["user"]?.string), token)
}

func signInForm(_ email: String, _ password: String) -> String {
    "email=\(email.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&password=\(password.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
}

@Suite("Signing in to the dashboard, as processes", .serialized)
struct DashboardSignInTests {
    @Test func anAdminSignsInThroughAccountsAndOthersAreRefused() throws {
        let stack = try dashboardStack("signin")
        _ = try student(stack, "sam@quad.campus")
        let port = try dashboardPort(stack, "analytics/1")
        let token = try String(contentsOfFile: stack.dir + "/keys/analytics.token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        // The admin token in a URL: refused, and not echoed anywhere.
        let (s1, h1, b1) = try httpGet(port: port, path: "/dashboard/?token=\(token)")
        #expect(s1 == 401 && h1["location"] == nil && !b1.contains(token))
        // No credential: to the sign-in page, with nothing in its URL.
        let (s2, h2, _) = try httpGet(port: port, path: "/dashboard/")
        #expect(s2 == 303 && h2["location"] == "/signin")
        let form = ["Content-Type": "application/x-www-form-urlencoded"]
        // The admin's email and password, checked by accounts: a cookie.
        let (s3, h3, _) = try httpRequest(port: port, method: "POST", path: "/signin", headers: form,
                                          body: signInForm("admin@quad.campus", "admin-pass-7f3a9c"))
        #expect(s3 == 303 && h3["location"] == "/dashboard/")
        let cookie = try #require(h3["set-cookie"])
        #expect(cookie.hasPrefix("quad_session=") && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
        #expect(!cookie.contains(token))
        let session = String(cookie.split(separator: ";")[0])
        let (s4, _, page) = try httpGet(port: port, path: "/dashboard/", headers: ["Cookie": session])
        #expect(s4 == 200 && page.contains("<section class=\"card\"") && page.contains("action=\"/signout\""))
        let (s5, _, summary) = try httpGet(port: port, path: "/api/v1/analytics/summary", headers: ["Cookie": session])
        #expect(s5 == 200 && (try? JSON.parse(summary))?["questions"]?.array?.isEmpty == false)
        // A wrong password: refused, no cookie; the student's right one: not an admin.
        let (s6, h6, b6) = try httpRequest(port: port, method: "POST", path: "/signin", headers: form,
                                           body: signInForm("admin@quad.campus", "not-the-password"))
        #expect(s6 == 401 && h6["set-cookie"] == nil && b6.contains("wrong email or password"))
        let (s7, h7, _) = try httpRequest(port: port, method: "POST", path: "/signin", headers: form,
                                          body: signInForm("sam@quad.campus", "student-pass-1234"), from: "127.0.0.2")
        #expect(s7 == 403 && h7["set-cookie"] == nil)
        // Signing out clears the cookie, and the old value opens nothing.
        let (s8, h8, _) = try httpRequest(port: port, method: "POST", path: "/signout", headers: ["Cookie": session])
        #expect(s8 == 303 && h8["set-cookie"]?.contains("Max-Age=0") == true)
        let (s9, h9, _) = try httpGet(port: port, path: "/dashboard/", headers: ["Cookie": session])
        #expect(s9 == 303 && h9["location"] == "/signin")
        // The header still serves scripts.
        #expect(try httpGet(port: port, path: "/api/v1/analytics/summary", headers: ["Authorization": "Bearer \(token)"]).0 == 200)
    }

    @Test func aRevokedTokenEndsTheDashboardSessionItOpened() throws {
        let stack = try dashboardStack("signin-revoked")
        let port = try dashboardPort(stack, "analytics/1")
        let form = ["Content-Type": "application/x-www-form-urlencoded"]
        func signIn(_ password: String) throws -> String {
            let (status, headers, _) = try httpRequest(port: port, method: "POST", path: "/signin", headers: form,
                                                       body: signInForm("admin@quad.campus", password))
            #expect(status == 303, "sign-in answered \(status)")
            return String(try #require(headers["set-cookie"]).split(separator: ";")[0])
        }
        func open(_ session: String) throws -> Bool { try httpGet(port: port, path: "/dashboard/", headers: ["Cookie": session]).0 == 200 }
        let first = try signIn("admin-pass-7f3a9c")
        #expect(try open(first))
        // The admin changes the password from a phone: every token issued
        // before it is revoked, the dashboard's session with them.
        let c = try stack.client()
        let login = try c.request("accounts.login", ["email": "admin@quad.campus", "password": "admin-pass-7f3a9c"])
        c.token = try #require(login["token"]?.string)
        #expect(try eventually { (try? c.request("accounts.profile.get", timeoutMs: 1000, attempts: 1)) != nil }, "the broker never accepted a token")
        _ = try c.request("accounts.profile.update", ["password": "admin-pass-changed-1", "current_password": "admin-pass-7f3a9c"])
        #expect(try eventually(30_000) { try !open(first) }, "the session opened before the password change still opens the dashboard")
        let (s, h, _) = try httpGet(port: port, path: "/dashboard/", headers: ["Cookie": first])
        #expect(s == 303 && h["location"] == "/signin")
        // A session opened after it lives on.
        let second = try signIn("admin-pass-changed-1")
        #expect(try open(second))
    }

    @Test func theConnectionLimitsAreSettings() throws {
        let stack = try dashboardStack("httplimits", extra: ["--http-max-connections-per-address", "2", "--http-connection-timeout-seconds", "60"])
        let port = try dashboardPort(stack, "analytics/1")
        let held = (0..<2).map { _ in connectLoopback(port: port) }
        defer { held.forEach { close($0) } }
        let third = connectLoopback(port: port)
        #expect(third >= 0 && refusedWithoutAnswer(third))
        close(third)
        #expect(try httpRequest(port: port, path: "/healthz", from: "127.0.0.2").0 == 200)
    }
}

@Suite("Telemetry attribution, as processes", .serialized)
struct AttributionStackTests {
    static var stores: [Bool] { TestStore.postgresURL == nil ? [false] : [false, true] }

    /// A PostgreSQL URL with a fresh schema of its own.
    static func schema(_ prefix: String) throws -> String {
        let url = try #require(TestStore.postgresURL)
        let name = "\(prefix)\(UInt32.random(in: 0...UInt32.max))"
        try PostgresDatabase(url: url).executeScript("CREATE SCHEMA \(name)")
        return url + (url.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(name)"
    }

    @Test(arguments: stores)
    func aStudentsEventsAreTheStudentsWhateverTheBodySays(postgres: Bool) throws {
        let telemetryDB = postgres ? try Self.schema("tel") : nil
        let analyticsDB = postgres ? try Self.schema("ana") : nil
        let stack = try dashboardStack("attribution", telemetryDB: telemetryDB, analyticsDB: analyticsDB)
        let victim = try student(stack, "victim@quad.campus")
        let sam = try student(stack, "sam@quad.campus")
        func events(_ range: Range<Int>) -> JSON {
            .array(range.map { k in
                ["id": .string("019ad9a2-0000-7000-8000-" + String(format: "%012x", k)), "phone": "ph-sam", "user": .string(victim.user),
                 "session": "s-1", "name": "view.opened", "ts": .int(1_764_583_200_000 + Int64(k)), "offline": false, "props": ["view": "home"]]
            })
        }
        let phone = try stack.client(source: "edge/sam")
        phone.token = sam.token
        #expect(try phone.request("telemetry.ingest", ["events": events(0..<5)])["accepted"] == 5)
        let guest = try stack.client(source: "edge/guest")
        #expect(try guest.request("telemetry.ingest", ["events": events(5..<8)])["accepted"] == 3)
        // Telemetry's rows and analytics' facts: the student's, or nobody's.
        let telemetry: Database = try telemetryDB.map { try PostgresDatabase(url: $0) } ?? SQLiteDatabase(path: stack.dir + "/telemetry.db")
        let analytics: Database = try analyticsDB.map { try PostgresDatabase(url: $0) } ?? SQLiteDatabase(path: stack.dir + "/analytics.db")
        let stored = try telemetry.query("SELECT user_id FROM events ORDER BY seq").map { $0.optionalString("user_id") }
        #expect(stored == Array(repeating: sam.user, count: 5) + [nil, nil, nil])
        #expect(try eventually(30_000) { try analytics.queryOne("SELECT COUNT(*) AS n FROM tel_events")?.int("n") == 8 })
        let facts = try analytics.query("SELECT user_id, driver FROM tel_events ORDER BY seq")
        #expect(facts.map { $0.optionalString("user_id") } == Array(repeating: sam.user, count: 5) + [nil, nil, nil])
        #expect(facts.allSatisfy { $0.string("driver") != victim.user })
        #expect(try analytics.queryOne("SELECT COUNT(*) AS n FROM tel_events WHERE user_id = $1 OR driver = $1", .text(victim.user))?.int("n") == 0)
    }
}

@Suite("The dashboard over HTTPS")
struct DashboardTLSTests {
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") && FileManager.default.isExecutableFile(atPath: "/usr/bin/curl"),
                   "needs openssl and curl"))
    func overTLSTheSessionCookieIsSecure() throws {
        let dir = NSTemporaryDirectory() + "quad-tls-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        func run(_ tool: String, _ arguments: [String]) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: tool)
            p.arguments = arguments
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
        _ = try run("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                                         "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem"])
        let tls = (key: try String(contentsOfFile: dir + "/key.pem", encoding: .utf8), cert: try String(contentsOfFile: dir + "/cert.pem", encoding: .utf8))
        let server = DashboardServer(snapshot: DashboardSnapshot(), token: testToken, signIn: { _, _ in
            .init(user: "u-admin", role: "admin", expiresAt: Int64(Clock.nowMillis()) + 600_000)
        }, tls: tls)
        let port = try server.start("127.0.0.1:0")
        defer { server.stop() }
        let health = try run("/usr/bin/curl", ["-sk", "https://127.0.0.1:\(port)/healthz"])
        #expect(health == "ok\n")
        let head = try run("/usr/bin/curl", ["-sk", "-o", "/dev/null", "-D", "-", "--data", "email=a%40b.c&password=x", "https://127.0.0.1:\(port)/signin"])
        let cookie = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("set-cookie:") }.map(String.init) ?? ""
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.hasSuffix("; Secure"), "\(head)")
        // Plain HTTP to the HTTPS port gets no page.
        #expect(try run("/usr/bin/curl", ["-s", "--max-time", "3", "http://127.0.0.1:\(port)/healthz"]) != "ok\n")
    }
}
