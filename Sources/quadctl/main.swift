import Foundation
import QuadAuth
import QuadContract
import QuadMessaging
import QuadRuntime
import QuadWire

/// A refused command line: the error and the usage on stderr, exit 64.
/// Only an executable's main exits; the libraries throw ``UsageError``.
func usageError(_ message: String, usage: String) -> Never { exit(UsageError(message, usage: usage).report()) }
extension Flags { func integer(_ name: String) -> Int { do { return try int(name) } catch { exit(error.report()) } } }

let defaults = Endpoints.fromEnvironment()
var flags = Flags(program: "quadctl", summary: """
    quadctl: the command line for Quad.

    Commands:
      call TYPE [JSON]     send a request; prints the reply body as JSON (exit 0),
                           the error body (exit 1), or says no answer came (exit 2);
                           with --trace, the request starts a trace whose id goes to stderr
      trace ID [--logs DIR] [--json]
                           the request of trace ID across processes, read from their logs
                           (default $QUAD_HOME/logs): process, type, start, duration and
                           status of each span, children indented under their parent
      services [--json]    each service's live workers, busy ones, queue depth and requests
                           routed, expired and timed out at this broker: a table, or its JSON
      types [--json]       every request type each service answers (from <service>.sys.types):
                           query or mutation, who may call it, its request and reply schemas
      contract write DIR   write the JSON Schemas of the contract (Sources/QuadContract) into
                           DIR, as protos/ keeps them: quadctl contract write protos
      contract check TYPE JSON
                           check a request body against the contract, offline: prints ok
                           (exit 0) or the refusal a service would give (exit 1)
      phone ...            the phones of a quad-edge process (quadctl phone --help)
      watch [TOPIC]        print events as they pass: all by default, or those whose
                           service ("catalog/") or type ("catalog.stock") starts with TOPIC
      register EMAIL NAME SEMESTER [CATEGORY...]
                           create a student account (SEMESTER 1 to 12; categories of
                           Study, Tech, Creative, Lab, Personal, Others)
      login EMAIL          log in; prints `export QUAD_TOKEN=...` for eval "$(quadctl login EMAIL)"
      refresh              trade the session token (QUAD_TOKEN or --token) for a new one, which
                           ends the old; prints `export QUAD_TOKEN=...` like login
      logout [all]         end the session token (with all: every session of its user);
                           prints `unset QUAD_TOKEN` for eval "$(quadctl logout)"

    Passwords come from --password, else QUAD_PASSWORD, else a prompt on the terminal;
    the admin's (QUAD_ADMIN_EMAIL, default admin@quad.campus) comes first from the file
    QUAD_ADMIN_PASSWORD_FILE, else $QUAD_HOME/keys/admin.password (made by deploy/stack up).
    The broker's CURVE public key comes from --broker-key, else QUAD_BROKER_KEY (or
    QUAD_BROKER_KEY_FILE), else $QUAD_HOME/keys/broker.pub (deploy/stack keys prints it).
    With --as EMAIL, any command logs in first and sends its requests with that token.
    """)
flags.option("frontend", "broker endpoint for requests", default: defaults.frontend)
flags.option("events-out", "broker endpoint for events", default: defaults.eventsOut)
flags.option("timeout", "milliseconds to wait for each attempt", default: "3000")
flags.option("attempts", "attempts, all under the same envelope id", default: "2")
flags.option("id", "envelope id (idempotency key) to send; a fresh UUIDv7 by default")
flags.option("token", "session token to send", default: ProcessInfo.processInfo.environment["QUAD_TOKEN"])
flags.option("as", "log in as this email first and send the request with its token (overrides --token)")
flags.option("password", "password for --as, login and register (default: QUAD_PASSWORD, else asked)")
flags.option("broker-key", "the broker's CURVE public key: Z85 text, @FILE, or off (default: QUAD_BROKER_KEY, QUAD_BROKER_KEY_FILE, $QUAD_HOME/keys/broker.pub)")
flags.option("count", "with watch: stop after this many events (0: never)", default: "0")
flags.flag("json", "with services, types and trace: print JSON, not a table")
flags.flag("trace", "with call: start a trace (W3C traceparent) and print its id on stderr, for quadctl trace ID")
flags.option("logs", "with trace: the folder of the processes' logs (default: $QUAD_HOME/logs)")
flags.flag("envelope", "with call: print the whole reply envelope, not only the body")
flags.flag("internal", "speak on the broker's internal frontend (QUAD_INTERNAL, the stack's own socket: no token, no rate limit, instances and pids shown), as deploy/stack does for health and status")
// `quadctl phone ...` has flags of its own (the phones' control socket).
if CommandLine.arguments.dropFirst().first == "phone" { PhoneCommand.run(Array(CommandLine.arguments.dropFirst(2))) }
do { try flags.parse(allowPositional: true) } catch { exit(error.report()) }

func fail(_ message: String, code: Int32) -> Never {
    FileHandle.standardError.write(Data("quadctl: \(message)\n".utf8))
    exit(code)
}

/// The broker's CURVE public key, or nil to speak without CURVE.
let brokerKey: [UInt8]? = {
    do throws(QuadError) {
        if let given = flags["broker-key"] { return try BrokerKey.parse(given) }
        return try BrokerKey.fromEnvironment()
    } catch {
        fail(error.message, code: 64)
    }
}()

/// Says why no answer came: without the broker's key, a broker with CURVE
/// on never answers.
@MainActor func noAnswer(_ message: String) -> Never {
    let hint = brokerKey == nil
        ? " (no broker key was given: a broker with CURVE on answers only clients with its public key; set QUAD_BROKER_KEY=$(deploy/stack keys) or QUAD_HOME)"
        : " (is the broker running, and is QUAD_BROKER_KEY this broker's public key?)"
    fail("no answer from \(flags["frontend"]!): \(message)\(hint)", code: 2)
}

/// A client of the frontend; with `signedIn`, carrying the session token of
/// --as (after logging in) or of --token / QUAD_TOKEN.
@MainActor func client(signedIn: Bool = true) -> Client {
    do {
        if flags.bool("internal") {
            return try Client(endpoint: defaults.internal, source: "quadctl/\(NSUserName())", isInternal: true)
        }
        let c = try Client(endpoint: flags["frontend"]!, source: "quadctl/\(NSUserName())", serverKey: brokerKey)
        guard signedIn else { return c }
        if let email = flags["as"] {
            c.token = login(email)["token"]?.string
        } else if let token = flags["token"], !token.isEmpty {
            if let claims = try? Token.unverifiedClaims(token), claims.expiresAt <= Int64(Clock.nowMillis()) {
                FileHandle.standardError.write(Data("quadctl: warning: the session token expired at \(iso(claims.expiresAt)); log in again: eval \"$(quadctl login EMAIL)\"\n".utf8))
            }
            c.token = token
        }
        return c
    } catch { fail("cannot connect to \(flags["frontend"]!): \(error)", code: 2) }
}

func iso(_ ms: Int64) -> String {
    ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
}

/// The password: --password; for the admin, the file deploy/stack made;
/// QUAD_PASSWORD; or asked on the terminal.
@MainActor func password(for email: String) -> String {
    if let p = flags["password"] { return p }
    if let p = adminPassword(for: email) { return p }
    if let p = ProcessInfo.processInfo.environment["QUAD_PASSWORD"], !p.isEmpty { return p }
    guard isatty(STDIN_FILENO) == 1, let typed = getpass("Password for \(email): ") else {
        fail("a password is needed for \(email): give --password or set QUAD_PASSWORD", code: 64)
    }
    return String(cString: typed)
}

/// The admin's password from its file, when `email` is the admin's: the
/// file is never on a command line, and QUAD_PASSWORD may hold a student's.
func adminPassword(for email: String) -> String? {
    let env = ProcessInfo.processInfo.environment
    let admin = env["QUAD_ADMIN_EMAIL"].flatMap { $0.isEmpty ? nil : $0 } ?? "admin@quad.campus"
    guard email.lowercased() == admin.lowercased() else { return nil }
    let file = env["QUAD_ADMIN_PASSWORD_FILE"].flatMap { $0.isEmpty ? nil : $0 } ?? env["QUAD_HOME"].map { $0 + "/keys/admin.password" }
    guard let file, let text = try? KeyFile.readLine(file), !text.isEmpty else { return nil }
    return text
}

/// The session token of --token or QUAD_TOKEN, or exit 64 saying so.
@MainActor func currentToken(for command: String) -> String {
    guard let token = flags["token"], !token.isEmpty else {
        fail("\(command) needs the session token: set QUAD_TOKEN (eval \"$(quadctl login EMAIL)\") or give --token", code: 64)
    }
    return token
}

/// Sends `request` and exits: the reply body (0), the error body (1), or no answer (2).
@MainActor func send(_ request: Envelope, with c: Client) -> Never {
    do {
        let reply = try c.call(request, timeoutMs: Int64(flags.integer("timeout")), attempts: max(1, flags.integer("attempts")))
        print(flags.bool("envelope") ? reply.json.text : reply.body.text)
        exit(reply.kind == .error ? 1 : 0)
    } catch {
        if error.code == .timeout { noAnswer(error.message) }
        print(error.body.text)
        exit(1)
    }
}

/// Logs in with accounts.login (sent without any token) and returns the
/// reply body; exits 1 with the reason when refused.
@MainActor func login(_ email: String) -> JSON {
    let body: JSON = ["email": .string(email), "password": .string(password(for: email))]
    do {
        return try client(signedIn: false).request("accounts.login", body, timeoutMs: Int64(flags.integer("timeout")), attempts: max(1, flags.integer("attempts")))
    } catch {
        if error.code == .timeout { noAnswer(error.message) }
        fail("cannot log in as \(email): \(error.message)", code: 1)
    }
}

@MainActor func call(_ type: String, _ body: JSON) -> Never {
    var request = Envelope.request(type, body: body, id: flags["id"] ?? MessageID.make())
    if flags.bool("trace") {
        // quadctl's own span is the root's parent: it logs no line, so the
        // broker's span heads the tree.
        let span = Span.child(of: nil)
        request.traceparent = span.traceparent
        FileHandle.standardError.write(Data("trace \(span.traceID)\n".utf8))
    }
    send(request, with: client())
}

let args = flags.positional
guard let command = args.first else { usageError("a command is required", usage: flags.usage) }
switch command {
case "call":
    guard args.count >= 2 else { usageError("call needs a request type, e.g. quadctl call catalog.categories", usage: flags.usage) }
    guard args.count <= 3 else { usageError("call takes TYPE and at most one JSON body", usage: flags.usage) }
    var body: JSON = .object([:])
    if args.count == 3 {
        do { body = try JSON.parse(args[2]) } catch { fail("the body is not valid JSON: \(error.message)", code: 64) }
    }
    call(args[1], body)
case "services":
    guard args.count == 1 else { usageError("services takes no arguments (--json for JSON)", usage: flags.usage) }
    printServices()
case "trace":
    guard args.count == 2 else { usageError("trace takes one trace ID (quadctl call --trace prints it)", usage: flags.usage) }
    printTrace(args[1])
case "types":
    guard args.count == 1 else { usageError("types takes no arguments (--json for JSON)", usage: flags.usage) }
    printTypes()
case "contract":
    if args.count == 4, args[1] == "check" {
        let body: JSON
        do { body = try JSON.parse(args[3]) } catch { fail("the body is not valid JSON: \(error.message)", code: 64) }
        guard Contract.operation(args[2]) != nil else { fail("the contract declares no request type \(args[2])", code: 1) }
        if let failure = Contract.validate(args[2], body) { print(failure.message); exit(1) }
        print("ok")
        exit(0)
    }
    guard args.count == 3, args[1] == "write" else {
        usageError("contract takes: write DIR (quadctl contract write protos), or check TYPE JSON", usage: flags.usage)
    }
    writeContract(into: args[2])
case "login":
    guard args.count == 2 else { usageError("login takes one EMAIL, e.g. quadctl login ana@uni.edu", usage: flags.usage) }
    let session = login(args[1])
    let token = session["token"]?.string ?? ""
    print("export QUAD_TOKEN=\(token)")
    let expires = session["expires_at"]?.int.map(iso) ?? "?"
    FileHandle.standardError.write(Data("quadctl: logged in as \(args[1]) (user \(session["user"]?.string ?? "?"), role \(session["role"]?.string ?? "?")) until \(expires)\n".utf8))
    exit(0)
case "refresh":
    guard args.count == 1 else { usageError("refresh takes no arguments", usage: flags.usage) }
    let old = currentToken(for: "refresh")
    let c = client()
    c.token = old
    do {
        let session = try c.request("accounts.refresh", ["token": .string(old)], timeoutMs: Int64(flags.integer("timeout")), attempts: max(1, flags.integer("attempts")))
        print("export QUAD_TOKEN=\(session["token"]?.string ?? "")")
        let expires = session["expires_at"]?.int.map(iso) ?? "?"
        FileHandle.standardError.write(Data("quadctl: new session token for user \(session["user"]?.string ?? "?") until \(expires); the old one is ended\n".utf8))
        exit(0)
    } catch {
        if error.code == .timeout { noAnswer(error.message) }
        fail("cannot refresh the session: \(error.message)", code: 1)
    }
case "logout":
    guard args.count == 1 || (args.count == 2 && args[1] == "all") else { usageError("logout takes nothing, or 'all'", usage: flags.usage) }
    let old = currentToken(for: "logout")
    let c = client()
    c.token = old
    var body: JSON = ["token": .string(old)]
    if args.count == 2 { body = ["token": .string(old), "all": true] }
    do {
        _ = try c.request("accounts.logout", body, timeoutMs: Int64(flags.integer("timeout")), attempts: max(1, flags.integer("attempts")))
        print("unset QUAD_TOKEN")
        FileHandle.standardError.write(Data("quadctl: logged out\(args.count == 2 ? " of every session" : "")\n".utf8))
        exit(0)
    } catch {
        if error.code == .timeout { noAnswer(error.message) }
        fail("cannot log out: \(error.message)", code: 1)
    }
case "register":
    guard args.count >= 4 else {
        usageError("register takes EMAIL NAME SEMESTER [CATEGORY...], e.g. quadctl register ana@uni.edu \"Ana Ruiz\" 3 Tech Study", usage: flags.usage)
    }
    guard let semester = Int64(args[3]) else { fail("SEMESTER must be an integer from 1 to 12, got '\(args[3])'", code: 64) }
    let body: JSON = [
        "email": .string(args[1]), "password": .string(password(for: args[1])), "name": .string(args[2]),
        "semester": .int(semester), "categories": .array(args.dropFirst(4).map { .string($0) }),
    ]
    send(Envelope.request("accounts.register", body: body, id: flags["id"] ?? MessageID.make()), with: client(signedIn: false))
case "watch":
    let topic = args.count > 1 ? args[1] : ""
    let limit = flags.integer("count")
    do {
        let context = ZMQContext()
        let sub = try context.socket(.sub)
        // Between hosts the events socket speaks CURVE (QUAD_SERVICE_KEY_FILE).
        try InternalCurve.secure(sub)
        // Every broker's events-out (a comma-separated list): each event
        // arrives once through each, and is printed once, by its source's seq.
        let brokers = Endpoints.list(flags["events-out"]!)
        for e in brokers { try sub.connect(e) }
        var lastSeq: [String: Int64] = [:]
        // Topics are "service/type"; TOPIC may be either a service or a type prefix.
        try sub.subscribe("")
        Shutdown.install()
        var seen = 0
        let reactor = Reactor(now: Clock.monotonicMillis)
        reactor.register(sub) { sub in
            while let frames = try? sub.receive(dontWait: true) {
                guard let last = frames.last, let first = frames.first else { continue }
                let frameTopic = String(decoding: first, as: UTF8.self)
                let type = frameTopic.split(separator: "/", maxSplits: 1).last.map(String.init) ?? frameTopic
                guard topic.isEmpty || frameTopic.hasPrefix(topic) || type.hasPrefix(topic) else { continue }
                if brokers.count > 1, let e = try? Envelope.decodeHeader(last, maxBytes: .max), let src = e.src, let seq = e.seq {
                    guard seq > lastSeq[src, default: 0] else { continue }
                    lastSeq[src] = seq
                }
                FileHandle.standardOutput.write(Data(last + [0x0A]))
                seen += 1
                if limit > 0 && seen >= limit { exit(0) }
            }
        }
        FileHandle.standardError.write(Data("quadctl: watching '\(topic.isEmpty ? "*" : topic)' on \(flags["events-out"]!)\n".utf8))
        try reactor.run(timeoutCap: 200, until: { Shutdown.isRequested })
        exit(0)
    } catch {
        fail("watch: \(error)", code: 1)
    }
default:
    usageError("unknown command '\(command)'", usage: flags.usage)
}

/// Writes every schema of the contract under `dir` (making folders), and
/// says how many files changed; files it does not write are left alone.
func writeContract(into dir: String) -> Never {
    var changed = 0
    for file in Contract.files {
        let url = URL(fileURLWithPath: dir).appendingPathComponent(file.path)
        if (try? String(contentsOf: url, encoding: .utf8)) == file.text { continue }
        do {
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(file.text.utf8).write(to: url)
            changed += 1
        } catch { fail("cannot write \(url.path): \(error)", code: 1) }
    }
    print("wrote \(changed) of \(Contract.files.count) schema files under \(dir)")
    exit(0)
}

/// Asks the broker which services have workers, then each of them what it
/// answers (`<service>.sys.types`), and prints one table (or JSON).
/// `quadctl services`: a table for people, the broker's own reply with --json.
@MainActor func printServices() -> Never {
    let c = client()
    do {
        let listed = try c.request("sys.services", .object([:]), timeoutMs: Int64(flags.integer("timeout")), attempts: max(1, flags.integer("attempts")))
        if flags.bool("json") { print(listed.text); exit(0) }
        let header = ["SERVICE", "WORKERS", "BUSY", "QUEUE", "ROUTED", "EXPIRED", "TIMED-OUT"]
        let table = (listed["services"]?.array ?? []).map { s -> [String] in
            let workers = s["workers"]?.array ?? []
            return [s["name"]?.string ?? "?", String(workers.count), String(workers.filter { $0["busy"]?.bool == true }.count),
                    String(s["queue"]?.int ?? 0), String(s["routed"]?.int ?? 0), String(s["expired"]?.int ?? 0), String(s["timed_out"]?.int ?? 0)]
        }
        let widths = header.indices.map { i in ([header[i]] + table.map { $0[i] }).map(\.count).max() ?? 0 }
        for line in [header] + table {
            print(line.enumerated().map { i, cell in i == line.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }.joined(separator: "  "))
        }
        print("""
            WORKERS registered with this broker now, BUSY of them on a request; QUEUE requests waiting for a worker; \
            ROUTED sent to a worker, EXPIRED dropped past their deadline in the queue, TIMED-OUT answered 504, since the broker started.
            """)
        exit(0)
    } catch {
        if error.code == .timeout { noAnswer(error.message) }
        fail("services: \(error.message)", code: 1)
    }
}

@MainActor func printTypes() -> Never {
    let c = client()
    let timeout = Int64(flags.integer("timeout"))
    let attempts = max(1, flags.integer("attempts"))
    do {
        let listed = try c.request("sys.services", .object([:]), timeoutMs: timeout, attempts: attempts)
        let names = (listed["services"]?.array ?? []).compactMap { s -> String? in
            guard let name = s["name"]?.string, s["workers"]?.array?.isEmpty == false else { return nil }
            return name
        }.sorted()
        var rows: [JSON] = []
        var failures: [String] = []
        for name in names {
            do {
                let answer = try c.request("\(name).sys.types", .object([:]), timeoutMs: timeout, attempts: attempts)
                for t in answer["types"]?.array ?? [] {
                    guard case .object(var f) = t else { continue }
                    f["service"] = .string(name)
                    rows.append(.object(f))
                }
            } catch { failures.append("\(name): \(error.message)") }
        }
        if flags.bool("json") {
            print(JSON.object(["types": .array(rows), "unanswered": .array(failures.map { .string($0) })]).text)
        } else {
            let header = ["TYPE", "KIND", "AUTH", "REQUEST", "REPLY"]
            let table = rows.map { r in ["type", "kind", "auth", "request", "reply"].map { r[$0]?.string ?? "-" } }
            let widths = header.indices.map { i in ([header[i]] + table.map { $0[i] }).map(\.count).max() ?? 0 }
            for line in [header] + table {
                print(line.enumerated().map { i, cell in i == line.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }.joined(separator: "  "))
            }
            for f in failures { FileHandle.standardError.write(Data("quadctl: no sys.types from \(f)\n".utf8)) }
        }
        exit(failures.isEmpty ? 0 : 1)
    } catch {
        if error.code == .timeout { noAnswer(error.message) }
        fail("types: \(error.message)", code: 1)
    }
}
