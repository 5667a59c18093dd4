import Foundation
import QuadAccounts
import QuadAnalytics
import QuadAuth
import QuadCatalog
import QuadFavorites
import QuadNotifications
import QuadMessaging
import QuadOrders
import QuadReservations
import QuadRuntime
import QuadTelemetry
import QuadTestSupport
import QuadWire

/// One thing to fuzz: bytes in, a trap (a crash libFuzzer keeps) when an
/// invariant breaks. ``generate(_:)`` makes inputs for the seeded generator.
protocol FuzzTarget: AnyObject {
    var name: String { get }
    func run(_ bytes: [UInt8])
    /// Inputs to start from: the corpus seeds, and what the generator mutates.
    var seeds: [[UInt8]] { get }
    /// Findings that are not crashes (a service's 500), for the summary.
    var findings: [String: Int] { get }
}

/// What every target's invariants check, by name.
func check(_ condition: Bool, _ what: @autoclosure () -> String) {
    if !condition { fatalError("invariant broken: \(what())") }
}

// MARK: envelope

/// `Envelope.decode`, the broker's and every worker's first look at a
/// message: it either refuses with a 4xx naming the problem or returns an
/// envelope that encodes to canonical bytes and decodes back to itself.
final class EnvelopeTarget: FuzzTarget {
    let name = "envelope"
    var findings: [String: Int] = [:]

    func run(_ bytes: [UInt8]) {
        let envelope: Envelope
        do {
            envelope = try Envelope.decode(bytes, maxBytes: 1 << 20)
        } catch {
            check((400...499).contains(error.status), "decode failed with \(error.status): \(error)")
            _ = Envelope.salvageID(bytes)
            return
        }
        check(Envelope.isValidType(envelope.type), "accepted type '\(envelope.type)'")
        let encoded = envelope.encoded()
        let again: Envelope
        do { again = try Envelope.decode(encoded, maxBytes: .max) } catch { fatalError("its own encoding does not decode: \(error)") }
        check(again == envelope, "decode(encode(e)) != e")
        check(again.encoded() == encoded, "the encoding is not canonical")
        // What a worker sends back must decode as well.
        let reply = envelope.error(.badRequest("x"), src: "fuzz")
        check((try? Envelope.decode(reply.encoded(), maxBytes: .max))?.corr == envelope.id, "an error reply does not decode")
    }

    var seeds: [[UInt8]] {
        [
            Envelope.request("catalog.products.list", body: ["q": "iphone", "limit": 3, "in_stock": true]).encoded(),
            Envelope.request("orders.place", body: ["source": "buy_now", "product": "p-0001", "quantity": 1], src: "edge/ana", token: "eyJ.sig").encoded(),
            Envelope(type: "catalog.stock.changed", kind: .event, src: "catalog", seq: 7, body: ["product": "p-1", "stock": 2.5]).encoded(),
            Envelope(type: "x.y", kind: .error, corr: "c", body: QuadError.conflict("no").body).encoded(),
            Array(#"{"v":1,"id":"a","type":"a.b","kind":"request","body":{"s":"\u00e9\ud83d\ude00\n","n":-0.0,"e":1e-7,"l":[[],{}]}}"#.utf8),
        ]
    }
}

// MARK: token

/// Session tokens (JWTs) as the broker reads them from a phone: base64url,
/// the header and the claims never crash, a token not signed by the key never verifies,
/// and base64url decoding is the exact inverse of encoding.
final class TokenTarget: FuzzTarget {
    let name = "token"
    var findings: [String: Int] = [:]
    let key = SigningKey.generate()
    lazy var valid = key.sign(TokenClaims(user: "u-1", role: "student", expiresAt: 4_000_000_000_000, issuedAt: 0))

    func run(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        if let decoded = Base64URL.decode(text) {
            check(Base64URL.encode(decoded) == text, "base64url decoding is not one-to-one")
        }
        _ = try? Token.unverifiedClaims(text)
        if let claims = try? key.verifyingKey.verify(text) {
            // Only a token this key signed verifies: then it is the valid one, re-encoded.
            check(text == valid && claims.user == "u-1", "a token this key never signed verified: \(text.prefix(200))")
        }
    }

    var seeds: [[UInt8]] {
        // The valid token with alg none, and HS256, in its header: the shapes a forger tries first.
        let claims = valid.split(separator: ".")[1]
        let none = Base64URL.encode(Array(#"{"alg":"none","kid":"\#(key.verifyingKey.keyID)"}"#.utf8)) + "." + claims + "."
        let hs = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + claims + "." + Base64URL.encode([UInt8](repeating: 7, count: 32))
        return [Array(valid.utf8), Array(none.utf8), Array(hs.utf8), Array("e30.AAAA".utf8), Array("e30.e30.AAAA".utf8), Array("a.b.c".utf8)]
    }
}

// MARK: services

/// One service's handlers, installed in this process on a temporary SQLite
/// store, driven with any request type it registers and any body, as nobody,
/// a student, an admin or a service. Input: byte 0 picks the type, byte 1
/// the caller, the rest is the body: JSON text when it parses, otherwise
/// the bytes choose a body field by field (``ByteChooser``). Invariants: the
/// handler returns (no trap, no hang) an answer to this very request; an
/// error is 4xx or 5xx, and a 500 is counted as a finding. (That answers
/// encode to envelopes that decode is the envelope target's invariant.)
final class ServiceTarget: FuzzTarget {
    let name: String
    let make: () throws -> InProcessService
    var service: InProcessService
    var types: [String]
    var runs = 0
    /// A fresh store every so many inputs, so the store does not grow without end.
    let resetEvery = 50_000
    var findings: [String: Int] = [:]
    let examples: String?
    static let callers: [(String?, String?)] = [(nil, nil), ("u-fuzz-1", "student"), ("u-fuzz-admin", "admin"), ("orders/1", "service")]

    init(name: String, examples: String?, make: @escaping () throws -> InProcessService) throws {
        self.name = name
        self.make = make
        self.examples = examples
        service = try make()
        types = service.handlers.types.sorted()
    }

    func run(_ bytes: [UInt8]) {
        guard bytes.count >= 2 else { return }
        runs += 1
        if runs % resetEvery == 0, let fresh = try? make() { service = fresh }
        let type = types[Int(bytes[0]) % types.count]
        let (user, role) = ServiceTarget.callers[Int(bytes[1]) % ServiceTarget.callers.count]
        let rest = Array(bytes[2...])
        let body: JSON
        if let parsed = try? JSON.parse(rest) {
            body = parsed
        } else {
            var chooser = ByteChooser(rest)
            body = chooser.object(depth: 0)
        }
        var built = Envelope.request(type, body: body, id: MessageID.make(), src: "fuzz")
        built.user = user
        built.role = role
        // What a worker is given has passed Envelope.decode (a NUL in a
        // string, say, never reaches a handler): what it refuses is the
        // envelope target's to fuzz. A body the decoder would refuse once
        // reached favorites here, was stored in an event, and made every
        // later events.since page unreadable.
        guard let request = try? Envelope.decode(built.encoded(), maxBytes: .max) else { return }
        let answer = service.handlers.handle(request)
        check(answer.corr == request.id, "\(type): the answer does not answer this request (\(answer.quadError?.message ?? "no error"))")
        check(answer.kind == .reply || answer.kind == .error, "\(type): answered with kind \(answer.kind)")
        if let error = answer.quadError {
            check(error.status >= 400 && error.status <= 599, "\(type): status \(error.status)")
            if error.status == 500 {
                let key = "\(type): \(error.message.prefix(160))"
                if findings[key] == nil {
                    FuzzMain.report("finding: \(name) answered 500 to \(type) \(body.text.prefix(300)): \(error.message)")
                }
                findings[key, default: 0] += 1
            }
        }
    }

    /// The request examples of `protos/examples/<service>/`, one input per
    /// example and caller.
    var seeds: [[UInt8]] {
        var out: [[UInt8]] = []
        let service = String(name.dropFirst("service-".count))
        if let examples {
            let dir = examples + "/" + service
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.contains(".request") }.sorted()
            for file in files {
                // "cart.add.request+one.json" → "orders.cart.add"
                let stem = file.components(separatedBy: ".request").first ?? ""
                guard let k = types.firstIndex(of: service + "." + stem),
                      let body = FileManager.default.contents(atPath: dir + "/" + file) else { continue }
                for caller in 0..<ServiceTarget.callers.count { out.append([UInt8(k), UInt8(caller)] + Array(body)) }
            }
        }
        for (k, _) in types.enumerated() {
            for caller in 0..<ServiceTarget.callers.count { out.append([UInt8(k), UInt8(caller)] + Array("{}".utf8)) }
        }
        return out
    }
}

/// Bytes read as choices: which field, which kind of value, how long.
struct ByteChooser {
    let bytes: [UInt8]
    var i = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    static let names = [
        "id", "user", "email", "password", "name", "semester", "categories", "product", "quantity", "order", "items", "limit", "offset",
        "q", "sort", "category", "collection", "min_price", "max_price", "in_stock", "delta", "source", "mode", "screen", "return_date",
        "reservation", "spot", "lot", "destination", "kind", "level", "signal", "lat", "lon", "note", "from", "to", "arrival", "after",
        "events", "phone", "session", "ts", "offline", "props", "current_password", "queued_ms", "view", "results", "query_length",
    ]
    static let strings = [
        "", "p-0001", "p-0002", "central", "north", "ML", "P1", "P2", "regular", "ev", "accessible", "campus", "nearby", "buy", "rent",
        "buy_now", "cart", "home", "Tech", "Study", "price", "-price", "2030-01-01", "2030-13-40", "2026-11-30T09:00:00-05:00", "10:30",
        "a@uni.edu", "correct horse", "view.opened", "search.performed", "purchase_screen", "admin", "\u{0}", "é", "%", "_", "\\",
    ]
    static let numbers: [JSON] = [0, 1, -1, 2, 3, 12, 13, 50, 51, 99, 100, 101, 200, 201, 1000, 2001, .int(Int64.max), .int(Int64.min),
                                  .int(Int64(Int32.max)), 0.5, -0.5, 1e15, 9e15, 1e300, -1e300, 90.5, -180.5, 4.6, -74.06]

    mutating func next() -> Int {
        defer { i += 1 }
        return i < bytes.count ? Int(bytes[i]) : 0
    }

    mutating func value(depth: Int) -> JSON {
        switch next() % 12 {
        case 0: return .null
        case 1: return .bool(next() % 2 == 0)
        case 2, 3: return ByteChooser.numbers[next() % ByteChooser.numbers.count]
        case 4: return .int(Int64(next()) << 8 | Int64(next()))
        case 5, 6: return .string(ByteChooser.strings[next() % ByteChooser.strings.count])
        case 7:
            let n = next() % 48
            let raw = (0..<n).map { _ in UInt8(truncatingIfNeeded: next()) }
            return .string(String(decoding: raw, as: UTF8.self))
        case 8: return .string(String(repeating: "x", count: [64, 65, 128, 129, 200, 201, 255, 1000, 4097][next() % 9]))
        case 9:
            guard depth < 8 else { return .int(1) }
            return .array((0..<(next() % 5)).map { _ in value(depth: depth + 1) })
        default:
            guard depth < 8 else { return .object([:]) }
            return object(depth: depth + 1)
        }
    }

    mutating func object(depth: Int) -> JSON {
        var fields: [String: JSON] = [:]
        for _ in 0..<(next() % 7) where i < bytes.count {
            let k = next()
            let key = k < 240 ? ByteChooser.names[k % ByteChooser.names.count] : "x\(k)"
            fields[key] = value(depth: depth)
        }
        return .object(fields)
    }
}

/// Answers every request on `endpoint` with a 409 at once: the catalog as
/// the orders saga sees it while fuzzing (holds refused), so `orders.place`
/// runs its whole path without waiting for a timeout.
enum RefusingPeer {
    static func start(_ endpoint: String) {
        let ready = DispatchSemaphore(value: 0)
        Thread {
            let context = ZMQContext()
            guard let socket = try? context.socket(.router), (try? socket.bind(endpoint)) != nil else { fatalError("cannot bind \(endpoint)") }
            ready.signal()
            while true {
                guard let frames = try? socket.receive(), frames.count >= 2, let last = frames.last else { continue }
                let request = (try? Envelope.decode(last, maxBytes: .max)) ?? Envelope.request("catalog.unknown")
                let answer = request.error(.conflict("fuzz: the catalog refuses every hold"), src: "catalog/fuzz")
                try? socket.send([frames[0]] + Majordomo.reply(service: request.service, answer.encoded()))
            }
        }.start()
        ready.wait()
    }
}

enum Targets {
    static let serviceNames = ["accounts", "catalog", "favorites", "orders", "reservations", "telemetry", "analytics", "notifications"]
    static var all: [String] { ["envelope", "token"] + serviceNames.map { "service-" + $0 } }

    static func make(_ name: String, examples: String?) throws -> FuzzTarget {
        switch name {
        case "envelope": return EnvelopeTarget()
        case "token": return TokenTarget()
        case "service-accounts":
            return try ServiceTarget(name: name, examples: examples) {
                let keys = NSTemporaryDirectory() + "quad-fuzz-keys-\(getpid())-\(UInt32.random(in: 0...UInt32.max))/accounts.key"
                return try InProcessService(Accounts.self, options: ["password-hashing": "minimum", "signing-key": keys])
            }
        case "service-catalog": return try ServiceTarget(name: name, examples: examples) { try InProcessService(Catalog.self) }
        case "service-favorites": return try ServiceTarget(name: name, examples: examples) { try InProcessService(Favorites.self) }
        case "service-orders":
            let endpoint = "ipc://" + NSTemporaryDirectory() + "quad-fuzz-catalog-\(getpid())"
            RefusingPeer.start(endpoint)
            return try ServiceTarget(name: name, examples: examples) {
                try InProcessService(Orders.self, options: ["catalog-timeout-ms": "200"], internal: endpoint)
            }
        case "service-reservations":
            return try ServiceTarget(name: name, examples: examples) {
                try InProcessService(Reservations.self, options: ["sim": "off", "history-days": "0"])
            }
        case "service-telemetry": return try ServiceTarget(name: name, examples: examples) { try InProcessService(Telemetry.self) }
        case "service-analytics": return try ServiceTarget(name: name, examples: examples) { try InProcessService(Analytics.self, options: ["http": "off"]) }
        case "service-notifications": return try ServiceTarget(name: name, examples: examples) { try InProcessService(Notifications.self) }
        default: throw QuadError.badRequest("unknown target '\(name)': targets are \(all.joined(separator: ", "))")
        }
    }
}
