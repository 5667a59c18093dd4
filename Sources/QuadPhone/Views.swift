import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// What a view shows, and where it came from.
package struct ViewResult {
    package enum Source: String {
        /// The service answered just now.
        case network
        /// A saved copy the live feed keeps current (updates arrive).
        case live
        /// A copy saved on the phone, with its age.
        case saved
        /// The in-memory cache of spot searches.
        case memory
        /// Computed on the phone from saved data and queued actions.
        case local
        /// Nothing to show: offline and nothing saved, or the service refused.
        case none
    }

    var view: String
    package var source: Source
    var ageMs: Int64?
    package var body: JSON
    package var notice: String?
    package var error: QuadError?
    /// The pictures the view shows, each with where it came from (network,
    /// disk, memory, or placeholder with the reason).
    var images: [ShownImage]?
    /// Whether the student's changes are all saved (``Phone/syncStatus``),
    /// set on every view as it is shown.
    var sync: JSON?

    package var json: JSON {
        var f: [String: JSON] = ["view": .string(view), "source": .string(source.rawValue), "body": body]
        if let sync { f["sync"] = sync }
        if let images { f["images"] = .array(images.map(\.json)) }
        if let ageMs { f["age_ms"] = .int(ageMs) }
        if let notice { f["notice"] = .string(notice) }
        if let error { f["error"] = error.body }
        return .object(f)
    }
}

/// The views, each with the strategy of the ParkWise seed that fits it:
///
/// | view | strategy |
/// |---|---|
/// | home, product, foryou, favorites, orders, levels, forecast, car | network, then the saved copy with its age |
/// | parking (lots), nearby | saved copy first, asked again after a day |
/// | levels of the campus lots | prefetched while online, for the levels without signal |
/// | spots | in-memory LRU (16 entries, 30 s) of server answers, then network, then saved copy |
/// | search, cart, spending, reservation | computed on the phone over saved data and queued actions |
extension Phone {
    package static let views = ["home", "product", "search", "foryou", "favorites", "cart", "orders", "spending", "parking", "levels",
                               "forecast", "spots", "nearby", "reservation", "car", "messages", "rentals", "insights"]

    /// Opens a view; `done` runs once with what the user sees.
    package func open(_ view: String, _ params: JSON = [:], refresh: Bool = false, _ done: @escaping (ViewResult) -> Void) {
        record("view.opened", ["view": .string(view)])
        // Another view on screen: the Reserve screen closed, its mark goes.
        if view != "reservation" { leaveFlow() }
        let finish: (ViewResult) -> Void = { [weak self] result in
            guard let self else { return done(result) }
            self.stats.reads[result.view + "/" + result.source.rawValue, default: 0] += 1
            // A list the service answered: the saved catalog takes its newer
            // versions, so an offline view later never shows older ones.
            if result.source == .network { self.takeListedProducts(result.body) }
            var shown = self.faultyView(result, key: view + " " + params.text)
            shown.sync = self.syncStatus
            self.logView(shown)
            done(shown)
        }
        switch view {
        case "home":
            // Pull to refresh on the home screen saves the catalog again.
            prefetchCatalog(force: refresh)
            var body: [String: JSON] = ["limit": .int(params["limit"]?.int ?? 20), "offset": .int(params["offset"]?.int ?? 0)]
            if let c = params["category"]?.string { body["category"] = .string(c) }
            networkThenSaved(view, "catalog.products.list", .object(body)) { [weak self] r in
                guard let self else { return }
                // Neither network nor a saved copy of this page: the page from the saved catalog.
                let shown = r.source == .none && r.error == nil ? self.localPage(.object(body)).map {
                    ViewResult(view: view, source: .local, body: $0, notice: self.catalogNotice())
                } ?? r : r
                self.withImages(shown, .unitrade, (shown.body["products"]?.array ?? []).flatMap(Phone.pictures), finish)
            }
        case "product":
            let id = params["id"]?.string ?? ""
            if !id.isEmpty { live?.watch(product: id) }
            networkThenSaved(view, "catalog.product.get", ["id": .string(id)]) { [weak self] r in
                guard let self else { return }
                let shown = r.source == .none && r.error == nil ? self.localProduct(id).map {
                    ViewResult(view: view, source: .local, body: $0, notice: self.catalogNotice())
                } ?? r : r
                self.withImages(shown, .unitrade, Phone.pictures(shown.body), finish)
            }
        case "search":
            search(params, finish)
        case "foryou":
            networkThenSaved(view, "catalog.foryou", ["limit": .int(params["limit"]?.int ?? 10)], authed: true, finish)
        case "favorites":
            favorites(finish)
        case "cart":
            finish(ViewResult(view: view, source: .local, body: cart(), notice: pendingNotice(["orders.cart.add", "orders.cart.set", "orders.cart.remove", "orders.cart.clear", "orders.place"])))
        case "orders":
            orders(finish)
        case "spending":
            spendingView(finish)
        case "parking":
            savedFirst(view, "reservations.lots", [:], maxAgeMs: settings.lotsMaxAgeMs) { [weak self] r in
                guard let self else { return }
                self.prefetchLevels(r.body)
                let photos = ((r.body["lots"]?.array ?? []) + (r.body["destinations"]?.array ?? [])).compactMap { $0["photo_url"]?.string }
                self.withImages(r, .parkwise, photos, finish)
            }
        case "levels":
            let lot = params["lot"]?.string ?? "central"
            watchedLot = (lot, now)
            // The feed keeps the saved copy of a watched lot current: no
            // request while it is live. A lot not watched yet is watched
            // from now, then read (its updates may arrive before the
            // answer: each level keeps the higher seq).
            let watched = live?.watches(lot: lot) == true
            live?.watch(lot: lot)
            lotLookedAt[lot] = now
            if watched, live?.isLive == true, let copy = saved(Phone.key("reservations.levels", ["lot": .string(lot)])) {
                finish(ViewResult(view: view, source: .live, ageMs: copy.ageMs, body: copy.body))
            } else {
                networkThenSaved(view, "reservations.levels", ["lot": .string(lot)], finish)
            }
        case "forecast":
            let lot = params["lot"]?.string ?? "central"
            record("forecast.opened", ["lot": .string(lot)])
            var body: [String: JSON] = ["lot": .string(lot)]
            if let a = params["arrival"] {
                body["arrival"] = a
                record("arrival.changed", ["lot": .string(lot), "hour": .int(Phone.campusHour(a))])
            }
            networkThenSaved(view, "reservations.forecast", .object(body), finish)
        case "spots":
            spots(params, refresh: refresh, finish)
        case "nearby":
            record("nearby.opened", [:])
            savedFirst(view, "reservations.nearby", ["kind": .string(params["kind"]?.string ?? "regular")], maxAgeMs: settings.lotsMaxAgeMs, finish)
        case "reservation":
            // The Reserve screen sets its own crash mark (BQ11).
            enterFlow("reservation", view: "reservation")
            finish(reservation())
        case "car":
            car(finish)
        case "messages":
            finish(ViewResult(view: view, source: .local, body: ["messages": .array(messages()), "news": .array(news())]))
            markNewsRead()
        case "rentals":
            rentals(finish)
        case "insights":
            insights(finish)
        default:
            finish(ViewResult(view: view, source: .none, body: [:],
                              error: .badRequest("unknown view '\(view)'; views: \(Phone.views.joined(separator: ", "))")))
        }
    }

    /// The hour of an arrival time (`reservations.forecast`'s moment: epoch
    /// ms, or a date-time string whose hour is read as written), on the
    /// campus clock (UTC-5) for epoch ms.
    static func campusHour(_ arrival: JSON) -> Int64 {
        if let s = arrival.string, s.utf8.count >= 13, let h = Int64(s.dropFirst(11).prefix(2)), (0...23).contains(h) { return h }
        let ms = arrival.int ?? 0
        return ((ms / 3_600_000 - 5) % 24 + 24) % 24
    }

    /// The driver taps Navigate to a nearby lot: the app will ask them
    /// once, later, whether they parked there (the ParkWise seed's BQ9).
    package func navigate(toNearby lot: String) {
        record("nearby.chosen", ["lot": .string(lot)])
        try? db.setMeta("nearby_question", lot)
    }

    /// The driver answers the one question asked after Navigate; false
    /// when nothing was asked (or it was answered already).
    @discardableResult
    package func answerNearby(parked: Bool) -> Bool {
        guard let lot = try? db.meta("nearby_question") else { return false }
        try? db.setMeta("nearby_question", nil)
        record("nearby.confirmed", ["lot": .string(lot), "parked": .bool(parked)])
        return true
    }

    // MARK: Strategies

    static func key(_ type: String, _ body: JSON) -> String { type + " " + body.text }

    func save(_ key: String, _ body: JSON) {
        // A lot's levels are also kept by the live feed: never an older level over a newer one.
        guard key.hasPrefix("reservations.levels ") else { write(key, body); return }
        write(key, keepingNewerLevels(key, body))
        heldLevels[key] = nil  // its seqs are read again from the copy just written
    }

    /// Writes a saved copy as it is (the caller merged it with the one held).
    func write(_ key: String, _ body: JSON) {
        _ = try? db.execute("""
            INSERT INTO saved (key, body, saved_ms) VALUES ($1, $2, $3)
            ON CONFLICT (key) DO UPDATE SET body = excluded.body, saved_ms = excluded.saved_ms
            """, .text(key), .text(body.text), .int(now))
    }

    func saved(_ key: String) -> (body: JSON, ageMs: Int64)? {
        if heldLevels[key]?.pending.isEmpty == false { writeHeldLevels(key) }
        guard let r = (try? db.queryOne("SELECT body, saved_ms FROM saved WHERE key = $1", .text(key))) else { return nil }
        return (.stored(r.string("body")), max(0, now - r.int("saved_ms")))
    }

    /// Runs `then` once the phone holds a token (signing in first if it can).
    package func withToken(_ then: @escaping (QuadError?) -> Void) {
        if hasValidToken || !radioOn { then(nil); return }
        signIn(then)
    }

    /// What a read from the network brought: the service's answer, its
    /// refusal (a 404, shown as it is), or why there is none, in the words
    /// the user reads (the view then shows what the phone has).
    enum ReadOutcome {
        case answered(JSON)
        case refused(QuadError)
        case unreachable(String)
    }

    /// Asks the service for `type`. No network, no answer in time, and a
    /// 503 or 504 (no worker took it, or the outcome is not known yet) are
    /// all `unreachable`. `done` runs at once when the radio is off.
    func read(_ type: String, _ body: JSON, authed: Bool = false, _ done: @escaping (ReadOutcome) -> Void) {
        guard radioOn else { done(.unreachable("offline")); return }
        let send = { [weak self] in
            guard let self else { return }
            self.request(type, body, timeoutMs: self.settings.readTimeoutMs) { result in
                switch result {
                case .success(let reply):
                    if let error = reply.quadError {
                        done([503, 504].contains(error.status) ? .unreachable("the service is unavailable") : .refused(error))
                    } else {
                        done(.answered(reply.body))
                    }
                case .failure(.offline):
                    done(.unreachable("offline"))
                case .failure:
                    done(.unreachable("no answer from the network"))
                }
            }
        }
        if authed { withToken { _ in send() } } else { send() }
    }

    /// Asks the service; when it cannot be reached, shows the saved copy
    /// with the time it was saved. A refusal (a 404) is shown as it is.
    func networkThenSaved(_ view: String, _ type: String, _ body: JSON, authed: Bool = false,
                          onNetwork: ((JSON) -> Void)? = nil, _ done: @escaping (ViewResult) -> Void) {
        let key = Phone.key(type, body)
        read(type, body, authed: authed) { [weak self] outcome in
            guard let self else { return }
            switch outcome {
            case .answered(var reply):
                // No order in it older than the phone's copy (OrderVersions.swift).
                reply = self.newestOrders(type, key, reply)
                // Nor a favorite older than the phone's copy (FavoriteVersions.swift).
                reply = self.newestFavorites(type, reply)
                if type == "catalog.product.get" {
                    // A product older than the copy the phone holds (a live
                    // update came first) is not shown over it.
                    let kept = self.saveProduct(key, reply)
                    onNetwork?(kept.body)
                    done(kept.isReply ? ViewResult(view: view, source: .network, ageMs: 0, body: reply)
                                      : ViewResult(view: view, source: .live, ageMs: self.saved(key)?.ageMs, body: kept.body,
                                                   notice: "a live update newer than the service's answer is shown"))
                    return
                }
                self.save(key, reply)
                onNetwork?(reply)
                done(ViewResult(view: view, source: .network, ageMs: 0, body: reply))
            case .refused(let error):
                done(ViewResult(view: view, source: .none, body: [:], error: error))
            case .unreachable(let why):
                if let copy = self.saved(key) {
                    // Its products at the newest versions the phone holds (a
                    // live update or a product read since it was saved).
                    done(ViewResult(view: view, source: .saved, ageMs: copy.ageMs, body: self.withNewestProducts(copy.body),
                                    notice: "\(why): showing the copy saved \(Phone.age(copy.ageMs)) ago"))
                } else {
                    done(ViewResult(view: view, source: .none, body: [:], notice: "\(why), and nothing is saved on this phone yet"))
                }
            }
        }
    }

    /// Shows the saved copy at once while it is younger than `maxAgeMs`;
    /// otherwise asks the network (and falls back to the old copy).
    func savedFirst(_ view: String, _ type: String, _ body: JSON, maxAgeMs: Int64, _ done: @escaping (ViewResult) -> Void) {
        if let copy = saved(Phone.key(type, body)), copy.ageMs <= maxAgeMs {
            done(ViewResult(view: view, source: .saved, ageMs: copy.ageMs, body: copy.body))
            return
        }
        networkThenSaved(view, type, body, done)
    }

    static func age(_ ms: Int64) -> String {
        if ms < 60_000 { return "\(ms / 1000) s" }
        if ms < 3_600_000 { return "\(ms / 60_000) min" }
        if ms < 86_400_000 { return "\(ms / 3_600_000) h" }
        return "\(ms / 86_400_000) days"
    }

    // MARK: Prefetch

    /// While online, download what will be needed without signal: the
    /// levels of the campus lots (P2 and P3 have none).
    /// Saves each campus lot's levels (the parking view: every live map at
    /// hand offline), or with `watchedOnly` those of the lots the feed
    /// watches (the network came back: the feed missed their updates; the
    /// others wait until the parking view is opened again).
    func prefetchLevels(_ lots: JSON, watchedOnly: Bool = false) {
        guard isOnline else { return }
        let campus = (lots["lots"]?.array ?? []).filter { $0["kind"]?.string == "campus" }.compactMap { $0["id"]?.string }
        let watched = live?.lots ?? []
        for lot in watchedOnly ? campus.filter(watched.contains) : campus {
            let body: JSON = ["lot": .string(lot)]
            request("reservations.levels", body, timeoutMs: settings.readTimeoutMs) { [weak self] result in
                if case .success(let reply) = result, reply.quadError == nil { self?.save(Phone.key("reservations.levels", body), reply.body) }
            }
        }
    }

    func prefetchOnNetworkBack() {
        if let lots = saved(Phone.key("reservations.lots", [:])) { prefetchLevels(lots.body, watchedOnly: true) }
        prefetchCatalog()
    }

    /// The whole catalog, saved for search and filters on the phone; fetched
    /// again when older than the maximum age.
    func prefetchCatalog(force: Bool = false) {
        guard isOnline, !catalogFetching else { return }
        let age = catalogAgeMs
        guard force || age == nil || age! > settings.catalogMaxAgeMs else { return }
        catalogFetching = true
        // A little later and at a random moment: phones that come online
        // together do not all download the catalog in the same second.
        agenda.after(Int64.random(in: 0...2_000, using: &rng)) { [weak self] in
            guard let self, self.isOnline else { self?.catalogFetching = false; return }
            self.fetchCatalogPage(offset: 0, rows: [])
        }
    }

    /// A catalog download that failed for a reason that passes (no answer
    /// in time, 429, a 5xx) is tried again by itself, after 2, 4, 8 ... up
    /// to 60 s with jitter, or the `retry_after_ms` asked for when longer:
    /// a phone whose first download was lost in a campus's sign-in storm
    /// kept no catalog until its network next came back (91 of 1,000 idle
    /// phones in one bench run never had one).
    func catalogFailed(_ result: Result<Envelope, LinkFailure>) {
        var asked: Int64 = 0
        switch result {
        case .failure(.offline): return  // the network's return downloads it
        case .failure: break
        case .success(let reply):
            guard let error = reply.quadError, error.status == 429 || error.status >= 500 else { return }
            asked = error.details["retry_after_ms"]?.int ?? 0
        }
        catalogFailures += 1
        let wait = max(asked, Phone.catalogRetry.delay(attempt: catalogFailures - 1, using: &rng))
        agenda.after(wait) { [weak self] in self?.prefetchCatalog() }
    }
    static let catalogRetry = Backoff(baseMs: 2_000, capMs: 60_000)

    var catalogAgeMs: Int64? {
        guard let text = try? db.meta("catalog_saved_ms"), let at = Int64(text) else { return nil }
        return max(0, now - at)
    }

    func fetchCatalogPage(offset: Int64, rows: [JSON]) {
        request("catalog.products.list", ["limit": 200, "offset": .int(offset)], timeoutMs: settings.readTimeoutMs * 2) { [weak self] result in
            guard let self else { return }
            guard case .success(let reply) = result, reply.quadError == nil, let page = reply.body["products"]?.array else {
                self.catalogFetching = false
                self.catalogFailed(result)
                return
            }
            self.catalogFailures = 0
            let all = rows + page
            let total = reply.body["total"]?.int ?? Int64(all.count)
            if Int64(all.count) < total && !page.isEmpty {
                self.fetchCatalogPage(offset: offset + Int64(page.count), rows: all)
                return
            }
            self.catalogFetching = false
            try? self.db.transaction {
                let held = self.savedCatalogVersions()
                try self.db.execute("DELETE FROM catalog")
                for p in all {
                    // A product the phone holds at a newer version (a live
                    // update after the list was read) keeps its stock.
                    var (stock, version) = (p["stock"]?.int ?? 0, p["version"]?.int ?? 0)
                    if let id = p["id"]?.string, let h = held[id], h.version > version { (stock, version) = (h.stock, h.version) }
                    let name = p["name"]?.string ?? ""
                    // The words the service searches: name, type, category,
                    // collection, specifications and a listing's condition.
                    var words = [name, p["type"]?.string ?? "", p["category"]?.string ?? "", p["collection"]?.string ?? ""]
                    if case .object(let info)? = p["info"] { words += info.keys.sorted().compactMap { info[$0]?.string } }
                    if let condition = p["condition"]?.string { words.append(condition) }
                    let search = words.joined(separator: " ").lowercased()
                    try self.db.execute("""
                        INSERT INTO catalog (id, name, price, currency, category, collection, stock, search, image_url, rest, version)
                        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                        """, .text(p["id"]?.string ?? ""), .text(name), .double(p["price"]?["value"]?.double ?? 0),
                        .text(p["price"]?["currency"]?.string ?? "USD"), .text(p["category"]?.string ?? "Others"),
                        .text(p["collection"]?.string ?? ""), .int(stock), .text(search), .text(p["imageUrl"]?.string ?? ""),
                        .text(Phone.productRest(p)), .int(version))
                }
                try self.db.setMeta("catalog_saved_ms", String(self.now))
            }
        }
    }

    // MARK: Local computation

    func catalogNotice(why: String? = nil) -> String? {
        guard let age = catalogAgeMs else { return "the catalog is not saved on this phone yet" }
        let saved = "from the catalog saved \(Phone.age(age)) ago: prices and stock may have changed"
        if let why { return "\(why): \(saved)" }
        return age > settings.catalogMaxAgeMs || !isOnline ? saved : nil
    }

    /// A page of the saved catalog, as `catalog.products.list` would list it.
    func localPage(_ body: JSON) -> JSON? {
        guard catalogAgeMs != nil else { return nil }
        var filter = ""
        var values: [SQLValue] = []
        if let c = body["category"]?.string { values.append(.text(c)); filter = "WHERE category = $1" }
        let total = (try? db.queryOne("SELECT COUNT(*) AS n FROM catalog \(filter)", values)?.int("n")) ?? 0
        values += [.int(body["limit"]?.int ?? 20), .int(body["offset"]?.int ?? 0)]
        let rows = (try? db.query("SELECT * FROM catalog \(filter) ORDER BY name, id LIMIT $\(values.count - 1) OFFSET $\(values.count)", values)) ?? []
        return ["products": .array(rows.map(Phone.product)), "total": .int(total)]
    }

    func localProduct(_ id: String) -> JSON? {
        (try? db.queryOne("SELECT * FROM catalog WHERE id = $1", .text(id))).flatMap { $0 }.map(Phone.product)
    }

    static func product(_ r: Row) -> JSON {
        var p: [String: JSON] = [:]
        if let text = r.optionalString("rest"), case .object(let rest)? = try? JSON.parse(text) { p = rest }
        p["id"] = .string(r.string("id"))
        p["name"] = .string(r.string("name"))
        p["price"] = ["value": .double(r.double("price")), "currency": .string(r.string("currency"))]
        p["category"] = .string(r.string("category"))
        p["collection"] = .string(r.string("collection"))
        p["stock"] = .int(r.int("stock"))
        p["version"] = .int(r.int("version"))
        if let url = r.optionalString("image_url"), !url.isEmpty { p["imageUrl"] = .string(url) }
        return .object(p)
    }

    /// The fields of a listed product the saved catalog has no column for,
    /// as JSON text (the `rest` column).
    static func productRest(_ p: JSON) -> String {
        guard case .object(var fields) = p else { return "{}" }
        for k in ["id", "name", "price", "category", "collection", "stock", "imageUrl", "version"] { fields[k] = nil }
        return JSON.object(fields).text
    }

    /// Search and filters: online, the service searches (a listing made a
    /// minute ago is found, with its seller); offline, or when the service
    /// does not answer, the saved catalog does: words, category, price
    /// range, in stock, sort.
    func search(_ params: JSON, _ done: @escaping (ViewResult) -> Void) {
        let q = params["q"]?.string ?? ""
        let finish = { [weak self] (r: ViewResult) in
            self?.record("search.performed", ["query_length": .int(Int64(q.count)), "results": .int(r.body["total"]?.int ?? 0)])
            done(r)
        }
        let onPhone = { [weak self] (why: String) in
            guard let self else { return }
            if let found = self.localSearch(params) {
                finish(ViewResult(view: "search", source: .local, body: found, notice: self.catalogNotice(why: why)))
            } else {
                finish(ViewResult(view: "search", source: .none, body: [:], notice: "\(why), and the catalog is not saved on this phone yet"))
            }
        }
        var body: [String: JSON] = ["limit": .int(params["limit"]?.int ?? 20)]
        for k in ["q", "category", "min_price", "max_price", "in_stock", "sort"] { if let v = params[k] { body[k] = v } }
        read("catalog.products.list", .object(body)) { outcome in
            switch outcome {
            case .answered(let reply): finish(ViewResult(view: "search", source: .network, ageMs: 0, body: reply))
            case .refused(let error): finish(ViewResult(view: "search", source: .none, body: [:], error: error))
            case .unreachable(let why): onPhone(why)
            }
        }
    }

    /// A search over the saved catalog, as the service would answer it;
    /// nil while no catalog is saved.
    func localSearch(_ params: JSON) -> JSON? {
        guard catalogAgeMs != nil else { return nil }
        var conditions: [String] = []
        var values: [SQLValue] = []
        for word in (params["q"]?.string ?? "").lowercased().split(separator: " ").prefix(8) {
            values.append(.text("%" + word + "%"))
            conditions.append("search LIKE $\(values.count)")
        }
        if let c = params["category"]?.string { values.append(.text(c)); conditions.append("category = $\(values.count)") }
        if let p = params["min_price"]?.double { values.append(.double(p)); conditions.append("price >= $\(values.count)") }
        if let p = params["max_price"]?.double { values.append(.double(p)); conditions.append("price <= $\(values.count)") }
        if params["in_stock"]?.bool == true { conditions.append("stock > 0") }
        let order = ["price": "price, id", "-price": "price DESC, id", "stock": "stock DESC, id"][params["sort"]?.string ?? ""] ?? "name, id"
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let total = (try? db.queryOne("SELECT COUNT(*) AS n FROM catalog \(filter)", values)?.int("n")) ?? 0
        values.append(.int(params["limit"]?.int ?? 20))
        let rows = (try? db.query("SELECT * FROM catalog \(filter) ORDER BY \(order) LIMIT $\(values.count)", values)) ?? []
        return ["products": .array(rows.map(Phone.product)), "total": .int(total)]
    }

    func pendingNotice(_ types: [String]) -> String? {
        let list = types.map { "'\($0)'" }.joined(separator: ", ")
        let n = (try? db.count("SELECT COUNT(*) AS n FROM outbox WHERE type IN (\(list))")) ?? 0
        return n == 0 ? nil : "\(n) change\(n == 1 ? "" : "s") saved on this phone, waiting to be sent"
    }

    /// Favorites: the phone's own list while changes wait in the outbox;
    /// otherwise the service's, which then replaces the phone's.
    func favorites(_ done: @escaping (ViewResult) -> Void) {
        let local = { [weak self] (notice: String?) -> ViewResult in
            let rows = (try? self?.db.query("SELECT * FROM favorites ORDER BY added_ms DESC, product")) ?? []
            let items: [JSON] = rows.map { r in
                ["product": .string(r.string("product")), "added_at": .int(r.int("added_ms")), "pending": .bool(!r["pending"].isNull)]
            }
            return ViewResult(view: "favorites", source: .local, body: ["items": .array(items), "total": .int(Int64(items.count))], notice: notice)
        }
        // While changes wait to be sent, the list shown is the service's
        // latest the phone holds (its saved list, at the phone's newer
        // versions) with them applied on top, in order (a rebase): a
        // favorite the list had from another phone shows, and nothing
        // undoes a change still queued. No network read then: a phone
        // draining its outbox after a reconnect would send one per view
        // opened (a 1,000-phone day's drain p95 went from 0.9 to 1.9 s).
        if let waiting = pendingNotice(["favorites.add", "favorites.remove"]) {
            guard let copy = saved(Phone.key("favorites.list", ["limit": 200])) else { done(local(waiting)); return }
            done(ViewResult(view: "favorites", source: .saved, ageMs: copy.ageMs,
                            body: SavedFavorites.rebased(db, SavedFavorites.newest(db, copy.body).body), notice: waiting))
            return
        }
        // The service's answer replaces the phone's favorites where it is
        // not older than them (newestFavorites, FavoriteVersions.swift).
        networkThenSaved("favorites", "favorites.list", ["limit": 200], authed: true) { [weak self] r in
            guard let self else { return }
            if r.source == .none && r.error == nil { done(local(r.notice)); return }
            // A saved list shows the phone's newer copies (an answer to an action since).
            guard r.source == .saved else { done(r); return }
            done(ViewResult(view: r.view, source: r.source, ageMs: r.ageMs, body: SavedFavorites.newest(self.db, r.body).body, notice: r.notice, error: r.error))
        }
    }

    func cart() -> JSON {
        let rows = (try? db.query("""
            SELECT c.product, c.quantity, p.name, p.price, p.currency FROM cart c LEFT JOIN catalog p ON p.id = c.product ORDER BY c.added_ms, c.product
            """)) ?? []
        var total = 0.0
        let lines: [JSON] = rows.map { r in
            total += r.double("price") * Double(r.int("quantity"))
            return ["product": .string(r.string("product")), "quantity": .int(r.int("quantity")), "name": .string(r.string("name")),
                    "unit_price": .double(r.double("price"))]
        }
        // The version of the cart the phone last took from the service (CartVersions.swift).
        return ["lines": .array(lines), "subtotal": .double((total * 100).rounded() / 100), "version": .int((try? SavedCart.held(db)) ?? 0)]
    }

    /// Orders: the service's list merged into the phone's history (the
    /// phone's history feeds the 30-day total), plus the orders still queued.
    func orders(_ done: @escaping (ViewResult) -> Void) {
        networkThenSaved("orders", "orders.mine", ["limit": 100], authed: true, onNetwork: { [weak self] body in
            guard let self else { return }
            self.lastSyncMs = self.now
            try? self.db.setMeta("orders_synced_ms", String(self.now))
            try? self.db.transaction {
                for o in body["orders"]?.array ?? [] {
                    guard let id = o["order"]?.string else { continue }
                    try self.db.execute("""
                        INSERT INTO orders (id, status, source, mode, screen, items, total, currency, estimated, created_ms, version, body)
                        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $11)
                        ON CONFLICT (id) DO UPDATE SET status = excluded.status, total = excluded.total, currency = excluded.currency, estimated = 0,
                            version = excluded.version, body = excluded.body
                        WHERE orders.pending IS NULL AND orders.version <= excluded.version
                        """, .text(id), .text(o["status"]?.string ?? "confirmed"), .text(o["source"]?.string ?? "buy_now"),
                        .text(o["mode"]?.string ?? "buy"), .text(o["screen"]?.string ?? "home"), .text((o["items"] ?? .array([])).text),
                        .double(o["total"]?.double ?? 0), .text(o["currency"]?.string ?? "USD"), .int(o["created_at"]?.int ?? self.now),
                        .int(SavedOrders.version(o)), .text(o.text))
                }
            }
        }) { [weak self] r in
            guard let self else { return }
            let pending = ((try? self.db.query("SELECT * FROM orders WHERE pending IS NOT NULL ORDER BY created_ms")) ?? []).map(Phone.order)
            // A saved list shows the phone's newer copies (an answer to an action since) (OrderVersions.swift).
            var body = (r.source == .saved ? SavedOrders.newest(self.db, "orders.mine", r.body, saved: nil).body : r.body).object ?? [:]
            if r.error == nil {
                // And the orders acknowledged that it lacks (a list saved
                // before, or read by the service before an order's answer
                // came; none at all, offline with nothing saved): the
                // student's own writes are never missing from it.
                body["orders"] = .array(SavedOrders.withAcknowledged(self.db, body["orders"]?.array ?? [], limit: 100))
            }
            body["queued"] = .array(pending)
            done(ViewResult(view: r.view, source: r.source, ageMs: r.ageMs, body: .object(body), notice: r.notice, error: r.error))
        }
    }

    static func order(_ r: Row) -> JSON {
        [
            "order": .string(r.string("id")), "status": .string(r.string("status")), "mode": .string(r.string("mode")),
            "screen": .string(r.string("screen")), "total": .double(r.double("total")), "currency": .string(r.string("currency")),
            "estimated": .bool(r.int("estimated") != 0), "created_at": .int(r.int("created_ms")), "pending": .bool(!r["pending"].isNull),
            "reason": r.optionalString("reason").map { .string($0) } ?? .null,
        ]
    }

    /// The 30-day spending total (the SpendiQ seed): computed on the phone
    /// from its order and parking history, queued purchases included at
    /// once, with a notice when it may be stale.
    func spending(nowMs: Int64? = nil) -> ViewResult {
        let now = nowMs ?? self.now
        let since = now - 30 * 86_400_000
        let orders = (try? db.queryOne("""
            SELECT COALESCE(SUM(total), 0) AS total, COUNT(*) AS n, SUM(CASE WHEN pending IS NOT NULL THEN 1 ELSE 0 END) AS queued,
                   SUM(estimated) AS estimated
            FROM orders WHERE status NOT IN ('rejected', 'cancelled') AND created_ms >= $1
            """, .int(since)))
        let stays = (try? db.query("""
            SELECT checked_in_ms, COALESCE(ended_ms, $2) AS ended_ms FROM parking
            WHERE status IN ('checked_in', 'checked_out') AND checked_in_ms IS NOT NULL AND checked_in_ms >= $1
            """, .int(since), .int(now))) ?? []
        var parking = 0.0
        for s in stays {
            let hours = max(1, (s.int("ended_ms") - s.int("checked_in_ms") + 3_599_999) / 3_600_000)
            parking += Double(hours) * Actions.parkingPerHour
        }
        let ordersTotal = orders?.double("total") ?? 0
        let queued = orders?.int("queued") ?? 0
        var notices: [String] = []
        if queued > 0 { notices.append("includes \(queued) purchase\(queued == 1 ? "" : "s") not confirmed yet") }
        if (orders?.int("estimated") ?? 0) > 0 { notices.append("some amounts are estimates from saved prices") }
        let synced = (try? db.meta("orders_synced_ms")).flatMap { $0.flatMap { Int64($0) } } ?? lastSyncMs
        if synced == nil {
            notices.append("not synced with the service yet: orders made on other devices are missing")
        } else if now - synced! > settings.staleAfterMs {
            notices.append("may be outdated: last synced \(Phone.age(now - synced!)) ago")
        }
        let total = ((ordersTotal + parking) * 100).rounded() / 100
        var body: [String: JSON] = [
            "days": 30, "total": .double(total), "orders": .double((ordersTotal * 100).rounded() / 100),
            "parking": .double(parking), "order_count": .int(orders?.int("n") ?? 0), "stays": .int(Int64(stays.count)),
            "queued": .int(queued), "last_sync": synced.map { .int($0) } ?? .null,
        ]
        window(&body, &notices, now: now)
        return ViewResult(view: "spending", source: .local, body: .object(body), notice: notices.isEmpty ? nil : notices.joined(separator: "; "))
    }

    func reservation() -> ViewResult {
        guard let r = (try? Actions.activeParking(db)) ?? (try? db.queryOne("SELECT * FROM parking ORDER BY held_ms DESC LIMIT 1")) else {
            return ViewResult(view: "reservation", source: .local, body: ["active": .null])
        }
        let deadline = r["deadline_ms"].int
        var body = Phone.parking(r)
        if r.string("status") == "held", let deadline {
            body = body.setting("seconds_left", .int(max(0, (deadline - now + 999) / 1000)))
        }
        let pending = !r["pending"].isNull
        return ViewResult(view: "reservation", source: .local, body: ["active": body],
                          notice: pending ? "saved on this phone, waiting to be sent" : r.optionalString("reason"))
    }

    static func parking(_ r: Row) -> JSON {
        var f: [String: JSON] = ["id": .string(r.string("id")), "status": .string(r.string("status")), "pending": .bool(!r["pending"].isNull)]
        for k in ["lot", "spot", "level", "signal", "reason"] { if let v = r.optionalString(k) { f[k] = .string(v) } }
        for k in ["deadline_ms", "checked_in_ms", "ended_ms", "version"] { if let v = r[k].int { f[k] = .int(v) } }
        return .object(f)
    }

    /// Find my car: where the phone saved it (a queued save is newer than
    /// anything the service has), else the service, else its saved copy.
    func car(_ done: @escaping (ViewResult) -> Void) {
        if let pending = try? db.queryOne("SELECT body FROM outbox WHERE type = 'reservations.car.save' ORDER BY seq DESC LIMIT 1") {
            done(ViewResult(view: "car", source: .local, body: ["car": .stored(pending.string("body"))], notice: "saved on this phone, waiting to be sent"))
            return
        }
        networkThenSaved("car", "reservations.car.get", [:], authed: true) { [weak self] r in
            if r.source == .none, r.error == nil, let local = (try? self?.db.meta("car")) {
                done(ViewResult(view: "car", source: .local, body: ["car": .stored(local)], notice: r.notice))
            } else {
                done(r)
            }
        }
    }

    /// Find a spot: a fresh server answer from memory, else the network
    /// (the answer goes into memory and to disk), else the disk copy, which
    /// never goes into memory. `refresh` (pull to refresh) skips the memory.
    func spots(_ params: JSON, refresh: Bool, _ done: @escaping (ViewResult) -> Void) {
        var body: [String: JSON] = [:]
        for k in ["lot", "destination", "kind", "level", "signal", "limit"] { if let v = params[k] { body[k] = v } }
        if body["lot"] == nil && body["destination"] == nil { body["lot"] = "central" }
        let request = JSON.object(body)
        let key = Phone.key("reservations.spots.find", request)
        record("spot.search", ["lot": body["lot"] ?? body["destination"] ?? .null])
        if !refresh, let hit = spotCache.get(key) {
            done(ViewResult(view: "spots", source: .memory, ageMs: hit.ageMs, body: hit.value))
            return
        }
        networkThenSaved("spots", "reservations.spots.find", request, onNetwork: { [weak self] answer in
            self?.spotCache.put(key, answer)
        }, done)
    }

    // MARK: Pictures

    /// Most pictures a view loads at once (a page of 20 products, the lots and buildings).
    static let picturesPerView = 24

    /// A product's pictures: its `imageUrl`, then its `images` (a listing's:
    /// URLs, or sha256 ids under the same base as its imageUrl).
    static func pictures(_ product: JSON) -> [String] {
        var urls: [String] = []
        let main = product["imageUrl"]?.string ?? ""
        if !main.isEmpty { urls.append(main) }
        let base = main.range(of: "/images/").map { String(main[..<$0.lowerBound]) }
        for item in product["images"]?.array ?? [] {
            let given = item.string ?? item["url"]?.string ?? item["id"]?.string ?? ""
            if given.hasPrefix("http://") || given.hasPrefix("https://") {
                urls.append(given)
            } else if let base, ImageCache.contentAddress(given) != nil {
                urls.append(base + "/images/" + given)
            }
        }
        return urls
    }

    /// Loads `urls` through `tier`'s caches, then shows the view with them.
    func withImages(_ r: ViewResult, _ tier: ImageCache.Tier, _ urls: [String], _ done: @escaping (ViewResult) -> Void) {
        var seen = Set<String>()
        let list = Array(urls.filter { seen.insert($0).inserted }.prefix(Phone.picturesPerView))
        guard !list.isEmpty else { done(r); return }
        var shown = [ShownImage?](repeating: nil, count: list.count)
        var left = list.count
        let online = isOnline
        for (k, url) in list.enumerated() {
            images.show(url, tier: tier, online: online) { image in
                shown[k] = image
                left -= 1
                if left == 0 {
                    var out = r
                    out.images = shown.compactMap { $0 }
                    done(out)
                }
            }
        }
    }

    // MARK: Rentals

    /// My rentals (orders.rentals): the service's list, saved for offline
    /// like my orders, with each rental's state computed again from its
    /// due date on the phone's clock (a saved copy of last week still says
    /// what is overdue today), and the returns the phone made over it:
    /// returning while queued, returned once confirmed, or back as it was
    /// with the service's reason.
    func rentals(_ done: @escaping (ViewResult) -> Void) {
        networkThenSaved("rentals", "orders.rentals", ["limit": 100], authed: true) { [weak self] r in
            guard let self else { return }
            let today = Phone.utcDay(self.now)
            var list: [JSON] = []
            let shown = r.source == .saved ? SavedOrders.newest(self.db, "orders.rentals", r.body, saved: nil).body : r.body
            for item in shown["rentals"]?.array ?? [] {
                let order = item["order"]?["order"]?.string ?? ""
                let due = item["due_date"]?.string ?? item["order"]?["return_date"]?.string ?? ""
                var f = item.object ?? [:]
                var state = item["state"]?.string ?? "active"
                let local = try? self.db.queryOne("SELECT * FROM returns WHERE rental = $1", .text(order))
                if let local, local.string("status") == "returning" {
                    state = "returning"
                } else if let local, local.string("status") == "returned" {
                    state = "returned"
                } else if let local, let reason = local.optionalString("reason") {
                    f["return_refused"] = .string(reason)
                }
                if state != "returned" && state != "returning", let days = Phone.daysBetween(today, due) {
                    state = days < 0 ? "overdue" : "active"
                    f["due_in_days"] = .int(days)
                } else if state == "returned" || state == "returning" {
                    f["due_in_days"] = nil
                }
                f["state"] = .string(state)
                f["shown"] = .string(Phone.rentalWords(state, f["due_in_days"]?.int))
                list.append(.object(f))
            }
            var body = r.body.object ?? [:]
            body["rentals"] = .array(list)
            let pending = self.pendingNotice(["orders.return"])
            done(ViewResult(view: "rentals", source: r.source, ageMs: r.ageMs, body: .object(body),
                            notice: [r.notice, pending].compactMap { $0 }.joined(separator: "; ").nilIfEmpty, error: r.error))
        }
    }

    /// What the rentals screen says of one rental.
    static func rentalWords(_ state: String, _ dueIn: Int64?) -> String {
        switch state {
        case "returning": return "returning (waiting to be sent)"
        case "returned": return "returned"
        case "overdue": return "overdue by \(-(dueIn ?? 0)) day\(dueIn == -1 ? "" : "s")"
        default:
            guard let dueIn else { return "active" }
            return dueIn == 0 ? "due today" : "due in \(dueIn) day\(dueIn == 1 ? "" : "s")"
        }
    }

    static func utcDay(_ ms: Int64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// Whole UTC days from `from` to `to` (yyyy-MM-dd each).
    static func daysBetween(_ from: String, _ to: String) -> Int64? {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        guard let a = f.date(from: from), let b = f.date(from: to) else { return nil }
        return Int64((b.timeIntervalSince(a) / 86_400).rounded())
    }
}

fileprivate extension String {
    var nilIfEmpty: String? { isEmpty ? nil : self }
}
