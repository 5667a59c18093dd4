import Foundation
import QuadHTTP
import QuadImages
import QuadMessaging
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// The phone's image caches against the real image server (QuadImages'
/// ImageServer over HTTP on a port of its own, its SQLite store), with the
/// cache's clock moved by the test instead of waiting 30 days.
@Suite(.serialized) final class ImageCacheTests {
    let dir: String
    let images: SQLiteDatabase
    let server: ImageServer
    let port: UInt16
    let phone: SQLiteDatabase
    let context = ZMQContext()
    let reactor = Reactor(now: { Clock.monotonicMillis() })
    var wall: Int64 = 1_900_000_000_000

    init() throws {
        dir = NSTemporaryDirectory() + "quad-imagecache-" + MessageID.make()
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        images = try SQLiteDatabase(path: dir + "/catalog.db")
        try Migrations.apply(images, [ImageStore.migration(1)], scope: "catalog")
        server = ImageServer(store: images)
        port = try server.start("127.0.0.1:0")
        phone = try PhoneStore.open(dir + "/phone-001.db", keychain: try Keychain(path: dir + "/phone-001.keychain"),
                                    students: try Students(path: dir + "/students"))
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func cache(_ limits: ImageCacheLimits = ImageCacheLimits()) throws -> ImageCache {
        let c = try ImageCache(db: phone, folder: dir + "/phone-001.images", reactor: reactor, context: context, limits: limits)
        c.clock = { [unowned self] in self.wall }
        return c
    }

    /// Keeps a picture in the catalog's store; its URL on the server.
    func picture(_ k: Int, size: Int = 16) throws -> (url: String, bytes: [UInt8]) {
        let bytes = PNGPicture.stripes(size: size, (UInt8(k % 256), UInt8(k / 256), 7), (200, 10, UInt8(k % 251)), width: 1 + k % 7)
        let id = SHA256.hex(bytes)
        try ImageStore.keep(images, id: id, type: "image/png", bytes: bytes, uploader: "test", now: wall)
        return ("http://127.0.0.1:\(port)/images/\(id)", bytes)
    }

    /// Shows one picture and turns the loop until it is shown (30 s at most).
    func show(_ c: ImageCache, _ url: String, _ tier: ImageCache.Tier = .unitrade, online: Bool = true) throws -> ShownImage {
        var got: ShownImage?
        c.show(url, tier: tier, online: online) { got = $0 }
        let until = Clock.monotonicMillis() + 30_000
        while got == nil && Clock.monotonicMillis() < until {
            // The loop sleeps in its poll until a fetch's thread wakes it.
            try reactor.turn(timeoutCap: 1_000)
        }
        return try #require(got, "the picture was never shown")
    }

    func filesOnDisk() -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir + "/phone-001.images")) ?? []).count
    }

    @Test func aPictureIsFetchedOnceThenShownFromDiskWithoutTheNetwork() throws {
        let c = try cache()
        let (url, bytes) = try picture(1)
        let first = try show(c, url)
        #expect(first.origin == .network && first.bytes == bytes.count)
        let second = try show(c, url)
        #expect(second.origin == .disk && second.bytes == bytes.count)
        // No server at all now: an immutable picture in the cache never asks.
        server.stop()
        let third = try show(c, url)
        #expect(third.origin == .disk, "\(third)")
        #expect(c.stats.misses == 1 && c.stats.diskHits == 2 && c.stats.fetched == 1)
        #expect(c.stats.bytesFetched == bytes.count && c.stats.bytesFromCache == 2 * bytes.count)
        let file = try #require(try phone.queryOne("SELECT file, sha256 FROM image_cache WHERE url = $1", .text(url)))
        #expect(file.string("sha256") == SHA256.hex(bytes))
        #expect(FileManager.default.contents(atPath: dir + "/phone-001.images/" + file.string("file")) == Data(bytes))
    }

    @Test func theDiskCacheKeepsFiftyFilesAndEvictsTheLeastRecentlyUsed() throws {
        let c = try cache()
        var urls: [String] = []
        for k in 0..<51 { urls.append(try picture(100 + k).url) }
        for url in urls.prefix(50) {
            wall += 1_000
            #expect(try show(c, url).origin == .network)
        }
        #expect(c.files(.unitrade) == 50 && c.stats.evictions == 0)
        // The first is used again: the second is now the least recently used.
        wall += 1_000
        #expect(try show(c, urls[0]).origin == .disk)
        wall += 1_000
        #expect(try show(c, urls[50]).origin == .network)
        #expect(c.files(.unitrade) == 50 && c.stats.evictions == 1)
        #expect(filesOnDisk() == 50, "the evicted file is gone from the folder too")
        #expect(try show(c, urls[0], online: false).origin == .disk)
        let gone = try show(c, urls[1], online: false)
        #expect(gone.origin == .placeholder && gone.reason == "offline: image not in cache")
    }

    @Test func aPictureOlderThanThirtyDaysIsAskedForAgainWithItsETag() throws {
        let c = try cache()
        let (url, _) = try picture(7)
        #expect(try show(c, url).origin == .network)
        wall += 30 * 86_400_000 - 1
        let young = try show(c, url)
        #expect(young.origin == .disk && !young.revalidated && c.stats.revalidated == 0)
        wall += 2
        // Expired: offline the old copy still shows, saying so.
        let offline = try show(c, url, online: false)
        #expect(offline.origin == .disk && offline.reason?.contains("older than 30 days") == true)
        // Online: If-None-Match with the ETag, 304, kept for 30 more days.
        let again = try show(c, url)
        #expect(again.origin == .disk && again.revalidated, "\(again)")
        #expect(c.stats.revalidated == 1 && c.stats.fetched == 1)
        wall += 86_400_000
        #expect(try show(c, url).revalidated == false)
    }

    @Test func theMemoryCacheKeepsTwentyEntries() throws {
        let c = try cache()
        var urls: [String] = []
        for k in 0..<21 { urls.append(try picture(300 + k).url) }
        for url in urls { #expect(try show(c, url, .parkwise).origin == .network) }
        #expect(c.memoryEntries == 20 && c.stats.evictions == 1)
        #expect(!c.inMemory(urls[0]) && c.inMemory(urls[20]))
        #expect(try show(c, urls[20], .parkwise).origin == .memory)
        // Out of memory, still on disk: from disk, and into memory again.
        #expect(try show(c, urls[0], .parkwise).origin == .disk)
        #expect(try show(c, urls[0], .parkwise).origin == .memory)
        #expect(c.memoryEntries == 20 && !c.inMemory(urls[1]), "the least recently used went")
        #expect(c.stats.memoryHits == 2 && c.stats.diskHits == 1)
    }

    @Test func theMemoryCacheKeepsTwentyMegabytesWhicheverComesFirst() throws {
        var limits = ImageCacheLimits()
        limits.maxImageBytes = 2 << 20
        let c = try cache(limits)
        // Pictures of ~1.2 MB: 17 fit in 20 MiB, the 18th pushes the first out.
        var urls: [String] = []
        for k in 0..<18 { urls.append(try picture(400 + k, size: 640).url) }
        for url in urls { #expect(try show(c, url, .parkwise).origin == .network) }
        #expect(c.memoryEntries == 17, "the byte limit came before 20 entries")
        #expect(c.memoryBytes <= 20 << 20 && !c.inMemory(urls[0]))
        #expect(try show(c, urls[17], .parkwise).origin == .memory)
    }

    @Test func offlineAPictureNotInTheCacheShowsThePlaceholderWithTheReason() throws {
        let c = try cache()
        let (url, _) = try picture(9)
        let shown = try show(c, url, online: false)
        #expect(shown.origin == .placeholder && shown.reason == "offline: image not in cache")
        #expect(c.stats.misses == 1 && c.stats.placeholders == 1 && c.stats.fetched == 0)
        #expect(shown.json["source"]?.string == "placeholder" && shown.json["reason"]?.string == "offline: image not in cache")
        let missing = try show(c, "http://127.0.0.1:\(port)/images/" + String(repeating: "0", count: 64))
        #expect(missing.origin == .placeholder && missing.reason?.contains("404") == true)
    }

    @Test func bytesThatAreNotTheirSHA256OrTooLargeAreRefusedAndNotCached() throws {
        let c = try cache()
        // The server keeps bytes under another picture's id.
        let real = PNGPicture.stripes(size: 16, (1, 2, 3), (4, 5, 6))
        let other = SHA256.hex(PNGPicture.stripes(size: 16, (9, 9, 9), (8, 8, 8)))
        try ImageStore.keep(images, id: other, type: "image/png", bytes: real, uploader: "test", now: wall)
        let forged = try show(c, "http://127.0.0.1:\(port)/images/\(other)")
        #expect(forged.origin == .placeholder && forged.reason?.contains("SHA-256") == true, "\(forged)")
        #expect(c.files(.unitrade) == 0 && c.stats.refused == 1)

        var small = ImageCacheLimits()
        small.maxImageBytes = 100
        let strict = try cache(small)
        let (url, bytes) = try picture(11, size: 32)
        #expect(bytes.count > 100)
        let big = try show(strict, url)
        #expect(big.origin == .placeholder && big.reason?.contains("max_image_bytes (100)") == true, "\(big)")
        #expect(strict.files(.unitrade) == 0 && filesOnDisk() == 0)
    }

    @Test func aPhonesCountersReachQuadEdgesMetrics() throws {
        let rig = try PhoneRig()
        // A machine busy with other tests may keep the image server from
        // answering within the default 3 s: the counters, not the timeout,
        // are what this test is about.
        rig.phone.images.limits.timeoutMs = 30_000
        let metrics = EdgeMetrics()
        let (url, bytes) = try picture(31)
        func show() -> ShownImage? {
            var shown: ShownImage?
            rig.phone.images.show(url, tier: .parkwise, online: true) { shown = $0 }
            rig.run(forMs: 30_000) { shown != nil }
            return shown
        }
        // The first show fetches it. In CI runs of the whole suite beside
        // the e2e lanes it failed three times: twice at once (the test
        // process held more than 1024 descriptors and the image server, on
        // select(), reset every connection past that; see
        // ManyDescriptorsTests), once with no answer in 30 s while the whole
        // test process stalled (tests that take a second each reported 63 s).
        // A fetch that failed is a miss with nothing fetched: it is tried
        // again until a deadline, what failed is printed with the server's
        // open connections, and the misses expected count it.
        var failed = 0
        let until = Clock.monotonicMillis() + 120_000
        var first = show()
        while first?.origin != .network && Clock.monotonicMillis() < until {
            failed += 1
            print("aPhonesCountersReachQuadEdgesMetrics: fetch \(failed) failed: \(String(describing: first)); the server holds \(server.openConnections) connections")
            usleep(200_000)
            first = show()
        }
        try #require(first?.origin == .network, "the picture was never fetched: \(String(describing: first))")
        for _ in 0..<2 { #expect(show()?.origin == .memory) }
        var offline: ShownImage?
        rig.phone.images.show("http://127.0.0.1:\(port)/images/" + String(repeating: "a", count: 64), tier: .unitrade, online: false) { offline = $0 }
        rig.run(forMs: 30_000) { offline != nil }
        metrics.update([rig.phone])
        let text = metrics.registry.exposition()
        func value(_ series: String) -> Double? {
            text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) }
        }
        #expect(value("quad_edge_image_hits_total{tier=\"memory\"}") == 2, "\(text)")
        #expect(value("quad_edge_image_hits_total{tier=\"disk\"}") == 0)
        #expect(value("quad_edge_image_misses_total") == Double(2 + failed))
        #expect(value("quad_edge_image_fetched_bytes_total") == Double(bytes.count))
        #expect(value("quad_edge_image_cached_bytes_total") == Double(2 * bytes.count))
        #expect(value("quad_edge_image_evictions_total") == 0 && value("quad_edge_image_refused_total") == 0)
    }
}

/// A process with more than FD_SETSIZE (1024) descriptors open, as a
/// broker of a thousand phones or a test process of the whole suite is:
/// the HTTP servers (images, metrics) still answer. libmicrohttpd on
/// select() refuses every connection whose descriptor is past 1023, and a
/// client saw its request reset at once.
@Suite struct ManyDescriptorsTests {
    @Test func theImageServerAnswersInAProcessWithMoreThan1024DescriptorsOpen() throws {
        var limit = rlimit()
        #if canImport(Glibc)
        let nofile = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let nofile = RLIMIT_NOFILE
        #endif
        getrlimit(nofile, &limit)
        if limit.rlim_cur < 2_048 && limit.rlim_max >= 2_048 {
            limit.rlim_cur = 2_048
            setrlimit(nofile, &limit)
        }
        try #require(limit.rlim_cur >= 2_048, "this test needs 2048 descriptors (RLIMIT_NOFILE is \(limit.rlim_cur))")
        var held: [Int32] = []
        defer { held.forEach { close($0) } }
        while (held.last ?? 0) < 1_100 {
            let fd = open("/dev/null", O_RDONLY)
            try #require(fd >= 0, "open /dev/null: errno \(errno)")
            held.append(fd)
        }
        let dir = NSTemporaryDirectory() + "quad-manyfds-" + MessageID.make()
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let images = try SQLiteDatabase(path: dir + "/catalog.db")
        try Migrations.apply(images, [ImageStore.migration(1)], scope: "catalog")
        let bytes = PNGPicture.stripes(size: 16, (1, 2, 3), (200, 10, 7), width: 2)
        let id = SHA256.hex(bytes)
        try ImageStore.keep(images, id: id, type: "image/png", bytes: bytes, uploader: "test", now: 1_900_000_000_000)
        // The images' server (a shared port, SO_REUSEPORT) and a plain one, as the metrics endpoint is.
        let server = ImageServer(store: images)
        let port = try server.start("127.0.0.1:0")
        defer { server.stop() }
        let plain = HTTPServer(limits: HTTPServer.Limits(connections: 8, connectionsPerAddress: 8, timeoutSeconds: 10)) { _ in .text(200, "served\n") }
        let plainPort = try #require(plain.start(host: "127.0.0.1", port: 0))
        defer { plain.stop() }
        for (url, want) in [("http://127.0.0.1:\(port)/images/\(id)", bytes), ("http://127.0.0.1:\(plainPort)/", Array("served\n".utf8))] {
            let got = ImageHTTP.get(url, etag: nil, maxBytes: 1 << 20, timeoutMs: 10_000)
            guard case .ok(let body, _) = got else {
                Issue.record("\(url): \(got)")
                continue
            }
            #expect(body == want)
        }
    }
}
