import QuadStore
import QuadWire

/// The campus a new store starts with, after ParkWise: two campus lots with
/// three levels each (P1 at street level with signal, P2 and P3 underground
/// with none), three nearby off-campus lots for when campus is full, and the
/// buildings drivers head to. Spot ids read like the signs: `central-P2-017`.
enum Campus {
    struct Lot {
        let id: String
        let name: String
        let kind: String  // campus or nearby
        let address: String
        let distanceM: Int64
        let lat: Double
        let lon: Double
        /// How much busier than the campus curve it runs (1: as the curve).
        let busy: Double
        let levels: [Level]
    }

    struct Level {
        let name: String
        let floor: Int64
        let signal: String  // good, weak or none
        let accessible: Int
        let ev: Int
        let regular: Int
        var total: Int { accessible + ev + regular }
    }

    struct Destination {
        let id: String
        let name: String
        /// Walking metres from each campus lot's pedestrian exit.
        let walks: [String: Int64]
    }

    static let campusLevels = [
        Level(name: "P1", floor: 1, signal: "good", accessible: 6, ev: 6, regular: 36),
        Level(name: "P2", floor: 2, signal: "none", accessible: 2, ev: 4, regular: 42),
        Level(name: "P3", floor: 3, signal: "none", accessible: 2, ev: 2, regular: 44),
    ]

    static let lots = [
        Lot(id: "central", name: "Central parking", kind: "campus", address: "Cra. 1 #18A-12, Bogotá",
            distanceM: 0, lat: 4.60142, lon: -74.06596, busy: 1, levels: campusLevels),
        Lot(id: "north", name: "North parking (W building)", kind: "campus", address: "Cra. 1 Este #19A-40, Bogotá",
            distanceM: 0, lat: 4.60331, lon: -74.06481, busy: 0.92, levels: campusLevels),
        Lot(id: "calle19", name: "Parqueadero Calle 19", kind: "nearby", address: "Cl. 19 #3-50, Bogotá",
            distanceM: 450, lat: 4.60418, lon: -74.06912, busy: 1,
            levels: [Level(name: "P1", floor: 1, signal: "good", accessible: 2, ev: 2, regular: 36)]),
        Lot(id: "aguas", name: "Parqueadero Las Aguas", kind: "nearby", address: "Cra. 3 #18-45, Bogotá",
            distanceM: 650, lat: 4.60235, lon: -74.07004, busy: 0.9,
            levels: [Level(name: "P1", floor: 1, signal: "weak", accessible: 2, ev: 0, regular: 28)]),
        Lot(id: "germania", name: "Parqueadero La Germania", kind: "nearby", address: "Cl. 21 #4-12, Bogotá",
            distanceM: 900, lat: 4.60612, lon: -74.07135, busy: 0.8,
            levels: [Level(name: "P1", floor: 1, signal: "good", accessible: 1, ev: 0, regular: 23)]),
    ]

    static let destinations = [
        Destination(id: "ML", name: "Mario Laserna building", walks: ["central": 120, "north": 380]),
        Destination(id: "SD", name: "Santo Domingo building", walks: ["central": 200, "north": 250]),
        Destination(id: "W", name: "W building", walks: ["central": 400, "north": 90]),
        Destination(id: "LL", name: "Lleras building", walks: ["central": 300, "north": 150]),
    ]

    static let kinds = ["regular", "accessible", "ev"]

    /// Metres a level below street level adds to a walk (ramps, stairs,
    /// lift): the recommendation prefers a slightly longer walk on P1.
    static let floorPenaltyM: Int64 = 40

    static func levelID(_ lot: String, _ level: String) -> String { "\(lot)-\(level)" }

    /// Writes the campus once; workers starting together on one store
    /// write it once between them (every insert is ON CONFLICT DO NOTHING).
    static func seedIfEmpty(_ db: Database) throws {
        try db.transaction {
            if try db.queryOne("SELECT id FROM lots LIMIT 1") != nil { return }
            for (position, lot) in lots.enumerated() {
                try db.execute("""
                    INSERT INTO lots (id, name, kind, address, distance_m, lat, lon, position)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING
                    """, .text(lot.id), .text(lot.name), .text(lot.kind), .text(lot.address), .int(lot.distanceM),
                    .double(lot.lat), .double(lot.lon), .int(Int64(position)))
                for level in lot.levels {
                    let levelID = levelID(lot.id, level.name)
                    try db.execute("""
                        INSERT INTO levels (id, lot, name, floor, signal) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING
                        """, .text(levelID), .text(lot.id), .text(level.name), .int(level.floor), .text(level.signal))
                    // Accessible spots sit by the lift, then the chargers, then the rest.
                    let layout = Array(repeating: "accessible", count: level.accessible) + Array(repeating: "ev", count: level.ev)
                        + Array(repeating: "regular", count: level.regular)
                    for (k, kind) in layout.enumerated() {
                        let number = k + 1
                        let id = "\(levelID)-" + String(repeating: "0", count: max(0, 3 - String(number).count)) + String(number)
                        try db.execute("""
                            INSERT INTO spots (id, lot, level, number, kind, walk_m) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
                            """, .text(id), .text(lot.id), .text(levelID), .int(Int64(number)), .text(kind), .int(Int64(8 + 3 * k)))
                    }
                }
            }
            for d in destinations {
                try db.execute("INSERT INTO destinations (id, name) VALUES ($1, $2) ON CONFLICT DO NOTHING", .text(d.id), .text(d.name))
                for (lot, walk) in d.walks.sorted(by: { $0.key < $1.key }) {
                    try db.execute("INSERT INTO walks (destination, lot, walk_m) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                                   .text(d.id), .text(lot), .int(walk))
                }
            }
        }
    }
}

/// Campus time: the weekday and hour a forecast compares, in the campus's
/// own UTC offset (Bogotá, -05:00, no daylight saving).
struct CampusTime: Sendable {
    let offsetMinutes: Int64

    static let weekdays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

    func local(_ ms: Int64) -> Int64 { ms + offsetMinutes * 60_000 }

    /// 0 is Sunday; 1970-01-01 was a Thursday.
    func weekday(_ ms: Int64) -> Int64 {
        let days = floorDiv(local(ms), 86_400_000)
        return ((days % 7) + 7 + 4) % 7
    }

    func hour(_ ms: Int64) -> Int64 { floorMod(local(ms), 86_400_000) / 3_600_000 }

    /// Minutes since local midnight.
    func minuteOfDay(_ ms: Int64) -> Int64 { floorMod(local(ms), 86_400_000) / 60_000 }

    /// Local midnight of the day holding `ms`, as epoch ms.
    func midnight(_ ms: Int64) -> Int64 { ms - floorMod(local(ms), 86_400_000) }

    /// `2025-03-03T08:30:00-05:00`.
    func iso(_ ms: Int64) -> String {
        let l = local(ms)
        let days = floorDiv(l, 86_400_000)
        let secs = floorMod(l, 86_400_000) / 1000
        let (y, m, d) = CampusTime.civil(fromDays: days)
        let sign = offsetMinutes < 0 ? "-" : "+"
        let off = abs(offsetMinutes)
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(secs / 3600, 2)):\(pad(secs / 60 % 60, 2)):\(pad(secs % 60, 2))\(sign)\(pad(off / 60, 2)):\(pad(off % 60, 2))"
    }

    func pad(_ n: Int64, _ width: Int) -> String {
        let s = String(n)
        return String(repeating: "0", count: max(0, width - s.count)) + s
    }

    /// Howard Hinnant's days-to-civil: (year, month, day) of a day number.
    static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }

    /// Day number of a civil date (the inverse of ``civil(fromDays:)``).
    static func days(year y0: Int64, month m: Int64, day d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }
func floorMod(_ a: Int64, _ b: Int64) -> Int64 { a - floorDiv(a, b) * b }
