import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// Secrets stay secret: no password, token or secret key in any log; the
/// token signing key and the CURVE secret key are files only their owner
/// reads (0600); passwords are stored only as libsodium Argon2id hashes.
@Suite("Secrets", .serialized)
struct SecretsTests {
    @Test func noSecretInLogsKeysAre0600AndPasswordsAreArgon2idHashes() throws {
        let full = try FullStack("secrets")
        try #require(full.running.contains("accounts"), "quad-accounts is not built")
        let password = "s3cret-horse-battery-\(UInt32.random(in: 0...UInt32.max))"
        let newPassword = "n3w-" + password
        let anonymous = try full.client()
        let user = try #require(try anonymous.request("accounts.register", [
            "email": "keeper@uni.edu", "password": .string(password), "name": "Keeper", "semester": 5,
        ])["user"]?.string)
        let session = try anonymous.request("accounts.login", ["email": "keeper@uni.edu", "password": .string(password)])
        let token = try #require(session["token"]?.string)
        // A wrong password, a password change, requests with the token, a forged token.
        #expect(try anonymous.call(.request("accounts.login", body: ["email": "keeper@uni.edu", "password": .string("wrong-\(password)")])).quadError?.status == 401)
        let signedIn = try full.client(token: token)
        _ = try signedIn.request("accounts.profile.update", ["password": .string(newPassword), "current_password": .string(password)])
        // The change ended that token; a new sign-in goes on.
        let renewed = try anonymous.request("accounts.login", ["email": "keeper@uni.edu", "password": .string(newPassword)])
        let again = try full.client(token: try #require(renewed["token"]?.string))
        _ = try again.request("accounts.profile.get")
        if full.running.contains("favorites") { _ = try? again.request("favorites.list") }
        let forged = SigningKey.generate().sign(TokenClaims(user: user, role: "admin", expiresAt: Int64(Clock.nowMillis()) + 60_000, issuedAt: 0))
        #expect(try full.client(token: forged).call(.request("accounts.profile.get")).quadError?.status == 401)
        let admin = try anonymous.request("accounts.login", ["email": .string(FullStack.adminEmail), "password": .string(FullStack.adminPassword)])
        let adminToken = try #require(admin["token"]?.string)
        _ = try? full.client(token: adminToken).request("accounts.events.since", ["after": 0])
        usleep(300_000)

        let keys = full.stack.dir + "/keys/"
        let accountsKey = try String(contentsOfFile: keys + "accounts.key", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let brokerKey = try String(contentsOfFile: keys + "broker.key", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let db = try SQLiteDatabase(path: full.stack.dir + "/accounts.db")
        let hashes = try db.query("SELECT email, password_hash FROM users").map { ($0.string("email"), $0.string("password_hash")) }

        // Logs: none of the secrets, nor any part of a token's signature.
        let logs = full.logs()
        #expect(!logs.isEmpty && logs.contains(user), "the logs should at least name the user")
        let secrets: [(String, String)] = [
            ("a password", password), ("a new password", newPassword), ("the admin's password", FullStack.adminPassword),
            ("a session token", token), ("a session token's signature", String(token.split(separator: ".").last ?? "")),
            ("a renewed session token", renewed["token"]?.string ?? "-"),
            ("the admin's token", adminToken), ("a forged token", forged),
            ("accounts' signing key", accountsKey), ("the broker's CURVE secret key", brokerKey),
        ] + hashes.map { ("the password hash of \($0.0)", $0.1) }
        for (what, secret) in secrets {
            #expect(!logs.contains(secret), "\(what) is in the logs")
        }

        // Key files: secret ones 0600, public ones 0644.
        #expect(try mode(of: keys + "accounts.key") == 0o600)
        #expect(try mode(of: keys + "broker.key") == 0o600)
        #expect(try mode(of: keys + "accounts.pub") == 0o644)
        #expect(try mode(of: keys + "broker.pub") == 0o644)

        // Passwords: only Argon2id hashes in the store, each salted, none of them the password.
        #expect(hashes.count >= 2)
        for (email, hash) in hashes {
            #expect(hash.hasPrefix("$argon2id$v=19$m="), "\(email)'s password is stored as \(hash.prefix(12))…")
        }
        #expect(Set(hashes.map(\.1)).count == hashes.count, "two hashes alike: unsalted?")
        #expect(PasswordHash.verify(newPassword, hash: try #require(hashes.first { $0.0 == "keeper@uni.edu" }?.1)))
        // Not in the store's files at all, in any form SQLite may keep (WAL included).
        for file in ["accounts.db", "accounts.db-wal"] {
            guard let bytes = FileManager.default.contents(atPath: full.stack.dir + "/" + file) else { continue }
            for p in [password, newPassword, FullStack.adminPassword] {
                #expect(bytes.range(of: Data(p.utf8)) == nil, "a password in clear in \(file)")
            }
        }
    }

    @Test func theAdminPasswordComesFromAFileAndNeverFromACommandLine() throws {
        let stack = try TestStack(name: "secrets-admin")
        try stack.startBroker()
        let password = "file-only-\(UInt32.random(in: 0...UInt32.max))"
        let file = stack.dir + "/admin.password"
        #expect(FileManager.default.createFile(atPath: file, contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600]))
        let accounts = try stack.startWorker("quad-accounts", instance: "accounts/1",
                                             extra: ["--password-hashing", "minimum", "--admin-email", FullStack.adminEmail, "--admin-password-file", file])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let session = try stack.client().request("accounts.login", ["email": .string(FullStack.adminEmail), "password": .string(password)], timeoutMs: 5000)
        #expect(session["role"]?.string == "admin")
        let cmdline = try #require(FileManager.default.contents(atPath: "/proc/\(accounts.processIdentifier)/cmdline"))
        #expect(cmdline.range(of: Data(password.utf8)) == nil, "the admin's password is on quad-accounts' command line")
        #expect(!stack.log("accounts/1").contains(password), "the admin's password is in the log")
        // --admin EMAIL:PASSWORD still exists, for tests, and says so.
        let help = Process()
        help.executableURL = URL(fileURLWithPath: TestStack.binDir + "/quad-accounts")
        help.arguments = ["--help"]
        let out = Pipe()
        help.standardOutput = out
        help.standardError = out
        try help.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        help.waitUntilExit()
        #expect(text.contains("--admin-password-file") && text.contains("TESTS ONLY"), "\(text)")
    }
}
