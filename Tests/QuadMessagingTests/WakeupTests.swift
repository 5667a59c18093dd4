import Foundation
import Testing
@testable import QuadMessaging

private func monotonicMillis() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

/// Work handed to a loop by other threads, under a lock.
private final class Handed: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Int] = []
    func put(_ k: Int) { lock.lock(); items.append(k); lock.unlock() }
    func take() -> [Int] { lock.lock(); defer { lock.unlock() }; let t = items; items = []; return t }
}

@Suite("Wakeup: threads hand work to the loop through a socket")
struct WakeupTests {
    /// Both loops: zmq_poll, and epoll over ZMQ_FD (scalable).
    @Test(arguments: [false, true]) func everyItemHandedOverReachesTheLoopWithoutATimer(scalable: Bool) throws {
        let context = ZMQContext()
        let reactor = Reactor(now: { monotonicMillis() }, scalable: scalable)
        let handed = Handed()
        var got: [Int] = []
        var handlerRuns = 0
        let wakeup = try Wakeup(context: context, reactor: reactor) {
            handlerRuns += 1
            got += handed.take()
        }
        #expect(reactor.timers.count == 0, "nothing on the loop runs on a timer")
        // Four threads hand over 2,000 items each, ringing after each.
        let doorbell = wakeup.doorbell
        let threads = 4, each = 2_000
        DispatchQueue.global().async {
            DispatchQueue.concurrentPerform(iterations: threads) { t in
                for k in 0..<each {
                    handed.put(t * each + k)
                    doorbell.ring()
                }
            }
        }
        // The loop waits in its poll (a cap of 10 s a turn) and is woken.
        let until = monotonicMillis() + 60_000
        while got.count < threads * each && monotonicMillis() < until {
            try reactor.turn(timeoutCap: 10_000)
        }
        #expect(got.count == threads * each)
        #expect(Set(got).count == threads * each, "each item once")
        // Rings coalesce: never more sent than handler runs plus the one in flight.
        #expect(doorbell.sent >= 1 && doorbell.sent <= handlerRuns + 1)
    }

    @Test func aRingWakesALoopWaitingInItsPoll() throws {
        let context = ZMQContext()
        let reactor = Reactor(now: { monotonicMillis() })
        var woken = 0
        let wakeup = try Wakeup(context: context, reactor: reactor) { woken += 1 }
        let doorbell = wakeup.doorbell
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(100)) { doorbell.ring() }
        // One turn with a cap of 60 s returns once the ring arrives.
        let started = monotonicMillis()
        try reactor.turn(timeoutCap: 60_000)
        #expect(woken == 1)
        #expect(monotonicMillis() - started < 50_000, "the ring, not the cap, ended the wait")
        // Nothing more rings: the next turn runs no handler.
        try reactor.turn(timeoutCap: 50)
        #expect(woken == 1)
    }

    @Test func aDoorbellOutlivingItsLoopDropsItsRings() throws {
        let context = ZMQContext()
        let reactor = Reactor(now: { monotonicMillis() })
        var wakeup: Wakeup? = try Wakeup(context: context, reactor: reactor) {}
        let doorbell = wakeup!.doorbell
        #expect(reactor.count == 1)
        wakeup = nil
        #expect(reactor.count == 0, "the loop's end is unregistered with its wakeup")
        doorbell.ring()
        doorbell.ring()
        #expect(doorbell.sent == 1)
    }
}
