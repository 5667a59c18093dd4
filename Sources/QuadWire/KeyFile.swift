import Foundation

/// A key file that cannot be read, written or trusted.
public struct KeyFileError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Files of one line holding a key, as accounts' signing key and the
/// broker's CURVE keys are kept: a secret key file is created once,
/// atomically (written to a temporary file, then hard-linked into place, so
/// two processes starting together agree on one key), mode 0600; a public
/// key file beside it is replaced atomically (temporary file, then rename),
/// mode 0644. Every write is flushed to disk with its folder.
public enum KeyFile {
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

    /// Replaces `path` atomically with `text`.
    public static func writeReplacing(_ path: String, _ text: String, mode: mode_t) throws(KeyFileError) {
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

    /// Refuses a secret key file that others may read, saying how to fix it.
    public static func requirePrivate(_ path: String, what: String) throws(KeyFileError) {
        var info = stat()
        guard stat(path, &info) == 0 else { throw KeyFileError("cannot read \(what) \(path): \(String(cString: strerror(errno)))") }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw KeyFileError("\(what) \(path) is readable by others (mode \(String(mode, radix: 8))): chmod 600 \(path)")
        }
    }

    /// The file's one line, trimmed.
    public static func readLine(_ path: String) throws(KeyFileError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw KeyFileError("cannot read \(path)") }
        guard data.count <= 4096, let text = String(data: data, encoding: .utf8) else { throw KeyFileError("\(path) is not a key file") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A new file beside `path` holding `text`, with `mode` whatever the
    /// umask, flushed to disk. Returns its path.
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
}
