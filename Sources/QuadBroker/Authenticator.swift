import Foundation
import QuadMessaging
import QuadProcess
import QuadWire

/// The broker's ZAP handler (ZeroMQ RFC 27): libzmq asks it, over
/// `inproc://zeromq.zap.01` in the broker's context, whether a client that
/// completed the CURVE key exchange on the frontend may connect. Any client
/// key by default (the session token then says who the user is), or only
/// the keys listed in `--allow-keys FILE`, re-read when the file changes.
/// It runs on the broker's loop: a handshake waits for its answer.
final class Authenticator {
    static let endpoint = "inproc://zeromq.zap.01"
    /// The ZAP domain of the public frontend.
    static let domain = "quad"
    /// The ZAP domain of the internal sockets, with `--service-keys`.
    static let internalDomain = "quad-internal"

    let socket: Socket
    let allowPath: String?
    /// nil: any client key.
    var allowed: Set<[UInt8]>?
    var allowFileStamp: Int?
    let log: LogThrottle
    /// The service keys the internal sockets admit (`--service-keys`).
    let serviceKeys: Set<[UInt8]>
    let serviceKeysPath: String?
    private(set) var accepted: Int64 = 0
    private(set) var refused: Int64 = 0
    /// Client keys refused until a monotonic instant: they sent traffic the
    /// protocol does not allow (``ban(_:forMs:)``).
    private(set) var bans: [String: Int64] = [:]
    /// Most keys banned at once; past it the bans that ran out go, then the
    /// oldest half.
    static let maxBans = 100_000
    /// New handshakes per client key and per peer address (token buckets).
    var perKey: RateLimiter
    var perAddress: RateLimiter

    init(context: ZMQContext, allowPath: String?, serviceKeysPath: String? = nil, log: LogThrottle,
         handshakesPerKey: Double = 0, handshakesPerAddress: Double = 0) throws {
        perKey = RateLimiter(perSecond: handshakesPerKey, burst: handshakesPerKey * 10)
        perAddress = RateLimiter(perSecond: handshakesPerAddress, burst: handshakesPerAddress * 10)
        socket = try context.socket(.rep)
        try socket.bind(Authenticator.endpoint)
        self.allowPath = allowPath
        self.log = log
        self.serviceKeysPath = serviceKeysPath
        serviceKeys = try serviceKeysPath.map { try BrokerKeys.allowList(at: $0) } ?? []
        if let allowPath {
            allowed = try BrokerKeys.allowList(at: allowPath)
            allowFileStamp = Authenticator.stamp(allowPath)
        }
    }

    /// Re-reads the allow list when its file changed; a broken file keeps the
    /// list in force and says why.
    func reloadIfChanged() {
        guard let allowPath else { return }
        let now = Authenticator.stamp(allowPath)
        guard now != allowFileStamp else { return }
        allowFileStamp = now
        do {
            let keys = try BrokerKeys.allowList(at: allowPath)
            allowed = keys
            Log.info("broker", "allowed client keys reloaded from \(allowPath): \(keys.count) key(s)")
        } catch {
            Log.error("broker", "allowed client keys not reloaded, the previous \(allowed?.count ?? 0) stay in force: \(error)")
        }
    }

    static func stamp(_ path: String) -> Int? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int(info.st_mtim.tv_sec) &* 1_000_000_007 &+ Int(info.st_mtim.tv_nsec) &+ Int(info.st_size) &* 31
    }

    /// Refuses new handshakes of the client key `key` (Z85) for `ms`: ROUTER
    /// cannot close one peer's connection, so a key that broke the protocol
    /// keeps the connection it has but cannot open another until then.
    func ban(_ key: String, forMs ms: Int64) {
        guard ms > 0 else { return }
        let now = Clock.monotonicMillis()
        if bans[key] == nil && bans.count >= Authenticator.maxBans {
            bans = bans.filter { $0.value > now }
            if bans.count >= Authenticator.maxBans {
                bans = Dictionary(uniqueKeysWithValues: bans.sorted { $0.value > $1.value }.prefix(Authenticator.maxBans / 2).map { ($0.key, $0.value) })
            }
        }
        bans[key] = now + ms
    }

    func sweep(now: Int64) {
        bans = bans.filter { $0.value > now }
        perKey.sweep(now: now)
        perAddress.sweep(now: now)
    }

    /// Client keys (Z85) exempt from the per-address budgets
    /// (`--trusted-keys`): the operator's own tools, so that a stranger
    /// flooding from the same address (loopback included) cannot starve them.
    var trusted: Set<String> = []

    /// Answers every waiting request.
    func drain() {
        var n = 0
        while n < 1000, let frames = try? socket.receive(dontWait: true) {
            n += 1
            try? socket.send(answer(frames), dontWait: true)
        }
    }

    /// RFC 27: version, request id, domain, address, identity, mechanism,
    /// credentials... → version, request id, status code, status text,
    /// user id, metadata.
    func answer(_ frames: [[UInt8]]) -> [[UInt8]] {
        let version = Array("1.0".utf8)
        let requestID = frames.count > 1 ? frames[1] : []
        func reply(_ code: String, _ text: String, user: String = "") -> [[UInt8]] {
            [version, requestID, Array(code.utf8), Array(text.utf8), Array(user.utf8), []]
        }
        guard frames.count >= 6, frames[0] == version else {
            log.error("zap-malformed", "a malformed ZAP request (\(frames.count) frames) was refused")
            return reply("500", "malformed ZAP request")
        }
        let address = String(decoding: frames[3], as: UTF8.self)
        let mechanism = String(decoding: frames[5], as: UTF8.self)
        if frames[2] == Array(Authenticator.internalDomain.utf8) {
            // The internal sockets: only the services' keys.
            guard mechanism == "CURVE", frames.count >= 7, frames[6].count == 32, serviceKeys.contains(frames[6]) else {
                refused += 1
                let key = frames.count >= 7 ? Curve.encode(frames[6]) ?? "?" : "none"
                log.info("zap-internal-\(key)",
                         "a peer at \(address.isEmpty ? "?" : address) refused on an internal socket: mechanism \(mechanism), key \(key) is not in --service-keys \(serviceKeysPath ?? "")")
                return reply("400", "not a service key")
            }
            accepted += 1
            return reply("200", "OK", user: Curve.encode(frames[6]) ?? "")
        }
        // Only the frontend and the internal sockets set a domain.
        guard frames[2] == Array(Authenticator.domain.utf8) else { return reply("200", "OK") }
        guard mechanism == "CURVE", frames.count >= 7, frames[6].count == 32 else {
            refused += 1
            log.info("zap-mechanism-\(mechanism)", "client at \(address.isEmpty ? "?" : address) refused: security mechanism \(mechanism), not CURVE")
            return reply("400", "CURVE required")
        }
        let key = frames[6]
        let text = Curve.encode(key) ?? "?"
        if let allowed, !allowed.contains(key) {
            refused += 1
            log.info("zap-refused-\(text)",
                     "client at \(address.isEmpty ? "?" : address) with CURVE key \(text) refused: the key is not in --allow-keys \(allowPath ?? "")")
            return reply("400", "client key not allowed")
        }
        let now = Clock.monotonicMillis()
        if let until = bans[text] {
            if until > now {
                refused += 1
                log.info("zap-banned-\(text)", "client key \(text) at \(address.isEmpty ? "?" : address) refused: it sent malformed multipart traffic; banned for \((until - now + 999) / 1000) s more (malformed_ban_ms)")
                return reply("400", "client key banned for malformed traffic")
            }
            bans[text] = nil
        }
        // Too many new connections is a temporary refusal (RFC 27's 300):
        // libzmq's client connects again later, where a 400 would make it
        // give up for good (a phone of a campus behind one address that came
        // back with all the others would stay cut off).
        if perKey.isOn, perKey.take(text, now: now) != nil {
            refused += 1
            log.info("zap-key-rate-\(text)", "client key \(text) refused: more than \(perKey.perSecond) new connections per second (handshake_rate_per_key)")
            return reply("300", "too many new connections for this key")
        }
        if perAddress.isOn, !address.isEmpty, !trusted.contains(text), perAddress.take(address, now: now) != nil {
            refused += 1
            log.info("zap-address-rate-\(address)", "client at \(address) refused: more than \(perAddress.perSecond) new connections per second from this address (handshake_rate_per_address)")
            return reply("300", "too many new connections from this address")
        }
        accepted += 1
        return reply("200", "OK", user: text)
    }
}

/// Log lines that a flood cannot multiply: each kind is written at most once
/// per interval, with how many were held back since.
final class LogThrottle {
    let source: String
    let intervalMs: Int64
    var last: [String: (at: Int64, held: Int)] = [:]

    init(source: String, intervalMs: Int64 = 5000) {
        self.source = source
        self.intervalMs = intervalMs
    }

    func info(_ kind: String, _ message: String, fields: [String: Any] = [:]) { write("info", kind, message, fields) }
    func error(_ kind: String, _ message: String, fields: [String: Any] = [:]) { write("error", kind, message, fields) }

    func write(_ level: String, _ kind: String, _ message: String, _ fields: [String: Any]) {
        let now = Clock.monotonicMillis()
        if let seen = last[kind], now - seen.at < intervalMs {
            last[kind] = (seen.at, seen.held + 1)
            return
        }
        if last.count > 10_000 { last = last.filter { now - $0.value.at < intervalMs } }
        var line = fields
        line["src"] = source
        line["level"] = level
        line["msg"] = message
        if let held = last[kind]?.held, held > 0 { line["repeated"] = held }
        last[kind] = (now, 0)
        Log.line(line)
    }
}
