import QuadWire

/// Pictures of the marketplace (issue 16, point 4): uploaded once with
/// catalog.images.put, kept by their SHA-256, served over HTTP at
/// `/images/<sha256>` by the catalog (not over the broker).
extension Contract.Catalog {
    /// The largest image by default (`max_image_bytes`): 720 KiB, so its
    /// base64 (960 KiB) and the envelope around it fit in one message of
    /// the broker's `max_message_bytes` (1 MiB). 1 MiB of image would be
    /// 1.33 MiB of base64, which the broker refuses.
    public static let defaultMaxImageBytes: Int64 = 720 * 1024
    /// The image types catalog keeps, each recognised by its bytes.
    public static let imageTypes = ["image/jpeg", "image/png", "image/webp"]

    public enum Images {
        public struct PutRequest: Body {
            public var data = ""
            public var contentType: String?
            public init() {}
            public init(data: String, contentType: String? = nil) { (self.data, self.contentType) = (data, contentType) }
            public static let fields: [Field<Self>] = [
                .field(\.data, "data", .string(min: 1)
                    .described("The image's bytes in base64 (RFC 4648, with padding). At most max_image_bytes once decoded (720 KiB by default; too_large, 413, naming it); the whole message stays under the broker's max_message_bytes (1 MiB).")
                    .limit("max_image_bytes")),
                .field(\.contentType, "content_type", .choice(imageTypes)
                    .described("What the client thinks it is; the bytes decide, and a type that disagrees with them is bad_request (400).").optional),
            ]
        }
        public struct Image: Body, Equatable {
            public var id = ""
            public var url = ""
            public var contentType = ""
            public var bytes: Int64 = 0
            public init() {}
            public init(id: String, url: String, contentType: String, bytes: Int64) {
                (self.id, self.url, self.contentType, self.bytes) = (id, url, contentType, bytes)
            }
            public static let fields: [Field<Self>] = [
                .field(\.id, "id", .string(pattern: "^[0-9a-f]{64}$").described("The SHA-256 of the bytes, lowercase hex: the same bytes always get the same id.")),
                .field(\.url, "url", .string(min: 1).described("Where clients GET it: <images_base_url>/images/<id>, immutable (Cache-Control: public, max-age=31536000, immutable; ETag \"<id>\").")),
                .field(\.contentType, "content_type", .choice(imageTypes)),
                .field(\.bytes, "bytes", .int(min: 1).described("Its size in bytes.")),
            ]
        }
    }

    public static let imagesPut = TypedOperation<Images.PutRequest, Images.Image>(
        "catalog.images.put", .mutation, auth: .user,
        request: Images.PutRequest.shape
            .described("A signed-in user uploads a JPEG, PNG or WebP image, recognised by its content (signature and structure), not by its name or content_type. Idempotent: the same bytes answer the same id and are kept once. bad_request (400) for data that is not base64 or not a JPEG, PNG or WebP image; too_large (413) over max_image_bytes."),
        reply: Images.Image.shape
            .described("The image as kept: its id, the URL it is served at, its type and size."))

    static let imageOperations: [Operation] = [imagesPut.operation]
}
