import CMicroHTTPD
import Foundation

/// One request to a read-only HTTP server: its method, its path without
/// the query, and its headers (read while the request is being answered).
public struct HTTPRequest {
    public let method: String
    public let path: String
    let lookup: (String) -> String?

    public init(method: String, path: String, headers: [String: String] = [:]) {
        self.method = method
        self.path = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? path
        let lowered = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        self.lookup = { lowered[$0.lowercased()] }
    }

    init(method: String, path: String, lookup: @escaping (String) -> String?) {
        self.method = method
        self.path = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? path
        self.lookup = lookup
    }

    /// A request header by name, case-insensitively; nil when absent.
    public func header(_ name: String) -> String? { lookup(name) }
}

/// The answer to an ``HTTPRequest``: status, headers and body. A HEAD
/// request is given the same answer, and libmicrohttpd leaves the body out
/// while keeping its Content-Length.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)], body: [UInt8]) {
        (self.status, self.headers, self.body) = (status, headers, body)
    }

    /// A plain-text answer that no one may cache (errors, probes).
    public static func text(_ status: Int, _ message: String, _ extra: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")] + extra,
                     body: Array(message.utf8))
    }
}

/// A small HTTP server for what is only read (`/metrics`, `/healthz`,
/// `/images/<sha256>`), on libmicrohttpd's own threads: the process's loop
/// is never involved. It reads no request body (their pieces are dropped,
/// then the request is answered), and it is bounded by ``Limits`` so one
/// client cannot hold it. The metrics endpoint and the image servers are
/// this, each with its own `respond`.
public final class HTTPServer: @unchecked Sendable {
    /// What bounds the server.
    public struct Limits: Sendable {
        /// Open connections in all.
        public var connections: UInt32
        /// Open connections from one client address.
        public var connectionsPerAddress: UInt32
        /// Seconds a connection may stay idle.
        public var timeoutSeconds: UInt32

        public init(connections: UInt32, connectionsPerAddress: UInt32, timeoutSeconds: UInt32) {
            (self.connections, self.connectionsPerAddress, self.timeoutSeconds) = (connections, connectionsPerAddress, timeoutSeconds)
        }
    }

    // Called on microhttpd's threads; must be safe to call from several at once.
    let respond: @Sendable (HTTPRequest) -> HTTPResponse
    let limits: Limits
    let shared: Bool
    // Touched only by the thread that starts and stops.
    var daemon: OpaquePointer?
    var retained: Unmanaged<HTTPServer>?
    public private(set) var port: UInt16 = 0

    /// `shared`: several processes may listen on the same port
    /// (SO_REUSEPORT), as the workers of one service do.
    public init(limits: Limits, shared: Bool = false, respond: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        (self.limits, self.shared, self.respond) = (limits, shared, respond)
    }

    deinit { stop() }

    /// `HOST:PORT` with an IPv4 host, or nil.
    public static func parse(_ address: String) -> (host: String, port: UInt16)? {
        let parts = address.split(separator: ":", omittingEmptySubsequences: false)
        var probe = in_addr()
        guard parts.count == 2, let port = UInt16(parts[1]), inet_pton(AF_INET, String(parts[0]), &probe) == 1 else { return nil }
        return (String(parts[0]), port)
    }

    /// Listens on `host` and `port` (0: any free one); the port taken, or
    /// nil when the address is in use or not one of this host's.
    public func start(host: String, port: UInt16) -> UInt16? {
        let me = Unmanaged.passRetained(self)
        let bounds = quad_mhd_limits(connections: limits.connections, connections_per_address: limits.connectionsPerAddress,
                                     timeout_seconds: limits.timeoutSeconds)
        let started = shared
            ? quad_mhd_start_shared(host, port, HTTPServer.handler, me.toOpaque(), bounds, HTTPServer.completed)
            : quad_mhd_start(host, port, HTTPServer.handler, me.toOpaque(), bounds, HTTPServer.completed, nil, nil)
        guard let d = started else {
            me.release()
            return nil
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

    static let handler: quad_mhd_handler = { cls, connection, url, method, _, _, uploadSize, slot in
        guard let cls, let connection, let slot, let uploadSize else { return quad_mhd_no() }
        if slot.pointee == nil {
            slot.pointee = UnsafeMutableRawPointer(bitPattern: 1)
            return quad_mhd_yes()
        }
        if uploadSize.pointee > 0 {
            uploadSize.pointee = 0
            return quad_mhd_yes()
        }
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        let request = HTTPRequest(method: method.map { String(cString: $0) } ?? "", path: url.map { String(cString: $0) } ?? "/") {
            quad_mhd_header(connection, $0).map { String(cString: $0) }
        }
        let answer = server.respond(request)
        let response = answer.body.withUnsafeBytes { quad_mhd_response($0.count, $0.baseAddress) }
        guard let response else { return quad_mhd_no() }
        for (name, value) in answer.headers { _ = MHD_add_response_header(response, name, value) }
        let result = MHD_queue_response(connection, UInt32(answer.status), response)
        MHD_destroy_response(response)
        return result
    }

    static let completed: quad_mhd_completed = { _, _, slot, _ in slot?.pointee = nil }
}
