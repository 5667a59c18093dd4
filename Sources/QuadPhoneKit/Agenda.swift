import QuadWire

/// Exponential backoff with full jitter and a cap: the n-th retry waits a
/// random time between half and all of `min(cap, base * 2^n)`, so phones
/// that lost the network together do not all come back in the same
/// millisecond.
package struct Backoff: Sendable {
    var baseMs: Int64 = 250
    var capMs: Int64 = 8_000

    package init(baseMs: Int64 = 250, capMs: Int64 = 8_000) {
        self.baseMs = baseMs
        self.capMs = capMs
    }

    /// `min(cap, base * 2^attempt)`: the most the attempt waits.
    package func ceilingMs(attempt: Int) -> Int64 {
        min(capMs, baseMs << Int64(min(max(0, attempt), 20)))
    }

    package func delay<R: RandomNumberGenerator>(attempt: Int, using rng: inout R) -> Int64 {
        let exp = ceilingMs(attempt: attempt)
        return Int64.random(in: (exp / 2)...max(exp / 2, exp), using: &rng)
    }
}

/// A small seeded generator (SplitMix64), so a campus day with the same seed
/// makes the same choices.
package struct SeededRandom: RandomNumberGenerator, Sendable {
    var state: UInt64

    package init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
