//! Unnamed network namespaces, held by descriptors. A namespace made here has no name in
//! `/run/netns` and no process of its own: it lives while the lab holds its descriptor or a
//! process runs in it, so it is gone when they are, however the lab ends.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys;

/// One network namespace.
#[derive(Debug)]
pub struct NetNs {
    fd: OwnedFd,
}

impl NetNs {
    /// A new, empty network namespace (only `lo`, down).
    pub fn new() -> io::Result<Self> {
        // The thread that makes it enters it and ends, so no other thread moves.
        std::thread::scope(|s| {
            s.spawn(|| {
                sys::unshare_net()?;
                let fd = std::fs::File::open("/proc/thread-self/ns/net")?;
                Ok(Self { fd: fd.into() })
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
        })
    }

    /// Runs `f` on a thread of its own inside this namespace: sockets it opens and
    /// `/proc/sys/net` files it writes belong to the namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                sys::setns(self.fd.as_fd(), libc::CLONE_NEWNET)?;
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
        })
    }

    /// Writes a sysctl of this namespace, e.g. `net/ipv4/ip_forward`.
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        let path = format!("/proc/sys/{key}");
        self.run(|| {
            std::fs::write(&path, value)
                .map_err(|e| io::Error::new(e.kind(), format!("setting {key} = {value}: {e}")))
        })
    }

    /// Reads a sysctl of this namespace.
    pub fn read_sysctl(&self, key: &str) -> io::Result<String> {
        let path = format!("/proc/sys/{key}");
        self.run(|| Ok(std::fs::read_to_string(&path)?.trim().to_owned()))
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Makes sure this process may make network namespaces: as root it may already; otherwise
/// it enters a user namespace of its own, where it is root. Call at the start of `main`,
/// while the process has one thread.
///
/// # Errors
///
/// When neither works, with a message that says what is needed.
pub fn ensure_privilege() -> io::Result<()> {
    if sys::euid() == 0 {
        return Ok(());
    }
    sys::enter_user_namespace().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "the lab needs root or unprivileged user namespaces \
                 (kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0): {e}"
            ),
        )
    })
}

impl std::os::fd::AsRawFd for NetNs {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// Whether this process made a user namespace of its own (it is not root outside).
pub fn in_own_user_namespace() -> bool {
    // The initial user namespace maps all 2^32 ids; ours maps one.
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().nth(2) != Some("4294967295"))
        .unwrap_or(false)
}

/// Moves this process (which must have one thread) into the network namespace a testbed
/// process `pid` holds as descriptor `net_fd`, entering its user namespace first if it has
/// one of its own.
///
/// # Errors
///
/// When the process or descriptor is gone, or entering is refused.
pub fn enter_held(pid: u32, net_fd: i32, userns: bool) -> io::Result<()> {
    sys::enter_held(pid, net_fd, userns)
}

/// Asks process `pid` (a testbed holder this program started) to end.
///
/// # Errors
///
/// When the signal cannot be sent.
pub fn terminate(pid: u32) -> io::Result<()> {
    sys::signal(pid, libc::SIGTERM)
}

/// A network namespace's identity: the device and inode of its nsfs file.
pub type NsId = (u64, u64);

/// The identity of the namespace behind `path` (`/proc/PID/ns/net`, `/proc/PID/fd/N`).
pub fn ns_id(path: &std::path::Path) -> io::Result<NsId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// The processes (other than this one) whose network namespace is one of `ids`: what still
/// runs in a testbed's hosts. Processes that cannot be inspected are skipped.
pub fn processes_in(ids: &[NsId]) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            ns_id(std::path::Path::new(&format!("/proc/{pid}/ns/net")))
                .is_ok_and(|id| ids.contains(&id))
        })
        .collect()
}

/// Ends every process still running in the namespaces `ids`: SIGTERM, then SIGKILL for
/// those left after `grace`. Returns how many there were.
pub fn end_processes_in(ids: &[NsId], grace: std::time::Duration) -> usize {
    let first = processes_in(ids);
    for &pid in &first {
        let _ = sys::signal(pid, libc::SIGTERM);
    }
    let until = std::time::Instant::now() + grace;
    loop {
        let left = processes_in(ids);
        if left.is_empty() {
            break;
        }
        if std::time::Instant::now() >= until {
            for pid in left {
                let _ = sys::signal(pid, libc::SIGKILL);
            }
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    first.len()
}
