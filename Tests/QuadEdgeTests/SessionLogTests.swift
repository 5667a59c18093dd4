import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// What the session log (`quad-edge run --record-views on`) takes for the
/// versioned objects of a view or an answer: the checker's session
/// guarantees (deploy/checker.py) hold each to monotonic reads and
/// read-your-writes by these names.
@Suite("The session log's versioned objects")
struct SessionLogTests {
    @Test func eachKindOfSavedCopyIsNamedByWhatItIs() {
        let body: JSON = [
            "products": [["id": "p-0001", "name": "Desk lamp", "stock": 3, "version": 41]],
            "orders": [["order": "o-1", "status": "confirmed", "version": 7, "items": [["product": "p-0001", "quantity": 1]]]],
            "active": ["id": "r-1", "spot": "central-P1-030", "status": "held", "version": 12],
            "news": [["id": "n-1", "text": "Your hold expired", "read": false, "version": 3]],
            "items": [["product": "p-0002", "added_at": 1, "version": 9], ["product": "p-0003", "pending": true]],
        ]
        let found = Dictionary(uniqueKeysWithValues: Phone.versioned(body).map { ($0.object, $0.version) })
        #expect(found == ["product:p-0001": 41, "order:o-1": 7, "reservation:r-1": 12, "notification:n-1": 3, "favorite:p-0002": 9],
                "an order's items, and a favorite still queued (no version), are none: \(found)")
        #expect(Phone.versioned(["product": "p-0004", "favorite": true, "changed": true, "version": 15]).map(\.object) == ["favorite:p-0004"],
                "the reply to favorites.add")
    }
}
