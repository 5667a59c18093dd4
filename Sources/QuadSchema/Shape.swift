import QuadWire

/// The shape of a JSON value: a typed way to write a JSON Schema (draft
/// 2020-12) keyword by keyword. One `Shape` is both what `protos/` is
/// generated from (``schema``) and what a request body is checked against
/// before its handler runs (``Validator``), so the two cannot drift.
///
/// ```swift
/// .object([
///     "q": .string(max: 200).optional,
///     "limit": .int(1...200, default: 50).limit("max_page_size").optional,
/// ])
/// ```
public struct Shape: Sendable {
    /// The JSON Schema keywords of this shape.
    public private(set) var keywords: [String: JSON]
    /// An object field that may be absent (it is left out of `required`).
    public private(set) var isOptional = false

    init(_ keywords: [String: JSON]) { self.keywords = keywords }

    /// The JSON Schema of this shape.
    public var schema: JSON { .object(keywords) }

    func with(_ edit: (inout [String: JSON]) -> Void) -> Shape {
        var copy = self
        edit(&copy.keywords)
        return copy
    }
}

// MARK: - Building shapes

extension Shape {
    /// Any JSON value.
    public static let any = Shape([:])
    public static let bool = Shape(["type": "boolean"])
    public static let null = Shape(["type": "null"])

    /// An object whose fields are `fields` (required unless marked
    /// ``optional``); fields it does not name are refused unless `open`.
    public static func object(_ fields: KeyValuePairs<String, Shape> = [:], open: Bool = false) -> Shape {
        object(fields: fields.map { ($0.key, $0.value) }, open: open)
    }

    /// The same, from a list of fields in order (a ``Body``'s).
    package static func object(fields: [(key: String, value: Shape)], open: Bool) -> Shape {
        var k: [String: JSON] = ["type": "object"]
        if !fields.isEmpty {
            k["properties"] = .object(Dictionary(fields.map { ($0.key, $0.value.schema) }, uniquingKeysWith: { a, _ in a }))
            k["required"] = .array(fields.filter { !$0.value.isOptional }.map { JSON.string($0.key) })
        }
        if !open { k["additionalProperties"] = false }
        return Shape(k)
    }

    /// An object with no fields at all, saying so (`properties` and
    /// `required` empty): a phone event without props.
    public static let noFields = Shape(["type": "object", "properties": .object([:]), "required": [], "additionalProperties": false])

    /// An object whose other fields each have `shape` (a map).
    public static func map(of shape: Shape, _ fields: KeyValuePairs<String, Shape> = [:]) -> Shape {
        object(fields, open: true).keyword("additionalProperties", shape)
    }

    /// A string of `length` Unicode scalars.
    public static func string(_ length: ClosedRange<Int>, pattern: String? = nil, format: String? = nil) -> Shape {
        string(min: length.lowerBound, max: length.upperBound, pattern: pattern, format: format)
    }

    /// A string of at least `min` and at most `max` Unicode scalars (never
    /// grapheme clusters: one letter and a megabyte of combining marks is
    /// one cluster).
    public static func string(min: Int = 0, max: Int? = nil, pattern: String? = nil, format: String? = nil) -> Shape {
        var k: [String: JSON] = ["type": "string"]
        if min > 0 { k["minLength"] = .int(Int64(min)) }
        if let max { k["maxLength"] = .int(Int64(max)) }
        if let pattern { k["pattern"] = .string(pattern) }
        if let format { k["format"] = .string(format) }
        return Shape(k)
    }

    /// An integer in `range`.
    public static func int(_ range: ClosedRange<Int64>, default d: Int64? = nil) -> Shape {
        int(min: range.lowerBound, max: range.upperBound, default: d)
    }

    /// An integer, at least `min` and at most `max` when given.
    public static func int(min: Int64? = nil, max: Int64? = nil, default d: Int64? = nil) -> Shape {
        var k: [String: JSON] = ["type": "integer"]
        if let min { k["minimum"] = .int(min) }
        if let max { k["maximum"] = .int(max) }
        if let d { k["default"] = .int(d) }
        return Shape(k)
    }

    /// A number, at least `min` and at most `max` when given.
    public static func number(min: Double? = nil, max: Double? = nil) -> Shape {
        var k: [String: JSON] = ["type": "number"]
        if let min { k["minimum"] = JSON.number(min) }
        if let max { k["maximum"] = JSON.number(max) }
        return Shape(k)
    }

    /// An array of `items`, with at most `max` (at least `min`) of them.
    public static func array(of items: Shape, min: Int? = nil, max: Int? = nil) -> Shape {
        var k: [String: JSON] = ["type": "array", "items": items.schema]
        if let min { k["minItems"] = .int(Int64(min)) }
        if let max { k["maxItems"] = .int(Int64(max)) }
        return Shape(k)
    }

    /// One of these strings.
    public static func choice(_ values: [String]) -> Shape { Shape(["enum": .array(values.map { .string($0) })]) }
    /// One of these values.
    public static func choice(values: [JSON]) -> Shape { Shape(["enum": .array(values)]) }
    /// Exactly this value.
    public static func const(_ value: JSON) -> Shape { Shape(["const": value]) }
    /// A shape defined elsewhere: `product.schema.json`, `#/$defs/category`.
    public static func ref(_ path: String) -> Shape { Shape(["$ref": .string(path)]) }

    public static func oneOf(_ shapes: [Shape]) -> Shape { Shape(["oneOf": .array(shapes.map(\.schema))]) }
    public static func anyOf(_ shapes: [Shape]) -> Shape { Shape(["anyOf": .array(shapes.map(\.schema))]) }
    public static func allOf(_ shapes: [Shape]) -> Shape { Shape(["allOf": .array(shapes.map(\.schema))]) }
    public static func not(_ shape: Shape) -> Shape { Shape(["not": shape.schema]) }
    /// `then` must hold whenever `condition` does (and `otherwise` when it does not).
    public static func when(_ condition: Shape, then: Shape, otherwise: Shape? = nil) -> Shape {
        var k: [String: JSON] = ["if": condition.schema, "then": then.schema]
        if let otherwise { k["else"] = otherwise.schema }
        return Shape(k)
    }
}

// MARK: - Modifiers

extension Shape {
    /// As an object field: may be absent.
    public var optional: Shape { var s = self; s.isOptional = true; return s }

    /// Also accepts `null`.
    public var nullable: Shape {
        with { k in
            switch k["type"] {
            case .string(let t)?: k["type"] = [.string(t), "null"]
            case .array(let ts)? where !ts.contains("null"): k["type"] = .array(ts + ["null"])
            default: break
            }
        }
    }

    /// A type list (`["string", "integer", "null"]`) in place of one type.
    public func types(_ names: [String]) -> Shape { with { $0["type"] = .array(names.map { .string($0) }) } }

    /// What the value means, for the reader of the schema.
    public func described(_ text: String) -> Shape { with { $0["description"] = .string(text) } }

    /// The value a handler uses when the field is absent.
    public func `default`(_ value: JSON) -> Shape { with { $0["default"] = value } }

    /// The name of the setting this field's bound comes from
    /// (`max_page_size`); refusals name it, and the schema carries it as
    /// `x-quad-limit`.
    public func limit(_ name: String) -> Shape { with { $0["x-quad-limit"] = .string(name) } }

    /// Going over this field's upper bound is too_large (413), not
    /// bad_request: the bound is on how much is sent (`x-quad-over`).
    public var overIsTooLarge: Shape { with { $0["x-quad-over"] = "too_large" } }

    /// A string a request may write over several lines (`x-quad-text:
    /// lines`): line feeds and tabs pass, other controls do not (``TextRule``).
    public var lines: Shape { with { $0["x-quad-text"] = "lines" } }

    /// A string never shown to anyone (a password): any character passes
    /// (`x-quad-text: any`).
    public var secretText: Shape { with { $0["x-quad-text"] = "any" } }

    /// An amount of money: a whole number of cents (`x-quad-unit` 0.01), so
    /// 0.001 and 5e-324 are refused. Not `multipleOf`: JSON Schema divides,
    /// and 19.99 / 0.01 is 1998.9999999999998 in binary floating point, so
    /// a standard validator would refuse most prices (``Validator/isMultiple(_:of:)``).
    public var cents: Shape { with { $0["x-quad-unit"] = .double(0.01) } }

    /// The name of the setting of this field's lower bound, when it has
    /// its own (`min_password_length`): `x-quad-min-limit`.
    public func minLimit(_ name: String) -> Shape { with { $0["x-quad-min-limit"] = .string(name) } }

    /// What a value that fails this shape's `pattern` should have been, as
    /// the refusal says it: `must be one address like name@campus.edu`
    /// (`x-quad-expected`).
    public func expecting(_ text: String) -> Shape { with { $0["x-quad-expected"] = .string(text) } }

    /// `a` and `b` may not both be given.
    public func exclusive(_ a: String, _ b: String) -> Shape {
        and(Shape(["not": ["required": [.string(a), .string(b)]], "x-quad-rule": ["exclusive": [.string(a), .string(b)]]]))
    }

    /// At least one of `fields` must be given.
    public func requiresOne(of fields: [String]) -> Shape {
        and(Shape(["anyOf": .array(fields.map { ["required": [.string($0)]] }), "x-quad-rule": ["one_required": .array(fields.map { .string($0) })]]))
    }

    /// Any other JSON Schema keyword, its value a shape.
    public func keyword(_ name: String, _ shape: Shape) -> Shape { with { $0[name] = shape.schema } }
    /// Any other JSON Schema keyword, its value a list of shapes.
    public func keyword(_ name: String, _ shapes: [Shape]) -> Shape { with { $0[name] = .array(shapes.map(\.schema)) } }
    /// Any other JSON Schema keyword, its value plain JSON.
    public func keyword(_ name: String, json value: JSON) -> Shape { with { $0[name] = value } }
    /// Shared definitions (`$defs`), for `#/$defs/<name>` references.
    public func definitions(_ defs: KeyValuePairs<String, Shape>) -> Shape {
        keyword("$defs", json: .object(Dictionary(defs.map { ($0.key, $0.value.schema) }, uniquingKeysWith: { a, _ in a })))
    }
    /// These shapes must hold too (`allOf`), beside this one's own keywords.
    public func and(_ shapes: Shape...) -> Shape {
        with { k in
            let earlier = k["allOf"]?.array ?? []
            k["allOf"] = .array(earlier + shapes.map(\.schema))
        }
    }
}

extension JSON {
    /// A number as JSON: an integer when it is one.
    static func number(_ d: Double) -> JSON { d.rounded() == d && abs(d) < 1e15 ? .int(Int64(d)) : .double(d) }
}
