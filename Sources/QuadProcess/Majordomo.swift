import QuadWire

/// The frames of the Majordomo Protocol, MDP/0.2 (ZeroMQ RFC 18), as Quad's
/// broker, workers and clients speak it, so that an MDP peer no one here
/// wrote (PyPI's `majortomo`, say) talks to Quad's broker. The frames only:
/// what the broker does with them is ``Broker``'s.
///
/// Client and broker (frontend):
///
///     client -> broker  ["MDPC02", 0x01 REQUEST, service, envelope]
///                       ["MDPC02", 0x01 REQUEST, service, header, body]  (Quad's peers)
///     broker -> client  ["MDPC02", 0x03 PARTIAL | 0x04 FINAL, service, envelope | header, body]
///
/// Worker and broker (backend):
///
///     worker -> broker  ["MDPW02", 0x01 READY, service (, info-json)]
///     broker -> worker  ["MDPW02", 0x02 REQUEST, client, "", envelope | header, body]
///     worker -> broker  ["MDPW02", 0x03 PARTIAL | 0x04 FINAL, client, "", envelope | header, body]
///
/// An envelope travels as one frame (what a foreign MDP peer sends) or as
/// two, its header and its body (``Envelope/encodedParts()``, what Quad's
/// peers send): the broker then reads and rewrites the header alone and
/// passes the body's frame on as it came. A worker answers in the form it
/// was asked in, so a one-frame client gets one-frame answers.
///     either way        ["MDPW02", 0x05 HEARTBEAT], ["MDPW02", 0x06 DISCONNECT]
///     worker -> broker  ["MDPW02", 0x07 DEFER, client]   (Quad's extension: answered later)
///
/// A peer that emulates REQ on its DEALER (majortomo does) puts an empty
/// delimiter frame first; the broker accepts both forms and answers each
/// peer in the form it used (``Form``). The client's PARTIAL and FINAL carry
/// the same command bytes as the worker's (0x03, 0x04), as majortomo and the
/// zguide's brokers do; for the same reason a client's REQUEST may be 0x02
/// (majortomo numbers its client commands as the worker's) as well as 0x01.
public enum Majordomo {
    public static let clientHeader: [UInt8] = Array("MDPC02".utf8)
    public static let workerHeader: [UInt8] = Array("MDPW02".utf8)

    /// Command bytes. A client's REQUEST is 0x01, the same byte as a
    /// worker's READY: the header frame tells them apart. 0x02 is read as a
    /// client's REQUEST too (majortomo's `Client` sends it).
    public enum Command: UInt8, Sendable {
        case ready = 0x01, request = 0x02, partial = 0x03, final = 0x04, heartbeat = 0x05, disconnect = 0x06
        /// Quad's extension (protos/README.md): the worker answers later.
        case deferral = 0x07
        public static let clientRequest: UInt8 = 0x01
        static let clientRequests: Set<[UInt8]> = [[0x01], [0x02]]
    }

    /// Whether a peer's messages start with an empty delimiter frame.
    public enum Form: Sendable, Equatable {
        case bare, delimited
        var prefix: [[UInt8]] { self == .delimited ? [[]] : [] }
    }

    // MARK: Client side

    /// A client's REQUEST for the envelope `bytes`, to `service`.
    public static func request(service: some StringProtocol, _ bytes: [UInt8]) -> [[UInt8]] {
        [clientHeader, [Command.clientRequest], Array(service.utf8), bytes]
    }

    /// A client's REQUEST for `envelope`, to the service its type names:
    /// its header and its body in frames of their own.
    public static func request(_ envelope: Envelope) -> [[UInt8]] {
        let parts = envelope.encodedParts()
        return request(service: envelope.service, header: parts.header, body: parts.body)
    }

    /// A client's REQUEST of an envelope already encoded as its header and body.
    public static func request(service: some StringProtocol, header: [UInt8], body: [UInt8]) -> [[UInt8]] {
        [clientHeader, [Command.clientRequest], Array(service.utf8), header, body]
    }

    /// The broker's answer to a client: FINAL, or PARTIAL (more follows).
    public static func reply(service: some StringProtocol, _ bytes: [UInt8], partial: Bool = false, form: Form = .bare) -> [[UInt8]] {
        form.prefix + [clientHeader, [partial ? Command.partial.rawValue : Command.final.rawValue], Array(service.utf8), bytes]
    }

    /// A reply as a client reads it (its routing id already taken off).
    public struct Reply: Equatable, Sendable {
        public var isFinal: Bool
        public var service: [UInt8]
        /// The envelope's one frame, or its body's when `header` is set.
        public var body: [UInt8]
        /// The header's frame of an envelope in two frames.
        public var header: [UInt8]?

        public init(isFinal: Bool, service: [UInt8], body: [UInt8], header: [UInt8]? = nil) {
            self.isFinal = isFinal
            self.service = service
            self.body = body
            self.header = header
        }

        /// The envelope, in whichever form it came.
        public func envelope(maxBytes: Int = .max) throws(QuadError) -> Envelope {
            if let header { return try Envelope.decode(header: header, body: body, maxBytes: maxBytes) }
            return try Envelope.decode(body, maxBytes: maxBytes)
        }
    }

    /// The broker's PARTIAL or FINAL to a client, its envelope in one frame
    /// or two; nil for anything else.
    public static func parseReply(_ frames: [[UInt8]]) -> Reply? {
        let f = frames.first == [] ? Array(frames.dropFirst()) : frames
        guard f.count == 4 || f.count == 5, f[0] == clientHeader, f[1].count == 1,
              f[1][0] == Command.final.rawValue || f[1][0] == Command.partial.rawValue else { return nil }
        return Reply(isFinal: f[1][0] == Command.final.rawValue, service: f[2], body: f[f.count - 1], header: f.count == 5 ? f[3] : nil)
    }

    /// The envelope a message ends with, in whichever form it came: its
    /// last two frames when they are a header (a JSON object without
    /// `body`) and a body, else its last frame. For tools and fakes that
    /// read any peer's message without knowing its command.
    public static func envelope(endingFrames frames: [[UInt8]], maxBytes: Int = .max) throws(QuadError) -> Envelope {
        guard let last = frames.last else { throw .badRequest("an empty message carries no envelope") }
        if frames.count >= 2, frames[frames.count - 2].first == UInt8(ascii: "{"),
           let e = try? Envelope.decode(header: frames[frames.count - 2], body: last, maxBytes: maxBytes) {
            return e
        }
        return try Envelope.decode(last, maxBytes: maxBytes)
    }

    /// A client's REQUEST as the broker reads it, after the routing id.
    public struct Request: Equatable, Sendable {
        public var form: Form
        public var service: String
        /// The envelope's one frame, or its body's when `header` is set.
        public var body: [UInt8]
        /// The header's frame of an envelope in two frames.
        public var header: [UInt8]?
    }

    /// How many frames of a client's message the broker needs to read it
    /// (routing id, delimiter, header, command, service, envelope header,
    /// body); the broker counts the rest without copying them.
    public static let framesToKeep = 7

    /// How many frames of a message to the frontend come before the
    /// envelope's (routing id, header, command, service; one more after a
    /// delimiter): the broker copies these and keeps the rest as they came.
    public static let frontendLead = 4

    /// The same on the backend (routing id, header, command, client, empty).
    public static let backendLead = 5

    /// Reads a client's message to the frontend: `frames` after the routing
    /// id (at most ``framesToKeep`` minus one of them kept), `count` how
    /// many there were in all. A wrong message gets a ``QuadError`` 400
    /// saying what was expected, and the form it came in (to answer in).
    public static func parseRequest(_ frames: ArraySlice<[UInt8]>, count: Int) -> Result<Request, Refusal> {
        let delimited = frames.first == []
        let form: Form = delimited ? .delimited : .bare
        let f = delimited ? frames.dropFirst() : frames
        let n = delimited ? count - 1 : count
        func refuse(_ why: String, service: [UInt8] = []) -> Result<Request, Refusal> {
            .failure(Refusal(form: form, service: String(decoding: service.prefix(64), as: UTF8.self),
                             error: .badRequest(why + "; a request is MDP/0.2 (RFC 18): [\"MDPC02\", 0x01, service, envelope] "
                                                + "or [\"MDPC02\", 0x01, service, header, body], "
                                                + "after an optional empty delimiter frame")))
        }
        guard let header = f.first, header == clientHeader else {
            if n == 1 { return refuse("expected an MDP/0.2 client message, got 1 frame (a bare envelope is no longer accepted)") }
            if let h = f.first, h.starts(with: Array("MDPC".utf8)) {
                return refuse("unsupported protocol header '\(String(decoding: h.prefix(16), as: UTF8.self))': this broker speaks MDPC02")
            }
            return refuse("expected the header frame \"MDPC02\", got \(n) frames that do not start with it")
        }
        let rest = Array(f.dropFirst())
        guard rest.count >= 1, Command.clientRequests.contains(rest[0]) else {
            return refuse("expected the command 0x01 (REQUEST; 0x02 is taken too) after \"MDPC02\"\(rest.first.map { ", got \($0.prefix(8).map { String($0, radix: 16) })" } ?? "")")
        }
        guard rest.count >= 2 else { return refuse("a REQUEST without a service frame") }
        let service = rest[1]
        guard let name = String(validating: service, as: UTF8.self), isServiceName(name) else {
            return refuse("the service frame must be a service name (lower-case letters, digits, '_' or '-'), got \(service.count) bytes")
        }
        let bodies = n - 3
        guard bodies == 1 || bodies == 2 else {
            return refuse("a REQUEST carries its envelope after the service in one frame, or in two (header, body), got \(bodies) frames",
                          service: service)
        }
        return .success(Request(form: form, service: name, body: rest[rest.count - 1], header: bodies == 2 ? rest[2] : nil))
    }

    /// A message the broker refuses, with what to answer in.
    public struct Refusal: Error, Sendable {
        public var form: Form
        public var service: String
        public var error: QuadError
    }

    /// One segment of a type: what a service frame and a READY may carry.
    public static func isServiceName(_ name: String) -> Bool {
        !name.isEmpty && !name.utf8.contains(UInt8(ascii: ".")) && Envelope.isValidType(name)
    }

    // MARK: Worker side

    /// What a worker and the broker say to each other (after the routing
    /// id and the delimiter, if any).
    public enum WorkerMessage: Equatable, Sendable {
        /// A worker registers for `service`; Quad's workers add their
        /// `{"instance", "pid"}` as `info`, a foreign worker sends none.
        case ready(service: [UInt8], info: [UInt8]?)
        /// `bodies` are the frames after the empty one: Quad's envelope is
        /// exactly one; the receiver decides what to do with more.
        case request(client: [UInt8], bodies: [[UInt8]])
        case partial(client: [UInt8], bodies: [[UInt8]])
        case final(client: [UInt8], bodies: [[UInt8]])
        /// DEFER (0x07, Quad's extension of MDP/0.2): the worker took the
        /// request it holds for `client` and will answer it later with a
        /// FINAL; the broker gives it its next request meanwhile, and keeps
        /// the deadline, the 504 and the poison-pill rule for the one deferred.
        case deferral(client: [UInt8])
        case heartbeat
        case disconnect
    }

    /// The frames of `message`, in `form`.
    public static func frames(_ message: WorkerMessage, form: Form = .bare) -> [[UInt8]] {
        let command: Command
        var args: [[UInt8]] = []
        switch message {
        case let .ready(service, info):
            command = .ready
            args = [service] + (info.map { [$0] } ?? [])
        case let .request(client, bodies):
            command = .request
            args = [client, []] + bodies
        case let .partial(client, bodies):
            command = .partial
            args = [client, []] + bodies
        case let .final(client, bodies):
            command = .final
            args = [client, []] + bodies
        case let .deferral(client):
            command = .deferral
            args = [client]
        case .heartbeat: command = .heartbeat
        case .disconnect: command = .disconnect
        }
        return form.prefix + [workerHeader, [command.rawValue]] + args
    }

    /// Reads a worker's (or, on the worker's side, the broker's) message
    /// after the routing id; nil for one that is not MDP/0.2 worker framing.
    public static func parseWorker(_ frames: ArraySlice<[UInt8]>) -> (form: Form, message: WorkerMessage)? {
        let delimited = frames.first == []
        let f = Array(delimited ? frames.dropFirst() : frames)
        guard f.count >= 2, f[0] == workerHeader, f[1].count == 1, let command = Command(rawValue: f[1][0]) else { return nil }
        let form: Form = delimited ? .delimited : .bare
        let args = f.dropFirst(2)
        switch command {
        case .ready:
            guard args.count == 1 || args.count == 2 else { return nil }
            return (form, .ready(service: args[args.startIndex], info: args.count == 2 ? args.last : nil))
        case .request, .partial, .final:
            // client, the empty frame, then the body.
            guard args.count >= 3, args[args.startIndex + 1].isEmpty else { return nil }
            let client = args[args.startIndex]
            let bodies = Array(args.dropFirst(2))
            switch command {
            case .request: return (form, .request(client: client, bodies: bodies))
            case .partial: return (form, .partial(client: client, bodies: bodies))
            default: return (form, .final(client: client, bodies: bodies))
            }
        case .deferral:
            return args.count == 1 ? (form, .deferral(client: args[args.startIndex])) : nil
        case .heartbeat:
            return args.isEmpty ? (form, .heartbeat) : nil
        case .disconnect:
            return args.isEmpty ? (form, .disconnect) : nil
        }
    }
}
