import CMicroHTTPD
import Foundation

/// `GET /metrics` in Prometheus's text format (and `GET /healthz`,
/// `GET /readyz` from its ``Health``), on
/// libmicrohttpd's own threads: the process's loop is never involved, it
/// only writes the ``MetricsRegistry`` this reads. Bounded like the
/// dashboard: 16 connections in all, 4 per address, 10 s idle. Any other
/// path is 404, any other method 405, and no request has a body.
public final class MetricsServer: @unchecked Sendable {
    // Shared with microhttpd's threads: `registry` locks itself; `daemon`
    // and `retained` are touched only by the thread that starts and stops.
    public let registry: MetricsRegistry
    var daemon: OpaquePointer?
    var retained: Unmanaged<MetricsServer>?
    /// What `/healthz` and `/readyz` answer, set before ``start(_:)``;
    /// without it both say ok (a process that keeps no such state).
    public var health: Health?
    public private(set) var port: UInt16 = 0
    var host = ""

    /// Where it serves, once started: `http://HOST:PORT/metrics` with the
    /// port it took (the one asked, or the free one port 0 found).
    public var url: String { "http://\(host):\(port)/metrics" }

    /// The content type of the text exposition format.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    public init(registry: MetricsRegistry) {
        self.registry = registry
    }

    deinit { stop() }

    /// `HOST:PORT` with an IPv4 host, or throws saying what is wrong.
    public static func parse(_ address: String) throws -> (String, UInt16) {
        let parts = address.split(separator: ":", omittingEmptySubsequences: false)
        var probe = in_addr()
        guard parts.count == 2, let port = UInt16(parts[1]), inet_pton(AF_INET, String(parts[0]), &probe) == 1 else {
            throw MetricsError("--metrics must be HOST:PORT with an IPv4 host (127.0.0.1:9100), or off; got '\(address)'")
        }
        return (String(parts[0]), port)
    }

    /// Listens on `address` (port 0 for any free one); returns the port.
    @discardableResult
    public func start(_ address: String) throws -> UInt16 {
        let (host, port) = try MetricsServer.parse(address)
        let me = Unmanaged.passRetained(self)
        let bounds = quad_mhd_limits(connections: 16, connections_per_address: 4, timeout_seconds: 10)
        guard let d = quad_mhd_start(host, port, MetricsServer.handler, me.toOpaque(), bounds, MetricsServer.completed, nil, nil) else {
            me.release()
            throw MetricsError("cannot listen on http://\(address) for /metrics (address in use, or not an IPv4 address of this host)")
        }
        daemon = d
        retained = me
        self.host = host
        self.port = quad_mhd_port(d)
        return self.port
    }

    public func stop() {
        if let d = daemon { MHD_stop_daemon(d) }
        daemon = nil
        retained?.release()
        retained = nil
    }

    /// The answer to a method and path: status, content type, body.
    public func answer(method: String, path: String) -> (Int, String, String) {
        let text = "text/plain; charset=utf-8"
        let route = path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path
        guard route == "/metrics" || route == "/healthz" || route == "/readyz" else { return (404, text, "not found: the metrics are at /metrics\n") }
        guard method == "GET" || method == "HEAD" else { return (405, text, "only GET and HEAD are served at \(route)\n") }
        if route == "/healthz" {
            let (status, body) = health?.liveness() ?? (200, "ok\n")
            return (status, text, body)
        }
        if route == "/readyz" {
            let (status, body) = health?.readiness() ?? (200, "ready\n")
            return (status, text, body)
        }
        return (200, MetricsServer.contentType, registry.exposition())
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
        let server = Unmanaged<MetricsServer>.fromOpaque(cls).takeUnretainedValue()
        let methodText = method.map { String(cString: $0) } ?? ""
        let (status, type, body) = server.answer(method: methodText, path: url.map { String(cString: $0) } ?? "/")
        let bytes = methodText == "HEAD" ? [] : Array(body.utf8)
        let response = bytes.withUnsafeBytes { quad_mhd_response($0.count, $0.baseAddress) }
        guard let response else { return quad_mhd_no() }
        _ = MHD_add_response_header(response, "Content-Type", type)
        _ = MHD_add_response_header(response, "Cache-Control", "no-store")
        if status == 405 { _ = MHD_add_response_header(response, "Allow", "GET, HEAD") }
        let result = MHD_queue_response(connection, UInt32(status), response)
        MHD_destroy_response(response)
        return result
    }

    static let completed: quad_mhd_completed = { _, _, slot, _ in slot?.pointee = nil }
}

public struct MetricsError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
