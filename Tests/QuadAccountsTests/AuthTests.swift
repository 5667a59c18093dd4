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

    /// A part of a token, decoded as JSON.
    func part(_ token: String, _ k: Int) throws -> JSON {
        try JSON.parse(try #require(Base64URL.decode(token.split(separator: ".", omittingEmptySubsequences: false)[k])))
    }

    /// A JWT signed with `key` over whatever `header` and `payload` say.
    func forge(_ key: SigningKey, header: JSON, payload: JSON) -> String { key.sign(header: header, payload: payload) }

    /// The claims a real token carries, to change one at a time.
    func payload(_ key: SigningKey) throws -> [String: JSON] {
        guard case .object(let o) = try part(key.sign(claims()), 1) else { throw AuthError("no object") }
        return o
    }

    func header(_ key: SigningKey, alg: JSON = "EdDSA", kid: JSON? = nil) -> JSON {
        ["alg": alg, "typ": "JWT", "kid": kid ?? .string(key.verifyingKey.keyID)]
    }

    @Test func aSignedTokenIsAnEdDSAJWTThatVerifiesWithItsPublicKey() throws {
        let key = SigningKey.generate()
        let signed = claims(role: "admin")
        let token = key.sign(signed)
        #expect(try key.verifyingKey.verify(token, now: now) == signed)
        #expect(signed.tokenID.count == 36, "a jti, a UUIDv7, in every token")
        #expect(token.split(separator: ".", omittingEmptySubsequences: false).count == 3, "header.claims.signature")
        let h = try part(token, 0)
        #expect(h == ["alg": "EdDSA", "typ": "JWT", "kid": .string(key.verifyingKey.keyID)])
        let json = try part(token, 1)
        #expect(json["iss"]?.string == "quad-accounts" && json["aud"]?.string == "quad")
        #expect(json["sub"]?.string == claims().user)
        #expect(json["role"]?.string == "admin")
        #expect(json["exp"]?.int == (now + 60_000) / 1000, "exp in seconds (NumericDate)")
        #expect(json["iat"]?.int == now / 1000, "iat in seconds")
        #expect(json["jti"]?.string == signed.tokenID)
        // The signature is Ed25519 over the ASCII of header '.' claims.
        let cut = try #require(token.lastIndex(of: "."))
        let message = Array(token[..<cut].utf8)
        let signature = try #require(Base64URL.decode(token[token.index(after: cut)...]))
        #expect(Primitives.ed25519Verifies(signature, of: message, by: key.verifyingKey.bytes))
    }

    @Test func theKidIsTheRFC7638ThumbprintAndTheJWKSaysTheKey() throws {
        // RFC 8037 appendix A.3: the thumbprint of its example Ed25519 key.
        let x = try #require(Base64URL.decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"))
        let key = try VerifyingKey(bytes: x)
        #expect(key.keyID == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k")
        #expect(key.jwk == ["kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
                            "kid": "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k", "alg": "EdDSA", "use": "sig"])
        #expect(SigningKey.generate().verifyingKey.keyID != key.keyID)
    }

    @Test func issuedAtKeepsItsMillisecondThroughTheJti() throws {
        let key = SigningKey.generate()
        let at = now + 437
        let c = TokenClaims(user: claims().user, role: "student", expiresAt: now + 60_000, issuedAt: at, tokenID: MessageID.make(now: UInt64(at)))
        let back = try key.verifyingKey.verify(key.sign(c), now: now)
        #expect(back.issuedAt == at, "a logout everywhere at ms t ends tokens issued before t, not the whole second")
        #expect(try part(key.sign(c), 1)["iat"]?.int == now / 1000)
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
        var signature = try #require(Base64URL.decode(parts[2]))
        signature[byte] ^= 0x01
        let forged = parts[0] + "." + parts[1] + "." + Base64URL.encode(signature)
        #expect(throws: TokenError.signatureInvalid) { try key.verifyingKey.verify(forged, now: now) }
    }

    @Test func aPayloadChangedAfterSigningIsRefused() throws {
        let key = SigningKey.generate()
        let token = key.sign(claims())
        let parts = token.split(separator: ".")
        let promoted = Base64URL.encode(claims(role: "admin").payload.encoded())
        let forged = parts[0] + "." + promoted + "." + parts[2]
        #expect(throws: TokenError.signatureInvalid) { try key.verifyingKey.verify(forged, now: now) }
    }

    @Test func aTokenOfAnotherKeyIsRefused() throws {
        let other = SigningKey.generate()
        let mine = SigningKey.generate()
        // Under its own kid: that kid is not this stack's.
        #expect(throws: TokenError.unknownKey(other.verifyingKey.keyID)) { try mine.verifyingKey.verify(other.sign(claims()), now: now) }
        // Claiming this stack's kid: the signature does not verify.
        let lying = forge(other, header: header(mine), payload: claims().payload)
        #expect(throws: TokenError.signatureInvalid) { try mine.verifyingKey.verify(lying, now: now) }
    }

    @Test func algNoneIsRefused() throws {
        let key = SigningKey.generate()
        let body = Base64URL.encode(claims(role: "admin").payload.encoded())
        for alg in ["none", "None", "NONE"] {
            let h = Base64URL.encode((["alg": .string(alg), "typ": "JWT", "kid": .string(key.verifyingKey.keyID)] as JSON).encoded())
            for token in [h + "." + body + ".", h + "." + body + "." + Base64URL.encode([UInt8](repeating: 0, count: 64))] {
                #expect(throws: TokenError.algorithmRefused(alg)) { try key.verifyingKey.verify(token, now: now) }
            }
        }
        #expect(TokenError.algorithmRefused("none").quadError.status == 401)
        #expect(TokenError.algorithmRefused("none").quadError.message.hasPrefix("token algorithm refused"))
    }

    @Test func hs256WithThePublicKeyAsSecretIsRefused() throws {
        // The classic confusion: a verifier that takes the alg from the
        // header would check an HMAC keyed with the (public) key.
        let key = SigningKey.generate()
        let h = Base64URL.encode(header(key, alg: "HS256").encoded())
        let signed = h + "." + Base64URL.encode(claims(role: "admin").payload.encoded())
        let secrets = [key.verifyingKey.bytes, Array(Base64URL.encode(key.verifyingKey.bytes).utf8)]
        for secret in secrets {
            let mac = Primitives.hmacSHA256(key: secret, Array(signed.utf8))
            #expect(throws: TokenError.algorithmRefused("HS256")) { try key.verifyingKey.verify(signed + "." + Base64URL.encode(mac), now: now) }
        }
        for alg: JSON in ["RS256", "ES256", "Ed25519", "eddsa", 1, nil] {
            #expect { _ = try key.verifyingKey.verify(forge(key, header: header(key, alg: alg), payload: claims().payload), now: now) } throws: { error in
                guard case .algorithmRefused = error as? TokenError else { return false }
                return true
            }
        }
    }

    @Test func aWrongOrMissingKidIsRefused() throws {
        let key = SigningKey.generate()
        let wrong = forge(key, header: header(key, kid: "another-key"), payload: claims().payload)
        #expect(throws: TokenError.unknownKey("another-key")) { try key.verifyingKey.verify(wrong, now: now) }
        let missing = forge(key, header: ["alg": "EdDSA", "typ": "JWT"], payload: claims().payload)
        #expect(throws: TokenError.unknownKey("(missing)")) { try key.verifyingKey.verify(missing, now: now) }
        #expect(TokenError.unknownKey("k").quadError.message.hasPrefix("token key unknown"))
        let crit = forge(key, header: ["alg": "EdDSA", "kid": .string(key.verifyingKey.keyID), "crit": ["exp"]], payload: claims().payload)
        #expect { _ = try key.verifyingKey.verify(crit, now: now) } throws: { error in
            guard case .malformed = error as? TokenError else { return false }
            return true
        }
    }

    @Test(arguments: [("iss", JSON.string("someone-else")), ("aud", JSON.string("other")), ("aud", JSON.array(["a", "b"])), ("aud", JSON.int(5)), ("iss", JSON.null)])
    func aWrongIssuerOrAudienceIsRefused(claim: String, value: JSON) throws {
        let key = SigningKey.generate()
        var p = try payload(key)
        p[claim] = value
        #expect { _ = try key.verifyingKey.verify(forge(key, header: header(key), payload: .object(p)), now: now) } throws: { error in
            guard case .claimRefused = error as? TokenError else { return false }
            #expect((error as? TokenError)?.quadError.message.hasPrefix("token claim refused") == true)
            return true
        }
        // An aud list holding "quad" is accepted.
        p[claim] = claim == "aud" ? ["other", "quad"] : "quad-accounts"
        #expect(try key.verifyingKey.verify(forge(key, header: header(key), payload: .object(p)), now: now).user == claims().user)
    }

    @Test(arguments: ["iss", "aud", "sub", "role", "iat", "exp", "jti"])
    func aTokenMissingAClaimIsMalformed(claim: String) throws {
        let key = SigningKey.generate()
        var p = try payload(key)
        p[claim] = nil
        #expect { _ = try key.verifyingKey.verify(forge(key, header: header(key), payload: .object(p)), now: now) } throws: { error in
            guard case .malformed(let why) = error as? TokenError else { return false }
            return why.contains("claims.\(claim)")
        }
    }

    @Test func msTimesAreRefusedAsNumericDatesOutOfRange() throws {
        // exp in ms (the old format) would live 1000 times too long: refused.
        let key = SigningKey.generate()
        var p = try payload(key)
        p["exp"] = .int(now + 60_000)
        #expect { _ = try key.verifyingKey.verify(forge(key, header: header(key), payload: .object(p)), now: now) } throws: { error in
            guard case .malformed = error as? TokenError else { return false }
            return true
        }
    }

    @Test(arguments: ["", "garbage", "a.b", "a.b.c", "..", "abc.", ".abc", "!!!!.AAAA.AAAA", "eyJ9.AAAA.AAAA", "e30.e30.AAAA.AAAA",
                      String(repeating: "A", count: 5000)])
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

    @Test func anOldFormatTokenIsMalformed() throws {
        // base64url(payload).base64url(signature), as tokens were before JWTs.
        let key = SigningKey.generate()
        let old = Base64URL.encode((["sub": "u", "role": "student", "exp": .int(now + 60_000), "iat": .int(now)] as JSON).encoded())
            + "." + Base64URL.encode([UInt8](repeating: 1, count: 64))
        #expect { _ = try key.verifyingKey.verify(old, now: now) } throws: { error in
            guard case .malformed(let why) = error as? TokenError else { return false }
            return why.contains("three base64url parts")
        }
    }

    @Test func aValidlySignedPayloadWithoutTheClaimsIsMalformed() throws {
        // Signed by the right key but not a token's payload: refused all the same.
        let key = SigningKey.generate()
        let empty: JSON = ["iss": "quad-accounts", "aud": "quad", "sub": "", "role": "student", "exp": 1, "iat": 1, "jti": "j"]
        for payload: JSON in [["iss": "quad-accounts", "aud": "quad", "sub": "u"], empty, [1, 2], "text"] {
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
        #expect { _ = try verifier.check(old) } throws: { ($0 as? QuadError)?.message.hasPrefix("token key unknown") == true }
    }
}

final class Box: @unchecked Sendable {
    // Guarded by `lock`; filled from concurrentPerform's threads.
    let lock = NSLock()
    var all: [[UInt8]] = []
    var created = 0
    func add(_ bytes: [UInt8], created c: Bool) { lock.withLock { all.append(bytes); if c { created += 1 } } }
}
