import Foundation
import QuadWire

/// An HTTP answer as a test reads it: status, head, body bytes.
public struct FetchedHTTP: Sendable {
    public var status: Int
    public var head: String
    public var body: [UInt8]

    /// A header's value, its name compared without case.
    public func header(_ name: String) -> String? {
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == name.lowercased() { return parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}

/// One HTTP/1.0 request to 127.0.0.1:`port` on a plain socket, read to
/// the end: no client library between the test and the server.
public func httpRequest(_ port: UInt16, _ path: String, method: String = "GET", headers: [String] = []) throws -> FetchedHTTP {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = in_port_t(port.bigEndian)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard rc == 0 else { throw QuadError.unavailable("cannot connect to 127.0.0.1:\(port)") }
    let request = Array(("\(method) \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n").utf8)
    _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &buf, buf.count, 0)
        if n <= 0 { break }
        out += buf[0..<n]
    }
    let end = Array("\r\n\r\n".utf8)
    var split = out.count
    if out.count >= 4 { for k in 0...(out.count - 4) where Array(out[k..<(k + 4)]) == end { split = k; break } }
    let head = String(decoding: out[..<split], as: UTF8.self)
    let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
    return FetchedHTTP(status: status, head: head, body: split + 4 <= out.count ? Array(out[(split + 4)...]) : [])
}

/// The port a process logged in its "images at http://127.0.0.1:PORT" line.
public func loggedImagesPort(_ stack: TestStack, _ name: String) throws -> UInt16 {
    try loggedHTTPPort(stack, name, path: "images")
}

/// The port of a process's HTTP server, from the "PATH at
/// http://127.0.0.1:PORT/PATH" line it logs once the server listens
/// (`metrics`, `images`); waits up to 30 s for the line.
public func loggedHTTPPort(_ stack: TestStack, _ name: String, path: String) throws -> UInt16 {
    let until = Clock.monotonicMillis() + 30_000
    while Clock.monotonicMillis() < until {
        if let line = stack.log(name).split(separator: "\n").first(where: { $0.contains("\(path) at http://") }),
           let range = line.range(of: #"127\.0\.0\.1:[0-9]+/"# + path, options: .regularExpression),
           let port = UInt16(line[range].dropFirst("127.0.0.1:".count).prefix { $0.isNumber }) {
            return port
        }
        usleep(50_000)
    }
    throw QuadError.internal("no '\(path) at' line in \(name)'s log: \(stack.log(name).suffix(600))")
}
