import Foundation
import QuadStore
import QuadWire
import Testing
@testable import QuadEdge
@testable import QuadPhone
@testable import QuadPhoneKit

/// What a phone tells ParkWise's questions, and the answers it shows back.
@Suite("The drivers' answers and ParkWise's telemetry on a phone", .serialized)
struct DriverInsightsTests {
    /// An `analytics.driver` reply as analytics builds it: aggregates of the campus.
    static let reply: JSON = [
        "generated_at": 1_764_583_200_000, "from": 0, "to": 1_764_583_200_001,
        "answers": [
            ["id": "recommended_level", "number": "BQ6", "type": 2, "title": "The level to recommend, by lot and hour", "app": "ParkWise",
             "description": "", "chart": ["bar", "slot", "free_spots"], "columns": ["slot", "lot", "hour", "level", "free_spots"],
             "rows": [["ML 08:00", "ML", 8, "P2", 24]]],
            ["id": "special_spots_free", "number": "BQ12", "type": 2, "title": "Where accessible and EV spots are free", "app": "ParkWise",
             "description": "", "chart": ["bar", "place", "accessible_free_percent", "ev_free_percent"],
             "columns": ["place", "snapshots", "free_accessible", "free_ev", "accessible_free_percent", "ev_free_percent"],
             "rows": [["ML P1", 3, 1, 1, 66.7, 66.7]]],
        ],
    ]

    func open(_ rig: PhoneRig, _ view: String, _ params: JSON = [:]) throws -> ViewResult {
        var shown: ViewResult?
        rig.phone.open(view, params) { shown = $0 }
        rig.run(forMs: 10_000) { shown != nil }
        return try #require(shown, "the \(view) view never answered")
    }

    func telemetry(_ rig: PhoneRig) throws -> [(name: String, props: JSON)] {
        try rig.phone.db.query("SELECT name, props FROM telemetry ORDER BY ts, rowid").map { ($0.string("name"), JSON.stored($0.string("props"))) }
    }

    @Test func theAnswersComeFromTheNetworkThenFromTheSavedCopy() throws {
        let rig = try PhoneRig()
        rig.broker.queries["analytics.driver"] = DriverInsightsTests.reply
        rig.phone.start()
        let online = try open(rig, "insights")
        #expect(online.source == .network)
        let answers = online.body["answers"]?.array ?? []
        #expect(answers.map { $0["number"]?.string } == ["BQ6", "BQ12"])
        // Each row by column name, as the driver reads it.
        #expect(answers.first?["rows"] == [["slot": "ML 08:00", "lot": "ML", "hour": 8, "level": "P2", "free_spots": 24]])
        #expect(rig.broker.seen.contains { $0.type == "analytics.driver" } && rig.broker.tokens.values.contains("t"))

        // Underground: the copy saved with its age.
        rig.phone.setAirplane(true)
        let offline = try open(rig, "insights")
        #expect(offline.source == .saved && offline.notice?.hasPrefix("offline") == true)
        #expect(offline.body["answers"]?.array?.count == 2)
        #expect(rig.phone.stats.reads["insights/network"] == 1 && rig.phone.stats.reads["insights/saved"] == 1)
        #expect(rig.phone.stats.driverAnswersLast == 2)
        // The insights view is one of the phone's views, told to telemetry like the others.
        #expect(Phone.views.contains("insights"))
        #expect(try telemetry(rig).filter { $0.name == "view.opened" && $0.props["view"] == "insights" }.count == 2)
    }

    @Test func aRefusalIsShownAndNothingIsSaved() throws {
        let rig = try PhoneRig()
        rig.phone.start()
        // No reply set: the fake broker answers not_found.
        let refused = try open(rig, "insights")
        #expect(refused.source == .none && refused.error?.status == 404)
        rig.phone.setAirplane(true)
        #expect(try open(rig, "insights").source == .none)
    }

    /// BQ11: the Reserve screen sets its mark when it opens and clears it
    /// when another view opens or the app goes to the background; an app
    /// that dies with it set reports a crash in the reservation flow.
    @Test func theReserveScreenSetsAndClearsItsOwnCrashMark() throws {
        let rig = try PhoneRig()
        rig.phone.start()
        _ = try open(rig, "reservation")
        #expect(rig.phone.flowMark?["view"] == "reservation" && rig.phone.flowMark?["flow"] == "reservation")
        _ = try open(rig, "reservation")  // still open: one mark
        _ = try open(rig, "car")
        #expect(rig.phone.flowMark == nil)
        _ = try open(rig, "reservation")
        rig.phone.end()  // to the background
        #expect(rig.phone.flowMark == nil)
        rig.phone.start()
        _ = try open(rig, "reservation")
        rig.phone.start()  // it died with the mark set
        #expect(rig.phone.flowMark == nil)
        let marks = try telemetry(rig).filter { ["mark.set", "mark.cleared", "app.crash", "session.ended"].contains($0.name) }
        #expect(marks.map(\.name) == ["mark.set", "mark.cleared", "mark.set", "mark.cleared", "session.ended", "mark.set", "app.crash"])
        #expect(marks.last?.props == ["view": "reservation", "flow": "reservation"])
        // Closed normally from the Reserve screen: the flow is named, and it is no crash.
        #expect(marks[4].props["flow"] == "reservation")
    }

    /// BQ9 and BQ8: the driver's answer after Navigate, asked once, and the
    /// arrival time changed on the forecast.
    @Test func navigateAsksOnceAndTheArrivalTimeIsTold() throws {
        let rig = try PhoneRig()
        rig.phone.start()
        #expect(!rig.phone.answerNearby(parked: true), "nothing was asked")
        rig.phone.navigate(toNearby: "CityU")
        #expect(rig.phone.answerNearby(parked: true))
        #expect(!rig.phone.answerNearby(parked: false), "asked once")
        rig.phone.setAirplane(true)
        _ = try open(rig, "forecast", ["lot": "ML", "arrival": "2025-12-01T09:30:00-05:00"])
        _ = try open(rig, "forecast", ["lot": "ML"])
        let events = try telemetry(rig)
        #expect(events.filter { $0.name.hasPrefix("nearby.") }.map(\.name) == ["nearby.chosen", "nearby.confirmed"])
        #expect(events.first { $0.name == "nearby.confirmed" }?.props == ["lot": "CityU", "parked": true])
        #expect(events.filter { $0.name == "arrival.changed" }.map(\.props) == [["lot": "ML", "hour": 9]])
        #expect(events.filter { $0.name == "forecast.opened" }.count == 2)
        // Epoch ms read on the campus clock (UTC-5): 14:00 UTC is 9:00.
        #expect(Phone.campusHour(.int(1_764_597_600_000)) == 9 && Phone.campusHour(.int(0)) == 19)
    }
}
