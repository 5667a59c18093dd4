import CMicroHTTPD
import Foundation
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
    // `daemon` and `retained` are touched by the starting thread only.
    let store: Database
    let lock = NSLock()
    let limits: Limits
    var daemon: OpaquePointer?
    var retained: Unmanaged<ImageServer>?

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
        let parts = address.split(separator: ":", omittingEmptySubsequences: false)
        var probe = in_addr()
        guard parts.count == 2, let port = UInt16(parts[1]), inet_pton(AF_INET, String(parts[0]), &probe) == 1 else {
            throw QuadError.badRequest("\(setting) must be HOST:PORT with an IPv4 host (127.0.0.1:7770), or off; got '\(address)'")
        }
        return (String(parts[0]), port)
    }

    /// Listens on `address` (port 0: any free one); returns the port.
    public func start(_ address: String) throws -> UInt16 {
        let (host, port) = try ImageServer.parse(address)
        let me = Unmanaged.passRetained(self)
        let bounds = quad_mhd_limits(connections: limits.connections, connections_per_address: limits.connectionsPerAddress,
                                     timeout_seconds: limits.timeoutSeconds)
        // Shared: each catalog worker serves the same port (one store behind them all).
        guard let d = quad_mhd_start_shared(host, port, ImageServer.handler, me.toOpaque(), bounds, ImageServer.completed) else {
            me.release()
            throw QuadError.unavailable("cannot listen on http://\(address) for /images: address in use, or not an IPv4 address of this host")
        }
        daemon = d
        retained = me
        return quad_mhd_port(d)
    }

    public func stop() {
        if let d = daemon { MHD_stop_daemon(d) }
        daemon = nil
        retained?.release()
        retained = nil
    }

    struct Answer {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]
    }

    /// The answer to a request, apart from the socket (tested as it is).
    func answer(method: String, path: String, ifNoneMatch: String?) -> Answer {
        let text = "text/plain; charset=utf-8"
        func plain(_ status: Int, _ message: String, _ extra: [(String, String)] = []) -> Answer {
            Answer(status: status, headers: [("Content-Type", text), ("Cache-Control", "no-store")] + extra, body: Array(message.utf8))
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

    static let handler: quad_mhd_handler = { cls, connection, url, method, _, _, uploadSize, slot in
        guard let cls, let connection, let slot, let uploadSize else { return quad_mhd_no() }
        // A body is never read: its pieces are dropped, then answered.
        if slot.pointee == nil {
            slot.pointee = UnsafeMutableRawPointer(bitPattern: 1)
            return quad_mhd_yes()
        }
        if uploadSize.pointee > 0 {
            uploadSize.pointee = 0
            return quad_mhd_yes()
        }
        let server = Unmanaged<ImageServer>.fromOpaque(cls).takeUnretainedValue()
        let methodText = method.map { String(cString: $0) } ?? ""
        let ifNoneMatch = quad_mhd_header(connection, "If-None-Match").map { String(cString: $0) }
        let a = server.answer(method: methodText, path: url.map { String(cString: $0) } ?? "/", ifNoneMatch: ifNoneMatch)
        // HEAD gets the whole response: microhttpd leaves the body out and
        // keeps its Content-Length.
        let response = a.body.withUnsafeBytes { quad_mhd_response($0.count, $0.baseAddress) }
        guard let response else { return quad_mhd_no() }
        for (name, value) in a.headers { _ = MHD_add_response_header(response, name, value) }
        let result = MHD_queue_response(connection, UInt32(a.status), response)
        MHD_destroy_response(response)
        return result
    }

    static let completed: quad_mhd_completed = { _, _, slot, _ in slot?.pointee = nil }
}
