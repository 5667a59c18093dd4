import QuadWire

extension Contract {
    /// The sys part of the contract.
    public enum BrokerSys {}
}

extension Contract.BrokerSys {
    public static let health = Operation(
        "sys.health", .query, auth: .none,
        request: .object()
            .described("No parameters: the body is an empty object (or absent). Answered by the broker itself; a service's own health is <service>.sys.health (common/)."),
        reply: .object([
            "status": .choice(["ok", "degraded"]),
            "service": .const("broker"),
            "pid": .int(min: 1)
                .described("Shown to admins and services only.").optional,
            "malformed": .int(min: 0)
                .described("Messages refused for their frame count (admins and services only).").optional,
            "revocations": .int(min: 0)
                .described("Revoked tokens and users the broker holds (admins and services only).").optional,
            "uptime_ms": .int(min: 0),
            "workers": .int(min: 0)
                .described("Live workers of every service."),
            "requests": .int(min: 0)
                .described("Messages received from clients."),
            "events": .int(min: 0)
                .described("Events relayed from publishers to subscribers."),
            "curve": .bool
                .described("Whether the public frontend speaks CURVE (false only with --curve off).").optional,
            "late_replies": .int(min: 0)
                .described("Replies that came from a worker after the broker had answered timeout (504), dropped.").optional,
            "rate_limited": .int(min: 0)
                .described("Requests refused with 429 by the rate limit (rate_per_second, rate_burst).").optional,
        ])
            .described("The broker is alive: its counters since it started."))

    public static let services = Operation(
        "sys.services", .query, auth: .none,
        request: .object()
            .described("No parameters: the body is an empty object (or absent). Answered by the broker itself."),
        reply: .object([
            "services": .array(of: .object([
                    "name": .string(pattern: "^[a-z0-9_-]+$"),
                    "queue": .int(min: 0)
                        .described("Requests waiting for an idle worker."),
                    "routed": .int(min: 0)
                        .described("Requests sent to its workers since the broker started.").optional,
                    "expired": .int(min: 0)
                        .described("Requests answered unavailable because their deadline passed in the queue.").optional,
                    "timed_out": .int(min: 0)
                        .described("Requests answered timeout (504) because their deadline passed while a worker held them.").optional,
                    "workers": .array(of: .object([
                            "instance": .string(1...128).optional,
                            "pid": .int(min: 1).optional,
                            "served": .int(min: 0)
                                .described("Requests the broker has routed to it."),
                            "busy": .bool
                                .described("A request is out on it now."),
                        ])),
                ])),
        ])
            .described("What the broker routes to: every service a worker registered (a request for a service that never registered creates nothing and gets 404), with its live workers and the requests waiting for one. Instance names and pids are shown to admins and services only."))

    public static let news = Operation(
        "sys.news", .query, auth: .user,
        request: .object()
            .described("No parameters: the body is an empty object (or absent); the session token says whose news. Answered by the broker itself."),
        reply: .object([
            "news": .const(true),
            "user": .string(1...128)
                .described("Whose news this connection hears."),
            "until": .int(min: 0)
                .described("When the channel ends with its token (ms since epoch), unless a sys.news with a newer token renews it; a logout or a password or role change ends it within a second."),
            "channels": .int(min: 1)
                .described("This user's channels on this broker (max_news_channels_per_user, 16: past it the oldest ends)."),
        ])
            .described("A news channel: from now on the broker sends this user's news events (kind event, e.g. notifications.news) on the connection that asked, and on no other, as FINAL messages of service sys that answer no request. The channel ends with the token's session; a phone asks again at each new token, after a move to another broker and every 30 s."))

    public static let operations: [Operation] = [health, services, news]
}
