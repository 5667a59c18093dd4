import CSodium

/// libsodium, initialized once per process before its first use.
enum Sodium {
    /// `sodium_init()` is safe to call more than once, but once is enough;
    /// a Swift `static let` runs its initializer exactly once, thread-safely.
    static let ready: Void = {
        guard sodium_init() >= 0 else { fatalError("libsodium: sodium_init() failed (no usable random source?)") }
    }()
}

/// Password hashes: Argon2id through libsodium's `crypto_pwhash_str`, which
/// stores the algorithm, its limits and a random salt in the string itself,
/// so hashes made with other limits still verify.
public enum PasswordHash {
    /// How much work one hash costs. `interactive` is libsodium's
    /// `OPSLIMIT_INTERACTIVE` / `MEMLIMIT_INTERACTIVE` (2 passes over 64 MiB,
    /// about 0.1 s here); `minimum` (1 pass over 8 KiB) is for tests only.
    public enum Strength: String, Sendable, CaseIterable {
        case interactive, moderate, minimum

        var limits: (ops: UInt64, mem: Int) {
            switch self {
            case .interactive: return (UInt64(crypto_pwhash_opslimit_interactive()), crypto_pwhash_memlimit_interactive())
            case .moderate: return (UInt64(crypto_pwhash_opslimit_moderate()), crypto_pwhash_memlimit_moderate())
            case .minimum: return (UInt64(crypto_pwhash_opslimit_min()), crypto_pwhash_memlimit_min())
            }
        }
    }

    /// The hash of `password` as text (`$argon2id$v=19$m=...`).
    public static func hash(_ password: String, strength: Strength = .interactive) throws(AuthError) -> String {
        Sodium.ready
        let limits = strength.limits
        var out = [CChar](repeating: 0, count: crypto_pwhash_strbytes())
        let rc = withPasswordBytes(password) { p, n in crypto_pwhash_str(&out, p, n, limits.ops, limits.mem) }
        // libsodium fails here only when it cannot allocate the memory limit.
        guard rc == 0 else { throw AuthError("crypto_pwhash_str failed: out of memory for \(limits.mem) bytes") }
        return String(decoding: out.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether `password` matches `hash`. A malformed hash never matches.
    public static func verify(_ password: String, hash: String) -> Bool {
        Sodium.ready
        return withPasswordBytes(password) { p, n in crypto_pwhash_str_verify(hash, p, n) } == 0
    }

    /// The password's UTF-8 bytes, all of them (a NUL inside counts too),
    /// behind a pointer that is never nil, even for an empty password.
    static func withPasswordBytes(_ password: String, _ body: (UnsafePointer<CChar>, UInt64) -> Int32) -> Int32 {
        let bytes = Array(password.utf8).map { CChar(bitPattern: $0) } + [0]
        return bytes.withUnsafeBufferPointer { body($0.baseAddress!, UInt64($0.count - 1)) }
    }
}

/// A failure of the auth layer itself (a key file, memory), not of a
/// caller's credentials: those are ``TokenError``s.
public struct AuthError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// libsodium's primitives as they are, for tests that check a token or a
/// MAC by the algorithm alone, without Quad's own verifier.
public enum Primitives {
    /// Whether `signature` is an Ed25519 signature of `message` by `publicKey`.
    public static func ed25519Verifies(_ signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
        _ = Sodium.ready
        guard signature.count == Int(crypto_sign_bytes()), publicKey.count == Int(crypto_sign_publickeybytes()) else { return false }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }

    /// HMAC-SHA-256 of `message` under `key` (any length).
    public static func hmacSHA256(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        _ = Sodium.ready
        var mac = [UInt8](repeating: 0, count: 32)
        var state = crypto_auth_hmacsha256_state()
        crypto_auth_hmacsha256_init(&state, key, key.count)
        crypto_auth_hmacsha256_update(&state, message, UInt64(message.count))
        crypto_auth_hmacsha256_final(&state, &mac)
        return mac
    }
}
