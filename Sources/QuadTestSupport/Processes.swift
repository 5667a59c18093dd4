import Foundation
import QuadRuntime
import QuadWire

/// Starts Quad's executables as real processes for tests, on `ipc://`
/// endpoints in a fresh temporary folder, so tests never collide on ports.
public final class TestStack: @unchecked Sendable {
    // Used from one test at a time; the lock guards the process table
    // against the deinit running elsewhere.
    public let dir: String
    public let endpoints: Endpoints
    let lock = NSLock()
    var processes: [String: Process] = [:]

    public init(name: String = "stack") throws {
        dir = NSTemporaryDirectory() + "quad-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir + "/logs", withIntermediateDirectories: true)
        endpoints = Endpoints(frontend: "ipc://\(dir)/frontend", backend: "ipc://\(dir)/backend",
                              eventsIn: "ipc://\(dir)/events-in", eventsOut: "ipc://\(dir)/events-out", internal: "ipc://\(dir)/internal")
    }

    deinit { stopAll() }

    /// The endpoints of broker `index` (0 is ``endpoints``), in the same
    /// folder, so that one test runs a tier of brokers.
    public func endpoints(broker index: Int) -> Endpoints {
        if index == 0 { return endpoints }
        let b = "ipc://\(dir)/b\(index)-"
        return Endpoints(frontend: b + "frontend", backend: b + "backend", eventsIn: b + "events-in", eventsOut: b + "events-out", internal: b + "internal")
    }

    /// The first `count` brokers' endpoints as comma-separated lists: what a
    /// worker or a client of the whole tier is given.
    public func endpoints(brokers count: Int) -> Endpoints {
        let all = (0..<max(1, count)).map { endpoints(broker: $0) }
        func joined(_ field: (Endpoints) -> String) -> String { all.map(field).joined(separator: ",") }
        return Endpoints(frontend: joined(\.frontend), backend: joined(\.backend), eventsIn: joined(\.eventsIn),
                         eventsOut: joined(\.eventsOut), internal: joined(\.internal))
    }

    /// The process name of broker `index`: "broker", then "broker-2", ...
    public static func brokerName(_ index: Int) -> String { index == 0 ? "broker" : "broker-\(index + 1)" }

    /// The folder holding the built executables (beside the test bundle).
    public static var binDir: String {
        if let dir = ProcessInfo.processInfo.environment["QUAD_BIN_DIR"] { return dir }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.isExecutableFile(atPath: url.path + "/quad-broker") { return url.path }
            url = url.deletingLastPathComponent()
        }
        return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path
    }

    @discardableResult
    public func start(_ name: String, executable: String, arguments: [String], environment: [String: String] = [:]) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: TestStack.binDir + "/" + executable)
        p.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["QUAD_HOME"] = dir
        env.merge(environment) { _, new in new }
        p.environment = env
        let log = dir + "/logs/\(name.replacingOccurrences(of: "/", with: ".")).log"
        FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        p.standardError = handle
        p.standardOutput = handle
        try p.run()
        lock.withLock { processes[name] = p }
        return p
    }

    /// Starts the broker with CURVE on its frontend (its key pair in
    /// `dir/keys`, which ``client(source:)`` uses) and, unless `extra` says
    /// otherwise, no rate limit, so tests may send as fast as they like.
    @discardableResult
    public func startBroker(heartbeatMs: Int = 200, extra: [String] = [], index: Int = 0) throws -> Process {
        let rate = extra.contains("--rate-per-second") ? [] : ["--rate-per-second", "0"]
        // Every broker of the stack shares the one key pair in dir/keys.
        let endpoints = endpoints(broker: index)
        let p = try start(TestStack.brokerName(index), executable: "quad-broker", arguments: [
            "--frontend", endpoints.frontend, "--backend", endpoints.backend,
            "--events-in", endpoints.eventsIn, "--events-out", endpoints.eventsOut, "--internal", endpoints.internal,
            "--heartbeat-ms", String(heartbeatMs),
        ] + rate + extra)
        // The broker writes its public key at start; clients need it.
        let curveOff = extra.contains("--curve=off") || zip(extra, extra.dropFirst()).contains { $0 == "--curve" && $1 == "off" }
        if !curveOff {
            let until = Clock.monotonicMillis() + 10_000
            while brokerKey == nil && p.isRunning && Clock.monotonicMillis() < until { usleep(10_000) }
        }
        return p
    }

    /// The broker's CURVE public key, from `dir/keys/broker.pub`; nil before
    /// the broker wrote it, or with `--curve off`.
    public var brokerKey: [UInt8]? { try? BrokerKey.read(file: dir + "/keys/broker.pub") }

    /// Starts one worker of a service; `instance` like "tally/1".
    @discardableResult
    public func startWorker(_ executable: String, instance: String, db: String? = nil, heartbeatMs: Int = 200, extra: [String] = [],
                            environment: [String: String] = [:], brokers: Int = 1) throws -> Process {
        let endpoints = endpoints(brokers: brokers)
        let service = String(instance.split(separator: "/")[0])
        return try start(instance, executable: executable, arguments: [
            "--instance", instance, "--db", db ?? "\(dir)/\(service).db",
            "--backend", endpoints.backend, "--events-in", endpoints.eventsIn, "--events-out", endpoints.eventsOut,
            "--frontend", endpoints.frontend, "--internal", endpoints.internal, "--heartbeat-ms", String(heartbeatMs),
        ] + extra, environment: environment)
    }

    public func process(_ name: String) -> Process? { lock.withLock { processes[name] } }

    public func kill(_ name: String, signal: Int32 = SIGKILL) {
        guard let p = process(name) else { return }
        Foundation.kill(p.processIdentifier, signal)
        if signal == SIGKILL || signal == SIGTERM { p.waitUntilExit() }
    }

    public func stopAll() {
        let all = lock.withLock { () -> [Process] in
            let list = Array(processes.values)
            processes = [:]
            return list
        }
        // Workers first, while the broker can still confirm their leaving.
        let broker = all.filter { $0.executableURL?.lastPathComponent == "quad-broker" }
        let workers = all.filter { $0.executableURL?.lastPathComponent != "quad-broker" }
        for group in [workers, broker] {
            for p in group where p.isRunning { p.terminate() }
            for p in group { p.waitUntilExit() }
        }
    }

    /// A client of the public frontend, with the broker's CURVE key; with
    /// `brokers` above 1, of the first that many brokers' frontends.
    public func client(source: String = "test", brokers: Int = 1) throws -> Client {
        try Client(endpoint: endpoints(brokers: brokers).frontend, source: source, serverKey: brokerKey)
    }

    /// A client of broker `index`'s frontend alone.
    public func client(source: String = "test", broker index: Int) throws -> Client {
        try Client(endpoint: endpoints(broker: index).frontend, source: source, serverKey: brokerKey)
    }

    /// A client on the internal frontend, as a service calling a service.
    public func internalClient(source: String = "test-service") throws -> Client {
        try Client(endpoint: endpoints.internal, source: source)
    }

    /// Two brokers, and one quad-tally worker (`tally/1`) registered with
    /// both: the broker tier's tests start from it. False when the worker
    /// is not registered with each within 10 s.
    public func startTwoBrokersWithTally() throws -> Bool {
        try startBroker(index: 0)
        try startBroker(index: 1)
        try startWorker("quad-tally", instance: "tally/1", brokers: 2)
        return try waitForWorkers("tally", count: 1, broker: 0) && waitForWorkers("tally", count: 1, broker: 1)
    }

    /// Waits until `service` has `count` live workers in `sys.services`.
    public func waitForWorkers(_ service: String, count: Int, timeoutMs: Int64 = 10_000, broker index: Int = 0) throws -> Bool {
        let c = try client(broker: index)
        let until = Clock.monotonicMillis() + timeoutMs
        while Clock.monotonicMillis() < until {
            if let reply = try? c.request("sys.services", timeoutMs: 500, attempts: 1),
               let list = reply["services"]?.array {
                let workers = list.first { $0["name"]?.string == service }?["workers"]?.array?.count ?? 0
                if workers == count { return true }
            }
            usleep(50_000)
        }
        return false
    }

    public func log(_ name: String) -> String {
        (try? String(contentsOfFile: dir + "/logs/\(name.replacingOccurrences(of: "/", with: ".")).log", encoding: .utf8)) ?? ""
    }
}

/// Polls `condition` every 50 ms until it holds or `ms` pass; the last
/// answer. Tests wait for events this way, never for a fixed time.
public func eventually(_ ms: Int64 = 30_000, _ condition: () throws -> Bool) rethrows -> Bool {
    let until = Clock.monotonicMillis() + ms
    while Clock.monotonicMillis() < until {
        if try condition() { return true }
        usleep(50_000)
    }
    return try condition()
}

/// Runs an executable of the build to its end, as a user would from a shell:
/// `environment` is added to this process's, after the settings that would
/// steer it elsewhere (a token, a broker key, `QUAD_HOME`) are taken out.
/// Returns its exit status, stdout and stderr.
public func runBuilt(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws -> (Int32, String, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: TestStack.binDir + "/" + executable)
    p.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for key in ["QUAD_TOKEN", "QUAD_BROKER_KEY", "QUAD_BROKER_KEY_FILE", "QUAD_HOME"] { env[key] = nil }
    env.merge(environment) { _, new in new }
    p.environment = env
    let out = Pipe(), err = Pipe()
    p.standardOutput = out
    p.standardError = err
    p.standardInput = FileHandle.nullDevice
    try p.run()
    let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return (p.terminationStatus, output, errors)
}
