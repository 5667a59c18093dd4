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

@Suite struct JSONWriteTests {
    /// Integers are written digit by digit, without a String: every edge
    /// must come out as Swift's own description of it, and parse back.
    @Test func integersAreWrittenAsTheirDecimalText() throws {
        for i: Int64 in [0, 1, -1, 9, 10, -10, 1_234_567_890, Int64.max, Int64.min, Int64.min + 1] {
            #expect(String(decoding: JSON.int(i).encoded(), as: UTF8.self) == String(i))
            #expect(try JSON.parse(JSON.int(i).encoded()) == .int(i))
        }
    }

    @Test func objectKeysAreWrittenSorted() {
        let value: JSON = ["b": 2, "a": ["z": true, "y": .null], "c": "x"]
        #expect(String(decoding: value.encoded(), as: UTF8.self) == #"{"a":{"y":null,"z":true},"b":2,"c":"x"}"#)
    }
}
