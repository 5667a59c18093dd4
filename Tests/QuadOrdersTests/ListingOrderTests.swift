import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing

/// Students' listings through orders (issue 16, points 1 and 3), on real
/// processes: a broker, accounts, catalog and orders. A seller lists an
/// item; a buyer finds it by search, with the seller's name and never
/// their id; the seller's own purchase and rental are refused by orders.place
/// with catalog's 409 and its reason; a listing for rent only cannot be
/// bought; the buyer buys it and the seller sees it sold, with the revenue
/// and the fee; once sold out, a second purchase is 409.
@Suite("Listings through orders", .serialized)
struct ListingOrderTests {
    @Test func aSellerCannotBuyTheirOwnListingAndSeesWhatABuyerBought() throws {
        for name in ["broker", "accounts", "catalog", "orders"] {
            try #require(FileManager.default.isExecutableFile(atPath: TestStack.binDir + "/quad-\(name)"), "quad-\(name) is not built")
        }
        let stack = try TestStack(name: "listings")
        try stack.startBroker()
        try stack.startWorker("quad-accounts", instance: "accounts/1", extra: ["--password-hashing", "minimum"])
        try stack.startWorker("quad-catalog", instance: "catalog/1")
        try stack.startWorker("quad-orders", instance: "orders/1")
        for service in ["accounts", "catalog", "orders"] {
            #expect(try stack.waitForWorkers(service, count: 1, timeoutMs: 30_000), "\(service) did not register")
        }

        func signIn(_ who: String, _ name: String) throws -> (Client, String) {
            let c = try stack.client(source: "listings-\(who)")
            let email = "list-\(who)@uni.edu", password = "listing-pass-\(who)-9c2d"
            let registered = try c.request("accounts.register", ["email": .string(email), "password": .string(password), "name": .string(name), "semester": 4],
                                           timeoutMs: 8000, attempts: 1)
            c.token = try #require(try c.request("accounts.login", ["email": .string(email), "password": .string(password)], timeoutMs: 8000, attempts: 1)["token"]?.string)
            if let user = registered["user"]?.string { return (c, user) }
            return (c, try #require(try c.request("accounts.profile.get", timeoutMs: 5000)["user"]?.string))
        }
        let (seller, sellerID) = try signIn("seller", "Sam Seller")
        let (buyer, _) = try signIn("buyer", "Bea Buyer")

        let listed = try seller.request("catalog.listings.create", [
            "name": "Graphing calculator, barely used", "category": "Study", "collection": "Study Tools", "price": ["value": 40, "currency": "USD"],
            "type": "Calculator", "condition": "Like new", "quantity": 1, "mode": "both", "rent_rate": 1.5,
        ], timeoutMs: 8000, attempts: 1)
        let id = try #require(listed["id"]?.string)
        #expect(!listed.text.contains(sellerID) && !listed.text.contains("list-seller@uni.edu"))

        // The buyer finds it, shown with the seller's name (accounts' event reaches catalog), never the id or email.
        var hit: JSON?
        #expect(try eventually {
            hit = try buyer.request("catalog.search", ["q": "graphing calculator barely", "limit": 50], timeoutMs: 5000)["products"]?.array?.first { $0["id"]?.string == id }
            return hit?["seller"]?.string == "Sam Seller"
        }, "\(String(describing: hit))")
        let page = try buyer.request("catalog.search", ["q": "graphing calculator", "limit": 50], timeoutMs: 5000)
        #expect(!page.text.contains(sellerID) && !page.text.contains("list-seller@uni.edu"))

        // The seller's own purchase, rental and cart order: 409 from the catalog's hold, with its reason.
        func refusal(_ c: Client, _ body: JSON) throws -> QuadError? {
            try c.call(.request("orders.place", body: body), timeoutMs: 15_000, attempts: 1).quadError
        }
        let own = try refusal(seller, ["source": "buy_now", "product": .string(id), "quantity": 1])
        #expect(own?.status == 409 && own?.message.contains("your own") == true && own?.message.contains(id) == true, "\(String(describing: own))")
        let ownRent = try refusal(seller, ["source": "buy_now", "product": .string(id), "mode": "rent", "days": 2])
        #expect(ownRent?.status == 409 && ownRent?.message.contains("your own") == true, "\(String(describing: ownRent))")
        _ = try seller.request("orders.cart.add", ["product": .string(id), "quantity": 1], timeoutMs: 5000, attempts: 1)
        let ownCart = try refusal(seller, ["source": "cart"])
        #expect(ownCart?.status == 409 && ownCart?.message.contains("your own") == true, "\(String(describing: ownCart))")
        #expect(try seller.request("catalog.product.get", ["id": .string(id)], timeoutMs: 5000)["stock"]?.int == 1)

        // A listing for rent only is not bought.
        let rentOnly = try #require(try seller.request("catalog.listings.create", [
            "name": "Lab coat to rent", "category": "Lab", "collection": "Lab Gear", "price": ["value": 20, "currency": "USD"],
            "type": "Clothing", "condition": "Good", "mode": "rent", "rent_rate": 0.5,
        ], timeoutMs: 8000, attempts: 1)["id"]?.string)
        let notForSale = try refusal(buyer, ["source": "buy_now", "product": .string(rentOnly), "quantity": 1])
        #expect(notForSale?.status == 409 && notForSale?.message.contains("for rent only") == true, "\(String(describing: notForSale))")
        // Rented, it is priced at its own rate: 3 days at 0.50.
        let rented = try buyer.request("orders.place", ["source": "buy_now", "product": .string(rentOnly), "mode": "rent", "days": 3], timeoutMs: 15_000, attempts: 1)
        #expect(rented["status"]?.string == "confirmed" && rented["items"]?.array?.first?["rent_rate"]?.double == 0.5
                && rented["items"]?.array?.first?["line_total"]?.double == 1.5, "\(rented)")

        // The buyer buys it; the seller sees it sold, with the revenue and the fee.
        let bought = try buyer.request("orders.place", ["source": "buy_now", "product": .string(id), "quantity": 1], timeoutMs: 15_000, attempts: 1)
        #expect(bought["status"]?.string == "confirmed" && bought["items"]?.array?.first?["price"]?.double == 40, "\(bought)")
        var mine: JSON?
        #expect(try eventually {
            mine = try seller.request("catalog.listings.mine", timeoutMs: 5000)["listings"]?.array?.first { $0["id"]?.string == id }
            return mine?["revenue"]?.double == 40
        }, "\(String(describing: mine))")
        #expect(mine?["status"]?.string == "sold_out" && mine?["sold"]?.int == 1 && mine?["in_stock"]?.int == 0 && mine?["fee"]?.double == 2, "\(String(describing: mine))")
        #expect(try buyer.request("catalog.listings.mine", timeoutMs: 5000)["listings"]?.array?.isEmpty == true)

        // Sold out: the next purchase is 409.
        let again = try refusal(buyer, ["source": "buy_now", "product": .string(id), "quantity": 1])
        #expect(again?.status == 409 && again?.message.contains("not enough stock") == true, "\(String(describing: again))")
    }
}
