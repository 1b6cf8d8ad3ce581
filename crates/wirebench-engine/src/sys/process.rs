//! What the process costs: CPU time of the data thread, resident memory, and the allocator
//! settings that let a long-running server give memory back.

/// CPU time of the calling thread so far, (user, system) in ns (zeros where the kernel does
/// not say). Linux's RUSAGE_THREAD: the data thread's own time, not its process's, so that
/// a server running several tests reports each one's cost.
#[allow(unsafe_code)]
pub fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: all-zero is a valid rusage; getrusage writes into it and nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return (0, 0);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

/// A `kB` figure of `/proc/self/status` (0 where there is none).
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The process's resident memory now, KiB (`VmRSS`).
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// The process's peak resident memory so far, KiB (`VmHWM`).
pub fn max_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

/// Gives the memory the allocator holds free back to the kernel (glibc's `malloc_trim`),
/// so a server's RSS returns to its idle size after a test: each connection thread makes
/// an allocator arena, which otherwise keeps what the test freed.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own state; 0 keeps no padding.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's allocator at two arenas: a server's threads allocate only while setting a
/// test up (the data path allocates nothing), so they lose nothing by sharing, and the
/// memory a finished test freed is not scattered over an arena per thread.
#[allow(unsafe_code)]
pub fn limit_allocator_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator tunable; M_ARENA_MAX with 2 is a valid setting.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
