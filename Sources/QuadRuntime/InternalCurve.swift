import Foundation
import QuadMessaging
import QuadWire

/// CURVE on the broker's internal sockets (backend, events in and out, the
/// internal frontend), for services on other hosts than the broker: what
/// arrives there is trusted (a worker registers, `user` and `role` are
/// taken as set), so across a network only keys the broker lists may speak.
///
/// A service process turns it on with `QUAD_SERVICE_KEY_FILE`, the file of
/// the services' CURVE secret key (Z85, mode 0600, refused when others may read it, made by
/// `quad-broker --curve-key FILE --show-key`); the broker's public key comes
/// from ``BrokerKey/fromEnvironment(_:)``. The broker admits the public keys
/// of its `--service-keys` file. On one machine the internal sockets are
/// `ipc://` in a folder only the stack's user can open, and this stays off.
public struct InternalCurve: Sendable {
    public let serverKey: [UInt8]
    /// The services' pair.
    public let keys: CurveKeys

    /// The keys from the environment; nil when `QUAD_SERVICE_KEY_FILE` is
    /// unset. Throws when the file or the broker's key cannot be used.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws(QuadError) -> InternalCurve? {
        guard let path = environment["QUAD_SERVICE_KEY_FILE"], !path.isEmpty else { return nil }
        let keys: CurveKeys
        do throws(KeyFileError) {
            keys = try CurveKeys.load(path, what: "the services' CURVE secret key (QUAD_SERVICE_KEY_FILE)")
        } catch {
            throw .badRequest(error.message)
        }
        guard let server = try BrokerKey.fromEnvironment(environment) else {
            throw .badRequest("QUAD_SERVICE_KEY_FILE is set but the broker's public key is not: set QUAD_BROKER_KEY, QUAD_BROKER_KEY_FILE or QUAD_HOME")
        }
        return InternalCurve(serverKey: server, keys: keys)
    }

    /// This process's keys, read once; services check
    /// ``fromEnvironment(_:)`` at start and refuse to run when it throws.
    public static let current: InternalCurve? = (try? fromEnvironment()) ?? nil

    /// Makes `socket` a CURVE client of the broker when internal CURVE is
    /// on; call it before `connect`.
    public static func secure(_ socket: Socket) throws(ZMQError) {
        guard let curve = current else { return }
        try curve.keys.connect(socket, to: curve.serverKey)
    }
}

/// Where a client of the broker's public frontend finds the broker's CURVE
/// public key, first match wins:
///
/// 1. `QUAD_BROKER_KEY`: the key itself, 40 characters of Z85 (what
///    `deploy/stack keys` prints), or `off` for a broker run with `--curve off`;
/// 2. `QUAD_BROKER_KEY_FILE`: a file holding it;
/// 3. `$QUAD_HOME/keys/broker.pub`, when it exists (the broker writes it).
///
/// nil means no key: the client speaks without CURVE, which a broker with
/// CURVE on never answers.
public enum BrokerKey {
    /// The key named by `value`: Z85 text, `@FILE`, or `off` (nil).
    public static func parse(_ value: String) throws(QuadError) -> [UInt8]? {
        let text = value.trimmingCharacters(in: .whitespacesAndNewlines)
        if text == "off" { return nil }
        // '@' is a Z85 digit too: 40 characters that decode are a key, even
        // one that starts with '@'.
        if text.utf8.count == 40, let key = KeyFile.Format.z85.decode(text) { return key }
        if text.hasPrefix("@") { return try read(file: String(text.dropFirst())) }
        guard let key = KeyFile.Format.z85.decode(text) else {
            throw .badRequest("the broker key must be 40 characters of Z85 (deploy/stack keys prints it), '@FILE' or 'off'; got \(text.utf8.count) characters")
        }
        return key
    }

    /// The key in a `broker.pub` file.
    public static func read(file path: String) throws(QuadError) -> [UInt8] {
        do throws(KeyFileError) {
            return try CurveKeys.readPublicKey(path, what: "the broker's public key")
        } catch {
            throw .badRequest(error.message)
        }
    }

    /// The key from the environment, as the list above says.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws(QuadError) -> [UInt8]? {
        if let value = environment["QUAD_BROKER_KEY"], !value.isEmpty { return try parse(value) }
        if let path = environment["QUAD_BROKER_KEY_FILE"], !path.isEmpty { return try read(file: path) }
        if let home = environment["QUAD_HOME"], !home.isEmpty, FileManager.default.fileExists(atPath: home + "/keys/broker.pub") {
            return try read(file: home + "/keys/broker.pub")
        }
        return nil
    }
}
