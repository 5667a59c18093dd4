import CSodium
import QuadWire

/// What a session token says: who, as what, until when. Times are
/// milliseconds since the Unix epoch.
public struct TokenClaims: Sendable, Equatable {
    /// The user id (`sub`), which the broker puts in the envelope's `user`.
    public var user: String
    /// `student` or `admin` (`role`), put in the envelope's `role`.
    public var role: String
    /// `exp`: the token is refused from this instant on.
    public var expiresAt: Int64
    /// `iat`: when accounts signed it.
    public var issuedAt: Int64
    /// `jti`: this token's own id (a UUIDv7), which `accounts.logout`
    /// revokes; empty in tokens signed before it existed.
    public var tokenID: String

    public init(user: String, role: String, expiresAt: Int64, issuedAt: Int64, tokenID: String = MessageID.make()) {
        self.user = user
        self.role = role
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.tokenID = tokenID
    }

    /// Longest `jti` a token may carry.
    public static let maxTokenIDLength = Envelope.maxIDLength

    /// Longest `sub` a token may carry: the envelope's limit on `user`.
    public static let maxUserLength = Envelope.maxSourceLength
    /// Longest `role`: the envelope's limit on `role`.
    public static let maxRoleLength = 32

    var payload: JSON {
        ["sub": .string(user), "role": .string(role), "exp": .int(expiresAt), "iat": .int(issuedAt), "jti": .string(tokenID)]
    }
}

/// Why a token was refused. Each becomes a 401 whose message starts with
/// "token expired", "token signature invalid" or "token malformed".
public enum TokenError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case signatureInvalid
    case expired(at: Int64)

    public var description: String {
        switch self {
        case .malformed(let why): return "token malformed: \(why)"
        case .signatureInvalid: return "token signature invalid: not signed by this stack's accounts key; log in again"
        case .expired(let at): return "token expired at \(at) ms since the epoch; log in again"
        }
    }

    public var quadError: QuadError { .unauthorized(description) }
}

/// A session token: `base64url(payload) "." base64url(signature)`, where
/// the payload is compact JSON `{"exp","iat","role","sub"}` and the
/// signature is Ed25519 (`crypto_sign_detached`) over the first part's
/// ASCII text, as JWS does. base64url has no padding.
public enum Token {
    /// Longest token accepted: the envelope's limit on `token`.
    public static let maxLength = Envelope.maxTokenLength
    static let signatureBytes = Int(crypto_sign_bytes())

    /// Splits and checks a token's shape; returns the signed part's bytes,
    /// the signature and the encoded payload.
    static func parts(_ token: String) throws(TokenError) -> (signed: [UInt8], signature: [UInt8], payload: Substring) {
        guard !token.isEmpty else { throw .malformed("empty") }
        guard token.utf8.count <= maxLength else { throw .malformed("longer than \(maxLength) bytes") }
        let pieces = token.split(separator: ".", omittingEmptySubsequences: false)
        guard pieces.count == 2 else {
            throw .malformed("expected two base64url parts separated by one '.', got \(pieces.count) part\(pieces.count == 1 ? "" : "s")")
        }
        guard !pieces[0].isEmpty else { throw .malformed("the payload part is empty") }
        guard let signature = Base64URL.decode(pieces[1]) else { throw .malformed("the signature part is not base64url") }
        guard signature.count == signatureBytes else {
            throw .malformed("the signature is \(signature.count) bytes, expected \(signatureBytes)")
        }
        return (Array(pieces[0].utf8), signature, pieces[0])
    }

    /// What a token says, WITHOUT checking its signature or expiry: for a
    /// client to show its own token's expiry, never to trust a token.
    public static func unverifiedClaims(_ token: String) throws(TokenError) -> TokenClaims {
        try claims(parts(token).payload)
    }

    /// Reads the claims of a payload whose signature was already checked.
    static func claims(_ payload: Substring) throws(TokenError) -> TokenClaims {
        guard let bytes = Base64URL.decode(payload) else { throw .malformed("the payload part is not base64url") }
        guard let json = try? JSON.parse(bytes), case .object = json else { throw .malformed("the payload is not a JSON object") }
        guard let user = json["sub"]?.string, !user.isEmpty, user.utf8.count <= TokenClaims.maxUserLength else {
            throw .malformed("payload.sub must be a string of 1 to \(TokenClaims.maxUserLength) bytes")
        }
        guard let role = json["role"]?.string, !role.isEmpty, role.utf8.count <= TokenClaims.maxRoleLength else {
            throw .malformed("payload.role must be a string of 1 to \(TokenClaims.maxRoleLength) bytes")
        }
        guard let exp = json["exp"]?.int else { throw .malformed("payload.exp must be an integer (ms since the epoch)") }
        guard let iat = json["iat"]?.int else { throw .malformed("payload.iat must be an integer (ms since the epoch)") }
        let jti = json["jti"]?.string ?? ""
        guard jti.utf8.count <= TokenClaims.maxTokenIDLength else {
            throw .malformed("payload.jti must be a string of at most \(TokenClaims.maxTokenIDLength) bytes")
        }
        return TokenClaims(user: user, role: role, expiresAt: exp, issuedAt: iat, tokenID: jti)
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

    /// A signed token carrying `claims`.
    public func sign(_ claims: TokenClaims) -> String { sign(payload: claims.payload) }

    /// Signs any JSON payload (tests use it to make well-signed nonsense).
    func sign(payload json: JSON) -> String {
        let payload = Base64URL.encode(json.encoded())
        let message = Array(payload.utf8)
        var signature = [UInt8](repeating: 0, count: Token.signatureBytes)
        crypto_sign_detached(&signature, nil, message, UInt64(message.count), secret)
        return payload + "." + Base64URL.encode(signature)
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
    }

    /// The claims of `token` when its signature is this key's and it has not
    /// expired at `now` (ms since the epoch). The signature is checked before
    /// the payload is even parsed.
    public func verify(_ token: String, now: Int64 = Int64(Clock.nowMillis())) throws(TokenError) -> TokenClaims {
        let parts = try Token.parts(token)
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
