import CZeroMQ

/// One received frame kept as libzmq's own message (`zmq_msg_t`), never
/// copied into Swift memory: what a router passes on as it came (the broker
/// and a request's body). ``Socket/send(_:then:dontWait:)`` sends it as a
/// `zmq_msg_copy` of itself, which shares the buffer (libzmq counts its
/// references) instead of copying it, so the same frame can be sent again
/// (a request given to a second worker after the first died). Read its bytes
/// with ``bytes`` only where they must be read. Used on one thread.
public final class Frame: @unchecked Sendable, Equatable {
    let msg: UnsafeMutablePointer<zmq_msg_t>

    /// Takes over `message` (left empty, to be closed by its owner).
    init(moving message: inout zmq_msg_t) {
        msg = .allocate(capacity: 1)
        zmq_msg_init(msg)
        zmq_msg_move(msg, &message)
    }

    /// A frame holding a copy of `bytes` (tests, and a router that builds one).
    public init(_ bytes: [UInt8]) {
        msg = .allocate(capacity: 1)
        zmq_msg_init_size(msg, bytes.count)
        if !bytes.isEmpty {
            bytes.withUnsafeBytes { zmq_msg_data(msg).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        }
    }

    deinit {
        zmq_msg_close(msg)
        msg.deallocate()
    }

    /// Its size in bytes.
    public var count: Int { zmq_msg_size(msg) }

    /// A copy of its bytes.
    public var bytes: [UInt8] {
        let n = count
        guard n > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: zmq_msg_data(msg), count: n))
    }

    /// The same frame: frames compare by identity (a router holds them, it
    /// never compares their bytes).
    public static func == (a: Frame, b: Frame) -> Bool { a === b }
}
