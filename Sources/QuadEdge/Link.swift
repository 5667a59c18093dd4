import QuadMessaging
import QuadRuntime
import QuadWire

/// Why a request got no answer.
enum LinkFailure: Error, Equatable {
    /// The phone knows it has no network (airplane mode, no signal): nothing was sent.
    case offline
    /// Sent, and nothing came back before the deadline: a cut the phone
    /// cannot tell from a slow service.
    case timeout
    /// The socket refused the message (its queue is full).
    case sendFailed(String)
}

/// A phone's connection to the broker's frontend: one DEALER, requests sent
/// without waiting and answered through a completion matched by `corr`.
/// Nothing here blocks; the socket is registered on the edge's one
/// ``Reactor`` while the radio is on, which calls ``receive()``. A late answer to a request that timed out is dropped,
/// unless a retry under the same id is waiting for it, which it then answers
/// (the same id means the same request).
///
/// `endpoint` may be a comma-separated list, one frontend per broker
/// (issue 14): one DEALER per frontend, all on the phone's one key pair, a
/// request sent on the one that answered last (at radio-on, one at random:
/// phones share the brokers' load). When a frontend's
/// connection closes (its broker died: a socket monitor on the loop says
/// so) every request waiting on it is sent again at once on another,
/// same bytes, same id, under its first deadline; a request that times out
/// moves the phone to the next frontend for its retry.
final class Link {
    typealias Completion = (Result<Envelope, LinkFailure>) -> Void

    struct Call {
        var timer: Int
        var completion: Completion
        /// What was sent, to send again elsewhere, and on which frontend.
        var frames: [[UInt8]]
        var via: Int
    }

    let context: ZMQContext
    let endpoint: String
    let endpoints: [String]
    let source: String
    let reactor: Reactor
    var agenda: Timers { reactor.timers }
    /// One socket per frontend while the radio is on; empty while it is off.
    private(set) var sockets: [Socket] = []
    private var monitors: [SocketMonitor] = []
    /// The frontend a new request goes to, and those whose connection closed.
    private(set) var current = 0
    private var closed: Set<Int> = []
    /// Requests sent again on another frontend.
    private(set) var failovers = 0
    var socket: Socket? { sockets.isEmpty ? nil : sockets[current] }
    private var calls: [String: Call] = [:]
    /// The phone's session token, put on every request.
    var token: String?
    /// Called for every answer that arrives, matched or not.
    var onAnswer: () -> Void = {}
    private(set) var sent = 0
    static let graceMs: Int64 = 250
    private(set) var answered = 0

    /// The broker's CURVE public key.
    let serverKey: [UInt8]?
    /// The phone's own CURVE key pair, the same for every radio-on and,
    /// kept in the phone's keychain, across restarts: the broker binds an
    /// anonymous request's idempotency record to it, so a retry after
    /// airplane mode or a restart must come from the same key.
    let clientKeys: (publicKey: [UInt8], secretKey: [UInt8])?

    init(context: ZMQContext, endpoint: String, source: String, reactor: Reactor, serverKey: [UInt8]? = nil,
         clientSecretKey: String? = nil) {
        self.serverKey = serverKey
        clientKeys = serverKey == nil ? nil : Link.keyPair(clientSecretKey)
        self.context = context
        self.endpoint = endpoint
        let list = Endpoints.list(endpoint)
        self.endpoints = list.isEmpty ? [endpoint] : list
        self.source = source
        self.reactor = reactor
    }

    /// The key pair of `secretKey` (Z85), or a new one when it is nil or not a key.
    static func keyPair(_ secretKey: String?) -> (publicKey: [UInt8], secretKey: [UInt8])? {
        if let secretKey, let pub = Curve.publicKey(forSecretKey: secretKey), let p = Curve.decode(pub), let s = Curve.decode(secretKey) {
            return (p, s)
        }
        // zmq_curve_keypair's Z85 output always decodes.
        return (try? Curve.keyPair()).map { (Curve.decode($0.publicKey)!, Curve.decode($0.secretKey)!) }
    }

    var isUp: Bool { !sockets.isEmpty }
    var inFlight: Int { calls.count }

    /// Opens the socket (the radio is on).
    func up() throws {
        guard sockets.isEmpty else { return }
        var made: [Socket] = []
        var watching: [SocketMonitor] = []
        let tag = "link-\(UInt64.random(in: 0...UInt64.max))"
        for (i, endpoint) in endpoints.enumerated() {
            let s = try socket(to: endpoint)
            made.append(s)
            if endpoints.count > 1 { watching.append(try SocketMonitor(s, name: "\(tag)-\(i)", connections: true)) }
        }
        sockets = made
        monitors = watching
        closed = []
        // Phones share the brokers' load: each starts on one at random.
        current = made.count > 1 ? Int.random(in: 0..<made.count) : 0
        for s in made { reactor.register(s) { [unowned self] s in self.receive(s) } }
        for m in watching { reactor.register(m.socket) { [unowned self] _ in self.readMonitors() } }
    }

    func socket(to endpoint: String) throws -> Socket {
        let s = try context.socket(.dealer)
        try s.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        try s.setSendHWM(200)
        // A handshake the broker holds back (too many new connections from
        // this address) is given up and tried again after 5 s, not 30.
        try s.setHandshakeInterval(5000)
        try Link.secure(s, serverKey: serverKey, clientKeys: clientKeys)
        try s.connect(endpoint)
        return s
    }

    /// CURVE toward the broker with the phone's key pair (an ephemeral one
    /// without it); nothing without the broker's key.
    static func secure(_ s: Socket, serverKey: [UInt8]?, clientKeys: (publicKey: [UInt8], secretKey: [UInt8])?) throws {
        guard let serverKey else { return }
        if let keys = clientKeys {
            try s.setCurveClient(serverKey: serverKey, publicKey: keys.publicKey, secretKey: keys.secretKey)
        } else {
            try s.setCurveClient(serverKey: serverKey)
        }
    }

    /// Takes the monitors' news; a frontend that closed hands its waiting
    /// requests to another.
    func readMonitors() {
        for (i, m) in monitors.enumerated() {
            while let event = m.next() {
                switch event.kind {
                case .succeeded: closed.remove(i)
                case .disconnected:
                    closed.insert(i)
                    if current == i { current = nextOpen(after: i) }
                    for (id, call) in calls where call.via == i { resend(id, call) }
                default: break
                }
            }
        }
    }

    /// The first frontend after `i` whose connection is not known closed
    /// (`i` itself when all are).
    func nextOpen(after i: Int) -> Int {
        (1...sockets.count).map { (i + $0) % sockets.count }.first { !closed.contains($0) } ?? i
    }

    func resend(_ id: String, _ call: Call) {
        let target = nextOpen(after: call.via)
        guard target != call.via else { return }
        var call = call
        call.via = target
        try? sockets[target].send(call.frames, dontWait: true)
        calls[id] = call
        failovers += 1
    }

    /// Closes the socket (the radio is off): what was queued in it is
    /// dropped, and every waiting request fails as offline.
    func down() {
        for s in sockets { reactor.unregister(s) }
        for m in monitors { reactor.unregister(m.socket) }
        sockets = []
        monitors = []
        let waiting = calls
        calls = [:]
        for (_, call) in waiting {
            agenda.cancel(call.timer)
            agenda.after(0) { call.completion(.failure(.offline)) }
        }
    }

    /// Sends `request` and calls `completion` once: with the answer, or with
    /// the failure. The completion never runs inside this call.
    func send(_ request: Envelope, timeoutMs: Int64, completion: @escaping Completion) {
        var request = request
        request.src = source
        request.token = token
        request.deadline = timeoutMs
        guard !sockets.isEmpty else {
            agenda.after(0) { completion(.failure(.offline)) }
            return
        }
        let via = closed.contains(current) ? nextOpen(after: current) : current
        if let earlier = calls.removeValue(forKey: request.id) {
            // A retry replaces a call still waiting under the same id.
            agenda.cancel(earlier.timer)
            agenda.after(0) { earlier.completion(.failure(.timeout)) }
        }
        let frames = Majordomo.request(request)
        do {
            try sockets[via].send(frames, dontWait: true)
        } catch {
            agenda.after(0) { completion(.failure(.sendFailed("\(error)"))) }
            return
        }
        sent += 1
        let id = request.id
        // A little past the deadline, so that the broker's 503 for a request
        // no worker took arrives as an answer (the network works; the service
        // is busy) rather than as a timeout (the network does not answer).
        let timer = agenda.after(timeoutMs + Link.graceMs) { [weak self] in
            guard let self, let call = self.calls.removeValue(forKey: id) else { return }
            // That frontend did not answer: the retry goes to the next.
            if self.sockets.count > 1 && call.via == self.current { self.current = (self.current + 1) % self.sockets.count }
            call.completion(.failure(.timeout))
        }
        calls[id] = Call(timer: timer, completion: completion, frames: frames, via: via)
    }

    /// Reads every answer waiting on `socket`, one of the frontends'.
    func receive(_ socket: Socket) {
        while sockets.contains(where: { $0 === socket }), let frames = try? socket.receive(dontWait: true) {
            guard let answer = Majordomo.parseReply(frames), answer.isFinal, let reply = try? Envelope.decode(answer.body, maxBytes: .max) else { continue }
            answered += 1
            onAnswer()
            guard let corr = reply.corr, let call = calls.removeValue(forKey: corr) else { continue }
            agenda.cancel(call.timer)
            if let i = sockets.firstIndex(where: { $0 === socket }) { current = i }
            call.completion(.success(reply))
        }
    }
}
