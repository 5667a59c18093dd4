// What every process shares with the broker (flags, endpoints, log lines,
// shutdown, the worker protocol, request owners) lives below the runtime in
// QuadProcess, so that the broker does not link the stores. A service that
// imports QuadRuntime keeps seeing it as before.
@_exported import QuadProcess
