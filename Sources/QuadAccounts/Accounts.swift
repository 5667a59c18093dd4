import QuadAuth
import QuadRuntime
import QuadStore
import QuadWire

/// The accounts service: students register and log in; a login returns a
/// session token signed with accounts' Ed25519 key, which the broker checks
/// on every request from outside without calling accounts. Passwords are
/// stored only as Argon2id hashes. Events carry no email and no password.
public enum Accounts: ServiceDomain {
    public static let name = "accounts"
    public static let summary = "registration, login with signed session tokens, profiles"

    /// UniTrade's categories, the choices for a profile's preferences.
    public static let categories = ["Study", "Tech", "Creative", "Lab", "Personal", "Others"]
    /// Longest email address (`max_email_length`, RFC 5321's path limit).
    public static let maxEmailLength = 254
    /// Longest part before the `@`.
    public static let maxEmailLocalLength = 64
    /// Password length bounds in Unicode code points (`min_password_length`, `max_password_length`).
    public static let minPasswordLength = 8
    public static let maxPasswordLength = 128
    /// Longest display name in code points, after trimming spaces (`max_name_length`).
    public static let maxNameLength = 100
    /// A student's semester of study: an integer, 1 for the first semester.
    public static let semesters: ClosedRange<Int64> = 1...12
    /// Token lifetime bounds, in seconds.
    public static let defaultTokenTTLSeconds: Int64 = 86_400
    public static let maxTokenTTLSeconds: Int64 = 30 * 86_400

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
    ]

    public static var options: [(String, String, String?)] {
        [
            ("token-ttl-seconds", "lifetime of a session token (1 to \(maxTokenTTLSeconds))", String(defaultTokenTTLSeconds)),
            ("signing-key", "Ed25519 secret key file, created (0600) when missing; its public key is written beside it as .pub",
             KeyFiles.defaultSecretKeyPath()),
            ("admin", "EMAIL:PASSWORD of an admin account to create at start, or to promote (and set its password) if it exists", nil),
            ("password-hashing", "Argon2id cost: interactive (libsodium's OPSLIMIT/MEMLIMIT_INTERACTIVE), moderate, or minimum (tests only)",
             PasswordHash.Strength.interactive.rawValue),
        ]
    }

    /// What the handlers need besides the store.
    public struct Settings: Sendable {
        public var signingKey: SigningKey
        public var tokenTTLMillis: Int64
        public var hashing: PasswordHash.Strength
        /// An Argon2id hash of no password anyone has: a login with an
        /// unknown email verifies against it, so it costs what a wrong
        /// password costs and the timing does not tell which emails exist.
        let decoyHash: String

        public init(signingKey: SigningKey, tokenTTLMillis: Int64 = Accounts.defaultTokenTTLSeconds * 1000,
                    hashing: PasswordHash.Strength = .interactive) throws {
            self.signingKey = signingKey
            self.tokenTTLMillis = tokenTTLMillis
            self.hashing = hashing
            decoyHash = try PasswordHash.hash(MessageID.make(), strength: hashing)
        }
    }

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let ttl = Int64(options["token-ttl-seconds"] ?? "") ?? -1
        guard (1...maxTokenTTLSeconds).contains(ttl) else {
            Flags.usageError("--token-ttl-seconds must be an integer from 1 to \(maxTokenTTLSeconds)", usage: "Try: quad-accounts --help")
        }
        guard let hashing = PasswordHash.Strength(rawValue: options["password-hashing"] ?? "") else {
            Flags.usageError("--password-hashing must be one of \(PasswordHash.Strength.allCases.map(\.rawValue).joined(separator: ", "))",
                             usage: "Try: quad-accounts --help")
        }
        var admin: (email: String, password: String)?
        if let spec = options["admin"], !spec.isEmpty {
            guard let colon = spec.firstIndex(of: ":") else { Flags.usageError("--admin must be EMAIL:PASSWORD", usage: "Try: quad-accounts --help") }
            do {
                admin = (try Validation.email(String(spec[..<colon])), try Validation.password(String(spec[spec.index(after: colon)...])))
            } catch {
                Flags.usageError("--admin: \(error.message.replacingOccurrences(of: "body.", with: ""))", usage: "Try: quad-accounts --help")
            }
        }
        let keyPath = options["signing-key"] ?? KeyFiles.defaultSecretKeyPath()
        let (key, created) = try KeyFiles.loadOrCreateSigningKey(at: keyPath)
        Log.info(worker.handlers.instance, "\(created ? "created" : "loaded") signing key \(keyPath), public key \(KeyFiles.publicKeyPath(forSecretKey: keyPath))")
        let settings = try Settings(signingKey: key, tokenTTLMillis: ttl * 1000, hashing: hashing)
        if let admin {
            let made = try ensureAdmin(db, email: admin.email, password: admin.password, hashing: hashing)
            Log.info(worker.handlers.instance, "admin account \(admin.email) \(made ? "created" : "promoted")")
        }
        register(worker.handlers, db: db, settings: settings)
    }

    /// Registers the handlers; split from ``install`` so tests can drive
    /// them without a broker.
    public static func register(_ h: Handlers, db: Database, settings: Settings) {
        h.mutation("accounts.register") { req in
            let type = "accounts.register"
            try Validation.onlyFields(req.body, ["email", "password", "name", "semester", "categories"], type: type)
            let email = try Validation.email(try Validation.required(Validation.string(req.body, "email"), "email"))
            let password = try Validation.password(try Validation.required(Validation.string(req.body, "password"), "password"))
            let name = try Validation.name(try Validation.required(Validation.string(req.body, "name"), "name"))
            let semester = try Validation.required(Validation.semester(req.body), "semester")
            let categories = try Validation.categories(req.body) ?? []
            let hash = try PasswordHash.hash(password, strength: settings.hashing)
            let id = MessageID.make()
            let now = Int64(Clock.nowMillis())
            // The unique email decides, inside the store: no read-then-write.
            guard let row = try db.queryOne("""
                INSERT INTO users (id, email, password_hash, name, semester, categories, role, created_ms, updated_ms)
                VALUES ($1, $2, $3, $4, $5, $6, 'student', $7, $7)
                ON CONFLICT (email) DO NOTHING RETURNING *
                """, .text(id), .text(email), .text(hash), .text(name), .int(semester), .text(JSON.array(categories.map { .string($0) }).text), .int(now))
            else { throw QuadError.conflict("an account with email '\(email)' already exists", details: ["field": "email"]) }
            try Outbox.append(db, type: "accounts.user.registered", body: [
                "user": .string(id), "name": .string(name), "semester": .int(semester), "categories": .array(categories.map { .string($0) }),
            ])
            return profile(row)
        }

        h.query("accounts.login") { req in
            try Validation.onlyFields(req.body, ["email", "password"], type: "accounts.login")
            let rawEmail = try Validation.required(Validation.string(req.body, "email"), "email")
            let password = try Validation.required(Validation.string(req.body, "password"), "password")
            let refused = QuadError.unauthorized("wrong email or password")
            guard rawEmail.utf8.count <= maxEmailLength, password.unicodeScalars.count <= maxPasswordLength else { throw refused }
            let row = try db.queryOne("SELECT id, role, password_hash FROM users WHERE email = $1", .text(rawEmail.lowercased()))
            let matches = PasswordHash.verify(password, hash: row?.string("password_hash") ?? settings.decoyHash)
            guard let row, matches else { throw refused }
            let now = Int64(Clock.nowMillis())
            let claims = TokenClaims(user: row.string("id"), role: row.string("role"), expiresAt: now + settings.tokenTTLMillis, issuedAt: now)
            return [
                "token": .string(settings.signingKey.sign(claims)), "user": .string(claims.user),
                "role": .string(claims.role), "expires_at": .int(claims.expiresAt),
            ]
        }

        h.query("accounts.profile.get") { req in
            let user = try ownUser(req)
            try Validation.onlyFields(req.body, ["user"], type: "accounts.profile.get")
            guard let row = try db.queryOne("SELECT * FROM users WHERE id = $1", .text(user)) else {
                throw QuadError.notFound("no account for user '\(user)'")
            }
            return profile(row)
        }

        h.mutation("accounts.profile.update") { req in
            let type = "accounts.profile.update"
            let user = try ownUser(req)
            try Validation.onlyFields(req.body, ["user", "name", "semester", "categories", "password", "current_password"], type: type)
            let name = try Validation.string(req.body, "name").map { s throws(QuadError) in try Validation.name(s) }
            let semester = try Validation.semester(req.body)
            let categories = try Validation.categories(req.body)
            let newPassword = try Validation.string(req.body, "password").map { s throws(QuadError) in try Validation.password(s) }
            guard name != nil || semester != nil || categories != nil || newPassword != nil else {
                throw QuadError.badRequest("\(type) needs at least one of body.name, body.semester, body.categories, body.password")
            }
            guard let current = try db.queryOne("SELECT * FROM users WHERE id = $1", .text(user)) else {
                throw QuadError.notFound("no account for user '\(user)'")
            }
            var hash = current.string("password_hash")
            if let newPassword {
                guard let old = try Validation.string(req.body, "current_password") else {
                    throw QuadError.badRequest("body.current_password is required to change body.password")
                }
                guard PasswordHash.verify(old, hash: hash) else { throw QuadError.forbidden("body.current_password is not this account's password") }
                hash = try PasswordHash.hash(newPassword, strength: settings.hashing)
            }
            let categoriesText = categories.map { JSON.array($0.map { .string($0) }).text }
            guard let row = try db.queryOne("""
                UPDATE users SET name = COALESCE($2, name), semester = COALESCE($3, semester), categories = COALESCE($4, categories),
                    password_hash = $5, updated_ms = $6
                WHERE id = $1 RETURNING *
                """, .text(user), .of(name), .of(semester), .of(categoriesText), .text(hash), .int(Int64(Clock.nowMillis())))
            else { throw QuadError.notFound("no account for user '\(user)'") }
            if name != nil || semester != nil || categories != nil {
                let p = profile(row)
                try Outbox.append(db, type: "accounts.user.updated", body: [
                    "user": .string(user), "name": p["name"]!, "semester": p["semester"]!, "categories": p["categories"]!,
                ])
            }
            return profile(row)
        }
    }

    /// The signed-in user; 403 when the body names another one: a profile is
    /// always one's own.
    static func ownUser(_ req: Request) throws(QuadError) -> String {
        let user = try req.requireUser()
        if let other = req.body["user"], other.string != user {
            throw .forbidden("\(req.envelope.type) is only for the signed-in user's own profile")
        }
        return user
    }

    /// Creates the admin account, or makes an existing account admin with
    /// this password. Returns true when it created the account.
    @discardableResult
    public static func ensureAdmin(_ db: Database, email: String, password: String, hashing: PasswordHash.Strength) throws -> Bool {
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
                    try Outbox.append(db, type: "accounts.user.registered", body: [
                        "user": .string(id), "name": "Administrator", "semester": .null, "categories": [],
                    ])
                    return true
                }
                try db.execute("UPDATE users SET role = 'admin', password_hash = $2, updated_ms = $3 WHERE email = $1", .text(email), .text(hash), .int(now))
                return false
            }
        }
    }

    /// A user's profile as the API shows it: never the password hash.
    static func profile(_ r: Row) -> JSON {
        [
            "user": .string(r.string("id")), "email": .string(r.string("email")), "name": .string(r.string("name")),
            "semester": r["semester"].isNull ? .null : .int(r.int("semester")),
            "categories": (try? JSON.parse(r.string("categories"))) ?? .array([]),
            "role": .string(r.string("role")), "created_at": .int(r.int("created_ms")), "updated_at": .int(r.int("updated_ms")),
        ]
    }
}
