import Foundation
import QuadMessaging
import Testing
@testable import QuadWire

/// Every key file in Quad is read and written by ``KeyFile``: one place for
/// the 0600 rule, the formats and the errors.
@Suite("Key files")
struct KeyFileTests {
    func folder() throws -> String {
        let dir = NSTemporaryDirectory() + "quad-keyfile-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    func mode(_ path: String) -> mode_t {
        var info = stat()
        stat(path, &info)
        return info.st_mode & 0o777
    }

    @Test func z85IsRFC32AndAgreesWithLibzmq() throws {
        // RFC 32's test vector.
        #expect(Z85.encode([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]) == "HelloWorld")
        #expect(Z85.decode("HelloWorld") == [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
        for _ in 0..<50 {
            let pair = try Curve.keyPair()
            let secret = try #require(Curve.decode(pair.secretKey))
            #expect(Z85.encode(secret) == pair.secretKey)
            #expect(KeyFile.Format.z85.decode(pair.publicKey) == Curve.decode(pair.publicKey))
        }
        #expect(Z85.decode("Hello") != nil)
        #expect(Z85.decode("Hell") == nil, "not a multiple of 5")
        #expect(Z85.decode("Hell~") == nil, "not in the alphabet")
        #expect(Z85.decode("#####") == nil, "more than four bytes")
        #expect(KeyFile.Format.z85.decode("HelloWorld") == nil, "a CURVE key is 32 bytes")
    }

    @Test func aSecretKeyOthersMayReadIsRefusedSayingHowToFixIt() throws {
        let dir = try folder()
        let path = dir + "/s.key"
        let key = (0..<32).map { UInt8($0) }
        try (Z85.encode(key)! + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        #expect { try KeyFile.read(path, what: "the test key", format: .z85, secret: true) } throws: {
            let message = ($0 as? KeyFileError)?.message ?? ""
            return message.contains("the test key \(path) is readable by others (mode 644): chmod 600 \(path)")
        }
        // A public key may be read by anyone.
        #expect(try KeyFile.read(path, what: "the test key", format: .z85, secret: false) == key)
        chmod(path, 0o600)
        #expect(try KeyFile.read(path, what: "the test key", format: .z85, secret: true) == key)
    }

    @Test func errorsNameTheFileWhatItIsForAndWhatALineMustBe() throws {
        let dir = try folder()
        #expect { try KeyFile.read(dir + "/none.pub", what: "the broker's public key", format: .z85, secret: false) } throws: {
            ($0 as? KeyFileError)?.message == "cannot read the broker's public key \(dir)/none.pub: no such file"
        }
        try "not a key\n".write(toFile: dir + "/bad.pub", atomically: true, encoding: .utf8)
        #expect { try KeyFile.read(dir + "/bad.pub", what: "the broker's public key", format: .z85, secret: false) } throws: {
            ($0 as? KeyFileError)?.message == "the broker's public key \(dir)/bad.pub is not a key: expected one line of 40 Z85 characters"
        }
        let good = Z85.encode([UInt8](repeating: 7, count: 32))!
        try "# clients\n\n\(good)\nshort\n".write(toFile: dir + "/list", atomically: true, encoding: .utf8)
        #expect { try KeyFile.readList(dir + "/list", what: "the allowed keys", format: .z85) } throws: {
            ($0 as? KeyFileError)?.message.contains("the allowed keys \(dir)/list line 4 is not a key") == true
        }
    }

    @Test func aPairIsCreatedOnceWithItsPublicKeyBeside() throws {
        let dir = try folder()
        let path = dir + "/keys/x.key"
        let secret = [UInt8](repeating: 1, count: 32)
        let derive: ([UInt8]) -> [UInt8]? = { $0.map { $0 &+ 1 } }
        let made = try KeyFile.loadOrCreatePair(at: path, what: "the x key", format: .z85, make: { secret }, publicKey: derive)
        #expect(made.created && made.secretKey == secret && made.publicKey == derive(secret))
        #expect(mode(path) == 0o600 && mode(dir + "/keys/x.pub") == 0o644)
        #expect(try KeyFile.readLine(dir + "/keys/x.pub") == made.publicText)
        // The next start loads the same key, and mends a public file that differs.
        try "stale\n".write(toFile: dir + "/keys/x.pub", atomically: true, encoding: .utf8)
        let again = try KeyFile.loadOrCreatePair(at: path, what: "the x key", format: .z85, make: { [UInt8](repeating: 9, count: 32) }, publicKey: derive)
        #expect(!again.created && again.secretKey == secret)
        #expect(try KeyFile.readLine(dir + "/keys/x.pub") == made.publicText)
    }
}
