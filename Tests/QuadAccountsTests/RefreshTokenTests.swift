import Foundation
import QuadAuth
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadAccounts

/// Refresh tokens: a session renewed without the password, also after its
/// token expired; used once, kept only as a hash, ended with the session.
@Suite("refresh tokens")
struct RefreshTokenTests {
    func login(_ h: Handlers, password: String = "correct horse") throws -> JSON {
        try h.call("accounts.login", ["email": "ana@uni.edu", "password": .string(password)])
    }

    /// accounts.refresh as a phone sends it with its session token expired: no user.
    func trade(_ h: Handlers, _ token: String, id: String = MessageID.make()) throws -> JSON {
        try h.call("accounts.refresh", ["refresh_token": .string(token)], id: id)
    }

    /// Every text the store keeps of refresh tokens and stored replies.
    func storedTexts(_ db: Database) throws -> [String] {
        let rows = try db.query("SELECT * FROM refresh_tokens") + db.query("SELECT * FROM idempotency")
        return rows.flatMap { r in ["hash", "family", "session_jti", "used_by", "reply"].compactMap { r[$0].isNull ? nil : r.optionalString($0) } }
    }

    @Test(arguments: stores)
    func aRefreshTokenRenewsAnExpiredSessionOnceAndIsKeptOnlyAsAHash(postgres: Bool) throws {
        let (h, db, key) = try accounts(postgres: postgres, ttlMs: 200)
        let registered = try h.call("accounts.register", ana())
        let first = try #require(registered["refresh_token"]?.string, "a registration answers a refresh token: \(registered)")
        let session = try login(h)
        let token = try #require(session["refresh_token"]?.string)
        #expect(token.hasPrefix("rt1.") && token != first)
        // The session token expires; the refresh token does not need it.
        #expect(try waitUntil { Int64(Clock.nowMillis()) > session["expires_at"]?.int ?? 0 })
        let id = MessageID.make()
        let renewed = try trade(h, token, id: id)
        let next = try #require(renewed["refresh_token"]?.string)
        #expect(next != token && renewed["user"] == session["user"])
        #expect(try key.verifyingKey.verify(try #require(renewed["token"]?.string)).user == session["user"]?.string)
        // A retry of that request (its answer lost) gets the same refresh token.
        #expect(try trade(h, token, id: id)["refresh_token"]?.string == next)
        // Stored as SHA-256 only: no refresh token in any row, nor in the
        // idempotency records of the registration and the refresh.
        let texts = try storedTexts(db)
        for t in [first, token, next] {
            #expect(!texts.contains { $0.contains(t) }, "a refresh token stored in clear")
            #expect(texts.contains(SecretBox.sha256Hex(Array(t.utf8))), "its hash is kept")
        }
        // The old token again, from another request: a second use ends the family.
        let reused = refusal { try trade(h, token) }
        #expect(reused?.status == 401 && reused?.message.contains("used already") == true, "\(String(describing: reused))")
        let after = refusal { try trade(h, next) }
        #expect(after?.status == 401 && after?.message.contains("revoked") == true, "the family ended: \(String(describing: after))")
        // Another family (the registration's) lives.
        #expect(try trade(h, first)["refresh_token"]?.string != nil)
        let unknown = refusal { try trade(h, "rt1." + String(repeating: "A", count: 43)) }
        #expect(unknown?.status == 401 && unknown?.message.contains("unknown") == true)
        #expect(refusal { try h.call("accounts.refresh", ["refresh_token": "not a token"]) }?.status == 400)
        #expect(refusal { try h.call("accounts.refresh", [:]) }?.status == 400, "a token or a refresh token")
    }

    /// A second use of a refresh token ends every session token its family
    /// gave, not only its refresh tokens; and a stored trade answers its own
    /// caller only (issue 27, point 2).
    @Test(arguments: stores)
    func aReusedRefreshTokenEndsTheSessionsOfItsFamilyAndAStoredTradeIsItsCallersOnly(postgres: Bool) throws {
        let (h, db, key) = try accounts(postgres: postgres)
        _ = try h.call("accounts.register", ana())
        let login = try login(h)
        let owner = "key:phone-of-ana", thief = "key:someone-else"
        let id = MessageID.make()
        let renewed = try h.call("accounts.refresh", ["refresh_token": login["refresh_token"]!], caller: owner, id: id)
        // The same id and the same refresh token from another caller: 409, no session.
        let stolen = refusal { try h.call("accounts.refresh", ["refresh_token": login["refresh_token"]!], caller: thief, id: id) }
        #expect(stolen?.status == 409 && stolen?.message.contains("another caller") == true, "\(String(describing: stolen))")
        // The caller's own retry: the same session and the same next token.
        let retry = try h.call("accounts.refresh", ["refresh_token": login["refresh_token"]!], caller: owner, id: id)
        #expect(retry["token"] == renewed["token"] && retry["refresh_token"] == renewed["refresh_token"])
        let renewed2 = try h.call("accounts.refresh", ["refresh_token": renewed["refresh_token"]!], caller: owner)
        let claims = try [login, renewed, renewed2].map { try key.verifyingKey.verify(try #require($0["token"]?.string)) }
        #expect(try claims.allSatisfy { try !Sessions.isRevoked(db, $0, now: Int64(Clock.nowMillis())) })
        // The first token again (a thief's copy): every session of the family ends.
        let reused = refusal { try h.call("accounts.refresh", ["refresh_token": login["refresh_token"]!], caller: thief) }
        #expect(reused?.status == 401 && reused?.message.contains("used already") == true, "\(String(describing: reused))")
        for c in claims {
            #expect(try Sessions.isRevoked(db, c, now: Int64(Clock.nowMillis())), "session \(c.tokenID) of the family still works")
        }
        let revoked = try db.query("SELECT jti FROM revocations").map { $0.string("jti") }
        #expect(claims.allSatisfy { revoked.contains($0.tokenID) }, "each one revoked by its jti: \(revoked)")
        let events = try db.queryOne("SELECT COUNT(*) AS n FROM outbox WHERE type = 'accounts.session.revoked'")?.int("n") ?? 0
        #expect(events >= Int64(claims.count), "each revocation is published for the brokers: \(events) events")
        // Another family of the same user lives on.
        let other = try self.login(h)
        #expect(try h.call("accounts.refresh", ["refresh_token": other["refresh_token"]!], caller: owner)["token"]?.string != nil)
    }

    @Test(arguments: stores)
    func aPasswordChangeALogoutAndTheirExpiryEndRefreshTokens(postgres: Bool) throws {
        let (h, _, _) = try accounts(postgres: postgres)
        _ = try h.call("accounts.register", ana())
        let a = try login(h), b = try login(h)
        let user = try #require(a["user"]?.string)
        // A logout of session a ends a's refresh token, not b's.
        _ = try h.call("accounts.logout", ["token": a["token"]!], user: user, role: "student")
        #expect(refusal { try trade(h, a["refresh_token"]!.string!) }?.status == 401)
        let b2 = try trade(h, b["refresh_token"]!.string!)
        // A password change ends every one.
        _ = try h.call("accounts.profile.update", ["password": "new password!", "current_password": "correct horse"], user: user, role: "student")
        let e = refusal { try trade(h, b2["refresh_token"]!.string!) }
        #expect(e?.status == 401 && e?.message.contains("revoked") == true)
        // Logging out of every session ends the later ones too.
        let c = try login(h, password: "new password!")
        _ = try h.call("accounts.logout", ["token": c["token"]!, "all": true], user: user, role: "student")
        #expect(refusal { try trade(h, c["refresh_token"]!.string!) }?.status == 401)
    }

    @Test func aRefreshTokenExpiresAndAUserKeepsAtMostTheLimit() throws {
        var limits = Accounts.Settings.Limits()
        limits.maxRefreshTokensPerUser = 3
        let db = try TestStore.open("accounts", migrations: Accounts.migrations)
        let h = Handlers(service: "accounts", instance: "accounts/test", db: db)
        Accounts.register(h, db: db, settings: try .init(signingKey: SigningKey.generate(), refreshTTLMillis: 300, hashing: .minimum, limits: limits))
        _ = try h.call("accounts.register", ana())
        let sessions = try (0..<5).map { _ in try login(h) }
        let live = try db.queryOne("SELECT COUNT(*) AS n FROM refresh_tokens WHERE used_by IS NULL AND revoked_ms IS NULL")?.int("n")
        #expect(live == 3, "max_refresh_tokens_per_user bounds a user's live tokens")
        #expect(refusal { try trade(h, sessions[0]["refresh_token"]!.string!) }?.status == 401, "the oldest went")
        usleep(400_000)
        let e = refusal { try trade(h, sessions[4]["refresh_token"]!.string!) }
        #expect(e?.status == 401 && e?.message.contains("expired") == true && e?.message.contains("refresh_token_ttl_seconds") == true)
        try RefreshTokens.prune(db)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM refresh_tokens")?.int("n") == 0)
    }
}
