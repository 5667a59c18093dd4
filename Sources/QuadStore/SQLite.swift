import CSQLite
import Foundation

/// A SQLite connection in WAL mode with a busy timeout, prepared statements
/// cached by SQL text, and typed binding.
public final class SQLiteDatabase: Database {
    public let dialect = Dialect.sqlite
    let db: OpaquePointer
    /// Prepared statements kept for reuse (``statementCacheCapacity``).
    var statements = StatementCache<OpaquePointer>(capacity: SQLiteDatabase.defaultStatementCacheCapacity)
    var depth = 0
    public var eventSource: String?
    public let path: String

    /// How long a statement waits for another connection's lock
    /// (`busy_timeout_ms`), named in the error when it waited that long.
    public let busyTimeoutMs: Int32
    public static let defaultBusyTimeoutMs: Int32 = 5000

    /// `journalMode` and `synchronous`: WAL and NORMAL for a service's
    /// store; nil leaves the file's journal as it is (a phone's file, which
    /// another process may have open: leaving WAL then fails with
    /// "database is locked", and its owner chooses what to do).
    public init(path: String, busyTimeoutMs: Int32 = SQLiteDatabase.defaultBusyTimeoutMs,
                journalMode: String? = "WAL", synchronous: String = "NORMAL") throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            if let handle { sqlite3_close(handle) }
            throw StoreError(SQLiteDatabase.isCorrupt(rc) ? .corrupt : .connection, "sqlite open \(path): \(message)")
        }
        self.db = handle
        self.path = path
        self.busyTimeoutMs = busyTimeoutMs
        sqlite3_busy_timeout(db, busyTimeoutMs)
        // Switching a new file to WAL while another process does the same
        // can return BUSY without calling the busy handler: retry a while.
        try SQLiteDatabase.retryingBusy(forMs: Int(busyTimeoutMs)) {
            try executeScript((journalMode.map { "PRAGMA journal_mode=\($0); " } ?? "") + "PRAGMA synchronous=\(synchronous); PRAGMA foreign_keys=ON;")
        }
    }

    deinit { close() }

    /// Asks SQLite to allocate no page-cache pages up front for the
    /// connections of this process (SQLITE_CONFIG_PAGECACHE's N = 0; a
    /// connection otherwise allocates 20 pages, ~87 KiB, at its first read,
    /// before any cache_size applies). Only before the process's first
    /// connection: SQLite refuses it once one is open, and the default
    /// stays. Returns whether SQLite took it.
    public static func allocateNoPagesUpFront() -> Bool {
        quad_sqlite_config_initial_cache_pages(0) == SQLITE_OK
    }

    /// Statements a connection keeps prepared: enough for every statement a
    /// service runs, few enough that ad-hoc texts cannot grow it for ever.
    public static let defaultStatementCacheCapacity = 64

    /// How many prepared statements this connection keeps; 0 prepares each
    /// statement anew and finalizes it after use (for comparison).
    public var statementCacheCapacity: Int {
        get { statements.capacity }
        set {
            statements.capacity = newValue
            for s in statements.removeAll() { sqlite3_finalize(s) }
        }
    }

    /// Statements prepared and kept now.
    public var preparedStatements: Int { statements.count }

    /// How many statements this connection has parsed (not found in the cache).
    public private(set) var statementsParsed = 0

    /// Finalizes every cached statement, keeping the capacity.
    public func dropCachedStatements() {
        for s in statements.removeAll() { sqlite3_finalize(s) }
    }

    /// The statement cache's clock: ``dropStatements(unusedSince:)`` later
    /// finalizes what was not used after it.
    public var statementMark: UInt64 { statements.mark }

    /// Finalizes the cached statements not used since `mark`.
    public func dropStatements(unusedSince mark: UInt64) {
        for s in statements.removeUnused(since: mark) { sqlite3_finalize(s) }
    }

    /// Runs `body` again while it fails with SQLITE_BUSY, up to `forMs`.
    public static func retryingBusy<T>(forMs: Int, _ body: () throws -> T) throws -> T {
        let start = DispatchTime.now().uptimeNanoseconds
        while true {
            do { return try body() } catch let e as StoreError where e.kind == .busy {
                if Int((DispatchTime.now().uptimeNanoseconds - start) / 1_000_000) > forMs { throw e }
                usleep(UInt32.random(in: 5_000...25_000))
            }
        }
    }

    /// The page cache's pages no statement holds go back to the heap
    /// (`sqlite3_db_release_memory`): up to 2 MB of an idle service's
    /// private memory, read again from the file (the system's cache) when
    /// next needed.
    public func releaseMemory() {
        if !closed { sqlite3_db_release_memory(db) }
    }

    /// The bytes the connection's page cache holds now (`SQLITE_DBSTATUS_CACHE_USED`).
    public var cacheBytes: Int {
        var now: Int32 = 0, highest: Int32 = 0
        guard !closed, sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_USED, &now, &highest, 0) == SQLITE_OK else { return 0 }
        return Int(now)
    }

    /// Whether ``close()`` ran: every statement after it is an error.
    public private(set) var closed = false
    public func close() {
        if closed { return }
        closed = true
        for s in statements.removeAll() { sqlite3_finalize(s) }
        sqlite3_close_v2(db)
    }

    /// A statement on a closed connection is an error, not a use of freed
    /// memory (an owner's late callback after it closed its file).
    func checkOpen() throws {
        if closed { throw StoreError(.other, "sqlite: \(path) is closed") }
    }

    func error(_ what: String, _ rc: Int32) -> StoreError { error(what, rc, message: String(cString: sqlite3_errmsg(db))) }

    /// The error for a result code, in words a caller can act on: a lock
    /// held past the busy timeout and a full disk are said as such (503s:
    /// the transaction rolled back, nothing acknowledged is lost, a retry
    /// may succeed), with SQLite's own message after.
    func error(_ what: String, _ rc: Int32, message: String) -> StoreError {
        switch rc & 0xFF {
        case SQLITE_CONSTRAINT: return StoreError(.constraint, "\(what): \(message)")
        case SQLITE_BUSY, SQLITE_LOCKED:
            return StoreError(.busy, "\(what): database is locked past busy_timeout_ms \(busyTimeoutMs) (sqlite: \(message))")
        case SQLITE_FULL: return StoreError(.full, "\(what): database is full (sqlite: \(message))")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return StoreError(.corrupt, "\(what): the file \(path) is damaged or not a database (sqlite: \(message))")
        default: return StoreError(.other, "\(what): \(message)")
        }
    }

    static func isCorrupt(_ rc: Int32) -> Bool { rc & 0xFF == SQLITE_CORRUPT || rc & 0xFF == SQLITE_NOTADB }

    /// SQLite's `PRAGMA quick_check`: every page and record readable, the
    /// b-trees well formed (not the indexes against their tables: that is
    /// `integrity_check`, which costs much more). Throws `corrupt` with
    /// SQLite's first findings when the file is damaged.
    public func quickCheck() throws {
        // Prepared here and finalized at once, never kept in the statement
        // cache: its program covers every table and index of the file
        // (64 KiB for a phone's), which a cached statement would hold for
        // the life of the connection (36 KiB more per idle phone, measured).
        // `main.` only: a check of every schema opens the connection's temp
        // database too, a pager and a page kept for its life (~9 KiB more).
        try checkOpen()
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v2(db, "PRAGMA main.quick_check(5)", -1, &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error("quick_check", rc) }
        defer { sqlite3_finalize(stmt) }
        var findings: [String] = []
        while true {
            let step = sqlite3_step(stmt)
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else { throw error("quick_check", step) }
            findings.append(sqlite3_column_text(stmt, 0).map { String(cString: $0) } ?? "?")
        }
        guard findings == ["ok"] else {
            throw StoreError(.corrupt, "quick_check of \(path): \(findings.joined(separator: "; "))")
        }
    }

    /// SQLite rolls a transaction back by itself after some errors
    /// (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM, SQLITE_BUSY in some cases).
    /// A statement run after that, inside what the caller still takes for
    /// its transaction, would commit on its own: half a mutation. Refused.
    func checkStillInTransaction() throws {
        if depth > 0 && sqlite3_get_autocommit(db) != 0 {
            throw StoreError(.other, "sqlite: the transaction was rolled back after an error in it; nothing of it was kept")
        }
    }

    /// SQL is written with `$1..$n`; SQLite's numbered form is `?1..?n`.
    static func translate(_ sql: String) -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count)
        var inQuote = false
        for c in sql {
            if c == "'" { inQuote.toggle() }
            out.append(!inQuote && c == "$" ? "?" : c)
        }
        return out
    }

    /// A statement for `sql`, from the cache or prepared now (and kept).
    /// ``release(_:)`` resets it after use.
    func prepare(_ sql: String) throws -> OpaquePointer {
        try checkOpen()
        if let s = statements.get(sql) { return s }
        statementsParsed &+= 1
        var stmt: OpaquePointer?
        // PERSISTENT: the statement is kept a long time, so SQLite takes its
        // memory from the heap rather than the lookaside pool.
        let flags = statements.capacity > 0 ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let rc = sqlite3_prepare_v3(db, SQLiteDatabase.translate(sql), -1, flags, &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error("prepare", rc) }
        if statements.capacity > 0, let evicted = statements.put(sql, stmt) { sqlite3_finalize(evicted) }
        return stmt
    }

    /// Resets a statement after use and drops its bindings (so no text or
    /// blob stays referenced until the next use); finalizes it when the
    /// cache is off.
    func release(_ stmt: OpaquePointer) {
        if statements.capacity == 0 { sqlite3_finalize(stmt); return }
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    func bind(_ stmt: OpaquePointer, _ params: [SQLValue]) throws {
        for (n, p) in params.enumerated() {
            let k = Int32(n + 1)
            let rc: Int32
            switch p {
            case .null: rc = sqlite3_bind_null(stmt, k)
            case .int(let i): rc = sqlite3_bind_int64(stmt, k, i)
            case .double(let d): rc = sqlite3_bind_double(stmt, k, d)
            case .text(let t):
                // Bound with its byte length, never -1 (which makes SQLite
                // stop at the first NUL and store a shorter string).
                var t = t
                rc = t.withUTF8 { utf8 -> Int32 in
                    guard utf8.count <= Int32.max else { return SQLITE_TOOBIG }
                    return utf8.withMemoryRebound(to: CChar.self) { chars in
                        // An empty buffer may have no address; SQLite reads a
                        // null pointer as NULL, not as ''.
                        guard let base = chars.baseAddress else { return sqlite3_bind_text(stmt, k, "", 0, quad_sqlite_transient()) }
                        return sqlite3_bind_text(stmt, k, base, Int32(chars.count), quad_sqlite_transient())
                    }
                }
            case .blob(let b):
                guard b.count <= Int32.max else { throw StoreError(.other, "bind $\(k): a blob of \(b.count) bytes is too large") }
                rc = b.withUnsafeBytes { raw in
                    // The same for an empty blob: zero bytes, not NULL.
                    guard let base = raw.baseAddress else { return sqlite3_bind_zeroblob(stmt, k, 0) }
                    return sqlite3_bind_blob(stmt, k, base, Int32(raw.count), quad_sqlite_transient())
                }
            }
            if rc != SQLITE_OK { throw error("bind $\(k)", rc) }
        }
    }

    @discardableResult
    public func execute(_ sql: String, _ params: [SQLValue]) throws -> Int {
        try checkStillInTransaction()
        let stmt = try prepare(sql)
        defer { release(stmt) }
        try bind(stmt, params)
        var rc = sqlite3_step(stmt)
        while rc == SQLITE_ROW { rc = sqlite3_step(stmt) }
        guard rc == SQLITE_DONE else { throw error("step", rc) }
        return Int(sqlite3_changes(db))
    }

    public func query(_ sql: String, _ params: [SQLValue]) throws -> [Row] {
        try checkStillInTransaction()
        let stmt = try prepare(sql)
        defer { release(stmt) }
        try bind(stmt, params)
        let count = sqlite3_column_count(stmt)
        let columns = (0..<count).map { String(cString: sqlite3_column_name(stmt, $0)) }
        var rows: [Row] = []
        while true {
            let rc = sqlite3_step(stmt)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw error("step", rc) }
            var values: [SQLValue] = []
            values.reserveCapacity(Int(count))
            for c in 0..<count {
                switch sqlite3_column_type(stmt, c) {
                case SQLITE_INTEGER: values.append(.int(sqlite3_column_int64(stmt, c)))
                case SQLITE_FLOAT: values.append(.double(sqlite3_column_double(stmt, c)))
                case SQLITE_TEXT:
                    // Read by its byte count, so a NUL inside does not end it.
                    let n = Int(sqlite3_column_bytes(stmt, c))
                    if n == 0 { values.append(.text("")) } else {
                        let bytes = UnsafeRawBufferPointer(start: sqlite3_column_text(stmt, c), count: n)
                        values.append(.text(String(decoding: bytes, as: UTF8.self)))
                    }
                case SQLITE_BLOB:
                    let n = Int(sqlite3_column_bytes(stmt, c))
                    if n == 0 { values.append(.blob([])) } else {
                        values.append(.blob(Array(UnsafeRawBufferPointer(start: sqlite3_column_blob(stmt, c), count: n))))
                    }
                default: values.append(.null)
                }
            }
            rows.append(Row(columns: columns, values: values))
        }
        return rows
    }

    public func executeScript(_ sql: String) throws {
        try checkOpen()
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? "error \(rc)"
            sqlite3_free(message)
            throw error("exec", rc, message: text)
        }
    }

    /// Fault injection (quad-edge's `edge.fault crash`): the process is
    /// killed with SIGKILL at this connection's next commit, from SQLite's
    /// commit hook, inside the commit: what that transaction wrote is in
    /// the journal and the pages, not committed, as a process killed in the
    /// middle of a write leaves it; the next open rolls it back.
    public func killAtNextCommit() {
        sqlite3_commit_hook(db, { _ in raise(SIGKILL); return 1 }, nil)
    }

    public func transaction<T>(immediate: Bool, _ body: () throws -> T) throws -> T {
        if depth > 0 {
            // Nested: a savepoint inside the open transaction.
            depth += 1
            defer { depth -= 1 }
            try executeScript("SAVEPOINT sp\(depth)")
            do {
                let result = try body()
                try executeScript("RELEASE sp\(depth)")
                return result
            } catch {
                try? executeScript("ROLLBACK TO sp\(depth); RELEASE sp\(depth)")
                throw error
            }
        }
        try executeScript(immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        depth = 1
        defer { depth = 0 }
        do {
            let result = try body()
            try checkStillInTransaction()
            try executeScript("COMMIT")
            return result
        } catch {
            if sqlite3_get_autocommit(db) == 0 { try? executeScript("ROLLBACK") }
            throw error
        }
    }
}
