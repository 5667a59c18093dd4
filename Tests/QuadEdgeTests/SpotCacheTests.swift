import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

@Suite("The spot search cache")
struct SpotCacheTests {
    final class FakeClock {
        var ms: Int64 = 0
    }

    @Test func keepsSixteenAndDropsTheLeastRecentlyUsed() {
        let clock = FakeClock()
        let cache = SpotCache<Int>(capacity: 16, ttlMs: 30_000, now: { clock.ms })
        for k in 0..<16 { cache.put("k\(k)", k) }
        #expect(cache.get("k0")?.value == 0)  // k0 is now the most recent
        cache.put("k16", 16)
        #expect(cache.count == 16)
        #expect(cache.get("k1") == nil, "the least recently used entry goes first")
        #expect(cache.get("k0")?.value == 0)
        #expect(cache.get("k16")?.value == 16)
    }

    @Test func anEntryOlderThanThirtySecondsIsAMiss() {
        let clock = FakeClock()
        let cache = SpotCache<String>(capacity: 16, ttlMs: 30_000, now: { clock.ms })
        cache.put("central|ev", "spots")
        clock.ms = 30_000
        #expect(cache.get("central|ev")?.ageMs == 30_000)
        clock.ms = 30_001
        #expect(cache.get("central|ev") == nil)
        #expect(cache.count == 0)
    }
}
