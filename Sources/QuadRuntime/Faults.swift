import Foundation
import QuadStore
import QuadWire

/// Deliberate faults, so the chaos checker can be shown to fail on a real
/// build (Tests/e2e/test_chaos_faults.py). Compiled in only with
/// `swift build -Xswiftc -DQUAD_FAULTS`; a build without the flag has none,
/// whatever its environment says.
///
/// `QUAD_FAULT_SKIP_IDEMPOTENCY=1`: a mutation runs its handler again on a
/// repeated request id instead of answering the stored reply (the
/// idempotency check is skipped), and the record of the first run is kept,
/// so the second effect commits.
enum Faults {
    #if QUAD_FAULTS
    static let skipIdempotency: Bool = {
        let on = ProcessInfo.processInfo.environment["QUAD_FAULT_SKIP_IDEMPOTENCY"] == "1"
        if on { Log.error("faults", "QUAD_FAULT_SKIP_IDEMPOTENCY=1: this worker applies a repeated request id again (a deliberately broken build)") }
        return on
    }()
    #else
    static let skipIdempotency = false
    #endif

    /// The broken build's record: keeps the first reply instead of failing on the repeated id.
    static func storeSkippingCheck(_ db: Database, id: String, type: String, owner: String, reply: Envelope) throws {
        try db.execute("INSERT INTO idempotency (id, type, owner, reply, created_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                       .text(id), .text(type), .text(owner), .text(String(decoding: reply.encoded(), as: UTF8.self)), .int(Int64(Clock.nowMillis())))
    }
}
