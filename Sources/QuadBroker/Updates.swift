import QuadAuth
import QuadMessaging
import QuadWire

/// The broker's public updates socket (`--updates`, an XPUB behind the
/// frontend's CURVE key): phones subscribe to what anyone may know,
/// `pub/<type>/<key>` (a lot's levels, a product). A user's news is not
/// here: it goes to the connections that asked for it with `sys.news` on
/// the frontend (News.swift says why). The socket is in manual mode: a
/// subscription counts only when the broker accepts it, so an empty prefix
/// (everything), any `user/` topic, a malformed or an overlong topic never
/// reach the socket's table, and a subscriber hears only what it was
/// allowed. Services' events come with their public topic ahead of
/// the internal one (byte 1, the topic, byte 0, as ``Worker`` writes them);
/// every second a heartbeat on `pub/hb` tells phones the feed is alive.
final class Updates {
    /// What the broker does with one subscription message.
    enum Decision: Equatable {
        case subscribe(String)
        case unsubscribe(String)
        /// Refused: `kind` names the class of refusal (the log throttles
        /// each class on its own, so one never hides another), `why` says it.
        case refuse(kind: String, why: String)
        /// A message that changes nothing (an unsubscribe of a `user/` topic).
        case ignore
    }

    static let heartbeatTopic = "pub/hb"
    /// Longest subscription message (`max_subscription_bytes`): a token fits.
    static let maxSubscriptionBytes = 4096
    /// The longest type and key of a public topic.
    static let maxPartBytes = 64

    let socket: Socket
    /// Distinct public topics subscribed to (`max_public_topics`): what a
    /// stranger can make the socket's table keep.
    var topics: Set<String> = []
    let maxTopics: Int
    private(set) var accepted: Int64 = 0
    private(set) var refused: Int64 = 0
    private(set) var published: Int64 = 0
    let log: (String, String) -> Void

    init(socket: Socket, maxTopics: Int, log: @escaping (String, String) -> Void) throws {
        self.socket = socket
        self.maxTopics = maxTopics
        self.log = log
        try socket.setXPubManual(true)
        // A subscription is a small message; a longer one closes its connection.
        try socket.setMaxMessageSize(Int64(Updates.maxSubscriptionBytes))
        // A phone that does not read loses updates past this (it catches up
        // from a snapshot when it notices a gap), never the broker's memory.
        try socket.setSendHWM(10_000)
    }

    /// What to do with `frame`, a subscription message (byte 1 or 0 and
    /// the topic). A `user/` subscription is refused, naming `sys.news`;
    /// its unsubscribe (a phone of before) changes nothing.
    static func decide(_ frame: [UInt8]) -> Decision {
        guard let first = frame.first, first <= 1 else { return .refuse(kind: "updates-refused-malformed", why: "not a subscription message (first byte 1 or 0)") }
        let subscribe = first == 1
        guard frame.count <= maxSubscriptionBytes else { return .refuse(kind: "updates-refused-malformed", why: "subscription longer than max_subscription_bytes (\(maxSubscriptionBytes))") }
        guard let topic = String(validating: frame.dropFirst(), as: UTF8.self) else { return .refuse(kind: "updates-refused-malformed", why: "topic is not UTF-8") }
        if topic.hasPrefix("user/") {
            guard subscribe else { return .ignore }
            return .refuse(kind: "updates-refused-news", why: "a user's news is not on the updates socket: send sys.news with the session token on the frontend, and the news comes on that connection")
        }
        guard topic == heartbeatTopic || isPublic(topic) else {
            return .refuse(kind: "updates-refused-not-public", why: "topic '\(topic.prefix(80))' is not public: subscribe to pub/<type>/, pub/<type>/<key> or \(heartbeatTopic) (a user's news: sys.news on the frontend)")
        }
        return subscribe ? .subscribe(topic) : .unsubscribe(topic)
    }

    /// `pub/<type>/` or `pub/<type>/<key>`: a type of lowercase letters,
    /// digits, `.` and `_`, a key of letters, digits, `-`, `_` and `.`.
    static func isPublic(_ topic: String) -> Bool {
        guard topic.hasPrefix("pub/") else { return false }
        let parts = topic.utf8.dropFirst(4).split(separator: UInt8(ascii: "/"), maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return false }
        let (type, key) = (parts[0], parts[1])
        guard (1...maxPartBytes).contains(type.count), key.count <= maxPartBytes else { return false }
        let typeOK = type.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 46 || $0 == 95 }
        let keyOK = key.allSatisfy { (97...122).contains($0) || (65...90).contains($0) || (48...57).contains($0) || $0 == 45 || $0 == 95 || $0 == 46 }
        return typeOK && keyOK && type.contains(46)
    }

    /// Reads waiting subscription messages and carries out each decision.
    func drain() {
        var n = 0
        while n < 1000, let frames = try? socket.receive(dontWait: true) {
            n += 1
            guard let frame = frames.first else { continue }
            switch Updates.decide(frame) {
            case .subscribe(let topic):
                if topic.hasPrefix("pub/") && !topics.contains(topic) {
                    guard topics.count < maxTopics else {
                        refused += 1
                        log("updates-max-topics", "a subscription to \(topic.prefix(80)) refused: max_public_topics (\(maxTopics)) distinct public topics are subscribed to")
                        continue
                    }
                    topics.insert(topic)
                }
                // Manual mode: this applies to the connection the message came from.
                if (try? socket.subscribe(topic)) != nil { accepted += 1 }
            case .unsubscribe(let topic):
                try? socket.unsubscribe(topic)
            case .refuse(let kind, let why):
                refused += 1
                log(kind, "a subscription on the updates socket was refused: \(why)")
            case .ignore:
                break
            }
        }
    }

    /// Sends a service's event on its public topic.
    func publish(topic: [UInt8], bytes: [UInt8]) {
        if (try? socket.send([topic, bytes], dontWait: true)) != nil { published += 1 }
    }

    /// The heartbeat: an event envelope from the broker, on `pub/hb`.
    func heartbeat(src: String) {
        let beat = Envelope(id: MessageID.make(), type: "broker.heartbeat", kind: .event, ts: Int64(Clock.nowMillis()), src: src, body: [:])
        try? socket.send([Array(Updates.heartbeatTopic.utf8), beat.encoded()], dontWait: true)
    }

    /// Splits a relayed event's topic: the public topic (nil for an
    /// internal event) and the internal one.
    static func split(_ topic: [UInt8]) -> (public: [UInt8]?, internal: [UInt8]) {
        guard topic.first == 1, let zero = topic.firstIndex(of: 0) else { return (nil, topic) }
        return (Array(topic[1..<zero]), Array(topic[(zero + 1)...]))
    }
}
