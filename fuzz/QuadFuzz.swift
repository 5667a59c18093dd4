import Foundation
import QuadWire

#if QUAD_LIBFUZZER
/// libFuzzer's entry for a program with its own `main` (from
/// `libclang_rt.fuzzer_no_main`): it parses libFuzzer's flags and calls
/// `callback` with each input. `deploy/fuzz` builds with it.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt
#endif

/// quad-fuzz: Quad's fuzz targets. Built by `deploy/fuzz` with libFuzzer
/// (coverage-guided, AddressSanitizer); built by a plain `swift build` it
/// is a seeded generator that mutates each target's seeds. Either way:
///
///     quad-fuzz --target=envelope [libFuzzer flags, e.g. -runs=1000000] [CORPUS]
///     quad-fuzz --target=service-catalog --generator --runs=200000 --seed=7
///     quad-fuzz --target=service-catalog --examples=protos/examples --write-seeds=DIR
///     quad-fuzz --target=envelope --replay=FILE
///     quad-fuzz --list
///
/// libFuzzer ignores flags that start with `--`, so both kinds mix.
@main
enum FuzzMain {
    nonisolated(unsafe) static var target: FuzzTarget?
    /// Where quad-fuzz's own lines go: the stderr it started with (services
    /// log a line per request; stderr itself is silenced or closed).
    nonisolated(unsafe) static var reportFD: Int32 = 2
    nonisolated(unsafe) static var started = Date()
    nonisolated(unsafe) static var runs = 0
    /// The input being run, kept where a crash handler can write it out.
    nonisolated(unsafe) static var last = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 1 << 21)
    nonisolated(unsafe) static var lastCount = 0

    static func report(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        bytes.withUnsafeBytes { _ = write(reportFD, $0.baseAddress, $0.count) }
    }

    static func value(_ name: String) -> String? {
        CommandLine.arguments.first { $0.hasPrefix("--\(name)=") }.map { String($0.dropFirst(name.count + 3)) }
    }

    static func runOne(_ bytes: [UInt8]) {
        lastCount = min(bytes.count, last.count)
        if lastCount > 0 { bytes.withUnsafeBufferPointer { last.baseAddress!.update(from: $0.baseAddress!, count: lastCount) } }
        runs += 1
        target?.run(bytes)
    }

    static func main() {
        let args = CommandLine.arguments
        if args.contains("--help") || args.contains("-h") {
            print("""
                usage: quad-fuzz --target=NAME [--generator --runs=N --seed=S | --replay=FILE | --write-seeds=DIR] [--examples=DIR]
                       quad-fuzz --list
                Fuzz targets of Quad: the envelope decoder, session tokens, and every service's request
                bodies (service-NAME). Built with libFuzzer (deploy/fuzz), other arguments go to libFuzzer
                (-runs=N, CORPUS...); --generator runs a seeded generator instead. A crash exits non-zero
                with the input saved; deploy/fuzz --help runs them all.
                """)
            exit(0)
        }
        if args.contains("--list") {
            print(Targets.all.joined(separator: "\n"))
            exit(0)
        }
        guard let name = value("target") else {
            FileHandle.standardError.write(Data("usage: quad-fuzz --target=NAME [--generator --runs=N --seed=S | --replay=FILE | --write-seeds=DIR] [--examples=DIR]; quad-fuzz --list\n".utf8))
            exit(64)
        }
        reportFD = dup(2)
        do {
            target = try Targets.make(name, examples: value("examples"))
        } catch {
            report("quad-fuzz: \(error)")
            exit(64)
        }
        if let dir = value("write-seeds") {
            try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            for (k, seed) in (target?.seeds ?? []).enumerated() {
                _ = FileManager.default.createFile(atPath: dir + "/seed-\(k)", contents: Data(seed))
            }
            report("quad-fuzz: wrote \(target?.seeds.count ?? 0) seeds of \(name) to \(dir)")
            exit(0)
        }
        installCrashHandlers()
        started = Date()
        atexit { FuzzMain.summary() }
        if let file = value("replay") {
            guard let data = FileManager.default.contents(atPath: file) else { report("quad-fuzz: cannot read \(file)"); exit(1) }
            runOne(Array(data))
            report("quad-fuzz: \(file) ran without a crash")
            exit(0)
        }
        #if QUAD_LIBFUZZER
        if !args.contains("--generator") {
            var argc = CommandLine.argc
            var argv = CommandLine.unsafeArgv
            exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
                FuzzMain.runOne(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
                return 0
            })
        }
        #endif
        // The services log a JSON line per request: not to the terminal.
        let null = open("/dev/null", O_WRONLY)
        if value("quiet") != "no" { dup2(null, 2) }
        let runs = value("runs").flatMap(Int.init) ?? 100_000
        let seed = value("seed").flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        generate(runs: runs, seed: seed, maxLength: value("max-len").flatMap(Int.init) ?? 4096)
        exit(0)
    }

    static func summary() {
        let seconds = Date().timeIntervalSince(started)
        let findings = target?.findings ?? [:]
        report("quad-fuzz: \(target?.name ?? "?"): \(runs) inputs in \(String(format: "%.1f", seconds)) s (\(Int(Double(runs) / max(seconds, 0.001))) per second), no crash; \(findings.isEmpty ? "no finding" : "\(findings.values.reduce(0, +)) answers of 500 in \(findings.count) kinds")")
        for (what, n) in findings.sorted(by: { $0.value > $1.value }).prefix(20) { report("  \(n)× \(what)") }
    }

    // MARK: The seeded generator

    static let tokens: [[UInt8]] = [
        "{", "}", "[", "]", "\"", ":", ",", "null", "true", "false", "-0", "0.5", "1e999", "-1e-999", "9223372036854775808",
        "\\u0000", "\\ud800", "\\udc00", "\\\"", "\"v\":1", "\"id\":\"", "\"type\":\"", "\"kind\":\"request\"", "\"body\":",
        "\"deadline\":", "\"token\":", "\"user\":", "\"role\":\"admin\"", "\"src\":", "\"seq\":",
    ].map { Array($0.utf8) } + ByteChooser.names.map { Array("\"\($0)\":".utf8) } + [[0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80]]

    static func generate(runs total: Int, seed: UInt64, maxLength: Int) {
        report("quad-fuzz: \(target?.name ?? "?"): seeded generator, seed \(seed), \(total) inputs (replay a crash: quad-fuzz --target=\(target?.name ?? "?") --replay=crash-input)")
        var r = SeededRandom(seed: seed)
        var pool = target?.seeds ?? []
        if pool.isEmpty { pool = [[]] }
        let seedCount = pool.count
        started = Date()
        for n in 0..<total {
            var input: [UInt8]
            switch r.below(10) {
            case 0: input = r.bytes(r.below(64))
            case 1: input = pool[r.below(pool.count)] + pool[r.below(pool.count)].suffix(r.below(64))
            default:
                input = pool[r.below(pool.count)]
                for _ in 0...r.below(6) { mutate(&input, &r) }
            }
            if input.count > maxLength { input.removeLast(input.count - maxLength) }
            runOne(input)
            // Keep some mutants: later inputs grow from them.
            if r.below(8) == 0 {
                if pool.count < seedCount + 2048 { pool.append(input) } else { pool[seedCount + r.below(2048)] = input }
            }
            if (n + 1) % 100_000 == 0 {
                report("quad-fuzz: \(n + 1) inputs, \(Int(Date().timeIntervalSince(started))) s")
            }
        }
    }

    static func mutate(_ input: inout [UInt8], _ r: inout SeededRandom) {
        switch r.below(8) {
        case 0 where !input.isEmpty: input[r.below(input.count)] ^= UInt8(1) << UInt8(r.below(8))
        case 1 where !input.isEmpty: input[r.below(input.count)] = UInt8(truncatingIfNeeded: r.next())
        case 2: input.insert(contentsOf: r.bytes(1 + r.below(8)), at: r.below(input.count + 1))
        case 3 where !input.isEmpty:
            let at = r.below(input.count)
            input.removeSubrange(at..<min(input.count, at + 1 + r.below(16)))
        case 4 where !input.isEmpty:
            let at = r.below(input.count)
            let piece = input[at..<min(input.count, at + 1 + r.below(32))]
            input.insert(contentsOf: piece, at: r.below(input.count + 1))
        case 5, 6: input.insert(contentsOf: tokens[r.below(tokens.count)], at: r.below(input.count + 1))
        default:
            // Deep nesting at one place.
            let depth = [10, 63, 64, 65, 200, 5000][r.below(6)]
            let open: [UInt8] = r.below(2) == 0 ? Array("[".utf8) : Array("{\"a\":".utf8)
            let at = r.below(input.count + 1)
            input.insert(contentsOf: Array([[UInt8]](repeating: open, count: depth).joined()), at: at)
        }
    }

    // MARK: Crashes

    /// On a crash, writes the input to `crash-input` in the working folder,
    /// then dies of the same signal.
    static func installCrashHandlers() {
        for sig in [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS, SIGFPE] {
            signal(sig) { sig in
                let fd = open("crash-input", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
                if fd >= 0 {
                    _ = write(fd, FuzzMain.last.baseAddress, FuzzMain.lastCount)
                    close(fd)
                }
                let message = "quad-fuzz: crashed; the input is in crash-input\n"
                _ = message.withCString { write(FuzzMain.reportFD, $0, strlen($0)) }
                signal(sig, SIG_DFL)
                raise(sig)
            }
        }
    }
}

/// A seeded generator (SplitMix64): the same seed, the same inputs.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func below(_ n: Int) -> Int { n <= 1 ? 0 : Int(next() % UInt64(n)) }
    mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8(truncatingIfNeeded: next()) } }
}
