import Foundation
import QuadAuth
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker and quad-accounts as real processes: the broker checks
/// tokens with the public key file accounts wrote in $QUAD_HOME/keys.
@Suite("accounts and the broker's token check", .serialized)
struct AccountsStackTests {
    func stack(_ name: String = "accounts", extra: [String] = []) throws -> TestStack {
        let stack = try TestStack(name: name)
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: extra)
        #expect(try stack.waitForWorkers("accounts", count: 1))
        return stack
    }

    func register(_ stack: TestStack, _ email: String, name: String = "Ana Ruiz", password: String = "correct horse") throws -> String {
        let reply = try stack.client().request("accounts.register", [
            "email": .string(email), "password": .string(password), "name": .string(name), "semester": 3, "categories": ["Tech"],
        ], timeoutMs: 5000)
        return try #require(reply["user"]?.string)
    }

    func login(_ stack: TestStack, _ email: String, password: String = "correct horse") throws -> String {
        try #require(try stack.client().request("accounts.login", ["email": .string(email), "password": .string(password)], timeoutMs: 5000)["token"]?.string)
    }

    func client(_ stack: TestStack, token: String?) throws -> Client {
        let c = try stack.client()
        c.token = token
        return c
    }

    /// The key accounts created, read from its file as an attacker with the
    /// file could: only for making expired tokens here.
    func accountsKey(_ stack: TestStack) throws -> SigningKey {
        try KeyFiles.loadSigningKey(at: stack.dir + "/keys/accounts.key")
    }

    @Test func registerLogInAndReadTheProfileThroughTheBroker() throws {
        let stack = try stack()
        let user = try register(stack, "ana@uni.edu")
        let token = try login(stack, "ana@uni.edu")
        let profile = try client(stack, token: token).request("accounts.profile.get")
        #expect(profile["user"]?.string == user)
        #expect(profile["email"]?.string == "ana@uni.edu" && profile["name"]?.string == "Ana Ruiz" && profile["semester"]?.int == 3)
        let updated = try client(stack, token: token).request("accounts.profile.update", ["categories": ["Lab", "Study"]])
        #expect(updated["categories"] == ["Lab", "Study"])
        // Without a token the broker forwards no user and accounts answers 401.
        let anonymous = try stack.client().call(.request("accounts.profile.get"))
        #expect(anonymous.quadError?.status == 401 && anonymous.src == "accounts/1")
        // The key files: the secret one private, the public one readable.
        let keys = stack.dir + "/keys/"
        #expect((try FileManager.default.attributesOfItem(atPath: keys + "accounts.key")[.posixPermissions] as? Int) == 0o600)
        #expect((try FileManager.default.attributesOfItem(atPath: keys + "accounts.pub")[.posixPermissions] as? Int) == 0o644)
    }

    @Test func aDuplicateEmailIs409AndAWrongPassword401() throws {
        let stack = try stack()
        _ = try register(stack, "ana@uni.edu")
        let again = try stack.client().call(.request("accounts.register", body: [
            "email": "ANA@uni.edu", "password": "another one", "name": "Impostor", "semester": 1,
        ]))
        #expect(again.quadError?.status == 409)
        let wrong = try stack.client().call(.request("accounts.login", body: ["email": "ana@uni.edu", "password": "wrong horse"]))
        let unknown = try stack.client().call(.request("accounts.login", body: ["email": "eve@uni.edu", "password": "correct horse"]))
        #expect(wrong.quadError?.status == 401 && unknown.quadError?.status == 401)
        #expect(wrong.quadError?.message == unknown.quadError?.message)
    }

    @Test func forgedGarbledAndExpiredTokensAre401FromTheBroker() throws {
        let stack = try stack()
        let user = try register(stack, "ana@uni.edu")
        let token = try login(stack, "ana@uni.edu")
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3, "a JWT: header.claims.signature")
        var signature = try #require(Base64URL.decode(parts[2]))
        signature[10] ^= 0x40
        let flipped = parts[0] + "." + parts[1] + "." + Base64URL.encode(signature)
        // The claims changed to say admin, with the original signature.
        var payload = try JSON.parse(try #require(Base64URL.decode(parts[1]))).object ?? [:]
        payload["role"] = "admin"
        let promoted = parts[0] + "." + Base64URL.encode(JSON.object(payload).encoded()) + "." + parts[2]
        let now = Int64(Clock.nowMillis())
        let expired = try accountsKey(stack).sign(TokenClaims(user: user, role: "student", expiresAt: now - 1, issuedAt: now - 86_400_000))
        let cases: [(String, String)] = [
            (flipped, "token signature invalid"), (promoted, "token signature invalid"),
            (expired, "token expired"),
            ("garbage", "token malformed"), ("a.b.c", "token malformed"), (parts[0] + "." + parts[1], "token malformed"), (parts[1] + "." + parts[2], "token malformed"),
            (String(token.dropLast(3)), "token malformed"),
        ]
        for (bad, why) in cases {
            let reply = try client(stack, token: bad).call(.request("accounts.profile.get"))
            let error = try #require(reply.quadError, "accepted a bad token (\(why))")
            #expect(error.status == 401 && error.code == .unauthorized)
            #expect(error.message.hasPrefix(why), "\(error.message)")
            #expect(reply.src == "broker", "the broker answers; accounts is never asked")
        }
        // The good token still works after all that.
        #expect(try client(stack, token: token).request("accounts.profile.get")["user"]?.string == user)
    }

    @Test func aTokenStopsWorkingWhenItsLifetimeEnds() throws {
        let stack = try stack(extra: ["--token-ttl-seconds", "1"])
        let user = try register(stack, "ana@uni.edu")
        let token = try login(stack, "ana@uni.edu")
        #expect(try client(stack, token: token).request("accounts.profile.get")["user"]?.string == user)
        // exp is whole seconds, rounded up: the token lives 1 to 2 s.
        let expires = try Token.unverifiedClaims(token).expiresAt
        while Int64(Clock.nowMillis()) < expires + 50 { usleep(50_000) }
        let reply = try client(stack, token: token).call(.request("accounts.profile.get"))
        #expect(reply.quadError?.status == 401)
        #expect(reply.quadError?.message.hasPrefix("token expired") == true)
    }

    @Test func nobodyReadsAnotherUsersProfileAndClientsCannotSetUser() throws {
        let stack = try stack()
        let ana = try register(stack, "ana@uni.edu")
        let bob = try register(stack, "bob@uni.edu", name: "Bob")
        let bobs = try login(stack, "bob@uni.edu")
        // Asking for Ana's profile with Bob's token: 403.
        let asked = try client(stack, token: bobs).call(.request("accounts.profile.get", body: ["user": .string(ana)]))
        #expect(asked.quadError?.status == 403)
        let changed = try client(stack, token: bobs).call(.request("accounts.profile.update", body: ["user": .string(ana), "semester": 9]))
        #expect(changed.quadError?.status == 403)
        // Claiming to be Ana in the envelope: without a token the broker drops
        // the claim (401); with Bob's token, Bob is who the request is from.
        var claim = Envelope.request("accounts.profile.get")
        claim.user = ana
        claim.role = "admin"
        #expect(try stack.client().call(claim).quadError?.status == 401)
        let asBob = try client(stack, token: bobs).call(claim)
        #expect(asBob.body["user"]?.string == bob && asBob.body["role"]?.string == "student")
        // Ana's profile is untouched.
        let anas = try login(stack, "ana@uni.edu")
        #expect(try client(stack, token: anas).request("accounts.profile.get")["semester"]?.int == 3)
    }

    @Test func theBrokerWaitsForTheKeyThatAccountsCreatesAfterIt() throws {
        let stack = try TestStack(name: "accounts-late")
        try stack.startBroker()
        usleep(200_000)
        // No key yet: a token cannot be checked, which is unavailable, not unauthorized.
        let early = SigningKey.generate().sign(TokenClaims(user: "u", role: "student", expiresAt: Int64(Clock.nowMillis()) + 60_000, issuedAt: 0))
        let waiting = try client(stack, token: early).call(.request("accounts.profile.get"), timeoutMs: 500, attempts: 1)
        #expect(waiting.quadError?.status == 503)
        #expect(waiting.quadError?.message.contains("no accounts public key") == true)
        let passwordFile = stack.dir + "/admin.password"
        #expect(FileManager.default.createFile(atPath: passwordFile, contents: Data("quad-admin-pass\n".utf8), attributes: [.posixPermissions: 0o600]))
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--admin-email", "admin@quad.campus"],
                              environment: ["QUAD_ADMIN_PASSWORD_FILE": passwordFile])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let session = try stack.client().request("accounts.login", ["email": "admin@quad.campus", "password": "quad-admin-pass"], timeoutMs: 5000)
        #expect(session["role"]?.string == "admin")
        let profile = try client(stack, token: session["token"]?.string).request("accounts.profile.get")
        #expect(profile["role"]?.string == "admin" && profile["user"] == session["user"])
        // The key outlives accounts: a restarted worker keeps it, and tokens stay valid.
        stack.kill("accounts/1", signal: SIGTERM)
        try stack.startWorker("quad-accounts", instance: "accounts/2")
        #expect(try stack.waitForWorkers("accounts", count: 1))
        #expect(try client(stack, token: session["token"]?.string).request("accounts.profile.get", timeoutMs: 5000)["role"]?.string == "admin")
    }

    @Test func quadctlRegistersLogsInAndCallsAsAUser() throws {
        let stack = try stack()
        func quadctl(_ args: [String], env: [String: String] = [:]) throws -> (Int32, String, String) {
            // QUAD_HOME: where quadctl finds the broker's CURVE key.
            try runBuilt("quadctl", ["--frontend", stack.endpoints.frontend, "--timeout", "5000"] + args,
                         environment: ["QUAD_HOME": stack.dir].merging(env) { _, new in new })
        }
        let (made, registered, _) = try quadctl(["--password", "correct horse", "register", "ana@uni.edu", "Ana Ruiz", "3", "Tech", "Lab"])
        #expect(made == 0, "\(registered)")
        let user = try #require(try JSON.parse(registered.trimmingCharacters(in: .whitespacesAndNewlines))["user"]?.string)
        let (loggedIn, exports, _) = try quadctl(["login", "ana@uni.edu"], env: ["QUAD_PASSWORD": "correct horse"])
        #expect(loggedIn == 0)
        #expect(exports.hasPrefix("export QUAD_TOKEN="))
        let token = String(exports.dropFirst("export QUAD_TOKEN=".count)).trimmingCharacters(in: .whitespacesAndNewlines)
        let (ok, profile, _) = try quadctl(["call", "accounts.profile.get"], env: ["QUAD_TOKEN": token])
        #expect(ok == 0)
        #expect(try JSON.parse(profile.trimmingCharacters(in: .whitespacesAndNewlines))["user"]?.string == user)
        let (asOK, asProfile, _) = try quadctl(["--as", "ana@uni.edu", "--password", "correct horse", "call", "accounts.profile.get"])
        #expect(asOK == 0 && asProfile.contains(user))
        let (refused, _, why) = try quadctl(["--as", "ana@uni.edu", "--password", "wrong horse", "call", "accounts.profile.get"])
        #expect(refused == 1 && why.contains("wrong email or password"))
        let (noPassword, _, asked) = try quadctl(["login", "ana@uni.edu"])
        #expect(noPassword == 64 && asked.contains("QUAD_PASSWORD"))

        // refresh prints the new export line and ends the old token; logout ends the new one.
        usleep(2_000)
        let (refreshed, newExport, _) = try quadctl(["refresh"], env: ["QUAD_TOKEN": token])
        #expect(refreshed == 0 && newExport.hasPrefix("export QUAD_TOKEN="))
        let newToken = String(newExport.dropFirst("export QUAD_TOKEN=".count)).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(newToken != token && !newToken.isEmpty)
        let (again, _, stale) = try quadctl(["refresh"], env: ["QUAD_TOKEN": token])
        #expect(again == 1 && stale.contains("revoked"), "\(stale)")
        let (out, unset, _) = try quadctl(["logout"], env: ["QUAD_TOKEN": newToken])
        #expect(out == 0 && unset.trimmingCharacters(in: .whitespacesAndNewlines) == "unset QUAD_TOKEN")
        let (ended, _, why2) = try quadctl(["refresh"], env: ["QUAD_TOKEN": newToken])
        #expect(ended == 1 && why2.contains("revoked"), "\(why2)")
        let (noToken, _, needs) = try quadctl(["logout"])
        #expect(noToken == 64 && needs.contains("QUAD_TOKEN"))
    }

    @Test func quadctlFindsTheAdminPasswordInItsFile() throws {
        let stack = try TestStack(name: "accounts-admin")
        try stack.startBroker()
        let passwordFile = stack.dir + "/keys/admin.password"
        try FileManager.default.createDirectory(atPath: stack.dir + "/keys", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: passwordFile, contents: Data("a random admin pass\n".utf8), attributes: [.posixPermissions: 0o600]))
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--admin-email", "admin@quad.campus", "--admin-password-file", passwordFile])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: TestStack.binDir + "/quadctl")
        p.arguments = ["--frontend", stack.endpoints.frontend, "--timeout", "5000", "--as", "admin@quad.campus", "call", "accounts.profile.get"]
        var environment = ProcessInfo.processInfo.environment
        environment["QUAD_TOKEN"] = nil
        environment["QUAD_PASSWORD"] = "a student's password"
        environment["QUAD_ADMIN_PASSWORD_FILE"] = nil
        environment["QUAD_HOME"] = stack.dir
        p.environment = environment
        let out = Pipe()
        p.standardOutput = out
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0 && output.contains("\"role\":\"admin\""), "\(output)")
    }

    @Test func anAdminPasswordFileOthersCanReadIsRefused() throws {
        let stack = try TestStack(name: "accounts-open")
        try stack.startBroker()
        let passwordFile = stack.dir + "/admin.password"
        #expect(FileManager.default.createFile(atPath: passwordFile, contents: Data("quad-admin-pass\n".utf8), attributes: [.posixPermissions: 0o644]))
        let p = try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--admin-email", "admin@quad.campus", "--admin-password-file", passwordFile])
        p.waitUntilExit()
        #expect(p.terminationStatus == 64)
        #expect(eventually { stack.log("accounts/1").contains("readable by others") })
    }

    @Test func failedLoginsAreThrottledPerCURVEKeyThroughTheBroker() throws {
        let stack = try stack(extra: ["--password-hashing", "minimum", "--login-free-failures", "3"])
        _ = try register(stack, "ana@uni.edu")
        // One client, one CURVE key: its failures on any emails add up, and a
        // new src in the envelope is no new budget.
        let guesser = try stack.client(source: "edge/guesser")
        for k in 0..<4 {
            let reply = try guesser.call(.request("accounts.login", body: ["email": .string("guess\(k)@uni.edu"), "password": "wrong horse"], src: "edge/g\(k)"))
            #expect(reply.quadError?.status == 401)
        }
        let refused = try guesser.call(.request("accounts.login", body: ["email": "ana@uni.edu", "password": "correct horse"], src: "edge/fresh"))
        #expect(refused.quadError?.status == 429 && refused.quadError?.details["retry_after_ms"]?.int ?? 0 > 0, "\(refused.body)")
        // Another client (another key) is not held back by the guesser.
        #expect(try login(stack, "ana@uni.edu").isEmpty == false)
    }

    @Test func logoutAndRefreshThroughTheBrokerPublishTheirRevocations() throws {
        let stack = try TestStack(name: "accounts-sessions")
        try stack.startBroker()
        let passwordFile = stack.dir + "/admin.password"
        #expect(FileManager.default.createFile(atPath: passwordFile, contents: Data("quad-admin-pass\n".utf8), attributes: [.posixPermissions: 0o600]))
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum", "--admin-email", "admin@quad.campus",
                                                                                "--admin-password-file", passwordFile])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let user = try register(stack, "ana@uni.edu")
        let token = try login(stack, "ana@uni.edu")
        // The broker reads accounts' public key within its retry interval.
        let until = Clock.monotonicMillis() + 30_000
        while try client(stack, token: token).call(.request("accounts.profile.get")).quadError?.status == 503 && Clock.monotonicMillis() < until {
            usleep(50_000)
        }
        // The token travels in the envelope (for the broker) and in the body (for accounts).
        let fresh = try client(stack, token: token).request("accounts.refresh", ["token": .string(token)])
        let newToken = try #require(fresh["token"]?.string)
        #expect(fresh["user"]?.string == user && newToken != token)
        let ended = try client(stack, token: newToken).request("accounts.logout", ["token": .string(newToken)])
        let newJTI = try Token.unverifiedClaims(newToken).tokenID
        #expect(ended["user"]?.string == user && ended["jti"]?.string == newJTI)
        // A student may not read the list; an admin and a service may.
        let anas = try login(stack, "ana@uni.edu")
        #expect(try client(stack, token: anas).call(.request("accounts.revocations")).quadError?.status == 403)
        let admin = try login(stack, "admin@quad.campus", password: "quad-admin-pass")
        let listed = try #require(try client(stack, token: admin).request("accounts.revocations")["revocations"]?.array)
        let oldJTI = try Token.unverifiedClaims(token).tokenID
        #expect(Set(listed.compactMap { $0["jti"]?.string }) == [oldJTI, newJTI])
        // A service (the broker, after a restart) asks on the internal frontend.
        let asked = try stack.internalClient().call(.request("accounts.revocations", role: "service"), timeoutMs: 5000)
        let viaService = try #require(asked.body["revocations"]?.array, "\(asked.body)")
        #expect(viaService.count == 2)
        // The events went out on the bus, in order, for every broker to hear.
        let events = try #require(try client(stack, token: admin).request("accounts.events.since", ["after": 0])["events"]?.array)
        let revoked = events.filter { $0["type"]?.string == "accounts.session.revoked" }.compactMap { $0["body"] }
        #expect(revoked.count == 2 && revoked.allSatisfy { $0["user"]?.string == user && $0["before_ms"] == .null && $0["until_ms"]?.int ?? 0 > 0 })
    }
}
