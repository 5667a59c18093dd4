import Foundation
import QuadWire
import QuadPhoneKit

/// The drivers' answers: ParkWise's Type 2 questions (BQ2 how full each
/// level is by hour, BQ6 the level to head for, BQ10 when each lot is
/// usually full, BQ12 where accessible and EV spots are free), which the
/// seed sends back to the driver inside the app. They come from
/// `analytics.driver`, aggregates of the whole campus only; the view is
/// network then saved copy, so a driver underground still sees the last
/// answers with their age.
extension Phone {
    /// The `insights` view.
    func insights(_ done: @escaping (ViewResult) -> Void) {
        networkThenSaved("insights", "analytics.driver", [:], authed: true) { [weak self] result in
            guard let self else { return }
            var shown = result
            let answers = result.body["answers"]?.array ?? []
            if result.source != .none {
                self.stats.driverAnswersLast = answers.count
                shown.body = ["answers": .array(answers.map(Phone.insight)), "generated_at": result.body["generated_at"] ?? .null]
            }
            done(shown)
        }
    }

    /// One answer as the driver reads it: its number and title, and its
    /// rows by column name.
    static func insight(_ answer: JSON) -> JSON {
        let columns = (answer["columns"]?.array ?? []).compactMap(\.string)
        let rows = (answer["rows"]?.array ?? []).compactMap(\.array).map { row in
            JSON.object(Dictionary(zip(columns, row), uniquingKeysWith: { a, _ in a }))
        }
        return ["number": answer["number"] ?? .null, "id": answer["id"] ?? .null, "title": answer["title"] ?? .null, "rows": .array(rows)]
    }
}
