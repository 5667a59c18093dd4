import QuadWire

/// The timers of the edge's one poll loop: think times, request deadlines,
/// backoffs, flushes of every phone. A binary heap, so hundreds of phones
/// with a few timers each cost little per turn of the loop. One thread.
final class Agenda {
    struct Entry {
        var due: Int64
        var id: Int
        var action: () -> Void
    }

    private var heap: [Entry] = []
    private var cancelled: Set<Int> = []
    private var live: Set<Int> = []
    private var nextID = 0
    let now: () -> Int64

    init(now: @escaping () -> Int64 = Clock.monotonicMillis) { self.now = now }

    /// Runs `action` once after `delayMs`; returns an id for ``cancel(_:)``.
    @discardableResult
    func after(_ delayMs: Int64, _ action: @escaping () -> Void) -> Int {
        nextID += 1
        live.insert(nextID)
        push(Entry(due: now() + max(0, delayMs), id: nextID, action: action))
        return nextID
    }

    /// Runs `action` every `intervalMs` until it returns false.
    func every(_ intervalMs: Int64, _ action: @escaping () -> Bool) {
        after(intervalMs) { [weak self] in
            if action() { self?.every(intervalMs, action) }
        }
    }

    func cancel(_ id: Int?) {
        if let id, live.remove(id) != nil { cancelled.insert(id) }
    }

    /// Timers still to run.
    var count: Int { live.count }

    /// Milliseconds until the next timer is due, at most `cap`.
    func timeout(cap: Int64) -> Int64 {
        while let first = heap.first, cancelled.contains(first.id) {
            cancelled.remove(first.id)
            pop()
        }
        guard let first = heap.first else { return cap }
        return max(0, min(cap, first.due - now()))
    }

    /// Runs every timer that is due, including those a due timer schedules
    /// with no delay.
    func runDue() {
        let t = now()
        while let first = heap.first, first.due <= t {
            pop()
            if cancelled.remove(first.id) != nil { continue }
            live.remove(first.id)
            first.action()
        }
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

/// Exponential backoff with full jitter and a cap: the n-th retry waits a
/// random time between half and all of `min(cap, base * 2^n)`, so phones
/// that lost the network together do not all come back in the same
/// millisecond.
struct Backoff: Sendable {
    var baseMs: Int64 = 250
    var capMs: Int64 = 8_000

    func delay<R: RandomNumberGenerator>(attempt: Int, using rng: inout R) -> Int64 {
        let exp = min(capMs, baseMs << Int64(min(max(0, attempt), 20)))
        return Int64.random(in: (exp / 2)...max(exp / 2, exp), using: &rng)
    }
}

/// A small seeded generator (SplitMix64), so a campus day with the same seed
/// makes the same choices.
struct SeededRandom: RandomNumberGenerator, Sendable {
    var state: UInt64

    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
