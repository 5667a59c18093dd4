import Foundation

/// What a ``MetricsServer`` answers on `/healthz` and `/readyz`, for the
/// probes of an orchestrator (Kubernetes' liveness and readiness): the
/// process's loop writes it, microhttpd's threads read it. The metrics
/// server runs on threads of its own, so a plain 200 from it would say only
/// that those threads live; this says what the loop last did.
///
/// - `/healthz`: 200 while the loop turned within ``stallMs`` (it calls
///   ``turned()`` from a timer), else 503 naming how long it has been stuck:
///   a process to restart.
/// - `/readyz`: 200 once the process said ``ready()``, 503 with the reason
///   it gave ``notReady(_:)`` (at first "starting"): a process to send no
///   traffic to yet.
public final class Health: @unchecked Sendable {
    // Every field is read and written under `lock`.
    let lock = NSLock()
    var lastTurn: Int64
    var reason: String? = "starting"
    /// How long the loop may go without a turn before `/healthz` fails.
    public let stallMs: Int64
    let now: @Sendable () -> Int64

    public init(stallMs: Int64 = 10_000, now: @escaping @Sendable () -> Int64 = Health.monotonicMillis) {
        self.stallMs = stallMs
        self.now = now
        lastTurn = now()
    }

    public static func monotonicMillis() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    /// The loop is alive: call it from a timer of the loop.
    public func turned() {
        let t = now()
        lock.withLock { lastTurn = t }
    }

    public func ready() { lock.withLock { reason = nil } }

    /// Not ready, and why (shown in `/readyz`'s body).
    public func notReady(_ why: String) { lock.withLock { reason = why } }

    /// `/healthz`: status and body.
    public func liveness() -> (Int, String) {
        let since = now() - lock.withLock { lastTurn }
        if since > stallMs { return (503, "stalled: the loop has not turned for \(since) ms (more than \(stallMs))\n") }
        return (200, "ok\n")
    }

    /// `/readyz`: status and body.
    public func readiness() -> (Int, String) {
        if let why = lock.withLock({ reason }) { return (503, "not ready: \(why)\n") }
        return (200, "ready\n")
    }
}
