import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadCatalog
@testable import QuadImages

/// Images as a phone meets them (issue 16, point 4): uploaded through a
/// real broker to a real catalog process, fetched over real HTTP from the
/// URL catalog answers.
@Suite("Catalog images over HTTP", .serialized)
struct ImageServingTests {
    static func http(_ port: UInt16, _ path: String, method: String = "GET", headers: [String] = []) throws -> FetchedHTTP {
        try httpRequest(port, path, method: method, headers: headers)
    }

    static func imagesPort(_ stack: TestStack, _ name: String) throws -> UInt16 { try loggedImagesPort(stack, name) }

    /// A broker and one catalog serving images on a free port.
    static func start(_ name: String, extra: [String] = []) throws -> (TestStack, Client, UInt16) {
        let stack = try TestStack(name: name)
        try stack.startBroker()
        try stack.startWorker("quad-catalog", instance: "catalog/1", extra: ["--images-http", "127.0.0.1:0"] + extra)
        try #require(try stack.waitForWorkers("catalog", count: 1, timeoutMs: 30_000))
        return (stack, try stack.internalClient(), try imagesPort(stack, "catalog/1"))
    }

    static func put(_ client: Client, _ bytes: [UInt8], user: String = "u-a") throws -> Envelope {
        var e = Envelope.request("catalog.images.put", body: ["data": .string(Data(bytes).base64EncodedString())])
        e.user = user
        return try client.call(e, timeoutMs: 15_000, attempts: 2)
    }

    @Test func anUploadIsServedImmutableWithItsETagAnd304() throws {
        let (stack, client, port) = try Self.start("images-http")
        defer { stack.stopAll() }
        let png = Pictures.png
        let reply = try Self.put(client, png)
        #expect(reply.quadError == nil, "\(reply.body.text)")
        let id = try sha256sum(png)
        #expect(reply.body["id"]?.string == id)
        #expect(reply.body["url"]?.string == "http://127.0.0.1:\(port)/images/\(id)")

        let got = try Self.http(port, "/images/\(id)")
        #expect(got.status == 200)
        #expect(got.body == png)
        #expect(got.header("ETag") == "\"\(id)\"")
        #expect(got.header("Cache-Control") == "public, max-age=31536000, immutable")
        #expect(got.header("Content-Type") == "image/png")
        #expect(got.header("Content-Length") == String(png.count))

        let cached = try Self.http(port, "/images/\(id)", headers: ["If-None-Match: \"\(id)\""])
        #expect(cached.status == 304)
        #expect(cached.body.isEmpty)
        #expect(cached.header("ETag") == "\"\(id)\"")
        let head = try Self.http(port, "/images/\(id)", method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(png.count), "\(head.head)")
        #expect(try Self.http(port, "/images/\(id)", method: "POST").status == 405)
        #expect(try Self.http(port, "/images/" + String(repeating: "a", count: 64)).status == 404)
        for malformed in ["/images/nope", "/images/\(id.uppercased())", "/images/%2e%2e%2fcatalog.db", "/metrics"] {
            #expect(try Self.http(port, malformed).status == 404, "\(malformed)")
        }

        // The same bytes again, another user: the same id, one row.
        let again = try Self.put(client, png, user: "u-b")
        #expect(again.body["id"]?.string == id)
        let db = try SQLiteDatabase(path: stack.dir + "/catalog.db")
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM images WHERE sha256 = $1", .text(id))?.int("n") == 1)

        // Text is refused through the broker too, by name, and the worker lives on.
        let text = try Self.put(client, Array("not a picture".utf8))
        #expect(text.quadError?.code == .badRequest)
        #expect(text.quadError?.message.contains("is not a JPEG, PNG or WebP image") == true)
        #expect(stack.process("catalog/1")?.isRunning == true)
    }

    @Test func aSeededProductsImageUrlFetchesARealPNG() throws {
        let (stack, client, port) = try Self.start("images-seed")
        defer { stack.stopAll() }
        let product = try client.call(.request("catalog.product.get", body: ["id": "p-0001"]), timeoutMs: 10_000, attempts: 2)
        let url = try #require(product.body["imageUrl"]?.string)
        #expect(url.hasPrefix("http://127.0.0.1:\(port)/images/"), "\(url)")
        let path = String(url.dropFirst("http://127.0.0.1:\(port)".count))
        let got = try Self.http(port, path)
        #expect(got.status == 200)
        #expect(got.header("Content-Type") == "image/png")
        #expect(Array(got.body.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        #expect(try sha256sum(got.body) == String(path.dropFirst("/images/".count)))
    }

    @Test func anImageOfMaxImageBytesCrossesTheBrokerAndOneByteMoreIsRefusedByName() throws {
        let (stack, client, _) = try Self.start("images-limit", extra: ["--images-base-url", "https://img.campus.example/"])
        defer { stack.stopAll() }
        let most = Int(Contract.Catalog.defaultMaxImageBytes)
        let fits = try Self.put(client, Pictures.png(bytes: most))
        #expect(fits.quadError == nil, "\(fits.body.text.prefix(300))")
        #expect(fits.body["bytes"]?.int == Int64(most))
        #expect(fits.body["url"]?.string?.hasPrefix("https://img.campus.example/images/") == true)
        let over = try Self.put(client, Pictures.png(bytes: most + 1))
        #expect(over.quadError?.code == .tooLarge)
        #expect(over.quadError?.message.contains("max_image_bytes=\(most)") == true, "\(over.body.text)")
        // The base URL is what every product's imageUrl starts with.
        let product = try client.call(.request("catalog.product.get", body: ["id": "p-0002"]), timeoutMs: 10_000, attempts: 2)
        #expect(product.body["imageUrl"]?.string?.hasPrefix("https://img.campus.example/images/") == true)
    }

    @Test func aLimitOneMessageCannotCarryStopsCatalogAtStartNamingBothLimits() throws {
        let dir = NSTemporaryDirectory() + "quad-images-start-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: TestStack.binDir + "/quad-catalog")
        p.arguments = ["--db", dir + "/catalog.db", "--backend", "ipc://\(dir)/backend", "--events-in", "ipc://\(dir)/in",
                       "--events-out", "ipc://\(dir)/out", "--internal", "ipc://\(dir)/internal", "--max-image-bytes", "1048576"]
        var env = ProcessInfo.processInfo.environment
        env["QUAD_HOME"] = dir
        p.environment = env
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 1)
        #expect(text.contains("--max-image-bytes 1048576") && text.contains("max_message_bytes"), "\(text)")
    }
}

extension ImageServingTests {
    @Test func twoCatalogWorkersServeImagesOnOnePort() throws {
        let (stack, client, port) = try Self.start("images-two")
        defer { stack.stopAll() }
        try stack.startWorker("quad-catalog", instance: "catalog/2", extra: ["--images-http", "127.0.0.1:\(port)"])
        try #require(try stack.waitForWorkers("catalog", count: 2, timeoutMs: 30_000))
        #expect(try Self.imagesPort(stack, "catalog/2") == port)
        let id = try #require(try Self.put(client, Pictures.jpeg).body["id"]?.string)
        for _ in 0..<8 {
            let got = try Self.http(port, "/images/\(id)")
            #expect(got.status == 200 && got.body == Pictures.jpeg && got.header("Content-Type") == "image/jpeg")
        }
        #expect(stack.process("catalog/1")?.isRunning == true && stack.process("catalog/2")?.isRunning == true)
    }
}
