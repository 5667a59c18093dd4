import Foundation
@testable import QuadAuth
import QuadWire
import Testing

@Suite("QuadAuth: tokens, keys, passwords")
struct AuthTests {
    let now: Int64 = 1_760_000_000_000

    func claims(user: String = "0190a5e8-0000-7000-8000-000000000001", role: String = "student", ttl: Int64 = 60_000) -> TokenClaims {
        TokenClaims(user: user, role: role, expiresAt: now + ttl, issuedAt: now)
    }

    @Test func aSignedTokenVerifiesWithItsPublicKeyAndSaysWhoAndUntilWhen() throws {
        let key = SigningKey.generate()
        let signed = claims(role: "admin")
        let token = key.sign(signed)
        #expect(try key.verifyingKey.verify(token, now: now) == signed)
        #expect(signed.tokenID.count == 36, "a jti, a UUIDv7, in every token")
        // The payload is plain base64url JSON with sub, role, exp, iat, jti.
        let payload = try #require(Base64URL.decode(token.split(separator: ".")[0]))
        let json = try JSON.parse(payload)
        #expect(json["sub"]?.string == claims().user)
        #expect(json["role"]?.string == "admin")
        #expect(json["exp"]?.int == now + 60_000)
        #expect(json["iat"]?.int == now)
        #expect(json["jti"]?.string == signed.tokenID)
    }

    @Test func aTokenIsRefusedFromItsExpiryOn() throws {
        let key = SigningKey.generate()
        let token = key.sign(claims(ttl: 1000))
        #expect(try key.verifyingKey.verify(token, now: now + 999).user == claims().user)
        #expect(throws: TokenError.expired(at: now + 1000)) { try key.verifyingKey.verify(token, now: now + 1000) }
        #expect(TokenError.expired(at: 1).quadError.status == 401)
        #expect(TokenError.expired(at: 1).quadError.message.hasPrefix("token expired"))
    }

    @Test(arguments: [0, 1, 31, 63])
    func aFlippedSignatureByteIsRefused(byte: Int) throws {
        let key = SigningKey.generate()
        let token = key.sign(claims())
        let parts = token.split(separator: ".")
        var signature = try #require(Base64URL.decode(parts[1]))
        signature[byte] ^= 0x01
        let forged = parts[0] + "." + Base64URL.encode(signature)
        #expect(throws: TokenError.signatureInvalid) { try key.verifyingKey.verify(forged, now: now) }
    }

    @Test func aPayloadChangedAfterSigningIsRefused() throws {
        let key = SigningKey.generate()
        let token = key.sign(claims())
        let promoted = Base64URL.encode(claims(role: "admin").payload.encoded())
        let forged = promoted + "." + token.split(separator: ".")[1]
        #expect(throws: TokenError.signatureInvalid) { try key.verifyingKey.verify(forged, now: now) }
    }

    @Test func aTokenOfAnotherKeyIsRefused() throws {
        let token = SigningKey.generate().sign(claims())
        #expect(throws: TokenError.signatureInvalid) { try SigningKey.generate().verifyingKey.verify(token, now: now) }
    }

    @Test(arguments: ["", "garbage", "a.b.c", "..", "abc.", ".abc", "!!!!.AAAA", "eyJ9.AAAA", String(repeating: "A", count: 5000)])
    func aGarbledTokenIsMalformed(token: String) throws {
        let key = SigningKey.generate()
        do {
            _ = try key.verifyingKey.verify(token, now: now)
            Issue.record("accepted '\(token.prefix(20))'")
        } catch {
            guard case .malformed = error else { Issue.record("\(error) for '\(token.prefix(20))'"); return }
            #expect(error.quadError.message.hasPrefix("token malformed"))
        }
    }

    @Test func aValidlySignedPayloadWithoutTheClaimsIsMalformed() throws {
        // Signed by the right key but not a token's payload: refused all the same.
        let key = SigningKey.generate()
        for payload: JSON in [["sub": "u"], ["sub": "", "role": "student", "exp": 1, "iat": 1], [1, 2], "text"] {
            let signed = key.sign(payload: payload)
            #expect { _ = try key.verifyingKey.verify(signed, now: now) } throws: { error in
                guard case .malformed = error as? TokenError else { return false }
                return true
            }
        }
    }

    @Test func base64urlRoundTripsAndIsStrict() throws {
        for n in 0...40 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255) }
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes)
        }
        #expect(Base64URL.decode("AA==") == nil)   // padding
        #expect(Base64URL.decode("A") == nil)      // impossible length
        #expect(Base64URL.decode("AB") == nil)     // stray bits: only "AA" encodes [0]
        #expect(Base64URL.decode("AA") == [0])
        #expect(Base64URL.decode("+/8") == nil)    // base64, not base64url
        #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
    }

    @Test func passwordsAreArgon2idHashesThatVerifyOnlyTheRightPassword() throws {
        let hash = try PasswordHash.hash("correct horse battery", strength: .minimum)
        #expect(hash.hasPrefix("$argon2id$"))
        #expect(PasswordHash.verify("correct horse battery", hash: hash))
        #expect(!PasswordHash.verify("correct horse batterY", hash: hash))
        #expect(!PasswordHash.verify("correct horse battery", hash: "not a hash"))
        #expect(try PasswordHash.hash("correct horse battery", strength: .minimum) != hash, "salted")
        let interactive = try PasswordHash.hash("ünïcödé pässwörd", strength: .interactive)
        #expect(interactive.contains("m=65536,t=2"), "libsodium's INTERACTIVE limits: 64 MiB, 2 passes")
        #expect(PasswordHash.verify("ünïcödé pässwörd", hash: interactive))
    }
}

@Suite("QuadAuth: key files")
struct KeyFileTests {
    func folder() throws -> String {
        let dir = NSTemporaryDirectory() + "quad-keys-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    func mode(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? Int ?? -1) & 0o777
    }

    @Test func theKeyPairIsCreatedOnceWithModes0600And0644() throws {
        let dir = try folder()
        let path = dir + "/keys/accounts.key"
        let (key, created) = try KeyFiles.loadOrCreateSigningKey(at: path)
        #expect(created)
        #expect(try mode(path) == 0o600)
        #expect(try mode(dir + "/keys/accounts.pub") == 0o644)
        let again = try KeyFiles.loadOrCreateSigningKey(at: path)
        #expect(!again.created)
        #expect(again.key.verifyingKey == key.verifyingKey)
        #expect(try KeyFiles.loadVerifyingKey(at: dir + "/keys/accounts.pub") == key.verifyingKey)
        // A lost public key is written again from the secret key.
        try FileManager.default.removeItem(atPath: dir + "/keys/accounts.pub")
        _ = try KeyFiles.loadOrCreateSigningKey(at: path)
        #expect(try KeyFiles.loadVerifyingKey(at: dir + "/keys/accounts.pub") == key.verifyingKey)
        #expect(try KeyFiles.loadVerifyingKey(at: dir + "/keys/none.pub") == nil)
    }

    @Test func workersStartingTogetherAgreeOnOneKey() throws {
        let path = try folder() + "/accounts.key"
        let keys = Box()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if let k = try? KeyFiles.loadOrCreateSigningKey(at: path) { keys.add(k.key.verifyingKey.bytes, created: k.created) }
        }
        #expect(keys.all.count == 8)
        #expect(Set(keys.all).count == 1)
        #expect(keys.created == 1)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: (path as NSString).deletingLastPathComponent).filter { $0.hasSuffix(".tmp") }
        #expect(leftovers.isEmpty)
    }

    @Test func aSecretKeyOthersCanReadIsRefused() throws {
        let path = try folder() + "/accounts.key"
        _ = try KeyFiles.loadOrCreateSigningKey(at: path)
        chmod(path, 0o644)
        #expect { _ = try KeyFiles.loadSigningKey(at: path) } throws: { ($0 as? AuthError)?.message.contains("chmod 600") == true }
    }

    @Test func defaultPathsFollowQuadHomeAndQuadAccountsKey() {
        #expect(KeyFiles.defaultSecretKeyPath(environment: ["QUAD_HOME": "/h"]) == "/h/keys/accounts.key")
        #expect(KeyFiles.defaultPublicKeyPath(environment: ["QUAD_HOME": "/h"]) == "/h/keys/accounts.pub")
        #expect(KeyFiles.defaultPublicKeyPath(environment: ["QUAD_HOME": "/h", "QUAD_ACCOUNTS_KEY": "/k.pub"]) == "/k.pub")
        #expect(KeyFiles.publicKeyPath(forSecretKey: "/a/b.key") == "/a/b.pub")
    }

    @Test func theVerifierWaitsForTheKeyFileAndRemembersVerifiedTokens() throws {
        let dir = try folder()
        var clock: Int64 = 1_760_000_000_000
        let verifier = TokenVerifier(keyPath: dir + "/accounts.pub", now: { clock })
        verifier.retryMs = 0
        let key = SigningKey.generate()
        let token = key.sign(TokenClaims(user: "u1", role: "student", expiresAt: clock + 1000, issuedAt: clock))
        #expect { _ = try verifier.check(token) } throws: { ($0 as? QuadError)?.status == 503 }
        try Base64URL.encode(key.verifyingKey.bytes).write(toFile: dir + "/accounts.pub", atomically: true, encoding: .utf8)
        #expect(try verifier.check(token).user == "u1")
        #expect(try verifier.check(token).user == "u1")   // remembered
        clock += 1000
        #expect { _ = try verifier.check(token) } throws: { ($0 as? QuadError)?.message.hasPrefix("token expired") == true }
        // A rotated key: the new key's tokens verify, the old key's are refused.
        let rotated = SigningKey.generate()
        try Base64URL.encode(rotated.verifyingKey.bytes).write(toFile: dir + "/accounts.pub", atomically: true, encoding: .utf8)
        let fresh = rotated.sign(TokenClaims(user: "u2", role: "student", expiresAt: clock + 1000, issuedAt: clock))
        #expect(try verifier.check(fresh).user == "u2")
        let old = key.sign(TokenClaims(user: "u1", role: "student", expiresAt: clock + 1000, issuedAt: clock))
        #expect { _ = try verifier.check(old) } throws: { ($0 as? QuadError)?.message.hasPrefix("token signature invalid") == true }
    }
}

final class Box: @unchecked Sendable {
    // Guarded by `lock`; filled from concurrentPerform's threads.
    let lock = NSLock()
    var all: [[UInt8]] = []
    var created = 0
    func add(_ bytes: [UInt8], created c: Bool) { lock.withLock { all.append(bytes); if c { created += 1 } } }
}
