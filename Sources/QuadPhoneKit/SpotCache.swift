import QuadWire

/// The in-memory cache of "Find a spot", after the ParkWise seed: least
/// recently used out first, entries older than the time to live count as a
/// miss. Sixteen entries hold every combination of the four filters of one
/// destination (2⁴); thirty seconds, because spots change in minutes. Only
/// answers from the server go in, never a copy read from disk.
package final class SpotCache<Value> {
    let capacity: Int
    let ttlMs: Int64
    let now: () -> Int64
    /// Keys in order of use, the least recent first, with their values and times.
    private var order: [String] = []
    private var entries: [String: (value: Value, at: Int64)] = [:]
    private(set) var hits = 0
    private(set) var misses = 0

    package init(capacity: Int, ttlMs: Int64, now: @escaping () -> Int64 = Clock.monotonicMillis) {
        self.capacity = capacity
        self.ttlMs = ttlMs
        self.now = now
    }

    var count: Int { entries.count }
    var keys: [String] { order }

    /// The value of `key` if it is fresh; a use moves it to the most recent end.
    package func get(_ key: String) -> (value: Value, ageMs: Int64)? {
        guard let e = entries[key] else { misses += 1; return nil }
        let age = now() - e.at
        guard age <= ttlMs else {
            remove(key)
            misses += 1
            return nil
        }
        touch(key)
        hits += 1
        return (e.value, age)
    }

    package func put(_ key: String, _ value: Value) {
        if entries[key] != nil { touch(key) } else { order.append(key) }
        entries[key] = (value, now())
        while order.count > capacity {
            entries[order.removeFirst()] = nil
        }
    }

    func remove(_ key: String) {
        entries[key] = nil
        order.removeAll { $0 == key }
    }

    private func touch(_ key: String) {
        if let k = order.firstIndex(of: key) { order.remove(at: k) }
        order.append(key)
    }
}
