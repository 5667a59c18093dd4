import QuadWire

/// Whom a request belongs to: the owner of its idempotency record in a
/// service, and, in the broker, who alone may replace it while it is
/// queued. One function for both, so that what the broker lets a retry
/// replace is what the service will later answer from its record.
public enum RequestOwner {
    /// `user:<id>` when the broker verified a user; else the broker's
    /// `caller` header (`key:<Z85>` for an anonymous client, `conn:<hex>`
    /// with CURVE off, `service:<src>` on the internal frontend); else
    /// `anonymous`. A service acting for a user (role `service`) owns its
    /// records together with that user, so neither alone can replay them.
    public static func of(user: String?, role: String?, caller: String?) -> String {
        let who: String? = user.flatMap { $0.isEmpty ? nil : "user:" + $0 }
        if role == "service" {
            let service = caller.flatMap { $0.isEmpty ? nil : $0 } ?? "service"
            return who.map { service + " for " + $0 } ?? service
        }
        return who ?? caller.flatMap { $0.isEmpty ? nil : $0 } ?? "anonymous"
    }

    public static func of(_ envelope: Envelope) -> String {
        of(user: envelope.user, role: envelope.role, caller: envelope.caller)
    }
}
