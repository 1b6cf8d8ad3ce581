//! Busy polling for request/response (`--busy-poll`): SO_BUSY_POLL, and the receive that does
//! not wait, which a side spins on before it blocks; and the wait for a socket to become
//! readable, which an open-loop prober makes until its next send is due.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

use wirebench_proto::results::BusyPoll;
use wirebench_proto::spec::TestSpec;

use super::sockopt;

/// Asks the kernel to busy-poll the device's receive queue for up to the test's spin time on
/// blocking receives of `sock` (SO_BUSY_POLL, socket(7)), and records what it granted; `None`
/// when the test does not busy-poll. A refusal is recorded, not fatal: the spin in user space
/// does not need it.
pub fn busy_poll_setup(sock: &impl AsRawFd, spec: &TestSpec) -> Option<BusyPoll> {
    let spin_ns = spec.busy_poll_ns.filter(|&ns| ns > 0)?;
    let mut bp = BusyPoll {
        spin_ns,
        ..BusyPoll::default()
    };
    match set_busy_poll(sock, spin_ns) {
        Ok(()) => {
            bp.so_busy_poll_us =
                sockopt::get::<libc::c_int>(sock, libc::SOL_SOCKET, libc::SO_BUSY_POLL)
                    .ok()
                    .and_then(|us| u64::try_from(us).ok());
        }
        Err(e) => bp.so_busy_poll_refused = Some(e.to_string()),
    }
    Some(bp)
}

/// Sets SO_BUSY_POLL on `sock` to `ns`, rounded up to whole µs. Raising it above the
/// `net.core.busy_read` sysctl needs CAP_NET_ADMIN (EPERM otherwise).
pub fn set_busy_poll(sock: &impl AsRawFd, ns: u64) -> io::Result<()> {
    let us = libc::c_int::try_from(ns.div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    sockopt::set(sock, libc::SOL_SOCKET, libc::SO_BUSY_POLL, &us)
}

/// One receive into `buf` that does not wait (MSG_DONTWAIT, whatever the socket's mode):
/// `WouldBlock` when nothing is there. Over TCP, `Ok(0)` is the peer's close.
#[inline]
pub fn recv_nowait(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the fd is a live socket owned by `sock`; `buf` is valid for writes of
    // `buf.len()` bytes during the call, and the kernel writes at most that many.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    // A negative return is an error, whose code is in errno; any other fits a usize.
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Waits until `sock` has something to read or `timeout_ns` has passed (ppoll(2), to the
/// nanosecond): `Ok(true)` when it is readable (or has an error to report), `Ok(false)` on
/// the timeout or a signal.
pub fn wait_readable(sock: &impl AsRawFd, timeout_ns: u64) -> io::Result<bool> {
    let mut fd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout_ns / 1_000_000_000).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits every `c_long`.
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `fd` is one valid pollfd for the call, `ts` a valid timespec; a null signal
    // mask leaves the thread's as it is.
    let n = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
    match n {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_ends_on_a_datagram_or_its_timeout() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        assert!(
            !wait_readable(&b, 1_000_000).expect("poll"),
            "nothing sent yet"
        );
        a.send(b"x").expect("send");
        // Loose: the datagram is there long before 10 s.
        assert!(wait_readable(&b, 10_000_000_000).expect("poll"));
    }

    #[test]
    fn a_receive_that_does_not_wait_sees_nothing_then_the_datagram() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        let mut buf = [0u8; 16];
        let e = recv_nowait(&b, &mut buf).expect_err("nothing sent yet");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        a.send(b"ping").expect("send");
        // Loopback delivers within the send call, so the datagram is there now.
        assert_eq!(recv_nowait(&b, &mut buf).expect("recv"), 4);
        assert_eq!(&buf[..4], b"ping");
    }
}
