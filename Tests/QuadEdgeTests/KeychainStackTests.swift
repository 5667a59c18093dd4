import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A real phone against the real stack: it signs in, acts, renews its
/// session with accounts.refresh, and none of its files holds a token, a
/// refresh token, its password or its CURVE secret key.
@Suite("the phone's keychain on a running stack", .serialized)
struct KeychainStackTests {
    @Test func noFileOfARunningPhoneHoldsASecret() throws {
        // Tokens of 40 s, renewed 35 s before they end: a refresh every 5 s.
        let edge = try EdgeStack("keychain", edgeArguments: ["--refresh-before-ms", "35000"],
                                 serviceArguments: ["accounts": ["--token-ttl-seconds", "40"]])
        let user = try edge.signIn()
        let keychainPath = edge.phonesDir + "/phone-001.keychain"
        var seen: [String: Set<String>] = ["session token": [], "refresh token": []]
        func look() throws {
            let keychain = try Keychain(path: keychainPath)
            if let t = keychain[.sessionToken] { seen["session token"]!.insert(t) }
            if let t = keychain[.refreshToken] { seen["refresh token"]!.insert(t) }
        }
        try look()
        #expect(seen["refresh token"]!.count == 1, "signed in, the phone holds a refresh token")
        try edge.act("orders.cart.add", ["product": "p-0306", "quantity": 1])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        // Two renewals, each with a new refresh token.
        let until = Clock.monotonicMillis() + 45_000
        while seen["refresh token"]!.count < 3 && Clock.monotonicMillis() < until {
            usleep(200_000)
            try look()
        }
        #expect(seen["refresh token"]!.count >= 3, "the phone renewed its session twice:\n\(edge.stack.log("edge"))")
        try edge.act("favorites.remove", ["product": "p-0306"])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try edge.state()["user"]?.string == user)
        #expect(try !edge.messages().contains { ($0["text"]?.string ?? "").hasPrefix("Sign in again") }, "the session was kept")

        let students = try Students(path: Students.path(forPhonesDir: edge.phonesDir))
        let passwords = Array(students.keychain.items.values)
        #expect(passwords.count == 1)
        let curve = try #require(try Keychain(path: keychainPath)[.curveSecretKey], "CURVE is on: the phone's key is in its keychain")
        let curveKey = try #require(Z85.decode(curve))
        var secrets: [(String, [Data])] = [("the CURVE secret key", spellings(key: curveKey))]
        for (name, values) in seen { secrets += values.map { (name, spellings(text: $0)) } }
        secrets += passwords.map { ("the password", spellings(text: $0)) }
        let files = filesBytes(under: edge.phonesDir).map(\.0)
        #expect(files.contains { $0.hasSuffix("phone-001.db") } && files.contains(keychainPath), "\(files)")
        #expect(leaks(under: edge.phonesDir, secrets) == [], "while the phone runs")
        edge.stack.kill("edge", signal: SIGKILL)
        #expect(leaks(under: edge.phonesDir, secrets) == [], "after the phone was killed")
    }
}
