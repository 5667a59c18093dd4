import QuadContract
import QuadWire

/// What accounts checks beyond the contract. A request's types, lengths
/// and patterns (the email's form and `max_email_length`, the password's
/// `min_password_length` and `max_password_length`, the name's
/// `max_name_length`, the semester, the categories) are the contract's,
/// checked before a handler runs; these are the rules JSON Schema cannot
/// say, each failure a 400 naming the field.
enum Validation {
    /// A display name as it is stored: trimmed of spaces, without control
    /// characters. The contract's `name` (1 to `max_name_length` code
    /// points, not blank) has been checked on the untrimmed name, so the
    /// trimmed one is within the limit too. Control characters are refused
    /// before trimming: a name of one vertical tab is not blank to the
    /// contract's `\S` and would trim to nothing.
    static func name(_ raw: String, field: String = "body.name") throws(QuadError) -> String {
        guard !raw.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .badRequest("\(field) must not contain control characters")
        }
        let name = raw.trimmingSpaces
        guard !name.isEmpty else { throw .badRequest("\(field) must not be empty") }
        return name
    }

    /// A value given outside a request (a command-line flag) checked as the
    /// contract checks the same field of a request: `definition` is one of
    /// `accounts/profile.schema.json`'s (`email`, `password`), `field` what
    /// the refusal calls it.
    static func flag(_ value: String, _ definition: String, field: String) throws(QuadError) -> String {
        if let failure = Validator.contract.failure(of: .string(value), against: .ref("#/$defs/\(definition)"),
                                                    in: Contract.Accounts.profileSchema.path, at: field) {
            throw .badRequest(failure.message)
        }
        return value
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
