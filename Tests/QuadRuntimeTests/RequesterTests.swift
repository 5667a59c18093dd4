import QuadRuntime
import Testing

/// The requester's rules (``Requester``) driven by hand: no socket, no
/// sleep, no clock; time is a number the test moves.
@Suite("The one requester's rules, without sockets")
struct RequesterTests {
    typealias R = Requester<String>

    @Test func aCallGoesToThePreferredBrokerAndIsTimedOnceTaken() {
        var r = R(brokers: 2, preferred: 1)
        #expect(r.start("a", timeoutMs: 1000, attempts: 3) == [.send("a", broker: 1)])
        #expect(r.taken("a", now: 100) == [.wait("a", untilMs: 100 + 1000 + 250)])
        #expect(r.answered("a", from: 1, retryable: false) == [.deliver("a")])
        #expect(r.count == 0)
        // A late repeat of the answer answers nothing.
        #expect(r.answered("a", from: 0, retryable: false) == [])
    }

    @Test func aSilentBrokerIsLeftForTheNextAttemptUnderTheSameID() {
        var r = R(brokers: 2, preferred: 0)
        _ = r.start("a", timeoutMs: 1000, attempts: 2)
        _ = r.taken("a", now: 0)
        #expect(r.expired("a", now: 1250) == [.send("a", broker: 1)])
        #expect(r.attempt(of: "a") == 2)
        // New calls go to the broker that did not stay silent.
        #expect(r.preferred == 1)
        #expect(r.failovers == 1)
        _ = r.taken("a", now: 1250)
        #expect(r.expired("a", now: 2500) == [.fail("a", .timeout(attempts: 2, timeoutMs: 1000))])
        #expect(!r.contains("a"))
    }

    @Test func oneBrokerRetriesOnTheSameBroker() {
        var r = R(brokers: 1)
        _ = r.start("a", timeoutMs: 500, attempts: 3)
        _ = r.taken("a", now: 0)
        #expect(r.expired("a", now: 750) == [.send("a", broker: 0)])
        _ = r.taken("a", now: 750)
        #expect(r.expired("a", now: 1500) == [.send("a", broker: 0)])
        _ = r.taken("a", now: 1500)
        #expect(r.expired("a", now: 2250) == [.fail("a", .timeout(attempts: 3, timeoutMs: 500))])
        #expect(r.failovers == 0)
    }

    @Test func anAnswerToAnEarlierAttemptAnswersTheCall() {
        var r = R(brokers: 2)
        _ = r.start("a", timeoutMs: 1000, attempts: 3)
        _ = r.taken("a", now: 0)
        _ = r.expired("a", now: 1250)  // the second attempt, on broker 1
        // The first attempt's answer comes late, through broker 0.
        #expect(r.answered("a", from: 0, retryable: false) == [.deliver("a")])
        #expect(r.preferred == 0)
    }

    @Test func theBrokers503IsRetriedAtOnceOnTheNextBrokerWhileAttemptsRemain() {
        var r = R(brokers: 2)
        _ = r.start("a", timeoutMs: 1000, attempts: 2)
        _ = r.taken("a", now: 0)
        #expect(r.answered("a", from: 0, retryable: true) == [.send("a", broker: 1)])
        _ = r.taken("a", now: 10)
        // The last attempt's 503 is the answer.
        #expect(r.answered("a", from: 1, retryable: true) == [.deliver("a")])
    }

    @Test func aRefusedSendGoesToTheNextBrokerAtOnceThenWaitsWhenAllRefused() {
        var r = R(brokers: 2, preferred: 0, retryMs: 20)
        #expect(r.start("a", timeoutMs: 100, attempts: 2) == [.send("a", broker: 0)])
        #expect(r.refused("a", now: 0) == [.send("a", broker: 1)])
        // Both refused it in a row: again in 20 ms, from the first.
        #expect(r.refused("a", now: 0) == [.retry("a", atMs: 20)])
        #expect(r.resend("a") == [.send("a", broker: 0)])
        #expect(r.refused("a", now: 20) == [.send("a", broker: 1)])
        // Taken after 60 ms of refusals: the attempt keeps what is left of
        // its time, and went to another broker than its first.
        #expect(r.taken("a", now: 60) == [.wait("a", untilMs: 60 + 100 + 250 - 60)])
        #expect(r.failovers == 1)
    }

    @Test func aServiceKeepsItsFirstBrokerUntilItFailsACall() {
        var r = R(brokers: 2, preferred: 0, followsAnswers: false)
        _ = r.start("a", timeoutMs: 1000, attempts: 2)
        #expect(r.refused("a", now: 0) == [.send("a", broker: 1)])
        _ = r.taken("a", now: 0)
        #expect(r.answered("a", from: 1, retryable: false) == [.deliver("a")])
        #expect(r.preferred == 0)
        #expect(r.start("b", timeoutMs: 1000, attempts: 2) == [.send("b", broker: 0)])
        _ = r.taken("b", now: 0)
        _ = r.expired("b", now: 1250)
        #expect(r.preferred == 1)
    }

    @Test func aSendRefusedForTheWholeAttemptEndsItAsLost() {
        var r = R(brokers: 1, retryMs: 20)
        _ = r.start("a", timeoutMs: 100, attempts: 2)
        #expect(r.refused("a", now: 0) == [.retry("a", atMs: 20)])
        #expect(r.refused("a", now: 100) == [.send("a", broker: 0)])
        #expect(r.attempt(of: "a") == 2)
        #expect(r.refused("a", now: 100) == [.retry("a", atMs: 120)])
        #expect(r.refused("a", now: 200) == [.fail("a", .timeout(attempts: 2, timeoutMs: 100))])
    }

    @Test func aClosedConnectionHandsItsCallsToTheNextBrokerInTheSameAttempt() {
        var r = R(brokers: 3, preferred: 1)
        _ = r.start("a", timeoutMs: 1000, attempts: 3)
        _ = r.start("b", timeoutMs: 1000, attempts: 3)
        _ = r.taken("a", now: 0)
        _ = r.taken("b", now: 0)
        let moved = r.connectionClosed(1)
        #expect(Set(moved) == [.send("a", broker: 2), .send("b", broker: 2)])
        #expect(r.attempt(of: "a") == 1)
        #expect(r.preferred == 2)
        // A new call passes over the closed broker.
        #expect(r.start("c", timeoutMs: 1000, attempts: 3) == [.send("c", broker: 2)])
        // Broker 2 closes too: its calls go to broker 0, never to closed 1.
        #expect(Set(r.connectionClosed(2)) == [.send("a", broker: 0), .send("b", broker: 0), .send("c", broker: 0)])
        r.connectionOpened(1)
        _ = r.taken("a", now: 5)
        #expect(r.expired("a", now: 1255) == [.send("a", broker: 1)])
    }

    @Test func withEveryBrokerClosedCallsStayWhereTheyAre() {
        var r = R(brokers: 2)
        _ = r.start("a", timeoutMs: 1000, attempts: 2)
        #expect(r.connectionClosed(0) == [.send("a", broker: 1)])
        #expect(r.connectionClosed(1) == [])
        #expect(r.broker(of: "a") == 1)
    }

    @Test func aCallAbandonedIsForgotten() {
        var r = R(brokers: 1)
        _ = r.start("a", timeoutMs: 1000, attempts: 2)
        r.abandon("a")
        #expect(r.count == 0)
        #expect(r.expired("a", now: 5000) == [])
        #expect(r.taken("a", now: 5000) == [])
    }

    // A phone's link: one connection at a time.

    @Test func onOneConnectionACallIsTimedFromItsStartAndARefusalWaits() {
        var r = R(brokers: 2, preferred: 1, oneConnection: true)
        #expect(r.start("a", timeoutMs: 1000, attempts: 1, now: 50) == [.send("a", broker: 1), .wait("a", untilMs: 50 + 1000 + 250)])
        #expect(r.refused("a", now: 60) == [])
        #expect(r.taken("a", now: 400) == [])
        #expect(r.answered("a", from: 1, retryable: false) == [.deliver("a")])
    }

    @Test func onOneConnectionASilentBrokerIsLeftWithEveryCallWaitingOnIt() {
        var r = R(brokers: 2, preferred: 0, oneConnection: true)
        _ = r.start("a", timeoutMs: 1000, attempts: 1, now: 0)
        _ = r.start("b", timeoutMs: 1000, attempts: 1, now: 500)
        // a's deadline: the link leaves broker 0, b goes to broker 1 at
        // once (its deadline unchanged), and a fails (its caller retries).
        #expect(r.expired("a", now: 1250) == [.send("b", broker: 1), .fail("a", .timeout(attempts: 1, timeoutMs: 1000))])
        #expect(r.preferred == 1)
        #expect(r.failovers == 1)
        // b's own deadline then passes on broker 1: back to broker 0.
        #expect(r.expired("b", now: 1750) == [.fail("b", .timeout(attempts: 1, timeoutMs: 1000))])
        #expect(r.preferred == 0)
    }

    @Test func onOneConnectionALateDeadlineOfAnEarlierBrokerDoesNotMoveAgain() {
        var r = R(brokers: 2, preferred: 0, oneConnection: true)
        _ = r.start("a", timeoutMs: 1000, attempts: 1, now: 0)
        #expect(r.move(to: 1) == [.send("a", broker: 1)])
        _ = r.start("b", timeoutMs: 1000, attempts: 2, now: 10)
        // b starts on broker 1, where a went; a retry of a (the same id)
        // replaces it, timed from now.
        #expect(r.start("a", timeoutMs: 1000, attempts: 1, now: 20) == [.send("a", broker: 1), .wait("a", untilMs: 1270)])
        #expect(r.count == 2)
        // b's second attempt goes to broker 0, and a with it.
        #expect(r.expired("b", now: 1260) == [.send("a", broker: 0), .send("b", broker: 0), .wait("b", untilMs: 2510)])
        #expect(r.attempt(of: "b") == 2)
    }

    @Test func onOneConnectionAMoveWithNothingWaitingOnlyChangesTheBroker() {
        var r = R(brokers: 3, preferred: 2, oneConnection: true)
        #expect(r.move() == [])
        #expect(r.preferred == 0)
        #expect(r.move(to: 2) == [])
        #expect(r.preferred == 2)
        _ = r.start("a", timeoutMs: 100, attempts: 1, now: 0)
        #expect(r.abandonAll() == ["a"])
        #expect(r.count == 0)
    }
}
