import Foundation
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadImages
@testable import QuadReservations

/// The lots' and buildings' photos (issue 16, point 4), served by a real
/// reservations process the way catalog serves products' pictures.
@Suite("Reservations photos", .serialized)
struct PhotoTests {
    @Test func everyLotAndBuildingHasAPhotoServedImmutable() throws {
        let stack = try TestStack(name: "photos")
        defer { stack.stopAll() }
        try stack.startBroker()
        try stack.startWorker("quad-reservations", instance: "reservations/1",
                              extra: ["--sim", "off", "--history-days", "0", "--images-http", "127.0.0.1:0"])
        try #require(try stack.waitForWorkers("reservations", count: 1, timeoutMs: 30_000))
        let port = try loggedImagesPort(stack, "reservations/1")
        let client = try stack.internalClient()
        let lots = try client.request("reservations.lots", [:], timeoutMs: 10_000)
        let places = (lots["lots"]?.array ?? []) + (lots["destinations"]?.array ?? [])
        #expect(places.count == Campus.lots.count + Campus.destinations.count)
        var seen: Set<String> = []
        for place in places {
            let url = try #require(place["photo_url"]?.string, "\(place.text)")
            let prefix = "http://127.0.0.1:\(port)"
            #expect(url.hasPrefix(prefix + "/images/"), "\(url)")
            let path = String(url.dropFirst(prefix.count))
            let id = String(path.dropFirst("/images/".count))
            let got = try httpRequest(port, path)
            #expect(got.status == 200, "\(url)")
            #expect(got.header("Content-Type") == "image/png")
            #expect(got.header("ETag") == "\"\(id)\"")
            #expect(got.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(ImageContent.type(of: got.body) == "image/png" && SHA256.hex(got.body) == id)
            #expect(try httpRequest(port, path, headers: ["If-None-Match: \"\(id)\""]).status == 304)
            seen.insert(id)
        }
        #expect(seen.count == places.count, "each lot and building has its own photo")
        #expect(try httpRequest(port, "/images/" + String(repeating: "b", count: 64)).status == 404)
        #expect(try httpRequest(port, "/images/central").status == 404)
    }
}
