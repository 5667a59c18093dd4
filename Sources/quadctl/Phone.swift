import Foundation
import QuadRuntime
import QuadWire

/// `quadctl phone ...`: the emulated phones of a quad-edge process, through
/// its control socket (the `edge.*` requests of protos/edge/).
enum PhoneCommand {
    static let summary = """
        quadctl phone: the phones of a quad-edge process, through its control socket.

        Usage: quadctl phone COMMAND [ARGS] [options]

        Commands:
          state [PHONE]            each phone: online, pending actions, oldest pending age,
                                   telemetry queued, last sync (all phones without PHONE)
          airplane on|off [PHONE]  airplane mode for one phone, or for all
          messages PHONE           the messages the phone left for its user (refusals with reasons)
          act PHONE TYPE [JSON]    the phone's user makes an action (queued in its outbox),
                                   e.g. act phone-001 favorites.add '{"product":"p-0001"}'
          view PHONE VIEW [JSON]   open a view and print what it shows and where it came from
                                   (network, saved copy with its age, memory, local)
          log PHONE                every action the phone made and what became of it
          wait [PHONE]             until the outboxes are empty (--timeout); exit 1 if not
          synced PHONE             until all the phone's changes are saved (--timeout), then
                                   what it is synced through: the last action acknowledged
                                   and what its answer made; exit 1 if changes still wait
          fault PHONE KIND         a storage fault on the phone's file: snapshot, rollback (to the
                                   snapshot), corrupt, truncate or garbage (the phone restarts on
                                   it), or crash (the quad-edge process killed inside the phone's
                                   next commit)
          report                   the campus day's report so far
          stop                     stop the quad-edge process (its phones keep their files)

        Exit status: 0 ok, 1 refused or not drained, 2 no answer from the control socket, 64 usage.
        """

    static func run(_ arguments: [String]) -> Never {
        var flags = Flags(program: "quadctl phone", summary: summary)
        flags.option("control", "quad-edge's control socket (env QUAD_EDGE_CONTROL)",
                     default: ProcessInfo.processInfo.environment["QUAD_EDGE_CONTROL"].flatMap { $0.isEmpty ? nil : $0 } ?? "tcp://127.0.0.1:7788")
        flags.option("timeout", "milliseconds to wait for the answer (wait: for the drain)", default: "5000")
        flags.flag("telemetry", "with wait: also wait for the telemetry queues")
        flags.flag("json", "print the control socket's answer as JSON")
        do { try flags.parse(arguments, allowPositional: true) } catch { exit(error.report()) }
        let args = flags.positional
        guard let command = args.first else { usageError("a phone command is required", usage: flags.usage) }
        let timeout = Int64(flags.integer("timeout"))
        func arg(_ k: Int, _ what: String) -> String {
            guard args.count > k else { usageError("phone \(command) needs \(what)", usage: flags.usage) }
            return args[k]
        }
        func body(_ k: Int) -> JSON {
            guard args.count > k else { return [:] }
            do { return try JSON.parse(args[k]) } catch { quit("the JSON argument is not valid JSON: \(error.message)", 64) }
        }
        let (type, request): (String, JSON)
        switch command {
        case "state", "list":
            (type, request) = ("edge.state", args.count > 1 ? ["phone": .string(args[1])] : [:])
        case "airplane":
            let mode = arg(1, "on or off")
            guard mode == "on" || mode == "off" else { usageError("airplane takes on or off, got '\(mode)'", usage: flags.usage) }
            var b: [String: JSON] = ["on": .bool(mode == "on")]
            if args.count > 2 { b["phone"] = .string(args[2]) }
            (type, request) = ("edge.airplane", .object(b))
        case "messages":
            (type, request) = ("edge.messages", ["phone": .string(arg(1, "a PHONE"))])
        case "act":
            (type, request) = ("edge.act", ["phone": .string(arg(1, "a PHONE")), "type": .string(arg(2, "an action TYPE")), "body": body(3)])
        case "view":
            (type, request) = ("edge.view", ["phone": .string(arg(1, "a PHONE")), "view": .string(arg(2, "a VIEW")), "params": body(3)])
        case "log":
            (type, request) = ("edge.log", ["phone": .string(arg(1, "a PHONE"))])
        case "wait":
            var b: [String: JSON] = ["timeout_ms": .int(timeout), "telemetry": .bool(flags.bool("telemetry"))]
            if args.count > 1 { b["phone"] = .string(args[1]) }
            (type, request) = ("edge.wait", .object(b))
        case "synced":
            (type, request) = ("edge.wait", ["phone": .string(arg(1, "a PHONE")), "timeout_ms": .int(timeout)])
        case "fault":
            (type, request) = ("edge.fault", ["phone": .string(arg(1, "a PHONE")), "kind": .string(arg(2, "a KIND: snapshot, rollback, corrupt, truncate, garbage or crash"))])
        case "report":
            (type, request) = ("edge.report", [:])
        case "stop":
            (type, request) = ("edge.stop", [:])
        default:
            usageError("unknown phone command '\(command)'", usage: flags.usage)
        }
        let control = flags["control"]!
        let client: Client
        do { client = try Client(endpoint: control, source: "quadctl/\(NSUserName())") } catch { quit("cannot reach \(control): \(error)", 2) }
        let reply: JSON
        do {
            // A wait answers when the drain ends: give it its own time and one attempt.
            let attemptMs = type == "edge.wait" ? timeout + 2000 : timeout
            reply = try client.request(type, request, timeoutMs: attemptMs, attempts: type == "edge.wait" ? 1 : 2)
        } catch {
            if error.code == .timeout { quit("no answer from quad-edge at \(control): is it running with --control \(control)?", 2) }
            if flags.bool("json") { print(error.body.text) } else { FileHandle.standardError.write(Data("quadctl phone: \(error.message)\n".utf8)) }
            exit(1)
        }
        if flags.bool("json") {
            print(reply.text)
            exit(type == "edge.wait" && reply["drained"]?.bool != true ? 1 : 0)
        }
        switch type {
        case "edge.state", "edge.airplane":
            printStates(reply["phones"]?.array ?? [])
            if let t = reply["totals"] {
                print("\(t["phones"]?.int ?? 0) phones, \(t["online"]?.int ?? 0) online, \(t["pending"]?.int ?? 0) actions pending, \(t["telemetry_queued"]?.int ?? 0) telemetry events queued")
            }
        case "edge.messages":
            let list = reply["messages"]?.array ?? []
            if list.isEmpty { print("no messages") }
            for m in list { print("\(time(m["ts"]?.int))  \(m["text"]?.string ?? "")") }
        case "edge.act":
            print("\(reply["outcome"]?.string ?? "queued") \(reply["id"]?.string ?? "")")
        case "edge.fault":
            if let snapshot = reply["snapshot"]?.string { print("\(reply["phone"]?.string ?? ""): file copied to \(snapshot)") }
            if let state = reply["state"] {
                let lost = state["storage_faults"].map { " (the file lost so far: \($0.text))" } ?? ""
                print("\(reply["phone"]?.string ?? ""): \(reply["kind"]?.string ?? "") applied, the phone started again\(lost)")
            }
        case "edge.view":
            var head = "\(reply["view"]?.string ?? "") from \(reply["source"]?.string ?? "?")"
            if let age = reply["age_ms"]?.int, reply["source"]?.string != "network" { head += ", \(age / 1000) s old" }
            print(head)
            if let notice = reply["notice"]?.string { print("notice: \(notice)") }
            if let sync = reply["sync"]?["text"]?.string { print("sync: \(sync)") }
            if let error = reply["error"], let message = error["message"]?.string { print("refused: \(message)") }
            // Each picture with where it came from: network, disk, memory, or the placeholder and why.
            for image in reply["images"]?.array ?? [] {
                var line = "image from \(image["source"]?.string ?? "?"): \(image["url"]?.string ?? "")"
                if let bytes = image["bytes"]?.int, bytes > 0 { line += " (\(bytes) bytes\(image["revalidated"]?.bool == true ? ", revalidated" : ""))" }
                if let reason = image["reason"]?.string { line += ": \(reason)" }
                print(line)
            }
            print((reply["body"] ?? [:]).text)
        case "edge.log":
            for a in reply["actions"]?.array ?? [] {
                var line = "\(time(a["created_at"]?.int))  \(a["id"]?.string ?? "")  \(a["type"]?.string ?? "")  \(a["outcome"]?.string ?? "")"
                if let reason = a["reason"]?.string { line += ": \(reason)" }
                print(line)
            }
        case "edge.wait" where command == "synced":
            let sync = reply["sync"] ?? [:]
            let synced = sync["synced"]?.bool == true
            print("\(args[1]): \(sync["text"]?.string ?? (synced ? "All changes saved" : "changes wait")) (waited \(reply["waited_ms"]?.int ?? 0) ms)")
            if let through = sync["synced_through"], through != .null {
                var line = "synced through \(through["type"]?.string ?? "?") \(through["action"]?.string ?? "?") at \(time(through["at"]?.int))"
                if case .object(let made)? = through["made"], !made.isEmpty {
                    line += ": " + made.keys.sorted().map { k in
                        let o = made[k]!
                        return "\(k) \(o["id"]?.string ?? "?")" + (o["status"]?.string.map { " \($0)" } ?? "")
                    }.joined(separator: ", ")
                }
                print(line)
            } else {
                print("no action acknowledged yet")
            }
            exit(synced ? 0 : 1)
        case "edge.wait":
            let drained = reply["drained"]?.bool == true
            print(drained ? "drained in \(reply["waited_ms"]?.int ?? 0) ms" :
                    "not drained after \(reply["waited_ms"]?.int ?? 0) ms: \(reply["pending"]?.int ?? 0) actions pending")
            exit(drained ? 0 : 1)
        default:
            print(reply.text)
        }
        exit(0)
    }

    static func printStates(_ phones: [JSON]) {
        let header = ["PHONE", "ONLINE", "AIRPLANE", "PENDING", "OLDEST", "TELEMETRY", "LAST SYNC", "MESSAGES"]
        var rows = [header]
        for p in phones {
            rows.append([
                p["phone"]?.string ?? "", p["online"]?.bool == true ? "yes" : "no", p["airplane"]?.bool == true ? "on" : "off",
                String(p["pending"]?.int ?? 0), p["oldest_pending_age_ms"]?.int.map { "\($0 / 1000) s" } ?? "-",
                String(p["telemetry_queued"]?.int ?? 0), time(p["last_sync"]?.int), String(p["messages"]?.int ?? 0),
            ])
        }
        let widths = header.indices.map { k in rows.map { $0[k].count }.max() ?? 0 }
        for r in rows {
            print(r.enumerated().map { k, cell in cell.padding(toLength: widths[k], withPad: " ", startingAt: 0) }.joined(separator: "  "))
        }
    }

    static func time(_ ms: Int64?) -> String {
        guard let ms else { return "-" }
        let f = DateFormatter()
        f.dateFormat = "HH:mm:ss"
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    static func quit(_ message: String, _ code: Int32) -> Never {
        FileHandle.standardError.write(Data("quadctl phone: \(message)\n".utf8))
        exit(code)
    }
}
