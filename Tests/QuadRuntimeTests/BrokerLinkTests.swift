import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker stores nothing, so it must not carry the stores: QuadBroker
/// depends on QuadProcess, never on QuadRuntime or QuadStore (issue 13).
/// A dependency added back in Package.swift shows here, in what the dynamic
/// linker loads for the built executable.
@Suite("Broker links no store")
struct BrokerLinkTests {
    /// What `ldd` says `executable` (in the build folder) loads.
    func libraries(of executable: String) throws -> [String] {
        let path = TestStack.binDir + "/" + executable
        #expect(FileManager.default.isExecutableFile(atPath: path), "no \(path): build it first")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/ldd")
        p.arguments = [path]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0, "ldd \(path) failed")
        return text.split(separator: "\n").compactMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).first.map(String.init) }
    }

    func isStore(_ library: String) -> Bool { library.hasPrefix("libsqlite3") || library.hasPrefix("libpq.") }

    @Test func theBrokerLinksNeitherSQLiteNorLibpq() throws {
        let broker = try libraries(of: "quad-broker")
        // ldd read the right file: the broker does link ZeroMQ and sodium.
        #expect(broker.contains { $0.hasPrefix("libzmq") } && broker.contains { $0.hasPrefix("libsodium") }, "\(broker)")
        #expect(broker.filter(isStore).isEmpty, "quad-broker links \(broker.filter(isStore))")
    }

    @Test func aServiceDoesLinkThem() throws {
        // The same check sees the stores where they belong, so the one above
        // cannot pass for want of looking.
        let tally = try libraries(of: "quad-tally")
        #expect(tally.contains { $0.hasPrefix("libsqlite3") } && tally.contains { $0.hasPrefix("libpq.") }, "\(tally)")
    }
}

/// The services' CURVE key is read as every secret key file is.
@Suite("Services' key file")
struct ServiceKeyFileTests {
    @Test func aServiceKeyFileOthersMayReadIsRefused() throws {
        let dir = NSTemporaryDirectory() + "quad-servicekey-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let pair = try Curve.keyPair()
        try (pair.secretKey + "\n").write(toFile: dir + "/services.key", atomically: true, encoding: .utf8)
        try (pair.publicKey + "\n").write(toFile: dir + "/broker.pub", atomically: true, encoding: .utf8)
        let environment = ["QUAD_SERVICE_KEY_FILE": dir + "/services.key", "QUAD_BROKER_KEY_FILE": dir + "/broker.pub"]
        chmod(dir + "/services.key", 0o644)
        #expect { try InternalCurve.fromEnvironment(environment) } throws: {
            ($0 as? QuadError)?.message.contains("QUAD_SERVICE_KEY_FILE) \(dir)/services.key is readable by others (mode 644): chmod 600") == true
        }
        chmod(dir + "/services.key", 0o600)
        let curve = try #require(try InternalCurve.fromEnvironment(environment))
        #expect(curve.keys.secretKey == Curve.decode(pair.secretKey) && curve.keys.publicKey == Curve.decode(pair.publicKey))
    }
}
