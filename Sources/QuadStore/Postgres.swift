import CPostgres
import Foundation

/// A PostgreSQL connection through libpq, behind the same ``Database``
/// interface: `$1..$n` parameters sent as text, results typed by column OID.
public final class PostgresDatabase: Database {
    public let dialect = Dialect.postgres
    let conn: OpaquePointer
    var depth = 0
    public var eventSource: String?
    /// Statement names prepared on this session, by SQL text and parameter
    /// types (a statement's parameter types are fixed when it is prepared).
    var statements = StatementCache<String>(capacity: PostgresDatabase.defaultStatementCacheCapacity)
    var statementNumber = 0

    /// How this session comes back after the server went away (a restart,
    /// a crash, a partition): attempts spaced by a backoff that doubles from
    /// 50 ms up to `reconnectMaxMs`, so the store is back at most that long
    /// (plus one connect) after the server is, and a store that is down
    /// costs the server one connection attempt per interval, not one per
    /// request.
    public let reconnectMaxMs: Int64
    /// When the loss was first seen, the last attempt's failure, and when
    /// the next attempt may run (monotonic ms); nil while connected.
    var lost: (since: Int64, reason: String, retryAt: Int64, backoffMs: Int64)?
    /// A reconnection under way (PQresetStart, then PQresetPoll): when it
    /// started and which way the socket must be ready next. It is driven a
    /// step at a time, never blocking the worker's loop for longer than
    /// ``resetStepMs``: a server behind a partition answers no packet, and
    /// a blocking connect would hold the loop (and its heartbeats) for the
    /// whole `connect_timeout`.
    var resetting: (started: Int64, polling: PostgresPollingStatusType)?
    /// Seconds one reconnection may take before it counts as failed
    /// (`pg_connect_timeout_s`).
    let connectTimeoutS: Int
    /// The longest one call waits for a reconnection's socket.
    static let resetStepMs: Int64 = 50
    /// Sessions opened so far: 1 at start, one more after each reconnect.
    /// A new session has none of the old one's prepared statements or
    /// temporary tables.
    public private(set) var sessions = 1

    /// Longest wait between two reconnection attempts (`pg_reconnect_max_ms`).
    public static let defaultReconnectMaxMs: Int64 = 1000
    /// Seconds a connection attempt may take (`pg_connect_timeout_s`; libpq's
    /// minimum is 2): without it an attempt to a host behind a partition
    /// waits for the kernel's SYN retries, about two minutes, on the
    /// worker's only loop.
    public static let defaultConnectTimeoutS = 2

    /// Opens a session on `url` (a `postgres://` URL or libpq's `key=value`
    /// string). Settings the URL does not name are Quad's: `connect_timeout`
    /// (`connectTimeoutS`), and TCP keepalives with `tcp_user_timeout`, so a
    /// server that vanished behind a partition is noticed in about five
    /// seconds rather than hours (data unacknowledged for 5 s, or an idle
    /// session's keepalives unanswered for 5 + 3 s); the URL's own values win.
    public init(url: String, reconnectMaxMs: Int64 = PostgresDatabase.defaultReconnectMaxMs,
                connectTimeoutS: Int = PostgresDatabase.defaultConnectTimeoutS) throws {
        self.reconnectMaxMs = max(reconnectMaxMs, 50)
        self.connectTimeoutS = max(connectTimeoutS, 2)
        let keywords = ["connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname"]
        let values = [String(self.connectTimeoutS), "1", "5", "1", "3", "5000", url]
        // expand_dbname: the URL in `dbname` is read as a connection string,
        // whose settings override the ones before it.
        let c: OpaquePointer? = PostgresDatabase.withCStrings(keywords) { k in
            PostgresDatabase.withCStrings(values) { v in PQconnectdbParams(k, v, 1) }
        }
        guard let c else { throw StoreError(.connection, "postgres: out of memory") }
        guard PQstatus(c) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(c)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(c)
            throw StoreError(.connection, "postgres connect: \(message)")
        }
        self.conn = c
        if let r = PQexec(conn, PostgresDatabase.sessionSetup) { PQclear(r) }
    }

    /// What every session runs first.
    static let sessionSetup = "SET client_min_messages TO warning"

    /// `strings` as a NULL-terminated array of C strings, for libpq.
    static func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> T) -> T {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    deinit { close() }

    /// Statements a session keeps prepared, as on SQLite.
    public static let defaultStatementCacheCapacity = 64

    /// How many prepared statements this session keeps; 0 sends every
    /// statement with its text (PQexecParams), for comparison.
    public var statementCacheCapacity: Int {
        get { statements.capacity }
        set {
            statements.capacity = newValue
            forgetStatements(deallocate: true)
        }
    }

    /// Statements prepared on the session now.
    public var preparedStatements: Int { statements.count }

    /// Forgets the prepared names; `deallocate` also drops them on the
    /// server (not after a reset: a new session has none).
    func forgetStatements(deallocate: Bool) {
        for name in statements.removeAll() where deallocate {
            if let r = PQexec(conn, "DEALLOCATE \(name)") { PQclear(r) }
        }
    }

    /// Makes sure a session is there before a statement that starts a unit
    /// of work (depth 0): a session that was lost is opened again, outside
    /// a transaction only (one cut short must fail, not go on in a fresh
    /// session, so a mutation and its idempotency record roll back
    /// together). Its prepared statements went with it and are prepared
    /// again on first use; temporary tables are the caller's to create
    /// again (``sessions`` says when a session is new). While the server
    /// is away this throws a ``StoreError`` of kind `connection` that says
    /// for how long and when the next attempt is: a 503 with its reason.
    func ensureSession() throws {
        guard depth == 0 else { return }
        if resetting == nil {
            if PQstatus(conn) == CONNECTION_OK && lost == nil { noticeClosedSocket() }
            guard PQstatus(conn) != CONNECTION_OK else { return }
        }
        let now = PostgresDatabase.monotonicMillis()
        var state = lost ?? (since: now, reason: lastError(), retryAt: now, backoffMs: 0)
        if resetting == nil {
            if now < state.retryAt {
                lost = state
                throw PostgresDatabase.gone(state, at: now, "next attempt in \(state.retryAt - now) ms")
            }
            forgetStatements(deallocate: false)
            guard PQresetStart(conn) == 1 else { return try failedAttempt(&state) }
            resetting = (now, PGRES_POLLING_WRITING)
        }
        switch stepReset() {
        case PGRES_POLLING_OK:
            resetting = nil
            if let r = PQexec(conn, PostgresDatabase.sessionSetup) { PQclear(r) }
            lost = nil
            sessions += 1
        case PGRES_POLLING_FAILED:
            resetting = nil
            try failedAttempt(&state)
        default:
            let after = PostgresDatabase.monotonicMillis()
            let started = resetting?.started ?? after
            if after - started >= Int64(connectTimeoutS) * 1000 {
                resetting = nil
                return try failedAttempt(&state, reason: "no answer from the server within \(connectTimeoutS) s (pg_connect_timeout_s)")
            }
            lost = state
            throw PostgresDatabase.gone(state, at: after, "reconnecting for \(after - started) ms")
        }
    }

    /// Drives the reconnection under way for at most ``resetStepMs``: waits
    /// for the socket as libpq asked, then lets it go on, until it is done,
    /// it failed, or the step's time is up (still polling).
    func stepReset() -> PostgresPollingStatusType {
        guard var polling = resetting?.polling else { return PGRES_POLLING_FAILED }
        let until = PostgresDatabase.monotonicMillis() + PostgresDatabase.resetStepMs
        while polling == PGRES_POLLING_READING || polling == PGRES_POLLING_WRITING {
            let fd = PQsocket(conn)
            guard fd >= 0 else { return PGRES_POLLING_FAILED }
            let left = until - PostgresDatabase.monotonicMillis()
            guard left > 0 else { break }
            var p = pollfd(fd: fd, events: Int16(polling == PGRES_POLLING_READING ? POLLIN : POLLOUT), revents: 0)
            let ready = poll(&p, 1, Int32(left))
            if ready < 0 && errno != EINTR { return PGRES_POLLING_FAILED }
            guard ready > 0 else { continue }
            polling = PQresetPoll(conn)
        }
        resetting?.polling = polling
        return polling
    }

    /// One attempt failed: the next waits a backoff that doubles up to
    /// `reconnectMaxMs`; throws the 503 that says so.
    func failedAttempt(_ state: inout (since: Int64, reason: String, retryAt: Int64, backoffMs: Int64), reason: String? = nil) throws {
        let after = PostgresDatabase.monotonicMillis()
        state.reason = reason ?? lastError()
        state.backoffMs = min(max(state.backoffMs * 2, 50), reconnectMaxMs)
        state.retryAt = after + state.backoffMs
        lost = state
        throw PostgresDatabase.gone(state, at: after, "next attempt in \(state.backoffMs) ms")
    }

    /// The 503 while the server is away: for how long, why, and what next.
    static func gone(_ state: (since: Int64, reason: String, retryAt: Int64, backoffMs: Int64), at now: Int64, _ next: String) -> StoreError {
        StoreError(.connection, "postgres: no connection to the server for \(now - state.since) ms (\(state.reason)); \(next)")
    }

    /// A server that restarted closed this session's socket while it sat
    /// idle, and libpq learns of it only when it next reads. Reading what
    /// is waiting (a zero-timeout poll, then PQconsumeInput) finds the end
    /// of the stream before a statement is sent into it, so the first
    /// request after a restart is served rather than failed.
    func noticeClosedSocket() {
        let fd = PQsocket(conn)
        guard fd >= 0 else { return }
        for _ in 0..<4 {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 0) > 0 else { return }
            if PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK { return }
        }
    }

    /// libpq's last message on one line (it spans several: "...failed:
    /// Connection refused\n\tIs the server running...").
    func lastError() -> String {
        String(cString: PQerrorMessage(conn)).split(whereSeparator: { $0.isNewline || $0 == "\t" })
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }

    static func monotonicMillis() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    /// The result if it succeeded; else cleared, and thrown as a ``StoreError``.
    func check(_ result: OpaquePointer?, expecting: ExecStatusType? = nil) throws -> OpaquePointer {
        guard let result else {
            throw StoreError(.connection, "postgres: \(String(cString: PQerrorMessage(conn)).trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        let status = PQresultStatus(result)
        guard expecting.map({ status == $0 }) ?? (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) else {
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? ""
            PQclear(result)
            // Class 08: connection exception; 57P0x: the server is shutting
            // down, crashed, or not yet accepting connections.
            if PQstatus(conn) != CONNECTION_OK || state.hasPrefix("08") || state.hasPrefix("57P0") {
                throw StoreError(.connection, "postgres: \(message.isEmpty ? "the connection to the server was lost" : message)")
            }
            throw StoreError(PostgresDatabase.kind(ofState: state), "postgres: \(message)")
        }
        return result
    }

    /// What a failed statement's SQLSTATE says, for the answer it becomes:
    /// class 23 (an integrity constraint) is the request's conflict;
    /// 40001/40P01 (serialization, deadlock) and class 53 (insufficient
    /// resources: memory, connections) are worth a retry, 53100 (the disk
    /// is full) too, as a full SQLite file is: each a 503, never a 500 that
    /// a client would take as final.
    static func kind(ofState state: String) -> StoreError.Kind {
        if state.hasPrefix("23") { return .constraint }
        if state == "53100" { return .full }
        if state == "40001" || state == "40P01" || state.hasPrefix("53") { return .busy }
        return .other
    }

    /// The name `sql` is prepared under on this session, preparing it now
    /// (PQprepare) the first time; nil when the cache is off.
    func preparedName(_ sql: String, types: [UInt32]) throws -> String? {
        guard statements.capacity > 0 else { return nil }
        let key = types.contains(where: { $0 != 0 }) ? sql + "\u{0}" + types.map(String.init).joined(separator: ",") : sql
        if let name = statements.get(key) { return name }
        statementNumber += 1
        let name = "quad_s\(statementNumber)"
        PQclear(try check(PQprepare(conn, name, sql, Int32(types.count), types)))
        if let evicted = statements.put(key, name), let r = PQexec(conn, "DEALLOCATE \(evicted)") { PQclear(r) }
        return name
    }

    var closed = false
    public func close() {
        if closed { return }
        closed = true
        PQfinish(conn)
    }

    func run(_ sql: String, _ params: [SQLValue]) throws -> OpaquePointer {
        // Text goes in libpq's text format, which ends each value at its
        // first NUL: a string holding one would be stored cut, so it is
        // refused here (PostgreSQL's text cannot hold U+0000 anyway).
        // Blobs go in binary format with their length, as bytea.
        var values: [[UInt8]?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        var types: [UInt32] = []
        for (n, p) in params.enumerated() {
            var bytes: [UInt8]?
            var format: Int32 = 0
            var type: UInt32 = 0
            switch p {
            case .null: bytes = nil
            case .int(let i): bytes = Array(String(i).utf8)
            case .double(let d): bytes = Array(String(d).utf8)
            case .text(let t):
                bytes = Array(t.utf8)
                if bytes!.contains(0) {
                    throw StoreError(.other, "postgres: parameter $\(n + 1) holds U+0000 (NUL), which PostgreSQL text cannot store: refused, not cut")
                }
            case .blob(let b):
                bytes = b
                format = 1
                type = 17  // bytea
            }
            guard (bytes?.count ?? 0) < Int32.max else { throw StoreError(.other, "postgres: parameter $\(n + 1) is too large") }
            if format == 0 { bytes?.append(0) }  // text format is NUL-terminated
            values.append(bytes)
            lengths.append(Int32(bytes?.count ?? 0))
            formats.append(format)
            types.append(type)
        }
        let buffers: [UnsafeMutablePointer<CChar>?] = values.map { bytes in
            guard let bytes else { return nil }
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(bytes.count, 1))
            bytes.withUnsafeBufferPointer { src in
                src.withMemoryRebound(to: CChar.self) { buffer.update(from: $0.baseAddress!, count: bytes.count) }
            }
            return buffer
        }
        defer { buffers.forEach { $0?.deallocate() } }
        try ensureSession()
        let name = try preparedName(sql, types: types)
        let result: OpaquePointer? = buffers.withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: UnsafePointer<CChar>?.self) { ptrs in
                if let name {
                    return PQexecPrepared(conn, name, Int32(params.count), ptrs.baseAddress, lengths, formats, 0)
                }
                return PQexecParams(conn, sql, Int32(params.count), types, ptrs.baseAddress, lengths, formats, 0)
            }
        }
        return try check(result)
    }

    @discardableResult
    public func execute(_ sql: String, _ params: [SQLValue]) throws -> Int {
        let result = try run(sql, params)
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    public func query(_ sql: String, _ params: [SQLValue]) throws -> [Row] {
        let result = try run(sql, params)
        defer { PQclear(result) }
        let nRows = PQntuples(result), nCols = PQnfields(result)
        let columns = (0..<nCols).map { String(cString: PQfname(result, $0)) }
        let types = (0..<nCols).map { PQftype(result, $0) }
        var rows: [Row] = []
        rows.reserveCapacity(Int(nRows))
        for r in 0..<nRows {
            var values: [SQLValue] = []
            for c in 0..<nCols {
                if PQgetisnull(result, r, c) == 1 { values.append(.null); continue }
                // Read by length: never cut at a NUL.
                let length = Int(PQgetlength(result, r, c))
                let text = PQgetvalue(result, r, c).map {
                    String(decoding: UnsafeRawBufferPointer(start: $0, count: length), as: UTF8.self)
                } ?? ""
                switch types[Int(c)] {
                case 17: values.append(.blob(PostgresDatabase.bytea(text)))
                case 20, 21, 23: values.append(Int64(text).map { .int($0) } ?? .text(text))  // int8, int2, int4
                case 700, 701, 1700: values.append(Double(text).map { .double($0) } ?? .text(text))  // float4, float8, numeric
                case 16: values.append(.int(text == "t" ? 1 : 0))  // bool
                default: values.append(.text(text))
                }
            }
            rows.append(Row(columns: columns, values: values))
        }
        return rows
    }

    /// Streams `rows` into `table` with `COPY ... FROM STDIN` (text
    /// format): one round trip for the lot, no statement to parse, the
    /// fastest way into PostgreSQL. Runs in the caller's transaction.
    /// Text holding U+0000 is refused, as by ``execute(_:_:)``.
    public func copy(into table: String, columns: [String], rows: [[SQLValue]]) throws {
        try ensureSession()
        PQclear(try check(PQexec(conn, "COPY \(table) (\(columns.joined(separator: ", "))) FROM STDIN"), expecting: PGRES_COPY_IN))
        var buffer: [UInt8] = []
        buffer.reserveCapacity(min(rows.count * 256, 1 << 20))
        func flush() throws {
            let rc = buffer.withUnsafeBufferPointer { b in
                b.withMemoryRebound(to: CChar.self) { PQputCopyData(conn, $0.baseAddress, Int32($0.count)) }
            }
            guard rc == 1 else { throw StoreError(.connection, "postgres copy: \(String(cString: PQerrorMessage(conn)))") }
            buffer.removeAll(keepingCapacity: true)
        }
        var failure: String?
        rows: for row in rows {
            for (k, value) in row.enumerated() {
                if k > 0 { buffer.append(0x09) }
                switch value {
                case .null: buffer += [0x5C, 0x4E]  // \N
                case .int(let i): buffer += Array(String(i).utf8)
                case .double(let d): buffer += Array(String(d).utf8)
                case .text(let t):
                    for byte in t.utf8 {
                        switch byte {
                        case 0: failure = "a value of column \(columns[k]) holds U+0000 (NUL), which PostgreSQL text cannot store: refused, not cut"; break rows
                        case 0x5C: buffer += [0x5C, 0x5C]
                        case 0x09: buffer += [0x5C, 0x74]
                        case 0x0A: buffer += [0x5C, 0x6E]
                        case 0x0D: buffer += [0x5C, 0x72]
                        default: buffer.append(byte)
                        }
                    }
                case .blob(let b):
                    // bytea's hex input, its backslash escaped for COPY.
                    buffer += [0x5C, 0x5C, 0x78]
                    let hex = Array("0123456789abcdef".utf8)
                    for byte in b { buffer += [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]] }
                }
            }
            buffer.append(0x0A)
            if buffer.count >= 1 << 16 { try flush() }
        }
        if failure == nil, !buffer.isEmpty { try flush() }
        // Ending with an error message makes the server abort the COPY.
        guard PQputCopyEnd(conn, failure) == 1 else { throw StoreError(.connection, "postgres copy: \(String(cString: PQerrorMessage(conn)))") }
        var error: Error?
        while let result = PQgetResult(conn) {
            do { PQclear(try check(result)) } catch let e { if error == nil { error = e } }
        }
        if let failure { throw StoreError(.other, "postgres copy: \(failure)") }
        if let error { throw error }
    }

    /// A bytea in PostgreSQL's text output (`\\x` and hex digits) as bytes.
    static func bytea(_ text: String) -> [UInt8] {
        var out: [UInt8] = []
        let hex = Array(text.utf8.dropFirst(2))
        out.reserveCapacity(hex.count / 2)
        func nibble(_ c: UInt8) -> UInt8 {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: return 0
            }
        }
        var k = 0
        while k + 1 < hex.count {
            out.append(nibble(hex[k]) << 4 | nibble(hex[k + 1]))
            k += 2
        }
        return out
    }

    public func executeScript(_ sql: String) throws {
        try ensureSession()
        PQclear(try check(PQexec(conn, sql)))
    }

    /// COMMIT of a transaction that an error already aborted answers
    /// "ROLLBACK", not an error: said here as the failure it is, so a
    /// handler that swallowed a failed statement is never acknowledged.
    func commit() throws {
        let result = try check(PQexec(conn, "COMMIT"))
        defer { PQclear(result) }
        if String(cString: PQcmdStatus(result)) == "ROLLBACK" {
            throw StoreError(.other, "postgres: the transaction was rolled back at COMMIT: a statement in it had failed")
        }
    }

    public func transaction<T>(immediate: Bool, _ body: () throws -> T) throws -> T {
        if depth > 0 {
            depth += 1
            defer { depth -= 1 }
            try executeScript("SAVEPOINT sp\(depth)")
            do {
                let result = try body()
                try executeScript("RELEASE SAVEPOINT sp\(depth)")
                return result
            } catch {
                try? executeScript("ROLLBACK TO SAVEPOINT sp\(depth); RELEASE SAVEPOINT sp\(depth)")
                throw error
            }
        }
        do { try executeScript("BEGIN") } catch let e as StoreError where e.kind == .connection {
            // BEGIN changes nothing: when it finds the session gone, the
            // session is opened again (or the wait for the server is said)
            // and BEGIN sent once more.
            try executeScript("BEGIN")
        }
        depth = 1
        defer { depth = 0 }
        do {
            let result = try body()
            try commit()
            return result
        } catch {
            try? executeScript("ROLLBACK")
            throw error
        }
    }
}
