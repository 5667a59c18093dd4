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
/// ends its whole family. A password change, a role change and a logout
/// end them too. A user has at most `max_refresh_tokens_per_user` live
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

    /// accounts.refresh with a refresh token.
    static func trade(_ db: Database, _ presented: String, requestID: String, settings: Accounts.Settings) throws -> Contract.Accounts.Session {
        let outcome = try db.transaction { () throws -> Trade in
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
            if let usedBy = row.optionalString("used_by"), usedBy != requestID {
                // Used twice: one of the two holders is not its owner.
                try db.execute("UPDATE refresh_tokens SET revoked_ms = $2 WHERE family = $1", .text(family), .int(now))
                return .refused(.unauthorized("body.refresh_token was used already: every refresh token of its family is revoked, sign in again"))
            }
            if row["used_by"].isNull {
                guard try db.queryOne("UPDATE refresh_tokens SET used_by = $2 WHERE hash = $1 AND used_by IS NULL RETURNING hash",
                                      .text(row.string("hash")), .text(requestID)) != nil else { return .refused(again) }
                // The family keeps the token just used (a second use is
                // seen) and the next one; older used ones go.
                try db.execute("DELETE FROM refresh_tokens WHERE family = $1 AND used_by IS NOT NULL AND hash <> $2", .text(family), .text(row.string("hash")))
            }
            let (session, jti) = Accounts.issueSession(user: user, role: account.string("role"), settings: settings)
            try issue(db, user: user, family: family, requestID: requestID, sessionJTI: jti, settings: settings)
            try db.execute("UPDATE refresh_tokens SET session_jti = $2 WHERE hash = $1",
                           .text(hash(token(user: user, requestID: requestID, settings: settings))), .text(jti))
            return .session(try reveal(db, session, requestID: requestID, settings: settings))
        }
        switch outcome {
        case .session(let session): return session
        case .refused(let error): throw error
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
