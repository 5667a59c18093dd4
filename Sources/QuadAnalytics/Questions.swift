import Foundation
import QuadStore
import QuadWire

/// One business question: one SQL query in `questions/<id>.sql`, with
/// `$1` the start (inclusive) and `$2` the end (exclusive) of the period,
/// in ms since 1970. Its header comments say how to show it:
///
/// ```
/// -- title: Where students buy: home or favorites screen
/// -- app: UniTrade
/// -- chart: bar screen purchases
/// -- order: 1
/// ```
///
/// An app's business questions carry their number (the app's prefix,
/// ``numberPrefixes``: ParkWise's BQ as its seed numbers them, UniTrade's
/// UQ), their type and their owner too:
///
/// ```
/// -- number: BQ9
/// -- type: 4
/// -- owner: Fabio Higuera (Android: No campus spots)
/// ```
///
/// The types: 1, the app's own speed and stability; 2, answered back to the
/// user inside the app (``Analytics`` serves ParkWise's through
/// `analytics.driver`); 3, how users use a feature; 4, the campus's
/// business (its supply of spots, the lots around it, whom to show what
/// to sell). Numbered questions come first, by app (ParkWise, then
/// UniTrade) and number; the others by `order`.
///
/// `chart` is `bar LABEL VALUE...` (grouped bars) or `heat ROW COLUMN
/// VALUE` (a grid shaded from 0 to 100), naming result columns. Other comment lines are
/// the question's description. Every query keeps to the SQL that SQLite and
/// PostgreSQL share, and returns aggregates only.
public struct Question: Sendable, Equatable {
    public let id: String
    public let title: String
    public let app: String
    public let chart: [String]
    public let order: Int
    /// `BQ1` to `BQ12` (ParkWise), `UQ1`, `UQ2` (UniTrade), or nil for a question no app numbers.
    public let number: String?
    /// The seed's question type (1 to 4), or nil.
    public let type: Int?
    /// Who in the team answers for it, or nil.
    public let owner: String?
    public let description: String
    public let sql: String

    /// Reads a question from its file's text.
    public init(id: String, text: String) throws {
        var meta: [String: String] = [:]
        var about: [String] = []
        var body: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let t = line.trimmingCharacters(in: .whitespaces)
            if t.hasPrefix("--") {
                let c = t.dropFirst(2).trimmingCharacters(in: .whitespaces)
                if let colon = c.firstIndex(of: ":"), Question.keys.contains(String(c[..<colon])) {
                    meta[String(c[..<colon])] = c[c.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                } else if !c.isEmpty {
                    about.append(c)
                }
            } else if !t.isEmpty {
                // Comments are dropped from the SQL: an apostrophe in one
                // would upset the `$n` translation for SQLite.
                body.append(String(line))
            }
        }
        guard let title = meta["title"], let app = meta["app"], let chart = meta["chart"] else {
            throw QuadError.internal("questions/\(id).sql needs -- title:, -- app: and -- chart: lines")
        }
        self.id = id
        self.title = title
        self.app = app
        self.chart = chart.split(separator: " ").map(String.init)
        self.order = Int(meta["order"] ?? "") ?? 999
        self.number = meta["number"]
        self.owner = meta["owner"]
        self.type = meta["type"].flatMap { Int($0) }
        if let n = number {
            guard let prefix = Question.numberPrefixes[app] else {
                throw QuadError.internal("questions/\(id).sql: only \(Question.apps.joined(separator: " and ")) number their questions, not \(app)")
            }
            guard Question.rank(n, prefix: prefix) != nil else {
                throw QuadError.internal("questions/\(id).sql: number must be \(prefix) followed by 1 to 99 (\(app)'s), got '\(n)'")
            }
        }
        if let t = meta["type"], type.map({ (1...4).contains($0) }) != true {
            throw QuadError.internal("questions/\(id).sql: type must be 1, 2, 3 or 4, got '\(t)'")
        }
        self.description = about.joined(separator: " ")
        self.sql = body.joined(separator: "\n")
        guard ["bar", "heat"].contains(self.chart.first ?? ""), self.chart.count >= 3 else {
            throw QuadError.internal("questions/\(id).sql: chart must be 'bar|heat COLUMN COLUMN...', got '\(chart)'")
        }
        guard sql.contains("$1"), sql.contains("$2") else {
            throw QuadError.internal("questions/\(id).sql must use $1 (from) and $2 (to)")
        }
    }

    static let keys: Set<String> = ["title", "app", "chart", "order", "number", "type", "owner"]

    /// The apps that number their questions, in dashboard order, and the
    /// prefix of each one's numbers.
    static let apps = ["ParkWise", "UniTrade"]
    static let numberPrefixes = ["ParkWise": "BQ", "UniTrade": "UQ"]

    /// 9 for `BQ9` with prefix `BQ`; nil when it is not `prefix` and a number from 1 to 99.
    static func rank(_ number: String, prefix: String) -> Int? {
        guard number.hasPrefix(prefix), let n = Int(number.dropFirst(prefix.count)), (1...99).contains(n) else { return nil }
        return n
    }

    /// Where it goes on the dashboard: numbered ones first, by app and number.
    var position: (Int, Int, Int, String) {
        guard let number, let prefix = Question.numberPrefixes[app], let n = Question.rank(number, prefix: prefix),
              let a = Question.apps.firstIndex(of: app) else { return (Question.apps.count, 0, order, id) }
        return (a, n, order, id)
    }

    /// The questions shipped with the library, in dashboard order.
    public static func bundled() throws -> [Question] {
        guard let dir = Bundle.module.url(forResource: "questions", withExtension: nil) else {
            throw QuadError.internal("the questions folder is missing from the QuadAnalytics bundle")
        }
        return try load(from: dir.path)
    }

    /// Every `<id>.sql` in `folder`.
    public static func load(from folder: String) throws -> [Question] {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".sql") }
        let list = try names.map { name in
            try Question(id: String(name.dropLast(4)), text: String(contentsOfFile: folder + "/" + name, encoding: .utf8))
        }
        return list.sorted { $0.position < $1.position }
    }

    /// The answer for the period `[from, to)`.
    public func answer(_ db: Database, from: Int64, to: Int64) throws -> Answer {
        let rows = try db.query(sql, [.int(from), .int(to)])
        let columns = rows.first?.columns ?? Question.columns(of: sql)
        return Answer(question: self, columns: columns, rows: rows.map { $0.values.map(Answer.json) })
    }

    /// Column names from the outer SELECT list when there is no row to
    /// read them from: every output column is written `... AS name`.
    static func columns(of sql: String) -> [String] {
        // The last SELECT and the first FROM after it, outside parentheses and quotes.
        let chars = Array(sql)
        var depth = 0, quoted = false
        var select: Int?, from: Int?
        func word(_ k: Int, _ w: String) -> Bool {
            let u = Array(w)
            guard k + u.count <= chars.count, String(chars[k..<k + u.count]).uppercased() == w else { return false }
            let before = k == 0 || !(chars[k - 1].isLetter || chars[k - 1] == "_")
            let after = k + u.count == chars.count || !(chars[k + u.count].isLetter || chars[k + u.count] == "_")
            return before && after
        }
        for k in chars.indices {
            let c = chars[k]
            if c == "'" { quoted.toggle() }
            if quoted { continue }
            if c == "(" { depth += 1 } else if c == ")" { depth -= 1 }
            guard depth == 0 else { continue }
            if word(k, "SELECT") { select = k + 6; from = nil } else if select != nil, from == nil, word(k, "FROM") { from = k }
        }
        guard let select else { return [] }
        let list = String(chars[select..<(from ?? chars.count)])
        return splitTopLevel(list).map { part in
            let p = part.trimmingCharacters(in: .whitespacesAndNewlines)
            if let r = p.range(of: " AS ", options: [.backwards, .caseInsensitive]) {
                return p[r.upperBound...].trimmingCharacters(in: .whitespaces)
            }
            return String(p.split(separator: ".").last ?? Substring(p))
        }
    }

    static func splitTopLevel(_ s: String) -> [String] {
        var parts: [String] = [], current = "", depth = 0, quoted = false
        for c in s {
            if c == "'" { quoted.toggle() }
            if !quoted {
                if c == "(" { depth += 1 }
                if c == ")" { depth -= 1 }
                if c == "," && depth == 0 { parts.append(current); current = ""; continue }
            }
            current.append(c)
        }
        parts.append(current)
        return parts
    }
}

/// A question's answer: named columns and rows of values.
public struct Answer: Sendable, Equatable {
    public let question: Question
    public let columns: [String]
    public let rows: [[JSON]]

    static func json(_ v: SQLValue) -> JSON {
        switch v {
        case .null: return .null
        case .int(let i): return .int(i)
        case .double(let d):
            // PostgreSQL's numeric arrives as a double; whole numbers read as integers.
            if d.rounded() == d && abs(d) < 1e15 { return .int(Int64(d)) }
            return .double((d * 1000).rounded() / 1000)
        case .text(let t): return .string(t)
        case .blob: return .null
        }
    }

    public var json: JSON {
        var f: [String: JSON] = [
            "id": .string(question.id), "title": .string(question.title), "app": .string(question.app),
            "description": .string(question.description), "chart": .array(question.chart.map { .string($0) }),
            "columns": .array(columns.map { .string($0) }), "rows": .array(rows.map { .array($0) }),
        ]
        if let n = question.number { f["number"] = .string(n) }
        if let t = question.type { f["type"] = .int(Int64(t)) }
        if let o = question.owner { f["owner"] = .string(o) }
        return .object(f)
    }

    /// The rows as objects by column name.
    public var records: [[String: JSON]] {
        rows.map { Dictionary(uniqueKeysWithValues: zip(columns, $0)) }
    }
}
