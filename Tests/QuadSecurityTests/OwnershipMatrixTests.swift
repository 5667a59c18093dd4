import Foundation
import QuadAccounts
import QuadAnalytics
import QuadAuth
import QuadCatalog
import QuadContract
import QuadFavorites
import QuadNotifications
import QuadOrders
import QuadReservations
import QuadRuntime
import QuadTelemetry
import QuadTestSupport
import QuadWire
import Testing

/// Every request type of every service, through the broker's CURVE
/// frontend of a running stack (broker, accounts, catalog, favorites,
/// orders, reservations, telemetry, analytics), sent five ways:
///
/// | token              | a type for anyone | for a signed-in user             | for admins (or services) |
/// |--------------------|-------------------|----------------------------------|--------------------------|
/// | none               | success           | 401                              | 401                      |
/// | expired            | 401 (broker)      | 401 (broker)                     | 401 (broker)             |
/// | forged             | 401 (broker)      | 401 (broker)                     | 401 (broker)             |
/// | another student's  | success           | 403 or 404, or only their own data | 403                    |
/// | the right one      | success           | success                          | success (an admin's)     |
///
/// A test below checks that the table has a row for every type the
/// services register, so a new type without a row fails here.
@Suite("Ownership matrix", .serialized)
struct OwnershipMatrixTests {
    enum Access: String { case anyone, user, admin }

    /// What another student's token gets on a user's type.
    enum Other {
        /// 403 or 404: the type names the owner's resource (an order, a reservation, a profile).
        case refused
        /// Success, about the other user only: `isolated` checks the owner's data is not in it.
        case ownData(isolated: (JSON, Fixture) -> Bool = { _, _ in true })
    }

    struct Row: CustomStringConvertible {
        let type: String
        let access: Access
        var other: Other = .ownData()
        /// Runs before the five calls (to make the resource the calls are about).
        var prepare: ((Fixture) throws -> Void)?
        /// The body of the owner's (or the admin's) calls.
        var body: (Fixture) throws -> JSON = { _ in [:] }
        /// The body of the other student's call, when it differs.
        var otherBody: ((Fixture) throws -> JSON)?
        /// Runs on the right call's reply.
        var after: ((JSON, Fixture) throws -> Void)?

        var description: String { type }
    }

    /// Who calls, and what the matrix made on the way.
    final class Fixture: @unchecked Sendable {
        let stack: FullStack
        var owner = "", ownerToken = "", other = "", otherToken = "", adminToken = ""
        let ownerEmail = "owner@uni.edu", otherEmail = "other@uni.edu", password = "owner-pass-2b7e41"
        var expiredToken = "", forgedToken = ""
        /// Another session of the owner, for the rows that end one.
        var spareToken = ""
        var products: [String] = []
        var n = 0
        var order = "", stockOrder = "", reservation = "", listing = "", notification = ""
        var lastRightID = ""

        init(_ stack: FullStack) { self.stack = stack }

        func next() -> Int { n += 1; return n }
        func product(_ k: Int) -> String { products[k] }

        func call(_ type: String, _ body: JSON, token: String?, id: String = MessageID.make()) throws -> Envelope {
            try stack.client(token: token).call(.request(type, body: body, id: id), timeoutMs: 8000, attempts: 1)
        }

        func ok(_ type: String, _ body: JSON = [:], token: String?) throws -> JSON {
            let answer = try call(type, body, token: token)
            if let error = answer.quadError { throw error }
            return answer.body
        }
    }

    /// A fresh session of the owner in `spareToken`: refresh and logout end
    /// it, not the token the other rows use.
    static func spareSession(_ f: Fixture) throws {
        f.spareToken = try f.ok("accounts.login", ["email": .string(f.ownerEmail), "password": .string(f.password)], token: nil)["token"]?.string ?? ""
    }

    /// A student's listing for the matrix's rows.
    static func listingBody(_ name: String) -> JSON {
        ["name": .string(name), "category": "Personal", "collection": "Dorm", "price": ["value": 12, "currency": "USD"], "type": "Lamp",
         "condition": "Good", "quantity": 1, "mode": "sale"]
    }

    /// The table: every type, grouped by service, in an order where each row
    /// finds what the rows before it made.
    static func rows(services: [String]) -> [Row] {
        var rows: [Row] = [
            Row(type: "sys.services", access: .anyone),
            Row(type: "sys.health", access: .anyone),
        ]
        for s in services {
            rows += [
                Row(type: "\(s).sys.health", access: .anyone),
                Row(type: "\(s).sys.metrics", access: .anyone),
                Row(type: "\(s).sys.types", access: .anyone),
                Row(type: "\(s).events.since", access: .admin, body: { _ in ["after": 0, "limit": 10] }),
            ]
        }
        let byService: [String: [Row]] = [
            "accounts": [
                Row(type: "accounts.register", access: .anyone, body: { f in
                    ["email": .string("r\(f.next())@uni.edu"), "password": "register-pass-1", "name": "Reg", "semester": 2]
                }),
                Row(type: "accounts.login", access: .anyone, body: { f in ["email": .string(f.ownerEmail), "password": .string(f.password)] }),
                Row(type: "accounts.profile.get", access: .user, other: .refused,
                    otherBody: { f in ["user": .string(f.owner)] },
                    after: { reply, f in #expect(reply["user"]?.string == f.owner && reply["email"]?.string == f.ownerEmail) }),
                Row(type: "accounts.profile.update", access: .user, other: .refused,
                    body: { _ in ["semester": 4] }, otherBody: { f in ["user": .string(f.owner), "semester": 9] },
                    after: { reply, _ in #expect(reply["semester"]?.int == 4) }),
                // A refresh token is its own proof (the session token may have
                // expired) and is used once: each call trades a new one.
                Row(type: "accounts.refresh", access: .anyone, body: { f in
                    ["refresh_token": .string(try f.ok("accounts.login", ["email": .string(f.ownerEmail), "password": .string(f.password)], token: nil)["refresh_token"]?.string ?? "")]
                }, after: { reply, f in #expect(reply["user"]?.string == f.owner && reply["refresh_token"]?.string != nil) }),
                Row(type: "accounts.logout", access: .user, other: .refused, prepare: Self.spareSession,
                    body: { f in ["token": .string(f.spareToken)] },
                    after: { reply, f in #expect(reply["user"]?.string == f.owner && reply["jti"]?.string != nil) }),
                Row(type: "accounts.jwks", access: .anyone, after: { reply, _ in #expect(reply["keys"]?.array?.first?["kty"]?.string == "OKP") }),
                Row(type: "accounts.revocations", access: .admin, after: { reply, _ in #expect(reply["revocations"]?.array?.isEmpty == false) }),
            ],
            "catalog": [
                Row(type: "catalog.products.list", access: .anyone, body: { _ in ["limit": 3] }),
                Row(type: "catalog.search", access: .anyone, body: { _ in ["q": "a", "limit": 3] }),
                Row(type: "catalog.foryou", access: .user, body: { _ in ["limit": 5] }),
                Row(type: "catalog.product.get", access: .anyone, body: { f in ["id": .string(f.product(0))] }),
                Row(type: "catalog.categories", access: .anyone),
                Row(type: "catalog.collections", access: .anyone),
                Row(type: "catalog.stock.adjust", access: .admin, body: { f in ["id": .string(f.product(0)), "delta": 1] }),
                Row(type: "catalog.stock.hold", access: .admin, prepare: { f in f.stockOrder = MessageID.make() },
                    body: { f in ["order": .string(f.stockOrder), "items": [["product": .string(f.product(1)), "quantity": 1]]] }),
                Row(type: "catalog.stock.get", access: .admin, body: { f in ["order": .string(f.stockOrder)] }),
                Row(type: "catalog.stock.confirm", access: .admin, body: { f in ["order": .string(f.stockOrder)] }),
                Row(type: "catalog.stock.release", access: .admin, body: { f in ["order": .string(f.stockOrder)] }),
                // A 1×1 PNG: any signed-in user may upload a picture.
                Row(type: "catalog.images.put", access: .user,
                    body: { _ in ["data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"] }),
                // Students' listings: each student makes and sees their own;
                // another's is not found; admins take one down.
                Row(type: "catalog.listings.create", access: .user, body: { _ in Self.listingBody("Matrix owner's lamp") },
                    otherBody: { _ in Self.listingBody("Matrix other's lamp") },
                    after: { reply, f in
                        f.listing = reply["id"]?.string ?? ""
                        #expect(f.listing.hasPrefix("l-") && !reply.text.contains(f.owner))
                    }),
                Row(type: "catalog.listings.mine", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.listing) }),
                    after: { reply, f in #expect(reply.text.contains(f.listing)) }),
                Row(type: "catalog.listings.update", access: .user, other: .refused,
                    body: { f in ["listing": .string(f.listing), "name": "Matrix owner's lamp, renamed"] }),
                Row(type: "catalog.listings.withdraw", access: .user, other: .refused, body: { f in ["listing": .string(f.listing)] },
                    after: { reply, _ in #expect(reply["status"]?.string == "withdrawn") }),
                Row(type: "catalog.listings.takedown", access: .admin, body: { f in ["listing": .string(f.listing), "reason": "matrix"] },
                    after: { reply, _ in #expect(reply["status"]?.string == "taken_down") }),
            ],
            "favorites": [
                Row(type: "favorites.add", access: .user, body: { f in ["product": .string(f.product(0))] },
                    otherBody: { f in ["product": .string(f.product(2))] }),
                Row(type: "favorites.list", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.product(0)) }),
                    after: { reply, f in #expect(reply.text.contains(f.product(0)) && !reply.text.contains(f.product(2))) }),
                Row(type: "favorites.count", access: .anyone, body: { f in ["product": .string(f.product(0))] }),
                Row(type: "favorites.top", access: .anyone, body: { _ in ["limit": 5] }),
                Row(type: "favorites.remove", access: .user,
                    other: .ownData(isolated: { reply, _ in reply["changed"]?.bool == false }),
                    body: { f in ["product": .string(f.product(0))] },
                    after: { reply, _ in #expect(reply["changed"]?.bool == true) }),
            ],
            "orders": [
                Row(type: "orders.cart.add", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.product(0)) }),
                    body: { f in ["product": .string(f.product(0)), "quantity": 1] },
                    otherBody: { f in ["product": .string(f.product(2)), "quantity": 1] }),
                Row(type: "orders.cart.set", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.product(0)) }),
                    body: { f in ["product": .string(f.product(0)), "quantity": 2] },
                    otherBody: { f in ["product": .string(f.product(2)), "quantity": 2] }),
                Row(type: "orders.cart.view", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.product(0)) }),
                    after: { reply, f in #expect(reply.text.contains(f.product(0))) }),
                Row(type: "orders.cart.remove", access: .user, body: { f in ["product": .string(f.product(0))] }),
                Row(type: "orders.cart.clear", access: .user),
                Row(type: "orders.place", access: .user,
                    body: { f in ["source": "buy_now", "product": .string(f.product(3)), "quantity": 1, "mode": "buy", "screen": "home"] },
                    after: { reply, f in
                        f.order = reply["order"]?.string ?? f.lastRightID
                        #expect(reply["status"]?.string == "confirmed", "\(reply)")
                    }),
                Row(type: "orders.get", access: .user, other: .refused, body: { f in ["order": .string(f.order)] },
                    after: { reply, f in #expect(reply["order"]?.string == f.order) }),
                Row(type: "orders.mine", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.order) }),
                    after: { reply, f in #expect(reply.text.contains(f.order)) }),
                Row(type: "orders.cancel", access: .user, other: .refused, body: { f in ["order": .string(f.order)] },
                    after: { reply, _ in #expect(reply["status"]?.string == "cancelled") }),
                Row(type: "orders.rentals", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.order) }),
                    prepare: { f in
                        let rented = try f.ok("orders.place", ["source": "buy_now", "product": .string(f.product(3)), "mode": "rent", "days": 3], token: f.ownerToken)
                        f.order = try #require(rented["order"]?.string)
                    },
                    after: { reply, f in #expect(reply.text.contains(f.order)) }),
                Row(type: "orders.return", access: .user, other: .refused, body: { f in ["order": .string(f.order)] },
                    after: { reply, _ in #expect(reply["status"]?.string == "returned") }),
            ],
            "reservations": [
                Row(type: "reservations.lots", access: .anyone),
                Row(type: "reservations.levels", access: .anyone, body: { _ in ["lot": "central"] }),
                Row(type: "reservations.spots.find", access: .anyone, body: { _ in ["lot": "central", "limit": 3] }),
                Row(type: "reservations.nearby", access: .anyone),
                Row(type: "reservations.occupancy", access: .anyone, body: { _ in ["lot": "central"] }),
                Row(type: "reservations.forecast", access: .anyone, body: { _ in ["lot": "central"] }),
                Row(type: "reservations.hold", access: .user, body: { _ in ["destination": "ML"] },
                    after: { reply, f in f.reservation = reply["reservation"]?["id"]?.string ?? "" }),
                Row(type: "reservations.checkin", access: .user, other: .refused, body: { f in ["reservation": .string(f.reservation)] }),
                Row(type: "reservations.checkout", access: .user, other: .refused, body: { f in ["reservation": .string(f.reservation)] }),
                Row(type: "reservations.mine", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.reservation) }),
                    after: { reply, f in #expect(reply.text.contains(f.reservation)) }),
                Row(type: "reservations.cancel", access: .user, other: .refused,
                    prepare: { f in
                        f.reservation = try f.ok("reservations.hold", ["destination": "ML"], token: f.ownerToken)["reservation"]?["id"]?.string ?? ""
                    },
                    body: { f in ["reservation": .string(f.reservation)] }),
                Row(type: "reservations.car.save", access: .user,
                    body: { _ in ["lat": 4.6, "lon": -74.06, "level": "P1", "note": "owner's car"] },
                    otherBody: { _ in ["lat": 4.6, "lon": -74.06, "level": "P2", "note": "other's car"] }),
                Row(type: "reservations.car.get", access: .user,
                    other: .ownData(isolated: { reply, _ in !reply.text.contains("owner's car") }),
                    after: { reply, _ in #expect(reply.text.contains("owner's car")) }),
            ],
            "telemetry": [
                Row(type: "telemetry.ingest", access: .anyone, body: { _ in
                    ["events": [[
                        "id": .string(MessageID.make()), "phone": "ph-matrix", "user": .null, "session": "s-matrix", "name": "view.opened",
                        "ts": .int(Int64(Clock.nowMillis())), "offline": false, "props": ["view": "favorites"],
                    ]]]
                }, after: { reply, _ in #expect(reply["accepted"]?.int == 1, "\(reply)") }),
                Row(type: "telemetry.raw.since", access: .admin, body: { _ in ["after": 0, "limit": 10] }),
                Row(type: "telemetry.stats", access: .admin),
            ],
            // The owner's rental (the last order placed) was confirmed: news the owner reads and marks, another student never.
            "notifications": [
                Row(type: "notifications.since", access: .user,
                    other: .ownData(isolated: { reply, f in !reply.text.contains(f.order) && !reply.text.contains(f.notification) }),
                    prepare: { f in
                        let told = try f.stack.eventually {
                            let items = try f.ok("notifications.since", ["limit": 200], token: f.ownerToken)["items"]?.array ?? []
                            f.notification = items.first { $0["ref"]?.string == f.order }?["id"]?.string ?? ""
                            return !f.notification.isEmpty
                        }
                        #expect(told, "no notification of order \(f.order)")
                    },
                    after: { reply, f in #expect(reply.text.contains(f.order) && reply.text.contains(f.notification)) }),
                Row(type: "notifications.read", access: .user, other: .refused, body: { f in ["ids": [.string(f.notification)]] },
                    after: { reply, _ in #expect(reply["marked"]?.int == 1, "\(reply)") }),
            ],
            "analytics": [
                Row(type: "analytics.summary", access: .admin),
                Row(type: "analytics.question", access: .admin, body: { _ in ["id": "purchase_screen"] }),
                // The campus's aggregates, the same for every driver: nobody's data in them.
                Row(type: "analytics.driver", access: .user, after: { reply, _ in
                    #expect(reply["answers"]?.array?.compactMap { $0["number"]?.string } == ["BQ2", "BQ6", "BQ10", "BQ12"], "\(reply)")
                }),
            ],
        ]
        for s in services { rows += byService[s] ?? [] }
        return rows
    }

    @Test func everyRequestTypeAnswersEachKindOfTokenAsTheTableSays() throws {
        let stack = try FullStack("matrix")
        let f = Fixture(stack)
        try setUp(f)
        var checked: [String] = []
        for row in Self.rows(services: stack.running) {
            try row.prepare?(f)
            let right = row.access == .admin ? f.adminToken : f.ownerToken
            let cases: [(String, String?)] = [
                ("no token", nil), ("expired token", f.expiredToken), ("forged token", f.forgedToken),
                ("another student's token", f.otherToken), ("the right token", right),
            ]
            for (label, token) in cases {
                let body = label == "another student's token" ? try (row.otherBody ?? row.body)(f) : try row.body(f)
                let id = MessageID.make()
                if label == "the right token" { f.lastRightID = id }
                let answer = try f.call(row.type, body, token: token, id: id)
                let status = answer.quadError?.status
                let what = "\(row.type) with \(label): \(answer.kind) \(answer.body.text.prefix(300))"
                switch (label, row.access, row.other) {
                case ("expired token", _, _):
                    #expect(status == 401 && answer.src == "broker" && answer.quadError?.message.hasPrefix("token expired") == true, "\(what)")
                case ("forged token", _, _):
                    #expect(status == 401 && answer.src == "broker" && answer.quadError?.message.hasPrefix("token key unknown") == true, "another key's kid: \(what)")
                case ("no token", .anyone, _), ("another student's token", .anyone, _):
                    #expect(answer.kind == .reply, "\(what)")
                case ("no token", _, _):
                    #expect(status == 401, "\(what)")
                case ("another student's token", .admin, _):
                    #expect(status == 403, "\(what)")
                case ("another student's token", .user, .refused):
                    #expect(status == 403 || status == 404, "\(what)")
                case ("another student's token", .user, .ownData(let isolated)):
                    #expect(answer.kind == .reply, "\(what)")
                    let text = answer.body.text
                    #expect(!text.contains(f.owner) && !text.contains(f.ownerEmail) && isolated(answer.body, f), "the owner's data in \(what)")
                default:
                    #expect(answer.kind == .reply, "\(what)")
                    if answer.kind == .reply { try row.after?(answer.body, f) }
                }
            }
            checked.append(row.type)
        }
        // Refused calls changed nothing: the owner's profile kept its semester.
        #expect(try f.ok("accounts.profile.get", token: f.ownerToken)["semester"]?.int == 4)
        #expect(Set(checked).count == checked.count, "a type has two rows")
        #expect(checked.count >= 60, "only \(checked.count) types checked: \(stack.running)")
    }

    /// The owner, another student and the admin; an expired token of the
    /// owner's, signed with accounts' own key; a forged one claiming admin.
    func setUp(_ f: Fixture) throws {
        let stack = f.stack
        for (email, name) in [(f.ownerEmail, "Owner"), (f.otherEmail, "Other")] {
            _ = try f.ok("accounts.register", ["email": .string(email), "password": .string(f.password), "name": .string(name), "semester": 3], token: nil)
        }
        let owner = try f.ok("accounts.login", ["email": .string(f.ownerEmail), "password": .string(f.password)], token: nil)
        let other = try f.ok("accounts.login", ["email": .string(f.otherEmail), "password": .string(f.password)], token: nil)
        let admin = try f.ok("accounts.login", ["email": .string(FullStack.adminEmail), "password": .string(FullStack.adminPassword)], token: nil)
        f.owner = try #require(owner["user"]?.string)
        f.ownerToken = try #require(owner["token"]?.string)
        f.other = try #require(other["user"]?.string)
        f.otherToken = try #require(other["token"]?.string)
        f.adminToken = try #require(admin["token"]?.string)
        #expect(admin["role"]?.string == "admin")
        let key = try KeyFiles.loadSigningKey(at: stack.stack.dir + "/keys/accounts.key")
        let now = Int64(Clock.nowMillis())
        f.expiredToken = key.sign(TokenClaims(user: f.owner, role: "student", expiresAt: now - 1000, issuedAt: now - 86_400_000))
        f.forgedToken = SigningKey.generate().sign(TokenClaims(user: f.owner, role: "admin", expiresAt: now + 3_600_000, issuedAt: now))

        if stack.running.contains("catalog") {
            let listed = try f.ok("catalog.products.list", ["in_stock": true, "limit": 10], token: nil)
            f.products = (listed["products"]?.array ?? []).filter { ($0["stock"]?.int ?? 0) >= 3 }.compactMap { $0["id"]?.string }
            try #require(f.products.count >= 4, "the catalog's seed has fewer than 4 products in stock")
        }
        // Favorites and orders know products from catalog's events: wait for them.
        if stack.running.contains("favorites") {
            #expect(try stack.eventually { (try? f.ok("favorites.add", ["product": .string(f.product(0))], token: f.otherToken)) != nil })
            _ = try f.ok("favorites.remove", ["product": .string(f.product(0))], token: f.otherToken)
        }
        if stack.running.contains("orders") {
            #expect(try stack.eventually {
                (try? f.ok("orders.cart.add", ["product": .string(f.product(3)), "quantity": 1], token: f.otherToken)) != nil
            })
            _ = try f.ok("orders.cart.clear", token: f.otherToken)
        }
    }

    @Test func theTableHasARowForEveryTypeTheServicesRegister() throws {
        let dir = NSTemporaryDirectory() + "quad-matrix-types-\(getpid())"
        let installed: [(String, InProcessService)] = [
            ("accounts", try InProcessService(Accounts.self, options: ["password-hashing": "minimum", "signing-key": dir + "/accounts.key"])),
            ("catalog", try InProcessService(Catalog.self)),
            ("favorites", try InProcessService(Favorites.self)),
            ("orders", try InProcessService(Orders.self)),
            ("reservations", try InProcessService(Reservations.self, options: ["sim": "off", "history-days": "0"])),
            ("telemetry", try InProcessService(Telemetry.self)),
            ("analytics", try InProcessService(Analytics.self, options: ["http": "off"])),
            ("notifications", try InProcessService(Notifications.self)),
        ]
        let table = Set(Self.rows(services: installed.map(\.0)).map(\.type))
        for (name, service) in installed {
            let missing = Set(service.handlers.types).subtracting(table)
            #expect(missing.isEmpty, "\(name) registers types the matrix does not check: \(missing.sorted())")
        }
        let registered = Set(installed.flatMap { $0.1.handlers.types })
        let stale = table.subtracting(registered).subtracting(["sys.services", "sys.health"])
        #expect(stale.isEmpty, "rows for types no service registers: \(stale.sorted())")
    }

    /// The matrix and the contract (Sources/QuadContract) say the same: every
    /// row is a declared type with the access its x-quad-auth gives (admin
    /// rows are for admins or Quad's services), every type the contract
    /// declares for these services has a row, and every type a service
    /// registers is declared, as the kind (query or mutation) it runs as.
    @Test func theTableAgreesWithTheContract() throws {
        let dir = NSTemporaryDirectory() + "quad-matrix-contract-\(getpid())"
        let installed: [(String, InProcessService)] = [
            ("accounts", try InProcessService(Accounts.self, options: ["password-hashing": "minimum", "signing-key": dir + "/accounts.key"])),
            ("catalog", try InProcessService(Catalog.self)),
            ("favorites", try InProcessService(Favorites.self)),
            ("orders", try InProcessService(Orders.self)),
            ("reservations", try InProcessService(Reservations.self, options: ["sim": "off", "history-days": "0"])),
            ("telemetry", try InProcessService(Telemetry.self)),
            ("analytics", try InProcessService(Analytics.self, options: ["http": "off"])),
            ("notifications", try InProcessService(Notifications.self)),
        ]
        let names = installed.map(\.0)
        let rows = Self.rows(services: names)
        for row in rows {
            guard let op = Contract.operation(row.type) else {
                Issue.record("the matrix has a row for \(row.type), which the contract does not declare")
                continue
            }
            let expected: Access = switch op.auth {
            case .none: .anyone
            case .user: .user
            case .admin, .service: .admin
            }
            #expect(row.access == expected, "\(row.type): the matrix says \(row.access), the contract's auth is \(op.auth)")
        }
        let table = Set(rows.map(\.type))
        let declared = Contract.operations.filter { names.contains($0.service) }.map(\.type)
            + names.flatMap { s in Contract.common.map { "\(s).\($0.type)" } }
        let unchecked = Set(declared).subtracting(table)
        #expect(unchecked.isEmpty, "types the contract declares that the matrix does not check: \(unchecked.sorted())")
        for (name, service) in installed {
            #expect(service.handlers.undeclared.isEmpty, "\(name) answers types the contract does not declare: \(service.handlers.undeclared)")
            // The orders saga and the password-hashing mutations of accounts
            // keep their own idempotency record: mutations registered as queries.
            let ownRecord: Set = ["orders.place", "orders.cancel", "orders.return", "accounts.register", "accounts.profile.update", "accounts.refresh"]
            let misdeclared = Set(service.handlers.misdeclared).subtracting(ownRecord)
            #expect(misdeclared.isEmpty, "\(name) registers as the other kind what the contract declares: \(misdeclared.sorted())")
        }
    }
}
