import Foundation
import QuadWire

/// UniTrade's transaction fee: a percentage of each line, by the product's
/// category (5 to 10 percent in the seed). Amounts are whole cents; each
/// line's fee is rounded half away from zero to the cent.
public struct FeeSchedule: Sendable, Equatable {
    /// Percent by category.
    public let rates: [String: Double]

    public static let defaultText = "Study=5,Tech=8,Creative=6,Lab=5,Personal=7,Others=10"
    /// The rate of a category the schedule does not name: that of Others, or this.
    public static let fallbackRate = 10.0

    /// Parses `Category=percent,...`; each percent from 0 to 100.
    public init(parsing text: String) throws(QuadError) {
        var rates: [String: Double] = [:]
        for part in text.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, !pair[0].isEmpty, let rate = Double(pair[1]), (0...100).contains(rate) else {
                throw .badRequest("--fees must be Category=percent pairs separated by commas, each percent from 0 to 100; got '\(part)'")
            }
            rates[pair[0]] = rate
        }
        guard !rates.isEmpty else { throw .badRequest("--fees names no category") }
        self.rates = rates
    }

    public func rate(_ category: String) -> Double {
        rates[category] ?? rates["Others"] ?? FeeSchedule.fallbackRate
    }

    /// The fee on a line of `cents`.
    public func fee(cents: Int64, category: String) -> Int64 {
        Int64((Double(cents) * rate(category) / 100).rounded())
    }
}

/// Money as whole cents, shown as a decimal number of the currency.
enum Cents {
    static func of(_ price: Double) -> Int64 { Int64((price * 100).rounded()) }
    static func json(_ cents: Int64) -> JSON { .double(amount(cents)) }
    static func amount(_ cents: Int64) -> Double { Double(cents) / 100 }
}
