@testable import QuadContract
import QuadWire
import Testing

/// A worker builds its own part of the contract, not every service's: the
/// parts together are the whole contract, each found by the first segment
/// of its types and paths, and a checker reads only the schema files it
/// refers to.
@Suite struct PartTests {
    func part(_ name: some StringProtocol) -> Contract.Part? { Contract.Part.named(Substring(name)) }
    func first(_ s: String, _ separator: Character) -> Substring { s.contains(separator) ? s.prefix { $0 != separator } : "" }

    @Test func everyTypeAndPathIsInThePartItsNameSays() throws {
        for op in Contract.operations {
            #expect(part(op.service)?.byType[op.type] != nil, "\(op.type) is not in the part \(op.service)")
        }
        for event in Contract.events {
            #expect(part(first(event.type, ".")).map { $0.events.contains { $0.type == event.type } } == true, "\(event.type)")
        }
        for d in Contract.definitions {
            #expect(part(first(d.path, "/")).map { $0.definitions.contains { $0.path == d.path } } == true, "\(d.path)")
        }
        let parts = Contract.Part.names.compactMap(part)
        #expect(parts.count == Contract.Part.names.count)
        #expect(parts.map(\.operations.count).reduce(0, +) == Contract.operations.count)
        #expect(parts.map(\.events.count).reduce(0, +) == Contract.events.count)
        #expect(parts.map(\.definitions.count).reduce(0, +) == Contract.definitions.count)
        #expect(Contract.Part.common.operations.count == Contract.common.count)
    }

    @Test func aFileByPathIsTheOneWritten() {
        let files = Contract.files
        #expect(files.count == 195)
        for (path, text) in files { #expect(Contract.file(at: path) == text, "\(path)") }
        for path in ["nothing.schema.json", "catalog/nothing.request.json", "common/nothing.reply.json", "/envelope.schema.json", "", "nowhere/x.json"] {
            #expect(Contract.file(at: path) == nil, "\(path)")
        }
    }

    /// Compiling a service's checkers reads its own schema files and those
    /// they refer to; before, the first request rendered and parsed all 158.
    @Test func checkersReadOnlyWhatTheyReferTo() throws {
        for (service, refersTo) in [("favorites", ["catalog"]), ("reservations", []), ("catalog", []), ("orders", ["catalog"]), ("notifications", [])] {
            let v = Validator(documents: .contract())
            for op in Contract.operations where op.service == service {
                let paths = try #require(Contract.schemaPaths(op.type))
                _ = v.compiled(op.request.schema, base: paths.request)
                _ = v.compiled(op.reply.schema, base: paths.reply)
            }
            let read = v.documents.paths
            let allowed = Set([service, ""] + refersTo)
            #expect(read.allSatisfy { allowed.contains(String(first($0, "/"))) }, "\(service) read \(read)")
            #expect(read.count < 20, "\(service) read \(read.count) schema files")
        }
    }

    @Test func theLazyDocumentsResolveAsTheWholeSetDid() {
        let whole = Validator(documents: Dictionary(Contract.documents, uniquingKeysWith: { a, _ in a }))
        let lazy = Validator(documents: .contract())
        for (path, doc) in Contract.documents {
            for body: JSON in [.null, [:], ["x": 1], ["limit": 500], "s"] {
                #expect(lazy.check(body, doc, base: path) == whole.check(body, doc, base: path), "\(path)")
            }
        }
    }
}
