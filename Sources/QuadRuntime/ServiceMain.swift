import Foundation
import QuadMetrics
import QuadMessaging
import QuadStore
import QuadWire

/// What a service's domain library gives the runtime: its name, its schema,
/// and how to register its handlers and timers on a worker.
public protocol ServiceDomain {
    /// The first segment of every request type it answers.
    static var name: String { get }
    static var summary: String { get }
    /// The service's own migrations (the runtime adds idempotency and outbox).
    static var migrations: [Migration] { get }
    /// Extra command-line options, as (name, help, default).
    static var options: [(String, String, String?)] { get }
    /// Refuses options that are out of range, before the worker opens its
    /// store or connects: a command line refused leaves nothing behind.
    static func check(options: [String: String]) throws(UsageError)
    /// Registers handlers and timers. Runs once per worker, after migrations.
    static func install(on worker: Worker, db: Database, options: [String: String]) throws
    /// Whether every type it answers must be declared in the contract
    /// (Sources/QuadContract). Only test doubles (quad-tally) say no.
    static var isInContract: Bool { get }
}

extension ServiceDomain {
    public static func check(options: [String: String]) throws(UsageError) {}
    public static var options: [(String, String, String?)] { [] }
    public static var isInContract: Bool { true }
}

/// The whole `main` of a service executable: flags and environment, the
/// store, migrations, the worker loop. Returns the exit code for main: 0
/// after a clean shutdown (or `--help`), 1 on failure, 64 on a usage error.
public enum ServiceMain {
    public static func run<D: ServiceDomain>(_ domain: D.Type, arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Int32 {
        do { return try start(domain, arguments: arguments) } catch { return error.report() }
    }

    static func start<D: ServiceDomain>(_ domain: D.Type, arguments: [String]) throws(UsageError) -> Int32 {
        let env = ProcessInfo.processInfo.environment
        let defaults = Endpoints.fromEnvironment()
        let home = env["QUAD_HOME"].map { $0 + "/db" } ?? "."
        var flags = Flags(program: "quad-\(D.name)", summary: "quad-\(D.name): \(D.summary)\nOne worker of the \(D.name) service; start more to scale it.")
        flags.option("db", "SQLite file or postgres:// URL of the service's store", default: env["QUAD_\(D.name.uppercased())_DB"] ?? "\(home)/\(D.name).db")
        flags.option("instance", "name of this worker in logs and sys.services", default: "\(D.name)/\(getpid())")
        flags.option("backend", "broker endpoint for workers", default: defaults.backend)
        flags.option("events-in", "broker endpoint where events are published", default: defaults.eventsIn)
        flags.option("events-out", "broker endpoint where events are subscribed", default: defaults.eventsOut)
        flags.option("frontend", "broker endpoint for clients (unused by workers; accepted for symmetry)", default: defaults.frontend)
        flags.option("internal", "broker endpoint for requests to other services", default: defaults.internal)
        flags.option("heartbeat-ms", "heartbeat interval with the broker", default: String(WorkerProtocol.heartbeatMs))
        flags.option("max-message-bytes", "largest envelope accepted", default: String(Envelope.defaultMaxBytes))
        flags.option("metrics", "HOST:PORT where GET /metrics serves Prometheus's text format (port 0: any free one, logged), or off [QUAD_METRICS]",
                     default: env["QUAD_METRICS"] ?? "off")
        // The runtime's retention settings, on every service; a service
        // that declares one of these names itself (telemetry's
        // prune-every-ms) keeps its own help and default.
        let keep = Retention.defaults
        let retentionOptions: [(String, String, String)] = [
            ("idempotency-retention-ms", "how long a mutation's reply is kept for repeats of its id (idempotency_retention_ms)", String(keep.idempotencyMs)),
            ("outbox-retention-ms", "how long a published event is kept for events.since (outbox_retention_ms)", String(keep.outboxMs)),
            ("outbox-max-rows", "most events kept for events.since, the newest (outbox_max_rows)", String(keep.outboxMaxRows)),
            ("prune-every-ms", "how often old idempotency records and events are deleted (prune_every_ms)", String(keep.everyMs)),
            ("prune-batch", "rows deleted per pruning transaction (prune_batch)", String(keep.batch)),
        ]
        let loopOptions: [(String, String, String)] = [
            ("slow-handler-ms", "a handler that holds the loop longer than this is counted in sys.metrics and logged (slow_handler_ms)", "100"),
            ("max-calls-in-flight", "most calls to other services waiting for their answer at once (max_calls_in_flight)",
             String(ServiceCalls.defaultMaxInFlight)),
        ]
        let storeOptions: [(String, String, String)] = [
            ("busy-timeout-ms", "how long a SQLite statement waits for another worker's lock before a 503 (busy_timeout_ms)",
             String(SQLiteDatabase.defaultBusyTimeoutMs)),
            ("pg-reconnect-max-ms", "longest wait between attempts to reach a PostgreSQL server that went away (pg_reconnect_max_ms)",
             String(PostgresDatabase.defaultReconnectMaxMs)),
            ("pg-connect-timeout-s", "how long one attempt to connect to PostgreSQL may take, at least 2 (pg_connect_timeout_s)",
             String(PostgresDatabase.defaultConnectTimeoutS)),
        ]
        for (name, help, d) in retentionOptions + loopOptions + storeOptions where !D.options.contains(where: { $0.0 == name }) {
            let variable = "QUAD_" + name.uppercased().replacingOccurrences(of: "-", with: "_")
            flags.option(name, help + " [\(variable)]", default: env[variable] ?? d)
        }
        for (name, help, d) in D.options { flags.option(name, help, default: d) }
        flags.flag("migrate", "create or upgrade the store's tables (the service's migrations) and exit, without a broker: "
                   + "what an upgrade or a Kubernetes init container runs before the workers start")
        try flags.parse(arguments)

        let endpoints = Endpoints(frontend: flags["frontend"]!, backend: flags["backend"]!, eventsIn: flags["events-in"]!, eventsOut: flags["events-out"]!, internal: flags["internal"]!)
        let location = flags["db"]!
        let instance = flags["instance"]!
        let heartbeat = try flags.int("heartbeat-ms")
        let maxBytes = try flags.int("max-message-bytes")
        guard heartbeat >= 10 else { throw UsageError("--heartbeat-ms must be at least 10", usage: flags.usage) }
        guard maxBytes >= 1024 else { throw UsageError("--max-message-bytes must be at least 1024", usage: flags.usage) }
        var retention = Retention.defaults
        retention.idempotencyMs = Int64(try flags.int("idempotency-retention-ms"))
        retention.outboxMs = Int64(try flags.int("outbox-retention-ms"))
        retention.outboxMaxRows = Int64(try flags.int("outbox-max-rows"))
        retention.everyMs = Int64(try flags.int("prune-every-ms"))
        retention.batch = try flags.int("prune-batch")
        guard retention.idempotencyMs >= 1 else { throw UsageError("--idempotency-retention-ms must be at least 1", usage: flags.usage) }
        guard retention.outboxMs >= 1 else { throw UsageError("--outbox-retention-ms must be at least 1", usage: flags.usage) }
        guard retention.outboxMaxRows >= 1 else { throw UsageError("--outbox-max-rows must be at least 1", usage: flags.usage) }
        guard retention.everyMs >= 10 else { throw UsageError("--prune-every-ms must be at least 10", usage: flags.usage) }
        let slowMs = try flags.int("slow-handler-ms")
        let maxCalls = try flags.int("max-calls-in-flight")
        guard slowMs >= 1 else { throw UsageError("--slow-handler-ms must be at least 1", usage: flags.usage) }
        guard maxCalls >= 1 else { throw UsageError("--max-calls-in-flight must be at least 1", usage: flags.usage) }
        guard (1...100_000).contains(retention.batch) else { throw UsageError("--prune-batch must be from 1 to 100000", usage: flags.usage) }
        var store = StoreSettings()
        store.busyTimeoutMs = Int32(clamping: try flags.int("busy-timeout-ms"))
        store.pgReconnectMaxMs = Int64(try flags.int("pg-reconnect-max-ms"))
        store.pgConnectTimeoutS = try flags.int("pg-connect-timeout-s")
        guard store.busyTimeoutMs >= 1 else { throw UsageError("--busy-timeout-ms must be at least 1", usage: flags.usage) }
        guard store.pgReconnectMaxMs >= 50 else { throw UsageError("--pg-reconnect-max-ms must be at least 50", usage: flags.usage) }
        guard store.pgConnectTimeoutS >= 2 else { throw UsageError("--pg-connect-timeout-s must be at least 2 (libpq's minimum)", usage: flags.usage) }
        let metricsAddress = flags["metrics"].flatMap { $0 == "off" ? nil : $0 }
        if let address = metricsAddress {
            do { _ = try MetricsServer.parse(address) } catch { throw UsageError("\(error)", usage: flags.usage) }
        }
        try D.check(options: flags.values)
        do {
            if let curve = try InternalCurve.fromEnvironment() {
                Log.info(instance, "internal sockets: CURVE with the services' key \(curve.keys.publicText) (QUAD_SERVICE_KEY_FILE)")
            }
            if !location.contains("://") {
                let dir = (location as NSString).deletingLastPathComponent
                if !dir.isEmpty { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
            }
            let db = try openDatabase(location, settings: store)
            let ran = try Migrations.apply(db, ServiceTables.migrations, scope: "quad") + Migrations.apply(db, D.migrations, scope: D.name)
            if flags.bool("migrate") {
                let total = ServiceTables.migrations.count + D.migrations.count
                print("quad-\(D.name): store \(location.contains("://") ? "postgres" : location) is at its latest schema: "
                      + "\(ran) of its \(total) migrations applied now, \(total - ran) were already")
                return 0
            }
            let handlers = Handlers(service: D.name, instance: instance, db: db)
            let worker = try Worker(handlers: handlers, endpoints: endpoints, heartbeatMs: Int64(heartbeat))
            worker.maxMessageBytes = maxBytes
            worker.retention = retention
            worker.maxCallsInFlight = maxCalls
            if let address = metricsAddress { worker.metricsAddress = address }
            handlers.metrics.slowHandlerMs = Int64(slowMs)
            try D.install(on: worker, db: db, options: flags.values)
            // Every type a worker answers is in the contract (Sources/QuadContract):
            // one that is not has no schema, no validation, no sys.types row.
            if D.isInContract, !handlers.undeclared.isEmpty {
                throw QuadError.internal("handlers for types the contract does not declare: \(handlers.undeclared.joined(separator: ", "))")
            }
            Log.info(instance, "store \(location.contains("://") ? "postgres" : location)")
            return worker.run()
        } catch let usage as UsageError {
            throw usage
        } catch {
            Log.error(instance, "cannot start: \(error)")
            FileHandle.standardError.write(Data("quad-\(D.name): cannot start: \(error)\n".utf8))
            return 1
        }
    }
}
