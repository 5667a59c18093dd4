import Foundation
import Testing

/// Lower layers do not know upper ones (issue 13). SwiftPM does not always
/// refuse an import a target did not declare (a module built earlier is on
/// the search path), so the sources' own import lines are checked here.
@Suite("Layering")
struct LayeringTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources").path

    /// The modules `module`'s sources import.
    func imports(of module: String) throws -> Set<String> {
        let dir = Self.sources + "/" + module
        var found = Set<String>()
        for file in try FileManager.default.contentsOfDirectory(atPath: dir) where file.hasSuffix(".swift") {
            let text = try String(contentsOfFile: dir + "/" + file, encoding: .utf8)
            for line in text.split(separator: "\n") {
                let words = line.split(separator: " ")
                if let k = words.firstIndex(of: "import"), k + 1 < words.count, words[..<k].allSatisfy({ $0.hasPrefix("@") }) {
                    found.insert(String(words[k + 1]))
                }
            }
        }
        return found
    }

    @Test(arguments: [
        // The store: SQL values, rows and bytes; no envelope, no Quad module.
        ("QuadStore", ["Foundation", "CSQLite", "CPostgres"]),
        ("QuadWire", ["Foundation"]),
        ("QuadMessaging", ["CZeroMQ"]),
        ("QuadProcess", ["Foundation", "QuadWire"]),
        // The read-only HTTP server: libmicrohttpd and nothing of Quad.
        ("QuadHTTP", ["Foundation", "CMicroHTTPD"]),
        // Metrics: a registry and an HTTP endpoint on QuadHTTP, no other Quad module.
        ("QuadMetrics", ["Foundation", "QuadHTTP"]),
        // The broker: no runtime, so no store.
        ("QuadBroker", ["Foundation", "QuadWire", "QuadMessaging", "QuadProcess", "QuadAuth", "QuadMetrics"]),
        ("quad-broker", ["Foundation", "QuadWire", "QuadProcess", "QuadAuth", "QuadBroker", "QuadMetrics"]),
        // A service's domain: the contract, the runtime and its store; no other service.
        ("QuadNotifications", ["Foundation", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire"]),
    ])
    func importsOnlyWhatIsBelow(module: String, allowed: [String]) throws {
        let extra = try imports(of: module).subtracting(allowed)
        #expect(extra.isEmpty, "\(module) imports \(extra.sorted()), which it must not know")
    }
}
