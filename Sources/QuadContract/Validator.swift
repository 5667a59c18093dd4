import Foundation
import QuadWire

/// Checks a body against its shape, as JSON Schema 2020-12 would, and
/// names the first field that fails with its bound and the bound's setting:
/// `body.limit must be between 1 and 200 (max_page_size)`.
///
/// It knows the keywords the contract uses; `format` is an annotation, as
/// the 2020-12 default says.
public struct Validator: Sendable {
    /// Schemas by `protos/` path, for `$ref`.
    let documents: [String: JSON]
    /// What the body is of, in refusals: `favorites.remove`.
    var subject = "this request"

    public init(documents: [String: JSON]) { self.documents = documents }

    /// The same validator, naming `type` in its refusals.
    public func of(_ type: String) -> Validator {
        var v = self
        v.subject = type
        return v
    }

    /// The contract's own schemas.
    public static let contract = Validator(documents: Dictionary(Contract.documents, uniquingKeysWith: { a, _ in a }))

    /// The first failure of `value` against `shape` (a schema in the
    /// document at `path`, for its relative `$ref`s), or nil when it fits.
    public func failure(of value: JSON, against shape: Shape, in path: String, at name: String = "body") -> Failure? {
        check(value, shape.schema, base: path, at: name)
    }

    /// Why a value does not fit, and whether it is the 403 of a request
    /// that names another user.
    public struct Failure: Error, Sendable, Equatable {
        public let message: String
        /// The body named `user`: these requests act on the signed-in user only.
        public let namesUser: Bool
        /// Over a bound whose refusal is too_large (413), not bad_request.
        public let tooLarge: Bool
    }

    /// Checking a branch of `anyOf`, `oneOf`, `not` or `if`, whose
    /// message nobody reads unless every branch fails: no message is built.
    var quiet = false

    func fail(_ message: @autoclosure () -> String, namesUser: Bool = false, tooLarge: Bool = false) -> Failure {
        Failure(message: quiet ? "" : message(), namesUser: namesUser, tooLarge: tooLarge)
    }

    var silent: Validator {
        var v = self
        v.quiet = true
        return v
    }

    func check(_ value: JSON, _ schema: JSON, base: String, at name: String) -> Failure? {
        guard let failure = checkNode(value, schema, base: base, at: name) else { return nil }
        guard !quiet, case .object(let s) = schema else { return failure }
        // A rule across fields says what it wants in its own words.
        if let rule = s["x-quad-rule"]?.object {
            if let pair = rule["exclusive"]?.array?.compactMap(\.string) {
                return fail(pair.map { "\(name).\($0)" }.joined(separator: " and ") + " are exclusive")
            }
            if let fields = rule["one_required"]?.array?.compactMap(\.string) {
                let named = fields.map { "\(name).\($0)" }
                return fail(named.dropLast().joined(separator: ", ") + " or " + (named.last ?? "") + " is required")
            }
        }
        // A shape that says what it expects replaces every refusal of its
        // own but a wrong type and a length bound (`max_email_length`).
        let wrongType = s["type"].map { checkType(value, $0, at: name) != nil } ?? false
        if let expected = s["x-quad-expected"]?.string, !wrongType, !failure.message.hasPrefix("\(name) must be \(s["minLength"]?.int ?? 0) to") {
            return fail("\(name) \(expected), got \(Validator.echo(value))")
        }
        return failure
    }

    /// A value as a refusal shows it: a string's first 40 Unicode scalars
    /// (never a megabyte of combining marks back to its sender), else its type.
    static func echo(_ value: JSON) -> String {
        guard let s = value.string else { return value.typeName }
        let head = String(String.UnicodeScalarView(s.unicodeScalars.prefix(40)))
        return "'\(head)\(s.unicodeScalars.count > 40 ? "..." : "")'"
    }

    func checkNode(_ value: JSON, _ schema: JSON, base: String, at name: String) -> Failure? {
        if case .bool(let b) = schema { return b ? nil : fail("\(name) is not allowed") }
        guard case .object(let s) = schema else { return nil }
        let limit = s["x-quad-limit"]?.string.map { " (\($0))" } ?? ""
        let minLimit = s["x-quad-min-limit"]?.string.map { " (\($0))" }
        let overIsTooLarge = s["x-quad-over"] == "too_large"

        if let ref = s["$ref"]?.string {
            guard let (doc, node) = resolve(ref, from: base) else { return fail("\(name): unresolvable schema \(ref)") }
            if let f = check(value, node, base: doc, at: name) { return f }
        }
        if let t = s["type"], let f = checkType(value, t, at: name) { return f }
        if let c = s["const"], !same(value, c) { return fail("\(name) must be \(c.text)") }
        if let e = s["enum"]?.array, !e.contains(where: { same(value, $0) }) {
            let choices = e.map { $0.string ?? $0.text }.joined(separator: ", ")
            return fail("\(name) must be one of \(choices), got \(value.string != nil ? Validator.echo(value) : value.text.count > 40 ? value.typeName : value.text)")
        }
        switch value {
        case .string(let str):
            let n = str.unicodeScalars.count
            let lo = s["minLength"]?.int, hi = s["maxLength"]?.int
            if let lo, n < lo, let minLimit { return fail("\(name) must be at least \(lo) characters\(minLimit)") }
            if let hi, n > hi, minLimit != nil { return fail("\(name) must be at most \(hi) characters\(limit)") }
            if (lo.map { n < $0 } ?? false) || (hi.map { n > $0 } ?? false) {
                switch (lo, hi) {
                case let (lo?, hi?): return fail("\(name) must be \(lo) to \(hi) characters\(limit)")
                case let (lo?, nil): return fail("\(name) must be at least \(lo) characters\(minLimit ?? "")")
                case let (nil, hi?): return fail("\(name) must be at most \(hi) characters\(limit)", tooLarge: overIsTooLarge)
                default: break
                }
            }
            if let p = s["pattern"]?.string, !matches(str, p) { return fail("\(name) must match \(p)") }
        case .int, .double:
            let d = value.double ?? 0
            let lo = s["minimum"]?.double, hi = s["maximum"]?.double
            if (lo.map { d < $0 } ?? false) || (hi.map { d > $0 } ?? false) {
                switch (lo, hi) {
                case let (lo?, hi?): return fail("\(name) must be between \(show(lo)) and \(show(hi))\(limit)")
                case let (lo?, nil): return fail("\(name) must be >= \(show(lo))\(limit)")
                case let (nil, hi?): return fail("\(name) must be <= \(show(hi))\(limit)")
                default: break
                }
            }
            if let m = s["multipleOf"]?.double, m > 0, (d / m).rounded() != d / m { return fail("\(name) must be a multiple of \(show(m))") }
        case .array(let items):
            if let lo = s["minItems"]?.int, items.count < lo { return fail("\(name) must have at least \(lo) item\(lo == 1 ? "" : "s")\(minLimit ?? "")") }
            if let hi = s["maxItems"]?.int, items.count > hi {
                return fail("\(name) has \(items.count) items, over the limit of \(hi)\(limit)", tooLarge: overIsTooLarge)
            }
            let prefix = s["prefixItems"]?.array ?? []
            for (i, item) in items.enumerated() {
                if i < prefix.count {
                    if let f = check(item, prefix[i], base: base, at: "\(name)[\(i)]") { return f }
                } else if let itemSchema = s["items"], let f = check(item, itemSchema, base: base, at: "\(name)[\(i)]") { return f }
            }
            if s["uniqueItems"] == true {
                for i in items.indices where items[..<i].contains(where: { same($0, items[i]) }) {
                    return fail("\(name)[\(i)] repeats an earlier item")
                }
            }
        case .object(let fields):
            let props = s["properties"]?.object ?? [:]
            for key in s["required"]?.array?.compactMap(\.string) ?? [] where fields[key] == nil {
                return fail("\(name).\(key) is required")
            }
            if let deps = s["dependentRequired"]?.object {
                for (key, needs) in deps.sorted(by: { $0.key < $1.key }) where fields[key] != nil {
                    for need in needs.array?.compactMap(\.string) ?? [] where fields[need] == nil {
                        return fail("\(name).\(need) is required with \(name).\(key)")
                    }
                }
            }
            for key in fields.keys.sorted() {
                if let p = props[key] {
                    if let f = check(fields[key]!, p, base: base, at: "\(name).\(key)") { return f }
                } else if let extra = s["additionalProperties"] {
                    if extra == false {
                        let expected = props.keys.sorted().joined(separator: ", ")
                        return fail("\(name).\(key) is not a field of \(subject)" + (expected.isEmpty ? "" : ": expected \(expected)"),
                                    namesUser: key == "user")
                    }
                    if let f = check(fields[key]!, extra, base: base, at: "\(name).\(key)") { return f }
                }
                if let names = s["propertyNames"], let f = check(.string(key), names, base: base, at: "\(name) key '\(key)'") { return f }
            }
        default: break
        }
        for part in s["allOf"]?.array ?? [] {
            if let f = check(value, part, base: base, at: name) { return f }
        }
        if let any = s["anyOf"]?.array, !any.contains(where: { silent.check(value, $0, base: base, at: name) == nil }) {
            return quiet ? fail("") : closest(any.compactMap { check(value, $0, base: base, at: name) }, name)
        }
        if let one = s["oneOf"]?.array {
            let fits = one.filter { silent.check(value, $0, base: base, at: name) == nil }.count
            if fits == 0 { return quiet ? fail("") : closest(one.compactMap { check(value, $0, base: base, at: name) }, name) }
            if fits > 1 { return fail("\(name) fits more than one of its allowed forms") }
        }
        if let not = s["not"], silent.check(value, not, base: base, at: name) == nil {
            let what = not.object?["description"]?.string.map { ": \($0)" } ?? ""
            return fail("\(name) has a form that is not allowed\(what)")
        }
        if let cond = s["if"] {
            if silent.check(value, cond, base: base, at: name) == nil {
                if let then = s["then"], let f = check(value, then, base: base, at: name) { return f }
            } else if let otherwise = s["else"], let f = check(value, otherwise, base: base, at: name) { return f }
        }
        return nil
    }

    /// Of the failures of every allowed form, the one that says most: the
    /// deepest field named, so a request meant as one form hears what that
    /// form lacks.
    func closest(_ failures: [Failure], _ name: String) -> Failure {
        let best = failures.max { depth($0.message) < depth($1.message) }
        return best ?? fail("\(name) fits none of its allowed forms")
    }

    func depth(_ message: String) -> Int { message.prefix { $0 != " " }.filter { $0 == "." || $0 == "[" }.count }

    func checkType(_ value: JSON, _ type: JSON, at name: String) -> Failure? {
        let names = type.array?.compactMap(\.string) ?? type.string.map { [$0] } ?? []
        if names.contains(where: { fits(value, $0) }) { return nil }
        if names == ["boolean"] { return fail("\(name) must be true or false, got \(value.typeName)") }
        let article = names.count == 1 ? (["integer", "object", "array"].contains(names[0]) ? "an " : "a ") : ""
        return fail("\(name) must be \(article)\(names.joined(separator: " or ")), got \(value.typeName)")
    }

    func fits(_ value: JSON, _ type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object): return true
        case ("integer", .int), ("number", .int), ("number", .double): return true
        case ("integer", .double(let d)): return d.rounded() == d && d.isFinite
        default: return false
        }
    }

    /// Equal as JSON values: 1 and 1.0 are the same number.
    func same(_ a: JSON, _ b: JSON) -> Bool {
        if let x = a.double, let y = b.double, a.string == nil, b.string == nil { return x == y }
        return a == b
    }

    func show(_ d: Double) -> String { d.rounded() == d && abs(d) < 1e15 ? String(Int64(d)) : String(d) }

    func matches(_ s: String, _ pattern: String) -> Bool {
        guard let re = Patterns.shared.compiled(pattern) else { return false }
        return re.firstMatch(in: s, range: NSRange(s.startIndex..., in: s)) != nil
    }

    /// A `$ref` from the document at `base`: `other.schema.json`,
    /// `#/$defs/x`, `../envelope.schema.json#/$defs/y`.
    func resolve(_ ref: String, from base: String) -> (String, JSON)? {
        let parts = ref.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
        var doc = base
        if let file = parts.first, !file.isEmpty {
            var dir = base.split(separator: "/").dropLast().map(String.init)
            for piece in file.split(separator: "/") {
                if piece == ".." { _ = dir.popLast() } else if piece != "." { dir.append(String(piece)) }
            }
            doc = dir.joined(separator: "/")
        }
        guard var node = documents[doc] else { return nil }
        if parts.count == 2 {
            for key in parts[1].split(separator: "/") {
                let k = key.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
                if let next = node[k] { node = next } else if let i = Int(k), let a = node.array, a.indices.contains(i) { node = a[i] } else { return nil }
            }
        }
        return (doc, node)
    }
}

extension Contract {
    /// Every schema of the contract, by `protos/` path, as JSON.
    public static var documents: [(String, JSON)] {
        files.map { file in (file.path, (try? JSON.parse(file.text)) ?? .null) }
    }
}

extension Validator {
    /// `value` against a whole schema document (tests, examples).
    public func check(_ value: JSON, _ schema: JSON, base: String) -> Failure? { check(value, schema, base: base, at: "body") }
}

extension Contract {
    /// The first reason `body` is not a request of `type`, or nil when it
    /// is one, or when the contract does not declare `type` (the handler's
    /// not_found answers that).
    public static func validate(_ type: String, _ body: JSON) -> Validator.Failure? {
        guard let op = operation(type), let path = schemaPaths(type)?.request else { return nil }
        return Validator.contract.of(type).failure(of: body, against: op.request, in: path)
    }
}

extension Contract {
    /// The first reason `body` is not a reply of `type` as declared, or nil
    /// (also for a type the contract does not declare): what debug builds
    /// and the service suites check every reply against.
    public static func validateReply(_ type: String, _ body: JSON) -> Validator.Failure? {
        guard let op = operation(type), let path = schemaPaths(type)?.reply else { return nil }
        return Validator.contract.of("\(type) reply").failure(of: body, against: op.reply, in: path)
    }
}

/// Compiled patterns, once each: the contract has a few dozen, and
/// compiling one costs more than checking a whole body.
final class Patterns: @unchecked Sendable {
    static let shared = Patterns()
    // Guarded by `lock`; NSRegularExpression is immutable once made, so a
    // compiled one is used from any thread.
    private var cache: [String: NSRegularExpression] = [:]
    private let lock = NSLock()

    func compiled(_ pattern: String) -> NSRegularExpression? {
        lock.lock()
        defer { lock.unlock() }
        if let re = cache[pattern] { return re }
        guard let re = try? NSRegularExpression(pattern: pattern) else { return nil }
        cache[pattern] = re
        return re
    }
}
