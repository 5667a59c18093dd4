import Foundation
import QuadStore
import QuadWire

/// Images kept by content in a service's own store: the id is the SHA-256
/// of the bytes, so an upload is kept once and a URL never changes what it
/// shows. Every service that has pictures (catalog, reservations) keeps
/// them in a table `images` of this shape and serves it with ``ImageServer``.
public enum ImageStore {
    /// The table, as the service's migration `version`.
    public static func migration(_ version: Int) -> Migration {
        func table(_ blob: String) -> String {
            """
            CREATE TABLE images (
                sha256 TEXT PRIMARY KEY,
                content_type TEXT NOT NULL,
                bytes \(blob) NOT NULL,
                size BIGINT NOT NULL,
                created_ms BIGINT NOT NULL,
                uploader TEXT NOT NULL
            );
            """
        }
        return Migration(version, sqlite: table("BLOB"), postgres: table("BYTEA"))
    }

    /// What an upload was: its id, type and size.
    public struct Kept: Sendable, Equatable {
        public let id: String
        public let contentType: String
        public let size: Int64
    }

    /// Checks an upload (`data` base64, `claimed` the type the client said)
    /// and keeps it. The base64 length is checked before decoding, so an
    /// oversize upload costs no allocation. Errors name `max_image_bytes`.
    public static func put(_ db: Database, data: String, claimed: String?, uploader: String, maxBytes: Int64,
                           now: Int64 = Int64(Clock.nowMillis())) throws -> Kept {
        let encodedMax = (maxBytes + 2) / 3 * 4
        let limit: JSON = ["limit": "max_image_bytes", "max": .int(maxBytes)]
        guard Int64(data.utf8.count) <= encodedMax else {
            throw QuadError.tooLarge("body.data is over the limit max_image_bytes=\(maxBytes) (\(encodedMax) characters of base64)", details: limit)
        }
        guard let decoded = Data(base64Encoded: data) else {
            throw QuadError.badRequest("body.data must be base64 (RFC 4648, with padding): it is not")
        }
        let bytes = [UInt8](decoded)
        guard Int64(bytes.count) <= maxBytes else {
            throw QuadError.tooLarge("body.data is \(bytes.count) bytes, over the limit max_image_bytes=\(maxBytes)", details: limit)
        }
        guard let type = ImageContent.type(of: bytes) else {
            throw QuadError.badRequest("body.data is not a JPEG, PNG or WebP image (checked by its content: signature and structure)")
        }
        if let claimed, claimed != type {
            throw QuadError.badRequest("body.content_type is '\(claimed)' but the bytes are \(type)")
        }
        let id = SHA256.hex(bytes)
        try keep(db, id: id, type: type, bytes: bytes, uploader: uploader, now: now)
        return Kept(id: id, contentType: type, size: Int64(bytes.count))
    }

    /// Keeps the bytes under their id once; a second copy changes nothing.
    public static func keep(_ db: Database, id: String, type: String, bytes: [UInt8], uploader: String, now: Int64) throws {
        try db.execute("""
            INSERT INTO images (sha256, content_type, bytes, size, created_ms, uploader) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (sha256) DO NOTHING
            """, .text(id), .text(type), .blob(bytes), .int(Int64(bytes.count)), .int(now), .text(uploader))
    }

    /// `/images/<id>`: what a row keeps as its picture, so a new base URL
    /// (another port, a proxy) applies without rewriting rows.
    public static func path(_ id: String) -> String { "/images/\(id)" }

    /// A kept path under `base`; other URLs go out as they are.
    public static func url(_ stored: String, base: String) -> String {
        stored.hasPrefix("/images/") ? base + stored : stored
    }

    /// The base URL clients use: `given` without a trailing slash, else
    /// `http://HOST:PORT` of the server.
    public static func baseURL(given: String?, host: String, port: UInt16) -> String {
        let b = given ?? "http://\(host):\(port)"
        return b.hasSuffix("/") ? String(b.dropLast()) : b
    }

    /// The largest image whose base64 and an envelope fit a message of
    /// `maxMessageBytes`; a service refuses to start with a larger limit.
    public static func check(maxImageBytes: Int64, maxMessageBytes: Int64?) throws {
        guard let message = maxMessageBytes, (maxImageBytes + 2) / 3 * 4 + 4096 > message else { return }
        let most = (message - 4096) / 4 * 3
        throw QuadError.badRequest("--max-image-bytes \(maxImageBytes) is \((maxImageBytes + 2) / 3 * 4) bytes of base64, over what --max-message-bytes \(message) (max_message_bytes) carries with its envelope; at most \(most), or raise max_message_bytes on the brokers and this worker")
    }
}
