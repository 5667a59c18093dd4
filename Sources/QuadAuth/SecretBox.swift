import CSodium

/// Secret-key encryption for what a device keeps at rest (a phone's
/// keychain): libsodium's `crypto_secretbox_easy` (XSalsa20-Poly1305), a
/// new random nonce for every seal, the nonce in front of the box. A box
/// that was changed or cut short does not open: it is refused, never read.
public enum SecretBox {
    public static let keyBytes = crypto_secretbox_keybytes()
    public static let nonceBytes = crypto_secretbox_noncebytes()
    public static let macBytes = crypto_secretbox_macbytes()
    /// Bytes of a PIN-derived key's salt (`crypto_pwhash_SALTBYTES`).
    public static let saltBytes = crypto_pwhash_saltbytes()

    /// `count` bytes from libsodium's `randombytes_buf`.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        Sodium.ready
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return out
    }

    /// A new random key.
    public static func makeKey() -> [UInt8] { randomBytes(keyBytes) }

    /// nonce ‖ box of `message` under `key` (``keyBytes`` long).
    public static func seal(_ message: [UInt8], key: [UInt8]) throws(AuthError) -> [UInt8] {
        guard key.count == keyBytes else { throw AuthError("a secretbox key is \(keyBytes) bytes, not \(key.count)") }
        let nonce = randomBytes(nonceBytes)
        var box = [UInt8](repeating: 0, count: message.count + macBytes)
        let rc = crypto_secretbox_easy(&box, message, UInt64(message.count), nonce, key)
        guard rc == 0 else { throw AuthError("crypto_secretbox_easy failed") }
        return nonce + box
    }

    /// The message sealed in `sealed` (nonce ‖ box); nil when it is too
    /// short, was changed, or was sealed under another key.
    public static func open(_ sealed: [UInt8], key: [UInt8]) -> [UInt8]? {
        guard key.count == keyBytes, sealed.count >= nonceBytes + macBytes else { return nil }
        Sodium.ready
        let nonce = Array(sealed.prefix(nonceBytes))
        let box = Array(sealed.dropFirst(nonceBytes))
        var message = [UInt8](repeating: 0, count: box.count - macBytes)
        let rc = crypto_secretbox_open_easy(&message, box, UInt64(box.count), nonce, key)
        return rc == 0 ? message : nil
    }

    /// A key derived from a PIN with Argon2id (`crypto_pwhash`, libsodium's
    /// interactive limits unless told otherwise) and `salt`
    /// (``saltBytes``, random, kept beside what it protects).
    public static func key(pin: String, salt: [UInt8], strength: PasswordHash.Strength = .interactive) throws(AuthError) -> [UInt8] {
        guard salt.count == saltBytes else { throw AuthError("a PIN's salt is \(saltBytes) bytes, not \(salt.count)") }
        Sodium.ready
        let limits = strength.limits
        var key = [UInt8](repeating: 0, count: keyBytes)
        let rc = PasswordHash.withPasswordBytes(pin) { p, n in
            crypto_pwhash(&key, UInt64(keyBytes), p, n, salt, limits.ops, limits.mem, crypto_pwhash_alg_argon2id13())
        }
        guard rc == 0 else { throw AuthError("crypto_pwhash failed: out of memory for \(limits.mem) bytes") }
        return key
    }

    /// A keyed BLAKE2b digest (`crypto_generichash`) of `message`, 32 bytes:
    /// a secret derived from `key` that names `message`.
    public static func derive(_ message: [UInt8], key: [UInt8]) -> [UInt8] {
        Sodium.ready
        var out = [UInt8](repeating: 0, count: 32)
        crypto_generichash(&out, 32, message, UInt64(message.count), key, key.count)
        return out
    }

    /// SHA-256 of `message` (`crypto_hash_sha256`), as lowercase hex.
    public static func sha256Hex(_ message: [UInt8]) -> String {
        Sodium.ready
        var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_bytes()))
        crypto_hash_sha256(&digest, message, UInt64(message.count))
        let hex = Array("0123456789abcdef")
        return String(digest.flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 15)]] })
    }
}
