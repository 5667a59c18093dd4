import Foundation
import QuadAuth
import QuadMessaging
import QuadRuntime
import QuadWire

/// The dashboard's signed-in admins: a random id (the cookie's value) for
/// each, kept in memory until it ends. A restart signs everyone out, which
/// is the safe way round. At most `max` are kept; past it the one ending
/// soonest goes, so the table is bounded by the setting, not by sign-ins.
/// A session lives no longer than the token accounts gave for it: a logout
/// of that token, a password or role change (``revoke(user:tokenID:issuedBefore:)``,
/// from `accounts.session.revoked`) ends it as it ends the token at the broker.
final class Sessions: @unchecked Sendable {
    struct Open {
        var user: String
        var expires: Int64
        var tokenID: String
        var issuedAt: Int64
    }

    // Safe to share: every field is read and written under `lock`.
    let lock = NSLock()
    var open: [String: Open] = [:]
    let max: Int

    init(max: Int) { self.max = Swift.max(1, max) }

    /// Opens a session for `user` until `expires` (ms since 1970); returns its id.
    func start(user: String, expires: Int64) -> String {
        start(DashboardServer.SignedIn(user: user, role: "admin", expiresAt: expires), expires: expires)
    }

    /// Opens a session for who signed in, until `expires`; returns its id.
    func start(_ who: DashboardServer.SignedIn, expires: Int64) -> String {
        var g = SystemRandomNumberGenerator()
        let id = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &g)) }.joined()
        let now = Int64(Clock.nowMillis())
        lock.withLock {
            open = open.filter { $0.value.expires > now }
            while open.count >= max, let first = open.min(by: { $0.value.expires < $1.value.expires }) { open[first.key] = nil }
            open[id] = Open(user: who.user, expires: expires, tokenID: who.tokenID, issuedAt: who.issuedAt)
        }
        return id
    }

    /// Ends the sessions of `user` whose token is `tokenID`, or was issued
    /// before `issuedBefore` (ms since 1970); returns how many ended.
    @discardableResult
    func revoke(user: String, tokenID: String?, issuedBefore: Int64?) -> Int {
        lock.withLock {
            let ending = open.filter { _, s in
                s.user == user && ((tokenID.map { !$0.isEmpty && $0 == s.tokenID } ?? false) || (issuedBefore.map { s.issuedAt < $0 } ?? false))
            }
            for id in ending.keys { open[id] = nil }
            return ending.count
        }
    }

    /// The user of a live session, or nil.
    func user(_ id: String, now: Int64 = Int64(Clock.nowMillis())) -> String? {
        lock.withLock {
            guard let s = open[id] else { return nil }
            guard s.expires > now else {
                open[id] = nil
                return nil
            }
            return s.user
        }
    }

    func end(_ id: String) { lock.withLock { open[id] = nil } }

    var count: Int { lock.withLock { open.count } }
}

/// Slows down guessing through the sign-in page, per client address: after
/// a failed sign-in the address waits 1 s, doubling with each further
/// failure up to ``maxWaitMs``; a success clears it. Accounts throttles
/// per account too; this keeps one address from spending the dashboard's
/// share of it. At most ``maxAddresses`` are remembered.
final class SignInThrottle: @unchecked Sendable {
    // Safe to share: every field is read and written under `lock`.
    let lock = NSLock()
    var failures: [String: (count: Int, until: Int64)] = [:]
    static let maxWaitMs: Int64 = 60_000
    static let maxAddresses = 4096

    /// How long `client` must still wait, in ms, or nil.
    func wait(_ client: String, now: Int64) -> Int64? {
        lock.withLock {
            guard let f = failures[client], f.until > now else { return nil }
            return f.until - now
        }
    }

    func failed(_ client: String, now: Int64) {
        lock.withLock {
            if failures.count >= SignInThrottle.maxAddresses {
                failures = failures.filter { $0.value.until > now }
                while failures.count >= SignInThrottle.maxAddresses, let first = failures.min(by: { $0.value.until < $1.value.until }) {
                    failures[first.key] = nil
                }
            }
            let count = (failures[client]?.count ?? 0) + 1
            let wait = min(SignInThrottle.maxWaitMs, 1000 << Int64(min(count - 1, 16)))
            failures[client] = (count, now + wait)
        }
    }

    func succeeded(_ client: String) { lock.withLock { failures[client] = nil } }
}

/// Signs in through accounts: `accounts.login` on the broker's internal
/// frontend (CURVE with the services' key when it is on), one socket per
/// sign-in, on the calling HTTP connection's thread.
public enum AccountsSignIn {
    public static func through(endpoint: String, source: String, timeoutMs: Int64 = 5000) -> DashboardServer.SignIn {
        let context = ZMQContext()
        return { email, password in
            let client: Client
            do { client = try Client(context: context, endpoint: endpoint, source: source, isInternal: true) } catch {
                throw QuadError.unavailable("cannot reach accounts: \(error)")
            }
            let reply = try client.call(.request("accounts.login", body: ["email": .string(email), "password": .string(password)]),
                                        timeoutMs: timeoutMs, attempts: 1)
            if let error = reply.quadError { throw error }
            guard let user = reply.body["user"]?.string, let role = reply.body["role"]?.string,
                  let token = reply.body["token"]?.string, let claims = try? Token.unverifiedClaims(token) else {
                throw QuadError.internal("accounts.login answered without user, role and a readable token")
            }
            // Read, not verified: it came from accounts over the internal
            // socket; the session needs its id and age to end with it.
            return DashboardServer.SignedIn(user: user, role: role, expiresAt: reply.body["expires_at"]?.int ?? claims.expiresAt,
                                            tokenID: claims.tokenID, issuedAt: claims.issuedAt)
        }
    }
}

/// The sign-in page and its form.
enum SignInPage {
    static func html(message: String?) -> String {
        let note = message.map { "<p class=\"error\" role=\"alert\">\(Dashboard.escape($0))</p>" } ?? ""
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Sign in · Quad analytics</title>
            <style nonce="\(Dashboard.nonceMark)">
            body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1e2330; }
            header { padding: 16px 24px; background: #1e2330; color: #fff; }
            header h1 { margin: 0; font-size: 20px; }
            form { background: #fff; max-width: 360px; margin: 32px auto; padding: 24px; border-radius: 8px; box-shadow: 0 1px 3px rgba(0,0,0,.12); }
            label { display: block; margin: 0 0 12px; }
            input { display: block; width: 100%; box-sizing: border-box; padding: 6px 8px; margin-top: 4px; font: inherit; }
            button { padding: 6px 16px; font: inherit; }
            .error { color: #b3261e; margin: 0 0 12px; }
            </style>
            </head>
            <body>
            <header><h1>Quad analytics</h1></header>
            <form method="post" action="/signin">
            \(note)
            <label>Email <input type="email" name="email" autocomplete="username" required></label>
            <label>Password <input type="password" name="password" autocomplete="current-password" required></label>
            <button type="submit">Sign in</button>
            </form>
            </body>
            </html>

            """
    }

    /// The fields of an `application/x-www-form-urlencoded` body.
    static func form(_ body: [UInt8]) -> [String: String] {
        var out: [String: String] = [:]
        for pair in body.split(separator: UInt8(ascii: "&")) {
            let kv = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let key = decode(kv[0]) else { continue }
            out[key] = kv.count > 1 ? decode(kv[1]) : ""
        }
        return out
    }

    /// Percent-decoding with `+` as a space; nil when the bytes are not UTF-8.
    static func decode(_ bytes: ArraySlice<UInt8>) -> String? {
        var out: [UInt8] = []
        var k = bytes.startIndex
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 65...70: return c - 55
            case 97...102: return c - 87
            default: return nil
            }
        }
        while k < bytes.endIndex {
            let c = bytes[k]
            if c == UInt8(ascii: "+") {
                out.append(32)
            } else if c == UInt8(ascii: "%"), k + 2 < bytes.endIndex, let h = hex(bytes[k + 1]), let l = hex(bytes[k + 2]) {
                out.append(h << 4 | l)
                k += 2
            } else {
                out.append(c)
            }
            k += 1
        }
        return String(validating: out, as: UTF8.self)
    }
}
