//! The system calls the lab needs that neither the standard library, socket2 nor
//! `wirebench-sys` offers: namespaces, packet sockets, ethtool offload switches, TUN devices
//! and child set-up. The only place in the lab with `unsafe`; each block says why it is
//! sound. (The emulator's batched reads and writes are `wirebench_sys::mmsg`'s, shared with
//! the engine; these stay here because only the lab makes them.)
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Moves the calling thread into a new, unnamed network namespace. A namespace made in a
/// thread lives as long as a thread or an open descriptor refers to it.
pub fn unshare_net() -> io::Result<()> {
    // SAFETY: unshare takes flags only and touches no memory of ours.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// Moves the calling process (which must have one thread) into a new user namespace and
/// maps the caller's uid and gid to root in it, so that it may make network namespaces
/// without privilege.
pub fn enter_user_namespace() -> io::Result<()> {
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: as above, flags only.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER) })?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    Ok(())
}

/// The effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Moves the calling thread into the namespace behind `fd` (`nstype` 0: any kind).
pub fn setns(fd: BorrowedFd<'_>, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: the descriptor is open for the borrow; setns touches no memory of ours.
    check(unsafe { libc::setns(fd.as_raw_fd(), nstype) }).map(drop)
}

/// Asks for 1 ns of timer slack on the calling thread, so that its timed waits end when
/// asked (the default slack is 50 µs).
pub fn fine_timer_slack() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Sets up a child between fork and exec: into the network namespace `netns`, and killed
/// when the thread that spawned it exits. Only async-signal-safe calls.
pub fn child_enter(netns: RawFd) -> io::Result<()> {
    // SAFETY: setns and prctl take integers; both are async-signal-safe.
    check(unsafe { libc::setns(netns, libc::CLONE_NEWNET) })?;
    // SAFETY: as above.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    // The parent may already be gone; then nobody will send the signal.
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } == 1 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// A raw packet socket bound to one interface, seeing every frame that arrives on it (not
/// those sent from it), non-blocking.
pub fn packet_socket(ifindex: u32) -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket takes integers and returns a new descriptor or -1.
    let raw = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    })?;
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let one: libc::c_int = 1;
    // SAFETY: the option value is a live c_int of the size passed.
    check(unsafe {
        libc::setsockopt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` is a live sockaddr_ll of the size passed.
    check(unsafe {
        libc::bind(
            raw,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Sets a socket's receive and send buffers to `bytes` each, past `net.core.rmem_max` and
/// `wmem_max` when the caller may (CAP_NET_ADMIN in the first user namespace), else as far
/// as those limits allow. The kernel's grant is read back with `SO_RCVBUF`/`SO_SNDBUF`.
pub fn force_buffers(fd: BorrowedFd<'_>, bytes: usize) {
    let val = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            // SAFETY: the option value is a live c_int of the size passed.
            let ret = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&val as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if ret == 0 {
                break;
            }
        }
    }
}

/// Frames dropped by the kernel because the packet socket's receive buffer was full, since
/// the last call (the kernel resets the count when it is read).
pub fn packet_drops(fd: BorrowedFd<'_>) -> u64 {
    // SAFETY: tpacket_stats is plain old data.
    let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `st` and `len` are live and `len` is the size of `st`.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        0
    } else {
        u64::from(st.tp_drops)
    }
}

/// Waits until `fd` is readable or `timeout_ns` has passed; true if readable.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout_ns: u64) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: one live pollfd, a live timespec, no signal mask.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(n > 0)
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

/// Turns off checksum, segmentation and receive offloads on interface `name` of the calling
/// thread's network namespace, so that every frame on it is one real, checksummed packet of
/// at most the MTU: what a packet socket reads is what a wire would carry.
pub fn offloads_off(name: &str) -> io::Result<()> {
    // SAFETY: socket takes integers.
    let raw =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `raw` is new and owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::other(format!(
            "interface name {name:?} too long"
        )));
    }
    // Segmentation first: the kernel refuses to turn checksums off under TSO on some drivers.
    for cmd in [
        ETHTOOL_STSO,
        ETHTOOL_SGSO,
        ETHTOOL_SGRO,
        ETHTOOL_SSG,
        ETHTOOL_STXCSUM,
    ] {
        let mut value = EthtoolValue { cmd, data: 0 };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: &mut value,
            _pad: [0; 16],
        };
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        // SAFETY: `req` is a live ifreq whose data pointer points at a live ethtool_value;
        // both outlive the call.
        check(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) })?;
    }
    Ok(())
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: `c` is a live NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::other(format!("no interface {name}")))
    } else {
        Ok(i)
    }
}

/// Makes `cmd` start in the network namespace `netns` (a descriptor that stays open until
/// the spawn), killed when the spawning thread exits.
pub fn run_in(cmd: &mut std::process::Command, netns: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs between fork and exec and makes only async-signal-safe calls
    // (setns, prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || child_enter(netns));
    }
}

/// Moves this process (which must have one thread) into the namespaces of a testbed held by
/// process `pid`: its user namespace first if `userns`, then the network namespace behind
/// its descriptor `net_fd`.
pub fn enter_held(pid: u32, net_fd: i32, userns: bool) -> io::Result<()> {
    if userns {
        let user = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        setns(std::os::fd::AsFd::as_fd(&user), libc::CLONE_NEWUSER)?;
    }
    let net = std::fs::File::open(format!("/proc/{pid}/fd/{net_fd}"))?;
    setns(std::os::fd::AsFd::as_fd(&net), libc::CLONE_NEWNET)
}

/// A descriptor of process `pid` (`pidfd_open`): a signal sent through it reaches that
/// process or none, never another that took its id after it was reaped.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: pidfd_open takes a pid and flags; on success it returns a new descriptor,
    // which we own from here on.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = libc::c_int::try_from(check_long(fd)?).map_err(io::Error::other)?;
    // SAFETY: a fresh descriptor the call just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends signal `sig` to the process `fd` refers to (`pidfd_send_signal`).
pub fn pidfd_signal(fd: BorrowedFd<'_>, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a live descriptor, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    check_long(r).map(drop)
}

/// A `syscall`'s result: the error of errno when negative.
fn check_long(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Sends signal `sig` to process `pid`.
pub fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill takes integers.
    check(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Has the kernel put a `virtio_net_hdr` in front of each frame read from `fd` and read one
/// in front of each frame written to it (`PACKET_VNET_HDR`), so that frames may be GSO
/// frames larger than a wire packet.
pub fn vnet_hdr(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: the option value is a live c_int of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Whether packet sockets here take `PACKET_VNET_HDR` (probed on a socket bound to nothing).
pub fn vnet_hdr_supported() -> bool {
    // SAFETY: socket takes integers and returns a new descriptor or -1.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return false;
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    vnet_hdr(fd.as_fd()).is_ok()
}

/// `struct ifreq` as TUNSETIFF reads it: a name and the flags (the rest of the union unused).
#[repr(C)]
struct TunReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Makes a persistent TUN device (IP packets, no packet information header) called `name`
/// in the calling thread's network namespace, so that a process started later in it (a
/// user-space stack) can attach to it by name. It goes with the namespace.
pub fn tun_persist(name: &str) -> io::Result<()> {
    let path = c"/dev/net/tun";
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let raw = check(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: `raw` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = TunReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TUN device name {name:?}: 1 to 15 bytes"),
        ));
    }
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `TunReq` lays out (40 bytes).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut req) })?;
    // SAFETY: TUNSETPERSIST takes an integer argument.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETPERSIST as _, 1 as libc::c_ulong) })?;
    Ok(())
}
