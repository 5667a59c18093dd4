import Foundation
import QuadAuth
import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The accounts service: students register and log in; a registration and a
/// login return a session token signed with accounts' Ed25519 key, which the broker checks
/// on every request from outside without calling accounts. Passwords are
/// stored only as Argon2id hashes. Events carry no email and no password.
public enum Accounts: ServiceDomain {
    public static let name = "accounts"
    public static let summary = "registration, login with signed session tokens, profiles"

    /// UniTrade's categories, the choices for a profile's preferences.
    public static let categories = ["Study", "Tech", "Creative", "Lab", "Personal", "Others"]
    /// Longest email address (`max_email_length`, RFC 5321's path limit).
    public static let maxEmailLength = Contract.Accounts.maxEmailLength
    /// Password length bounds in Unicode code points (`min_password_length`, `max_password_length`).
    public static let minPasswordLength = Contract.Accounts.minPasswordLength
    public static let maxPasswordLength = Contract.Accounts.maxPasswordLength
    /// Longest display name in code points, after trimming spaces (`max_name_length`).
    public static let maxNameLength = Contract.Accounts.maxNameLength
    /// Token lifetime bounds, in seconds (`token_ttl_seconds`): an hour by
    /// default, `accounts.refresh` gives a new token before it ends.
    public static let defaultTokenTTLSeconds: Int64 = 3600
    public static let maxTokenTTLSeconds: Int64 = 30 * 86_400
    /// Refresh token lifetime bounds, in seconds (`refresh_token_ttl_seconds`):
    /// 30 days by default, each use gives a new one for as long again.
    public static let defaultRefreshTTLSeconds: Int64 = 30 * 86_400
    public static let maxRefreshTTLSeconds: Int64 = 365 * 86_400

    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE users (
                id TEXT PRIMARY KEY,
                email TEXT NOT NULL UNIQUE,
                password_hash TEXT NOT NULL,
                name TEXT NOT NULL,
                semester BIGINT,
                categories TEXT NOT NULL,
                role TEXT NOT NULL,
                created_ms BIGINT NOT NULL,
                updated_ms BIGINT NOT NULL
            );
            """),
        // Ended sessions, until the tokens they name have expired: one row
        // per token (`jti:<jti>`) or per user (`user:<user>`: every token
        // issued before `before_ms`).
        Migration(2, """
            CREATE TABLE revocations (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                jti TEXT,
                before_ms BIGINT,
                until_ms BIGINT NOT NULL
            );
            CREATE INDEX revocations_until ON revocations (until_ms);
            CREATE INDEX revocations_user ON revocations (user_id);
            """),
        RefreshTokens.migration,
        LoginThrottle.migration,
    ]

    public static var options: [(String, String, String?)] {
        let d = Settings.Limits()
        return [
            ("token-ttl-seconds", "lifetime of a session token (1 to \(maxTokenTTLSeconds)); accounts.refresh renews it", String(defaultTokenTTLSeconds)),
            ("refresh-token-ttl-seconds", "lifetime of a refresh token (1 to \(maxRefreshTTLSeconds), refresh_token_ttl_seconds); each use gives a new one",
             String(defaultRefreshTTLSeconds)),
            ("max-refresh-tokens-per-user", "live refresh tokens (signed-in phones) a user keeps; past it the oldest end (max_refresh_tokens_per_user)",
             String(d.maxRefreshTokensPerUser)),
            ("signing-key", "Ed25519 secret key file, created (0600) when missing; its public key is written beside it as .pub",
             KeyFiles.defaultSecretKeyPath()),
            ("admin-email", "email of the admin account, created at the first start with the password of --admin-password-file; never reset later", nil),
            ("admin-password-file", "file (mode 0600) holding the admin's first password on one line (default: $QUAD_ADMIN_PASSWORD_FILE)",
             ProcessInfo.processInfo.environment["QUAD_ADMIN_PASSWORD_FILE"]),
            ("admin", "TESTS ONLY (the password shows in ps): EMAIL:PASSWORD of the admin account to create at the first start", nil),
            ("password-hashing", "Argon2id cost: interactive (libsodium's OPSLIMIT/MEMLIMIT_INTERACTIVE, 64 MiB), moderate, or minimum (tests only)",
             PasswordHash.Strength.interactive.rawValue),
            ("login-free-failures", "failed logins of one account or client before each further one makes it wait", String(d.freeFailures)),
            ("login-account-max-delay-ms", "longest wait a run of failed logins puts on an account (what a stranger can lock a user out for)",
             String(d.accountMaxDelayMs)),
            ("login-client-max-delay-ms", "longest wait a run of failed logins puts on a client (its CURVE key, or src)", String(d.clientMaxDelayMs)),
            ("login-throttle-entries", "most accounts, and most clients, whose failed logins are remembered", String(d.maxEntries)),
            ("hash-ms-per-second", "milliseconds per second a worker may spend hashing passwords; past it logins get 429", String(d.hashMsPerSecond)),
        ]
    }

    /// What the handlers need besides the store.
    public struct Settings: Sendable {
        /// The guessing limits: named settings, flags of quad-accounts.
        public struct Limits: Sendable {
            /// `login_free_failures`
            public var freeFailures = 5
            /// The first wait after the free failures; doubled per failure.
            public var baseDelayMs: Int64 = 500
            /// `login_account_max_delay_ms`: short, because anyone who knows
            /// an email can fail its logins.
            public var accountMaxDelayMs: Int64 = 5_000
            /// `login_client_max_delay_ms`
            public var clientMaxDelayMs: Int64 = 300_000
            /// Failures are forgotten this long after the last one.
            public var forgetAfterMs: Int64 = 900_000
            /// `login_throttle_entries`, per table (accounts, clients).
            public var maxEntries = 10_000
            /// `hash_ms_per_second`
            public var hashMsPerSecond: Int64 = 750
            /// `max_revoked_tokens_per_user`: past it, a logout ends every
            /// session of the user in one entry instead.
            public var maxRevokedTokensPerUser = 100
            /// `max_refresh_tokens_per_user`: live refresh token families
            /// (signed-in devices) per user; the oldest end past it.
            public var maxRefreshTokensPerUser = 20

            public init() {}
        }

        public var signingKey: SigningKey
        public var tokenTTLMillis: Int64
        public var refreshTTLMillis: Int64
        /// What refresh tokens are derived from (``RefreshTokens``): accounts' key's own.
        let refreshSecret: [UInt8]
        public var hashing: PasswordHash.Strength
        public var limits: Limits
        /// An Argon2id hash of no password anyone has: a login with an
        /// unknown email verifies against it, so it costs what a wrong
        /// password costs and the timing does not tell which emails exist.
        let decoyHash: String

        public init(signingKey: SigningKey, tokenTTLMillis: Int64 = Accounts.defaultTokenTTLSeconds * 1000,
                    refreshTTLMillis: Int64 = Accounts.defaultRefreshTTLSeconds * 1000,
                    hashing: PasswordHash.Strength = .interactive, limits: Limits = Limits()) throws {
            self.signingKey = signingKey
            self.tokenTTLMillis = tokenTTLMillis
            self.refreshTTLMillis = refreshTTLMillis
            refreshSecret = SecretBox.derive(Array("quad-accounts refresh tokens".utf8), key: signingKey.secretKeyBytes)
            self.hashing = hashing
            self.limits = limits
            decoyHash = try PasswordHash.hash(MessageID.make(), strength: hashing)
        }
    }

    /// The options accounts reads, checked (``check(options:)``) before the
    /// worker opens its store.
    struct Options {
        var ttl: Int64
        var refreshTTL: Int64
        var hashing: PasswordHash.Strength
        var limits: Settings.Limits
        var admin: (email: String, password: String)?
    }

    public static func check(options: [String: String]) throws(UsageError) {
        _ = try read(options)
    }

    static func read(_ options: [String: String]) throws(UsageError) -> Options {
        let usage = "Try: quad-accounts --help"
        let ttl = Int64(options["token-ttl-seconds"] ?? "") ?? -1
        guard (1...maxTokenTTLSeconds).contains(ttl) else {
            throw UsageError("--token-ttl-seconds must be an integer from 1 to \(maxTokenTTLSeconds)", usage: usage)
        }
        guard let hashing = PasswordHash.Strength(rawValue: options["password-hashing"] ?? "") else {
            throw UsageError("--password-hashing must be one of \(PasswordHash.Strength.allCases.map(\.rawValue).joined(separator: ", "))", usage: usage)
        }
        let refreshTTL = Int64(options["refresh-token-ttl-seconds"] ?? "") ?? -1
        guard (1...maxRefreshTTLSeconds).contains(refreshTTL) else {
            throw UsageError("--refresh-token-ttl-seconds must be an integer from 1 to \(maxRefreshTTLSeconds)", usage: usage)
        }
        var limits = Settings.Limits()
        func number(_ flag: String, _ range: ClosedRange<Int64>) throws(UsageError) -> Int64 {
            guard let n = Int64(options[flag] ?? ""), range.contains(n) else {
                throw UsageError("--\(flag) must be an integer from \(range.lowerBound) to \(range.upperBound)", usage: usage)
            }
            return n
        }
        limits.freeFailures = Int(try number("login-free-failures", 1...1000))
        limits.accountMaxDelayMs = try number("login-account-max-delay-ms", 0...3_600_000)
        limits.clientMaxDelayMs = try number("login-client-max-delay-ms", 0...86_400_000)
        limits.maxEntries = Int(try number("login-throttle-entries", 1...10_000_000))
        limits.hashMsPerSecond = try number("hash-ms-per-second", 1...1000)
        limits.maxRefreshTokensPerUser = Int(try number("max-refresh-tokens-per-user", 1...1000))
        let admin = try adminAccount(options, usage: usage)
        return Options(ttl: ttl, refreshTTL: refreshTTL, hashing: hashing, limits: limits, admin: admin)
    }

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let o = try read(options)
        let (ttl, refreshTTL, hashing, limits, admin) = (o.ttl, o.refreshTTL, o.hashing, o.limits, o.admin)
        let keyPath = options["signing-key"] ?? KeyFiles.defaultSecretKeyPath()
        let (key, created) = try KeyFiles.loadOrCreateSigningKey(at: keyPath)
        Log.info(worker.handlers.instance, "\(created ? "created" : "loaded") signing key \(keyPath), public key \(KeyFiles.publicKeyPath(forSecretKey: keyPath))")
        let settings = try Settings(signingKey: key, tokenTTLMillis: ttl * 1000, refreshTTLMillis: refreshTTL * 1000, hashing: hashing, limits: limits)
        if let admin {
            let outcome = try ensureAdmin(db, email: admin.email, password: admin.password, hashing: hashing)
            Log.info(worker.handlers.instance, "admin account \(admin.email) \(outcome)")
        }
        register(worker.handlers, db: db, settings: settings, relay: { [unowned worker] in worker.relayOutbox() })
        worker.every(60_000) {
            try Sessions.prune(db)
            try RefreshTokens.prune(db)
            try LoginThrottle.prune(db, limits: settings.limits)
        }
    }

    /// The admin account to make at start: `--admin-email` with the password
    /// in `--admin-password-file` (or `QUAD_ADMIN_PASSWORD_FILE`), never on
    /// the command line; `--admin EMAIL:PASSWORD` is for tests only.
    static func adminAccount(_ options: [String: String], usage: String) throws(UsageError) -> (email: String, password: String)? {
        func checked(_ email: String, _ password: String, from: String) throws(UsageError) -> (email: String, password: String) {
            // The same rules as accounts.register's email and password, from the contract.
            do { return (try Validation.flag(email, "email", field: "email").lowercased(), try Validation.flag(password, "password", field: "password")) } catch {
                throw UsageError("\(from): \(error.message)", usage: usage)
            }
        }
        if let email = options["admin-email"], !email.isEmpty {
            guard let file = options["admin-password-file"], !file.isEmpty else {
                throw UsageError("--admin-email needs --admin-password-file (or QUAD_ADMIN_PASSWORD_FILE)", usage: usage)
            }
            let password: String
            do {
                try KeyFile.requirePrivate(file, what: "the admin password file")
                password = try KeyFile.readLine(file)
            } catch {
                throw UsageError("--admin-password-file: \(error.message)", usage: usage)
            }
            return try checked(email, password, from: "--admin-password-file")
        }
        if let spec = options["admin"], !spec.isEmpty {
            guard let colon = spec.firstIndex(of: ":") else { throw UsageError("--admin must be EMAIL:PASSWORD", usage: usage) }
            return try checked(String(spec[..<colon]), String(spec[spec.index(after: colon)...]), from: "--admin")
        }
        return nil
    }

    /// Registers the handlers; split from ``install`` so tests can drive
    /// them without a broker. `relay` publishes the outbox after the
    /// handlers that commit their own transactions.
    public static func register(_ h: Handlers, db: Database, settings: Settings, relay: @escaping () -> Void = {}) {
        let limits = settings.limits
        // In the store: every worker counts the same failures.
        let throttle = LoginThrottle(db: db, limits: limits)
        let budget = HashBudget(msPerSecond: limits.hashMsPerSecond)
        let hashed = HashedMutation(handlers: h, db: db, relay: relay)

        typealias C = Contract.Accounts
        // The contract checks every field's type, length and pattern before
        // a handler runs (the email's form, the password's length, the
        // semester, the categories); ``Validation`` keeps what it cannot say.
        hashed.register(C.register, reveal: { req, registered in
            // Never in the stored reply: derived again for a retry.
            var r = registered
            r.refreshToken = try RefreshTokens.reveal(db, C.Session(token: r.token, user: r.user, role: r.role, expiresAt: r.expiresAt),
                                                      requestID: req.id, settings: settings).refreshToken
            return r
        }, prepare: { req, body in
            // Stored lowercased: one account per address, whatever its case.
            let email = body.email.lowercased()
            let name = try Validation.name(body.name)
            let (semester, categories) = (body.semester, body.categories ?? [])
            let hash = try budget.spend("accounts.register") { try PasswordHash.hash(body.password, strength: settings.hashing) }
            return { () throws -> C.Registered in
                let id = MessageID.make()
                let now = Int64(Clock.nowMillis())
                // The unique email decides, inside the store: no read-then-write.
                guard let row = try db.queryOne("""
                    INSERT INTO users (id, email, password_hash, name, semester, categories, role, created_ms, updated_ms)
                    VALUES ($1, $2, $3, $4, $5, $6, 'student', $7, $7)
                    ON CONFLICT (email) DO NOTHING RETURNING *
                    """, .text(id), .text(email), .text(hash), .text(name), .int(semester), .text(categoriesText(categories)), .int(now))
                else { throw QuadError.conflict("an account with email '\(email)' already exists", details: ["field": "email"]) }
                let made = profile(row)
                try Outbox.append(db, type: C.userRegistered.type, body: C.PublicProfile(made).json)
                // The profile and a session, as a login would answer: a new
                // account needs no second Argon2id hash (a login's verify)
                // before its first request. A retry under the same id gets
                // this same reply, token included, from the idempotency record.
                let (session, jti) = issueSession(user: id, role: "student", settings: settings)
                try RefreshTokens.issue(db, user: id, family: nil, requestID: req.id, sessionJTI: jti, settings: settings)
                return C.Registered(profile: made, session: session)
            }
        })

        h.query(Contract.Accounts.login) { req, body in
            let (rawEmail, password) = (body.email, body.password)
            let refused = QuadError.unauthorized("wrong email or password")
            guard rawEmail.utf8.count <= maxEmailLength, password.unicodeScalars.count <= maxPasswordLength else { throw refused }
            let account = rawEmail.lowercased()
            // A service signing someone in (the dashboard's sign-in page)
            // speaks for many clients, and throttles them per address
            // itself: a stranger must not lock every admin out through it.
            let caller = req.envelope.caller ?? "src:\(req.envelope.src ?? "")"
            let client: String? = caller.hasPrefix("service:") ? nil : caller
            // The client first: a guesser waits on its own key before it can
            // make an account wait. Counted as failures before the check.
            let accountKey = throttle.account(account)
            let ticket = try throttle.attempt((client.map { [throttle.client($0)] } ?? []) + [accountKey])
            let row = try db.queryOne("SELECT id, role, password_hash FROM users WHERE email = $1", .text(account))
            let matches: Bool
            do {
                matches = try budget.spend("accounts.login") { PasswordHash.verify(password, hash: row?.string("password_hash") ?? settings.decoyHash) }
            } catch {
                throttle.withdraw(ticket)  // nothing was checked
                throw error
            }
            guard let row, matches else { throw refused }
            // The client's count stays (less this attempt): one success must
            // not buy a credential-stuffing client a fresh budget for other accounts.
            throttle.succeeded(ticket, forgetting: [accountKey])
            // The one write of a login: the refresh token of a new family
            // (a login is a query: a retry makes another, bounded per user).
            let user = row.string("id")
            let (session, jti) = issueSession(user: user, role: row.string("role"), settings: settings)
            try db.transaction { try RefreshTokens.issue(db, user: user, family: nil, requestID: req.id, sessionJTI: jti, settings: settings) }
            return try RefreshTokens.reveal(db, session, requestID: req.id, settings: settings)
        }

        h.query(C.profileGet) { req, body in
            let user = try ownUser(req, named: body.user)
            guard let row = try db.queryOne("SELECT * FROM users WHERE id = $1", .text(user)) else {
                throw QuadError.notFound("no account for user '\(user)'")
            }
            return profile(row)
        }

        // The contract requires one of name, semester, categories or
        // password, and current_password with a password.
        hashed.register(C.profileUpdate, authorize: { req, body in _ = try ownUser(req, named: body.user) }, prepare: { req, body in
            let type = C.profileUpdate.type
            let user = try ownUser(req, named: body.user)
            let name = try body.name.map { s throws(QuadError) in try Validation.name(s) }
            let (semester, categories, newPassword) = (body.semester, body.categories, body.password)
            // The password check and the new hash, before the transaction:
            // the write lock is never held across an Argon2id hash. The
            // UPDATE below applies the new hash only if the hash it was
            // checked against is still the stored one.
            var newHash: (old: String, new: String)?
            if let newPassword {
                guard let old = body.currentPassword else {
                    throw QuadError.badRequest("body.current_password is required to change body.password")
                }
                guard let current = try db.queryOne("SELECT password_hash FROM users WHERE id = $1", .text(user)) else {
                    throw QuadError.notFound("no account for user '\(user)'")
                }
                // A stolen token must not buy unthrottled guesses at the
                // current password: its failures count like failed logins.
                let guesser = throttle.currentPassword(user)
                let ticket = try throttle.attempt([guesser])
                let stored = current.string("password_hash")
                let matches: Bool
                do { matches = try budget.spend(type, { PasswordHash.verify(old, hash: stored) }) } catch {
                    throttle.withdraw(ticket)
                    throw error
                }
                guard matches else { throw QuadError.forbidden("body.current_password is not this account's password") }
                throttle.succeeded(ticket, forgetting: [guesser])
                newHash = (stored, try budget.spend(type) { try PasswordHash.hash(newPassword, strength: settings.hashing) })
            }
            let categoriesText = categories.map(categoriesText)
            return { () throws -> C.Profile in
                let now = Int64(Clock.nowMillis())
                guard let row = try db.queryOne("""
                    UPDATE users SET name = COALESCE($2, name), semester = COALESCE($3, semester), categories = COALESCE($4, categories),
                        password_hash = COALESCE($5, password_hash), updated_ms = $6
                    WHERE id = $1 AND password_hash = COALESCE($7, password_hash) RETURNING *
                    """, .text(user), .of(name), .of(semester), .of(categoriesText), .of(newHash?.new), .int(now), .of(newHash?.old))
                else {
                    guard try db.queryOne("SELECT id FROM users WHERE id = $1", .text(user)) != nil else {
                        throw QuadError.notFound("no account for user '\(user)'")
                    }
                    throw QuadError.conflict("the password was changed by another request meanwhile: send body.current_password again")
                }
                if newHash != nil {
                    // Every session signed before the change ends.
                    try Sessions.revoke(db, user: user, jti: nil, before: now, until: now + maxTokenTTLSeconds * 1000)
                    try RefreshTokens.revoke(db, user: user)
                }
                let changed = profile(row)
                if name != nil || semester != nil || categories != nil {
                    try Outbox.append(db, type: C.userUpdated.type, body: C.PublicProfile(changed).json)
                }
                return changed
            }
        })

        Sessions.register(h, db: db, settings: settings, relay: relay)

        let jwk = settings.signingKey.verifyingKey
        h.query(Contract.Accounts.jwks) { _, _ in
            Contract.Accounts.JWKSet(keys: [.init(x: Base64URL.encode(jwk.bytes), kid: jwk.keyID)])
        }
    }

    static func throttled(_ who: String, wait: Int64, limit: String) -> QuadError {
        .tooManyRequests("too many failed logins for \(who): retry in \(wait) ms (\(limit))",
                         details: ["retry_after_ms": .int(wait), "limit": .string(limit)])
    }

    /// A new session token for `user`, as accounts.login and accounts.refresh
    /// answer (without its refresh token), and its jti.
    static func issueSession(user: String, role: String, settings: Settings) -> (Contract.Accounts.Session, String) {
        let now = Int64(Clock.nowMillis())
        // exp travels in whole seconds: expires_at says the same instant, and
        // the jti carries iat's millisecond (see TokenClaims).
        let expires = (now + settings.tokenTTLMillis + 999) / 1000 * 1000
        let claims = TokenClaims(user: user, role: role, expiresAt: expires, issuedAt: now, tokenID: MessageID.make(now: UInt64(now)))
        return (Contract.Accounts.Session(token: settings.signingKey.sign(claims), user: claims.user, role: claims.role, expiresAt: claims.expiresAt),
                claims.tokenID)
    }

    /// The signed-in user; 403 when the body names another one: a profile is
    /// always one's own.
    static func ownUser(_ req: Request, named other: String?) throws(QuadError) -> String {
        let user = try req.requireUser()
        if let other, other != user {
            throw .forbidden("\(req.envelope.type) is only for the signed-in user's own profile")
        }
        return user
    }

    /// What ``ensureAdmin`` did.
    public enum AdminOutcome: String, Sendable {
        case created
        /// An existing account became admin; its sessions (signed as
        /// another role) ended.
        case promoted
        /// It was admin already: nothing changed, its password least of all.
        case unchanged = "already admin (password kept)"
    }

    /// Creates the admin account with `password` once; later starts never
    /// reset its password (a changed password stays changed). An existing
    /// account that is not admin becomes admin, and every token it held
    /// ends: a role change revokes the tokens signed with the old role.
    @discardableResult
    public static func ensureAdmin(_ db: Database, email: String, password: String, hashing: PasswordHash.Strength) throws -> AdminOutcome {
        // Hashed before the transaction, like every hash here.
        let hash = try PasswordHash.hash(password, strength: hashing)
        let id = MessageID.make()
        let now = Int64(Clock.nowMillis())
        return try SQLiteDatabase.retryingBusy(forMs: 10_000) {
            try db.transaction {
                if try db.queryOne("""
                    INSERT INTO users (id, email, password_hash, name, semester, categories, role, created_ms, updated_ms)
                    VALUES ($1, $2, $3, 'Administrator', NULL, '[]', 'admin', $4, $4)
                    ON CONFLICT (email) DO NOTHING RETURNING id
                    """, .text(id), .text(email), .text(hash), .int(now)) != nil {
                    let admin = Contract.Accounts.PublicProfile(user: id, name: "Administrator", semester: nil, categories: [])
                    try Outbox.append(db, type: Contract.Accounts.userRegistered.type, body: admin.json)
                    return .created
                }
                guard let promoted = try db.queryOne("""
                    UPDATE users SET role = 'admin', updated_ms = $2 WHERE email = $1 AND role <> 'admin' RETURNING id
                    """, .text(email), .int(now)) else { return .unchanged }
                try Sessions.revoke(db, user: promoted.string("id"), jti: nil, before: now, until: now + maxTokenTTLSeconds * 1000)
                try RefreshTokens.revoke(db, user: promoted.string("id"))
                return .promoted
            }
        }
    }

    /// A user's profile as the API shows it: never the password hash.
    static func profile(_ r: Row) -> Contract.Accounts.Profile {
        var p = Contract.Accounts.Profile()
        (p.user, p.email, p.name, p.role) = (r.string("id"), r.string("email"), r.string("name"), r.string("role"))
        p.semester = r["semester"].isNull ? nil : r.int("semester")
        // Written by categoriesText: a JSON array of category names.
        p.categories = ((try? JSON.parse(r.string("categories")))?.array ?? []).compactMap(\.string)
        (p.createdAt, p.updatedAt) = (r.int("created_ms"), r.int("updated_ms"))
        return p
    }

    /// Categories as the users table keeps them: a JSON array.
    static func categoriesText(_ categories: [String]) -> String { JSON.array(categories.map { .string($0) }).text }
}
