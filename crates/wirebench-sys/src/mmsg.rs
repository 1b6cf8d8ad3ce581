//! Batched datagrams: `sendmmsg(2)` and `recvmmsg(2)` of up to [`BATCH`] messages, each in
//! one or two parts, with UDP GSO on send (`UDP_SEGMENT`) and, on receive, the GRO segment
//! size (`UDP_GRO`) and the kernel's arrival time (`SCM_TIMESTAMPNS`) of each message.
//!
//! As quinn-udp's `unix.rs` does, each call builds its message headers on its own stack from
//! the buffers it borrows, and they are gone when it returns: no pointer into a caller's
//! buffer outlives the call that the borrow covers. Only the headers of the messages given
//! are written (nothing is zeroed for the rest of the batch), and nothing is allocated: a
//! receive's control buffers are in the caller's [`Received`], made once and lent to each
//! call.
//! Linux's UDP GSO and GRO: `Documentation/networking/segmentation-offloads.rst`.
#![allow(unsafe_code)]

use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::cmsg;

/// Most messages in one call.
pub const BATCH: usize = 32;

/// Control space a sent message may use: one `UDP_SEGMENT` (a u16, in an int's room).
const SEND_CONTROL: usize = cmsg::space(mem::size_of::<libc::c_int>());

/// Control space per received message: a `UDP_GRO` int and an `SCM_TIMESTAMPNS` timespec,
/// with room to spare for one the socket did not ask for.
const RECV_CONTROL: usize =
    2 * cmsg::space(mem::size_of::<libc::timespec>()) + cmsg::space(mem::size_of::<libc::c_int>());

/// What [`recv`] says of the messages it received, and the control buffers the kernel
/// writes into: made (zeroed) once by the caller and lent to each call, so that a call
/// that offers [`BATCH`] buffers and gets one message does not clear [`BATCH`] control
/// buffers first.
#[derive(Clone)]
pub struct Received {
    meta: [RecvMeta; BATCH],
    control: [cmsg::Buf<RECV_CONTROL>; BATCH],
    n: usize,
}

impl Default for Received {
    fn default() -> Self {
        Self {
            meta: [RecvMeta::default(); BATCH],
            control: [cmsg::Buf::default(); BATCH],
            n: 0,
        }
    }
}

impl Received {
    /// What arrived in each message of the last [`recv`], in order.
    pub fn meta(&self) -> &[RecvMeta] {
        &self.meta[..self.n]
    }
}

/// One message to send: its bytes, in one or two parts (`tail` may be empty), and the size
/// of the datagrams the kernel should cut it into (UDP GSO), if it is more than one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Transmit<'a> {
    /// The first part of the message.
    pub head: &'a [u8],
    /// The rest of it, if it lies elsewhere (empty: none).
    pub tail: &'a [u8],
    /// UDP GSO: cut the message into datagrams of this many bytes (the last may be
    /// shorter). `None`: the message is one datagram or frame.
    pub segment_size: Option<u16>,
}

/// Where one message is received: one or two parts, filled in order (`tail` may be empty).
#[derive(Debug, Default)]
pub struct RecvBuf<'a> {
    /// Filled first.
    pub head: &'a mut [u8],
    /// Filled with what does not fit `head` (empty: none).
    pub tail: &'a mut [u8],
}

impl<'a> RecvBuf<'a> {
    /// A buffer of one part.
    pub fn new(head: &'a mut [u8]) -> Self {
        Self {
            head,
            tail: &mut [],
        }
    }
}

/// What arrived in one message of a [`recv`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes received (at most the buffer's parts together).
    pub len: usize,
    /// The message was longer than its buffer and was cut (`MSG_TRUNC`).
    pub truncated: bool,
    /// The size of the datagrams UDP GRO coalesced into it (the last may be shorter);
    /// `None` when it is one datagram or the socket does not coalesce.
    pub segment_size: Option<usize>,
    /// When it arrived, ns since the Unix epoch by the kernel's clock (socket option
    /// [`timestamp_arrivals`]); `None` when unstamped.
    pub arrival_unix_ns: Option<u64>,
}

/// How long a [`recv`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// For the first message, as long as the socket's receive timeout (or its blocking
    /// mode) lets it; then takes what is queued (`MSG_WAITFORONE`).
    ForFirst,
    /// Not at all: what is queued, or `WouldBlock` (`MSG_DONTWAIT`).
    Never,
}

/// A message header over `iov` (`iovlen` vectors) and `control` (`controllen` bytes), with
/// no address (the socket is connected or bound to one interface).
#[inline]
fn header(
    iov: *mut libc::iovec,
    iovlen: usize,
    control: *mut libc::c_void,
    controllen: usize,
) -> libc::mmsghdr {
    // SAFETY: mmsghdr is a C struct of integers and raw pointers (and padding on musl), for
    // which all-zero bytes are a valid value.
    let mut h: libc::mmsghdr = unsafe { mem::zeroed() };
    h.msg_hdr.msg_iov = iov;
    h.msg_hdr.msg_iovlen = iovlen as _;
    h.msg_hdr.msg_control = control;
    h.msg_hdr.msg_controllen = controllen as _;
    h
}

/// The iovec of one part.
#[inline]
fn iovec(base: *mut u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base.cast(),
        iov_len: len,
    }
}

/// Sends the first [`BATCH`] messages of `msgs` on `fd` (connected, or a packet socket
/// bound to an interface) in one `sendmmsg` call; returns how many the kernel took, from the
/// first on. An error is the first message's: the others were not tried.
pub fn send<'a>(
    fd: BorrowedFd<'_>,
    msgs: impl IntoIterator<Item = Transmit<'a>>,
) -> io::Result<usize> {
    let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
    let mut iovs = [const { MaybeUninit::<[libc::iovec; 2]>::uninit() }; BATCH];
    let mut ctrl = [const { MaybeUninit::<cmsg::Buf<SEND_CONTROL>>::uninit() }; BATCH];
    let mut n = 0;
    for (m, t) in msgs.into_iter().take(BATCH).enumerate() {
        // The kernel only reads these parts: the pointers are *mut because iovec's are.
        let iov = iovs[m].write([
            iovec(t.head.as_ptr().cast_mut(), t.head.len()),
            iovec(t.tail.as_ptr().cast_mut(), t.tail.len()),
        ]);
        let parts = if t.tail.is_empty() { 1 } else { 2 };
        let (control, controllen) = match t.segment_size {
            Some(seg) => {
                let c = ctrl[m].write(cmsg::Buf::default());
                let used = cmsg::put(
                    &mut c.0,
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    &seg.to_ne_bytes(),
                )
                .unwrap_or(0);
                (c.0.as_mut_ptr().cast(), used)
            }
            None => (std::ptr::null_mut(), 0),
        };
        hdrs[m].write(header(iov.as_mut_ptr(), parts, control, controllen));
        n = m + 1;
    }
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: headers 0..n were written above (MaybeUninit<mmsghdr> has mmsghdr's layout),
    // each pointing at its iovecs and control buffer on this stack frame, and those at parts
    // of the messages borrowed for 'a, which outlives this call; the kernel reads no header
    // past `n`, and only reads the parts. Nothing keeps a pointer after the call returns.
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((rc as usize).min(n))
}

/// Receives up to [`BATCH`] messages on `fd` in one `recvmmsg` call, message `i` into the
/// `i`th buffer of `bufs`; what arrived in each is then `out.meta()[i]`. Returns how many
/// arrived.
pub fn recv<'a>(
    fd: BorrowedFd<'_>,
    bufs: impl IntoIterator<Item = RecvBuf<'a>>,
    out: &mut Received,
    wait: Wait,
) -> io::Result<usize> {
    out.n = 0;
    let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
    let mut iovs = [const { MaybeUninit::<[libc::iovec; 2]>::uninit() }; BATCH];
    let mut n = 0;
    for ((m, b), c) in bufs
        .into_iter()
        .take(BATCH)
        .enumerate()
        .zip(&mut out.control)
    {
        let iov = iovs[m].write([
            iovec(b.head.as_mut_ptr(), b.head.len()),
            iovec(b.tail.as_mut_ptr(), b.tail.len()),
        ]);
        let parts = if b.tail.is_empty() { 1 } else { 2 };
        let control = c.0.as_mut_ptr().cast();
        hdrs[m].write(header(iov.as_mut_ptr(), parts, control, RECV_CONTROL));
        n = m + 1;
    }
    if n == 0 {
        return Ok(0);
    }
    let flags = match wait {
        Wait::ForFirst => libc::MSG_WAITFORONE,
        Wait::Never => libc::MSG_DONTWAIT,
    };
    // SAFETY: headers 0..n were written above, each pointing at its iovecs on this stack
    // frame and at its control buffer of RECV_CONTROL bytes in `out`, and those at buffers
    // borrowed mutably for 'a (and `out`, borrowed mutably for this call), which outlive
    // it; the kernel writes at most each part's length and RECV_CONTROL control bytes, and
    // no header past `n`. No timeout pointer.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            flags,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = (rc as usize).min(n);
    let done = out.meta.iter_mut().zip(&out.control).enumerate().take(got);
    for (m, (meta, control)) in done {
        // SAFETY: header m (m < got <= n) was initialised above and since written only by
        // the kernel, with integers.
        let h = unsafe { hdrs[m].assume_init_ref() };
        *meta = meta_of(h, control);
    }
    out.n = got;
    Ok(got)
}

/// What the kernel said of one received message: its length, whether it was cut, and its
/// control messages (walked over no more than the control buffer, whatever the header
/// claims).
#[inline]
fn meta_of(h: &libc::mmsghdr, control: &cmsg::Buf<RECV_CONTROL>) -> RecvMeta {
    // A size_t in glibc, a socklen_t in musl: either fits a usize.
    #[allow(clippy::unnecessary_cast)]
    let controllen = (h.msg_hdr.msg_controllen as usize).min(RECV_CONTROL);
    let mut meta = RecvMeta {
        len: h.msg_len as usize,
        truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        segment_size: None,
        arrival_unix_ns: None,
    };
    for c in cmsg::walk(&control.0[..controllen]) {
        match (c.level, c.kind) {
            (libc::SOL_UDP, libc::UDP_GRO) => {
                meta.segment_size = c
                    .int()
                    .and_then(|s| usize::try_from(s).ok())
                    .filter(|&s| s > 0);
            }
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => meta.arrival_unix_ns = c.timespec_ns(),
            _ => {}
        }
    }
    meta
}

/// Asks the kernel to stamp each message received on `fd` with its arrival time
/// (`SO_TIMESTAMPNS`), which [`recv`] gives as [`RecvMeta::arrival_unix_ns`].
pub fn timestamp_arrivals(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: the option value is a live c_int of the size passed, read by the kernel only
    // during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&one as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        b.connect(a.local_addr().expect("addr")).expect("connect");
        b.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        (a, b)
    }

    /// Receives until `want` messages arrived (loopback queues them all before `send`
    /// returns, so a call takes what is there; the deadline only stops a broken test).
    fn recv_all(b: &UdpSocket, bufs: &mut [[u8; 2048]], want: usize) -> Vec<(Vec<u8>, RecvMeta)> {
        let mut out = Vec::new();
        let mut rcv = Received::default();
        while out.len() < want {
            recv(
                b.as_fd(),
                bufs.iter_mut().map(|x| RecvBuf::new(&mut x[..])),
                &mut rcv,
                Wait::ForFirst,
            )
            .expect("recv");
            for (buf, m) in bufs.iter().zip(rcv.meta()) {
                out.push((buf[..m.len.min(buf.len())].to_vec(), *m));
            }
        }
        out
    }

    #[test]
    fn a_batch_round_trips_on_loopback() {
        let (a, b) = pair();
        timestamp_arrivals(b.as_fd()).expect("SO_TIMESTAMPNS");
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64;
        let payloads: Vec<Vec<u8>> = (0..BATCH as u8)
            .map(|i| vec![i; 10 + usize::from(i)])
            .collect();
        // Every other message in two parts: the receiver sees them joined.
        let msgs = payloads.iter().enumerate().map(|(i, p)| {
            let cut = if i % 2 == 0 { p.len() } else { 4 };
            Transmit {
                head: &p[..cut],
                tail: &p[cut..],
                segment_size: None,
            }
        });
        assert_eq!(send(a.as_fd(), msgs).expect("sendmmsg"), BATCH);
        let mut bufs = vec![[0u8; 2048]; BATCH];
        let got = recv_all(&b, &mut bufs, BATCH);
        for ((bytes, meta), want) in got.iter().zip(&payloads) {
            assert_eq!(bytes, want);
            assert_eq!(meta.len, want.len());
            assert!(!meta.truncated);
            assert_eq!(meta.segment_size, None, "GRO is off");
            let at = meta.arrival_unix_ns.expect("stamped");
            assert!(
                at + 1_000_000_000 >= before,
                "a stamp near now, not garbage: {at}"
            );
        }
    }

    #[test]
    fn more_than_a_batch_sends_a_batch() {
        let (a, _b) = pair();
        let p = [1u8; 8];
        let one = Transmit {
            head: &p,
            ..Transmit::default()
        };
        let msgs = std::iter::repeat_n(one, BATCH + 5);
        assert_eq!(send(a.as_fd(), msgs).expect("sendmmsg"), BATCH);
        assert_eq!(send(a.as_fd(), std::iter::empty()).expect("nothing"), 0);
    }

    #[test]
    fn a_message_longer_than_its_buffer_is_cut_and_said_to_be() {
        let (a, b) = pair();
        let p = [9u8; 100];
        send(
            a.as_fd(),
            [Transmit {
                head: &p,
                ..Transmit::default()
            }],
        )
        .expect("send");
        let mut head = [0u8; 30];
        let mut tail = [0u8; 20];
        let mut rcv = Received::default();
        let got = recv(
            b.as_fd(),
            [RecvBuf {
                head: &mut head,
                tail: &mut tail,
            }],
            &mut rcv,
            Wait::ForFirst,
        )
        .expect("recv");
        assert_eq!(got, 1);
        assert!(rcv.meta()[0].truncated);
        assert_eq!((head, tail), ([9u8; 30], [9u8; 20]), "both parts filled");
    }

    #[test]
    fn gso_and_gro_carry_many_datagrams_per_message() {
        let (a, b) = pair();
        let gro = 1 as libc::c_int;
        // SAFETY: the option value is a live c_int of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                b.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&gro as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let p: Vec<u8> = (0..10 * 1000).map(|i| (i / 1000) as u8).collect();
        let sent = send(
            a.as_fd(),
            [Transmit {
                head: &p,
                tail: &[],
                segment_size: Some(1000),
            }],
        );
        if sent.is_err() || rc != 0 {
            // A kernel without UDP GSO (before 4.18) or GRO (before 5.0): nothing to test.
            return;
        }
        let mut big = vec![0u8; 65536];
        let mut rcv = Received::default();
        let mut seen = Vec::new();
        while seen.len() < 10 {
            let got = recv(
                b.as_fd(),
                [RecvBuf::new(&mut big)],
                &mut rcv,
                Wait::ForFirst,
            )
            .expect("recv");
            assert_eq!(got, 1);
            let seg = rcv.meta()[0].segment_size.unwrap_or(rcv.meta()[0].len);
            for d in big[..rcv.meta()[0].len].chunks(seg) {
                assert_eq!(d.len(), 1000);
                seen.push(d[0]);
            }
        }
        assert_eq!(seen, (0..10).collect::<Vec<u8>>());
    }

    #[test]
    fn never_waiting_on_an_empty_socket_would_block() {
        let (_a, b) = pair();
        let mut buf = [0u8; 64];
        let mut rcv = Received::default();
        let e = recv(b.as_fd(), [RecvBuf::new(&mut buf)], &mut rcv, Wait::Never)
            .expect_err("nothing queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            recv(b.as_fd(), std::iter::empty(), &mut rcv, Wait::Never).expect("none"),
            0
        );
    }
}
