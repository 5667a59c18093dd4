import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The one CURVE key type: made, written and read back, refused when its
/// file is open to others, and put on real sockets as server and client.
@Suite("CURVE key pairs, one type")
struct CurveKeysTests {
    func folder() throws -> String {
        let dir = NSTemporaryDirectory() + "quad-curvekeys-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test func aPairIsItsSecretKeyWhicheverWayItComes() throws {
        let made = try CurveKeys.generate()
        #expect(made.publicKey.count == 32 && made.secretKey.count == 32)
        #expect(CurveKeys(secretText: made.secretText) == made)
        #expect(CurveKeys(secretKey: made.secretKey) == made)
        #expect(Curve.publicKey(forSecretKey: made.secretText) == made.publicText)
        #expect(CurveKeys(secretText: "not a key") == nil)
        #expect(CurveKeys(secretKey: [1, 2, 3]) == nil)
        #expect(try CurveKeys.generate() != made)
    }

    @Test func aSecretKeyFileIsMadeOnceAndItsPublicKeyWrittenBesideIt() throws {
        let dir = try folder()
        let path = dir + "/broker.key"
        let (first, created) = try CurveKeys.loadOrCreate(at: path, what: "the test's key")
        #expect(created)
        let (again, createdAgain) = try CurveKeys.loadOrCreate(at: path, what: "the test's key")
        #expect(!createdAgain && again == first)
        #expect(try CurveKeys.load(path, what: "the test's key") == first)
        #expect(try CurveKeys.readPublicKey(dir + "/broker.pub", what: "its public key") == first.publicKey)
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        // A public key file that lost its key is written again.
        try "garbage\n".write(toFile: dir + "/broker.pub", atomically: true, encoding: .utf8)
        _ = try CurveKeys.loadOrCreate(at: path, what: "the test's key")
        #expect(try CurveKeys.readPublicKey(dir + "/broker.pub", what: "its public key") == first.publicKey)
        // A secret key file others may read is refused, naming the file.
        chmod(path, 0o644)
        #expect { try CurveKeys.load(path, what: "the test's key") } throws: {
            ($0 as? KeyFileError)?.message.contains("\(path) is readable by others") == true
        }
    }

    @Test func aServerAndAClientOfItsKeyTalkAndAClientOfAnotherKeyIsNotHeard() throws {
        let context = ZMQContext()
        let server = try CurveKeys.generate()
        let router = try context.socket(.router)
        try server.serve(router)
        try router.setReceiveTimeout(10_000)
        // ipc, not inproc: libzmq runs no security handshake over inproc.
        let endpoint = "ipc://\(try folder())/curve.sock"
        try router.bind(endpoint)

        let client = try context.socket(.dealer)
        try CurveKeys.generate().connect(client, to: server.publicKey)
        try client.connect(endpoint)
        try client.send([Array("hello".utf8)])
        let got = try #require(try router.receive())
        #expect(got.last == Array("hello".utf8))

        // A client that takes another key for the server's never gets through.
        let stranger = try context.socket(.dealer)
        try CurveKeys.generate().connect(stranger, to: try CurveKeys.generate().publicKey)
        try stranger.setLinger(0)
        try stranger.connect(endpoint)
        try? stranger.send([Array("intruder".utf8)], dontWait: true)
        try router.setReceiveTimeout(500)
        #expect(try router.receive() == nil)
    }
}
