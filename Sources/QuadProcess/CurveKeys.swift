import Foundation
import QuadMessaging
import QuadWire

/// A CURVE key pair, the one type every process holds its keys in (as
/// czmq's `zcert`): made, read from its files or from Z85 text, saved, and
/// put on a socket as a server's or a client's. The broker's pair
/// (`broker.key`, `broker.pub`), the services' key of internal CURVE, a
/// client's pair (one per `Client`, kept across its brokers) and a phone's
/// (kept in its keychain) are all this type; the files are ``KeyFile``'s
/// one-line Z85 (mode 0600 for a secret key, refused when others may read
/// it).
public struct CurveKeys: Sendable, Equatable {
    /// 32 bytes each.
    public let publicKey: [UInt8]
    public let secretKey: [UInt8]

    /// The pair of a 32-byte secret key; nil when it is none.
    public init?(secretKey: [UInt8]) {
        guard let text = Curve.encode(secretKey), let pub = Curve.publicKey(forSecretKey: text).flatMap(Curve.decode) else { return nil }
        self.publicKey = pub
        self.secretKey = secretKey
    }

    /// The pair of a secret key written in Z85 (40 characters); nil when
    /// the text is no key.
    public init?(secretText: String) {
        guard let secret = Curve.decode(secretText) else { return nil }
        self.init(secretKey: secret)
    }

    /// A new pair (`zmq_curve_keypair`).
    public static func generate() throws(ZMQError) -> CurveKeys {
        let made = try Curve.keyPair()
        // zmq_curve_keypair's Z85 output always decodes.
        guard let keys = CurveKeys(secretText: made.secretKey) else { throw ZMQError("zmq_curve_keypair", message: "its key does not decode") }
        return keys
    }

    /// Z85 text, for files, keychains and logs (the public one).
    public var publicText: String { Curve.encode(publicKey) ?? "" }
    public var secretText: String { Curve.encode(secretKey) ?? "" }

    // MARK: Files

    /// The pair whose secret key is in the file at `path` (one line of Z85,
    /// refused when others may read the file). `what` names it in errors.
    public static func load(_ path: String, what: String) throws(KeyFileError) -> CurveKeys {
        let secret = try KeyFile.read(path, what: what, format: .z85, secret: true)
        guard let keys = CurveKeys(secretKey: secret) else { throw KeyFileError("\(what) \(path) is not a CURVE secret key") }
        return keys
    }

    /// The pair whose secret key is at `path`, made first (once, even with
    /// two processes starting together) when the file is missing; the
    /// public key file beside it (`broker.key` → `broker.pub`) is
    /// (re)written when it is missing or differs. `created` says whether
    /// this call made the pair.
    public static func loadOrCreate(at path: String, what: String) throws(KeyFileError) -> (keys: CurveKeys, created: Bool) {
        let pair = try KeyFile.loadOrCreatePair(
            at: path, what: what, format: .z85,
            make: { (try? CurveKeys.generate())?.secretKey },
            publicKey: { CurveKeys(secretKey: $0)?.publicKey })
        guard let keys = CurveKeys(secretKey: pair.secretKey) else { throw KeyFileError("\(what) \(path) is not a CURVE secret key") }
        return (keys, pair.created)
    }

    /// A public key alone, in the one-line file at `path`.
    public static func readPublicKey(_ path: String, what: String) throws(KeyFileError) -> [UInt8] {
        try KeyFile.read(path, what: what, format: .z85, secret: false)
    }

    /// Public keys listed one a line (blank lines and `#` comments skipped).
    public static func readPublicKeys(_ path: String, what: String) throws(KeyFileError) -> Set<[UInt8]> {
        try KeyFile.readList(path, what: what, format: .z85)
    }

    // MARK: Sockets

    /// Makes `socket` a CURVE server with this pair; before `bind`.
    public func serve(_ socket: Socket) throws(ZMQError) {
        try socket.setCurveServer(secretKey: secretKey)
    }

    /// Makes `socket` a CURVE client of the server whose public key is
    /// `serverKey`, with this pair; before `connect`.
    public func connect(_ socket: Socket, to serverKey: [UInt8]) throws(ZMQError) {
        try socket.setCurveClient(serverKey: serverKey, publicKey: publicKey, secretKey: secretKey)
    }
}
