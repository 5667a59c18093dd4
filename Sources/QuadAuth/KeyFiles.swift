import Foundation

/// Where accounts' key pair lives and how it is read and written. Each file
/// holds one line: the key in base64url. The secret key file is created once,
/// atomically (written to a temporary file, then hard-linked into place, so
/// two workers starting together agree on one key), with mode 0600; the
/// public key beside it is 0644, for the broker (or any host) to verify with.
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
    public static func publicKeyPath(forSecretKey path: String) -> String {
        path.hasSuffix(".key") ? String(path.dropLast(4)) + ".pub" : path + ".pub"
    }

    /// Loads the signing key at `path`, creating it first when missing, and
    /// (re)writes its public key at `publicKeyPath` when that file is missing
    /// or differs. `created` says whether this call made the key.
    public static func loadOrCreateSigningKey(at path: String, publicKeyPath: String? = nil) throws(AuthError) -> (key: SigningKey, created: Bool) {
        let pubPath = publicKeyPath ?? KeyFiles.publicKeyPath(forSecretKey: path)
        var created = false
        if !FileManager.default.fileExists(atPath: path) {
            created = try create(SigningKey.generate(), at: path)
        }
        let key = try loadSigningKey(at: path)
        let wanted = Base64URL.encode(key.verifyingKey.bytes)
        if (try? readLine(pubPath)) != wanted {
            try writeReplacing(pubPath, wanted + "\n", mode: 0o644)
        }
        return (key, created)
    }

    /// Reads a signing key; refuses a file others may read.
    public static func loadSigningKey(at path: String) throws(AuthError) -> SigningKey {
        var info = stat()
        guard stat(path, &info) == 0 else { throw AuthError("cannot read the signing key \(path): \(String(cString: strerror(errno)))") }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw AuthError("the signing key \(path) is readable by others (mode \(String(mode, radix: 8))): chmod 600 \(path)")
        }
        let text = try readLine(path)
        guard let bytes = Base64URL.decode(text) else { throw AuthError("\(path) is not a key: expected one line of base64url") }
        do { return try SigningKey(secretKey: bytes) } catch { throw AuthError("\(path): \(error.message)") }
    }

    /// Reads a public key; nil when the file does not exist (yet).
    public static func loadVerifyingKey(at path: String) throws(AuthError) -> VerifyingKey? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let text = try readLine(path)
        guard let bytes = Base64URL.decode(text) else { throw AuthError("\(path) is not a key: expected one line of base64url") }
        do { return try VerifyingKey(bytes: bytes) } catch { throw AuthError("\(path): \(error.message)") }
    }

    /// Writes `key` to `path` unless a file is already there. Returns false
    /// when another process created it first.
    static func create(_ key: SigningKey, at path: String) throws(AuthError) -> Bool {
        let dir = (path as NSString).deletingLastPathComponent
        try makeDirectory(dir)
        let temporary = try writeTemporary(beside: path, Base64URL.encode(key.secretKeyBytes) + "\n", mode: 0o600)
        defer { unlink(temporary) }
        if link(temporary, path) != 0 {
            if errno == EEXIST { return false }
            throw AuthError("cannot create the signing key \(path): \(String(cString: strerror(errno)))")
        }
        syncDirectory(dir)
        return true
    }

    /// Replaces `path` atomically with `text` (temporary file, then rename).
    static func writeReplacing(_ path: String, _ text: String, mode: mode_t) throws(AuthError) {
        let dir = (path as NSString).deletingLastPathComponent
        try makeDirectory(dir)
        let temporary = try writeTemporary(beside: path, text, mode: mode)
        guard rename(temporary, path) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw AuthError("cannot write \(path): \(why)")
        }
        syncDirectory(dir)
    }

    /// A new file beside `path` holding `text`, with `mode` whatever the
    /// umask, flushed to disk. Returns its path.
    static func writeTemporary(beside path: String, _ text: String, mode: mode_t) throws(AuthError) -> String {
        let temporary = "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw AuthError("cannot create \(temporary): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fchmod(fd, mode) == 0, fsync(fd) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw AuthError("cannot write \(temporary): \(why)")
        }
        return temporary
    }

    static func makeDirectory(_ dir: String) throws(AuthError) {
        guard !dir.isEmpty else { return }
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw AuthError("cannot create the key folder \(dir): \(error.localizedDescription)")
        }
    }

    static func syncDirectory(_ dir: String) {
        let fd = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    static func readLine(_ path: String) throws(AuthError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw AuthError("cannot read \(path)") }
        guard data.count <= 4096, let text = String(data: data, encoding: .utf8) else { throw AuthError("\(path) is not a key file") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
