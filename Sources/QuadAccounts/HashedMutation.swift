import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// A mutation whose costly part, a password hash, runs before the store's
/// transaction, so no worker holds the write lock across 64 MiB of Argon2id
/// (every other worker of the service would wait on it). The runtime's
/// mutations run their handler inside the transaction, so these are
/// registered as queries that keep the idempotency record themselves, as
/// the orders saga does: `prepare` validates and hashes, outside any
/// transaction, and returns the write; the write runs in one transaction
/// with the record of the request id. Idempotency is used through
/// ``Idempotency/storedReply(_:id:)`` and ``Idempotency/store(_:id:type:reply:)``
/// only, in ``stored(_:)`` and ``store(_:_:)``.
struct HashedMutation {
    let handlers: Handlers
    let db: Database
    let relay: () -> Void

    /// `authorize` runs before any stored reply is returned; `prepare`
    /// gets the request decoded (the contract checked it) and returns the
    /// write, whose reply is the operation's type. `reveal` adds to a reply,
    /// fresh or stored, what the stored record must not keep (a refresh token).
    func register<Q, R>(_ op: TypedOperation<Q, R>, authorize: @escaping (Request, Q) throws -> Void = { _, _ in },
                        reveal: @escaping (Request, R) throws -> R = { $1 },
                        prepare: @escaping (Request, Q) throws -> () throws -> R) {
        let db = db, relay = relay, src = handlers.instance
        handlers.query(op) { req, body in try reveal(req, try Self.run(db, relay: relay, src: src, req, body, authorize: authorize, prepare: prepare)) }
    }

    static func run<Q, R: Body>(_ db: Database, relay: () -> Void, src: String, _ req: Request, _ body: Q, authorize: (Request, Q) throws -> Void,
                                prepare: (Request, Q) throws -> () throws -> R) throws -> R {
        try authorize(req, body)
        // A repeat is answered before any hash is spent on it.
        if let earlier = try Self.stored(db, req) { return try Self.answer(earlier) }
        let reply: Envelope
        var fresh: R?
        do {
            let write = try prepare(req, body)
            reply = try db.transaction {
                if let earlier = try Self.stored(db, req) { return earlier }
                let value = try write()
                let reply = req.envelope.reply(value.json, src: src)
                try Self.store(db, req, reply)
                fresh = value
                return reply
            }
        } catch {
            // The same id may have run on another worker at the same time.
            if let earlier = try? Self.stored(db, req) { return try Self.answer(earlier) }
            let refusal = Self.quadError(error)
            // A refusal is this id's answer, as for the runtime's
            // mutations; a 429 (try later) or a failure is not kept, so
            // a retry under the same id runs again.
            guard refusal.status < 500, refusal.status != 429 else { throw refusal }
            let kept = try db.transaction { () throws -> Envelope in
                if let earlier = try Self.stored(db, req) { return earlier }
                let reply = req.envelope.error(refusal, src: src)
                try Self.store(db, req, reply)
                return reply
            }
            return try Self.answer(kept)
        }
        relay()
        return try fresh ?? Self.answer(reply)
    }

    static func stored(_ db: Database, _ req: Request) throws -> Envelope? {
        try Idempotency.claim(db, id: req.id, type: req.envelope.type, owner: Idempotency.owner(of: req.envelope))
    }

    static func store(_ db: Database, _ req: Request, _ reply: Envelope) throws {
        try Idempotency.store(db, id: req.id, type: req.envelope.type, owner: Idempotency.owner(of: req.envelope), reply: reply)
    }

    /// A stored reply as a handler's result: its body read back as the
    /// reply's type (it was written from one), or its error thrown.
    static func answer<R: Body>(_ e: Envelope) throws -> R {
        if let error = e.quadError { throw error }
        return try R(json: e.body)
    }

    static func quadError(_ error: Error) -> QuadError {
        switch error {
        case let e as QuadError: return e
        case let e as StoreError: return e.quadError
        default: return .internal("\(error)")
        }
    }
}
