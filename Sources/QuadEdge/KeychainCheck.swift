import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadWire
import QuadPhone
import QuadPhoneKit

/// The campus day's keychain check: each phone's files, read whole at the
/// end of the day, hold none of the secrets the phone has in memory (its
/// session and refresh tokens, its student's password, its CURVE secret
/// key raw, in Z85, base64 or base64url). Its files are its SQLite file
/// with `-wal`, `-shm` and `-journal`, its keychain and PIN salt; not its
/// keychain key (random bytes, the key itself) nor its pictures (bytes
/// from the image server, kept by their SHA-256: KeychainStackTests reads
/// those too).
enum KeychainCheck {
    /// The files of `phone` that hold one of its secrets, with which.
    static func leaks(_ phone: Phone) -> [String] {
        var secrets: [(String, [UInt8])] = []
        let named: [(String, String?)] = [("session token", phone.token), ("refresh token", phone.refreshToken), ("password", phone.password)]
        for (name, value) in named {
            if let value, !value.isEmpty { secrets.append((name, Array(value.utf8))) }
        }
        if let key = phone.link.clientKeys?.secretKey {
            let forms = [key, Array(Data(key).base64EncodedString().utf8), Array(Base64URL.encode(key).utf8)] + (Z85.encode(key).map { [Array($0.utf8)] } ?? [])
            secrets += forms.map { ("CURVE secret key", $0) }
        }
        let base = phone.file.hasSuffix(".db") ? String(phone.file.dropLast(3)) : phone.file
        let files = ["", "-wal", "-shm", "-journal"].map { phone.file + $0 } + [base + ".keychain", base + ".keychain-pin"]
        return files.flatMap { path -> [String] in
            guard let data = FileManager.default.contents(atPath: path) else { return [] }
            return secrets.filter { data.range(of: Data($0.1)) != nil }.map { "\(path): \($0.0)" }
        }
    }

    /// The report's entry: phones clean and phones with a secret found (0).
    static func report(_ phones: [Phone]) -> JSON {
        let found = phones.map { ($0.name, leaks($0)) }.filter { !$0.1.isEmpty }
        for (name, leaks) in found { Log.error("edge/\(name)", "keychain check: a secret in the phone's files: \(leaks.joined(separator: "; "))") }
        return [
            "phones_clean": .int(Int64(phones.count - found.count)),
            "phones_with_secret": .int(Int64(found.count)),
            "found": .array(found.prefix(10).flatMap { $0.1 }.map { .string($0) }),
        ]
    }
}
