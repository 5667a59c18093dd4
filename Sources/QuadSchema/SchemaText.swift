import QuadWire

/// Writes a schema as the text `protos/` keeps: two-space indent, the
/// keywords a reader looks for first (`$id`, `title`, `type`, `properties`)
/// first, short values on one line. The same value always gives the same
/// text, so a test can compare files byte for byte.
package enum SchemaText {
    static let firstKeys = [
        "$schema", "$id", "title", "description", "x-quad-kind", "x-quad-auth", "x-quad-audience", "x-quad-limit", "x-quad-min-limit", "x-quad-over", "x-quad-expected", "x-quad-rule", "type", "$ref", "const", "enum",
        "minimum", "maximum", "minLength", "maxLength", "pattern", "format", "default", "items", "minItems", "maxItems", "properties",
        "required", "additionalProperties",
    ]
    static let rank: [String: Int] = Dictionary(uniqueKeysWithValues: firstKeys.enumerated().map { ($1, $0) })
    static let width = 110

    static func orderedKeys(_ fields: [String: JSON], schemaKeys: Bool) -> [String] {
        guard schemaKeys else { return fields.keys.sorted() }
        return fields.keys.sorted { a, b in
            let ra = rank[a] ?? Int.max, rb = rank[b] ?? Int.max
            return ra != rb ? ra < rb : a < b
        }
    }

    /// `schemaKeys`: this object is a schema (order its keywords), not a
    /// `properties` map or a value.
    package static func render(_ value: JSON, indent: Int = 0, schemaKeys: Bool = true) -> String {
        let flat = compact(value, schemaKeys: schemaKeys)
        if flat.count + indent <= width { return flat }
        let pad = String(repeating: "  ", count: indent + 1)
        let close = String(repeating: "  ", count: indent)
        switch value {
        case .array(let items):
            return "[\n" + items.map { pad + render($0, indent: indent + 1, schemaKeys: schemaKeys) }.joined(separator: ",\n") + "\n\(close)]"
        case .object(let fields):
            let lines = orderedKeys(fields, schemaKeys: schemaKeys).map { key -> String in
                let child = childIsSchema(key: key, parentIsSchema: schemaKeys)
                return pad + string(key) + ": " + render(fields[key]!, indent: indent + 1, schemaKeys: child)
            }
            return "{\n" + lines.joined(separator: ",\n") + "\n\(close)}"
        default:
            return flat
        }
    }

    /// `properties` and `$defs` hold maps of schemas; `const`, `enum`,
    /// `default` hold values; anything else in a schema holds schemas.
    static func childIsSchema(key: String, parentIsSchema: Bool) -> Bool {
        guard parentIsSchema else { return true }
        return !["const", "enum", "default", "examples", "required"].contains(key)
    }

    static func compact(_ value: JSON, schemaKeys: Bool) -> String {
        switch value {
        case .array(let items): return "[" + items.map { compact($0, schemaKeys: schemaKeys) }.joined(separator: ", ") + "]"
        case .object(let fields):
            return "{" + orderedKeys(fields, schemaKeys: schemaKeys).map { key in
                string(key) + ": " + compact(fields[key]!, schemaKeys: childIsSchema(key: key, parentIsSchema: schemaKeys))
            }.joined(separator: ", ") + "}"
        default: return value.text
        }
    }

    static func string(_ s: String) -> String { JSON.string(s).text }
}
