import QuadWire

/// The checks on what clients send accounts. Each failure is a 400 naming
/// the field and its limit.
enum Validation {
    /// The fields a body may have; any other is refused by name.
    static func onlyFields(_ body: JSON, _ allowed: [String], type: String) throws(QuadError) {
        guard case .object(let fields) = body else { throw .badRequest("the body of \(type) must be a JSON object, got \(body.typeName)") }
        for key in fields.keys.sorted() where !allowed.contains(key) {
            if key == "email" || key == "role" { throw .badRequest("body.\(key) cannot be changed with \(type)") }
            throw .badRequest("body.\(key) is not a field of \(type) (expected \(allowed.joined(separator: ", ")))")
        }
    }

    static func string(_ body: JSON, _ key: String) throws(QuadError) -> String? {
        guard let value = body[key], !value.isNull else { return nil }
        guard let s = value.string else { throw .badRequest("body.\(key) must be a string, got \(value.typeName)") }
        return s
    }

    static func required<T>(_ value: T?, _ key: String) throws(QuadError) -> T {
        guard let value else { throw .badRequest("body.\(key) is required") }
        return value
    }

    /// A lowercased address `local@domain`: one `@`, a local part of at most
    /// 64 characters from RFC 5322's atom set with single inner dots, a
    /// domain of two or more DNS labels; at most 254 characters in all.
    static func email(_ raw: String) throws(QuadError) -> String {
        let limit = Accounts.maxEmailLength
        guard raw.utf8.count <= limit else { throw .badRequest("body.email is longer than \(limit) characters (max_email_length)") }
        let email = raw.lowercased()
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw .badRequest("body.email must be one address like name@campus.edu, got '\(raw)'")
        }
        let local = parts[0], domain = parts[1]
        guard local.utf8.count <= Accounts.maxEmailLocalLength else {
            throw .badRequest("body.email: the part before '@' is longer than \(Accounts.maxEmailLocalLength) characters")
        }
        let atom = Set("abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~-".utf8)
        let localOK = local.utf8.allSatisfy { atom.contains($0) || $0 == UInt8(ascii: ".") }
            && !local.hasPrefix(".") && !local.hasSuffix(".") && !local.contains("..")
        guard localOK else { throw .badRequest("body.email: the part before '@' has a character an address cannot have, got '\(raw)'") }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        let label = Set("abcdefghijklmnopqrstuvwxyz0123456789-".utf8)
        let domainOK = labels.count >= 2 && labels.allSatisfy { l in
            (1...63).contains(l.utf8.count) && l.utf8.allSatisfy { label.contains($0) } && !l.hasPrefix("-") && !l.hasSuffix("-")
        }
        guard domainOK else { throw .badRequest("body.email: the domain must be like campus.edu (letters, digits, '-', dots between), got '\(domain)'") }
        return email
    }

    static func password(_ password: String, key: String = "password") throws(QuadError) -> String {
        let (min, max) = (Accounts.minPasswordLength, Accounts.maxPasswordLength)
        // Counted in Unicode code points, as JSON Schema's minLength/maxLength count.
        let length = password.unicodeScalars.count
        guard length >= min else { throw .badRequest("body.\(key) must be at least \(min) characters (min_password_length)") }
        guard length <= max else { throw .badRequest("body.\(key) must be at most \(max) characters (max_password_length)") }
        return password
    }

    static func name(_ raw: String) throws(QuadError) -> String {
        let name = raw.trimmingSpaces
        guard !name.isEmpty else { throw .badRequest("body.name must not be empty") }
        guard name.unicodeScalars.count <= Accounts.maxNameLength else { throw .badRequest("body.name is longer than \(Accounts.maxNameLength) characters (max_name_length)") }
        guard !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .badRequest("body.name must not contain control characters")
        }
        return name
    }

    static func semester(_ body: JSON) throws(QuadError) -> Int64? {
        guard let value = body["semester"], !value.isNull else { return nil }
        let range = Accounts.semesters
        guard let n = value.int, range.contains(n) else {
            throw .badRequest("body.semester must be an integer from \(range.lowerBound) to \(range.upperBound) (the semester of study), got \(value.text)")
        }
        return n
    }

    static func categories(_ body: JSON) throws(QuadError) -> [String]? {
        guard let value = body["categories"], !value.isNull else { return nil }
        guard let items = value.array else { throw .badRequest("body.categories must be an array of category names, got \(value.typeName)") }
        var seen: [String] = []
        for item in items {
            guard let c = item.string, Accounts.categories.contains(c) else {
                throw .badRequest("body.categories: unknown category \(item.text): expected some of \(Accounts.categories.joined(separator: ", "))")
            }
            guard !seen.contains(c) else { throw .badRequest("body.categories lists '\(c)' twice") }
            seen.append(c)
        }
        return seen
    }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}
