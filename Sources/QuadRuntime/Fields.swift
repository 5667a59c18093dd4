import QuadWire

/// A request body read field by field. Every refusal names the field and
/// its limit; a field the request does not define is refused too, and
/// `user` with 403: these requests act on the signed-in user only.
public struct Fields {
    public let values: [String: JSON]

    public init(_ req: Request, allowed: Set<String>) throws(QuadError) {
        let type = req.envelope.type
        guard case .object(let f) = req.body else { throw .badRequest("body must be an object, got \(req.body.typeName)") }
        for key in f.keys.sorted() where !allowed.contains(key) {
            if key == "user" { throw .forbidden("\(type) acts on the signed-in user only: body.user cannot name a user") }
            throw .badRequest("body.\(key) is not a field of \(type)" + (allowed.isEmpty ? "" : ": expected \(allowed.sorted().joined(separator: ", "))"))
        }
        values = f
    }

    /// Lengths count Unicode scalars, never grapheme clusters
    /// (`String.count`): one letter followed by a megabyte of combining
    /// marks is one cluster, and would pass any limit.
    public func string(_ key: String, max: Int = 64) throws(QuadError) -> String {
        guard let value = values[key], !value.isNull else { throw .badRequest("body.\(key) is required") }
        guard let s = value.string else { throw .badRequest("body.\(key) must be a string, got \(value.typeName)") }
        guard !s.isEmpty, s.unicodeScalars.count <= max else { throw .badRequest("body.\(key) must be 1 to \(max) characters") }
        return s
    }

    public func optionalString(_ key: String, max: Int = 64) throws(QuadError) -> String? {
        guard let value = values[key], !value.isNull else { return nil }
        guard let s = value.string else { throw .badRequest("body.\(key) must be a string, got \(value.typeName)") }
        guard !s.isEmpty, s.unicodeScalars.count <= max else { throw .badRequest("body.\(key) must be 1 to \(max) characters") }
        return s
    }

    /// One of `choices`, or `d` when absent.
    public func choice(_ key: String, _ choices: [String], default d: String?) throws(QuadError) -> String {
        guard let s = try optionalString(key, max: 32) ?? d else {
            throw .badRequest("body.\(key) is required: one of \(choices.joined(separator: ", "))")
        }
        guard choices.contains(s) else { throw .badRequest("body.\(key) must be one of \(choices.joined(separator: ", ")), got '\(s)'") }
        return s
    }

    public func has(_ key: String) -> Bool { values[key].map { !$0.isNull } ?? false }

    public func int(_ key: String, default d: Int64, in range: ClosedRange<Int64>, limit: String? = nil) throws(QuadError) -> Int64 {
        guard let value = values[key], !value.isNull else { return d }
        guard let n = value.int else { throw .badRequest("body.\(key) must be an integer, got \(value.typeName)") }
        guard range.contains(n) else {
            throw .badRequest("body.\(key) must be between \(range.lowerBound) and \(range.upperBound)" + (limit.map { " (\($0))" } ?? ""))
        }
        return n
    }
}
