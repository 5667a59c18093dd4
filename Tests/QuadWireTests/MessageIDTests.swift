import Foundation
import QuadWire
import Testing

@Suite struct MessageIDFormatTests {
    /// The written-in-place formatting must give the RFC 9562 text form:
    /// 8-4-4-4-12 lowercase hex, version 7, variant 10, the milliseconds first.
    @Test func idsAreUUIDv7TextWithTheTimeFirst() throws {
        let now: UInt64 = 0x0192_3456_789A
        let id = MessageID.make(now: now)
        #expect(id.count == 36)
        let parts = id.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        #expect(parts.map(\.count) == [8, 4, 4, 4, 12])
        #expect(id.allSatisfy { "0123456789abcdef-".contains($0) })
        #expect(parts[0] + parts[1] == "01923456789a")
        #expect(parts[2].first == "7")
        #expect("89ab".contains(parts[3].first!))
        #expect(UUID(uuidString: id) != nil)
    }

    @Test func idsDifferAndSortByTime() {
        let ids = (0..<10_000).map { MessageID.make(now: 1_700_000_000_000 + UInt64($0 / 100)) }
        #expect(Set(ids).count == ids.count)
        let earlier = MessageID.make(now: 1_700_000_000_000), later = MessageID.make(now: 1_700_000_000_001)
        #expect(earlier < later)
    }
}
