import CSodium
import QuadWire

/// What a session token says: who, as what, until when. Times are
/// milliseconds since the Unix epoch here; on the wire (`iat`, `exp`) they
/// are whole seconds (RFC 7519 NumericDate), so a token carries
/// `expiresAt` rounded down to the second. `issuedAt` keeps its
/// milliseconds through the `jti` (a UUIDv7 made at signing, whose first 48
/// bits are that millisecond): a "log out everywhere" at millisecond t ends
/// every token issued before t, not every token of t's whole second.
public struct TokenClaims: Sendable, Equatable {
    /// The user id (`sub`), which the broker puts in the envelope's `user`.
    public var user: String
    /// `student` or `admin` (`role`), put in the envelope's `role`.
    public var role: String
    /// `exp` × 1000: the token is refused from this instant on.
    public var expiresAt: Int64
    /// `iat`: when accounts signed it (the `jti`'s millisecond when that
    /// falls in `iat`'s second, else `iat` × 1000).
    public var issuedAt: Int64
    /// `jti`: this token's own id (a UUIDv7), which `accounts.logout`
    /// revokes.
    public var tokenID: String

    /// Without a `tokenID`, a UUIDv7 of `issuedAt`'s millisecond, so the
    /// token read back keeps that millisecond (see `issuedMillis`).
    public init(user: String, role: String, expiresAt: Int64, issuedAt: Int64, tokenID: String? = nil) {
        self.user = user
        self.role = role
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.tokenID = tokenID ?? MessageID.make(now: UInt64(clamping: issuedAt))
    }

    /// Longest `jti` a token may carry.
    public static let maxTokenIDLength = Envelope.maxIDLength

    /// Longest `sub` a token may carry: the envelope's limit on `user`.
    public static let maxUserLength = Envelope.maxSourceLength
    /// Longest `role`: the envelope's limit on `role`.
    public static let maxRoleLength = 32

    /// The JWT claims set: registered claims `iss`, `aud`, `sub`, `iat`,
    /// `exp`, `jti` (RFC 7519 §4.1) and Quad's own `role`.
    var payload: JSON {
        ["iss": .string(Token.issuer), "aud": .string(Token.audience),
         "sub": .string(user), "role": .string(role),
         "iat": .int(Token.seconds(issuedAt)), "exp": .int(Token.seconds(expiresAt)), "jti": .string(tokenID)]
    }
}

/// Why a token was refused. Each becomes a 401 whose message starts with
/// "token expired", "token signature invalid", "token algorithm refused",
/// "token key unknown", "token claim refused" or "token malformed".
public enum TokenError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case signatureInvalid
    case expired(at: Int64)
    /// The header's `alg` is not `EdDSA` (`none`, `HS256`, ...).
    case algorithmRefused(String)
    /// The header's `kid` names no key of this stack (or is missing).
    case unknownKey(String)
    /// `iss`, `aud` or `nbf` is not this stack's.
    case claimRefused(String)

    public var description: String {
        switch self {
        case .malformed(let why): return "token malformed: \(why)"
        case .signatureInvalid: return "token signature invalid: not signed by this stack's accounts key; log in again"
        case .expired(let at): return "token expired at \(at) ms since the epoch; log in again"
        case .algorithmRefused(let alg):
            return "token algorithm refused: header.alg is \(alg), only EdDSA (Ed25519, RFC 8037) is accepted"
        case .unknownKey(let kid):
            return "token key unknown: header.kid \(kid) is not the kid of this stack's accounts key (see accounts.jwks); log in again"
        case .claimRefused(let why): return "token claim refused: \(why)"
        }
    }

    public var quadError: QuadError { .unauthorized(description) }
}

/// A session token: a JWT (RFC 7519) in JWS compact serialization,
/// `base64url(header) "." base64url(claims) "." base64url(signature)`,
/// signed with EdDSA over Ed25519 (RFC 8037): the signature is
/// `crypto_sign_detached` over the ASCII of the first two parts. The header
/// is `{"alg":"EdDSA","typ":"JWT","kid":<key id>}`, where the key id is the
/// RFC 7638 JWK thumbprint of accounts' public key (``VerifyingKey/keyID``);
/// the claims are `iss` ("quad-accounts"), `aud` ("quad"), `sub`, `role`,
/// `iat`, `exp` (seconds) and `jti`. base64url has no padding.
///
/// A verifier trusts nothing in the header but compares it: `alg` must be
/// exactly `EdDSA` (so `none`, and `HS256` keyed with the public key, are
/// refused before any signature check), `kid` must be its own key's, and
/// `crit` is refused (no extension is understood).
public enum Token {
    /// Longest token accepted: the envelope's limit on `token`.
    public static let maxLength = Envelope.maxTokenLength
    /// `iss`: who signs session tokens.
    public static let issuer = "quad-accounts"
    /// `aud`: who accepts them (the brokers, and accounts itself).
    public static let audience = "quad"
    /// The only `alg` signed and accepted.
    public static let algorithm = "EdDSA"
    static let signatureBytes = Int(crypto_sign_bytes())

    /// Milliseconds to a NumericDate (whole seconds, rounded down).
    static func seconds(_ ms: Int64) -> Int64 { ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000) }

    /// The pieces of a token in compact serialization, shape checked.
    struct Parts {
        var header: JSON
        var signed: [UInt8]
        var signature: [UInt8]
        var payload: Substring
    }

    /// Splits and checks a token's shape and header; returns the signed
    /// part's bytes, the signature and the encoded payload.
    static func parts(_ token: String) throws(TokenError) -> Parts {
        guard !token.isEmpty else { throw .malformed("empty") }
        guard token.utf8.count <= maxLength else { throw .malformed("longer than \(maxLength) bytes") }
        let pieces = token.split(separator: ".", omittingEmptySubsequences: false)
        guard pieces.count == 3 else {
            throw .malformed("expected a JWT: three base64url parts (header.claims.signature) separated by '.', got \(pieces.count) part\(pieces.count == 1 ? "" : "s")")
        }
        guard !pieces[0].isEmpty else { throw .malformed("the header part is empty") }
        guard !pieces[1].isEmpty else { throw .malformed("the claims part is empty") }
        guard let headerBytes = Base64URL.decode(pieces[0]) else { throw .malformed("the header part is not base64url") }
        guard let header = try? JSON.parse(headerBytes), case .object = header else { throw .malformed("the header is not a JSON object") }
        guard let signature = Base64URL.decode(pieces[2]) else { throw .malformed("the signature part is not base64url") }
        let signedEnd = pieces[1].endIndex
        return Parts(header: header, signed: Array(token[token.startIndex..<signedEnd].utf8), signature: signature, payload: pieces[1])
    }

    /// Checks the header against the one key accepted: `alg` EdDSA, `typ`
    /// JWT when present, `kid` the key's own, no `crit`.
    static func checkHeader(_ header: JSON, keyID: String) throws(TokenError) {
        guard let algValue = header["alg"] else { throw .malformed("header.alg is missing") }
        guard let alg = algValue.string else { throw .algorithmRefused(String(algValue.text.prefix(32))) }
        guard alg == algorithm else { throw .algorithmRefused(String(alg.prefix(32))) }
        if let typ = header["typ"] {
            guard let t = typ.string, t.uppercased() == "JWT" else { throw .malformed("header.typ must be JWT when present") }
        }
        guard header["crit"] == nil else { throw .malformed("header.crit names extensions this verifier does not understand") }
        guard let kidValue = header["kid"] else { throw .unknownKey("(missing)") }
        guard let kid = kidValue.string else { throw .unknownKey("(not a string)") }
        guard kid == keyID else { throw .unknownKey(kid.count > 64 ? String(kid.prefix(64)) + "..." : kid) }
    }

    /// What a token says, WITHOUT checking its signature, header or expiry:
    /// for a client to show its own token's expiry, never to trust a token.
    public static func unverifiedClaims(_ token: String) throws(TokenError) -> TokenClaims {
        try claims(parts(token).payload)
    }

    /// Reads the claims of a payload whose signature was already checked:
    /// every claim Quad signs must be there, `iss` and `aud` this stack's.
    static func claims(_ payload: Substring) throws(TokenError) -> TokenClaims {
        guard let bytes = Base64URL.decode(payload) else { throw .malformed("the claims part is not base64url") }
        guard let json = try? JSON.parse(bytes), case .object = json else { throw .malformed("the claims are not a JSON object") }
        guard let iss = json["iss"] else { throw .malformed("claims.iss is missing") }
        guard iss.string == issuer else { throw .claimRefused("iss must be \"\(issuer)\"") }
        guard let aud = json["aud"] else { throw .malformed("claims.aud is missing") }
        let audiences: [String]
        switch aud {
        case .string(let a): audiences = [a]
        case .array(let list): audiences = list.compactMap(\.string)
        default: audiences = []
        }
        guard audiences.contains(audience) else { throw .claimRefused("aud must be or contain \"\(audience)\"") }
        guard let user = json["sub"]?.string, !user.isEmpty, user.utf8.count <= TokenClaims.maxUserLength else {
            throw .malformed("claims.sub must be a string of 1 to \(TokenClaims.maxUserLength) bytes")
        }
        guard let role = json["role"]?.string, !role.isEmpty, role.utf8.count <= TokenClaims.maxRoleLength else {
            throw .malformed("claims.role must be a string of 1 to \(TokenClaims.maxRoleLength) bytes")
        }
        guard let exp = numericDate(json["exp"]) else { throw .malformed("claims.exp must be an integer NumericDate (seconds since the epoch)") }
        guard let iat = numericDate(json["iat"]) else { throw .malformed("claims.iat must be an integer NumericDate (seconds since the epoch)") }
        guard let jti = json["jti"]?.string, !jti.isEmpty, jti.utf8.count <= TokenClaims.maxTokenIDLength else {
            throw .malformed("claims.jti must be a string of 1 to \(TokenClaims.maxTokenIDLength) bytes")
        }
        if let nbf = json["nbf"] {
            guard let at = numericDate(nbf) else { throw .malformed("claims.nbf must be an integer NumericDate when present") }
            guard at * 1000 <= Int64(Clock.nowMillis()) else { throw .claimRefused("nbf: not valid before \(at) s since the epoch") }
        }
        return TokenClaims(user: user, role: role, expiresAt: exp * 1000, issuedAt: issuedMillis(iat: iat, jti: jti), tokenID: jti)
    }

    /// Seconds within ±2^40, so `× 1000` cannot overflow.
    static func numericDate(_ value: JSON?) -> Int64? {
        guard let n = value?.int, abs(n) < 1 << 40 else { return nil }
        return n
    }

    /// `iat` in ms: the millisecond of a UUIDv7 `jti` when it lies in `iat`'s
    /// second (accounts makes both from one clock reading), else `iat` × 1000.
    static func issuedMillis(iat: Int64, jti: String) -> Int64 {
        let hex = jti.utf8.prefix(13).filter { $0 != UInt8(ascii: "-") }
        guard jti.utf8.count == 36, hex.count == 12, let ms = Int64(String(decoding: hex, as: UTF8.self), radix: 16),
              seconds(ms) == iat else { return iat * 1000 }
        return ms
    }
}

/// The private half of accounts' Ed25519 key pair: signs tokens.
public struct SigningKey: Sendable {
    /// libsodium's 64-byte secret key (seed then public key).
    let secret: [UInt8]
    public let verifyingKey: VerifyingKey

    static let secretBytes = Int(crypto_sign_secretkeybytes())

    /// A fresh random key pair.
    public static func generate() -> SigningKey {
        Sodium.ready
        var pk = [UInt8](repeating: 0, count: VerifyingKey.byteCount)
        var sk = [UInt8](repeating: 0, count: secretBytes)
        crypto_sign_keypair(&pk, &sk)
        return SigningKey(secret: sk, verifyingKey: VerifyingKey(checked: pk))
    }

    /// A key from libsodium's 64-byte secret key encoding.
    public init(secretKey: [UInt8]) throws(AuthError) {
        Sodium.ready
        guard secretKey.count == SigningKey.secretBytes else {
            throw AuthError("an Ed25519 secret key is \(SigningKey.secretBytes) bytes, got \(secretKey.count)")
        }
        var pk = [UInt8](repeating: 0, count: VerifyingKey.byteCount)
        crypto_sign_ed25519_sk_to_pk(&pk, secretKey)
        self.init(secret: secretKey, verifyingKey: VerifyingKey(checked: pk))
    }

    init(secret: [UInt8], verifyingKey: VerifyingKey) {
        self.secret = secret
        self.verifyingKey = verifyingKey
    }

    /// The secret key as libsodium encodes it, for the key file.
    public var secretKeyBytes: [UInt8] { secret }

    /// A signed JWT carrying `claims`.
    public func sign(_ claims: TokenClaims) -> String { sign(payload: claims.payload) }

    /// Signs any JSON claims under this key's header (tests use it to make
    /// well-signed nonsense).
    func sign(payload json: JSON) -> String {
        sign(header: ["alg": .string(Token.algorithm), "typ": "JWT", "kid": .string(verifyingKey.keyID)], payload: json)
    }

    /// Signs `header` and `payload` as they are, whatever they say (tests
    /// forge headers with it).
    func sign(header: JSON, payload json: JSON) -> String {
        let signed = Base64URL.encode(header.encoded()) + "." + Base64URL.encode(json.encoded())
        let message = Array(signed.utf8)
        var signature = [UInt8](repeating: 0, count: Token.signatureBytes)
        crypto_sign_detached(&signature, nil, message, UInt64(message.count), secret)
        return signed + "." + Base64URL.encode(signature)
    }
}

/// The public half: checks tokens without calling accounts.
public struct VerifyingKey: Sendable, Equatable {
    public let bytes: [UInt8]

    static let byteCount = Int(crypto_sign_publickeybytes())

    public init(bytes: [UInt8]) throws(AuthError) {
        guard bytes.count == VerifyingKey.byteCount else {
            throw AuthError("an Ed25519 public key is \(VerifyingKey.byteCount) bytes, got \(bytes.count)")
        }
        self.init(checked: bytes)
    }

    init(checked bytes: [UInt8]) {
        Sodium.ready
        self.bytes = bytes
        self.keyID = VerifyingKey.thumbprint(bytes)
    }

    /// `kid`: the key's RFC 7638 JWK thumbprint, base64url(SHA-256 of
    /// `{"crv":"Ed25519","kty":"OKP","x":"<x>"}`), 43 characters. Derived from
    /// the key alone, so a new key pair (rotation) has a new kid and every
    /// host computes the same one without being told.
    public let keyID: String

    static func thumbprint(_ bytes: [UInt8]) -> String {
        let canonical = Array("{\"crv\":\"Ed25519\",\"kty\":\"OKP\",\"x\":\"\(Base64URL.encode(bytes))\"}".utf8)
        var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_bytes()))
        crypto_hash_sha256(&digest, canonical, UInt64(canonical.count))
        return Base64URL.encode(digest)
    }

    /// The key as a JWK (RFC 8037 §2): kty OKP, crv Ed25519, x, kid, alg, use.
    public var jwk: JSON {
        ["kty": "OKP", "crv": "Ed25519", "x": .string(Base64URL.encode(bytes)), "kid": .string(keyID), "alg": .string(Token.algorithm), "use": "sig"]
    }

    /// The claims of `token` when its header names EdDSA and this key's kid,
    /// its signature is this key's, its iss and aud are Quad's, and it has
    /// not expired at `now` (ms since the epoch). The header is compared
    /// before the signature is checked, and the claims are parsed only after.
    public func verify(_ token: String, now: Int64 = Int64(Clock.nowMillis())) throws(TokenError) -> TokenClaims {
        let parts = try Token.parts(token)
        try Token.checkHeader(parts.header, keyID: keyID)
        guard parts.signature.count == Token.signatureBytes else {
            throw .malformed("the signature is \(parts.signature.count) bytes, expected \(Token.signatureBytes) (Ed25519)")
        }
        let valid = crypto_sign_verify_detached(parts.signature, parts.signed, UInt64(parts.signed.count), bytes) == 0
        guard valid else { throw .signatureInvalid }
        let claims = try Token.claims(parts.payload)
        guard now < claims.expiresAt else { throw .expired(at: claims.expiresAt) }
        return claims
    }
}

/// RFC 4648 §5 base64url without padding, strict on input: only the
/// alphabet, no padding, and no stray bits in the last character, so each
/// byte string has exactly one encoding.
public enum Base64URL {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    static let values: [Int8] = {
        var t = [Int8](repeating: -1, count: 256)
        for (k, c) in alphabet.enumerated() { t[Int(c)] = Int8(k) }
        return t
    }()

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var k = 0
        while k + 3 <= bytes.count {
            let n = UInt32(bytes[k]) << 16 | UInt32(bytes[k + 1]) << 8 | UInt32(bytes[k + 2])
            for shift in [18, 12, 6, 0] { out.append(alphabet[Int((n >> UInt32(shift)) & 63)]) }
            k += 3
        }
        switch bytes.count - k {
        case 1:
            let n = UInt32(bytes[k]) << 16
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
        case 2:
            let n = UInt32(bytes[k]) << 16 | UInt32(bytes[k + 1]) << 8
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
        default: break
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let chars = Array(text.utf8)
        if chars.count % 4 == 1 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count * 3 / 4)
        var acc: UInt32 = 0
        var bits = 0
        for c in chars {
            let v = values[Int(c)]
            if v < 0 { return nil }
            acc = acc << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                acc &= (1 << UInt32(bits)) - 1
            }
        }
        // Leftover bits must be zero: otherwise two texts would decode alike.
        if bits > 0 && acc != 0 { return nil }
        return out
    }
}
