import Foundation
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// Issue 26 point 7: the campus day's students differ as the seeds' users
/// do: semesters 1 to 10, different preferred categories, drivers and
/// shoppers, drawn from the day's seed.
@Suite struct StudentProfileTests {
    /// The profiles of a day's phones, seeded as ``Fleet`` seeds them.
    static func campus(seed: UInt64, phones: Int = 200) -> [StudentProfile] {
        (1...phones).map { StudentProfile(seed: seed &* 1_000_003 &+ UInt64($0)) }
    }

    @Test func theReadmesDayHasEverySemesterManyTastesAndDriversAndShoppers() {
        let students = Self.campus(seed: 7)
        let semesters = Dictionary(grouping: students, by: \.semester).mapValues(\.count)
        #expect(semesters.keys.sorted() == Array(1...10), "\(semesters)")
        #expect(semesters.values.allSatisfy { $0 >= 6 }, "every semester has students: \(semesters)")
        #expect(semesters[1]! > semesters[10]!, "fewer in the last semesters: \(semesters)")
        let tastes = Set(students.map { $0.categories.sorted() })
        #expect(tastes.count >= 30, "\(tastes.count) different sets of preferred categories")
        #expect(students.allSatisfy { (1...3).contains($0.categories.count) && Set($0.categories).count == $0.categories.count })
        let preferred = Set(students.flatMap(\.categories))
        #expect(preferred == Set(StudentProfile.categoryWeights.map(\.0)), "every category is someone's: \(preferred)")
        let habits = Dictionary(grouping: students, by: \.habit).mapValues(\.count)
        #expect(StudentProfile.Habit.allCases.allSatisfy { (habits[$0] ?? 0) >= 40 }, "\(habits)")
    }

    @Test func aSeedMakesTheSameCampusAndAnotherSeedAnother() {
        #expect(Self.campus(seed: 7) == Self.campus(seed: 7))
        let other = zip(Self.campus(seed: 7), Self.campus(seed: 8)).filter { $0 != $1 }.count
        #expect(other > 150, "\(other) of 200 students differ between seeds 7 and 8")
    }

    /// Drivers mostly park, shoppers mostly shop; over the campus a quarter
    /// of the activities are still parking, as before profiles.
    @Test func driversMostlyParkShoppersMostlyShopAndTheCampusMixStaysAsItWas() {
        func share(_ habit: StudentProfile.Habit, _ activity: Student.Activity) -> Double {
            let mix = Student.mix[habit]!
            return Double(mix.first { $0.0 == activity }?.1 ?? 0) / Double(mix.reduce(0) { $0 + $1.1 })
        }
        for habit in StudentProfile.Habit.allCases {
            let mix = Student.mix[habit]!
            #expect(Set(mix.map(\.0)) == Set(Student.Activity.allCases), "\(habit) does everything now and then")
            #expect(mix.reduce(0) { $0 + $1.1 } == 100)
        }
        #expect(share(.driver, .park) >= 0.4 && share(.shopper, .park) <= 0.05)
        #expect(share(.shopper, .browse) > share(.both, .browse) && share(.both, .browse) > share(.driver, .browse))
        let total = StudentProfile.habitWeights.reduce(0) { $0 + $1.1 }
        let park = StudentProfile.habitWeights.reduce(0.0) { $0 + share($1.0, .park) * Double($1.1) / Double(total) }
        #expect(abs(park - share(.both, .park)) < 0.02, "the campus parks \(park) of the time")
        #expect(share(.driver, .deadZone) == share(.shopper, .deadZone), "everyone walks through dead zones")
    }

    /// BQ9's bars: drivers sent off campus spread over the nearby lots with
    /// free spots, the nearer more often, instead of all to the first listed.
    @Test func driversSentOffCampusSpreadOverTheNearbyLotsWithFreeSpots() {
        let lots: [JSON] = [
            ["id": "calle19", "distance_m": 450, "has_free": true], ["id": "aguas", "distance_m": 650, "has_free": true],
            ["id": "germania", "distance_m": 900, "has_free": true], ["id": "full", "distance_m": 100, "has_free": false],
        ]
        var rng = SeededRandom(seed: 7)
        let chosen = Dictionary(grouping: (0..<1_000).compactMap { _ in Student.nearbyLot(lots, &rng) }, by: { $0 }).mapValues(\.count)
        #expect(chosen["full"] == nil && chosen.values.reduce(0, +) == 1_000)
        #expect(chosen["calle19"]! > chosen["aguas"]! && chosen["aguas"]! > chosen["germania"]! && chosen["germania"]! > 150, "\(chosen)")
        #expect(Student.nearbyLot([lots[3]], &rng) == nil, "none with free spots: none")
    }
}
