import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadCatalog

/// A catalog's handlers on a fresh, seeded store.
func catalog(postgres: Bool = false, holdTTLms: Int64 = 60_000) throws -> (Handlers, Database) {
    let db = try TestStore.open("catalog", migrations: Catalog.migrations, postgres: postgres)
    try Catalog.seedIfEmpty(db)
    let h = Handlers(service: "catalog", instance: "catalog/test", db: db)
    Catalog.register(h, db: db, holdTTLms: holdTTLms)
    return (h, db)
}

func stock(_ h: Handlers, _ id: String) throws -> Int64 {
    try h.call("catalog.product.get", ["id": .string(id)])["stock"]?.int ?? -1
}

@Suite("Catalog")
struct CatalogTests {
    @Test func seedsTheDemoCatalogOnce() throws {
        let (h, db) = try catalog()
        try Catalog.seedIfEmpty(db)
        let all = try h.call("catalog.products.list", ["limit": 1])
        #expect(all["total"]?.int == Int64(Catalog.seedCount))
        let cats = try h.call("catalog.categories")["categories"]?.array ?? []
        #expect(cats.map { $0["name"]?.string } == Catalog.categories.map { $0 })
        #expect(cats.compactMap { $0["count"]?.int }.reduce(0, +) == Int64(Catalog.seedCount))
        let collections = try h.call("catalog.collections")["collections"]?.array ?? []
        #expect(collections.contains { $0["name"]?.string == "Phones" })
        // One catalog.product.changed per product, for other services' projections.
        #expect(try Outbox.lastSeq(db) == Int64(Catalog.seedCount))
    }

    @Test func searchesNameTypeAndInfoWithFiltersSortAndPaging() throws {
        let (h, _) = try catalog()
        let phones = try h.call("catalog.products.list", ["q": "smartphone 128gb", "limit": 200])
        let items = phones["products"]?.array ?? []
        #expect(!items.isEmpty)
        #expect(items.allSatisfy { $0["type"]?.string == "Smartphone" && $0["info"]?["storage"]?.string == "128GB" })
        let cheap = try h.call("catalog.products.list", ["category": "Study", "max_price": 20, "in_stock": true, "sort": "-price", "limit": 200])
        let prices = (cheap["products"]?.array ?? []).compactMap { $0["price"]?["value"]?.double }
        #expect(!prices.isEmpty && prices.allSatisfy { $0 <= 20 })
        #expect(prices == prices.sorted(by: >))
        #expect((cheap["products"]?.array ?? []).allSatisfy { ($0["stock"]?.int ?? 0) > 0 && $0["category"]?.string == "Study" })
        let page1 = try h.call("catalog.products.list", ["collection": "Laptops", "limit": 5])
        let page2 = try h.call("catalog.products.list", ["collection": "Laptops", "limit": 5, "offset": 5])
        let ids1 = Set((page1["products"]?.array ?? []).compactMap { $0["id"]?.string })
        let ids2 = Set((page2["products"]?.array ?? []).compactMap { $0["id"]?.string })
        #expect(ids1.count == 5 && ids2.count == 5 && ids1.isDisjoint(with: ids2))
        #expect(page1["total"] == page2["total"])
    }

    static let badListings: [(JSON, String)] = [
        (JSON.object(["limit": .int(0)]), "body.limit must be between 1 and 200 (max_page_size)"),
        (JSON.object(["limit": .string("ten")]), "body.limit must be an integer, got string"),
        (JSON.object(["category": .string("Food")]), "body.category must be one of Study, Tech, Creative, Lab, Personal, Others, got 'Food'"),
        (JSON.object(["q": .string(String(repeating: "a", count: 201))]), "body.q must be at most 200 characters (max_query_length)"),
        (JSON.object(["sort": .string("random")]), "body.sort must be one of"),
        (JSON.object(["min_price": .int(-1)]), "body.min_price must be between 0 and 1000000000"),
        (JSON.object(["offset": .int(-3)]), "body.offset must be >= 0"),
    ]

    @Test(arguments: badListings)
    func badListingsAreRefusedByName(_ body: JSON, _ message: String) throws {
        let (h, _) = try catalog()
        #expect { try h.call("catalog.products.list", body) } throws: { error in
            (error as? QuadError)?.code == .badRequest && (error as? QuadError)?.message.contains(message) == true
        }
    }

    @Test func unknownProductIs404AndUnknownTypeNamesItself() throws {
        let (h, _) = try catalog()
        #expect(throws: QuadError.notFound("")) { try h.call("catalog.product.get", ["id": "p-9999"]) }
        #expect { try h.call("catalog.nothing") } throws: { ($0 as? QuadError)?.message == "unknown request type 'catalog.nothing' for service 'catalog'" }
    }
}

@Suite("Stock holds")
struct StockTests {
    @Test func aHoldTakesAllItemsOrNoneAndNamesWhatIsShort() throws {
        let (h, _) = try catalog()
        let a = "p-0001", b = "p-0002"
        let (sa, sb) = (try stock(h, a), try stock(h, b))
        do {
            _ = try h.call("catalog.stock.hold", ["order": "o-1", "items": [["product": .string(a), "quantity": 1], ["product": .string(b), "quantity": .int(sb + 1)]]], role: "service")
            Issue.record("a hold beyond stock was accepted")
        } catch let e as QuadError {
            #expect(e.status == 409)
            #expect(e.message == "not enough stock: \(b) (requested \(sb + 1), available \(sb))")
            #expect(e.details["short"]?.array?.first?["available"]?.int == sb)
        }
        #expect(try stock(h, a) == sa, "nothing taken when one item is short")
        let held = try h.call("catalog.stock.hold", ["order": "o-2", "items": [["product": .string(a), "quantity": 1]]], role: "service")
        #expect(held["status"]?.string == "held")
        #expect(try stock(h, a) == sa - 1)
        // Idempotent by order id, even under a new envelope id.
        let again = try h.call("catalog.stock.hold", ["order": "o-2", "items": [["product": .string(a), "quantity": 1]]], role: "service")
        #expect(again == held)
        #expect(try stock(h, a) == sa - 1)
    }

    @Test func confirmReleaseAndExpiry() throws {
        let (h, db) = try catalog(holdTTLms: 150)
        let p = "p-0003"
        let s0 = try stock(h, p)
        try #require(s0 >= 2)
        _ = try h.call("catalog.stock.hold", ["order": "keep", "items": [["product": .string(p), "quantity": 1]]], role: "service")
        #expect(try h.call("catalog.stock.confirm", ["order": "keep"], role: "service")["status"]?.string == "confirmed")
        #expect(try h.call("catalog.stock.confirm", ["order": "keep"], role: "service")["status"]?.string == "confirmed")
        _ = try h.call("catalog.stock.hold", ["order": "late", "items": [["product": .string(p), "quantity": 1]]], role: "service")
        #expect(try stock(h, p) == s0 - 2)
        usleep(250_000)
        try db.transaction { try Catalog.expireDue(db) }
        #expect(try stock(h, p) == s0 - 1, "the expired hold gave its unit back")
        #expect { try h.call("catalog.stock.confirm", ["order": "late"], role: "service") } throws: {
            ($0 as? QuadError)?.message == "the stock hold for order 'late' has expired"
        }
        // Cancelling a confirmed order releases its stock, once.
        #expect(try h.call("catalog.stock.release", ["order": "keep"], role: "service")["status"]?.string == "released")
        #expect(try h.call("catalog.stock.release", ["order": "keep"], role: "service")["status"]?.string == "released")
        #expect(try stock(h, p) == s0)
    }

    /// The saga's one call: held and confirmed in one transaction, so a
    /// hold with confirm never expires, answers itself on a retry, and
    /// gives its units back once when released.
    @Test(arguments: [false, true])
    func aHoldWithConfirmIsConfirmedInTheSameCall(postgres: Bool) throws {
        if postgres && ProcessInfo.processInfo.environment["QUAD_TEST_PG"] == nil { return }
        let (h, db) = try catalog(postgres: postgres, holdTTLms: 150)
        let p = "p-0005"
        let s0 = try stock(h, p)
        try #require(s0 >= 2)
        let held = try h.call("catalog.stock.hold", ["order": "one-call", "items": [["product": .string(p), "quantity": 2]], "confirm": true], role: "service")
        #expect(held["status"]?.string == "confirmed", "\(held)")
        #expect(held["items"]?.array?.first?["price"]?.double ?? 0 > 0, "the hold is priced: \(held)")
        #expect(try stock(h, p) == s0 - 2)
        let again = try h.call("catalog.stock.hold", ["order": "one-call", "items": [["product": .string(p), "quantity": 2]], "confirm": true], role: "service")
        #expect(again["status"]?.string == "confirmed" && again["items"] == held["items"], "a retry answers the same hold: \(again)")
        #expect(try stock(h, p) == s0 - 2, "a retry takes nothing more")
        usleep(250_000)
        try db.transaction { try Catalog.expireDue(db) }
        #expect(try stock(h, p) == s0 - 2, "a confirmed hold never expires")
        #expect(try h.call("catalog.stock.confirm", ["order": "one-call"], role: "service")["status"]?.string == "confirmed")
        #expect(try h.call("catalog.stock.release", ["order": "one-call"], role: "service")["status"]?.string == "released")
        #expect(try h.call("catalog.stock.release", ["order": "one-call"], role: "service")["status"]?.string == "released")
        #expect(try stock(h, p) == s0)
        #expect { try h.call("catalog.stock.hold", ["order": "bad", "items": [["product": .string(p), "quantity": 1]], "confirm": "yes"], role: "service") } throws: {
            ($0 as? QuadError)?.status == 400 && ($0 as? QuadError)?.message.contains("confirm") == true
        }
    }

    /// Every stock move is published with what moved it: the body the
    /// catalog writes is its contract type, and fits the event's schema
    /// (which once left out reason and order and refused them).
    /// A product's version is the seq of its last event about it (issue
    /// 30 pt 1): each stock move and each change of a listing raises it to
    /// the seq of the event phones get, in the same transaction, and every
    /// read (get, list, search) gives it.
    @Test(arguments: [false, true])
    func aProductsVersionIsTheSeqOfItsLastEvent(postgres: Bool) throws {
        if postgres && ProcessInfo.processInfo.environment["QUAD_TEST_PG"] == nil { return }
        let (h, _) = try catalog(postgres: postgres, holdTTLms: 150)
        let p = "p-0006"
        func version() throws -> Int64 { try #require(try h.call("catalog.product.get", ["id": .string(p)])["version"]?.int) }
        func lastStockEvent() throws -> Int64 {
            var (after, last): (Int64, Int64) = (0, -1)
            while let page = try h.call("catalog.events.since", ["after": .int(after), "limit": 1000], role: "admin")["events"]?.array, let end = page.last?["seq"]?.int {
                for e in page where e["type"] == "catalog.product.stock" && e["body"]?["product"] == .string(p) { last = e["seq"]?.int ?? -1 }
                after = end
            }
            return last
        }
        #expect(try version() == 0, "unchanged since seeded")
        _ = try h.call("catalog.stock.hold", ["order": "o-v1", "items": [["product": .string(p), "quantity": 1]]], role: "service")
        let v1 = try version(), e1 = try lastStockEvent()
        #expect(v1 > 0 && v1 == e1, "the hold's catalog.product.stock seq")
        _ = try h.call("catalog.stock.release", ["order": "o-v1"], role: "service")
        let v2 = try version(), e2 = try lastStockEvent()
        #expect(v2 > v1 && v2 == e2)
        let name = try #require(try h.call("catalog.product.get", ["id": .string(p)])["name"]?.string)
        let listed = try h.call("catalog.products.list", ["q": .string(name), "limit": 50])["products"]?.array?.first { $0["id"] == .string(p) }
        #expect(listed != nil && listed?["version"]?.int == v2, "the list gives the same version: \(listed?.text ?? "not listed")")
    }

    @Test func stockEventsAreTheirContractType() throws {
        let (h, db) = try catalog(holdTTLms: 150)
        let p = "p-0004"
        let s0 = try stock(h, p)
        try #require(s0 >= 2)
        // Past the seed's catalog.product.changed events.
        func events(after: Int64) throws -> [JSON] {
            var (out, after) = ([JSON](), after)
            while let page = try h.call("catalog.events.since", ["after": .int(after), "limit": 1000], role: "admin")["events"]?.array, let last = page.last?["seq"]?.int {
                out += page
                after = last
            }
            return out
        }
        let start = try events(after: 0).last?["seq"]?.int ?? 0
        let held = try h.call("catalog.stock.hold", ["order": "o-typed", "items": [["product": .string(p), "quantity": 1], ["product": .string(p), "quantity": 1]]], role: "service")
        // Two lines of one product are one line of their sum.
        let hold = try Contract.Catalog.Stock.Hold(json: held)
        #expect(hold.items.map(\.product) == [p] && hold.items.map(\.quantity) == [2] && hold.status == .held)
        _ = try h.call("catalog.stock.release", ["order": "o-typed"], role: "service")
        _ = try h.call("catalog.stock.hold", ["order": "o-late", "items": [["product": .string(p), "quantity": 1]]], role: "service")
        usleep(250_000)
        try db.transaction { try Catalog.expireDue(db) }
        _ = try h.call("catalog.stock.adjust", ["id": .string(p), "delta": 3], role: "admin")

        let moves = try events(after: start).filter { $0["type"] == "catalog.stock.changed" && $0["body"]?["product"] == .string(p) }
        let changes = try moves.map { try Contract.Catalog.Stock.Changed(json: $0["body"] ?? .null) }
        #expect(changes == [
            .init(product: p, stock: s0 - 2, delta: -2, reason: "hold", order: "o-typed"),
            .init(product: p, stock: s0, delta: 2, reason: "released", order: "o-typed"),
            .init(product: p, stock: s0 - 1, delta: -1, reason: "hold", order: "o-late"),
            .init(product: p, stock: s0, delta: 1, reason: "expired", order: "o-late"),
            .init(product: p, stock: s0 + 3, delta: 3, reason: "adjust", order: nil),
        ])
        let schema = Contract.Catalog.stockChanged.event
        for move in moves {
            let failure = Validator.contract.failure(of: move["body"] ?? .null, against: schema.body, in: schema.path)
            #expect(failure == nil, "\(move["body"]?.text ?? ""): \(failure?.message ?? "")")
        }
        #expect(moves.last?["body"]?["order"] == nil, "an adjust names no order: the field is left out, not null")
    }

    @Test func onlyServicesMayHoldStock() throws {
        let (h, _) = try catalog()
        #expect(throws: QuadError.forbidden("")) {
            try h.call("catalog.stock.hold", ["order": "x", "items": [["product": "p-0001", "quantity": 1]]], user: "u-1", role: "student")
        }
    }

    @Test func neverSellsTheLastUnitTwice() throws {
        let (h, db) = try catalog()
        let p = "p-0010"
        try db.execute("UPDATE products SET stock = 1 WHERE id = $1", .text(p))
        var confirmed = 0, refused = 0
        for n in 0..<20 {
            do {
                _ = try h.call("catalog.stock.hold", ["order": .string("race-\(n)"), "items": [["product": .string(p), "quantity": 1]]], role: "service")
                confirmed += 1
            } catch { refused += 1 }
        }
        #expect(confirmed == 1 && refused == 19)
        #expect(try stock(h, p) == 0)
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["QUAD_TEST_PG"] != nil, "needs QUAD_TEST_PG (deploy/test starts a server)"))
    func holdsWorkTheSameOnPostgreSQL() throws {
        let (h, _) = try catalog(postgres: true)
        let p = "p-0004"
        let s0 = try stock(h, p)
        _ = try h.call("catalog.stock.hold", ["order": "pg-1", "items": [["product": .string(p), "quantity": .int(s0)]]], role: "service")
        #expect(try stock(h, p) == 0)
        #expect { try h.call("catalog.stock.hold", ["order": "pg-2", "items": [["product": .string(p), "quantity": 1]]], role: "service") } throws: {
            ($0 as? QuadError)?.status == 409
        }
        _ = try h.call("catalog.stock.release", ["order": "pg-1"], role: "service")
        #expect(try stock(h, p) == s0)
        #expect(try h.call("catalog.products.list", ["q": "iphone", "limit": 3])["total"]?.int ?? 0 > 0)
    }
}

@Suite("For You")
struct ForYouTests {
    func event(_ type: String, _ body: JSON) -> Envelope { Envelope(type: type, kind: .event, body: body) }

    @Test func ranksProfileFavoritesAndPurchases() throws {
        let (h, db) = try catalog()
        try db.transaction {
            try Catalog.applyForYou(db, event("accounts.user.registered", ["user": "u-1", "name": "Ana", "semester": 2, "categories": ["Lab"]]))
            // Two Creative favorites outweigh the Lab profile (2*2 > 3).
            try Catalog.applyForYou(db, event("favorites.added", ["user": "u-1", "product": "p-0020"]))
            try Catalog.applyForYou(db, event("favorites.added", ["user": "u-1", "product": "p-0021"]))
        }
        let result = try h.call("catalog.foryou", ["limit": 200], user: "u-1")
        #expect(result["categories"]?.array?.map { $0["name"]?.string } == ["Creative", "Lab"])
        #expect(result["categories"]?.array?.map { $0["score"]?.int } == [4, 3])
        let products = result["products"]?.array ?? []
        #expect(products.first?["category"]?.string == "Creative")
        #expect(!products.contains { $0["id"]?.string == "p-0020" }, "favorites are not suggested again")
        #expect(products.allSatisfy { ($0["stock"]?.int ?? 0) > 0 })
        // A purchase counts; a cancelled one stops counting.
        try db.transaction {
            try Catalog.applyForYou(db, event("orders.confirmed", ["order": "o-9", "user": "u-1", "items": [["product": "p-0014", "quantity": 1], ["product": "p-0015", "quantity": 1], ["product": "p-0016", "quantity": 1]]]))
        }
        #expect(try h.call("catalog.foryou", [:], user: "u-1")["categories"]?.array?.first?["name"]?.string == "Study")
        try db.transaction { try Catalog.applyForYou(db, event("orders.cancelled", ["order": "o-9", "user": "u-1"])) }
        #expect(try h.call("catalog.foryou", [:], user: "u-1")["categories"]?.array?.first?["name"]?.string == "Creative")
        // Without a user there is no For You.
        #expect(throws: QuadError.unauthorized("")) { try h.call("catalog.foryou") }
    }
}
