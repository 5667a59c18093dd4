import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// Fresh stores for tests of a service's handlers: a SQLite file in a new
/// temporary folder, or the test run's PostgreSQL server (QUAD_TEST_PG, set
/// by deploy/test) in a schema of its own.
public enum TestStore {
    public static var postgresURL: String? { ProcessInfo.processInfo.environment["QUAD_TEST_PG"] }

    /// A store with the runtime's tables and `migrations` applied.
    public static func open(_ service: String, migrations: [Migration], postgres: Bool = false) throws -> Database {
        let db: Database
        if postgres {
            guard let url = postgresURL else { throw QuadError.unavailable("QUAD_TEST_PG is not set: deploy/test starts a PostgreSQL server") }
            let schema = "\(service.prefix(1))\(UInt32.random(in: 0...UInt32.max))"
            try PostgresDatabase(url: url).executeScript("CREATE SCHEMA \(schema)")
            db = try PostgresDatabase(url: url + (url.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)")
        } else {
            let dir = NSTemporaryDirectory() + "quad-\(service)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            db = try SQLiteDatabase(path: dir + "/\(service).db")
        }
        try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
        try Migrations.apply(db, migrations, scope: service)
        return db
    }
}

extension Handlers {
    /// Calls `type` as the broker would deliver it; returns the body or throws the error.
    /// `caller` is the broker's header (`key:<Z85>` for an anonymous client).
    public func call(_ type: String, _ body: JSON = [:], user: String? = nil, role: String? = nil, caller: String? = nil,
                     id: String = MessageID.make()) throws -> JSON {
        var request = Envelope.request(type, body: body, id: id, user: user, role: role)
        request.caller = caller
        let reply = handle(request)
        if let error = reply.quadError { throw error }
        return reply.body
    }
}
