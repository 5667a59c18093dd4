import Foundation

/// The heap's free pages, handed back to the system (glibc's
/// `malloc_trim`). Start-up (migrations, seeds, the contract's first
/// build) and a burst of large replies leave free holes inside the heap
/// that glibc keeps mapped and that count in the process's private memory
/// (up to 1.3 MB of an idle service's 7 to 9 here; with the store's page
/// cache given back first, `Database.releaseMemory()`, the largest idle
/// service went from 8.7 to 6.5 MB). A worker calls ``releaseFree()`` once
/// its start-up is done, and again after each busy spell (``IdleTrim``).
public enum Memory {
    public static func releaseFree() {
        #if os(Linux)
        _ = trim?(0)
        #endif
    }

    #if os(Linux)
    /// `malloc_trim`, which Swift's Glibc module does not declare (it is
    /// in `malloc.h`); nil on a C library without it.
    private static let trim: (@convention(c) (Int) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
    }()
    #endif
}

/// When to give memory back: once after each busy spell. ``note()`` on
/// work; ``tick()`` on a timer says whether to give it back now: on a tick
/// with no work since the one before, after a tick that saw some. A busy
/// process never does (the walk of the heap and a cold cache would sit in
/// the path of its requests); an idle one does it once, not on every tick.
public struct IdleTrim {
    private var worked = false
    private var owed = false

    public init() {}

    public mutating func note() { worked = true }

    public mutating func tick() -> Bool {
        if worked {
            worked = false
            owed = true
            return false
        }
        defer { owed = false }
        return owed
    }
}
