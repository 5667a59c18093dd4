import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// The parking service, after ParkWise: the campus's lots, levels and spots
/// with live free counts; holds with a countdown, check-in, check-out;
/// an occupancy simulator with snapshots every 15 simulated minutes; the
/// forecast built from those snapshots; nearby lots for when campus is full;
/// and where the driver left the car.
///
/// One holder per spot and one active reservation per user are unique
/// indexes of the store, so no interleaving of workers can break them.
public enum Reservations: ServiceDomain {
    public static let name = "reservations"
    public static let summary = "campus parking: lots, levels, spots, holds with a countdown, check-in, forecast"

    /// Each default can be changed with QUAD_RESERVATIONS_<OPTION> in the
    /// environment (QUAD_RESERVATIONS_SIM_SPEED=96), so a stack started by
    /// deploy/stack can be tuned without editing the launcher.
    public static let options: [(String, String, String?)] = [
        ("hold-seconds", "how long a hold lasts before it expires and the spot is free again", "600"),
        ("sim", "occupancy simulator: on or off", "on"),
        ("sim-speed", "simulated seconds per real second (96: a day in 15 minutes; at most 1000)", "1"),
        ("history-days", "days of past snapshots the simulator writes on a store's first start, so the forecast has samples (the last day's are published too, for the dashboard's hourly heatmaps)", "14"),
        ("sim-start", "where the simulated clock starts on a store's first start: an ISO 8601 time or HH:MM today (default: now)", nil),
        ("utc-offset-minutes", "campus time zone, for the weekday and hour a forecast compares", "-300"),
        ("images-http", "HOST:PORT where GET /images/<sha256> serves the lots' and buildings' photos, or off", "off"),
        ("images-base-url", "what photo_url starts with (default: http://HOST:PORT of --images-http)", nil),
    ].map { name, help, d in
        let variable = "QUAD_RESERVATIONS_" + name.uppercased().replacingOccurrences(of: "-", with: "_")
        let fromEnvironment = ProcessInfo.processInfo.environment[variable].flatMap { $0.isEmpty ? nil : $0 }
        return (name, help + " [\(variable)]", fromEnvironment ?? d)
    }

    /// The service's settings, from its command-line options.
    public struct Settings: Sendable {
        public var holdSeconds: Int64 = 600
        public var simulate = true
        public var simSpeed: Double = 1
        public var historyDays: Int64 = 14
        /// Where the simulated clock starts on a store's first start; now when nil.
        public var simStart: Int64?
        public var utcOffsetMinutes: Int64 = -300

        public init() {}

        var clock: CampusTime { CampusTime(offsetMinutes: utcOffsetMinutes) }

        /// Reads the options; the message names the option and its limits.
        public init(options: [String: String]) throws(QuadError) {
            func int(_ name: String, _ range: ClosedRange<Int64>, _ d: Int64) throws(QuadError) -> Int64 {
                guard let text = options[name] else { return d }
                guard let n = Int64(text), range.contains(n) else {
                    throw .badRequest("--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
                }
                return n
            }
            holdSeconds = try int("hold-seconds", 1...86_400, 600)
            historyDays = try int("history-days", 0...90, 14)
            utcOffsetMinutes = try int("utc-offset-minutes", -720...840, -300)
            switch options["sim"] ?? "on" {
            case "on": simulate = true
            case "off": simulate = false
            case let other: throw .badRequest("--sim must be on or off, got '\(other)'")
            }
            let speedText = options["sim-speed"] ?? "1"
            guard let speed = Double(speedText), speed > 0, speed <= 1000 else {
                throw .badRequest("--sim-speed must be a number above 0 and at most 1000, got '\(speedText)'")
            }
            simSpeed = speed
            if let text = options["sim-start"] {
                guard let start = Moment.parse(text, clock: clock, now: Int64(Clock.nowMillis())) else {
                    throw .badRequest("--sim-start must be an ISO 8601 time (2025-03-03T07:30:00-05:00) or HH:MM, got '\(text)'")
                }
                simStart = start
            }
        }
    }

    public static let migrations: [Migration] = [
        Migration(1, """
            CREATE TABLE lots (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('campus', 'nearby')),
                address TEXT NOT NULL,
                distance_m BIGINT NOT NULL,
                lat DOUBLE PRECISION NOT NULL,
                lon DOUBLE PRECISION NOT NULL,
                position BIGINT NOT NULL
            );
            CREATE TABLE levels (
                id TEXT PRIMARY KEY,
                lot TEXT NOT NULL REFERENCES lots (id),
                name TEXT NOT NULL,
                floor BIGINT NOT NULL,
                signal TEXT NOT NULL CHECK (signal IN ('good', 'weak', 'none')),
                UNIQUE (lot, name)
            );
            CREATE TABLE spots (
                id TEXT PRIMARY KEY,
                lot TEXT NOT NULL REFERENCES lots (id),
                level TEXT NOT NULL REFERENCES levels (id),
                number BIGINT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('regular', 'accessible', 'ev')),
                walk_m BIGINT NOT NULL,
                sim_car INTEGER NOT NULL DEFAULT 0,
                reservation TEXT
            );
            CREATE INDEX spots_level ON spots (level, kind);
            CREATE INDEX spots_lot ON spots (lot, kind);
            CREATE UNIQUE INDEX spots_one_reservation ON spots (reservation) WHERE reservation IS NOT NULL;
            CREATE TABLE destinations (id TEXT PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE walks (
                destination TEXT NOT NULL REFERENCES destinations (id),
                lot TEXT NOT NULL REFERENCES lots (id),
                walk_m BIGINT NOT NULL,
                PRIMARY KEY (destination, lot)
            );
            CREATE TABLE reservations (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                spot TEXT NOT NULL REFERENCES spots (id),
                status TEXT NOT NULL CHECK (status IN ('held', 'checked_in', 'checked_out', 'expired', 'cancelled')),
                held_ms BIGINT NOT NULL,
                deadline_ms BIGINT NOT NULL,
                checked_in_ms BIGINT,
                ended_ms BIGINT
            );
            CREATE UNIQUE INDEX reservations_one_active_per_user ON reservations (user_id) WHERE status IN ('held', 'checked_in');
            CREATE UNIQUE INDEX reservations_one_holder_per_spot ON reservations (spot) WHERE status IN ('held', 'checked_in');
            CREATE INDEX reservations_due ON reservations (deadline_ms) WHERE status = 'held';
            CREATE INDEX reservations_user ON reservations (user_id, held_ms);
            CREATE TABLE cars (
                user_id TEXT PRIMARY KEY,
                lat DOUBLE PRECISION NOT NULL,
                lon DOUBLE PRECISION NOT NULL,
                level TEXT,
                note TEXT NOT NULL,
                saved_ms BIGINT NOT NULL
            );
            CREATE TABLE snapshots (
                level TEXT NOT NULL REFERENCES levels (id),
                lot TEXT NOT NULL,
                at_ms BIGINT NOT NULL,
                weekday BIGINT NOT NULL,
                hour BIGINT NOT NULL,
                free_regular BIGINT NOT NULL,
                free_accessible BIGINT NOT NULL,
                free_ev BIGINT NOT NULL,
                total_regular BIGINT NOT NULL,
                total_accessible BIGINT NOT NULL,
                total_ev BIGINT NOT NULL,
                PRIMARY KEY (level, at_ms)
            );
            CREATE INDEX snapshots_slot ON snapshots (lot, weekday, hour);
            CREATE INDEX snapshots_time ON snapshots (lot, at_ms);
            CREATE TABLE simulator (
                one INTEGER PRIMARY KEY CHECK (one = 1),
                sim_ms BIGINT NOT NULL,
                real_ms BIGINT NOT NULL,
                next_snapshot_ms BIGINT NOT NULL,
                owner TEXT NOT NULL,
                lease_until_ms BIGINT NOT NULL
            );
            """),
    ] + Photos.migrations + LiveLevels.migrations + Holds.migrations

    public static func check(options: [String: String]) throws(UsageError) {
        _ = try settings(options)
    }

    static func settings(_ options: [String: String]) throws(UsageError) -> Settings {
        do { return try Settings(options: options) } catch {
            throw UsageError(error.message, usage: "Run quad-reservations --help for the options.\n")
        }
    }

    public static func install(on worker: Worker, db: Database, options: [String: String]) throws {
        let settings = try settings(options)
        try Campus.seedIfEmpty(db)
        try LiveLevels.publishAll(db)
        try Photos.install(on: worker, db: db, options: options)
        register(worker.handlers, db: db, settings: settings)
        // Holds whose deadline passed while no worker ran are released
        // before the first request; then on time, every 200 ms.
        try Holds.expireDue(db, now: Int64(Clock.nowMillis()), clock: settings.clock)
        worker.every(200) { try Holds.expireDue(db, now: Int64(Clock.nowMillis()), clock: settings.clock) }
        if settings.simulate {
            let simulator = Simulator(db: db, settings: settings, owner: worker.handlers.instance)
            try simulator.start()
            worker.every(500) { try simulator.tick() }
        }
        Log.info(worker.handlers.instance, "holds last \(settings.holdSeconds) s; simulator \(settings.simulate ? "on at \(settings.simSpeed)x" : "off")")
    }

    /// Registers the handlers; split from ``install`` so tests can drive them
    /// without a broker.
    public static func register(_ h: Handlers, db: Database, settings: Settings) {
        Places.register(h, db: db, settings: settings)
        Holds.register(h, db: db, settings: settings)
        Forecast.register(h, db: db, settings: settings)
        Car.register(h, db: db)
    }

    /// Current time on the simulated campus: the simulator's clock while it
    /// runs (it may run faster than the wall), the wall clock otherwise.
    static func campusNow(_ db: Database, settings: Settings) throws -> Int64 {
        let now = Int64(Clock.nowMillis())
        guard settings.simulate, let row = try db.queryOne("SELECT sim_ms, real_ms FROM simulator WHERE one = 1") else { return now }
        return row.int("sim_ms") + Int64(Double(max(0, now - row.int("real_ms"))) * settings.simSpeed)
    }
}

typealias Settings = Reservations.Settings
