import Foundation
import QuadRuntime
import QuadStore
import QuadWire
import Testing

/// A phone's news (Messages.swift) on the real stack: its user's
/// notifications reach its file when it comes back online, the messages
/// view shows them and marks them read at the service, and the report
/// finds none that is not its user's.
@Suite("The phone's news", .serialized)
struct MessagesTests {
    @Test func anOrderConfirmedReachesThePhoneWhenItComesBackAndTheViewMarksItRead() throws {
        let edge = try EdgeStack("news")
        let user = try edge.signIn()
        let order = try edge.act("orders.place", ["source": "buy_now", "product": "p-0021", "quantity": 1, "mode": "buy", "screen": "home"])
        #expect(try edge.waitDrained()["drained"]?.bool == true)
        #expect(try edge.log().first { $0["id"]?.string == order }?["outcome"]?.string == "done")
        // The network goes and comes back: the phone asks for its news after its cursor.
        var shown: [JSON] = []
        let until = Clock.monotonicMillis() + 30_000
        while Clock.monotonicMillis() < until {
            try edge.airplane(true)
            try edge.airplane(false)
            usleep(500_000)
            shown = try edge.view("messages")["body"]?["news"]?.array ?? []
            if shown.contains(where: { $0["kind"]?.string == "order_confirmed" && $0["ref"]?.string == order }) { break }
        }
        let confirmed = try #require(shown.first { $0["kind"]?.string == "order_confirmed" && $0["ref"]?.string == order }, "no news of \(order): \(shown)")
        #expect(confirmed["text"]?.string?.contains("is confirmed") == true)
        #expect(shown.filter { $0["ref"]?.string == order }.count == 1)
        // The view marked it read at the service.
        let store = try edge.store("notifications")
        defer { store.close() }
        let marked = Clock.monotonicMillis() + 15_000
        func readAtService() throws -> Bool {
            try store.queryOne("SELECT read FROM notifications WHERE ref = $1 AND user_id = $2", .text(order), .text(user))?.int("read") == 1
        }
        while try !readAtService(), Clock.monotonicMillis() < marked { usleep(200_000) }
        #expect(try readAtService())
        // The report: received, and none that was not the phone's user's.
        let report = try edge.edge("edge.report", [:], timeoutMs: 10_000)
        let news = report["notifications"] ?? report["report"]?["notifications"] ?? .null
        #expect((news["received"]?.int ?? 0) >= 1 && news["not_theirs"]?.int == 0, "\(news)")
    }
}
