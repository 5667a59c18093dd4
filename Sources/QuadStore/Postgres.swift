import CPostgres
import Foundation

/// A PostgreSQL connection through libpq, behind the same ``Database``
/// interface: `$1..$n` parameters sent as text, results typed by column OID.
public final class PostgresDatabase: Database {
    public let dialect = Dialect.postgres
    let conn: OpaquePointer
    var depth = 0

    public init(url: String) throws {
        guard let c = PQconnectdb(url) else { throw StoreError(.connection, "postgres: out of memory") }
        guard PQstatus(c) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(c)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(c)
            throw StoreError(.connection, "postgres connect: \(message)")
        }
        self.conn = c
        _ = try? query("SET client_min_messages TO warning", [])
    }

    deinit { close() }

    var closed = false
    public func close() {
        if closed { return }
        closed = true
        PQfinish(conn)
    }

    func run(_ sql: String, _ params: [SQLValue]) throws -> OpaquePointer {
        let texts: [String?] = params.map { p in
            switch p {
            case .null: return nil
            case .int(let i): return String(i)
            case .double(let d): return String(d)
            case .text(let t): return t
            case .blob(let b): return "\\x" + b.map { String(format: "%02x", $0) }.joined()
            }
        }
        let cStrings: [UnsafeMutablePointer<CChar>?] = texts.map { $0.map { strdup($0) } ?? nil }
        defer { cStrings.forEach { free($0) } }
        let result: OpaquePointer? = cStrings.withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: UnsafePointer<CChar>?.self) { ptrs in
                PQexecParams(conn, sql, Int32(params.count), nil, ptrs.baseAddress, nil, nil, 0)
            }
        }
        guard let result else { throw StoreError(.connection, "postgres: \(String(cString: PQerrorMessage(conn)))") }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? ""
            PQclear(result)
            if PQstatus(conn) != CONNECTION_OK { throw StoreError(.connection, "postgres: \(message)") }
            // Class 23: integrity constraint violation; 40001/40P01: retry.
            let kind: StoreError.Kind = state.hasPrefix("23") ? .constraint : (state == "40001" || state == "40P01" ? .busy : .other)
            throw StoreError(kind, "postgres: \(message)")
        }
        return result
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
                let text = String(cString: PQgetvalue(result, r, c))
                switch types[Int(c)] {
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

    public func executeScript(_ sql: String) throws {
        guard let result = PQexec(conn, sql) else { throw StoreError(.connection, "postgres: \(String(cString: PQerrorMessage(conn)))") }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY else {
            throw StoreError(.other, "postgres: \(String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines))")
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
        try executeScript("BEGIN")
        depth = 1
        defer { depth = 0 }
        do {
            let result = try body()
            try executeScript("COMMIT")
            return result
        } catch {
            try? executeScript("ROLLBACK")
            throw error
        }
    }
}
