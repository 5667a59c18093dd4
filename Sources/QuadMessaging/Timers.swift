/// The timers of a poll loop, the one implementation every loop uses (the
/// broker's, a worker's, the edge's hundreds of phones): the loop asks how
/// long it may sleep (``timeout(cap:)``), polls, then runs what is due
/// (``runDue()``). A binary heap, so many timers cost little per turn; a
/// cancelled timer is dropped when it reaches the top. One thread, no locks.
public final class Timers {
    struct Entry {
        var due: Int64
        var id: Int
        /// Milliseconds between runs of a repeating timer; nil: runs once.
        var interval: Int64?
        var action: () -> Bool
    }

    private var heap: [Entry] = []
    private var cancelled: Set<Int> = []
    private var live: Set<Int> = []
    private var nextID = 0
    let now: () -> Int64

    /// `now` is a monotonic clock in milliseconds (`Clock.monotonicMillis`).
    public init(now: @escaping () -> Int64) { self.now = now }

    /// Runs `action` once after `delayMs`; returns an id for ``cancel(_:)``.
    @discardableResult
    public func after(_ delayMs: Int64, _ action: @escaping () -> Void) -> Int {
        schedule(after: delayMs, interval: nil) { action(); return false }
    }

    /// Runs `action` every `intervalMs`, first after one interval, until
    /// cancelled.
    @discardableResult
    public func every(_ intervalMs: Int64, _ action: @escaping () -> Void) -> Int {
        schedule(after: intervalMs, interval: intervalMs) { action(); return true }
    }

    /// Runs `action` every `intervalMs`, first after one interval, for as
    /// long as it returns true (or until cancelled).
    @discardableResult
    public func repeating(every intervalMs: Int64, _ action: @escaping () -> Bool) -> Int {
        schedule(after: intervalMs, interval: intervalMs, action)
    }

    /// Cancels timer `id`; nil or a timer that already ran is ignored.
    public func cancel(_ id: Int?) {
        if let id, live.remove(id) != nil { cancelled.insert(id) }
    }

    /// Timers still to run.
    public var count: Int { live.count }

    /// Turns whose due timers did not all run within their budget.
    public private(set) var overran = 0

    /// The most any turn's oldest due timer was past its time when the
    /// turn began running timers, since the last ``takeLateMs()``: what a
    /// loop busy with its sockets (or a budget) makes its timers wait.
    public private(set) var lateMs: Int64 = 0

    /// ``lateMs``, then 0 again.
    public func takeLateMs() -> Int64 {
        defer { lateMs = 0 }
        return lateMs
    }

    /// Milliseconds until the next timer is due, at most `cap`.
    public func timeout(cap: Int64) -> Int64 {
        while let first = heap.first, cancelled.contains(first.id) {
            cancelled.remove(first.id)
            pop()
        }
        guard let first = heap.first else { return cap }
        return max(0, min(cap, first.due - now()))
    }

    /// Runs every timer that was due when it was called. What a timer
    /// schedules with no delay runs on the loop's next turn (``timeout(cap:)``
    /// is then 0), so sockets are polled in between: a worker relaying a long
    /// backlog a page a turn keeps serving requests. A repeating timer is due
    /// again one interval after this turn, so a slow turn does not make it
    /// run several times in a row.
    ///
    /// `budgetMs`: stop once this long has gone (at least one timer runs);
    /// what is still due runs on the next turn, after the sockets are
    /// polled again (``timeout(cap:)`` is 0). A loop of a thousand phones
    /// whose due timers took a second would otherwise leave every answer
    /// that arrived meanwhile unread for that second.
    public func runDue(budgetMs: Int64? = nil) {
        let t = now()
        // Timers made during this turn have greater ids and are due no
        // sooner than `t`, so they sort after every one that is due now.
        let lastBefore = nextID
        if let first = heap.first, first.due <= t, t - first.due > lateMs { lateMs = t - first.due }
        var ran = 0
        while let first = heap.first, first.due <= t, first.id <= lastBefore {
            if let budgetMs, ran > 0, now() - t >= budgetMs {
                overran += 1
                return
            }
            ran += 1
            pop()
            if cancelled.remove(first.id) != nil { continue }
            let again = first.action()
            // The action may have cancelled its own timer.
            if cancelled.remove(first.id) != nil { continue }
            if let interval = first.interval, again {
                push(Entry(due: t + interval, id: first.id, interval: interval, action: first.action))
            } else {
                live.remove(first.id)
            }
        }
    }

    private func schedule(after delayMs: Int64, interval: Int64?, _ action: @escaping () -> Bool) -> Int {
        nextID += 1
        live.insert(nextID)
        // A repeating timer of 0 ms would run for ever within one turn.
        push(Entry(due: now() + max(0, delayMs), id: nextID, interval: interval.map { max(1, $0) }, action: action))
        return nextID
    }

    private func push(_ e: Entry) {
        heap.append(e)
        var k = heap.count - 1
        while k > 0 {
            let parent = (k - 1) / 2
            if less(heap[k], heap[parent]) { heap.swapAt(k, parent); k = parent } else { break }
        }
    }

    private func pop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var k = 0
        while true {
            let l = 2 * k + 1, r = l + 1
            var m = k
            if l < heap.count && less(heap[l], heap[m]) { m = l }
            if r < heap.count && less(heap[r], heap[m]) { m = r }
            if m == k { return }
            heap.swapAt(k, m)
            k = m
        }
    }

    private func less(_ a: Entry, _ b: Entry) -> Bool { a.due < b.due || (a.due == b.due && a.id < b.id) }
}
