import Foundation
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// Stores that come back (issue 14, point 3), on real processes: a worker
/// on a PostgreSQL cluster that this test starts, stops and restarts with
/// `pg_ctl`; a worker on a SQLite file on a small filesystem that fills up;
/// a worker on a SQLite file whose lock another connection holds.
@Suite("Stores that come back", .serialized)
struct StoresComeBackTests {
    /// Calls `request` (same id each time) until an answer that is not a
    /// 503 arrives, or `ms` passes; returns it with the time it took.
    static func untilServed(_ client: Client, _ request: Envelope, within ms: Int64 = 30_000) -> (Envelope?, Int64, [String]) {
        let start = Clock.monotonicMillis()
        var seen: [String] = []
        while Clock.monotonicMillis() - start < ms {
            if let reply = try? client.call(request, timeoutMs: 2000, attempts: 1) {
                if reply.quadError?.status != 503 { return (reply, Clock.monotonicMillis() - start, seen) }
                seen.append(reply.quadError?.message ?? "")
            }
            usleep(20_000)
        }
        return (nil, Clock.monotonicMillis() - start, seen)
    }

    @Test func aWorkerOnPostgreSQLAnswers503WhileTheServerIsGoneAndServesSoonAfterItReturns() throws {
        let pg = try TestCluster()
        let stack = try TestStack(name: "pg-back")
        defer { pg.stop(); stack.stopAll() }
        try stack.startBroker()
        let worker = try stack.startWorker("quad-tally", instance: "tally/1", db: try pg.database("tally"))
        try stack.startWorker("quad-telemetry", instance: "telemetry/1", db: try pg.database("telemetry"))
        try #require(try stack.waitForWorkers("tally", count: 1, timeoutMs: 30_000), "tally: \(stack.log("tally/1").suffix(800))")
        try #require(try stack.waitForWorkers("telemetry", count: 1, timeoutMs: 30_000), "telemetry: \(stack.log("telemetry/1").suffix(800))")
        let client = try stack.client()
        let service = try stack.internalClient()
        #expect(try client.request("tally.add", ["key": "k", "n": 1])["total"]?.int == 1)
        // Telemetry stages each batch in a temporary table (COPY), which a
        // new session no longer has.
        var k = 0
        func batch() -> Envelope {
            let events: [JSON] = (0..<20).map { _ in
                k += 1
                return ["id": .string("019ad9a2-0000-7000-8000-\(String(format: "%012x", k))"), "phone": "ph-1", "user": "u-1", "session": "s-1",
                        "name": "view.opened", "ts": .int(1_764_583_200_000 + Int64(k)), "offline": false, "props": ["view": "home"]]
            }
            var e = Envelope.request("telemetry.ingest", body: ["events": .array(events)], user: "u-1", role: "service")
            e.user = "u-1"
            return e
        }
        let first = try service.call(batch(), timeoutMs: 8000, attempts: 1)
        #expect(first.body["accepted"]?.int == 20, "\(first.body.text)")

        // The server is gone: a 503 that says why, soon (no hang).
        try pg.ctl("stop", "-m", "fast")
        let started = Clock.monotonicMillis()
        let down = try client.call(.request("tally.add", body: ["key": "k", "n": 1]), timeoutMs: 5000, attempts: 1)
        let error = try #require(down.quadError, "answered while the server is down: \(down.body.text)")
        #expect(error.status == 503 && error.message.contains("postgres") && error.message.contains("no connection"), "\(error)")
        #expect(Clock.monotonicMillis() - started < 5000)
        // Again, inside the backoff: the same 503, with when it tries next.
        let again = try #require(try client.call(.request("tally.add", body: ["key": "k", "n": 1]), timeoutMs: 5000, attempts: 1).quadError)
        #expect(again.status == 503 && again.message.contains("next attempt in"), "\(again)")

        // Back: served within 2 s of its return (3 s allowed on a loaded machine).
        try pg.ctl("start")
        // First a query that opens a transaction (events.since): before,
        // only a statement outside one opened a lost session again, so
        // this answered 503 "no connection to the server" for ever.
        let since = Envelope.request("tally.events.since", body: ["after": 0, "limit": 10])
        let (read, readMs, readSeen) = Self.untilServed(service, since)
        print("stores: events.since answered \(readMs) ms after pg_ctl start returned; 503s meanwhile: \(readSeen.count)")
        #expect(read?.quadError == nil && read?.body["last"]?.int == 1, "\(read?.body.text ?? "no answer") after \(readSeen.suffix(2))")
        #expect(readMs < 3000, "events.since served \(readMs) ms after the server came back")
        let (back, ms, seen) = Self.untilServed(client, .request("tally.add", body: ["key": "k", "n": 1]))
        print("stores: first answer \(ms) ms after pg_ctl start returned; 503s meanwhile: \(seen)")
        #expect(back?.body["total"]?.int == 2, "\(back?.body.text ?? "no answer") after \(seen)")
        #expect(ms < 3000, "served \(ms) ms after the server came back")

        // `pg_ctl restart` while the worker serves: the next requests are served.
        try pg.ctl("restart", "-m", "fast")
        let (reread, rereadMs, rereadSeen) = Self.untilServed(service, since)
        #expect(reread?.quadError == nil && rereadMs < 3000, "\(reread?.body.text ?? "no answer") \(rereadMs) ms after \(rereadSeen.suffix(2))")
        let (restarted, restartMs, restartSeen) = Self.untilServed(client, .request("tally.add", body: ["key": "k", "n": 1]))
        print("stores: first answer \(restartMs) ms after pg_ctl restart returned; 503s meanwhile: \(restartSeen)")
        #expect(restarted?.body["total"]?.int == 3, "\(restarted?.body.text ?? "no answer") after \(restartSeen)")
        #expect(restartMs < 3000, "served \(restartMs) ms after the restart")
        // Telemetry's staging table is made again on the new session.
        let (ingested, _, ingestSeen) = Self.untilServed(service, batch())
        #expect(ingested?.body["accepted"]?.int == 20, "\(ingested?.body.text ?? "no answer") after \(ingestSeen)")
        // The same worker processes throughout: nobody restarted them.
        #expect(worker.isRunning && stack.process("telemetry/1")?.isRunning == true)
    }

    @Test func aMutationInFlightWhenTheServerRestartsAppliesOnceUnderItsRetry() throws {
        let pg = try TestCluster()
        let stack = try TestStack(name: "pg-inflight")
        defer { pg.stop(); stack.stopAll() }
        try stack.startBroker()
        let url = try pg.database("tally")
        try stack.startWorker("quad-tally", instance: "tally/1", db: url)
        try #require(try stack.waitForWorkers("tally", count: 1, timeoutMs: 30_000), "tally: \(stack.log("tally/1").suffix(800))")
        let client = try stack.client()
        #expect(try client.request("tally.add", ["key": "warm", "n": 1])["total"]?.int == 1)

        // Another session holds the table: the worker's mutation waits
        // inside its transaction, which the restart then cuts short.
        let blocker = try PostgresDatabase(url: url)
        try blocker.executeScript("BEGIN; LOCK TABLE tallies IN ACCESS EXCLUSIVE MODE")
        let request = Envelope.request("tally.add", body: ["key": "flight", "n": 7])
        // It waits: no answer, or the broker's 504 once its deadline passed.
        let early = try? client.call(request, timeoutMs: 500, attempts: 1)
        #expect(early == nil || early?.quadError?.status == 504, "\(early?.body.text ?? "")")
        let observer = try PostgresDatabase(url: url)
        var waiting: Int64 = 0
        let until = Clock.monotonicMillis() + 10_000
        while waiting == 0 && Clock.monotonicMillis() < until {
            waiting = try observer.queryOne("SELECT COUNT(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%tallies%'")?.int("n") ?? 0
            usleep(20_000)
        }
        try #require(waiting == 1, "the worker's mutation is not waiting on the lock")
        observer.close()
        try pg.ctl("restart", "-m", "fast")

        // The client retries under the same id until it is served.
        let (reply, _, seen) = Self.untilServed(client, request)
        let body = try #require(reply?.body, "no answer after the restart: \(seen); \(stack.log("tally/1").suffix(800))")
        #expect(body["total"]?.int == 7, "\(body.text)")
        // Once more: the stored reply, not a second effect.
        #expect(try client.call(request, timeoutMs: 5000, attempts: 3).body == body)
        let state = try client.request("tally.get", ["key": "flight"], timeoutMs: 5000)
        #expect(state["adds"]?.int == 1 && state["applied"] == .array([.string(request.id)]), "\(state.text)")
        let check = try PostgresDatabase(url: url)
        #expect(try check.queryOne("SELECT COUNT(*) AS n FROM idempotency WHERE id = $1", .text(request.id))?.int("n") == 1)
        #expect(try check.queryOne("SELECT COUNT(*) AS n FROM outbox WHERE envelope LIKE '%flight%'")?.int("n") == 1)
    }

    /// A server behind a partition answers no packet: the port takes the
    /// connection (here a listener that never accepts, so the kernel
    /// completes the handshake) and the startup message waits forever. The
    /// store's reconnection is driven a step at a time: each statement
    /// meanwhile fails at once with the reason, never holding the caller
    /// (a worker's loop and its heartbeats) for the connect timeout, and
    /// the session is back soon after the server is.
    @Test func aReconnectionToAServerThatAnswersNothingNeverHoldsTheCaller() throws {
        let pg = try TestCluster()
        defer { pg.stop() }
        let db = try PostgresDatabase(url: try pg.database("blackhole"), reconnectMaxMs: 200)
        #expect(try db.queryOne("SELECT 1 AS one")?.int("one") == 1)
        try pg.ctl("stop", "-m", "immediate")
        let hole = try Blackhole(port: pg.port)

        var slowest: Int64 = 0
        var messages: [String] = []
        let until = Clock.monotonicMillis() + 6000
        while Clock.monotonicMillis() < until {
            let started = Clock.monotonicMillis()
            do {
                _ = try db.queryOne("SELECT 1 AS one")
                Issue.record("a statement succeeded with no server")
            } catch let error as StoreError {
                #expect(error.kind == .connection)
                messages.append(error.message)
            }
            slowest = max(slowest, Clock.monotonicMillis() - started)
            usleep(20_000)
        }
        print("with a server that answers nothing: \(messages.count) statements refused, the slowest in \(slowest) ms")
        // A blocking connect would hold each attempt for connect_timeout (2 s).
        #expect(slowest < 500, "a statement was held \(slowest) ms")
        #expect(messages.contains { $0.contains("reconnecting for") }, "\(messages.suffix(3))")
        #expect(messages.contains { $0.contains("no answer from the server within 2 s (pg_connect_timeout_s)") }, "\(messages.suffix(3))")

        hole.close()
        try pg.ctl("start")
        let back = Clock.monotonicMillis()
        var served = false
        while !served && Clock.monotonicMillis() - back < 30_000 {
            served = (try? db.queryOne("SELECT 1 AS one")?.int("one")) == 1
            if !served { usleep(20_000) }
        }
        #expect(served, "the session never came back")
        print("served again \(Clock.monotonicMillis() - back) ms after pg_ctl start returned")
        #expect(db.sessions == 2)
    }

    @Test(.enabled(if: TestCluster.canMount, "needs to mount a tmpfs (root)"))
    func aFullSQLiteStoreAnswers503AndLosesNothingAcknowledged() throws {
        let stack = try TestStack(name: "sqlite-full")
        let mount = stack.dir + "/small"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        try TestCluster.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount])
        defer {
            stack.stopAll()
            _ = try? TestCluster.run(["umount", mount])
        }
        try stack.startBroker()
        try stack.startWorker("quad-tally", instance: "tally/1", db: mount + "/tally.db")
        try #require(try stack.waitForWorkers("tally", count: 1, timeoutMs: 30_000), "tally: \(stack.log("tally/1").suffix(800))")
        let client = try stack.client()
        var acknowledged: [String] = []
        var refused: (Envelope, QuadError)?
        let padding = String(repeating: "x", count: 60)
        for n in 0..<20_000 where refused == nil {
            let request = Envelope.request("tally.add", body: ["key": .string("\(n)-\(padding)".prefix(64).description), "n": 1])
            let reply = try client.call(request, timeoutMs: 5000, attempts: 1)
            if let error = reply.quadError { refused = (request, error) } else { acknowledged.append(request.id) }
        }
        let (request, error) = try #require(refused, "the filesystem never filled")
        print("stores: \(acknowledged.count) mutations acknowledged before the 1 MB filesystem filled: \(error.message)")
        #expect(error.status == 503 && error.message.contains("database is full"), "\(error)")
        #expect(acknowledged.count > 0)
        // Reads go on.
        #expect(try client.request("tally.get", ["key": .string(String("0-\(padding)".prefix(64)))], timeoutMs: 5000)["adds"]?.int == 1)

        // Room again: the refused mutation, retried under its id, applies once.
        try TestCluster.run(["mount", "-o", "remount,size=16m", mount])
        let (reply, _, seen) = Self.untilServed(client, request)
        #expect(reply?.quadError == nil && reply?.body["adds"]?.int == 1, "\(reply?.body.text ?? "no answer") after \(seen)")
        #expect(try client.call(request, timeoutMs: 5000, attempts: 1).body == reply?.body)

        // Every acknowledged mutation is in the file, and the retried one once.
        stack.kill("tally/1", signal: SIGTERM)
        let db = try SQLiteDatabase(path: mount + "/tally.db")
        let applied = try db.query("SELECT request FROM applied ORDER BY seq").map { $0.string("request") }
        #expect(applied == acknowledged + [request.id], "\(applied.count) applied, \(acknowledged.count) acknowledged + 1")
        db.close()
    }

    @Test func aSQLiteStoreLockedPastItsBusyTimeoutAnswers503NamingIt() throws {
        let stack = try TestStack(name: "sqlite-locked")
        try stack.startBroker()
        try stack.startWorker("quad-tally", instance: "tally/1", extra: ["--busy-timeout-ms", "300"])
        try #require(try stack.waitForWorkers("tally", count: 1, timeoutMs: 30_000), "tally: \(stack.log("tally/1").suffix(800))")
        let client = try stack.client()
        #expect(try client.request("tally.add", ["key": "k", "n": 1])["total"]?.int == 1)

        let holder = try SQLiteDatabase(path: stack.dir + "/tally.db")
        try holder.executeScript("BEGIN IMMEDIATE")
        let request = Envelope.request("tally.add", body: ["key": "k", "n": 1])
        let started = Clock.monotonicMillis()
        let locked = try client.call(request, timeoutMs: 5000, attempts: 1)
        let error = try #require(locked.quadError, "answered while locked: \(locked.body.text)")
        #expect(error.status == 503 && error.message.contains("database is locked past busy_timeout_ms 300"), "\(error)")
        #expect(Clock.monotonicMillis() - started < 4000)
        try holder.executeScript("COMMIT")

        let (reply, _, seen) = Self.untilServed(client, request)
        #expect(reply?.body["total"]?.int == 2, "\(reply?.body.text ?? "no answer") after \(seen)")
        let state = try client.request("tally.get", ["key": "k"])
        #expect(state["adds"]?.int == 2, "\(state.text)")
    }
}

/// A throwaway PostgreSQL cluster of this test's own (it is stopped and
/// restarted, so the run's shared server, QUAD_TEST_PG, would not do):
/// initdb as the postgres user, on 127.0.0.1 and a free port, its socket
/// in its own folder.
final class TestCluster {
    let dir: String
    let bin: String
    let port: Int

    static var canMount: Bool { getuid() == 0 }

    init() throws {
        guard let version = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?
            .sorted(by: { $0.compare($1, options: .numeric) == .orderedAscending }).last else {
            throw QuadError.unavailable("no PostgreSQL under /usr/lib/postgresql")
        }
        bin = "/usr/lib/postgresql/\(version)/bin"
        var template = Array("/tmp/quad-stores-pg.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw QuadError.internal("mkdtemp failed") }
        dir = String(cString: made)
        try TestCluster.run(["chown", "postgres:", dir])
        port = TestCluster.freePort()
        try TestCluster.run(["runuser", "-u", "postgres", "--", bin + "/initdb", "-D", dir + "/data", "-U", "postgres", "-A", "trust",
                             "-E", "UTF8", "--no-sync"])
        try ctl("start")
    }

    deinit { stop() }

    /// Stops the server and removes its files. Before the test's workers
    /// are stopped: a server that `pg_ctl` started while they ran holds
    /// the descriptors by which Foundation's Process sees them exit.
    func stop() {
        guard FileManager.default.fileExists(atPath: dir) else { return }
        _ = try? ctl("stop", "-m", "immediate")
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// `pg_ctl ARGS` on this cluster, waiting (-w) until it is done.
    func ctl(_ args: String...) throws {
        try TestCluster.run(["runuser", "-u", "postgres", "--", bin + "/pg_ctl", "-D", dir + "/data", "-l", dir + "/server.log", "-w", "-t", "60",
                             "-o", "-c listen_addresses=127.0.0.1 -p \(port) -k \(dir) -c fsync=off"] + args)
    }

    /// A new database; its URL.
    func database(_ name: String) throws -> String {
        let admin = try PostgresDatabase(url: "postgres://postgres@127.0.0.1:\(port)/postgres")
        try admin.executeScript("CREATE DATABASE \(name)")
        admin.close()
        return "postgres://postgres@127.0.0.1:\(port)/\(name)"
    }

    /// A port in this helper's range (port base 45000) that binds now.
    static func freePort() -> Int {
        for _ in 0..<200 {
            let port = 45_100 + Int.random(in: 0..<800)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            if bound == 0 { return port }
        }
        return 45_999
    }

    /// Runs a command; throws with its output when it fails. posix_spawn
    /// and waitpid, not Foundation's Process: Process learns of an exit
    /// through a descriptor the child inherits, which the server that
    /// `pg_ctl start` leaves running keeps open, so it never returns.
    static func run(_ argv: [String]) throws {
        let log = NSTemporaryDirectory() + "quad-stores-cmd-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log"
        defer { unlink(log) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var pid: pid_t = 0
        let args = (["/usr/bin/env"] + argv).map { strdup($0) } + [nil]
        defer { args.forEach { free($0) } }
        let rc = posix_spawn(&pid, "/usr/bin/env", &actions, nil, args, environ)
        guard rc == 0 else { throw QuadError.internal("cannot run \(argv[0]): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = status & 0x7f == 0, code = (status >> 8) & 0xff
        guard exited && code == 0 else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw QuadError.internal("\(argv.joined(separator: " ")) failed (status \(status)): \(text)")
        }
    }
}

/// A TCP port that takes connections and never reads them: the kernel
/// completes each handshake into the listen queue, and nothing answers.
final class Blackhole {
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw QuadError.internal("cannot listen on 127.0.0.1:\(port): \(why)")
        }
    }

    func close() { Glibc.close(fd) }
}
