import Foundation
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// A trace per request (issue 15, point 5), through real processes: a
/// broker, accounts, catalog and orders, each logging to its file as
/// deploy/stack lays them out; the span lines read back from those files
/// and by `quadctl trace`.
@Suite("A trace per request", .serialized)
struct TraceTests {
    /// The span lines of `trace` in every log of `stack`.
    static func spans(_ stack: TestStack, trace: String) -> [JSON] {
        let dir = stack.dir + "/logs"
        var out: [JSON] = []
        for file in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where file.hasSuffix(".log") {
            let text = (try? String(contentsOfFile: dir + "/" + file, encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") where line.contains(trace) {
                guard let value = try? JSON.parse(Array(line.utf8)), value["msg"]?.string == "span", value["trace"]?.string == trace else { continue }
                out.append(value)
            }
        }
        return out
    }

    /// The span lines of the request `id` (each process logs the id it handled).
    static func spans(_ stack: TestStack, id: String) -> [JSON] {
        let dir = stack.dir + "/logs"
        var out: [JSON] = []
        for file in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where file.hasSuffix(".log") {
            let text = (try? String(contentsOfFile: dir + "/" + file, encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") where line.contains(id) {
                guard let value = try? JSON.parse(Array(line.utf8)), value["msg"]?.string == "span", value["id"]?.string == id else { continue }
                out.append(value)
            }
        }
        return out
    }

    static func quadctl(_ stack: TestStack, _ args: [String], env: [String: String] = [:]) throws -> (Int32, String, String) {
        // QUAD_HOME: where quadctl finds the broker's CURVE key.
        try runBuilt("quadctl", ["--frontend", stack.endpoints.frontend, "--timeout", "10000", "--attempts", "1"] + args,
                     environment: ["QUAD_HOME": stack.dir].merging(env) { _, new in new })
    }

    /// `child` lies within `parent`'s time window (1 ms of slack for the
    /// two processes' clock readings).
    static func inside(_ child: JSON, _ parent: JSON) -> Bool {
        guard let cs = child["start_us"]?.int, let cu = child["us"]?.int, let ps = parent["start_us"]?.int, let pu = parent["us"]?.int else { return false }
        return cs >= ps - 1000 && cs + cu <= ps + pu + 1000
    }

    @Test func anOrderKeepsItsTraceThroughBrokerOrdersAndCatalogAndQuadctlShowsTheTree() throws {
        for name in ["accounts", "catalog", "orders"] {
            try #require(FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(name)"), "quad-\(name) is not built")
        }
        let stack = try TestStack(name: "trace")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"])
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        try stack.startWorker("quad-orders", instance: "orders/1")
        for service in ["accounts", "catalog", "orders"] {
            #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000), "\(service) never registered")
        }
        let c = try stack.client()
        _ = try c.request("accounts.register", ["email": "tracer@uni.edu", "password": "trace-pass-7d1e", "name": "Tracer", "semester": 2],
                          timeoutMs: 8000, attempts: 1)
        let token = try #require(try c.request("accounts.login", ["email": "tracer@uni.edu", "password": "trace-pass-7d1e"], timeoutMs: 8000)["token"]?.string)
        let listed = try c.request("catalog.products.list", ["in_stock": true, "limit": 10], timeoutMs: 8000)
        let product = try #require(listed["products"]?.array?.first { ($0["stock"]?.int ?? 0) >= 3 }?["id"]?.string)
        c.token = token
        // Orders knows the product from catalog's events before it can sell it.
        #expect(try eventually {
            (try? c.call(.request("orders.cart.add", body: ["product": .string(product), "quantity": 1]), timeoutMs: 3000, attempts: 1))?.kind == .reply
        })
        _ = try c.request("orders.cart.clear", timeoutMs: 5000)

        // 1. A client's traceparent: its trace id is kept by every process.
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        let clientSpan = "00f067aa0ba902b7"
        var place = Envelope.request("orders.place", body: ["source": "buy_now", "product": .string(product), "quantity": 1])
        place.traceparent = "00-\(trace)-\(clientSpan)-01"
        let placed = try c.call(place, timeoutMs: 15_000, attempts: 1)
        #expect(placed.body["status"]?.string == "confirmed", "\(placed.body)")
        // broker + orders for orders.place; broker + catalog for the hold, which confirms in the same call.
        #expect(eventually { TraceTests.spans(stack, trace: trace).count >= 4 }, "\(TraceTests.spans(stack, trace: trace))")
        let spans = TraceTests.spans(stack, trace: trace)
        func one(_ src: String, _ type: String) throws -> JSON {
            let found = spans.filter { $0["src"]?.string == src && $0["type"]?.string == type }
            #expect(found.count == 1, "\(found.count) spans of \(src) for \(type): \(spans)")
            return try #require(found.first)
        }
        let brokerPlace = try one("broker", "orders.place")
        let ordersPlace = try one("orders/1", "orders.place")
        #expect(brokerPlace["parent"]?.string == clientSpan, "the broker's span is not the client's child")
        #expect(ordersPlace["parent"]?.string == brokerPlace["span"]?.string, "orders' span is not the broker's child")
        #expect(ordersPlace["id"]?.string == place.id && brokerPlace["id"]?.string == place.id)
        #expect(ordersPlace["status"]?.int == 200 && brokerPlace["status"]?.int == 200)
        #expect(TraceTests.inside(ordersPlace, brokerPlace), "orders' span \(ordersPlace) is not inside the broker's \(brokerPlace)")
        // The order's cost: one call to catalog, no confirmation apart.
        #expect(!spans.contains { $0["type"]?.string == "catalog.stock.confirm" }, "a second call to catalog: \(spans)")
        #expect(spans.count == 4, "\(spans.count) spans, 4 expected (broker and orders for the place, broker and catalog for the hold): \(spans)")
        for step in ["catalog.stock.hold"] {
            let relay = try one("broker", step)
            let catalog = try one("catalog/1", step)
            #expect(relay["parent"]?.string == ordersPlace["span"]?.string, "\(step): the call is not a child of orders' span")
            #expect(catalog["parent"]?.string == relay["span"]?.string, "\(step): catalog's span is not the broker's child")
            #expect(TraceTests.inside(catalog, relay) && TraceTests.inside(relay, ordersPlace), "\(step): spans do not nest in time")
        }
        // The events the order caused carry its trace.
        let internalClient = try stack.internalClient()
        let events = try internalClient.request("orders.events.since", ["after": 0, "limit": 100], timeoutMs: 5000)["events"]?.array ?? []
        let traced = events.filter { ($0["traceparent"]?.string ?? "").contains(trace) }.compactMap { $0["type"]?.string }
        #expect(traced.contains("orders.placed") && traced.contains("orders.confirmed"), "events of the order: \(events.map { "\($0["type"]?.string ?? "") \($0["traceparent"]?.string ?? "-")" })")

        // 2. quadctl call --trace prints a fresh trace id; quadctl trace shows the tree.
        let body = #"{"source":"buy_now","product":"\#(product)","quantity":1}"#
        let (ok, reply, err) = try TraceTests.quadctl(stack, ["--trace", "call", "orders.place", body], env: ["QUAD_TOKEN": token])
        #expect(ok == 0, "\(reply) \(err)")
        let printed = try #require(err.split(separator: "\n").first { $0.hasPrefix("trace ") }.map { String($0.dropFirst(6)) }, "no trace id on stderr: \(err)")
        #expect(TraceParent("00-\(printed)-0000000000000001-01") != nil, "not a trace id: \(printed)")
        #expect(eventually { TraceTests.spans(stack, trace: printed).count >= 4 })
        let (shown, tree, why) = try TraceTests.quadctl(stack, ["trace", printed, "--logs", stack.dir + "/logs"])
        #expect(shown == 0, "\(why)")
        print(tree)
        let lines = tree.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("broker ") && $0.contains("orders.place") }, "\(tree)")
        #expect(lines.contains { $0.hasPrefix("  orders/1 ") && $0.contains("orders.place") }, "\(tree)")
        #expect(lines.contains { $0.hasPrefix("    broker ") && $0.contains("catalog.stock.hold") }, "\(tree)")
        #expect(lines.contains { $0.hasPrefix("      catalog/1 ") && $0.contains("catalog.stock.hold") }, "\(tree)")

        // The durations add up: every child inside its parent's window, and
        // the children of one parent, end to end, no longer than it.
        let (_, json, _) = try TraceTests.quadctl(stack, ["trace", printed, "--logs", stack.dir + "/logs", "--json"])
        let parsed = try JSON.parse(Array(json.utf8))
        let roots = parsed["roots"]?.array ?? []
        #expect(roots.count == 1, "\(roots.count) roots: \(json)")
        #expect(roots.first?["process"]?.string == "broker" && roots.first?["type"]?.string == "orders.place")
        var checked = 0
        func walk(_ node: JSON) {
            let children = node["children"]?.array ?? []
            for child in children {
                #expect(TraceTests.inside(child, node), "\(child) outside \(node)")
                checked += 1
                walk(child)
            }
            let sum = children.reduce(Int64(0)) { $0 + ($1["us"]?.int ?? 0) }
            #expect(sum <= (node["us"]?.int ?? 0) + 1000, "children take \(sum) µs, more than their parent's \(node["us"]?.int ?? 0)")
        }
        for r in roots { walk(r) }
        #expect(checked >= 3, "\(checked) spans under the root: \(json)")
    }

    @Test func aRequestWithoutATraceGetsOneAndAMalformedOneGetsAFreshTraceNeverAnError() throws {
        try #require(FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-catalog"), "quad-catalog is not built")
        let stack = try TestStack(name: "trace-fresh")
        try stack.startBroker()
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        #expect(try stack.waitForWorkers("catalog", count: 1, timeoutMs: 30_000))
        let c = try stack.client()

        let bare = Envelope.request("catalog.categories")
        #expect(try c.call(bare, timeoutMs: 8000).kind == .reply)
        #expect(eventually { TraceTests.spans(stack, id: bare.id).count == 2 })
        let pair = TraceTests.spans(stack, id: bare.id)
        let broker = try #require(pair.first { $0["src"]?.string == "broker" })
        let worker = try #require(pair.first { $0["src"]?.string == "catalog/1" })
        let trace = try #require(broker["trace"]?.string)
        #expect(trace.count == 32 && broker["parent"] == nil, "\(broker)")
        #expect(worker["trace"]?.string == trace && worker["parent"]?.string == broker["span"]?.string, "\(worker)")

        for malformed in ["garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", String(repeating: "0", count: 100_000), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"] {
            var request = Envelope.request("catalog.categories")
            request.traceparent = malformed
            let answer = try c.call(request, timeoutMs: 8000, attempts: 1)
            #expect(answer.kind == .reply, "\(malformed.prefix(60)): \(answer.body)")
            #expect(eventually { TraceTests.spans(stack, id: request.id).count == 2 })
            let spans = TraceTests.spans(stack, id: request.id)
            let b = try #require(spans.first { $0["src"]?.string == "broker" })
            let w = try #require(spans.first { $0["src"]?.string == "catalog/1" })
            let fresh = try #require(b["trace"]?.string)
            #expect(fresh.count == 32 && !malformed.lowercased().contains(fresh) && b["parent"] == nil, "\(b)")
            #expect(w["trace"]?.string == fresh && w["parent"]?.string == b["span"]?.string)
        }
        // A worker's error: both spans carry its status.
        let unknown = Envelope.request("catalog.no.such.type")
        #expect(try c.call(unknown, timeoutMs: 8000, attempts: 1).quadError?.status == 404)
        #expect(eventually { TraceTests.spans(stack, id: unknown.id).count == 2 })
        #expect(TraceTests.spans(stack, id: unknown.id).map { $0["status"]?.int } == [404, 404], "\(TraceTests.spans(stack, id: unknown.id))")
        #expect(stack.process("broker")?.isRunning == true)
        #expect(stack.process("catalog/1")?.isRunning == true)
    }
}
