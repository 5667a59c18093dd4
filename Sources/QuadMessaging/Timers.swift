/// Timers for a poll loop: the loop asks how long it may sleep, then runs
/// what is due. One thread, no locks.
public final class Timers {
    struct Entry {
        var due: Int64
        var interval: Int64?
        var id: Int
        var action: () -> Void
    }

    var entries: [Entry] = []
    var nextID = 0
    let now: () -> Int64

    public init(now: @escaping () -> Int64) { self.now = now }

    /// Runs `action` every `intervalMs`, first after one interval.
    @discardableResult
    public func every(_ intervalMs: Int64, _ action: @escaping () -> Void) -> Int {
        nextID += 1
        entries.append(Entry(due: now() + intervalMs, interval: intervalMs, id: nextID, action: action))
        return nextID
    }

    /// Runs `action` once after `delayMs`.
    @discardableResult
    public func after(_ delayMs: Int64, _ action: @escaping () -> Void) -> Int {
        nextID += 1
        entries.append(Entry(due: now() + delayMs, interval: nil, id: nextID, action: action))
        return nextID
    }

    public func cancel(_ id: Int) { entries.removeAll { $0.id == id } }

    /// Milliseconds until the next timer is due, at most `cap`.
    public func timeout(cap: Int64) -> Int64 {
        guard let first = entries.map(\.due).min() else { return cap }
        return max(0, min(cap, first - now()))
    }

    /// Runs every timer that is due.
    public func runDue() {
        let t = now()
        var due: [() -> Void] = []
        for k in entries.indices where entries[k].due <= t {
            due.append(entries[k].action)
            if let interval = entries[k].interval { entries[k].due = t + interval } else { entries[k].due = .max }
        }
        entries.removeAll { $0.due == .max }
        for action in due { action() }
    }
}
