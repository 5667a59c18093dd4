import Foundation
import QuadImages
import QuadMessaging
import QuadRuntime
import QuadStore
import QuadWire
import QuadPhone
import QuadPhoneKit

/// A seeded day on campus: every phone is a student who browses, searches,
/// favorites, buys from the home or favorites screen, rents, parks
/// (forecast, find a spot, hold, drive down to a level without signal,
/// check in on time or late, save where the car is, check out), and walks
/// through dead zones, with think times divided by `speed`. When the day
/// ends every phone gets its signal back and the day waits for the
/// outboxes to drain, then reports.
public final class CampusDay {
    public struct Options: Sendable {
        public var seed: UInt64 = 1
        public var speed: Double = 1
        public var durationMs: Int64 = 60_000
        /// How long students believe a hold lasts when the phone does not know its deadline yet.
        public var holdSeconds: Int64 = 600
        /// Longest wait for the outboxes to drain after the day.
        public var drainTimeoutMs: Int64 = 120_000
        public var progressEveryMs: Int64 = 1_000
        /// Every phone signs in (registers) before the day's clock starts,
        /// as students whose accounts were made on an earlier day: the day
        /// then measures a day of use, and the registrations (one Argon2id
        /// hash each on accounts) are timed on their own. Off: the day
        /// begins with every phone registering at once.
        public var signInFirst = true
        /// Longest wait for the sign-ins before the day starts anyway.
        public var signInTimeoutMs: Int64 = 300_000
        /// Most sign-ins in flight at once before the day.
        public var signInWindow = 8
        public var reportPath: String?
        /// A few students (one in `listersEvery`) list an item of their own
        /// once in the day: a generated PNG uploaded with catalog.images.put,
        /// then catalog.listings.create with it (`--listings on|off`).
        public var listings = true
        public var listersEvery = 10
        /// Students change their carts (a quantity, a line out, the cart
        /// emptied), offline too (`--cart-edits on|off`, on by default;
        /// deploy/checker.py's cart ledger replays them with the adds and
        /// the orders from the cart).
        public var cartEdits = true
        public init() {}
    }

    public let options: Options
    unowned var fleet: Fleet!
    var students: [Student] = []
    var running = false
    var startedWall: Int64 = 0
    var startedMono: Int64 = 0
    var drainStarted: Int64?
    var finalDrainMs: Int64?
    /// The final read (``finalRead()``): nil before it starts, then the
    /// reads left (0: done).
    var finalReadsLeft: Int?
    var maxTotalPending = 0
    /// The sign-in before the day: how long it took, and how many phones had a session then.
    var signInStarted: Int64?
    var signInMs: Int64?
    var signedInBeforeDay = 0
    var signInNotBefore: [String: Int64] = [:]
    /// Each phone's first try, the time from it to a session (per phone
    /// signed in), the 429s seen and the other failures.
    var signInFirstTry: [String: Int64] = [:]
    var signInTimes: [Int64] = []
    var signInRateLimited = 0
    var signInFailures = 0
    static let maxSamples = 100_000
    /// The day this process goes on with, read from the phones' files
    /// (``DayMark``): when it began (the report counts the actions made
    /// since then, by every process of the day), how many processes ran it
    /// before this one (killed, then started again), and how many phones
    /// this process found in the middle of it.
    var dayStartedWall: Int64 = 0
    var restarts = 0
    var resumedPhones = 0
    /// The "list an item" activity's outcomes (since this run): a refusal
    /// (a catalog that does not know catalog.listings.create yet answers an
    /// error) counts here with its reason, never as a failure of the day.
    var listings = ListingTally()
    /// Rentals placed and returns queued by the students (since this run).
    var rentalsPlaced = 0
    var returnsQueued = 0
    public private(set) var exitCode: Int32 = 0
    public var onReport: (JSON, String) -> Void = { json, text in
        print(text)
        print(json.text)
    }

    public init(options: Options) { self.options = options }

    func start(_ fleet: Fleet) {
        self.fleet = fleet
        guard options.signInFirst else { begin(); return }
        let started = Clock.monotonicMillis()
        signInStarted = started
        fleet.agenda.repeating(every: 250) { [weak self] in
            guard let self else { return false }
            let waiting = fleet.phones.filter { !$0.hasValidToken }
            let now = Clock.monotonicMillis()
            if waiting.isEmpty || now - started >= self.options.signInTimeoutMs {
                self.signInMs = now - started
                self.signedInBeforeDay = fleet.phones.count - waiting.count
                self.begin()
                return false
            }
            // A few at a time, each on accounts' workers at once (not 1,000
            // queued to time out); one refused for now (accounts' hash
            // budget: 429) goes again after a pause.
            var inFlight = waiting.filter(\.signingIn).count
            for p in waiting where inFlight < self.options.signInWindow && !p.signingIn && p.isOnline && (self.signInNotBefore[p.name] ?? 0) <= now {
                inFlight += 1
                let first = self.signInFirstTry[p.name] ?? now
                self.signInFirstTry[p.name] = first
                p.signIn { [weak self] error in
                    guard let self else { return }
                    let at = Clock.monotonicMillis()
                    guard let error else {
                        if self.signInTimes.count < CampusDay.maxSamples { self.signInTimes.append(at - first) }
                        return
                    }
                    // Told to wait (accounts' hash budget, the broker's rate):
                    // as long as asked, and a little more drawn at random so
                    // that the phones refused together do not come back together.
                    let asked = error.details["retry_after_ms"]?.int ?? 0
                    if error.status == 429 { self.signInRateLimited += 1 } else { self.signInFailures += 1 }
                    self.signInNotBefore[p.name] = at + 250 + asked + Int64.random(in: 0...max(250, asked / 2))
                }
            }
            if (now - started) % 1_000 < 250 {
                let done = fleet.phones.count - waiting.count
                var line = "campus signing in \((now - started) / 1000) s · \(done)/\(fleet.phones.count) phones have a session"
                if self.signInRateLimited > 0 { line += " · \(self.signInRateLimited) told to wait (429)" }
                if self.signInFailures > 0 { line += " · \(self.signInFailures) failed, tried again" }
                FileHandle.standardError.write(Data((line + "\n").utf8))
            }
            return true
        }
    }

    /// The day's clock starts: the students arrive.
    func begin() {
        running = true
        startedWall = Int64(Clock.nowMillis())
        startedMono = Clock.monotonicMillis()
        resume()
        for (k, phone) in fleet.phones.enumerated() {
            // A resumed day's students go on with new activities (new
            // actions, new ids): their choices are drawn from the seed and
            // the restart's number, so the same seed makes the same pair of
            // runs, and the second does not replay the first one's choices.
            let s = Student(phone: phone, day: self, seed: options.seed &* 7919 &+ UInt64(k) &* 104_729 &+ UInt64(restarts) &* 0x9E37_79B9_7F4A_7C15)
            s.lister = options.listings && options.listersEvery > 0 && k % options.listersEvery == 0
            students.append(s)
            // Students arrive over the first tenth of the day.
            fleet.agenda.after(Int64.random(in: 0...max(1, options.durationMs / 10), using: &s.rng)) { s.next() }
        }
        fleet.agenda.repeating(every: options.progressEveryMs) { [weak self] in
            guard let self else { return false }
            self.progress()
            return self.finalDrainMs == nil
        }
        fleet.agenda.after(options.durationMs) { [weak self] in self?.endOfDay() }
        // The phones' news: the live feed brings it; a phone whose feed is
        // quiet asks notifications.since (Messages.swift).
        fleet.agenda.repeating(every: Phone.newsEveryMs) { [weak self] in
            guard let self else { return false }
            for p in self.fleet.phones where p.live?.isLive != true { p.fetchNews() }
            return self.finalDrainMs == nil
        }
    }

    var elapsedMs: Int64 { Clock.monotonicMillis() - startedMono }

    /// Finds, in the phones' files, a day of the same seed that a killed
    /// process left unfinished, and goes on with it: the report then
    /// counts every action made since that day began. Writes the day's
    /// mark in every phone's file (a phone new to the day joins it).
    func resume() {
        dayStartedWall = startedWall
        var before = 0
        resumedPhones = 0
        for phone in fleet.phones {
            guard let mark = DayMark.read(phone.db), mark.seed == options.seed, !mark.finished else { continue }
            resumedPhones += 1
            dayStartedWall = min(dayStartedWall, mark.startedMs)
            before = max(before, mark.runs)
        }
        restarts = before
        let mark = DayMark(seed: options.seed, startedMs: dayStartedWall, runs: before + 1, finished: false)
        for phone in fleet.phones { mark.write(phone.db) }
        if restarts > 0 {
            Log.info("edge", "campus day of seed \(options.seed) resumed (restart \(restarts)): \(resumedPhones) of \(fleet.phones.count) phones were in it, begun \((startedWall - dayStartedWall) / 1000) s ago")
        }
    }

    /// The day's length so far and to come: what the earlier processes ran
    /// and what this one was asked to run.
    var dayDurationMs: Int64 { (startedWall - dayStartedWall) + options.durationMs }

    func scaled(_ range: ClosedRange<Int64>, _ rng: inout SeededRandom) -> Int64 {
        Int64(Double(Int64.random(in: range, using: &rng)) / max(0.01, options.speed))
    }

    /// The day is over: no new activity; every phone gets its signal back;
    /// the drain is timed.
    func endOfDay() {
        running = false
        drainStarted = Clock.monotonicMillis()
        for s in students {
            s.phone.setSignal(true)
            // Not at its next telemetry tick: the day's last events go now.
            s.phone.flushTelemetry(force: true)
        }
        fleet.agenda.repeating(every: 100) { [weak self] in
            guard let self else { return false }
            let now = Clock.monotonicMillis()
            let pending = self.fleet.phones.reduce(0) { $0 + $1.queueLength }
            // Telemetry too, once a collector has answered during the day
            // (none may be running): a phone in its telemetry backoff after a
            // partition may not have heard from it for a while, and its
            // queued events still count (up to drain_timeout).
            let collector = self.fleet.phones.contains { $0.lastTelemetryAnswerMs != nil }
            let telemetry = collector ? self.fleet.phones.reduce(0) { $0 + $1.telemetryQueued } : 0
            let waited = now - self.drainStarted!
            if self.finalDrainMs == nil && pending == 0 { self.finalDrainMs = waited }
            if pending == 0 && telemetry == 0 || waited >= self.options.drainTimeoutMs {
                if self.finalDrainMs == nil { self.finalDrainMs = waited }
                // With the session log on: every phone reads again what it
                // keeps before the day is reported (convergence).
                if pending == 0 && self.fleet.settings.recordShown && self.finalReadsLeft != 0 && waited < self.options.drainTimeoutMs {
                    if self.finalReadsLeft == nil { self.finalRead() }
                    return true
                }
                self.finish(drained: pending == 0)
                return false
            }
            return true
        }
    }

    /// After the last heal and the drain, each phone reads again, from the
    /// services, what it keeps a copy of: its orders, its rentals, and each
    /// product it saved a view of. The session log's convergence check
    /// (deploy/checker.py) then compares the phones' saved copies with the
    /// services' stores. No telemetry is recorded for these reads (the
    /// telemetry check's count is final).
    ///
    /// A read the network did not answer (the view fell back to its saved
    /// copy: a service still restarting after the day's last kill, a broker
    /// catching up) is asked again every ``finalReadRetryMs`` until it is
    /// answered or the drain's deadline passes: a copy is only called final
    /// once the service has been heard.
    func finalRead() {
        var opens: [(String, JSON, Phone)] = []
        for s in students {
            let phone = s.phone
            phone.recording = false
            opens.append(("orders", [:], phone))
            opens.append(("rentals", [:], phone))
            for id in phone.savedProductIDs() { opens.append(("product", ["id": .string(id)], phone)) }
        }
        finalReadsLeft = opens.count
        FileHandle.standardError.write(Data("campus final read: \(opens.count) views on \(students.count) phones\n".utf8))
        for (view, params, phone) in opens { finalRead(view, params, phone, tries: 1) }
    }

    static let finalReadRetryMs: Int64 = 500

    private func finalRead(_ view: String, _ params: JSON, _ phone: Phone, tries: Int) {
        phone.open(view, params) { [weak self] result in
            guard let self, let n = self.finalReadsLeft else { return }
            let unanswered = result.source == .saved || (result.source == .none && result.error == nil)
            let waited = Clock.monotonicMillis() - (self.drainStarted ?? 0)
            if unanswered && waited + Self.finalReadRetryMs < self.options.drainTimeoutMs {
                if tries == 1 || tries % 20 == 0 {
                    Log.info("edge", "\(phone.name): the final read of \(view) \(params.text) was not answered (\(result.notice ?? "no answer")); asking again (try \(tries + 1))")
                }
                _ = self.fleet.agenda.after(Self.finalReadRetryMs) { [weak self] in self?.finalRead(view, params, phone, tries: tries + 1) }
                return
            }
            self.finalReadsLeft = n - 1
        }
    }

    func finish(drained: Bool) {
        // What the report counts is final: no step still on the agenda
        // adds to it (it would stay queued in the phone's file, unsent).
        for phone in fleet.phones { phone.recording = false }
        progress()
        let json = report(fleet, final: true)
        let text = Report.words(json)
        if let path = options.reportPath {
            _ = FileManager.default.createFile(atPath: path, contents: Data((json.text + "\n").utf8))
        }
        // The day is over: a later run of the same seed begins a new one.
        let mark = DayMark(seed: options.seed, startedMs: dayStartedWall, runs: restarts + 1, finished: true)
        for phone in fleet.phones { mark.write(phone.db) }
        let keychainsClean = json["keychain_check"]?["phones_with_secret"]?.int == 0
        exitCode = drained && json["accounted"]?.bool == true && keychainsClean ? 0 : 1
        onReport(json, text)
        fleet.stop()
    }

    func progress() {
        var done = 0, rejected = 0, created = 0, online = 0, telemetry = 0, pending = 0
        for p in fleet.phones {
            done += p.stats.done
            rejected += p.stats.rejected
            created += p.stats.created
            pending += p.queueLength
            telemetry += p.telemetryQueued
            if p.isOnline { online += 1 }
        }
        maxTotalPending = max(maxTotalPending, pending)
        let phase = running ? "day \(elapsedMs / 1000)/\(options.durationMs / 1000) s" : "draining \((Clock.monotonicMillis() - (drainStarted ?? 0)) / 1000) s"
        let line = "campus \(phase) · phones \(fleet.phones.count) (online \(online)) · actions \(created): done \(done), rejected \(rejected), pending \(pending) · telemetry queued \(telemetry)\n"
        FileHandle.standardError.write(Data(line.utf8))
    }

    func report(_ fleet: Fleet, final: Bool) -> JSON {
        Report.make(fleet, since: dayStartedWall, final: final, day: self)
    }
}

/// What the students' listings came to.
struct ListingTally {
    var attempted = 0
    var created = 0
    var rejected = 0
    var failed = 0
    var reasons: [String: Int] = [:]

    var json: JSON {
        ["attempted": .int(Int64(attempted)), "created": .int(Int64(created)), "rejected": .int(Int64(rejected)),
         "no_answer": .int(Int64(failed)), "reasons": .object(reasons.mapValues { .int(Int64($0)) })]
    }
}

/// A campus day's mark in a phone's file (meta `campus_day`): the seed, when
/// the day began, how many processes have run it, and whether it ended. A
/// process killed in the middle of a day leaves it unfinished; the next
/// `quad-edge run` with the same seed on the same files goes on with it.
struct DayMark: Equatable {
    var seed: UInt64
    var startedMs: Int64
    var runs: Int
    var finished: Bool

    static let key = "campus_day"

    static func read(_ db: Database) -> DayMark? {
        guard let text = try? db.meta(key), let j = try? JSON.parse(text),
              let seed = j["seed"]?.int, let started = j["started_ms"]?.int else { return nil }
        return DayMark(seed: UInt64(bitPattern: seed), startedMs: started, runs: Int(j["runs"]?.int ?? 1), finished: j["finished"]?.bool ?? false)
    }

    func write(_ db: Database) {
        let j: JSON = ["seed": .int(Int64(bitPattern: seed)), "started_ms": .int(startedMs), "runs": .int(Int64(runs)), "finished": .bool(finished)]
        try? db.setMeta(DayMark.key, j.text)
    }
}

/// One simulated student driving one phone through the day. Each activity
/// is a chain of steps; a step that opens a view waits for what the view
/// shows (network, saved copy or memory), an action returns at once (it is
/// queued), and think times separate the steps.
final class Student {
    let phone: Phone
    unowned let day: CampusDay
    var rng: SeededRandom
    var activities = 0
    /// This student lists an item once in the day (``listItem(_:)``).
    var lister = false
    var listed = false

    init(phone: Phone, day: CampusDay, seed: UInt64) {
        self.phone = phone
        self.day = day
        self.rng = SeededRandom(seed: seed)
    }

    var agenda: Timers { day.fleet.agenda }

    /// Down to a level without signal, or into a dead zone: only while the
    /// day runs (after it, every phone keeps its signal to drain).
    func loseSignal() {
        if day.running { phone.setSignal(false) }
    }

    /// Runs `then` after a think time (seconds of a real student, divided by speed).
    func think(_ seconds: ClosedRange<Int64> = 2...12, _ then: @escaping () -> Void) {
        agenda.after(day.scaled((seconds.lowerBound * 1000)...(seconds.upperBound * 1000), &rng)) { [weak self] in
            // After the day no activity goes on: the drain waits only for
            // what the day queued.
            guard let self, self.day.running else { return }
            then()
        }
    }

    /// What a student does next, and how often in a hundred, by habit: a
    /// driver parks about half the time, a shopper hardly ever; over the
    /// campus's mix of habits (``StudentProfile/habitWeights``) a quarter
    /// of the activities are parking, as when every student did both.
    enum Activity: CaseIterable {
        case browse, search, favorites, cart, rent, returnRental, history, park, deadZone
    }

    static let mix: [StudentProfile.Habit: [(Activity, Int)]] = [
        .both: [(.browse, 22), (.search, 14), (.favorites, 10), (.cart, 8), (.rent, 5), (.returnRental, 4), (.history, 4), (.park, 25), (.deadZone, 8)],
        .driver: [(.browse, 15), (.search, 10), (.favorites, 7), (.cart, 6), (.rent, 4), (.returnRental, 3), (.history, 2), (.park, 45), (.deadZone, 8)],
        .shopper: [(.browse, 28), (.search, 18), (.favorites, 13), (.cart, 11), (.rent, 7), (.returnRental, 5), (.history, 5), (.park, 5), (.deadZone, 8)],
    ]

    var profile: StudentProfile { phone.profile }

    func next() {
        guard day.running else { return }
        activities += 1
        let mix = Student.mix[profile.habit] ?? Student.mix[.both]!
        // A student with something rented gives it back sooner or later:
        // returns follow rentals within a short day too (a 30 s day under
        // load made 34 rentals and, at the base weight, no return).
        let renting = isRenting
        let pick = StudentProfile.pick(mix.map { $0.0 == .returnRental && renting ? Student.returnWeightWhileRenting : $0.1 }, &rng)
        let done: () -> Void = { [weak self] in
            guard let self else { return }
            self.think(3...20) { self.next() }
        }
        if lister && !listed && Int.random(in: 0..<100, using: &rng) < 30 { listed = true; listItem(done); return }
        switch mix[pick].0 {
        case .browse: browse(done)
        case .search: search(done)
        case .favorites: favorites(done)
        case .cart: cart(done)
        case .rent: rent(done)
        case .returnRental: returnRental(done)
        case .history: history(done)
        case .park: park(done)
        case .deadZone: deadZone(done)
        }
    }

    // MARK: Marketplace

    static let words = ["calculator", "iphone", "lamp", "textbook", "camera", "kit", "headphones", "tablet", "laptop", "bicycle",
                        "goggles", "sketchbook", "speaker", "notes", "backpack", "mouse"]

    /// A product the student can see: from the saved catalog, in stock if
    /// possible; six times in ten of one of their preferred categories.
    func product(inStock: Bool = true, preferred: Bool = true) -> String {
        var conditions = inStock ? ["stock > 0"] : []
        var params: [SQLValue] = []
        if preferred, Int.random(in: 0..<10, using: &rng) < 6, let category = profile.categories.randomElement(using: &rng) {
            params.append(.text(category))
            conditions.append("category = $1")
        }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let n = Int((try? phone.db.queryOne("SELECT COUNT(*) AS n FROM catalog\(filter)", params))?["n"].int ?? 0)
        // Nothing of theirs in the saved catalog: anything.
        if n == 0 && !params.isEmpty { return product(inStock: inStock, preferred: false) }
        if n > 0, let r = try? phone.db.queryOne("SELECT id FROM catalog\(filter) ORDER BY id LIMIT 1 OFFSET $\(params.count + 1)",
                                                  params + [.int(Int64(Int.random(in: 0..<n, using: &rng)))]) {
            return r.string("id")
        }
        return String(format: "p-%04d", Int.random(in: 1...306, using: &rng))
    }

    func act(_ type: String, _ body: JSON) {
        guard day.running else { return }
        phone.act(type, body)
    }

    func buy(_ product: String, screen: String, rent: Bool = false) {
        var body: [String: JSON] = ["source": "buy_now", "product": .string(product), "quantity": 1, "screen": .string(screen),
                                    "mode": rent ? "rent" : "buy"]
        if rent { body["return_date"] = .string(Student.day(plus: Int.random(in: 7...90, using: &rng))) }
        guard day.running else { return }
        if case .queued(let id) = phone.act("orders.place", .object(body)) {
            if rent {
                day.rentalsPlaced += 1
                hasRented = true
            }
            let category = (try? phone.db.queryOne("SELECT category FROM catalog WHERE id = $1", .text(product)))?.string("category") ?? "Others"
            phone.record("purchase.made", ["order": .string(id), "screen": .string(screen), "mode": .string(rent ? "rent" : "buy"), "category": .string(category)])
        }
    }

    static func day(plus days: Int) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date().addingTimeInterval(Double(days) * 86_400))
    }

    func favorite(_ product: String, screen: String) {
        guard day.running else { return }
        if case .queued = phone.act("favorites.add", ["product": .string(product)]) {
            phone.record("favorite.added", ["product": .string(product), "screen": .string(screen)])
        }
    }

    func browse(_ then: @escaping () -> Void) {
        // Four times in ten, the page of one of their preferred categories.
        var page: [String: JSON] = ["limit": 20, "offset": .int(Int64(Int.random(in: 0...5, using: &rng) * 20))]
        if Int.random(in: 0..<10, using: &rng) < 4, let category = profile.categories.randomElement(using: &rng) {
            page = ["limit": 20, "offset": .int(Int64(Int.random(in: 0...1, using: &rng) * 20)), "category": .string(category)]
        }
        phone.open("home", .object(page)) { [self] home in
            let listed = (home.body["products"]?.array ?? []).filter { ($0["stock"]?.int ?? 0) > 0 }.compactMap { $0["id"]?.string }
            let id = listed.isEmpty ? product() : listed[Int.random(in: 0..<listed.count, using: &rng)]
            think { [self] in
                phone.open("product", ["id": .string(id)]) { [self] _ in
                    if Int.random(in: 0..<100, using: &rng) < 40 { favorite(id, screen: "home") }
                    think(1...6) { [self] in
                        if Int.random(in: 0..<100, using: &rng) < 25 { buy(id, screen: "home") }
                        then()
                    }
                }
            }
        }
    }

    func search(_ then: @escaping () -> Void) {
        let q = Student.words[Int.random(in: 0..<Student.words.count, using: &rng)]
        var params: [String: JSON] = ["q": .string(q)]
        if Bool.random(using: &rng) { params["in_stock"] = true }
        if Int.random(in: 0..<3, using: &rng) == 0 { params["sort"] = "price" }
        phone.open("search", .object(params)) { [self] found in
            let ids = (found.body["products"]?.array ?? []).filter { ($0["stock"]?.int ?? 0) > 0 }.compactMap { $0["id"]?.string }
            think(1...8) { [self] in
                if let id = ids.first {
                    if Int.random(in: 0..<100, using: &rng) < 30 { favorite(id, screen: "search") }
                    if Int.random(in: 0..<100, using: &rng) < 15 { buy(id, screen: "search") }
                }
                then()
            }
        }
    }

    func favorites(_ then: @escaping () -> Void) {
        phone.open("favorites") { [self] list in
            let ids = (list.body["items"]?.array ?? []).compactMap { $0["product"]?.string }
            think(2...10) { [self] in
                if let id = ids.randomElement(using: &rng) {
                    let roll = Int.random(in: 0..<100, using: &rng)
                    if roll < 35 {
                        buy(id, screen: "favorites", rent: Int.random(in: 0..<100, using: &rng) < 30)
                    } else if roll < 45 {
                        act("favorites.remove", ["product": .string(id)])
                    }
                }
                then()
            }
        }
    }

    func cart(_ then: @escaping () -> Void) {
        act("orders.cart.add", ["product": .string(product()), "quantity": 1])
        think(2...8) { [self] in
            if Bool.random(using: &rng) { act("orders.cart.add", ["product": .string(product()), "quantity": 1]) }
            phone.open("cart") { [self] _ in
                editCart()
                think(2...8) { [self] in
                    let first = (try? phone.db.queryOne("SELECT c.product, p.category FROM cart c LEFT JOIN catalog p ON p.id = c.product ORDER BY c.added_ms LIMIT 1"))
                    if Int.random(in: 0..<100, using: &rng) < 70, day.running, let first,
                       case .queued(let id) = phone.act("orders.place", ["source": "cart", "mode": "buy", "screen": "cart"]) {
                        phone.record("purchase.made", ["order": .string(id), "screen": "cart", "mode": "buy",
                                                       "category": .string(first.optionalString("category") ?? "Others")])
                    }
                    then()
                }
            }
        }
    }

    /// Sometimes the student changes the cart on its screen: a quantity,
    /// a line taken out, now and then the whole cart emptied; offline too,
    /// queued like the rest.
    func editCart() {
        guard day.running, day.options.cartEdits else { return }
        let lines = (try? phone.db.query("SELECT product FROM cart ORDER BY added_ms, product").map { $0.string("product") }) ?? []
        guard let first = lines.first, let last = lines.last else { return }
        let pick = Int.random(in: 0..<100, using: &rng)
        let edit: (String, JSON)
        switch pick {
        case 0..<25: edit = ("orders.cart.set", ["product": .string(first), "quantity": .int(Int64.random(in: 2...3, using: &rng))])
        case 25..<40: edit = ("orders.cart.remove", ["product": .string(last)])
        case 40..<46: edit = ("orders.cart.clear", [:])
        default: return
        }
        phone.act(edit.0, edit.1)
    }

    func rent(_ then: @escaping () -> Void) {
        let id = product()
        phone.open("product", ["id": .string(id)]) { [self] _ in
            think(2...10) { [self] in
                buy(id, screen: "home", rent: true)
                then()
            }
        }
    }

    /// My rentals, then one of them back: the phone's confirmed rentals
    /// not returned yet (the day cannot move the clock, so every return is
    /// on time; late returns are RentalTests' with a test clock).
    func returnRental(_ then: @escaping () -> Void) {
        phone.open("rentals") { [self] _ in
            think(2...8) { [self] in
                let open = openRentals()
                if let pick = open.randomElement(using: &rng), day.running,
                   case .queued = phone.act("orders.return", ["order": .string(pick.string("id"))]) {
                    day.returnsQueued += 1
                }
                then()
            }
        }
    }

    /// Whether the student has a rental to give back. Only a student who
    /// has rented (today, or in the phone's file at the day's first
    /// activity) asks the phone's file: each activity of every student
    /// asked it, a query on the edge's one loop.
    var isRenting: Bool {
        if hasRented == nil { hasRented = (try? phone.db.queryOne("SELECT 1 AS one FROM orders WHERE mode = 'rent' LIMIT 1")) != nil }
        return hasRented == true && !openRentals().isEmpty
    }
    var hasRented: Bool?

    /// The phone's rentals it may give back: confirmed, not returned yet.
    func openRentals() -> [Row] {
        (try? phone.db.query("""
            SELECT o.id FROM orders o LEFT JOIN returns r ON r.rental = o.id
            WHERE o.mode = 'rent' AND o.status IN ('held', 'confirmed') AND o.pending IS NULL
              AND (r.status IS NULL OR r.status = 'refused')
            ORDER BY o.created_ms
            """)) ?? []
    }

    /// The weight of giving a rental back, of about 100, while the student has one.
    static let returnWeightWhileRenting = 15

    /// A student lists something of their own: a picture (a generated PNG)
    /// up with catalog.images.put, then catalog.listings.create with it.
    /// Online only, both; a refusal is counted with its reason.
    func listItem(_ then: @escaping () -> Void) {
        guard phone.isOnline else { then(); return }
        day.listings.attempted += 1
        let color = { [self] in (UInt8.random(in: 0...255, using: &rng), UInt8.random(in: 0...255, using: &rng), UInt8.random(in: 0...255, using: &rng)) }
        let png = PNGPicture.stripes(size: 24, color(), color(), width: Int.random(in: 2...8, using: &rng))
        let word = Student.words[Int.random(in: 0..<Student.words.count, using: &rng)]
        let rentable = Bool.random(using: &rng)
        let refused: (String) -> Void = { [self] reason in
            day.listings.rejected += 1
            day.listings.reasons[Report.pattern(reason), default: 0] += 1
            then()
        }
        phone.withToken { [self] _ in
            phone.request("catalog.images.put", ["data": .string(Data(png).base64EncodedString()), "content_type": "image/png"],
                          timeoutMs: phone.settings.actionTimeoutMs) { [self] result in
                guard case .success(let reply) = result else { day.listings.failed += 1; then(); return }
                if let error = reply.quadError { refused("catalog.images.put: \(error.message)"); return }
                guard let image = reply.body["id"]?.string else { refused("catalog.images.put answered no id"); return }
                var listing: [String: JSON] = [
                    "name": .string("Used \(word) from \(phone.displayName)"), "category": "Study", "collection": "Student listings",
                    "price": ["value": .double(Double(Int.random(in: 5...80, using: &rng))), "currency": "USD"],
                    "info": ["color": "mixed"], "type": .string(word),
                    "condition": .string(["New", "Like new", "Good", "Used"][Int.random(in: 0..<4, using: &rng)]),
                    "quantity": .int(Int64(Int.random(in: 1...3, using: &rng))), "mode": .string(rentable ? "both" : "sale"),
                    "images": [.string(image)],
                ]
                if rentable { listing["rent_rate"] = .double(Double(Int.random(in: 1...5, using: &rng))) }
                phone.request("catalog.listings.create", .object(listing), timeoutMs: phone.settings.actionTimeoutMs) { [self] result in
                    guard case .success(let reply) = result else { day.listings.failed += 1; then(); return }
                    if let error = reply.quadError { refused("catalog.listings.create: \(error.message)"); return }
                    day.listings.created += 1
                    then()
                }
            }
        }
    }

    func history(_ then: @escaping () -> Void) {
        phone.open("orders") { [self] _ in
            think(1...5) { [self] in
                phone.open("spending") { _ in then() }
            }
        }
    }

    /// Elevator, tunnel, the library basement: no signal for a while, and
    /// the student keeps using the app.
    func deadZone(_ then: @escaping () -> Void) {
        loseSignal()
        think(1...4) { [self] in
            if Bool.random(using: &rng) { favorite(product(), screen: "home") } else {
                act("orders.cart.add", ["product": .string(product()), "quantity": 1])
                editCart()  // without signal: queued, shown at once
            }
            phone.open("spending") { [self] _ in
                think(5...30) { [self] in
                    phone.setSignal(true)
                    then()
                }
            }
        }
    }

    // MARK: Parking

    static let destinations = ["ML", "SD", "W", "LL"]

    func park(_ then: @escaping () -> Void) {
        if (try? Actions.activeParking(phone.db)) != nil { leaveCampus(then); return }
        // 8 % park off campus whatever its free spots (a class across the
        // street, a cheaper lot): the nearby lots (BQ9) at any hour, not
        // only when campus is full.
        if Int.random(in: 0..<100, using: &rng) < 8 { nearby(then); return }
        // 30 % look at the drivers' answers first (which level, at which hour).
        if Int.random(in: 0..<100, using: &rng) < 30 { phone.open("insights") { [self] _ in findSpot(then) } } else { findSpot(then) }
    }

    /// The lots, the forecast for 40 % (half of them change the arrival
    /// time on it), Find a spot, then a hold and the Reserve screen.
    func findSpot(_ then: @escaping () -> Void) {
        phone.open("parking") { [self] lots in
            let campus = (lots.body["lots"]?.array ?? []).filter { $0["kind"]?.string == "campus" }.compactMap { $0["id"]?.string }
            let lot = campus.randomElement(using: &rng) ?? "central"
            let useForecast = Int.random(in: 0..<100, using: &rng) < 40
            let afterForecast = { [self] in
                var params: [String: JSON] = Bool.random(using: &rng)
                    ? ["lot": .string(lot)] : ["destination": .string(Student.destinations.randomElement(using: &rng)!)]
                if Int.random(in: 0..<100, using: &rng) < 10 { params["kind"] = "ev" }
                phone.open("spots", .object(params)) { [self] found in
                    let count = found.body["count"]?.int ?? (found.source == .none ? 1 : 0)
                    guard count > 0 else { nearby(then); return }
                    let recommended = found.body["recommended"] ?? .null
                    think(2...6) { [self] in
                        guard day.running else { then(); return }
                        guard case .queued(let id) = phone.act("reservations.hold", .object(params)) else { then(); return }
                        phone.open("reservation") { [self] _ in drive(reservation: id, recommended: recommended, then) }
                    }
                }
            }
            var forecast: [String: JSON] = ["lot": .string(lot)]
            if Bool.random(using: &rng) { forecast["arrival"] = .int(phone.now + Int64.random(in: 15...120, using: &rng) * 60_000) }
            // Then the lot's live map (the feed keeps it current).
            let liveMap = { [self] in phone.open("levels", ["lot": .string(lot)]) { _ in afterForecast() } }
            if useForecast { phone.open("forecast", .object(forecast)) { _ in liveMap() } } else { liveMap() }
        }
    }

    /// Drives to the spot; 10 % change their mind and cancel, 15 % arrive
    /// after the hold ended, the rest in time. A level without signal takes
    /// the phone's signal away until the student walks out.
    func drive(reservation: String, recommended: JSON, _ then: @escaping () -> Void) {
        let roll = Int.random(in: 0..<100, using: &rng)
        if roll < 10 {
            think(3...15) { [self] in
                act("reservations.cancel", ["reservation": .string(reservation)])
                phone.leaveFlow()
                then()
            }
            return
        }
        let late = roll < 25
        var wait = day.scaled(10_000...60_000, &rng)
        if late {
            let deadline = ((try? phone.db.queryOne("SELECT deadline_ms FROM parking WHERE id = $1", .text(reservation))))?["deadline_ms"].int
                ?? (phone.now + day.options.holdSeconds * 1000)
            wait = max(wait, deadline - phone.now + Int64.random(in: 1_000...3_000, using: &rng))
        }
        agenda.after(wait) { [self] in
            guard day.running else { phone.leaveFlow(); then(); return }
            let row = (try? phone.db.queryOne("SELECT lot, level, signal FROM parking WHERE id = $1", .text(reservation)))
            let signal = row?.optionalString("signal") ?? recommended["signal"]?.string ?? "good"
            let lot = row?.optionalString("lot") ?? recommended["lot"]?.string ?? "central"
            if signal == "none" { loseSignal() }
            let deadline = ((try? phone.db.queryOne("SELECT deadline_ms FROM parking WHERE id = $1", .text(reservation))))?["deadline_ms"].int
            if case .queued = phone.act("reservations.checkin", ["reservation": .string(reservation)]) {
                phone.record("checkin.done", ["lot": .string(lot), "on_time": .bool(deadline.map { phone.now < $0 } ?? !late)])
            }
            phone.leaveFlow()
            act("reservations.car.save", ["lat": 4.6014, "lon": -74.0659, "level": .string(row?.optionalString("level") ?? "P1"),
                                           "note": .string("near the stairs")])
            think(2...10) { [self] in
                phone.setSignal(true)  // walked out of the garage
                then()
            }
        }
    }

    /// After class: find the car, walk down, check out, drive off.
    func leaveCampus(_ then: @escaping () -> Void) {
        phone.open("car") { [self] car in
            think(5...20) { [self] in
                let level = car.body["car"]?["level"]?.string ?? "P1"
                if level != "P1" { loseSignal() }
                if (try? Actions.activeParking(phone.db))?.string("status") == "checked_in" {
                    act("reservations.checkout", [:])
                } else if (try? Actions.activeParking(phone.db))?.string("status") == "held" {
                    act("reservations.cancel", [:])
                }
                think(2...8) { [self] in
                    phone.setSignal(true)
                    then()
                }
            }
        }
    }

    /// The nearby lot a student heads for: one with free spots, the nearer
    /// ones more often (a lot's weight is 2 km less its distance).
    static func nearbyLot(_ lots: [JSON], _ rng: inout SeededRandom) -> String? {
        let open = lots.filter { $0["has_free"]?.bool ?? true }
        guard !open.isEmpty else { return nil }
        return open[StudentProfile.pick(open.map { max(1, 2_000 - Int($0["distance_m"]?.int ?? 1_000)) }, &rng)]["id"]?.string
    }

    /// Campus is full, or the driver parks off campus: the nearby lots,
    /// saved copy first. The student
    /// picks one with free spots, the nearer ones more often (each lot's
    /// weight falls with its distance), not always the first listed.
    func nearby(_ then: @escaping () -> Void) {
        phone.open("nearby") { [self] list in
            let choice = Student.nearbyLot(list.body["lots"]?.array ?? [], &rng)
            think(2...8) { [self] in
                guard let lot = choice else { then(); return }
                phone.navigate(toNearby: lot)
                // Once there, the app asks whether they parked: 70 % did.
                think(10...40) { [self] in
                    phone.answerNearby(parked: Int.random(in: 0..<100, using: &rng) < 70)
                    then()
                }
            }
        }
    }
}
