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

    /// accounts.login: who signs in, and the password.
    public struct LoginRequest: Body {
        public var email = ""
        public var password = ""
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.email, "email", .string(min: 1)),
            .field(\.password, "password", .string(min: 1)),
        ]
    }

    /// A session token and what it says, as accounts.login and accounts.refresh answer.
    public struct Session: Body {
        public var token = ""
        public var user = ""
        public var role = ""
        public var expiresAt: Int64 = 0
        public init() {}
        public init(token: String, user: String, role: String, expiresAt: Int64) {
            (self.token, self.user, self.role, self.expiresAt) = (token, user, role, expiresAt)
        }
        public static let fields: [Field<Self>] = [
            .field(\.token, "token", .string(max: 4096, pattern: "^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]{86}$")),
            .field(\.user, "user", .ref("profile.schema.json#/$defs/user")),
            .field(\.role, "role", .ref("profile.schema.json#/$defs/role")),
            .field(\.expiresAt, "expires_at", .int(min: 0)
                .described("ms since the Unix epoch.")),
        ]
    }

    public static let login = TypedOperation<LoginRequest, Session>(
        "accounts.login", .query, auth: .none,
        request: LoginRequest.shape
            .described("Checks the password and returns a session token. unauthorized (401) 'wrong email or password', the same for an unknown email and a wrong password. A query: nothing is written. Send it without a token (a stale token would be refused by the broker first)."),
        reply: Session.shape
            .described("A session token to send in the envelope's token field. It is base64url(payload) '.' base64url(Ed25519 signature over the first part), payload {sub, role, exp, iat, jti} with times in ms; the broker checks it with accounts' public key and refuses it with 401 once expires_at passes (1 h by default, --token-ttl-seconds; accounts.refresh trades it for a new one; a revoked token is refused with 401 too)."))

    public static let logout = Operation(
        "accounts.logout", .mutation, auth: .user,
        request: .object([
            "token": .string(1...4096)
                .described("A session token, as accounts.login returns it."),
            "all": .bool.optional,
        ])
            .described("Ends the session token given (it must be the signed-in user's own: 400 without it, 403 for another user's, 401 for a forged one), or with all, every session of that user. A mutation: accounts publishes accounts.session.revoked and every broker refuses the token within a second."),
        reply: .object([
            "user": .ref("profile.schema.json#/$defs/user"),
            "jti": .string(max: 64).nullable
                .described("The one token ended, or null when before_ms ends every token of the user."),
            "before_ms": .int(min: 0).nullable
                .described("Every token of the user issued before this instant (ms since the epoch) is ended; null for one token."),
            "until_ms": .int(min: 0)
                .described("When every token it ends has expired, so the entry can be forgotten (ms since the epoch)."),
        ])
            .described("The revocation, as the event says it."))

    public static let profileGet = Operation(
        "accounts.profile.get", .query, auth: .user,
        request: .object([
            "user": .string()
                .described("Optional; must be the caller's own id.").optional,
        ])
            .described("The signed-in user's own profile. unauthorized (401) without a token; forbidden (403) when body.user names another user: a profile is only ever one's own."),
        reply: .ref("profile.schema.json#/$defs/profile")
            .described("The caller's profile."))

    public static let profileUpdate = Operation(
        "accounts.profile.update", .mutation, auth: .user,
        request: .object([
            "user": .string()
                .described("Optional; must be the caller's own id.").optional,
            "name": .ref("profile.schema.json#/$defs/name").optional,
            "semester": .ref("profile.schema.json#/$defs/semester").optional,
            "categories": .ref("profile.schema.json#/$defs/categories").optional,
            "password": .ref("profile.schema.json#/$defs/password").optional,
            "current_password": .string(min: 1).optional,
        ])
            .described("Changes the signed-in user's own name, semester, categories or password (a mutation: idempotent by envelope id). At least one of them; email and role cannot change. A new password needs current_password (forbidden, 403, when it does not match). forbidden (403) when body.user names another user. Publishes accounts.user.updated when name, semester or categories change.")
            .keyword("anyOf", [
                .any.keyword("required", json: ["name"]),
                .any.keyword("required", json: ["semester"]),
                .any.keyword("required", json: ["categories"]),
                .any.keyword("required", json: ["password"]),
            ]).keyword("dependentRequired", json: ["password": ["current_password"]]),
        reply: .ref("profile.schema.json#/$defs/profile")
            .described("The profile after the change."))

    /// accounts.refresh: the token to trade.
    public struct RefreshRequest: Body {
        public var token = ""
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.token, "token", .string(1...4096)
                .described("A session token, as accounts.login returns it.")),
        ]
    }

    public static let refresh = TypedOperation<RefreshRequest, Session>(
        "accounts.refresh", .mutation, auth: .user,
        request: RefreshRequest.shape
            .described("Trades a valid session token of the signed-in user for a new one and ends the old (401 for an expired or revoked token). A retry under the same id gets the same new token."),
        reply: .ref("login.reply.json")
            .described("A new session, as accounts.login answers."))

    public static let register = Operation(
        "accounts.register", .mutation, auth: .none,
        request: .object([
            "email": .ref("profile.schema.json#/$defs/email"),
            "password": .ref("profile.schema.json#/$defs/password"),
            "name": .ref("profile.schema.json#/$defs/name"),
            "semester": .ref("profile.schema.json#/$defs/semester"),
            "categories": .ref("profile.schema.json#/$defs/categories").optional,
        ])
            .described("Creates a student account (a mutation: idempotent by envelope id). bad_request (400) naming the field and its limit; conflict (409) when an account has this email, in any case. Publishes accounts.user.registered (without the email). Needs no token."),
        reply: .object([
            "user": .ref("profile.schema.json#/$defs/user"),
            "email": .ref("profile.schema.json#/$defs/email"),
            "name": .ref("profile.schema.json#/$defs/name"),
            "semester": .ref("profile.schema.json#/$defs/profile/properties/semester"),
            "categories": .ref("profile.schema.json#/$defs/categories"),
            "role": .ref("profile.schema.json#/$defs/role"),
            "created_at": .int(min: 0)
                .described("ms since the Unix epoch."),
            "updated_at": .int(min: 0)
                .described("ms since the Unix epoch."),
            "token": .ref("login.reply.json#/properties/token"),
            "expires_at": .int(min: 0)
                .described("ms since the Unix epoch."),
        ])
            .described("The new account's profile (role student) and a session, as accounts.login answers: token and expires_at (user and role are the profile's). A phone that registers never logs in; before expires_at it renews the token with accounts.refresh. A retry under the same envelope id gets this same reply."))

    public static let revocations = Operation(
        "accounts.revocations", .query, auth: .service,
        request: .object()
            .described("For Quad's services (the broker asks it at start and every 10 s) and admins: every revocation still in force."),
        reply: .object([
            "revocations": .array(of: .object([
                    "user": .ref("profile.schema.json#/$defs/user"),
                    "jti": .string(max: 64).nullable
                        .described("The one token ended, or null when before_ms ends every token of the user."),
                    "before_ms": .int(min: 0).nullable
                        .described("Every token of the user issued before this instant (ms since the epoch) is ended; null for one token."),
                    "until_ms": .int(min: 0)
                        .described("When every token it ends has expired, so the entry can be forgotten (ms since the epoch)."),
                ])),
        ]))

    public static let sessionRevoked = Event("accounts.session.revoked", body: .object([
            "user": .ref("profile.schema.json#/$defs/user"),
            "jti": .string(max: 64).nullable
                .described("The one token ended, or null when before_ms ends every token of the user."),
            "before_ms": .int(min: 0).nullable
                .described("Every token of the user issued before this instant (ms since the epoch) is ended; null for one token."),
            "until_ms": .int(min: 0)
                .described("When every token it ends has expired, so the entry can be forgotten (ms since the epoch)."),
        ])
            .described("A session or every earlier session of a user ended (logout, refresh, a password or role change). Brokers apply it as they relay it."))

    public static let userRegistered = Event("accounts.user.registered", body: .object([
            "user": .ref("profile.schema.json#/$defs/user"),
            "name": .ref("profile.schema.json#/$defs/name"),
            "semester": .oneOf([
                .ref("profile.schema.json#/$defs/semester"),
                .null,
            ])
                .described("null only for the admin account made with --admin."),
            "categories": .ref("profile.schema.json#/$defs/categories"),
        ])
            .described("An account was created (by accounts.register, or the admin account by --admin). No email, no password: events go to every subscriber."))

    public static let userUpdated = Event("accounts.user.updated", body: .object([
            "user": .ref("profile.schema.json#/$defs/user"),
            "name": .ref("profile.schema.json#/$defs/name"),
            "semester": .oneOf([
                .ref("profile.schema.json#/$defs/semester"),
                .null,
            ])
                .described("null only for the admin account made with --admin."),
            "categories": .ref("profile.schema.json#/$defs/categories"),
        ])
            .described("An account's name, semester or categories changed: the values after the change. No email, no password."))

    public static let profileSchema = Definition("accounts/profile.schema.json", title: "accounts: shared definitions", .any
            .described("The fields of an account as requests, replies and events carry them, with their limits.")
            .definitions([
                "user": .string(pattern: "^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
                    .described("A user id: a UUIDv7 made at registration. The broker puts it in the envelope's user."),
                "email": .string(3...maxEmailLength, pattern: "^(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$").limit("max_email_length").expecting("must be one address like name@campus.edu")
                    .described("An address local@domain, at most 254 characters (max_email_length), at most 64 before the @; compared and stored lowercased, so it is unique whatever its case."),
                "password": .string(minPasswordLength...maxPasswordLength).limit("max_password_length").minLimit("min_password_length")
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
                "profile": .object([
                    "user": .ref("#/$defs/user"),
                    "email": .ref("#/$defs/email"),
                    "name": .ref("#/$defs/name"),
                    "semester": .oneOf([
                        .ref("#/$defs/semester"),
                        .null,
                    ])
                        .described("null only for an admin account made with --admin."),
                    "categories": .ref("#/$defs/categories"),
                    "role": .ref("#/$defs/role"),
                    "created_at": .int(min: 0)
                        .described("ms since the Unix epoch."),
                    "updated_at": .int(min: 0)
                        .described("ms since the Unix epoch."),
                ])
                    .described("An account as its owner sees it. Never the password or its hash."),
            ]))

    public static let operations: [Operation] = [login.operation, logout, profileGet, profileUpdate, refresh.operation, register, revocations]
    public static let events: [Event] = [sessionRevoked, userRegistered, userUpdated]
    public static let definitions: [Definition] = [profileSchema]
}
