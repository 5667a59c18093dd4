import Foundation
import QuadMessaging
import QuadRuntime
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadEdge

/// A phone's link to two brokers, both serving (issue 14): real brokers and
/// a real worker as processes, the link on a loop the test turns.
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
        // sent again under the same id; ten seconds an attempt, so a
        // failover found by waiting it out would show.
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
            link.send(request, timeoutMs: 10_000) { result in
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
        print("phone link: broker killed after \(atKill) of \(total); slowest \(slowest) ms; \(link.failovers) failovers; \(timeouts) timeouts")
        #expect(atKill < total)
        #expect(acknowledged.count == total)
        #expect(slowest < 2000, "slowest action took \(slowest) ms")
        #expect(link.current == 1 - used)

        let state = try stack.client(broker: 1 - used).request("tally.get", ["key": "link"], timeoutMs: 5000)
        let applied = state["applied"]?.array?.compactMap(\.string) ?? []
        #expect(applied.count == Set(applied).count, "an id applied twice")
        #expect(Set(applied) == Set(acknowledged))
        #expect(state["total"]?.int == Int64(total))
        link.down()
    }
}
