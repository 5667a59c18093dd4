import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

/// One phone's SQLite file: its session, its outbox of actions, its saved
/// copies, its telemetry queue, its local history (favorites, cart, orders,
/// parking) and the messages left for its user. Everything a phone knows
/// survives the process being killed: the file is the phone.
enum PhoneStore {
    static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE session (
                one INTEGER PRIMARY KEY CHECK (one = 1),
                phone TEXT NOT NULL,
                email TEXT NOT NULL,
                password TEXT NOT NULL,
                name TEXT NOT NULL,
                register_id TEXT NOT NULL,
                registered INTEGER NOT NULL DEFAULT 0,
                user_id TEXT,
                token TEXT,
                expires_at BIGINT NOT NULL DEFAULT 0
            );
            -- The user's actions, in the order they were made. The id is the
            -- envelope id, fixed when the action is written, and the
            -- service's idempotency key for every retry.
            CREATE TABLE outbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                type TEXT NOT NULL,
                body TEXT NOT NULL,
                created_ms BIGINT NOT NULL,
                offline INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                last_error TEXT,
                undo TEXT NOT NULL DEFAULT '{}',
                after_id TEXT
            );
            -- What became of every action: the phone's own account of it.
            CREATE TABLE action_log (
                id TEXT PRIMARY KEY,
                type TEXT NOT NULL,
                created_ms BIGINT NOT NULL,
                finished_ms BIGINT,
                outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'done', 'rejected')),
                code TEXT,
                reason TEXT,
                attempts INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX action_log_time ON action_log (created_ms);
            CREATE TABLE saved (
                key TEXT PRIMARY KEY,
                body TEXT NOT NULL,
                saved_ms BIGINT NOT NULL
            );
            CREATE TABLE catalog (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                price REAL NOT NULL,
                currency TEXT NOT NULL,
                category TEXT NOT NULL,
                collection TEXT NOT NULL,
                stock INTEGER NOT NULL,
                search TEXT NOT NULL
            );
            CREATE INDEX catalog_category ON catalog (category, name);
            -- Telemetry events, stored before they are sent; `batch` is the
            -- envelope id of the telemetry.ingest that carries them, fixed
            -- when the batch is formed so a retry resends the same batch.
            CREATE TABLE telemetry (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                ts BIGINT NOT NULL,
                offline INTEGER NOT NULL,
                user_id TEXT,
                session TEXT NOT NULL,
                props TEXT NOT NULL,
                batch TEXT
            );
            CREATE INDEX telemetry_batch ON telemetry (batch, ts);
            CREATE TABLE favorites (
                product TEXT PRIMARY KEY,
                added_ms BIGINT NOT NULL,
                pending TEXT
            );
            CREATE TABLE cart (
                product TEXT PRIMARY KEY,
                quantity INTEGER NOT NULL,
                added_ms BIGINT NOT NULL
            );
            CREATE TABLE orders (
                id TEXT PRIMARY KEY,
                status TEXT NOT NULL,
                source TEXT NOT NULL,
                mode TEXT NOT NULL,
                screen TEXT NOT NULL,
                items TEXT NOT NULL,
                total REAL NOT NULL,
                currency TEXT NOT NULL,
                estimated INTEGER NOT NULL,
                created_ms BIGINT NOT NULL,
                pending TEXT,
                reason TEXT
            );
            CREATE TABLE parking (
                id TEXT PRIMARY KEY,
                status TEXT NOT NULL,
                lot TEXT,
                destination TEXT,
                spot TEXT,
                level TEXT,
                signal TEXT,
                held_ms BIGINT NOT NULL,
                deadline_ms BIGINT,
                checked_in_ms BIGINT,
                ended_ms BIGINT,
                pending TEXT,
                reason TEXT
            );
            CREATE TABLE messages (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                ts BIGINT NOT NULL,
                action TEXT,
                type TEXT NOT NULL,
                code TEXT NOT NULL,
                status INTEGER NOT NULL,
                reason TEXT NOT NULL,
                text TEXT NOT NULL
            );
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """),
        // Issue 16: the image caches' index (the files are in the phone's
        // `.images` folder; ImageCache.swift) and the returns of rentals the
        // phone made (what the rentals view shows before the service answers).
        Migration(2, """
            CREATE TABLE image_cache (
                tier TEXT NOT NULL,
                url TEXT NOT NULL,
                file TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                etag TEXT,
                bytes BIGINT NOT NULL,
                stored_ms BIGINT NOT NULL,
                used_ms BIGINT NOT NULL,
                PRIMARY KEY (tier, url)
            );
            CREATE INDEX image_cache_used ON image_cache (tier, used_ms);
            -- action: the orders.return that made the return (orders keeps
            -- no record by envelope id for it: a return is idempotent by
            -- order; the chaos checker finds the rental here).
            CREATE TABLE returns (
                rental TEXT PRIMARY KEY,
                action TEXT,
                status TEXT NOT NULL,
                pending TEXT,
                reason TEXT,
                returned_ms BIGINT,
                late_days INTEGER,
                late_charge REAL
            );
            -- The saved catalog keeps each product's picture: offline, a
            -- product from it shows its picture from the cache or the
            -- placeholder with the reason.
            ALTER TABLE catalog ADD COLUMN image_url TEXT NOT NULL DEFAULT '';
            """),
        // Issue 17 point 4: SpendiQ's window (SpendingWindow.swift).
        SpendingWindow.migration,
        // Issue 17 point 3: what the action log keeps of a cart change.
        // offline: the action was made without network (the report's
        // offline cart edits and their outcomes, over a resumed day too).
        // cart: the cart the service answered to a cart action (product →
        // quantity): what the phone was told, which the chaos checker's cart
        // ledger compares with the answer the orders store keeps for the id.
        Migration(33, """
            ALTER TABLE action_log ADD COLUMN offline INTEGER;
            ALTER TABLE action_log ADD COLUMN cart TEXT;
            """),
        // Issue 17 point 4: what the student's listings earned (SpendingWindow.swift).
        SpendingWindow.receivedMigration,
        // Issue 17 point 2: the phone's news (Messages.swift).
        Phone.inboxMigration,
        // Issue 17 point 5: the session token lives in the keychain and the
        // password with the student (``moveSecrets(_:path:keychain:students:)``
        // ran first, and the file is vacuumed after).
        Migration(50, """
            ALTER TABLE session DROP COLUMN token;
            ALTER TABLE session DROP COLUMN password;
            """),
        // The saved catalog keeps the rest of each product as the service
        // listed it (a student's listing: its seller's name, condition,
        // mode, pictures, rent rate; every product: type, specifications,
        // rent rate, when listed): a search on the saved catalog shows what
        // a search on the network shows.
        Migration(51, """
            ALTER TABLE catalog ADD COLUMN rest TEXT NOT NULL DEFAULT '{}';
            """),
        // Issue 30 point 5: the outbox's write generation (StorageFaults.swift),
        // counted by the file itself in the transaction that changes the
        // outbox: an action queued, an action answered (done or refused).
        Migration(52, """
            INSERT OR IGNORE INTO meta (key, value) VALUES ('outbox_queued', '0'), ('outbox_finished', '0');
            CREATE TRIGGER outbox_queued AFTER INSERT ON outbox BEGIN
                UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'outbox_queued';
            END;
            CREATE TRIGGER outbox_finished AFTER DELETE ON outbox BEGIN
                UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'outbox_finished';
            END;
            """),
        // Issue 30 point 1: each saved product's version (the catalog's
        // `version`, the seq of its last event), so that no copy goes back
        // to an older one (Versions.swift).
        Migration(53, """
            ALTER TABLE catalog ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
            """),
        // Issue 30 point 1: each saved order's version (the orders service's
        // `version`, the seq of its last event) and the order as the service
        // last gave it, so that no copy goes back to an older one (OrderVersions.swift).
        Migration(54, """
            ALTER TABLE orders ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE orders ADD COLUMN body TEXT;
            """),
        // Issue 30 point 1: the version of each favorite (removed ones too,
        // FavoriteVersions.swift) and of each parking reservation
        // (HoldVersions.swift), the seq of the service's last event about it,
        // so that no copy goes back to an older one.
        Migration(55, """
            CREATE TABLE favorite_versions (
                product TEXT PRIMARY KEY,
                version INTEGER NOT NULL
            );
            ALTER TABLE parking ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
            """),
        // Issue 30 point 1: each notification's version in the inbox (its
        // seq when made, higher once marked read), so that no copy goes
        // back to an older one (Messages.swift, ``Phone/keep(_:)``).
        Migration(56, """
            ALTER TABLE inbox ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
            UPDATE inbox SET version = seq;
            """),
        // Issue 30 point 1: the version of the cart the phone last took
        // from the service (its own counter's, CartVersions.swift), so that
        // the phone's cart never goes back to an older one.
        Migration(57, """
            INSERT OR IGNORE INTO meta (key, value) VALUES ('cart_version', '0');
            """),
    ]
    static let keychainVersion = 50

    /// Opens (creating) a phone's file, small: a phone keeps little in memory.
    /// An idle phone cost 271 KiB of private memory (deploy/bench, 1,000
    /// phones in one quad-edge), 159 KiB of it SQLite's: each connection's
    /// page cache allocated 20 pages (~87 KiB) at its first read, before
    /// any cache_size applies (the pragma reads the schema first), and then
    /// kept every page read up to 512 KiB. Then the process asked SQLite for
    /// no pages up front (`pageCacheUpFront`), the cache held at most 16 KiB
    /// and 4 statements stayed prepared: 121 KiB per idle phone, of which
    /// the WAL index 32 KiB (the `-shm` mapping of each file, private to the
    /// process) and the 4 cached pages ~13. Now an idle phone's file is in
    /// a rollback journal (`idleJournal`: no WAL index, no `-shm` mapping)
    /// and its cache keeps no page (`idleCacheKiB`; a page is read again
    /// from the OS's cache when needed); a draining phone goes back to WAL
    /// and a large cache (``Phone/drainMode(_:)``), where its commits are
    /// one after another. Measured (deploy/bench --only memory, 1,000 idle
    /// phones against 1, back to back on a busy machine): 123 KiB per phone
    /// before, 88 after.
    ///
    /// `exclusive`: the file stays locked by this connection from its open
    /// until it closes (locking_mode EXCLUSIVE). In SQLite's normal locking
    /// each transaction of a rollback journal takes and drops its locks
    /// (fcntl), looks for a hot journal, opens and closes the journal file
    /// (a write) and reads the file's change counter to know whether its
    /// cache still holds: with 1,000 phones that was most of the edge's
    /// system calls (strace: fstat, pwrite, fcntl, pread, and an open,
    /// fchown and close for every commit). Held, none of it is needed. A
    /// killed process's locks go with it; another process opening a file
    /// in use waits out the busy timeout and is refused, so two quad-edge
    /// on one folder cannot both run its phones (`--file-locking shared`
    /// for a harness that reads or writes the files meanwhile).
    static func open(_ path: String, keychain: Keychain, students: Students, exclusive: Bool = true) throws -> SQLiteDatabase {
        _ = pageCacheUpFront
        let db: SQLiteDatabase
        // Never switched to WAL on the way: leaving WAL needs the file to
        // itself, and a harness (the chaos run's history recorder,
        // --file-locking shared) may have it open at that moment ("database
        // is locked": a chaos run's quad-edge stopped at its fifth phone in
        // one CI run). A new file starts in a rollback journal; one left in
        // WAL (by an older quad-edge, or a harness) leaves it below when it
        // can, and otherwise stays in WAL.
        do {
            db = try SQLiteDatabase(path: path, journalMode: nil, synchronous: idleSynchronous)
        } catch let error as StoreError where error.kind == .busy { throw inUse(path, error) }
        let moved: Bool
        let ran: Int
        do {
            try db.executeScript("PRAGMA cache_size=-\(idleCacheKiB); PRAGMA temp_store=MEMORY;")
            moved = try moveSecrets(db, keychain: keychain, students: students)
            ran = try Migrations.apply(db, migrations, scope: "phone")
        } catch let error as StoreError where error.kind == .busy {
            // Another process holds the file (its quad-edge's exclusive lock).
            db.close()
            throw inUse(path, error)
        }
        if moved { try scrub(db, path: path) }
        if ran > 0 {
            // Opened again: a new or upgraded file keeps none of what its
            // migrations left in the connection's memory (ALTER TABLE ...
            // DROP COLUMN's temporary database, pages, parsed statements:
            // ~10 KiB a phone that a phone opening its file again never had).
            db.close()
            return try open(path, keychain: keychain, students: students, exclusive: exclusive)
        }
        // Setting the capacity finalizes what the migrations prepared: an
        // idle phone keeps none of them.
        db.statementCacheCapacity = phoneStatementCacheCapacity
        do {
            try db.executeScript("PRAGMA journal_mode=\(idleJournal)")
        } catch let error as StoreError where error.kind == .busy {
            Log.info("edge", "\(path) stays in WAL: another process has it open (\(error.message))")
        }
        if exclusive {
            // Taken now, not at the first write: a file another process
            // has open is refused at start, naming it.
            do { try db.executeScript("PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; COMMIT") } catch {
                db.close()
                if let error = error as? StoreError, error.kind == .corrupt { throw error }
                throw inUse(path, error)
            }
        }
        return db
    }

    static func inUse(_ path: String, _ error: Error) -> StoreError {
        StoreError(.busy, "\(path) is in use by another process (another quad-edge on this --dir? a harness that reads the files while the phones run needs --file-locking shared): \(error)")
    }

    /// A phone's file from before the keychain: its session token goes into
    /// the keychain and its password to its student, before migration 50
    /// drops their columns. True when it had them.
    static func moveSecrets(_ db: SQLiteDatabase, keychain: Keychain, students: Students) throws -> Bool {
        let columns = try db.query("SELECT name FROM pragma_table_info('session')").map { $0.string("name") }
        guard columns.contains("password") || columns.contains("token") else { return false }
        if let s = try db.queryOne("SELECT * FROM session WHERE one = 1") {
            if columns.contains("password"), let password = s.optionalString("password"), !password.isEmpty {
                try students.remember(s.string("email"), password)
            }
            if columns.contains("token"), let token = s.optionalString("token"), !token.isEmpty {
                try keychain.set([.sessionToken: token])
            }
        }
        return true
    }

    /// Leaves none of the dropped columns' bytes anywhere: the WAL is
    /// checkpointed into the file and removed, the file rebuilt (VACUUM:
    /// no free page keeps an old row), and the rollback journal (which a
    /// PERSIST journal keeps between commits, old pages in it) removed.
    static func scrub(_ db: SQLiteDatabase, path: String) throws {
        try db.executeScript("PRAGMA journal_mode=DELETE; PRAGMA secure_delete=ON; VACUUM;")
        for suffix in ["-wal", "-shm", "-journal"] { unlink(path + suffix) }
    }

    /// Prepared statements a phone's connection keeps (LRU): every
    /// statement of its actions, views and send-and-confirm cycle. A phone
    /// keeps only those it ran in the last 10 s or so
    /// (Phone.forgetUnusedStatements), so an idle phone pays next to nothing
    /// for them; one in use parses none twice.
    /// (With 4 kept while not draining, and the cache emptied at each
    /// switch of the drain's sizes, SQLite's parser was a sixth of a
    /// 1,000-phone day's loop.)
    static let phoneStatementCacheCapacity = 32
    /// The page cache of an idle phone, and of one draining its outbox, KiB.
    /// 4 KiB is less than one page with its header: SQLite keeps none
    /// unpinned (16 KiB kept 4 pages, ~13 KiB per phone).
    static let idleCacheKiB = 4
    static let drainCacheKiB = 256
    /// The journal of an idle phone's file, and of one draining its outbox.
    /// WAL keeps a 32 KiB index mapped per file (its `-shm`), private memory
    /// of the one process that has the file open, for as long as it is
    /// open; a rollback journal keeps nothing between commits. An idle
    /// phone's commits (a telemetry event, a meta value) skip fsync
    /// (`idleSynchronous`): with an fsync or two each, the edge's one loop
    /// waits on the disk for every phone's event (with TRUNCATE, NORMAL and
    /// a switch after every action, a 200-phone campus day's drain after
    /// reconnect was p95 7.6 s). Without fsync the file still survives the process being
    /// killed at any point (the journal reaches the OS before the file's
    /// pages do); what a power loss may do to it is not what an emulated
    /// phone is for. PERSIST keeps the journal file between commits (its
    /// header zeroed): no file made or removed per commit. Draining, the
    /// file stays in that journal, without fsync: in WAL (as it was), each
    /// drain made the `-wal` and `-shm` files and going idle removed them,
    /// and with 1,000 phones draining in turn, making files (ext4's inode
    /// search) was a tenth of the edge's loop (perf, a 1,000-phone day).
    static let idleJournal = "PERSIST"
    static let idleSynchronous = "OFF"
    static let drainJournal = "PERSIST"
    static let drainSynchronous = "OFF"

    /// Pages a connection's cache allocates at its first read, set once for
    /// the process before its first connection (SQLITE_CONFIG_PAGECACHE's N;
    /// SQLite refuses it once a connection is open, and the default stays).
    static let pageCacheUpFront: Bool = SQLiteDatabase.allocateNoPagesUpFront()
}
