import QuadWire

extension Contract {
    /// The notifications part of the contract: each user's private news.
    public enum Notifications {}
}

extension Contract.Notifications {
    /// Largest page of notifications.since (`max_page_size`) and most ids
    /// one notifications.read marks (`max_read_ids`).
    public static let maxPageSize: Int64 = 200
    public static let maxReadIDs: Int64 = 100
    /// What a notification is about.
    public static let kinds = ["order_confirmed", "order_rejected", "hold_warning", "hold_expired", "rental_due", "rental_overdue", "listing_sold"]

    /// One notification, as its user reads it.
    public struct Notification: Body, Equatable {
        public var id = ""
        public var user = ""
        public var seq: Int64 = 0
        public var kind = ""
        public var text = ""
        public var ref = ""
        public var ts: Int64 = 0
        public var read = false
        /// The service's version of it (see `version`'s description).
        public var version: Int64?
        public init() {}
        public static let fields: [Field<Self>] = [
            .field(\.id, "id", .string(1...64)),
            .field(\.user, "user", .string(1...128)
                .described("Whose it is: always the caller (the phone checks it is its own user).")),
            .field(\.seq, "seq", .int(min: 1)
                .described("Its place in the inbox: the cursor notifications.since pages by.")),
            .field(\.kind, "kind", .choice(kinds)),
            .field(\.text, "text", .string(min: 1)),
            .field(\.ref, "ref", .string(1...64)
                .described("The order, reservation or listing it is about.")),
            .field(\.ts, "ts", .int(min: 0).described("ms since epoch.")),
            .field(\.read, "read", .bool),
            .field(\.version, "version", .int(min: 1).described("The notification's version: its seq when made, then the number the notifications service's counter (the one that numbers notifications) gave the notifications.read that marked it read. Of two copies of a notification, the one with the higher version is the newer, whichever way each came (notifications.since, notifications.news, whose copy is at its seq, the reply to notifications.read).").optional),
        ]
    }

    public enum Since {
        public struct Request: Body {
            public var after: Int64 = 0
            public var limit: Int64 = 50
            public init() {}
            public init(after: Int64, limit: Int64) { (self.after, self.limit) = (after, limit) }
            public static let fields: [Field<Self>] = [
                .field(\.after, "after", .int(min: 0, default: 0)
                    .described("The cursor: the last seq the caller has; 0 for the whole inbox.").optional),
                .field(\.limit, "limit", .int(1...maxPageSize, default: 50).limit("max_page_size").optional),
            ]
        }
        public struct Reply: Body {
            public var items: [Notification] = []
            public var last: Int64 = 0
            public var more = false
            public var unread: Int64 = 0
            public init() {}
            public init(items: [Notification], last: Int64, more: Bool, unread: Int64) {
                (self.items, self.last, self.more, self.unread) = (items, last, more, unread)
            }
            public static let fields: [Field<Self>] = [
                .field(\.items, "items", .array(of: Notification.shape, max: Int(maxPageSize))),
                .field(\.last, "last", .int(min: 0)
                    .described("The cursor to ask after next: the last item's seq, or after when the page is empty.")),
                .field(\.more, "more", .bool.described("Whether more notifications follow the page.")),
                .field(\.unread, "unread", .int(min: 0).described("The caller's unread notifications, all pages.")),
            ]
        }
    }

    public static let since = TypedOperation<Since.Request, Since.Reply>(
        "notifications.since", .query, auth: .user,
        request: Since.Request.shape
            .described("The caller's own notifications after the cursor, oldest first, one page. Only the caller's: a body naming a user is refused with forbidden (403)."),
        reply: Since.Reply.shape
            .described("A page of the caller's notifications, the cursor to ask after next, and how many are unread."))

    public enum Read {
        public struct Request: Body {
            public var ids: [String]?
            public var upTo: Int64?
            public init() {}
            public static let fields: [Field<Self>] = [
                .field(\.ids, "ids", .array(of: .string(1...64), min: 1, max: Int(maxReadIDs)).limit("max_read_ids")
                    .described("Notifications to mark read, at most max_read_ids (100).").optional),
                .field(\.upTo, "up_to", .int(min: 0)
                    .described("Marks read every notification of the caller with seq up to this one.").optional),
            ]
        }
        public struct Reply: Body {
            public var marked: Int64 = 0
            public var unread: Int64 = 0
            public var version: Int64?
            public init() {}
            public init(marked: Int64, unread: Int64, version: Int64? = nil) { (self.marked, self.unread, self.version) = (marked, unread, version) }
            public static let fields: [Field<Self>] = [
                .field(\.marked, "marked", .int(min: 0).described("How many this request changed from unread to read.")),
                .field(\.unread, "unread", .int(min: 0)),
                .field(\.version, "version", .int(min: 1).described("The version the notifications this request marked now have; absent when it marked none.").optional),
            ]
        }
    }

    public static let read = TypedOperation<Read.Request, Read.Reply>(
        "notifications.read", .mutation, auth: .user,
        request: Read.Request.shape
            .described("Marks the caller's notifications read: the ids given, or every one up to a seq. Give ids or up_to, not both. An id that is not one of the caller's notifications is not_found (404), in the same words as one that does not exist, and nothing is marked. Idempotent by state: marking a read one again changes nothing.")
            .requiresOne(of: ["ids", "up_to"]).exclusive("ids", "up_to"),
        reply: Read.Reply.shape
            .described("How many were marked, and how many of the caller's stay unread."))

    /// notifications.news: one notification, for its user's phones only.
    public struct News: Body, Equatable {
        public var user = ""
        public var id = ""
        public var seq: Int64 = 0
        public var kind = ""
        public var text = ""
        public var ref = ""
        public var ts: Int64 = 0
        public init() {}
        public init(user: String, id: String, seq: Int64, kind: String, text: String, ref: String, ts: Int64) {
            (self.user, self.id, self.seq, self.kind, self.text, self.ref, self.ts) = (user, id, seq, kind, text, ref, ts)
        }
        public static let fields: [Field<Self>] = [
            .field(\.user, "user", .string(1...128)
                .described("Whose news it is: the broker routes it to that user's phones only.")),
            .field(\.id, "id", .string(1...64)),
            .field(\.seq, "seq", .int(min: 1)
                .described("The notification's place in its user's inbox, as notifications.since numbers it.")),
            .field(\.kind, "kind", .choice(kinds)),
            .field(\.text, "text", .string(min: 1)),
            .field(\.ref, "ref", .string(1...64)),
            .field(\.ts, "ts", .int(min: 0).described("ms since epoch.")),
        ]
    }

    public static let news = TypedEvent<News>("notifications.news", body: News.shape
            .described("A user's notification, written with it in one transaction: private news for that user's phones only, never for anyone else. The broker's updates socket carries it under user/<id>/notifications.news to the connections that subscribed with that user's session token (user/<token>), and to no one else."),
        audience: .user(field: "user"))

    public static let operations: [Operation] = [read.operation, since.operation]
    public static let events: [Event] = [news.event]
    public static let definitions: [Definition] = []
}
