/// The worker protocol between quad-broker and service workers, after the
/// ZeroMQ Majordomo pattern. Every message starts with ``header``, then a
/// command frame:
///
/// worker to broker: `READY service info-json`, `HEARTBEAT`,
/// `REPLY client envelope`, `DISCONNECT`;
/// broker to worker: `REQUEST client envelope`, `HEARTBEAT`, `DISCONNECT`
/// (register again), `BYE` (after a worker's DISCONNECT: nothing more comes).
public enum WorkerProtocol {
    public static let header: [UInt8] = Array("QUADW1".utf8)
    public static let ready: [UInt8] = Array("READY".utf8)
    public static let heartbeat: [UInt8] = Array("HEARTBEAT".utf8)
    public static let request: [UInt8] = Array("REQUEST".utf8)
    public static let reply: [UInt8] = Array("REPLY".utf8)
    public static let disconnect: [UInt8] = Array("DISCONNECT".utf8)
    public static let bye: [UInt8] = Array("BYE".utf8)

    /// Default heartbeat interval; a peer silent for ``liveness`` intervals
    /// is taken for dead.
    public static let heartbeatMs: Int64 = 1000
    public static let liveness: Int64 = 3
}
