import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// A seeded generator (SplitMix64): a failing run can be replayed from the
/// seed it prints.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8.random(in: 0...255, using: &self) } }
}

/// Hostile bodies: wrong types, edge numbers, odd strings, deep nesting,
/// plus each field name the services read, with wrong values.
enum HostileJSON {
    static let names = [
        "id", "user", "email", "password", "name", "semester", "categories", "product", "quantity", "order", "items", "limit", "offset",
        "q", "sort", "category", "collection", "min_price", "max_price", "in_stock", "delta", "source", "mode", "screen", "return_date",
        "reservation", "spot", "lot", "destination", "kind", "level", "signal", "lat", "lon", "note", "from", "to", "arrival", "after",
        "events", "phone", "session", "ts", "offline", "props", "current_password",
    ]

    static func value(_ r: inout SeededRandom, depth: Int = 0) -> JSON {
        switch Int.random(in: 0..<14, using: &r) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &r))
        case 2: return .int([0, -1, 1, Int64.max, Int64.min, 2_147_483_648, -2_147_483_649, 99, 100, 101, 1000, 1_000_001].randomElement(using: &r)!)
        case 3: return .double([0.5, -0.0, 1e308, -1e308, 1e-308, 3.999_999_999, 90.000_001, -180.5].randomElement(using: &r)!)
        case 4: return .string(["", " ", "p-0001", "central", "ML", "P1", "buy_now", "cart", "rent", "2030-01-01", "2020-02-30",
                                "admin", "student", "Tech", "'; DROP TABLE users; --", "%_\\", "\u{0}", "\u{FEFF}", "é", "👩‍💻",
                                "\u{202E}", "a@b", "x@uni.edu"].randomElement(using: &r)!)
        case 5: return .string(String(repeating: "x", count: [65, 129, 201, 255, 4097, 70_000].randomElement(using: &r)!))
        case 6: return .string(String(decoding: r.bytes(Int.random(in: 0...40, using: &r)), as: UTF8.self))
        case 7, 8:
            guard depth < 6 else { return .int(1) }
            return .array((0..<Int.random(in: 0...4, using: &r)).map { _ in value(&r, depth: depth + 1) })
        case 9: return .array((0..<[51, 501, 2001].randomElement(using: &r)!).map { .int(Int64($0)) })
        default:
            guard depth < 6 else { return .object([:]) }
            return object(&r, depth: depth + 1)
        }
    }

    static func object(_ r: inout SeededRandom, depth: Int = 0) -> JSON {
        var fields: [String: JSON] = [:]
        for _ in 0..<Int.random(in: 0...6, using: &r) {
            let key = Int.random(in: 0..<8, using: &r) == 0 ? String(decoding: r.bytes(3), as: UTF8.self) : names.randomElement(using: &r)!
            fields[key] = value(&r, depth: depth)
        }
        return .object(fields)
    }

    /// Each request example of `protos/examples/<service>/` once per number
    /// in it (at the top level or in `items`), that number replaced by an
    /// edge value: Int64.min, Int64.max, -1, 1e300.
    static func edgeNumbers(services: [String]) -> [(String, JSON)] {
        let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("protos/examples").path
        var out: [(String, JSON)] = []
        for service in services {
            let dir = examples + "/" + service
            for file in ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).sorted() where file.contains(".request") {
                guard let data = FileManager.default.contents(atPath: dir + "/" + file), let body = try? JSON.parse(Array(data)),
                      case .object(let fields) = body else { continue }
                let type = service + "." + (file.components(separatedBy: ".request").first ?? "")
                for edge in [JSON.int(Int64.min), .int(Int64.max), .int(-1), .double(1e300)] {
                    for (key, value) in fields where value.double != nil {
                        var changed = fields
                        changed[key] = edge
                        out.append((type, .object(changed)))
                    }
                    if case .array(let items)? = fields["items"], case .object(var item)? = items.first {
                        for (key, value) in item where value.double != nil {
                            item[key] = edge
                            var changed = fields
                            changed["items"] = .array([.object(item)])
                            out.append((type, .object(changed)))
                        }
                    }
                }
            }
        }
        return out
    }

    /// A body nested `depth` levels deep.
    static func nested(_ depth: Int) -> JSON {
        var v: JSON = .int(1)
        for _ in 0..<depth { v = .object(["a": v]) }
        return v
    }
}

/// Malformed traffic at the running stack: the broker's frontend gets random
/// frames, wrong frame counts, empty frames, 10 MiB frames, invalid UTF-8
/// and JSON nested far too deep; every service gets, through the broker,
/// every request type it answers with hostile bodies, as a student and as
/// an admin. Afterwards every process still serves good requests, none
/// restarted (same pids), and no service answered 500.
@Suite("Malformed traffic", .serialized)
struct MalformedTrafficTests {
    @Test func theStackSurvivesMalformedTrafficAndKeepsServing() throws {
        let seed = ProcessInfo.processInfo.environment["QUAD_FUZZ_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        print("malformed traffic: seed \(seed) (QUAD_FUZZ_SEED=\(seed) replays it)")
        var r = SeededRandom(seed: seed)
        let full = try FullStack("malformed")
        let before = full.pids()
        #expect(before.count == full.running.count + 1)
        let key = try #require(full.stack.brokerKey)
        let context = ZMQContext()
        let frontend = full.stack.endpoints.frontend

        // 1. Frames the broker cannot read.
        let raw = try RawPeer(context, frontend, serverKey: key)
        var junk: [[[UInt8]]] = [
            [[]], [[], []], [[], [], []], [Array(repeating: 0, count: 1)],
            [Array(#"{"v":1,"id":"m1","type":"catalog.categories","kind":"request"}"#.utf8), []],
            Array(repeating: Envelope.request("catalog.categories").encoded(), count: 3),
            Array(repeating: [0x7B], count: 50),
            [[0xFF, 0xFE, 0xFD]], [[0xC0, 0xAF]], [[0xED, 0xA0, 0x80]],  // not UTF-8: bad bytes, overlong, a surrogate
            [Array(#"{"v":1,"id":"\#u{FFFD}","type":"catalog.categories","kind":"request","body":{"q":"\#u{0}"}}"#.utf8)],
            [Array(#"{"v":1,"id":"u1","type":"catalog.search","kind":"request","body":{"q":"\ud800"}}"#.utf8)],
            [Array(String(repeating: "[", count: 100_000).utf8)],
            [Array((String(repeating: #"{"a":"#, count: 5000) + "1" + String(repeating: "}", count: 5000)).utf8)],
            [Envelope.request("catalog.search", body: HostileJSON.nested(63)).encoded()],
            [Envelope.request("catalog.search", body: HostileJSON.nested(2000)).encoded()],
            [Array(#"{"v":1,"id":"n1","type":"catalog.search","kind":"request","body":1e99999}"#.utf8)],
            [Array(#"{"v":1,"v":2,"id":"d1","type":"catalog.search","kind":"request"}"#.utf8)],
        ]
        // The envelopes above as MDP REQUESTs too, so they reach the envelope
        // decoder, and MDP framing gone wrong.
        junk += junk.filter { $0.count == 1 }.map { Majordomo.request(service: "catalog", $0[0]) }
        let envelope = Envelope.request("catalog.categories").encoded()
        junk += [
            [Majordomo.clientHeader], [Majordomo.clientHeader, [0x01]], [Majordomo.clientHeader, [0x01], Array("catalog".utf8)],
            [Majordomo.clientHeader, [0x04], Array("catalog".utf8), envelope], [Majordomo.clientHeader, [], Array("catalog".utf8), envelope],
            [Array("MDPC01".utf8), Array("catalog".utf8), envelope], [Majordomo.workerHeader, [0x01], Array("catalog".utf8)],
            [Majordomo.clientHeader, [0x01], Array("Cat alog".utf8), envelope], [Majordomo.clientHeader, [0x01], [0xFF, 0xFE], envelope],
            [Majordomo.clientHeader, [0x01], Array("orders".utf8), envelope], [Majordomo.clientHeader, [0x01], Array("sys".utf8), envelope],
            Majordomo.request(service: "catalog", envelope) + [envelope], [[]] + Majordomo.request(service: "catalog", []),
        ]
        for _ in 0..<300 {
            junk.append((0..<Int.random(in: 1...4, using: &r)).map { _ in r.bytes(Int.random(in: 0...3000, using: &r)) })
        }
        for frames in junk { try raw.socket.send(frames) }
        var answered = 0
        while raw.receive(within: 1000) != nil { answered += 1 }
        #expect(answered >= junk.count - 5, "the broker answered \(answered) of \(junk.count) malformed messages")

        // 2. Ten MiB frames: over the socket's limit, the connection is dropped.
        for _ in 0..<3 {
            let big = try RawPeer(context, frontend, serverKey: key)
            try big.socket.send([Array(repeating: 0x41, count: 10 << 20)])
            try big.socket.send(Majordomo.request(service: "catalog", Array(repeating: 0x7B, count: 10 << 20)))
            _ = big.receive(within: 300)
        }
        // Just over max_message_bytes: answered with 413.
        let tooLarge = try raw.call(.request("catalog.search", body: ["q": .string(String(repeating: "x", count: 1_100_000))]))
        #expect(tooLarge?.quadError?.code == .tooLarge)

        // 3. Every type of every service, with hostile bodies, as a student and as an admin.
        let student = try full.client(token: nil)
        _ = try student.request("accounts.register", ["email": "hostile@uni.edu", "password": "hostile-pass-1", "name": "H", "semester": 1])
        let studentToken = try #require(try student.request("accounts.login", ["email": "hostile@uni.edu", "password": "hostile-pass-1"])["token"]?.string)
        let adminToken = try #require(try student.request("accounts.login", [
            "email": .string(FullStack.adminEmail), "password": .string(FullStack.adminPassword),
        ])["token"]?.string)
        let types = OwnershipMatrixTests.rows(services: full.running).map(\.type)
        var requests: [Envelope] = []
        // The contract's example bodies with each number at the edges of its
        // type, as an admin so that role checks let them through.
        for (type, body) in HostileJSON.edgeNumbers(services: full.running) {
            var e = Envelope.request(type, body: body)
            e.token = adminToken
            e.src = "hostile/edges"
            requests.append(e)
        }
        for type in types {
            for n in 0..<12 {
                var e = Envelope.request(type, body: n == 0 ? HostileJSON.nested(60) : n == 1 ? .array([]) : n == 2 ? .string("x")
                                             : HostileJSON.object(&r))
                e.token = n % 2 == 0 ? studentToken : adminToken
                e.src = "hostile/\(n)"
                requests.append(e)
            }
        }
        let answers = try pipeline(RawPeer(context, frontend, serverKey: key), requests)
        let unanswered = requests.filter { answers[$0.id] == nil }.map(\.type)
        #expect(unanswered.isEmpty, "no answer to \(unanswered.count) hostile requests: \(Set(unanswered).sorted())")
        let failures = requests.compactMap { e -> String? in
            guard let error = answers[e.id]?.quadError, error.status >= 500, error.status != 503 else { return nil }
            return "\(e.type) \(e.body.text.prefix(200)) → \(error)"
        }
        #expect(failures.isEmpty, "a service failed (5xx) on hostile input:\n\(failures.prefix(20).joined(separator: "\n"))")

        // 4. Nobody died or restarted, and everyone still serves good requests.
        let after = full.pids()
        for (name, pid) in before where after[name] != pid {
            let lines = full.stack.log(name).split(separator: "\n")
            let why = lines.filter { $0.contains("Program crashed") || $0.contains("Fatal error") || $0.contains("Sources/Quad") }.prefix(4)
            let log = (why.isEmpty ? lines.suffix(5) : why).joined(separator: "\n")
            Issue.record("\(name) (pid \(pid)) died or restarted under hostile traffic; the end of its log:\n\(log)")
        }
        let good = try full.client(token: adminToken)
        #expect((try? good.request("sys.health"))?["status"]?.string == "ok", "the broker does not answer")
        for service in full.running {
            #expect((try? good.request("\(service).sys.health", timeoutMs: 2000))?["status"]?.string == "ok", "\(service) does not answer")
        }
        if full.running.contains("catalog") {
            #expect((try? good.request("catalog.products.list", ["limit": 2], timeoutMs: 2000))?["products"]?.array?.count == 2)
        }
        if full.running.contains("accounts") {
            #expect((try? full.client(token: studentToken).request("accounts.profile.get", timeoutMs: 2000))?["email"]?.string == "hostile@uni.edu")
        }
    }

    /// Sends `requests` with a few in flight at once; returns the answers by id.
    func pipeline(_ peer: RawPeer, _ requests: [Envelope], window: Int = 24, timeoutMs: Int64 = 120_000) throws -> [String: Envelope] {
        var answers: [String: Envelope] = [:]
        var next = 0, inFlight = Set<String>()
        let until = Clock.monotonicMillis() + timeoutMs
        while (next < requests.count || !inFlight.isEmpty) && Clock.monotonicMillis() < until {
            while next < requests.count && inFlight.count < window {
                try peer.socket.send(Majordomo.request(requests[next]))
                inFlight.insert(requests[next].id)
                next += 1
            }
            guard let frames = peer.receive(within: 10_000) else { break }
            if let answer = try? Majordomo.envelope(endingFrames: frames), let corr = answer.corr, inFlight.remove(corr) != nil {
                answers[corr] = answer
            }
        }
        return answers
    }
}
