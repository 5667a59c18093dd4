import Foundation
import QuadMessaging
import QuadWire

/// A client of the broker's frontend: a DEALER that sends one request at a
/// time as an MDP/0.2 REQUEST (``Majordomo``) and waits for the FINAL that
/// answers it, with the Lazy Pirate
/// pattern: on a timeout it sends the same envelope again, same id, so the
/// service's idempotency record makes the retry safe. The socket is kept
/// across attempts: a late reply to an earlier attempt answers the same id
/// and is accepted.
///
/// With a `serverKey` (the broker's CURVE public key) the socket speaks
/// CURVE with a fresh ephemeral key pair: the broker's public frontend
/// answers nothing else. ``BrokerKey/fromEnvironment()`` finds that key.
///
/// `endpoint` may be a comma-separated list, one frontend per broker
/// (issue 14; the zguide's Freelance pattern, brokers in place of servers):
/// one DEALER per frontend, and the request goes to one of them: one
/// picked at random at start (clients share the brokers' load), then the
/// one that answered last. It fails over to the next, with the same bytes and
/// id, when an attempt times out, when the broker answers 503 (no worker
/// there in time), when its send cannot go out (the sockets are
/// ZMQ_IMMEDIATE: no live connection, no send), and at once when the
/// connection of the frontend it waits on closes (a broker that died:
/// a socket monitor says so), so a client of a killed broker is answered
/// by the other in about one round trip, not one timeout. A reply from any
/// frontend to any attempt answers the id.
public final class Client {
    let context: ZMQContext
    let endpoint: String
    /// The server's CURVE public key (32 bytes); nil: no CURVE.
    public let serverKey: [UInt8]?
    /// One socket per frontend, with its monitor when there are several.
    var sockets: [Socket]
    var monitors: [SocketMonitor] = []
    /// Which frontend each attempt goes to, and when it is over: the rules
    /// every requester shares (``Requester``), carried out here by a loop
    /// that waits on the sockets, as ``ServiceCalls`` carries them out on a
    /// worker's reactor.
    var rules: Requester<String>
    /// The frontend (index in the list) the next request goes to first:
    /// at random at start, so that many clients share the brokers' load;
    /// then the one that answered last.
    public var current: Int { rules.preferred }
    /// Times a request was sent again to another frontend (tests, logs).
    public var failovers: Int { rules.failovers }
    public var source: String
    public var token: String?
    /// Limit on a request's encoded size, checked before sending.
    public var maxMessageBytes = Envelope.defaultMaxBytes
    static let graceMs: Int64 = 250

    /// A client of the broker's internal frontend: CURVE with the
    /// services' key when ``InternalCurve`` is on.
    public let isInternal: Bool

    public init(context: ZMQContext = ZMQContext(), endpoint: String, source: String = "client", serverKey: [UInt8]? = nil,
                isInternal: Bool = false) throws {
        self.context = context
        self.endpoint = endpoint
        self.source = source
        self.serverKey = serverKey
        self.isInternal = isInternal
        let all = Endpoints.list(endpoint)
        let several = all.count > 1
        // One ephemeral key pair for every frontend: an anonymous caller is
        // its CURVE key to the brokers (`caller` `key:<Z85>`), and the
        // idempotency record of a request belongs to its caller, so a retry
        // through another broker must come from the same key.
        let pair = serverKey == nil ? nil : try CurveKeys.generate()
        self.sockets = try (all.isEmpty ? [endpoint] : all).map {
            try Client.makeSocket(context, $0, serverKey: serverKey, keys: pair, isInternal: isInternal, immediate: several)
        }
        rules = Requester(brokers: sockets.count, preferred: several ? Int.random(in: 0..<sockets.count) : 0, graceMs: Client.graceMs)
        if several {
            let tag = "client-\(UInt64.random(in: 0...UInt64.max))"
            monitors = try sockets.indices.map { try SocketMonitor(sockets[$0], name: "\(tag)-\($0)", connections: true) }
        }
    }

    static func makeSocket(_ context: ZMQContext, _ endpoint: String, serverKey: [UInt8]?,
                           keys: CurveKeys?, isInternal: Bool,
                           immediate: Bool = false) throws(ZMQError) -> Socket {
        let s = try context.socket(.dealer)
        try s.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        if immediate { try s.setImmediate(true) }
        if let serverKey, let keys {
            try keys.connect(s, to: serverKey)
        } else if isInternal {
            try InternalCurve.secure(s)
        }
        try s.connect(endpoint)
        return s
    }

    /// Sends `request` and returns the reply or error envelope. Throws
    /// ``QuadError`` `timeout` (504) when no answer came in `attempts`
    /// attempts of `timeoutMs` each, and `too_large` before sending an
    /// envelope over the limit. A 503 or 504 from the broker is retried too.
    public func call(_ request: Envelope, timeoutMs: Int64 = 2500, attempts: Int = 3) throws(QuadError) -> Envelope {
        var request = request
        if request.token == nil { request.token = token }
        if request.src == nil { request.src = source }
        request.deadline = timeoutMs
        let parts = request.encodedParts()
        let size = parts.header.count + parts.body.count
        if size > maxMessageBytes {
            throw .tooLarge("request is \(size) bytes, over the limit max_message_bytes=\(maxMessageBytes)")
        }
        let id = request.id
        let frames = Majordomo.request(service: request.service, header: parts.header, body: parts.body)
        // The call's one timer: its attempt's deadline, or a refused send's
        // next try (with several frontends, one not connected yet).
        var timer: (at: Int64, expiry: Bool)?
        // Frontends that closed since the last call are passed over.
        _ = readMonitors()
        var queue = rules.start(id, timeoutMs: timeoutMs, attempts: max(1, attempts))
        while true {
            while !queue.isEmpty {
                switch queue.removeFirst() {
                case .send(_, let broker):
                    timer = nil
                    switch sendNow(frames, on: broker) {
                    case .taken: queue += rules.taken(id, now: Clock.monotonicMillis())
                    case .refused: queue += rules.refused(id, now: Clock.monotonicMillis())
                    case .failed(let error):
                        rules.abandon(id)
                        throw .unavailable("send failed: \(error)")
                    }
                case .wait(_, let until): timer = (until, true)
                case .retry(_, let at): timer = (at, false)
                case .deliver: break  // below, where the answer is
                case .fail:
                    throw .timeout("no answer to \(request.type) within \(max(1, attempts)) attempts of \(timeoutMs) ms")
                }
            }
            let now = Clock.monotonicMillis()
            if let t = timer, now >= t.at {
                timer = nil
                queue += t.expiry ? rules.expired(id, now: now) : rules.resend(id)
                continue
            }
            guard let ready = try? waitForAny(timeoutMs: max(0, (timer?.at ?? now + 20) - now)) else { continue }
            // A frontend we wait on whose connection closed (a broker that
            // died: the request is lost with it, or answered and its reply
            // lost): the request goes again to another at once.
            if !monitors.isEmpty, ready[sockets.count...].contains(true) { queue += readMonitors() }
            for i in sockets.indices where ready[i] {
                let (reply, actions) = takeAnswers(to: id, on: i)
                if let reply { return reply }
                queue += actions
            }
        }
    }

    enum SendOutcome {
        case taken, refused
        case failed(ZMQError)
    }

    /// Puts `frames` on frontend `i`'s socket without waiting.
    func sendNow(_ frames: [[UInt8]], on i: Int) -> SendOutcome {
        do throws(ZMQError) {
            try sockets[i].send(frames, dontWait: true)
            return .taken
        } catch {
            return error.wouldBlock ? .refused : .failed(error)
        }
    }

    /// Reads what frontend `i` holds: the answer to call `id` when the rules
    /// say it answers it, or what they say to do instead. Answers to
    /// earlier calls are dropped.
    func takeAnswers(to id: String, on i: Int) -> (Envelope?, [Requester<String>.Action]) {
        var actions: [Requester<String>.Action] = []
        while let frames = try? sockets[i].receive(dontWait: true) {
            guard let answer = Majordomo.parseReply(frames), answer.isFinal,
                  let reply = try? answer.envelope(), reply.corr == id else { continue }
            // The broker's 503 (no worker in time) and 504 (a worker held
            // it past its deadline) are retried like no answer.
            let status = reply.quadError?.status
            let said = rules.answered(id, from: i, retryable: status == 503 || (status == 504 && reply.src == "broker"))
            if said.contains(.deliver(id)) { return (reply, []) }
            actions += said
        }
        return (nil, actions)
    }

    /// Polls every socket and monitor for up to `timeoutMs`: sockets first,
    /// then monitors, in the order of ``sockets``.
    func waitForAny(timeoutMs: Int64) throws(ZMQError) -> [Bool] {
        var poller = Poller()
        for s in sockets { poller.add(s) }
        for m in monitors { poller.add(m.socket) }
        return try poller.poll(timeoutMs: Int(timeoutMs))
    }

    /// Takes the monitors' news (which frontends closed, which came back)
    /// to the rules; returns what they say to do about the call waiting.
    func readMonitors() -> [Requester<String>.Action] {
        var actions: [Requester<String>.Action] = []
        for (i, m) in monitors.enumerated() {
            while let event = m.next() {
                switch event.kind {
                case .disconnected: actions += rules.connectionClosed(i)
                case .succeeded: rules.connectionOpened(i)
                default: break
                }
            }
        }
        return actions
    }

    /// Calls `type` and returns the reply body, throwing the service's error.
    public func request(_ type: String, _ body: JSON = .object([:]), id: String = MessageID.make(),
                        timeoutMs: Int64 = 2500, attempts: Int = 3) throws(QuadError) -> JSON {
        let reply = try call(.request(type, body: body, id: id), timeoutMs: timeoutMs, attempts: attempts)
        if let error = reply.quadError { throw error }
        return reply.body
    }
}
