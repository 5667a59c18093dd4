import Foundation

/// Time-ordered UUIDv7 ids (RFC 9562): 48 bits of Unix milliseconds, then
/// random bits. Ids that sort by time keep batched inserts into B-trees fast.
public enum MessageID {
    public static func make(now: UInt64 = Clock.nowMillis()) -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        var rng = SystemRandomNumberGenerator()
        let r1 = rng.next() as UInt64
        let r2 = rng.next() as UInt64
        for k in 0..<6 { bytes[k] = UInt8((now >> (8 * (5 - k))) & 0xFF) }
        for k in 6..<16 { bytes[k] = UInt8(((k < 11 ? r1 : r2) >> (8 * (k % 8))) & 0xFF) }
        bytes[6] = 0x70 | (bytes[6] & 0x0F)
        bytes[8] = 0x80 | (bytes[8] & 0x3F)
        let hex = bytes.map { b -> String in
            let s = String(b, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined()
        let h = Array(hex)
        return String(h[0..<8]) + "-" + String(h[8..<12]) + "-" + String(h[12..<16]) + "-" + String(h[16..<20]) + "-" + String(h[20..<32])
    }
}

public enum Clock {
    /// Milliseconds since the Unix epoch, wall clock.
    public static func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
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
