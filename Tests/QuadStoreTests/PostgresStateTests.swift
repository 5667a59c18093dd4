@testable import QuadStore
import Testing

@Suite("a PostgreSQL error's SQLSTATE, as the answer it becomes")
struct PostgresStateTests {
    @Test func aFullDiskOrTooFewResourcesIsWorthARetryNotA500() {
        #expect(PostgresDatabase.kind(ofState: "53100") == .full)
        #expect(StoreError(.full, "x").quadError.status == 503)
        for state in ["53200", "53300", "53400", "40001", "40P01"] {
            #expect(PostgresDatabase.kind(ofState: state) == .busy, "\(state)")
        }
        #expect(PostgresDatabase.kind(ofState: "23505") == .constraint)
        #expect(PostgresDatabase.kind(ofState: "42P01") == .other)
        #expect(StoreError(.other, "x").quadError.status == 500)
    }
}
