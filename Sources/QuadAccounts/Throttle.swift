import QuadWire

/// Failed logins by key (an account's email, or a client): after
/// `freeFailures` failures each further one makes the key wait, `baseDelayMs`
/// doubled per failure up to `maxDelayMs`. A key forgets its failures
/// `forgetAfterMs` after its last one, or on a successful login.
///
/// Bounded: at most `maxEntries` keys. When full, the key whose last failure
/// is oldest goes first, so a flood of made-up keys can push out an entry
/// only by costing one failed (hashed) login per entry, at the pace the hash
/// budget allows. Not thread-safe: one worker loop owns it.
final class FailureThrottle {
    struct Entry {
        var failures: Int
        var lastFailureMs: Int64
        var blockedUntilMs: Int64
    }

    let freeFailures: Int
    let baseDelayMs: Int64
    let maxDelayMs: Int64
    let forgetAfterMs: Int64
    let maxEntries: Int
    private(set) var entries: [String: Entry] = [:]

    init(freeFailures: Int, baseDelayMs: Int64, maxDelayMs: Int64, forgetAfterMs: Int64, maxEntries: Int) {
        self.freeFailures = freeFailures
        self.baseDelayMs = baseDelayMs
        self.maxDelayMs = maxDelayMs
        self.forgetAfterMs = forgetAfterMs
        self.maxEntries = maxEntries
    }

    /// Milliseconds `key` must still wait at `now`, or nil when it may try.
    func wait(_ key: String, now: Int64) -> Int64? {
        guard let e = entries[key] else { return nil }
        if now - e.lastFailureMs >= forgetAfterMs && now >= e.blockedUntilMs {
            entries[key] = nil
            return nil
        }
        return e.blockedUntilMs > now ? e.blockedUntilMs - now : nil
    }

    /// Counts a failure of `key`; returns the delay it now has (0 while free).
    @discardableResult
    func fail(_ key: String, now: Int64) -> Int64 {
        var e = entries[key] ?? Entry(failures: 0, lastFailureMs: now, blockedUntilMs: 0)
        if entries[key] == nil && entries.count >= maxEntries { evict(now: now) }
        if now - e.lastFailureMs >= forgetAfterMs { e.failures = 0 }
        e.failures += 1
        e.lastFailureMs = now
        let over = e.failures - freeFailures
        let delay = over <= 0 ? 0 : min(maxDelayMs, baseDelayMs << Int64(min(over - 1, 40)))
        e.blockedUntilMs = now + delay
        entries[key] = e
        return delay
    }

    func succeed(_ key: String) { entries[key] = nil }

    /// Drops forgotten entries; if none was, the oldest one.
    func evict(now: Int64) {
        let before = entries.count
        entries = entries.filter { now - $0.value.lastFailureMs < forgetAfterMs || now < $0.value.blockedUntilMs }
        guard entries.count == before, let oldest = entries.min(by: { $0.value.lastFailureMs < $1.value.lastFailureMs }) else { return }
        entries[oldest.key] = nil
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
