/// The rules of every requester of Quad, as a pure state machine: the
/// zguide's Lazy Pirate (send under an id, wait with a deadline, send again
/// under the same id) and Freelance (the list of brokers is known; a
/// request that a broker does not answer goes to the next). It holds no
/// socket, reads no clock and arms no timer: the caller tells it what
/// happened (a call started, a socket took or refused it, a deadline
/// passed, an answer came, a broker's connection closed or opened), with
/// the time, and carries out the ``Action``s it answers, in order.
/// `Tests/QuadRuntimeTests/RequesterTests.swift` drives it with no socket
/// and no sleep, as `Routing` is driven for the broker.
///
/// A call's attempts all carry the same bytes and id, so the callee's
/// idempotency record makes a retry safe, and an answer to any attempt,
/// through any broker, answers the call.
///
/// The rules, for `brokers` frontends:
/// - A call goes first to the preferred broker (``preferred``: chosen by
///   the caller at start, e.g. at random so clients share the brokers;
///   then, with ``followsAnswers``, the one that answered last), passing
///   over brokers whose connection is known closed while one is not.
/// - A send the socket refuses (no live connection: the sockets of several
///   brokers are ZMQ_IMMEDIATE) goes to the next broker at once; when
///   every broker refused it in a row it is tried again after ``retryMs``,
///   until the attempt's time is out.
/// - An attempt waits `timeoutMs` plus ``graceMs`` (so that the broker's
///   503 for a request no worker took arrives as an answer). Past that,
///   the next attempt goes to the next broker, and the preferred one
///   moves on if it was the silent one; after the last attempt the call
///   fails with ``Failure/timeout``.
/// - An answer the caller calls retryable (the broker's 503, or its 504
///   for a worker that held the request past its deadline) is treated as
///   no answer while attempts remain: the next attempt goes to the next
///   broker at once.
/// - A broker whose connection closes hands each call waiting on it to the
///   next open broker at once, in the same attempt.
///
/// With ``oneConnection`` (a phone's link: one socket, to the preferred
/// broker, whatever the number of brokers) a call's deadline runs from its
/// start, a refused send waits for the connection (the caller keeps it),
/// and when the preferred broker changes (an attempt it did not answer,
/// or ``move(to:)``) every waiting call goes to the new one at once, under
/// its first deadline: the caller moves its socket at the first `send` to
/// another broker.
public struct Requester<ID: Hashable> {
    public enum Failure: Hashable, Sendable {
        /// No answer within `attempts` attempts of `timeoutMs`.
        case timeout(attempts: Int, timeoutMs: Int64)
    }

    /// What the caller does next, in order.
    public enum Action: Hashable {
        /// Put the call's frames on broker `broker`'s socket, then say
        /// ``taken(_:now:)`` or ``refused(_:now:)``. Any timer of the call
        /// is cancelled first.
        case send(ID, broker: Int)
        /// Arm the call's one timer for `untilMs`; when it fires, say
        /// ``expired(_:now:)``.
        case wait(ID, untilMs: Int64)
        /// Arm the call's one timer for `atMs`; when it fires, say
        /// ``resend(_:)`` (a refused send, tried again).
        case retry(ID, atMs: Int64)
        /// The answer that just came answers the call: hand it over, and
        /// forget the call (cancel its timer).
        case deliver(ID)
        /// The call is over without an answer: tell its caller, and forget it.
        case fail(ID, Failure)
    }

    struct Call {
        var attempt = 1
        let attempts: Int
        let timeoutMs: Int64
        var via: Int
        /// The broker the attempt went to first.
        var first: Int
        /// When a send of this attempt was first refused, and the sends
        /// refused in a row since.
        var blockedSince: Int64?
        var refusals = 0

        mutating func begin(at broker: Int) {
            via = broker
            first = broker
            blockedSince = nil
            refusals = 0
        }
    }

    public let brokers: Int
    /// The broker new calls go to first.
    public private(set) var preferred: Int
    /// Brokers whose connection is known closed.
    public private(set) var closedBrokers: Set<Int> = []
    /// Attempts sent to another broker than the one before (failovers).
    public private(set) var failovers = 0
    /// How far past its timeout an attempt waits for the broker's 503.
    public let graceMs: Int64
    /// How often a refused send is tried again within its attempt.
    public let retryMs: Int64
    private var calls: [ID: Call] = [:]

    /// Whether the broker that answered becomes the preferred one (a
    /// client: the one that answered last), or the preferred one moves on
    /// only when it fails a call (a service: the first broker of its list
    /// until it fails).
    public let followsAnswers: Bool
    /// One connection at a time, to the preferred broker (above).
    public let oneConnection: Bool

    public init(brokers: Int, preferred: Int = 0, followsAnswers: Bool = true, oneConnection: Bool = false,
                graceMs: Int64 = 250, retryMs: Int64 = 20) {
        precondition(brokers >= 1, "a requester needs at least one broker")
        self.brokers = brokers
        self.followsAnswers = followsAnswers
        self.oneConnection = oneConnection
        self.preferred = min(max(0, preferred), brokers - 1)
        self.graceMs = graceMs
        self.retryMs = retryMs
    }

    /// Calls waiting for their answer.
    public var count: Int { calls.count }
    public func contains(_ id: ID) -> Bool { calls[id] != nil }
    /// The broker call `id`'s attempt is on.
    public func broker(of id: ID) -> Int? { calls[id]?.via }
    /// The attempt call `id` is at (1 for the first).
    public func attempt(of id: ID) -> Int? { calls[id]?.attempt }

    /// The first broker from `i` on (wrapping) whose connection is not known
    /// closed; `i` when all are.
    func open(from i: Int) -> Int {
        (0..<brokers).map { (i + $0) % brokers }.first { !closedBrokers.contains($0) } ?? i % brokers
    }

    /// A new call. An id already waiting is replaced (the caller tells
    /// the old one's caller); `now` times it from here with ``oneConnection``.
    public mutating func start(_ id: ID, timeoutMs: Int64, attempts: Int, now: Int64 = 0) -> [Action] {
        let via = oneConnection ? preferred : open(from: preferred)
        let call = Call(attempts: max(1, attempts), timeoutMs: max(0, timeoutMs), via: via, first: via)
        calls[id] = call
        if oneConnection { return [.send(id, broker: via), .wait(id, untilMs: now + call.timeoutMs + graceMs)] }
        return [.send(id, broker: via)]
    }

    /// The socket took the call's frames at `now`: its attempt is timed.
    public mutating func taken(_ id: ID, now: Int64) -> [Action] {
        guard !oneConnection else { return [] }  // timed from its start
        guard var call = calls[id] else { return [] }
        let waited = call.blockedSince.map { now - $0 } ?? 0
        // Taken by another broker than the attempt's first: a failover.
        if call.via != call.first { failovers += 1 }
        call.begin(at: call.via)
        calls[id] = call
        return [.wait(id, untilMs: now + max(0, call.timeoutMs + graceMs - waited))]
    }

    /// The socket refused the frames (no connection to take them): the next
    /// broker is tried at once, and when every broker refused in a row,
    /// again after ``retryMs``, until the attempt's time is out; then the
    /// attempt is over as if it had been lost.
    public mutating func refused(_ id: ID, now: Int64) -> [Action] {
        guard !oneConnection else { return [] }  // it waits for the connection
        guard var call = calls[id] else { return [] }
        call.refusals += 1
        if brokers > 1 { call.via = (call.via + 1) % brokers }
        let since = call.blockedSince ?? now
        call.blockedSince = since
        calls[id] = call
        guard now - since < call.timeoutMs else { return expired(id, now: now) }
        if call.refusals % brokers != 0 { return [.send(id, broker: call.via)] }
        return [.retry(id, atMs: now + retryMs)]
    }

    /// A refused send's timer fired: send again (to the broker ``refused``
    /// chose).
    public mutating func resend(_ id: ID) -> [Action] {
        guard let call = calls[id] else { return [] }
        return [.send(id, broker: call.via)]
    }

    /// The attempt's deadline passed with no answer.
    public mutating func expired(_ id: ID, now: Int64) -> [Action] {
        if oneConnection { return expiredOnOneConnection(id, now: now) }
        guard var call = calls[id] else { return [] }
        guard call.attempt < call.attempts else {
            calls[id] = nil
            return [.fail(id, .timeout(attempts: call.attempts, timeoutMs: call.timeoutMs))]
        }
        call.attempt += 1
        if brokers > 1 {
            // That broker did not answer: new calls and this one go on.
            if preferred == call.via { preferred = (preferred + 1) % brokers }
            call.begin(at: open(from: (call.via + 1) % brokers))
            failovers += 1
        } else {
            call.begin(at: call.via)
        }
        calls[id] = call
        return [.send(id, broker: call.via)]
    }

    /// An answer to `id` came from broker `broker`. `retryable`: the
    /// broker's 503 or its own 504, sent again while attempts remain. An
    /// answer to no waiting call (late, or a repeat) gives no action.
    public mutating func answered(_ id: ID, from broker: Int, retryable: Bool) -> [Action] {
        guard var call = calls[id] else { return [] }
        if retryable && call.attempt < call.attempts {
            call.attempt += 1
            if brokers > 1 {
                call.begin(at: open(from: (broker + 1) % brokers))
                failovers += 1
            } else {
                call.begin(at: call.via)
            }
            calls[id] = call
            return [.send(id, broker: call.via)]
        }
        calls[id] = nil
        if followsAnswers { preferred = broker }
        return [.deliver(id)]
    }

    /// With ``oneConnection``: the broker that did not answer in time is
    /// left, when it is still the preferred one, and every other call
    /// waiting goes to the next at once; then this call is sent again
    /// there, or fails after its last attempt.
    mutating func expiredOnOneConnection(_ id: ID, now: Int64) -> [Action] {
        guard var call = calls[id] else { return [] }
        var actions: [Action] = []
        if brokers > 1 && call.via == preferred {
            calls[id] = nil
            actions = move(to: (preferred + 1) % brokers)
        }
        guard call.attempt < call.attempts else {
            calls[id] = nil
            return actions + [.fail(id, .timeout(attempts: call.attempts, timeoutMs: call.timeoutMs))]
        }
        call.attempt += 1
        if call.via != preferred { failovers += 1 }
        call.begin(at: preferred)
        calls[id] = call
        return actions + [.send(id, broker: preferred), .wait(id, untilMs: now + call.timeoutMs + graceMs)]
    }

    /// The caller moves to broker `broker` (the next when nil): a phone's
    /// live feed heard nothing from it for a while. Every call waiting
    /// elsewhere goes there at once, under its deadline.
    public mutating func move(to broker: Int? = nil) -> [Action] {
        preferred = (broker ?? preferred + 1) % brokers
        var actions: [Action] = []
        for (id, var call) in calls where call.via != preferred {
            call.begin(at: preferred)
            calls[id] = call
            failovers += 1
            actions.append(.send(id, broker: preferred))
        }
        return actions
    }

    /// Every call waiting, forgotten (a phone's radio went off).
    public mutating func abandonAll() -> [ID] {
        let ids = Array(calls.keys)
        calls = [:]
        return ids
    }

    /// The caller gives up on `id` (its send failed for good): forgotten.
    public mutating func abandon(_ id: ID) {
        calls[id] = nil
    }

    /// Broker `broker`'s connection closed: every call waiting on it goes
    /// to the next open broker at once, in the same attempt.
    public mutating func connectionClosed(_ broker: Int) -> [Action] {
        closedBrokers.insert(broker)
        if preferred == broker { preferred = open(from: broker) }
        var actions: [Action] = []
        for (id, var call) in calls where call.via == broker {
            let target = open(from: (broker + 1) % brokers)
            // With every broker closed the call waits where it is.
            guard target != broker, !closedBrokers.contains(target) else { continue }
            call.begin(at: target)
            calls[id] = call
            failovers += 1
            actions.append(.send(id, broker: target))
        }
        return actions
    }

    /// Broker `broker`'s connection is up (again).
    public mutating func connectionOpened(_ broker: Int) {
        closedBrokers.remove(broker)
    }
}
