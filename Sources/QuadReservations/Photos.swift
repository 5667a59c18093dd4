import Foundation
import QuadImages
import QuadRuntime
import QuadStore
import QuadWire

/// Photos of the lots and buildings, kept and served like catalog's
/// pictures (QuadImages): content-addressed in this service's own store,
/// generated here so the same campus gets the same ids everywhere, and
/// answered as `photo_url` in reservations.lots.
enum Photos {
    /// Version 50, as in catalog, away from the service's own numbers.
    static let migrations: [Migration] = [ImageStore.migration(50)]

    /// Set once by ``install`` before any handler runs, then only read.
    nonisolated(unsafe) static var baseURL = ""
    /// The server, kept for as long as the process runs.
    nonisolated(unsafe) static var server: ImageServer?

    /// One picture a lot (green stripes) and a building (brick stripes),
    /// keyed `lot:<id>` and `building:<id>`.
    static let pictures: [String: [UInt8]] = {
        var out: [String: [UInt8]] = [:]
        for (n, lot) in Campus.lots.enumerated() {
            out["lot:" + lot.id] = PNGPicture.stripes(size: 64, (0x2e, 0x7d, 0x32), (0xe8, 0xf5, 0xe9), width: 3 + n)
        }
        for (n, d) in Campus.destinations.enumerated() {
            out["building:" + d.id] = PNGPicture.stripes(size: 64, (0xa1, 0x3d, 0x2d), (0xf3, 0xe5, 0xd8), width: 3 + n)
        }
        return out
    }()
    static let ids: [String: String] = pictures.mapValues { SHA256.hex($0) }

    static func url(lot id: String) -> String { ImageStore.url(ImageStore.path(ids["lot:" + id] ?? ""), base: baseURL) }
    static func url(building id: String) -> String { ImageStore.url(ImageStore.path(ids["building:" + id] ?? ""), base: baseURL) }

    /// Keeps the photos (a no-op once kept).
    static func seed(_ db: Database) throws {
        try db.transaction {
            for (key, bytes) in pictures.sorted(by: { $0.key < $1.key }) {
                try ImageStore.keep(db, id: ids[key]!, type: "image/png", bytes: bytes, uploader: "seed", now: 0)
            }
        }
    }

    static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        try seed(db)
        let address = options["images-http"] ?? "off"
        let given = options["images-base-url"]
        guard address != "off" else {
            baseURL = ImageStore.baseURL(given: given ?? "", host: "", port: 0)
            return
        }
        let (host, _) = try ImageServer.parse(address, setting: "--images-http (QUAD_RESERVATIONS_IMAGES_HTTP)")
        guard let location = options["db"] else { throw QuadError.internal("no --db to open for the image server") }
        let s = ImageServer(store: try openDatabase(location))
        let port = try s.start(address)
        server = s
        baseURL = ImageStore.baseURL(given: given, host: host, port: port)
        Log.info(worker.handlers.instance, "images at http://\(host):\(port)/images/<sha256>, photo_url \(baseURL)/images/<sha256>")
    }
}
