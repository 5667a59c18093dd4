import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// The whole stack as real processes (broker, accounts, catalog,
/// favorites, orders, reservations, telemetry, notifications) with quad-edge beside it,
/// driven through its control socket as a harness would.
final class EdgeStack {
    let stack: TestStack
    let phonesDir: String
    let controlEndpoint: String
    var control: Client!
    static let services = ["accounts", "catalog", "favorites", "orders", "reservations", "telemetry", "notifications"]

    init(_ name: String, holdSeconds: Int = 600, edgeArguments: [String] = [], serviceArguments: [String: [String]] = [:]) throws {
        stack = try TestStack(name: "edge-\(name)")
        phonesDir = stack.dir + "/phones"
        controlEndpoint = "ipc://\(stack.dir)/edge-control"
        // One-second heartbeats: a worker busy with a saga is not taken for dead.
        try stack.startBroker(heartbeatMs: 1000)
        for service in EdgeStack.services {
            let missing = !FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(service)")
            try #require(!missing, "quad-\(service) is not built: the edge's tests need it")
            var extra: [String] = []
            switch service {
            case "accounts": extra = ["--password-hashing", "minimum"]
            case "reservations": extra = ["--sim", "off", "--hold-seconds", String(holdSeconds)]
            default: break
            }
            extra += serviceArguments[service] ?? []
            try stack.startWorker("quad-\(service)", instance: "\(service)/1", heartbeatMs: 1000, extra: extra)
        }
        for service in EdgeStack.services {
            #expect(try stack.waitForWorkers(service, count: 1), "quad-\(service) did not register with the broker")
        }
        try waitForCatalogCopies()
        try startEdge(edgeArguments)
    }

    deinit {
        // A stopped broker would never exit.
        if let broker = stack.process("broker") { kill(broker.processIdentifier, SIGCONT) }
    }

    /// Favorites and orders refuse products until their copy of the catalog
    /// has arrived through catalog's events.
    func waitForCatalogCopies() throws {
        let client = try stack.internalClient()
        let until = Clock.monotonicMillis() + 20_000
        for type in ["favorites.add", "orders.cart.add"] {
            while true {
                var probe = Envelope.request(type, body: ["product": "p-0306"])
                probe.user = "probe"
                if (try? client.call(probe, timeoutMs: 2000))?.kind == .reply { break }
                try #require(Clock.monotonicMillis() < until, "\(type) never accepted a catalog product")
                usleep(100_000)
            }
        }
    }

    func startEdge(_ extra: [String] = [], phones: Int = 1) throws {
        try stack.start("edge", executable: "quad-edge", arguments: [
            "--frontend", stack.endpoints.frontend, "--dir", phonesDir, "--phones", String(phones), "--control", controlEndpoint,
            "--action-timeout-ms", "1000", "--read-timeout-ms", "800", "--backoff-cap-ms", "2000", "--telemetry-every-ms", "500",
        ] + extra)
        control = try Client(endpoint: controlEndpoint, source: "edge-test")
        let until = Clock.monotonicMillis() + 10_000
        while (try? control.request("edge.state", timeoutMs: 500, attempts: 1)) == nil {
            try #require(Clock.monotonicMillis() < until, "quad-edge did not answer on its control socket:\n\(stack.log("edge"))")
        }
    }

    // MARK: The control socket

    @discardableResult
    func edge(_ type: String, _ body: JSON = [:], timeoutMs: Int64 = 5000) throws -> JSON {
        try control.request(type, body, timeoutMs: timeoutMs, attempts: 1)
    }

    func state(_ phone: String = "phone-001") throws -> JSON {
        try #require(try edge("edge.state", ["phone": .string(phone)])["phones"]?.array?.first)
    }

    /// Makes the phone act; returns the action's id.
    @discardableResult
    func act(_ type: String, _ body: JSON, phone: String = "phone-001") throws -> String {
        let reply = try edge("edge.act", ["phone": .string(phone), "type": .string(type), "body": body])
        return try #require(reply["id"]?.string)
    }

    func airplane(_ on: Bool, phone: String = "phone-001") throws {
        try edge("edge.airplane", ["phone": .string(phone), "on": .bool(on)])
    }

    /// Waits until the outbox (and the telemetry queue) is empty.
    func waitDrained(phone: String = "phone-001", telemetry: Bool = false, timeoutMs: Int64 = 60_000) throws -> JSON {
        try edge("edge.wait", ["phone": .string(phone), "timeout_ms": .int(timeoutMs), "telemetry": .bool(telemetry)], timeoutMs: timeoutMs + 5000)
    }

    func view(_ view: String, _ params: JSON = [:], phone: String = "phone-001") throws -> JSON {
        try edge("edge.view", ["phone": .string(phone), "view": .string(view), "params": params])
    }

    func log(_ phone: String = "phone-001") throws -> [JSON] {
        try edge("edge.log", ["phone": .string(phone)])["actions"]?.array ?? []
    }

    func messages(_ phone: String = "phone-001") throws -> [JSON] {
        try edge("edge.messages", ["phone": .string(phone)])["messages"]?.array ?? []
    }

    /// Signs the phone in (its first action does) and waits for it.
    func signIn(phone: String = "phone-001") throws -> String {
        try act("favorites.add", ["product": "p-0306"], phone: phone)
        #expect(try waitDrained(phone: phone)["drained"]?.bool == true)
        return try #require(try state(phone)["user"]?.string, "the phone never signed in:\n\(stack.log("edge"))")
    }

    // MARK: The services' own stores

    func store(_ service: String) throws -> SQLiteDatabase {
        try SQLiteDatabase(path: "\(stack.dir)/\(service).db")
    }

    /// What favorites applied for `user`, in the order it applied it: its
    /// outbox holds one event per change, numbered by `seq`.
    func favoriteChanges(user: String) throws -> [String] {
        let db = try store("favorites")
        defer { db.close() }
        // The outbox keeps each event as its encoded envelope: read it as the relay does.
        return try Outbox.since(db, after: 0, limit: Int.max).compactMap { e in
            guard e.body["user"]?.string == user else { return nil }
            return "\(e.type == "favorites.added" ? "add" : "remove") \(e.body["product"]?.string ?? "")"
        }
    }

    func cartQuantity(user: String, product: String) throws -> Int64 {
        let db = try store("orders")
        defer { db.close() }
        return try db.queryOne("SELECT quantity FROM cart_lines WHERE user_id = $1 AND product = $2", .text(user), .text(product))?.int("quantity") ?? 0
    }

    /// Ids the service stored an answer for, among `ids`.
    func answered(_ service: String, _ ids: [String]) throws -> Set<String> {
        let db = try store(service)
        defer { db.close() }
        return Set(try db.query("SELECT id FROM idempotency").map { $0.string("id") }).intersection(ids)
    }

    /// The phone's telemetry as the collector stored it: count per name.
    func telemetry(phone: String = "phone-001") throws -> [String: Int64] {
        let db = try store("telemetry")
        defer { db.close() }
        var out: [String: Int64] = [:]
        for r in try db.query("SELECT name, COUNT(*) AS n FROM events WHERE phone = $1 GROUP BY name", .text(phone)) { out[r.string("name")] = r.int("n") }
        return out
    }

    func telemetryConflicts() throws -> Int64 {
        let db = try store("telemetry")
        defer { db.close() }
        return try db.queryOne("SELECT COUNT(*) AS n FROM event_conflicts")?.int("n") ?? 0
    }

    func signal(_ process: String, _ sig: Int32) {
        stack.kill(process, signal: sig)
    }
}

/// A mix of actions whose effects show their order and their count: favorites
/// toggled over eight products (each toggle is one change in favorites'
/// outbox, so the sequence of changes is the sequence of actions) and, every
/// fifth action, one unit of p-0020 added to the cart (a second application
/// would show in the quantity).
struct ActionMix {
    var favorites: [(type: String, product: String)] = []
    var cartAdds = 0
    var held: [String: Bool] = [:]

    mutating func next(_ k: Int) -> (String, JSON) {
        if k % 5 == 4 {
            cartAdds += 1
            return ("orders.cart.add", ["product": "p-0020", "quantity": 1])
        }
        let product = String(format: "p-%04d", 1 + favorites.count % 8)
        let add = !(held[product] ?? false)
        held[product] = add
        favorites.append((add ? "favorites.add" : "favorites.remove", product))
        return (add ? "favorites.add" : "favorites.remove", ["product": .string(product)])
    }

    var expectedChanges: [String] { favorites.map { "\($0.type == "favorites.add" ? "add" : "remove") \($0.product)" } }
}

/// protos/edge/control.schema.json, to check real answers of the control
/// socket against it: every field the schema requires is there, and none it
/// does not list.
struct ControlSchema {
    let defs: [String: JSON]

    init() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("protos/edge/control.schema.json"), encoding: .utf8)
        defs = try #require(try JSON.parse(text)["$defs"]?.object)
    }

    func check(_ def: String, _ value: JSON, sourceLocation: SourceLocation = #_sourceLocation) {
        // "log.reply/actions": the items of a property of a definition.
        let path = def.split(separator: "/").map(String.init)
        var found = defs[path[0]]
        for property in path.dropFirst() { found = found?["properties"]?[property]?["items"] }
        guard let schema = found, let fields = value.object else {
            Issue.record("no $defs/\(def), or not an object: \(value)", sourceLocation: sourceLocation)
            return
        }
        let allowed = Set(schema["properties"]?.object?.keys.map { $0 } ?? [])
        let required = Set(schema["required"]?.array?.compactMap(\.string) ?? [])
        let keys = Set(fields.keys)
        #expect(keys.isSubset(of: allowed), "\(def): fields the schema does not list: \(keys.subtracting(allowed).sorted())", sourceLocation: sourceLocation)
        #expect(required.isSubset(of: keys), "\(def): required fields missing: \(required.subtracting(keys).sorted())", sourceLocation: sourceLocation)
    }
}
