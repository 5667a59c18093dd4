import Foundation
import QuadWire

/// `quadctl trace ID`: a request's path across processes, read from their
/// logs. Every process logs one line per request it handled (`"msg":"span"`,
/// with `trace`, `span`, `parent`, `type`, `start_us`, `us`, `status`); the
/// lines of one trace, linked by their parents, are the tree printed here.
/// A span whose parent is in no log (the client's own, or a log not read)
/// is a root.
struct TraceSpan {
    let process: String
    let type: String
    let span: String
    let parent: String?
    let startMicros: Int64
    let micros: Int64
    let status: Int64
    var children: [TraceSpan] = []

    var json: JSON {
        var f: [String: JSON] = [
            "process": .string(process), "type": .string(type), "span": .string(span), "start_us": .int(startMicros),
            "us": .int(micros), "status": .int(status), "children": .array(children.map(\.json)),
        ]
        if let parent { f["parent"] = .string(parent) }
        return .object(f)
    }

    /// The spans of trace `id` in the `*.log` files of `dir`.
    static func read(_ id: String, logs dir: String) throws -> [TraceSpan] {
        let files = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".log") }.sorted()
        let needle = Array(id.utf8)
        var out: [TraceSpan] = []
        for file in files {
            guard let data = FileManager.default.contents(atPath: dir + "/" + file) else { continue }
            let stem = String(file.dropLast(4))
            let bytes = [UInt8](data)
            var start = 0
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: 0x0A) ?? bytes.count
                let line = bytes[start..<end]
                start = end + 1
                // Most lines are of other traces: parse only those naming this one.
                guard line.count > needle.count, contains(line, needle), let value = try? JSON.parse(Array(line)),
                      value["msg"]?.string == "span", value["trace"]?.string == id, let span = value["span"]?.string else { continue }
                let src = value["src"]?.string ?? stem
                // Two brokers both call themselves broker: their log files differ.
                let process = src == "broker" && stem.hasPrefix("broker") ? stem : src
                out.append(TraceSpan(process: process, type: value["type"]?.string ?? "?", span: span, parent: value["parent"]?.string,
                                     startMicros: value["start_us"]?.int ?? (value["start_ms"]?.int ?? 0) * 1000,
                                     micros: value["us"]?.int ?? 0, status: value["status"]?.int ?? 0))
            }
        }
        return out
    }

    static func contains(_ haystack: ArraySlice<UInt8>, _ needle: [UInt8]) -> Bool {
        guard let first = needle.first else { return true }
        var i = haystack.startIndex
        while let k = haystack[i...].firstIndex(of: first) {
            if haystack.endIndex - k < needle.count { return false }
            if haystack[k..<(k + needle.count)].elementsEqual(needle) { return true }
            i = k + 1
        }
        return false
    }

    /// The spans as trees: each under its parent, children by start time.
    static func trees(_ spans: [TraceSpan]) -> [TraceSpan] {
        var byParent: [String: [TraceSpan]] = [:]
        let ids = Set(spans.map(\.span))
        var roots: [TraceSpan] = []
        for s in spans {
            if let p = s.parent, ids.contains(p), p != s.span { byParent[p, default: []].append(s) } else { roots.append(s) }
        }
        func build(_ s: TraceSpan, depth: Int) -> TraceSpan {
            var s = s
            // A span id repeated in a cycle cannot nest for ever.
            guard depth < 64 else { return s }
            s.children = (byParent[s.span] ?? []).sorted { $0.startMicros < $1.startMicros }.map { build($0, depth: depth + 1) }
            return s
        }
        return roots.sorted { $0.startMicros < $1.startMicros }.map { build($0, depth: 0) }
    }

    /// One line per span, children indented under their parent: process,
    /// type, start (time of day, UTC, and + ms from the first span), duration, status.
    static func render(_ roots: [TraceSpan]) -> [String] {
        let origin = roots.map(\.startMicros).min() ?? 0
        var rows: [[String]] = []
        func walk(_ s: TraceSpan, _ depth: Int) {
            let clock = Date(timeIntervalSince1970: Double(s.startMicros) / 1_000_000)
            let f = DateFormatter()
            f.locale = Locale(identifier: "en_US_POSIX")
            f.timeZone = TimeZone(identifier: "UTC")
            f.dateFormat = "HH:mm:ss.SSS"
            rows.append([String(repeating: "  ", count: depth) + s.process, s.type, f.string(from: clock),
                         String(format: "+%.3f ms", Double(s.startMicros - origin) / 1000),
                         String(format: "%.3f ms", Double(s.micros) / 1000), s.status == 0 ? "open" : String(s.status), s.span])
            for c in s.children { walk(c, depth + 1) }
        }
        for r in roots { walk(r, 0) }
        let header = ["PROCESS", "TYPE", "START (UTC)", "AT", "DURATION", "STATUS", "SPAN"]
        let all = [header] + rows
        let widths = header.indices.map { i in all.map { $0[i].count }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }
    }
}

/// `quadctl trace ID [--logs DIR] [--json]`.
@MainActor func printTrace(_ id: String) -> Never {
    guard TraceParent("00-\(id)-0000000000000001-01") != nil else {
        fail("a trace id is 32 lowercase hex digits, not all zeros (quadctl call --trace prints one), got '\(id)'", code: 64)
    }
    let env = ProcessInfo.processInfo.environment
    let dir = flags["logs"] ?? ((env["QUAD_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? ".quad") + "/logs")
    let spans: [TraceSpan]
    do { spans = try TraceSpan.read(id, logs: dir) } catch { fail("cannot read the logs in \(dir): \(error)", code: 1) }
    guard !spans.isEmpty else { fail("no span of trace \(id) in the logs of \(dir) (--logs DIR, or QUAD_HOME)", code: 1) }
    let roots = TraceSpan.trees(spans)
    if flags.bool("json") {
        print(JSON.object(["trace": .string(id), "spans": .int(Int64(spans.count)), "roots": .array(roots.map(\.json))]).text)
    } else {
        print("trace \(id): \(spans.count) span\(spans.count == 1 ? "" : "s") in \(dir)")
        for line in TraceSpan.render(roots) { print(line) }
    }
    exit(0)
}
