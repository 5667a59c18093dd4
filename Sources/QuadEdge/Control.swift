import Foundation
import QuadRuntime
import QuadWire
import QuadPhone
import QuadPhoneKit

/// The control socket: a ROUTER speaking Quad's envelope, framed as MDP/0.2
/// or bare (so a DEALER ``Client``, a REQ socket or `quadctl phone` can
/// ask), with request types
/// `edge.*`. Schemas and examples: `protos/edge/`.
///
/// | type | body | answer |
/// |---|---|---|
/// | `edge.state` | `{phone?}` | `{phones: [state], totals}` |
/// | `edge.airplane` | `{phone?, on}` (no phone: all) | `{phones: [state]}` |
/// | `edge.messages` | `{phone, limit?}` | `{phone, messages}` |
/// | `edge.act` | `{phone, type, body}` | `{phone, id, outcome: "queued" \| "sent"}`, or the refusal as an error |
/// | `edge.view` | `{phone, view, params?, refresh?}` | what the view shows, `{view, source, age_ms?, body, notice?, error?}` |
/// | `edge.wait` | `{phone?, timeout_ms?, telemetry?}` | `{drained, pending, telemetry_queued, waited_ms, sync?}` once drained or at the timeout (`sync`, the phone's sync status, when one phone is named) |
/// | `edge.log` | `{phone, limit?}` | `{phone, actions: [{id, type, outcome, code?, reason?, attempts}]}` oldest first |
/// | `edge.report` | `{}` | the campus day's report so far (or the fleet's totals) |
/// | `edge.stop` | `{}` | `{stopping: true}`; the process stops its phones and exits 0 |
/// | `edge.fault` | `{phone, kind}` | damages the phone's file (``FileDamage``) and starts it again: `{phone, kind, state}` |
extension Fleet {
    func serveControl() {
        guard let control else { return }
        while let frames = try? control.receive(dontWait: true) {
            guard frames.count >= 2, var bytes = frames.last else { continue }
            // An MDP/0.2 REQUEST (what ``Client`` sends) is answered with a
            // FINAL; a bare envelope (a REQ socket, a script) with a bare one.
            let reply: (Envelope) -> Void
            var header: [UInt8]?
            if case let .success(mdp) = Majordomo.parseRequest(frames.dropFirst(), count: frames.count - 1) {
                bytes = mdp.body
                header = mdp.header
                let route = [frames[0]]
                reply = { envelope in
                    try? control.send(route + Majordomo.reply(service: mdp.service, envelope.encoded(), form: mdp.form), dontWait: true)
                }
            } else {
                let route = Array(frames.dropLast())
                reply = { envelope in try? control.send(route + [envelope.encoded()], dontWait: true) }
            }
            let request: Envelope
            do throws(QuadError) {
                if let header { request = try Envelope.decode(header: header, body: bytes) } else { request = try Envelope.decode(bytes) }
            } catch {
                reply(.error(error, corr: Envelope.salvageID(header ?? bytes), src: "edge"))
                continue
            }
            let answer: (Result<JSON, QuadError>) -> Void = { result in
                switch result {
                case .success(let body): reply(request.reply(body, src: "edge"))
                case .failure(let error): reply(request.error(error, src: "edge"))
                }
            }
            do { try handle(request, answer) } catch { answer(.failure(error)) }
        }
    }

    func handle(_ request: Envelope, _ answer: @escaping (Result<JSON, QuadError>) -> Void) throws(QuadError) {
        let body = request.body
        switch request.type {
        case "edge.state":
            let list = try body["phone"]?.string.map { name throws(QuadError) in [try phone(name)] } ?? phones
            answer(.success(["phones": .array(list.map(\.state)), "totals": totals(list)]))
        case "edge.airplane":
            guard let on = body["on"]?.bool else { throw .badRequest("body.on must be true or false") }
            let list = try body["phone"]?.string.map { name throws(QuadError) in [try phone(name)] } ?? phones
            for p in list { p.setAirplane(on) }
            answer(.success(["phones": .array(list.map(\.state))]))
        case "edge.messages":
            let p = try phone(body["phone"]?.string)
            answer(.success(["phone": .string(p.name), "messages": .array(p.messages(limit: Int(body["limit"]?.int ?? 100)))]))
        case "edge.act":
            let p = try phone(body["phone"]?.string)
            guard let type = body["type"]?.string else { throw .badRequest("body.type is required: the action's request type, e.g. favorites.add") }
            switch p.act(type, body["body"] ?? [:]) {
            case .queued(let id):
                answer(.success(["phone": .string(p.name), "id": .string(id), "outcome": "queued"]))
            case .sent(let id):
                answer(.success(["phone": .string(p.name), "id": .string(id), "outcome": "sent"]))
            case .refused(let error):
                throw error
            }
        case "edge.view":
            let p = try phone(body["phone"]?.string)
            guard let view = body["view"]?.string, Phone.views.contains(view) else {
                throw .badRequest("body.view must be one of \(Phone.views.joined(separator: ", "))")
            }
            p.open(view, body["params"] ?? [:], refresh: body["refresh"]?.bool ?? false) { result in
                answer(.success(result.json.setting("phone", .string(p.name))))
            }
        case "edge.wait":
            let list = try body["phone"]?.string.map { name throws(QuadError) in [try phone(name)] } ?? phones
            let timeout = body["timeout_ms"]?.int ?? 30_000
            guard (0...3_600_000).contains(timeout) else { throw .badRequest("body.timeout_ms must be between 0 and 3600000") }
            whenDrained(list, telemetry: body["telemetry"]?.bool ?? false, timeoutMs: timeout) { answer(.success($0)) }
        case "edge.log":
            let p = try phone(body["phone"]?.string)
            let limit = body["limit"]?.int ?? 1000
            let rows = (try? p.db.query("SELECT * FROM action_log ORDER BY created_ms, rowid LIMIT $1", .int(limit))) ?? []
            answer(.success(["phone": .string(p.name), "actions": .array(rows.map { r in
                var f: [String: JSON] = [
                    "id": .string(r.string("id")), "type": .string(r.string("type")), "outcome": .string(r.string("outcome")),
                    "attempts": .int(r.int("attempts")), "created_at": .int(r.int("created_ms")),
                ]
                if let c = r.optionalString("code") { f["code"] = .string(c) }
                if let m = r.optionalString("reason") { f["reason"] = .string(m) }
                return .object(f)
            })]))
        case "edge.report":
            answer(.success(day?.report(self, final: false) ?? Report.make(self, since: startedMs, final: false, day: nil)))
        case "edge.fault":
            try phone(body["phone"]?.string).injectFault(body["kind"]?.string, answer)
        case "edge.stop":
            answer(.success(["stopping": true]))
            // After this turn of the loop, so the answer leaves first.
            agenda.after(50) { [weak self] in self?.stop() }
        default:
            throw .notFound("unknown request type '\(request.type)': the edge answers edge.state, edge.airplane, edge.messages, edge.act, edge.view, edge.wait, edge.log, edge.report, edge.stop, edge.fault")
        }
    }

    func totals(_ list: [Phone]) -> JSON {
        var pending = 0, telemetry = 0, online = 0
        for p in list {
            pending += p.queueLength
            telemetry += p.telemetryQueued
            if p.isOnline { online += 1 }
        }
        return ["phones": .int(Int64(list.count)), "online": .int(Int64(online)), "pending": .int(Int64(pending)),
                "telemetry_queued": .int(Int64(telemetry))]
    }
}
