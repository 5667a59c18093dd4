import Foundation
import QuadContract
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit
import Testing

/// The phone's action list against the contract (Sources/QuadContract):
/// what a phone queues or sends is a type some service declares.
@Suite struct ActionsContractTests {
    /// Every queued or online-only action is a mutation for a signed-in user:
    /// a retry under the same id is safe, and the broker's `user` is the phone's.
    @Test func everyActionIsADeclaredMutationForASignedInUser() throws {
        for type in Actions.queued.sorted() + Actions.onlineOnly.keys.sorted() {
            let op = try #require(Contract.operation(type), "the phone sends \(type), which the contract does not declare")
            #expect(op.kind == .mutation, "\(type) is queued by the phone but the contract declares it a \(op.kind)")
            #expect(op.auth == .user, "\(type) is sent with the phone's session but the contract's auth is \(op.auth)")
        }
    }

    /// Every request type named in the phone's code is declared (reads
    /// included), found by reading Sources/QuadEdge.
    @Test func everyTypeThePhoneNamesIsDeclared() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dir = root.appendingPathComponent("Sources/QuadEdge")
        let services = "accounts|catalog|favorites|orders|reservations|telemetry|analytics"
        let pattern = try NSRegularExpression(pattern: "\"((?:\(services))\\.[a-z_.]+)\"")
        var named = Set<String>()
        for file in try FileManager.default.contentsOfDirectory(atPath: dir.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: dir.appendingPathComponent(file), encoding: .utf8)
            for m in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                named.insert(String(text[Range(m.range(at: 1), in: text)!]))
            }
        }
        #expect(named.count > 10)
        // Event names the phone reads (orders.placed) are events, not requests.
        let undeclared = named.filter { Contract.operation($0) == nil && Contract.event($0) == nil }
        #expect(undeclared.isEmpty, "the phone names types the contract does not declare: \(undeclared.sorted())")
    }
}
