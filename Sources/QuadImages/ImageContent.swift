/// What an uploaded image is, decided by its bytes alone: a file named
/// `.png` that holds text, or a PNG cut short in transit, is refused
/// before it is stored and served to every phone. The checks are
/// structural, not a decoder: enough that the bytes are whole and of
/// the type they claim, cheap enough to run on the worker's loop.
public enum ImageContent {
    /// The MIME type of `bytes`, or nil when they are not a whole JPEG,
    /// PNG or WebP image.
    public static func type(of bytes: [UInt8]) -> String? {
        if isPNG(bytes) { return "image/png" }
        if isJPEG(bytes) { return "image/jpeg" }
        if isWebP(bytes) { return "image/webp" }
        return nil
    }

    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// The signature, an IHDR of 13 bytes with a non-zero size first, then
    /// chunks whose lengths and CRCs hold, up to an IEND that ends the file.
    static func isPNG(_ b: [UInt8]) -> Bool {
        guard b.count >= 8 + 25 + 12, Array(b[0..<8]) == pngSignature else { return false }
        var at = 8
        var first = true
        while at + 12 <= b.count {
            let length = Int(be32(b, at))
            guard length <= b.count - at - 12 else { return false }
            let type = Array(b[(at + 4)..<(at + 8)])
            let crc = be32(b, at + 8 + length)
            guard CRC32.of(b[(at + 4)..<(at + 8 + length)]) == crc else { return false }
            if first {
                guard type == Array("IHDR".utf8), length == 13, be32(b, at + 8) > 0, be32(b, at + 12) > 0 else { return false }
                first = false
            }
            at += 12 + length
            if type == Array("IEND".utf8) { return at == b.count }
        }
        return false
    }

    /// SOI, marker segments whose lengths hold up to a frame header (SOFn)
    /// and the start of scan, and EOI as the last two bytes.
    static func isJPEG(_ b: [UInt8]) -> Bool {
        guard b.count >= 4, b[0] == 0xFF, b[1] == 0xD8, b[b.count - 2] == 0xFF, b[b.count - 1] == 0xD9 else { return false }
        var at = 2
        var frame = false
        while at + 4 <= b.count {
            guard b[at] == 0xFF else { return false }
            let marker = b[at + 1]
            if marker == 0xFF { at += 1; continue }  // fill bytes
            let length = Int(b[at + 2]) << 8 | Int(b[at + 3])
            guard length >= 2, at + 2 + length <= b.count else { return false }
            if (0xC0...0xCF).contains(marker) && ![0xC4, 0xC8, 0xCC].contains(marker) { frame = true }
            if marker == 0xDA { return frame }  // start of scan: entropy-coded data up to EOI
            if marker == 0xD9 { return false }
            at += 2 + length
        }
        return false
    }

    /// RIFF with the size of the rest, WEBP, and a first chunk of VP8,
    /// VP8L or VP8X that fits.
    static func isWebP(_ b: [UInt8]) -> Bool {
        guard b.count >= 20, Array(b[0..<4]) == Array("RIFF".utf8), Array(b[8..<12]) == Array("WEBP".utf8) else { return false }
        let riff = Int(le32(b, 4))
        guard riff + 8 == b.count || riff + 9 == b.count && riff % 2 == 1 else { return false }
        let chunk = String(decoding: b[12..<16], as: UTF8.self)
        guard ["VP8 ", "VP8L", "VP8X"].contains(chunk) else { return false }
        let length = Int(le32(b, 16))
        return length >= 1 && 20 + length <= b.count
    }

    static func be32(_ b: [UInt8], _ at: Int) -> UInt32 {
        UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
    }

    static func le32(_ b: [UInt8], _ at: Int) -> UInt32 {
        UInt32(b[at]) | UInt32(b[at + 1]) << 8 | UInt32(b[at + 2]) << 16 | UInt32(b[at + 3]) << 24
    }
}

/// CRC-32 of PNG chunks (ISO 3309, the polynomial zlib uses).
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func of<C: Collection>(_ bytes: C) -> UInt32 where C.Element == UInt8 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }
}

/// SHA-256 (FIPS 180-4), for content addresses: Foundation on Linux has
/// none, and an image's id must not depend on which library computed it.
public enum SHA256 {
    static let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    /// The digest as 64 lowercase hex digits.
    public static func hex(_ message: [UInt8]) -> String {
        var h: [UInt32] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
        var m = message
        m.append(0x80)
        while m.count % 64 != 56 { m.append(0) }
        let bits = UInt64(message.count) &* 8
        for s in stride(from: 56, through: 0, by: -8) { m.append(UInt8(truncatingIfNeeded: bits >> UInt64(s))) }
        var w = [UInt32](repeating: 0, count: 64)
        for chunk in stride(from: 0, to: m.count, by: 64) {
            for t in 0..<16 { w[t] = ImageContent.be32(m, chunk + 4 * t) }
            for t in 16..<64 {
                let s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3)
                let s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10)
                w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, hh) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
            for t in 0..<64 {
                let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                let ch = (e & f) ^ (~e & g)
                let t1 = hh &+ s1 &+ ch &+ k[t] &+ w[t]
                let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                let maj = (a & b) ^ (a & c) ^ (b & c)
                let t2 = s0 &+ maj
                (hh, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
            }
            for (i, v) in [a, b, c, d, e, f, g, hh].enumerated() { h[i] = h[i] &+ v }
        }
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for v in h { for s in stride(from: 28, through: 0, by: -4) { out.append(digits[Int((v >> UInt32(s)) & 0xF)]) } }
        return String(decoding: out, as: UTF8.self)
    }

    static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { x >> n | x << (32 - n) }
}

/// A PNG made here, for the seeded catalog's pictures: 8-bit RGB, one
/// zlib stream of stored (uncompressed) deflate blocks, so no zlib is
/// needed and the same pixels always give the same bytes (and id).
public enum PNGPicture {
    /// A `size`×`size` picture: diagonal stripes of two colours.
    public static func stripes(size: Int, _ a: (UInt8, UInt8, UInt8), _ b: (UInt8, UInt8, UInt8), width: Int = 8) -> [UInt8] {
        var raw: [UInt8] = []
        raw.reserveCapacity(size * (3 * size + 1))
        for y in 0..<size {
            raw.append(0)  // filter: none
            for x in 0..<size {
                let c = ((x + y) / width) % 2 == 0 ? a : b
                raw += [c.0, c.1, c.2]
            }
        }
        return encode(width: size, height: size, rgb: raw)
    }

    /// `rgb`: each row a filter byte then 3 bytes a pixel.
    static func encode(width: Int, height: Int, rgb raw: [UInt8]) -> [UInt8] {
        var out = ImageContent.pngSignature
        func chunk(_ type: String, _ data: [UInt8]) {
            let typed = Array(type.utf8) + data
            out += be(UInt32(data.count)) + typed + be(CRC32.of(typed))
        }
        chunk("IHDR", be(UInt32(width)) + be(UInt32(height)) + [8, 2, 0, 0, 0])
        var z: [UInt8] = [0x78, 0x01]
        var at = 0
        repeat {
            let n = min(65535, raw.count - at)
            let last: UInt8 = at + n == raw.count ? 1 : 0
            z += [last, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8((~n >> 8) & 0xFF)]
            z += raw[at..<(at + n)]
            at += n
        } while at < raw.count
        var (s1, s2): (UInt32, UInt32) = (1, 0)
        for byte in raw { s1 = (s1 + UInt32(byte)) % 65521; s2 = (s2 + s1) % 65521 }
        z += be(s2 << 16 | s1)
        chunk("IDAT", z)
        chunk("IEND", [])
        return out
    }

    static func be(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
}
