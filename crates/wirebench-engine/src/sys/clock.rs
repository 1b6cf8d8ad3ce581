//! The clock and the host: Unix time, and the boot id that says whether two processes read
//! the same clock.

/// Wall-clock time in ns since the Unix epoch (0 if the clock is before it).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
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
