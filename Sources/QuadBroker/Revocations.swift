import QuadAuth
import QuadWire

/// The session tokens accounts has revoked, as the broker learns them from
/// `accounts.session.revoked` events and `accounts.revocations` answers:
/// one token by its `jti`, or every token of a user issued before an
/// instant (a password or role change). An entry is kept until its
/// `until_ms`, when every token it covers has expired anyway, and the table
/// holds at most `maxEntries` (`max_revocations`): past it the entry that
/// expires first is forgotten, and the log says so.
struct Revocations {
    struct Entry: Equatable {
        var user: String
        var jti: String?
        var beforeMs: Int64?
        var untilMs: Int64
    }

    let maxEntries: Int
    private(set) var byToken: [String: Int64] = [:]
    /// user → (tokens issued before this are revoked, until when).
    private(set) var byUser: [String: (before: Int64, until: Int64)] = [:]
    private(set) var evicted: Int64 = 0

    init(maxEntries: Int) { self.maxEntries = max(1, maxEntries) }

    var count: Int { byToken.count + byUser.count }

    /// Reads one entry of an event body or an answer, with the contract's
    /// type for both (``Contract/Accounts/Revocation``); nil for one that
    /// does not decode or says nothing usable (an empty user, or neither
    /// `jti` nor `before_ms`).
    static func entry(_ json: JSON) -> Entry? {
        // Read by field: the broker does not know the contract (accounts'
        // `Revocation` type; Tests/QuadBrokerTests/RevocationsTests.swift
        // checks this reads what that type writes). A field of the wrong
        // type makes the whole body unusable, as that type's decoding would.
        guard let user = json["user"]?.string, !user.isEmpty, let until = json["until_ms"]?.int else { return nil }
        let jtiValue = json["jti"] ?? .null, beforeValue = json["before_ms"] ?? .null
        guard jtiValue == .null || jtiValue.string != nil, beforeValue == .null || beforeValue.int != nil else { return nil }
        let jti = jtiValue.string.flatMap { $0.isEmpty ? nil : $0 }
        let before = beforeValue.int
        guard jti != nil || before != nil else { return nil }
        return Entry(user: user, jti: jti, beforeMs: before, untilMs: until)
    }

    /// Adds an entry unless it has already run out at `now` (ms since the epoch).
    mutating func add(_ e: Entry, now: Int64) {
        guard e.untilMs > now else { return }
        if let jti = e.jti { byToken[jti] = max(byToken[jti] ?? 0, e.untilMs) }
        if let before = e.beforeMs {
            let old = byUser[e.user]
            byUser[e.user] = (max(old?.before ?? .min, before), max(old?.until ?? 0, e.untilMs))
        }
        while count > maxEntries { evictFirstToExpire(now: now) }
    }

    /// Whether `claims` names a revoked token.
    func isRevoked(_ claims: TokenClaims) -> Bool {
        if !claims.tokenID.isEmpty, byToken[claims.tokenID] != nil { return true }
        if let before = byUser[claims.user]?.before, claims.issuedAt < before { return true }
        return false
    }

    /// Forgets what ran out by `now`.
    mutating func sweep(now: Int64) {
        byToken = byToken.filter { $0.value > now }
        byUser = byUser.filter { $0.value.until > now }
    }

    mutating func evictFirstToExpire(now: Int64) {
        sweep(now: now)
        guard count > maxEntries else { return }
        let token = byToken.min { $0.value < $1.value }
        let user = byUser.min { $0.value.until < $1.value.until }
        if let token, token.value <= (user?.value.until ?? .max) { byToken[token.key] = nil } else if let user { byUser[user.key] = nil }
        evicted += 1
    }
}
