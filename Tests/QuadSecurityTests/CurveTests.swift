import Foundation
import QuadBroker
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// CURVE on the broker's public frontend: a client needs the broker's
/// public key; without it, or with another, it never gets a reply, and the
/// broker's log says why.
@Suite("CURVE on the frontend", .serialized)
struct CurveTests {
    func stack(_ name: String, extra: [String] = []) throws -> TestStack {
        let stack = try TestStack(name: name)
        try stack.startBroker(extra: extra)
        try stack.startWorker("quad-tally", instance: "tally/1")
        // Through the internal frontend: with --allow-keys the test's own
        // client key is not welcome on the public one.
        let client = try stack.internalClient()
        let until = Clock.monotonicMillis() + 10_000
        var ready = false
        while !ready && Clock.monotonicMillis() < until {
            ready = (try? client.request("tally.sys.health", timeoutMs: 500, attempts: 1)) != nil
        }
        #expect(ready, "tally did not register")
        return stack
    }

    @Test func aClientWithoutTheKeyOrWithAWrongOneNeverGetsAReply() throws {
        let stack = try stack("curve")
        let key = try #require(stack.brokerKey)
        let context = ZMQContext()
        let good = try RawPeer(context, stack.endpoints.frontend, serverKey: key)
        // Generous waits: CI runs every suite at once on two cores.
        #expect(try good.call(.request("tally.whoami"), within: 10_000)?.body["by"]?.string == "tally/1")

        let plain = try RawPeer(context, stack.endpoints.frontend, serverKey: nil)
        let wrong = try RawPeer(context, stack.endpoints.frontend, serverKey: try curveKeyPair().publicKey)
        // Sent more than once, a reconnect in between: still nothing.
        let started = Clock.monotonicMillis()
        var ids: [String] = []
        for _ in 0..<3 {
            for peer in [plain, wrong] {
                let request = Envelope.request("tally.whoami")
                ids.append(request.id)
                try? peer.socket.send(Majordomo.request(request), dontWait: true)
            }
        }
        #expect(plain.receive(within: 1500) == nil, "a client without CURVE got an answer")
        #expect(wrong.receive(within: 500) == nil, "a client with a wrong broker key got an answer")
        // Nothing reached a service either.
        let served = stack.log("tally/1")
        #expect(ids.allSatisfy { !served.contains($0) })

        // The broker's log says why, once per kind every 5 s, not once per
        // attempt (the peers retry their handshake every 100 ms).
        let mismatch = "mechanism mismatch: the client does not use CURVE", crypto = "CURVE cryptographic error"
        // A client without CURVE that loses the race with the broker's
        // greeting is seen as a broken pipe, and libzmq does not retry it:
        // a new one connects every second until the mismatch is seen, with
        // a deadline a loaded CI machine cannot miss.
        let until = Clock.monotonicMillis() + 30_000
        var log = stack.log("broker")
        var lastPlain = Clock.monotonicMillis()
        var plains = [plain]
        while !(log.contains(mismatch) && log.contains(crypto)) && Clock.monotonicMillis() < until {
            usleep(100_000)
            if !log.contains(mismatch) && Clock.monotonicMillis() - lastPlain >= 1000 {
                let another = try RawPeer(context, stack.endpoints.frontend, serverKey: nil)
                try? another.socket.send(Majordomo.request(Envelope.request("tally.whoami")), dontWait: true)
                plains.append(another)
                lastPlain = Clock.monotonicMillis()
            }
            log = stack.log("broker")
        }
        #expect(plains.allSatisfy { $0.receive(within: 10) == nil }, "a client without CURVE got an answer")
        let elapsed = Clock.monotonicMillis() - started
        #expect(log.contains(mismatch), "\(log)")
        #expect(log.contains(crypto), "\(log)")
        let lines = log.components(separatedBy: crypto).count - 1
        #expect(lines <= 1 + Int(elapsed / 5000) + 1, "\(lines) lines about the wrong key in \(elapsed) ms: the log is not throttled")
        // The good client still works.
        #expect(try good.call(.request("tally.whoami"), within: 10_000)?.kind == .reply)
        #expect(try stack.client().request("sys.health", timeoutMs: 10_000)["curve"]?.bool == true)
    }

    @Test func theKeyPairIsMadeOnceWithMode0600AndKeptAcrossRestarts() throws {
        let stack = try stack("curve-keys")
        let secret = stack.dir + "/keys/broker.key", pub = stack.dir + "/keys/broker.pub"
        #expect(try mode(of: secret) == 0o600)
        #expect(try mode(of: pub) == 0o644)
        let publicText = try String(contentsOfFile: pub, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(publicText.count == 40 && Curve.decode(publicText) != nil)
        let secretText = try String(contentsOfFile: secret, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Curve.publicKey(forSecretKey: secretText) == publicText)
        // Logs name the public key and the file, never the secret key.
        #expect(eventually { stack.log("broker").contains(publicText) })
        #expect(!stack.log("broker").contains(secretText))

        // A restarted broker keeps its key: clients with it keep working.
        stack.kill("broker", signal: SIGTERM)
        try stack.startBroker()
        #expect(try String(contentsOfFile: pub, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) == publicText)
        #expect(try stack.waitForWorkers("tally", count: 1))
        // quad-broker --show-key prints the same key (deploy/stack keys runs it).
        let (status, printed, _) = try run("quad-broker", ["--curve-key", secret, "--show-key"])
        #expect(status == 0 && printed.trimmingCharacters(in: .whitespacesAndNewlines) == publicText)

        // A secret key others may read is refused at start, saying how to fix it.
        chmod(secret, 0o644)
        let (refused, _, why) = try run("quad-broker", ["--curve-key", secret, "--show-key"])
        #expect(refused == 1 && why.contains("chmod 600"))
        chmod(secret, 0o600)
    }

    @Test func withAllowKeysOnlyListedClientKeysMayConnect() throws {
        let allowed = try curveKeyPair(), other = try curveKeyPair(), later = try curveKeyPair()
        let dir = NSTemporaryDirectory() + "quad-allow-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let file = dir + "/allowed.keys"
        try "# phones of the pilot\n\(allowed.publicText)\n\n".write(toFile: file, atomically: true, encoding: .utf8)
        let stack = try stack("curve-allow", extra: ["--allow-keys", file])
        let key = try #require(stack.brokerKey)
        let context = ZMQContext()
        let listed = try RawPeer(context, stack.endpoints.frontend, serverKey: key, clientKeys: (allowed.publicKey, allowed.secretKey))
        #expect(try listed.call(.request("tally.whoami"))?.kind == .reply)
        let unlisted = try RawPeer(context, stack.endpoints.frontend, serverKey: key, clientKeys: (other.publicKey, other.secretKey))
        // Once refused, the socket may have no connection to queue on: EAGAIN.
        try? unlisted.socket.send(Majordomo.request(Envelope.request("tally.whoami")), dontWait: true)
        #expect(unlisted.receive(within: 1500) == nil, "a client key not in --allow-keys got an answer")
        let log = stack.log("broker")
        #expect(log.contains("with CURVE key \(other.publicText) refused: the key is not in --allow-keys"), "\(log)")

        // The list is read again when the file changes.
        try "\(allowed.publicText)\n\(later.publicText)\n".write(toFile: file, atomically: true, encoding: .utf8)
        var answered = false
        for _ in 0..<10 where !answered {
            // A new connection each time: a refused one is not tried again.
            let admitted = try RawPeer(context, stack.endpoints.frontend, serverKey: key, clientKeys: (later.publicKey, later.secretKey))
            answered = (try? admitted.call(.request("tally.whoami"), within: 1000))??.kind == .reply
        }
        #expect(answered, "a key added to --allow-keys was not admitted")
    }

    @Test func curveOffServesPlainClientsForDebugging() throws {
        let stack = try stack("curve-off", extra: ["--curve", "off"])
        #expect(stack.brokerKey == nil)
        let plain = try RawPeer(ZMQContext(), stack.endpoints.frontend, serverKey: nil)
        #expect(try plain.call(.request("tally.whoami"))?.kind == .reply)
        #expect(eventually { stack.log("broker").contains("CURVE OFF") })
    }

    @Test func quadctlFindsTheKeyInQuadHomeOrTheEnvironment() throws {
        let stack = try stack("curve-quadctl")
        let publicText = try String(contentsOfFile: stack.dir + "/keys/broker.pub", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let base = ["--frontend", stack.endpoints.frontend, "--timeout", "1500", "--attempts", "1"]
        let (home, _, _) = try run("quadctl", base + ["call", "tally.whoami"], environment: ["QUAD_HOME": stack.dir])
        #expect(home == 0)
        let (given, _, _) = try run("quadctl", base + ["call", "tally.whoami"], environment: ["QUAD_BROKER_KEY": publicText])
        #expect(given == 0)
        let (none, _, hint) = try run("quadctl", base + ["call", "tally.whoami"])
        #expect(none == 2 && hint.contains("no broker key was given"), "\(hint)")
        let (wrong, _, _) = try run("quadctl", base + ["call", "tally.whoami"], environment: ["QUAD_BROKER_KEY": try curveKeyPair().publicText])
        #expect(wrong == 2)
        let (bad, _, why) = try run("quadctl", base + ["call", "tally.whoami"], environment: ["QUAD_BROKER_KEY": "not-a-key"])
        #expect(bad == 64 && why.contains("40 characters of Z85"))
    }

    /// '@' is a Z85 digit: a key that starts with it is a key, not '@FILE'
    /// (a random key did so one time in 85, and quadctl refused it).
    @Test func aKeyStartingWithAnAtSignIsAKey() throws {
        var pair = try curveKeyPair()
        while !pair.publicText.hasPrefix("@") { pair = try curveKeyPair() }
        #expect(try BrokerKey.parse(pair.publicText) == pair.publicKey)
        let file = NSTemporaryDirectory() + "quad-at-key-\(getpid()).pub"
        try pair.publicText.write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try BrokerKey.parse("@" + file) == pair.publicKey)
    }

    @Test func theAllowListFileIsOneKeyPerLine() throws {
        let dir = NSTemporaryDirectory() + "quad-allow-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let a = try curveKeyPair(), b = try curveKeyPair()
        try "\(a.publicText)\n  # comment\n\n\(b.publicText)  \n".write(toFile: dir + "/ok", atomically: true, encoding: .utf8)
        #expect(try BrokerKeys.allowList(at: dir + "/ok") == [a.publicKey, b.publicKey])
        try "\(a.publicText)\nnot a key\n".write(toFile: dir + "/bad", atomically: true, encoding: .utf8)
        #expect { try BrokerKeys.allowList(at: dir + "/bad") } throws: { ($0 as? KeyFileError)?.message.contains("line 2") == true }
    }
}
