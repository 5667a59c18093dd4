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
final class Link {
    typealias Completion = (Result<Envelope, LinkFailure>) -> Void

    struct Call {
        var timer: Int
        var completion: Completion
    }

    let context: ZMQContext
    let endpoint: String
    let source: String
    let reactor: Reactor
    var agenda: Timers { reactor.timers }
    private(set) var socket: Socket?
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
    /// The phone's own CURVE key pair, the same for every radio-on: the
    /// broker binds an anonymous request's idempotency record to it, so a
    /// retry after airplane mode must come from the same key.
    let clientKeys: (publicKey: [UInt8], secretKey: [UInt8])?

    init(context: ZMQContext, endpoint: String, source: String, reactor: Reactor, serverKey: [UInt8]? = nil) {
        self.serverKey = serverKey
        // zmq_curve_keypair's Z85 output always decodes.
        clientKeys = serverKey == nil ? nil : (try? Curve.keyPair()).map { (Curve.decode($0.publicKey)!, Curve.decode($0.secretKey)!) }
        self.context = context
        self.endpoint = endpoint
        self.source = source
        self.reactor = reactor
    }

    var isUp: Bool { socket != nil }
    var inFlight: Int { calls.count }

    /// Opens the socket (the radio is on).
    func up() throws {
        guard socket == nil else { return }
        let s = try context.socket(.dealer)
        try s.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        try s.setSendHWM(200)
        // A handshake the broker holds back (too many new connections from
        // this address) is given up and tried again after 5 s, not 30.
        try s.setHandshakeInterval(5000)
        if let serverKey {
            if let keys = clientKeys {
                try s.setCurveClient(serverKey: serverKey, publicKey: keys.publicKey, secretKey: keys.secretKey)
            } else {
                try s.setCurveClient(serverKey: serverKey)
            }
        }
        try s.connect(endpoint)
        socket = s
        reactor.register(s) { [unowned self] _ in self.receive() }
    }

    /// Closes the socket (the radio is off): what was queued in it is
    /// dropped, and every waiting request fails as offline.
    func down() {
        if let socket { reactor.unregister(socket) }
        socket = nil
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
        guard let socket else {
            agenda.after(0) { completion(.failure(.offline)) }
            return
        }
        if let earlier = calls.removeValue(forKey: request.id) {
            // A retry replaces a call still waiting under the same id.
            agenda.cancel(earlier.timer)
            agenda.after(0) { earlier.completion(.failure(.timeout)) }
        }
        do {
            try socket.send(Majordomo.request(request), dontWait: true)
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
            call.completion(.failure(.timeout))
        }
        calls[id] = Call(timer: timer, completion: completion)
    }

    /// Reads every answer waiting on the socket.
    func receive() {
        guard let socket else { return }
        while self.socket === socket, let frames = try? socket.receive(dontWait: true) {
            guard let answer = Majordomo.parseReply(frames), answer.isFinal, let reply = try? Envelope.decode(answer.body, maxBytes: .max) else { continue }
            answered += 1
            onAnswer()
            guard let corr = reply.corr, let call = calls.removeValue(forKey: corr) else { continue }
            agenda.cancel(call.timer)
            call.completion(.success(reply))
        }
    }
}
