import Foundation
import QuadRuntime
import QuadStore
import QuadWire

/// A service installed in this process as one of its workers has it: its
/// migrations on a fresh SQLite file, its ``ServiceDomain/install(on:db:options:)``
/// with the default options, on a worker that never connects (its
/// endpoints are `inproc://` names nothing binds). For tests that list or
/// drive every request type a service registers, and for fuzzing.
public final class InProcessService {
    public let handlers: Handlers
    /// Kept alive: handlers may hold it unowned (calls to other services).
    public let worker: Worker
    public let db: Database
    public let dir: String

    /// `options` override the domain's defaults (e.g. accounts'
    /// `password-hashing`); `internal` is the endpoint its calls to other
    /// services go to.
    public init<D: ServiceDomain>(_ domain: D.Type, options: [String: String] = [:], internal internalEndpoint: String? = nil) throws {
        dir = NSTemporaryDirectory() + "quad-inprocess-\(D.name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let db = try SQLiteDatabase(path: dir + "/\(D.name).db")
        try Migrations.apply(db, ServiceTables.migrations, scope: "quad")
        try Migrations.apply(db, D.migrations, scope: D.name)
        let tag = "\(D.name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let endpoints = Endpoints(frontend: "inproc://\(tag)-frontend", backend: "inproc://\(tag)-backend", eventsIn: "inproc://\(tag)-events-in",
                                  eventsOut: "inproc://\(tag)-events-out", internal: internalEndpoint ?? "inproc://\(tag)-internal")
        let handlers = Handlers(service: D.name, instance: "\(D.name)/inprocess", db: db)
        let worker = try Worker(handlers: handlers, endpoints: endpoints)
        var values: [String: String] = [:]
        for (name, _, value) in D.options { if let value { values[name] = value } }
        values.merge(options) { _, given in given }
        try D.install(on: worker, db: db, options: values)
        self.handlers = handlers
        self.worker = worker
        self.db = db
    }

    deinit {
        db.close()
        try? FileManager.default.removeItem(atPath: dir)
    }
}
