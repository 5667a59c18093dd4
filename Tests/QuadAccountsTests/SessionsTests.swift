import Foundation
import QuadAuth
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadAccounts

@Suite("sessions end: logout, refresh, revocations")
struct SessionsTests {
    func signIn(_ h: Handlers, _ email: String = "ana@uni.edu", password: String = "correct horse") throws -> (token: String, user: String) {
        let s = try h.call("accounts.login", ["email": .string(email), "password": .string(password)])
        return (try #require(s["token"]?.string), try #require(s["user"]?.string))
    }

    func revocations(_ h: Handlers) throws -> [JSON] {
        try #require(try h.call("accounts.revocations", [:], user: nil, role: "service")["revocations"]?.array)
    }

    func events(_ h: Handlers, _ type: String = "accounts.session.revoked") throws -> [JSON] {
        try #require(try h.call("accounts.events.since", ["after": 0])["events"]?.array).filter { $0["type"]?.string == type }.compactMap { $0["body"] }
    }

    @Test func tokensLastAnHourByDefault() throws {
        #expect(Accounts.defaultTokenTTLSeconds == 3600)
        #expect(Accounts.options.first { $0.0 == "token-ttl-seconds" }?.2 == "3600")
        #expect(try Accounts.Settings(signingKey: SigningKey.generate(), hashing: .minimum).tokenTTLMillis == 3_600_000)
    }

    @Test func logoutEndsThatTokenAndNoOther() throws {
        let (h, _, key) = try accounts()
        _ = try h.call("accounts.register", ana())
        let (a, user) = try signIn(h)
        let (b, _) = try signIn(h)
        let claims = try key.verifyingKey.verify(a)
        let ended = try h.call("accounts.logout", ["token": .string(a)], user: user, role: "student")
        let expected: JSON = ["user": .string(user), "jti": .string(claims.tokenID), "before_ms": .null, "until_ms": .int(claims.expiresAt)]
        #expect(ended == expected)
        #expect(try events(h) == [expected], "published for the broker")
        #expect(try revocations(h) == [expected])
        let again = refusal { try h.call("accounts.refresh", ["token": .string(a)], user: user, role: "student") }
        #expect(again?.status == 401 && again?.message.contains("revoked") == true)
        #expect(try h.call("accounts.refresh", ["token": .string(b)], user: user, role: "student")["user"]?.string == user, "the other session lives")
    }

    @Test func logoutAndRefreshTakeOnlyTheSignedInUsersOwnToken() throws {
        let (h, _, _) = try accounts()
        _ = try h.call("accounts.register", ana())
        _ = try h.call("accounts.register", ana(["email": "bob@uni.edu", "name": "Bob"]))
        let (a, ana) = try signIn(h)
        let (_, bob) = try signIn(h, "bob@uni.edu")
        let forged = SigningKey.generate().sign(TokenClaims(user: ana, role: "student", expiresAt: Int64(Clock.nowMillis()) + 60_000, issuedAt: 0))
        for type in ["accounts.logout", "accounts.refresh"] {
            #expect(refusal { try h.call(type, ["token": .string(a)]) }?.status == 401, "\(type) without a signed-in user")
            // accounts.refresh takes a token or a refresh token (RefreshTokenTests).
            let none = refusal { try h.call(type, [:], user: ana, role: "student") }
            #expect(type == "accounts.refresh" ? none?.status == 400 : none?.message.hasPrefix("body.token is required") == true)
            #expect(refusal { try h.call(type, ["token": .string(a)], user: bob, role: "student") }?.status == 403, "Bob cannot end Ana's session")
            #expect(refusal { try h.call(type, ["token": .string(forged)], user: ana, role: "student") }?.message.hasPrefix("token key unknown") == true, "another key's kid")
            #expect(refusal { try h.call(type, ["token": 5], user: ana, role: "student") }?.status == 400)
            // Naming a user is refused as every request for a signed-in user refuses it (Fields, the contract).
            let naming = refusal { try h.call(type, ["token": .string(a), "user": .string(bob)], user: ana, role: "student") }
            #expect(naming?.status == (type == "accounts.refresh" ? 400 : 403), "\(type): \(String(describing: naming))")
        }
        #expect(try revocations(h).isEmpty)
    }

    @Test func logoutOfAllSessionsEndsEveryTokenSignedUntilThen() throws {
        let (h, _, _) = try accounts()
        _ = try h.call("accounts.register", ana())
        let (a, user) = try signIn(h)
        let (b, _) = try signIn(h)
        let ended = try h.call("accounts.logout", ["token": .string(a), "all": true], user: user, role: "student")
        #expect(ended["jti"] == .null && ended["before_ms"]?.int ?? 0 > 0)
        for t in [a, b] { #expect(refusal { try h.call("accounts.refresh", ["token": .string(t)], user: user, role: "student") }?.status == 401) }
        usleep(2_000)
        let (c, _) = try signIn(h)
        #expect(try h.call("accounts.refresh", ["token": .string(c)], user: user, role: "student")["token"] != nil, "a later login is a new session")
    }

    @Test func aPasswordChangeEndsEveryEarlierToken() throws {
        let (h, _, _) = try accounts()
        _ = try h.call("accounts.register", ana())
        let (a, user) = try signIn(h)
        usleep(2_000)  // the change is in a later millisecond than the token
        _ = try h.call("accounts.profile.update", ["password": "new password!", "current_password": "correct horse"], user: user, role: "student")
        let revoked = try #require(try events(h).first)
        #expect(revoked["user"]?.string == user && revoked["jti"] == .null)
        let before = try #require(revoked["before_ms"]?.int)
        #expect(try Token.unverifiedClaims(a).issuedAt < before)
        #expect(try #require(revoked["until_ms"]?.int) >= before + Accounts.defaultTokenTTLSeconds * 1000)
        #expect(refusal { try h.call("accounts.refresh", ["token": .string(a)], user: user, role: "student") }?.status == 401)
        let (b, _) = try signIn(h, password: "new password!")
        #expect(try h.call("accounts.refresh", ["token": .string(b)], user: user, role: "student")["user"]?.string == user)
        // A profile change without a new password ends nothing.
        _ = try h.call("accounts.profile.update", ["semester": 5], user: user, role: "student")
        #expect(try events(h).count == 2, "the password change and the refresh of b")
    }

    @Test func refreshGivesANewTokenEndsTheOldAndIsIdempotentByID() throws {
        let (h, _, key) = try accounts(ttlMs: 60_000)
        _ = try h.call("accounts.register", ana())
        let (a, user) = try signIn(h)
        let id = MessageID.make()
        usleep(2_000)
        let fresh = try h.call("accounts.refresh", ["token": .string(a)], user: user, role: "student", id: id)
        let new = try key.verifyingKey.verify(try #require(fresh["token"]?.string))
        let old = try key.verifyingKey.verify(a)
        #expect(new.user == user && new.role == "student" && new.tokenID != old.tokenID && new.expiresAt >= old.expiresAt && new.issuedAt > old.issuedAt)
        #expect(fresh["expires_at"]?.int == new.expiresAt)
        #expect(try h.call("accounts.refresh", ["token": .string(a)], user: user, role: "student", id: id) == fresh, "a retry gets the same token")
        #expect(try revocations(h).map { $0["jti"]?.string } == [old.tokenID])
    }

    @Test func revocationsAreForServicesAndAdminsAndForgottenOnceTheirTokensExpire() throws {
        let (h, db, _) = try accounts(ttlMs: 300)
        _ = try h.call("accounts.register", ana())
        let (a, user) = try signIn(h)
        _ = try h.call("accounts.logout", ["token": .string(a)], user: user, role: "student")
        #expect(refusal { try h.call("accounts.revocations") }?.status == 401)
        #expect(refusal { try h.call("accounts.revocations", [:], user: user, role: "student") }?.status == 403)
        #expect(try h.call("accounts.revocations", [:], user: "admin-1", role: "admin")["revocations"]?.array?.count == 1)
        #expect(refusal { try h.call("accounts.revocations", ["user": .string(user)], role: "service") }?.status == 400)
        #expect(try waitUntil { try revocations(h).isEmpty }, "past until_ms it is no longer in force")
        try Sessions.prune(db)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM revocations")?.int("n") == 0)
        // Refreshing an expired token is a 401, not a new session.
        let e = refusal { try h.call("accounts.refresh", ["token": .string(a)], user: user, role: "student") }
        #expect(e?.status == 401 && e?.message.hasPrefix("token expired") == true)
    }

    @Test func manyLogoutsOfOneUserFoldIntoOneEntry() throws {
        var limits = Accounts.Settings.Limits()
        limits.maxRevokedTokensPerUser = 3
        let (h, db) = try accounts(limits: limits)
        _ = try h.call("accounts.register", ana())
        var user = ""
        for _ in 0..<4 {
            let (t, u) = try signIn(h)
            user = u
            _ = try h.call("accounts.logout", ["token": .string(t)], user: u, role: "student")
        }
        let rows = try db.query("SELECT jti, before_ms FROM revocations WHERE user_id = $1", .text(user))
        #expect(rows.count == 1 && rows[0]["jti"].isNull && rows[0].int("before_ms") > 0, "max_revoked_tokens_per_user bounds a user's entries")
    }
}
