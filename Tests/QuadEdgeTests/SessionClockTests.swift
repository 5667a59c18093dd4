import Foundation
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

@Suite("A phone's session on its own clock")
struct SessionClockTests {
    func token(_ claims: String) -> String {
        func b64url(_ s: String) -> String {
            Data(s.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        return b64url(#"{"alg":"EdDSA","typ":"JWT"}"#) + "." + b64url(claims) + "." + String(repeating: "A", count: 86)
    }

    @Test func aSessionLastsItsTokensLifetimeFromNowWhateverThePhonesClockSays() {
        // accounts issued it at 1000 s for an hour; the phone's clock is 5 days on.
        let now: Int64 = 1_000_000 + 5 * 86_400_000
        let t = token(#"{"sub":"u1","iat":1000,"exp":4600,"jti":"x"}"#)
        #expect(Phone.localExpiry(token: t, expiresAt: 4_600_000, now: now) == now + 3_600_000)
    }

    @Test func claimsThatCannotBeReadLeaveTheGivenEnd() {
        for t in [nil, "garbage", "a.b", token(#"{"iat":5,"exp":5}"#), token(#"{"iat":0,"exp":99999999999}"#), token("not json"), "a.%%%.c"] {
            #expect(Phone.localExpiry(token: t, expiresAt: 42, now: 7) == 42, "\(t ?? "nil")")
        }
    }
}
