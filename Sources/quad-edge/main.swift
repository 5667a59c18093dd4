import Foundation
import QuadEdge
import QuadMetrics
import QuadRuntime
import QuadWire

/// A refused command line: the error and the usage on stderr, exit 64.
/// Only an executable's main exits; the libraries throw ``UsageError``.
func usageError(_ message: String, usage: String) -> Never { exit(UsageError(message, usage: usage).report()) }
extension Flags { func integer(_ name: String) -> Int { do { return try int(name) } catch { exit(error.report()) } } }

let env = ProcessInfo.processInfo.environment
let defaults = Endpoints.fromEnvironment()
var flags = Flags(program: "quad-edge", summary: """
    quad-edge: emulated phones that keep working without signal and lose nothing.

    Commands:
      serve (default)      run the phones and wait for the harness on the control socket
      run                  a seeded campus day: simulated students on every phone, a
                           progress line on stderr, then a report in words and as JSON
                           (exit 0 when every action is done or rejected with a reason)

    Each phone is one SQLite file in --dir (its session, outbox, saved copies,
    telemetry queue and history); a phone that ran before continues where it
    stopped. Control the phones with `quadctl phone ...` (--control).

    A campus day survives its process being killed (SIGKILL): `run` again
    with the same --seed and --dir (and the remaining --duration) goes on
    with it (--duration 0 when its clock has run out: straight to the
    drain and the report). Every phone keeps its account and session (no second
    registration), resends what its outbox held under the same request ids
    (the services apply each once), keeps its telemetry, saved copies and
    caches. The students go on with new activities (new actions, new ids;
    not a replay of the first process's choices). The report covers the
    whole day: actions are counted from the phones' files since the day
    began; its "resumed" object gives the restarts, the phones that were in
    the day, and the figures ("since_this_run") that count only since this
    process started. A day that reached its report is finished: a later run
    with the same seed begins a new one.
    """)
flags.option("frontend", "broker endpoint for requests", default: defaults.frontend)
flags.option("updates", "the brokers' updates sockets (comma-separated) the phones subscribe to for live updates and their news; auto: beside each frontend (its port + 9); off: none, the phones poll (env QUAD_UPDATES)",
             default: env["QUAD_UPDATES"].flatMap { $0.isEmpty ? nil : $0 } ?? "auto")
flags.option("broker-key", "the broker's CURVE public key (Z85, @FILE or off); default QUAD_BROKER_KEY, QUAD_BROKER_KEY_FILE, or $QUAD_HOME/keys/broker.pub")
flags.option("phones", "how many phones this process runs (1,000 a process is what the project measures; more where the machine's limits allow, checked at start; deploy/campus runs more over several processes)", default: "1")
flags.option("prefix", "phone names are PREFIX-001, PREFIX-002, ...", default: "phone")
flags.option("dir", "folder of the phones' files", default: (env["QUAD_HOME"].map { $0 + "/phones" } ?? "./phones"))
flags.option("control", "control socket (ROUTER) for the harness and quadctl phone, or 'none'; default QUAD_EDGE_CONTROL (deploy/stack env sets it: port base + 88)",
             default: env["QUAD_EDGE_CONTROL"].flatMap { $0.isEmpty ? nil : $0 } ?? "tcp://127.0.0.1:7788")
flags.option("file-locking", "exclusive: each phone's file is locked by this process while it runs (no lock, journal or cache check per transaction; another process cannot open it meanwhile); shared: other processes may read and write the files while the phones run, each transaction taking its locks (a harness's history recorder) [QUAD_EDGE_FILE_LOCKING]",
             default: env["QUAD_EDGE_FILE_LOCKING"].flatMap { $0.isEmpty ? nil : $0 } ?? "exclusive")
flags.option("file-sql", "a file of SQL run on each phone's file every time it is opened, a new one included, before the phone uses it (a harness's triggers: deploy/chaos's history recorder)", default: "")
flags.option("record-views", "on: each phone logs what its views showed, and what its actions read and made, with versions, in its file's shown table, and a campus day ends with a final read (deploy/checker.py's session guarantees; deploy/chaos run sets it); off: no log", default: "off")
flags.option("control-bind-wait-ms", "how long to keep trying to bind --control when it is taken (a killed process's endpoint, control_bind_wait_ms)", default: "5000")
flags.option("action-timeout-ms", "how long each attempt of an action waits for an answer", default: "2500")
flags.option("read-timeout-ms", "how long a view waits for the network before its saved copy", default: "1500")
flags.option("backoff-base-ms", "first retry delay of an action that got no answer", default: "250")
flags.option("backoff-cap-ms", "longest retry delay", default: "8000")
flags.option("send-window", "most queued actions in flight at once, one per service (send_window; 1: one at a time, in order across services; more: each service's in order)", default: "1")
flags.option("refresh-before-ms", "a session is renewed with accounts.refresh this long before its token expires (refresh_before_ms)", default: "300000")
flags.option("keychain-pin-file", "a file (mode 0600) holding the PIN every phone's keychain is locked with (its key derived with Argon2id); default: each keychain's key in a 0600 key file beside it")
flags.option("telemetry-batch", "most events in one telemetry.ingest", default: "100")
flags.option("telemetry-every-ms", "how often queued telemetry is sent while online (at once when the network comes back, and at the end of a campus day)", default: "2000")
flags.option("idle-after-ms", "a phone whose outbox stays empty this long goes back to its idle journal and sizes (idle_after_ms)", default: "5000")
flags.option("image-cache-files", "files each of a phone's disk image caches keeps, least recently used evicted (image_cache_files)", default: "50")
flags.option("image-cache-days", "days a picture stays in a phone's disk cache before it is fetched again (image_cache_days)", default: "30")
flags.option("image-memory-entries", "pictures ParkWise's memory cache keeps per phone (image_memory_entries)", default: "20")
flags.option("image-memory-bytes", "bytes ParkWise's memory cache keeps per phone, whichever limit comes first (image_memory_bytes)", default: "20971520")
flags.option("max-image-bytes", "the largest picture a phone accepts from the network; bigger is refused, not cached (max_image_bytes)", default: "1048576")
flags.option("image-fetch-window", "pictures fetched at once by all the phones of this process (image_fetch_window)", default: "8")
flags.option("image-timeout-ms", "how long a picture's fetch waits for the image server (image_timeout_ms)", default: "3000")
flags.option("listings", "run: on: one student in ten lists an item (a picture with catalog.images.put, then catalog.listings.create); off: none", default: "on")
flags.option("cart-edits", "run: on (default): students change their carts (a quantity, a line out, the cart emptied), offline too; off: they only add to them (env QUAD_CART_EDITS)",
             default: env["QUAD_CART_EDITS"].flatMap { $0.isEmpty ? nil : $0 } ?? "on")
flags.option("seed", "run: the campus day's seed", default: "1")
flags.option("speed", "run: think times are divided by this", default: "1")
flags.option("duration", "run: seconds the campus day lasts (0: none left, a resumed day goes straight to its drain and report)", default: "60")
flags.option("sign-in-first", "run: on: every phone signs in (registers) before the day's clock starts, timed on its own; off: the day begins with every registration at once", default: "on")
flags.option("sign-in-timeout", "run: seconds to wait for the sign-ins before the day starts anyway", default: "300")
flags.option("sign-in-window", "run: most sign-ins in flight at once before the day (sign_in_window)", default: "8")
flags.option("hold-seconds", "run: how long students believe a parking hold lasts before the phone knows", default: "600")
flags.option("drain-timeout", "run: seconds to wait for the outboxes to drain after the day", default: "120")
flags.option("report", "run: also write the JSON report to this file")
flags.option("metrics", "HOST:PORT where GET /metrics serves Prometheus's text format: phones online, queued actions, actions sent, acknowledged and failed, requests by type and status (port 0: any free one, logged), or off [QUAD_EDGE_METRICS]",
             default: env["QUAD_EDGE_METRICS"] ?? "off")
do { try flags.parse(allowPositional: true) } catch { exit(error.report()) }

let command = flags.positional.first ?? "serve"
guard ["serve", "run"].contains(command), flags.positional.count <= 1 else {
    usageError("unknown command '\(flags.positional.joined(separator: " "))': expected serve or run", usage: flags.usage)
}

@MainActor func positive(_ name: String, _ range: ClosedRange<Int>) -> Int {
    let n = flags.integer(name)
    guard range.contains(n) else { usageError("--\(name) must be from \(range.lowerBound) to \(range.upperBound), got \(n)", usage: flags.usage) }
    return n
}

var settings = EdgeSettings(frontend: flags["frontend"]!)
switch flags["updates"]! {
case "auto": break
case "off": settings.updates = ""
case let list: settings.updates = list
}
do throws(QuadError) {
    if let given = flags["broker-key"] { settings.brokerKey = try BrokerKey.parse(given) } else { settings.brokerKey = try BrokerKey.fromEnvironment() }
} catch {
    usageError(error.message, usage: flags.usage)
}
settings.actionTimeoutMs = Int64(positive("action-timeout-ms", 50...600_000))
settings.readTimeoutMs = Int64(positive("read-timeout-ms", 50...600_000))
settings.backoffBaseMs = Int64(positive("backoff-base-ms", 1...600_000))
settings.backoffCapMs = Int64(positive("backoff-cap-ms", 1...3_600_000))
settings.sendWindow = positive("send-window", 1...64)
switch flags["file-locking"] {
case "exclusive": settings.exclusiveFiles = true
case "shared": settings.exclusiveFiles = false
default: usageError("--file-locking must be exclusive or shared", usage: flags.usage)
}
settings.refreshBeforeMs = Int64(positive("refresh-before-ms", 1_000...86_400_000))
if let path = flags["file-sql"], !path.isEmpty {
    guard let sql = try? String(contentsOfFile: path, encoding: .utf8) else {
        usageError("--file-sql: cannot read \(path)", usage: flags.usage)
    }
    settings.fileSQL = sql
}
switch flags["record-views"] {
case "on": settings.recordShown = true
case "off": settings.recordShown = false
default: usageError("--record-views must be on or off", usage: flags.usage)
}
if let file = flags["keychain-pin-file"] {
    do {
        try KeyFile.requirePrivate(file, what: "the keychain PIN file")
        settings.keychainPIN = try KeyFile.readLine(file, what: "the keychain PIN file")
    } catch {
        usageError("--keychain-pin-file: \(error.message)", usage: flags.usage)
    }
}
settings.telemetryBatch = positive("telemetry-batch", 1...1000)
settings.telemetryEveryMs = Int64(positive("telemetry-every-ms", 10...3_600_000))
settings.idleAfterMs = Int64(positive("idle-after-ms", 1...3_600_000))
settings.images.files = positive("image-cache-files", 1...100_000)
settings.images.days = Int64(positive("image-cache-days", 1...3_650))
settings.images.memoryEntries = positive("image-memory-entries", 0...100_000)
settings.images.memoryBytes = positive("image-memory-bytes", 0...(1 << 30))
settings.images.maxImageBytes = positive("max-image-bytes", 1...(64 << 20))
settings.images.timeoutMs = Int64(positive("image-timeout-ms", 50...600_000))
EdgeSettings.imageFetchWindow = positive("image-fetch-window", 1...64)
// A phone takes two ZeroMQ sockets (requests, live updates: to one broker at
// a time) and about seven open files; the context is sized from --phones and
// the limits are checked before any phone opens (Fleet.Needs).
let count = positive("phones", 1...100_000)
let seed = positive("seed", 0...Int(Int32.max))
let control = flags["control"] == "none" ? nil : flags["control"]

var day: CampusDay?
if command == "run" {
    var options = CampusDay.Options()
    options.seed = UInt64(seed)
    guard let speed = Double(flags["speed"]!), speed > 0, speed <= 10_000 else {
        usageError("--speed must be a number above 0 and at most 10000", usage: flags.usage)
    }
    options.speed = speed
    options.durationMs = Int64(positive("duration", 0...86_400)) * 1000
    options.holdSeconds = Int64(positive("hold-seconds", 1...86_400))
    options.drainTimeoutMs = Int64(positive("drain-timeout", 1...86_400)) * 1000
    options.reportPath = flags["report"]
    switch flags["sign-in-first"] {
    case "on":
        options.signInFirst = true
        settings.signInAtStart = false  // the day signs them in, a few at a time
    case "off": options.signInFirst = false
    default: usageError("--sign-in-first must be on or off", usage: flags.usage)
    }
    options.signInTimeoutMs = Int64(positive("sign-in-timeout", 1...86_400)) * 1000
    options.signInWindow = positive("sign-in-window", 1...1000)
    switch flags["listings"] {
    case "on": options.listings = true
    case "off": options.listings = false
    default: usageError("--listings must be on or off", usage: flags.usage)
    }
    switch flags["cart-edits"] {
    case "on": options.cartEdits = true
    case "off": options.cartEdits = false
    default: usageError("--cart-edits must be on or off", usage: flags.usage)
    }
    day = CampusDay(options: options)
}

// What the phones need of the machine (ZeroMQ sockets, open files), known
// before the first opens: the soft limit on open files is raised to it, and
// a process the machine cannot give it to does not start.
let needs = Fleet.Needs(phones: count, settings: settings, control: control != nil)
do throws(QuadError) { try Fleet.reserve(needs) } catch {
    FileHandle.standardError.write(Data("quad-edge: cannot start: \(error.message)\n".utf8))
    exit(1)
}

do {
    let fleet = try Fleet(settings: settings, dir: flags["dir"]!, count: count, prefix: flags["prefix"]!, seed: UInt64(seed), control: control,
                          controlBindWaitMs: Int64(positive("control-bind-wait-ms", 0...600_000)))
    if let address = flags["metrics"], address != "off" {
        do { _ = try fleet.serveMetrics(address) } catch let error as MetricsError {
            usageError(error.description, usage: flags.usage)
        }
    }
    exit(fleet.run(day: day))
} catch {
    FileHandle.standardError.write(Data("quad-edge: cannot start: \(error)\n".utf8))
    exit(1)
}
