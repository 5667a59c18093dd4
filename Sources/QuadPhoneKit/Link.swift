import QuadMessaging
import QuadRuntime
import QuadWire

/// Why a request got no answer.
package enum LinkFailure: Error, Equatable {
    /// The phone knows it has no network (airplane mode, no signal): nothing was sent.
    case offline
    /// Sent, and nothing came back before the deadline: a cut the phone
    /// cannot tell from a slow service.
    case timeout
    /// The socket refused the message (its queue is full).
    case sendFailed(String)
}

/// A phone's connection to the brokers: ONE DEALER, to one broker's
/// frontend at a time, requests sent without waiting and answered through
/// a completion matched by `corr`. Nothing here blocks; the socket is
/// registered on the edge's one ``Reactor`` while the radio is on, which
/// calls ``receive()``. A late answer to a request that timed out is
/// dropped, unless a retry under the same id is waiting for it, which it
/// then answers (the same id means the same request).
///
/// `endpoint` may be a comma-separated list, one frontend per broker: the
/// Freelance pattern. The list is known; the phone talks to one broker
/// (at radio-on one at random: phones share the brokers' load) and moves
/// to the next when that one stops answering: a request that times out, or
/// the phone's live feed going quiet (``move(to:)``, called by the phone).
/// A move closes the socket, opens one to the next frontend, and sends
/// every waiting request again on it at once: same bytes, same id, under
/// its first deadline. A phone's cost stays one socket and one connection
/// whatever the number of brokers. Which broker, when to move and when a
/// request has timed out are the one requester's rules (``Requester``
/// with `oneConnection`); this class carries them out on its socket.
package final class Link {
    package typealias Completion = (Result<Envelope, LinkFailure>) -> Void

    struct Call {
        var timer = 0
        var completion: Completion
        /// What was sent, to send again elsewhere.
        var frames: [[UInt8]]
        /// Not on the wire yet: the socket had no connection to take it
        /// (``unsent``).
        var unsent = false
    }

    let context: ZMQContext
    let endpoint: String
    let endpoints: [String]
    let source: String
    let reactor: Reactor
    var agenda: Timers { reactor.timers }
    /// The one socket while the radio is on; nil while it is off.
    private(set) var socket: Socket?
    /// The frontend the socket is connected to (an index of ``endpoints``).
    package private(set) var current = 0
    /// Moves to another broker, and the requests sent again because of one.
    package private(set) var moves = 0
    package var failovers: Int { rules.failovers }
    private var calls: [String: Call] = [:]
    /// Where requests go and when they are over: set at ``up()``.
    private var rules: Requester<String>
    /// The calls waiting for the socket to take them, in the order they
    /// were made. The socket is ZMQ_IMMEDIATE: it queues nothing while it
    /// has no connection (a phone with no connection to a broker keeps no
    /// pipe, ~32 KiB of libzmq's queues), so a request made before the
    /// connection is up, or while it is down, waits here under its
    /// deadline and goes when the reactor says the socket can take it.
    private var unsent: [String] = []
    /// When the socket was opened (monotonic ms), and how long after that
    /// it took its first request: its TCP connection and CURVE handshake,
    /// as the phone waited for them (nil until a request went on the wire).
    private(set) var openedMs: Int64 = 0
    package private(set) var connectMs: Int64?
    /// The phone's session token, put on every request.
    package var token: String?
    /// Called for every answer that arrives, matched or not.
    package var onAnswer: () -> Void = {}
    /// Called for an event the broker sends on this connection unasked
    /// (the user's news, once `sys.news` opened its channel).
    package var onEvent: (Envelope) -> Void = { _ in }
    /// Called after the link moved to another broker (its index), so that
    /// the phone's live feed follows.
    package var onMove: (Int) -> Void = { _ in }
    private(set) var sent = 0
    static let graceMs: Int64 = 250
    private(set) var answered = 0

    /// The broker's CURVE public key.
    let serverKey: [UInt8]?
    /// The phone's own CURVE key pair, the same for every radio-on and,
    /// kept in the phone's keychain, across restarts: the broker binds an
    /// anonymous request's idempotency record to it, so a retry after
    /// airplane mode, a restart or a move to another broker must come from
    /// the same key.
    package let clientKeys: CurveKeys?

    package init(context: ZMQContext, endpoint: String, source: String, reactor: Reactor, serverKey: [UInt8]? = nil,
         clientSecretKey: String? = nil) {
        self.serverKey = serverKey
        clientKeys = serverKey == nil ? nil : Link.keyPair(clientSecretKey)
        self.context = context
        self.endpoint = endpoint
        let list = Endpoints.list(endpoint)
        self.endpoints = list.isEmpty ? [endpoint] : list
        self.source = source
        self.reactor = reactor
        rules = Requester(brokers: self.endpoints.count, oneConnection: true, graceMs: Link.graceMs)
    }

    /// The key pair of `secretKey` (Z85), or a new one when it is nil or not a key.
    package static func keyPair(_ secretKey: String?) -> CurveKeys? {
        secretKey.flatMap(CurveKeys.init(secretText:)) ?? (try? CurveKeys.generate())
    }

    package var isUp: Bool { socket != nil }
    package var inFlight: Int { calls.count }

    /// Opens the socket (the radio is on), to a broker chosen at random.
    package func up() throws(ZMQError) {
        guard socket == nil else { return }
        // Phones share the brokers' load: each starts on one at random.
        _ = rules.move(to: endpoints.count > 1 ? Int.random(in: 0..<endpoints.count) : 0)
        try open(rules.preferred)
    }

    private func open(_ index: Int) throws(ZMQError) {
        let s = try context.socket(.dealer)
        // An error leaves `s` to close as it is released.
        try s.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        try s.setSendHWM(200)
        // A handshake the broker holds back (too many new connections from
        // this address) is given up and tried again after 5 s, not 30.
        try s.setHandshakeInterval(5000)
        try s.setImmediate(true)
        try Link.secure(s, serverKey: serverKey, clientKeys: clientKeys)
        try s.connect(endpoints[index])
        socket = s
        current = index
        openedMs = Clock.monotonicMillis()
        connectMs = nil
        reactor.register(s) { [unowned self] s in self.receive(s) }
    }

    private func close() {
        guard let s = socket else { return }
        unsent = []
        reactor.unregister(s)
        // The last reference: the socket closes (linger 0) as it goes.
        socket = nil
    }

    /// CURVE toward the broker with the phone's key pair (an ephemeral one
    /// without it); nothing without the broker's key.
    package static func secure(_ s: Socket, serverKey: [UInt8]?, clientKeys: CurveKeys?) throws(ZMQError) {
        guard let serverKey else { return }
        if let keys = clientKeys {
            try keys.connect(s, to: serverKey)
        } else {
            try s.setCurveClient(serverKey: serverKey)
        }
    }

    /// Moves to frontend `index` (the next one when nil): the socket is
    /// closed (an answer on its way from the broker left is lost, and the
    /// request it answers is sent again), one is opened to the other
    /// frontend, and every waiting request goes again on it. A link with
    /// one frontend, or whose radio is off, stays where it is.
    package func move(to index: Int? = nil) throws(ZMQError) {
        guard socket != nil, endpoints.count > 1 else { return }
        let target = index ?? (current + 1) % endpoints.count
        guard target != current else { return }
        try carry(rules.move(to: target))
    }

    /// Opens the socket on frontend `index` in place of the one open: every
    /// waiting call, sent or still waiting for the old connection (whose
    /// queue ``close()`` emptied), is queued to go again on it.
    private func reopen(_ index: Int) throws(ZMQError) {
        close()
        try open(index)
        moves += 1
        for (id, var call) in calls {
            call.unsent = true
            calls[id] = call
            unsent.append(id)
        }
        onMove(index)
    }

    /// Carries out what the rules answer, in order: a send to another
    /// broker than the socket's moves the socket first.
    private func carry(_ actions: [Requester<String>.Action]) throws(ZMQError) {
        for action in actions {
            switch action {
            case .send(let id, let broker):
                guard socket != nil else { continue }
                if broker != current { try reopen(broker) }
                guard var call = calls[id], !call.unsent else { continue }
                call.unsent = true
                calls[id] = call
                unsent.append(id)
            case .wait(let id, let until):
                guard var call = calls[id] else { continue }
                agenda.cancel(call.timer)
                call.timer = agenda.after(max(0, until - Clock.monotonicMillis())) { [weak self] in self?.expired(id) }
                calls[id] = call
            case .retry, .deliver:
                break  // no retry on one connection; a delivery is ``receive(_:)``'s
            case .fail(let id, _):
                // The socket is where the rules want it before the caller
                // hears: its retry goes to the broker that is left.
                if socket != nil && rules.preferred != current { try reopen(rules.preferred) }
                guard let call = calls.removeValue(forKey: id) else { continue }
                agenda.cancel(call.timer)
                call.completion(.failure(.timeout))
            }
        }
        if socket != nil && rules.preferred != current { try reopen(rules.preferred) }
        flush()
    }

    /// A request's deadline passed with no answer.
    private func expired(_ id: String) {
        do { try carry(rules.expired(id, now: Clock.monotonicMillis())) } catch { onSocketError(error) }
    }

    /// Closes the socket (the radio is off): what was queued in it is
    /// dropped, and every waiting request fails as offline.
    package func down() {
        close()
        _ = rules.abandonAll()
        let waiting = calls
        calls = [:]
        for (_, call) in waiting {
            agenda.cancel(call.timer)
            agenda.after(0) { call.completion(.failure(.offline)) }
        }
    }

    /// Called when the link cannot open a socket after a move: the phone
    /// ends its day with the reason.
    package var onSocketError: (any Error) -> Void = { _ in }

    /// Sends `request` and calls `completion` once: with the answer, or with
    /// the failure. The completion never runs inside this call.
    package func send(_ request: Envelope, timeoutMs: Int64, completion: @escaping Completion) {
        var request = request
        request.src = source
        request.token = token
        request.deadline = timeoutMs
        guard socket != nil else {
            agenda.after(0) { completion(.failure(.offline)) }
            return
        }
        if let earlier = calls.removeValue(forKey: request.id) {
            // A retry replaces a call still waiting under the same id.
            agenda.cancel(earlier.timer)
            unsent.removeAll { $0 == request.id }
            agenda.after(0) { earlier.completion(.failure(.timeout)) }
        }
        sent += 1
        // A little past the deadline (the rules' grace), so that the
        // broker's 503 for a request no worker took arrives as an answer
        // (the network works; the service is busy) rather than as a
        // timeout (the network does not answer).
        calls[request.id] = Call(completion: completion, frames: Majordomo.request(request))
        do { try carry(rules.start(request.id, timeoutMs: timeoutMs, attempts: 1, now: Clock.monotonicMillis())) } catch { onSocketError(error) }
    }

    /// Sends the calls waiting for the socket, in order, while it takes
    /// them; asks the reactor to wake it when it can take the rest.
    private func flush() {
        guard let socket else { return }
        var k = 0
        while k < unsent.count {
            let id = unsent[k]
            guard var call = calls[id], call.unsent else { k += 1; continue }
            do {
                try socket.send(call.frames, dontWait: true)
            } catch where error.wouldBlock {
                // Still no connection (or a full queue): the rest wait too.
                break
            } catch {
                // The socket cannot take it at all: the caller hears why.
                calls[id] = nil
                rules.abandon(id)
                agenda.cancel(call.timer)
                agenda.after(0) { call.completion(.failure(.sendFailed("\(error)"))) }
                k += 1
                continue
            }
            call.unsent = false
            tookFirst()
            calls[id] = call
            k += 1
        }
        unsent.removeFirst(k)
        reactor.wantWritable(socket, !unsent.isEmpty)
    }

    /// The socket took a request: the first since it was opened dates its connection.
    private func tookFirst() {
        if connectMs == nil { connectMs = Clock.monotonicMillis() - openedMs }
    }

    /// Reads every answer waiting on `socket`.
    func receive(_ socket: Socket) {
        if !unsent.isEmpty && self.socket === socket { flush() }
        while self.socket === socket, let frames = try? socket.receive(dontWait: true) {
            guard let answer = Majordomo.parseReply(frames), answer.isFinal, let reply = try? answer.envelope() else { continue }
            onAnswer()
            if reply.kind == .event {
                onEvent(reply)
                continue
            }
            answered += 1
            guard let corr = reply.corr, calls[corr] != nil, rules.answered(corr, from: current, retryable: false) == [.deliver(corr)],
                  let call = calls.removeValue(forKey: corr) else { continue }
            agenda.cancel(call.timer)
            call.completion(.success(reply))
        }
    }
}
