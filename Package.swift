// swift-tools-version:6.0
import PackageDescription

// Deliberate faults (Sources/QuadRuntime/Faults.swift, Sources/QuadEdge/
// SessionFaults.swift), so the chaos checker is shown to fail on a broken
// build: compiled into debug builds only (what `swift test` and
// Tests/e2e/test_chaos_faults.py run), never into a release build, whatever
// the environment says (the test checks the release binaries hold none).
let faultSwitches: [SwiftSetting] = [.define("QUAD_FAULTS", .when(configuration: .debug))]

let package = Package(
    name: "Quad",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "quad-broker", targets: ["quad-broker"]),
        .executable(name: "quad-catalog", targets: ["quad-catalog"]),
        .executable(name: "quad-favorites", targets: ["quad-favorites"]),
        .executable(name: "quad-notifications", targets: ["quad-notifications"]),
        .executable(name: "quad-orders", targets: ["quad-orders"]),
        .executable(name: "quad-accounts", targets: ["quad-accounts"]),
        .executable(name: "quad-reservations", targets: ["quad-reservations"]),
        .executable(name: "quad-telemetry", targets: ["quad-telemetry"]),
        .executable(name: "quad-analytics", targets: ["quad-analytics"]),
        .executable(name: "quad-edge", targets: ["quad-edge"]),
        .executable(name: "quadctl", targets: ["quadctl"]),
        .executable(name: "quad-tally", targets: ["quad-tally"]),
        .executable(name: "quad-bench", targets: ["quad-bench"]),
    ],
    targets: [
        // C libraries, each a modulemap plus a shim header. Only the wrapper
        // module next to each one imports it.
        .systemLibrary(name: "CZeroMQ", pkgConfig: "libzmq", providers: [.apt(["libzmq3-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),

        // The wire: envelope, error, JSON values, ids, and key files (KeyFile).
        .target(name: "QuadWire"),
        // The contract, written once: every request, reply and event body
        // as a Shape, from which protos/ is generated and requests are checked.
        // The schema engine (shapes, the validator, typed bodies), and the
        // contract's declarations of every service on it.
        .target(name: "QuadSchema", dependencies: ["QuadWire"]),
        .target(name: "QuadContract", dependencies: ["QuadSchema", "QuadWire"]),
        // ZeroMQ: context, sockets, frames, poller, the one Timers of every loop.
        .target(name: "QuadMessaging", dependencies: ["CZeroMQ"]),
        // Stores: SQLite and PostgreSQL behind one interface, migrations,
        // idempotency records and the transactional outbox. SQL values, rows
        // and bytes only: it knows no envelope and no other Quad module.
        .target(name: "QuadStore", dependencies: ["CSQLite", "CPostgres"]),
        // What every process shares, the broker included, with no store:
        // flags, endpoints, log lines, shutdown, the worker protocol, whom a
        // request belongs to, the one requester's rules and CURVE key pairs.
        .target(name: "QuadProcess", dependencies: ["QuadWire", "QuadMessaging"]),
        // The HTTP server under /metrics, /images and the dashboard:
        // libmicrohttpd's threads, bounded, a request body only up to a limit.
        .target(name: "QuadHTTP", dependencies: ["CMicroHTTPD"]),
        // Prometheus metrics: a registry of counters, gauges and histograms
        // and the `/metrics` HTTP endpoint, for every process, the broker included.
        .target(name: "QuadMetrics", dependencies: ["QuadHTTP"]),
        // The service runtime (worker loop, outbox relay, the event envelope
        // the outbox keeps) and the client. Re-exports QuadProcess.
        .target(name: "QuadRuntime", dependencies: ["QuadWire", "QuadContract", "QuadMessaging", "QuadStore", "QuadProcess", "QuadMetrics"], swiftSettings: faultSwitches),
        // Session tokens (Ed25519), key files and password hashes: the only
        // module that imports CSodium.
        .target(name: "QuadAuth", dependencies: ["CSodium", "QuadWire"]),
        // The broker: Majordomo-style routing plus the event proxy. It never
        // links a store (no QuadRuntime, QuadStore, SQLite or libpq):
        // Tests/QuadRuntimeTests/BrokerLinkTests.swift checks with ldd.
        .target(name: "QuadBroker", dependencies: ["QuadWire", "QuadMessaging", "QuadProcess", "QuadAuth", "QuadMetrics"]),
        // Service domains.
        // Pictures kept by content (SHA-256), checked by their bytes, served
        // over HTTP at /images/<sha256>: catalog's and reservations'.
        .target(name: "QuadImages", dependencies: ["QuadHTTP", "QuadWire", "QuadStore"]),
        .target(name: "QuadCatalog", dependencies: ["QuadImages", "QuadContract", "QuadWire", "QuadStore", "QuadRuntime"]),
        // A service's own copy of the catalog, kept from catalog's events.
        .target(name: "QuadCatalogCopy", dependencies: ["QuadContract", "QuadWire", "QuadStore"]),
        .target(name: "QuadFavorites", dependencies: ["QuadContract", "QuadWire", "QuadStore", "QuadRuntime", "QuadCatalogCopy"]),
        .target(name: "QuadNotifications", dependencies: ["QuadContract", "QuadWire", "QuadStore", "QuadRuntime"]),
        .target(name: "QuadOrders", dependencies: ["QuadContract", "QuadWire", "QuadStore", "QuadRuntime", "QuadCatalogCopy"], swiftSettings: faultSwitches),
        .target(name: "QuadAccounts", dependencies: ["QuadContract", "QuadAuth", "QuadWire", "QuadStore", "QuadRuntime"]),
        .target(name: "QuadReservations", dependencies: ["QuadImages", "QuadContract", "QuadWire", "QuadStore", "QuadRuntime"]),
        .target(name: "QuadTelemetry", dependencies: ["QuadContract", "QuadWire", "QuadStore", "QuadRuntime"]),
        // The edge agent, in three layers. The phone client kit: the link to
        // the brokers, the keychain, the image cache, backoff and timers.
        .target(name: "QuadPhoneKit", dependencies: ["QuadAuth", "QuadImages", "QuadWire", "QuadMessaging", "QuadStore", "QuadRuntime"]),
        // The phone app's domain on it: the store and its outbox, the sender,
        // the live feed, views, actions, spending, news, telemetry.
        .target(name: "QuadPhone", dependencies: ["QuadPhoneKit", "QuadAuth", "QuadContract", "QuadWire", "QuadMessaging", "QuadStore", "QuadRuntime", "QuadMetrics"],
                swiftSettings: faultSwitches),
        // The campus-day simulator: emulated phones, one SQLite file each, on
        // one poll loop; the fleet, the day, its report, the control socket.
        .target(name: "QuadEdge", dependencies: ["QuadPhone", "QuadPhoneKit", "QuadAuth", "QuadImages", "QuadWire", "QuadMessaging", "QuadStore", "QuadRuntime", "QuadMetrics"],
                swiftSettings: faultSwitches),
        // The business questions are SQL files, copied as resources.
        .target(name: "QuadAnalytics", dependencies: ["QuadHTTP", "QuadAuth", "QuadContract", "QuadWire", "QuadStore", "QuadMessaging", "QuadRuntime"],
                resources: [.copy("questions")]),

        // Thin executables.
        .executableTarget(name: "quad-broker", dependencies: ["QuadBroker", "QuadProcess", "QuadAuth", "QuadWire", "QuadMetrics"]),
        .executableTarget(name: "quad-catalog", dependencies: ["QuadCatalog", "QuadRuntime"]),
        .executableTarget(name: "quad-favorites", dependencies: ["QuadFavorites", "QuadRuntime"]),
        .executableTarget(name: "quad-notifications", dependencies: ["QuadNotifications", "QuadRuntime"]),
        .executableTarget(name: "quad-orders", dependencies: ["QuadOrders", "QuadRuntime"]),
        .executableTarget(name: "quad-accounts", dependencies: ["QuadAccounts", "QuadRuntime"]),
        .executableTarget(name: "quad-reservations", dependencies: ["QuadReservations", "QuadRuntime"]),
        .executableTarget(name: "quad-telemetry", dependencies: ["QuadTelemetry", "QuadRuntime"]),
        .executableTarget(name: "quad-analytics", dependencies: ["QuadAnalytics", "QuadRuntime"]),
        .executableTarget(name: "quad-edge", dependencies: ["QuadEdge", "QuadRuntime", "QuadMetrics", "QuadWire"]),
        .executableTarget(name: "quadctl", dependencies: ["QuadRuntime", "QuadWire", "QuadAuth", "QuadContract", "QuadMessaging"]),
        // Quad's side of the benchmarks (deploy/bench).
        .executableTarget(name: "quad-bench", dependencies: ["QuadRuntime", "QuadMessaging", "QuadWire"]),
        // A counter service the runtime's tests run as real processes.
        .executableTarget(name: "quad-tally", dependencies: ["QuadRuntime", "QuadStore", "QuadWire"]),
        // Fuzz targets: libFuzzer-driven when deploy/fuzz builds them, a seeded generator otherwise.
        .executableTarget(name: "quad-fuzz", dependencies: [
            "QuadWire", "QuadAuth", "QuadMessaging", "QuadRuntime", "QuadTestSupport", "QuadAccounts", "QuadCatalog", "QuadFavorites",
            "QuadOrders", "QuadReservations", "QuadTelemetry", "QuadAnalytics", "QuadNotifications",
        ], path: "fuzz", exclude: ["quad.dict"]),
        // Starts the executables as real processes for tests.
        .target(name: "QuadTestSupport", dependencies: ["QuadRuntime", "QuadStore", "QuadWire"]),

        .testTarget(name: "QuadWireTests", dependencies: ["QuadWire", "QuadMessaging"]),
        .testTarget(name: "QuadContractTests", dependencies: ["QuadContract", "QuadSchema", "QuadWire"]),
        .testTarget(name: "QuadMessagingTests", dependencies: ["QuadMessaging"]),
        // The broker's routing rules, without sockets or clocks.
        .testTarget(name: "QuadBrokerTests", dependencies: ["QuadBroker", "QuadContract", "QuadWire"]),
        .testTarget(name: "QuadStoreTests", dependencies: ["QuadStore", "QuadRuntime", "QuadWire"]),
        .testTarget(name: "QuadRuntimeTests", dependencies: ["QuadRuntime", "QuadContract", "QuadBroker", "QuadStore", "QuadWire", "QuadMessaging", "QuadTestSupport", "QuadMetrics"]),
        .testTarget(name: "QuadAccountsTests", dependencies: ["QuadAccounts", "QuadAuth", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
        .testTarget(name: "QuadCatalogTests", dependencies: ["QuadCatalog", "QuadImages", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
        .testTarget(name: "QuadFavoritesTests", dependencies: ["QuadFavorites", "QuadCatalogCopy", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
        .testTarget(name: "QuadNotificationsTests", dependencies: ["QuadNotifications", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
        .testTarget(name: "QuadOrdersTests", dependencies: ["QuadOrders", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire", "QuadMessaging", "QuadTestSupport"]),
        .testTarget(name: "QuadReservationsTests", dependencies: ["QuadReservations", "QuadContract", "QuadImages", "QuadRuntime", "QuadStore", "QuadWire", "QuadMessaging", "QuadTestSupport"]),
        .testTarget(name: "QuadTelemetryTests", dependencies: ["QuadTelemetry", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
        .testTarget(name: "QuadSecurityTests", dependencies: [
            "QuadBroker", "QuadAuth", "QuadMessaging", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport", "QuadAccounts", "QuadCatalog",
            "QuadFavorites", "QuadOrders", "QuadReservations", "QuadTelemetry", "QuadAnalytics", "QuadNotifications", "QuadContract",
        ]),
        .testTarget(name: "QuadEdgeTests", dependencies: ["QuadEdge", "QuadPhone", "QuadPhoneKit", "QuadAuth", "QuadMetrics", "QuadHTTP", "QuadImages", "QuadContract", "QuadRuntime", "QuadStore", "QuadWire", "QuadMessaging", "QuadTestSupport"]),
        .testTarget(name: "QuadAnalyticsTests", dependencies: ["QuadAnalytics", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
