import QuadContract
import QuadMetrics
import QuadWire

/// Counters and latency percentiles a worker reports in `sys.metrics`.
public final class Metrics {
    public private(set) var served: Int64 = 0
    public private(set) var errorsByCode: [String: Int64] = [:]
    var latencies: [Int64] = []
    var next = 0
    let window = 2048
    let started = Clock.monotonicMillis()
    /// A handler, or a continuation of one (a reply to a call it made),
    /// that holds the worker's loop longer than this is counted as slow
    /// (`slow_handler_ms`): while it runs, nothing else is served and no
    /// heartbeat goes out.
    public var slowHandlerMs: Int64 = 100
    public private(set) var slow: Int64 = 0
    public private(set) var slowestType: String?
    public private(set) var slowestMicros: Int64 = 0

    /// The same figures, and the worker's gauges, for Prometheus
    /// (`--metrics HOST:PORT` serves them at `/metrics`).
    public let registry = MetricsRegistry()
    /// The `service` label of every series.
    var service = ""
    /// Whether `/metrics` is served: the registry is only written then, so
    /// a worker without `--metrics` pays nothing per request.
    public var exported = false

    public init(service: String = "") {
        self.service = service
        registry.describe("quad_requests_total", .counter, "Requests answered by this worker, by type and status (an unknown type counts as 'other').")
        registry.describe("quad_request_duration_seconds", .histogram, "Time from a request's arrival at this worker to its answer, by type.")
        registry.describe("quad_slow_handlers_total", .counter, "Handler runs that held the worker's loop longer than slow_handler_ms.")
        registry.describe("quad_outbox_backlog", .gauge, "Events in this service's outbox not yet published.")
        registry.describe("quad_event_lag", .gauge, "Events of a source seen by this worker but not applied yet (a gap waits for catch-up).")
        registry.describe("quad_events_applied_total", .counter, "Events of other services this worker applied.")
        registry.describe("quad_events_missed_total", .counter, "Events a source pruned before this worker applied them.")
        registry.describe("quad_store_errors_total", .counter, "Requests answered 503 because the store failed (connection, full, locked).")
        registry.describe("quad_store_reconnects_total", .counter, "Sessions opened again after the store's server went away.")
        registry.describe("quad_calls_in_flight", .gauge, "Calls this worker made to other services and waits for.")
        registry.describe("quad_broker_reconnects_total", .counter, "Times this worker connected again to a broker that went silent.")
        registry.describe("quad_uptime_seconds", .gauge, "Seconds since this worker started.")
    }

    /// Counts one run of the loop's work for `type` that took `micros`;
    /// a slow one is logged too, so it is never silent.
    public func ran(_ type: String, micros: Int64, src: String) {
        guard micros > slowHandlerMs * 1000 else { return }
        slow += 1
        if exported { registry.add("quad_slow_handlers_total", ["service": service]) }
        if micros > slowestMicros {
            slowestMicros = micros
            slowestType = type
        }
        Log.line(["src": src, "level": "info", "msg": "slow handler: \(type) held the loop \(micros / 1000) ms, over slow_handler_ms=\(slowHandlerMs)",
                  "type": type, "us": micros])
    }

    /// Counts one answer; `type` is the label it is counted under (the
    /// request's type when the worker answers it, else "other": a label
    /// per unknown type would let any client grow the series).
    public func record(micros: Int64, errorCode: QuadError.Code?, type: String = "other", status: Int = 200) {
        served += 1
        if let errorCode { errorsByCode[errorCode.wire, default: 0] += 1 }
        if latencies.count < window { latencies.append(micros) } else {
            latencies[next] = micros
            next = (next + 1) % window
        }
        guard exported else { return }
        registry.add("quad_requests_total", ["service": service, "type": type, "status": String(status)])
        registry.observe("quad_request_duration_seconds", ["service": service, "type": type], Double(micros) / 1_000_000)
        if errorCode == .unavailable, status == 503 { registry.add("quad_store_errors_total", ["service": service]) }
    }

    /// The q-quantile (0...1) of the recent latencies, in microseconds.
    public func percentile(_ q: Double) -> Int64 {
        guard !latencies.isEmpty else { return 0 }
        let sorted = latencies.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q + 0.5))]
    }

    /// The counters as sys.metrics answers them (its instance left to the handler).
    var reply: Contract.Common.Metrics {
        var m = Contract.Common.Metrics()
        m.served = served
        m.errors = errorsByCode
        m.latency = .init(p50: percentile(0.5), p99: percentile(0.99), window: Int64(latencies.count))
        m.uptimeMs = Clock.monotonicMillis() - started
        m.slowHandlers = .init(count: slow, slowestType: slowestType, maxUs: slowestMicros, thresholdMs: slowHandlerMs)
        return m
    }

    public var json: JSON {
        [
            "served": .int(served),
            "errors": .object(errorsByCode.mapValues { .int($0) }),
            "latency_us": ["p50": .int(percentile(0.5)), "p99": .int(percentile(0.99)), "window": .int(Int64(latencies.count))],
            "uptime_ms": .int(Clock.monotonicMillis() - started),
            "slow_handlers": [
                "count": .int(slow), "slowest_type": slowestType.map(JSON.string) ?? .null, "max_us": .int(slowestMicros),
                "threshold_ms": .int(slowHandlerMs),
            ],
        ]
    }
}
