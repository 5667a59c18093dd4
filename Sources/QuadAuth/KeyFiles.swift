import Foundation
import QuadWire

/// Where accounts' key pair lives, read and written as every key file is
/// (``KeyFile``). Each file holds one line: the key in base64url. The secret
/// key file is created once, atomically, with mode 0600; the public key
/// beside it is 0644, for the broker (or any host) to verify with.
public enum KeyFiles {
    /// `$QUAD_HOME/keys`, or `keys` in the working folder without QUAD_HOME.
    public static func directory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let home = environment["QUAD_HOME"], !home.isEmpty { return home + "/keys" }
        return "keys"
    }

    /// accounts' secret key: `$QUAD_HOME/keys/accounts.key`.
    public static func defaultSecretKeyPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        directory(environment: environment) + "/accounts.key"
    }

    /// The public key the broker loads: `QUAD_ACCOUNTS_KEY`, else
    /// `$QUAD_HOME/keys/accounts.pub`.
    public static func defaultPublicKeyPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let path = environment["QUAD_ACCOUNTS_KEY"], !path.isEmpty { return path }
        return directory(environment: environment) + "/accounts.pub"
    }

    /// The public key file that goes with secret key file `path`:
    /// `accounts.key` → `accounts.pub`.
    public static func publicKeyPath(forSecretKey path: String) -> String { KeyFile.publicKeyPath(forSecretKey: path) }

    /// Loads the signing key at `path`, creating it first when missing, and
    /// (re)writes its public key at `publicKeyPath` when that file is missing
    /// or differs. `created` says whether this call made the key.
    public static func loadOrCreateSigningKey(at path: String, publicKeyPath: String? = nil) throws(AuthError) -> (key: SigningKey, created: Bool) {
        let pair = try keyFile { () throws(KeyFileError) in
            try KeyFile.loadOrCreatePair(at: path, publicKeyPath: publicKeyPath, what: "the signing key", format: .base64url,
                                         make: { SigningKey.generate().secretKeyBytes },
                                         publicKey: { try? SigningKey(secretKey: $0).verifyingKey.bytes })
        }
        do { return (try SigningKey(secretKey: pair.secretKey), pair.created) } catch { throw AuthError("\(path): \(error.message)") }
    }

    /// Reads a signing key; refuses a file others may read.
    public static func loadSigningKey(at path: String) throws(AuthError) -> SigningKey {
        let bytes = try keyFile { () throws(KeyFileError) in try KeyFile.read(path, what: "the signing key", format: .base64url, secret: true) }
        do { return try SigningKey(secretKey: bytes) } catch { throw AuthError("\(path): \(error.message)") }
    }

    /// Reads a public key; nil when the file does not exist (yet).
    public static func loadVerifyingKey(at path: String) throws(AuthError) -> VerifyingKey? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let bytes = try keyFile { () throws(KeyFileError) in
            try KeyFile.read(path, what: "accounts' public key", format: .base64url, secret: false)
        }
        do { return try VerifyingKey(bytes: bytes) } catch { throw AuthError("\(path): \(error.message)") }
    }

    /// KeyFile's errors as accounts' own.
    static func keyFile<T>(_ body: () throws(KeyFileError) -> T) throws(AuthError) -> T {
        do { return try body() } catch { throw AuthError(error.message) }
    }
}

extension KeyFile.Format {
    /// A key in base64url without padding (``Base64URL``), as accounts'
    /// Ed25519 keys are kept.
    public static let base64url = KeyFile.Format(expected: "base64url", decode: { Base64URL.decode($0) }, encode: { Base64URL.encode($0) })
}
