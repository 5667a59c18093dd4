import Foundation
import QuadMetrics
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// `/healthz` and `/readyz` beside `/metrics` (issue 15, point 2): what the
/// readiness and liveness probes of deploy/k8s ask a process itself.
@Suite("Health endpoints", .serialized)
struct HealthEndpointTests {
    /// Polls `path` on `port` until its status is `status` and its body
    /// holds `containing` (30 s); returns the body.
    static func waitFor(_ port: UInt16, _ path: String, status: Int, containing: String = "") throws -> String {
        let until = Clock.monotonicMillis() + 30_000
        var last = (0, "")
        while Clock.monotonicMillis() < until {
            if let r = try? MetricsEndpointTests.get(port, path) {
                last = (r.status, r.body)
                if r.status == status && (containing.isEmpty || r.body.contains(containing)) { return r.body }
            }
            usleep(50_000)
        }
        throw QuadError.internal("\(path) on \(port) did not answer \(status) within 30 s; last \(last.0): \(last.1)")
    }

    @Test func aWorkerIsReadyOnlyWhileABrokerKnowsItAndAliveWhileItsLoopTurns() throws {
        let stack = try TestStack(name: "health")
        // The worker first, with no broker to register with.
        try stack.startWorker("quad-tally", instance: "tally/1", extra: ["--metrics", "127.0.0.1:0"])
        let worker = try MetricsEndpointTests.metricsPort(stack, "tally/1")
        #expect(try Self.waitFor(worker, "/healthz", status: 200) == "ok\n")
        // "starting" until its loop's first check, then why.
        let why = try Self.waitFor(worker, "/readyz", status: 503, containing: "registered with no broker")
        #expect(why.contains(stack.endpoints.backend), "\(why)")

        try stack.startBroker(extra: ["--metrics", "127.0.0.1:0"])
        let broker = try MetricsEndpointTests.metricsPort(stack, "broker")
        #expect(try Self.waitFor(broker, "/readyz", status: 200) == "ready\n")
        #expect(try Self.waitFor(broker, "/healthz", status: 200) == "ok\n")
        #expect(try Self.waitFor(worker, "/readyz", status: 200) == "ready\n")

        // The broker dies: after its heartbeats' expiry the worker is not
        // ready (no traffic reaches it), and still alive (not restarted).
        stack.kill("broker")
        _ = try Self.waitFor(worker, "/readyz", status: 503, containing: "registered with no broker")
        #expect(try MetricsEndpointTests.get(worker, "/healthz").status == 200)
        #expect(try MetricsEndpointTests.get(worker, "/readyz", method: "POST").status == 405)
    }

    @Test func healthzFailsWhenTheLoopStopsTurning() {
        final class Now: @unchecked Sendable { var ms: Int64 = 1_000 }
        let now = Now()
        let health = Health(stallMs: 5_000, now: { now.ms })
        #expect(health.liveness().0 == 200)
        #expect(health.readiness() == (503, "not ready: starting\n"))
        now.ms += 6_000
        let (status, body) = health.liveness()
        #expect(status == 503)
        #expect(body.contains("not turned for 6000 ms"), "\(body)")
        health.turned()
        #expect(health.liveness().0 == 200)
        health.ready()
        #expect(health.readiness() == (200, "ready\n"))
        health.notReady("shutting down")
        #expect(health.readiness() == (503, "not ready: shutting down\n"))
    }
}
