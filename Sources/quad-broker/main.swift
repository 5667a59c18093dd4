import Foundation
import QuadAuth
import QuadBroker
import QuadRuntime
import QuadWire

let defaults = Endpoints.fromEnvironment()
var flags = Flags(program: "quad-broker", summary: "quad-broker: routes requests to service workers and relays events.")
flags.option("frontend", "endpoint for clients (ROUTER)", default: defaults.frontend)
flags.option("backend", "endpoint for workers (ROUTER)", default: defaults.backend)
flags.option("events-in", "endpoint publishers connect to (XSUB)", default: defaults.eventsIn)
flags.option("events-out", "endpoint subscribers connect to (XPUB)", default: defaults.eventsOut)
flags.option("internal", "endpoint for requests from other services (ROUTER; keeps user and role)", default: defaults.internal)
flags.option("heartbeat-ms", "heartbeat interval; a worker silent for 3 is dropped", default: String(WorkerProtocol.heartbeatMs))
flags.option("max-message-bytes", "largest envelope accepted (max_message_bytes)", default: String(Envelope.defaultMaxBytes))
flags.option("max-queue", "most requests queued per service (max_queue)", default: "10000")
flags.option("default-deadline-ms", "deadline of a request that carries none", default: "5000")
flags.option("accounts-key", "accounts' Ed25519 public key file that session tokens are checked against (env QUAD_ACCOUNTS_KEY); may appear after start",
             default: KeyFiles.defaultPublicKeyPath())
flags.parse()

var settings = BrokerSettings(endpoints: Endpoints(frontend: flags["frontend"]!, backend: flags["backend"]!,
                                                   eventsIn: flags["events-in"]!, eventsOut: flags["events-out"]!,
                                                   internal: flags["internal"]!))
settings.heartbeatMs = Int64(flags.int("heartbeat-ms"))
settings.maxMessageBytes = flags.int("max-message-bytes")
settings.maxQueue = flags.int("max-queue")
settings.defaultDeadlineMs = Int64(flags.int("default-deadline-ms"))
settings.accountsKeyPath = flags["accounts-key"]!
guard settings.heartbeatMs >= 10 else { Flags.usageError("--heartbeat-ms must be at least 10", usage: flags.usage) }
guard settings.maxMessageBytes >= 1024 else { Flags.usageError("--max-message-bytes must be at least 1024", usage: flags.usage) }
guard settings.maxQueue >= 1 else { Flags.usageError("--max-queue must be at least 1", usage: flags.usage) }

do {
    let broker = try Broker(settings: settings)
    exit(broker.run())
} catch {
    FileHandle.standardError.write(Data("quad-broker: cannot start: \(error)\n".utf8))
    exit(1)
}
