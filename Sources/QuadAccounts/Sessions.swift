import QuadAuth
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Sessions that end before their token expires. A revocation names one
/// token (`jti`) or every token of a user signed before an instant
/// (`before_ms`: a password or role change, a logout of every session); it
/// is kept until `until_ms`, when every token it names has expired anyway.
/// Each one is published as `accounts.session.revoked` through the outbox,
/// so the broker learns of it (and catches up with `accounts.events.since`
/// or `accounts.revocations` after a restart).
///
/// The broker strips the token before a request reaches accounts, so
/// logout and refresh take the token in their body and accept it only when
/// it is signed by accounts' own key and belongs to the signed-in user.
enum Sessions {
    static let event = Contract.Accounts.sessionRevoked.type

    /// Records a revocation and its event, inside the caller's transaction.
    /// Per user, one row holds the latest `before_ms`; past
    /// `maxPerUser` single-token rows, they fold into one `before_ms` row.
    static func revoke(_ db: Database, user: String, jti: String?, before: Int64?, until: Int64, maxPerUser: Int = Int.max) throws {
        if let jti, !jti.isEmpty {
            try db.execute("""
                INSERT INTO revocations (id, user_id, jti, before_ms, until_ms) VALUES ($1, $2, $3, NULL, $4)
                ON CONFLICT (id) DO NOTHING
                """, .text("jti:" + jti), .text(user), .text(jti), .int(until))
            let count = try db.queryOne("SELECT COUNT(*) AS n FROM revocations WHERE user_id = $1 AND jti IS NOT NULL", .text(user))?.int("n") ?? 0
            guard count > maxPerUser else {
                try Outbox.append(db, type: event, body: revocation(user: user, jti: jti, before: nil, until: until).json)
                return
            }
            // Too many single tokens: one entry ends every session signed until now.
            let latest = try db.queryOne("SELECT MAX(until_ms) AS u FROM revocations WHERE user_id = $1", .text(user))?.int("u") ?? until
            try db.execute("DELETE FROM revocations WHERE user_id = $1 AND jti IS NOT NULL", .text(user))
            try revoke(db, user: user, jti: nil, before: Int64(Clock.nowMillis()) + 1, until: max(latest, until))
            return
        }
        let before = before ?? Int64(Clock.nowMillis())
        try db.execute("""
            INSERT INTO revocations (id, user_id, jti, before_ms, until_ms) VALUES ($1, $2, NULL, $3, $4)
            ON CONFLICT (id) DO UPDATE SET before_ms = excluded.before_ms, until_ms = excluded.until_ms
            """, .text("user:" + user), .text(user), .int(before), .int(until))
        try Outbox.append(db, type: event, body: revocation(user: user, jti: nil, before: before, until: until).json)
    }

    static func revocation(user: String, jti: String?, before: Int64?, until: Int64) -> Contract.Accounts.Revocation {
        Contract.Accounts.Revocation(user: user, jti: jti, beforeMs: before, untilMs: until)
    }

    /// Forgets revocations whose tokens have all expired.
    static func prune(_ db: Database, now: Int64 = Int64(Clock.nowMillis())) throws {
        try db.execute("DELETE FROM revocations WHERE until_ms <= $1", .int(now))
    }

    static func isRevoked(_ db: Database, _ claims: TokenClaims, now: Int64) throws -> Bool {
        try db.queryOne("""
            SELECT id FROM revocations WHERE until_ms > $1 AND (id = $2 OR (id = $3 AND before_ms > $4)) LIMIT 1
            """, .int(now), .text("jti:" + claims.tokenID), .text("user:" + claims.user), .int(claims.issuedAt)) != nil
    }

    /// `token` (the body's: the broker does not pass the envelope's token
    /// on), checked: accounts' signature, and the signed-in user's. Expiry
    /// is left to the caller.
    static func ownToken(_ req: Request, _ token: String, key: VerifyingKey) throws -> TokenClaims {
        let user = try req.requireUser()
        let claims: TokenClaims
        do throws(TokenError) { claims = try key.verify(token, now: .min) } catch { throw error.quadError }
        guard claims.user == user else { throw QuadError.forbidden("body.token is another user's token") }
        return claims
    }

    static func register(_ h: Handlers, db: Database, settings: Accounts.Settings, relay: @escaping () -> Void) {
        let key = settings.signingKey.verifyingKey
        let maxPerUser = settings.limits.maxRevokedTokensPerUser

        typealias C = Contract.Accounts
        h.mutation(C.logout) { req, body in
            let claims = try ownToken(req, body.token, key: key)
            let all = body.all ?? false
            let now = Int64(Clock.nowMillis())
            if all || claims.tokenID.isEmpty {
                // Every session: tokens signed before now, whatever their ttl.
                let until = now + Accounts.maxTokenTTLSeconds * 1000
                try revoke(db, user: claims.user, jti: nil, before: now + 1, until: until)
                try RefreshTokens.revoke(db, user: claims.user)
                return revocation(user: claims.user, jti: nil, before: now + 1, until: until)
            }
            // The session's refresh tokens end with it, expired or not.
            try RefreshTokens.revoke(db, user: claims.user, sessionJTI: claims.tokenID)
            guard claims.expiresAt > now else { return revocation(user: claims.user, jti: claims.tokenID, before: nil, until: claims.expiresAt) }
            try revoke(db, user: claims.user, jti: claims.tokenID, before: nil, until: claims.expiresAt, maxPerUser: maxPerUser)
            return revocation(user: claims.user, jti: claims.tokenID, before: nil, until: claims.expiresAt)
        }

        // A mutation that keeps its own record (as HashedMutation does): the
        // refresh token it answers is never stored, only derived again.
        h.query(C.refresh) { req, body in
            if let presented = body.refreshToken {
                return try RefreshTokens.trade(db, presented, req: req, src: h.instance, settings: settings, relay: relay)
            }
            let owner = Idempotency.owner(of: req.envelope)
            if let earlier = try Idempotency.claim(db, id: req.id, type: req.envelope.type, owner: owner) {
                if let error = earlier.quadError { throw error }
                return try RefreshTokens.reveal(db, try C.Session(json: earlier.body), requestID: req.id, settings: settings)
            }
            let claims = try ownToken(req, body.token ?? "", key: key)
            let now = Int64(Clock.nowMillis())
            guard claims.expiresAt > now else { throw TokenError.expired(at: claims.expiresAt).quadError }
            let session = try db.transaction { () throws -> C.Session in
                if let earlier = try Idempotency.claim(db, id: req.id, type: req.envelope.type, owner: owner) { return try C.Session(json: earlier.body) }
                guard try !isRevoked(db, claims, now: now) else {
                    throw QuadError.unauthorized("body.token was revoked (logged out, or the password or role changed): log in again")
                }
                guard let row = try db.queryOne("SELECT role FROM users WHERE id = $1", .text(claims.user)) else {
                    throw QuadError.notFound("no account for user '\(claims.user)'")
                }
                // The old token ends: one session, one live token.
                if !claims.tokenID.isEmpty {
                    try revoke(db, user: claims.user, jti: claims.tokenID, before: nil, until: claims.expiresAt, maxPerUser: maxPerUser)
                }
                let (session, jti) = Accounts.issueSession(user: claims.user, role: row.string("role"), settings: settings)
                try RefreshTokens.issue(db, user: claims.user, family: nil, requestID: req.id, sessionJTI: jti, settings: settings)
                try Idempotency.store(db, id: req.id, type: req.envelope.type, owner: owner, reply: req.envelope.reply(session.json, src: h.instance))
                return session
            }
            relay()
            return try RefreshTokens.reveal(db, session, requestID: req.id, settings: settings)
        }

        h.query(C.revocations) { req, _ in
            try req.requireService()
            let now = Int64(Clock.nowMillis())
            let rows = try db.query("SELECT user_id, jti, before_ms, until_ms FROM revocations WHERE until_ms > $1 ORDER BY until_ms, id", .int(now))
            return C.RevocationList(revocations: rows.map { r in
                revocation(user: r.string("user_id"), jti: r["jti"].isNull ? nil : r.string("jti"),
                     before: r["before_ms"].isNull ? nil : r.int("before_ms"), until: r.int("until_ms"))
            })
        }
    }
}
