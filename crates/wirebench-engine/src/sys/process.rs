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

/// The calling thread's id (`gettid(2)`), for [`task_cpu_ns`] from another thread.
#[allow(unsafe_code)]
pub fn thread_id() -> i32 {
    // SAFETY: gettid takes nothing and cannot fail.
    unsafe { libc::gettid() }
}

/// The user and system CPU time of thread `tid` of this process, ns, from
/// `/proc/self/task/TID/stat` (in clock ticks: 10 ms apiece on most kernels); none for a
/// thread that is gone, or a file that cannot be read.
#[allow(unsafe_code)]
pub fn task_cpu_ns(tid: i32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The name, in parentheses, may hold spaces: the fields after it are the third on.
    let mut rest = stat
        .rsplit_once(')')
        .map_or("", |(_, r)| r)
        .split_ascii_whitespace()
        .skip(11);
    let mut ticks = || rest.next().and_then(|v| v.parse::<u64>().ok());
    let (user, system) = (ticks()?, ticks()?);
    // SAFETY: sysconf only reads a system constant.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&h| h > 0)
        .unwrap_or(100);
    let ns = |t: u64| t.saturating_mul(1_000_000_000) / hz;
    Some((ns(user), ns(system)))
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
/// test up (the data path allocates nothing of its own), so they lose nothing by sharing,
/// and the memory a finished test freed is not scattered over an arena per thread. (A
/// client sets the same.)
///
/// And keeps what a running test frees for it to take again: freed memory is given back
/// to the kernel when a test ends ([`release_free_memory`]), not as soon as the top of an
/// arena holds 128 KiB free, and a buffer of up to 32 MiB comes from an arena, not a
/// mapping of its own. A QUIC connection's stack allocates a buffer per packet and per
/// write; trimmed and mapped again as it went, each cost page faults, a third of a QUIC
/// server's time on loopback.
#[allow(unsafe_code)]
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets allocator tunables; each value is in its valid range (the mmap
    // threshold's most is 32 MiB on 64-bit hosts).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_threads_cpu_time_is_read_from_proc() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < std::time::Duration::from_millis(300) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            tx.send(thread_id()).expect("send");
            let _ = done_rx.recv();
        });
        let tid = rx.recv().expect("tid");
        let (user, system) = task_cpu_ns(tid).expect("a live thread's times");
        // It spun 300 ms of wall time: most of it on a CPU, whatever else runs.
        assert!(user + system >= 100_000_000, "{user} {system}");
        drop(done_tx);
        t.join().expect("join");
        assert_eq!(task_cpu_ns(i32::MAX), None);
    }
}
