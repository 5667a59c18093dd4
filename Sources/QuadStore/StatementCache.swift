/// Prepared statements of one connection, by SQL text, least recently used
/// evicted first: a service runs a few dozen statements again and again, so
/// each is parsed and planned once per connection, and a connection that
/// meets many distinct texts (ad-hoc analytics questions) keeps at most
/// `capacity` of them.
struct StatementCache<Handle> {
    /// Entries kept; 0 turns the cache off (every statement prepared anew).
    var capacity: Int
    private var entries: [String: (handle: Handle, used: UInt64)] = [:]
    private var clock: UInt64 = 0

    init(capacity: Int) { self.capacity = capacity }

    var count: Int { entries.count }

    mutating func get(_ key: String) -> Handle? {
        guard var entry = entries[key] else { return nil }
        clock &+= 1
        entry.used = clock
        entries[key] = entry
        return entry.handle
    }

    /// Keeps `handle` under `key`; returns the entry evicted to make room,
    /// which the caller finalizes.
    mutating func put(_ key: String, _ handle: Handle) -> Handle? {
        clock &+= 1
        var evicted: Handle?
        if entries.count >= capacity, let oldest = entries.min(by: { $0.value.used < $1.value.used }) {
            evicted = oldest.value.handle
            entries[oldest.key] = nil
        }
        entries[key] = (handle, clock)
        return evicted
    }

    /// The cache's clock now: an entry used after this has a later mark.
    var mark: UInt64 { clock }

    /// Removes the entries not used since `mark`; returns them, for the
    /// caller to finalize.
    mutating func removeUnused(since mark: UInt64) -> [Handle] {
        let old = entries.filter { $0.value.used <= mark }
        for key in old.keys { entries[key] = nil }
        return old.values.map(\.handle)
    }

    /// Empties the cache; returns what it held, for the caller to finalize.
    mutating func removeAll() -> [Handle] {
        defer { entries = [:] }
        return entries.values.map(\.handle)
    }
}
