import Foundation
import QuadRuntime
import QuadTelemetry

// `quad-telemetry validate` checks events on stdin against the event rules
// (for the schema agreement tests); `quad-telemetry bench` measures ingest;
// anything else runs a worker.
switch CommandLine.arguments.dropFirst().first {
case "validate": exit(Telemetry.validateCommand())
case "bench": exit(Telemetry.benchCommand(Array(CommandLine.arguments.dropFirst(2))))
default: exit(ServiceMain.run(Telemetry.self))
}
