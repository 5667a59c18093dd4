import Foundation
import QuadWire

/// A schema compiled once into the checks it asks for: its keywords read
/// out of the schema JSON into fields, its `$ref`s resolved, its patterns
/// compiled, the lists a refusal names (`expected a, b, c`) joined. Checking
/// a body then looks nothing up by keyword name; before, every request (and
/// every one of a batch's 500 events) walked the schema's dictionaries.
///
/// It refuses exactly as the walk it replaced did, message for message
/// (``Validator``'s tests and the services' suites assert them).
package final class Checker: @unchecked Sendable {
    // Written while compiling only (a `$ref` cycle needs the node before
    // its body), read-only once ``Validator/compiled(_:base:)`` returns it.
    var never = false
    var isSchemaObject = false
    var limit = ""
    var minLimit: String?
    var overIsTooLarge = false
    var ref: String?
    var refTarget: Checker?
    var typeNames: [String]?
    var constValue: JSON?
    var enumValues: [JSON]?
    var enumChoices = ""
    var minLength: Int?
    var maxLength: Int?
    var pattern: String?
    var regex: NSRegularExpression?
    var minimum: Double?
    var maximum: Double?
    var multipleOf: Double?
    /// The smallest step of an amount (`x-quad-unit`: 0.01, cents).
    var unit: Double?
    var minItems: Int?
    var maxItems: Int?
    var prefixItems: [Checker] = []
    var items: Checker?
    var uniqueItems = false
    var properties: [String: Checker] = [:]
    var expectedFields = ""
    var required: [String] = []
    var dependentRequired: [(key: String, needs: [String])] = []
    var hasAdditional = false
    var additionalIsFalse = false
    var additional: Checker?
    var propertyNames: Checker?
    /// Whether the fields of an object value are visited at all: an open
    /// object with no declared fields (a batch's event) has nothing to visit.
    var visitsFields = false
    var allOf: [Checker] = []
    var anyOf: [Checker]?
    var oneOf: [Checker]?
    var not: Checker?
    var notDescription = ""
    var ifCheck: Checker?
    var thenCheck: Checker?
    var elseCheck: Checker?
    // The rules across fields and `x-quad-expected` (``check``'s wrapper).
    var exclusive: [String]?
    var oneRequired: [String]?
    var expected: String?
    var expectedLengthPrefix = 0
    /// A string of the schema's own (`type` names string): the characters a
    /// request may hold in it (``TextRule``, `x-quad-text`).
    var text: TextRule?

    init() {}
}

/// Compiles schemas of one set of documents, each `$ref` target once.
struct CheckerCompiler {
    let validator: Validator
    var targets: [String: Checker] = [:]

    init(_ validator: Validator) { self.validator = validator }

    mutating func compile(_ schema: JSON, base: String) -> Checker {
        let c = Checker()
        fill(c, schema, base: base)
        return c
    }

    mutating func fill(_ c: Checker, _ schema: JSON, base: String) {
        if case .bool(let b) = schema { c.never = !b; return }
        guard case .object(let s) = schema else { return }
        c.isSchemaObject = true
        c.limit = s["x-quad-limit"]?.string.map { " (\($0))" } ?? ""
        c.minLimit = s["x-quad-min-limit"]?.string.map { " (\($0))" }
        c.overIsTooLarge = s["x-quad-over"] == "too_large"
        if let ref = s["$ref"]?.string {
            c.ref = ref
            if let (doc, node) = validator.resolve(ref, from: base) {
                let parts = ref.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                let key = doc + "#" + (parts.count == 2 ? String(parts[1]) : "")
                if let known = targets[key] {
                    c.refTarget = known
                } else {
                    let target = Checker()
                    targets[key] = target
                    fill(target, node, base: doc)
                    c.refTarget = target
                }
            }
        }
        if let t = s["type"] { c.typeNames = t.array?.compactMap(\.string) ?? t.string.map { [$0] } ?? [] }
        if c.typeNames?.contains("string") == true { c.text = TextRule(rawValue: s["x-quad-text"]?.string ?? "") ?? .line }
        c.constValue = s["const"]
        if let e = s["enum"]?.array {
            c.enumValues = e
            c.enumChoices = e.map { $0.string ?? $0.text }.joined(separator: ", ")
        }
        c.minLength = s["minLength"]?.int.map { Int($0) }
        c.maxLength = s["maxLength"]?.int.map { Int($0) }
        c.expectedLengthPrefix = c.minLength ?? 0
        if let p = s["pattern"]?.string {
            c.pattern = p
            c.regex = Patterns.shared.compiled(p)
        }
        c.minimum = s["minimum"]?.double
        c.maximum = s["maximum"]?.double
        c.multipleOf = s["multipleOf"]?.double
        c.unit = s["x-quad-unit"]?.double
        c.minItems = s["minItems"]?.int.map { Int($0) }
        c.maxItems = s["maxItems"]?.int.map { Int($0) }
        c.prefixItems = (s["prefixItems"]?.array ?? []).map { compile($0, base: base) }
        c.items = s["items"].map { compile($0, base: base) }
        c.uniqueItems = s["uniqueItems"] == true
        let props = s["properties"]?.object ?? [:]
        for (key, p) in props { c.properties[key] = compile(p, base: base) }
        c.expectedFields = props.keys.sorted().joined(separator: ", ")
        c.required = s["required"]?.array?.compactMap(\.string) ?? []
        if let deps = s["dependentRequired"]?.object {
            c.dependentRequired = deps.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value.array?.compactMap(\.string) ?? []) }
        }
        if let extra = s["additionalProperties"] {
            c.hasAdditional = true
            if extra == false { c.additionalIsFalse = true } else { c.additional = compile(extra, base: base) }
        }
        c.propertyNames = s["propertyNames"].map { compile($0, base: base) }
        c.visitsFields = !props.isEmpty || c.hasAdditional || c.propertyNames != nil
        c.allOf = (s["allOf"]?.array ?? []).map { compile($0, base: base) }
        c.anyOf = s["anyOf"]?.array?.map { compile($0, base: base) }
        c.oneOf = s["oneOf"]?.array?.map { compile($0, base: base) }
        if let not = s["not"] {
            c.not = compile(not, base: base)
            c.notDescription = not.object?["description"]?.string.map { ": \($0)" } ?? ""
        }
        c.ifCheck = s["if"].map { compile($0, base: base) }
        c.thenCheck = s["then"].map { compile($0, base: base) }
        c.elseCheck = s["else"].map { compile($0, base: base) }
        if let rule = s["x-quad-rule"]?.object {
            c.exclusive = rule["exclusive"]?.array?.compactMap(\.string)
            c.oneRequired = rule["one_required"]?.array?.compactMap(\.string)
        }
        c.expected = s["x-quad-expected"]?.string
    }
}

extension Validator {
    /// `schema` (in the document at `base`) compiled into a ``Checker``.
    package func compiled(_ schema: JSON, base: String) -> Checker {
        var compiler = CheckerCompiler(self)
        return compiler.compile(schema, base: base)
    }

    package func run(_ value: JSON, _ c: Checker, at name: String) -> Failure? {
        guard let failure = runNode(value, c, at: name) else { return nil }
        guard !quiet, c.isSchemaObject, !failure.ownWords else { return failure }
        if let pair = c.exclusive {
            return fail(pair.map { "\(name).\($0)" }.joined(separator: " and ") + " are exclusive")
        }
        if let fields = c.oneRequired {
            let named = fields.map { "\(name).\($0)" }
            return fail(named.dropLast().joined(separator: ", ") + " or " + (named.last ?? "") + " is required")
        }
        let wrongType = c.typeNames.map { checkType(value, $0, at: name) != nil } ?? false
        if let expected = c.expected, !wrongType, !failure.message.hasPrefix("\(name) must be \(c.expectedLengthPrefix) to") {
            return fail("\(name) \(expected), got \(Validator.echo(value))")
        }
        return failure
    }

    func runNode(_ value: JSON, _ c: Checker, at name: String) -> Failure? {
        if c.never { return fail("\(name) is not allowed") }
        guard c.isSchemaObject else { return nil }
        if let ref = c.ref {
            guard let target = c.refTarget else { return fail("\(name): unresolvable schema \(ref)") }
            if let f = run(value, target, at: name) { return f }
        }
        if let t = c.typeNames, let f = checkType(value, t, at: name) { return f }
        if let k = c.constValue, !same(value, k) { return fail("\(name) must be \(k.text)") }
        if let e = c.enumValues, !e.contains(where: { same(value, $0) }) {
            return fail("\(name) must be one of \(c.enumChoices), got \(value.string != nil ? Validator.echo(value) : value.text.count > 40 ? value.typeName : value.text)")
        }
        switch value {
        case .string(let str):
            let lo = c.minLength, hi = c.maxLength
            if lo != nil || hi != nil {
                let n = str.unicodeScalars.count
                let limit = c.limit, minLimit = c.minLimit
                if let lo, n < lo, let minLimit { return fail("\(name) must be at least \(lo) characters\(minLimit)") }
                if let hi, n > hi, minLimit != nil { return fail("\(name) must be at most \(hi) characters\(limit)") }
                if (lo.map { n < $0 } ?? false) || (hi.map { n > $0 } ?? false) {
                    switch (lo, hi) {
                    case let (lo?, hi?): return fail("\(name) must be \(lo) to \(hi) characters\(limit)")
                    case let (lo?, nil): return fail("\(name) must be at least \(lo) characters\(minLimit ?? "")")
                    case let (nil, hi?): return fail("\(name) must be at most \(hi) characters\(limit)", tooLarge: c.overIsTooLarge)
                    default: break
                    }
                }
            }
            if checksText, let rule = c.text, let f = rule.failure(str, at: name) {
                var refused = fail(f)
                refused.ownWords = true
                return refused
            }
            if let p = c.pattern {
                guard let re = c.regex, re.firstMatch(in: str, range: NSRange(str.startIndex..., in: str)) != nil else {
                    return fail("\(name) must match \(p)")
                }
            }
        case .int, .double:
            let d = value.double ?? 0
            let lo = c.minimum, hi = c.maximum, limit = c.limit
            if (lo.map { d < $0 } ?? false) || (hi.map { d > $0 } ?? false) {
                switch (lo, hi) {
                case let (lo?, hi?): return fail("\(name) must be between \(show(lo)) and \(show(hi))\(limit)")
                case let (lo?, nil): return fail("\(name) must be >= \(show(lo))\(limit)")
                case let (nil, hi?): return fail("\(name) must be <= \(show(hi))\(limit)")
                default: break
                }
            }
            if let m = c.multipleOf, m > 0, (d / m).rounded() != d / m { return fail("\(name) must be a multiple of \(show(m))") }
            if let u = c.unit, u > 0, !Validator.isMultiple(d, of: u) {
                return fail("\(name) must be a whole number of \(u == 0.01 ? "cents" : "units") (a multiple of \(show(u))), got \(value.text)")
            }
        case .array(let items):
            if let lo = c.minItems, items.count < lo { return fail("\(name) must have at least \(lo) item\(lo == 1 ? "" : "s")\(c.minLimit ?? "")") }
            if let hi = c.maxItems, items.count > hi {
                return fail("\(name) has \(items.count) items, over the limit of \(hi)\(c.limit)", tooLarge: c.overIsTooLarge)
            }
            let prefix = c.prefixItems
            if !prefix.isEmpty || c.items != nil {
                for (i, item) in items.enumerated() {
                    if i < prefix.count {
                        if let f = run(item, prefix[i], at: "\(name)[\(i)]") { return f }
                    } else if let itemCheck = c.items, !itemCheck.acceptsAnything, let f = run(item, itemCheck, at: "\(name)[\(i)]") { return f }
                }
            }
            if c.uniqueItems {
                for i in items.indices where items[..<i].contains(where: { same($0, items[i]) }) {
                    return fail("\(name)[\(i)] repeats an earlier item")
                }
            }
        case .object(let fields):
            for key in c.required where fields[key] == nil {
                return fail("\(name).\(key) is required")
            }
            for (key, needs) in c.dependentRequired where fields[key] != nil {
                for need in needs where fields[need] == nil {
                    return fail("\(name).\(need) is required with \(name).\(key)")
                }
            }
            if c.visitsFields {
                for key in fields.keys.sorted() {
                    if let p = c.properties[key] {
                        if let f = run(fields[key]!, p, at: "\(name).\(key)") { return f }
                    } else if c.hasAdditional {
                        if c.additionalIsFalse {
                            let expected = c.expectedFields
                            return fail("\(name).\(key) is not a field of \(subject)" + (expected.isEmpty ? "" : ": expected \(expected)"),
                                        namesUser: key == "user")
                        }
                        if let extra = c.additional, let f = run(fields[key]!, extra, at: "\(name).\(key)") { return f }
                    }
                    if let names = c.propertyNames, let f = run(.string(key), names, at: "\(name) key '\(key)'") { return f }
                }
            }
        default: break
        }
        for part in c.allOf {
            if let f = run(value, part, at: name) { return f }
        }
        if let any = c.anyOf, !any.contains(where: { silent.run(value, $0, at: name) == nil }) {
            return quiet ? fail("") : closest(any.compactMap { run(value, $0, at: name) }, name)
        }
        if let one = c.oneOf {
            let fits = one.filter { silent.run(value, $0, at: name) == nil }.count
            if fits == 0 { return quiet ? fail("") : closest(one.compactMap { run(value, $0, at: name) }, name) }
            if fits > 1 { return fail("\(name) fits more than one of its allowed forms") }
        }
        if let not = c.not, silent.run(value, not, at: name) == nil {
            return fail("\(name) has a form that is not allowed\(c.notDescription)")
        }
        if let cond = c.ifCheck {
            if silent.run(value, cond, at: name) == nil {
                if let then = c.thenCheck, let f = run(value, then, at: name) { return f }
            } else if let otherwise = c.elseCheck, let f = run(value, otherwise, at: name) { return f }
        }
        return nil
    }

    func checkType(_ value: JSON, _ names: [String], at name: String) -> Failure? {
        if names.contains(where: { fits(value, $0) }) { return nil }
        if names == ["boolean"] { return fail("\(name) must be true or false, got \(value.typeName)") }
        let article = names.count == 1 ? (["integer", "object", "array"].contains(names[0]) ? "an " : "a ") : ""
        return fail("\(name) must be \(article)\(names.joined(separator: " or ")), got \(value.typeName)")
    }
}

extension Checker {
    /// Whether this checker accepts every value without looking at it
    /// (`true`, `{}`, or an object schema of annotations only): an array's
    /// items then need no visit, nor a name built for each.
    var acceptsAnything: Bool {
        guard !never else { return false }
        guard isSchemaObject else { return true }
        return ref == nil && typeNames == nil && constValue == nil && enumValues == nil && minLength == nil && maxLength == nil
            && pattern == nil && minimum == nil && maximum == nil && multipleOf == nil && unit == nil && text == nil && minItems == nil && maxItems == nil
            && prefixItems.isEmpty && items == nil && !uniqueItems && required.isEmpty && dependentRequired.isEmpty && !visitsFields
            && allOf.isEmpty && anyOf == nil && oneOf == nil && not == nil && ifCheck == nil
    }
}

/// Compiled request and reply checkers, one per type, made on first use.
package final class CheckerCache: @unchecked Sendable {
    package static let shared = CheckerCache()
    // Guarded by `lock`; a checker is immutable once compiled.
    private var byKey: [String: (Validator, Checker)] = [:]
    private let lock = NSLock()

    /// The checker compiled under `key`, if it was.
    package func known(_ key: String) -> (Validator, Checker)? {
        lock.lock()
        defer { lock.unlock() }
        return byKey[key]
    }

    package func checker(_ key: String, make: () -> (Validator, Checker)) -> (Validator, Checker) {
        lock.lock()
        defer { lock.unlock() }
        if let known = byKey[key] { return known }
        let made = make()
        byKey[key] = made
        return made
    }
}

/// What a string of a request may hold, beyond its length and pattern: a
/// user writes it and another user's screen shows it, so the characters that
/// change how text is shown rather than what it says are refused (issue 27):
/// C0 and C1 controls (ESC, U+009B CSI), DEL, the bidi embeddings, overrides
/// and isolates (U+202A to U+202E, U+2066 to U+2069), and line breaks
/// (U+000A, U+000D, U+2028, U+2029) in a field of one line. Every string of
/// a request is one line unless its schema says otherwise (`x-quad-text`).
public enum TextRule: String, Sendable {
    /// One line: no control character, no line break, no bidi control.
    case line = ""
    /// Lines (`x-quad-text: lines`): line feeds and tabs too.
    case lines
    /// Anything (`x-quad-text: any`): a secret never shown (a password).
    case any

    /// Why `text` is refused, naming the first character it may not hold.
    func failure(_ text: String, at name: String) -> String? {
        guard self != .any else { return nil }
        // Printable ASCII, the common case, needs no closer look.
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return nil }
        for u in text.unicodeScalars {
            let v = u.value
            let what: String
            switch v {
            case 0x0A where self == .lines, 0x09 where self == .lines: continue
            case 0x0A, 0x0D, 0x2028, 0x2029: what = "a line break: this field is one line"
            case 0x00...0x1F, 0x7F...0x9F: what = "a control character"
            case 0x202A...0x202E, 0x2066...0x2069: what = "a bidirectional control: it reorders the text around it"
            default: continue
            }
            return "\(name) must not contain U+\(String(v, radix: 16, uppercase: true).leftPadded(4)) (\(what))"
        }
        return nil
    }
}

extension String {
    func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}

extension Validator {
    /// Whether `d` is a whole multiple of `m`. A step like 0.01 has no exact
    /// binary form, so a division is not exact either (0.07 / 0.01 is
    /// 7.000000000000001): for a step of 1/k, `d` is a multiple when its k
    /// times, rounded, divided by k, gives `d` back. 0.001 and 5e-324 are
    /// no multiples of 0.01; 19.99 is.
    public static func isMultiple(_ d: Double, of m: Double) -> Bool {
        guard d.isFinite else { return false }
        let k = (1 / m).rounded()
        if m < 1, k > 0, abs(1 / k - m) <= m * 1e-12 { return (d * k).rounded() / k == d }
        return (d / m).rounded() == d / m
    }
}
