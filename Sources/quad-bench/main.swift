import Foundation
import QuadMessaging
import QuadRuntime
import QuadWire

/// quad-bench: Quad's side of the benchmarks; `deploy/bench` runs it next to
/// the raw C baselines in bench/raw/ and prints the ratios.
let defaults = Endpoints.fromEnvironment()
var flags = Flags(program: "quad-bench", summary: """
    quad-bench: measures Quad. Prints one JSON line per measurement.

    Commands:
      request     round trips of one request type through the broker:
                  p50/p99 latency (µs) and requests per second
      envelope    envelope encode and decode per second, against
                  Foundation's JSONSerialization on the same bytes
    """)
flags.option("frontend", "broker endpoint for requests", default: defaults.frontend)
flags.option("type", "request type", default: "catalog.product.get")
flags.option("body", "request body (JSON)", default: #"{"id":"p-0001"}"#)
flags.option("n", "number of requests or iterations", default: "5000")
flags.option("inflight", "requests in flight at once", default: "1")
flags.option("warmup", "requests before measuring", default: "200")
flags.parse(allowPositional: true)

func emit(_ fields: [String: JSON]) {
    print(JSON.object(fields).text)
}

func percentile(_ sorted: [Int64], _ q: Double) -> Int64 {
    sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q + 0.5))]
}

/// Requests with `inflight` outstanding on one DEALER; latency per request.
@MainActor func benchRequests() throws {
    let n = flags.int("n"), inflight = max(1, flags.int("inflight")), warmup = flags.int("warmup")
    let body = try JSON.parse(flags["body"]!)
    let type = flags["type"]!
    let context = ZMQContext()
    let socket = try context.socket(.dealer)
    try socket.connect(flags["frontend"]!)
    var poller = Poller()
    poller.add(socket)
    var sentAt: [String: Int64] = [:]
    var latencies: [Int64] = []
    latencies.reserveCapacity(n)
    var sent = 0, done = 0, errors = 0
    let total = n + warmup
    var started: Int64 = 0
    func send() throws {
        let e = Envelope.request(type, body: body, deadline: 10_000)
        sentAt[e.id] = Clock.monotonicMicros()
        try socket.send([e.encoded()])
        sent += 1
    }
    while sent < min(inflight, total) { try send() }
    while done < total {
        guard try poller.poll(timeoutMs: 10_000)[0] else { throw QuadError.timeout("no reply in 10 s after \(done) replies") }
        while let frames = try socket.receive(dontWait: true) {
            guard let reply = try? Envelope.decode(frames[0], maxBytes: .max), let corr = reply.corr, let t0 = sentAt.removeValue(forKey: corr) else { continue }
            done += 1
            if reply.kind == .error { errors += 1 }
            if done == warmup { started = Clock.monotonicMicros() }
            if done > warmup { latencies.append(Clock.monotonicMicros() - t0) }
            if sent < total { try send() }
        }
    }
    let seconds = Double(Clock.monotonicMicros() - started) / 1e6
    latencies.sort()
    emit(["bench": "quad_request", "type": .string(type), "n": .int(Int64(n)), "inflight": .int(Int64(inflight)),
          "p50_us": .int(percentile(latencies, 0.5)), "p99_us": .int(percentile(latencies, 0.99)),
          "rps": .int(Int64(Double(n) / seconds)), "errors": .int(Int64(errors))])
}

/// Envelope encode and decode against JSONSerialization on the same bytes.
@MainActor func benchEnvelope() throws {
    let n = flags.int("n")
    let e = Envelope.request("catalog.product.get", body: ["id": "p-0001", "screen": "home", "note": .string(String(repeating: "x", count: 40))], src: "edge/alice")
    let bytes = e.encoded()
    let data = Data(bytes)
    func rate(_ body: () throws -> Void) rethrows -> Int64 {
        let t0 = Clock.monotonicMicros()
        for _ in 0..<n { try body() }
        return Int64(Double(n) / (Double(Clock.monotonicMicros() - t0) / 1e6))
    }
    var sink = 0
    let encode = rate { sink &+= e.encoded().count }
    let decode = try rate { sink &+= try Envelope.decode(bytes).id.count }
    let object = try JSONSerialization.jsonObject(with: data)
    let fEncode = try rate { sink &+= try JSONSerialization.data(withJSONObject: object).count }
    let fDecode = try rate { sink &+= (try JSONSerialization.jsonObject(with: data) as? [String: Any])?.count ?? 0 }
    emit(["bench": "envelope", "bytes": .int(Int64(bytes.count)), "n": .int(Int64(n)),
          "encode_per_s": .int(encode), "decode_per_s": .int(decode),
          "foundation_encode_per_s": .int(fEncode), "foundation_decode_per_s": .int(fDecode), "sink": .int(Int64(sink % 2))])
}

do {
    switch flags.positional.first {
    case "request": try benchRequests()
    case "envelope": try benchEnvelope()
    case let other:
        Flags.usageError(other.map { "unknown command '\($0)'" } ?? "a command is required", usage: flags.usage)
    }
} catch {
    FileHandle.standardError.write(Data("quad-bench: \(error)\n".utf8))
    exit(1)
}
