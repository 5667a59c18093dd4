/// The one error type that crosses the wire: a code, its HTTP-like status and
/// a message that names the problem. Errors compare by code.
public struct QuadError: Error, Sendable, CustomStringConvertible, Equatable {
    public var code: String
    public var status: Int
    public var message: String
    public var details: JSON

    public init(code: String, status: Int, message: String, details: JSON = .null) {
        self.code = code
        self.status = status
        self.message = message
        self.details = details
    }

    public static func == (a: QuadError, b: QuadError) -> Bool { a.code == b.code }

    public var description: String { "\(code) (\(status)): \(message)" }

    public static func badRequest(_ m: String, details: JSON = .null) -> QuadError { .init(code: "bad_request", status: 400, message: m, details: details) }
    public static func unauthorized(_ m: String) -> QuadError { .init(code: "unauthorized", status: 401, message: m) }
    public static func forbidden(_ m: String) -> QuadError { .init(code: "forbidden", status: 403, message: m) }
    public static func notFound(_ m: String) -> QuadError { .init(code: "not_found", status: 404, message: m) }
    public static func conflict(_ m: String, details: JSON = .null) -> QuadError { .init(code: "conflict", status: 409, message: m, details: details) }
    public static func gone(_ m: String) -> QuadError { .init(code: "gone", status: 410, message: m) }
    public static func tooLarge(_ m: String, details: JSON = .null) -> QuadError { .init(code: "too_large", status: 413, message: m, details: details) }
    public static func tooManyRequests(_ m: String, details: JSON = .null) -> QuadError { .init(code: "too_many_requests", status: 429, message: m, details: details) }
    public static func unavailable(_ m: String) -> QuadError { .init(code: "unavailable", status: 503, message: m) }
    public static func timeout(_ m: String) -> QuadError { .init(code: "timeout", status: 504, message: m) }
    public static func `internal`(_ m: String) -> QuadError { .init(code: "internal", status: 500, message: m) }

    /// The error as an envelope body: `{code, status, message, details}`.
    public var body: JSON {
        ["code": .string(code), "status": .int(Int64(status)), "message": .string(message), "details": details]
    }

    /// Reads an error body; nil when the body is not one.
    public init?(body: JSON) {
        guard let code = body["code"]?.string, let status = body["status"]?.int, let message = body["message"]?.string else { return nil }
        self.init(code: code, status: Int(status), message: message, details: body["details"] ?? .null)
    }
}
