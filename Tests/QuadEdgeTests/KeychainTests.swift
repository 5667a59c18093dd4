import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// Every byte of every file under `dir` (recursively), but the keychain
/// key files (random bytes, the key itself), by path.
func filesBytes(under dir: String) -> [(String, Data)] {
    let paths = (FileManager.default.subpaths(atPath: dir) ?? []).map { dir + "/" + $0 }
    return paths.filter { !$0.hasSuffix(".keychain-key") }.compactMap { path in
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir), !isDir.boolValue,
              let data = FileManager.default.contents(atPath: path) else { return nil }
        return (path, data)
    }
}

/// The ways a secret could be written down: as it is, and a key's bytes in
/// Z85, base64 and base64url.
func spellings(text: String) -> [Data] { [Data(text.utf8)] }

func spellings(key: [UInt8]) -> [Data] {
    [Data(key), Data(Data(key).base64EncodedString().utf8), Data(Base64URL.encode(key).utf8)] + (Z85.encode(key).map { [Data($0.utf8)] } ?? [])
}

/// The files under `dir` that hold any of `secrets`, with what they hold.
func leaks(under dir: String, _ secrets: [(String, [Data])]) -> [String] {
    filesBytes(under: dir).flatMap { path, data in
        secrets.compactMap { name, forms in forms.contains { !$0.isEmpty && data.range(of: $0) != nil } ? "\(path) holds \(name)" : nil }
    }
}

func temporaryFolder(_ tag: String) throws -> String {
    let dir = NSTemporaryDirectory() + "quad-\(tag)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

func mode(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
}

@Suite("the phone's keychain")
struct KeychainTests {
    @Test func itemsAreSealedUnderTheKeyFileWithANewNonceEachWrite() throws {
        let dir = try temporaryFolder("keychain")
        let path = dir + "/phone-001.keychain"
        let secret = "eyJ-session-token-" + MessageID.make()
        let keychain = try Keychain(path: path)
        try keychain.set([.sessionToken: secret, .refreshToken: "rt1.refresh"])
        let first = try #require(FileManager.default.contents(atPath: path))
        try keychain.set([.sessionToken: secret + "x"])
        try keychain.set([.sessionToken: secret])
        let second = try #require(FileManager.default.contents(atPath: path))
        #expect(first != second, "a new nonce on every write")
        #expect(mode(path) == 0o600 && mode(path + "-key") == 0o600)
        #expect(leaks(under: dir, [("the token", spellings(text: secret)), ("the refresh token", spellings(text: "rt1.refresh"))]).isEmpty)
        let again = try Keychain(path: path)
        #expect(again[.sessionToken] == secret && again[.refreshToken] == "rt1.refresh")
        // No temporary file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["phone-001.keychain", "phone-001.keychain-key"])
    }

    /// A write that need not be durable (the write generation, once per
    /// action) goes over the file in place: the same inode, no temporary
    /// file made and freed. A shorter text after a longer one still reads
    /// back, and a durable write replaces the file as before.
    @Test func aWriteThatNeedNotBeDurableGoesInPlaceAndReadsBack() throws {
        let dir = try temporaryFolder("keychain")
        let path = dir + "/phone-001.keychain"
        func inode() -> UInt64 {
            var info = stat()
            return stat(path, &info) == 0 ? UInt64(info.st_ino) : 0
        }
        let keychain = try Keychain(path: path)
        try keychain.set([.sessionToken: "a token", .writeGeneration: String(repeating: "9", count: 40)])
        let first = inode()
        let longer = try #require(FileManager.default.contents(atPath: path)).count
        try keychain.set([.writeGeneration: "3 2"], durable: false)
        #expect(inode() == first, "written in place")
        #expect(try #require(FileManager.default.contents(atPath: path)).count == longer, "padded to the file's length")
        var again = try Keychain(path: path)
        #expect(again[.writeGeneration] == "3 2" && again[.sessionToken] == "a token")
        try keychain.set([.writeGeneration: "4 2"], durable: false)
        again = try Keychain(path: path)
        #expect(again[.writeGeneration] == "4 2")
        #expect(mode(path) == 0o600)
        try keychain.set([.sessionToken: "another token"])
        #expect(inode() != first, "a durable write replaces the file")
        #expect(try Keychain(path: path)[.sessionToken] == "another token")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["phone-001.keychain", "phone-001.keychain-key"])
    }

    @Test(arguments: ["flip", "truncate", "empty", "garbage"])
    func aTamperedOrCutKeychainIsAClearErrorAndThePhoneSignsInAgain(damage: String) throws {
        let dir = try temporaryFolder("keychain")
        let path = dir + "/phone-001.keychain"
        try Keychain(path: path).set([.sessionToken: "a token"])
        var bytes = [UInt8](try #require(FileManager.default.contents(atPath: path)))
        switch damage {
        case "flip": bytes[bytes.count / 2] ^= bytes[bytes.count / 2] == UInt8(ascii: "A") ? 0x02 : 0x03
        case "truncate": bytes = Array(bytes.prefix(bytes.count / 2))
        case "empty": bytes = []
        default: bytes = Array("not a keychain at all".utf8)
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        do {
            _ = try Keychain(path: path)
            Issue.record("a \(damage) keychain opened")
        } catch {
            #expect(error.kind == .tampered && error.message.contains("signs in again"), "\(error)")
        }
        // The phone: an empty keychain, the error shown, no crash.
        let (keychain, unreadable) = try Phone.openKeychain(path, pin: nil)
        #expect(keychain[.sessionToken] == nil && unreadable?.kind == .tampered)
        #expect(try Keychain(path: path)[.sessionToken] == nil, "the new keychain opens")
    }

    @Test func aPINDerivesTheKeyAndAWrongPINIsAClearError() throws {
        let dir = try temporaryFolder("keychain")
        let path = dir + "/phone-001.keychain"
        // A keychain under its key file, then locked with a PIN: sealed
        // again under the PIN, the key file gone.
        try Keychain(path: path).set([.refreshToken: "rt1.kept"])
        #expect(FileManager.default.fileExists(atPath: path + "-key"))
        let locked = try Keychain(path: path, pin: "4711")
        #expect(locked[.refreshToken] == "rt1.kept")
        #expect(!FileManager.default.fileExists(atPath: path + "-key") && mode(path + "-pin") == 0o600)
        #expect(try Keychain(path: path, pin: "4711")[.refreshToken] == "rt1.kept")
        do {
            _ = try Keychain(path: path, pin: "1234")
            Issue.record("a wrong PIN opened the keychain")
        } catch {
            #expect(error.kind == .wrongPIN && error.message.hasPrefix("wrong PIN"), "\(error)")
        }
        do {
            _ = try Keychain(path: path)
            Issue.record("a PIN-locked keychain opened without its PIN")
        } catch {
            #expect(error.kind == .locked, "\(error)")
        }
        // A wrong PIN stops the phone with its error; it empties nothing.
        #expect(throws: KeychainError.self) { try Phone.openKeychain(path, pin: "0000") }
        #expect(try Keychain(path: path, pin: "4711")[.refreshToken] == "rt1.kept")
        #expect(leaks(under: dir, [("the refresh token", spellings(text: "rt1.kept")), ("the PIN", spellings(text: "4711"))]).isEmpty)
    }

    /// A phone's file as it was before the keychain: token and password in
    /// its session row, the token changed once (the PERSIST journal keeps
    /// the page from before).
    func legacyPhoneFile(_ path: String, token: String, oldToken: String, password: String) throws {
        let db = try SQLiteDatabase(path: path)
        try Migrations.apply(db, PhoneStore.migrations.filter { $0.version < PhoneStore.keychainVersion }, scope: "phone")
        try db.executeScript("PRAGMA journal_mode=PERSIST")
        try db.execute("""
            INSERT INTO session (one, phone, email, password, name, register_id, registered, user_id, token, expires_at)
            VALUES (1, 'phone-001', 'old@edge.quad.campus', $1, 'Student', $2, 1, 'u-1', $3, 1)
            """, .text(password), .text(MessageID.make()), .text(oldToken))
        try db.execute("UPDATE session SET token = $1 WHERE one = 1", .text(token))
        db.close()
    }

    @Test func anOldPhoneFileIsMigratedAndItsSecretsLeaveEveryFile() throws {
        let dir = try temporaryFolder("keychain-migration")
        let phones = dir + "/phones"
        try FileManager.default.createDirectory(atPath: phones, withIntermediateDirectories: true)
        let path = phones + "/phone-001.db"
        let (token, oldToken, password) = ("eyJ.current-" + MessageID.make(), "eyJ.earlier-" + MessageID.make(), "pw-" + MessageID.make())
        try legacyPhoneFile(path, token: token, oldToken: oldToken, password: password)
        let secrets = [("the token", spellings(text: token)), ("the earlier token", spellings(text: oldToken)), ("the password", spellings(text: password))]
        #expect(leaks(under: phones, secrets).count >= 2, "the old file holds them: the check can fail")

        let keychain = try Keychain(path: Keychain.path(forPhoneFile: path))
        let students = try Students(path: Students.path(forPhonesDir: phones))
        let db = try PhoneStore.open(path, keychain: keychain, students: students)
        let columns = try db.query("SELECT name FROM pragma_table_info('session')").map { $0.string("name") }
        #expect(!columns.contains("token") && !columns.contains("password"), "\(columns)")
        #expect(try db.queryOne("SELECT email FROM session")?.string("email") == "old@edge.quad.campus", "the rest of the session stays")
        #expect(keychain[.sessionToken] == token)
        #expect(try students.password(for: "old@edge.quad.campus") == password, "the student remembers the password")
        #expect(leaks(under: phones, secrets) == [], "with the file open")
        // A phone's ordinary writes after it (WAL, then the PERSIST journal).
        try db.executeScript("PRAGMA journal_mode=WAL")
        try db.setMeta("after", "migration")
        #expect(leaks(under: phones, secrets) == [])
        db.close()
        #expect(leaks(under: phones, secrets) == [], "closed")
        // Opened again: nothing moves twice.
        let reopened = try PhoneStore.open(path, keychain: try Keychain(path: Keychain.path(forPhoneFile: path)), students: students)
        #expect(try reopened.meta("after") == "migration")
        reopened.close()
        #expect(!Students.path(forPhonesDir: phones).hasPrefix(phones + "/"), "the students' memory is not a phone's file")
    }

    /// The campus day's check can fail: a password written into a phone's
    /// file is found, and the phone counted.
    @Test func theCampusDaysCheckFindsASecretInAPhonesFile() throws {
        let rig = try PhoneRig()
        rig.phone.token = "eyJ.a-token-" + MessageID.make()
        #expect(KeychainCheck.leaks(rig.phone) == [])
        try rig.phone.db.setMeta("note", "my password is " + rig.phone.password)
        let found = KeychainCheck.leaks(rig.phone)
        #expect(found.contains { $0.hasSuffix(": password") }, "\(found)")
        let report = KeychainCheck.report([rig.phone])
        #expect(report["phones_clean"]?.int == 0 && report["phones_with_secret"]?.int == 1, "\(report)")
    }

    @Test func aPhoneKeepsItsCURVEKeyInItsKeychainAcrossRestarts() throws {
        let dir = try temporaryFolder("keychain-curve")
        let context = ZMQContext()
        let reactor = Reactor(now: Clock.monotonicMillis)
        var settings = EdgeSettings(frontend: "ipc://\(dir)/nobody")
        settings.brokerKey = Curve.decode(try Curve.keyPair().publicKey)
        let first = try Phone(name: "phone-001", path: dir + "/phone-001.db", context: context, reactor: reactor, settings: settings, seed: 1)
        let keys = try #require(first.link.clientKeys)
        first.close()
        let second = try Phone(name: "phone-001", path: dir + "/phone-001.db", context: context, reactor: reactor, settings: settings, seed: 1)
        #expect(second.link.clientKeys?.secretKey == keys.secretKey, "the same key after a restart")
        second.close()
        #expect(leaks(under: dir, [("the CURVE secret key", spellings(key: keys.secretKey))]) == [])
        #expect(try Keychain(path: dir + "/phone-001.keychain")[.curveSecretKey] == Curve.encode(keys.secretKey))
    }
}
