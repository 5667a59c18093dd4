import Foundation
import QuadAuth
import QuadRuntime
import QuadWire

/// Why a keychain could not be opened or written. A tampered or cut file,
/// a wrong PIN and an unreadable key file each say so; none is a crash.
package struct KeychainError: Error, CustomStringConvertible, Equatable {
    package enum Kind: String { case tampered, wrongPIN = "wrong_pin", locked, io }
    package let kind: Kind
    package let message: String
    package var description: String { message }
}

/// A phone's secrets at rest, the way ParkWise keeps its JWT in the iOS
/// Keychain: one file per phone (`<phone>.keychain`), a JSON object of
/// items sealed with libsodium's secretbox (XSalsa20-Poly1305,
/// ``SecretBox``), a new random nonce on every write, written to a
/// temporary file and renamed over the old one (mode 0600), or, for a
/// write that need not be durable, over the old one in place
/// (``overwrite(_:_:)``). The key is
/// 32 random bytes in a 0600 key file beside it (`<phone>.keychain-key`),
/// or, when the user sets a PIN, derived from the PIN with Argon2id
/// (libsodium's interactive limits) and a random salt kept beside it
/// (`<phone>.keychain-pin`, with a small sealed check that tells a wrong PIN
/// from a changed keychain); no key file is kept then. The phone's SQLite
/// file holds none of these.
package final class Keychain {
    /// What a phone keeps in it.
    package enum Item: String, CaseIterable {
        case sessionToken = "session_token"
        case refreshToken = "refresh_token"
        /// The phone's CURVE secret key, Z85 (its public key follows from it).
        case curveSecretKey = "curve_secret_key"
        /// Who the phone signs in as (`{email, user}`): what lets a phone
        /// whose file was damaged sign in again to the same account.
        case account
        /// The outbox's write generation as the file last committed it
        /// (``WriteGeneration``): a file found behind it lost its last writes.
        case writeGeneration = "write_generation"
        /// What the phone's file lost so far (``StorageFaultCounts``).
        case storageFaults = "storage_faults"
    }

    let path: String
    var keyPath: String { path + "-key" }
    var pinPath: String { path + "-pin" }
    private let key: [UInt8]
    private(set) var items: [String: String] = [:]

    static let header = "quad-keychain 1 "
    static let pinCheck = Array("quad-keychain pin check".utf8)

    /// The keychain of the phone whose file is `phoneFile` (`x.db` → `x.keychain`).
    package static func path(forPhoneFile phoneFile: String) -> String {
        (phoneFile.hasSuffix(".db") ? String(phoneFile.dropLast(3)) : phoneFile) + ".keychain"
    }

    /// Opens (creating) the keychain at `path`: under its key file, or
    /// under `pin` when one is given or was set. A keychain file that does
    /// not open is a ``KeychainError`` (`tampered`), a PIN that does not
    /// match one (`wrong_pin`), a keychain set with a PIN opened without
    /// one too (`locked`).
    package init(path: String, pin: String? = nil, strength: PasswordHash.Strength = .interactive) throws(KeychainError) {
        self.path = path
        if FileManager.default.fileExists(atPath: path + "-pin") {
            guard let pin else { throw KeychainError(kind: .locked, message: "the keychain \(path) is locked with a PIN: give the phone its PIN") }
            key = try Keychain.pinKey(pin, at: path + "-pin")
            items = try Keychain.read(path, key: key)
        } else if let pin {
            // A keychain that moves from its key file to a PIN: read under
            // the key file, sealed again under the PIN, the key file gone.
            let earlier = FileManager.default.fileExists(atPath: path + "-key")
                ? try Keychain.read(path, key: try Keychain.fileKey(at: path + "-key")) : [:]
            key = try Keychain.newPinKey(pin, at: path + "-pin", strength: strength)
            items = earlier
            try write()
            unlink(path + "-key")
        } else {
            key = try Keychain.fileKey(at: path + "-key")
            items = try Keychain.read(path, key: key)
        }
    }

    package subscript(_ item: Item) -> String? { items[item.rawValue] }

    /// Sets (nil: removes) items, in one write; `durable: false` skips the
    /// two fsyncs and writes in place (a killed process leaves the old
    /// keychain or the new; a crash of the machine may lose the write, or
    /// leave a keychain that no longer opens, which the phone treats as
    /// tampered: it signs in again), for a figure written often that a lost
    /// write only makes less precise (the phone's write generation).
    package func set(_ changes: [Item: String?], durable: Bool = true) throws(KeychainError) {
        var next = items
        for (item, value) in changes { next[item.rawValue] = value }
        guard next != items || !FileManager.default.fileExists(atPath: path) else { return }
        items = next
        try write(durable: durable)
    }

    /// Empties the keychain (a tampered one, before the phone signs in
    /// again), its PIN salt too when that is what was changed.
    package static func reset(path: String) {
        unlink(path)
        if (try? pinKeyFormat(at: path + "-pin")) == nil { unlink(path + "-pin") }
    }

    // MARK: The file

    static func read(_ path: String, key: [UInt8]) throws(KeychainError) -> [String: String] {
        guard let data = FileManager.default.contents(atPath: path) else {
            if FileManager.default.fileExists(atPath: path) { throw KeychainError(kind: .io, message: "cannot read the keychain \(path)") }
            return [:]
        }
        let text = String(decoding: data, as: UTF8.self)
        guard text.hasPrefix(Keychain.header), let sealed = Data(base64Encoded: String(text.dropFirst(Keychain.header.count)).trimmingCharacters(in: .whitespacesAndNewlines)),
              let opened = SecretBox.open(Array(sealed), key: key), let object = (try? JSON.parse(String(decoding: opened, as: UTF8.self)))?.object
        else {
            throw KeychainError(kind: .tampered, message: "the keychain \(path) was changed or cut short (its seal does not open): its secrets are lost, the phone signs in again")
        }
        return object.compactMapValues(\.string)
    }

    func write(durable: Bool = true) throws(KeychainError) {
        let plain = Array(JSON.object(items.mapValues { .string($0) }).text.utf8)
        do {
            let sealed = try SecretBox.seal(plain, key: key)
            let text = Keychain.header + Data(sealed).base64EncodedString() + "\n"
            if !durable, try Keychain.overwrite(path, text) { return }
            try KeyFile.writeReplacing(path, text, mode: 0o600, durable: durable)
        } catch let error as AuthError {
            throw KeychainError(kind: .io, message: "cannot seal the keychain \(path): \(error.message)")
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(kind: .io, message: "cannot write the keychain \(path): \(error)")
        }
    }

    /// A write that need not survive a crash of the machine, in place: one
    /// pwrite over the file's first bytes, padded with spaces (which the
    /// reader trims) to its length. No new file: writing a temporary file
    /// and renaming it over the old one made and freed an inode per write,
    /// and ext4's search past recently freed inodes was an eighth of a
    /// 1,000-phone day's loop (a write per action queued). A process killed
    /// during it leaves the old text or the new (one write of less than a
    /// page). False when the file is not there to write over, or not a
    /// private regular file: the caller replaces it.
    static func overwrite(_ path: String, _ text: String) throws -> Bool {
        let fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o077 == 0 else { return false }
        var bytes = Array(text.utf8)
        guard bytes.count < 4096 else { return false }
        if Int(info.st_size) > bytes.count { bytes += [UInt8](repeating: 0x20, count: Int(info.st_size) - bytes.count) }
        let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        guard n == bytes.count else { throw KeychainError(kind: .io, message: "cannot write the keychain \(path): \(n < 0 ? String(cString: strerror(errno)) : "\(n) of \(bytes.count) bytes written")") }
        return true
    }

    // MARK: Keys

    /// The key file's 32 bytes, the file made (0600) when missing.
    static func fileKey(at path: String) throws(KeychainError) -> [UInt8] {
        do throws(KeyFileError) {
            if !FileManager.default.fileExists(atPath: path) {
                _ = try KeyFile.createOnce(path, Base64URL.encode(SecretBox.makeKey()) + "\n", what: "the keychain key")
            }
            let key = try KeyFile.read(path, what: "the keychain key", format: .base64url, secret: true)
            guard key.count == SecretBox.keyBytes else {
                throw KeyFileError("the keychain key \(path) is \(key.count) bytes, not \(SecretBox.keyBytes)")
            }
            return key
        } catch {
            throw KeychainError(kind: .io, message: error.message)
        }
    }

    /// A new PIN: a random salt and the check, written beside the keychain.
    static func newPinKey(_ pin: String, at path: String, strength: PasswordHash.Strength) throws(KeychainError) -> [UInt8] {
        let salt = SecretBox.randomBytes(SecretBox.saltBytes)
        do {
            let key = try SecretBox.key(pin: pin, salt: salt, strength: strength)
            let check = try SecretBox.seal(pinCheck, key: key)
            let text = "\(strength.rawValue) \(Data(salt).base64EncodedString()) \(Data(check).base64EncodedString())\n"
            try KeyFile.writeReplacing(path, text, mode: 0o600)
            return key
        } catch let error as AuthError {
            throw KeychainError(kind: .io, message: "cannot derive the keychain's key from its PIN: \(error.message)")
        } catch {
            throw KeychainError(kind: .io, message: "cannot write the keychain's PIN salt \(path): \(error)")
        }
    }

    /// The key derived from `pin` and the salt in `path`; `wrong_pin` when
    /// the check sealed under the PIN's key does not open with it.
    /// The strength, salt and check a PIN salt file holds.
    static func pinKeyFormat(at path: String) throws(KeychainError) -> (PasswordHash.Strength, Data, Data) {
        let line = (try? KeyFile.readLine(path, what: "the keychain's PIN salt")) ?? ""
        let parts = line.split(separator: " ").map(String.init)
        guard parts.count == 3, let stored = PasswordHash.Strength(rawValue: parts[0]),
              let salt = Data(base64Encoded: parts[1]), let check = Data(base64Encoded: parts[2]) else {
            throw KeychainError(kind: .tampered, message: "the keychain's PIN salt \(path) is not one: the phone signs in again")
        }
        return (stored, salt, check)
    }

    static func pinKey(_ pin: String, at path: String) throws(KeychainError) -> [UInt8] {
        let (stored, salt, check) = try pinKeyFormat(at: path)
        let key: [UInt8]
        do { key = try SecretBox.key(pin: pin, salt: Array(salt), strength: stored) } catch {
            throw KeychainError(kind: .io, message: "cannot derive the keychain's key from its PIN: \(error.message)")
        }
        guard SecretBox.open(Array(check), key: key) == pinCheck else {
            throw KeychainError(kind: .wrongPIN, message: "wrong PIN for the keychain \(path)")
        }
        return key
    }
}

/// What the emulated students remember: each one's password, which no
/// phone keeps. The campus day (or the harness) holds them in memory and,
/// so that a student still knows it after quad-edge restarts, in a
/// keychain of its own beside the phones' folder, never inside it
/// (`<dir>.students`, with its `-key`). A phone asks for its student's
/// password only to register or to sign in again.
package final class Students {
    let keychain: Keychain

    /// The students' keychain of the phones in folder `dir`.
    package static func path(forPhonesDir dir: String) -> String {
        var dir = dir
        while dir.count > 1 && dir.hasSuffix("/") { dir.removeLast() }
        return dir + ".students"
    }

    package init(path: String) throws(KeychainError) {
        keychain = try Keychain(path: path)
    }

    /// The password of the student whose email is `email`; a new one is
    /// made (and remembered) the first time.
    package func password(for email: String) throws(KeychainError) -> String {
        if let known = keychain.items[email] { return known }
        let made = "pw-" + Base64URL.encode(SecretBox.randomBytes(24))
        try remember(email, made)
        return made
    }

    /// Remembers `password` (a phone's from before the keychain, moved out of its file).
    package func remember(_ email: String, _ password: String) throws(KeychainError) {
        try keychain.setRaw(email, password)
    }
}

extension Keychain {
    /// Sets an item by name (the students' keychain names its items by email).
    func setRaw(_ name: String, _ value: String) throws(KeychainError) {
        guard items[name] != value else { return }
        items[name] = value
        try write()
    }
}
