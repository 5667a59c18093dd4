import QuadContract
import QuadWire

/// Registering handlers by their contract operation: the handler receives
/// the request decoded into its ``Body`` type (after the ``Validator`` has
/// checked it against the same declaration) and returns the reply's type,
/// encoded here once. The reply is its schema by construction of the type;
/// what the type cannot say (a range, a pattern) is checked in debug builds.
extension Handlers {
    /// Registers a read-only handler for `op`.
    public func query<Q, R>(_ op: TypedOperation<Q, R>, _ handler: @escaping (Request, Q) throws -> R) {
        query(op.type, Handlers.typed(op, handler))
    }

    /// Registers a handler that changes state for `op` (see ``mutation(_:_:)``).
    public func mutation<Q, R>(_ op: TypedOperation<Q, R>, _ handler: @escaping (Request, Q) throws -> R) {
        mutation(op.type, Handlers.typed(op, handler))
    }

    /// Registers a handler that answers later for `op` (see
    /// ``deferred(_:_:)``), given the request as its type. The worker's
    /// loop hands a deferred request straight to its handler, so the
    /// ``Validator`` runs here. The reply goes out through the ``Answer``,
    /// which also sends stored answers as they are: the handler writes
    /// `R`'s ``Body/json`` there (an answer to store is an envelope).
    public func deferred<Q, R>(_ op: TypedOperation<Q, R>, _ handler: @escaping (Request, Q, Answer) throws -> Void) {
        deferred(op.type) { [unowned self] req, answer in
            if let refusal = refusal(req.envelope) { throw refusal }
            try handler(req, try Handlers.decoded(op, req), answer)
        }
    }

    static func typed<Q, R>(_ op: TypedOperation<Q, R>, _ handler: @escaping (Request, Q) throws -> R) -> Handler {
        { req in try handler(req, try decoded(op, req)).json }
    }

    /// `req`'s body as `op`'s request type.
    static func decoded<Q, R>(_ op: TypedOperation<Q, R>, _ req: Request) throws -> Q {
        do { return try Q(json: req.body) } catch {
            // The validator leaves the body of a caller with no identity
            // unread when the operation needs one (``refusal(_:)``): such
            // a caller learns it must sign in, not the body's rules.
            if op.operation.auth != .none, req.user == nil, req.role == nil, req.envelope.caller?.hasPrefix("service:") != true {
                throw QuadError.unauthorized("\(req.envelope.type) needs a signed-in user")
            }
            throw error
        }
    }

    /// In debug builds (every test run), a reply that does not fit its
    /// type's reply schema is a 500 naming the field, never a reply the
    /// phone cannot read: a typed reply has its fields by construction,
    /// and this checks its bounds and patterns, and the whole of the
    /// replies of handlers still written in JSON. Release builds skip it.
    static func replyChecked(_ handler: @escaping Handler) -> Handler {
        #if DEBUG
        return { req in
            let reply = try handler(req)
            // events.since answers the stored envelopes as they were
            // written (checked then, by the event's own schema), not
            // rebuilt: its reply is not re-checked here.
            if req.envelope.type.hasSuffix(".events.since") { return reply }
            if let misfit = Contract.validateReply(req.envelope.type, reply) {
                throw QuadError.internal("reply does not fit the contract: \(misfit.message)")
            }
            return reply
        }
        #else
        return handler
        #endif
    }
}
