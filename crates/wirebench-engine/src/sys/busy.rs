//! Busy polling for request/response (`--busy-poll`): SO_BUSY_POLL, and the receive that does
//! not wait, which a side spins on before it blocks.
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

#[cfg(test)]
mod tests {
    use super::*;

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
