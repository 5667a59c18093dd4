import Foundation
import QuadMessaging
import QuadStore
import QuadWire

/// Requests from a worker to other services that never wait on the
/// worker's loop: one DEALER to the broker's internal frontend, replies
/// matched to their request by `corr`, each attempt timed by the worker's
/// timers. Like ``Client`` (the Lazy Pirate pattern) an attempt that gets
/// no answer, or the broker's 503, is sent again with the same bytes and
/// id, so the callee's idempotency record makes the retry safe; a late
/// reply to an earlier attempt answers the same id and is taken.
///
/// `done` runs on the loop exactly once: with the reply or error envelope,
/// or with ``QuadError`` `timeout` after the last attempt, or `unavailable`
/// when ``maxInFlight`` calls are waiting already. It may run before
/// ``send(_:timeoutMs:attempts:_:)`` returns (a refused send).
///
/// With several brokers (`--internal a,b`) it holds one DEALER per
/// broker's internal frontend, as ``Client`` does: calls go to the first
/// broker of the list until it fails them (an attempt that timed out, a
/// closed connection), then to the next, and so on; an attempt refused
/// (no connection yet) or timed out is sent to the next, and when a socket monitor sees a broker's connection close, every
/// call waiting on it is sent at once to another (same bytes, same id).
final class ServiceCalls {
    struct Call {
        let type: String
        /// The REQUEST's frames (the envelope's header and body), sent again
        /// as they are on a retry or a failover.
        let frames: [[UInt8]]
        let timeoutMs: Int64
        let attempts: Int
        /// The call's one timer: its attempt's deadline, or a refused
        /// send's next try.
        var timer = 0
        /// The span of the request that made the call: bound again while
        /// its continuation runs.
        let span: Span?
        let done: (Result<Envelope, QuadError>) -> Void
    }

    /// One socket per broker's internal frontend, and their monitors when
    /// there are several.
    let sockets: [Socket]
    let monitors: [SocketMonitor]
    var socket: Socket { sockets[0] }
    /// Which broker each attempt goes to, and when it is over: the rules
    /// every requester shares (``Requester``); this class carries out what
    /// they say on the sockets and the worker's timers.
    var rules: Requester<String>
    let timers: Timers
    let source: String
    let metrics: Metrics
    var pending: [String: Call] = [:]
    /// Most calls waiting for their answer at once (`max_calls_in_flight`):
    /// each holds its request's bytes until it is answered or times out.
    var maxInFlight: Int
    /// How long past an attempt's deadline it waits, so that the broker's
    /// 503 for a request no worker took arrives before we give up on it.
    static let graceMs: Int64 = 250
    static let defaultMaxInFlight = 1000

    convenience init(socket: Socket, timers: Timers, source: String, metrics: Metrics, maxInFlight: Int = ServiceCalls.defaultMaxInFlight) {
        self.init(sockets: [socket], monitors: [], timers: timers, source: source, metrics: metrics, maxInFlight: maxInFlight)
    }

    init(sockets: [Socket], monitors: [SocketMonitor], timers: Timers, source: String, metrics: Metrics,
         maxInFlight: Int = ServiceCalls.defaultMaxInFlight) {
        self.sockets = sockets
        self.monitors = monitors
        self.timers = timers
        self.source = source
        self.metrics = metrics
        self.maxInFlight = maxInFlight
        rules = Requester(brokers: sockets.count, followsAnswers: false, graceMs: ServiceCalls.graceMs)
    }

    func send(_ request: Envelope, timeoutMs: Int64, attempts: Int, _ done: @escaping (Result<Envelope, QuadError>) -> Void) {
        var request = request
        if request.src == nil { request.src = source }
        request.deadline = timeoutMs
        // A call made while a request is handled is part of its trace,
        // with the handler's span as its parent.
        let span = Span.current
        if request.traceparent == nil { request.traceparent = span?.traceparent }
        guard pending.count < maxInFlight else {
            done(.failure(.unavailable("\(pending.count) calls to other services are waiting for their answer, the limit max_calls_in_flight=\(maxInFlight)")))
            return
        }
        guard pending[request.id] == nil else {
            done(.failure(.conflict("a call with id '\(request.id)' is already waiting for its answer")))
            return
        }
        let attempts = max(1, attempts)
        pending[request.id] = Call(type: request.type, frames: Majordomo.request(request), timeoutMs: timeoutMs, attempts: attempts, span: span, done: done)
        carry(rules.start(request.id, timeoutMs: timeoutMs, attempts: attempts))
    }

    /// Carries out what the rules answer, in order. Never blocks: with no
    /// connection yet a send is refused (the sockets of several brokers are
    /// ZMQ_IMMEDIATE) and the rules try the next broker in 20 ms.
    func carry(_ actions: [Requester<String>.Action]) {
        for action in actions {
            switch action {
            case .send(let id, let broker):
                guard let call = pending[id] else { continue }
                timers.cancel(call.timer)
                do {
                    try sockets[broker].send(call.frames, dontWait: true)
                    carry(rules.taken(id, now: Clock.monotonicMillis()))
                } catch where error.wouldBlock {
                    carry(rules.refused(id, now: Clock.monotonicMillis()))
                } catch {
                    rules.abandon(id)
                    pending[id] = nil
                    finish(call, .failure(.unavailable("send of \(call.type) failed: \(error)")))
                }
            case .wait(let id, let until):
                arm(id, at: until) { [unowned self] in self.carry(self.rules.expired(id, now: Clock.monotonicMillis())) }
            case .retry(let id, let at):
                arm(id, at: at) { [unowned self] in self.carry(self.rules.resend(id)) }
            case .deliver:
                break  // only from ``receive(_:index:)``, which has the answer
            case .fail(let id, _):
                guard let call = pending.removeValue(forKey: id) else { continue }
                timers.cancel(call.timer)
                finish(call, .failure(.timeout("no answer to \(call.type) within \(call.attempts) attempts of \(call.timeoutMs) ms")))
            }
        }
    }

    /// Arms call `id`'s one timer for monotonic time `at`.
    func arm(_ id: String, at: Int64, _ action: @escaping () -> Void) {
        guard var call = pending[id] else { return }
        timers.cancel(call.timer)
        call.timer = timers.after(max(0, at - Clock.monotonicMillis()), action)
        pending[id] = call
    }

    /// Takes the monitors' news: a broker whose connection closed hands
    /// every call waiting on it to another at once, in the same attempt.
    func readMonitors() {
        for (i, m) in monitors.enumerated() {
            while let event = m.next() {
                switch event.kind {
                case .succeeded: rules.connectionOpened(i)
                case .disconnected: carry(rules.connectionClosed(i))
                default: break
                }
            }
        }
    }

    /// Takes every reply waiting on the sockets.
    func receive() {
        readMonitors()
        for (i, socket) in sockets.enumerated() { receive(socket, index: i) }
    }

    func receive(_ socket: Socket, index: Int) {
        while let frames = try? socket.receive(dontWait: true) {
            guard let answer = Majordomo.parseReply(frames), answer.isFinal, let reply = try? answer.envelope(),
                  let corr = reply.corr, pending[corr] != nil else { continue }
            // The broker's 503 (no worker in time) and 504 (a worker held it
            // past its deadline) are retried like no answer, as Client does.
            let status = reply.quadError?.status
            let retryable = status == 503 || (status == 504 && reply.src == "broker")
            for action in rules.answered(corr, from: index, retryable: retryable) {
                if case .deliver(let id) = action, let call = pending.removeValue(forKey: id) {
                    timers.cancel(call.timer)
                    finish(call, .success(reply))
                } else {
                    carry([action])
                }
            }
        }
    }

    /// Runs the caller's continuation, timed: it holds the loop like a handler.
    func finish(_ call: Call, _ result: Result<Envelope, QuadError>) {
        let started = Clock.monotonicMicros()
        Span.$current.withValue(call.span) { call.done(result) }
        metrics.ran("\(call.type) (answer)", micros: Clock.monotonicMicros() - started, src: source)
    }
}

/// The answer to a request whose handler replies later (registered with
/// ``Handlers/deferred(_:_:)``): the worker keeps the client's route and
/// sends what the handler gives here, once; what comes after the first
/// is dropped.
public final class Answer {
    public let request: Envelope
    let src: String
    let deliver: (Reply) -> Void
    public private(set) var isSent = false

    init(_ request: Envelope, src: String, deliver: @escaping (Reply) -> Void) {
        self.request = request
        self.src = src
        self.deliver = deliver
    }

    public func reply(_ body: JSON) { send(Reply(request.reply(body, src: src))) }

    public func fail(_ error: Error) { send(Reply(request.error(Handlers.quadError(error), src: src))) }

    /// Sends `reply` as it is: a stored answer keeps its bytes.
    public func send(_ reply: Reply) {
        guard !isSent else { return }
        isSent = true
        deliver(reply)
    }
}

extension Handlers {
    /// A handler that may answer after it returns: it starts the work
    /// (calls to other services with ``Worker/send(_:timeoutMs:attempts:_:)``)
    /// and gives the outcome to its ``Answer`` when it comes, while the
    /// worker serves other requests. It throws, or answers, to refuse at once.
    public typealias Later = (Request, Answer) throws -> Void

    /// Registers a handler that answers later. It keeps the idempotency
    /// of its request itself (as ``OrderSaga`` does): the runtime cannot
    /// hold a transaction open across calls to other services. In-line
    /// callers (``handle(_:)``, tests) get its answer when it comes before
    /// the handler returns, and a 503 that says so otherwise.
    public func deferred(_ type: String, _ handler: @escaping Later) {
        later[type] = handler
        queries[type] = { [unowned self] req in
            var answered: Reply?
            try handler(req, Answer(req.envelope, src: self.instance) { answered = $0 })
            guard let reply = answered?.envelope else {
                throw QuadError.unavailable("\(type) answers later: only a worker's loop waits for it")
            }
            if let error = reply.quadError { throw error }
            return reply.body
        }
    }

    /// Runs the deferred handler of `envelope`'s type; `deliver` gets the
    /// answer, once, whenever it comes (perhaps before this returns). The
    /// answer is counted and logged like any reply, with the time from the
    /// request to it; the handler's own run is what counts as slow.
    func respondLater(_ envelope: Envelope, deliver: @escaping (Reply) -> Void) {
        let span = Span.child(of: envelope.traceparent)
        let startMicros = Clock.nowMicros()
        let started = Clock.monotonicMicros()
        let answer = Answer(envelope, src: instance) { [unowned self] reply in
            let error = reply.envelope.quadError
            let us = Clock.monotonicMicros() - started
            self.metrics.record(micros: us, errorCode: error?.code, type: self.label(envelope.type), status: error?.status ?? 200)
            Handlers.logSpan(span, envelope, status: error?.status ?? 200, error: error?.code.wire, startMicros: startMicros, micros: us,
                             src: self.instance, deferred: true)
            deliver(reply)
        }
        Span.$current.withValue(span) {
            do { try later[envelope.type]?(Request(envelope), answer) } catch { answer.fail(error) }
        }
        metrics.ran(envelope.type, micros: Clock.monotonicMicros() - started, src: instance)
    }
}

extension Worker {
    /// Sends `request` to another service through the broker's internal
    /// frontend and returns at once; `done` runs on this worker's loop with
    /// the reply or error envelope, or a `timeout` (504) error after
    /// `attempts` attempts of `timeoutMs` each (same id each time), or
    /// `unavailable` (503) past `max_calls_in_flight`. Never blocks the loop.
    public func send(_ request: Envelope, timeoutMs: Int64 = 2500, attempts: Int = 3,
                     _ done: @escaping (Result<Envelope, QuadError>) -> Void) {
        guard let calls = serviceCalls() else {
            done(.failure(.unavailable("no socket to the broker's internal frontend \(endpoints.internal)")))
            return
        }
        calls.send(request, timeoutMs: timeoutMs, attempts: attempts, done)
    }

    /// Runs `action` once after `ms` on the worker's loop (a saga's next
    /// step, a fault injection's pause); events it writes are relayed after.
    public func after(_ ms: Int64, _ action: @escaping () -> Void) {
        // The action goes on the work of the request that scheduled it.
        let span = Span.current
        timers.after(ms) { [unowned self] in
            Span.$current.withValue(span) { action() }
            self.relayOutbox()
        }
    }

    func serviceCalls() -> ServiceCalls? {
        if let calls { return calls }
        do {
            let all = Endpoints.list(endpoints.internal)
            var sockets: [Socket] = []
            var monitors: [SocketMonitor] = []
            let tag = "calls-\(UInt64.random(in: 0...UInt64.max))"
            for (i, endpoint) in all.enumerated() {
                let socket = try context.socket(.dealer)
                try socket.setMaxMessageSize(Int64(maxMessageBytes) + 65536)
                try socket.setLinger(0)
                try InternalCurve.secure(socket)
                if all.count > 1 {
                    // Sends go to a live connection only; a refused one tries the next broker.
                    try socket.setImmediate(true)
                    monitors.append(try SocketMonitor(socket, name: "\(tag)-\(i)", connections: true))
                }
                try socket.connect(endpoint)
                sockets.append(socket)
            }
            let made = ServiceCalls(sockets: sockets, monitors: monitors, timers: timers, source: handlers.instance,
                                    metrics: handlers.metrics, maxInFlight: maxCallsInFlight)
            calls = made
            for s in sockets + monitors.map(\.socket) { reactor.register(s) { [unowned self] _ in self.receiveCalls(made) } }
            return made
        } catch {
            Log.error(handlers.instance, "cannot open a socket to \(endpoints.internal): \(error)")
            return nil
        }
    }

    /// Serves a request whose handler answers later. An answer given before
    /// the handler returned goes out as any reply. Otherwise the worker
    /// says DEFER (MDP/0.2 as Quad extends it, protos/README.md): the
    /// broker gives it its next request, keeps this one under its deadline
    /// (a 504 when it passes), and requeues it, or refuses it past
    /// `max_deliveries`, if this worker dies first; the answer goes out when
    /// it comes, as a FINAL on the worker's own socket.
    func serveLater(client: [UInt8], request: Envelope, link: BrokerLink) {
        var inLine = true
        var early: Reply?
        handlers.respondLater(request) { [unowned self] reply in
            if inLine { early = reply } else {
                self.owed -= 1
                self.sendLate(client: client, reply.bytes, link: link)
            }
        }
        inLine = false
        if early == nil { owed += 1 }
        if let early {
            try? link.socket.send(Majordomo.frames(.final(client: client, bodies: [early.bytes])), dontWait: true)
        } else {
            // DEFER: the broker gives this worker its next request and
            // keeps this one's deadline until the answer comes.
            try? link.socket.send(Majordomo.frames(.deferral(client: client)), dontWait: true)
        }
        relayOutbox()
    }

    /// Sends a late answer to the broker its request came from (only that
    /// broker holds the client's route), as a FINAL on the worker's own
    /// socket: the broker matches it to the deferred request by the client
    /// and the answer's id.
    func sendLate(client: [UInt8], _ bytes: [UInt8], link: BrokerLink) {
        try? link.socket.send(Majordomo.frames(.final(client: client, bodies: [bytes])), dontWait: true)
    }

    /// What the loop does when the calls' socket is readable.
    func receiveCalls(_ calls: ServiceCalls) {
        calls.receive()
        relayOutbox()
    }

}
