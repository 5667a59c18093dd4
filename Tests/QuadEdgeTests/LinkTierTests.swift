import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// A phone's link to two brokers, both serving: real brokers and a real
/// worker as processes, the link on a loop the test turns. The link holds
/// one socket, to one broker at a time (Freelance): the broker it talks to
/// dies, the request waiting on it times out, and the link moves to the
/// other and sends it again there under the same id.
@Suite("Phone link to two brokers", .serialized)
struct LinkTierTests {
    @Test func aPhoneWhoseBrokerIsKilledIsAnsweredByTheOtherUnderTheSameIDs() throws {
        let stack = try TestStack(name: "link-tier")
        #expect(try stack.startTwoBrokersWithTally())

        let context = ZMQContext()
        let reactor = Reactor(now: Clock.monotonicMillis)
        let link = Link(context: context, endpoint: stack.endpoints(brokers: 2).frontend, source: "edge/t", reactor: reactor,
                        serverKey: stack.brokerKey)
        try link.up()
        // One action at a time, as a phone's outbox drains: a timeout is
        // sent again under the same id, on the other broker; an attempt
        // waits one second.
        let total = 200
        var acknowledged: [String] = []
        var slowest: Int64 = 0
        var timeouts = 0
        var pending: (Envelope, Int64)?
        func next() {
            guard acknowledged.count < total else { return }
            let request = pending?.0 ?? Envelope.request("tally.add", body: ["key": "link", "n": 1])
            let started = pending?.1 ?? Clock.monotonicMillis()
            pending = (request, started)
            link.send(request, timeoutMs: 1_000) { result in
                switch result {
                case .success(let reply) where reply.quadError == nil:
                    acknowledged.append(request.id)
                    slowest = max(slowest, Clock.monotonicMillis() - started)
                    pending = nil
                default:
                    timeouts += 1
                }
                reactor.timers.after(0) { next() }
            }
        }
        next()
        func turn(until done: () -> Bool, ms: Int64 = 60_000) {
            let end = Clock.monotonicMillis() + ms
            while Clock.monotonicMillis() < end && !done() { try? reactor.turn(timeoutCap: 10) }
        }
        turn(until: { acknowledged.count >= 50 })
        // The broker the phone talks to dies (it started on one at random).
        let used = link.current
        stack.kill(TestStack.brokerName(used))
        let atKill = acknowledged.count
        turn(until: { acknowledged.count >= total })
        print("phone link: broker killed after \(atKill) of \(total); slowest \(slowest) ms; \(link.moves) moves; \(timeouts) timeouts")
        #expect(atKill < total)
        #expect(acknowledged.count == total)
        #expect(link.moves >= 1)
        #expect(link.current == 1 - used)
        // One socket whatever the number of brokers.
        #expect(link.isUp && link.endpoints.count == 2)

        let state = try stack.client(broker: 1 - used).request("tally.get", ["key": "link"], timeoutMs: 5000)
        let applied = state["applied"]?.array?.compactMap(\.string) ?? []
        #expect(applied.count == Set(applied).count, "an id applied twice")
        #expect(Set(applied) == Set(acknowledged))
        #expect(state["total"]?.int == Int64(total))
        link.down()
    }
}
