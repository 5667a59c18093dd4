/// The one error type that crosses the wire: a code, its HTTP-like status and
/// a message that names the problem. Errors compare by code.
public struct QuadError: Error, Sendable, CustomStringConvertible, Equatable {
    public var code: Code
    public var status: Int
    public var message: String
    public var details: JSON

    /// What went wrong, as a type: the codes Quad sends are its constants
    /// (`.conflict`, `.timeout`), compared and switched on as values, never
    /// as strings. A code read from the wire that this build does not know
    /// (a newer peer's) is kept as it came, and says so (``isKnown``).
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Known: String, CaseIterable {
            case badRequest = "bad_request", unauthorized, forbidden, notFound = "not_found", conflict, gone,
                 tooLarge = "too_large", tooManyRequests = "too_many_requests", unavailable, timeout, `internal`
        }

        private enum Value: Hashable { case known(Known), other(String) }
        private let value: Value

        private init(_ known: Known) { value = .known(known) }

        /// The code as the wire spells it (`"bad_request"`); any text that is
        /// not one of Quad's codes is kept as it is.
        public init(wire: String) { value = Known(rawValue: wire).map { .known($0) } ?? .other(wire) }

        /// The code as the wire spells it.
        public var wire: String {
            switch value {
            case .known(let k): k.rawValue
            case .other(let s): s
            }
        }

        public var description: String { wire }

        /// One of the codes this build sends.
        public var isKnown: Bool { if case .known = value { true } else { false } }

        /// Every code Quad sends, in the order of their statuses.
        public static let all: [Code] = Known.allCases.map { Code($0) }

        public static let badRequest = Code(.badRequest)            // 400
        public static let unauthorized = Code(.unauthorized)        // 401
        public static let forbidden = Code(.forbidden)              // 403
        public static let notFound = Code(.notFound)                // 404
        public static let conflict = Code(.conflict)                // 409
        public static let gone = Code(.gone)                        // 410
        public static let tooLarge = Code(.tooLarge)                // 413
        public static let tooManyRequests = Code(.tooManyRequests)  // 429
        public static let unavailable = Code(.unavailable)          // 503
        public static let timeout = Code(.timeout)                  // 504
        public static let `internal` = Code(.internal)              // 500
    }

    public init(code: Code, status: Int, message: String, details: JSON = .null) {
        self.code = code
        self.status = status
        self.message = message
        self.details = details
    }

    public static func == (a: QuadError, b: QuadError) -> Bool { a.code == b.code }

    public var description: String { "\(code) (\(status)): \(message)" }

    public static func badRequest(_ m: String, details: JSON = .null) -> QuadError { .init(code: .badRequest, status: 400, message: m, details: details) }
    public static func unauthorized(_ m: String) -> QuadError { .init(code: .unauthorized, status: 401, message: m) }
    public static func forbidden(_ m: String) -> QuadError { .init(code: .forbidden, status: 403, message: m) }
    public static func notFound(_ m: String) -> QuadError { .init(code: .notFound, status: 404, message: m) }
    public static func conflict(_ m: String, details: JSON = .null) -> QuadError { .init(code: .conflict, status: 409, message: m, details: details) }
    public static func gone(_ m: String) -> QuadError { .init(code: .gone, status: 410, message: m) }
    public static func tooLarge(_ m: String, details: JSON = .null) -> QuadError { .init(code: .tooLarge, status: 413, message: m, details: details) }
    public static func tooManyRequests(_ m: String, details: JSON = .null) -> QuadError { .init(code: .tooManyRequests, status: 429, message: m, details: details) }
    public static func unavailable(_ m: String) -> QuadError { .init(code: .unavailable, status: 503, message: m) }
    public static func timeout(_ m: String) -> QuadError { .init(code: .timeout, status: 504, message: m) }
    public static func `internal`(_ m: String) -> QuadError { .init(code: .`internal`, status: 500, message: m) }

    /// The error as an envelope body: `{code, status, message, details}`.
    public var body: JSON {
        ["code": .string(code.wire), "status": .int(Int64(status)), "message": .string(message), "details": details]
    }

    /// Reads an error body; nil when the body is not one.
    public init?(body: JSON) {
        guard let code = body["code"]?.string, let status = body["status"]?.int, let message = body["message"]?.string else { return nil }
        self.init(code: Code(wire: code), status: Int(status), message: message, details: body["details"] ?? .null)
    }
}
