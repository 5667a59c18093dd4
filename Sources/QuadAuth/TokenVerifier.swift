import QuadWire

/// Checks session tokens against accounts' public key file, for the broker.
/// The file may not exist yet when the verifier starts (accounts creates it
/// on its first start), so a missing key is looked for again, at most every
/// ``retryMs``, until it appears; a key file replaced by a new one (key
/// rotation) is picked up when a token fails to verify. Tokens already
/// verified are remembered until they expire, so a session costs one
/// signature check, not one per request. Not thread-safe: one loop owns it.
public final class TokenVerifier {
    public let keyPath: String
    /// Least time between two reads of the key file.
    public var retryMs: Int64 = 100
    /// Most verified tokens remembered.
    public var maxRemembered = 10_000

    var key: VerifyingKey?
    var lastRead: Int64?
    var lastProblem: String?
    var remembered: [String: TokenClaims] = [:]
    let log: (String) -> Void
    let now: () -> Int64

    /// `log` hears when the key is loaded, changes, or is unusable.
    public init(keyPath: String, now: @escaping () -> Int64 = { Int64(Clock.nowMillis()) }, log: @escaping (String) -> Void = { _ in }) {
        self.keyPath = keyPath
        self.now = now
        self.log = log
    }

    public var hasKey: Bool { key != nil }

    /// Reads the key file; keeps the current key when the file is missing
    /// or unreadable. Returns whether the key changed.
    @discardableResult
    public func loadKey() -> Bool {
        lastRead = Clock.monotonicMillis()
        do {
            guard let loaded = try KeyFiles.loadVerifyingKey(at: keyPath) else {
                report("no accounts public key at \(keyPath) yet: requests with a token get 503 until quad-accounts creates it")
                return false
            }
            guard loaded != key else { return false }
            log(key == nil ? "loaded accounts public key \(keyPath)" : "accounts public key \(keyPath) changed: tokens signed with the old key are refused")
            key = loaded
            lastProblem = nil
            remembered = [:]
            return true
        } catch {
            report("cannot use the accounts public key: \(error.message)")
            return false
        }
    }

    func report(_ problem: String) {
        if problem != lastProblem { log(problem) }
        lastProblem = problem
    }

    func mayRead() -> Bool { lastRead.map { Clock.monotonicMillis() - $0 >= retryMs } ?? true }

    /// The claims of a valid token; 401 naming why for a malformed, forged,
    /// foreign (another alg, kid, iss or aud) or expired one; 503 while no key is available to check it with.
    public func check(_ token: String) throws(QuadError) -> TokenClaims {
        let at = now()
        if let claims = remembered[token] {
            guard at < claims.expiresAt else {
                remembered[token] = nil
                throw TokenError.expired(at: claims.expiresAt).quadError
            }
            return claims
        }
        if key == nil && mayRead() { loadKey() }
        guard let key else {
            throw .unavailable("cannot check the token yet: no accounts public key at \(keyPath) (is quad-accounts running?)")
        }
        let claims: TokenClaims
        do throws(TokenError) {
            claims = try key.verify(token, now: at)
        } catch let error where error.mayBeNewKey && mayRead() && loadKey() {
            return try check(token)
        } catch {
            throw error.quadError
        }
        if remembered.count >= maxRemembered { remembered = [:] }
        remembered[token] = claims
        return claims
    }
}

extension TokenError {
    /// A token of a key pair this verifier has not loaded yet (accounts
    /// rotated its key): worth one more read of the key file.
    var mayBeNewKey: Bool {
        switch self {
        case .signatureInvalid, .unknownKey: return true
        default: return false
        }
    }
}
