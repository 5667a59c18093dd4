import Foundation
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadCatalog
@testable import QuadImages

/// Test images, built byte by byte so each test says what it sends.
enum Pictures {
    /// A small valid PNG (the encoder the seed uses).
    static let png = PNGPicture.stripes(size: 8, (10, 20, 30), (200, 100, 50), width: 2)

    /// A valid PNG of exactly `total` bytes: `png` with a private ancillary
    /// chunk before IEND that pads it out.
    static func png(bytes total: Int) -> [UInt8] {
        let base = png
        let iend = base.count - 12
        let pad = total - base.count - 12
        precondition(pad >= 0)
        let typed = Array("quAd".utf8) + [UInt8](repeating: 0x55, count: pad)
        let chunk = PNGPicture.be(UInt32(pad)) + typed + PNGPicture.be(CRC32.of(typed))
        return Array(base[..<iend]) + chunk + Array(base[iend...])
    }

    /// SOI, a quantisation table, a baseline frame header, a start of scan,
    /// some entropy-coded bytes and EOI: the structure, not a picture.
    static let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x04, 0x00, 0x01,
                                0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00,
                                0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00, 0x12, 0x34, 0xFF, 0xD9]

    /// RIFF, WEBP and one VP8L chunk of 6 bytes.
    static let webp: [UInt8] = Array("RIFF".utf8) + [18, 0, 0, 0] + Array("WEBP".utf8) + Array("VP8L".utf8) + [6, 0, 0, 0] + [0x2F, 0, 0, 0, 0, 0]

    static func base64(_ b: [UInt8]) -> JSON { .string(Data(b).base64EncodedString()) }
}

/// The SHA-256 that coreutils computes, so the id is checked against a
/// program that is not ours.
func sha256sum(_ bytes: [UInt8]) throws -> String {
    let file = NSTemporaryDirectory() + "quad-image-\(UInt32.random(in: 0...UInt32.max))"
    try Data(bytes).write(to: URL(fileURLWithPath: file))
    defer { try? FileManager.default.removeItem(atPath: file) }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
    p.arguments = [file]
    let out = Pipe()
    p.standardOutput = out
    try p.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return String(text.prefix(64))
}

@Suite("Catalog images")
struct ImageTests {
    func images(maxBytes: Int64 = Contract.Catalog.defaultMaxImageBytes) throws -> (Handlers, Database) {
        let (h, db) = try catalog()
        Catalog.registerImages(h, db: db, maxBytes: maxBytes)
        return (h, db)
    }

    @Test func sha256MatchesKnownDigests() throws {
        #expect(SHA256.hex([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let long = [UInt8](repeating: 0x61, count: 1000)
        #expect(SHA256.hex(long) == (try sha256sum(long)))
    }

    @Test func anUploadIsKeptOnceUnderItsSHA256() throws {
        let (h, db) = try images()
        let first = try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png), "content_type": "image/png"], user: "u-a")
        let id = try sha256sum(Pictures.png)
        #expect(first["id"]?.string == id)
        #expect(first["content_type"]?.string == "image/png")
        #expect(first["bytes"]?.int == Int64(Pictures.png.count))
        #expect(first["url"]?.string?.hasSuffix("/images/\(id)") == true)
        // Another user, another envelope, the same bytes: the same id, one row.
        let again = try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png)], user: "u-b")
        #expect(again["id"]?.string == id)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM images WHERE sha256 = $1", .text(id))?.int("n") == 1)
        #expect(try db.queryOne("SELECT uploader FROM images WHERE sha256 = $1", .text(id))?.string("uploader") == "u-a")
        for (bytes, type) in [(Pictures.jpeg, "image/jpeg"), (Pictures.webp, "image/webp")] {
            let r = try h.call("catalog.images.put", ["data": Pictures.base64(bytes)], user: "u-a")
            #expect(r["content_type"]?.string == type)
            #expect(r["id"]?.string == (try sha256sum(bytes)))
        }
    }

    @Test func onlySignedInUsersUpload() throws {
        let (h, _) = try images()
        #expect(throws: QuadError.unauthorized("")) { try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png)]) }
    }

    @Test func anImageOverMaxImageBytesIsTooLargeNamingTheLimit() throws {
        let (h, db) = try images(maxBytes: 1000)
        for size in [1001, 5000] {
            #expect { try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png(bytes: size))], user: "u") } throws: { error in
                let e = error as? QuadError
                return e?.code == .tooLarge && e?.status == 413 && e?.message.contains("max_image_bytes=1000") == true
            }
        }
        #expect(try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png(bytes: 1000))], user: "u")["bytes"]?.int == 1000)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM images WHERE uploader = 'u'")?.int("n") == 1)
    }

    static let notImages: [(String, [UInt8])] = {
        let png = Pictures.png
        var badCRC = png
        badCRC[30] ^= 0xFF  // inside IHDR
        var noIEND = Array(png.dropLast(12))
        noIEND += [0, 0, 0, 0]
        return [
            ("text", Array("this is not a picture, it only says it is one.png\n".utf8)),
            ("truncated PNG", Array(png.prefix(png.count / 2))),
            ("PNG signature alone", ImageContent.pngSignature),
            ("PNG with a bad CRC", badCRC),
            ("PNG without IEND", noIEND),
            ("PNG with bytes after IEND", png + [0]),
            ("truncated JPEG", Array(Pictures.jpeg.prefix(20))),
            ("JPEG without a frame", [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02, 0xFF, 0xD9]),
            ("WebP with a wrong RIFF size", Array(Pictures.webp.dropLast(2))),
            ("RIFF that is not WebP", Array("RIFF".utf8) + [4, 0, 0, 0] + Array("WAVE".utf8)),
            ("zero bytes", [0]),
            ("random bytes", (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 7) }),
        ]
    }()

    @Test(arguments: notImages)
    func bytesThatAreNotAnImageAreRefused(_ name: String, _ bytes: [UInt8]) throws {
        let (h, db) = try images()
        #expect { try h.call("catalog.images.put", ["data": Pictures.base64(bytes)], user: "u") } throws: { error in
            let e = error as? QuadError
            return e?.code == .badRequest && e?.message.contains("is not a JPEG, PNG or WebP image") == true
        }
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM images WHERE uploader = 'u'")?.int("n") == 0)
    }

    @Test func dataThatIsNotBase64OrATypeThatDisagreesIsABadRequest() throws {
        let (h, _) = try images()
        #expect { try h.call("catalog.images.put", ["data": "%%% not base64 %%%"], user: "u") } throws: {
            ($0 as? QuadError)?.message.contains("must be base64") == true
        }
        #expect { try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png), "content_type": "image/jpeg"], user: "u") } throws: {
            ($0 as? QuadError)?.message == "body.content_type is 'image/jpeg' but the bytes are image/png"
        }
        #expect { try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png), "content_type": "image/gif"], user: "u") } throws: {
            ($0 as? QuadError)?.code == .badRequest
        }
        #expect { try h.call("catalog.images.put", ["data": ""], user: "u") } throws: { ($0 as? QuadError)?.code == .badRequest }
    }

    @Test func theServerAnswersWithCachingHeaders304And404() throws {
        let (h, db) = try images()
        let id = try #require(try h.call("catalog.images.put", ["data": Pictures.base64(Pictures.png)], user: "u")["id"]?.string)
        let server = ImageServer(store: db)
        let ok = server.answer(method: "GET", path: "/images/\(id)", ifNoneMatch: nil)
        #expect(ok.status == 200)
        #expect(ok.body == Pictures.png)
        let headers = Dictionary(ok.headers, uniquingKeysWith: { a, _ in a })
        #expect(headers["ETag"] == "\"\(id)\"")
        #expect(headers["Cache-Control"] == "public, max-age=31536000, immutable")
        #expect(headers["Content-Type"] == "image/png")
        let again = server.answer(method: "GET", path: "/images/\(id)", ifNoneMatch: "\"\(id)\"")
        #expect(again.status == 304 && again.body.isEmpty)
        #expect(server.answer(method: "GET", path: "/images/\(id)", ifNoneMatch: "\"other\"").status == 200)
        #expect(server.answer(method: "GET", path: "/images/" + String(repeating: "0", count: 64), ifNoneMatch: nil).status == 404)
        for malformed in ["/images/", "/images/xyz", "/images/\(id.uppercased())", "/images/\(id)0", "/images/../catalog.db", "/", "/images"] {
            #expect(server.answer(method: "GET", path: malformed, ifNoneMatch: nil).status == 404, "\(malformed)")
        }
        #expect(server.answer(method: "POST", path: "/images/\(id)", ifNoneMatch: nil).status == 405)
        #expect(server.answer(method: "HEAD", path: "/images/\(id)", ifNoneMatch: nil).status == 200)
    }

    @Test func everySeededProductHasTheRealPictureOfItsCollection() throws {
        let (h, db) = try images()
        let page = try h.call("catalog.products.list", ["limit": 200])
        let products = page["products"]?.array ?? []
        #expect(products.count == 200)
        var byCollection: [String: String] = [:]
        for p in products {
            let url = try #require(p["imageUrl"]?.string)
            let id = String(try #require(url.split(separator: "/").last))
            let row = try #require(try db.queryOne("SELECT content_type, bytes FROM images WHERE sha256 = $1", .text(id)), "\(url)")
            guard case .blob(let bytes) = row["bytes"] else { Issue.record("no bytes"); continue }
            #expect(ImageContent.type(of: bytes) == "image/png")
            #expect(SHA256.hex(bytes) == id)
            let collection = try #require(p["collection"]?.string)
            if let seen = byCollection[collection] { #expect(seen == id) } else { byCollection[collection] = id }
        }
        // One picture a collection, each its own.
        #expect(Set(byCollection.values).count == byCollection.count)
        #expect(byCollection.count >= 10)
        // The same pixels in every store: the ids are fixed.
        #expect(SHA256.hex(try #require(Catalog.collectionPictures["Phones"])) == (try sha256sum(try #require(Catalog.collectionPictures["Phones"]))))
    }
}

extension ImageTests {
    @Test(.enabled(if: ProcessInfo.processInfo.environment["QUAD_TEST_PG"] != nil, "needs QUAD_TEST_PG (deploy/test starts a server)"))
    func imagesAreKeptAndServedTheSameOnPostgreSQL() throws {
        let (h, db) = try catalog(postgres: true)
        Catalog.registerImages(h, db: db)
        let png = Pictures.png(bytes: 70_000)
        let id = try #require(try h.call("catalog.images.put", ["data": Pictures.base64(png)], user: "u")["id"]?.string)
        #expect(id == (try sha256sum(png)))
        #expect(try h.call("catalog.images.put", ["data": Pictures.base64(png)], user: "v")["id"]?.string == id)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM images WHERE sha256 = $1", .text(id))?.int("n") == 1)
        let answer = ImageServer(store: db).answer(method: "GET", path: "/images/\(id)", ifNoneMatch: nil)
        #expect(answer.status == 200 && answer.body == png)
        // The seed's pictures are there too, byte for byte.
        let phones = try #require(Catalog.collectionPictureIDs["Phones"])
        #expect(ImageServer(store: db).answer(method: "GET", path: "/images/\(phones)", ifNoneMatch: nil).body == Catalog.collectionPictures["Phones"])
    }
}
