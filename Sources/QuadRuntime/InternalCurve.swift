import Foundation
import QuadMessaging
import QuadWire

/// CURVE on the broker's internal sockets (backend, events in and out, the
/// internal frontend), for services on other hosts than the broker: what
/// arrives there is trusted (a worker registers, `user` and `role` are
/// taken as set), so across a network only keys the broker lists may speak.
///
/// A service process turns it on with `QUAD_SERVICE_KEY_FILE`, the file of
/// the services' CURVE secret key (Z85, mode 0600, made by
/// `quad-broker --curve-key FILE --show-key`); the broker's public key comes
/// from ``BrokerKey/fromEnvironment(_:)``. The broker admits the public keys
/// of its `--service-keys` file. On one machine the internal sockets are
/// `ipc://` in a folder only the stack's user can open, and this stays off.
public struct InternalCurve: Sendable {
    public let serverKey: [UInt8]
    public let publicKey: [UInt8]
    public let secretKey: [UInt8]

    /// The keys from the environment; nil when `QUAD_SERVICE_KEY_FILE` is
    /// unset. Throws when the file or the broker's key cannot be used.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws(QuadError) -> InternalCurve? {
        guard let path = environment["QUAD_SERVICE_KEY_FILE"], !path.isEmpty else { return nil }
        guard let data = FileManager.default.contents(atPath: path), data.count <= 4096,
              let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
              let secret = Curve.decode(text), let publicText = Curve.publicKey(forSecretKey: text), let pub = Curve.decode(publicText) else {
            throw .badRequest("QUAD_SERVICE_KEY_FILE=\(path) is not readable as a CURVE secret key (one line of 40 Z85 characters)")
        }
        guard let server = try BrokerKey.fromEnvironment(environment) else {
            throw .badRequest("QUAD_SERVICE_KEY_FILE is set but the broker's public key is not: set QUAD_BROKER_KEY, QUAD_BROKER_KEY_FILE or QUAD_HOME")
        }
        return InternalCurve(serverKey: server, publicKey: pub, secretKey: secret)
    }

    /// This process's keys, read once; services check
    /// ``fromEnvironment(_:)`` at start and refuse to run when it throws.
    public static let current: InternalCurve? = (try? fromEnvironment()) ?? nil

    /// Makes `socket` a CURVE client of the broker when internal CURVE is
    /// on; call it before `connect`.
    public static func secure(_ socket: Socket) throws(ZMQError) {
        guard let keys = current else { return }
        try socket.setCurveClient(serverKey: keys.serverKey, publicKey: keys.publicKey, secretKey: keys.secretKey)
    }
}
