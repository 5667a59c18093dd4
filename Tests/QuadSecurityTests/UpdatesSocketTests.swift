import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// The broker's public updates socket and its news channels against
/// strangers, through a real broker and a real accounts worker: public
/// events reach whoever asks for them, a client without CURVE nothing; a
/// user's news reaches only the connection that asked for it with that
/// user's session token (`sys.news`), never the updates socket, and ends
/// with the session.
@Suite("The updates socket and news channels: news for its user only", .serialized)
struct UpdatesSocketTests {
    /// A subscriber on the updates socket: what it asked for, and what came.
    final class Subscriber {
        let name: String
        let socket: Socket
        var received: [(topic: String, event: Envelope)] = []
        let topics: [String]

        init(_ name: String, context: ZMQContext, endpoint: String, serverKey: [UInt8]?, topics: [String]) throws {
            self.name = name
            socket = try context.socket(.xsub)
            if let serverKey {
                let pair = try Curve.keyPair()
                try socket.setCurveClient(serverKey: serverKey, publicKey: Curve.decode(pair.publicKey)!, secretKey: Curve.decode(pair.secretKey)!)
            }
            try socket.connect(endpoint)
            self.topics = topics
            // The heartbeat last: once one arrives, the broker has decided
            // every subscription sent before it.
            for t in topics + ["pub/hb"] { try socket.send([[1] + Array(t.utf8)]) }
        }

        /// Sends the subscriptions again, as a phone does now and then: one
        /// refused while the broker was still loading revocations counts now.
        func renew() {
            for t in topics { try? socket.send([[1] + Array(t.utf8)]) }
        }

        func drain() {
            while let frames = try? socket.receive(dontWait: true) {
                guard frames.count == 2, let e = try? Envelope.decode(frames[1], maxBytes: .max) else { continue }
                received.append((String(decoding: frames[0], as: UTF8.self), e))
            }
        }

        var heardBeat: Bool { received.contains { $0.topic == "pub/hb" } }
        var news: [Envelope] { received.filter { $0.event.type == "notifications.news" }.map(\.event) }
        var publicEvents: [Envelope] { received.filter { $0.event.type == "reservations.level.changed" }.map(\.event) }
    }

    static func signUp(_ c: Client, _ email: String) throws -> (user: String, token: String) {
        _ = try c.request("accounts.register", ["email": .string(email), "password": "updates-pass-5c1d", "name": "Updates Test", "semester": 3],
                          timeoutMs: 8000, attempts: 1)
        let login = try c.request("accounts.login", ["email": .string(email), "password": "updates-pass-5c1d"], timeoutMs: 8000, attempts: 1)
        return (try #require(login["user"]?.string), try #require(login["token"]?.string))
    }

    /// A service's event as a worker's relay sends it: the public topic
    /// (byte 1, topic, byte 0) ahead of the internal one.
    static func frames(public topic: String, internal inner: String, _ event: Envelope) -> [[UInt8]] {
        [[1] + Array(topic.utf8) + [0] + Array(inner.utf8), event.encoded()]
    }

    /// The updates socket carries public events to whoever asks for them
    /// and no one's news, whatever the topic asked for (a token, an id,
    /// everything); a client without CURVE hears nothing.
    @Test func publicEventsReachTheirSubscribersAndNoNewsCrossesTheUpdatesSocket() throws {
        let stack = try TestStack(name: "updates")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let client = try stack.client()
        let alice = try Self.signUp(client, "alice-updates@uni.edu")
        let bob = try Self.signUp(client, "bob-updates@uni.edu")
        let endpoint = try #require(Endpoints.updates(forFrontend: stack.endpoints.frontend))
        let key = try #require(stack.brokerKey)
        let context = ZMQContext()
        var forged = Array(alice.token)
        forged[forged.count - 3] = forged[forged.count - 3] == "A" ? "B" : "A"
        let subscribers = [
            try Subscriber("alice", context: context, endpoint: endpoint, serverKey: key, topics: ["user/" + alice.token]),
            try Subscriber("bob", context: context, endpoint: endpoint, serverKey: key, topics: ["user/" + bob.token]),
            try Subscriber("everything", context: context, endpoint: endpoint, serverKey: key, topics: ["", "user", "u"]),
            try Subscriber("no token", context: context, endpoint: endpoint, serverKey: key, topics: ["user/", "user/\(alice.user)/", "user/\(alice.user)"]),
            try Subscriber("forged", context: context, endpoint: endpoint, serverKey: key,
                           topics: ["user/" + String(forged), "user/not-a-token", "user/" + alice.token + "x"]),
            try Subscriber("bad public", context: context, endpoint: endpoint, serverKey: key,
                           topics: ["pub/", "pub//", "pub/reservations.level.changed", "pub/x", "pub/RESERVATIONS.LEVEL.CHANGED/"]),
            try Subscriber("public", context: context, endpoint: endpoint, serverKey: key, topics: ["pub/reservations.level.changed/"]),
        ]
        let noCurve = try Subscriber("no curve", context: context, endpoint: endpoint, serverKey: nil, topics: ["", "user/" + alice.token])
        let until = Clock.monotonicMillis() + 60_000
        while !subscribers.allSatisfy(\.heardBeat) {
            for s in subscribers { s.drain() }
            try #require(Clock.monotonicMillis() < until, "no heartbeat reached \(subscribers.filter { !$0.heardBeat }.map(\.name))")
            usleep(20_000)
        }
        // A service subscribed to notifications' events on the internal socket.
        let service = try context.socket(.sub)
        try service.connect(stack.endpoints.eventsOut)
        try service.subscribe("notifications/")
        var internalTopics: Set<String> = []
        // A worker's relay: alternately Alice's news, Bob's, and a public event.
        let publisher = try context.socket(.pub)
        try publisher.connect(stack.endpoints.eventsIn)
        var seq: Int64 = 0
        var renewedAt = Clock.monotonicMillis()
        let (a, b, pub) = (subscribers[0], subscribers[1], subscribers[6])
        while pub.publicEvents.count < 5 || internalTopics.isEmpty {
            try #require(Clock.monotonicMillis() < until, "public events did not arrive: \(pub.publicEvents.count)")
            for (user, type, topic) in [(alice.user, "notifications.news", "user/\(alice.user)/notifications.news"),
                                        (bob.user, "notifications.news", "user/\(bob.user)/notifications.news"),
                                        ("", "reservations.level.changed", "pub/reservations.level.changed/central")] {
                seq += 1
                let body: JSON = type == "notifications.news" ? ["user": .string(user), "text": "your order was confirmed"] : ["lot": "central", "level": "central-1"]
                let event = Envelope(type: type, kind: .event, src: type.hasPrefix("notifications") ? "notifications" : "reservations", seq: seq, body: body)
                try publisher.send(Self.frames(public: topic, internal: type.hasPrefix("notifications") ? "notifications/notifications.news" : "reservations/reservations.level.changed", event))
            }
            usleep(50_000)
            for s in subscribers { s.drain() }
            if Clock.monotonicMillis() - renewedAt >= 1000 {
                renewedAt = Clock.monotonicMillis()
                for s in subscribers { s.renew() }
            }
            while let frames = try? service.receive(dontWait: true) { internalTopics.insert(String(decoding: frames[0], as: UTF8.self)) }
        }
        noCurve.drain()
        // News never crosses the updates socket: not to the user's own token either.
        for s in subscribers { #expect(s.news.isEmpty, "\(s.name) heard \(s.news.count) news on the updates socket") }
        for s in subscribers[2...5] {
            #expect(s.news.isEmpty, "\(s.name) heard \(s.news.count) news")
            #expect(s.publicEvents.isEmpty, "\(s.name) heard \(s.publicEvents.count) public events it never validly asked for")
        }
        #expect(pub.news.isEmpty && a.publicEvents.isEmpty && b.publicEvents.isEmpty)
        #expect(noCurve.received.isEmpty, "a client without CURVE heard \(noCurve.received.count) messages")
        // Services hear the event on its internal topic, without the public head.
        #expect(internalTopics == ["notifications/notifications.news"], "internal topics: \(internalTopics)")
        // The broker's log lines may reach its file a moment after the events they tell of.
        #expect(eventually { stack.log("broker").contains("a user's news is not on the updates socket") })
        #expect(eventually { stack.log("broker").contains("a subscription on the updates socket was refused") })
    }

    /// A client of the frontend (a phone's request link): a DEALER with
    /// CURVE, that asks `sys.news` with a token and collects what comes.
    final class Connection {
        let name: String
        let socket: Socket
        var answers: [Envelope] = []
        var news: [Envelope] = []

        init(_ name: String, context: ZMQContext, endpoint: String, serverKey: [UInt8]) throws {
            self.name = name
            socket = try context.socket(.dealer)
            let pair = try Curve.keyPair()
            try socket.setCurveClient(serverKey: serverKey, publicKey: Curve.decode(pair.publicKey)!, secretKey: Curve.decode(pair.secretKey)!)
            try socket.connect(endpoint)
        }

        func askNews(token: String?) throws {
            var request = Envelope.request("sys.news", body: [:], src: "test/\(name)", deadline: 5000)
            request.token = token
            try socket.send(Majordomo.request(request))
        }

        /// The answer to `sys.news` with `token`, asked until answered
        /// (the broker may still be loading revocations: 503) or `until`.
        func opened(_ token: String?, until: Int64) throws -> Envelope {
            while true {
                answers = []
                try askNews(token: token)
                let asked = Clock.monotonicMillis()
                while answers.isEmpty && Clock.monotonicMillis() - asked < 5000 { drain(); usleep(10_000) }
                if let answer = answers.first, answer.quadError?.status != 503 { return answer }
                try #require(Clock.monotonicMillis() < until, "\(name): sys.news never answered")
            }
        }

        func drain() {
            while let frames = try? socket.receive(dontWait: true) {
                guard let reply = Majordomo.parseReply(frames), let e = try? reply.envelope() else { continue }
                if e.kind == .event { news.append(e) } else { answers.append(e) }
            }
        }
    }

    /// A user's news event as notifications' relay sends it.
    static func newsFrames(_ user: String, seq: Int64) -> [[UInt8]] {
        let event = Envelope(type: "notifications.news", kind: .event, src: "notifications", seq: seq,
                             body: ["user": .string(user), "text": "your order was confirmed"])
        return frames(public: "user/\(user)/notifications.news", internal: "notifications/notifications.news", event)
    }

    /// News goes to the connections that asked for it with that user's
    /// session token (`sys.news` on the frontend), to no other, and never
    /// through the updates socket (libzmq 4.3.4 can put a manual XPUB
    /// subscription on a connection that closed, whose memory the next
    /// one reuses); a channel ends within a second of its user's logout.
    @Test func newsReachesOnlyTheConnectionThatAskedWithThatUsersTokenAndEndsWithTheSession() throws {
        let stack = try TestStack(name: "news")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let client = try stack.client()
        let alice = try Self.signUp(client, "alice-news@uni.edu")
        let bob = try Self.signUp(client, "bob-news@uni.edu")
        let key = try #require(stack.brokerKey)
        let context = ZMQContext()
        var forged = Array(alice.token)
        forged[forged.count - 3] = forged[forged.count - 3] == "A" ? "B" : "A"
        let (a, b) = (try Connection("alice", context: context, endpoint: stack.endpoints.frontend, serverKey: key),
                      try Connection("bob", context: context, endpoint: stack.endpoints.frontend, serverKey: key))
        let strangers = [try Connection("no token", context: context, endpoint: stack.endpoints.frontend, serverKey: key),
                         try Connection("forged", context: context, endpoint: stack.endpoints.frontend, serverKey: key),
                         try Connection("silent", context: context, endpoint: stack.endpoints.frontend, serverKey: key)]
        let updates = try #require(Endpoints.updates(forFrontend: stack.endpoints.frontend))
        let onUpdates = try Subscriber("updates", context: context, endpoint: updates, serverKey: key,
                                       topics: ["user/" + alice.token, "user/\(alice.user)/", "user/", ""])
        var until = Clock.monotonicMillis() + 60_000
        func opened(_ c: Connection, _ token: String?) throws -> Envelope { try c.opened(token, until: until) }
        #expect(try opened(a, alice.token).body["user"]?.string == alice.user)
        #expect(try opened(b, bob.token).body["user"]?.string == bob.user)
        #expect(try opened(strangers[0], nil).quadError?.status == 401)
        #expect(try opened(strangers[1], String(forged)).quadError?.status == 401)
        while !onUpdates.heardBeat {
            onUpdates.drain()
            try #require(Clock.monotonicMillis() < until, "no heartbeat on the updates socket")
            usleep(20_000)
        }
        let publisher = try context.socket(.pub)
        try publisher.connect(stack.endpoints.eventsIn)
        var seq: Int64 = 0
        while a.news.count < 5 || b.news.count < 5 {
            try #require(Clock.monotonicMillis() < until, "news did not arrive: alice \(a.news.count), bob \(b.news.count)")
            for user in [alice.user, bob.user] {
                seq += 1
                try publisher.send(Self.newsFrames(user, seq: seq))
            }
            usleep(50_000)
            for c in [a, b] + strangers { c.drain() }
            onUpdates.drain()
        }
        #expect(a.news.allSatisfy { $0.body["user"]?.string == alice.user }, "Alice heard someone else's news")
        #expect(b.news.allSatisfy { $0.body["user"]?.string == bob.user }, "Bob heard someone else's news")
        for c in strangers { #expect(c.news.isEmpty, "\(c.name) heard \(c.news.count) news") }
        #expect(onUpdates.news.isEmpty, "the updates socket carried \(onUpdates.news.count) news")
        #expect(eventually { stack.log("broker").contains("a user's news is not on the updates socket") })

        // Alice logs out everywhere: her channel ends with the session.
        client.token = alice.token
        _ = try client.request("accounts.logout", ["token": .string(alice.token), "all": true], timeoutMs: 8000, attempts: 1)
        client.token = nil
        let loggedOut = Clock.monotonicMillis()
        let before = a.news.count
        var published: [(seq: Int64, at: Int64)] = []
        until = Clock.monotonicMillis() + 60_000
        // News for both, until Bob has heard ten more and three seconds passed.
        let bobBefore = b.news.count
        while b.news.count < bobBefore + 10 || Clock.monotonicMillis() - loggedOut < 3000 {
            try #require(Clock.monotonicMillis() < until, "Bob's news stopped too")
            for user in [alice.user, bob.user] {
                seq += 1
                if user == alice.user { published.append((seq, Clock.monotonicMillis())) }
                try publisher.send(Self.newsFrames(user, seq: seq))
            }
            usleep(100_000)
            a.drain()
            b.drain()
        }
        let late = a.news.dropFirst(before).filter { e in
            published.first { $0.seq == e.seq }.map { $0.at - loggedOut > 1000 } ?? false
        }
        #expect(late.isEmpty, "Alice's connection heard \(late.count) news more than 1 s after her logout")
        // Asking again with the revoked token is refused.
        #expect(try opened(a, alice.token).quadError?.status == 401)
    }

    /// A channel ends within a second of its token's expiry too; a phone
    /// that renews its token before then and asks again on the same
    /// connection keeps hearing its news, every one of them, with no gap.
    @Test func aChannelEndsWithItsTokensExpiryAndARenewedTokenKeepsItWithoutAGap() throws {
        let stack = try TestStack(name: "news-expiry")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum", "--token-ttl-seconds", "4"])
        #expect(try stack.waitForWorkers("accounts", count: 1))
        let client = try stack.client()
        let alice = try Self.signUp(client, "alice-expiry@uni.edu")
        let key = try #require(stack.brokerKey)
        let context = ZMQContext()
        let a = try Connection("alice", context: context, endpoint: stack.endpoints.frontend, serverKey: key)
        let until = Clock.monotonicMillis() + 60_000
        func opened(_ token: String) throws -> Envelope { try a.opened(token, until: until) }
        #expect(try opened(alice.token).body["user"]?.string == alice.user)
        let publisher = try context.socket(.pub)
        try publisher.connect(stack.endpoints.eventsIn)
        var seq: Int64 = 0
        var sent: [(seq: Int64, at: Int64)] = []
        func publish(for ms: Int64) throws {
            let end = Clock.monotonicMillis() + ms
            while Clock.monotonicMillis() < end {
                seq += 1
                sent.append((seq, Clock.nowMillis64))
                try publisher.send(Self.newsFrames(alice.user, seq: seq))
                usleep(100_000)
                a.drain()
            }
        }
        // Until the first news arrives (the publisher's connection takes a moment).
        while a.news.isEmpty {
            try #require(Clock.monotonicMillis() < until, "no news arrived")
            try publish(for: 200)
        }
        let first = try #require(a.news.first?.seq)
        // Renewed before it expires, and asked again with the new token on the same connection.
        client.token = alice.token
        let renewed = try client.request("accounts.refresh", ["token": .string(alice.token)], timeoutMs: 8000, attempts: 1)
        client.token = nil
        let token2 = try #require(renewed["token"]?.string)
        let expires2 = try #require(renewed["expires_at"]?.int)
        #expect(try opened(token2).body["user"]?.string == alice.user)
        // Past the first token's expiry (and its revocation by the refresh):
        // every news published meanwhile arrived.
        try publish(for: max(0, expires2 - Clock.nowMillis64 - 1500))
        let heard = Set(a.news.compactMap(\.seq))
        let missed = sent.map(\.seq).filter { $0 >= first && !heard.contains($0) }
        #expect(missed.count <= 1, "news lost across the renewal: \(missed)")  // the last one may still be on its way
        // Not renewed again: past the second token's expiry, nothing more than 1 s after it.
        try publish(for: max(0, expires2 - Clock.nowMillis64) + 3000)
        let late = a.news.filter { e in sent.first { $0.seq == e.seq }.map { $0.at - expires2 > 1000 } ?? false }
        #expect(late.isEmpty, "the channel heard \(late.count) news more than 1 s after its token expired")
        #expect(a.news.contains { e in sent.first { $0.seq == e.seq }.map { $0.at > Clock.nowMillis64 - 60_000 && $0.at < expires2 } ?? false })
    }
}

extension Clock {
    /// Now, ms since the epoch, as tokens and their expiry count it.
    static var nowMillis64: Int64 { Int64(Clock.nowMillis()) }
}
