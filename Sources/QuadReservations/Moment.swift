import QuadWire

/// A moment of a request (`parking.schema.json#/$defs/moment`): epoch
/// milliseconds, an ISO 8601 date-time (campus time when it has no
/// offset), or `HH:MM` for that time today on campus. The validator has
/// checked its shape; what it cannot check is the date the string names.
enum Moment {
    /// The moment in `value` as epoch ms, nil when absent; a string the
    /// pattern lets through but no clock reads (an offset of +25:00) is a
    /// 400 naming `body.<field>`.
    static func read(_ value: JSON?, field: String, clock: CampusTime, now: Int64) throws(QuadError) -> Int64? {
        guard let value, !value.isNull else { return nil }
        if let ms = value.int { return ms }
        let expected = "body.\(field) must be epoch milliseconds, an ISO 8601 date-time (2025-03-03T08:30:00-05:00) or HH:MM"
        guard let s = value.string else { throw .badRequest("\(expected), got \(value.typeName)") }
        guard let ms = parse(s, clock: clock, now: now) else {
            throw .badRequest("\(expected), got '\(String(String.UnicodeScalarView(s.unicodeScalars.prefix(40))))'")
        }
        return ms
    }

    static func parse(_ s: String, clock: CampusTime, now: Int64) -> Int64? {
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
