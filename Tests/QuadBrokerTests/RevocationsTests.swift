import QuadContract
import QuadWire
import Testing
@testable import QuadBroker

/// The broker reads accounts.session.revoked bodies and accounts.revocations
/// entries by field (it does not link the contract): what it reads is what
/// the contract's type, the one accounts writes them with, writes.
@Suite struct RevocationsTests {
    typealias Revocation = Contract.Accounts.Revocation
    let user = "0192f3a4-5b6c-7d8e-9f01-23456789abcd"

    @Test func anEntryIsWhatAccountsWrote() {
        let one = Revocation(user: user, jti: "j1", beforeMs: nil, untilMs: 9_000)
        #expect(Revocations.entry(one.json) == .init(user: user, jti: "j1", beforeMs: nil, untilMs: 9_000))
        let all = Revocation(user: user, jti: nil, beforeMs: 5_000, untilMs: 9_000)
        #expect(all.json["jti"] == .null, "the wire keeps a null jti")
        #expect(Revocations.entry(all.json) == .init(user: user, jti: nil, beforeMs: 5_000, untilMs: 9_000))
    }

    static let unusable: [(String, JSON)] = [
        ("no user", .object(["jti": .string("j1"), "before_ms": .null, "until_ms": .int(9_000)])),
        ("an empty user", .object(["user": .string(""), "jti": .string("j1"), "before_ms": .null, "until_ms": .int(9_000)])),
        ("neither jti nor before_ms", .object(["user": .string("u"), "jti": .null, "before_ms": .null, "until_ms": .int(9_000)])),
        ("an empty jti only", .object(["user": .string("u"), "jti": .string(""), "before_ms": .null, "until_ms": .int(9_000)])),
        ("no until_ms", .object(["user": .string("u"), "jti": .string("j1"), "before_ms": .null])),
        ("a jti that is not a string", .object(["user": .string("u"), "jti": .int(7), "before_ms": .int(5), "until_ms": .int(9_000)])),
        ("not an object", .array([.string("u"), .string("j1")])),
    ]

    @Test(arguments: unusable)
    func anUnusableBodyIsNoEntry(why: String, body: JSON) {
        #expect(Revocations.entry(body) == nil, "\(why)")
    }

    @Test func anEntryApplies() {
        var table = Revocations(maxEntries: 10)
        let r = Revocation(user: user, jti: nil, beforeMs: 5_000, untilMs: 9_000)
        table.add(Revocations.entry(r.json)!, now: 1_000)
        #expect(table.byUser[user]?.before == 5_000 && table.count == 1)
    }
}
