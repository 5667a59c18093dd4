import Foundation
import QuadWire

/// Checks a body against its shape, as JSON Schema 2020-12 would, and
/// names the first field that fails with its bound and the bound's setting:
/// `body.limit must be between 1 and 200 (max_page_size)`.
///
/// It knows the keywords the contract uses; `format` is an annotation, as
/// the 2020-12 default says.
public struct Validator: Sendable {
    /// The schema at a `protos/` path, for `$ref`.
    package let documents: SchemaDocuments
    /// What the body is of, in refusals: `favorites.remove`.
    var subject = "this request"
    /// Whether strings are checked for what they may hold (``TextRule``):
    /// a request's are; a reply's, read back from a store, are not.
    package var checksText = false

    public init(documents: [String: JSON]) { self.documents = SchemaDocuments { documents[$0] } }

    package init(documents: SchemaDocuments) { self.documents = documents }

    /// The same validator, naming `type` in its refusals.
    public func of(_ type: String) -> Validator {
        var v = self
        v.subject = type
        return v
    }

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
        /// Says what it refuses in its own words, which a field's
        /// `x-quad-expected` must not replace (a character ``TextRule`` refuses).
        var ownWords = false
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

    /// `value` against `schema`, compiled for this one check (a type's
    /// request and reply are compiled once: ``Contract/validate(_:_:)``).
    func check(_ value: JSON, _ schema: JSON, base: String, at name: String) -> Failure? {
        run(value, compiled(schema, base: base), at: name)
    }

    /// A value as a refusal shows it: a string's first 40 Unicode scalars
    /// (never a megabyte of combining marks back to its sender), else its type.
    static func echo(_ value: JSON) -> String {
        guard let s = value.string else { return value.typeName }
        let head = String(String.UnicodeScalarView(s.unicodeScalars.prefix(40)))
        return "'\(head)\(s.unicodeScalars.count > 40 ? "..." : "")'"
    }

    /// Of the failures of every allowed form, the one that says most: the
    /// deepest field named, so a request meant as one form hears what that
    /// form lacks.
    func closest(_ failures: [Failure], _ name: String) -> Failure {
        let best = failures.max { depth($0.message) < depth($1.message) }
        return best ?? fail("\(name) fits none of its allowed forms")
    }

    func depth(_ message: String) -> Int { message.prefix { $0 != " " }.filter { $0 == "." || $0 == "[" }.count }

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

/// Schema documents by `protos/` path, each found once and kept: a
/// worker's checkers refer to a few (its own definitions, the envelope),
/// and compiling a checker resolves every `$ref` it meets.
package final class SchemaDocuments: @unchecked Sendable {
    private let find: @Sendable (String) -> JSON?
    // Guarded by `lock`; a found document is never changed.
    private var found: [String: JSON?] = [:]
    private let lock = NSLock()

    package init(_ find: @escaping @Sendable (String) -> JSON?) { self.find = find }

    package subscript(path: String) -> JSON? {
        lock.lock()
        defer { lock.unlock() }
        if let known = found[path] { return known }
        let doc = find(path)
        found[path] = doc
        return doc
    }

    /// The paths found so far (tests: what a worker's checkers made).
    package var paths: [String] {
        lock.lock()
        defer { lock.unlock() }
        return found.compactMap { $0.value == nil ? nil : $0.key }.sorted()
    }
}

extension Validator {
    /// `value` against a whole schema document (tests, examples).
    public func check(_ value: JSON, _ schema: JSON, base: String) -> Failure? { check(value, schema, base: base, at: "body") }
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
