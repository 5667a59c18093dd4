import QuadStore
import QuadWire

/// Failed password checks by key (an account's email, a client, a signed-in
/// user guessing its current password), kept in accounts' store
/// (`login_failures`), so every worker of accounts counts the same failures:
/// with N workers a guesser gets the guesses one worker would allow, not N
/// times as many. After `login_free_failures` failures each further one makes
/// the key wait, `baseDelayMs` doubled per failure up to the key's cap
/// (`login_account_max_delay_ms`, `login_client_max_delay_ms`). A key forgets
/// its failures `forgetAfterMs` after its last one, or on a right password.
///
/// An attempt counts as a failure before its password is checked, in one
/// statement per key that also refuses a key still waiting: two workers
/// checking guesses at once each see the other's, so nothing is checked
/// that one worker alone would have refused. A right password takes its
/// attempt back (``succeeded(_:forgetting:)``), and so does an attempt that
/// checked nothing (``withdraw(_:)``, a 429 of the hash budget).
///
/// Bounded: at most `maxEntries` keys of each kind. Past it, the forgotten
/// go first, then the key whose last failure is oldest, so a flood of
/// made-up keys can push an entry out only by costing one (hashed) check
/// per entry, at the pace the hash budget allows.
struct LoginThrottle {
    /// What is counted: its row, its cap, and how a refusal names it.
    struct Key: Equatable {
        var key: String
        var kind: String
        var maxDelayMs: Int64
        var who: String
        var limit: String
    }

    /// One attempt's counts, to take back.
    struct Ticket {
        /// Each key counted, with the block this attempt set on it.
        var keys: [(key: Key, blockedUntil: Int64)]
        var now: Int64
    }

    static let migration = Migration(4, """
        CREATE TABLE login_failures (
            key TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            failures BIGINT NOT NULL,
            last_ms BIGINT NOT NULL,
            blocked_until_ms BIGINT NOT NULL
        );
        CREATE INDEX login_failures_kind ON login_failures (kind, last_ms);
        """)

    let db: Database
    let limits: Accounts.Settings.Limits

    func account(_ email: String) -> Key {
        Key(key: "account:" + email, kind: "account", maxDelayMs: limits.accountMaxDelayMs, who: "this account", limit: "login_account_max_delay_ms")
    }

    func client(_ caller: String) -> Key {
        Key(key: "client:" + caller, kind: "client", maxDelayMs: limits.clientMaxDelayMs, who: "this client", limit: "login_client_max_delay_ms")
    }

    /// A signed-in user's guesses at its current password (a stolen token's).
    func currentPassword(_ user: String) -> Key {
        Key(key: "user:" + user, kind: "account", maxDelayMs: limits.accountMaxDelayMs, who: "this account's current_password",
            limit: "login_account_max_delay_ms")
    }

    /// The wait after `failures` failures.
    func delay(_ failures: Int64, cap: Int64) -> Int64 {
        let over = failures - Int64(limits.freeFailures)
        return over <= 0 ? 0 : min(cap, limits.baseDelayMs << min(over - 1, 40))
    }

    /// Counts an attempt against every key, in order, before its password
    /// is checked; a 429 naming the first key still waiting, and then none
    /// is counted.
    func attempt(_ keys: [Key], now: Int64 = Int64(Clock.nowMillis())) throws -> Ticket {
        try db.transaction {
            var counted: [(key: Key, blockedUntil: Int64)] = []
            for k in keys {
                guard let failures = try db.queryOne("""
                    INSERT INTO login_failures (key, kind, failures, last_ms, blocked_until_ms) VALUES ($1, $2, 1, $3, $3)
                    ON CONFLICT (key) DO UPDATE SET
                        failures = CASE WHEN $3 - login_failures.last_ms >= $4 THEN 1 ELSE login_failures.failures + 1 END,
                        last_ms = $3
                    WHERE login_failures.blocked_until_ms <= $3
                    RETURNING failures
                    """, .text(k.key), .text(k.kind), .int(now), .int(limits.forgetAfterMs))?.int("failures") else {
                    let until = try db.queryOne("SELECT blocked_until_ms FROM login_failures WHERE key = $1", .text(k.key))?.int("blocked_until_ms") ?? now + 1
                    // Thrown inside the transaction: the keys counted before it are not.
                    throw Accounts.throttled(k.who, wait: max(1, until - now), limit: k.limit)
                }
                let until = now + delay(failures, cap: k.maxDelayMs)
                try db.execute("UPDATE login_failures SET blocked_until_ms = $2 WHERE key = $1", .text(k.key), .int(until))
                counted.append((k, until))
                if failures == 1 { try bound(k.kind, now: now) }
            }
            return Ticket(keys: counted, now: now)
        }
    }

    /// The password was right: the keys in `forgetting` forget their
    /// failures; the others get this attempt back (a client that signs in
    /// keeps its earlier failures: one success must not buy a
    /// credential-stuffing client a fresh budget for other accounts).
    func succeeded(_ t: Ticket, forgetting: [Key]) {
        let forget = Set(forgetting.map(\.key))
        takeBack(Ticket(keys: t.keys.filter { !forget.contains($0.key.key) }, now: t.now), forgetting: forget)
    }

    /// Nothing was checked: every count back.
    func withdraw(_ t: Ticket) { takeBack(t, forgetting: []) }

    private func takeBack(_ t: Ticket, forgetting: Set<String>) {
        // Best effort: a store that fails here leaves one failure counted
        // too many, which the key forgets with the rest.
        try? db.transaction {
            for key in forgetting { try db.execute("DELETE FROM login_failures WHERE key = $1", .text(key)) }
            for (k, until) in t.keys {
                // The count goes back; the block this attempt set ends
                // (the one before it had, or it could not have been
                // counted), unless a later attempt set another.
                try db.execute("UPDATE login_failures SET failures = failures - 1 WHERE key = $1 AND failures > 0", .text(k.key))
                try db.execute("UPDATE login_failures SET blocked_until_ms = $2 WHERE key = $1 AND blocked_until_ms = $3",
                               .text(k.key), .int(t.now), .int(until))
            }
        }
    }

    /// Keeps at most `maxEntries` keys of `kind`.
    private func bound(_ kind: String, now: Int64) throws {
        let count = try db.queryOne("SELECT COUNT(*) AS n FROM login_failures WHERE kind = $1", .text(kind))?.int("n") ?? 0
        guard count > limits.maxEntries else { return }
        try db.execute("DELETE FROM login_failures WHERE kind = $1 AND last_ms <= $2 AND blocked_until_ms <= $3",
                       .text(kind), .int(now - limits.forgetAfterMs), .int(now))
        let left = try db.queryOne("SELECT COUNT(*) AS n FROM login_failures WHERE kind = $1", .text(kind))?.int("n") ?? 0
        guard left > limits.maxEntries else { return }
        try db.execute("""
            DELETE FROM login_failures WHERE key IN (SELECT key FROM login_failures WHERE kind = $1 ORDER BY last_ms, key LIMIT $2)
            """, .text(kind), .int(left - Int64(limits.maxEntries)))
    }

    /// Forgets keys past their memory.
    static func prune(_ db: Database, limits: Accounts.Settings.Limits, now: Int64 = Int64(Clock.nowMillis())) throws {
        try db.execute("DELETE FROM login_failures WHERE last_ms <= $1 AND blocked_until_ms <= $2", .int(now - limits.forgetAfterMs), .int(now))
    }
}

/// The time a worker may spend hashing passwords: a bucket of milliseconds
/// that refills at `msPerSecond` per second up to two seconds' worth. A
/// hash starts only while the bucket is not empty and is charged what it
/// took; past that, callers get 429, so a flood of logins (from made-up
/// clients, against made-up emails) is answered at once instead of queuing
/// 64 MiB hashes behind each other. One worker hashes one password at a
/// time (its only loop runs the handler to completion), so the memory a
/// worker's hashing takes is one hash's (`MEMLIMIT`, 64 MiB for interactive).
final class HashBudget {
    let msPerSecond: Int64
    private var micros: Int64
    private var lastMicros: Int64

    init(msPerSecond: Int64, now: Int64 = Clock.monotonicMicros()) {
        self.msPerSecond = msPerSecond
        micros = 2 * msPerSecond * 1000
        lastMicros = now
    }

    var capacityMicros: Int64 { 2 * msPerSecond * 1000 }

    /// nil when a hash may start now; otherwise the milliseconds until one may.
    func wait(now: Int64 = Clock.monotonicMicros()) -> Int64? {
        refill(now)
        guard micros <= 0 else { return nil }
        return max(1, (-micros + 1000) / max(1, msPerSecond))
    }

    /// Runs `hash` if the budget allows, charging its time; 429 otherwise.
    func spend<T>(_ what: String, _ hash: () throws -> T) throws -> T {
        if let retry = wait() {
            throw QuadError.tooManyRequests("too many password hashes on this worker (hash_ms_per_second \(msPerSecond)): retry \(what) in \(retry) ms",
                                            details: ["retry_after_ms": .int(retry), "limit": "hash_ms_per_second"])
        }
        let started = Clock.monotonicMicros()
        defer { micros -= Clock.monotonicMicros() - started }
        return try hash()
    }

    private func refill(_ now: Int64) {
        micros = min(capacityMicros, micros + (now - lastMicros) * msPerSecond / 1000)
        lastMicros = now
    }
}
