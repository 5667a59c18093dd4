import Foundation
import QuadStore
import QuadWire
import QuadPhoneKit

/// "Synced" as the student sees it: every view says whether all of the
/// student's changes are saved with the services or how many wait and
/// since when, and the control socket gives `synced_through`, the last
/// action a service acknowledged and what its answer made, so that a
/// harness waits for a phone to be synced instead of sleeping.
///
/// `sync` (in every view and in `edge.state`):
///
/// | field | meaning |
/// |---|---|
/// | `synced` | no change waits in the outbox |
/// | `waiting` | the changes not acknowledged yet |
/// | `waiting_since` | when the oldest of them was made (ms since the epoch), or null |
/// | `text` | the line the app shows: "All changes saved" or how many wait, for how long, and why |
/// | `synced_through` | the last acknowledged action: `{action, type, at, made}`, or null before the first |
extension Phone {
    /// The meta key of the last acknowledged action.
    static let syncedThroughKey = "synced_through"

    /// The last acknowledged action, as `finish` recorded it with the reply.
    var syncedThrough: JSON? {
        guard let text = try? db.meta(Phone.syncedThroughKey) else { return nil }
        return try? JSON.parse(text)
    }

    package var syncStatus: JSON {
        let waiting = queueLength
        let oldest = waiting == 0 ? nil : (try? db.queryOne("SELECT MIN(created_ms) AS t FROM outbox"))??["t"].int
        return [
            "synced": .bool(waiting == 0), "waiting": .int(Int64(waiting)),
            "waiting_since": oldest.map { .int($0) } ?? .null,
            "text": .string(syncText(waiting: waiting, oldest: oldest)),
            "synced_through": syncedThrough ?? .null,
        ]
    }

    func syncText(waiting: Int, oldest: Int64?) -> String {
        guard waiting > 0 else { return "All changes saved" }
        var text = "\(waiting) change\(waiting == 1 ? "" : "s") not saved yet"
        if let oldest { text += ", the oldest made \(Phone.age(max(0, now - oldest))) ago" }
        if airplane {
            text += ": airplane mode is on; they are sent when it is off"
        } else if !signal {
            text += ": no signal; they are sent when the network is back"
        } else if !reachable {
            text += ": the services do not answer; the phone keeps trying"
        } else {
            text += ": sending"
        }
        return text
    }

    /// What `finish` records of an acknowledged action: its id and type,
    /// when, and what the answer made (each object of the reply with an id:
    /// its id, and its status, seq or version where the reply gives them).
    static func syncedThrough(_ action: QueuedAction, reply: JSON, at now: Int64) -> JSON {
        var made: [String: JSON] = [:]
        func summary(_ object: JSON) -> JSON? {
            // An order's id is its `order` field.
            guard let id = object["id"]?.string ?? object["order"]?.string else { return nil }
            var s: [String: JSON] = ["id": .string(id)]
            for k in ["status", "seq", "version"] { if let v = object[k], v != .null { s[k] = v } }
            return .object(s)
        }
        // A reply that is itself the object (orders.place answers the
        // order): named after its service, singular ("order").
        if let top = summary(reply) {
            let service = action.type.split(separator: ".").first.map(String.init) ?? "object"
            made[service.hasSuffix("s") ? String(service.dropLast()) : service] = top
        }
        if case .object(let fields) = reply {
            for (k, v) in fields { if let s = summary(v) { made[k] = s } }
        }
        return ["action": .string(action.id), "type": .string(action.type), "at": .int(now), "made": .object(made)]
    }
}

extension Phone {
    /// What the control socket reports for a phone.
    package var state: JSON {
        let oldest = (try? db.queryOne("SELECT MIN(created_ms) AS t FROM outbox"))??["t"].int
        let senderText: String = switch sender {
        case .idle: "idle"
        case .signingIn: "signing_in"
        case .sending: "sending"
        case .backingOff: "backing_off"
        }
        var state: JSON = [
            "phone": .string(name), "user": user.map { .string($0) } ?? .null, "online": .bool(isOnline),
            "airplane": .bool(airplane), "signal": .bool(signal), "reachable": .bool(reachable),
            "pending": .int(Int64(queueLength)), "oldest_pending_age_ms": oldest.map { .int(max(0, now - $0)) } ?? .null,
            "telemetry_queued": .int(Int64(telemetryQueued)), "last_sync": lastSyncMs.map { .int($0) } ?? .null,
            "messages": .int(Int64((try? db.count("SELECT COUNT(*) AS n FROM messages")) ?? 0)),
            "sender": .string(senderText), "session": .string(sessionID),
            "catalog_saved_age_ms": catalogAgeMs.map { .int($0) } ?? .null,
            // All changes saved, or how many wait and since when; the last acknowledged action.
            "sync": syncStatus,
            // This phone's own image counters (the report and /metrics sum them).
            "images": images.stats.json,
        ]
        // What the phone's file lost (StorageFaults.swift), once it lost
        // something: not in protos/edge/control.schema.json's phone_state yet.
        if storageFaults.any { state = state.setting("storage_faults", storageFaults.json) }
        return state
    }
}
