import Foundation
import QuadStore
import QuadWire
import QuadTestSupport
import Testing

/// `--file-locking`: by default a running quad-edge holds each phone's file
/// locked (SQLite's locking_mode EXCLUSIVE), so a second quad-edge on the
/// same folder is refused at start with the file's name, and no other
/// process reads a file while its phone runs; with `shared` a harness may.
@Suite("Phone files locked by the process that runs them", .serialized)
struct FileLockingTests {
    /// Starts `quad-edge serve` on `dir` (its phones point at a frontend no
    /// one listens on) and waits until every phone's file is there and the
    /// process logged its control socket (the files are open by then).
    func startEdge(_ stack: TestStack, _ name: String, dir: String, extra: [String] = []) throws -> Process {
        let control = "ipc://\(stack.dir)/\(name)-control"
        let process = try stack.start(name, executable: "quad-edge", arguments: [
            "--frontend", "tcp://127.0.0.1:9", "--broker-key", "off", "--phones", "2", "--dir", dir, "--control", control,
        ] + extra)
        let until = Clock.monotonicMillis() + 30_000
        while !stack.log(name).contains("control on") {
            try #require(process.isRunning && Clock.monotonicMillis() < until, "quad-edge did not start:\n\(stack.log(name).suffix(2000))")
            usleep(50_000)
        }
        return process
    }

    @Test func aSecondQuadEdgeOnTheSameFolderIsRefusedNamingTheFile() throws {
        let stack = try TestStack(name: "file-lock")
        let dir = stack.dir + "/phones"
        let first = try startEdge(stack, "edge-1", dir: dir)
        let (status, _, errors) = try runBuilt("quad-edge", [
            "--frontend", "tcp://127.0.0.1:9", "--broker-key", "off", "--phones", "2", "--dir", dir, "--control", "none",
        ])
        #expect(status == 1, "a second quad-edge on the same --dir exited \(status): \(errors)")
        #expect(errors.contains("phone-001.db is in use by another process"), "the refusal names the file: \(errors)")
        #expect(first.isRunning, "the first process runs on")
        // Another process (this test) cannot read a file in use either.
        #expect(throws: StoreError.self, "a locked file was read by another connection") {
            let db = try SQLiteDatabase(path: dir + "/phone-001.db", busyTimeoutMs: 200)
            defer { db.close() }
            _ = try db.query("SELECT COUNT(*) AS n FROM outbox")
        }
        stack.kill("edge-1", signal: SIGKILL)
        first.waitUntilExit()
        // The lock went with the killed process: the file opens and reads.
        let db = try SQLiteDatabase(path: dir + "/phone-001.db")
        defer { db.close() }
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM outbox")?.int("n") == 0)
    }

    @Test func sharedLetsAnotherProcessReadWhileThePhonesRun() throws {
        let stack = try TestStack(name: "file-shared")
        let dir = stack.dir + "/phones"
        _ = try startEdge(stack, "edge", dir: dir, extra: ["--file-locking", "shared"])
        let db = try SQLiteDatabase(path: dir + "/phone-002.db")
        defer { db.close() }
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM outbox")?.int("n") == 0)
        let (status, _, errors) = try runBuilt("quad-edge", ["--file-locking", "both"])
        #expect(status == 64 && errors.contains("--file-locking must be exclusive or shared"), "exit \(status): \(errors)")
    }
    /// A harness that has a phone's file open, in WAL, when quad-edge opens
    /// it (the chaos run's history recorder did, and quad-edge stopped at
    /// that phone with "database is locked": leaving WAL needs the file to
    /// itself): with `shared`, quad-edge starts and runs that phone, whose
    /// file stays in WAL while the harness holds it.
    @Test func aFileAnotherProcessHoldsInWALDoesNotStopQuadEdge() throws {
        let stack = try TestStack(name: "file-held")
        let dir = stack.dir + "/phones"
        let first = try startEdge(stack, "edge-1", dir: dir, extra: ["--file-locking", "shared"])
        stack.kill("edge-1", signal: SIGTERM)
        first.waitUntilExit()
        // The harness: the file in WAL, read, and kept open.
        let held = try SQLiteDatabase(path: dir + "/phone-001.db")
        defer { held.close() }
        #expect(try held.queryOne("PRAGMA journal_mode")?.string("journal_mode") == "wal")
        #expect(try held.queryOne("SELECT COUNT(*) AS n FROM outbox")?.int("n") == 0)
        let second = try startEdge(stack, "edge-2", dir: dir, extra: ["--file-locking", "shared"])
        #expect(second.isRunning, "quad-edge stopped on a file another process holds:\n\(stack.log("edge-2").suffix(2000))")
        #expect(stack.log("edge-2").contains("phone-001.db stays in WAL"), "\(stack.log("edge-2").suffix(2000))")
        #expect(try held.queryOne("SELECT COUNT(*) AS n FROM outbox")?.int("n") == 0)
    }
}
