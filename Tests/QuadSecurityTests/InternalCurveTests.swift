import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// CURVE on the broker's internal sockets (`--service-keys`), as the
/// launcher turns it on when services run on other hosts: a worker with the
/// services' key registers and serves; one without it, or with another key,
/// never registers; a peer without the key gets nothing from the internal
/// frontend, where `user` and `role` are trusted.
@Suite("CURVE on the internal sockets", .serialized)
struct InternalCurveTests {
    @Test func onlyPeersWithAServiceKeyReachTheBackendAndTheInternalFrontend() throws {
        let stack = try TestStack(name: "internal-curve")
        // The services' key pair, made as deploy/stack makes it.
        let secret = stack.dir + "/keys/services.key"
        let (made, publicText, _) = try run("quad-broker", ["--curve-key", secret, "--show-key"])
        #expect(made == 0)
        let servicePublic = try #require(Curve.decode(publicText.trimmingCharacters(in: .whitespacesAndNewlines)))
        let serviceSecret = try #require(Curve.decode(try String(contentsOfFile: secret, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        try stack.startBroker(extra: ["--service-keys", secret.replacingOccurrences(of: ".key", with: ".pub")])
        let key = try #require(stack.brokerKey)

        // A worker with the key registers and serves through the frontend.
        try stack.startWorker("quad-tally", instance: "tally/1", environment: ["QUAD_SERVICE_KEY_FILE": secret])
        #expect(try stack.waitForWorkers("tally", count: 1, timeoutMs: 15_000), "a worker with the services' key did not register")
        let client = try stack.client()
        #expect(try client.request("tally.whoami", timeoutMs: 5000)["by"]?.string == "tally/1")
        #expect(eventually { stack.log("tally/1").contains("internal sockets: CURVE with the services' key \(publicText.trimmingCharacters(in: .whitespacesAndNewlines))") })

        // Without the key, or with another, a worker never registers.
        let other = try curveKeyPair()
        let otherFile = stack.dir + "/keys/other.key"
        try (Curve.encode(other.secretKey)! + "\n").write(toFile: otherFile, atomically: true, encoding: .utf8)
        chmod(otherFile, 0o600)  // a secret key file others may read is refused (KeyFile)
        try stack.startWorker("quad-tally", instance: "tally/2")
        try stack.startWorker("quad-tally", instance: "tally/3", environment: ["QUAD_SERVICE_KEY_FILE": otherFile])
        usleep(2_500_000)
        #expect(try stack.waitForWorkers("tally", count: 1, timeoutMs: 1000), "a worker without the services' key registered")
        let log = stack.log("broker")
        #expect(log.contains("key \(other.publicText) is not in --service-keys"), "\(log.suffix(2000))")

        // The internal frontend: nothing for a peer without the key, an
        // answer for one with it.
        let context = ZMQContext()
        let plain = try RawPeer(context, stack.endpoints.internal, serverKey: nil)
        #expect(try plain.call(.request("tally.whoami"), within: 1500) == nil, "a peer without CURVE got an answer on the internal frontend")
        let stranger = try RawPeer(context, stack.endpoints.internal, serverKey: key, clientKeys: (other.publicKey, other.secretKey))
        #expect(try stranger.call(.request("tally.whoami"), within: 1500) == nil, "a peer with a key not listed got an answer")
        let service = try RawPeer(context, stack.endpoints.internal, serverKey: key, clientKeys: (servicePublic, serviceSecret))
        #expect(try service.call(.request("tally.whoami"), within: 5000)?.kind == .reply)

        // Workers that never got in still stop on SIGTERM.
        for name in ["tally/2", "tally/3"] {
            let p = try #require(stack.process(name))
            stack.kill(name, signal: SIGTERM)
            let until = Clock.monotonicMillis() + 10_000
            while p.isRunning && Clock.monotonicMillis() < until { usleep(50_000) }
            #expect(!p.isRunning, "\(name), refused by the broker, did not stop on SIGTERM")
            if p.isRunning { stack.kill(name) }
        }

        // A worker is refused at start when the key file is bad.
        let (bad, _, why) = try run("quad-tally", ["--instance", "tally/9", "--db", stack.dir + "/bad.db", "--backend", stack.endpoints.backend],
                                    environment: ["QUAD_SERVICE_KEY_FILE": stack.dir + "/missing.key", "QUAD_HOME": stack.dir])
        #expect(bad == 1 && why.contains("QUAD_SERVICE_KEY_FILE"), "\(why)")
    }
}
