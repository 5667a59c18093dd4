import QuadPhoneKit
/// Who the student behind a phone is, as the seeds' users differ: a
/// semester from 1 to 10 (more in the first ones), one to three preferred
/// categories (UniTrade's), and a habit on campus: some mostly drive and
/// park, some mostly shop, some do both (ParkWise's drivers, UniTrade's
/// shoppers). Drawn from the phone's seed, which is the day's seed and
/// the phone's number (``Fleet``), on a stream of its own: a seed makes
/// the same campus every run, and the phone's other draws stay as they were.
/// The account is registered with the semester and categories; the
/// campus day's ``Student`` chooses activities and products by them.
package struct StudentProfile: Equatable, Sendable {
    package enum Habit: String, CaseIterable, Sendable {
        /// Mostly parks: finds spots, holds, checks in, leaves; shops now and then.
        case driver
        /// Mostly shops: browses, searches, favorites, buys and rents; rarely parks.
        case shopper
        /// Both, as the campus day's students all did before profiles.
        case both
    }

    var semester: Int64
    package var categories: [String]
    package var habit: Habit

    /// UniTrade's categories, and how many students prefer each (weights).
    static let categoryWeights: [(String, Int)] = [("Study", 30), ("Tech", 28), ("Creative", 12), ("Lab", 10), ("Personal", 14), ("Others", 6)]
    /// Students by semester, 1 to 10: fewer in the later ones.
    static let semesterWeights = [14, 13, 12, 11, 10, 10, 9, 8, 7, 6]
    static let habitWeights: [(Habit, Int)] = [(.driver, 35), (.shopper, 35), (.both, 30)]

    init(semester: Int64, categories: [String], habit: Habit) {
        (self.semester, self.categories, self.habit) = (semester, categories, habit)
    }

    init(seed: UInt64) {
        var rng = SeededRandom(seed: seed ^ 0x5354_5544_454E_5453)
        semester = Int64(StudentProfile.pick(StudentProfile.semesterWeights, &rng) + 1)
        var left = StudentProfile.categoryWeights
        var chosen: [String] = []
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            let k = StudentProfile.pick(left.map(\.1), &rng)
            chosen.append(left.remove(at: k).0)
        }
        categories = chosen
        habit = StudentProfile.habitWeights[StudentProfile.pick(StudentProfile.habitWeights.map(\.1), &rng)].0
    }

    /// An index drawn with the given weights.
    package static func pick(_ weights: [Int], _ rng: inout SeededRandom) -> Int {
        var roll = Int.random(in: 0..<max(1, weights.reduce(0, +)), using: &rng)
        for (k, w) in weights.enumerated() {
            if roll < w { return k }
            roll -= w
        }
        return weights.count - 1
    }
}
