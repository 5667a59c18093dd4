import QuadWire

/// Token buckets by key (a user, a client key, a connection, an address, a phone): each holds up to
/// `burst` tokens and refills at `perSecond`; a request takes one. A bucket
/// that has refilled to the brim is the same as no bucket, so those are
/// dropped on ``sweep(now:)`` and memory follows the senders of the last
/// few seconds, not every sender ever seen.
struct RateLimiter {
    struct Bucket {
        var tokens: Double
        var at: Int64
    }

    let perSecond: Double
    let burst: Double
    /// Most buckets kept (`max_rate_buckets`); past it the full ones go, and
    /// if that is not enough, all of them (everyone starts a fresh burst).
    let maxBuckets: Int
    private(set) var buckets: [String: Bucket] = [:]

    init(perSecond: Double, burst: Double, maxBuckets: Int = 100_000) {
        self.perSecond = perSecond
        self.burst = max(1, burst)
        self.maxBuckets = maxBuckets
    }

    /// Off when the rate is 0.
    var isOn: Bool { perSecond > 0 }

    /// Takes a token from the bucket of `key` at `now` (ms): nil when taken,
    /// else the milliseconds until one will be there.
    mutating func take(_ key: String, now: Int64) -> Int64? {
        guard isOn else { return nil }
        var bucket = buckets[key] ?? Bucket(tokens: burst, at: now)
        bucket.tokens = min(burst, bucket.tokens + Double(max(0, now - bucket.at)) * perSecond / 1000)
        bucket.at = now
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
            if buckets[key] == nil && buckets.count >= maxBuckets {
                sweep(now: now)
                if buckets.count >= maxBuckets { buckets.removeAll(keepingCapacity: true) }
            }
            buckets[key] = bucket
            return nil
        }
        buckets[key] = bucket
        return max(1, Int64(((1 - bucket.tokens) * 1000 / perSecond).rounded(.up)))
    }

    /// Drops the buckets that are full again.
    mutating func sweep(now: Int64) {
        buckets = buckets.filter { $0.value.tokens + Double(max(0, now - $0.value.at)) * perSecond / 1000 < burst }
    }

    /// The 429 for a request refused by the bucket of `who`.
    func refusal(_ who: String, scope: String, retryAfterMs: Int64, names: String = "rate_per_second, rate_burst") -> QuadError {
        let rate = perSecond == perSecond.rounded() ? String(Int64(perSecond)) : String(perSecond)
        return .tooManyRequests(
            "too many requests \(who): the limit is \(rate) per second with bursts of \(Int64(burst)) (\(names)); retry in \(retryAfterMs) ms",
            details: [
                "retry_after_ms": .int(retryAfterMs), "limit": .string(String(names.prefix { $0 != "," })), "scope": .string(scope),
                "rate_per_second": .double(perSecond), "rate_burst": .int(Int64(burst)),
            ])
    }
}
