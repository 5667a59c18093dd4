import Foundation
import QuadMetrics
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// quad-edge's /metrics from the phone's side: what is queued while the
/// phone is offline, then what was sent, acknowledged and refused once the
/// network is back, and every request by type and status.
@Suite("quad-edge's Prometheus metrics", .serialized)
struct EdgeMetricsTests {
    /// The value of the exposition's line `series` (name and labels as written).
    func value(_ text: String, _ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    @Test func queuedOfflineThenSentAcknowledgedAndRefusedOnline() throws {
        let rig = try PhoneRig()
        rig.broker.answer = { request, _ in
            request.body["product"]?.string == "p-0404" ? .failure(.notFound("no product with id 'p-0404' in the catalog")) : .success(["status": "confirmed"])
        }
        let metrics = EdgeMetrics()
        rig.phone.metrics = metrics
        rig.phone.airplane = true
        rig.phone.start()
        rig.phone.act("favorites.add", ["product": "p-0404"])
        rig.phone.act("favorites.add", ["product": "p-0001"])
        rig.phone.act("favorites.add", ["product": "p-0002"])
        metrics.update([rig.phone])
        var text = metrics.registry.exposition()
        #expect(value(text, "quad_edge_phones") == 1)
        #expect(value(text, "quad_edge_phones_online") == 0, "airplane mode: offline")
        #expect(value(text, "quad_edge_actions_queued") == 3)
        #expect(value(text, "quad_edge_actions_sent_total{type=\"favorites.add\"}") == nil, "nothing sent while offline")

        rig.phone.setAirplane(false)
        rig.run(forMs: 10_000) { rig.outbox == 0 }
        #expect(rig.outbox == 0)
        metrics.update([rig.phone])
        text = metrics.registry.exposition()
        #expect(value(text, "quad_edge_phones_online") == 1)
        #expect(value(text, "quad_edge_actions_queued") == 0)
        #expect(value(text, "quad_edge_actions_sent_total{type=\"favorites.add\"}") == 3)
        #expect(value(text, "quad_edge_actions_acknowledged_total{type=\"favorites.add\"}") == 2)
        #expect(value(text, "quad_edge_actions_failed_total{type=\"favorites.add\"}") == 1)
        #expect(value(text, "quad_edge_requests_total{type=\"favorites.add\",status=\"200\"}") == 2)
        #expect(value(text, "quad_edge_requests_total{type=\"favorites.add\",status=\"404\"}") == 1)
        #expect(value(text, "quad_edge_request_duration_seconds_count{type=\"favorites.add\"}") == 3)
        #expect(text.contains("# TYPE quad_edge_request_duration_seconds histogram"))
    }

    @Test func aFleetServesItsMetricsOverHTTP() throws {
        let dir = NSTemporaryDirectory() + "quad-edge-metrics-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var settings = EdgeSettings(frontend: "tcp://127.0.0.1:1")
        settings.signInAtStart = false
        let fleet = try Fleet(settings: settings, dir: dir, count: 2, control: nil)
        let url = try fleet.serveMetrics("127.0.0.1:0")
        #expect(url.hasPrefix("http://127.0.0.1:") && url.hasSuffix("/metrics"))
        let server = try #require(fleet.metricsServer)
        #expect(server.port > 0)
        let (status, type, body) = server.answer(method: "GET", path: "/metrics")
        #expect(status == 200 && type == MetricsServer.contentType)
        #expect(value(body, "quad_edge_phones") == 2)
        // The loop's own figures: nothing late yet, no turn over its budget.
        #expect(value(body, "quad_edge_loop_timers_late_seconds") == 0)
        #expect(value(body, "quad_edge_loop_timer_overruns_total") == 0)
        server.stop()
    }
}
