import Foundation
import QuadAuth
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

// Issue 30 point 5, the phone's half: a phone survives damage to its file,
// as an app must after a power loss or a bad flash write. Found when the
// phone opens its file:
//
// - corrupt: SQLite says SQLITE_CORRUPT or SQLITE_NOTADB while opening, or
//   `PRAGMA quick_check` finds a damaged page. The file is moved aside
//   (`<file>.damaged-<ms>`, kept for a post-mortem) and a new one begins.
// - rolled back: the file is behind its own last commit (a power loss
//   without fsync, a WAL cut back). The file counts every change of its
//   outbox in the transaction that makes it (``WriteGeneration``, triggers of
//   migration 52), and after the commit the phone copies the count to its
//   keychain, which a real phone keeps apart from app data. A file found
//   with a smaller count than its keychain lost that many writes.
//
// Either way the phone signs in again as the account its keychain names
// (``Keychain/Item/account``), with the tokens and the CURVE key the
// keychain still has, fetches its saved catalog again, and says what it
// lost: a log line, a message to the user, ``StorageFaultCounts`` in its
// keychain, shown by `edge.state` and the campus day's report.
//
// Nothing acknowledged is applied twice: an action keeps the id it was
// written with (the outbox's `id`, the service's idempotency key), so an
// action a rolled-back file still holds, though the service already
// answered it, is sent again under the same id and answered from the
// service's record.

/// The outbox's changes as the file counts them: actions queued and
/// actions finished (answered or dropped), each counted by a trigger in the
/// transaction that changes the outbox.
struct WriteGeneration: Equatable {
    var queued: Int64
    var finished: Int64

    /// Every change of the outbox the file committed.
    var total: Int64 { queued + finished }
    /// Actions queued and not finished.
    var pending: Int64 { max(0, queued - finished) }

    /// As the keychain keeps it: `"<queued> <finished>"`.
    var text: String { "\(queued) \(finished)" }

    init(queued: Int64, finished: Int64) {
        self.queued = queued
        self.finished = finished
    }

    init?(_ text: String?) {
        let parts = (text ?? "").split(separator: " ").compactMap { Int64($0) }
        guard parts.count == 2 else { return nil }
        self.init(queued: parts[0], finished: parts[1])
    }

    /// The file's count.
    static func read(_ db: SQLiteDatabase) throws -> WriteGeneration {
        WriteGeneration(queued: Int64(try db.meta("outbox_queued") ?? "0") ?? 0, finished: Int64(try db.meta("outbox_finished") ?? "0") ?? 0)
    }

    /// The actions queued up to `kept` (the keychain's count) and not
    /// finished that a file counting `self` no longer holds. Exact for an
    /// outbox sent in order (send_window 1: finished in the order queued);
    /// an estimate otherwise.
    func actionsLost(since kept: WriteGeneration) -> Int64 {
        let pendingThen = kept.pending
        // Pending then and still in this file: queued before this file's
        // last queue and not finished at the keychain's count.
        let stillHere = min(pendingThen, max(0, queued - kept.finished))
        return pendingThen - stillHere
    }
}

/// What a phone found wrong with its file when it opened it.
struct StorageFault: Equatable {
    enum Kind: String { case corrupt, rolledBack = "rolled_back" }
    var kind: Kind
    /// SQLite's words, or how far the file was behind.
    var detail: String
    /// Where the damaged file was kept.
    var keptAt: String?
    /// Outbox writes the file lost (rolled back).
    var generationsLost: Int64 = 0
    /// Actions the user made that the file no longer has and no service
    /// answered (as far as the keychain's count tells).
    var actionsLost: Int64 = 0

    var summary: String {
        switch kind {
        case .corrupt:
            "the phone's file was damaged (\(detail)); kept as \(keptAt ?? "?"), a new one begun; \(actionsLost) queued action\(actionsLost == 1 ? "" : "s") lost"
        case .rolledBack:
            "the phone's file lost its last \(generationsLost) outbox write\(generationsLost == 1 ? "" : "s") (\(detail)); \(actionsLost) queued action\(actionsLost == 1 ? "" : "s") lost"
        }
    }
}

/// What a phone's file lost, over its life: kept in its keychain (a new
/// file after a corruption, or a file rolled back, would lose the counts).
package struct StorageFaultCounts: Equatable {
    var corrupt: Int64 = 0
    var rolledBack: Int64 = 0
    var generationsLost: Int64 = 0
    var actionsLost: Int64 = 0

    package var any: Bool { corrupt + rolledBack > 0 }

    package init() {}

    init(_ text: String?) {
        let json = text.flatMap { try? JSON.parse($0) } ?? [:]
        corrupt = json["corrupt"]?.int ?? 0
        rolledBack = json["rolled_back"]?.int ?? 0
        generationsLost = json["generations_lost"]?.int ?? 0
        actionsLost = json["actions_lost"]?.int ?? 0
    }

    package var json: JSON {
        ["corrupt": .int(corrupt), "rolled_back": .int(rolledBack), "generations_lost": .int(generationsLost), "actions_lost": .int(actionsLost)]
    }

    mutating func add(_ fault: StorageFault) {
        switch fault.kind {
        case .corrupt: corrupt += 1
        case .rolledBack: rolledBack += 1
        }
        generationsLost += fault.generationsLost
        actionsLost += fault.actionsLost
    }

    package static func + (a: StorageFaultCounts, b: StorageFaultCounts) -> StorageFaultCounts {
        var c = a
        c.corrupt += b.corrupt
        c.rolledBack += b.rolledBack
        c.generationsLost += b.generationsLost
        c.actionsLost += b.actionsLost
        return c
    }
}

extension PhoneStore {
    /// Opens a phone's file as ``open(_:keychain:students:exclusive:)`` does,
    /// checked: a damaged file is moved aside and a new one opened, a
    /// rolled-back one is opened as it is; either is returned as the fault
    /// found. The keychain takes the file's write generation.
    static func openChecked(_ path: String, keychain: Keychain, students: Students, exclusive: Bool = true) throws -> (SQLiteDatabase, StorageFault?) {
        let kept = WriteGeneration(keychain[.writeGeneration])
        let db: SQLiteDatabase
        var fault: StorageFault?
        do {
            (db, fault) = try openAndCheck(path, kept: kept, keychain: keychain, students: students, exclusive: exclusive)
        } catch let error as StoreError where error.kind == .corrupt {
            let aside = try moveAside(path)
            db = try open(path, keychain: keychain, students: students, exclusive: exclusive)
            fault = StorageFault(kind: .corrupt, detail: error.message, keptAt: aside, actionsLost: kept?.pending ?? 0)
        }
        let inFile = try WriteGeneration.read(db)
        if inFile != kept { try keychain.set([.writeGeneration: inFile.text]) }
        return (db, fault)
    }

    /// The file opened, its pages checked (`corrupt` thrown when damaged)
    /// and its write generation compared with the keychain's (`kept`).
    static func openAndCheck(_ path: String, kept: WriteGeneration?, keychain: Keychain, students: Students,
                             exclusive: Bool) throws -> (SQLiteDatabase, StorageFault?) {
        let db = try open(path, keychain: keychain, students: students, exclusive: exclusive)
        do { try db.quickCheck() } catch { db.close(); throw error }
        let inFile = try WriteGeneration.read(db)
        guard let kept, inFile.total < kept.total else { return (db, nil) }
        return (db, StorageFault(kind: .rolledBack, detail: "write generation \(inFile.total) in the file, \(kept.total) in the keychain",
                                 generationsLost: kept.total - inFile.total, actionsLost: inFile.actionsLost(since: kept)))
    }

    /// Moves a damaged file, and its journals, to `<path>.<label>-<ms>`
    /// (a hot journal left beside a new file would be played into it).
    /// Returns where the file went.
    static func moveAside(_ path: String, label: String = "damaged") throws -> String {
        let aside = "\(path).\(label)-\(Int64(Clock.nowMillis()))"
        for suffix in ["", "-journal", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            guard rename(path + suffix, aside + suffix) == 0 else {
                throw StoreError(.other, "cannot move the \(label) \(path + suffix) aside to \(aside + suffix): \(String(cString: strerror(errno)))")
            }
        }
        return aside
    }
}

/// The damage a harness does to a phone's file on purpose (`edge.fault`):
/// what a power loss or a bad flash write would do.
enum FileDamage: String, CaseIterable {
    /// A copy of the file as it is now, for a later `rollback`.
    case snapshot
    /// The file put back as the snapshot had it: its later writes lost
    /// (the file it replaces is kept as `FILE.rolledback-MS`).
    case rollback
    /// Random bytes over the pages from the second to the middle of the
    /// file (the tables' roots among them). This kind and the two below
    /// keep the file as it was as `FILE.before-KIND-MS`.
    case corrupt
    /// The file cut to a third of its length, in the middle of a page.
    case truncate
    /// Random bytes over the whole file, its header too: not a database.
    case garbage

    /// Whether the phone must be stopped for it (all but the snapshot).
    var stopsThePhone: Bool { self != .snapshot }

    static func snapshotPath(_ file: String) -> String { file + ".snapshot" }

    /// Does it to `file` (closed, unless a snapshot).
    func apply(to file: String) throws(QuadError) {
        let manager = FileManager.default
        switch self {
        case .snapshot:
            let copy = FileDamage.snapshotPath(file)
            unlink(copy)
            do { try manager.copyItem(atPath: file, toPath: copy) } catch {
                throw .internal("cannot copy \(file) to \(copy): \(error)")
            }
        case .rollback:
            let copy = FileDamage.snapshotPath(file)
            guard manager.fileExists(atPath: copy) else {
                throw .badRequest("no snapshot of \(file): ask edge.fault with kind snapshot first")
            }
            // The file the snapshot replaces is kept beside it, as a damaged
            // file is (`FILE.rolledback-MS`): what the phone made and then
            // lost stays readable, for a harness (deploy/checker.py) to tell
            // what the device lost from what the system lost.
            do { _ = try PhoneStore.moveAside(file, label: "rolledback") } catch {
                throw .internal("cannot keep the file the rollback replaces: \(error)")
            }
            do { try manager.copyItem(atPath: copy, toPath: file) } catch {
                throw .internal("cannot put the snapshot \(copy) back as \(file): \(error)")
            }
        case .corrupt, .truncate, .garbage:
            // The file as it was is kept beside it (`FILE.before-KIND-MS`),
            // as a rollback keeps the file it replaces: what the phone had
            // made before the damage stays readable for a harness.
            let before = "\(file).before-\(rawValue)-\(Int64(Clock.nowMillis()))"
            do { try manager.copyItem(atPath: file, toPath: before) } catch {
                throw .internal("cannot keep a copy of \(file) before damaging it: \(error)")
            }
            guard let handle = FileHandle(forUpdatingAtPath: file) else { throw .internal("cannot open \(file) to damage it") }
            defer { try? handle.close() }
            do {
                let size = Int(try handle.seekToEnd())
                let page = 4096
                switch self {
                case .truncate:
                    try handle.truncate(atOffset: UInt64(size / 3 / page * page + page / 2))
                case .garbage:
                    try handle.seek(toOffset: 0)
                    try handle.write(contentsOf: Data(SecretBox.randomBytes(max(size, page))))
                default:
                    let pages = max(2, size / page)
                    try handle.seek(toOffset: UInt64(page))
                    try handle.write(contentsOf: Data(SecretBox.randomBytes(max(1, pages / 2) * page)))
                }
                try handle.synchronize()
            } catch {
                throw .internal("cannot damage \(file): \(error)")
            }
            // The journal too: a rolled-back transaction would otherwise mend it.
            unlink(file + "-journal")
        }
    }
}

extension Phone {
    /// A fault found at open: said in the log and to the user, counted in
    /// the keychain; the saved catalog is fetched again once the phone starts.
    func noteStorageFault(_ fault: StorageFault) {
        Log.error("edge/\(name)", "storage fault: \(fault.summary)")
        storageFaults.add(fault)
        do { try keychain.set([.storageFaults: storageFaults.json.text]) } catch {
            Log.error("edge/\(name)", "cannot count the storage fault in the keychain: \(error)")
        }
        _ = try? db.execute("""
            INSERT INTO messages (ts, action, type, code, status, reason, text) VALUES ($1, NULL, 'edge.storage', $2, 500, $3, $4)
            """, .int(now), .text(fault.kind.rawValue), .text(fault.detail), .text("This phone lost data: \(fault.summary). It signed in again and fetches your data again."))
        rebuildAfterFault = true
    }

    /// Copies the file's write generation to the keychain once it changed:
    /// called after each commit that changed the outbox (``outboxCount`` is
    /// set after each). A keychain write is a sealed file written, renamed
    /// and synced (two fsyncs): about 0.8 ms, where the commit itself took
    /// 0.1 (debug build, 500 actions queued and answered). An action the
    /// user queues is written at once (user's pace, and what a rollback must
    /// never lose unseen); answers, which a drain makes one after another,
    /// at most once per ``generationLagMs``: a rollback that loses only the
    /// answers of that last moment is not counted, and harms nothing (the
    /// actions are sent again under their ids and answered from the
    /// services' records).
    func keepWriteGeneration() {
        guard !db.closed, let inFile = try? WriteGeneration.read(db), inFile != keptGeneration else { return }
        if let kept = keptGeneration, inFile.queued == kept.queued {
            guard generationTimer == nil else { return }
            generationTimer = agenda.after(Phone.generationLagMs) { [weak self] in
                self?.generationTimer = nil
                self?.writeGeneration()
            }
            return
        }
        writeGeneration(inFile)
    }

    /// How long the keychain may lag the file's answers (``keepWriteGeneration()``).
    static let generationLagMs: Int64 = 1_000

    /// The file's write generation written to the keychain now.
    func writeGeneration(_ known: WriteGeneration? = nil) {
        agenda.cancel(generationTimer)
        generationTimer = nil
        guard !db.closed, let inFile = known ?? (try? WriteGeneration.read(db)), inFile != keptGeneration else { return }
        do {
            // Without fsync: a keychain write with them cost ~0.8 ms (two
            // fsyncs) on the edge's one loop, per action queued; a 1,000-phone
            // day's drain after reconnect went from p95 462 to 902 ms with it.
            // A crash of the machine may keep the previous generation: a
            // rollback of the last writes then goes uncounted (the actions
            // are still sent under their ids), as the answers' lag allows.
            try keychain.set([.writeGeneration: inFile.text], durable: false)
            keptGeneration = inFile
        } catch {
            Log.error("edge/\(name)", "cannot keep the write generation in the keychain: \(error)")
        }
    }

    /// The account the keychain names, for a file that has lost its session.
    func keepAccount() {
        var account: [String: JSON] = ["email": .string(email)]
        if let user { account["user"] = .string(user) }
        do { try keychain.set([.account: JSON.object(account).text]) } catch {
            Log.error("edge/\(name)", "cannot keep the account in the keychain: \(error)")
        }
    }

    /// `edge.fault`: damages the phone's file as `kind` says. A snapshot is
    /// taken at once; every other kind stops the phone as a killed app
    /// stops (nothing written on the way out), damages the file, and
    /// starts the phone again on it, which finds the fault. `done` gets
    /// the phone's state after.
    package func injectFault(_ kindName: String?, _ done: @escaping (Result<JSON, QuadError>) -> Void) throws(QuadError) {
        // The process killed in the middle of this phone's next write (its
        // next commit, whatever it writes): answered at once, armed.
        if kindName == "crash" {
            db.killAtNextCommit()
            Log.info("edge/\(name)", "storage fault armed: this process is killed (SIGKILL) inside the phone's next commit")
            done(.success(["phone": .string(name), "kind": "crash", "armed": true]))
            return
        }
        guard let kindName, let kind = FileDamage(rawValue: kindName) else {
            throw .badRequest("body.kind must be one of \((FileDamage.allCases.map(\.rawValue) + ["crash"]).joined(separator: ", "))")
        }
        guard kind.stopsThePhone else {
            try kind.apply(to: file)
            done(.success(["phone": .string(name), "kind": .string(kind.rawValue), "snapshot": .string(FileDamage.snapshotPath(file))]))
            return
        }
        // The requests in flight end now (as offline) and their handlers
        // run on the next turn, against the file as it still is; the
        // restart after them.
        link.down()
        live?.down()
        agenda.after(0) { [weak self] in
            guard let self else { return }
            do {
                try self.reopen(after: kind)
                done(.success(["phone": .string(self.name), "kind": .string(kind.rawValue), "state": self.state]))
            } catch let error as QuadError {
                done(.failure(error))
            } catch {
                done(.failure(.internal("phone \(self.name) could not open its file again: \(error)")))
            }
        }
    }

    /// Closes the file, damages it, opens it again (checked) and starts.
    func reopen(after damage: FileDamage) throws {
        // A killed app writes nothing more: an answer's generation not yet
        // in the keychain stays out of it.
        agenda.cancel(generationTimer)
        generationTimer = nil
        agenda.cancel(refreshTimer)
        refreshTimer = nil
        agenda.cancel(confirmTimer)
        confirmTimer = nil
        agenda.cancel(idleTimer)
        idleTimer = nil
        if case .backingOff(let timer) = sender { agenda.cancel(timer) }
        sender = .idle
        answers = []
        unanswered = 0
        pendingRetry = nil
        db.close()
        try damage.apply(to: file)
        let (reopened, fault) = try PhoneStore.openChecked(file, keychain: keychain, students: students, exclusive: settings.exclusiveFiles)
        db = reopened
        if let sql = settings.fileSQL { try db.executeScript(sql) }
        if settings.recordShown { try Phone.prepareShown(db) }
        images.db = reopened
        draining = false
        outboxCount = nil
        telemetryCount = nil
        telemetryInFlight = nil
        telemetryBatchSent = nil
        flowMarkKnown = nil
        productSeqs = [:]
        heldLevels = [:]
        refreshID = nil
        signingIn = false
        refreshing = false
        catalogFetching = false
        keptGeneration = try? WriteGeneration.read(reopened)
        try loadSession()
        if let fault { noteStorageFault(fault) }
        start()
    }

    /// After a fault, once online: what the phone saved is fetched again
    /// from the services (the catalog at once; each view's copy when it
    /// is opened, as every view asks the network first).
    func rebuildSavedCopies() {
        guard rebuildAfterFault, isOnline else { return }
        rebuildAfterFault = false
        prefetchCatalog(force: true)
    }
}
