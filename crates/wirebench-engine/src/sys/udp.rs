//! Batched UDP: many datagrams per system call.
//!
//! - Send: `sendmmsg(2)` of up to [`BATCH`] messages, each with UDP GSO (a `UDP_SEGMENT`
//!   control message) carrying up to [`MAX_SEGMENTS`] datagrams that the kernel cuts apart,
//!   as late as the device allows (on loopback and veth: never, the receiver gets them whole).
//! - Receive: `recvmmsg(2)` with `MSG_WAITFORONE` into up to [`BATCH`] 64 KiB slots, with UDP
//!   GRO (`UDP_GRO`), so one slot may hold many datagrams of one size, the size given by a
//!   control message; the caller splits them (see `rx::UdpRx::on_buffer`).
//! - Either way a call moves about [`CALL_BYTES`] at most: the kernel's copy is most of the
//!   cost, and it is faster into and out of memory still in the cache. With GSO, four 64 KB
//!   messages per call rather than 32 gave 1.15–1.4× the received rate and a quarter less
//!   CPU per byte on loopback (interleaved pairs; BENCHMARKS.md).
//! - Without offloads (`--no-offload`, or a kernel that refuses them): plain `send(2)` and
//!   `recv(2)`, one datagram per call, what most applications do.
//!
//! Everything is probed on the socket at set-up and what was used is recorded in the
//! results. The buffers are allocated once; a call allocates nothing (the system calls
//! themselves, with their message headers built per call over these buffers, are
//! `wirebench_sys::mmsg`'s). Linux's UDP GSO and GRO:
//! `Documentation/networking/segmentation-offloads.rst`, and quinn-udp's `unix.rs`, whose
//! approach (probe, send, fall back on EIO) this follows.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;

use socket2::SockRef;
use wirebench_proto::results::{Datapath, Fallback};
use wirebench_proto::spec::{Mechanism, TestSpec};
use wirebench_sys::mmsg::{self, Received, RecvBuf, RecvMeta, Transmit, Wait};

use super::sockopt::{self, size_buffers};

pub use wirebench_sys::mmsg::BATCH;

/// Most datagrams the kernel accepts in one GSO send (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;

/// Most payload bytes in one GSO message: a GSO message is one UDP datagram to the socket
/// layer until it is cut, so it must fit a UDP length.
const GSO_MAX_BYTES: usize = 65_000;

/// A receive slot: the largest datagram, or a GRO batch, fits.
const SLOT: usize = 65_536;

/// About the most payload one batched call moves: the buffers of a call stay in the cache
/// (the sender writes each datagram's header just before the kernel copies it out; the
/// receiver reads the headers just after the kernel copied them in).
pub const CALL_BYTES: usize = 256 * 1024;

/// Datagrams of `size` bytes per GSO message (1 without GSO).
fn gso_segments(size: usize, gso: bool) -> usize {
    if gso {
        (GSO_MAX_BYTES / size.max(1)).clamp(1, MAX_SEGMENTS)
    } else {
        1
    }
}

/// Messages per batched call for messages of `bytes` each: as many as [`CALL_BYTES`] holds,
/// 1 to [`BATCH`].
fn messages_per_call(bytes: usize) -> usize {
    (CALL_BYTES / bytes.max(1)).clamp(1, BATCH)
}

/// What the kernel lets this socket do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offloads {
    /// sendmmsg/recvmmsg batches.
    pub batch: bool,
    /// UDP GSO on send.
    pub gso: bool,
    /// UDP GRO on receive.
    pub gro: bool,
}

impl Offloads {
    /// Names of the features in use, for the results' `datapath.features`.
    pub fn features(&self) -> Vec<String> {
        [
            (self.batch, "mmsg"),
            (self.gso, "udp_gso"),
            (self.gro, "udp_gro"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name.to_string())
        .collect()
    }

    /// The system calls used, for the results' `datapath.io`.
    pub fn io(&self) -> &'static str {
        if self.batch {
            "sendmmsg/recvmmsg"
        } else {
            "send/recv"
        }
    }
}

/// Sets up a UDP data socket for `spec`: buffers, and the batched system calls and
/// offloads unless the test turns them off (`--no-offload`) or is stop-and-wait (one message
/// at a time). Records what was granted, with `features` the caller already uses.
pub fn udp_datapath(
    s: &UdpSocket,
    spec: &TestSpec,
    mut features: Vec<String>,
) -> (Datapath, Offloads) {
    let size = spec
        .socket_buffer_bytes
        .map_or(sockopt::DATA_BUFFER_BYTES, |b| {
            usize::try_from(b).unwrap_or(usize::MAX)
        });
    let (snd, rcv) = size_buffers(SockRef::from(s), size);
    let wanted = spec.mechanism == Mechanism::Stream && !spec.no_offload;
    let (off, fallbacks) = enable_saying_why(s, wanted);
    features.extend(off.features());
    let dp = Datapath {
        io: off.io().into(),
        // Messages per call as a sender makes them (about CALL_BYTES a call); a receiver
        // offers as many slots as the last call's largest message calls for, up to BATCH.
        batch: if off.batch {
            let size = usize::try_from(spec.size).unwrap_or(usize::MAX).max(1);
            messages_per_call(gso_segments(size, off.gso).saturating_mul(size)) as u32
        } else {
            1
        },
        send_buffer_bytes: snd,
        recv_buffer_bytes: rcv,
        features,
        tcp_congestion: None,
        zerocopy: None,
        busy_poll: super::busy_poll_setup(s, spec),
        fallbacks,
        ..Datapath::default()
    };
    (dp, off)
}

/// As [`enable`], and for each offload the kernel refused, why (`datapath.fallbacks`).
fn enable_saying_why(sock: &UdpSocket, wanted: bool) -> (Offloads, Vec<Fallback>) {
    if !wanted {
        return (Offloads::default(), Vec::new());
    }
    let mut why = Vec::new();
    let gso = sockopt::get::<libc::c_int>(sock, libc::SOL_UDP, libc::UDP_SEGMENT);
    if let Err(e) = &gso {
        why.push(Fallback {
            feature: "udp_gso".into(),
            reason: format!("the kernel refused UDP_SEGMENT ({e}): one datagram a message"),
        });
    }
    let gro = sockopt::set(sock, libc::SOL_UDP, libc::UDP_GRO, &1);
    if let Err(e) = &gro {
        why.push(Fallback {
            feature: "udp_gro".into(),
            reason: format!("the kernel refused UDP_GRO ({e}): one datagram a receive slot"),
        });
    }
    let off = Offloads {
        batch: true,
        gso: gso.is_ok(),
        gro: gro.is_ok(),
    };
    (off, why)
}

/// Probes and turns on what the kernel offers on `sock`; nothing when `wanted` is false.
#[cfg(test)]
pub fn enable(sock: &UdpSocket, wanted: bool) -> Offloads {
    enable_saying_why(sock, wanted).0
}

/// Sends batches of equal-size datagrams.
pub struct BatchSend {
    buf: Box<[u8]>,
    size: usize,
    /// Datagrams per message: more than one only with GSO.
    segs: usize,
    /// Messages per call.
    messages: usize,
    off: Offloads,
    /// Why GSO was given up mid-test.
    gso_refused: Option<io::Error>,
}

impl BatchSend {
    /// Buffers for datagrams of `size` bytes, each pre-filled with `payload` (at least `size`
    /// bytes long).
    pub fn new(size: usize, off: Offloads, payload: &[u8]) -> Self {
        let size = size.max(1);
        let segs = gso_segments(size, off.gso);
        let messages = messages_per_call(segs * size);
        let slots = if off.batch { messages * segs } else { 1 };
        let mut buf = vec![0u8; slots * size].into_boxed_slice();
        for d in buf.chunks_mut(size) {
            let n = d.len().min(payload.len());
            d[..n].copy_from_slice(&payload[..n]);
        }
        Self {
            buf,
            size,
            segs,
            messages,
            off,
            gso_refused: None,
        }
    }

    /// Most datagrams one [`send`](Self::send) takes.
    pub fn capacity(&self) -> usize {
        if self.off.batch {
            self.messages * self.segs
        } else {
            1
        }
    }

    /// Datagrams the kernel treats as one: lost together when a firewall drops the message.
    pub fn segments(&self) -> usize {
        self.segs
    }

    /// What is in use (GSO may have been turned off by a device that refused it).
    pub fn offloads(&self) -> Offloads {
        self.off
    }

    /// The bytes of datagram `i` of the next batch (`size` long; the caller writes its header).
    pub fn datagram(&mut self, i: usize) -> &mut [u8] {
        let start = (i * self.size).min(self.buf.len());
        let end = (start + self.size).min(self.buf.len());
        &mut self.buf[start..end]
    }

    /// Why GSO was given up mid-test, if it was: the kernel's error.
    pub fn gso_refused(&self) -> Option<&io::Error> {
        self.gso_refused.as_ref()
    }

    /// Stops using GSO (the device refused it: EIO). The datagrams already in the buffer
    /// become one message each: at most [`BATCH`] of them per call.
    fn disable_gso(&mut self, why: io::Error) {
        self.gso_refused.get_or_insert(why);
        self.off.gso = false;
        self.messages = (self.messages * self.segs).min(BATCH);
        self.segs = 1;
    }

    /// Sends datagrams `0..n` of the batch, all `size` bytes but the last, which is
    /// `last_len`; returns how many datagrams the kernel accepted (from the first on). A
    /// failure of the first message is returned as the error; a partial batch as a count.
    pub fn send(&mut self, sock: &UdpSocket, n: usize, last_len: usize) -> io::Result<usize> {
        let n = n.min(self.capacity());
        if n == 0 {
            return Ok(0);
        }
        let last_len = last_len.clamp(1, self.size);
        if !self.off.batch {
            return sock.send(&self.buf[..last_len]).map(|_| 1);
        }
        loop {
            match self.send_mmsg(sock, n, last_len) {
                // EIO: the device cannot segment. EMSGSIZE (EINVAL on older kernels): a
                // datagram and its headers exceed the path MTU, which GSO will not fragment
                // (IPv6 at 1472 bytes on a 1500-byte link, a tunnel, a learned lower MTU).
                // Either way: one datagram per message from now on, which the kernel
                // fragments as it would for any application.
                Err(e)
                    if self.off.gso
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EIO | libc::EMSGSIZE | libc::EINVAL)
                        ) =>
                {
                    self.disable_gso(e);
                }
                other => return other,
            }
        }
    }

    fn send_mmsg(&mut self, sock: &UdpSocket, n: usize, last_len: usize) -> io::Result<usize> {
        let (size, segs, gso) = (self.size, self.segs, self.off.gso);
        let messages = n.div_ceil(segs).min(self.messages);
        let buf = &self.buf[..];
        let msgs = (0..messages).map(|m| {
            let first = m * segs;
            let count = segs.min(n - first);
            let tail = if first + count == n { last_len } else { size };
            let start = first * size;
            let len = (count - 1) * size + tail;
            Transmit {
                head: &buf[start..start + len],
                tail: &[],
                segment_size: (gso && count > 1).then_some(size as u16),
            }
        });
        let sent = mmsg::send(sock.as_fd(), msgs)?;
        Ok((sent * segs).min(n))
    }
}

/// Receives batches of datagrams.
pub struct BatchRecv {
    buf: Box<[u8]>,
    off: Offloads,
    /// What arrived in each message of the last batched call (with the control buffers
    /// the kernel writes into, lent to each call).
    got: Received,
    /// The length of the last plain `recv`'s datagram, without batches.
    plain: usize,
    /// Slots offered to the next call: fewer once GRO batches arrive, so that a call moves
    /// about [`CALL_BYTES`].
    slots: usize,
}

impl BatchRecv {
    /// Buffers for what `off` allows: one datagram, or [`BATCH`] slots of 64 KiB.
    pub fn new(off: Offloads) -> Self {
        let slots = if off.batch { BATCH } else { 1 };
        Self {
            buf: vec![0u8; slots * SLOT].into_boxed_slice(),
            off,
            got: Received::default(),
            plain: 0,
            slots: BATCH,
        }
    }

    /// Receives at least one message (waiting as long as the socket's receive timeout lets
    /// it) and as many more as are queued, up to [`BATCH`]; returns how many.
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        if !self.off.batch {
            self.plain = sock.recv(&mut self.buf[..SLOT])?;
            return Ok(1);
        }
        let slots = self.buf.chunks_mut(SLOT).take(self.slots.max(1));
        let n = mmsg::recv(
            sock.as_fd(),
            slots.map(RecvBuf::new),
            &mut self.got,
            Wait::ForFirst,
        )?;
        let largest = self.got.meta().iter().map(|m| m.len).max().unwrap_or(0);
        // What arrived is what will arrive next: size the next call by its largest message.
        self.slots = messages_per_call(largest);
        Ok(n)
    }

    /// Message `i` of the last call: its bytes and the size of the datagrams in it (GRO
    /// coalesces datagrams of one size; the last may be shorter).
    pub fn message(&self, i: usize) -> (&[u8], usize) {
        let m = if self.off.batch {
            self.got.meta().get(i).copied().unwrap_or_default()
        } else {
            RecvMeta {
                len: self.plain,
                ..RecvMeta::default()
            }
        };
        let len = m.len.min(SLOT);
        let seg = m.segment_size.unwrap_or(len);
        let start = (i * SLOT).min(self.buf.len());
        (
            &self.buf[start..start + len.min(self.buf.len() - start)],
            seg,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        b.connect(a.local_addr().expect("addr")).expect("connect");
        b.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        // Room for every datagram of a test, so loopback drops none.
        size_buffers(socket2::SockRef::from(&b), sockopt::DATA_BUFFER_BYTES);
        (a, b)
    }

    /// Sends `n` numbered datagrams of `size` (the last `last` long) and returns the
    /// numbers the receiver saw, in order, split by segment size.
    fn round_trip(
        wanted_tx: bool,
        wanted_rx: bool,
        size: usize,
        n: usize,
        last: usize,
    ) -> Vec<(u32, usize)> {
        let (a, b) = pair();
        let tx_off = enable(&a, wanted_tx);
        let rx_off = enable(&b, wanted_rx);
        let mut tx = BatchSend::new(size, tx_off, &vec![7u8; size]);
        let mut rx = BatchRecv::new(rx_off);
        let mut sent = 0;
        while sent < n {
            let k = (n - sent).min(tx.capacity());
            for i in 0..k {
                tx.datagram(i)[..4].copy_from_slice(&((sent + i) as u32).to_be_bytes());
            }
            let tail = if sent + k == n { last } else { size };
            sent += tx.send(&a, k, tail).expect("send");
        }
        let mut seen = Vec::new();
        while seen.len() < n {
            let Ok(m) = rx.recv(&b) else { break };
            for i in 0..m {
                let (bytes, seg) = rx.message(i);
                for d in bytes.chunks(seg.max(1)) {
                    let mut num = [0u8; 4];
                    num.copy_from_slice(&d[..4]);
                    seen.push((u32::from_be_bytes(num), d.len()));
                }
            }
        }
        seen
    }

    #[test]
    fn every_combination_delivers_the_same_datagrams() {
        // 300 datagrams of 1000 bytes with a 600-byte last one: the same numbers and sizes
        // arrive whether GSO, GRO and mmsg are on or off on either side.
        let expect: Vec<(u32, usize)> = (0..300u32)
            .map(|i| (i, if i == 299 { 600 } else { 1000 }))
            .collect();
        for tx in [false, true] {
            for rx in [false, true] {
                let got = round_trip(tx, rx, 1000, 300, 600);
                assert_eq!(got, expect, "offloads tx {tx} rx {rx}");
            }
        }
    }

    #[test]
    fn gso_refused_mid_test_falls_back_without_losing_a_datagram() {
        let (a, b) = pair();
        let on = enable(&a, true);
        let mut tx = BatchSend::new(500, on, &[1u8; 500]);
        let mut rx = BatchRecv::new(enable(&b, true));
        let mut sent = 0u32;
        for round in 0..4 {
            if round == 2 {
                // what send does when the device answers EIO
                tx.disable_gso(std::io::Error::from_raw_os_error(libc::EIO));
                assert_eq!(tx.segments(), 1);
                assert!(!tx.offloads().gso);
                assert!(tx.gso_refused().is_some());
            }
            let k = tx.capacity().min(100);
            for i in 0..k {
                tx.datagram(i)[..4].copy_from_slice(&(sent + i as u32).to_be_bytes());
            }
            let n = tx.send(&a, k, 500).expect("send");
            assert_eq!(n, k);
            sent += n as u32;
        }
        let mut next = 0u32;
        while next < sent {
            let m = rx.recv(&b).expect("recv");
            for i in 0..m {
                let (bytes, seg) = rx.message(i);
                for d in bytes.chunks(seg) {
                    let mut num = [0u8; 4];
                    num.copy_from_slice(&d[..4]);
                    assert_eq!(u32::from_be_bytes(num), next);
                    next += 1;
                }
            }
        }
    }

    #[test]
    fn offloads_name_what_they_use() {
        let (a, _b) = pair();
        assert_eq!(enable(&a, false), Offloads::default());
        assert_eq!(Offloads::default().io(), "send/recv");
        let on = enable(&a, true);
        assert!(on.batch);
        assert_eq!(on.io(), "sendmmsg/recvmmsg");
        assert!(on.features().contains(&"mmsg".to_string()));
        // with GSO refused, a sender still batches one datagram per message
        let mut s = BatchSend::new(1000, Offloads { gso: false, ..on }, &[0u8; 1000]);
        assert_eq!((s.segments(), s.capacity()), (1, BATCH));
        assert_eq!(
            s.datagram(BATCH).len(),
            0,
            "past the end is empty, not a panic"
        );
    }
}
