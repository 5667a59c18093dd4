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
public final class Client {
    let context: ZMQContext
    let endpoint: String
    /// The server's CURVE public key (32 bytes); nil: no CURVE.
    public let serverKey: [UInt8]?
    var socket: Socket
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
        self.socket = try Client.makeSocket(context, endpoint, serverKey: serverKey, isInternal: isInternal)
    }

    static func makeSocket(_ context: ZMQContext, _ endpoint: String, serverKey: [UInt8]?, isInternal: Bool) throws(ZMQError) -> Socket {
        let s = try context.socket(.dealer)
        try s.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        if let serverKey {
            try s.setCurveClient(serverKey: serverKey)
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
        let bytes = request.encoded()
        if bytes.count > maxMessageBytes {
            throw .tooLarge("request is \(bytes.count) bytes, over the limit max_message_bytes=\(maxMessageBytes)")
        }
        for attempt in 1...max(1, attempts) {
            do throws(ZMQError) {
                // Never blocks: with no connection to send on (a server that
                // refused the handshake: a wrong or missing CURVE key) the
                // attempt waits out its time like a lost request.
                try socket.send(Majordomo.request(service: request.service, bytes), dontWait: true)
            } catch where error.wouldBlock {
            } catch {
                throw .unavailable("send failed: \(error)")
            }
            // A little past the deadline, so the broker's 503 for a request
            // no worker took arrives before we give up on it.
            let until = Clock.monotonicMillis() + timeoutMs + Client.graceMs
            while case let left = until - Clock.monotonicMillis(), left > 0 {
                var poller = Poller()
                poller.add(socket)
                guard let ready = try? poller.poll(timeoutMs: Int(left)), ready[0] else { continue }
                guard let frames = try? socket.receive(dontWait: true), let answer = Majordomo.parseReply(frames), answer.isFinal else { continue }
                guard let reply = try? Envelope.decode(answer.body, maxBytes: .max), reply.corr == request.id else { continue }
                // The broker's 504 (a worker held it past its deadline) is
                // retried like no answer at all, as it was before the broker sent it.
                if let status = reply.quadError?.status, status == 503 || (status == 504 && reply.src == "broker"), attempt < attempts { break }
                return reply
            }
        }
        throw .timeout("no answer to \(request.type) within \(attempts) attempts of \(timeoutMs) ms")
    }

    /// Calls `type` and returns the reply body, throwing the service's error.
    public func request(_ type: String, _ body: JSON = .object([:]), id: String = MessageID.make(),
                        timeoutMs: Int64 = 2500, attempts: Int = 3) throws(QuadError) -> JSON {
        let reply = try call(.request(type, body: body, id: id), timeoutMs: timeoutMs, attempts: attempts)
        if let error = reply.quadError { throw error }
        return reply.body
    }
}
