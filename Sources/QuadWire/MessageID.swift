import Foundation

/// Time-ordered UUIDv7 ids (RFC 9562): 48 bits of Unix milliseconds, then
/// random bits. Ids that sort by time keep batched inserts into B-trees fast.
public enum MessageID {
    /// Lowercase hex digits, indexed by nibble.
    static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// One id: one `getrandom` call for the 10 random bytes (the old code made
    /// two through `SystemRandomNumberGenerator`), and the 36 characters
    /// written straight into the string's buffer (the old code built a
    /// `String` per byte and joined them, 7% of a catalog worker's profile).
    public static func make(now: UInt64 = Clock.nowMillis()) -> String {
        var bytes: (UInt64, UInt64) = (0, 0)
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            let b = raw.bindMemory(to: UInt8.self)
            for k in 0..<6 { b[k] = UInt8((now >> (8 * (5 - k))) & 0xFF) }
            fillRandom(UnsafeMutableRawBufferPointer(rebasing: raw[6..<16]))
            b[6] = 0x70 | (b[6] & 0x0F)
            b[8] = 0x80 | (b[8] & 0x3F)
            return String(unsafeUninitializedCapacity: 36) { out in
                var o = 0
                for k in 0..<16 {
                    if k == 4 || k == 6 || k == 8 || k == 10 { out[o] = UInt8(ascii: "-"); o += 1 }
                    out[o] = hexDigits[Int(b[k] >> 4)]
                    out[o + 1] = hexDigits[Int(b[k] & 0x0F)]
                    o += 2
                }
                return o
            }
        }
    }

    /// Fills `buffer` from the kernel's CSPRNG in one call (glibc's
    /// `arc4random_buf` is one `getrandom`); elsewhere from the standard
    /// library's generator.
    static func fillRandom(_ buffer: UnsafeMutableRawBufferPointer) {
        #if os(Linux)
        if let base = buffer.baseAddress { arc4random_buf(base, buffer.count); return }
        #endif
        var rng = SystemRandomNumberGenerator()
        for k in 0..<buffer.count { buffer[k] = UInt8(truncatingIfNeeded: rng.next() as UInt64) }
    }
}

public enum Clock {
    /// Milliseconds since the Unix epoch, wall clock.
    public static func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// Microseconds since the Unix epoch, wall clock: when a span started,
    /// comparable across the processes of one host.
    public static func nowMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }

    /// Monotonic milliseconds, for deadlines and timers.
    public static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// Monotonic microseconds, for latency measurement.
    public static func monotonicMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }
}
