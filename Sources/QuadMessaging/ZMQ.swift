import CZeroMQ

/// An error from libzmq, with its errno and `zmq_strerror` text.
public struct ZMQError: Error, Sendable, CustomStringConvertible {
    public let errno: Int32
    public let message: String
    public let operation: String

    init(_ operation: String) {
        let e = zmq_errno()
        self.errno = e
        self.operation = operation
        self.message = String(cString: zmq_strerror(e))
    }

    /// An error of `operation` that libzmq did not report itself.
    public init(_ operation: String, message: String) {
        self.errno = 0
        self.operation = operation
        self.message = message
    }

    public var description: String { "\(operation): \(message) (errno \(errno))" }
    /// True when the call would have blocked (EAGAIN): a timeout, not a failure.
    public var wouldBlock: Bool { errno == EAGAIN }
    /// True when a signal interrupted the call.
    public var interrupted: Bool { errno == EINTR }
    /// True when the context was terminated.
    public var terminated: Bool { errno == ETERM }
}

/// A ZeroMQ context. Thread-safe by libzmq's contract, hence Sendable.
public final class ZMQContext: @unchecked Sendable {
    // libzmq documents a context as safe to share across threads.
    let handle: UnsafeMutableRawPointer

    public init() {
        handle = zmq_ctx_new()!
    }

    deinit { zmq_ctx_term(handle) }

    /// The most sockets this context may hold (`ZMQ_MAX_SOCKETS`, 1,023 by
    /// default). Set before the first socket is made; libzmq refuses more
    /// than ``socketLimit``.
    public var maxSockets: Int32 {
        get { zmq_ctx_get(handle, ZMQ_MAX_SOCKETS) }
    }

    public func setMaxSockets(_ n: Int32) throws(ZMQError) {
        guard zmq_ctx_set(handle, ZMQ_MAX_SOCKETS, n) == 0 else { throw ZMQError("zmq_ctx_set(ZMQ_MAX_SOCKETS, \(n))") }
    }

    /// The largest ``maxSockets`` libzmq accepts (`ZMQ_SOCKET_LIMIT`).
    public var socketLimit: Int32 { zmq_ctx_get(handle, ZMQ_SOCKET_LIMIT) }

    public func socket(_ type: SocketType) throws(ZMQError) -> Socket {
        try Socket(context: self, type: type)
    }
}

public enum SocketType: Sendable {
    case req, rep, dealer, router, pub, sub, xpub, xsub, push, pull, pair

    var raw: Int32 {
        switch self {
        case .req: ZMQ_REQ
        case .rep: ZMQ_REP
        case .dealer: ZMQ_DEALER
        case .router: ZMQ_ROUTER
        case .pub: ZMQ_PUB
        case .sub: ZMQ_SUB
        case .xpub: ZMQ_XPUB
        case .xsub: ZMQ_XSUB
        case .push: ZMQ_PUSH
        case .pull: ZMQ_PULL
        case .pair: ZMQ_PAIR
        }
    }
}

/// One ZeroMQ socket. A socket belongs to one thread; this class is not
/// Sendable, so the compiler keeps it where it was made.
public final class Socket {
    let handle: UnsafeMutableRawPointer
    let context: ZMQContext
    public let type: SocketType

    /// Set by a scalable ``Reactor`` while the socket is registered: a send
    /// or a receive may take the socket's pending commands, and with them
    /// the signal of its ZMQ_FD, so the reactor looks at it again.
    var onTouch: ((Socket) -> Void)?

    /// `ZMQ_FD`: readable when the socket's state may have changed
    /// (``events`` tells what it is now).
    var fileDescriptor: Int32 {
        var fd: Int32 = -1
        var size = MemoryLayout<Int32>.size
        zmq_getsockopt(handle, ZMQ_FD, &fd, &size)
        return fd
    }

    /// `ZMQ_EVENTS`: what the socket can do now, `ZMQ_POLLIN` and
    /// `ZMQ_POLLOUT` (the socket's pending commands are taken first); 0 when
    /// it cannot be asked.
    var events: Int32 {
        var events: Int32 = 0
        var size = MemoryLayout<Int32>.size
        guard zmq_getsockopt(handle, ZMQ_EVENTS, &events, &size) == 0 else { return 0 }
        return events
    }

    /// Whether a message can be read now.
    var readable: Bool { events & Int32(ZMQ_POLLIN) != 0 }

    init(context: ZMQContext, type: SocketType) throws(ZMQError) {
        guard let h = zmq_socket(context.handle, type.raw) else { throw ZMQError("zmq_socket") }
        self.handle = h
        self.context = context
        self.type = type
        try setOption(ZMQ_LINGER, Int32(0))
    }

    deinit { zmq_close(handle) }

    public func bind(_ endpoint: String) throws(ZMQError) {
        if zmq_bind(handle, endpoint) != 0 { throw ZMQError("zmq_bind \(endpoint)") }
    }

    public func connect(_ endpoint: String) throws(ZMQError) {
        if zmq_connect(handle, endpoint) != 0 { throw ZMQError("zmq_connect \(endpoint)") }
    }

    public func disconnect(_ endpoint: String) throws(ZMQError) {
        if zmq_disconnect(handle, endpoint) != 0 { throw ZMQError("zmq_disconnect \(endpoint)") }
    }

    /// The endpoint actually bound, e.g. after binding `tcp://127.0.0.1:*`.
    public var lastEndpoint: String {
        var buf = [CChar](repeating: 0, count: 256)
        var size = buf.count
        zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buf, &size)
        return String(cString: buf)
    }

    // MARK: Options

    func setOption(_ option: Int32, _ value: Int32) throws(ZMQError) {
        var v = value
        if zmq_setsockopt(handle, option, &v, MemoryLayout<Int32>.size) != 0 { throw ZMQError("zmq_setsockopt \(option)") }
    }

    func setOption(_ option: Int32, _ value: Int64) throws(ZMQError) {
        var v = value
        if zmq_setsockopt(handle, option, &v, MemoryLayout<Int64>.size) != 0 { throw ZMQError("zmq_setsockopt \(option)") }
    }

    func setOption(_ option: Int32, bytes: [UInt8]) throws(ZMQError) {
        let rc = bytes.withUnsafeBytes { zmq_setsockopt(handle, option, $0.baseAddress, $0.count) }
        if rc != 0 { throw ZMQError("zmq_setsockopt \(option)") }
    }

    /// Milliseconds to keep unsent messages after close (default here: 0).
    public func setLinger(_ ms: Int32) throws(ZMQError) { try setOption(ZMQ_LINGER, ms) }
    public func setSendHWM(_ n: Int32) throws(ZMQError) { try setOption(ZMQ_SNDHWM, n) }
    public func setReceiveHWM(_ n: Int32) throws(ZMQError) { try setOption(ZMQ_RCVHWM, n) }
    /// The largest inbound frame accepted; a peer sending more is disconnected.
    public func setMaxMessageSize(_ bytes: Int64) throws(ZMQError) { try setOption(ZMQ_MAXMSGSIZE, bytes) }
    public func setRoutingID(_ id: [UInt8]) throws(ZMQError) { try setOption(ZMQ_ROUTING_ID, bytes: id) }
    public func setReceiveTimeout(_ ms: Int32) throws(ZMQError) { try setOption(ZMQ_RCVTIMEO, ms) }
    public func setSendTimeout(_ ms: Int32) throws(ZMQError) { try setOption(ZMQ_SNDTIMEO, ms) }
    /// ROUTER: fail a send to an unknown peer (EHOSTUNREACH) instead of dropping it.
    public func setRouterMandatory(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_ROUTER_MANDATORY, Int32(on ? 1 : 0)) }
    public func setImmediate(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_IMMEDIATE, Int32(on ? 1 : 0)) }
    /// XPUB: subscriptions count only when the socket's owner passes them
    /// to ``subscribe(_:)`` right after receiving them (ZMQ_XPUB_MANUAL).
    public func setXPubManual(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_XPUB_MANUAL, Int32(on ? 1 : 0)) }
    public func subscribe(_ prefix: String) throws(ZMQError) { try setOption(ZMQ_SUBSCRIBE, bytes: Array(prefix.utf8)) }
    public func unsubscribe(_ prefix: String) throws(ZMQError) { try setOption(ZMQ_UNSUBSCRIBE, bytes: Array(prefix.utf8)) }
    /// CURVE server role with this secret key (32 raw bytes).
    public func setCurveServer(secretKey: [UInt8]) throws(ZMQError) {
        try setOption(ZMQ_CURVE_SERVER, Int32(1))
        try setOption(ZMQ_CURVE_SECRETKEY, bytes: secretKey)
    }
    /// CURVE client role: the server's public key and this client's key pair.
    public func setCurveClient(serverKey: [UInt8], publicKey: [UInt8], secretKey: [UInt8]) throws(ZMQError) {
        try setOption(ZMQ_CURVE_SERVERKEY, bytes: serverKey)
        try setOption(ZMQ_CURVE_PUBLICKEY, bytes: publicKey)
        try setOption(ZMQ_CURVE_SECRETKEY, bytes: secretKey)
    }

    /// CURVE client role with a fresh ephemeral key pair: all a client needs
    /// is the server's public key (32 raw bytes). A server with another key,
    /// or without CURVE, never completes the handshake, so nothing is sent.
    public func setCurveClient(serverKey: [UInt8]) throws(ZMQError) {
        let pair = try Curve.keyPair()
        // zmq_curve_keypair's Z85 output always decodes.
        try setCurveClient(serverKey: serverKey, publicKey: Curve.decode(pair.publicKey)!, secretKey: Curve.decode(pair.secretKey)!)
    }
    /// The ZAP domain sent with each authentication request (RFC 27).
    public func setZAPDomain(_ domain: String) throws(ZMQError) { try setOption(ZMQ_ZAP_DOMAIN, bytes: Array(domain.utf8)) }
    /// Milliseconds a peer has to complete the ZMTP handshake (default 30000).
    /// ZMTP heartbeats: a PING every `intervalMs`; no traffic for `timeoutMs` closes the connection (and a connecting socket dials again).
    public func setHeartbeat(intervalMs: Int32, timeoutMs: Int32) throws(ZMQError) {
        try setOption(ZMQ_HEARTBEAT_IVL, intervalMs)
        try setOption(ZMQ_HEARTBEAT_TIMEOUT, timeoutMs)
    }
    public func setHandshakeInterval(_ ms: Int32) throws(ZMQError) { try setOption(ZMQ_HANDSHAKE_IVL, ms) }

    /// Publishes this socket's handshake events on `endpoint` (an `inproc://`
    /// address) for a ``SocketMonitor`` to read (`zmq_socket_monitor`).
    func monitor(_ endpoint: String, events: Int32) throws(ZMQError) {
        if zmq_socket_monitor(handle, endpoint, events) != 0 { throw ZMQError("zmq_socket_monitor \(endpoint)") }
    }

    // MARK: Frames

    /// Sends a multipart message. Each frame is copied into a `zmq_msg_t` of
    /// its exact size; frames may hold any bytes.
    public func send(_ frames: [[UInt8]], dontWait: Bool = false) throws(ZMQError) {
        try send(frames, then: [], dontWait: dontWait)
    }

    /// Sends `frames` (copied) and then `tail`, each a frame received
    /// before, without copying its bytes: libzmq shares its buffer.
    public func send(_ frames: [[UInt8]], then tail: [Frame], dontWait: Bool = false) throws(ZMQError) {
        defer { onTouch?(self) }
        let last = frames.count + tail.count - 1
        for (n, frame) in frames.enumerated() {
            var flags: Int32 = n < last ? ZMQ_SNDMORE : 0
            if dontWait { flags |= ZMQ_DONTWAIT }
            var msg = zmq_msg_t()
            zmq_msg_init_size(&msg, frame.count)
            if !frame.isEmpty {
                frame.withUnsafeBytes { src in
                    zmq_msg_data(&msg).copyMemory(from: src.baseAddress!, byteCount: src.count)
                }
            }
            while zmq_msg_send(&msg, handle, flags) < 0 {
                let e = ZMQError("zmq_msg_send")
                if e.interrupted { continue }
                zmq_msg_close(&msg)
                throw e
            }
        }
        for (k, frame) in tail.enumerated() {
            var flags: Int32 = frames.count + k < last ? ZMQ_SNDMORE : 0
            if dontWait { flags |= ZMQ_DONTWAIT }
            var msg = zmq_msg_t()
            zmq_msg_init(&msg)
            zmq_msg_copy(&msg, frame.msg)
            while zmq_msg_send(&msg, handle, flags) < 0 {
                let e = ZMQError("zmq_msg_send")
                if e.interrupted { continue }
                zmq_msg_close(&msg)
                throw e
            }
        }
    }

    /// Receives one multipart message; nil when `dontWait` and none is ready,
    /// or when the receive timeout passes.
    public func receive(dontWait: Bool = false) throws(ZMQError) -> [[UInt8]]? {
        try receiveMessage(dontWait: dontWait, keepingAtMost: .max, readingMetadata: false)?.frames
    }

    /// The one receive loop: every frame of a message, the first
    /// `keepingAtMost` of them copied, and with `readingMetadata` the
    /// connection's metadata from the first frame that carries it.
    func receiveMessage(dontWait: Bool, keepingAtMost: Int, readingMetadata: Bool) throws(ZMQError)
        -> (frames: [[UInt8]], count: Int, metadata: MessageMetadata)?
    {
        try receiveMessage(dontWait: dontWait, keepingAtMost: keepingAtMost, readingMetadata: readingMetadata, copying: .max)
            .map { ($0.frames, $0.count, $0.metadata) }
    }

    /// The receive loop with a tail: the first `copying` frames (one more
    /// when the second is empty, an MDP peer's REQ-style delimiter) copied
    /// into `frames`, the next ones, up to `keepingAtMost` in all, kept as
    /// libzmq's messages in `tail` (``Frame``), the rest counted.
    func receiveMessage(dontWait: Bool, keepingAtMost: Int, readingMetadata: Bool, copying: Int) throws(ZMQError)
        -> (frames: [[UInt8]], tail: [Frame], count: Int, metadata: MessageMetadata)?
    {
        defer { onTouch?(self) }
        var frames: [[UInt8]] = []
        var tail: [Frame] = []
        var copying = copying
        var count = 0
        var metadata = MessageMetadata()
        while true {
            var msg = zmq_msg_t()
            zmq_msg_init(&msg)
            defer { zmq_msg_close(&msg) }
            var rc: Int32
            repeat {
                rc = zmq_msg_recv(&msg, handle, dontWait && count == 0 ? ZMQ_DONTWAIT : 0)
            } while rc < 0 && zmq_errno() == EINTR
            if rc < 0 {
                let e = ZMQError("zmq_msg_recv")
                if e.wouldBlock && count == 0 { return nil }
                throw e
            }
            count += 1
            if readingMetadata && metadata == MessageMetadata() {
                func property(_ name: String) -> String? {
                    guard let p = zmq_msg_gets(&msg, name) else { return nil }
                    let s = String(cString: p)
                    return s.isEmpty ? nil : s
                }
                metadata = MessageMetadata(userID: property("User-Id"), peerAddress: property("Peer-Address"))
            }
            let size = zmq_msg_size(&msg)
            let more = zmq_msg_more(&msg) != 0  // read before the message moves into a Frame
            if count == 2 && size == 0 && copying < .max { copying += 1 }
            if frames.count + tail.count >= keepingAtMost {
            } else if frames.count >= copying {
                tail.append(Frame(moving: &msg))
            } else if size == 0 {
                frames.append([])
            } else {
                let data = zmq_msg_data(&msg)!
                frames.append(Array(UnsafeRawBufferPointer(start: data, count: size)))
            }
            if !more { return (frames, tail, count, metadata) }
        }
    }
}

/// Who sent a message, as libzmq knows it (`zmq_msg_gets`).
public struct MessageMetadata: Sendable, Equatable {
    /// `User-Id`: what the ZAP handler returned for the connection (the
    /// broker's returns the client's CURVE public key in Z85); nil without ZAP.
    public var userID: String?
    /// `Peer-Address`: the peer's IP address on TCP; nil on ipc and inproc.
    public var peerAddress: String?

    public init(userID: String? = nil, peerAddress: String? = nil) {
        self.userID = userID
        self.peerAddress = peerAddress
    }
}

extension Socket {
    /// Like ``receive(dontWait:)``, with the metadata of the connection the
    /// message came in on, read from the first frame that carries it (a
    /// ROUTER's routing-id frame is made by the socket and carries none).
    /// Frames past `keepingAtMost` are received and dropped, not copied:
    /// `count` says how many the message had.
    public func receiveWithMetadata(dontWait: Bool = false, keepingAtMost: Int = .max) throws(ZMQError)
        -> (frames: [[UInt8]], count: Int, metadata: MessageMetadata)?
    {
        try receiveMessage(dontWait: dontWait, keepingAtMost: keepingAtMost, readingMetadata: true)
    }

    /// Like ``receiveWithMetadata(dontWait:keepingAtMost:)``, with the
    /// frames from the `copying`-th on (one further when the second frame
    /// is empty: a REQ-style delimiter) kept as libzmq's messages, not
    /// copied: what a router passes on untouched (``Frame``).
    public func receiveWithTail(dontWait: Bool = false, keepingAtMost: Int = .max, copying: Int, readingMetadata: Bool = false) throws(ZMQError)
        -> (frames: [[UInt8]], tail: [Frame], count: Int, metadata: MessageMetadata)?
    {
        try receiveMessage(dontWait: dontWait, keepingAtMost: keepingAtMost, readingMetadata: readingMetadata, copying: copying)
    }
}

/// Waits on several sockets at once (`zmq_poll`).
public struct Poller {
    var sockets: [Socket] = []

    public init() {}

    /// Adds a socket to watch for input; returns its index.
    @discardableResult
    public mutating func add(_ socket: Socket) -> Int {
        sockets.append(socket)
        return sockets.count - 1
    }

    /// Polls up to `timeoutMs` (-1 waits forever) and returns which sockets
    /// have input, by index. An interrupting signal returns an empty set.
    public func poll(timeoutMs: Int) throws(ZMQError) -> [Bool] {
        var items = sockets.map { zmq_pollitem_t(socket: $0.handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0) }
        let rc = zmq_poll(&items, Int32(items.count), timeoutMs)
        if rc < 0 {
            let e = ZMQError("zmq_poll")
            if e.interrupted { return Array(repeating: false, count: items.count) }
            throw e
        }
        return items.map { ($0.revents & Int16(ZMQ_POLLIN)) != 0 }
    }
}

public enum ZMQVersion {
    public static var string: String {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return "\(major).\(minor).\(patch)"
    }
}

/// CURVE key pairs in Z85 text and raw bytes.
public enum Curve {
    public static func keyPair() throws(ZMQError) -> (publicKey: String, secretKey: String) {
        var pub = [CChar](repeating: 0, count: 41)
        var sec = [CChar](repeating: 0, count: 41)
        if zmq_curve_keypair(&pub, &sec) != 0 { throw ZMQError("zmq_curve_keypair") }
        return (String(cString: pub), String(cString: sec))
    }

    public static func decode(_ z85: String) -> [UInt8]? {
        guard z85.utf8.count == 40 else { return nil }
        var out = [UInt8](repeating: 0, count: 32)
        guard zmq_z85_decode(&out, z85) != nil else { return nil }
        return out
    }

    /// The Z85 text of a 32-byte key.
    public static func encode(_ key: [UInt8]) -> String? {
        guard key.count == 32 else { return nil }
        var out = [CChar](repeating: 0, count: 41)
        guard zmq_z85_encode(&out, key, key.count) != nil else { return nil }
        return String(cString: out)
    }

    /// The public key (Z85) that goes with a secret key (Z85); nil when
    /// `secretKey` is not a key.
    public static func publicKey(forSecretKey secretKey: String) -> String? {
        guard decode(secretKey) != nil else { return nil }
        var out = [CChar](repeating: 0, count: 41)
        guard zmq_curve_public(&out, secretKey) == 0 else { return nil }
        return String(cString: out)
    }
}

/// The handshake events of one socket (`zmq_socket_monitor`), read on the
/// owner's thread through a PAIR socket: why a peer could not connect.
public final class SocketMonitor {
    public enum Kind: Sendable, Equatable {
        /// A peer completed the handshake.
        case succeeded
        /// The peer broke the protocol; `value` is ZMQ's protocol error code.
        case protocolError
        /// The authenticator (ZAP) refused the peer; `value` is its status code.
        case authFailed
        /// The handshake failed for another reason (a timeout, a closed connection).
        case failed
        /// An established connection closed (the peer died or went away);
        /// only with `connections: true`.
        case disconnected
        case other
    }

    public struct Event: Sendable {
        public let kind: Kind
        /// The protocol error or ZAP status code; the errno for `failed`.
        public let value: UInt32
        /// The endpoint the event is about.
        public let endpoint: String

        /// The protocol error in words, for a log line that says why.
        public var reason: String {
            switch kind {
            case .succeeded: return "handshake succeeded"
            case .disconnected: return "disconnected"
            case .authFailed: return "refused by the authenticator (ZAP status \(value))"
            case .failed: return "handshake failed (\(String(cString: zmq_strerror(Int32(bitPattern: value)))))"
            case .other: return "event \(value)"
            case .protocolError:
                switch Int32(bitPattern: value) {
                case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
                    return "CURVE cryptographic error: the client's HELLO does not open with this server's key (the client has a wrong server public key)"
                case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                    return "security mechanism mismatch: the client does not use CURVE (no server public key)"
                default:
                    return "protocol error 0x\(String(value, radix: 16))"
                }
            }
        }
    }

    /// The socket the events arrive on; poll it like any other.
    public let socket: Socket

    /// Starts monitoring `monitored` for handshake events; `name` makes the
    /// inproc endpoint unique within the context. With `connections`, also
    /// when a handshake succeeds and when a connection closes: what a client
    /// of several brokers reads to fail over at once from one that died.
    public init(_ monitored: Socket, name: String, connections: Bool = false) throws(ZMQError) {
        let endpoint = "inproc://quad-monitor-\(name)"
        var events = ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
        if connections { events |= ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED }
        try monitored.monitor(endpoint, events: events)
        socket = try monitored.context.socket(.pair)
        try socket.connect(endpoint)
    }

    /// The next event, or nil when none is waiting.
    public func next() -> Event? {
        guard let frames = try? socket.receive(dontWait: true), frames.count >= 2, frames[0].count >= 6 else { return nil }
        let head = frames[0]
        let code = Int32(UInt16(head[0]) | UInt16(head[1]) << 8)
        let value = UInt32(head[2]) | UInt32(head[3]) << 8 | UInt32(head[4]) << 16 | UInt32(head[5]) << 24
        let kind: Kind
        switch code {
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: kind = .succeeded
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: kind = .protocolError
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: kind = .authFailed
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: kind = .failed
        case ZMQ_EVENT_DISCONNECTED: kind = .disconnected
        default: kind = .other
        }
        return Event(kind: kind, value: value, endpoint: String(decoding: frames[1], as: UTF8.self))
    }
}
