import Foundation
import QuadRuntime
import QuadWire
import Testing
@testable import QuadAnalytics

/// Headless Chromium, from Debian's chromium-headless-shell or chromium.
let browser: String? = ["/usr/bin/chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium"]
    .first { FileManager.default.isExecutableFile(atPath: $0) }
/// CI sets QUAD_REQUIRE_BROWSER=1 so a missing browser fails instead of skipping.
let browserRequired = ProcessInfo.processInfo.environment["QUAD_REQUIRE_BROWSER"] == "1"

/// Runs the browser on `url`; returns its standard output.
func headless(_ arguments: [String], url: String) throws -> String {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: try #require(browser, "no headless Chromium: apt-get install chromium-headless-shell"))
    let profile = NSTemporaryDirectory() + "quad-chromium-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    p.arguments = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                   "--user-data-dir=\(profile)", "--virtual-time-budget=3000"] + arguments + [url]
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle(forWritingAtPath: "/dev/null")
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    try? FileManager.default.removeItem(atPath: profile)
    return String(decoding: data, as: UTF8.self)
}

/// Serves one page on a free port of 127.0.0.1 until stopped: a page that
/// posts the sign-in form at once. It is on the dashboard's site (the same
/// host; the port does not count), so the browser keeps the SameSite=Strict
/// cookie and sends it after the sign-in's redirect, as for a person.
final class FormPage: @unchecked Sendable {
    // The listening socket is closed by `stop`, which ends the thread's accept.
    let fd: Int32
    let port: UInt16

    init(_ html: String) throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, len) == 0 && listen(listening, 8) == 0 && getsockname(listening, $0, &len) == 0 }
        }
        try #require(ok)
        fd = listening
        port = UInt16(bigEndian: addr.sin_port)
        let response = Array("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: \(html.utf8.count)\r\nConnection: close\r\n\r\n\(html)".utf8)
        Thread.detachNewThread {
            while true {
                let c = accept(listening, nil, nil)
                if c < 0 { return }
                var buffer = [UInt8](repeating: 0, count: 8192)
                _ = recv(c, &buffer, buffer.count, 0)
                _ = response.withUnsafeBytes { send(c, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                close(c)
            }
        }
    }

    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }
}

@Suite("The dashboard in a browser")
struct ScreenshotTests {
    @Test(.enabled(if: browser != nil || browserRequired, "needs headless Chromium (apt-get install chromium-headless-shell)"))
    func rendersEveryCardWithItsChartAndKeepsAScreenshot() throws {
        let p = try Planted(postgres: false)
        try p.plantAll()
        let snapshot = DashboardSnapshot()
        snapshot.update(summary: try Analytics.summarize(p.db, questions: p.questions, from: 0, to: Int64.max))
        let token = "screenshot-token-0123456789"
        let server = DashboardServer(snapshot: snapshot, token: token, signIn: { email, password in
            guard email == "admin@quad.campus", password == "screenshot-pass" else { throw QuadError.unauthorized("wrong email or password") }
            return .init(user: "u-admin", role: "admin", expiresAt: Int64(Clock.nowMillis()) + 600_000)
        })
        let port = try server.start("127.0.0.1:0")
        defer { server.stop() }
        // The browser signs in as a person would: the form, then the cookie.
        let form = try FormPage("""
            <!doctype html><form method="post" action="http://127.0.0.1:\(port)/signin">
            <input name="email" value="admin@quad.campus"><input name="password" value="screenshot-pass"></form>
            <script>document.forms[0].submit()</script>
            """)
        defer { form.stop() }
        let url = "http://127.0.0.1:\(form.port)/"

        // The DOM after the page's own script ran: every card and chart is there.
        let dom = try headless(["--dump-dom"], url: url)
        #expect(dom.components(separatedBy: "<section class=\"card\"").count - 1 == p.questions.count, "\(dom.prefix(500))")
        #expect(dom.components(separatedBy: "<svg ").count - 1 == p.questions.count)
        for q in p.questions { #expect(dom.contains("data-question=\"\(q.id)\""), "\(q.id)") }
        // ParkWise's twelve, then UniTrade's two, numbered, in order.
        let numbers = dom.components(separatedBy: "data-number=\"").dropFirst().compactMap { $0.split(separator: "\"").first.map(String.init) }
        #expect(numbers == (1...12).map { "BQ\($0)" } + ["UQ1", "UQ2"], "\(numbers)")
        #expect(!dom.contains(alice) && !dom.contains(guestPhone))

        // The picture, kept for people to look at.
        let dir = ProcessInfo.processInfo.environment["QUAD_TEST_ARTIFACTS"] ?? NSTemporaryDirectory() + "quad-artifacts"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let png = dir + "/dashboard.png"
        try? FileManager.default.removeItem(atPath: png)
        _ = try headless(["--screenshot=\(png)", "--window-size=1280,3600"], url: url)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: png)))
        #expect(bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]), "not a PNG")
        // Width and height from the IHDR chunk.
        let width = bytes[16..<20].reduce(0) { $0 << 8 | Int($1) }, height = bytes[20..<24].reduce(0) { $0 << 8 | Int($1) }
        #expect(width == 1280 && height == 3600)
        #expect(bytes.count > 50_000, "a page of charts, not a blank one: \(bytes.count) bytes")
        print("dashboard screenshot: \(png)")
    }
}
