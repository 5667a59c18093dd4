import Foundation
import QuadHTTP

/// `GET /metrics` in Prometheus's text format (and `GET /healthz`,
/// `GET /readyz` from its ``Health``), on
/// libmicrohttpd's own threads: the process's loop is never involved, it
/// only writes the ``MetricsRegistry`` this reads. Bounded like the
/// dashboard: 16 connections in all, 4 per address, 10 s idle. Any other
/// path is 404, any other method 405, and no request has a body.
public final class MetricsServer: @unchecked Sendable {
    // `registry` and `health` lock themselves; `http` is touched only by
    // the thread that starts and stops.
    public let registry: MetricsRegistry
    var http: HTTPServer?
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
        guard let (host, port) = HTTPServer.parse(address) else {
            throw MetricsError("--metrics must be HOST:PORT with an IPv4 host (127.0.0.1:9100), or off; got '\(address)'")
        }
        return (host, port)
    }

    /// Listens on `address` (port 0 for any free one); returns the port.
    @discardableResult
    public func start(_ address: String) throws -> UInt16 {
        let (host, port) = try MetricsServer.parse(address)
        // Weak: the server is stopped by this one's deinit, and a request
        // answered meanwhile must not keep it alive.
        let server = HTTPServer(limits: .init(connections: 16, connectionsPerAddress: 4, timeoutSeconds: 10)) { [weak self] request in
            guard let self else { return .text(503, "shutting down\n") }
            let (status, type, body) = self.answer(method: request.method, path: request.path)
            var headers = [("Content-Type", type), ("Cache-Control", "no-store")]
            if status == 405 { headers.append(("Allow", "GET, HEAD")) }
            return HTTPResponse(status: status, headers: headers, body: Array(body.utf8))
        }
        guard let taken = server.start(host: host, port: port) else {
            throw MetricsError("cannot listen on http://\(address) for /metrics (address in use, or not an IPv4 address of this host)")
        }
        http = server
        self.host = host
        self.port = taken
        return taken
    }

    public func stop() {
        http?.stop()
        http = nil
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
}

public struct MetricsError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
