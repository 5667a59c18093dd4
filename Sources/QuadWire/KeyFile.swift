import Foundation

/// A key file that cannot be read, written or trusted.
public struct KeyFileError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Files of one line holding a key: the one way Quad reads and writes them,
/// for accounts' signing key (base64url), the broker's CURVE key pair, the
/// services' CURVE key, a client's copy of the broker's public key and the
/// lists of allowed keys (Z85). A secret key file is created once,
/// atomically (written to a temporary file, then hard-linked into place, so
/// two processes starting together agree on one key), mode 0600, and is
/// refused when others may read it; a public key file beside it is replaced
/// atomically (temporary file, then rename), mode 0644. Every write is
/// flushed to disk with its folder. Errors name the file, what it is for,
/// and what a line must look like.
public enum KeyFile {
    /// How a key is written as one line of text.
    public struct Format: Sendable {
        /// What a line must be, for errors: "40 Z85 characters".
        public let expected: String
        public let decode: @Sendable (String) -> [UInt8]?
        public let encode: @Sendable ([UInt8]) -> String?

        public init(expected: String, decode: @escaping @Sendable (String) -> [UInt8]?, encode: @escaping @Sendable ([UInt8]) -> String?) {
            self.expected = expected
            self.decode = decode
            self.encode = encode
        }

        /// A 32-byte CURVE key in ZeroMQ's Z85 (RFC 32): 40 characters, as
        /// `zmq_curve_keypair` writes it.
        public static let z85 = Format(expected: "40 Z85 characters",
                                       decode: { text in Z85.decode(text).flatMap { $0.count == 32 ? $0 : nil } },
                                       encode: { key in key.count == 32 ? Z85.encode(key) : nil })
    }

    /// A secret key file and the public key file beside it.
    public struct Pair: Sendable {
        public let secretKey: [UInt8]
        public let publicKey: [UInt8]
        /// The public key as its file holds it.
        public let publicText: String
        /// Whether this call made the secret key file.
        public let created: Bool
    }

    /// The key in the one-line file at `path`, read in `format`. A secret
    /// key (`secret`) is refused when others may read the file. `what`
    /// names the key in errors ("the broker's secret key").
    public static func read(_ path: String, what: String, format: Format, secret: Bool) throws(KeyFileError) -> [UInt8] {
        if secret { try requirePrivate(path, what: what) }
        let line = try readLine(path, what: what)
        guard let key = format.decode(line) else {
            throw KeyFileError("\(what) \(path) is not a key: expected one line of \(format.expected)")
        }
        return key
    }

    /// Keys listed one a line in `format`; blank lines and lines starting
    /// with `#` are skipped. `what` names the list in errors.
    public static func readList(_ path: String, what: String, format: Format) throws(KeyFileError) -> Set<[UInt8]> {
        let text = try readText(path, what: what, maxBytes: 1 << 20)
        var keys = Set<[UInt8]>()
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let key = format.decode(line) else {
                throw KeyFileError("\(what) \(path) line \(n + 1) is not a key: expected \(format.expected)")
            }
            keys.insert(key)
        }
        return keys
    }

    /// Loads the pair whose secret key is at `path`, creating it with
    /// `make` when missing, and (re)writes the public key file
    /// (``publicKeyPath(forSecretKey:)`` unless given) when it is missing or
    /// differs. `publicKey` derives the public key from the secret one, nil
    /// when the secret is no key. Refuses a secret key file others may read.
    public static func loadOrCreatePair(at path: String, publicKeyPath: String? = nil, what: String, format: Format,
                                        make: () -> [UInt8]?, publicKey: ([UInt8]) -> [UInt8]?) throws(KeyFileError) -> Pair {
        var created = false
        if !FileManager.default.fileExists(atPath: path) {
            guard let secret = make(), let text = format.encode(secret) else { throw KeyFileError("cannot make \(what)") }
            created = try createOnce(path, text + "\n", what: what)
        }
        let secret = try read(path, what: what, format: format, secret: true)
        guard let pub = publicKey(secret), let publicText = format.encode(pub) else {
            throw KeyFileError("\(what) \(path) is not a key: expected one line of \(format.expected)")
        }
        let pubPath = publicKeyPath ?? Self.publicKeyPath(forSecretKey: path)
        if (try? readLine(pubPath)) != publicText {
            try writeReplacing(pubPath, publicText + "\n", mode: 0o644)
        }
        return Pair(secretKey: secret, publicKey: pub, publicText: publicText, created: created)
    }

    /// The public key file that goes with secret key file `path`:
    /// `broker.key` → `broker.pub`.
    public static func publicKeyPath(forSecretKey path: String) -> String {
        path.hasSuffix(".key") ? String(path.dropLast(4)) + ".pub" : path + ".pub"
    }

    /// Creates `path` holding `text` (mode 0600) unless it exists; false
    /// when another process created it first. `what` names the file in errors.
    public static func createOnce(_ path: String, _ text: String, what: String) throws(KeyFileError) -> Bool {
        let dir = (path as NSString).deletingLastPathComponent
        try makeDirectory(dir)
        let temporary = try writeTemporary(beside: path, text, mode: 0o600)
        defer { unlink(temporary) }
        if link(temporary, path) != 0 {
            if errno == EEXIST { return false }
            throw KeyFileError("cannot create \(what) \(path): \(String(cString: strerror(errno)))")
        }
        syncDirectory(dir)
        return true
    }

    /// Replaces `path` atomically with `text`; `durable` (the default)
    /// syncs the file and its folder before it returns, without it a crash
    /// of the machine may leave the old file (never a torn one: the rename
    /// is atomic).
    public static func writeReplacing(_ path: String, _ text: String, mode: mode_t, durable: Bool = true) throws(KeyFileError) {
        let dir = (path as NSString).deletingLastPathComponent
        try makeDirectory(dir)
        let temporary = try writeTemporary(beside: path, text, mode: mode, sync: durable)
        guard rename(temporary, path) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw KeyFileError("cannot write \(path): \(why)")
        }
        if durable { syncDirectory(dir) }
    }

    /// Refuses a secret key file that others may read, saying how to fix it.
    public static func requirePrivate(_ path: String, what: String) throws(KeyFileError) {
        var info = stat()
        guard stat(path, &info) == 0 else { throw KeyFileError("cannot read \(what) \(path): \(String(cString: strerror(errno)))") }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw KeyFileError("\(what) \(path) is readable by others (mode \(String(mode, radix: 8))): chmod 600 \(path)")
        }
    }

    /// The file's one line, trimmed. `what` names the file in errors.
    public static func readLine(_ path: String, what: String = "the key file") throws(KeyFileError) -> String {
        try readText(path, what: what, maxBytes: 4096).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func readText(_ path: String, what: String, maxBytes: Int) throws(KeyFileError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            let why = FileManager.default.fileExists(atPath: path) ? "permission denied" : "no such file"
            throw KeyFileError("cannot read \(what) \(path): \(why)")
        }
        guard data.count <= maxBytes, let text = String(data: data, encoding: .utf8) else {
            throw KeyFileError("\(what) \(path) is not a key file: more than \(maxBytes) bytes, or not UTF-8")
        }
        return text
    }

    /// A new file beside `path` holding `text`, with `mode` whatever the
    /// umask, flushed to disk. Returns its path.
    static func writeTemporary(beside path: String, _ text: String, mode: mode_t, sync: Bool = true) throws(KeyFileError) -> String {
        let temporary = "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw KeyFileError("cannot create \(temporary): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fchmod(fd, mode) == 0, !sync || fsync(fd) == 0 else {
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
}

/// ZeroMQ's Z85 (RFC 32): four bytes as five characters of an 85-letter
/// alphabet. Here so that a key file can be read without libzmq; it agrees
/// with `zmq_z85_encode` and `zmq_z85_decode` (KeyFileTests checks).
public enum Z85 {
    static let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8)
    static let values: [Int8] = {
        var t = [Int8](repeating: -1, count: 256)
        for (k, c) in alphabet.enumerated() { t[Int(c)] = Int8(k) }
        return t
    }()

    /// The text of `bytes`; nil unless their count is a multiple of 4.
    public static func encode(_ bytes: [UInt8]) -> String? {
        guard bytes.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count / 4 * 5)
        for k in stride(from: 0, to: bytes.count, by: 4) {
            var value = UInt32(bytes[k]) << 24 | UInt32(bytes[k + 1]) << 16 | UInt32(bytes[k + 2]) << 8 | UInt32(bytes[k + 3])
            var five = [UInt8](repeating: 0, count: 5)
            for j in (0..<5).reversed() {
                five[j] = alphabet[Int(value % 85)]
                value /= 85
            }
            out += five
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of `text`; nil unless its length is a multiple of 5, every
    /// character is in the alphabet and every group fits in four bytes.
    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 5 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 5 * 4)
        for k in stride(from: 0, to: chars.count, by: 5) {
            var value: UInt64 = 0
            for c in chars[k..<k + 5] {
                let v = values[Int(c)]
                if v < 0 { return nil }
                value = value * 85 + UInt64(v)
            }
            guard value <= UInt64(UInt32.max) else { return nil }
            out += [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        }
        return out
    }
}
