import QuadWire

/// Counters and latency percentiles a worker reports in `sys.metrics`.
public final class Metrics {
    public private(set) var served: Int64 = 0
    public private(set) var errorsByCode: [String: Int64] = [:]
    var latencies: [Int64] = []
    var next = 0
    let window = 2048
    let started = Clock.monotonicMillis()

    public init() {}

    public func record(micros: Int64, errorCode: String?) {
        served += 1
        if let errorCode { errorsByCode[errorCode, default: 0] += 1 }
        if latencies.count < window { latencies.append(micros) } else {
            latencies[next] = micros
            next = (next + 1) % window
        }
    }

    /// The q-quantile (0...1) of the recent latencies, in microseconds.
    public func percentile(_ q: Double) -> Int64 {
        guard !latencies.isEmpty else { return 0 }
        let sorted = latencies.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q + 0.5))]
    }

    public var json: JSON {
        [
            "served": .int(served),
            "errors": .object(errorsByCode.mapValues { .int($0) }),
            "latency_us": ["p50": .int(percentile(0.5)), "p99": .int(percentile(0.99)), "window": .int(Int64(latencies.count))],
            "uptime_ms": .int(Clock.monotonicMillis() - started),
        ]
    }
}
