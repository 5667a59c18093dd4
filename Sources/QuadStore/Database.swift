/// A value bound to or read from SQL.
public enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])

    public var int: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d): return Int64(d)
        case .text(let t): return Int64(t)
        default: return nil
        }
    }
    public var double: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        case .text(let t): return Double(t)
        default: return nil
        }
    }
    public var string: String? {
        switch self {
        case .text(let t): return t
        case .int(let i): return String(i)
        case .double(let d): return String(d)
        default: return nil
        }
    }
    public var isNull: Bool { self == .null }

    public static func of(_ s: String?) -> SQLValue { s.map { .text($0) } ?? .null }
    public static func of(_ i: Int64?) -> SQLValue { i.map { .int($0) } ?? .null }
    public static func of(_ i: Int?) -> SQLValue { i.map { .int(Int64($0)) } ?? .null }
    public static func of(_ d: Double?) -> SQLValue { d.map { .double($0) } ?? .null }
    public static func of(_ b: Bool) -> SQLValue { .int(b ? 1 : 0) }
}

extension SQLValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// One result row, read by column name.
public struct Row: Sendable {
    public let columns: [String]
    public let values: [SQLValue]

    public init(columns: [String], values: [SQLValue]) {
        self.columns = columns
        self.values = values
    }

    public subscript(_ name: String) -> SQLValue {
        guard let k = columns.firstIndex(of: name) else { return .null }
        return values[k]
    }
    public func int(_ name: String) -> Int64 { self[name].int ?? 0 }
    public func double(_ name: String) -> Double { self[name].double ?? 0 }
    public func string(_ name: String) -> String { self[name].string ?? "" }
    public func optionalString(_ name: String) -> String? { self[name].string }
}

/// A failure in a store, with the database's own message.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// `busy`: locked past the busy timeout, or a serialization failure;
    /// `connection`: the server is away; `full`: no room left on disk or
    /// under SQLite's `max_page_count`. The three are temporary: a caller
    /// answers 503 and the client's retry may succeed. `corrupt`: the file
    /// is damaged or is not a database (SQLite's SQLITE_CORRUPT,
    /// SQLITE_NOTADB, a failed `PRAGMA quick_check`): no retry mends it.
    public enum Kind: Sendable { case constraint, busy, other, connection, full, corrupt }
    public let kind: Kind
    public let message: String
    public init(_ kind: Kind, _ message: String) { self.kind = kind; self.message = message }
    public var description: String { message }
}

public enum Dialect: Sendable { case sqlite, postgres }

/// What every service needs of its store: statements with `$1..$n`
/// parameters, queries, scripts and transactions. SQLite and PostgreSQL both
/// implement it, so a service's code is the same on either.
public protocol Database: AnyObject {
    var dialect: Dialect { get }
    /// The name of the service whose events this store's outbox holds. The
    /// store only keeps it: the runtime (QuadRuntime's `Outbox.append(_:type:body:id:)`)
    /// reads it as the `src` of the event envelopes it encodes; nil keeps
    /// only the body, as before.
    var eventSource: String? { get set }
    /// Runs one statement; returns the number of rows it changed.
    @discardableResult
    func execute(_ sql: String, _ params: [SQLValue]) throws -> Int
    func query(_ sql: String, _ params: [SQLValue]) throws -> [Row]
    /// Runs several statements with no parameters.
    func executeScript(_ sql: String) throws
    /// Runs `body` in a transaction: committed when it returns, rolled back
    /// when it throws. `immediate` takes the write lock at the start (SQLite
    /// BEGIN IMMEDIATE), so concurrent workers serialize instead of failing.
    func transaction<T>(immediate: Bool, _ body: () throws -> T) throws -> T
    func close()
    /// Gives back the memory the connection holds and is not using now (a
    /// quiet worker's page cache); what it needs again is read again.
    func releaseMemory()
}

extension Database {
    /// A store that does not say whose events it holds keeps bodies only.
    public var eventSource: String? {
        get { nil }
        set {}
    }

    /// A store that keeps no cache of its own in the process has none to give back.
    public func releaseMemory() {}

    @discardableResult
    public func execute(_ sql: String, _ params: SQLValue...) throws -> Int { try execute(sql, params) }
    public func query(_ sql: String, _ params: SQLValue...) throws -> [Row] { try query(sql, params) }
    public func queryOne(_ sql: String, _ params: [SQLValue]) throws -> Row? { try query(sql, params).first }
    public func queryOne(_ sql: String, _ params: SQLValue...) throws -> Row? { try query(sql, params).first }
    public func transaction<T>(_ body: () throws -> T) throws -> T { try transaction(immediate: true, body) }
}

/// How a store waits: for a lock (SQLite) and for a server that went away
/// (PostgreSQL). Each is a setting of every service (`--busy-timeout-ms`,
/// `--pg-reconnect-max-ms`, `--pg-connect-timeout-s`).
public struct StoreSettings: Sendable {
    /// `busy_timeout_ms`: how long a SQLite statement waits for another
    /// process's lock before it fails (a 503 naming this setting).
    public var busyTimeoutMs: Int32 = SQLiteDatabase.defaultBusyTimeoutMs
    /// `pg_reconnect_max_ms`: the longest wait between two attempts to
    /// reach a PostgreSQL server that went away.
    public var pgReconnectMaxMs: Int64 = PostgresDatabase.defaultReconnectMaxMs
    /// `pg_connect_timeout_s`: how long one attempt may take.
    public var pgConnectTimeoutS: Int = PostgresDatabase.defaultConnectTimeoutS

    public init() {}
    public static let defaults = StoreSettings()
}

/// Opens a store from a location: a `postgres://` or `postgresql://` URL, or
/// a SQLite file path.
public func openDatabase(_ location: String, settings: StoreSettings = .defaults) throws -> Database {
    if location.hasPrefix("postgres://") || location.hasPrefix("postgresql://") {
        return try PostgresDatabase(url: location, reconnectMaxMs: settings.pgReconnectMaxMs, connectTimeoutS: settings.pgConnectTimeoutS)
    }
    return try SQLiteDatabase(path: location, busyTimeoutMs: settings.busyTimeoutMs)
}
