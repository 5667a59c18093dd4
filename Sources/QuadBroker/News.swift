import QuadAuth
import QuadWire

/// Each user's news, carried by the broker to the connections that asked
/// for it (`sys.news`, on the frontend, with a session token) and to no
/// other. A channel is the client's route on the frontend (libzmq never
/// gives one connection's routing id to another) and the claims of the
/// token that opened it; it ends with that session: when the token expires,
/// is revoked (a logout, a password or role change: the broker sweeps its
/// channels every second and at each revocation), or is replaced by the
/// client's next `sys.news` (a renewed token, no gap).
///
/// Why not the updates socket: an XPUB in manual mode subscribes the
/// connection that sent the last subscription message read, and libzmq
/// 4.3.4 (Debian 12's) still does so when that connection has closed
/// meanwhile: the subscription lands on a dead pipe, whose memory the next
/// connection may reuse (a 200-phone day heard 3 other users' news that
/// way). A subscription there also cannot be ended when its session ends.
struct NewsChannels {
    struct Channel {
        var route: [UInt8]
        var claims: TokenClaims
        var openedMs: Int64
    }

    private(set) var byRoute: [[UInt8]: Channel] = [:]
    /// Each user's routes, oldest first.
    private(set) var byUser: [String: [[UInt8]]] = [:]
    /// Channels one user may hold (`max_news_channels_per_user`): past it
    /// the oldest closes (a phone's old connections, after moves and dead
    /// zones, are never told to the broker).
    let maxPerUser: Int
    /// Channels in all (`max_news_channels`): past it a new one is refused.
    let maxChannels: Int
    private(set) var delivered: Int64 = 0
    private(set) var closedBySession: Int64 = 0

    init(maxPerUser: Int = 16, maxChannels: Int = 200_000) {
        self.maxPerUser = maxPerUser
        self.maxChannels = maxChannels
    }

    var count: Int { byRoute.count }

    /// Opens (or renews, with a new token) the channel of `route`.
    mutating func open(_ route: [UInt8], claims: TokenClaims, now: Int64) throws(QuadError) {
        if let old = byRoute[route] {
            if old.claims.user != claims.user { close(route) } else {
                byRoute[route]?.claims = claims
                return
            }
        }
        guard byRoute.count < maxChannels else {
            throw .unavailable("the broker holds \(maxChannels) news channels (max_news_channels): ask again later; notifications.since has the news meanwhile")
        }
        var routes = byUser[claims.user, default: []]
        while routes.count >= maxPerUser {
            byRoute[routes.removeFirst()] = nil
        }
        routes.append(route)
        byUser[claims.user] = routes
        byRoute[route] = Channel(route: route, claims: claims, openedMs: now)
    }

    mutating func close(_ route: [UInt8]) {
        guard let channel = byRoute.removeValue(forKey: route) else { return }
        let user = channel.claims.user
        byUser[user]?.removeAll { $0 == route }
        if byUser[user]?.isEmpty == true { byUser[user] = nil }
    }

    /// The routes of `user`'s channels whose session is still good at `now`.
    mutating func routes(of user: String, now: Int64, isRevoked: (TokenClaims) -> Bool) -> [[UInt8]] {
        guard let routes = byUser[user] else { return [] }
        var out: [[UInt8]] = []
        for route in routes {
            guard let channel = byRoute[route] else { continue }
            if channel.claims.expiresAt <= now || isRevoked(channel.claims) {
                close(route)
                closedBySession += 1
            } else {
                out.append(route)
            }
        }
        delivered += Int64(out.count)
        return out
    }

    /// Closes every channel whose token expired by `now` or was revoked.
    mutating func sweep(now: Int64, isRevoked: (TokenClaims) -> Bool) {
        for (route, channel) in byRoute where channel.claims.expiresAt <= now || isRevoked(channel.claims) {
            close(route)
            closedBySession += 1
        }
    }
}
