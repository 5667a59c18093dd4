import QuadWire

/// A request body read field by field; every refusal is a 400 that names
/// the field and the rule, as `body.kind must be one of regular, accessible, ev`.
struct Body {
    let json: JSON
    let type: String

    init(_ json: JSON, type: String, allowed: [String]) throws(QuadError) {
        guard case .object(let fields) = json else { throw .badRequest("body must be a JSON object, got \(json.typeName)") }
        for key in fields.keys.sorted() where !allowed.contains(key) {
            throw .badRequest("body.\(key) is not a field of \(type)" + (allowed.isEmpty ? "" : " (fields: \(allowed.joined(separator: ", ")))"))
        }
        self.json = json
        self.type = type
    }

    func present(_ key: String) -> JSON? {
        guard let v = json[key], !v.isNull else { return nil }
        return v
    }

    func string(_ key: String, max: Int = 64) throws(QuadError) -> String? {
        guard let v = present(key) else { return nil }
        guard let s = v.string else { throw .badRequest("body.\(key) must be a string, got \(v.typeName)") }
        guard !s.isEmpty, s.unicodeScalars.count <= max else { throw .badRequest("body.\(key) must be 1 to \(max) characters") }
        return s
    }

    func requiredString(_ key: String, max: Int = 64) throws(QuadError) -> String {
        guard let s = try string(key, max: max) else { throw .badRequest("body.\(key) is required") }
        return s
    }

    func text(_ key: String, max: Int) throws(QuadError) -> String? {
        guard let v = present(key) else { return nil }
        guard let s = v.string else { throw .badRequest("body.\(key) must be a string, got \(v.typeName)") }
        guard s.unicodeScalars.count <= max else { throw .badRequest("body.\(key) is longer than \(max) characters") }
        return s
    }

    func oneOf(_ key: String, _ choices: [String]) throws(QuadError) -> String? {
        guard let s = try string(key) else { return nil }
        guard choices.contains(s) else { throw .badRequest("body.\(key) must be one of \(choices.joined(separator: ", ")), got '\(s)'") }
        return s
    }

    func int(_ key: String, in range: ClosedRange<Int64>, default d: Int64) throws(QuadError) -> Int64 {
        guard let v = present(key) else { return d }
        guard let n = v.int else { throw .badRequest("body.\(key) must be an integer, got \(v.typeName)") }
        guard range.contains(n) else { throw .badRequest("body.\(key) must be between \(range.lowerBound) and \(range.upperBound)") }
        return n
    }

    func double(_ key: String, in range: ClosedRange<Double>) throws(QuadError) -> Double {
        guard let v = present(key) else { throw .badRequest("body.\(key) is required") }
        guard let d = v.double, d.isFinite else { throw .badRequest("body.\(key) must be a number, got \(v.typeName)") }
        guard range.contains(d) else { throw .badRequest("body.\(key) must be between \(range.lowerBound) and \(range.upperBound)") }
        return d
    }

    func bool(_ key: String) throws(QuadError) -> Bool? {
        guard let v = present(key) else { return nil }
        guard let b = v.bool else { throw .badRequest("body.\(key) must be true or false, got \(v.typeName)") }
        return b
    }

    /// A moment: epoch milliseconds, an ISO 8601 date-time (campus time when
    /// it has no offset), or `HH:MM` for that time today on campus.
    func time(_ key: String, clock: CampusTime, now: Int64) throws(QuadError) -> Int64? {
        guard let v = present(key) else { return nil }
        if let s = v.string, s.utf8.count > 64 {
            throw .badRequest("body.\(key) is longer than 64 bytes: a date-time is epoch milliseconds, ISO 8601 or HH:MM")
        }
        if let ms = v.int {
            guard (0...4_102_444_800_000).contains(ms) else { throw .badRequest("body.\(key) must be epoch milliseconds before the year 2100") }
            return ms
        }
        guard let s = v.string else { throw .badRequest("body.\(key) must be epoch milliseconds or a date-time string, got \(v.typeName)") }
        guard let ms = Body.parseTime(s, clock: clock, now: now) else {
            throw .badRequest("body.\(key) must be epoch milliseconds, an ISO 8601 date-time (2025-03-03T08:30:00-05:00) or HH:MM, got '\(String(String.UnicodeScalarView(s.unicodeScalars.prefix(40))))'")
        }
        return ms
    }

    static func parseTime(_ s: String, clock: CampusTime, now: Int64) -> Int64? {
        if let m = s.wholeMatch(of: /(\d{1,2}):(\d{2})/) {
            guard let h = Int64(m.1), let min = Int64(m.2), h < 24, min < 60 else { return nil }
            return clock.midnight(now) + (h * 60 + min) * 60_000
        }
        guard let m = s.wholeMatch(of: /(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?/) else { return nil }
        guard let y = Int64(m.1), let mo = Int64(m.2), let d = Int64(m.3), let h = Int64(m.4), let mi = Int64(m.5),
              (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60 else { return nil }
        let sec = m.6.flatMap { Int64($0) } ?? 0
        guard sec < 60 else { return nil }
        var offset = clock.offsetMinutes
        if let z = m.7 {
            if z == "Z" { offset = 0 } else {
                let digits = z.dropFirst().filter(\.isNumber)
                guard let hh = Int64(digits.prefix(2)), let mm = Int64(digits.suffix(2)), hh < 24, mm < 60 else { return nil }
                offset = (z.first == "-" ? -1 : 1) * (hh * 60 + mm)
            }
        }
        let days = CampusTime.days(year: y, month: mo, day: d)
        return (days * 86_400 + h * 3600 + mi * 60 + sec) * 1000 - offset * 60_000
    }
}
