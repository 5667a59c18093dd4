import Foundation
import QuadMessaging
import QuadRuntime
import QuadWire

/// A refused command line: the error and the usage on stderr, exit 64.
/// Only an executable's main exits; the libraries throw ``UsageError``.
func usageError(_ message: String, usage: String) -> Never { exit(UsageError(message, usage: usage).report()) }
extension Flags { func integer(_ name: String) -> Int { do { return try int(name) } catch { exit(error.report()) } } }

/// quad-bench: Quad's side of the benchmarks; `deploy/bench` runs it next to
/// the raw C baselines in bench/raw/ and prints the ratios.
let defaults = Endpoints.fromEnvironment()
var flags = Flags(program: "quad-bench", summary: """
    quad-bench: measures Quad. Prints one JSON line per measurement.

    Commands:
      request     requests of one type through the broker, --inflight at once:
                  p50/p99 latency (µs) and requests per second
      ingest      telemetry.ingest batches of --batch phone events through the
                  broker: events stored per second
      events      subscribes to one service's events on the broker's
                  events-out, prints {"ready":true}, then counts --n events
                  of --event-type: events per second from the first to the last
      envelope    envelope encode and decode per second, against
                  Foundation's JSONSerialization on the same bytes (--n
                  each, or what fits in a second)

    Requests speak CURVE with the broker's key (--broker-key), as phones do.
    With --login or --register they carry a session token.
    """)
flags.option("frontend", "broker endpoint for requests", default: defaults.frontend)
flags.option("events-out", "events: the broker's event endpoint (XPUB)", default: defaults.eventsOut)
flags.option("broker-key", "the broker's CURVE public key (Z85, @FILE or off); default QUAD_BROKER_KEY, QUAD_BROKER_KEY_FILE, or $QUAD_HOME/keys/broker.pub")
flags.option("type", "request type", default: "catalog.product.get")
flags.option("body", "request body (JSON)", default: #"{"id":"p-0001"}"#)
flags.option("n", "number of requests, events or iterations", default: "5000")
flags.option("inflight", "requests in flight at once", default: "1")
flags.option("warmup", "requests before measuring", default: "200")
flags.option("deadline", "ms each request may wait", default: "10000")
flags.option("batch", "ingest: events per telemetry.ingest", default: "500")
flags.option("service", "events: the publishing service", default: "favorites")
flags.option("event-type", "events: the event type to count", default: "bench.event")
flags.option("login", "sign in first as EMAIL:PASSWORD and send the token")
flags.flag("register", "register a fresh account first, sign in, and send its token")
do { try flags.parse(allowPositional: true) } catch { exit(error.report()) }

func emit(_ fields: [String: JSON]) {
    // Unbuffered: deploy/bench waits for the events command's ready line.
    FileHandle.standardOutput.write(Data((JSON.object(fields).text + "\n").utf8))
}

/// A progress line on stderr, unbuffered.
func progress(_ line: String) {
    FileHandle.standardError.write(Data("quad-bench: \(line)\n".utf8))
}

func percentile(_ sorted: [Int64], _ q: Double) -> Int64 {
    sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q + 0.5))]
}

@MainActor func number(_ name: String, _ range: ClosedRange<Int>) -> Int {
    guard let n = Int(flags[name] ?? ""), range.contains(n) else {
        usageError("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(flags[name] ?? "")'", usage: flags.usage)
    }
    return n
}

@MainActor func brokerKey() -> [UInt8]? {
    do throws(QuadError) {
        if let given = flags["broker-key"] { return try BrokerKey.parse(given) }
        return try BrokerKey.fromEnvironment()
    } catch {
        usageError(error.message, usage: flags.usage)
    }
}

/// A session token from --login or --register, nil without either.
@MainActor func sessionToken(_ key: [UInt8]?) throws -> String? {
    var credentials: (String, String)?
    if let login = flags["login"] {
        guard let colon = login.firstIndex(of: ":") else { usageError("--login must be EMAIL:PASSWORD", usage: flags.usage) }
        credentials = (String(login[..<colon]), String(login[login.index(after: colon)...]))
    }
    guard credentials != nil || flags.bool("register") else { return nil }
    let client = try Client(endpoint: flags["frontend"]!, source: "bench", serverKey: key)
    if credentials == nil {
        let email = "bench-\(MessageID.make().suffix(12).lowercased())@bench.quad.campus", password = "pw-" + MessageID.make()
        _ = try client.request("accounts.register", ["email": .string(email), "password": .string(password), "name": "Bench Student",
                                                     "semester": 3, "categories": ["Tech"]], timeoutMs: 10_000)
        credentials = (email, password)
    }
    let reply = try client.request("accounts.login", ["email": .string(credentials!.0), "password": .string(credentials!.1)], timeoutMs: 10_000)
    guard let token = reply["token"]?.string else { throw QuadError.internal("accounts.login answered no token") }
    return token
}

/// Requests with `inflight` outstanding on one DEALER; latency per request.
/// `makeBody` gives the body of the k-th request.
@MainActor func runRequests(type: String, label: String, extra: [String: JSON] = [:], makeBody: (Int) -> JSON) throws -> Double {
    let n = number("n", 1...10_000_000), inflight = number("inflight", 1...10_000), warmup = number("warmup", 0...1_000_000)
    let deadline = Int64(number("deadline", 1...3_600_000))
    let key = brokerKey()
    let token = try sessionToken(key)
    let context = ZMQContext()
    // One DEALER per frontend of the list (one CURVE key pair for all, so
    // that a request resent through another broker has the same owner), as
    // Client does: requests go to the first that is open; when a socket
    // monitor sees a frontend's connection close, every request waiting on
    // it is sent again, same bytes and id, through another, so that a broker
    // killed under load costs no request.
    let frontends = Endpoints.list(flags["frontend"]!)
    let pair = try CurveKeys.generate()
    var opened: [Socket] = []
    var monitors: [SocketMonitor] = []
    for (i, e) in frontends.enumerated() {
        let socket = try context.socket(.dealer)
        try socket.setMaxMessageSize(Int64(Envelope.defaultMaxBytes) * 2)
        if let key { try pair.connect(socket, to: key) }
        if frontends.count > 1 { monitors.append(try SocketMonitor(socket, name: "bench-\(i)", connections: true)) }
        try socket.connect(e)
        opened.append(socket)
    }
    let sockets = opened
    let count = sockets.count
    var poller = Poller()
    for s in sockets { poller.add(s) }
    for m in monitors { poller.add(m.socket) }
    var closed: Set<Int> = []
    var current = 0
    var via: [String: (Int, [[UInt8]])] = [:]
    var resent = 0
    var sentAt: [String: Int64] = [:]
    var latencies: [Int64] = []
    latencies.reserveCapacity(n)
    var sent = 0, done = 0, errors = 0
    var firstError: String?
    let total = n + warmup
    var started = Clock.monotonicMicros()
    func send() throws {
        var e = Envelope.request(type, body: makeBody(sent), src: "bench", deadline: deadline)
        e.token = token
        sentAt[e.id] = Clock.monotonicMicros()
        let frames = Majordomo.request(e)
        try sockets[current].send(frames)
        if sockets.count > 1 {
            via[e.id] = (current, frames)
            // Both brokers carry the load: requests dealt over the open ones.
            current = (1...count).map { (current + $0) % count }.first { !closed.contains($0) } ?? current
        }
        sent += 1
    }
    func readMonitors() throws {
        for (i, m) in monitors.enumerated() {
            while let event = m.next() {
                switch event.kind {
                case .succeeded: closed.remove(i)
                case .disconnected:
                    closed.insert(i)
                    guard let next = (1..<count).map({ (i + $0) % count }).first(where: { !closed.contains($0) }) else { continue }
                    if current == i { current = next }
                    for (id, (k, frames)) in via where k == i {
                        try sockets[next].send(frames)
                        via[id] = (next, frames)
                        resent += 1
                    }
                default: break
                }
            }
        }
    }
    // A long run says how far it is on stderr, a line at each tenth (a test
    // that kills a broker under load waits for the first).
    let progressStep = total >= 10_000 ? total / 10 : Int.max
    while sent < min(inflight, total) { try send() }
    let waitMs = Int(max(10_000, deadline + 1_000))
    while done < total {
        let ready = try poller.poll(timeoutMs: waitMs)
        guard ready.contains(true) else { throw QuadError.timeout("no reply in \(waitMs) ms after \(done) replies") }
        try readMonitors()
        for socket in sockets { while let frames = try socket.receive(dontWait: true) {
            guard let answer = Majordomo.parseReply(frames), let reply = try? answer.envelope(), let corr = reply.corr,
                  let t0 = sentAt.removeValue(forKey: corr) else { continue }
            via[corr] = nil
            done += 1
            if let error = reply.quadError {
                errors += 1
                if firstError == nil { firstError = "\(error.code) \(error.status): \(error.message)" }
            }
            if done == warmup { started = Clock.monotonicMicros() }
            if done > warmup { latencies.append(Clock.monotonicMicros() - t0) }
            if done % progressStep == 0 && done < total { progress("\(done) of \(total) answered, \(errors) errors") }
            if sent < total { try send() }
        } }
    }
    let seconds = Double(Clock.monotonicMicros() - started) / 1e6
    latencies.sort()
    var fields: [String: JSON] = ["bench": .string(label), "type": .string(type), "n": .int(Int64(n)), "inflight": .int(Int64(inflight)),
                                  "p50_us": .int(percentile(latencies, 0.5)), "p99_us": .int(percentile(latencies, 0.99)),
                                  "rps": .int(Int64(Double(n) / seconds)), "seconds": .double((seconds * 1000).rounded() / 1000),
                                  "errors": .int(Int64(errors))]
    if sockets.count > 1 { fields["resent"] = .int(Int64(resent)) }
    if let firstError { fields["first_error"] = .string(firstError) }
    for (k, v) in extra { fields[k] = v }
    emit(fields)
    // Every answer an error means the measure is of the wrong thing.
    if errors == done { throw QuadError.internal("every request failed: \(firstError ?? "")") }
    return Double(n) / seconds
}

@MainActor func benchRequests() throws {
    let body: JSON
    do { body = try JSON.parse(flags["body"]!) } catch { usageError("--body is not JSON: \(error)", usage: flags.usage) }
    _ = try runRequests(type: flags["type"]!, label: "quad_request") { _ in body }
}

/// telemetry.ingest batches of fresh phone events (the same shapes the raw
/// store baselines write): events stored per second.
@MainActor func benchIngest() throws {
    let batch = number("batch", 1...500)
    let start = Int64(Clock.nowMillis())
    var k = 0
    let names = ["view.opened", "spot.search", "action.synced"]
    let rps = try runRequests(type: "telemetry.ingest", label: "quad_ingest", extra: ["batch": .int(Int64(batch))]) { _ in
        var events: [JSON] = []
        events.reserveCapacity(batch)
        for _ in 0..<batch {
            let name = names[k % 3]
            let props: JSON = name == "view.opened" ? ["view": "home"] : name == "spot.search" ? ["lot": "ML"]
                : ["action": "reservations.checkin", "waited_ms": .int(Int64(k % 90_000)), "offline": .bool(k % 2 == 0)]
            events.append([
                "id": .string(MessageID.make()), "phone": .string("ph-\(k % 300)"), "user": .string("u-\(k % 250)"),
                "session": .string("s-\(k / 40)"), "name": .string(name), "ts": .int(start + Int64(k)), "offline": .bool(k % 2 == 0),
                "props": props,
            ])
            k += 1
        }
        return ["events": .array(events)]
    }
    emit(["bench": "quad_ingest_events", "events_per_s": .int(Int64(rps * Double(batch))), "batch": .int(Int64(batch))])
}

/// Counts events of one type from one service on the broker's XPUB.
@MainActor func benchEvents() throws {
    let n = number("n", 1...10_000_000)
    let service = flags["service"]!, wanted = flags["event-type"]!
    let context = ZMQContext()
    let sub = try context.socket(.sub)
    try sub.setReceiveHWM(0)
    // Every broker's events-out: each event comes once per broker, and is
    // counted once (by its source's seq, below).
    for e in Endpoints.list(flags["events-out"]!) { try sub.connect(e) }
    try sub.subscribe(EventFeed.topic(service))
    // The subscription travels to the broker before anything is published.
    Thread.sleep(forTimeInterval: 0.3)
    emit(["ready": true])
    var poller = Poller()
    poller.add(sub)
    var got = 0, bytes = 0, topicBytes = 0
    var first: Int64 = 0, last: Int64 = 0
    // Gaps of 1 ms or more between two events: a stream that waits (on a
    // timer, a page, a lock) rather than one that is busy all along.
    var stalls = 0, stalledMicros: Int64 = 0
    let topic = Array((EventFeed.topic(service) + wanted).utf8)
    var lastSeq: [String: Int64] = [:]
    while got < n {
        guard try poller.poll(timeoutMs: 30_000)[0] else { throw QuadError.timeout("got \(got) of \(n) \(wanted) events, then none for 30 s") }
        while let frames = try sub.receive(dontWait: true) {
            // The topic frame names the type: an event of another type is
            // dropped unread, and one that is counted has only its header
            // decoded (source and seq, for once-only in order), as a
            // subscriber that applies events by (source, seq) needs.
            guard frames.count == 2, frames[0] == topic,
                  let e = try? Envelope.decodeHeader(frames[1], maxBytes: .max), e.type == wanted,
                  let seq = e.seq, seq > lastSeq[e.src ?? "", default: 0] else { continue }
            lastSeq[e.src ?? "", default: 0] = seq
            let now = Clock.monotonicMicros()
            if got > 0, now - last >= 1000 { stalls += 1; stalledMicros += now - last }
            last = now
            if got == 0 { first = last; bytes = frames[1].count; topicBytes = frames[0].count }
            got += 1
        }
    }
    let seconds = Double(last - first) / 1e6
    emit(["bench": "quad_events", "service": .string(service), "n": .int(Int64(n)), "bytes": .int(Int64(bytes)), "topic_bytes": .int(Int64(topicBytes)),
          "seconds": .double((seconds * 1000).rounded() / 1000),
          "stalls": .int(Int64(stalls)), "stalled_ms": .int(stalledMicros / 1000), "events_per_s": .int(seconds > 0 ? Int64(Double(n - 1) / seconds) : 0)])
}

/// Envelope encode and decode against JSONSerialization on the same bytes.
@MainActor func benchEnvelope() throws {
    let n = number("n", 1...100_000_000)
    let e = Envelope.request("catalog.product.get", body: ["id": "p-0001", "screen": "home", "note": .string(String(repeating: "x", count: 40))], src: "edge/alice")
    let bytes = e.encoded()
    let data = Data(bytes)
    // --n iterations, or as many thousands as fit in a second: JSONSerialization
    // encodes about 15,000 a second here, and 100,000 of them took 7 s a run.
    func rate(_ body: () throws -> Void) rethrows -> Int64 {
        let t0 = Clock.monotonicMicros()
        var done = 0
        while done < n, done == 0 || Clock.monotonicMicros() - t0 < 1_000_000 {
            for _ in 0..<min(1000, n - done) { try body() }
            done += min(1000, n - done)
        }
        return Int64(Double(done) / (Double(Clock.monotonicMicros() - t0) / 1e6))
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
    guard flags.positional.count <= 1 else { usageError("one command at a time, got '\(flags.positional.joined(separator: " "))'", usage: flags.usage) }
    switch flags.positional.first {
    case "request": try benchRequests()
    case "ingest": try benchIngest()
    case "events": try benchEvents()
    case "envelope": try benchEnvelope()
    case let other:
        usageError(other.map { "unknown command '\($0)': expected request, ingest, events or envelope" } ?? "a command is required: request, ingest, events or envelope", usage: flags.usage)
    }
} catch let error as QuadError {
    FileHandle.standardError.write(Data("quad-bench: \(error.message)\n".utf8))
    exit(1)
} catch {
    FileHandle.standardError.write(Data("quad-bench: \(error)\n".utf8))
    exit(1)
}
