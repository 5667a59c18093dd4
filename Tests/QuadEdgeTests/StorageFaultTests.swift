import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// Issue 30 point 5 on the phone: a phone's file damaged (pages overwritten,
/// cut short, not a database) or rolled back (its last writes lost) is
/// found when the phone opens it. Real SQLite files in a temporary folder.
@Suite("a phone's file damaged or rolled back")
final class StorageFaultFileTests {
    let dir: String
    let keychain: Keychain
    let students: Students

    init() throws {
        dir = NSTemporaryDirectory() + "quad-storage-\(MessageID.make())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        keychain = try Keychain(path: dir + "/phone.keychain")
        students = try Students(path: dir + ".students")
    }

    deinit {
        try? FileManager.default.removeItem(atPath: dir)
        try? FileManager.default.removeItem(atPath: dir + ".students")
        try? FileManager.default.removeItem(atPath: dir + ".students-key")
    }

    var file: String { dir + "/phone.db" }

    /// A phone's file with a saved catalog of some pages and `queued`
    /// actions queued, `finished` of them answered; the keychain as the
    /// phone leaves it.
    func makeFile(queued: Int, finished: Int) throws {
        let (db, fault) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
        #expect(fault == nil, "a new file is no fault")
        try db.transaction {
            for k in 0..<400 {
                try db.execute("INSERT INTO catalog (id, name, price, currency, category, collection, stock, search) VALUES ($1, $2, 1, 'USD', 'c', 'x', 1, $2)",
                               .text("p-\(k)"), .text(String(repeating: "product \(k) ", count: 8)))
            }
        }
        for k in 0..<queued {
            try db.execute("INSERT INTO outbox (id, type, body, created_ms, offline) VALUES ($1, 'favorites.add', '{}', 0, 0)", .text("a-\(k)"))
        }
        for k in 0..<finished { try db.execute("DELETE FROM outbox WHERE id = $1", .text("a-\(k)")) }
        try keychain.set([.writeGeneration: try WriteGeneration.read(db).text])
        db.close()
    }

    @Test(arguments: [FileDamage.corrupt, .truncate, .garbage])
    func aDamagedFileIsMovedAsideAndANewOneBegins(_ damage: FileDamage) throws {
        try makeFile(queued: 5, finished: 2)
        try damage.apply(to: file)
        let (db, fault) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
        defer { db.close() }
        let found = try #require(fault, "\(damage): the damage is found at open")
        #expect(found.kind == .corrupt)
        #expect(found.actionsLost == 3, "the three actions queued and not answered are lost")
        let aside = try #require(found.keptAt)
        #expect(FileManager.default.fileExists(atPath: aside), "the damaged file is kept for a post-mortem")
        #expect(try db.count("SELECT COUNT(*) AS n FROM catalog") == 0, "a new file")
        #expect(WriteGeneration(keychain[.writeGeneration]) == WriteGeneration(queued: 0, finished: 0), "the keychain follows the new file")
    }

    /// A page the phone does not read when it opens its file (the saved
    /// catalog's last leaf): SQLite's quick_check finds it, nothing else would.
    @Test func aDamagedPageTheOpenNeverReadsIsFoundByTheCheck() throws {
        try makeFile(queued: 1, finished: 0)
        // The catalog's last leaf page (SQLite's dbstat table), overwritten whole.
        let reader = try SQLiteDatabase(path: file, journalMode: nil)
        let leaf = try #require(try reader.queryOne("SELECT MAX(pageno) AS n FROM dbstat WHERE name = 'catalog' AND pagetype = 'leaf'")?.int("n"))
        reader.close()
        let handle = try #require(FileHandle(forUpdatingAtPath: file))
        try handle.seek(toOffset: UInt64(leaf - 1) * 4096)
        try handle.write(contentsOf: Data((0..<4096).map { _ in UInt8.random(in: 0...255) }))
        try handle.close()
        let (db, fault) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
        db.close()
        #expect(fault?.kind == .corrupt, "the damaged page is found at open")
    }

    @Test func aFileBehindItsKeychainIsFoundRolledBackWithWhatItLost() throws {
        try makeFile(queued: 2, finished: 0)
        try FileDamage.snapshot.apply(to: file)
        // After the snapshot: both actions answered, three more queued.
        do {
            let (db, _) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
            try db.execute("DELETE FROM outbox")
            for k in 10..<13 {
                try db.execute("INSERT INTO outbox (id, type, body, created_ms, offline) VALUES ($1, 'favorites.add', '{}', 0, 0)", .text("a-\(k)"))
            }
            try keychain.set([.writeGeneration: try WriteGeneration.read(db).text])
            db.close()
        }
        try FileDamage.rollback.apply(to: file)
        let (db, fault) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
        defer { db.close() }
        let found = try #require(fault, "the rollback is found at open")
        #expect(found.kind == .rolledBack)
        #expect(found.generationsLost == 5, "two answers and three actions queued were lost")
        #expect(found.actionsLost == 3, "the three queued after the snapshot; the two answered come back and are sent again under their ids")
        #expect(try db.query("SELECT id FROM outbox ORDER BY seq").map { $0.string("id") } == ["a-0", "a-1"])
        // The file the rollback replaced is kept beside it, with what was lost.
        let dir = (file as NSString).deletingLastPathComponent, base = (file as NSString).lastPathComponent
        let kept = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix(base + ".rolledback-") && !$0.contains("-journal") }
        #expect(kept.count == 1, "the replaced file kept as FILE.rolledback-MS: \(kept)")
        if let name = kept.first {
            let replaced = try SQLiteDatabase(path: dir + "/" + name)
            defer { replaced.close() }
            #expect(try replaced.query("SELECT id FROM outbox ORDER BY seq").map { $0.string("id") } == ["a-10", "a-11", "a-12"])
        }
        // Opened again: the keychain took the file's generation, no second fault.
        db.close()
        let (again, second) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
        again.close()
        #expect(second == nil)
    }

    @Test func aFileAsItWasIsNoFault() throws {
        try makeFile(queued: 3, finished: 1)
        let (db, fault) = try PhoneStore.openChecked(file, keychain: keychain, students: students)
        db.close()
        #expect(fault == nil)
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: dir)).contains { $0.contains("damaged") })
    }
}

/// The same through a running phone and the real services: `edge.fault`
/// damages the file of a phone that runs, which starts again on it.
@Suite("a phone's damaged file on a running stack", .serialized)
struct StorageFaultStackTests {
    /// Polls `state` until `ok` holds of it (60 s at most).
    func stateUntil(_ edge: EdgeStack, _ what: String, _ ok: (JSON) -> Bool) throws -> JSON {
        let until = Clock.monotonicMillis() + 60_000
        var last: JSON = [:]
        while Clock.monotonicMillis() < until {
            last = try edge.state()
            if ok(last) { return last }
            usleep(200_000)
        }
        Issue.record("the phone never showed \(what): \(last)\n\(edge.stack.log("edge").suffix(3000))")
        return last
    }

    func savedCatalog(_ edge: EdgeStack) throws -> JSON {
        _ = try edge.view("search", ["q": "a"])
        return try stateUntil(edge, "a saved catalog") { $0["catalog_saved_age_ms"]?.int != nil }
    }

    @Test func aCorruptedFileComesBackSignedInToTheSameAccountWithItsCatalogAndTheLossCounted() throws {
        // A harness's triggers (--file-sql) are in the new file too, from its first moment.
        let sql = NSTemporaryDirectory() + "quad-file-sql-\(getpid()).sql"
        try """
            CREATE TABLE IF NOT EXISTS harness_seen (id TEXT PRIMARY KEY);
            CREATE TRIGGER IF NOT EXISTS harness_saw AFTER INSERT ON outbox BEGIN INSERT OR IGNORE INTO harness_seen VALUES (NEW.id); END;
            """.write(toFile: sql, atomically: true, encoding: .utf8)
        defer { unlink(sql) }
        let edge = try EdgeStack("storage-corrupt", edgeArguments: ["--file-sql", sql, "--file-locking", "shared"])
        let user = try edge.signIn()
        _ = try savedCatalog(edge)
        // One action queued offline: the damage takes it.
        try edge.airplane(true)
        try edge.act("favorites.add", ["product": "p-0007"])
        let reply = try edge.edge("edge.fault", ["phone": "phone-001", "kind": "corrupt"], timeoutMs: 15_000)
        #expect(reply["kind"]?.string == "corrupt")
        let aside = try FileManager.default.contentsOfDirectory(atPath: edge.phonesDir).filter { $0.hasPrefix("phone-001.db.damaged-") }
        #expect(!aside.isEmpty, "the damaged file is kept beside the new one")
        let before = try FileManager.default.contentsOfDirectory(atPath: edge.phonesDir).filter { $0.hasPrefix("phone-001.db.before-corrupt-") }
        #expect(before.count == 1, "the file as it was before the damage is kept too: \(before)")
        if let name = before.first {
            let intact = try SQLiteDatabase(path: edge.phonesDir + "/" + name)
            defer { intact.close() }
            #expect(try intact.query("SELECT type FROM outbox").map { $0.string("type") } == ["favorites.add"], "what the damage took")
        }
        let faults = try edge.state()["storage_faults"]
        #expect(faults?["corrupt"]?.int == 1 && faults?["actions_lost"]?.int == 1, "the fault and the action it took are counted: \(String(describing: faults))")
        #expect(try edge.state()["catalog_saved_age_ms"] == .null, "a new file has no saved catalog")

        try edge.airplane(false)
        let after = try stateUntil(edge, "its catalog saved again") { $0["catalog_saved_age_ms"]?.int != nil }
        #expect(after["user"]?.string == user, "the same account")
        // Signed in again: an action reaches the service as the same user.
        try edge.act("favorites.add", ["product": "p-0009"])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try edge.log().last?["outcome"]?.string == "done")
        #expect(try edge.favoriteChanges(user: user).contains("add p-0009"), "favorites applied it for \(user)")
        let actionID = try #require(try edge.log().last?["id"]?.string)
        let again = try SQLiteDatabase(path: edge.phonesDir + "/phone-001.db")
        defer { again.close() }
        #expect(try again.query("SELECT id FROM harness_seen").map { $0.string("id") } == [actionID], "--file-sql's trigger ran in the new file")
        #expect(try edge.messages().contains { $0["type"]?.string == "edge.storage" }, "the user is told what the phone lost")
        let lost = try #require(try edge.edge("edge.report")["device_lost"], "the report says what a device lost")
        #expect(lost["corrupt"]?.int == 1 && lost["phones"]?.int == 1 && lost["actions_lost"]?.int == 1, "\(lost)")
    }

    @Test func aFileRolledBackPastAnAcknowledgedActionIsFoundAndTheActionIsAppliedOnce() throws {
        let edge = try EdgeStack("storage-rollback")
        let user = try edge.signIn()
        // The action in the outbox when the file is copied, answered after.
        try edge.airplane(true)
        let id = try edge.act("orders.cart.add", ["product": "p-0020", "quantity": 1])
        try edge.edge("edge.fault", ["phone": "phone-001", "kind": "snapshot"])
        let keychain = edge.phonesDir + "/phone-001.keychain"
        let queued = try #require(WriteGeneration(try Keychain(path: keychain)[.writeGeneration]), "the queued action's generation is in the keychain")
        try edge.airplane(false)
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try edge.cartQuantity(user: user, product: "p-0020") == 1)
        // The answer's generation reaches the keychain within Phone.generationLagMs.
        let until = Clock.monotonicMillis() + 30_000
        while (WriteGeneration(try Keychain(path: keychain)[.writeGeneration])?.finished ?? 0) <= queued.finished {
            try #require(Clock.monotonicMillis() < until, "the answer's write generation never reached the keychain")
            usleep(100_000)
        }
        #expect(try edge.state()["storage_faults"] == nil, "no fault yet")

        // Back to the copy: the answered action is queued again.
        try edge.edge("edge.fault", ["phone": "phone-001", "kind": "rollback"], timeoutMs: 15_000)
        let faults = try #require(try edge.state()["storage_faults"], "the rollback is found")
        #expect(faults["rolled_back"]?.int == 1 && faults["generations_lost"]?.int == 1 && faults["actions_lost"]?.int == 0, "\(faults)")
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try edge.log().first { $0["id"]?.string == id }?["outcome"]?.string == "done", "sent again under its id and answered")
        #expect(try edge.answered("orders", [id]) == [id])
        #expect(try edge.cartQuantity(user: user, product: "p-0020") == 1, "the service applied it once")
        #expect(try edge.state()["user"]?.string == user)
        let lost = try #require(try edge.edge("edge.report")["device_lost"])
        #expect(lost["rolled_back"]?.int == 1, "\(lost)")
    }

    /// The chaos run's crash: the quad-edge process killed inside a phone's
    /// commit. Started again on the same files, the phone opens its file
    /// whole (SQLite's journal takes back the half-done write), signed in,
    /// with everything committed before.
    @Test func aProcessKilledInsideAPhonesCommitLeavesTheFileWholeWithWhatWasCommitted() throws {
        let edge = try EdgeStack("storage-crash", edgeArguments: ["--file-locking", "shared"])
        let user = try edge.signIn()
        let first = try edge.act("favorites.add", ["product": "p-0003"])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let armed = try edge.edge("edge.fault", ["phone": "phone-001", "kind": "crash"])
        #expect(armed["armed"]?.bool == true)
        // The phone's next write (this action's, or a telemetry batch's) is the one killed.
        _ = try? edge.act("favorites.add", ["product": "p-0004"])
        let process = try #require(edge.stack.process("edge"))
        let until = Clock.monotonicMillis() + 30_000
        while process.isRunning {
            try #require(Clock.monotonicMillis() < until, "quad-edge was not killed at the phone's next commit")
            usleep(50_000)
        }
        #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL, "killed by SIGKILL")

        try edge.startEdge(["--file-locking", "shared"])
        #expect(try edge.state()["user"]?.string == user, "the session survived the crash")
        #expect(try edge.log().first { $0["id"]?.string == first }?["outcome"]?.string == "done", "what was committed before stays")
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        let file = try SQLiteDatabase(path: edge.phonesDir + "/phone-001.db")
        defer { file.close() }
        #expect(try file.query("PRAGMA integrity_check").first?.string("integrity_check") == "ok")
    }
}
