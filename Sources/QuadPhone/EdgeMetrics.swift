import QuadMessaging
import QuadMetrics
import QuadRuntime
import QuadWire
import QuadPhoneKit

/// quad-edge's Prometheus figures (`--metrics HOST:PORT`): what the phones
/// of this process see, from their side of the network. Counters are
/// written by the edge's one loop as things happen; the gauges (phones
/// online, queued actions, buffered telemetry) are counted once a second
/// by a timer on that loop, so the `/metrics` thread only reads the
/// registry, whose lock makes that safe.
public final class EdgeMetrics {
    public let registry = MetricsRegistry()

    public init() {
        registry.describe("quad_edge_phones", .gauge, "Phones this process runs.")
        registry.describe("quad_edge_phones_online", .gauge, "Phones with signal, out of airplane mode, and reaching the broker.")
        registry.describe("quad_edge_actions_queued", .gauge, "Actions waiting in the phones' outboxes (queued while offline, or in flight).")
        registry.describe("quad_edge_telemetry_buffered", .gauge, "Telemetry events stored on the phones and not yet accepted by the collector.")
        registry.describe("quad_edge_actions_sent_total", .counter, "Action sends (first attempts and retries under the same id), by type.")
        registry.describe("quad_edge_actions_acknowledged_total", .counter, "Actions a service answered with success and the phone confirmed, by type.")
        registry.describe("quad_edge_actions_failed_total", .counter, "Actions a service refused (4xx, rolled back with its reason) or dropped after one, by type.")
        registry.describe("quad_edge_requests_total", .counter,
                          "Requests the phones sent, by type and status: the HTTP-like status of the answer, or timeout, offline, send_failed.")
        registry.describe("quad_edge_request_duration_seconds", .histogram, "Time from a phone's send to its answer (or failure), by type.")
        registry.describe("quad_edge_image_hits_total", .counter, "Pictures shown from a phone's cache without a request, by tier (memory, disk).")
        registry.describe("quad_edge_image_misses_total", .counter, "Pictures not in a phone's cache (fetched, or a placeholder when offline).")
        registry.describe("quad_edge_image_fetched_bytes_total", .counter, "Bytes of pictures the phones fetched from the image servers.")
        registry.describe("quad_edge_image_cached_bytes_total", .counter, "Bytes of pictures the phones showed from their caches.")
        registry.describe("quad_edge_image_evictions_total", .counter, "Pictures evicted from the phones' caches (least recently used, over a limit).")
        registry.describe("quad_edge_image_refused_total", .counter, "Pictures refused: over max_image_bytes, not an image, or bytes that do not match their SHA-256.")
        registry.describe("quad_edge_loop_timers_late_seconds", .gauge,
                          "How far past its time the most overdue timer of the phones' loop (students' actions, telemetry, retries) was when it ran, over the last second.")
        registry.describe("quad_edge_loop_timer_overruns_total", .counter,
                          "Turns of the phones' loop whose due timers took more than their budget (timer_budget_ms): the rest ran after the sockets were read again.")
    }

    /// One request's outcome, as the phone saw it.
    func request(_ type: String, _ result: Result<Envelope, LinkFailure>, seconds: Double) {
        let status: String = switch result {
        case .success(let reply): String(reply.quadError?.status ?? 200)
        case .failure(.offline): "offline"
        case .failure(.timeout): "timeout"
        case .failure(.sendFailed): "send_failed"
        }
        registry.add("quad_edge_requests_total", ["type": type, "status": status])
        registry.observe("quad_edge_request_duration_seconds", ["type": type], seconds)
    }

    func actionsSent(_ batch: [QueuedAction]) {
        for a in batch { registry.add("quad_edge_actions_sent_total", ["type": a.type]) }
    }

    func action(_ outcome: String, _ type: String, count: Int = 1) {
        registry.add("quad_edge_actions_\(outcome)_total", ["type": type], by: Double(count))
    }

    /// Counts the phones' gauges, and the loop's when `timers` are given;
    /// runs on the edge's loop.
    package func update(_ phones: [Phone], timers: Timers? = nil) {
        if let timers {
            registry.set("quad_edge_loop_timers_late_seconds", [:], Double(timers.takeLateMs()) / 1000)
            registry.set("quad_edge_loop_timer_overruns_total", [:], Double(timers.overran))
        }
        var online = 0, queued = 0, telemetry = 0
        for p in phones where !p.stopped {
            if p.isOnline { online += 1 }
            queued += p.queueLength
            telemetry += p.telemetryQueued
        }
        // The phones' image counters only grow: their sums are the counters' values.
        var images = ImageStats()
        for p in phones { images.add(p.images.stats) }
        registry.set("quad_edge_image_hits_total", ["tier": "memory"], Double(images.memoryHits))
        registry.set("quad_edge_image_hits_total", ["tier": "disk"], Double(images.diskHits))
        registry.set("quad_edge_image_misses_total", [:], Double(images.misses))
        registry.set("quad_edge_image_fetched_bytes_total", [:], Double(images.bytesFetched))
        registry.set("quad_edge_image_cached_bytes_total", [:], Double(images.bytesFromCache))
        registry.set("quad_edge_image_evictions_total", [:], Double(images.evictions))
        registry.set("quad_edge_image_refused_total", [:], Double(images.refused))
        registry.set("quad_edge_phones", [:], Double(phones.count))
        registry.set("quad_edge_phones_online", [:], Double(online))
        registry.set("quad_edge_actions_queued", [:], Double(queued))
        registry.set("quad_edge_telemetry_buffered", [:], Double(telemetry))
    }
}
