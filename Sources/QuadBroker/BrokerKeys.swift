import Foundation
import QuadMessaging
import QuadProcess
import QuadWire

/// The broker's CURVE key pair. `$QUAD_HOME/keys/broker.key` holds the
/// secret key as one line of Z85 text (`zmq_curve_keypair`), mode 0600;
/// `broker.pub` beside it holds the public key, mode 0644, which is all a
/// client needs (`deploy/stack keys` prints it). The secret file is created
/// once, atomically (written to a temporary file, then hard-linked into
/// place), so two brokers starting together agree on one key.
public enum BrokerKeys {
    public struct Pair: Sendable {
        public let keys: CurveKeys
        /// Z85 text, for clients and logs.
        public var publicKey: String { keys.publicText }
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
        let (keys, created) = try CurveKeys.loadOrCreate(at: path, what: "the broker's secret key")
        return Pair(keys: keys, created: created)
    }

    /// Client keys allowed to connect: one Z85 public key per line; blank
    /// lines and lines starting with `#` are skipped.
    public static func allowList(at path: String) throws(KeyFileError) -> Set<[UInt8]> {
        try CurveKeys.readPublicKeys(path, what: "the list of CURVE public keys")
    }
}
