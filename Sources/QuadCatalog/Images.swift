import Foundation
import QuadContract
import QuadImages
import QuadRuntime
import QuadStore
import QuadWire

/// Pictures, kept by content: an image's id is the SHA-256 of its bytes,
/// so the same upload is stored once and a URL never changes what it
/// shows (which is what lets phones cache it for good). Uploaded through
/// the broker (catalog.images.put), served over HTTP (``ImageServer``).
extension Catalog {
    /// Version 50, away from the products' 1 to 4 and whatever the
    /// listings add next, so two branches never claim the same number.
    static let imageMigrations: [Migration] = [ImageStore.migration(50)]

    /// The image options of the catalog, added to ``options``.
    static let imageOptions: [(String, String, String?)] = [
        ("max-image-bytes", "largest image catalog.images.put accepts, decoded (max_image_bytes); its base64 must fit --max-message-bytes",
         String(Contract.Catalog.defaultMaxImageBytes)),
        ("images-http", "HOST:PORT where GET /images/<sha256> serves the images, or off [QUAD_CATALOG_IMAGES]", nil),
        ("images-base-url", "what products' imageUrl and catalog.images.put's url start with (default: http://HOST:PORT of --images-http) [QUAD_CATALOG_IMAGES_BASE_URL]", nil),
        ("images-http-max-connections", "open HTTP connections of the image server in all (images_http_max_connections)", "64"),
        ("images-http-max-connections-per-address", "open HTTP connections from one address (images_http_max_connections_per_address)", "64"),
        ("images-http-timeout-seconds", "seconds an idle image connection stays open (images_http_timeout_seconds)", "10"),
    ]

    /// Where clients fetch images: `<base>/images/<id>`. Set once by
    /// ``install`` before any handler runs, then only read on the loop.
    nonisolated(unsafe) static var imagesBaseURL = ""
    /// The process's image server, kept for as long as the process runs.
    nonisolated(unsafe) static var imageServer: ImageServer?

    /// A stored `image_url`: kept as `/images/<id>` for images catalog
    /// serves, so a new base URL (another port, a proxy) applies to every
    /// product without rewriting a row; other URLs go out as they are.
    static func imageURL(_ stored: String) -> String {
        ImageStore.url(stored, base: imagesBaseURL)
    }

    static func imagePath(_ id: String) -> String { ImageStore.path(id) }

    /// Checks and keeps an image; answers it as kept.
    static func putImage(_ db: Database, _ body: Contract.Catalog.Images.PutRequest, uploader: String, maxBytes: Int64,
                         now: Int64 = Int64(Clock.nowMillis())) throws -> Contract.Catalog.Images.Image {
        let kept = try ImageStore.put(db, data: body.data, claimed: body.contentType, uploader: uploader, maxBytes: maxBytes, now: now)
        return .init(id: kept.id, url: imageURL(imagePath(kept.id)), contentType: kept.contentType, bytes: kept.size)
    }

    /// The picture of each collection of the demo catalog: stripes in two
    /// colours of its own, 64×64, the same bytes in every store.
    static let collectionPictures: [String: [UInt8]] = {
        let palette: [(UInt8, UInt8, UInt8)] = [
            (0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e), (0x2c, 0xa0, 0x2c), (0xd6, 0x27, 0x28), (0x94, 0x67, 0xbd), (0x8c, 0x56, 0x4b),
            (0xe3, 0x77, 0xc2), (0x7f, 0x7f, 0x7f), (0xbc, 0xbd, 0x22), (0x17, 0xbe, 0xcf), (0x39, 0x3b, 0x79), (0x63, 0x79, 0x39),
            (0x8c, 0x6d, 0x31), (0x84, 0x3c, 0x39), (0x7b, 0x41, 0x73),
        ]
        var names: [String] = []
        for t in templates where !names.contains(t.collection) { names.append(t.collection) }
        var out: [String: [UInt8]] = [:]
        for (n, name) in names.enumerated() {
            out[name] = PNGPicture.stripes(size: 64, palette[n % palette.count], (0xf4, 0xf1, 0xea), width: 4 + 2 * (n % 5))
        }
        return out
    }()

    /// Their ids, hashed once (the seed asks for one per product).
    static let collectionPictureIDs: [String: String] = collectionPictures.mapValues { SHA256.hex($0) }

    /// The stored image_url of a seeded product of `collection`.
    static func seededImagePath(_ collection: String) -> String {
        collectionPictureIDs[collection].map(imagePath) ?? ""
    }

    /// Keeps the collections' pictures (at every start: a store seeded
    /// before there were pictures gets them too, and it is a no-op after).
    static func seedImages(_ db: Database) throws {
        for (collection, bytes) in collectionPictures.sorted(by: { $0.key < $1.key }) {
            try ImageStore.keep(db, id: collectionPictureIDs[collection]!, type: "image/png", bytes: bytes, uploader: "seed", now: 0)
        }
    }

    /// Reads the image settings, registers catalog.images.put and starts
    /// the HTTP server when asked. Throws (the worker does not start) on a
    /// bad setting, naming it.
    static func installImages(on worker: Worker, db: Database, options: [String: String]) throws {
        let env = ProcessInfo.processInfo.environment
        func integer(_ name: String, _ range: ClosedRange<Int64>) throws -> Int64 {
            let text = options[name] ?? ""
            guard let v = Int64(text), range.contains(v) else {
                throw QuadError.badRequest("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
            }
            return v
        }
        let maxBytes = try integer("max-image-bytes", 1...(256 << 20))
        // The whole upload travels in one message: refuse at start a limit
        // the broker and this worker could never carry.
        try ImageStore.check(maxImageBytes: maxBytes, maxMessageBytes: Int64(options["max-message-bytes"] ?? ""))
        let address = options["images-http"] ?? env["QUAD_CATALOG_IMAGES"].flatMap { $0.isEmpty ? nil : $0 } ?? "off"
        var limits = ImageServer.Limits()
        limits.connections = UInt32(try integer("images-http-max-connections", 1...10_000))
        limits.connectionsPerAddress = UInt32(try integer("images-http-max-connections-per-address", 1...10_000))
        limits.timeoutSeconds = UInt32(try integer("images-http-timeout-seconds", 1...3600))
        var base = options["images-base-url"] ?? env["QUAD_CATALOG_IMAGES_BASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        if address != "off" {
            _ = try ImageServer.parse(address)
        }
        registerImages(worker.handlers, db: db, maxBytes: maxBytes)
        guard address != "off" else {
            imagesBaseURL = base.map(trimmed) ?? ""
            Log.info(worker.handlers.instance, "images not served over HTTP (--images-http off); imageUrl starts with '\(imagesBaseURL)/images/'")
            return
        }
        // The server reads with a connection of its own: the worker's
        // belongs to the loop's thread.
        guard let location = options["db"] else { throw QuadError.internal("no --db to open for the image server") }
        let reader = try openDatabase(location)
        let server = ImageServer(store: reader, limits: limits)
        let port = try server.start(address)
        let host = String(address.split(separator: ":")[0])
        if base == nil { base = "http://\(host):\(port)" }
        imagesBaseURL = trimmed(base!)
        imageServer = server
        Log.info(worker.handlers.instance, "images at http://\(host):\(port)/images/<sha256>, imageUrl \(imagesBaseURL)/images/<sha256>")
    }

    static func trimmed(_ url: String) -> String { url.hasSuffix("/") ? String(url.dropLast()) : url }

    /// catalog.images.put, on its own so tests drive it without a broker.
    public static func registerImages(_ h: Handlers, db: Database, maxBytes: Int64 = Contract.Catalog.defaultMaxImageBytes) {
        h.mutation(Contract.Catalog.imagesPut) { req, body in
            try putImage(db, body, uploader: try req.requireUser(), maxBytes: maxBytes)
        }
    }
}
