import Foundation
import QuadWire

/// Where the stack's sockets are. Every executable reads these from flags,
/// then from the environment (`deploy/stack env` prints them), then defaults.
public struct Endpoints: Sendable {
    /// Clients' requests (broker ROUTER).
    public var frontend: String
    /// Workers (broker ROUTER).
    public var backend: String
    /// Publishers connect here (broker XSUB).
    public var eventsIn: String
    /// Subscribers connect here (broker XPUB).
    public var eventsOut: String
    /// Requests from other services (broker ROUTER): `user` and `role`
    /// set by the caller are kept. Never exposed to phones.
    public var `internal`: String

    public init(frontend: String, backend: String, eventsIn: String, eventsOut: String, internal: String) {
        self.frontend = frontend
        self.backend = backend
        self.eventsIn = eventsIn
        self.eventsOut = eventsOut
        self.internal = `internal`
    }

    public static let defaults = Endpoints(
        frontend: "tcp://127.0.0.1:7700", backend: "tcp://127.0.0.1:7701",
        eventsIn: "tcp://127.0.0.1:7702", eventsOut: "tcp://127.0.0.1:7703", internal: "tcp://127.0.0.1:7704")

    /// The endpoints of one socket kind across the broker tier: each field
    /// may hold a comma-separated list, one endpoint per broker (issue 14:
    /// two brokers or more, all serving). Blanks around commas and empty
    /// items are dropped; a single endpoint is a list of one.
    public static func list(_ value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// One broker's endpoints out of lists: the `index`th of each (a list
    /// shorter than that gives its last item).
    public func broker(_ index: Int) -> Endpoints {
        func pick(_ v: String) -> String { let l = Endpoints.list(v); return l.isEmpty ? v : l[min(index, l.count - 1)] }
        return Endpoints(frontend: pick(frontend), backend: pick(backend), eventsIn: pick(eventsIn), eventsOut: pick(eventsOut), internal: pick(`internal`))
    }

    /// The public updates socket of the broker whose frontend is
    /// `frontend`, unless told otherwise: TCP port + 9 on the same host
    /// (7709 beside 7700; broker K's frontend is 10 ports after K-1's), or
    /// `<path>-updates` beside an ipc:// frontend.
    public static func updates(forFrontend frontend: String) -> String? {
        if frontend.hasPrefix("ipc://") { return frontend + "-updates" }
        guard frontend.hasPrefix("tcp://"), let colon = frontend.lastIndex(of: ":"),
              let port = Int(frontend[frontend.index(after: colon)...]), port > 0, port + 9 <= 65535 else { return nil }
        return String(frontend[...colon]) + String(port + 9)
    }

    /// Defaults overridden by QUAD_FRONTEND, QUAD_BACKEND, QUAD_EVENTS_IN, QUAD_EVENTS_OUT, QUAD_INTERNAL.
    public static func fromEnvironment() -> Endpoints {
        let env = ProcessInfo.processInfo.environment
        var e = defaults
        if let v = env["QUAD_FRONTEND"], !v.isEmpty { e.frontend = v }
        if let v = env["QUAD_BACKEND"], !v.isEmpty { e.backend = v }
        if let v = env["QUAD_EVENTS_IN"], !v.isEmpty { e.eventsIn = v }
        if let v = env["QUAD_EVENTS_OUT"], !v.isEmpty { e.eventsOut = v }
        if let v = env["QUAD_INTERNAL"], !v.isEmpty { e.internal = v }
        return e
    }
}

/// How long a service keeps what only guards against repeats and lets
/// subscribers catch up. Both tables would otherwise grow with every
/// mutation for ever; a worker prunes them on its loop, in small batches,
/// each its own short transaction.
public struct Retention: Sendable, Equatable {
    /// Idempotency records older than this are deleted (`idempotency_retention_ms`):
    /// a request repeated later than this runs again.
    public var idempotencyMs: Int64 = 86_400_000
    /// Published events older than this are deleted (`outbox_retention_ms`):
    /// the catch-up window of `events.since`.
    public var outboxMs: Int64 = 86_400_000
    /// At most this many events are kept (`outbox_max_rows`), the newest;
    /// never one not yet published.
    public var outboxMaxRows: Int64 = 1_000_000
    /// How often a worker prunes (`prune_every_ms`), and rows per
    /// transaction (`prune_batch`). A full batch prunes again on the loop's
    /// next turn, so pruning keeps up with any steady load.
    public var everyMs: Int64 = 10_000
    public var batch: Int = 500

    public init() {}

    public static let defaults = Retention()
}

/// A command line refused, or `--help` asked for: what ``Flags`` and the
/// libraries that read options throw. Only an executable's main exits,
/// with ``report()``'s code: 64 for a usage error, 0 for help.
public struct UsageError: Error, CustomStringConvertible {
    /// What is wrong; nil when the usage was asked for (`--help`).
    public let message: String?
    public let usage: String

    public init(_ message: String, usage: String) {
        self.message = message
        self.usage = usage
    }

    public static func help(_ usage: String) -> UsageError { UsageError(nil, usage) }

    init(_ message: String?, _ usage: String) {
        self.message = message
        self.usage = usage
    }

    public var exitCode: Int32 { message == nil ? 0 : 64 }

    public var description: String { message.map { "error: \($0)" } ?? "help asked for" }

    /// Prints it as a command-line tool does (the usage on stdout for
    /// `--help`; the error, then the usage, on stderr) and returns the
    /// exit code for main.
    public func report() -> Int32 {
        if let message {
            FileHandle.standardError.write(Data("error: \(message)\n\n\(usage)".utf8))
        } else {
            print(usage, terminator: "")
        }
        return exitCode
    }
}

/// A small command-line parser: `--name value`, `--name=value` and boolean
/// `--flag`. Unknown flags are usage errors (``UsageError``, exit 64 in main).
public struct Flags {
    public struct Spec {
        let name: String
        let help: String
        let takesValue: Bool
        let defaultText: String?
    }

    public let program: String
    public let summary: String
    var specs: [Spec] = []
    public private(set) var values: [String: String] = [:]
    public private(set) var positional: [String] = []

    public init(program: String, summary: String) {
        self.program = program
        self.summary = summary
        specs.append(Spec(name: "help", help: "show this help and exit", takesValue: false, defaultText: nil))
    }

    public mutating func option(_ name: String, _ help: String, default d: String? = nil) {
        specs.append(Spec(name: name, help: help, takesValue: true, defaultText: d))
    }

    public mutating func flag(_ name: String, _ help: String) {
        specs.append(Spec(name: name, help: help, takesValue: false, defaultText: nil))
    }

    public var usage: String {
        var s = "\(summary)\n\nUsage: \(program) [options]\n\nOptions:\n"
        for spec in specs {
            let left = spec.takesValue ? "--\(spec.name) VALUE" : "--\(spec.name)"
            s += "  " + left.padding(toLength: max(24, left.count + 2), withPad: " ", startingAt: 0) + spec.help
            if let d = spec.defaultText { s += " (default: \(d))" }
            s += "\n"
        }
        return s
    }

    /// Parses `arguments` (without the program name); throws
    /// ``UsageError/help(_:)`` on `--help` and a ``UsageError`` on a usage error.
    public mutating func parse(_ arguments: [String] = Array(CommandLine.arguments.dropFirst()), allowPositional: Bool = false) throws(UsageError) {
        var k = 0
        while k < arguments.count {
            let arg = arguments[k]
            k += 1
            guard arg.hasPrefix("--") else {
                if allowPositional { positional.append(arg); continue }
                throw UsageError("unexpected argument '\(arg)'", usage: usage)
            }
            var name = String(arg.dropFirst(2))
            var value: String?
            if let eq = name.firstIndex(of: "=") {
                value = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard let spec = specs.first(where: { $0.name == name }) else { throw UsageError("unknown option --\(name)", usage: usage) }
            if name == "help" { throw .help(usage) }
            if spec.takesValue {
                if value == nil {
                    guard k < arguments.count else { throw UsageError("option --\(name) needs a value", usage: usage) }
                    value = arguments[k]
                    k += 1
                }
                values[name] = value
            } else {
                if let value { throw UsageError("option --\(name) takes no value, got '\(value)'", usage: usage) }
                values[name] = "true"
            }
        }
        for spec in specs where spec.takesValue && values[spec.name] == nil {
            if let d = spec.defaultText { values[spec.name] = d }
        }
    }

    public subscript(_ name: String) -> String? { values[name] }
    public func bool(_ name: String) -> Bool { values[name] == "true" }

    public func int(_ name: String) throws(UsageError) -> Int {
        guard let text = values[name] else { return 0 }
        guard let n = Int(text) else { throw UsageError("option --\(name) must be an integer, got '\(text)'", usage: usage) }
        return n
    }
}

/// SIGTERM and SIGINT set a flag that the poll loops check: stop taking
/// work, finish what is in hand, leave cleanly.
public enum Shutdown {
    nonisolated(unsafe) static var requested: sig_atomic_t = 0

    public static func install() {
        // A parent may have started us with these signals blocked (test
        // runners do); a blocked SIGTERM would never reach the handler.
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        sigprocmask(SIG_UNBLOCK, &set, nil)
        signal(SIGTERM) { _ in Shutdown.requested = 1 }
        signal(SIGINT) { _ in Shutdown.requested = 1 }
        signal(SIGPIPE, SIG_IGN)
    }

    public static var isRequested: Bool { requested != 0 }
}

/// One JSON line per event on stderr, written with Quad's own JSON writer
/// (Foundation's JSONSerialization costs about 250 µs a line here).
public enum Log {
    public static func line(_ fields: [String: Any]) {
        var f: [String: JSON] = ["ts": .int(Int64(Clock.nowMillis()))]
        for (key, value) in fields {
            switch value {
            case let v as String: f[key] = .string(v)
            case let v as Int: f[key] = .int(Int64(v))
            case let v as Int64: f[key] = .int(v)
            case let v as Int32: f[key] = .int(Int64(v))
            case let v as Double: f[key] = .double(v)
            case let v as Bool: f[key] = .bool(v)
            case let v as JSON: f[key] = v
            default: f[key] = .string("\(value)")
            }
        }
        // A line logged while a request is handled names its trace.
        if f["trace"] == nil, let span = Span.current { f["trace"] = .string(span.traceID) }
        var bytes = JSON.object(f).encoded()
        bytes.append(0x0A)
        output(bytes)
    }

    /// Lines logged between ``hold()`` and ``flush()`` are written together
    /// at the flush: a worker holds them while it answers what one poll
    /// returned, so a request's log line costs no syscall before its reply
    /// goes out, and many requests in flight share one write. At most
    /// `maxHeldBytes` wait; a process killed meanwhile loses the lines of
    /// that turn only.
    public static func hold() { lock.withLock { holding += 1 } }

    /// Writes what was held (see ``hold()``).
    public static func flush() {
        let bytes: [UInt8] = lock.withLock {
            holding = max(0, holding - 1)
            return take()
        }
        emit(bytes)
    }

    static let maxHeldBytes = 64 << 10
    static let lock = NSLock()
    // Guarded by `lock`.
    nonisolated(unsafe) static var holding = 0
    nonisolated(unsafe) static var held: [UInt8] = []

    static func take() -> [UInt8] {
        defer { held.removeAll(keepingCapacity: true) }
        return held
    }

    static func emit(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(2, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { break }
            }
        }
    }

    /// A request's span line (`"msg":"span"`: see docs/operations.md, Following a
    /// trace), written straight into bytes: it goes out once per request in
    /// every process, and the general ``line(_:)`` boxes each field twice
    /// and sorts the keys.
    public static func span(src: String, trace: String, span: String, parent: String?, type: String, id: String, status: Int,
                            startMicros: Int64, micros: Int64, user: String? = nil, error: String? = nil, deferred: Bool = false) {
        var out: [UInt8] = []
        out.reserveCapacity(300 + type.utf8.count + id.utf8.count)
        func key(_ k: StaticString) {
            out.append(out.isEmpty ? UInt8(ascii: "{") : UInt8(ascii: ","))
            out.append(UInt8(ascii: "\""))
            k.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        }
        key("ts"); JSON.writeInt(Int64(Clock.nowMillis()), into: &out)
        key("src"); JSON.writeString(src, into: &out)
        key("msg"); out.append(contentsOf: Array("\"span\"".utf8))
        key("trace"); JSON.writeString(trace, into: &out)
        key("span"); JSON.writeString(span, into: &out)
        if let parent { key("parent"); JSON.writeString(parent, into: &out) }
        key("type"); JSON.writeString(type, into: &out)
        key("id"); JSON.writeString(id, into: &out)
        key("status"); JSON.writeInt(Int64(status), into: &out)
        key("start_ms"); JSON.writeInt(startMicros / 1000, into: &out)
        key("start_us"); JSON.writeInt(startMicros, into: &out)
        key("us"); JSON.writeInt(micros, into: &out)
        if let user { key("user"); JSON.writeString(user, into: &out) }
        if let error { key("error"); JSON.writeString(error, into: &out) }
        if deferred { key("deferred"); out.append(contentsOf: Array("true".utf8)) }
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        output(out)
    }

    /// Writes one encoded line now, or holds it (``hold()``).
    static func output(_ bytes: [UInt8]) {
        let now: [UInt8]? = lock.withLock {
            guard holding > 0 else { return bytes }
            held.append(contentsOf: bytes)
            return held.count >= maxHeldBytes ? take() : nil
        }
        if let now { emit(now) }
    }

    public static func info(_ source: String, _ message: String) {
        line(["src": source, "level": "info", "msg": message])
    }

    public static func error(_ source: String, _ message: String) {
        line(["src": source, "level": "error", "msg": message])
    }
}
