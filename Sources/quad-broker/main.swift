import Foundation
import QuadAuth
import QuadBroker
import QuadMetrics
import QuadProcess
import QuadWire

/// A refused command line: the error and the usage on stderr, exit 64.
/// Only an executable's main exits; the libraries throw ``UsageError``.
func usageError(_ message: String, usage: String) -> Never { exit(UsageError(message, usage: usage).report()) }
extension Flags { func integer(_ name: String) -> Int { do { return try int(name) } catch { exit(error.report()) } } }

let defaults = Endpoints.fromEnvironment()
let environment = ProcessInfo.processInfo.environment
func env(_ name: String, _ fallback: String) -> String { environment[name].flatMap { $0.isEmpty ? nil : $0 } ?? fallback }
var flags = Flags(program: "quad-broker", summary: "quad-broker: routes requests to service workers and relays events.")
flags.option("frontend", "endpoint for clients (ROUTER)", default: defaults.frontend)
flags.option("backend", "endpoint for workers (ROUTER)", default: defaults.backend)
flags.option("events-in", "endpoint publishers connect to (XSUB)", default: defaults.eventsIn)
flags.option("events-out", "endpoint subscribers connect to (XPUB)", default: defaults.eventsOut)
flags.option("internal", "endpoint for requests from other services (ROUTER; keeps user and role)", default: defaults.internal)
flags.option("metrics", "HOST:PORT where GET /metrics serves Prometheus's text format (port 0: any free one, logged), or off (env QUAD_BROKER_METRICS)",
             default: env("QUAD_BROKER_METRICS", "off"))
flags.option("heartbeat-ms", "heartbeat interval; a worker silent for 3 is dropped", default: String(WorkerProtocol.heartbeatMs))
flags.option("max-message-bytes", "largest envelope accepted (max_message_bytes)", default: String(Envelope.defaultMaxBytes))
flags.option("max-queue", "most requests queued per service (max_queue)", default: "10000")
flags.option("default-deadline-ms", "deadline of a request that carries none", default: "5000")
flags.option("curve", "CURVE on the public frontend: on, or off for debugging only (env QUAD_CURVE)", default: env("QUAD_CURVE", "on"))
flags.option("curve-key", "the broker's CURVE secret key file (Z85), created 0600 when missing, public key beside it as .pub",
             default: BrokerKeys.defaultSecretKeyPath())
flags.option("allow-keys", "only the client public keys in this file (Z85, one per line) may connect to the frontend; default: any key (env QUAD_ALLOW_KEYS)",
             default: environment["QUAD_ALLOW_KEYS"].flatMap { $0.isEmpty ? nil : $0 })
flags.option("trusted-keys", "client public keys (Z85, one per line) exempt from the per-address limits: quadctl's and the launcher's own keys (env QUAD_TRUSTED_KEYS)",
             default: environment["QUAD_TRUSTED_KEYS"].flatMap { $0.isEmpty ? nil : $0 })
flags.option("service-keys", "CURVE on the backend, event and internal sockets, admitting only the service public keys in this file (Z85, one per line): for services on other hosts (env QUAD_SERVICE_KEYS)",
             default: environment["QUAD_SERVICE_KEYS"].flatMap { $0.isEmpty ? nil : $0 })
flags.option("rate-per-second", "requests per second each user, phone (src) and connection may send on the frontend; 0: no limit (rate_per_second; env QUAD_RATE_PER_SECOND)",
             default: env("QUAD_RATE_PER_SECOND", "50"))
flags.option("rate-burst", "requests each may send at once above the rate (rate_burst; env QUAD_RATE_BURST)", default: env("QUAD_RATE_BURST", "100"))
flags.option("internal-only", "request types the frontend refuses (401, 403) to all but admins, comma-separated; *.x means x of every service",
             default: "*.events.since")
flags.option("max-deliveries", "most workers one request may take down before it is answered 500 (max_deliveries)", default: "3")
flags.option("service-grace-ms", "after start, a request for a service that never registered waits this long for its first worker; after it, 404 at once (service_grace_ms; env QUAD_SERVICE_GRACE_MS)",
             default: env("QUAD_SERVICE_GRACE_MS", "5000"))
flags.option("max-deadline-ms", "longest deadline honoured: a request asking more is capped to it, not refused (max_deadline_ms; env QUAD_MAX_DEADLINE_MS)",
             default: env("QUAD_MAX_DEADLINE_MS", "30000"))
flags.option("max-queue-bytes", "most bytes of requests queued per service; more get 503 (max_queue_bytes; env QUAD_MAX_QUEUE_BYTES)",
             default: env("QUAD_MAX_QUEUE_BYTES", String(16 << 20)))
flags.option("frontend-receive-hwm", "messages the frontend buffers per connection on the way in; past it TCP pushes back (frontend_receive_hwm; env QUAD_FRONTEND_RECEIVE_HWM)",
             default: env("QUAD_FRONTEND_RECEIVE_HWM", "100"))
flags.option("malformed-ban-ms", "a client key that sends a message of the wrong frame count may not connect again for this long; 0: no ban (malformed_ban_ms; env QUAD_MALFORMED_BAN_MS)",
             default: env("QUAD_MALFORMED_BAN_MS", "60000"))
flags.option("handshake-rate-per-key", "new connections per second one client key may open, bursts of 10 times that; 0: no limit (handshake_rate_per_key; env QUAD_HANDSHAKE_RATE_PER_KEY)",
             default: env("QUAD_HANDSHAKE_RATE_PER_KEY", "2"))
flags.option("handshake-rate-per-address", "new connections per second one address may open (loopback included), bursts of 10 times that; 0: no limit (handshake_rate_per_address; env QUAD_HANDSHAKE_RATE_PER_ADDRESS)",
             default: env("QUAD_HANDSHAKE_RATE_PER_ADDRESS", "200"))
flags.option("address-rate-per-second", "requests per second without a signed-in user one source address may send (loopback included), across its keys and connections; 0: no limit (address_rate_per_second; env QUAD_ADDRESS_RATE_PER_SECOND)",
             default: env("QUAD_ADDRESS_RATE_PER_SECOND", "500"))
flags.option("address-rate-burst", "requests one address may send at once above that (address_rate_burst; env QUAD_ADDRESS_RATE_BURST)",
             default: env("QUAD_ADDRESS_RATE_BURST", "1000"))
flags.option("max-revocations", "most revoked tokens and users remembered (max_revocations)", default: "100000")
flags.option("revocation-refresh-ms", "how often to ask accounts for every revocation in force (revocation_refresh_ms)", default: "10000")
flags.flag("show-key", "print the frontend's CURVE public key (making the key pair if missing) and exit")
flags.option("accounts-key", "accounts' Ed25519 public key file that session tokens are checked against (env QUAD_ACCOUNTS_KEY); may appear after start",
             default: KeyFiles.defaultPublicKeyPath())
flags.option("updates", "endpoint of the public updates socket (XPUB, CURVE as the frontend) where phones subscribe to public events and their own news; auto: the frontend's port + 9; off: none (env QUAD_UPDATES)",
             default: env("QUAD_UPDATES", "auto"))
flags.option("max-public-topics", "distinct public topics the updates socket keeps subscriptions to (max_public_topics)", default: "100000")
do { try flags.parse() } catch { exit(error.report()) }
for name in ["frontend", "backend", "events-in", "events-out", "internal"] where flags[name]!.contains(",") {
    usageError("--\(name) is one endpoint: each broker binds its own (a list '\(flags[name]!)' is for workers and clients; QUAD_\(name.uppercased().replacingOccurrences(of: "-", with: "_")) may hold one, pass the broker its own with --\(name))", usage: flags.usage)
}

var settings = BrokerSettings(endpoints: Endpoints(frontend: flags["frontend"]!, backend: flags["backend"]!,
                                                   eventsIn: flags["events-in"]!, eventsOut: flags["events-out"]!,
                                                   internal: flags["internal"]!))
switch flags["updates"]! {
case "off": settings.updatesEndpoint = nil
case "auto":
    settings.updatesEndpoint = Endpoints.updates(forFrontend: settings.endpoints.frontend)
    settings.updatesOptional = true
case let endpoint: settings.updatesEndpoint = endpoint
}
settings.maxPublicTopics = flags.integer("max-public-topics")
guard settings.maxPublicTopics >= 1 else { usageError("--max-public-topics must be at least 1", usage: flags.usage) }
settings.heartbeatMs = Int64(flags.integer("heartbeat-ms"))
if let address = flags["metrics"], address != "off" {
    do { _ = try MetricsServer.parse(address) } catch { usageError("\(error)", usage: flags.usage) }
    settings.metricsAddress = address
}
settings.maxMessageBytes = flags.integer("max-message-bytes")
settings.maxQueue = flags.integer("max-queue")
settings.defaultDeadlineMs = Int64(flags.integer("default-deadline-ms"))
settings.accountsKeyPath = flags["accounts-key"]!
guard settings.heartbeatMs >= 10 else { usageError("--heartbeat-ms must be at least 10", usage: flags.usage) }
guard settings.maxMessageBytes >= 1024 else { usageError("--max-message-bytes must be at least 1024", usage: flags.usage) }
guard settings.maxQueue >= 1 else { usageError("--max-queue must be at least 1", usage: flags.usage) }
switch flags["curve"]! {
case "on": settings.curveKeyPath = flags["curve-key"]!
case "off": settings.curveKeyPath = nil
default: usageError("--curve must be on or off, got '\(flags["curve"]!)'", usage: flags.usage)
}
settings.allowKeysPath = flags["allow-keys"]
if settings.allowKeysPath != nil && settings.curveKeyPath == nil {
    usageError("--allow-keys needs --curve on", usage: flags.usage)
}
settings.trustedKeysPath = flags["trusted-keys"]
if settings.trustedKeysPath != nil && settings.curveKeyPath == nil {
    usageError("--trusted-keys needs --curve on", usage: flags.usage)
}
settings.serviceKeysPath = flags["service-keys"]
if settings.serviceKeysPath != nil && settings.curveKeyPath == nil {
    usageError("--service-keys needs --curve on", usage: flags.usage)
}
guard let rate = Double(flags["rate-per-second"]!), rate >= 0, rate <= 1_000_000 else {
    usageError("--rate-per-second must be a number from 0 (no limit) to 1000000, got '\(flags["rate-per-second"]!)'", usage: flags.usage)
}
guard let burst = Double(flags["rate-burst"]!), burst >= 1, burst <= 1_000_000 else {
    usageError("--rate-burst must be a number from 1 to 1000000, got '\(flags["rate-burst"]!)'", usage: flags.usage)
}
settings.maxDeliveries = flags.integer("max-deliveries")
guard settings.maxDeliveries >= 1 else { usageError("--max-deliveries must be at least 1", usage: flags.usage) }
settings.ratePerSecond = rate
settings.rateBurst = burst
/// A number flag in `range`, or a usage error naming it.
@MainActor func number(_ name: String, _ range: ClosedRange<Double>) -> Double {
    guard let v = Double(flags[name]!), range.contains(v) else {
        usageError("--\(name) must be a number from \(range.lowerBound) to \(range.upperBound), got '\(flags[name]!)'", usage: flags.usage)
    }
    return v
}
settings.serviceGraceMs = Int64(number("service-grace-ms", 0...3_600_000))
settings.maxDeadlineMs = Int64(number("max-deadline-ms", 1...3_600_000))
settings.maxQueueBytes = Int(number("max-queue-bytes", 1024...Double(1 << 40)))
settings.frontendReceiveHWM = Int32(number("frontend-receive-hwm", 1...1_000_000))
settings.malformedBanMs = Int64(number("malformed-ban-ms", 0...86_400_000))
settings.handshakeRatePerKey = number("handshake-rate-per-key", 0...1_000_000)
settings.handshakeRatePerAddress = number("handshake-rate-per-address", 0...1_000_000)
settings.addressRatePerSecond = number("address-rate-per-second", 0...1_000_000)
settings.addressRateBurst = number("address-rate-burst", 1...1_000_000)
settings.maxRevocations = Int(number("max-revocations", 1...100_000_000))
settings.revocationRefreshMs = Int64(number("revocation-refresh-ms", 100...3_600_000))
settings.internalOnlyTypes = flags["internal-only"]!.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }

if flags.bool("show-key") {
    do {
        print(try BrokerKeys.loadOrCreate(at: flags["curve-key"]!).publicKey)
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("quad-broker: \(error)\n".utf8))
        exit(1)
    }
}

do {
    let broker = try Broker(settings: settings)
    exit(broker.run())
} catch {
    FileHandle.standardError.write(Data("quad-broker: cannot start: \(error)\n".utf8))
    exit(1)
}
