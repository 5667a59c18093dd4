import CMicroHTTPD
import Foundation
import QuadWire

/// What the HTTP thread serves: the summary JSON and the dashboard page,
/// computed on the worker's loop and swapped in whole under a lock. The
/// HTTP thread never touches the store.
public final class DashboardSnapshot: @unchecked Sendable {
    // Safe to share: every field is read and written under `lock`.
    let lock = NSLock()
    var summary: [UInt8] = Array(#"{"questions":[]}"#.utf8)
    var page = Dashboard.html(["questions": []])
    var generation = 0

    public init() {}

    public func update(summary: JSON) {
        let bytes = summary.encoded()
        let page = Dashboard.html(summary)
        lock.withLock {
            self.summary = bytes
            self.page = page
            generation += 1
        }
    }

    public func read() -> (summary: [UInt8], page: String, generation: Int) {
        lock.withLock { (summary, page, generation) }
    }
}

/// An HTTP answer before it goes to microhttpd.
public struct HTTPAnswer: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    public var headers: [String: String] = [:]
}

/// The dashboard's HTTP server, on libmicrohttpd with its own polling
/// thread: `GET /api/v1/analytics/summary` (JSON), `GET /dashboard/`
/// (HTML) behind the admin token (`Authorization: Bearer` or `?token=`),
/// and `GET /healthz` without one.
public final class DashboardServer: @unchecked Sendable {
    // Shared with microhttpd's thread: `snapshot` locks itself, `token` is
    // immutable, `daemon` is only touched by the thread that starts and stops.
    public let snapshot: DashboardSnapshot
    let token: [UInt8]
    var daemon: OpaquePointer?
    var retained: Unmanaged<DashboardServer>?
    public private(set) var port: UInt16 = 0

    public init(snapshot: DashboardSnapshot, token: String) {
        self.snapshot = snapshot
        self.token = Array(token.utf8)
    }

    deinit { stop() }

    /// Listens on `address` (`127.0.0.1:7780`, port 0 for any); returns the port.
    @discardableResult
    public func start(_ address: String) throws -> UInt16 {
        let (host, port) = try DashboardServer.parse(address)
        let me = Unmanaged.passRetained(self)
        guard let d = quad_mhd_start(host, port, DashboardServer.handler, me.toOpaque()) else {
            me.release()
            throw QuadError.unavailable("cannot listen on http://\(address) (address in use, or not an IPv4 address of this host)")
        }
        daemon = d
        retained = me
        self.port = quad_mhd_port(d)
        return self.port
    }

    public func stop() {
        if let d = daemon { MHD_stop_daemon(d) }
        daemon = nil
        retained?.release()
        retained = nil
    }

    /// `host:port` with an IPv4 host.
    public static func parse(_ address: String) throws(QuadError) -> (String, UInt16) {
        let parts = address.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let port = UInt16(parts[1]), !parts[0].isEmpty else {
            throw .badRequest("--http must be HOST:PORT with an IPv4 host (127.0.0.1:7780), or off; got '\(address)'")
        }
        return (String(parts[0]), port)
    }

    /// Compares in time independent of where the first difference is.
    func tokenMatches(_ given: String?) -> Bool {
        guard let given else { return false }
        let g = Array(given.utf8)
        var diff = UInt8(g.count == token.count ? 0 : 1)
        for k in 0..<token.count { diff |= token[k] ^ (k < g.count ? g[k] : 0) }
        return diff == 0 && !token.isEmpty
    }

    /// The answer to one request: pure, so tests call it without a socket.
    public func answer(method: String, path: String, authorization: String?, queryToken: String?) -> HTTPAnswer {
        var headers = ["Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"]
        func plain(_ status: Int, _ text: String) -> HTTPAnswer {
            HTTPAnswer(status: status, contentType: "text/plain; charset=utf-8", body: Array((text + "\n").utf8), headers: headers)
        }
        guard method == "GET" || method == "HEAD" else {
            headers["Allow"] = "GET, HEAD"
            return plain(405, "only GET is served here")
        }
        let route = path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path
        if route == "/healthz" { return plain(200, "ok") }
        guard ["/api/v1/analytics/summary", "/dashboard", "/dashboard/"].contains(route) else {
            return plain(404, "not found: try /dashboard/ or /api/v1/analytics/summary")
        }
        var bearer: String?
        if let a = authorization, a.lowercased().hasPrefix("bearer ") { bearer = String(a.dropFirst(7)).trimmingCharacters(in: .whitespaces) }
        guard tokenMatches(bearer) || tokenMatches(queryToken) else {
            headers["WWW-Authenticate"] = "Bearer realm=\"quad-analytics\""
            return plain(401, "an admin token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN")
        }
        if route == "/dashboard" {
            headers["Location"] = "/dashboard/" + (queryToken == nil ? "" : "?token=" + (queryToken!.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""))
            return plain(301, "see /dashboard/")
        }
        let current = snapshot.read()
        if route == "/api/v1/analytics/summary" {
            return HTTPAnswer(status: 200, contentType: "application/json", body: current.summary, headers: headers)
        }
        let nonce = DashboardServer.nonce()
        headers["Content-Security-Policy"] = "default-src 'none'; img-src 'self' data:; style-src 'nonce-\(nonce)'; script-src 'nonce-\(nonce)'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        let page = current.page.replacingOccurrences(of: Dashboard.nonceMark, with: nonce)
        return HTTPAnswer(status: 200, contentType: "text/html; charset=utf-8", body: Array(page.utf8), headers: headers)
    }

    static func nonce() -> String {
        var g = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &g)) }.joined()
    }

    /// microhttpd's access handler, on its polling thread.
    static let handler: quad_mhd_handler = { cls, connection, url, method, _, _, _, _ in
        guard let cls, let connection else { return quad_mhd_no() }
        let server = Unmanaged<DashboardServer>.fromOpaque(cls).takeUnretainedValue()
        let authorization = quad_mhd_header(connection, "Authorization").map { String(cString: $0) }
        let queryToken = quad_mhd_argument(connection, "token").map { String(cString: $0) }
        let methodText = method.map { String(cString: $0) } ?? ""
        let a = server.answer(method: methodText, path: url.map { String(cString: $0) } ?? "/",
                              authorization: authorization, queryToken: queryToken)
        let body = methodText == "HEAD" ? [] : a.body
        let response = body.withUnsafeBytes { buf in
            quad_mhd_response(buf.count, buf.baseAddress)
        }
        guard let response else { return quad_mhd_no() }
        _ = MHD_add_response_header(response, "Content-Type", a.contentType)
        for (k, v) in a.headers { _ = MHD_add_response_header(response, k, v) }
        let result = MHD_queue_response(connection, UInt32(a.status), response)
        MHD_destroy_response(response)
        return result
    }
}

/// The admin token the dashboard asks for: `--admin-token`, else
/// `QUAD_ADMIN_TOKEN`, else a random one kept in
/// `$QUAD_HOME/keys/analytics.token` (mode 0600, made once). The token
/// itself is never logged; the file's path is.
public enum AdminToken {
    public static func path(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let home = environment["QUAD_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? "."
        return home + "/keys/analytics.token"
    }

    /// The token and where it came from (for the log, never the token).
    public static func resolve(option: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> (token: String, source: String) {
        if let option, !option.isEmpty { return (option, "--admin-token") }
        if let env = environment["QUAD_ADMIN_TOKEN"], !env.isEmpty { return (env, "QUAD_ADMIN_TOKEN") }
        let file = path(environment: environment)
        if !FileManager.default.fileExists(atPath: file) { try create(file) }
        var info = stat()
        guard stat(file, &info) == 0 else { throw QuadError.internal("cannot read \(file): \(String(cString: strerror(errno)))") }
        guard info.st_mode & 0o077 == 0 else {
            throw QuadError.internal("\(file) is readable by others (mode \(String(info.st_mode & 0o777, radix: 8))): chmod 600 \(file)")
        }
        let text = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.count >= 16 else { throw QuadError.internal("\(file) holds no token (expected one line of at least 16 characters)") }
        return (text, file)
    }

    /// Writes a fresh token: to a temporary file with mode 0600, then linked
    /// into place, so two workers starting together agree on one token.
    static func create(_ file: String) throws {
        let dir = (file as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var g = SystemRandomNumberGenerator()
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &g)) }.joined()
        let temporary = file + ".\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw QuadError.internal("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let bytes = Array((token + "\n").utf8)
        let written = write(fd, bytes, bytes.count)
        fsync(fd)
        close(fd)
        defer { unlink(temporary) }
        guard written == bytes.count else { throw QuadError.internal("cannot write \(temporary)") }
        if link(temporary, file) != 0 && errno != EEXIST {
            throw QuadError.internal("cannot create \(file): \(String(cString: strerror(errno)))")
        }
    }
}
