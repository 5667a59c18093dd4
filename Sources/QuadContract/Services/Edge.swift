import QuadWire

extension Contract {
    /// The edge part of the contract.
    public enum Edge {}
}

extension Contract.Edge {
    public static let controlSchema = Definition("edge/control.schema.json", title: "quad-edge control socket", .allOf([
            .ref("../envelope.schema.json"),
            .any.keyword("properties", json: ["type": ["enum": ["edge.state", "edge.airplane", "edge.messages", "edge.act", "edge.view", "edge.wait", "edge.log", "edge.report", "edge.stop", "edge.fault"]], "kind": ["enum": ["request", "reply", "error"]]]),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.state"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/state.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.state"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/state.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.airplane"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/airplane.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.airplane"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/airplane.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.messages"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/messages.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.messages"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/messages.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.act"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/act.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.act"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/act.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.view"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/view.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.view"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/view.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.wait"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/wait.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.wait"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/wait.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.log"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/log.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.log"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/log.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.report"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/report.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.report"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/report.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.stop"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/stop.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.stop"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/stop.reply"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.fault"], "kind": ["const": "request"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/fault.request"]])),
            .when(.any.keyword("properties", json: ["type": ["const": "edge.fault"], "kind": ["const": "reply"]]).keyword("required", json: ["type", "kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "#/$defs/fault.reply"]])),
            .when(.any.keyword("properties", json: ["kind": ["const": "error"]]).keyword("required", json: ["kind"]), then: .any.keyword("properties", json: ["body": ["$ref": "../error.schema.json"]])),
        ])
            .described("What a harness (a test, quadctl phone) and a quad-edge process say on its control socket (--control, a ROUTER; a DEALER or REQ asks). Each message is a whole Quad envelope of type edge.<op>: a request, and its reply or error with corr set. The socket is the edge process's own, not behind the broker. edge.view and edge.wait are answered when the view has something to show or the drain ends; the others at once. Errors: bad_request (a missing or wrong field), not_found (no such phone), unavailable (an online-only action without network), conflict (an action the phone refuses at once: one active reservation, empty cart).")
            .definitions([
                "phone_state": .object([
                    "phone": .string(),
                    "user": .string().nullable
                        .described("The signed-in user id, null before the first sign-in."),
                    "online": .bool
                        .described("Radio on and the network answering."),
                    "airplane": .bool,
                    "signal": .bool
                        .described("False where the scenario has no signal (an underground level)."),
                    "reachable": .bool
                        .described("False after a request went unanswered (a cut the phone cannot see), true after any answer."),
                    "pending": .int(min: 0)
                        .described("Actions in the outbox."),
                    "oldest_pending_age_ms": .int(min: 0).nullable,
                    "telemetry_queued": .int(min: 0),
                    "last_sync": .int().nullable
                        .described("When a service last answered one of its actions, ms since 1970."),
                    "messages": .int(min: 0),
                    "sender": .choice(["idle", "signing_in", "sending", "backing_off"]),
                    "session": .string(),
                    "catalog_saved_age_ms": .int(min: 0).nullable
                        .described("How old the catalog saved on the phone is (search and filters offline use it), null while none is saved.").optional,
                    "images": .object(open: true)
                        .described("This phone's image caches since the process started: hits {memory, disk}, misses, fetched, bytes_fetched, bytes_from_cache, evictions, refused, placeholders, revalidated.").optional,
                    "sync": .ref("#/$defs/sync").optional,
                    "storage_faults": .object([
                        "corrupt": .int(min: 0).described("files found damaged or not a database at open, moved aside as FILE.damaged-MS"),
                        "rolled_back": .int(min: 0).described("files found behind the write generation the keychain keeps: writes lost"),
                        "generations_lost": .int(min: 0).described("outbox writes (an action queued or answered) the files lost"),
                        "actions_lost": .int(min: 0).described("queued actions the files lost before they were sent: what the device lost, not the system"),
                    ])
                        .described("What the phone's file lost over the phone's life (counted in its keychain), present once it lost something.").optional,
                ])
                    .described("One phone as the control socket reports it."),
                "sync": .object([
                    "synced": .bool
                        .described("No change of the student's waits in the outbox: all are saved with the services."),
                    "waiting": .int(min: 0)
                        .described("The changes not acknowledged yet."),
                    "waiting_since": .int(min: 0).nullable
                        .described("When the oldest waiting change was made, ms since 1970; null when none waits."),
                    "text": .string()
                        .described("What the app shows: 'All changes saved', or how many wait, for how long, and why (airplane mode, no signal, the services not answering, sending)."),
                    "synced_through": .object([
                        "action": .string()
                            .described("The action's envelope id."),
                        "type": .string(),
                        "at": .int(min: 0)
                            .described("When the phone recorded the answer, ms since 1970."),
                        "made": .object(open: true)
                            .described("What the answer made: each object of the reply with an id (the reply itself under its service's name, e.g. order), as {id, status?, seq?, version?}."),
                    ]).nullable
                        .described("The last action a service acknowledged, null before the first."),
                ])
                    .described("Whether the student's changes are saved: in every view, in each phone's state, and in a wait for one phone."),
                "message": .object([
                    "ts": .int(min: 0),
                    "action": .string(),
                    "type": .string(),
                    "code": .string(),
                    "status": .int(),
                    "reason": .string()
                        .described("The service's own message."),
                    "text": .string()
                        .described("What the user reads."),
                ])
                    .described("A message left for the user: an action a service refused, with its reason."),
                "state.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                ])
                    .described("All phones without phone."),
                "state.reply": .object([
                    "phones": .array(of: .ref("#/$defs/phone_state")),
                    "totals": .object([
                        "phones": .int(min: 0),
                        "online": .int(min: 0),
                        "pending": .int(min: 0),
                        "telemetry_queued": .int(min: 0),
                    ]),
                ]),
                "airplane.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "on": .bool,
                ])
                    .described("Airplane mode on or off, for one phone or (without phone) for all. Off starts the sender at once."),
                "airplane.reply": .object([
                    "phones": .array(of: .ref("#/$defs/phone_state")),
                ]),
                "messages.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "limit": .int(1...1000).optional,
                ]),
                "messages.reply": .object([
                    "phone": .string(),
                    "messages": .array(of: .ref("#/$defs/message")),
                ]),
                "act.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "type": .choice(["favorites.add", "favorites.remove", "orders.cart.add", "orders.cart.set", "orders.cart.remove", "orders.cart.clear", "orders.place", "orders.return", "reservations.hold", "reservations.checkin", "reservations.checkout", "reservations.cancel", "reservations.car.save", "orders.cancel"])
                        .described("The action's request type. orders.cancel is online only: refused at once (unavailable, 503) without network, with the reason."),
                    "body": .object(open: true)
                        .described("The action's body as the service takes it; reservations.checkin, checkout and cancel default to the phone's active reservation.").optional,
                ])
                    .described("The phone's user makes an action: written to the outbox with its envelope id and shown at once (optimistic). A refusal the phone can tell at once (no active reservation, an empty cart, online only while offline) is the error answer."),
                "act.reply": .object([
                    "phone": .string(),
                    "id": .string()
                        .described("The action's envelope id: the service's idempotency key for every retry."),
                    "outcome": .choice(["queued", "sent"])
                        .described("queued: in the outbox; sent: an online-only action sent at once, its refusal left as a message."),
                ]),
                "view.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "view": .choice(["home", "product", "search", "foryou", "favorites", "cart", "orders", "spending", "parking", "levels", "forecast", "spots", "nearby", "reservation", "car", "messages", "rentals", "insights"]),
                    "params": .object(open: true)
                        .described("The view's parameters: lot, destination, kind, level for spots; q, category, min_price, max_price, in_stock, sort for search; id for product...").optional,
                    "refresh": .bool
                        .described("Pull to refresh: spots skip the in-memory cache.").optional,
                ]),
                "view.reply": .object([
                    "phone": .string(),
                    "view": .string(),
                    "source": .choice(["network", "saved", "memory", "local", "none"])
                        .described("Where what is shown came from."),
                    "age_ms": .int(min: 0).optional,
                    "body": .any
                        .described("What the view shows: the service's reply body, a saved copy of it, or what the phone computed."),
                    "notice": .string()
                        .described("What the user is told about it: offline with the age of the copy, pending changes, a stale total.").optional,
                    "error": .ref("../error.schema.json").optional,
                    "images": .array(of: .object([
                        "url": .string(),
                        "source": .choice(["network", "disk", "memory", "placeholder"])
                            .described("network: fetched just now (and cached); disk or memory: a cache hit, no request; placeholder: not shown, with the reason."),
                        "bytes": .int(min: 0),
                        "reason": .string()
                            .described("Why the placeholder is shown (offline: image not in cache; refused: over max_image_bytes or bytes that do not match their SHA-256; not found).").optional,
                        "revalidated": .bool
                            .described("An expired disk copy the server confirmed with 304 (If-None-Match).").optional,
                    ]))
                        .described("The pictures the view shows (product, home, parking), each with where it came from.").optional,
                    "sync": .ref("#/$defs/sync").optional,
                ]),
                "wait.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "timeout_ms": .int(0...3600000).optional,
                    "telemetry": .bool
                        .described("Also wait for the telemetry queues.").optional,
                ])
                    .described("Answers once the outboxes (of one phone, or all) are empty, or at the timeout (default 30000)."),
                "wait.reply": .object([
                    "drained": .bool,
                    "pending": .int(min: 0),
                    "telemetry_queued": .int(min: 0),
                    "waited_ms": .int(min: 0),
                    "sync": .ref("#/$defs/sync")
                        .described("With one phone named: its sync status once the wait ends.").optional,
                ]),
                "log.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "limit": .int(min: 1).optional,
                ]),
                "log.reply": .object([
                    "phone": .string(),
                    "actions": .array(of: .object([
                            "id": .string(),
                            "type": .string(),
                            "outcome": .choice(["pending", "done", "rejected"]),
                            "attempts": .int(min: 0),
                            "created_at": .int(min: 0),
                            "code": .string()
                                .described("The refusal's code; dropped for a step queued behind a refused one.").optional,
                            "reason": .string().optional,
                        ])),
                ]),
                "report.request": .object(),
                "report.reply": .object([
                    "final": .bool,
                    "phones": .int(min: 0),
                    "elapsed_ms": .int(min: 0),
                    "actions": .object([
                        "created": .int(min: 0),
                        "done": .int(min: 0),
                        "rejected": .int(min: 0),
                        "pending": .int(min: 0),
                        "by_type": .object(open: true),
                    ]),
                    "rejected": .array(of: .object([
                            "type": .string(),
                            "code": .string(),
                            "reason": .string(),
                            "count": .int(min: 0),
                        ])),
                    "refused_online_only": .object(open: true).optional,
                    "max_queue": .object([
                        "phone": .int(min: 0),
                        "all_phones": .int(min: 0),
                    ]),
                    "drain": .object(open: true),
                    "reads": .object(open: true).optional,
                    "reads_by_view": .object(open: true).optional,
                    "telemetry": .object(open: true),
                    "accounted": .bool
                        .described("created = done + rejected + pending, and, in a final report, nothing pending."),
                    "images": .object(open: true)
                        .described("The phones' image caches: hits {memory, disk}, misses, fetched, bytes_fetched, bytes_from_cache, evictions, refused, placeholders, revalidated, hit_ratio.").optional,
                    "rentals": .object(open: true)
                        .described("Rentals made since the day began (from the phones' files): made, by_status, returned, returns by outcome (returned, returning, refused), late_days, return_actions (orders.return by outcome).").optional,
                    "live": .object([
                        "phones_with_feed": .int(min: 0),
                        "live_now": .int(min: 0),
                        "received": .int(min: 0),
                        "applied": .int(min: 0),
                        "duplicates": .int(min: 0),
                        "stale_dropped": .int(min: 0),
                        "latency_ms": .object(open: true),
                        "polls": .int(min: 0),
                        "catch_ups": .int(min: 0),
                        "news": .object(open: true),
                        "broker_moves": .int(min: 0).described("times a phone moved its request and updates links to another broker (a request that timed out, a feed silent for 6 s)").optional,
                        "resent_after_move": .int(min: 0).described("requests waiting when their phone moved, sent again on the new broker under the same id").optional,
                    ])
                        .described("The phones' live feeds (the brokers' updates sockets) since this process started: events received and their latency from the service's outbox to the phone {p50, p95, max}, applied to saved copies, heard twice (a repeat after a move), older than the saved copy and dropped, polls while a feed was quiet, catch-ups (a snapshot after a silence), news {received, for_another_user (must be 0)}, and the phones' moves between brokers.").optional,
                    "driver_answers": .object([
                        "shown": .int(min: 0),
                        "by_source": .object(open: true),
                        "answers": .int(min: 0),
                    ])
                        .described("The drivers' answers (the insights view: ParkWise's Type 2 questions from analytics.driver, network then saved copy) the phones showed since they started: shown (with something on screen), by_source (network, saved, none), and answers (the answers in the last one shown).").optional,
                    "cart_edits": .object([
                        "made": .int(min: 0),
                        "offline": .int(min: 0),
                        "done": .int(min: 0),
                        "rejected": .int(min: 0),
                        "by_type": .object(open: true),
                        "offline_outcomes": .object([
                            "done": .int(min: 0),
                            "rejected": .int(min: 0),
                            "pending": .int(min: 0),
                        ]),
                        "rejected_reasons": .array(of: .object([
                                "type": .string(),
                                "code": .string(),
                                "reason": .string(),
                                "count": .int(min: 0),
                                "offline": .int(min: 0),
                            ])),
                    ])
                        .described("The cart edits (orders.cart.set, orders.cart.remove, orders.cart.clear) made since the day began, from the phones' action logs: made, done (confirmed), rejected (rolled back), by_type (each type by outcome); offline is how many were queued without network, offline_outcomes what became of those (done, rejected, pending), rejected_reasons the rollbacks by type, code and reason (an example), with how many of them were made offline.").optional,
                    "keychain_check": .object([
                        "phones_clean": .int(min: 0),
                        "phones_with_secret": .int(min: 0),
                        "found": .array(of: .string()),
                    ])
                        .described("A final report's check of every phone's files (its SQLite file with -wal, -shm and -journal, its keychain and PIN salt), read whole: phones clean, phones whose files hold one of their secrets (session or refresh token, password, CURVE secret key; must be 0, else the day exits 1), and the first files found with what they hold.").optional,
                    "notifications": .object([
                        "received": .int(min: 0),
                        "unread": .int(min: 0),
                        "phones": .int(min: 0),
                        "by_kind": .object(open: true),
                        "not_theirs": .int(min: 0),
                    ])
                        .described("The users' news in the phones' files (notifications.since): received, unread, phones with any, by_kind; not_theirs counts those kept under another user or about an order or hold the phone never made (0 when every notification reached its own user only).").optional,
                    "marketplace": .object(open: true)
                        .described("quad-edge run: rentals_placed and returns_queued by the students, and listings {attempted, created, rejected, no_answer, reasons}.").optional,
                    "seed": .int(min: 0).optional,
                    "resumed": .object([
                        "restarts": .int(min: 0),
                        "resumed_phones": .int(min: 0),
                        "day_started_ms": .int(min: 0),
                        "this_run_started_ms": .int(min: 0),
                        "since_this_run": .array(of: .string()),
                    ])
                        .described("quad-edge run: a day killed in the middle and started again on the same phone files (same seed) goes on: restarts counts the processes killed before this one, resumed_phones the phones found in the day; actions count over the whole day (from the phones' files), the figures named in since_this_run only since this process started.").optional,
                    "speed": .number().optional,
                    "duration_ms": .int(min: 0).optional,
                    "activities": .int(min: 0).optional,
                    "sign_in_before_day": .oneOf([
                        .object([
                            "ms": .oneOf([
                                .int(min: 0),
                                .null,
                            ]),
                            "phones_with_session": .int(min: 0),
                            "p50_ms": .oneOf([.int(min: 0), .null]).described("a phone's time from its first try to a session, median").optional,
                            "p95_ms": .oneOf([.int(min: 0), .null]).described("the same, 95th percentile").optional,
                            "rate_limited": .int(min: 0).described("sign-in tries answered 429 (accounts' hash budget, the broker's rate), each waited out for its retry_after_ms and a random part more").optional,
                            "failed_tries": .int(min: 0).described("sign-in tries that failed otherwise (no answer, 503), tried again").optional,
                        ]),
                        .null,
                    ])
                        .described("quad-edge run --sign-in-first on (the default): how long every phone took to sign in (register) before the day's clock started, how many had a session then, each phone's time and the 429s seen; null with --sign-in-first off.").optional,
                    "device_lost": .object([
                        "corrupt": .int(min: 0),
                        "rolled_back": .int(min: 0),
                        "generations_lost": .int(min: 0),
                        "actions_lost": .int(min: 0),
                        "phones": .int(min: 0),
                    ])
                        .described("What the phones' files lost (storage faults: a damaged or rolled-back file), summed over the phones that lost something, apart from what the system lost (which must stay 0); absent when none did.").optional,
                    "histograms": .object(open: true)
                        .described("The samples behind the percentiles, as counts by value in ms ({\"ms\": count}; exact below 1,000 ms, above rounded up to three significant digits), so that several processes' reports merge into exact percentiles (deploy/campus): drain_after_reconnect_ms, drain_without_session_ms, drain_connect_ms, live_latency_ms, news_latency_ms, sign_in_ms.").optional,
                ])
                    .described("What quad-edge run prints as JSON at the end of a campus day (and writes to --report)."),
                "fault.request": .object([
                    "phone": .string(1...64)
                        .described("A phone's name in this process, such as phone-001 (optional when the process runs one phone).").optional,
                    "kind": .choice(["snapshot", "rollback", "corrupt", "truncate", "garbage", "crash"])
                        .described("snapshot: copy the phone's file aside (it keeps running); rollback: stop the phone, put the snapshot back (writes since it are lost, as a power loss without fsync loses them) and start it again; corrupt, truncate, garbage: stop it, overwrite pages with random bytes, cut the file short or replace it with bytes that are not a database, and start it again. The phone finds the damage at open, moves a damaged file aside, signs in again to its account and rebuilds from the services. corrupt, truncate and garbage keep the file as it was as FILE.before-KIND-MS, rollback the file it replaces as FILE.rolledback-MS. crash: the quad-edge process is killed (SIGKILL) inside the phone's next commit, its write half done; answered at once, armed."),
                ])
                    .described("A storage fault on one phone's file, for tests and chaos runs."),
                "fault.reply": .object([
                    "phone": .string(),
                    "kind": .string(),
                    "snapshot": .string().described("snapshot: where the copy is.").optional,
                    "state": .ref("#/$defs/phone_state").described("The phone's state once started again.").optional,
                    "armed": .const(true).described("crash: the kill waits for the phone's next commit.").optional,
                ]),
                "stop.request": .object(),
                "stop.reply": .object([
                    "stopping": .const(true),
                ]),
            ]))

    public static let definitions: [Definition] = [controlSchema]
}
