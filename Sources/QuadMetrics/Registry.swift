import Foundation

/// A process's Prometheus metrics: counters, gauges and histograms by name
/// and labels, written by the process's loop and read whole by the
/// `/metrics` thread (``MetricsServer``), under one lock.
///
/// Label values come from traffic (request types, services), so a hostile
/// client could make a new series per request: each family keeps at most
/// ``maxSeries`` (`max_metric_series`) label sets, and what comes after is
/// counted under the same labels with every value `"other"`, so totals
/// stay right and memory stays bounded.
public final class MetricsRegistry: @unchecked Sendable {
    // Shared with the HTTP thread: every field is read and written under `lock`.
    public enum Kind: String, Sendable { case counter, gauge, histogram }

    struct Series {
        var value = 0.0
        /// Histograms: per-bucket counts (not cumulative), then sum and count.
        var buckets: [Int64] = []
        var sum = 0.0
        var count: Int64 = 0
    }

    struct Family {
        let kind: Kind
        let help: String
        let buckets: [Double]
        var series: [String: Series] = [:]
        /// Label text in first-seen order, for a stable exposition.
        var order: [String] = []
    }

    let lock = NSLock()
    var families: [String: Family] = [:]
    public let maxSeries: Int

    /// The default of `max_metric_series`: label sets kept per family.
    public static let defaultMaxSeries = 500
    /// Latency buckets, in seconds: 100 µs to 10 s.
    public static let latencyBuckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    public init(maxSeries: Int = MetricsRegistry.defaultMaxSeries) {
        self.maxSeries = max(maxSeries, 1)
    }

    /// Declares a family; a name declared again keeps its first declaration.
    public func describe(_ name: String, _ kind: Kind, _ help: String, buckets: [Double] = MetricsRegistry.latencyBuckets) {
        lock.withLock {
            if families[name] == nil { families[name] = Family(kind: kind, help: help, buckets: kind == .histogram ? buckets.sorted() : []) }
        }
    }

    /// Adds `by` to a counter (or a gauge).
    public func add(_ name: String, _ labels: KeyValuePairs<String, String> = [:], by: Double = 1) {
        update(name, labels) { s, _ in s.value += by }
    }

    /// Sets a gauge.
    public func set(_ name: String, _ labels: KeyValuePairs<String, String> = [:], _ value: Double) {
        update(name, labels) { s, _ in s.value = value }
    }

    /// Sets a gauge for each of `values` (label value -> gauge value) under
    /// `label`, and drops the gauge's other series: a service that is gone
    /// is no longer reported.
    public func replace(_ name: String, label: String, _ values: [String: Double]) {
        lock.withLock {
            guard var f = families[name] else { return }
            f.series = [:]
            f.order = []
            for (v, value) in values.sorted(by: { $0.key < $1.key }) {
                let key = Self.labelText([(label, v)])
                guard f.series.count < maxSeries else { break }
                f.series[key] = Series(value: value)
                f.order.append(key)
            }
            families[name] = f
        }
    }

    /// Records one observation in a histogram.
    public func observe(_ name: String, _ labels: KeyValuePairs<String, String> = [:], _ value: Double) {
        update(name, labels) { s, bounds in
            if s.buckets.isEmpty { s.buckets = Array(repeating: 0, count: bounds.count) }
            if let i = bounds.firstIndex(where: { value <= $0 }) { s.buckets[i] += 1 }
            s.sum += value
            s.count += 1
        }
    }

    func update(_ name: String, _ labels: KeyValuePairs<String, String>, _ change: (inout Series, [Double]) -> Void) {
        lock.withLock {
            // Changed in place: a copy of the family taken out and put back
            // copied all its series on every request (copy on write).
            guard families[name] != nil else { return }
            var key = Self.labelText(labels.map { ($0.key, $0.value) })
            if families[name]!.series[key] == nil {
                if families[name]!.series.count >= maxSeries { key = Self.labelText(labels.map { ($0.key, "other") }) }
                if families[name]!.series[key] == nil { families[name]!.order.append(key) }
            }
            let bounds = families[name]!.buckets
            change(&families[name]!.series[key, default: Series()], bounds)
        }
    }

    /// `{a="x",b="y"}` with Prometheus's escapes, or "" with no labels.
    static func labelText(_ labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
    }

    static func escape(_ value: String) -> String {
        // Most values (types, services, statuses) have nothing to escape.
        if !value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") }) { return value }
        var out = ""
        for c in value.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func number(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }

    /// The text exposition format (version 0.0.4) of every family.
    public func exposition() -> String {
        let snapshot = lock.withLock { families }
        var out = ""
        for name in snapshot.keys.sorted() {
            let f = snapshot[name]!
            out += "# HELP \(name) \(f.help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n"))\n"
            out += "# TYPE \(name) \(f.kind.rawValue)\n"
            for key in f.order {
                guard let s = f.series[key] else { continue }
                switch f.kind {
                case .counter, .gauge:
                    out += "\(name)\(key) \(Self.number(s.value))\n"
                case .histogram:
                    let inner = key.isEmpty ? "" : String(key.dropFirst().dropLast()) + ","
                    var cumulative: Int64 = 0
                    for (i, bound) in f.buckets.enumerated() {
                        cumulative += i < s.buckets.count ? s.buckets[i] : 0
                        out += "\(name)_bucket{\(inner)le=\"\(Self.number(bound))\"} \(cumulative)\n"
                    }
                    out += "\(name)_bucket{\(inner)le=\"+Inf\"} \(s.count)\n"
                    out += "\(name)_sum\(key) \(Self.number(s.sum))\n"
                    out += "\(name)_count\(key) \(s.count)\n"
                }
            }
        }
        return out
    }
}
