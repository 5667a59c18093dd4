import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadAnalytics

/// A TCP connection to 127.0.0.1:`port`, from the loopback address `from`
/// (any 127.x.y.z works on Linux without setup), or -1.
func connectLoopback(port: UInt16, from: String = "127.0.0.1") -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return -1 }
    var local = sockaddr_in()
    local.sin_family = sa_family_t(AF_INET)
    local.sin_addr.s_addr = inet_addr(from)
    let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard bound == 0, ok == 0 else {
        close(fd)
        return -1
    }
    // No answer within 10 s is a failure of the test, not a hang.
    var tv = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    return fd
}

/// Reads until the peer closes (or 10 s pass): what a server answered.
func readAll(_ fd: Int32) -> [UInt8] {
    var data = [UInt8]()
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n <= 0 { break }
        data += buffer[0..<n]
    }
    return data
}

/// A plain HTTP/1.1 request over a socket; returns the status, headers and body.
func httpRequest(port: UInt16, method: String = "GET", path: String, headers: [String: String] = [:], body: String? = nil,
                 from: String = "127.0.0.1") throws -> (Int, [String: String], String) {
    let fd = connectLoopback(port: port, from: from)
    try #require(fd >= 0, "cannot connect to 127.0.0.1:\(port) from \(from)")
    defer { close(fd) }
    var request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for (k, v) in headers { request += "\(k): \(v)\r\n" }
    if let body { request += "Content-Length: \(body.utf8.count)\r\n" }
    request += "\r\n" + (body ?? "")
    _ = request.withCString { send(fd, $0, strlen($0), 0) }
    let text = String(decoding: readAll(fd), as: UTF8.self)
    let parts = text.components(separatedBy: "\r\n\r\n")
    let head = parts[0].components(separatedBy: "\r\n")
    let status = head[0].split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
    var fields: [String: String] = [:]
    for line in head.dropFirst() {
        if let colon = line.firstIndex(of: ":") {
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }
    var text2 = parts.dropFirst().joined(separator: "\r\n\r\n")
    if fields["transfer-encoding"] == "chunked" { text2 = dechunk(text2) }
    return (status, fields, text2)
}

func httpGet(port: UInt16, path: String, headers: [String: String] = [:]) throws -> (Int, [String: String], String) {
    try httpRequest(port: port, path: path, headers: headers)
}

func dechunk(_ s: String) -> String {
    var out = "", rest = Substring(s)
    while let eol = rest.range(of: "\r\n"), let size = Int(rest[..<eol.lowerBound], radix: 16), size > 0 {
        let start = eol.upperBound
        let bytes = Array(rest[start...].utf8)
        out += String(decoding: bytes[0..<size], as: UTF8.self)
        rest = Substring(String(decoding: bytes[(size + 2)...], as: UTF8.self))
    }
    return out
}

@Suite("Analytics requests and the dashboard")
struct DashboardTests {
    @Test func questionsAreForAdminsAndNameWhatIsWrong() throws {
        let p = try Planted(postgres: false)
        #expect(throws: QuadError.forbidden("")) { try p.handlers.call("analytics.summary", user: alice, role: "student") }
        #expect(throws: QuadError.unauthorized("")) { try p.handlers.call("analytics.question", ["id": "fee_per_week"]) }
        #expect { try p.handlers.call("analytics.question", ["id": "nope"], role: "admin") } throws: {
            ($0 as? QuadError)?.code == .badRequest && ($0 as? QuadError)?.message.hasPrefix("body.id must be one of buy_vs_rent, ") == true
                && ($0 as? QuadError)?.message.hasSuffix("got 'nope'") == true
        }
        #expect { try p.handlers.call("analytics.question", ["id": "fee_per_week", "from": 10, "to": 5], role: "admin") } throws: {
            ($0 as? QuadError)?.message == "body.from must be before body.to"
        }
        #expect { try p.handlers.call("analytics.summary", ["since": 1], role: "admin") } throws: {
            ($0 as? QuadError)?.message == "body.since is not a field of analytics.summary: expected from, to"
        }
        try p.plantMarketplace()
        let one = try p.handlers.call("analytics.question", ["id": "fee_per_week", "from": .int(at(8, 0))], role: "admin")
        #expect(one["rows"] == [["2025-12-08", 3, 1.35, 22.35]])
        #expect(one["columns"] == ["week", "orders", "fee", "sales"])
        #expect(one["from"] == .int(at(8, 0)))
    }

    /// A fuzz finding (service-analytics): `after` near Int64.max trapped
    /// on `after + 1` in `events.since`, for any caller, before this fix.
    @Test func eventsSinceTakesACursorUpToInt64Max() throws {
        let p = try Planted(postgres: false)
        for after in [Int64.max, Int64.max - 1, 9_000_000_000_000_000] {
            let page = try p.handlers.call("analytics.events.since", ["after": .int(after)])
            #expect(page["events"] == [], "after \(after)")
            #expect(page["missed"] == nil, "after \(after)")
        }
        // The ordinary cursor: an empty outbox, nothing missed.
        let page = try p.handlers.call("analytics.events.since", ["after": 0])
        #expect(page["missed"] == nil && page["oldest"] == .int(1))
    }

    @Test(arguments: stores)
    func noUserIDEmailOrPhoneLeavesTheService(postgres: Bool) throws {
        let p = try Planted(postgres: postgres)
        try p.plantAll()
        let summary = try p.handlers.call("analytics.summary", role: "admin")
        let snapshot = DashboardSnapshot()
        snapshot.update(summary: summary)
        let server = DashboardServer(snapshot: snapshot, token: "t0ken-for-tests-0123456789")
        let api = server.answer(HTTPRequest("GET", "/api/v1/analytics/summary", authorization: "Bearer t0ken-for-tests-0123456789"))
        let page = server.answer(HTTPRequest("GET", "/dashboard/", authorization: "Bearer t0ken-for-tests-0123456789"))
        #expect(api.status == 200 && page.status == 200)
        var questionsPerSummary: [String] = []
        for q in p.questions { questionsPerSummary.append(try p.handlers.call("analytics.question", ["id": .string(q.id)], role: "admin").text) }
        let outputs = [summary.text, String(decoding: api.body, as: UTF8.self), String(decoding: page.body, as: UTF8.self)] + questionsPerSummary
        // The planted data really is behind the answers...
        #expect(summary["questions"]?.array?.allSatisfy { ($0["rows"]?.array?.count ?? 0) > 0 } == true)
        // ...and none of the people in it shows.
        for secret in [alice, bob, carol, dave, erin, guestPhone, "phone:" + guestPhone] + emails + listingIDs {
            for (k, out) in outputs.enumerated() { #expect(!out.contains(secret), "output \(k) contains \(secret)") }
        }
    }

    @Test func theDashboardHasACardAndAChartPerQuestionBehindTheToken() throws {
        let p = try Planted(postgres: false)
        try p.plantAll()
        let snapshot = DashboardSnapshot()
        snapshot.update(summary: try Analytics.summarize(p.db, questions: p.questions, from: 0, to: Int64.max))
        let server = DashboardServer(snapshot: snapshot, token: "t0ken-for-tests-0123456789")
        #expect(server.answer(HTTPRequest("GET", "/dashboard/")).headers["Location"] == "/signin")
        #expect(server.answer(HTTPRequest("GET", "/dashboard/", authorization: "Bearer wrong")).status == 303)
        #expect(server.answer(HTTPRequest("GET", "/api/v1/analytics/summary", authorization: "Bearer t0ken-for-tests-012345678")).status == 401)
        #expect(server.answer(HTTPRequest("POST", "/dashboard/")).status == 405)
        #expect(server.answer(HTTPRequest("GET", "/etc/passwd")).status == 404)
        #expect(server.answer(HTTPRequest("GET", "/healthz")).status == 200)
        let page = server.answer(HTTPRequest("GET", "/dashboard/", authorization: "Bearer t0ken-for-tests-0123456789"))
        let html = String(decoding: page.body, as: UTF8.self)
        #expect(page.contentType == "text/html; charset=utf-8")
        #expect(html.components(separatedBy: "<section class=\"card\"").count - 1 == p.questions.count)
        #expect(html.components(separatedBy: "<svg ").count - 1 == p.questions.count)
        #expect(html.components(separatedBy: "<table>").count - 1 == p.questions.count)
        for q in p.questions { #expect(html.contains("id=\"q-\(q.id)\""), "\(q.id)") }
        // The one script comes from the dashboard itself (script-src 'self'),
        // to anyone: code, no data. It refreshes every 30 s while visible, and on Refresh.
        #expect(html.contains("<script src=\"/dashboard/dashboard.js\"></script>") && !html.contains("<script nonce"))
        #expect(html.contains("<button id=\"refresh\" type=\"submit\">Refresh</button>"))
        let script = server.answer(HTTPRequest("GET", "/dashboard/dashboard.js"))
        let code = String(decoding: script.body, as: UTF8.self)
        #expect(script.status == 200 && script.contentType.hasPrefix("text/javascript"))
        #expect(code.contains("document.visibilityState") && code.contains("30000") && code.contains("'refresh'"))
        #expect(server.answer(HTTPRequest("POST", "/dashboard/dashboard.js")).status == 405)
        // The style's nonce is fresh per response and in the CSP header.
        let csp = try #require(page.headers["Content-Security-Policy"])
        let nonce = try #require(csp.components(separatedBy: "'nonce-").dropFirst().first?.prefix(32))
        #expect(html.contains("<style nonce=\"\(nonce)\">") && !html.contains(Dashboard.nonceMark))
        #expect(csp.contains("script-src 'self';") && !csp.contains("script-src 'nonce"))
        // ParkWise's twelve cards come first, by number, then UniTrade's two, each naming its app, number, type and owner.
        let numbers = html.components(separatedBy: "data-number=\"").dropFirst().compactMap { $0.split(separator: "\"").first.map(String.init) }
        #expect(numbers == (1...12).map { "BQ\($0)" } + ["UQ1", "UQ2"])
        #expect(html.contains("UniTrade · UQ1 · Type 3: how students use a feature · owner UniTrade team (Swift and Flutter: Buy Now, from Home and Favorites) · purchase_screen"))
        #expect(html.contains("UniTrade · UQ2 · Type 4: the campus&#39;s business · owner UniTrade team (Swift and Flutter: Buy Now, with the buyer&#39;s semester) · purchases_by_semester"))
        #expect(html.contains("<span class=\"number\">UQ2</span>Purchases by semester"))
        #expect(html.contains("ParkWise · BQ8 · Type 3: how drivers use a feature"))
        #expect(html.contains("ParkWise · BQ9 · Type 4: the campus&#39;s business · owner Fabio Higuera (Android: No campus spots) · nearby_parked"))
        #expect(html.contains("<span class=\"number\">BQ12</span>Where accessible and EV spots are free"))
        #expect(csp.hasPrefix("default-src 'none'"))
        let again = server.answer(HTTPRequest("GET", "/dashboard/", authorization: "Bearer t0ken-for-tests-0123456789"))
        #expect(again.headers["Content-Security-Policy"] != csp)
        // Bars and heat cells are drawn with their values in tooltips.
        #expect(html.contains("<rect class=\"bar\"") && html.contains("<rect class=\"cell\""))
        #expect(html.contains("<title>ML P1 8: 60.2</title>"))
    }

    @Test func servesOverHTTPWithMicrohttpd() throws {
        let snapshot = DashboardSnapshot()
        snapshot.update(summary: ["generated_at": 1, "questions": [], "facts": [:]])
        let server = DashboardServer(snapshot: snapshot, token: "t0ken-for-tests-0123456789")
        let port = try server.start("127.0.0.1:0")
        defer { server.stop() }
        #expect(port > 0)
        let (s1, _, _) = try httpGet(port: port, path: "/api/v1/analytics/summary")
        #expect(s1 == 401)
        let (s2, h2, b2) = try httpGet(port: port, path: "/api/v1/analytics/summary", headers: ["Authorization": "Bearer t0ken-for-tests-0123456789"])
        #expect(s2 == 200 && h2["content-type"] == "application/json")
        #expect(try JSON.parse(b2)["generated_at"] == 1)
        let (s3, h3, b3) = try httpGet(port: port, path: "/dashboard/", headers: ["Authorization": "Bearer t0ken-for-tests-0123456789"])
        #expect(s3 == 200 && b3.hasPrefix("<!doctype html>") && h3["content-security-policy"] != nil)
        // The snapshot swaps under a running server.
        snapshot.update(summary: ["generated_at": 2, "questions": [], "facts": [:]])
        let (_, _, b4) = try httpGet(port: port, path: "/api/v1/analytics/summary", headers: ["Authorization": "Bearer t0ken-for-tests-0123456789"])
        #expect(try JSON.parse(b4)["generated_at"] == 2)
        // A second server on the same port is refused, naming the address.
        let other = DashboardServer(snapshot: snapshot, token: "x")
        #expect { try other.start("127.0.0.1:\(port)") } throws: { ($0 as? QuadError)?.message.contains("cannot listen on http://127.0.0.1:\(port)") == true }
    }

    @Test func theAdminTokenFileIsMadeOnceWithMode0600() throws {
        let home = NSTemporaryDirectory() + "quad-token-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let env = ["QUAD_HOME": home]
        let (token, source) = try AdminToken.resolve(option: nil, environment: env)
        #expect(source == home + "/keys/analytics.token" && token.count == 64)
        var info = stat()
        #expect(stat(source, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(try AdminToken.resolve(option: nil, environment: env).token == token)
        #expect(try AdminToken.resolve(option: nil, environment: env.merging(["QUAD_ADMIN_TOKEN": "from-env-token-123"]) { $1 }) == ("from-env-token-123", "QUAD_ADMIN_TOKEN"))
        #expect(try AdminToken.resolve(option: "flag-token-1234567", environment: env).source == "--admin-token")
        chmod(source, 0o644)
        #expect(throws: QuadError.self) { try AdminToken.resolve(option: nil, environment: env) }
    }

    @Test func theQuestionsOwnColumnsAreReadFromTheirSQL() throws {
        let p = try Planted(postgres: false)
        try p.plantAll()
        for q in p.questions {
            let answer = try q.answer(p.db, from: 0, to: Int64.max)
            #expect(Question.columns(of: q.sql) == answer.columns, "\(q.id)")
            for name in q.chart.dropFirst() { #expect(answer.columns.contains(name), "\(q.id): chart column \(name)") }
        }
    }
}
