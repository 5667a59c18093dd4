import Foundation
import QuadMessaging
import QuadWire

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
    public static func publicKeyPath(forSecretKey path: String) -> String { KeyFile.publicKeyPath(forSecretKey: path) }

    /// Loads the pair whose secret key is at `path`, creating it first when
    /// missing, and (re)writes the public key file when it is missing or
    /// differs. Refuses a secret key file that others may read.
    public static func loadOrCreate(at path: String) throws(KeyFileError) -> Pair {
        var created = false
        if !FileManager.default.fileExists(atPath: path) {
            let pair: (publicKey: String, secretKey: String)
            do { pair = try Curve.keyPair() } catch { throw KeyFileError("cannot make a CURVE key pair: \(error)") }
            created = try KeyFile.createOnce(path, pair.secretKey + "\n", what: "the broker's secret key")
        }
        try KeyFile.requirePrivate(path, what: "the broker's secret key")
        let text = try KeyFile.readLine(path)
        guard let secret = Curve.decode(text), let publicKey = Curve.publicKey(forSecretKey: text) else {
            throw KeyFileError("\(path) is not a CURVE secret key: expected one line of 40 Z85 characters")
        }
        let pubPath = publicKeyPath(forSecretKey: path)
        if (try? KeyFile.readLine(pubPath)) != publicKey {
            try KeyFile.writeReplacing(pubPath, publicKey + "\n", mode: 0o644)
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
}
