import QuadRuntime
import Testing

@Suite("Giving memory back once a worker goes quiet")
struct IdleTrimTests {
    @Test func onceAfterEachBusySpellNeverWhileBusyNorOnEveryIdleTick() {
        var trim = IdleTrim()
        var said: [Bool] = []
        // Idle from the start: start-up gave its memory back already.
        said.append(trim.tick())
        said.append(trim.tick())
        #expect(said == [false, false])
        // Busy: requests between every two ticks.
        said = []
        for _ in 0..<3 {
            trim.note()
            said.append(trim.tick())
        }
        #expect(said == [false, false, false])
        // The first quiet tick gives it back, and only that one.
        said = (0..<3).map { _ in trim.tick() }
        #expect(said == [true, false, false])
        // Work in the last gap before a tick counts as busy again.
        trim.note()
        trim.note()
        said = (0..<2).map { _ in trim.tick() }
        #expect(said == [false, true])
    }
}
