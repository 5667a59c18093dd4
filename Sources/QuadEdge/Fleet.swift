import Foundation
import QuadMessaging
import QuadMetrics
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhone
import QuadPhoneKit

/// One quad-edge process: one phone or many, each with its own file, one
/// DEALER for its requests and one XSUB for its live updates (both to one
/// broker at a time: Link.swift), all on ONE ``Reactor`` with one agenda of
/// timers (a ZeroMQ socket belongs to one thread; phones are not threads).
/// A control ROUTER lets a harness read each phone's state, switch
/// airplane mode, make a phone act or open a view, and wait until the
/// outboxes are drained.
///
/// What the phones need of the machine is known before the first one
/// opens (``Needs``): the context is sized for it, and a process the
/// machine cannot give it to refuses to start, naming the limit.
public final class Fleet {
    public let settings: EdgeSettings
    let context = ZMQContext()
    /// Why the phones cannot go on (a socket that could not be opened):
    /// the process ends at once with it, exit 1.
    public private(set) var fatal: String?
    /// The edge's one loop: the control socket and each phone's link
    /// (registered while its radio is on), the phones' timers beside them.
    let reactor: Reactor = {
        let r = Reactor(now: Clock.monotonicMillis, scalable: true)
        r.timerBudgetMs = Fleet.timerBudgetMs
        return r
    }()
    /// How long one turn runs the phones' due timers before it reads the
    /// sockets again. A thousand phones' timers (students' actions,
    /// telemetry ticks, retries) took 0.9 to 1.2 s of a turn, and an
    /// answer that arrived meanwhile waited for all of them: a reconnected
    /// phone's drain was a turn per action.
    static let timerBudgetMs: Int64 = 20
    var agenda: Timers { reactor.timers }
    private(set) var phones: [Phone] = []
    var byName: [String: Phone] = [:]
    var control: Socket?
    public let controlEndpoint: String?
    var day: CampusDay?
    var stopRequested = false
    var waits: [Wait] = []
    let startedMs = Int64(Clock.nowMillis())
    /// `/metrics` (``serveMetrics(_:)``), kept for the life of the process.
    var metricsServer: MetricsServer?

    struct Wait {
        var phones: [Phone]
        var telemetry: Bool
        var until: Int64
        var started: Int64
        var answer: (JSON) -> Void
    }

    /// Opens `count` phones named `<prefix>-001`… in `dir` (their files
    /// are kept: a phone that ran before continues where it stopped).
    public init(settings: EdgeSettings, dir: String, count: Int, prefix: String = "phone", seed: UInt64 = 1, control: String? = nil,
                controlBindWaitMs: Int64 = Fleet.controlBindWaitMs) throws {
        self.settings = settings
        self.controlEndpoint = control
        let needs = Fleet.Needs(phones: count, settings: settings, control: control != nil)
        try context.setMaxSockets(Int32(clamping: min(needs.sockets, Int(context.socketLimit))))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let width = max(3, String(count).count)
        // The students' passwords, kept apart from every phone's files.
        let students = try Students(path: Students.path(forPhonesDir: dir))
        for k in 1...max(1, count) {
            let number = String(k)
            let name = "\(prefix)-" + String(repeating: "0", count: max(0, width - number.count)) + number
            let phone = try Phone(name: name, path: "\(dir)/\(name).db", context: context, reactor: reactor, settings: settings,
                                  seed: seed &* 1_000_003 &+ UInt64(k), students: students)
            phone.onFatal = { [unowned self] reason in self.fail(reason) }
            phones.append(phone)
            byName[name] = phone
        }
        if let control {
            let s = try context.socket(.router)
            // Started again at once after a SIGKILL (the nemesis's `edge`
            // fault), the endpoint may still be the dying process's for a
            // moment: try again for a while before giving up.
            let until = Clock.monotonicMillis() + controlBindWaitMs
            while true {
                do { try s.bind(control); break } catch {
                    guard Clock.monotonicMillis() < until else { throw error }
                    usleep(100_000)
                }
            }
            self.control = s
            reactor.register(s) { [unowned self] _ in self.serveControl() }
        }
    }

    /// How often the process gives the free memory inside its heaps back
    /// to the system (malloc_trim). A thousand phones downloading their
    /// catalog, or draining with a larger page cache, free what they used
    /// between blocks still in use; glibc keeps those pages (only the top
    /// of a heap is returned by itself), and each counted as the process's
    /// own: 300 idle phones online on the default stack held 236-249 KiB
    /// of private memory each, 178-185 with the trim.
    static let trimEveryMs: Int64 = 10_000

    /// glibc's malloc_trim(0), looked up at run time (Swift's Glibc module
    /// does not declare <malloc.h>); nothing where the C library has none.
    static func trimHeaps() {
        typealias Trim = @convention(c) (Int) -> Int32
        if let trim = dlsym(nil, "malloc_trim") { _ = unsafeBitCast(trim, to: Trim.self)(0) }
    }

    /// Runs until SIGTERM/SIGINT, `edge.stop`, or the end of a campus day;
    /// returns the exit code.
    public func run(day: CampusDay? = nil) -> Int32 {
        Shutdown.install()
        self.day = day
        for phone in phones {
            phone.onDrained = { [unowned self] _ in self.checkWaits() }
            if (try? phone.db.meta("airplane")) == "on" { phone.airplane = true }
            phone.start()
        }
        if let controlEndpoint { Log.info("edge", "\(phones.count) phone\(phones.count == 1 ? "" : "s"), control on \(controlEndpoint)") }
        agenda.repeating(every: 200) { [unowned self] in self.checkWaits(); return true }
        agenda.repeating(every: Fleet.trimEveryMs) { Fleet.trimHeaps(); return true }
        day?.start(self)
        while !Shutdown.isRequested && !stopRequested {
            if let code = turn() { return code }
        }
        if let fatal {
            FileHandle.standardError.write(Data("quad-edge: stopped: \(fatal)\n".utf8))
            for phone in phones { phone.close() }
            return 1
        }
        // Closing the app: each session ends, and its last events get a
        // moment to leave while the network is there.
        for phone in phones { phone.end() }
        let until = Clock.monotonicMillis() + lingerMs
        while Clock.monotonicMillis() < until && phones.contains(where: { $0.telemetryInFlight != nil }) {
            if let code = turn(cap: 50) { return code }
        }
        for phone in phones { phone.close() }
        return day?.exitCode ?? 0
    }

    /// How long a starting process tries to bind its control endpoint
    /// (`control_bind_wait_ms`): a killed process's may take a moment to
    /// be released.
    public static let controlBindWaitMs: Int64 = 5_000

    /// How long a stopping process waits for its phones' last telemetry.
    var lingerMs: Int64 { 1_500 }

    /// One turn of the loop: poll every socket, serve what arrived, run the
    /// timers that are due. Returns an exit code when polling fails.
    func turn(cap: Int64 = 100) -> Int32? {
        do { try reactor.turn(timeoutCap: cap) } catch {
            Log.error("edge", "poll: \(error)")
            return 1
        }
        return nil
    }

    public func stop() { stopRequested = true }

    /// A phone cannot go on: the loop stops and the process exits 1 with
    /// the reason (the first one; the others are logged).
    func fail(_ reason: String) {
        Log.error("edge", reason)
        guard fatal == nil else { return }
        fatal = "\(reason) (this process: \(phones.count) phones, ZMQ_MAX_SOCKETS \(context.maxSockets), open files limit \(Fleet.openFilesLimit().soft))"
        stopRequested = true
    }

    /// What `phones` phones cost this process, by the design of Link and
    /// LiveFeed: per phone one request socket and one updates socket (each
    /// a ZeroMQ mailbox and one TCP connection: four descriptors), and its
    /// SQLite file with its WAL and shared memory while it sends (three);
    /// beside them the control socket and what libzmq and the process keep.
    public struct Needs: Sendable, CustomStringConvertible {
        public var phones: Int
        public var socketsPerPhone: Int
        /// Sockets open at once (the phones', the control socket and the
        /// two of the loop's ``Wakeup`` for image fetches).
        public var open: Int
        /// The context's size: ``open`` with room for closed sockets not
        /// yet reaped (at most libzmq's ZMQ_SOCKET_LIMIT, ``Fleet/reserve(_:)``).
        public var sockets: Int
        public var descriptors: Int
        public static let descriptorsPerSocket = 2
        public static let descriptorsPerFile = 3
        public static let processDescriptors = 64

        public init(phones: Int, settings: EdgeSettings, control: Bool) {
            self.phones = phones
            socketsPerPhone = 1 + (Endpoints.list(settings.updates).isEmpty ? 0 : 1)
            // What is open at once, and four times that for the context: a
            // socket closed (a phone in a dead zone, one moving to another
            // broker) keeps its slot until libzmq's reaper thread has ended
            // it, and on a machine whose cores are all busy the reaper falls
            // behind the phones' loop (twice was not enough: a 1,000-phone
            // day under strace ran out of slots, every phone's socket
            // refused with EMFILE). A slot costs a pointer.
            open = phones * socketsPerPhone + (control ? 1 : 0) + 2
            sockets = 4 * open + 256
            descriptors = phones * (socketsPerPhone * Needs.descriptorsPerSocket + Needs.descriptorsPerFile) + Needs.processDescriptors
        }

        public var description: String {
            "\(phones) phones need \(open) ZeroMQ sockets open at once (\(socketsPerPhone) a phone) and about \(descriptors) open files (\(socketsPerPhone * Needs.descriptorsPerSocket + Needs.descriptorsPerFile) a phone)"
        }
    }

    /// RLIMIT_NOFILE's soft and hard limits.
    public static func openFilesLimit() -> (soft: Int, hard: Int) {
        var files = rlimit()
        guard getrlimit(Fleet.nofile, &files) == 0 else { return (0, 0) }
        func n(_ v: rlim_t) -> Int { v > rlim_t(Int.max) ? Int.max : Int(v) }
        return (n(files.rlim_cur), n(files.rlim_max))
    }

    #if os(Linux)
    static let nofile = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    static let nofile = RLIMIT_NOFILE
    #endif

    /// Makes sure the machine gives what `needs` asks before any phone
    /// opens: ZeroMQ's socket limit and the hard limit on open files
    /// checked, the soft limit raised to the hard one. Throws a message
    /// naming the limit, the figure needed and how to raise it.
    public static func reserve(_ needs: Needs) throws(QuadError) {
        let limit = ZMQContext().socketLimit
        // The context gets its room for closing sockets up to the limit;
        // what must fit is what is open at once, with a margin.
        if needs.open + 64 > Int(limit) {
            throw .badRequest("\(needs); libzmq holds at most \(limit) sockets in one context (ZMQ_SOCKET_LIMIT): run fewer phones a process (deploy/campus spreads a campus over several)")
        }
        let (soft, hard) = openFilesLimit()
        guard needs.descriptors <= hard else {
            throw .badRequest("\(needs), and this process may open at most \(hard) (RLIMIT_NOFILE's hard limit): raise it (as root: ulimit -Hn \(needs.descriptors), or LimitNOFILE= in a unit, nofile in /etc/security/limits.conf) or run fewer phones a process (deploy/campus spreads a campus over several)")
        }
        // Up to the hard limit: sockets being closed hold their descriptors
        // a moment longer than the phones need them.
        guard soft < hard else { return }
        var files = rlimit()
        _ = getrlimit(nofile, &files)
        files.rlim_cur = files.rlim_max
        guard setrlimit(nofile, &files) == 0 else {
            throw .badRequest("\(needs); raising the soft limit on open files from \(soft) to \(hard) failed: \(String(cString: strerror(errno)))")
        }
    }

    func phone(_ name: String?) throws(QuadError) -> Phone {
        guard let name else {
            guard phones.count == 1 else { throw .badRequest("body.phone is required: this process runs \(phones.count) phones") }
            return phones[0]
        }
        guard let p = byName[name] else {
            throw .notFound("no phone '\(name)' here; phones: \(phones.prefix(5).map(\.name).joined(separator: ", "))\(phones.count > 5 ? ", …" : "")")
        }
        return p
    }

    // MARK: Waiting for drains

    func checkWaits() {
        guard !waits.isEmpty else { return }
        let now = Clock.monotonicMillis()
        var keep: [Wait] = []
        for w in waits {
            let pending = w.phones.reduce(0) { $0 + $1.queueLength }
            let telemetry = w.telemetry ? w.phones.reduce(0) { $0 + $1.telemetryQueued } : 0
            if pending == 0 && telemetry == 0 || now >= w.until {
                var answer: [String: JSON] = [
                    "drained": .bool(pending == 0 && telemetry == 0), "pending": .int(Int64(pending)),
                    "telemetry_queued": .int(Int64(w.phones.reduce(0) { $0 + $1.telemetryQueued })),
                    "waited_ms": .int(now - w.started),
                ]
                // One phone waited for: what it is synced through.
                if w.phones.count == 1, let p = w.phones.first { answer["sync"] = p.syncStatus }
                w.answer(.object(answer))
            } else {
                keep.append(w)
            }
        }
        waits = keep
    }

    /// Waits (without blocking the loop) until the phones' outboxes, and
    /// their telemetry queues if asked, are empty, or until the timeout.
    func whenDrained(_ phones: [Phone], telemetry: Bool, timeoutMs: Int64, _ answer: @escaping (JSON) -> Void) {
        let now = Clock.monotonicMillis()
        waits.append(Wait(phones: phones, telemetry: telemetry, until: now + timeoutMs, started: now, answer: answer))
        checkWaits()
    }
}

extension Fleet {
    /// Serves `/metrics` at `address` (HOST:PORT; port 0: any free one)
    /// until the process ends; returns where it serves.
    public func serveMetrics(_ address: String) throws -> String {
        let m = EdgeMetrics()
        let server = MetricsServer(registry: m.registry)
        try server.start(address)
        metricsServer = server
        for p in phones { p.metrics = m }
        m.update(phones, timers: agenda)
        agenda.repeating(every: 1000) { [unowned self] in
            m.update(self.phones, timers: self.agenda)
            return true
        }
        Log.info("edge", "metrics on \(server.url)")
        return server.url
    }
}
