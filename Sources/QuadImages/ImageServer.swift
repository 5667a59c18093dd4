import Foundation
import QuadHTTP
import QuadStore
import QuadWire

/// `GET /images/<sha256>` on libmicrohttpd's threads, like the metrics
/// endpoint: the worker's loop is never involved. An image's URL names its
/// content, so every answer may be cached for good (`immutable`, a year)
/// and a client that has it asks with `If-None-Match` and gets a 304 with
/// no body. Anything but a known id is 404; any method but GET and HEAD
/// is 405; no request has a body. Every worker of the catalog listens on
/// the same port (SO_REUSEPORT), so `QUAD_CATALOG_WORKERS=2` needs no
/// second address.
public final class ImageServer: @unchecked Sendable {
    // Shared with microhttpd's threads: `store` is used under `lock` only;
    // `http` is touched by the starting thread only.
    let store: Database
    let lock = NSLock()
    let limits: Limits
    var http: HTTPServer?

    /// What bounds the server, each a setting of the catalog.
    public struct Limits {
        /// `images_http_max_connections`.
        public var connections: UInt32 = 64
        /// `images_http_max_connections_per_address`: as many as in all by
        /// default, since a campus of emulated phones shares one address.
        public var connectionsPerAddress: UInt32 = 64
        /// `images_http_timeout_seconds`.
        public var timeoutSeconds: UInt32 = 10
        public init() {}
    }

    public static let cacheControl = "public, max-age=31536000, immutable"

    public init(store: Database, limits: Limits = Limits()) {
        self.store = store
        self.limits = limits
    }

    deinit { stop() }

    /// `HOST:PORT` with an IPv4 host, or throws naming the setting.
    public static func parse(_ address: String, setting: String = "--images-http") throws -> (String, UInt16) {
        guard let (host, port) = HTTPServer.parse(address) else {
            throw QuadError.badRequest("\(setting) must be HOST:PORT with an IPv4 host (127.0.0.1:7770), or off; got '\(address)'")
        }
        return (host, port)
    }

    /// Listens on `address` (port 0: any free one); returns the port.
    public func start(_ address: String) throws -> UInt16 {
        let (host, port) = try ImageServer.parse(address)
        let bounds = HTTPServer.Limits(connections: limits.connections, connectionsPerAddress: limits.connectionsPerAddress,
                                       timeoutSeconds: limits.timeoutSeconds)
        // Shared: each catalog worker serves the same port (one store behind them all).
        let server = HTTPServer(limits: bounds, shared: true) { [weak self] request in
            guard let self else { return .text(503, "shutting down\n") }
            let a = self.answer(method: request.method, path: request.path, ifNoneMatch: request.header("If-None-Match"))
            return HTTPResponse(status: a.status, headers: a.headers, body: a.body)
        }
        guard let taken = server.start(host: host, port: port) else {
            throw QuadError.unavailable("cannot listen on http://\(address) for /images: address in use, or not an IPv4 address of this host")
        }
        http = server
        return taken
    }

    /// The connections the server holds now (0 when stopped).
    public var openConnections: Int { http?.openConnections ?? 0 }

    public func stop() {
        http?.stop()
        http = nil
    }

    struct Answer {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]
    }

    /// The answer to a request, apart from the socket (tested as it is).
    func answer(method: String, path: String, ifNoneMatch: String?) -> Answer {
        func plain(_ status: Int, _ message: String, _ extra: [(String, String)] = []) -> Answer {
            let r = HTTPResponse.text(status, message, extra)
            return Answer(status: r.status, headers: r.headers, body: r.body)
        }
        let route = path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path
        guard route.hasPrefix("/images/") else { return plain(404, "not found: images are at /images/<sha256>\n") }
        guard method == "GET" || method == "HEAD" else { return plain(405, "only GET and HEAD are served at /images/\n", [("Allow", "GET, HEAD")]) }
        let id = String(route.dropFirst("/images/".count))
        guard id.utf8.count == 64, id.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            return plain(404, "not found: an image id is the 64 lowercase hex digits of its SHA-256\n")
        }
        let row: Row?
        do {
            row = try lock.withLock { try store.queryOne("SELECT content_type, bytes FROM images WHERE sha256 = $1", .text(id)) }
        } catch {
            return plain(503, "the image store is not available: \(error)\n")
        }
        guard let row, case .blob(let bytes) = row["bytes"] else { return plain(404, "not found: no image \(id)\n") }
        let cache = [("ETag", "\"\(id)\""), ("Cache-Control", ImageServer.cacheControl)]
        if let tags = ifNoneMatch, tags.trimmingCharacters(in: .whitespaces) == "*" || tags.contains("\"\(id)\"") {
            return Answer(status: 304, headers: cache, body: [])
        }
        return Answer(status: 200, headers: [("Content-Type", row.string("content_type"))] + cache, body: bytes)
    }
}
