import Foundation
import Testing
@testable import QuadStore
import QuadRuntime
import QuadWire

/// An event's envelope is encoded once, when its outbox row is written.
@Suite("Outbox envelopes")
struct OutboxEnvelopeTests {
    func migrated(_ db: Database, upTo: Int = .max) throws {
        try Migrations.apply(db, ServiceTables.migrations.filter { $0.version <= upTo }, scope: "quad")
    }

    @Test func anEventIsEncodedWhenWrittenAndRelayedAsItsBytes() throws {
        for db in try stores() {
            try migrated(db)
            db.eventSource = "t"
            let seq = try db.transaction { try Outbox.append(db, type: "t.e", body: ["n": 1, "s": "é"]) }
            let row = try #require(try db.queryOne("SELECT envelope FROM outbox WHERE seq = $1", .int(seq)))
            let stored = Array(row.string("envelope").utf8)
            let envelope = try Envelope.decode(stored)
            #expect(envelope.src == "t" && envelope.seq == seq && envelope.kind == .event && envelope.body == ["n": 1, "s": "é"])
            // Bytes this build would never write (spaces between members)
            // go out as they are: the relay does not encode again.
            let unusual = String(decoding: stored, as: UTF8.self).replacingOccurrences(of: ",\"", with: " , \"")
            try db.execute("UPDATE outbox SET envelope = $1 WHERE seq = $2", .text(unusual), .int(seq))
            var sent: [[UInt8]] = []
            try Outbox.relay(db) { sent.append($0.bytes(src: "t")) }
            #expect(sent == [Array(unusual.utf8)])
            #expect(try Outbox.since(db, after: 0, limit: 10).map(\.body) == [["n": 1, "s": "é"]])
        }
    }

    @Test func rowsWrittenBeforeTheEnvelopeColumnStayReadable() throws {
        for db in try stores() {
            try migrated(db, upTo: 2)
            // A row as the build before wrote it: its body in the body column.
            try db.execute("UPDATE outbox_seq SET seq = 1 WHERE one = 1")
            try db.execute("INSERT INTO outbox (seq, id, type, ts, body) VALUES (1, $1, 't.old', 5, $2)", .text(MessageID.make()), .text(#"{"old":true}"#))
            try migrated(db)
            db.eventSource = "t"
            try db.transaction { try Outbox.append(db, type: "t.new", body: ["new": true]) }
            let events = try Outbox.since(db, after: 0, limit: 10)
            #expect(events.map(\.type) == ["t.old", "t.new"])
            #expect(events.map(\.body) == [["old": true], ["new": true]])
            var published: [Envelope] = []
            try Outbox.relay(db) { published.append(try Envelope.decode($0.bytes(src: "t"))) }
            #expect(published.map(\.src) == ["t", "t"])
            #expect(published.map(\.seq) == [1, 2])
            #expect(published.map(\.body) == [["old": true], ["new": true]])
        }
    }
}
