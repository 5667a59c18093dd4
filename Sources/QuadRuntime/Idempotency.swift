import QuadStore
import QuadWire

/// What an idempotency record means: it belongs to its owner (``RequestOwner``),
/// and the same id from anyone else, or with another type, is refused with
/// 409 and learns nothing of the first reply. The store (QuadStore's
/// ``Idempotency``) only keeps the records.
extension Idempotency {
    /// Whom a request's record belongs to: ``RequestOwner/of(user:role:caller:)``,
    /// the function the broker uses too.
    public static func owner(user: String?, role: String?, caller: String?) -> String {
        RequestOwner.of(user: user, role: role, caller: caller)
    }

    public static func owner(of envelope: Envelope) -> String { RequestOwner.of(envelope) }

    /// The 409 for an id that someone else used, or used for another type.
    /// It says nothing of the first request beyond that the id is taken: to
    /// another caller, not even its type.
    public static func taken(type: String, storedType: String, sameOwner: Bool = false) -> QuadError {
        if sameOwner && storedType != type {
            return .conflict("this request id was used for another request type: send a new id for \(type)", details: ["reason": "id_taken"])
        }
        return .conflict("this request id was used by another caller: send a new id", details: ["reason": "id_taken"])
    }

    /// The reply stored for `id` when `owner` sent it as `type`; nil when
    /// the id is unused; a 409 ``QuadError`` when the record is someone
    /// else's or of another type (checked before the stored reply is used).
    public static func claim(_ db: Database, id: String, type: String, owner: String) throws -> Envelope? {
        try claimEncoded(db, id: id, type: type, owner: owner).flatMap { try? Envelope.decode($0, maxBytes: .max) }
    }

    /// The same, as the bytes that were sent the first time: a retry gets
    /// them back as they are, never decoded and encoded again.
    public static func claimEncoded(_ db: Database, id: String, type: String, owner: String) throws -> [UInt8]? {
        guard let record = try record(db, id: id) else { return nil }
        let sameOwner = record.owner == owner
        guard record.type == type, sameOwner else { throw taken(type: type, storedType: record.type, sameOwner: sameOwner) }
        return record.reply
    }

    public static func store(_ db: Database, id: String, type: String, owner: String, reply: Envelope) throws {
        try store(db, id: id, type: type, owner: owner, encoded: reply.encoded())
    }

    /// Keeps `encoded`, the reply's bytes as they are sent, dated now.
    public static func store(_ db: Database, id: String, type: String, owner: String, encoded: [UInt8]) throws {
        try store(db, id: id, type: type, owner: owner, encoded: encoded, createdMs: Int64(Clock.nowMillis()))
    }
}

extension StoreError {
    /// The error a caller gets for a store's failure: 503 for a busy, full
    /// or lost store (worth a retry; the transaction rolled back), 500 for
    /// the rest.
    public var quadError: QuadError {
        switch kind {
        case .busy, .connection, .full: return .unavailable("store: \(message)")
        default: return .internal("store: \(message)")
        }
    }
}
