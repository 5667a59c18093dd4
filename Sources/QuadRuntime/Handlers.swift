import Foundation
import QuadContract
import QuadStore
import QuadWire

/// A request as a handler sees it.
public struct Request: Sendable {
    public let envelope: Envelope

    public init(_ envelope: Envelope) { self.envelope = envelope }

    public var body: JSON { envelope.body }
    public var id: String { envelope.id }
    /// The user the broker verified; never taken from a phone.
    public var user: String? { envelope.user }
    public var role: String? { envelope.role }

    /// The verified user, or 401.
    public func requireUser() throws(QuadError) -> String {
        guard let user, !user.isEmpty else { throw .unauthorized("\(envelope.type) needs a signed-in user") }
        return user
    }

    /// An admin, or one of Quad's services (the internal frontend).
    var seesInstances: Bool { role == "admin" || role == "service" || envelope.caller?.hasPrefix("service:") == true }

    /// 403 unless the caller is an admin.
    public func requireAdmin() throws(QuadError) { try requireRole(["admin"], for: "admins") }

    /// 403 unless the caller is one of Quad's services (the internal
    /// frontend) or an admin.
    public func requireService() throws(QuadError) { try requireRole(["service", "admin"], for: "Quad's services and admins") }

    /// 401 when nobody signed in; 403 unless the caller has one of `roles`.
    public func requireRole(_ roles: Set<String>, for who: String) throws(QuadError) {
        if let role, roles.contains(role) { return }
        if user == nil && role == nil { throw .unauthorized("\(envelope.type) needs a signed-in user") }
        throw .forbidden("\(envelope.type) is for \(who) only")
    }
}

/// A service's request handlers, by type. Queries run as they are;
/// mutations run in one transaction with their idempotency record, so a
/// repeated id returns the stored reply instead of a second effect.
/// Every service also answers `<service>.sys.health`, `<service>.sys.metrics`
/// and, when it has a store, `<service>.events.since`.
public final class Handlers {
    public typealias Handler = (Request) throws -> JSON

    public let service: String
    public let instance: String
    public let db: Database?
    public let metrics: Metrics
    var queries: [String: Handler] = [:]
    var mutations: [String: Handler] = [:]
    /// Handlers that answer after they return (``deferred(_:_:)``); each
    /// is also among `queries`, for callers that want the answer in line.
    var later: [String: Later] = [:]
    /// Queries whose reply body is already encoded (``query(_:encoded:)``).
    var encodedQueries: [String: EncodedHandler] = [:]
    /// A mutation committed since the worker last relayed: the outbox may
    /// hold new events, which the worker publishes once the reply is sent.
    var outboxWritten = false
    /// Largest page `events.since` returns (`max_events_page`, from the contract).
    public static let maxEventsPage = Int(Contract.Common.maxEventsPage)

    public init(service: String, instance: String, db: Database?) {
        self.service = service
        self.instance = instance
        self.db = db
        metrics = Metrics(service: service)
        // The outbox encodes each event's envelope once, as it is written,
        // with this service as its source.
        db?.eventSource = service
        // Which process answered (instance, pid) is for admins and Quad's
        // own services: a stranger learns a service is up, not its layout.
        // The request has no fields (the validator checks it; an absent
        // body is allowed): nothing to decode.
        query("\(service).sys.health") { [unowned self] req in
            let sees = req.seesInstances
            return Contract.Common.Health(service: self.service, instance: sees ? self.instance : nil, status: "ok",
                                          pid: sees ? Int64(getpid()) : nil).json
        }
        query("\(service).sys.metrics") { [unowned self] req in
            var m = self.metrics.reply
            if req.seesInstances { m.instance = self.instance }
            return m.json
        }
        answerTypes()
        if let db {
            query("\(service).events.since", encoded: { req in
                // An absent body is every default.
                let body = try Contract.Common.EventsSinceRequest(json: req.body.isNull ? .object([:]) : req.body)
                let (after, limit) = (body.after, body.limit)
                guard after >= 0 else { throw QuadError.badRequest("body.after must be >= 0") }
                guard (1...Int64(Handlers.maxEventsPage)).contains(limit) else {
                    throw QuadError.badRequest("body.limit must be between 1 and \(Handlers.maxEventsPage) (max_events_page)")
                }
                // Read in one transaction, so `oldest` and the events agree
                // while the pruning runs on another worker.
                return try db.transaction(immediate: false) { () throws -> [UInt8] in
                    let events = try Outbox.since(db, after: after, limit: Int(limit))
                    let oldest = try Outbox.oldestSeq(db)
                    var rest: [String: JSON] = ["last": .int(try Outbox.lastSeq(db)), "oldest": .int(oldest)]
                    // Events after `after` that were pruned: the subscriber
                    // cannot have them any more and must know it. (`after`
                    // is the caller's, up to Int64.max: `after + 1` would
                    // trap; a difference of two values >= 0 cannot.)
                    if oldest - after > 1 { rest["missed"] = .int(oldest - after - 1) }
                    return Handlers.eventsPage(events.map { $0.bytes(src: self.service) }, rest)
                }
            })
        }
    }

    /// The body of an `events.since` reply, `{"events":[...],"last":..,
    /// "missed":..,"oldest":..}`, with each event the stored envelope's
    /// bytes as they are: parsing them and encoding them again was 30% of
    /// a publisher's time while a subscriber caught up. The bytes are
    /// what `JSON.encoded()` writes for the same value: keys sorted
    /// (`events` comes before the others), compact.
    public static func eventsPage(_ events: [[UInt8]], _ rest: [String: JSON]) -> [UInt8] {
        var out = Array(#"{"events":["#.utf8)
        out.reserveCapacity(events.reduce(64) { $0 + $1.count + 1 })
        for (n, e) in events.enumerated() {
            if n > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: e)
        }
        out.append(UInt8(ascii: "]"))
        let tail = JSON.object(rest).encoded()  // {"last":..,...}: never empty here
        if tail.count > 2 { out.append(UInt8(ascii: ",")) }
        out.append(contentsOf: tail.dropFirst())
        return out
    }

    /// A handler whose reply body comes already encoded, as JSON bytes.
    public typealias EncodedHandler = (Request) throws -> [UInt8]

    /// Registers a read-only handler that returns its reply body as JSON
    /// bytes, written into the reply envelope as they are (see
    /// ``Reply/init(_:body:)``). The debug-build reply check does not see
    /// these bytes (it would have to parse them, the cost this avoids):
    /// use it for replies built from bytes checked when they were written.
    /// Callers that want the value in line (``queries``) get it parsed.
    public func query(_ type: String, encoded handler: @escaping EncodedHandler) {
        encodedQueries[type] = handler
        queries[type] = { req in try JSON.parse(try handler(req)) }
    }

    /// Registers a read-only handler.
    public func query(_ type: String, _ handler: @escaping Handler) { queries[type] = Handlers.replyChecked(handler) }

    /// Registers a handler that changes state: it runs inside a transaction
    /// with the idempotency record of the request id.
    public func mutation(_ type: String, _ handler: @escaping Handler) { mutations[type] = Handlers.replyChecked(handler) }

    public var types: [String] { (Array(queries.keys) + Array(mutations.keys)).sorted() }

    /// The `type` label of a request in the metrics: its type if this
    /// worker answers it, else "other".
    func label(_ type: String) -> String { queries[type] != nil || mutations[type] != nil ? type : "other" }

    /// Handles one request envelope and returns the reply or error envelope.
    /// A convenience over ``reply(to:)`` for callers that want the value.
    public func handle(_ envelope: Envelope) -> Envelope { reply(to: envelope).envelope }

    /// Handles one request envelope; the reply comes with its bytes, encoded
    /// once: what the worker sends, what the idempotency record keeps, and,
    /// for a repeated id, the stored bytes as they are.
    /// The request's span is this worker's: a child of the `traceparent`
    /// it came with (a new trace without one), bound while it is handled,
    /// and its line (type, id, status, time) is the span's line.
    public func reply(to envelope: Envelope) -> Reply {
        let span = Span.child(of: envelope.traceparent)
        let startMicros = Clock.nowMicros()
        let started = Clock.monotonicMicros()
        let reply = Span.$current.withValue(span) { dispatch(envelope) }
        let error = reply.quadError
        let us = Clock.monotonicMicros() - started
        metrics.record(micros: us, errorCode: error?.code, type: label(envelope.type), status: error?.status ?? 200)
        metrics.ran(envelope.type, micros: us, src: instance)
        Handlers.logSpan(span, envelope, status: error?.status ?? 200, error: error?.code.wire, startMicros: startMicros, micros: us, src: instance)
        return reply
    }

    /// One line per request handled, when its answer is given: the span
    /// (trace, span, parent), what it was (type, id, user), when it started
    /// (`start_ms`, and `start_us` for ordering within a millisecond), how
    /// long it took (`us`) and its status.
    static func logSpan(_ span: Span, _ envelope: Envelope, status: Int, error: String?, startMicros: Int64, micros: Int64,
                        src: String, deferred: Bool = false) {
        Log.span(src: src, trace: span.traceID, span: span.spanID, parent: span.parentID, type: envelope.type, id: envelope.id, status: status,
                 startMicros: startMicros, micros: micros, user: envelope.user, error: error, deferred: deferred)
    }

    func dispatch(_ envelope: Envelope) -> Reply {
        let src = instance
        guard envelope.kind == .request else {
            return Reply(envelope.error(.badRequest("expected kind 'request', got '\(envelope.kind.rawValue)'"), src: src))
        }
        if let refusal = refusal(envelope) { return Reply(envelope.error(refusal, src: src)) }
        let request = Request(envelope)
        if let handler = encodedQueries[envelope.type] {
            do {
                return Reply(envelope.reply(.null, src: src), body: try handler(request))
            } catch {
                return Reply(envelope.error(Handlers.quadError(error), src: src))
            }
        }
        if let handler = queries[envelope.type] {
            do {
                return Reply(envelope.reply(try handler(request), src: src))
            } catch {
                return Reply(envelope.error(Handlers.quadError(error), src: src))
            }
        }
        guard let handler = mutations[envelope.type] else {
            return Reply(envelope.error(.notFound("unknown request type '\(envelope.type)' for service '\(service)'"), src: src))
        }
        guard let db else {
            do { return Reply(envelope.reply(try handler(request), src: src)) } catch { return Reply(envelope.error(Handlers.quadError(error), src: src)) }
        }
        // The record of this id is bound to who sent it and to its type:
        // `claim` answers the stored reply only to that owner, and a 409
        // that says nothing of it to anyone else. The handler's own checks
        // (a signed-in user, ownership) run on every first attempt; a
        // repeat gets the reply only when it comes from the same owner,
        // who passed them.
        let owner = Idempotency.owner(of: envelope)
        do {
            let reply = try db.transaction { () throws -> Reply in
                if !Faults.skipIdempotency,
                   let stored = try Idempotency.claimEncoded(db, id: envelope.id, type: envelope.type, owner: owner) { return Reply(stored: stored) }
                let answer = envelope.reply(try handler(request), src: src)
                let encoded = answer.encoded()
                if Faults.skipIdempotency {
                    try Faults.storeSkippingCheck(db, id: envelope.id, type: envelope.type, owner: owner, reply: answer)
                } else {
                    try Idempotency.store(db, id: envelope.id, type: envelope.type, owner: owner, encoded: encoded)
                }
                return Reply(answer, encoded: encoded)
            }
            outboxWritten = true
            return reply
        } catch {
            // The same id may have run on another worker at the same time
            // (a client's retry and the broker's redelivery): its stored
            // reply is the answer, and this attempt's failure is not.
            // Someone else's record is a 409, whichever attempt saw it.
            // A refusal (4xx) is the request's answer too, stored in the
            // transaction of that one claim: a retry of the same id gets
            // the same refusal. Failures (5xx) are not kept, so a retry runs
            // again; nor is a 401, so an anonymous stranger cannot fill the
            // store with records of requests that did nothing.
            let quadError = Handlers.quadError(error)
            let answer = envelope.error(quadError, src: src)
            let kept = quadError.status < 500 && quadError.status != 401 ? answer.encoded() : nil
            do {
                let earlier = try db.transaction { () throws -> [UInt8]? in
                    if let earlier = try Idempotency.claimEncoded(db, id: envelope.id, type: envelope.type, owner: owner) { return earlier }
                    if let kept { try Idempotency.store(db, id: envelope.id, type: envelope.type, owner: owner, encoded: kept) }
                    return nil
                }
                if let earlier { return Reply(stored: earlier) }
            } catch let taken as QuadError {
                return Reply(envelope.error(taken, src: src))
            } catch {}
            return kept.map { Reply(answer, encoded: $0) } ?? Reply(answer)
        }
    }

    static func quadError(_ error: Error) -> QuadError {
        switch error {
        case let e as QuadError: return e
        case let e as StoreError: return e.quadError
        default: return .internal("\(error)")
        }
    }
}

// MARK: - The contract

extension Handlers {
    /// Why `envelope`'s body is not a request of its type as the contract
    /// declares it (400 naming the field and the limit; 403 for a body that
    /// names a user), or nil. A request for a signed-in caller that came
    /// without one is left to its handler, which answers 401 or 403 before
    /// it reads the body: a stranger learns nothing of the body's rules.
    func refusal(_ envelope: Envelope) -> QuadError? {
        guard queries[envelope.type] != nil || mutations[envelope.type] != nil,
              let op = Contract.operation(envelope.type) else { return nil }
        if op.auth != .none, envelope.user == nil, envelope.role == nil, envelope.caller?.hasPrefix("service:") != true { return nil }
        guard let failure = Contract.validate(envelope.type, envelope.body) else { return nil }
        if failure.tooLarge { return .tooLarge(failure.message) }
        if failure.namesUser, op.auth == .user {
            return .forbidden("\(envelope.type) acts on the signed-in user only: body.user cannot name a user")
        }
        return .badRequest(failure.message)
    }

    /// The types registered here that the contract does not declare: a
    /// worker with any refuses to start (``ServiceMain``), and a test
    /// of every service's handlers checks that there are none.
    public var undeclared: [String] { types.filter { Contract.operation($0) == nil } }

    /// Registered as a query but declared a mutation or the other way round.
    /// (orders.place, orders.cancel, orders.return, accounts.register and
    /// accounts.profile.update are declared mutations and run as queries:
    /// they keep their own idempotency record, outside the handler's
    /// transaction, or are idempotent by the state they leave, as a return.)
    public var misdeclared: [String] {
        types.filter { type in
            guard let op = Contract.operation(type) else { return false }
            return (op.kind == .mutation) != (mutations[type] != nil)
        }
    }

    /// `<service>.sys.types`: what this worker answers, from the contract.
    func answerTypes() {
        query("\(service).sys.types") { [unowned self] _ in
            let rows = self.types.compactMap { type -> Contract.Common.Types.Row? in
                guard let op = Contract.operation(type), let paths = Contract.schemaPaths(type) else { return nil }
                return .init(type: type, kind: op.kind.rawValue, auth: op.auth.rawValue, request: paths.request, reply: paths.reply)
            }
            return Contract.Common.Types(service: self.service, types: rows).json
        }
    }
}

/// A reply and its bytes, encoded once. A fresh reply keeps its envelope; a
/// stored one (a repeated id) is only bytes, decoded when someone asks for
/// the value (tests, metrics), never to be sent.
public struct Reply: Sendable {
    /// What the reply was built from; it is encoded once, in the form it
    /// goes out in (one frame, or a header and a body: ``frames(split:)``).
    enum Storage: Sendable {
        /// An envelope not encoded yet.
        case envelope(Envelope)
        /// An envelope and its one-frame encoding (a stored record's).
        case encoded(Envelope?, [UInt8])
        /// A header and a body encoded apart (``init(_:body:)``).
        case parts(header: [UInt8], body: [UInt8], isReply: Bool)
    }
    let storage: Storage

    public init(_ envelope: Envelope) { storage = .envelope(envelope) }

    public init(stored bytes: [UInt8]) { storage = .encoded(nil, bytes) }

    /// `envelope` with its one-frame encoding `bytes`, already made (to be
    /// stored): sent as it is, never encoded again.
    init(_ envelope: Envelope, encoded bytes: [UInt8]) { storage = .encoded(envelope, bytes) }

    /// A reply whose body is JSON bytes already encoded: `envelope`'s
    /// fields with `body` in place of its own, copied as they are.
    public init(_ envelope: Envelope, body: [UInt8]) {
        storage = .parts(header: envelope.encodedHeader(), body: body, isReply: envelope.kind == .reply)
    }

    /// The envelope in one frame. With ``init(_:body:)`` the bytes are
    /// those `envelope.encoded()` would write with that body decoded: keys
    /// sorted, and `body` sorts before every other key of an envelope, so
    /// it comes first.
    public var bytes: [UInt8] {
        switch storage {
        case let .envelope(e): return e.encoded()
        case let .encoded(_, b): return b
        case let .parts(header, body, _):
            var out = Array(#"{"body":"#.utf8)
            out.reserveCapacity(body.count + header.count + 8)
            out.append(contentsOf: body)
            if header.count > 2 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: header.dropFirst())
            return out
        }
    }

    /// The frames of the answer to a request that came in one frame or,
    /// `split`, in two: a one-frame client gets one frame; a split one gets
    /// the header and the body apart, or one frame when the reply was
    /// encoded whole already (clients read both).
    public func frames(split: Bool) -> [[UInt8]] {
        guard split else { return [bytes] }
        switch storage {
        case let .envelope(e):
            let parts = e.encodedParts()
            return [parts.header, parts.body]
        case let .encoded(_, b): return [b]
        case let .parts(header, body, _): return [header, body]
        }
    }

    /// The error this reply carries, if any; a reply built from an
    /// encoded body is never one (not decoded to find out).
    public var quadError: QuadError? {
        if case let .parts(_, _, isReply) = storage, isReply { return nil }
        return envelope.quadError
    }

    public var envelope: Envelope {
        switch storage {
        case let .envelope(e): return e
        case let .encoded(e?, _): return e
        default:
            let b = bytes
            do { return try Envelope.decode(b, maxBytes: .max) } catch {
                return .error(.internal("stored reply unreadable: \(error.message)"), corr: Envelope.salvageID(b))
            }
        }
    }
}
