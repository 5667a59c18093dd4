import Foundation
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhoneKit

/// How phones talk to the stack: deadlines, backoff, batch sizes, the ages
/// at which saved copies are too old.
public struct EdgeSettings: Sendable {
    public var frontend: String
    /// The broker's CURVE public key; nil speaks without CURVE.
    public var brokerKey: [UInt8]?
    /// Each attempt of an action waits this long for an answer.
    public var actionTimeoutMs: Int64 = 2_500
    /// A view waits this long for the network before showing its saved copy.
    public var readTimeoutMs: Int64 = 1_500
    public var backoffBaseMs: Int64 = 250
    public var backoffCapMs: Int64 = 8_000
    /// Most queued actions in flight at once (`send_window`), one per
    /// service. 1, the default, keeps a phone's actions in the order they
    /// were made across services too (what the chaos checker holds it to);
    /// more sends different services' actions together, each service's in
    /// order.
    public var sendWindow = 1
    /// How long a phone's outbox stays empty before its file goes back to
    /// the idle journal and sizes (`idle_after_ms`; PhoneStore.open).
    public var idleAfterMs: Int64 = 5_000
    /// Most telemetry events in one `telemetry.ingest`.
    public var telemetryBatch = 100
    /// How often queued telemetry is sent while online (at once when the
    /// network comes back). Every 10 s a 1,000-phone day sent 10k batches
    /// a minute instead of 18k, but a chaos run then ended with a phone's
    /// last event still queued (test_chaos_faults, ci21): 2 s until the end
    /// of a day flushes everything it records.
    public var telemetryEveryMs: Int64 = 2_000
    /// The saved catalog is fetched again after this long.
    public var catalogMaxAgeMs: Int64 = 10 * 60_000
    /// Lots and nearby lots change rarely: saved copy first, for a day.
    public var lotsMaxAgeMs: Int64 = 24 * 3_600_000
    /// The 30-day total says it may be stale after this long without a sync.
    public var staleAfterMs: Int64 = 7 * 86_400_000
    /// A session is renewed with `accounts.refresh` this long before its
    /// token expires (tokens live an hour by default).
    public var refreshBeforeMs: Int64 = 5 * 60_000
    /// A phone signs in when it starts, not at its first action (a campus
    /// day that signs its phones in before the day turns it off).
    public var signInAtStart = true
    /// Each phone's file locked by this process for as long as it runs
    /// (`--file-locking exclusive`, SQLite's locking_mode EXCLUSIVE), or
    /// open to other processes between transactions (`shared`: a harness
    /// that reads or writes the files while the phones run). See
    /// ``PhoneStore/open(_:keychain:students:exclusive:)``.
    public var exclusiveFiles = true
    /// SQL run on each phone's file every time the phone opens it, a new
    /// file included (one made after a damaged file was moved aside),
    /// before the phone uses it (`--file-sql`): a harness's triggers, as
    /// deploy/chaos's history recorder, are then in every file the phone
    /// ever writes, with no moment without them.
    public var fileSQL: String?
    /// The PIN every phone's keychain is locked with (`--keychain-pin-file`);
    /// nil keeps each keychain's key in its key file.
    public var keychainPIN: String?
    /// The phone's image caches (ImageCache.swift): image_cache_files,
    /// image_cache_days, image_memory_entries, image_memory_bytes, max_image_bytes.
    public var images = ImageCacheLimits()
    /// Each phone logs what its views showed and what its actions read and
    /// made, with versions, in its file's `shown` table, for the chaos
    /// checker's session guarantees (`--record-views`; SessionLog.swift);
    /// a campus day then ends with a final read (``CampusDay/finalRead()``).
    public var recordShown = false

    /// The brokers' updates sockets (comma-separated; LiveFeed.swift);
    /// empty: none, the phone polls.
    public var updates: String

    /// The updates sockets default to those beside the frontends.
    public init(frontend: String, updates: String? = nil) {
        self.frontend = frontend
        self.updates = updates ?? Endpoints.list(frontend).compactMap { Endpoints.updates(forFrontend: $0) }.joined(separator: ",")
    }

    var backoff: Backoff { Backoff(baseMs: backoffBaseMs, capMs: backoffCapMs) }
}

/// What the phone answered to an action the user made.
package enum ActOutcome {
    /// Written to the outbox and shown as done, pending: its id.
    case queued(String)
    /// Online only, and online: sent at once; a refusal becomes a message.
    case sent(String)
    /// Refused at once, with the reason; nothing was queued.
    case refused(QuadError)
}

/// One emulated phone: its file, its connection, its outbox sender, its
/// telemetry queue and its views. Everything runs on the edge's one loop;
/// nothing here blocks.
package final class Phone {
    package let name: String
    /// The phone's SQLite file.
    package let file: String
    /// Its connection; a new one when the phone opens its file again after
    /// damage to it (StorageFaults.swift).
    package var db: SQLiteDatabase
    package let link: Link
    let agenda: Timers
    package let settings: EdgeSettings
    var rng: SeededRandom
    /// Who its student is: the semester and categories it registers with,
    /// the habit the campus day follows.
    package let profile: StudentProfile

    // Session. The tokens live in the phone's keychain, never in its file;
    // the password only in its student's memory (``Students``).
    let keychain: Keychain
    let students: Students
    var email = ""
    package var displayName = ""
    var registerID = ""
    var registered = false
    var user: String?
    package var token: String? {
        didSet {
            link.token = token
        }
    }
    /// What renews the session after its token expired (`accounts.refresh`
    /// with `refresh_token`); nil before the first sign-in.
    package var refreshToken: String?
    var expiresAt: Int64 = 0
    var sessionID = MessageID.make()
    package var signingIn = false
    /// Cleared once the day's report is taken: an activity's step that
    /// runs in the loop's last turn then writes no event that nothing
    /// would send.
    package var recording = true
    /// A deliberately broken phone's first copies (SessionFaults.swift).
    var faultFirstShown: [String: JSON] = [:]
    var faultTurn = 0
    var signInWaiters: [(QuadError?) -> Void] = []
    var refreshing = false
    var refreshWaiters: [(QuadError?) -> Void] = []
    /// The id of the `accounts.refresh` not answered yet.
    var refreshID: String?
    var refreshTimer: Int?

    // Radio and reachability.
    package var airplane = false
    /// The scenario's "no signal here" (an underground level): the phone knows, as in airplane mode.
    var signal = true
    /// False after a request went unanswered, true again after any answer.
    var reachable = true
    var offlineSinceMs: Int64?
    var probeTimer: Int?
    var probeAttempt = 0

    // The outbox sender: one state machine, so two triggers never send the same action twice.
    enum SenderState: Equatable {
        case idle
        case signingIn
        /// The ids in flight: at most one per service (``sendable(from:)``).
        case sending(Set<String>)
        case backingOff(Int)
    }
    var sender: SenderState = .idle
    /// Answers of the batch in flight not confirmed yet, and what is left of it.
    var answers: [(QueuedAction, Result<Envelope, LinkFailure>)] = []
    var unanswered = 0
    /// Going back to the idle sizes, once the outbox stays empty (``idleSoon()``).
    var idleTimer: Int?
    /// The confirmation of answers waiting for the rest of their batch, on
    /// the next turn (``settle(_:_:)``).
    var confirmTimer: Int?
    /// The connection's sizes are the drain's (``drainMode(_:)``).
    var draining = false
    /// The statement cache's clock, and when, at the last
    /// ``forgetUnusedStatements(force:)``.
    var statementMark: UInt64 = 0
    var statementsForgotMs: Int64 = 0
    /// The first action of the batch to send again, after a backoff.
    var pendingRetry: (QueuedAction, String, Bool)?
    var authRetries = 0
    /// Failed sign-ins in a row: the sender's backoff for them grows with it.
    var signInAttempts = 0
    var backingOffAfterTimeout = false
    var lastSyncMs: Int64?
    /// The outbox's and the telemetry queue's lengths, counted from the
    /// file once and then kept with each write the phone makes to them (nil:
    /// count again). The progress line, drain waits, /metrics and every
    /// phone's telemetry timer read them each second or two; a COUNT for
    /// each read, and a telemetry batch formed (a SELECT and an UPDATE) on
    /// every tick of a phone with nothing queued, were together about a
    /// fifth of the edge's loop with 1,000 phones (perf). Only this phone
    /// writes these two tables while it runs.
    var outboxCount: Int? {
        // Changed after every commit that changed the outbox (counted up,
        // or emptied): its write generation goes to the keychain
        // (StorageFaults.swift). Not when ``queueLength`` reads the count
        // again and keeps it (nil to a number: nothing was written).
        didSet { if !(oldValue == nil && outboxCount != nil) { keepWriteGeneration() } }
    }
    /// The write generation last copied to the keychain.
    var keptGeneration: WriteGeneration?
    /// The copy of answers' generation to the keychain, soon (``keepWriteGeneration()``).
    var generationTimer: Int?
    /// What the phone's file lost so far, as its keychain counts it.
    package var storageFaults = StorageFaultCounts()
    /// A fault was found at open: the saved copies are fetched again at start.
    var rebuildAfterFault = false
    var telemetryCount: Int?
    /// The crash mark as the file holds it (``flowMark``): nil, not read yet.
    var flowMarkKnown: JSON??

    // Telemetry.
    package var telemetryInFlight: String?
    /// The batch last sent, and whether it went without a session: its
    /// retries go the same way (the collector stores an event under the
    /// user its first delivery was sent as; a retry as another caller
    /// would be refused, and its events sent again as someone else's).
    var telemetryBatchSent: (batch: String, anonymous: Bool)?
    var telemetryTimer: Int?
    var telemetryAttempt = 0
    var telemetryRetryAt: Int64 = 0
    package var lastTelemetryAnswerMs: Int64?
    var catalogFetching = false
    /// Catalog downloads failed in a row (``catalogFailed(_:)``).
    var catalogFailures = 0
    var stopped = false

    // Counters for the report.
    package var stats = PhoneStats()
    /// The process's Prometheus figures, when quad-edge serves `/metrics`.
    package var metrics: EdgeMetrics?
    let spotCache = SpotCache<JSON>(capacity: 16, ttlMs: 30_000)
    /// Product pictures (UniTrade's disk cache) and lot and building photos
    /// (ParkWise's memory cache before a disk cache), files beside the phone's file.
    package let images: ImageCache
    var onMessage: (Phone, JSON) -> Void = { _, _ in }
    /// The live feed (nil without updates sockets) and what it did here.
    package var live: LiveFeed?
    package var liveStats = LiveStats()
    var liveWasQuiet = true
    var liveTimer: Int?
    /// The last seq applied per product (the feed's products only).
    var productSeqs: [String: Int64] = [:]
    /// The feed's level updates per saved copy of a lot's levels, held in
    /// memory and written to the copy when it is read (``saved(_:)``) or
    /// within ``Phone/levelsWriteMs``: one write per lot now and then, not
    /// one per update (LiveFeed.swift).
    var heldLevels: [String: HeldLevels] = [:]
    /// When the student last looked at each watched lot's live map (the phone's clock).
    var lotLookedAt: [String: Int64] = [:]
    var levelsTimer: Int?
    /// The lot whose levels the student last looked at, and when: the
    /// one polled while the feed is quiet.
    var watchedLot: (id: String, atMs: Int64)?
    var lastPollMs: Int64 = 0
    var lastNewsRenewMs: Int64 = 0
    /// The radio came on and asked for the news channel: the feed's
    /// catch-up that follows need not ask again.
    var newsOpenedWithRadio = false
    /// A `*.news` event for this phone's user, as the feed heard it.
    var onNews: (Phone, Envelope) -> Void = { _, _ in }
    package var onDrained: (Phone) -> Void = { _ in }
    /// A socket the phone needs could not be opened (descriptors, the
    /// context's socket limit): the process cannot run its day as asked,
    /// and ends it with the reason (Fleet).
    package var onFatal: (String) -> Void = { reason in Log.error("edge", reason) }

    /// Asks the broker the link talks to for this user's news on the
    /// link's connection (`sys.news` with the session token): the broker
    /// sends each news event there until the token's session ends. Asked
    /// at radio-on, after a move, with every new token, after the feed's
    /// silence (a broker restart forgets its channels) and every
    /// ``LiveFeed/renewNewsMs``; asking again changes nothing but the
    /// token the channel lives by. Phones without live updates poll
    /// `notifications.since` instead.
    func openNews() {
        guard live != nil, link.isUp, hasValidToken else { return }
        lastNewsRenewMs = now
        request("sys.news", [:], timeoutMs: settings.readTimeoutMs) { _ in }
    }

    func socketFailed(_ error: any Error, what: String) {
        onFatal("phone \(name) cannot open \(what): \(error)")
    }

    /// Opens the phone in `path`, its keychain beside it. `students`
    /// remember the passwords (by default beside the folder of `path`).
    package init(name: String, path: String, context: ZMQContext, reactor: Reactor, settings: EdgeSettings, seed: UInt64, students: Students? = nil) throws {
        self.name = name
        self.file = path
        self.agenda = reactor.timers
        self.settings = settings
        self.rng = SeededRandom(seed: seed)
        self.profile = StudentProfile(seed: seed)
        self.students = try students ?? Students(path: Students.path(forPhonesDir: (path as NSString).deletingLastPathComponent))
        let (keychain, unreadable) = try Phone.openKeychain(Keychain.path(forPhoneFile: path), pin: settings.keychainPIN)
        self.keychain = keychain
        let (opened, fault) = try PhoneStore.openChecked(path, keychain: keychain, students: self.students, exclusive: settings.exclusiveFiles)
        db = opened
        if let sql = settings.fileSQL { try db.executeScript(sql) }
        if settings.recordShown { try Phone.prepareShown(db) }
        let folder = (path.hasSuffix(".db") ? String(path.dropLast(3)) : path) + ".images"
        images = try ImageCache(db: db, folder: folder, reactor: reactor, context: context, limits: settings.images)
        var curveKey = keychain[.curveSecretKey]
        if settings.brokerKey != nil && curveKey == nil {
            curveKey = Link.keyPair(nil)?.secretText
            try keychain.set([.curveSecretKey: curveKey])
        }
        link = Link(context: context, endpoint: settings.frontend, source: "edge/\(name)", reactor: reactor, serverKey: settings.brokerKey,
                    clientSecretKey: curveKey)
        let updates = Endpoints.list(settings.updates)
        if !updates.isEmpty {
            let feed = LiveFeed(context: context, endpoints: updates, reactor: reactor, serverKey: settings.brokerKey, clientKeys: link.clientKeys)
            live = feed
            feed.jitter = LiveFeed.jitter(seed: seed)
            feed.onEvent = { [unowned self] in self.applyLive($0) }
        }
        storageFaults = StorageFaultCounts(keychain[.storageFaults])
        keptGeneration = try WriteGeneration.read(db)
        try loadSession()
        if let fault { noteStorageFault(fault) }
        if let unreadable {
            Log.error("edge/\(name)", unreadable.message)
            leaveSignInMessage(unreadable.message)
        }
        link.onAnswer = { [unowned self] in self.heard() }
        // News the broker carries on the request link (sys.news).
        link.onEvent = { [unowned self] in self.applyLive($0) }
        // The feed follows the link to the broker it moved to.
        link.onMove = { [unowned self] index in
            do { try self.live?.move(to: index) } catch { self.socketFailed(error, what: "its updates socket") }
            self.openNews()
        }
        link.onSocketError = { [unowned self] in self.socketFailed($0, what: "its request socket") }
        if live != nil { liveTimer = agenda.every(1000) { [weak self] in self?.liveTick() } }
    }

    package var isOnline: Bool { !airplane && signal && reachable }
    var radioOn: Bool { !airplane && signal }
    package var now: Int64 { Int64(Clock.nowMillis()) }

    // MARK: Session

    /// The phone's keychain; a tampered or cut one is emptied (its secrets
    /// are lost: the phone signs in again), and its error returned to be
    /// shown. A wrong PIN, or a PIN missing, stops the phone with its error.
    static func openKeychain(_ path: String, pin: String?) throws(KeychainError) -> (Keychain, KeychainError?) {
        do {
            return (try Keychain(path: path, pin: pin), nil)
        } catch where error.kind == .tampered {
            Keychain.reset(path: path)
            return (try Keychain(path: path, pin: pin), error)
        }
    }

    func loadSession() throws {
        if let s = try db.queryOne("SELECT * FROM session WHERE one = 1") {
            email = s.string("email")
            displayName = s.string("name")
            registerID = s.string("register_id")
            registered = s.int("registered") != 0
            user = s.optionalString("user_id")
            token = keychain[.sessionToken]
            refreshToken = keychain[.refreshToken]
            expiresAt = token == nil ? 0 : s.int("expires_at")
            lastSyncMs = (try db.meta("last_sync")).flatMap { Int64($0) }
            if user == nil, let kept = keptAccount, kept.email == email, let id = kept.user {
                // A file rolled back to before its first session: the account is known.
                user = id
                registered = true
                try db.execute("UPDATE session SET user_id = $1, registered = 1 WHERE one = 1", .text(id))
            }
            keepAccount()
            scheduleRefresh()
            return
        }
        if let kept = keptAccount {
            // A new file (the last one was damaged, or lost) on a phone whose
            // keychain names its account: the same account, signed in again
            // with the keychain's tokens or the student's password.
            email = kept.email
            displayName = "Student \(name)"
            registerID = MessageID.make()
            user = kept.user
            registered = kept.user != nil
            token = keychain[.sessionToken]
            refreshToken = keychain[.refreshToken]
            expiresAt = 0
            try db.execute("INSERT INTO session (one, phone, email, name, register_id, registered, user_id) VALUES (1, $1, $2, $3, $4, $5, $6)",
                           .text(name), .text(email), .text(displayName), .text(registerID), .of(registered), .of(user))
            Log.info("edge/\(name)", "a new file for the account \(email) its keychain names: signing in again")
            return
        }
        // A new phone: an account of its own, remembered in its file.
        let tag = String(MessageID.make().suffix(12))
        email = "\(name.lowercased().filter { $0.isLetter || $0.isNumber || $0 == "-" })-\(tag)@edge.quad.campus"
        displayName = "Student \(name)"
        registerID = MessageID.make()
        _ = try students.password(for: email)
        try db.execute("INSERT INTO session (one, phone, email, name, register_id) VALUES (1, $1, $2, $3, $4)",
                       .text(name), .text(email), .text(displayName), .text(registerID))
        keepAccount()
    }

    /// The account the keychain names (``keepAccount()``).
    var keptAccount: (email: String, user: String?)? {
        guard let text = keychain[.account], let json = try? JSON.parse(text), let email = json["email"]?.string, !email.isEmpty else { return nil }
        return (email, json["user"]?.string)
    }

    /// The student's password, asked for only to register or sign in again.
    package var password: String {
        do { return try students.password(for: email) } catch {
            Log.error("edge/\(name)", "the student's password is not at hand: \(error)")
            return ""
        }
    }

    /// "Sign in again", in the messages view: the session could not be kept.
    func leaveSignInMessage(_ why: String) {
        let text = "Sign in again: \(why)"
        _ = try? db.execute("INSERT INTO messages (ts, action, type, code, status, reason, text) VALUES ($1, NULL, 'accounts.refresh', 'unauthorized', 401, $2, $3)",
                            .int(now), .text(why), .text(text))
        stats.signInAgain += 1
    }

    package var hasValidToken: Bool { token != nil && expiresAt > now + 30_000 }

    /// Registers once (under an id fixed in the file, so a retry cannot make
    /// two accounts); the registration's answer is the session, so a phone
    /// that registers never logs in. A phone with a session renews it with
    /// `accounts.refresh` before it ends (``refreshIfDue()``) and logs in
    /// only when it has none left (expired, revoked, or a registration
    /// whose answer was lost). `done` gets nil when a token is in hand.
    package func signIn(_ done: @escaping (QuadError?) -> Void) {
        if hasValidToken { agenda.after(0) { done(nil) }; return }
        signInWaiters.append(done)
        guard !signingIn else { return }
        signingIn = true
        let finish: (QuadError?) -> Void = { [unowned self] error in
            self.signingIn = false
            let waiters = self.signInWaiters
            self.signInWaiters = []
            for w in waiters { w(error) }
        }
        let login = { [unowned self] in
            self.stats.logins += 1
            let body: JSON = ["email": .string(self.email), "password": .string(self.password)]
            self.request("accounts.login", body, timeoutMs: self.settings.actionTimeoutMs, anonymous: true) { result in
                switch result {
                case .success(let reply):
                    if let error = reply.quadError {
                        if error.status == 401, self.user == nil, reply.src != "broker" {
                            // No such account after all: register again, under a new id.
                            Log.error("edge/\(self.name)", "accounts knows no account \(self.email): registering it again")
                            self.registered = false
                            self.registerID = MessageID.make()
                            _ = try? self.db.execute("UPDATE session SET registered = 0, register_id = $1 WHERE one = 1", .text(self.registerID))
                        }
                        finish(error)
                        return
                    }
                    if !self.registered {
                        // A login that works proves the account exists (a
                        // registration whose answer went to a killed process).
                        self.registered = true
                        _ = try? self.db.execute("UPDATE session SET registered = 1 WHERE one = 1")
                    }
                    self.keepSession(reply.body)
                    finish(nil)
                case .failure(let failure):
                    finish(Phone.error(failure))
                }
            }
        }
        if registered {
            // A session is renewed, not replaced by a login: with the
            // refresh token (also after the token expired), or with a token
            // not yet expired.
            if refreshToken != nil || token != nil && expiresAt > now + 1_000 {
                refresh { [unowned self] error in
                    if self.hasValidToken { finish(nil) } else if let error, error.status != 401 { finish(error) } else { login() }
                }
                return
            }
            login()
            return
        }
        let body: JSON = [
            "email": .string(email), "password": .string(password), "name": .string(displayName),
            "semester": .int(profile.semester), "categories": .array(profile.categories.map { .string($0) }),
        ]
        stats.registrations += 1
        request("accounts.register", body, id: registerID, timeoutMs: settings.actionTimeoutMs * 2, anonymous: true) { [unowned self] result in
            switch result {
            case .success(let reply):
                // 409 on the email: the account exists (made by an earlier
                // attempt whose reply was lost, and whose record has gone):
                // log in. Any other 409 (the broker's "id used by another
                // caller") made no account.
                // 409 id_taken: the registration's id is another caller's,
                // that is this phone's own earlier process (killed, with its
                // CURVE key; this one has a new key): that registration may
                // have made the account, whose answer went nowhere. Log in;
                // a 401 (it made none) registers again under a new id.
                if let error = reply.quadError, error.status == 409, error.details["reason"]?.string == "id_taken" {
                    Log.info("edge/\(self.name)", "registration \(self.registerID) was sent by an earlier process of this phone: logging in")
                    login()
                    return
                }
                if let error = reply.quadError, error.status != 409 || error.details["field"]?.string != "email" { finish(error); return }
                self.registered = true
                _ = try? self.db.execute("UPDATE session SET registered = 1 WHERE one = 1")
                if reply.quadError == nil, reply.body["token"]?.string != nil {
                    self.keepSession(reply.body)
                    finish(nil)
                } else {
                    login()  // a 409, or an accounts that answers without a session
                }
            case .failure(let failure):
                finish(Phone.error(failure))
            }
        }
    }

    /// When a session ends on this phone's clock: the token's lifetime (its
    /// claims' `exp - iat`) from now, so a phone whose clock is off (a
    /// traveller's, or one moved by a test) keeps a session exactly as long
    /// as accounts meant, instead of holding one it believes expired (or
    /// one it believes alive past its end). `expiresAt` as given when the
    /// claims cannot be read.
    static func localExpiry(token: String?, expiresAt: Int64, now: Int64) -> Int64 {
        let parts = token?.split(separator: ".", omittingEmptySubsequences: false) ?? []
        guard parts.count == 3 else { return expiresAt }
        var b64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        b64 += String(repeating: "=", count: (4 - b64.count % 4) % 4)
        guard let data = Data(base64Encoded: b64), let claims = try? JSON.parse(String(decoding: data, as: UTF8.self)),
              let iat = claims["iat"]?.int, let exp = claims["exp"]?.int, exp > iat, exp - iat <= 366 * 86_400 else { return expiresAt }
        return now + (exp - iat) * 1000
    }

    /// Keeps a session (`token`, `user`, `expires_at` of a registration,
    /// a login or a refresh) in memory and in the file, and arms its renewal.
    func keepSession(_ body: JSON) {
        token = body["token"]?.string
        refreshToken = body["refresh_token"]?.string ?? refreshToken
        user = body["user"]?.string ?? user
        expiresAt = Phone.localExpiry(token: token, expiresAt: body["expires_at"]?.int ?? 0, now: now)
        keepTokens()
        keepAccount()
        forgetRefresh()
        _ = try? db.execute("UPDATE session SET user_id = $1, expires_at = $2 WHERE one = 1", .of(user), .int(expiresAt))
        scheduleRefresh()
        // The news channel follows the session: the broker holds it under
        // the new token from now on, without a gap.
        openNews()
        fetchNews()
    }

    /// The tokens in hand, written to the keychain (nil ones removed).
    func keepTokens() {
        do { try keychain.set([.sessionToken: token, .refreshToken: refreshToken]) } catch {
            Log.error("edge/\(name)", "cannot keep the session in the keychain: \(error)")
        }
    }

    /// The renewal of the session, `refreshBeforeMs` before it ends.
    func scheduleRefresh() {
        agenda.cancel(refreshTimer)
        refreshTimer = nil
        guard token != nil, expiresAt > 0, !stopped else { return }
        refreshTimer = agenda.after(max(0, expiresAt - settings.refreshBeforeMs - now)) { [weak self] in
            guard let self else { return }
            self.refreshTimer = nil
            self.refreshIfDue()
        }
    }

    /// Renews the session when it ends within `refreshBeforeMs` and the
    /// phone is online (offline, the network-back trigger calls this again).
    func refreshIfDue() {
        guard token != nil, !refreshing, isOnline, expiresAt > now + 1_000 || refreshToken != nil else { return }
        // A timer a millisecond early (wall and monotonic clocks round
        // apart) arms itself again rather than never renewing.
        guard expiresAt - now <= settings.refreshBeforeMs else { scheduleRefresh(); return }
        refresh { _ in }
    }

    /// `accounts.refresh`: with the refresh token (anonymous: the session
    /// token may have expired while the phone was offline), or, on a phone
    /// that has none yet, with the current token; a new session and a new
    /// refresh token, the old ones ended. The same id until it is answered
    /// (kept in the file's meta across a restart, sent with the same CURVE
    /// key from the keychain), so a retry after a lost answer gets what
    /// accounts already issued. A 401 (revoked, expired, a refresh token
    /// used twice) drops the session and tells the user to sign in again:
    /// the next sign-in logs in with the student's password.
    func refresh(_ done: @escaping (QuadError?) -> Void) {
        guard token != nil || refreshToken != nil else { agenda.after(0) { done(.unauthorized("no session to refresh")) }; return }
        refreshWaiters.append(done)
        guard !refreshing else { return }
        refreshing = true
        let id = refreshID ?? (try? db.meta("refresh_id")) ?? MessageID.make()
        refreshID = id
        try? db.setMeta("refresh_id", id)
        stats.refreshes += 1
        let body: JSON = refreshToken.map { ["refresh_token": .string($0)] } ?? ["token": .string(token ?? "")]
        var envelope = Envelope.request("accounts.refresh", body: body, id: id)
        envelope.ts = Int64(Clock.nowMillis())
        let saved = link.token
        link.token = refreshToken == nil ? token : nil
        defer { link.token = saved }
        link.send(envelope, timeoutMs: settings.actionTimeoutMs) { [unowned self] result in
            self.observe(result)
            self.refreshing = false
            var error: QuadError?
            switch result {
            case .success(let reply):
                if let refusal = reply.quadError {
                    error = refusal
                    if refusal.status == 401 || refusal.status == 403 || refusal.status == 404 {
                        self.forgetRefresh()
                        self.token = nil
                        self.refreshToken = nil
                        self.expiresAt = 0
                        self.keepTokens()
                        _ = try? self.db.execute("UPDATE session SET expires_at = 0 WHERE one = 1")
                        self.leaveSignInMessage("the session could not be renewed (\(refusal.message))")
                    }
                } else {
                    self.keepSession(reply.body)
                }
            case .failure(let failure):
                error = Phone.error(failure)
            }
            let waiters = self.refreshWaiters
            self.refreshWaiters = []
            for w in waiters { w(error) }
        }
    }

    func forgetRefresh() {
        refreshID = nil
        try? db.setMeta("refresh_id", nil)
    }

    static func error(_ failure: LinkFailure) -> QuadError {
        switch failure {
        case .offline: return .unavailable("no network on this phone")
        case .timeout: return .timeout("no answer from the network")
        case .sendFailed(let why): return .unavailable("could not send: \(why)")
        }
    }

    // MARK: Requests

    /// Sends one request over the phone's link; a timeout marks the network
    /// unreachable, an answer marks it reachable again.
    package func request(_ type: String, _ body: JSON, id: String = MessageID.make(), timeoutMs: Int64, anonymous: Bool = false,
                 _ completion: @escaping (Result<Envelope, LinkFailure>) -> Void) {
        var envelope = Envelope.request(type, body: body, id: id)
        let sentAt = Clock.monotonicMillis()
        // An expired token would get every request refused, public reads too.
        if anonymous || !hasValidToken {
            let saved = link.token
            link.token = nil
            defer { link.token = saved }
            link.send(envelope, timeoutMs: timeoutMs) { [unowned self] r in
                self.observe(r)
                self.metrics?.request(type, r, seconds: Double(Clock.monotonicMillis() - sentAt) / 1000)
                completion(r)
            }
            return
        }
        envelope.ts = Int64(Clock.nowMillis())
        link.send(envelope, timeoutMs: timeoutMs) { [unowned self] r in
            self.observe(r)
            self.metrics?.request(type, r, seconds: Double(Clock.monotonicMillis() - sentAt) / 1000)
            // A token the broker no longer accepts: sign in again before the next send.
            if case .success(let reply) = r, reply.quadError?.status == 401, self.token != nil, reply.src == "broker" || reply.quadError?.message.contains("token") == true {
                self.token = nil
                self.expiresAt = 0
            }
            completion(r)
        }
    }

    func observe(_ result: Result<Envelope, LinkFailure>) {
        if case .failure(.timeout) = result, reachable {
            reachable = false
            radioChanged(radioCameBack: false)
        }
    }

    /// Any answer proves the network is back.
    func heard() {
        if !reachable {
            reachable = true
            radioChanged(radioCameBack: false)
        }
    }

    // MARK: Radio

    /// Airplane mode, as the harness switches it.
    package func setAirplane(_ on: Bool) {
        guard airplane != on else { return }
        airplane = on
        try? db.setMeta("airplane", on ? "on" : nil)
        applyRadio()
    }

    /// No signal where the student is (underground): the phone knows, as in airplane mode.
    package func setSignal(_ on: Bool) {
        guard signal != on else { return }
        signal = on
        applyRadio()
    }

    func applyRadio() {
        if radioOn {
            do { try link.up() } catch { socketFailed(error, what: "its request socket") }
            do { try live?.up(at: link.current) } catch { socketFailed(error, what: "its updates socket") }
            openNews()
            newsOpenedWithRadio = true
            // Assume the network is there until a request says otherwise.
            reachable = true
        } else {
            link.down()
            live?.down()
        }
        radioChanged()
    }

    var wasOnline = true
    /// A `notifications.since` in flight (Messages.swift).
    var fetchingNews = false

    /// Records offline periods and starts the sender when the network is back.
    func radioChanged(radioCameBack: Bool = true) {
        let online = isOnline
        defer { wasOnline = online }
        if online == wasOnline {
            if !online { scheduleProbe() }
            return
        }
        if online {
            agenda.cancel(probeTimer)
            probeTimer = nil
            probeAttempt = 0
            if let since = offlineSinceMs {
                record("offline.ended", ["duration_ms": .int(max(0, now - since))])
                offlineSinceMs = nil
                try? db.setMeta("offline_since", nil)
            }
            if queueLength > 0 {
                stats.drainStartMs = Clock.monotonicMillis()
                stats.drainStartWithoutSession = !hasValidToken
                // The socket opened as the radio came on (just before) and not connected yet: its wait is the drain's.
                stats.drainConnectPending = link.isUp && link.connectMs == nil
                stats.drainBackoffs = 0
                stats.drainSent = 0
            }
            trigger(radioCameBack ? .networkBack : .reachable)
            refreshIfDue()
            rebuildSavedCopies()
            // Whatever backoff a batch drew while the network was gone.
            flushTelemetry(force: true)
            // At once, whether or not a feed will hear its broker soon: a
            // network that comes and goes may never leave the feed a quiet
            // second to catch up in (the feed's catch-up reads them again).
            prefetchOnNetworkBack()
            fetchNews()
        } else {
            offlineSinceMs = now
            try? db.setMeta("offline_since", String(now))
            record("offline.started", [:])
            scheduleProbe()
        }
    }

    /// While the radio is on but nothing answers, a small request now and
    /// then finds out when the network is back, even with nothing queued.
    func scheduleProbe() {
        guard radioOn, !reachable, probeTimer == nil else { return }
        let delay = settings.backoff.delay(attempt: probeAttempt, using: &rng)
        probeAttempt += 1
        probeTimer = agenda.after(delay) { [weak self] in
            guard let self else { return }
            self.probeTimer = nil
            guard self.radioOn, !self.reachable else { return }
            if self.link.inFlight == 0 {
                self.request("sys.health", [:], timeoutMs: self.settings.readTimeoutMs, anonymous: true) { _ in }
            }
            self.scheduleProbe()
        }
    }

    // MARK: Lifecycle

    /// The app opens: a new session, a crash mark left by the last one
    /// reported, the sender and the telemetry started.
    package func start() {
        // The last session did not end normally: the app died (SIGKILL). It
        // is reported as a crash of that session, in the flow its mark names.
        if let open = try? db.meta("session_open") {
            let mark = flowMark ?? [:]
            record("app.crash", ["view": mark["view"] ?? "home", "flow": mark["flow"] ?? "browse"], session: open)
            setFlowMark(nil)
        }
        sessionID = MessageID.make()
        try? db.setMeta("session_open", sessionID)
        if let since = try? db.meta("offline_since"), let ms = Int64(since) { offlineSinceMs = ms }
        record("session.started", [:])
        wasOnline = offlineSinceMs == nil
        applyRadio()
        rebuildSavedCopies()
        trigger(.phoneStarted)
        // Signed in at once, not at the first action: a phone that then
        // loses its signal already has the session its queue needs when
        // the signal returns.
        if settings.signInAtStart && isOnline && sender == .idle && !hasValidToken { signIn { _ in } }
        scheduleTelemetry()
        // What start-up ran, it runs once: its statements go now, not at
        // the first telemetry tick (13 KiB a phone for its first 10 s).
        db.dropCachedStatements()
        statementMark = db.statementMark
    }

    /// The app closes normally: the session ends (its last events are sent
    /// if the loop lingers a moment).
    package func end() {
        let flow = flowMark?["flow"] ?? "browse"
        leaveFlow()  // the app goes to the background: the mark goes
        record("session.ended", ["flow": flow])
        try? db.setMeta("session_open", nil)
        flushTelemetry(force: true)
    }

    /// The phone is put away: no more sending, the file closed.
    package func close() {
        writeHeldLevels()
        writeGeneration()
        stopped = true
        agenda.cancel(refreshTimer)
        refreshTimer = nil
        agenda.cancel(liveTimer)
        link.down()
        live?.down()
        db.close()
    }

    /// A view enters or leaves a flow (the Reserve screen opens or closes):
    /// the mark stays in the file while inside, so an app that dies there
    /// is seen as a crash at the next start (the ParkWise seed's BQ11).
    /// Both are told to telemetry (`mark.set`, `mark.cleared`).
    func enterFlow(_ flow: String, view: String) {
        if let mark = flowMark, mark["flow"]?.string == flow, mark["view"]?.string == view { return }
        leaveFlow()
        setFlowMark(["flow": .string(flow), "view": .string(view)])
        record("mark.set", ["view": .string(view), "flow": .string(flow)])
    }

    /// Clears the mark, if one is set.
    package func leaveFlow() {
        guard let mark = flowMark else { return }
        setFlowMark(nil)
        record("mark.cleared", ["view": mark["view"] ?? "reservation", "flow": mark["flow"] ?? "reservation"])
    }

    /// Writes the crash mark (nil: none) and keeps it as written; a write
    /// that failed leaves it to be read from the file again.
    func setFlowMark(_ mark: JSON?) {
        flowMarkKnown = (try? db.setMeta("flow_mark", mark?.text)) != nil ? .some(mark) : nil
    }

    /// The crash mark a view left in the file, if any.
    /// Read from the file once, then kept as it is written (every view
    /// that opens asks whether a mark is set).
    var flowMark: JSON? {
        if let known = flowMarkKnown { return known }
        do {
            let mark = try db.meta("flow_mark").map { JSON.stored($0) }
            flowMarkKnown = .some(mark)
            return mark
        } catch {
            return nil
        }
    }
}

/// What a phone counts for the campus day's report.
package struct PhoneStats {
    package var created = 0
    package var done = 0
    package var rejected = 0
    package var maxQueue = 0
    var drainStartMs: Int64?
    /// The drain began on a phone with no session: it waits for a first sign-in.
    var drainStartWithoutSession = false
    /// What the drain under way sent and waited out (a backoff: a
    /// timeout, a 429 or 503, a sign-in refused), for the report's
    /// breakdown of drains (``DrainCause``).
    var drainBackoffs = 0
    var drainSent = 0
    package var drainCauses: [DrainCause] = []
    /// Of each drain that began before its socket had taken a request (the
    /// radio came back and the socket was opened anew), how long the socket took to connect (TCP and
    /// CURVE handshake) before it took the first action: the part of the
    /// drain spent before any service saw it.
    package var drainConnects: [Int64] = []
    /// The drain under way began before its socket took a request.
    var drainConnectPending = false
    package var drains: [Int64] = []
    /// The drains (among ``drains``) that began without a session.
    package var drainsWithoutSession: [Int64] = []
    package var reads: [String: Int] = [:]
    package var refused: [String: Int] = [:]
    package var telemetrySent = 0
    package var telemetryAccepted = 0
    package var telemetryDuplicate = 0
    package var telemetryRejected = 0
    package var telemetryAnswers = 0
    /// How many answers the last drivers' answers view showed (DriverInsights.swift).
    package var driverAnswersLast = 0
    /// Sign-in requests sent: what a session saves shows here.
    /// Store transactions that confirmed answers (several answers each when they arrive together).
    var confirmTransactions = 0
    var registrations = 0
    var logins = 0
    var refreshes = 0
    /// Sessions lost (a refresh refused, a keychain that did not open): "sign in again".
    var signInAgain = 0
}

extension EdgeSettings {
    /// Pictures fetched at once by every phone of the process
    /// (`image_fetch_window`, default 8); set before the first fetch.
    public static var imageFetchWindow: Int {
        get { ImageCache.fetchWindow }
        set { ImageCache.fetchWindow = newValue }
    }
}

/// One drain after reconnect and what it was made of: the actions sent
/// until the outbox was empty (retries and actions made meanwhile
/// included), and the backoffs it waited out (a timeout, a 429 or 503, a
/// refused sign-in).
package struct DrainCause: Sendable {
    package var ms: Int64
    package var sent: Int
    package var backoffs: Int
}
