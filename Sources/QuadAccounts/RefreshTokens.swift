import QuadAuth
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// Refresh tokens: what renews a session after its token expired (a phone
/// offline past the hour), without the password. Opaque (`rt1.` and 32
/// bytes in base64url), long-lived (`refresh_token_ttl_seconds`, 30 days
/// by default), kept only as their SHA-256, used once: accounts.refresh
/// trades one for a new session and the next token of its family, and a
/// token used a second time (a thief's copy, or the user's after a thief's)
/// ends its whole family, and every session token the family minted that
/// has not expired yet (each is revoked as a logout revokes one, so every
/// broker refuses it within a second). A password change, a role change and
/// a logout end them too.
///
/// A trade keeps its reply as every mutation does, in an idempotency record
/// of its caller (``RequestOwner``: the client's CURVE key): a retry by that
/// caller gets the same session again, and anyone else who sends the same
/// request id is refused (409) and gets nothing. A user has at most `max_refresh_tokens_per_user` live
/// families (phones signed in); the oldest go past it.
///
/// A token is derived from accounts' key, its user and the id of the
/// request that issued it, so a retry of that request (its answer lost)
/// gets the same token again without accounts ever storing it: an
/// idempotency record keeps the reply without its refresh token.
enum RefreshTokens {
    static let migration = Migration(3, """
        CREATE TABLE refresh_tokens (
            hash TEXT PRIMARY KEY,
            family TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_jti TEXT NOT NULL,
            issued_ms BIGINT NOT NULL,
            expires_ms BIGINT NOT NULL,
            used_by TEXT,
            revoked_ms BIGINT
        );
        CREATE INDEX refresh_tokens_family ON refresh_tokens (family);
        CREATE INDEX refresh_tokens_user ON refresh_tokens (user_id, issued_ms);
        CREATE INDEX refresh_tokens_jti ON refresh_tokens (session_jti);
        CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_ms);
        """)

    /// The refresh token request `requestID` issues to `user`.
    static func token(user: String, requestID: String, settings: Accounts.Settings) -> String {
        "rt1." + Base64URL.encode(SecretBox.derive(Array("\(user)\n\(requestID)".utf8), key: settings.refreshSecret))
    }

    static func hash(_ token: String) -> String { SecretBox.sha256Hex(Array(token.utf8)) }

    /// Records the token of request `requestID` (once: a retry finds it),
    /// in `family` or a new one named by the request, and drops the user's
    /// oldest families past the limit. Inside the caller's transaction.
    static func issue(_ db: Database, user: String, family: String?, requestID: String, sessionJTI: String, settings: Accounts.Settings) throws {
        let now = Int64(Clock.nowMillis())
        let token = token(user: user, requestID: requestID, settings: settings)
        try db.execute("""
            INSERT INTO refresh_tokens (hash, family, user_id, session_jti, issued_ms, expires_ms) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (hash) DO NOTHING
            """, .text(hash(token)), .text(family ?? requestID), .text(user), .text(sessionJTI), .int(now), .int(now + settings.refreshTTLMillis))
        let live = try db.query("""
            SELECT family FROM refresh_tokens WHERE user_id = $1 AND used_by IS NULL AND revoked_ms IS NULL ORDER BY issued_ms DESC, hash
            """, .text(user)).map { $0.string("family") }
        for old in live.dropFirst(settings.limits.maxRefreshTokensPerUser) {
            try db.execute("DELETE FROM refresh_tokens WHERE family = $1", .text(old))
        }
    }

    /// `session` with the refresh token request `requestID` issued, when it
    /// is still live (a retry's answer).
    static func reveal(_ db: Database, _ session: Contract.Accounts.Session, requestID: String, settings: Accounts.Settings) throws -> Contract.Accounts.Session {
        var session = session
        let token = token(user: session.user, requestID: requestID, settings: settings)
        let live = try db.queryOne("SELECT hash FROM refresh_tokens WHERE hash = $1 AND used_by IS NULL AND revoked_ms IS NULL", .text(hash(token)))
        session.refreshToken = live == nil ? nil : token
        return session
    }

    /// What a trade came to, decided inside the transaction and thrown after
    /// it: a reuse's revocation must be committed, not rolled back.
    enum Trade {
        case session(Contract.Accounts.Session)
        case refused(QuadError)
    }

    /// accounts.refresh with a refresh token, for the caller of `req`.
    /// `relay` publishes the revocations a reuse commits.
    static func trade(_ db: Database, _ presented: String, req: Request, src: String, settings: Accounts.Settings, relay: () -> Void) throws -> Contract.Accounts.Session {
        let (requestID, type) = (req.id, req.envelope.type)
        let owner = Idempotency.owner(of: req.envelope)
        // The caller's own retry, answered as it was; another caller's use
        // of this id is a 409 (thrown by claim) that says nothing of it.
        if let earlier = try Idempotency.claim(db, id: requestID, type: type, owner: owner) { return try answer(db, earlier, requestID: requestID, settings: settings) }
        let outcome = try db.transaction { () throws -> Trade in
            if let earlier = try Idempotency.claim(db, id: requestID, type: type, owner: owner) {
                return .session(try answer(db, earlier, requestID: requestID, settings: settings))
            }
            let now = Int64(Clock.nowMillis())
            let again = QuadError.unauthorized("body.refresh_token is unknown (never issued, or its family ended): sign in again")
            guard let row = try db.queryOne("SELECT * FROM refresh_tokens WHERE hash = $1", .text(hash(presented))) else { return .refused(again) }
            let (user, family) = (row.string("user_id"), row.string("family"))
            guard row["revoked_ms"].isNull else {
                return .refused(.unauthorized("body.refresh_token was revoked (a logout, a password or role change, or a second use): sign in again"))
            }
            guard row.int("expires_ms") > now else {
                return .refused(.unauthorized("body.refresh_token expired (refresh_token_ttl_seconds): sign in again"))
            }
            guard let account = try db.queryOne("SELECT role FROM users WHERE id = $1", .text(user)) else {
                return .refused(.notFound("no account for user '\(user)'"))
            }
            guard row["used_by"].isNull,
                  try db.queryOne("UPDATE refresh_tokens SET used_by = $2 WHERE hash = $1 AND used_by IS NULL RETURNING hash",
                                  .text(row.string("hash")), .text(requestID)) != nil else {
                // Used before (its caller's retry was answered above): one
                // of the two holders is not its owner. The family ends, and
                // so does every session token it minted.
                try endFamily(db, user: user, family: family, now: now, settings: settings)
                return .refused(.unauthorized("body.refresh_token was used already: every refresh token of its family and every session token they gave are revoked, sign in again"))
            }
            // The family keeps the token just used (a second use is seen),
            // the next one, and the used ones whose session may still be
            // live (a reuse ends those sessions); older used ones go.
            try db.execute("""
                DELETE FROM refresh_tokens WHERE family = $1 AND used_by IS NOT NULL AND hash <> $2 AND issued_ms < $3
                """, .text(family), .text(row.string("hash")), .int(now - settings.tokenTTLMillis - 1000))
            let (session, jti) = Accounts.issueSession(user: user, role: account.string("role"), settings: settings)
            try issue(db, user: user, family: family, requestID: requestID, sessionJTI: jti, settings: settings)
            try db.execute("UPDATE refresh_tokens SET session_jti = $2 WHERE hash = $1",
                           .text(hash(token(user: user, requestID: requestID, settings: settings))), .text(jti))
            // The record keeps the reply without its refresh token.
            try Idempotency.store(db, id: requestID, type: type, owner: owner, reply: req.envelope.reply(session.json, src: src))
            return .session(try reveal(db, session, requestID: requestID, settings: settings))
        }
        switch outcome {
        case .session(let session): return session
        case .refused(let error):
            relay()
            throw error
        }
    }

    /// A stored reply of accounts.refresh, its refresh token derived again.
    static func answer(_ db: Database, _ earlier: Envelope, requestID: String, settings: Accounts.Settings) throws -> Contract.Accounts.Session {
        if let error = earlier.quadError { throw error }
        return try reveal(db, try Contract.Accounts.Session(json: earlier.body), requestID: requestID, settings: settings)
    }

    /// Ends `family`: its refresh tokens, and the session tokens they were
    /// issued with that may not have expired yet (revoked one by one, as a
    /// logout does, with their events in the outbox). Inside the caller's
    /// transaction.
    static func endFamily(_ db: Database, user: String, family: String, now: Int64, settings: Accounts.Settings) throws {
        try db.execute("UPDATE refresh_tokens SET revoked_ms = $2 WHERE family = $1", .text(family), .int(now))
        let sessions = try db.query("""
            SELECT DISTINCT session_jti, issued_ms FROM refresh_tokens WHERE family = $1 AND session_jti <> '' AND issued_ms >= $2
            """, .text(family), .int(now - settings.tokenTTLMillis - 1000))
        for s in sessions {
            // A session token lasts token_ttl from just before its row was written (rounded up to a second).
            try Sessions.revoke(db, user: user, jti: s.string("session_jti"), before: nil, until: s.int("issued_ms") + settings.tokenTTLMillis + 1000,
                                maxPerUser: settings.limits.maxRevokedTokensPerUser)
        }
    }

    /// Ends the refresh tokens of `user`: every one, or the family whose
    /// latest session is `sessionJTI` (a logout of one session).
    static func revoke(_ db: Database, user: String, sessionJTI: String? = nil) throws {
        let now = Int64(Clock.nowMillis())
        if let sessionJTI {
            try db.execute("""
                UPDATE refresh_tokens SET revoked_ms = $3 WHERE user_id = $1 AND family IN (SELECT family FROM refresh_tokens WHERE session_jti = $2)
                """, .text(user), .text(sessionJTI), .int(now))
        } else {
            try db.execute("UPDATE refresh_tokens SET revoked_ms = $2 WHERE user_id = $1", .text(user), .int(now))
        }
    }

    /// Forgets tokens that have expired.
    static func prune(_ db: Database, now: Int64 = Int64(Clock.nowMillis())) throws {
        try db.execute("DELETE FROM refresh_tokens WHERE expires_ms <= $1", .int(now))
    }
}
