import QuadStore
import QuadWire

/// The event envelope (source, seq, ts, type, body) of what the outbox
/// keeps. The store keeps bytes; this is where they are encoded, once, when
/// the event is written, and read back.
extension Outbox {
    /// Appends an event inside the caller's transaction; returns its seq.
    /// With a ``Database/eventSource`` (set by the service's ``Handlers``)
    /// the whole envelope is encoded here, once, and the relay sends those
    /// bytes as they are; without one only the body is kept.
    @discardableResult
    public static func append(_ db: Database, type: String, body: JSON, id: String = MessageID.make()) throws -> Int64 {
        let ts = Int64(Clock.nowMillis())
        guard let src = db.eventSource else { return try append(db, id: id, type: type, ts: ts, bodyText: body.text) }
        return try append(db, id: id, type: type, ts: ts) { seq in
            // An event written while a request is handled carries its trace.
            Envelope(id: id, type: type, kind: .event, ts: ts, src: src, seq: seq, traceparent: Span.current?.traceparent, body: body).encoded()
        }
    }
}

extension StoredEvent {
    /// The event's body: from the encoded envelope, or the row's own column.
    public var body: JSON {
        if let encoded { return (try? JSON.parse(encoded))?["body"] ?? .null }
        return (try? JSON.parse(bodyColumn)) ?? .null
    }

    /// The bytes to publish: the stored envelope as it is, or (an old row)
    /// one built from the columns.
    public func bytes(src: String) -> [UInt8] { encoded ?? built(src: src).encoded() }

    /// The envelope as a value, parsed from the stored bytes when there are.
    public func envelope(src: String) -> Envelope {
        if let encoded, let e = try? Envelope.decode(encoded, maxBytes: .max) { return e }
        return built(src: src)
    }

    /// The envelope as JSON (for `events.since`), parsed from the stored bytes.
    public func json(src: String) -> JSON {
        if let encoded, let value = try? JSON.parse(encoded) { return value }
        return built(src: src).json
    }

    func built(src: String) -> Envelope {
        Envelope(id: id, type: type, kind: .event, ts: ts, src: src, seq: seq, body: (try? JSON.parse(bodyColumn)) ?? .null)
    }
}
