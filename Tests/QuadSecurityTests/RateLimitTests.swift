import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker's rate limit on the public frontend: a token bucket per
/// connection, per phone (`src`) and per verified user; a request over it
/// gets 429 `too_many_requests` from the broker, naming the limit and the
/// time to wait, and never reaches a service.
@Suite("Rate limit at the broker", .serialized)
struct RateLimitTests {
    static let rate = 5, burst = 10

    /// The broker with a low limit, tally, and an accounts key of the test's
    /// own so it can sign tokens for any user.
    func stack(_ name: String) throws -> (TestStack, SigningKey) {
        let stack = try TestStack(name: name)
        let key = try KeyFiles.loadOrCreateSigningKey(at: stack.dir + "/keys/accounts.key").key
        try stack.startBroker(extra: ["--rate-per-second", String(Self.rate), "--rate-burst", String(Self.burst)])
        try stack.startWorker("quad-tally", instance: "tally/1")
        #expect(try stack.waitForWorkers("tally", count: 1))
        usleep(UInt32(Self.burst * 1_000_000 / Self.rate))  // waitForWorkers' own calls spent tokens
        return (stack, key)
    }

    func token(_ key: SigningKey, user: String) -> String {
        let now = Int64(Clock.nowMillis())
        return key.sign(TokenClaims(user: user, role: "student", expiresAt: now + 600_000, issuedAt: now))
    }

    /// Sends requests until one is refused (at most `max`); returns how many
    /// were served and the refusal.
    func untilRefused(max: Int = 30, _ next: () throws -> Envelope) throws -> (served: Int, refusal: Envelope?) {
        var served = 0
        for _ in 0..<max {
            let answer = try next()
            if answer.quadError?.status == 429 { return (served, answer) }
            #expect(answer.kind == .reply, "\(answer.body)")
            served += 1
        }
        return (served, nil)
    }

    func check(_ refusal: Envelope?, served: Int, naming who: String) throws {
        let answer = try #require(refusal, "never refused")
        // The burst, plus what refilled while the burst was being sent.
        #expect(served >= Self.burst && served <= Self.burst + 4, "served \(served) before the first 429")
        let error = try #require(answer.quadError)
        #expect(error.code == .tooManyRequests && error.status == 429)
        #expect(answer.src == "broker", "refused by the broker, not a service")
        #expect(error.message.contains(who), "\(error.message)")
        #expect(error.message.contains("(rate_per_second, rate_burst)") && error.message.contains("\(Self.rate) per second"))
        let wait = try #require(error.details["retry_after_ms"]?.int)
        #expect(wait >= 1 && wait <= 1000 / Int64(Self.rate), "retry_after_ms \(wait)")
    }

    @Test func aPhoneOverItsRateGets429WithTheTimeToWaitThenIsServedAgain() throws {
        let (stack, _) = try stack("rate-src")
        let context = ZMQContext()
        // A new connection each time: only the phone's bucket fills.
        func phone(_ src: String) throws -> Client { try Client(context: context, endpoint: stack.endpoints.frontend, source: src, serverKey: stack.brokerKey) }
        let (served, refusal) = try untilRefused { try phone("edge/alice").call(.request("tally.whoami"), attempts: 1) }
        try check(refusal, served: served, naming: "from phone 'edge/alice'")
        // Another phone is not held back by Alice's bucket.
        #expect(try phone("edge/bob").call(.request("tally.whoami"), attempts: 1).kind == .reply)
        // After the time to wait, Alice is served again.
        let wait = try #require(refusal?.quadError?.details["retry_after_ms"]?.int)
        usleep(UInt32(wait + 20) * 1000)
        #expect(try phone("edge/alice").call(.request("tally.whoami"), attempts: 1).kind == .reply)
        // The refused requests never reached tally.
        let refusedID = try #require(refusal?.corr)
        #expect(!stack.log("tally/1").contains(refusedID))
        // The broker says so in its log, once, not once per refusal.
        #expect(stack.log("broker").components(separatedBy: "rate limit: too many requests from phone 'edge/alice'").count - 1 == 1)
        #expect(try stack.client().request("sys.health")["rate_limited"]?.int ?? 0 >= 1)
    }

    @Test func oneConnectionIsLimitedWhateverSourceItClaims() throws {
        let (stack, _) = try stack("rate-connection")
        let client = try stack.client()
        var n = 0
        let (served, refusal) = try untilRefused {
            n += 1
            client.source = "edge/spoof-\(n)"  // a fresh src each time does not help
            return try client.call(.request("tally.whoami"), attempts: 1)
        }
        try check(refusal, served: served, naming: "from this connection")
    }

    @Test func aUserIsLimitedAcrossPhonesAndConnections() throws {
        let (stack, key) = try stack("rate-user")
        let context = ZMQContext()
        let ana = token(key, user: "u-ana")
        var n = 0
        let (served, refusal) = try untilRefused {
            n += 1
            let c = try Client(context: context, endpoint: stack.endpoints.frontend, source: "edge/ana-\(n)", serverKey: stack.brokerKey)
            c.token = ana
            return try c.call(.request("tally.whoami"), attempts: 1)
        }
        try check(refusal, served: served, naming: "for user 'u-ana'")
        // Another user is served meanwhile.
        let bob = try Client(context: context, endpoint: stack.endpoints.frontend, source: "edge/bob", serverKey: stack.brokerKey)
        bob.token = token(key, user: "u-bob")
        #expect(try bob.call(.request("tally.whoami"), attempts: 1).kind == .reply)
    }

    @Test func servicesOnTheInternalFrontendAreNotLimited() throws {
        let (stack, _) = try stack("rate-internal")
        let client = try stack.internalClient()
        for _ in 0..<(Self.burst * 3) {
            #expect(try client.call(.request("tally.whoami"), attempts: 1).kind == .reply)
        }
    }
}
