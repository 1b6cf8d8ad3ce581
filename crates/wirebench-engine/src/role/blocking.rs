//! Blocking socket calls that keep an eye on the clock: they wait in [`POLL`] slices and give
//! up on a stop, the server's deadline or a peer that stopped making progress.

use std::io::{ErrorKind, Read};
use std::net::UdpSocket;

use super::early_end::{early_stop, idle_limit_ns, RoleError};
use super::user::Stream;
use super::RoleParams;
use crate::sys::ZeroCopy;
use crate::Shared;

/// A receive or send timeout (or a signal): the caller looks at the clock and tries again.
pub(super) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Writes all of `buf`, looking at stop and deadline while the socket is full.
pub(super) fn write_full<S: Stream>(
    s: &mut S,
    buf: &[u8],
    sh: &Shared,
    p: &RoleParams,
) -> Result<(), RoleError> {
    write_full_zc(s, buf, sh, p, &mut None)
}

/// As [`write_full`], with `MSG_ZEROCOPY` sends when `zc` is set; completions are read off
/// the error queue every 64 sends and whenever the kernel runs out of room for them.
pub(super) fn write_full_zc<S: Stream>(
    s: &mut S,
    buf: &[u8],
    sh: &Shared,
    p: &RoleParams,
    zc: &mut Option<ZeroCopy>,
) -> Result<(), RoleError> {
    let mut off = 0;
    let mut progress_ns = sh.now_ns();
    while off < buf.len() {
        // MSG_ZEROCOPY needs the kernel's socket; a user-space stream never has `zc` set.
        let sent = match (zc.as_mut(), s.kernel()) {
            (Some(z), Some(k)) => {
                if z.sends % 64 == 0 {
                    z.reap(k);
                }
                z.send(k, &buf[off..])
            }
            _ => s.write(&buf[off..]),
        };
        match sent {
            Ok(0) => return Err(RoleError::Closed),
            Ok(n) => {
                off += n;
                progress_ns = sh.now_ns();
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) && zc.is_some() => {
                // Too many sends in flight for the socket's option memory: read completions.
                if let (Some(z), Some(k)) = (zc.as_mut(), s.kernel()) {
                    z.reap(k);
                }
                std::thread::yield_now();
            }
            Err(e) if is_timeout(&e) => still_waiting(sh, p, progress_ns)?,
            Err(e) => return Err(RoleError::Send(e)),
        }
    }
    Ok(())
}

/// Writes some of `buf`, waiting as [`write_full`] does while the socket is full, and
/// returns how many bytes the kernel took: a write of megabytes on a slow path returns what
/// was taken within one [`POLL`](super::POLL), so the caller counts the bytes as they go.
/// `since_ns` is when bytes last moved, as the caller read the clock then.
pub(super) fn write_some<S: Stream>(
    s: &mut S,
    buf: &[u8],
    sh: &Shared,
    p: &RoleParams,
    since_ns: u64,
) -> Result<u64, RoleError> {
    loop {
        match s.write(buf) {
            Ok(0) => return Err(RoleError::Closed),
            Ok(n) => return Ok(n as u64),
            Err(e) if is_timeout(&e) => still_waiting(sh, p, since_ns)?,
            Err(e) => return Err(RoleError::Send(e)),
        }
    }
}

/// After a send that timed out: why to give up, if the test was stopped or its deadline
/// passed, or if nothing has moved since `progress_ns` for longer than the idle limit.
fn still_waiting(sh: &Shared, p: &RoleParams, progress_ns: u64) -> Result<(), RoleError> {
    let now = sh.now_ns();
    if let Some(why) = early_stop(sh, p, now) {
        return Err(why);
    }
    if now.saturating_sub(progress_ns) > idle_limit_ns(&p.spec) {
        return Err(RoleError::ReceiverStuck);
    }
    Ok(())
}

/// Sends one datagram, retrying while the kernel is out of buffers. A pending ICMP error
/// (ECONNREFUSED) is reported by the kernel on the next send, which it then drops: retry it,
/// and fail only if the peer keeps refusing. EPERM is a local firewall rule dropping the
/// datagram on its way out: it was sent as far as this program is concerned, the path lost
/// it, and `local_drops` counts it.
pub(super) fn send_datagram(
    s: &UdpSocket,
    buf: &[u8],
    sh: &Shared,
    local_drops: &mut u64,
) -> Result<(), RoleError> {
    let mut refused = 0;
    loop {
        match s.send(buf) {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                *local_drops += 1;
                return Ok(());
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                refused += 1;
                if refused > 100 {
                    return Err(RoleError::PortUnreachable);
                }
            }
            Err(e) if is_timeout(&e) || e.raw_os_error() == Some(libc::ENOBUFS) => {
                if sh.stopped() {
                    return Err(RoleError::Stopped);
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(RoleError::Send(e)),
        }
    }
}

/// Reads exactly `buf.len()` bytes, looking at stop and deadline while nothing comes.
/// `Ok(false)` when the peer closed the connection before the first byte.
pub(super) fn read_full<S: Read>(
    s: &mut S,
    buf: &mut [u8],
    sh: &Shared,
    p: &RoleParams,
) -> Result<bool, RoleError> {
    let mut off = 0;
    let mut progress_ns = sh.now_ns();
    while off < buf.len() {
        match s.read(&mut buf[off..]) {
            Ok(0) if off == 0 => return Ok(false),
            Ok(0) => return Err(RoleError::ClosedMidMessage),
            Ok(n) => {
                off += n;
                progress_ns = sh.now_ns();
            }
            Err(e) if is_timeout(&e) => {
                let now = sh.now_ns();
                if let Some(why) = early_stop(sh, p, now) {
                    return Err(why);
                }
                if now - progress_ns > idle_limit_ns(&p.spec) {
                    return Err(RoleError::PeerStuck);
                }
            }
            Err(e) => return Err(RoleError::Read(e)),
        }
    }
    Ok(true)
}
