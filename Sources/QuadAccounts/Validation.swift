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
    /// characters, which JSON Schema cannot refuse portably (`\p{Cc}`
    /// needs a regex dialect). The contract's `name` (1 to
    /// `max_name_length` code points, and `\S`: not all White_Space, the
    /// same property trimming uses) was checked on the untrimmed name, so
    /// the trimmed one is within the limit and not empty.
    /// Spaces around it are trimmed, not refused; a tab, a line break or any
    /// other control character, anywhere, the contract refused already
    /// (``TextRule``: every string of a request is one line).
    static func name(_ raw: String) throws(QuadError) -> String {
        let name = raw.trimmingSpaces
        guard !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .badRequest("body.name must not contain control characters")
        }
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
