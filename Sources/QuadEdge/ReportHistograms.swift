import QuadWire
import QuadPhone
import QuadPhoneKit

extension Report {
    /// The samples behind the report's percentiles, as counts by value
    /// (`{"ms": count}`), so that the reports of several processes merge
    /// into exact percentiles (deploy/campus): below 1,000 ms each value is
    /// its own bucket, above it is rounded up to three significant digits
    /// (at most 1% high). The same phones as the percentiles: every drain
    /// after reconnect (and its new connection's part), the feeds' event
    /// and news latencies, and each phone's sign-in before the day.
    static func histograms(_ phones: [Phone], drains: [Int64], drainsWithoutSession: [Int64], drainConnects: [Int64], signIn: [Int64]) -> JSON {
        var live: [Int64] = [], news: [Int64] = []
        for p in phones {
            guard let feed = p.live else { continue }
            live += feed.latencies
            news += p.liveStats.newsLatencies
        }
        return ["drain_after_reconnect_ms": histogram(drains), "drain_without_session_ms": histogram(drainsWithoutSession),
                "drain_connect_ms": histogram(drainConnects),
                "live_latency_ms": histogram(live), "news_latency_ms": histogram(news), "sign_in_ms": histogram(signIn)]
    }

    static func histogram(_ samples: [Int64]) -> JSON {
        var counts: [Int64: Int64] = [:]
        for v in samples { counts[bucket(v), default: 0] += 1 }
        return .object(Dictionary(uniqueKeysWithValues: counts.map { (String($0.key), JSON.int($0.value)) }))
    }

    /// `v` itself below 1,000; above, rounded up to three significant digits.
    static func bucket(_ v: Int64) -> Int64 {
        guard v >= 1_000 else { return v }
        var step: Int64 = 1
        while v / step >= 1_000 { step *= 10 }
        return (v + step - 1) / step * step
    }
}
