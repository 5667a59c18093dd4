import CMicroHTTPD
import Foundation

/// One request to an HTTP server: its method, its path without the query,
/// its headers and query arguments (read while the request is being
/// answered), the client's address, and its body when the server reads
/// bodies (``HTTPServer/init(limits:shared:bodyLimit:tls:respond:)``).
public struct HTTPRequest {
    public let method: String
    public let path: String
    /// The body, up to the server's `bodyLimit` (empty when it reads none).
    public var body: [UInt8] = []
    /// The body was over the server's `bodyLimit` (declared or sent): none of it is kept.
    public var bodyTooLarge = false
    /// The client's IPv4 address ("?" when unknown).
    public var client = "127.0.0.1"
    let lookup: (String) -> String?
    var argumentLookup: (String) -> String? = { _ in nil }

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

    /// A query argument of the URL by name; nil when absent.
    public func argument(_ name: String) -> String? { argumentLookup(name) }
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

/// A small HTTP server on libmicrohttpd's own threads (the process's loop
/// is never involved), bounded by ``Limits`` so one client cannot hold it:
/// `/metrics`, `/healthz`, `/images/<sha256>` and the analytics dashboard
/// are this, each with its own `respond`. By default it reads no request
/// body (their pieces are dropped, then the request is answered); with a
/// `bodyLimit` it keeps a POST's body up to that many bytes and answers
/// one declared or sent larger without keeping any of it
/// (``HTTPRequest/bodyTooLarge``).
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
    let bodyLimit: Int
    let tls: (key: String, cert: String)?
    // Touched only by the thread that starts and stops.
    var daemon: OpaquePointer?
    var retained: Unmanaged<HTTPServer>?
    public private(set) var port: UInt16 = 0

    /// `shared`: several processes may listen on the same port
    /// (SO_REUSEPORT), as the workers of one service do. `bodyLimit`: the
    /// largest POST body kept (0: none read). `tls`: PEM key and
    /// certificate, served as HTTPS (not with `shared`).
    public init(limits: Limits, shared: Bool = false, bodyLimit: Int = 0, tls: (key: String, cert: String)? = nil,
                respond: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        (self.limits, self.shared, self.bodyLimit, self.tls, self.respond) = (limits, shared, bodyLimit, tls, respond)
    }

    deinit { stop() }

    /// Whether this libmicrohttpd was built with TLS.
    public static var hasTLS: Bool { quad_mhd_has_tls() != 0 }

    /// `HOST:PORT` with an IPv4 host, or nil.
    public static func parse(_ address: String) -> (host: String, port: UInt16)? {
        let parts = address.split(separator: ":", omittingEmptySubsequences: false)
        var probe = in_addr()
        guard parts.count == 2, let port = UInt16(parts[1]), inet_pton(AF_INET, String(parts[0]), &probe) == 1 else { return nil }
        return (String(parts[0]), port)
    }

    /// Listens on `host` and `port` (0: any free one); the port taken, or
    /// nil when the address is in use or not one of this host's (or the
    /// TLS key is unusable).
    public func start(host: String, port: UInt16) -> UInt16? {
        let me = Unmanaged.passRetained(self)
        let bounds = quad_mhd_limits(connections: limits.connections, connections_per_address: limits.connectionsPerAddress,
                                     timeout_seconds: limits.timeoutSeconds)
        let started = shared
            ? quad_mhd_start_shared(host, port, HTTPServer.handler, me.toOpaque(), bounds, HTTPServer.completed)
            : quad_mhd_start(host, port, HTTPServer.handler, me.toOpaque(), bounds, HTTPServer.completed, tls?.key, tls?.cert)
        guard let d = started else {
            me.release()
            return nil
        }
        daemon = d
        retained = me
        self.port = quad_mhd_port(d)
        return self.port
    }

    /// The connections accepted and not yet closed (0 when stopped).
    public var openConnections: Int { daemon.map { Int(quad_mhd_connections($0)) } ?? 0 }

    public func stop() {
        if let d = daemon { MHD_stop_daemon(d) }
        daemon = nil
        retained?.release()
        retained = nil
    }

    /// A body while it is uploaded, kept in microhttpd's per-request slot.
    final class Upload {
        var bytes: [UInt8] = []
        var tooLarge = false
    }

    /// The slot of a request whose body is not kept.
    nonisolated(unsafe) static let noUpload = UnsafeMutableRawPointer(bitPattern: 1)!

    /// microhttpd's access handler, on a connection's thread: called first
    /// with the headers, then once per piece of body, then once more with
    /// none; the answer goes on that last call.
    static let handler: quad_mhd_handler = { cls, connection, url, method, _, uploadData, uploadSize, slot in
        guard let cls, let connection, let slot, let uploadSize else { return quad_mhd_no() }
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        let methodText = method.map { String(cString: $0) } ?? ""
        func request() -> HTTPRequest {
            var r = HTTPRequest(method: methodText, path: url.map { String(cString: $0) } ?? "/") {
                quad_mhd_header(connection, $0).map { String(cString: $0) }
            }
            r.argumentLookup = { quad_mhd_argument(connection, $0).map { String(cString: $0) } }
            var address = [CChar](repeating: 0, count: 16)
            r.client = quad_mhd_client_address(connection, &address, address.count) != 0
                ? String(decoding: address.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
            return r
        }
        if slot.pointee == nil {
            guard server.bodyLimit > 0, methodText == "POST" else {
                slot.pointee = noUpload
                return quad_mhd_yes()
            }
            let declared = quad_mhd_header(connection, "Content-Length").flatMap { Int(String(cString: $0)) } ?? 0
            if declared > server.bodyLimit {
                // Over the limit as declared: answered before reading any of it.
                var r = request()
                r.bodyTooLarge = true
                return queue(connection, server.respond(r))
            }
            slot.pointee = Unmanaged.passRetained(Upload()).toOpaque()
            return quad_mhd_yes()
        }
        let upload = slot.pointee == noUpload ? nil : Unmanaged<Upload>.fromOpaque(slot.pointee!).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            if let upload, !upload.tooLarge, let uploadData {
                if upload.bytes.count + uploadSize.pointee > server.bodyLimit {
                    upload.tooLarge = true
                    upload.bytes = []
                } else {
                    uploadData.withMemoryRebound(to: UInt8.self, capacity: uploadSize.pointee) {
                        upload.bytes += UnsafeBufferPointer(start: $0, count: uploadSize.pointee)
                    }
                }
            }
            uploadSize.pointee = 0
            return quad_mhd_yes()
        }
        var r = request()
        if let upload {
            r.body = upload.bytes
            r.bodyTooLarge = upload.tooLarge
        }
        return queue(connection, server.respond(r))
    }

    static func queue(_ connection: OpaquePointer, _ answer: HTTPResponse) -> MHD_Result {
        let response = answer.body.withUnsafeBytes { quad_mhd_response($0.count, $0.baseAddress) }
        guard let response else { return quad_mhd_no() }
        for (name, value) in answer.headers { _ = MHD_add_response_header(response, name, value) }
        let result = MHD_queue_response(connection, UInt32(answer.status), response)
        MHD_destroy_response(response)
        return result
    }

    /// Frees an upload's state however its request ended.
    static let completed: quad_mhd_completed = { _, _, slot, _ in
        guard let slot, let kept = slot.pointee else { return }
        if kept != noUpload { Unmanaged<Upload>.fromOpaque(kept).release() }
        slot.pointee = nil
    }
}
