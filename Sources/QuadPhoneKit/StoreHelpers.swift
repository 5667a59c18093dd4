import QuadStore
import QuadWire

/// What the phone's files are read with: the meta table's keys, counts,
/// stored JSON.
extension Database {
    package func meta(_ key: String) throws -> String? {
        try queryOne("SELECT value FROM meta WHERE key = $1", .text(key))?.optionalString("value")
    }

    package func setMeta(_ key: String, _ value: String?) throws {
        if let value {
            try execute("INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value", .text(key), .text(value))
        } else {
            try execute("DELETE FROM meta WHERE key = $1", .text(key))
        }
    }

    package func count(_ sql: String, _ params: SQLValue...) throws -> Int {
        Int(try queryOne(sql, params)?.int("n") ?? 0)
    }
}

extension JSON {
    /// Parses stored JSON text; an object when the text is not JSON.
    package static func stored(_ text: String) -> JSON {
        (try? JSON.parse(text)) ?? .object([:])
    }

    /// A copy with `key` set.
    package func setting(_ key: String, _ value: JSON) -> JSON {
        var f = object ?? [:]
        f[key] = value
        return .object(f)
    }
}
