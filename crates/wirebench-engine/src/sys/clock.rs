//! The clock and the host: Unix time, and the boot id that says whether two processes read
//! the same clock.

/// Wall-clock time in ns since the Unix epoch (0 if the clock is before it).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A monotonic instant and the Unix time at that instant, ns: the pair a side converts its
/// monotonic times to Unix time with (a datagram's send stamp, its arrival). Two sides on one
/// host must agree to well under the loopback's few microseconds of one-way delay, so the
/// Unix time is read between two monotonic readings, and of five tries the one with the
/// closest readings is kept (a preemption between two plain reads would shift every delay
/// by its length, even below zero).
pub fn clock_pair() -> (std::time::Instant, u64) {
    let read = || {
        let before = std::time::Instant::now();
        let unix = unix_now_ns();
        let gap = before.elapsed();
        (gap, before + gap / 2, unix)
    };
    let (_, at, unix) = (1..5).fold(read(), |best, _| {
        let r = read();
        if r.0 < best.0 {
            r
        } else {
            best
        }
    });
    (at, unix)
}

/// This kernel's boot id (`/proc/sys/kernel/random/boot_id`), empty where there is none. Two
/// processes with the same boot id read the same clocks, also from different network
/// namespaces: their one-way delays are absolute.
pub fn host_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether two hosts' ids say they share a clock.
pub fn same_clock(a: &str, b: &str) -> bool {
    !a.is_empty() && a == b
}
