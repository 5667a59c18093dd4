import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing

/// Each message is encoded once: a reply's bytes are what the idempotency
/// record keeps and what a retry gets back.
@Suite("Encoded once")
struct EncodedOnceTests {
    func counter() throws -> (Handlers, Database) {
        let db = try TestStore.open("count", migrations: [Migration(1, "CREATE TABLE n (k TEXT PRIMARY KEY, v BIGINT NOT NULL)")])
        let handlers = Handlers(service: "count", instance: "count/1", db: db)
        handlers.mutation("count.add") { req in
            let user = try req.requireUser()
            try db.execute("INSERT INTO n (k, v) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET v = n.v + 1", .text(user))
            return ["total": .int(try db.queryOne("SELECT v FROM n WHERE k = $1", .text(user))?.int("v") ?? 0), "ratio": 0.1]
        }
        return (handlers, db)
    }

    @Test func aReplyIsStoredAsTheBytesThatAreSent() throws {
        let (handlers, db) = try counter()
        let request = Envelope.request("count.add", user: "alice")
        let reply = handlers.reply(to: request)
        #expect(reply.envelope.body["total"] == .int(1))
        let stored = try #require(try db.queryOne("SELECT reply FROM idempotency WHERE id = $1", .text(request.id))).string("reply")
        #expect(Array(stored.utf8) == reply.bytes)
    }

    @Test func aRetryGetsTheStoredBytesAsTheyAreNotEncodedAgain() throws {
        let (handlers, db) = try counter()
        let request = Envelope.request("count.add", user: "alice")
        let first = handlers.reply(to: request)
        // The stored bytes in a form this build would never write (spaces
        // between members): a retry that decoded and encoded them again
        // would answer different bytes.
        let stored = try #require(String(validating: first.bytes, as: UTF8.self))
        let unusual = "{ " + stored.dropFirst().replacingOccurrences(of: ",\"", with: " , \"")
        #expect(unusual != stored)
        #expect(try Envelope.decode(Array(unusual.utf8)) == first.envelope)
        try db.execute("UPDATE idempotency SET reply = $1 WHERE id = $2", .text(unusual), .text(request.id))
        let retry = handlers.reply(to: request)
        #expect(retry.bytes == Array(unusual.utf8))
        #expect(handlers.handle(request) == first.envelope)
        #expect(try db.queryOne("SELECT v FROM n WHERE k = 'alice'")?.int("v") == 1)
    }

    @Test func aStoredRefusalIsAnsweredAsItsBytesToo() throws {
        let (handlers, db) = try counter()
        handlers.mutation("count.refuse") { _ in throw QuadError.conflict("no") }
        let request = Envelope.request("count.refuse", user: "alice")
        let first = handlers.reply(to: request)
        #expect(first.envelope.quadError?.status == 409)
        let stored = try #require(try db.queryOne("SELECT reply FROM idempotency WHERE id = $1", .text(request.id))).string("reply")
        #expect(Array(stored.utf8) == first.bytes)
        #expect(handlers.reply(to: request).bytes == first.bytes)
    }
}
