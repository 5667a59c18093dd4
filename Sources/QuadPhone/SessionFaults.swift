import Foundation
import QuadRuntime
import QuadWire
import QuadPhoneKit

/// Deliberately broken phones, so that each session check of the chaos
/// checker is shown to fail on a real build (Tests/e2e/test_chaos_faults.py).
/// Compiled in only with QUAD_FAULTS (debug builds: Package.swift); a
/// release build has none, whatever its environment says.
///
/// `QUAD_FAULT_EDGE_SESSIONS=1` breaks the phones by number (`phone-007`
/// is 7):
///
/// | number | fault | the check that fails |
/// |---|---|---|
/// | 1, 4, 7, ... | every other time, the product and orders views show the first copy the phone showed of them | monotonic, ryw |
/// | 2, 5, 8, ... | a product view's saved copy, once saved, is never replaced (an answer or a live update) | converged |
/// | 3, 6, 9, ... | none | |
///
/// (`QUAD_FAULT_STALE_ANSWERS=1` on the orders service breaks `wfr`: Faults.swift.)
enum SessionFaults {
    enum Kind { case staleViews, keepFirst }

    #if QUAD_FAULTS
    static let on: Bool = {
        let on = ProcessInfo.processInfo.environment["QUAD_FAULT_EDGE_SESSIONS"] == "1"
        if on { Log.error("faults", "QUAD_FAULT_EDGE_SESSIONS=1: phones 1, 4, 7... show stale views, 2, 5, 8... keep their first saved copies (a deliberately broken build)") }
        return on
    }()
    #else
    static let on = false
    #endif

    /// The fault of phone `name`, if any.
    static func kind(_ name: String) -> Kind? {
        guard on, let last = name.split(separator: "-").last, let n = Int(last) else { return nil }
        switch n % 3 {
        case 1: return .staleViews
        case 2: return .keepFirst
        default: return nil
        }
    }
}

extension Phone {
    /// The view a stale-views phone shows instead of `result` (every
    /// other time, the first copy of it); `result` on any other phone.
    func faultyView(_ result: ViewResult, key: String) -> ViewResult {
        guard SessionFaults.on, SessionFaults.kind(name) == .staleViews, result.view == "product" || result.view == "orders",
              result.error == nil else { return result }
        guard let first = faultFirstShown[key] else {
            faultFirstShown[key] = result.body
            return result
        }
        faultTurn += 1
        guard faultTurn % 2 == 0 else { return result }
        var stale = result
        stale.body = first
        return stale
    }

    /// Whether this phone keeps its first saved copy of a product.
    var keepsFirstCopies: Bool { SessionFaults.on && SessionFaults.kind(name) == .keepFirst }
}
