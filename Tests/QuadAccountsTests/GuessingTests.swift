import Foundation
import QuadAuth
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadAccounts

/// accounts' handlers with `limits`, on a fresh SQLite file.
func accounts(limits: Accounts.Settings.Limits, hashing: PasswordHash.Strength = .minimum, db: Database? = nil) throws -> (Handlers, Database) {
    let db = try db ?? TestStore.open("accounts", migrations: Accounts.migrations)
    let h = Handlers(service: "accounts", instance: "accounts/test", db: db)
    Accounts.register(h, db: db, settings: try .init(signingKey: SigningKey.generate(), hashing: hashing, limits: limits))
    return (h, db)
}

/// accounts.login as the broker delivers it from the client `caller`.
func login(_ h: Handlers, _ email: String, _ password: String, caller: String) -> Envelope {
    var request = Envelope.request("accounts.login", body: ["email": .string(email), "password": .string(password)])
    request.caller = caller
    return h.handle(request)
}

func waitUntil(_ ms: Int64 = 30_000, _ condition: () throws -> Bool) rethrows -> Bool {
    let until = Clock.monotonicMillis() + ms
    while Clock.monotonicMillis() < until {
        if try condition() { return true }
        usleep(20_000)
    }
    return try condition()
}

/// Records how long each transaction held the store, forwarding to SQLite.
final class TimedDatabase: Database {
    let inner: Database
    var longestMicros: Int64 = 0
    init(_ inner: Database) { self.inner = inner }
    var dialect: Dialect { inner.dialect }
    func execute(_ sql: String, _ params: [SQLValue]) throws -> Int { try inner.execute(sql, params) }
    func query(_ sql: String, _ params: [SQLValue]) throws -> [Row] { try inner.query(sql, params) }
    func executeScript(_ sql: String) throws { try inner.executeScript(sql) }
    func transaction<T>(immediate: Bool, _ body: () throws -> T) throws -> T {
        let started = Clock.monotonicMicros()
        defer { longestMicros = max(longestMicros, Clock.monotonicMicros() - started) }
        return try inner.transaction(immediate: immediate, body)
    }
    func close() { inner.close() }
}

@Suite("accounts resist guessing")
struct GuessingTests {
    static var quick: Accounts.Settings.Limits {
        var l = Accounts.Settings.Limits()
        l.freeFailures = 3
        l.baseDelayMs = 200
        l.accountMaxDelayMs = 800
        return l
    }

    @Test func failedLoginsOfOneAccountWaitLongerEachTimeUpToTheCapAndTheRightPasswordGetsInAfter() throws {
        let (h, _) = try accounts(limits: Self.quick)
        _ = try h.call("accounts.register", ana())
        // Each guess from a new client key: only the account's count grows.
        var n = 0
        func guess(_ password: String = "wrong horse") -> Envelope { n += 1; return login(h, "ana@uni.edu", password, caller: "key:stranger-\(n)") }
        for _ in 0..<3 { #expect(guess().quadError?.status == 401) }
        var waits: [Int64] = []
        for _ in 0..<4 {
            #expect(guess().quadError?.status == 401, "a failure past the free ones is still answered 401")
            let refused = guess()
            let error = try #require(refused.quadError)
            #expect(error.status == 429 && error.code == .tooManyRequests)
            #expect(error.message.contains("login_account_max_delay_ms"))
            let wait = try #require(error.details["retry_after_ms"]?.int)
            waits.append(wait)
            // While it waits even the right password is refused: a guess
            // would otherwise tell the guesser it was right.
            #expect(guess("correct horse").quadError?.status == 429)
            usleep(UInt32(wait + 20) * 1000)
        }
        #expect(waits[0] <= 200 && waits[1] > 200 && waits[1] <= 400 && waits[2] > 400, "\(waits)")
        #expect(waits.allSatisfy { $0 <= 800 }, "capped at login_account_max_delay_ms: \(waits)")
        // After the wait, the owner's right password gets in from a client
        // that has not failed, and the count starts over.
        _ = try waitUntil { login(h, "ana@uni.edu", "correct horse", caller: "key:owner").quadError == nil }
        #expect(login(h, "ana@uni.edu", "wrong horse", caller: "key:owner").quadError?.status == 401)
        #expect(login(h, "ana@uni.edu", "correct horse", caller: "key:owner").quadError == nil)
    }

    @Test func oneClientFailingOnManyAccountsWaitsWhileOtherClientsDoNot() throws {
        let (h, _) = try accounts(limits: Self.quick)
        _ = try h.call("accounts.register", ana())
        for k in 0..<4 { #expect(login(h, "guess\(k)@uni.edu", "wrong horse", caller: "key:stuffer").quadError?.status == 401) }
        let refused = try #require(login(h, "ana@uni.edu", "correct horse", caller: "key:stuffer").quadError)
        #expect(refused.status == 429 && refused.message.contains("this client") && refused.details["retry_after_ms"]?.int ?? 0 > 0)
        #expect(login(h, "ana@uni.edu", "correct horse", caller: "key:ana").quadError == nil)
        // Without a caller header (a test or an old broker), src stands in.
        var bare = Envelope.request("accounts.login", body: ["email": "ana@uni.edu", "password": "correct horse"], src: "edge/ana")
        bare.caller = nil
        #expect(h.handle(bare).quadError == nil)
    }

    @Test func theThrottleRemembersAtMostItsEntries() throws {
        var limits = Accounts.Settings.Limits()
        (limits.freeFailures, limits.baseDelayMs, limits.clientMaxDelayMs, limits.forgetAfterMs, limits.maxEntries) = (1, 100, 1000, 60_000, 50)
        let db = try TestStore.open("accounts", migrations: Accounts.migrations)
        let t = LoginThrottle(db: db, limits: limits)
        for k in 0..<200 { _ = try t.attempt([t.client("key:\(k)")], now: Int64(k)) }
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM login_failures")?.int("n") == 50)
        // The newest are kept; an entry past its memory goes with the prune.
        let keys = try db.query("SELECT key FROM login_failures").map { $0.string("key") }
        #expect(keys.contains("client:key:199") && !keys.contains("client:key:0"))
        try LoginThrottle.prune(db, limits: limits, now: 199 + 60_000 + 1001)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM login_failures")?.int("n") == 0)
    }

    /// Two workers of accounts on one store (the default stack runs two):
    /// the guesses before the first 429 are those one worker allows, not
    /// twice as many, whichever worker each guess reaches (issue 27, point 3).
    @Test(arguments: stores)
    func twoWorkersOnOneStoreCountTheSameFailures(postgres: Bool) throws {
        let db = try TestStore.open("accounts", migrations: Accounts.migrations, postgres: postgres)
        let key = SigningKey.generate()
        let workers = try (1...2).map { n in
            let h = Handlers(service: "accounts", instance: "accounts/\(n)", db: db)
            Accounts.register(h, db: db, settings: try .init(signingKey: key, hashing: .minimum, limits: Self.quick))
            return h
        }
        _ = try workers[0].call("accounts.register", ana())
        var statuses: [Int] = []
        for k in 0..<10 {
            let answer = login(workers[k % 2], "ana@uni.edu", "wrong horse \(k)", caller: "key:stranger-\(k)")
            statuses.append(answer.quadError?.status ?? 200)
            if answer.quadError?.status == 429 { break }
        }
        // quick: 3 free failures, a 4th that blocks, then 429.
        #expect(statuses == [401, 401, 401, 401, 429], "\(statuses)")
        // The right password gets in after the wait, on either worker, and forgets the count.
        #expect(try waitUntil { login(workers[1], "ana@uni.edu", "correct horse", caller: "key:owner").quadError == nil })
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM login_failures WHERE key = 'account:ana@uni.edu'")?.int("n") == 0)
    }

    @Test func aLoginFloodPastTheHashBudgetGets429WithoutHashingOrStoringAnAnswer() throws {
        var limits = Accounts.Settings.Limits()
        limits.hashMsPerSecond = 1  // a 2 ms bucket: one interactive hash empties it for a long while
        let (h, db) = try accounts(limits: limits, hashing: .interactive)
        #expect(login(h, "ana@uni.edu", "wrong horse", caller: "key:a").quadError?.status == 401)
        let flooded = try #require(login(h, "bob@uni.edu", "wrong horse", caller: "key:b").quadError)
        #expect(flooded.status == 429 && flooded.message.contains("hash_ms_per_second"))
        #expect(flooded.details["retry_after_ms"]?.int ?? 0 > 0)
        let id = MessageID.make()
        #expect(refusal { try h.call("accounts.register", ana(), id: id) }?.status == 429)
        #expect(try db.queryOne("SELECT id FROM idempotency WHERE id = $1", .text(id)) == nil, "a 429 is not the id's answer: a retry runs")
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM users")?.int("n") == 0)
    }

    @Test func passwordHashesRunOutsideTheWriteTransaction() throws {
        let timed = TimedDatabase(try TestStore.open("accounts", migrations: Accounts.migrations))
        let (h, _) = try accounts(limits: Accounts.Settings.Limits(), hashing: .interactive, db: timed)
        let started = Clock.monotonicMicros()
        _ = try PasswordHash.hash("a password to time", strength: .interactive)
        let hashMicros = Clock.monotonicMicros() - started
        let user = try #require(try h.call("accounts.register", ana())["user"]?.string)
        _ = try h.call("accounts.profile.update", ["password": "new password!", "current_password": "correct horse"], user: user)
        #expect(try h.call("accounts.login", ["email": "ana@uni.edu", "password": "new password!"])["user"]?.string == user)
        #expect(timed.longestMicros < hashMicros / 2, "a transaction held the store \(timed.longestMicros) µs; one hash takes \(hashMicros) µs")
    }
}

@Suite("accounts resist guessing: the current password")
struct CurrentPasswordGuessingTests {
    @Test func wrongCurrentPasswordsWithAStolenTokenAreThrottledToo() throws {
        let (h, _) = try accounts(limits: GuessingTests.quick)
        let user = try #require(try h.call("accounts.register", ana())["user"]?.string)
        func change(_ current: String) -> QuadError? {
            refusal { try h.call("accounts.profile.update", ["password": "new password!", "current_password": .string(current)], user: user, role: "student") }
        }
        for k in 0..<4 { #expect(change("guess \(k) guess")?.status == 403) }
        let throttled = try #require(change("correct horse"))
        #expect(throttled.status == 429 && throttled.details["retry_after_ms"]?.int ?? 0 > 0, "\(throttled.message)")
        // After the wait the owner's change goes through.
        #expect(try waitUntil { change("correct horse") == nil })
        #expect(try h.call("accounts.login", ["email": "ana@uni.edu", "password": "new password!"])["user"]?.string == user)
    }
}
