// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Quad",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "quad-broker", targets: ["quad-broker"]),
        .executable(name: "quad-catalog", targets: ["quad-catalog"]),
        .executable(name: "quadctl", targets: ["quadctl"]),
        .executable(name: "quad-tally", targets: ["quad-tally"]),
    ],
    targets: [
        // C libraries, each a modulemap plus a shim header. Only the wrapper
        // module next to each one imports it.
        .systemLibrary(name: "CZeroMQ", pkgConfig: "libzmq", providers: [.apt(["libzmq3-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),

        // The wire: envelope, error, JSON values, ids.
        .target(name: "QuadWire"),
        // ZeroMQ: context, sockets, frames, poller with timers.
        .target(name: "QuadMessaging", dependencies: ["CZeroMQ"]),
        // Stores: SQLite and PostgreSQL behind one interface, migrations,
        // idempotency records and the transactional outbox.
        .target(name: "QuadStore", dependencies: ["CSQLite", "CPostgres", "QuadWire"]),
        // The service runtime (worker loop, outbox relay) and the client.
        .target(name: "QuadRuntime", dependencies: ["QuadWire", "QuadMessaging", "QuadStore"]),
        // The broker: Majordomo-style routing plus the event proxy.
        .target(name: "QuadBroker", dependencies: ["QuadWire", "QuadMessaging", "QuadRuntime"]),
        // Service domains.
        .target(name: "QuadCatalog", dependencies: ["QuadWire", "QuadStore", "QuadRuntime"]),

        // Thin executables.
        .executableTarget(name: "quad-broker", dependencies: ["QuadBroker", "QuadRuntime"]),
        .executableTarget(name: "quad-catalog", dependencies: ["QuadCatalog", "QuadRuntime"]),
        .executableTarget(name: "quadctl", dependencies: ["QuadRuntime", "QuadWire"]),
        // A counter service the runtime's tests run as real processes.
        .executableTarget(name: "quad-tally", dependencies: ["QuadRuntime", "QuadStore", "QuadWire"]),
        // Starts the executables as real processes for tests.
        .target(name: "QuadTestSupport", dependencies: ["QuadRuntime", "QuadWire"]),

        .testTarget(name: "QuadWireTests", dependencies: ["QuadWire"]),
        .testTarget(name: "QuadMessagingTests", dependencies: ["QuadMessaging"]),
        .testTarget(name: "QuadStoreTests", dependencies: ["QuadStore", "QuadWire"]),
        .testTarget(name: "QuadRuntimeTests", dependencies: ["QuadRuntime", "QuadBroker", "QuadStore", "QuadWire", "QuadMessaging", "QuadTestSupport"]),
        .testTarget(name: "QuadCatalogTests", dependencies: ["QuadCatalog", "QuadRuntime", "QuadStore", "QuadWire", "QuadTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
