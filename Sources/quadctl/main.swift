import Foundation
import QuadMessaging
import QuadRuntime
import QuadWire

let defaults = Endpoints.fromEnvironment()
var flags = Flags(program: "quadctl", summary: """
    quadctl: the command line for Quad.

    Commands:
      call TYPE [JSON]     send a request; prints the reply body as JSON (exit 0),
                           the error body (exit 1), or says no answer came (exit 2)
      services             list services with their live workers and queue depth
      watch [TOPIC]        print events as they pass: all by default, or those whose
                           service ("catalog/") or type ("catalog.stock") starts with TOPIC
    """)
flags.option("frontend", "broker endpoint for requests", default: defaults.frontend)
flags.option("events-out", "broker endpoint for events", default: defaults.eventsOut)
flags.option("timeout", "milliseconds to wait for each attempt", default: "3000")
flags.option("attempts", "attempts, all under the same envelope id", default: "2")
flags.option("id", "envelope id (idempotency key) to send; a fresh UUIDv7 by default")
flags.option("token", "session token to send", default: ProcessInfo.processInfo.environment["QUAD_TOKEN"])
flags.option("count", "with watch: stop after this many events (0: never)", default: "0")
flags.flag("envelope", "with call: print the whole reply envelope, not only the body")
flags.parse(allowPositional: true)

func fail(_ message: String, code: Int32) -> Never {
    FileHandle.standardError.write(Data("quadctl: \(message)\n".utf8))
    exit(code)
}

@MainActor func client() -> Client {
    do {
        let c = try Client(endpoint: flags["frontend"]!, source: "quadctl/\(NSUserName())")
        c.token = flags["token"]
        return c
    } catch { fail("cannot connect to \(flags["frontend"]!): \(error)", code: 2) }
}

@MainActor func call(_ type: String, _ body: JSON) -> Never {
    let request = Envelope.request(type, body: body, id: flags["id"] ?? MessageID.make())
    do {
        let reply = try client().call(request, timeoutMs: Int64(flags.int("timeout")), attempts: max(1, flags.int("attempts")))
        print(flags.bool("envelope") ? reply.json.text : reply.body.text)
        exit(reply.kind == .error ? 1 : 0)
    } catch {
        if error.code == "timeout" { fail("no answer from \(flags["frontend"]!): \(error.message)", code: 2) }
        print(error.body.text)
        exit(1)
    }
}

let args = flags.positional
guard let command = args.first else { Flags.usageError("a command is required", usage: flags.usage) }
switch command {
case "call":
    guard args.count >= 2 else { Flags.usageError("call needs a request type, e.g. quadctl call catalog.categories", usage: flags.usage) }
    guard args.count <= 3 else { Flags.usageError("call takes TYPE and at most one JSON body", usage: flags.usage) }
    var body: JSON = .object([:])
    if args.count == 3 {
        do { body = try JSON.parse(args[2]) } catch { fail("the body is not valid JSON: \(error.message)", code: 64) }
    }
    call(args[1], body)
case "services":
    call("sys.services", .object([:]))
case "watch":
    let topic = args.count > 1 ? args[1] : ""
    let limit = flags.int("count")
    do {
        let context = ZMQContext()
        let sub = try context.socket(.sub)
        try sub.connect(flags["events-out"]!)
        // Topics are "service/type"; TOPIC may be either a service or a type prefix.
        try sub.subscribe("")
        Shutdown.install()
        var seen = 0
        var poller = Poller()
        poller.add(sub)
        FileHandle.standardError.write(Data("quadctl: watching '\(topic.isEmpty ? "*" : topic)' on \(flags["events-out"]!)\n".utf8))
        while !Shutdown.isRequested {
            guard try poller.poll(timeoutMs: 200)[0] else { continue }
            while let frames = try sub.receive(dontWait: true) {
                guard let last = frames.last, let first = frames.first else { continue }
                let frameTopic = String(decoding: first, as: UTF8.self)
                let type = frameTopic.split(separator: "/", maxSplits: 1).last.map(String.init) ?? frameTopic
                guard topic.isEmpty || frameTopic.hasPrefix(topic) || type.hasPrefix(topic) else { continue }
                FileHandle.standardOutput.write(Data(last + [0x0A]))
                seen += 1
                if limit > 0 && seen >= limit { exit(0) }
            }
        }
        exit(0)
    } catch {
        fail("watch: \(error)", code: 1)
    }
default:
    Flags.usageError("unknown command '\(command)'", usage: flags.usage)
}
