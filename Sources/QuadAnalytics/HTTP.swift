import Foundation
import QuadHTTP
import QuadRuntime
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

/// One HTTP request as the dashboard reads it: the few headers it uses,
/// the names of the URL's query arguments (only to refuse credentials
/// there), the body of a form, and the client's address.
public struct HTTPRequest: Sendable {
    public var method: String
    public var path: String
    public var authorization: String?
    public var cookie: String?
    public var contentType: String?
    public var arguments: Set<String>
    public var body: [UInt8]
    public var client: String

    /// `target` is the path with its query string, as a browser sends it.
    public init(_ method: String, _ target: String, authorization: String? = nil, cookie: String? = nil,
                contentType: String? = nil, body: [UInt8] = [], client: String = "127.0.0.1") {
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        self.method = method
        path = parts.first.map(String.init) ?? target
        arguments = Set((parts.count > 1 ? parts[1] : "").split(separator: "&").map { String($0.split(separator: "=", maxSplits: 1).first ?? "") })
        self.authorization = authorization
        self.cookie = cookie
        self.contentType = contentType
        self.body = body
        self.client = client
    }
}

/// An HTTP answer before it goes to microhttpd.
public struct HTTPAnswer: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    public var headers: [String: String] = [:]
}

/// The dashboard's HTTP server, on libmicrohttpd with a thread per
/// connection: `GET /dashboard/` (HTML) and `GET /api/v1/analytics/summary`
/// (JSON) for a signed-in admin, `GET /healthz` and the page's script
/// (`GET /dashboard/dashboard.js`) for anyone.
///
/// The credential travels only in a header: `Authorization: Bearer` with
/// the admin token (for scripts), or the `quad_session` cookie (HttpOnly,
/// SameSite=Strict, Secure under TLS) that `POST /signin` sets after
/// accounts accepted an admin's email and password; `POST /signout` ends
/// it. A credential in a URL (`?token=`) is refused, never followed: URLs
/// are kept in browser history, proxy logs and Referer headers.
public final class DashboardServer: @unchecked Sendable {
    // Shared with microhttpd's threads: `snapshot`, `sessions` and
    // `throttle` lock themselves, `running` is guarded by `lock`, the rest is
    // immutable after init; `daemon` is only touched by the thread that
    // starts and stops.
    public let snapshot: DashboardSnapshot
    let token: [UInt8]
    let signIn: SignIn?
    public let limits: Limits
    /// The `src` of the server's log lines: the worker's instance.
    let name: String
    let tls: (key: String, cert: String)?
    let sessions: Sessions
    let throttle = SignInThrottle()
    let lock = NSLock()
    var running = 0
    var server: HTTPServer?
    public private(set) var port: UInt16 = 0

    /// Ends the dashboard sessions opened with a token accounts has
    /// revoked (`accounts.session.revoked`: that token, or every token of
    /// the user issued before an instant); returns how many ended.
    @discardableResult
    public func revoke(user: String, tokenID: String?, issuedBefore: Int64?) -> Int {
        sessions.revoke(user: user, tokenID: tokenID, issuedBefore: issuedBefore)
    }

    /// Who accounts says signed in.
    public struct SignedIn: Sendable, Equatable {
        public var user: String
        public var role: String
        /// When the token accounts issued ends, ms since 1970: the session ends no later.
        public var expiresAt: Int64
        /// The token's `jti` and when it was issued (ms since 1970): a
        /// revocation of that token, or of every token of the user issued
        /// before a later instant, ends the session (``revoke(user:tokenID:issuedBefore:)``).
        public var tokenID: String
        public var issuedAt: Int64
        public init(user: String, role: String, expiresAt: Int64, tokenID: String = "", issuedAt: Int64 = 0) {
            self.user = user
            self.role = role
            self.expiresAt = expiresAt
            self.tokenID = tokenID
            self.issuedAt = issuedAt
        }
    }

    /// Checks an email and password (``AccountsSignIn`` asks accounts);
    /// throws the ``QuadError`` accounts answered.
    public typealias SignIn = @Sendable (_ email: String, _ password: String) throws -> SignedIn

    /// What bounds the server, each a setting of quad-analytics.
    public struct Limits: Sendable {
        /// Open connections in all (`http_max_connections`).
        public var connections: Int = 64
        /// Open connections from one address (`http_max_connections_per_address`).
        public var connectionsPerAddress: Int = 8
        /// Seconds a connection may stay idle (`http_connection_timeout_seconds`).
        public var timeoutSeconds: Int = 10
        /// Sign-ins checked with accounts at once (`http_max_signins`).
        public var signInsAtOnce: Int = 4
        /// Sessions kept; past it the one ending soonest goes (`http_max_sessions`).
        public var sessions: Int = 256
        /// Longest session, also bounded by the token's lifetime (`http_session_seconds`).
        public var sessionSeconds: Int = 3600
        /// Largest sign-in form, in bytes.
        public static let formBytes = 4096

        public init() {}
    }

    /// The cookie that holds a session id.
    public static let cookieName = "quad_session"
    /// Query arguments that look like a credential: refused in any URL.
    static let credentialArguments: Set<String> = ["token", "access_token", "admin_token", "session", "quad_session", "password", "email"]

    public init(snapshot: DashboardSnapshot, token: String, signIn: SignIn? = nil, limits: Limits = Limits(),
                tls: (key: String, cert: String)? = nil, name: String = "analytics") {
        self.snapshot = snapshot
        self.name = name
        self.token = Array(token.utf8)
        self.signIn = signIn
        self.limits = limits
        self.tls = tls
        sessions = Sessions(max: limits.sessions)
    }

    deinit { stop() }

    /// Listens on `address` (`127.0.0.1:7780`, port 0 for any); returns the port.
    @discardableResult
    public func start(_ address: String) throws -> UInt16 {
        let (host, port) = try DashboardServer.parse(address)
        if tls != nil && !HTTPServer.hasTLS { throw QuadError.unavailable("this libmicrohttpd was built without TLS") }
        let bounds = HTTPServer.Limits(connections: UInt32(limits.connections), connectionsPerAddress: UInt32(limits.connectionsPerAddress),
                                       timeoutSeconds: UInt32(limits.timeoutSeconds))
        let http = HTTPServer(limits: bounds, bodyLimit: Limits.formBytes, tls: tls) { [unowned self] r in
            DashboardServer.response(self.answer(DashboardServer.request(r)))
        }
        guard let taken = http.start(host: host, port: port) else {
            throw QuadError.unavailable("cannot listen on http\(tls == nil ? "" : "s")://\(address) (address in use, not an IPv4 address of this host, or an unusable TLS key)")
        }
        server = http
        self.port = taken
        return taken
    }

    public func stop() {
        server?.stop()
        server = nil
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

    /// The session id in a Cookie header, if any.
    static func sessionID(_ cookie: String?) -> String? {
        guard let cookie else { return nil }
        for pair in cookie.split(separator: ";") {
            let kv = pair.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if kv.count == 2 && kv[0] == cookieName { return String(kv[1]) }
        }
        return nil
    }

    func cookie(_ value: String, maxAge: Int) -> String {
        "\(DashboardServer.cookieName)=\(value); Path=/; Max-Age=\(maxAge); HttpOnly; SameSite=Strict" + (tls == nil ? "" : "; Secure")
    }

    /// The answer to one request: no socket, so tests call it directly.
    public func answer(_ r: HTTPRequest) -> HTTPAnswer {
        var headers = ["Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"]
        func plain(_ status: Int, _ text: String) -> HTTPAnswer {
            HTTPAnswer(status: status, contentType: "text/plain; charset=utf-8", body: Array((text + "\n").utf8), headers: headers)
        }
        func see(_ location: String, _ status: Int = 303) -> HTTPAnswer {
            headers["Location"] = location
            return plain(status, "see \(location)")
        }
        func only(_ methods: [String]) -> HTTPAnswer? {
            if methods.contains(r.method) { return nil }
            headers["Allow"] = methods.joined(separator: ", ")
            return plain(405, "only \(methods.joined(separator: " and ")) is served at \(r.path)")
        }
        if r.path == "/healthz" { return only(["GET", "HEAD"]) ?? plain(200, "ok") }
        if let named = r.arguments.intersection(DashboardServer.credentialArguments).sorted().first {
            return plain(401, "a credential in a URL is refused (?\(named)=): URLs are kept in history, logs and Referer headers. "
                + "Sign in at /signin, or send Authorization: Bearer TOKEN")
        }
        switch r.path {
        case "/signin":
            if let refused = only(["GET", "HEAD", "POST"]) { return refused }
            return r.method == "POST" ? signingIn(r, headers: headers) : page(SignInPage.html(message: nil), status: 200, headers: headers)
        case "/signout":
            if let refused = only(["POST"]) { return refused }
            if let id = DashboardServer.sessionID(r.cookie) { sessions.end(id) }
            headers["Set-Cookie"] = cookie("", maxAge: 0)
            return see("/signin")
        case Dashboard.scriptPath:
            // Code, no data: served to anyone, so the page's CSP can say script-src 'self'.
            if let refused = only(["GET", "HEAD"]) { return refused }
            return HTTPAnswer(status: 200, contentType: "text/javascript; charset=utf-8", body: Array(Dashboard.script.utf8), headers: headers)
        case "/", "/dashboard", "/dashboard/", "/api/v1/analytics/summary":
            if let refused = only(["GET", "HEAD"]) { return refused }
        default:
            return plain(404, "not found: try /dashboard/ or /api/v1/analytics/summary")
        }
        var bearer: String?
        if let a = r.authorization, a.lowercased().hasPrefix("bearer ") { bearer = String(a.dropFirst(7)).trimmingCharacters(in: .whitespaces) }
        let signedIn = tokenMatches(bearer) || DashboardServer.sessionID(r.cookie).flatMap { sessions.user($0) } != nil
        guard signedIn else {
            if r.path == "/api/v1/analytics/summary" {
                headers["WWW-Authenticate"] = "Bearer realm=\"quad-analytics\""
                return plain(401, "an admin is needed: sign in at /signin, or send Authorization: Bearer TOKEN")
            }
            return see("/signin")
        }
        if r.path == "/" || r.path == "/dashboard" { return see("/dashboard/", 301) }
        let current = snapshot.read()
        if r.path == "/api/v1/analytics/summary" {
            return HTTPAnswer(status: 200, contentType: "application/json", body: current.summary, headers: headers)
        }
        return page(current.page, status: 200, headers: headers)
    }

    /// An HTML page with a fresh nonce for its style in it and in its CSP
    /// header; its only script comes from this server (``Dashboard/scriptPath``).
    func page(_ html: String, status: Int, headers: [String: String]) -> HTTPAnswer {
        var headers = headers
        let nonce = DashboardServer.nonce()
        headers["Content-Security-Policy"] = "default-src 'none'; img-src 'self' data:; style-src 'nonce-\(nonce)'; script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        let text = html.replacingOccurrences(of: Dashboard.nonceMark, with: nonce)
        return HTTPAnswer(status: status, contentType: "text/html; charset=utf-8", body: Array(text.utf8), headers: headers)
    }

    /// `POST /signin`: the form's email and password, checked by accounts;
    /// an admin gets a session cookie and is sent to the dashboard.
    func signingIn(_ r: HTTPRequest, headers: [String: String]) -> HTTPAnswer {
        var headers = headers
        func refuse(_ status: Int, _ message: String) -> HTTPAnswer { page(SignInPage.html(message: message), status: status, headers: headers) }
        guard r.contentType?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            return refuse(415, "the sign-in form is sent as application/x-www-form-urlencoded")
        }
        guard r.body.count <= Limits.formBytes else { return refuse(413, "the sign-in form is over \(Limits.formBytes) bytes") }
        let form = SignInPage.form(r.body)
        guard let email = form["email"], !email.isEmpty, let password = form["password"], !password.isEmpty else {
            return refuse(400, "an email and a password are needed")
        }
        guard let signIn else { return refuse(503, "sign-in is not available: this dashboard has no way to reach accounts") }
        let now = Int64(Clock.nowMillis())
        if let wait = throttle.wait(r.client, now: now) {
            headers["Retry-After"] = String((wait + 999) / 1000)
            return refuse(429, "too many failed sign-ins from this address: try again in \((wait + 999) / 1000) s")
        }
        let admitted = lock.withLock { () -> Bool in
            guard running < limits.signInsAtOnce else { return false }
            running += 1
            return true
        }
        guard admitted else {
            headers["Retry-After"] = "1"
            return refuse(503, "too many sign-ins at once (http_max_signins=\(limits.signInsAtOnce)): try again in a second")
        }
        defer { lock.withLock { running -= 1 } }
        let who: SignedIn
        do {
            who = try signIn(email, password)
        } catch let e as QuadError where e.status == 401 {
            throttle.failed(r.client, now: now)
            return refuse(401, "wrong email or password")
        } catch let e as QuadError where e.status == 429 {
            headers["Retry-After"] = e.details["retry_after_ms"]?.int.map { String(($0 + 999) / 1000) } ?? "1"
            return refuse(429, e.message)
        } catch let e as QuadError where e.status < 500 {
            throttle.failed(r.client, now: now)
            return refuse(401, "wrong email or password")
        } catch {
            return refuse(503, "accounts did not answer: try again")
        }
        throttle.succeeded(r.client)
        guard who.role == "admin" else { return refuse(403, "the dashboard is for admins only") }
        let expires = min(now + Int64(limits.sessionSeconds) * 1000, who.expiresAt)
        guard expires > now else { return refuse(401, "the session accounts gave has already ended") }
        let id = sessions.start(who, expires: expires)
        Log.line(["src": name, "level": "info", "msg": "dashboard sign-in", "user": who.user, "client": r.client, "until": expires])
        headers["Set-Cookie"] = cookie(id, maxAge: Int((expires - now) / 1000))
        headers["Location"] = "/dashboard/"
        return HTTPAnswer(status: 303, contentType: "text/plain; charset=utf-8", body: Array("signed in: see /dashboard/\n".utf8), headers: headers)
    }

    static func nonce() -> String {
        var g = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &g)) }.joined()
    }

    /// The request as the dashboard reads it; a form over ``Limits/formBytes``
    /// (declared or sent) stands as one byte too many, which ``answer(_:)`` refuses.
    static func request(_ r: QuadHTTP.HTTPRequest) -> HTTPRequest {
        var out = HTTPRequest(r.method, r.path, authorization: r.header("Authorization"), cookie: r.header("Cookie"),
                              contentType: r.header("Content-Type"),
                              body: r.bodyTooLarge ? [UInt8](repeating: 0, count: Limits.formBytes + 1) : r.body, client: r.client)
        out.arguments = Set(credentialArguments.filter { r.argument($0) != nil })
        return out
    }

    static func response(_ a: HTTPAnswer) -> HTTPResponse {
        HTTPResponse(status: a.status, headers: [("Content-Type", a.contentType)] + a.headers.map { ($0.key, $0.value) }, body: a.body)
    }
}

/// The admin token scripts send in `Authorization: Bearer`: `--admin-token`, else
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
