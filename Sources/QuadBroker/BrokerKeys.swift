import Foundation
import QuadMessaging

/// A key file that cannot be read, written or trusted.
public struct KeyFileError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The broker's CURVE key pair. `$QUAD_HOME/keys/broker.key` holds the
/// secret key as one line of Z85 text (`zmq_curve_keypair`), mode 0600;
/// `broker.pub` beside it holds the public key, mode 0644, which is all a
/// client needs (`deploy/stack keys` prints it). The secret file is created
/// once, atomically (written to a temporary file, then hard-linked into
/// place), so two brokers starting together agree on one key.
public enum BrokerKeys {
    public struct Pair: Sendable {
        /// Z85 text, for clients and logs.
        public let publicKey: String
        /// 32 raw bytes, for `ZMQ_CURVE_SECRETKEY`; never logged.
        public let secretKey: [UInt8]
        /// Whether this call made the pair.
        public let created: Bool
    }

    /// `$QUAD_HOME/keys/broker.key`, or `keys/broker.key` without QUAD_HOME.
    public static func defaultSecretKeyPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let home = environment["QUAD_HOME"], !home.isEmpty { return home + "/keys/broker.key" }
        return "keys/broker.key"
    }

    /// `broker.key` → `broker.pub`.
    public static func publicKeyPath(forSecretKey path: String) -> String {
        path.hasSuffix(".key") ? String(path.dropLast(4)) + ".pub" : path + ".pub"
    }

    /// Loads the pair whose secret key is at `path`, creating it first when
    /// missing, and (re)writes the public key file when it is missing or
    /// differs. Refuses a secret key file that others may read.
    public static func loadOrCreate(at path: String) throws(KeyFileError) -> Pair {
        var created = false
        if !FileManager.default.fileExists(atPath: path) {
            let pair: (publicKey: String, secretKey: String)
            do { pair = try Curve.keyPair() } catch { throw KeyFileError("cannot make a CURVE key pair: \(error)") }
            created = try create(path, pair.secretKey + "\n")
        }
        var info = stat()
        guard stat(path, &info) == 0 else { throw KeyFileError("cannot read the broker's secret key \(path): \(String(cString: strerror(errno)))") }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw KeyFileError("the broker's secret key \(path) is readable by others (mode \(String(mode, radix: 8))): chmod 600 \(path)")
        }
        let text = try readLine(path)
        guard let secret = Curve.decode(text), let publicKey = Curve.publicKey(forSecretKey: text) else {
            throw KeyFileError("\(path) is not a CURVE secret key: expected one line of 40 Z85 characters")
        }
        let pubPath = publicKeyPath(forSecretKey: path)
        if (try? readLine(pubPath)) != publicKey {
            try writeReplacing(pubPath, publicKey + "\n", mode: 0o644)
        }
        return Pair(publicKey: publicKey, secretKey: secret, created: created)
    }

    /// Client keys allowed to connect: one Z85 public key per line; blank
    /// lines and lines starting with `#` are skipped.
    public static func allowList(at path: String) throws(KeyFileError) -> Set<[UInt8]> {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw KeyFileError("cannot read the allowed client keys \(path)")
        }
        var keys = Set<[UInt8]>()
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let key = Curve.decode(line) else {
                throw KeyFileError("\(path) line \(n + 1) is not a CURVE public key: expected 40 Z85 characters")
            }
            keys.insert(key)
        }
        return keys
    }

    // MARK: Files

    /// Creates `path` holding `text` (mode 0600) unless it exists; false
    /// when another process created it first.
    static func create(_ path: String, _ text: String) throws(KeyFileError) -> Bool {
        let dir = (path as NSString).deletingLastPathComponent
        try makeDirectory(dir)
        let temporary = try writeTemporary(beside: path, text, mode: 0o600)
        defer { unlink(temporary) }
        if link(temporary, path) != 0 {
            if errno == EEXIST { return false }
            throw KeyFileError("cannot create the broker's secret key \(path): \(String(cString: strerror(errno)))")
        }
        syncDirectory(dir)
        return true
    }

    static func writeReplacing(_ path: String, _ text: String, mode: mode_t) throws(KeyFileError) {
        let dir = (path as NSString).deletingLastPathComponent
        try makeDirectory(dir)
        let temporary = try writeTemporary(beside: path, text, mode: mode)
        guard rename(temporary, path) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw KeyFileError("cannot write \(path): \(why)")
        }
        syncDirectory(dir)
    }

    /// A new file beside `path` with `text` and `mode` whatever the umask,
    /// flushed to disk.
    static func writeTemporary(beside path: String, _ text: String, mode: mode_t) throws(KeyFileError) -> String {
        let temporary = "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw KeyFileError("cannot create \(temporary): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fchmod(fd, mode) == 0, fsync(fd) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw KeyFileError("cannot write \(temporary): \(why)")
        }
        return temporary
    }

    static func makeDirectory(_ dir: String) throws(KeyFileError) {
        guard !dir.isEmpty else { return }
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw KeyFileError("cannot create the key folder \(dir): \(error.localizedDescription)")
        }
    }

    static func syncDirectory(_ dir: String) {
        let fd = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    static func readLine(_ path: String) throws(KeyFileError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw KeyFileError("cannot read \(path)") }
        guard data.count <= 4096, let text = String(data: data, encoding: .utf8) else { throw KeyFileError("\(path) is not a key file") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
