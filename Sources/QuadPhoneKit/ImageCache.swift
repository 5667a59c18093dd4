import Foundation
import QuadImages
import QuadMessaging
import QuadStore
import QuadWire

/// The image caches' limits, named as settings (issue 16, the seeds'
/// caches): UniTrade's disk cache of 50 files for 30 days, ParkWise's
/// memory cache of 20 entries or 20 MB in front of a disk cache.
public struct ImageCacheLimits: Sendable, Equatable {
    /// Files each disk cache keeps (`image_cache_files`), least recently used evicted first.
    public var files = 50
    /// Days a file stays in a disk cache (`image_cache_days`) before it is fetched again.
    public var days: Int64 = 30
    /// Entries ParkWise's memory cache keeps (`image_memory_entries`).
    public var memoryEntries = 20
    /// Bytes ParkWise's memory cache keeps (`image_memory_bytes`), whichever limit comes first.
    public var memoryBytes = 20 << 20
    /// The largest image accepted from the network (`max_image_bytes`,
    /// catalog's upload limit): a bigger one is refused, not cached.
    public var maxImageBytes = 1 << 20
    /// How long a fetch waits for the image server (`image_timeout_ms`).
    public var timeoutMs: Int64 = 3_000
    public init() {}
}

/// Where a shown image came from.
enum ImageOrigin: String {
    case network, disk, memory, placeholder
}

/// What a view shows for one image.
package struct ShownImage {
    var url: String
    var origin: ImageOrigin
    var bytes: Int
    /// Why the placeholder is shown (origin placeholder only).
    var reason: String?
    /// An expired disk copy that the server confirmed (304) without sending it again.
    var revalidated = false

    package var json: JSON {
        var f: [String: JSON] = ["url": .string(url), "source": .string(origin.rawValue), "bytes": .int(Int64(bytes))]
        if let reason { f["reason"] = .string(reason) }
        if revalidated { f["revalidated"] = true }
        return .object(f)
    }
}

/// A phone's image counters, for the campus-day report and /metrics.
package struct ImageStats {
    package var memoryHits = 0
    package var diskHits = 0
    package var misses = 0
    var fetched = 0
    package var bytesFetched = 0
    package var bytesFromCache = 0
    package var evictions = 0
    package var refused = 0
    var placeholders = 0
    var revalidated = 0

    package init() {}

    package mutating func add(_ o: ImageStats) {
        memoryHits += o.memoryHits; diskHits += o.diskHits; misses += o.misses; fetched += o.fetched
        bytesFetched += o.bytesFetched; bytesFromCache += o.bytesFromCache; evictions += o.evictions
        refused += o.refused; placeholders += o.placeholders; revalidated += o.revalidated
    }

    package var json: JSON {
        [
            "hits": ["memory": .int(Int64(memoryHits)), "disk": .int(Int64(diskHits))], "misses": .int(Int64(misses)),
            "fetched": .int(Int64(fetched)), "bytes_fetched": .int(Int64(bytesFetched)), "bytes_from_cache": .int(Int64(bytesFromCache)),
            "evictions": .int(Int64(evictions)), "refused": .int(Int64(refused)), "placeholders": .int(Int64(placeholders)),
            "revalidated": .int(Int64(revalidated)),
        ]
    }
}

/// A phone's pictures: two disk caches in its folder (files under
/// `<phone>.images/`, their index in the phone's SQLite, so the cache
/// survives the process like the rest of the phone), UniTrade's for
/// product pictures and ParkWise's for lot and building photos, with
/// ParkWise's memory cache in front of its disk cache. An image whose URL
/// ends in its SHA-256 is immutable: a copy in a cache is shown without
/// asking the network, and bytes are kept only when their SHA-256 is the
/// one the URL names. The fetch runs on a thread of its own (the edge's
/// loop never waits on a socket), which also checks the bytes (SHA-256,
/// whole image) and writes the file (``ImageCache/check(_:url:tier:folder:)``):
/// a thousand phones' pictures, hashed and written on the loop, took a
/// tenth of it in the 1,000-phone day. The answer is taken on the loop,
/// which writes the index row.
package final class ImageCache {
    package enum Tier: String { case unitrade, parkwise }

    /// The phone's file; a new connection after the phone opened its file again (StorageFaults.swift).
    package var db: SQLiteDatabase
    let folder: String
    var limits: ImageCacheLimits
    /// Wall-clock milliseconds: tests move it to expire files without waiting 30 days.
    var clock: () -> Int64 = { Int64(Clock.nowMillis()) }
    package var stats = ImageStats()
    /// Called with each eviction and each fetch (quad-edge's /metrics).
    var onCount: (String, Int) -> Void = { _, _ in }

    /// ParkWise's memory tier: url → bytes, most recently used last.
    private var memory: [String: [UInt8]] = [:]
    private var memoryOrder: [String] = []
    private(set) var memoryBytes = 0

    private let fetches: ImageFetches

    /// Its fetches wake `reactor`'s loop through two sockets of `context`,
    /// shared by every phone on that loop.
    package init(db: SQLiteDatabase, folder: String, reactor: Reactor, context: ZMQContext, limits: ImageCacheLimits) throws {
        self.db = db
        self.folder = folder
        self.fetches = try ImageFetches.of(reactor, context: context)
        self.limits = limits
    }

    /// The SHA-256 a URL names (its last path segment, 64 lowercase hex digits), if any.
    package static func contentAddress(_ url: String) -> String? {
        let last = url.split(separator: "?").first.map { $0.split(separator: "/").last.map(String.init) ?? "" } ?? ""
        guard last.utf8.count == 64, last.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else { return nil }
        return last
    }

    /// Files in a disk tier.
    func files(_ tier: Tier) -> Int { (try? db.count("SELECT COUNT(*) AS n FROM image_cache WHERE tier = $1", .text(tier.rawValue))) ?? 0 }
    var memoryEntries: Int { memory.count }
    func inMemory(_ url: String) -> Bool { memory[url] != nil }

    /// Shows the image at `url` through `tier`'s caches; `online` says
    /// whether the network may be asked. `done` runs on the loop.
    package func show(_ url: String, tier: Tier, online: Bool, _ done: @escaping (ShownImage) -> Void) {
        guard !url.isEmpty else { done(placeholder(url, "no picture")); return }
        if tier == .parkwise, let bytes = memory[url] {
            touchMemory(url)
            stats.memoryHits += 1
            stats.bytesFromCache += bytes.count
            done(ShownImage(url: url, origin: .memory, bytes: bytes.count))
            return
        }
        let now = clock()
        var expired: Row?
        if let row = try? db.queryOne("SELECT * FROM image_cache WHERE tier = $1 AND url = $2", .text(tier.rawValue), .text(url)) {
            let path = folder + "/" + row.string("file")
            if let data = FileManager.default.contents(atPath: path) {
                if now - row.int("stored_ms") < limits.days * 86_400_000 {
                    _ = try? db.execute("UPDATE image_cache SET used_ms = $3 WHERE tier = $1 AND url = $2", .text(tier.rawValue), .text(url), .int(now))
                    stats.diskHits += 1
                    stats.bytesFromCache += data.count
                    if tier == .parkwise { putMemory(url, [UInt8](data)) }
                    done(ShownImage(url: url, origin: .disk, bytes: data.count))
                    return
                }
                expired = row
            } else {
                // The file went (a cleaned folder): the index forgets it.
                forget(tier, url)
            }
        }
        stats.misses += 1
        guard online else {
            if let expired {
                // Offline, an expired copy is better than nothing.
                let path = folder + "/" + expired.string("file")
                let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                stats.bytesFromCache += size
                done(ShownImage(url: url, origin: .disk, bytes: size, reason: "offline: showing a copy older than \(limits.days) days"))
                return
            }
            done(placeholder(url, "offline: image not in cache"))
            return
        }
        fetch(url, tier: tier, etag: expired?.optionalString("etag")) { [weak self] got in
            guard let self else { return }
            self.settle(url, tier: tier, expired: expired, got, done)
        }
    }

    private func settle(_ url: String, tier: Tier, expired: Row?, _ checked: CheckedImage, _ done: @escaping (ShownImage) -> Void) {
        let now = clock()
        switch checked.got {
        case .notModified:
            guard let expired, let data = FileManager.default.contents(atPath: folder + "/" + expired.string("file")) else {
                done(placeholder(url, "the server answered 304 for an image this phone does not have"))
                return
            }
            _ = try? db.execute("UPDATE image_cache SET stored_ms = $3, used_ms = $3 WHERE tier = $1 AND url = $2",
                                .text(tier.rawValue), .text(url), .int(now))
            stats.revalidated += 1
            stats.bytesFromCache += data.count
            if tier == .parkwise { putMemory(url, [UInt8](data)) }
            done(ShownImage(url: url, origin: .disk, bytes: data.count, revalidated: true))
        case .failed(let why):
            done(placeholder(url, why))
        case .tooLarge(let size):
            stats.refused += 1
            done(placeholder(url, "refused: the image is \(size.map { "\($0) bytes" } ?? "larger than that"), more than max_image_bytes (\(limits.maxImageBytes))"))
        case .ok(let bytes, let etag):
            stats.fetched += 1
            stats.bytesFetched += bytes.count
            onCount("fetched", bytes.count)
            if let refusal = checked.refusal {
                stats.refused += 1
                done(placeholder(url, refusal))
                return
            }
            store(url, tier: tier, sha: checked.sha, etag: etag, bytes: bytes, now: now)
            if tier == .parkwise { putMemory(url, bytes) }
            done(ShownImage(url: url, origin: .network, bytes: bytes.count))
        }
    }

    private func placeholder(_ url: String, _ reason: String) -> ShownImage {
        stats.placeholders += 1
        return ShownImage(url: url, origin: .placeholder, bytes: 0, reason: reason)
    }

    /// The file's name in the folder: the tier and the bytes' SHA-256.
    static func fileName(_ tier: Tier, sha: String) -> String { "\(tier.rawValue)-\(sha)" }

    /// Checks fetched bytes off the loop: their SHA-256 against the one the
    /// URL names, a whole JPEG, PNG or WebP; writes the file of bytes that
    /// pass. Runs on a fetching thread: touches nothing of the loop's.
    static func check(_ got: FetchedImage, url: String, tier: Tier, folder: String) -> CheckedImage {
        guard case .ok(let bytes, _) = got else { return CheckedImage(got: got) }
        let sha = SHA256.hex(bytes)
        if let named = contentAddress(url), named != sha {
            return CheckedImage(got: got, sha: sha, refusal: "refused: the bytes' SHA-256 is \(sha.prefix(12))…, not the \(named.prefix(12))… the URL names; not cached")
        }
        guard ImageContent.type(of: bytes) != nil else {
            return CheckedImage(got: got, sha: sha, refusal: "refused: the bytes are not a whole JPEG, PNG or WebP image; not cached")
        }
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: folder + "/" + fileName(tier, sha: sha), contents: Data(bytes))
        return CheckedImage(got: got, sha: sha)
    }

    /// Writes the row of a file the fetching thread wrote (the file again
    /// if it is missing: an eviction on the loop may have removed the same
    /// bytes' file meanwhile); evicts the least recently used files over the limit.
    private func store(_ url: String, tier: Tier, sha: String, etag: String?, bytes: [UInt8], now: Int64) {
        let file = ImageCache.fileName(tier, sha: sha)
        if access(folder + "/" + file, F_OK) != 0 {
            try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: folder + "/" + file, contents: Data(bytes)) else { return }
        }
        _ = try? db.execute("""
            INSERT INTO image_cache (tier, url, file, sha256, etag, bytes, stored_ms, used_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
            ON CONFLICT (tier, url) DO UPDATE SET file = excluded.file, sha256 = excluded.sha256, etag = excluded.etag,
                bytes = excluded.bytes, stored_ms = excluded.stored_ms, used_ms = excluded.used_ms
            """, .text(tier.rawValue), .text(url), .text(file), .text(sha), .of(etag), .int(Int64(bytes.count)), .int(now))
        let over = files(tier) - limits.files
        guard over > 0 else { return }
        let victims = (try? db.query("SELECT url FROM image_cache WHERE tier = $1 ORDER BY used_ms, url LIMIT $2",
                                     .text(tier.rawValue), .int(Int64(over)))) ?? []
        for v in victims {
            forget(tier, v.string("url"))
            stats.evictions += 1
            onCount("evicted", 1)
        }
    }

    /// Drops a disk entry and its file (unless another URL of the tier keeps the same file).
    private func forget(_ tier: Tier, _ url: String) {
        guard let row = try? db.queryOne("SELECT file FROM image_cache WHERE tier = $1 AND url = $2", .text(tier.rawValue), .text(url)) else { return }
        let file = row.string("file")
        _ = try? db.execute("DELETE FROM image_cache WHERE tier = $1 AND url = $2", .text(tier.rawValue), .text(url))
        if ((try? db.count("SELECT COUNT(*) AS n FROM image_cache WHERE file = $1", .text(file))) ?? 0) == 0 {
            try? FileManager.default.removeItem(atPath: folder + "/" + file)
        }
    }

    // MARK: Memory (ParkWise)

    private func touchMemory(_ url: String) {
        if let k = memoryOrder.firstIndex(of: url) { memoryOrder.remove(at: k) }
        memoryOrder.append(url)
    }

    /// Keeps `bytes` in memory, evicting the least recently used entries
    /// until both limits hold; an image bigger than the whole budget is not kept.
    private func putMemory(_ url: String, _ bytes: [UInt8]) {
        guard bytes.count <= limits.memoryBytes, limits.memoryEntries > 0 else { return }
        if let old = memory[url] { memoryBytes -= old.count }
        memory[url] = bytes
        memoryBytes += bytes.count
        touchMemory(url)
        while memory.count > limits.memoryEntries || memoryBytes > limits.memoryBytes, let victim = memoryOrder.first {
            memoryOrder.removeFirst()
            if let gone = memory.removeValue(forKey: victim) { memoryBytes -= gone.count }
            stats.evictions += 1
            onCount("evicted", 1)
        }
    }

    // MARK: Network

    /// Fetches on a thread of its own; the answer is handed back on the loop.
    private func fetch(_ url: String, tier: Tier, etag: String?, _ done: @escaping (CheckedImage) -> Void) {
        let folder = self.folder
        let (max, timeout) = (limits.maxImageBytes, limits.timeoutMs)
        fetches.start({
            ImageCache.check(ImageHTTP.get(url, etag: etag, maxBytes: max, timeoutMs: timeout), url: url, tier: tier, folder: folder)
        }, done)
    }

    /// The fetches of every phone in the process, at most
    /// `image_fetch_window` (8) at a time beside the loop: an image server
    /// takes 64 connections (images_http_max_connections), and 200 phones
    /// opening a page of 20 pictures each would be refused past that.
    static let queue: OperationQueue = {
        let q = OperationQueue()
        q.name = "quad-edge.images"
        q.maxConcurrentOperationCount = fetchWindow
        return q
    }()
    /// Set once before the first fetch (quad-edge's --image-fetch-window).
    package nonisolated(unsafe) static var fetchWindow = 8
}

/// The image fetches of every phone on one loop: one inbox the fetching
/// threads fill, and one ``Wakeup`` (two inproc sockets) whose doorbell the
/// thread that finished a fetch rings to wake the loop and hand its result
/// over. Nothing polls: the loop sleeps in its poll until a fetch ends.
/// Made and ended on the loop, with the last of its phones' caches.
final class ImageFetches {
    private struct Known { weak var fetches: ImageFetches? }
    nonisolated(unsafe) private static var byLoop: [ObjectIdentifier: Known] = [:]
    private static let lock = NSLock()

    /// The fetches of the loop `reactor`, on sockets of `context`.
    static func of(_ reactor: Reactor, context: ZMQContext) throws -> ImageFetches {
        lock.lock()
        defer { lock.unlock() }
        let key = ObjectIdentifier(reactor)
        if let known = byLoop[key]?.fetches, known.reactor === reactor { return known }
        byLoop = byLoop.filter { $0.value.fetches != nil }
        let made = try ImageFetches(reactor, context: context)
        byLoop[key] = Known(fetches: made)
        return made
    }

    private weak var reactor: Reactor?
    private let inbox = FetchInbox()
    private var wakeup: Wakeup!
    /// Touched on the loop only.
    private var waiting: [Int: (CheckedImage) -> Void] = [:]
    private var nextTicket = 0

    private init(_ reactor: Reactor, context: ZMQContext) throws {
        self.reactor = reactor
        wakeup = try Wakeup(context: context, reactor: reactor) { [unowned self] in
            for (ticket, got) in self.inbox.take() {
                self.waiting.removeValue(forKey: ticket)?(got)
            }
        }
    }

    /// Runs `work` on a fetching thread; `done` gets its result on the loop.
    func start(_ work: @escaping @Sendable () -> CheckedImage, _ done: @escaping (CheckedImage) -> Void) {
        let ticket = nextTicket
        nextTicket += 1
        waiting[ticket] = done
        let (inbox, doorbell) = (self.inbox, wakeup.doorbell)
        ImageCache.queue.addOperation {
            inbox.put(ticket, work())
            doorbell.ring()
        }
    }
}

/// Finished fetches, from the fetching threads to the loop.
final class FetchInbox: @unchecked Sendable {
    private let lock = NSLock()
    private var done: [(Int, CheckedImage)] = []
    /// Safe across threads: every access holds the lock.
    func put(_ ticket: Int, _ got: CheckedImage) { lock.lock(); done.append((ticket, got)); lock.unlock() }
    func take() -> [(Int, CheckedImage)] { lock.lock(); defer { lock.unlock() }; let d = done; done = []; return d }
}

/// A fetch and what its thread found of it: the bytes' SHA-256 and, for
/// bytes refused, why (``ImageCache/check(_:url:tier:folder:)``).
struct CheckedImage: Sendable {
    let got: FetchedImage
    var sha = ""
    var refusal: String?
}

/// What a fetch got.
enum FetchedImage: Sendable {
    case ok([UInt8], etag: String?)
    case notModified
    case tooLarge(Int?)
    case failed(String)
}

/// One HTTP/1.1 GET on a plain socket (Foundation's URLSession on Linux
/// needs libcurl's FoundationNetworking, which the edge does not link),
/// with `If-None-Match` when an expired copy has an ETag, a deadline, and
/// at most `maxBytes` of body read.
enum ImageHTTP {
    static func get(_ url: String, etag: String?, maxBytes: Int, timeoutMs: Int64) -> FetchedImage {
        guard url.hasPrefix("http://") else { return .failed("not an http:// URL: \(url.prefix(80))") }
        let rest = url.dropFirst("http://".count)
        let hostPort = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(hostPort.count).isEmpty ? "/" : String(rest.dropFirst(hostPort.count))
        let parts = hostPort.split(separator: ":", maxSplits: 1)
        let host = parts.first.map(String.init) ?? "127.0.0.1"
        let port = parts.count > 1 ? String(parts[1]) : "80"
        var hints = addrinfo()
        hints.ai_family = AF_INET
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var info: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, port, &hints, &info) == 0, let first = info else { return .failed("no answer from the image server: cannot resolve \(host)") }
        defer { freeaddrinfo(info) }
        let fd = socket(first.pointee.ai_family, first.pointee.ai_socktype, first.pointee.ai_protocol)
        guard fd >= 0 else { return .failed("no answer from the image server: no socket") }
        defer { close(fd) }
        var tv = timeval(tv_sec: Int(timeoutMs / 1000), tv_usec: Int((timeoutMs % 1000) * 1000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            return .failed("no answer from the image server at \(hostPort): \(String(cString: strerror(errno)))")
        }
        var head = "GET \(path) HTTP/1.1\r\nHost: \(hostPort)\r\nConnection: close\r\nAccept: image/png, image/jpeg, image/webp\r\n"
        if let etag { head += "If-None-Match: \(etag)\r\n" }
        head += "\r\n"
        let request = Array(head.utf8)
        let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == request.count else { return .failed("no answer from the image server: send failed (\(sent < 0 ? String(cString: strerror(errno)) : "\(sent) of \(request.count) bytes"))") }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65_536)
        var headEnd: Int?
        var length: Int?
        let deadline = Clock.monotonicMillis() + timeoutMs
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n < 0 {
                let code = errno
                // A signal to this thread is no failure: read on until the deadline.
                if code == EINTR && Clock.monotonicMillis() <= deadline { continue }
                if code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return .failed("no answer from the image server in \(timeoutMs) ms") }
                return .failed("the image server's connection failed: \(String(cString: strerror(code))) (errno \(code))")
            }
            if n == 0 { break }
            out += buf[0..<n]
            if headEnd == nil, let end = find(out, [13, 10, 13, 10]) {
                headEnd = end
                let text = String(decoding: out[..<end], as: UTF8.self)
                length = header(text, "content-length").flatMap { Int($0) }
                if let length, length > maxBytes { return .tooLarge(length) }
            }
            if let headEnd {
                let body = out.count - headEnd - 4
                if body > maxBytes { return .tooLarge(nil) }
                if let length, body >= length { break }
            }
            if Clock.monotonicMillis() > deadline { return .failed("no answer from the image server in \(timeoutMs) ms") }
        }
        guard let headEnd else { return .failed("the image server's answer has no head") }
        let text = String(decoding: out[..<headEnd], as: UTF8.self)
        let status = Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0
        var body = Array(out[(headEnd + 4)...])
        if let length, body.count > length { body = Array(body[..<length]) }
        switch status {
        case 200:
            if let length, body.count < length { return .failed("the image was cut short: \(body.count) of \(length) bytes") }
            return .ok(body, etag: header(text, "etag"))
        case 304: return .notModified
        case 404: return .failed("not found (404): no such image on the server")
        default: return .failed("the image server answered \(status)")
        }
    }

    static func find(_ hay: [UInt8], _ needle: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for k in 0...(hay.count - needle.count) where hay[k] == needle[0] && Array(hay[k..<(k + needle.count)]) == needle { return k }
        return nil
    }

    static func header(_ head: String, _ name: String) -> String? {
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            let p = line.split(separator: ":", maxSplits: 1)
            if p.count == 2, p[0].lowercased() == name { return p[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}
