import Foundation
import QuadStore
import QuadWire

/// Deliberate faults, so the chaos checker can be shown to fail on a real
/// build (Tests/e2e/test_chaos_faults.py). Compiled in only with
/// QUAD_FAULTS, which Package.swift defines for debug builds only; a release
/// build has none, whatever its environment says.
///
/// `QUAD_FAULT_SKIP_IDEMPOTENCY=1`: a mutation runs its handler again on a
/// repeated request id instead of answering the stored reply (the
/// idempotency check is skipped), and the record of the first run is kept,
/// so the second effect commits.
///
/// `QUAD_FAULT_STALE_ANSWERS=1`: `orders.return` answers the order as it
/// was before the return (its older version), so a phone's write does not
/// follow what it read (deploy/checker.py's `wfr` fails).
public enum Faults {
    #if QUAD_FAULTS
    public static let staleAnswers: Bool = {
        let on = ProcessInfo.processInfo.environment["QUAD_FAULT_STALE_ANSWERS"] == "1"
        if on { Log.error("faults", "QUAD_FAULT_STALE_ANSWERS=1: orders.return answers the order as it was before (a deliberately broken build)") }
        return on
    }()
    static let skipIdempotency: Bool = {
        let on = ProcessInfo.processInfo.environment["QUAD_FAULT_SKIP_IDEMPOTENCY"] == "1"
        if on { Log.error("faults", "QUAD_FAULT_SKIP_IDEMPOTENCY=1: this worker applies a repeated request id again (a deliberately broken build)") }
        return on
    }()
    #else
    static let skipIdempotency = false
    public static let staleAnswers = false
    #endif

    /// The broken build's record: keeps the first reply instead of failing on the repeated id.
    static func storeSkippingCheck(_ db: Database, id: String, type: String, owner: String, reply: Envelope) throws {
        try db.execute("INSERT INTO idempotency (id, type, owner, reply, created_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                       .text(id), .text(type), .text(owner), .text(String(decoding: reply.encoded(), as: UTF8.self)), .int(Int64(Clock.nowMillis())))
    }
}
