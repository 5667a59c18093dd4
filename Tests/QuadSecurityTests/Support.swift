import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker and one worker of every service executable that is built, as
/// real processes: the stack the matrix and the malformed-traffic tests run
/// on. Services covered: accounts, catalog, favorites, orders, reservations,
/// telemetry, analytics, notifications (whichever of them is built; ``running`` says).
final class FullStack {
    static let adminEmail = "admin@quad.campus"
    static let adminPassword = "admin-pass-7f3a9c"

    /// Every service of the stack, with the options the tests need: cheap
    /// password hashes, no parking simulator, no dashboard.
    static let services: [(name: String, extra: [String])] = [
        ("accounts", ["--password-hashing", "minimum", "--admin", "\(adminEmail):\(adminPassword)"]),
        ("catalog", []),
        ("favorites", []),
        ("orders", []),
        ("reservations", ["--sim", "off", "--history-days", "0"]),
        ("telemetry", []),
        ("analytics", ["--http", "off"]),
        ("notifications", []),
    ]

    let stack: TestStack
    /// The services whose executable is built, in start order.
    let running: [String]

    init(_ name: String, brokerExtra: [String] = []) throws {
        stack = try TestStack(name: name)
        try stack.startBroker(extra: brokerExtra)
        var running: [String] = []
        for (service, extra) in FullStack.services
        where FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(service)") {
            try stack.startWorker("quad-\(service)", instance: "\(service)/1", extra: extra)
            running.append(service)
        }
        self.running = running
        for service in running {
            #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000), "\(service) did not register")
        }
    }

    /// A client of the public frontend carrying `token`.
    func client(token: String? = nil, source: String = "security-test") throws -> Client {
        let c = try stack.client(source: source)
        c.token = token
        return c
    }

    /// Every log line the stack's processes wrote so far.
    func logs() -> String {
        let dir = stack.dir + "/logs"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.sorted().map { (try? String(contentsOfFile: dir + "/" + $0, encoding: .utf8)) ?? "" }.joined(separator: "\n")
    }

    /// The pid of each process the stack started, by name.
    func pids() -> [String: Int32] {
        var out: [String: Int32] = [:]
        for name in ["broker"] + running.map({ "\($0)/1" }) {
            if let p = stack.process(name), p.isRunning { out[name] = p.processIdentifier }
        }
        return out
    }

    /// Calls until `ok` holds for the answer or `timeoutMs` passes.
    @discardableResult
    func eventually(_ timeoutMs: Int64 = 15_000, _ attempt: () throws -> Bool) rethrows -> Bool {
        let until = Clock.monotonicMillis() + timeoutMs
        while Clock.monotonicMillis() < until {
            if try attempt() { return true }
            usleep(100_000)
        }
        return false
    }
}

/// A raw DEALER on an endpoint, for traffic that `Client` would never send.
final class RawPeer {
    let socket: Socket

    init(_ context: ZMQContext, _ endpoint: String, serverKey: [UInt8]?, clientKeys: (publicKey: [UInt8], secretKey: [UInt8])? = nil,
         handshakeMs: Int32? = nil) throws {
        socket = try context.socket(.dealer)
        if let handshakeMs { try socket.setHandshakeInterval(handshakeMs) }
        if let serverKey {
            if let clientKeys {
                try socket.setCurveClient(serverKey: serverKey, publicKey: clientKeys.publicKey, secretKey: clientKeys.secretKey)
            } else {
                try socket.setCurveClient(serverKey: serverKey)
            }
        }
        try socket.setSendTimeout(2000)
        try socket.connect(endpoint)
    }

    /// The next message within `ms`, or nil.
    func receive(within ms: Int) -> [[UInt8]]? {
        var poller = Poller()
        poller.add(socket)
        let until = Clock.monotonicMillis() + Int64(ms)
        while case let left = until - Clock.monotonicMillis(), left > 0 {
            guard let ready = try? poller.poll(timeoutMs: Int(left)), ready[0] else { continue }
            if let frames = try? socket.receive(dontWait: true) { return frames }
        }
        return nil
    }

    /// Sends a request envelope and returns the answer within `ms`, or nil.
    func call(_ envelope: Envelope, within ms: Int = 3000) throws -> Envelope? {
        try socket.send(Majordomo.request(envelope))
        let until = Clock.monotonicMillis() + Int64(ms)
        while case let left = until - Clock.monotonicMillis(), left > 0 {
            guard let frames = receive(within: Int(left)) else { return nil }
            if let answer = try? Majordomo.envelope(endingFrames: frames), answer.corr == envelope.id { return answer }
        }
        return nil
    }
}

/// A fresh CURVE key pair as raw bytes.
func curveKeyPair() throws -> (publicKey: [UInt8], secretKey: [UInt8], publicText: String) {
    let pair = try Curve.keyPair()
    return (try #require(Curve.decode(pair.publicKey)), try #require(Curve.decode(pair.secretKey)), pair.publicKey)
}

/// Runs an executable of the build (QuadTestSupport's runBuilt).
func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws -> (Int32, String, String) {
    try runBuilt(executable, arguments, environment: environment)
}

func mode(of path: String) throws -> Int {
    try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
}
