import QuadWire

extension Contract {
    /// The accounts part of the contract.
    public enum Accounts {}
}

extension Contract.Accounts {
    /// Longest email address (`max_email_length`), password bounds
    /// (`min_password_length`, `max_password_length`) and longest display
    /// name (`max_name_length`), all in Unicode code points.
    public static let maxEmailLength = 254
    public static let minPasswordLength = 8
    public static let maxPasswordLength = 128
    public static let maxNameLength = 100
    /// A refresh token: opaque, `rt1.` and 43 base64url characters (32 bytes).
    public static let refreshTokenPattern = "^rt1\\.[A-Za-z0-9_-]{43}$"

    /// accounts.login: who signs in, and the password.
    public struct LoginRequest: Body {
        public var email = ""
        public var password = ""
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.email, "email", .string(min: 1)),
            .field(\.password, "password", .string(min: 1).secretText),
        ]
    }

    /// A session token and what it says, as accounts.login and accounts.refresh answer.
    public struct Session: Body {
        public var token = ""
        public var user = ""
        public var role = ""
        public var expiresAt: Int64 = 0
        public var refreshToken: String?
        public init() {}
        public init(token: String, user: String, role: String, expiresAt: Int64, refreshToken: String? = nil) {
            (self.token, self.user, self.role, self.expiresAt, self.refreshToken) = (token, user, role, expiresAt, refreshToken)
        }
        public static let fields: [Field<Self>] = [
            .field(\.token, "token", .string(max: 4096, pattern: "^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]{86}$")
                .described("A JWT (RFC 7519): base64url(header) '.' base64url(claims) '.' base64url(Ed25519 signature).")),
            .field(\.user, "user", .ref("profile.schema.json#/$defs/user")),
            .field(\.role, "role", .ref("profile.schema.json#/$defs/role")),
            .field(\.expiresAt, "expires_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
            .field(\.refreshToken, "refresh_token", .string(pattern: refreshTokenPattern)
                .described("An opaque refresh token: accounts.refresh trades it for a new session and a new refresh token, also after the session token expired. Valid for 30 days after it is issued (--refresh-token-ttl-seconds, refresh_token_ttl_seconds) and once: a second use ends every refresh token of its family; a password change, a role change and a logout end them too. accounts keeps only its SHA-256.").optional),
        ]
    }

    public static let login = TypedOperation<LoginRequest, Session>(
        "accounts.login", .query, auth: .none,
        request: LoginRequest.shape
            .described("Checks the password and returns a session token. unauthorized (401) 'wrong email or password', the same for an unknown email and a wrong password. A query: nothing is written but its refresh token's hash (a retry makes another, bounded by max_refresh_tokens_per_user). Send it without a token (a stale token would be refused by the broker first)."),
        reply: Session.shape
            .described("A session token to send in the envelope's token field. It is a JWT signed with EdDSA (Ed25519, RFC 8037): header {alg: EdDSA, typ: JWT, kid}, claims {iss: quad-accounts, aud: quad, sub, role, iat, exp, jti} with iat and exp in seconds; accounts.jwks gives the key to check it with. The broker checks it with accounts' public key and refuses it with 401 once expires_at passes (1 h by default, --token-ttl-seconds; accounts.refresh trades it for a new one; a revoked token is refused with 401 too)."))


    /// accounts.logout: the token to end, or with `all` every session of its user.
    public struct LogoutRequest: Body {
        public var token = ""
        public var all: Bool?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.token, "token", .string(1...4096)
                .described("A session token, as accounts.login returns it.")),
            .field(\.all, "all", .bool.optional),
        ]
    }

    /// One revocation: declared once, for accounts.logout's reply, each
    /// entry of accounts.revocations and the accounts.session.revoked
    /// event, which the broker reads with this type.
    public struct Revocation: Body, Equatable {
        public var user = ""
        public var jti: String?
        public var beforeMs: Int64?
        public var untilMs: Int64 = 0
        public init() {}
        public init(user: String, jti: String?, beforeMs: Int64?, untilMs: Int64) {
            (self.user, self.jti, self.beforeMs, self.untilMs) = (user, jti, beforeMs, untilMs)
        }
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .ref("profile.schema.json#/$defs/user")),
            .field(\.jti, "jti", .string(max: 64).nullable
                .described("The one token ended, or null when before_ms ends every token of the user.")),
            .field(\.beforeMs, "before_ms", .int(min: 0).nullable
                .described("Every token of the user issued before this instant (ms since the epoch) is ended; null for one token.")),
            .field(\.untilMs, "until_ms", .int(min: 0)
                .described("When every token it ends has expired, so the entry can be forgotten (ms since the epoch).")),
        ]
    }

    public static let logout = TypedOperation<LogoutRequest, Revocation>(
        "accounts.logout", .mutation, auth: .user,
        request: LogoutRequest.shape
            .described("Ends the session token given (it must be the signed-in user's own: 400 without it, 403 for another user's, 401 for a forged one), or with all, every session of that user. A mutation: accounts publishes accounts.session.revoked and every broker refuses the token within a second."),
        reply: Revocation.shape
            .described("The revocation, as the event says it."))

    /// accounts.profile.get: nothing, or the caller's own id.
    public struct ProfileGetRequest: Body {
        public var user: String?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .string()
                .described("Optional; must be the caller's own id.").optional),
        ]
    }

    /// An account as its owner sees it (`profile.schema.json#/$defs/profile`):
    /// the reply of accounts.profile.get and accounts.profile.update.
    public struct Profile: Body, Equatable {
        public var user = ""
        public var email = ""
        public var name = ""
        /// nil only for the admin account made with --admin.
        public var semester: Int64?
        public var categories: [String] = []
        public var role = ""
        public var createdAt: Int64 = 0
        public var updatedAt: Int64 = 0
        public init() {}
        /// Its fields' references are relative to the definitions document it is declared in.
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .ref("#/$defs/user")),
            .field(\.email, "email", .ref("#/$defs/email")),
            .field(\.name, "name", .ref("#/$defs/name")),
            .field(\.semester, "semester", .oneOf([
                .ref("#/$defs/semester"),
                .null,
            ])
                .described("null only for an admin account made with --admin.")),
            .field(\.categories, "categories", .ref("#/$defs/categories")),
            .field(\.role, "role", .ref("#/$defs/role")),
            .field(\.createdAt, "created_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
            .field(\.updatedAt, "updated_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
        ]
    }

    public static let profileGet = TypedOperation<ProfileGetRequest, Profile>(
        "accounts.profile.get", .query, auth: .user,
        request: ProfileGetRequest.shape
            .described("The signed-in user's own profile. unauthorized (401) without a token; forbidden (403) when body.user names another user: a profile is only ever one's own."),
        reply: .ref("profile.schema.json#/$defs/profile")
            .described("The caller's profile."))

    /// accounts.profile.update: what changes (at least one of name,
    /// semester, categories, password; the contract says so).
    public struct ProfileUpdateRequest: Body {
        public var user: String?
        public var name: String?
        public var semester: Int64?
        public var categories: [String]?
        public var password: String?
        public var currentPassword: String?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .string()
                .described("Optional; must be the caller's own id.").optional),
            .field(\.name, "name", .ref("profile.schema.json#/$defs/name").optional),
            .field(\.semester, "semester", .ref("profile.schema.json#/$defs/semester").optional),
            .field(\.categories, "categories", .ref("profile.schema.json#/$defs/categories").optional),
            .field(\.password, "password", .ref("profile.schema.json#/$defs/password").optional),
            .field(\.currentPassword, "current_password", .string(min: 1).secretText.optional),
        ]
    }

    public static let profileUpdate = TypedOperation<ProfileUpdateRequest, Profile>(
        "accounts.profile.update", .mutation, auth: .user,
        request: ProfileUpdateRequest.shape
            .described("Changes the signed-in user's own name, semester, categories or password (a mutation: idempotent by envelope id). At least one of them; email and role cannot change. A new password needs current_password (forbidden, 403, when it does not match). forbidden (403) when body.user names another user. Publishes accounts.user.updated when name, semester or categories change.")
            .keyword("anyOf", [
                .any.keyword("required", json: ["name"]),
                .any.keyword("required", json: ["semester"]),
                .any.keyword("required", json: ["categories"]),
                .any.keyword("required", json: ["password"]),
            ]).keyword("dependentRequired", json: ["password": ["current_password"]]),
        reply: .ref("profile.schema.json#/$defs/profile")
            .described("The profile after the change."))

    /// accounts.refresh: the refresh token to trade, or a session token.
    public struct RefreshRequest: Body {
        public var token: String?
        public var refreshToken: String?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.token, "token", .string(1...4096)
                .described("A session token of the signed-in user, as accounts.login returns it.").optional),
            .field(\.refreshToken, "refresh_token", .ref("login.reply.json#/properties/refresh_token").optional),
        ]
    }

    public static let refresh = TypedOperation<RefreshRequest, Session>(
        "accounts.refresh", .mutation, auth: .none,
        request: RefreshRequest.shape
            .described("A new session and a new refresh token. With refresh_token (no envelope token needed: the session token may have expired): the refresh token is used up (401 when it is unknown, expired, revoked or used already; a second use ends its whole family). With token: a valid session token of the signed-in user (401 for an expired or revoked one, 401 without a signed-in user), which ends. A retry under the same id gets the same new refresh token (and a session token for it).")
            .keyword("oneOf", [
                .any.keyword("required", json: ["token"]),
                .any.keyword("required", json: ["refresh_token"]),
            ]),
        reply: .ref("login.reply.json")
            .described("A new session, as accounts.login answers, with its refresh_token."))


    /// accounts.register: the new account.
    public struct RegisterRequest: Body {
        public var email = ""
        public var password = ""
        public var name = ""
        public var semester: Int64 = 0
        public var categories: [String]?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.email, "email", .ref("profile.schema.json#/$defs/email")),
            .field(\.password, "password", .ref("profile.schema.json#/$defs/password")),
            .field(\.name, "name", .ref("profile.schema.json#/$defs/name")),
            .field(\.semester, "semester", .ref("profile.schema.json#/$defs/semester")),
            .field(\.categories, "categories", .ref("profile.schema.json#/$defs/categories").optional),
        ]
    }

    /// accounts.register's reply: the profile, and the session's token and
    /// expires_at (its user and role are the profile's).
    public struct Registered: Body, Equatable {
        public var user = ""
        public var email = ""
        public var name = ""
        public var semester: Int64?
        public var categories: [String] = []
        public var role = ""
        public var createdAt: Int64 = 0
        public var updatedAt: Int64 = 0
        public var token = ""
        public var expiresAt: Int64 = 0
        public var refreshToken: String?
        public init() {}
        public init(profile p: Profile, session: Session) {
            (user, email, name, semester, categories, role) = (p.user, p.email, p.name, p.semester, p.categories, p.role)
            (createdAt, updatedAt, token, expiresAt, refreshToken) = (p.createdAt, p.updatedAt, session.token, session.expiresAt, session.refreshToken)
        }
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .ref("profile.schema.json#/$defs/user")),
            .field(\.email, "email", .ref("profile.schema.json#/$defs/email")),
            .field(\.name, "name", .ref("profile.schema.json#/$defs/name")),
            .field(\.semester, "semester", .ref("profile.schema.json#/$defs/profile/properties/semester")),
            .field(\.categories, "categories", .ref("profile.schema.json#/$defs/categories")),
            .field(\.role, "role", .ref("profile.schema.json#/$defs/role")),
            .field(\.createdAt, "created_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
            .field(\.updatedAt, "updated_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
            .field(\.token, "token", .ref("login.reply.json#/properties/token")),
            .field(\.expiresAt, "expires_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
            .field(\.refreshToken, "refresh_token", .ref("login.reply.json#/properties/refresh_token").optional),
        ]
    }

    public static let register = TypedOperation<RegisterRequest, Registered>(
        "accounts.register", .mutation, auth: .none,
        request: RegisterRequest.shape
            .described("Creates a student account (a mutation: idempotent by envelope id). bad_request (400) naming the field and its limit; conflict (409) when an account has this email, in any case. Publishes accounts.user.registered (without the email). Needs no token."),
        reply: Registered.shape
            .described("The new account's profile (role student) and a session, as accounts.login answers: token and expires_at (user and role are the profile's). A phone that registers never logs in; before expires_at it renews the token with accounts.refresh. A retry under the same envelope id gets this same reply."))

    /// One public key as a JWK (RFC 7517, RFC 8037 §2).
    public struct JWK: Body, Equatable {
        public var kty = "OKP"
        public var crv = "Ed25519"
        public var x = ""
        public var kid = ""
        public var alg = "EdDSA"
        public var use = "sig"
        public init() {}
        public init(x: String, kid: String) { (self.x, self.kid) = (x, kid) }
        public static let fields: [Field<Self>] = [
            .field(\.kty, "kty", .choice(["OKP"])),
            .field(\.crv, "crv", .choice(["Ed25519"])),
            .field(\.x, "x", .string(pattern: "^[A-Za-z0-9_-]{43}$")
                .described("The 32-byte Ed25519 public key, base64url without padding.")),
            .field(\.kid, "kid", .string(pattern: "^[A-Za-z0-9_-]{43}$")
                .described("The key's RFC 7638 JWK thumbprint (base64url SHA-256): the kid in the header of every token it signs.")),
            .field(\.alg, "alg", .choice(["EdDSA"])),
            .field(\.use, "use", .choice(["sig"])),
        ]
    }

    /// accounts.jwks: the keys session tokens are signed with.
    public struct JWKSet: Body, Equatable {
        public var keys: [JWK] = []
        public init() {}
        public init(keys: [JWK]) { self.keys = keys }
        public static let fields: [Field<Self>] = [.field(\.keys, "keys", .array(of: JWK.shape))]
    }

    public static let jwks = TypedOperation<NoFields, JWKSet>(
        "accounts.jwks", .query, auth: .none,
        request: NoFields.shape
            .described("For anyone (no token needed): the public keys that verify session tokens, as a JWK Set (RFC 7517 §5), so a foreign service checks a token with any JWT library (alg EdDSA, aud quad, iss quad-accounts) without calling accounts again."),
        reply: JWKSet.shape
            .described("{keys: [{kty: OKP, crv: Ed25519, x, kid, alg: EdDSA, use: sig}]}: today one key, accounts' own."))

    /// accounts.revocations: every revocation still in force.
    public struct RevocationList: Body {
        public var revocations: [Revocation] = []
        public init() {}
        public init(revocations: [Revocation]) { self.revocations = revocations }
        public static let fields: [Field<Self>] = [.field(\.revocations, "revocations", .array(of: Revocation.shape))]
    }

    public static let revocations = TypedOperation<NoFields, RevocationList>(
        "accounts.revocations", .query, auth: .service,
        request: NoFields.shape
            .described("For Quad's services (the broker asks it at start and every 10 s) and admins: every revocation still in force."))

    public static let sessionRevoked = TypedEvent<Revocation>("accounts.session.revoked", body: Revocation.shape
            .described("A session or every earlier session of a user ended (logout, refresh, a password or role change). Brokers apply it as they relay it."))

    /// An account as every subscriber may know it: no email, no password.
    /// The body of accounts.user.registered and accounts.user.updated.
    public struct PublicProfile: Body, Equatable {
        public var user = ""
        public var name = ""
        /// nil only for the admin account made with --admin.
        public var semester: Int64?
        public var categories: [String] = []
        public init() {}
        public init(user: String, name: String, semester: Int64?, categories: [String]) {
            (self.user, self.name, self.semester, self.categories) = (user, name, semester, categories)
        }
        public init(_ p: Profile) { self.init(user: p.user, name: p.name, semester: p.semester, categories: p.categories) }
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .ref("profile.schema.json#/$defs/user")),
            .field(\.name, "name", .ref("profile.schema.json#/$defs/name")),
            .field(\.semester, "semester", .oneOf([
                .ref("profile.schema.json#/$defs/semester"),
                .null,
            ])
                .described("null only for the admin account made with --admin.")),
            .field(\.categories, "categories", .ref("profile.schema.json#/$defs/categories")),
        ]
    }

    public static let userRegistered = TypedEvent<PublicProfile>("accounts.user.registered", body: PublicProfile.shape
            .described("An account was created (by accounts.register, or the admin account by --admin). No email, no password: events go to every subscriber."))

    public static let userUpdated = TypedEvent<PublicProfile>("accounts.user.updated", body: PublicProfile.shape
            .described("An account's name, semester or categories changed: the values after the change. No email, no password."))

    public static let profileSchema = Definition("accounts/profile.schema.json", title: "accounts: shared definitions", .any
            .described("The fields of an account as requests, replies and events carry them, with their limits.")
            .definitions([
                "user": .string(pattern: "^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
                    .described("A user id: a UUIDv7 made at registration. The broker puts it in the envelope's user."),
                "email": .string(3...maxEmailLength, pattern: "^(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$").limit("max_email_length").expecting("must be one address like name@campus.edu")
                    .described("An address local@domain, at most 254 characters (max_email_length), at most 64 before the @; compared and stored lowercased, so it is unique whatever its case."),
                "password": .string(minPasswordLength...maxPasswordLength).secretText.limit("max_password_length").minLimit("min_password_length")
                    .described("8 to 128 Unicode code points (min_password_length, max_password_length). Stored only as an Argon2id hash."),
                "name": .string(1...maxNameLength, pattern: "\\S").limit("max_name_length").expecting("must not be empty")
                    .described("Display name: at most 100 code points after trimming spaces (max_name_length), not blank, no control characters."),
                "semester": .int(1...12)
                    .described("The student's semester of study: 1 for the first, up to 12."),
                "category": .choice(["Study", "Tech", "Creative", "Lab", "Personal", "Others"]),
                "categories": .array(of: .ref("#/$defs/category"), max: 6)
                    .described("Preferred categories, in the order of preference, each at most once.").keyword("uniqueItems", json: true),
                "role": .choice(["student", "admin"])
                    .described("student for every registered account; admin for the account made with quad-accounts --admin."),
                "profile": Profile.shape
                    .described("An account as its owner sees it. Never the password or its hash."),
            ]))

    public static let operations: [Operation] = [login.operation, logout.operation, profileGet.operation, profileUpdate.operation,
        refresh.operation, register.operation, revocations.operation, jwks.operation]
    public static let events: [Event] = [sessionRevoked.event, userRegistered.event, userUpdated.event]
    public static let definitions: [Definition] = [profileSchema]
}
