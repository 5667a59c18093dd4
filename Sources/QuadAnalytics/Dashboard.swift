import Foundation
import QuadWire

/// The dashboard page: one card per question with an SVG chart drawn here,
/// on the server, and the table of its rows under it; each card names its
/// app, its number, its type and its owner. No script library, no request
/// to anywhere else; the only script is ``script``, served by the
/// dashboard itself (`script-src 'self'`), which refreshes the cards every
/// 30 s while the tab is visible and when Refresh is pressed (without
/// script, Refresh reloads the page).
public enum Dashboard {
    /// Replaced by a fresh nonce in each response's HTML and CSP header.
    public static let nonceMark = "__QUAD_CSP_NONCE__"
    static let palette = ["#3867d6", "#e17f37", "#20a162", "#a55eea", "#eb3b5a"]
    /// Where the page's script is served.
    public static let scriptPath = "/dashboard/dashboard.js"
    /// What each question type means (the seeds' types), in the words of
    /// the app's users: ParkWise's drivers, UniTrade's students (users in
    /// the page's legend).
    static func type(_ type: Int, app: String) -> String? {
        let user = ["ParkWise": "driver", "UniTrade": "student"][app] ?? "user"
        return [1: "the app's speed and stability", 2: "answered back to the \(user) in the app",
                3: "how \(user)s use a feature", 4: "the campus's business"][type]
    }

    /// The page's script: it refreshes the cards in place every 30 s while
    /// the tab is visible, at once when the tab comes back after 30 s, and
    /// when Refresh is pressed.
    public static let script = """
        (function () {
          var last = Date.now();
          function refresh(force) {
            if (!force && document.visibilityState !== 'visible') return;
            last = Date.now();
            var button = document.getElementById('refresh');
            if (button) button.disabled = true;
            fetch(location.pathname, { cache: 'no-store', credentials: 'same-origin' })
              .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
              .then(function (text) {
                var page = new DOMParser().parseFromString(text, 'text/html');
                var fresh = page.getElementById('cards'), stamp = page.getElementById('generated');
                if (fresh) document.getElementById('cards').replaceWith(fresh);
                if (stamp) document.getElementById('generated').replaceWith(stamp);
              })
              .catch(function () {})
              .then(function () { if (button) button.disabled = false; });
          }
          var form = document.getElementById('refresh-form');
          if (form) form.addEventListener('submit', function (e) { e.preventDefault(); refresh(true); });
          setInterval(refresh, 30000);
          document.addEventListener('visibilitychange', function () {
            if (document.visibilityState === 'visible' && Date.now() - last >= 30000) refresh();
          });
        })();

        """

    /// The page for a summary (the body of `analytics.summary`).
    public static func html(_ summary: JSON) -> String {
        let questions = summary["questions"]?.array ?? []
        let generated = summary["generated_at"]?.int ?? 0
        var cards = ""
        for q in questions { cards += card(q) }
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Quad analytics</title>
            <style nonce="\(nonceMark)">
            body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1e2330; }
            header { padding: 16px 24px; background: #1e2330; color: #fff; }
            header h1 { margin: 0; font-size: 20px; }
            header p { margin: 4px 0 0; color: #c7cbd6; }
            header form { float: right; margin: 0 0 0 8px; }
            header button:disabled { opacity: .5; }
            .number { display: inline-block; background: #1e2330; color: #fff; border-radius: 4px; padding: 0 6px; margin-right: 6px; font-size: 13px; }
            header button { font: inherit; background: transparent; color: #fff; border: 1px solid #8a91a3; border-radius: 4px; padding: 3px 10px; cursor: pointer; }
            main { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; padding: 16px 24px; }
            .card { background: #fff; border-radius: 8px; padding: 16px; box-shadow: 0 1px 3px rgba(0,0,0,.12); overflow-x: auto; }
            .card h2 { font-size: 15px; margin: 0 0 4px; }
            .meta { color: #6b7385; font-size: 12px; margin: 0 0 6px; }
            .about { color: #3d4455; font-size: 12px; margin: 0 0 8px; }
            svg { display: block; width: 100%; height: auto; }
            svg text { font: 11px system-ui, sans-serif; fill: #3d4455; }
            table { border-collapse: collapse; width: 100%; margin-top: 8px; font-size: 12px; }
            th, td { text-align: right; padding: 3px 6px; border-bottom: 1px solid #e3e6ec; }
            th:first-child, td:first-child { text-align: left; }
            .empty { color: #6b7385; font-style: italic; }
            </style>
            </head>
            <body>
            <header><form method="post" action="/signout"><button type="submit">Sign out</button></form><form id="refresh-form" method="get" action="/dashboard/"><button id="refresh" type="submit">Refresh</button></form><h1>Quad analytics</h1><p>\(questions.count) business questions · generated <time id="generated" datetime="\(generated)">\(escape(iso(generated)))</time> · refreshed every 30 s while this tab is visible · aggregates only</p><p>Types: \((1...4).compactMap { k in Dashboard.type(k, app: "").map { "\(k) \($0)" } }.joined(separator: " · "))</p></header>
            <main id="cards">
            \(cards)</main>
            <script src="\(scriptPath)"></script>
            </body>
            </html>

            """
    }

    static func card(_ q: JSON) -> String {
        let id = q["id"]?.string ?? "?"
        let columns = (q["columns"]?.array ?? []).compactMap(\.string)
        let rows = (q["rows"]?.array ?? []).compactMap(\.array)
        let chart = (q["chart"]?.array ?? []).compactMap(\.string)
        var svg: String
        if rows.isEmpty {
            svg = "<p class=\"empty\">No data for this period yet.</p>"
        } else if chart.first == "heat" {
            svg = heat(columns: columns, rows: rows, spec: Array(chart.dropFirst()), title: q["title"]?.string ?? id)
        } else {
            svg = bars(columns: columns, rows: rows, spec: Array(chart.dropFirst()), title: q["title"]?.string ?? id)
        }
        var table = "<table><thead><tr>" + columns.map { "<th>\(escape(label($0)))</th>" }.joined() + "</tr></thead><tbody>"
        for r in rows { table += "<tr>" + r.map { "<td>\(escape(text($0)))</td>" }.joined() + "</tr>" }
        table += "</tbody></table>"
        if rows.isEmpty { table = "" }
        let number = q["number"]?.string
        // Number, type and owner, for the questions that have them.
        var meta: [String] = []
        if let number { meta.append(number) }
        if let type = q["type"]?.int { meta.append("Type \(type)" + (Dashboard.type(Int(type), app: q["app"]?.string ?? "").map { ": \($0)" } ?? "")) }
        if let owner = q["owner"]?.string { meta.append("owner " + owner) }
        return """
            <section class="card" id="q-\(escape(id))" data-question="\(escape(id))"\(number.map { " data-number=\"\(escape($0))\"" } ?? "")>
            <h2>\(number.map { "<span class=\"number\">\(escape($0))</span>" } ?? "")\(escape(q["title"]?.string ?? id))</h2>
            <p class="meta">\(escape(([q["app"]?.string ?? ""] + meta + [id, "\(rows.count) row\(rows.count == 1 ? "" : "s")"]).joined(separator: " · ")))</p>
            <p class="about">\(escape(q["description"]?.string ?? ""))</p>
            \(svg)
            \(table)
            </section>

            """
    }

    // MARK: bar chart

    /// Grouped bars: one group per row, labelled by `spec[0]`, one bar per
    /// value column in `spec[1...]`.
    static func bars(columns: [String], rows: [[JSON]], spec: [String], title: String) -> String {
        guard let labelAt = columns.firstIndex(of: spec[0]) else { return "" }
        let series = spec.dropFirst().compactMap { name in columns.firstIndex(of: name).map { (name, $0) } }
        guard !series.isEmpty else { return "" }
        let width = 600.0, height = 260.0, left = 52.0, right = 12.0, top = 28.0, bottom = 58.0
        let plotW = width - left - right, plotH = height - top - bottom
        let values = rows.flatMap { r in series.map { r[$0.1].double ?? 0 } }
        let (scale, ticks) = axis(values)
        let group = plotW / Double(rows.count)
        let barW = max(1, min(36, group * 0.8 / Double(series.count)))
        var s = "<svg viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-label=\"\(escape(title))\" xmlns=\"http://www.w3.org/2000/svg\">"
        s += "<title>\(escape(title))</title>"
        // Grid and axis labels.
        for k in 0...ticks {
            let v = scale * Double(k) / Double(ticks)
            let y = top + plotH - plotH * Double(k) / Double(ticks)
            s += "<line x1=\"\(f(left))\" y1=\"\(f(y))\" x2=\"\(f(width - right))\" y2=\"\(f(y))\" stroke=\"#e3e6ec\"/>"
            s += "<text x=\"\(f(left - 6))\" y=\"\(f(y + 4))\" text-anchor=\"end\">\(escape(number(v)))</text>"
        }
        // Legend.
        var lx = left
        for (n, (name, _)) in series.enumerated() {
            s += "<rect x=\"\(f(lx))\" y=\"6\" width=\"10\" height=\"10\" fill=\"\(palette[n % palette.count])\"/>"
            s += "<text x=\"\(f(lx + 14))\" y=\"15\">\(escape(label(name)))</text>"
            lx += 24 + Double(label(name).count) * 6.5
        }
        let rotate = rows.count > 8
        for (k, r) in rows.enumerated() {
            let gx = left + group * Double(k) + (group - barW * Double(series.count)) / 2
            for (n, (name, at)) in series.enumerated() {
                let v = r[at].double ?? 0
                let h = scale > 0 ? plotH * v / scale : 0
                let x = gx + barW * Double(n)
                s += "<rect class=\"bar\" x=\"\(f(x))\" y=\"\(f(top + plotH - h))\" width=\"\(f(barW))\" height=\"\(f(h))\" fill=\"\(palette[n % palette.count])\">"
                s += "<title>\(escape(text(r[labelAt]))): \(escape(label(name))) \(escape(text(r[at])))</title></rect>"
            }
            let cx = left + group * Double(k) + group / 2
            let name = String(text(r[labelAt]).prefix(rotate ? 16 : max(8, Int(group / 6.2))))
            if rotate {
                s += "<text x=\"\(f(cx))\" y=\"\(f(top + plotH + 12))\" text-anchor=\"end\" transform=\"rotate(-35 \(f(cx)) \(f(top + plotH + 12)))\">\(escape(name))</text>"
            } else {
                s += "<text x=\"\(f(cx))\" y=\"\(f(top + plotH + 16))\" text-anchor=\"middle\">\(escape(name))</text>"
            }
        }
        s += "<line x1=\"\(f(left))\" y1=\"\(f(top + plotH))\" x2=\"\(f(width - right))\" y2=\"\(f(top + plotH))\" stroke=\"#8a91a3\"/>"
        return s + "</svg>"
    }

    // MARK: heat map

    /// A grid: rows by `spec[0]`, columns by `spec[1]`, shade by `spec[2]` (0 to 100).
    static func heat(columns: [String], rows: [[JSON]], spec: [String], title: String) -> String {
        guard spec.count >= 3, let ri = columns.firstIndex(of: spec[0]), let ci = columns.firstIndex(of: spec[1]),
              let vi = columns.firstIndex(of: spec[2]) else { return "" }
        var rowNames: [String] = []
        var colValues: [JSON] = []
        var cells: [String: JSON] = [:]
        for r in rows {
            let rn = text(r[ri])
            if !rowNames.contains(rn) { rowNames.append(rn) }
            if !colValues.contains(r[ci]) { colValues.append(r[ci]) }
            cells[rn + "\u{1}" + text(r[ci])] = r[vi]
        }
        colValues.sort { ($0.double ?? 0, text($0)) < ($1.double ?? 0, text($1)) }
        // Hours of the day: all 24 columns, so every level reads the same way.
        if spec[1] == "hour", colValues.allSatisfy({ ($0.int.map { (0...23).contains($0) }) ?? false }) {
            colValues = (0...23).map { .int(Int64($0)) }
        }
        let left = 84.0, top = 22.0, width = 600.0, cell = min(34.0, (width - left - 10) / Double(max(1, colValues.count))), rowH = 22.0
        let height = top + rowH * Double(rowNames.count) + 8
        var s = "<svg viewBox=\"0 0 \(Int(width.rounded(.up))) \(Int(height.rounded(.up)))\" role=\"img\" aria-label=\"\(escape(title))\" xmlns=\"http://www.w3.org/2000/svg\">"
        s += "<title>\(escape(title))</title>"
        for (k, c) in colValues.enumerated() {
            s += "<text x=\"\(f(left + cell * Double(k) + cell / 2))\" y=\"14\" text-anchor=\"middle\">\(escape(text(c)))</text>"
        }
        for (n, rn) in rowNames.enumerated() {
            let y = top + rowH * Double(n)
            s += "<text x=\"\(f(left - 6))\" y=\"\(f(y + 14))\" text-anchor=\"end\">\(escape(String(rn.prefix(14))))</text>"
            for (k, c) in colValues.enumerated() {
                guard let v = cells[rn + "\u{1}" + text(c)], let d = v.double else {
                    s += "<rect x=\"\(f(left + cell * Double(k)))\" y=\"\(f(y))\" width=\"\(f(cell - 1))\" height=\"\(f(rowH - 2))\" fill=\"#f0f1f4\"/>"
                    continue
                }
                let t = min(1, max(0, d / 100))
                // From pale green (empty lot) to deep red (full).
                let red = Int(230 * t + 220 * (1 - t)), green = Int(60 * t + 240 * (1 - t)), blue = Int(50 * t + 220 * (1 - t))
                s += "<rect class=\"cell\" x=\"\(f(left + cell * Double(k)))\" y=\"\(f(y))\" width=\"\(f(cell - 1))\" height=\"\(f(rowH - 2))\" fill=\"rgb(\(red),\(green),\(blue))\">"
                s += "<title>\(escape(rn)) \(escape(text(c))): \(escape(text(v)))</title></rect>"
            }
        }
        return s + "</svg>"
    }

    // MARK: formatting

    /// The top of the value axis and how many steps it has: whole steps
    /// for small counts, else 1, 2, 2.5 or 5 times a power of ten.
    static func axis(_ values: [Double]) -> (Double, Int) {
        let top = values.max() ?? 0
        guard top > 0 else { return (1, 1) }
        if top <= 5 && values.allSatisfy({ $0.rounded() == $0 }) { return (top, Int(top)) }
        let p = pow(10, floor(log10(top)))
        for (m, ticks) in [(1.0, 5), (2, 4), (2.5, 5), (5, 5), (10, 5)] where m * p >= top { return (m * p, ticks) }
        return (10 * p, 5)
    }

    static func f(_ d: Double) -> String { String(format: "%.1f", d) }

    static func number(_ d: Double) -> String {
        if d.rounded() == d { return String(Int64(d)) }
        return String(format: "%.2f", d).replacingOccurrences(of: #"\.?0+$"#, with: "", options: .regularExpression)
    }

    static func text(_ v: JSON) -> String {
        switch v {
        case .null: return "unknown"
        case .string(let s): return s
        case .int(let i): return String(i)
        case .double(let d): return number(d)
        case .bool(let b): return b ? "yes" : "no"
        default: return v.text
        }
    }

    static func label(_ column: String) -> String { column.replacingOccurrences(of: "_", with: " ") }

    static func iso(_ ms: Int64) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        let fmt = ISO8601DateFormatter()
        return fmt.string(from: date)
    }

    public static func escape(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for c in s.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }
}
