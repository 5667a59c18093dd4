/// Timing of the worker protocol between quad-broker and service workers.
/// The frames are MDP/0.2's (``Majordomo``); the intervals are Quad's.
///
/// One thing Quad adds inside MDP: the broker answers a worker's DISCONNECT
/// with a DISCONNECT of its own, after which it sends that worker nothing
/// more. A Quad worker that is leaving takes it for "drained, exit"; one
/// that is not leaving takes a DISCONNECT as MDP says (register again); a
/// foreign worker has closed its socket by then and never sees it.
public enum WorkerProtocol {
    /// Default heartbeat interval; a peer silent for ``liveness`` intervals
    /// is taken for dead.
    public static let heartbeatMs: Int64 = 1000
    public static let liveness: Int64 = 3
}
