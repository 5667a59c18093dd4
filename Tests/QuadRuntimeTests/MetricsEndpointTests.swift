import Foundation
import QuadMetrics
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// Prometheus metrics (issue 15, point 4): the registry's text format, and
/// a real worker process serving `/metrics` over HTTP.
@Suite("Prometheus metrics", .serialized)
struct MetricsEndpointTests {
    @Test func theTextFormatHasCumulativeBucketsEscapedLabelsAndBoundedSeries() {
        let r = MetricsRegistry(maxSeries: 2)
        r.describe("t_requests_total", .counter, "Requests.")
        r.describe("t_seconds", .histogram, "Latency.", buckets: [0.1, 1])
        r.add("t_requests_total", ["type": "a"])
        r.add("t_requests_total", ["type": "a"], by: 2)
        r.add("t_requests_total", ["type": "q\"u\\o\nte"])
        // A third label set is past max_metric_series: counted as "other".
        r.add("t_requests_total", ["type": "c"])
        r.add("t_requests_total", ["type": "d"])
        r.observe("t_seconds", [:], 0.05)
        r.observe("t_seconds", [:], 0.5)
        r.observe("t_seconds", [:], 5)
        let text = r.exposition()
        #expect(text.contains("# TYPE t_requests_total counter\n"))
        #expect(text.contains("t_requests_total{type=\"a\"} 3\n"))
        #expect(text.contains("t_requests_total{type=\"q\\\"u\\\\o\\nte\"} 1\n"), "\(text)")
        #expect(text.contains("t_requests_total{type=\"other\"} 2\n"), "\(text)")
        #expect(!text.contains("type=\"c\""))
        #expect(text.contains("t_seconds_bucket{le=\"0.1\"} 1\nt_seconds_bucket{le=\"1\"} 2\nt_seconds_bucket{le=\"+Inf\"} 3\n"), "\(text)")
        #expect(text.contains("t_seconds_sum 5.55\nt_seconds_count 3\n"), "\(text)")
    }

    /// One HTTP/1.0 request (QuadTestSupport's httpRequest): status, head and body as text.
    static func get(_ port: UInt16, _ path: String, method: String = "GET") throws -> (status: Int, headers: String, body: String) {
        let r = try httpRequest(port, path, method: method)
        return (r.status, r.head, String(decoding: r.body, as: UTF8.self))
    }

    /// The port a process logged in its "metrics at" line.
    static func metricsPort(_ stack: TestStack, _ name: String) throws -> UInt16 {
        try loggedHTTPPort(stack, name, path: "metrics")
    }

    @Test func theBrokerServesWorkersAndQueuesPerServiceAtSlashMetrics() throws {
        let stack = try TestStack(name: "metrics-broker")
        try stack.startBroker(extra: ["--metrics", "127.0.0.1:0"])
        try stack.startWorker("quad-tally", instance: "tally/1")
        try stack.startWorker("quad-tally", instance: "tally/2")
        try #require(try stack.waitForWorkers("tally", count: 2, timeoutMs: 30_000))
        let client = try stack.client()
        for _ in 0..<5 { _ = try client.request("tally.add", ["key": "b", "n": 1]) }
        _ = try? client.call(.request("nosuch.thing", body: [:]), timeoutMs: 3000, attempts: 1)
        let port = try Self.metricsPort(stack, "broker")
        // Copied from the loop once a second: wait for the figures.
        var body = ""
        let until = Clock.monotonicMillis() + 30_000
        while Clock.monotonicMillis() < until {
            body = try Self.get(port, "/metrics").body
            if body.contains("quad_broker_workers{service=\"tally\"} 2\n") && body.contains("quad_broker_requests_total ") && !body.contains("quad_broker_requests_total 0\n") { break }
            usleep(200_000)
        }
        #expect(body.contains("# TYPE quad_broker_workers gauge"))
        #expect(body.contains("quad_broker_workers{service=\"tally\"} 2\n"), "\(body)")
        #expect(body.contains("quad_broker_queue_depth{service=\"tally\"} 0\n"), "\(body)")
        let requests = body.split(separator: "\n").first { $0.hasPrefix("quad_broker_requests_total ") }.flatMap { Double($0.split(separator: " ")[1]) } ?? 0
        #expect(requests >= 6, "\(body)")
        #expect(body.contains("quad_broker_errors_total{code="), "\(body)")
        // Routed per service, counted as they arrive (sys.* is not a service's).
        let routed = body.split(separator: "\n").first { $0.hasPrefix("quad_broker_service_requests_total{service=\"tally\"} ") }
            .flatMap { Double($0.split(separator: " ")[1]) } ?? 0
        #expect(routed >= 5, "\(body)")
        #expect(body.contains("# TYPE quad_broker_service_requests_total counter"), "\(body)")
    }

    @Test func aWorkerServesItsRequestsByTypeAndStatusAtSlashMetrics() throws {
        let stack = try TestStack(name: "metrics")
        try stack.startBroker()
        try stack.startWorker("quad-tally", instance: "tally/1", extra: ["--metrics", "127.0.0.1:0"])
        try #require(try stack.waitForWorkers("tally", count: 1, timeoutMs: 30_000))
        let client = try stack.client()
        for n in 1...3 { _ = try client.request("tally.add", ["key": "m", "n": .int(Int64(n))]) }
        let unknown = try client.call(.request("tally.no-such-type", body: [:]), timeoutMs: 5000, attempts: 1)
        #expect(unknown.quadError != nil)
        // The port it took is in its log line.
        let p = try Self.metricsPort(stack, "tally/1")
        let (status, headers, body) = try Self.get(p, "/metrics")
        #expect(status == 200)
        #expect(headers.contains("text/plain; version=0.0.4"))
        #expect(body.contains("quad_requests_total{service=\"tally\",type=\"tally.add\",status=\"200\"} 3\n"), "\(body.prefix(2000))")
        let status404 = unknown.quadError?.status ?? 0
        #expect(body.contains("quad_requests_total{service=\"tally\",type=\"other\",status=\"\(status404)\"} 1\n"), "\(body.prefix(2000))")
        #expect(body.contains("quad_request_duration_seconds_count{service=\"tally\",type=\"tally.add\"} 3\n"))
        #expect(body.contains("# TYPE quad_outbox_backlog gauge"))
        #expect(body.contains("quad_outbox_backlog{service=\"tally\"} "), "\(body.prefix(2000))")
        #expect(body.contains("quad_uptime_seconds{service=\"tally\"}"))
        #expect(try Self.get(p, "/nothing").status == 404)
        #expect(try Self.get(p, "/metrics", method: "POST").status == 405)
        #expect(try Self.get(p, "/healthz").body == "ok\n")
    }
}
