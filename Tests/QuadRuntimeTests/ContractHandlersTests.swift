import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// The runtime checks every request body against the contract
/// (Sources/QuadContract) before its handler runs, and answers
/// `<service>.sys.types` from it.
@Suite struct ContractHandlersTests {
    /// A handler that counts its calls, registered under a declared type.
    final class Calls: @unchecked Sendable { var n = 0 }

    func catalog(db: Database? = nil) -> (Handlers, Calls) {
        let h = Handlers(service: "catalog", instance: "catalog/test", db: db)
        let calls = Calls()
        h.query("catalog.products.list") { _ in calls.n += 1; return ["products": [], "total": 0, "offset": 0, "limit": 20] }
        h.query("catalog.foryou") { req in _ = try req.requireUser(); calls.n += 1; return ["products": [], "categories": []] }
        return (h, calls)
    }

    @Test func aBadBodyIsRefusedBeforeTheHandlerRuns() throws {
        let (h, calls) = catalog()
        let over = h.handle(.request("catalog.products.list", body: ["limit": 500]))
        #expect(over.quadError?.status == 400)
        #expect(over.quadError?.message == "body.limit must be between 1 and 200 (max_page_size)")
        let unknown = h.handle(.request("catalog.products.list", body: ["colour": "red"]))
        #expect(unknown.quadError?.message.hasPrefix("body.colour is not a field of catalog.products.list") == true)
        #expect(calls.n == 0, "the handler ran on a body the contract refuses")
        let good = h.handle(.request("catalog.products.list", body: ["in_stock": true, "sort": "-price", "min_price": 10, "limit": 5]))
        #expect(good.kind == .reply)
        #expect(calls.n == 1)
    }

    /// A request for a signed-in user that comes without one gets the
    /// handler's 401, whatever its body: a stranger learns nothing of the rules.
    @Test func aStrangerHearsTheAuthRefusalFirst() throws {
        let (h, calls) = catalog()
        #expect(h.handle(.request("catalog.foryou", body: ["limit": 0])).quadError?.status == 401)
        #expect(h.handle(.request("catalog.foryou", body: ["limit": 0], user: "u-1")).quadError?.status == 400)
        #expect(h.handle(.request("catalog.foryou", body: ["user": "u-2"], user: "u-1")).quadError?.status == 403)
        #expect(calls.n == 0)
    }

    @Test func aTypeTheContractDoesNotDeclareIsNamed() {
        let (h, _) = catalog()
        #expect(h.undeclared.isEmpty)
        h.query("catalog.secret") { _ in [:] }
        #expect(h.undeclared == ["catalog.secret"])
    }

    /// `<service>.sys.types` lists every type the worker registered (its
    /// own and the common ones) with its kind, auth and schema paths.
    @Test func sysTypesListsWhatTheWorkerAnswers() throws {
        let dir = NSTemporaryDirectory() + "quad-contract-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let db = try SQLiteDatabase(path: dir + "/catalog.db")
        try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
        let (h, _) = catalog(db: db)
        let answer = h.handle(.request("catalog.sys.types"))
        let rows = try #require(answer.body["types"]?.array)
        let byType = Dictionary(uniqueKeysWithValues: rows.compactMap { r in r["type"]?.string.map { ($0, r) } })
        #expect(Set(byType.keys) == Set(h.types))
        #expect(byType["catalog.products.list"]?["request"] == "catalog/products.list.request.json")
        #expect(byType["catalog.products.list"]?["kind"] == "query")
        #expect(byType["catalog.foryou"]?["auth"] == "user")
        #expect(byType["catalog.events.since"]?["reply"] == "common/events.since.reply.json")
        #expect(byType["catalog.sys.types"]?["auth"] == "none")
        #expect(answer.body["service"] == "catalog")
    }
}
