import QuadMessaging
import Testing

/// The one timer implementation of every poll loop (broker, workers, the
/// edge's phones), on a clock the test moves by hand.
@Suite("Timers")
struct TimersTests {
    final class FakeClock { var now: Int64 = 0 }

    @Test func aCancelledTimerNeverRunsAndNoLongerCounts() {
        let clock = FakeClock()
        let timers = Timers(now: { clock.now })
        var ran: [Int] = []
        let a = timers.after(10) { ran.append(1) }
        timers.after(20) { ran.append(2) }
        let tick = timers.every(5) { ran.append(0) }
        #expect(timers.count == 3)
        timers.cancel(a)
        timers.cancel(nil)
        #expect(timers.count == 2)
        #expect(timers.timeout(cap: 100) == 5)
        clock.now = 5; timers.runDue()
        timers.cancel(tick)
        clock.now = 30; timers.runDue()
        #expect(ran == [0, 2])
        #expect(timers.count == 0 && timers.timeout(cap: 100) == 100)
    }

    @Test func aRepeatingTimerStopsWhenItSaysSo() {
        let clock = FakeClock()
        let timers = Timers(now: { clock.now })
        var runs = 0
        timers.repeating(every: 10) { runs += 1; return runs < 3 }
        for t in stride(from: 10, through: 100, by: 10) { clock.now = Int64(t); timers.runDue() }
        #expect(runs == 3 && timers.count == 0)
    }

    @Test func aTimerCanCancelItselfAndLeaveWorkForTheNextTurn() {
        let clock = FakeClock()
        let timers = Timers(now: { clock.now })
        var log: [String] = []
        var own: Int?
        own = timers.every(10) {
            log.append("tick")
            timers.cancel(own)
            // Follow-up work with no delay waits for the next turn, which
            // comes at once: the loop polls its sockets in between.
            timers.after(0) { log.append("then") }
        }
        clock.now = 10; timers.runDue()
        #expect(log == ["tick"] && timers.timeout(cap: 100) == 0)
        timers.runDue()
        #expect(log == ["tick", "then"])
        clock.now = 50; timers.runDue()
        #expect(log == ["tick", "then"] && timers.count == 0)
    }

    @Test func aSlowTurnDoesNotMakeARepeatingTimerCatchUp() {
        let clock = FakeClock()
        let timers = Timers(now: { clock.now })
        var runs = 0
        timers.every(10) { runs += 1 }
        clock.now = 95; timers.runDue()
        #expect(runs == 1 && timers.timeout(cap: 100) == 10)
    }

    @Test func manyTimersComeDueInOrder() {
        let clock = FakeClock()
        let timers = Timers(now: { clock.now })
        var order: [Int64] = []
        var rng = SystemRandomNumberGenerator()
        let delays = (0..<500).map { _ in Int64.random(in: 0...1000, using: &rng) }
        for d in delays { timers.after(d) { order.append(d) } }
        for t in 0...1000 { clock.now = Int64(t); timers.runDue() }
        #expect(order == delays.sorted())
    }

    @Test func aTurnOverItsBudgetLeavesTheRestDueForTheNextTurn() {
        let clock = FakeClock()
        let timers = Timers(now: { clock.now })
        var ran: [Int] = []
        // Each timer takes 4 ms of the clock; a turn has 10.
        for k in 0..<6 { timers.after(1) { ran.append(k); clock.now += 4 } }
        clock.now = 1
        timers.runDue(budgetMs: 10)
        #expect(ran == [0, 1, 2] && timers.overran == 1)
        // The rest are due at once: the loop polls, then runs them.
        #expect(timers.timeout(cap: 100) == 0)
        timers.runDue(budgetMs: 10)
        #expect(ran == [0, 1, 2, 3, 4, 5] && timers.count == 0)
        // A timer longer than the budget still runs, one a turn.
        timers.after(0) { ran.append(6); clock.now += 50 }
        timers.after(0) { ran.append(7); clock.now += 50 }
        timers.runDue(budgetMs: 10)
        #expect(ran.suffix(1) == [6])
        timers.runDue(budgetMs: 10)
        #expect(ran.suffix(2) == [6, 7] && timers.overran == 2)
        // Timer 7 was due at 25 and ran in the turn that began at 75.
        #expect(timers.takeLateMs() == 50 && timers.lateMs == 0)
    }
}
