import Foundation
import Testing

/// Lower layers do not know upper ones (issue 13). SwiftPM does not always
/// refuse an import a target did not declare (a module built earlier is on
/// the search path), so the sources' own import lines are checked here.
@Suite("Layering")
struct LayeringTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources").path

    static let root = URL(fileURLWithPath: sources).deletingLastPathComponent().path

    /// The modules `module`'s sources import.
    func imports(of module: String) throws -> Set<String> {
        try Self.imports(inFolder: Self.sources + "/" + module)
    }

    /// The modules the Swift files under `dir` (and its subfolders) import.
    static func imports(inFolder dir: String) throws -> Set<String> {
        var found = Set<String>()
        guard let files = FileManager.default.enumerator(atPath: dir) else { return found }
        for case let file as String in files where file.hasSuffix(".swift") {
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

    /// A target of Package.swift: its name, kind, folder and declared dependencies.
    struct Target {
        var name: String
        var kind: String
        var folder: String
        var dependencies: Set<String>
    }

    /// Package.swift's targets, read from its text: `.KIND(name: "N",
    /// dependencies: [...], path: "P")`, each up to its closing parenthesis.
    static func targets() throws -> [Target] {
        let text = try String(contentsOfFile: root + "/Package.swift", encoding: .utf8)
        let kinds = ["target", "executableTarget", "testTarget", "systemLibrary"]
        var found: [Target] = []
        let pattern = try NSRegularExpression(pattern: #"\.(target|executableTarget|testTarget|systemLibrary)\(name: "([^"]+)""#)
        for m in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            let kind = String(text[Range(m.range(at: 1), in: text)!])
            let name = String(text[Range(m.range(at: 2), in: text)!])
            // The declaration runs to the parenthesis that closes it.
            var depth = 0
            var end = Range(m.range, in: text)!.upperBound
            var k = text.index(before: end)
            while k < text.endIndex {
                if text[k] == "(" || text[k] == "[" { depth += 1 }
                if text[k] == ")" || text[k] == "]" { depth -= 1; if depth == 0 { end = k; break } }
                k = text.index(after: k)
            }
            let body = String(text[Range(m.range, in: text)!.lowerBound..<end])
            var deps = Set<String>()
            if let open = body.range(of: "dependencies: [") {
                let rest = body[open.upperBound...]
                let list = rest[..<(rest.firstIndex(of: "]") ?? rest.endIndex)]
                for piece in list.split(separator: "\"") where !piece.contains(",") && !piece.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                    deps.insert(String(piece))
                }
            }
            var folder = (kind == "testTarget" ? "Tests/" : "Sources/") + name
            if let p = body.range(of: #"path: "([^"]+)""#, options: .regularExpression) {
                folder = String(body[p].dropFirst(7).dropLast())
            }
            precondition(kinds.contains(kind))
            found.append(Target(name: name, kind: kind, folder: folder, dependencies: deps))
        }
        return found
    }

    /// Modules of the toolchain, which no target declares.
    static let toolchain: Set<String> = ["Foundation", "FoundationEssentials", "FoundationNetworking", "Glibc", "Dispatch", "Testing", "XCTest", "Synchronization"]

    /// The C wrappers: the one module that may import each C library.
    static let wrapperOf = ["CZeroMQ": "QuadMessaging", "CSQLite": "QuadStore", "CPostgres": "QuadStore", "CSodium": "QuadAuth", "CMicroHTTPD": "QuadHTTP"]

    @Test func everyTargetImportsOnlyWhatPackageSwiftDeclares() throws {
        let all = try Self.targets()
        let swiftTargets = all.filter { $0.kind != "systemLibrary" }
        #expect(swiftTargets.count >= 30, "Package.swift read: \(swiftTargets.map(\.name))")
        for t in swiftTargets {
            let undeclared = try Self.imports(inFolder: Self.root + "/" + t.folder).subtracting(Self.toolchain).subtracting(t.dependencies)
            #expect(undeclared.isEmpty, "\(t.name) imports \(undeclared.sorted()) without declaring it in Package.swift")
        }
    }

    /// Libraries never end the process: they throw (a command line refused
    /// is a `UsageError`), and only an executable's main exits.
    @Test func noLibraryCallsExit() throws {
        let call = try NSRegularExpression(pattern: #"(^|[^A-Za-z_.])(exit|_exit|abort)\("#)
        for t in try Self.targets() where t.kind == "target" {
            guard let files = FileManager.default.enumerator(atPath: Self.root + "/" + t.folder) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let text = try String(contentsOfFile: Self.root + "/" + t.folder + "/" + file, encoding: .utf8)
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let code = String(line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
                    let found = call.firstMatch(in: code, range: NSRange(code.startIndex..., in: code)) != nil
                    #expect(!found, "\(t.folder)/\(file):\(n + 1) ends the process: \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
    }

    @Test func onlyItsWrapperImportsACLibrary() throws {
        let all = try Self.targets()
        #expect(Set(all.filter { $0.kind == "systemLibrary" }.map(\.name)) == Set(Self.wrapperOf.keys), "a C library without its wrapper named here")
        for t in all where t.kind != "systemLibrary" {
            let imported = try Self.imports(inFolder: Self.root + "/" + t.folder)
            for (c, wrapper) in Self.wrapperOf where imported.contains(c) || t.dependencies.contains(c) {
                #expect(t.name == wrapper, "\(t.name) uses \(c) (import or dependency): only \(wrapper) wraps it")
            }
        }
    }

    @Test(arguments: [
        // The store: SQL values, rows and bytes; no envelope, no Quad module.
        ("QuadStore", ["Foundation", "CSQLite", "CPostgres"]),
        ("QuadWire", ["Foundation"]),
        // The schema engine knows JSON and no service; the contract declares
        // every service's schemas on it.
        ("QuadSchema", ["Foundation", "QuadWire"]),
        ("QuadContract", ["Foundation", "QuadWire", "QuadSchema"]),
        // Messaging: libzmq and the standard library's locks (Synchronization), no Foundation.
        ("QuadMessaging", ["CZeroMQ", "Synchronization"]),
        ("QuadProcess", ["Foundation", "QuadWire", "QuadMessaging"]),
        // The read-only HTTP server: libmicrohttpd and nothing of Quad.
        ("QuadHTTP", ["Foundation", "CMicroHTTPD"]),
        // Metrics: a registry and an HTTP endpoint on QuadHTTP, no other Quad module.
        ("QuadMetrics", ["Foundation", "QuadHTTP"]),
        // The broker: no runtime, so no store.
        ("QuadBroker", ["Foundation", "QuadWire", "QuadMessaging", "QuadProcess", "QuadAuth", "QuadMetrics"]),
        ("quad-broker", ["Foundation", "QuadWire", "QuadProcess", "QuadAuth", "QuadBroker", "QuadMetrics"]),
        // The phone client kit knows no phone app and no contract; the app
        // knows no simulator.
        ("QuadPhoneKit", ["Foundation", "QuadAuth", "QuadImages", "QuadMessaging", "QuadRuntime", "QuadStore", "QuadWire"]),
        ("QuadPhone", ["Foundation", "QuadAuth", "QuadContract", "QuadMessaging", "QuadMetrics", "QuadPhoneKit", "QuadRuntime", "QuadStore", "QuadWire"]),
        // A service's domain: the contract, the runtime and its store; no other service.
        ("QuadNotifications", ["Foundation", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire"]),
    ])
    func importsOnlyWhatIsBelow(module: String, allowed: [String]) throws {
        let extra = try imports(of: module).subtracting(allowed)
        #expect(extra.isEmpty, "\(module) imports \(extra.sorted()), which it must not know")
    }
}
