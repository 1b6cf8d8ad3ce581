//! The I/O loop around the link model: one thread per direction of a link reads each frame
//! from the packet socket on one side, asks the [`Link`] its fate, holds it until its
//! delivery time and writes it out of the other side.
//!
//! Frames are kept in a pool of fixed slots that grows to the most ever in flight and is
//! then reused: nothing is allocated per frame. Non-IP frames (ARP) pass at once, untouched
//! by loss, queue or delay, so that address resolution never stalls a test; their count is
//! kept apart.
//!
//! With offloads on (the default where packet sockets take `PACKET_VNET_HDR`), a host's TCP
//! and UDP hand over frames of up to 64 KiB (TSO, UDP GSO) that stay whole through the
//! emulator: one read, one write and one slot for up to 45 wire packets. The link model
//! still meets every wire packet on its own ([`crate::gso`] says where each one lies), so
//! rates, queues, losses and the link log count wire packets. A frame whose packets the
//! link treats apart (one lost, or their deliveries spread over more than 50 µs) is cut
//! into runs of packets, each a frame of its own, as the kernel would cut it; the first run
//! stays in the frame's own buffers (a full drop-tail queue's usual cut, a frame's tail
//! dropped, copies nothing), the others are copied out.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wirebench_sys::mmsg::{self, Received, RecvBuf, RecvMeta, Transmit, Wait, BATCH};

use wirebench_stats::{SeqTracker, TimeHistogram};

use crate::gso::{Plan, VnetHdr, ETH_HLEN, VNET_HDR_LEN};
use crate::link::{Dropped, Event, Fate, Link, LinkConfig, LinkCounters, Traffic};
use crate::sys;

mod per_packet;
use per_packet::Books;

/// Largest frame a slot holds: a 1500-byte MTU with its Ethernet and VLAN headers (and a
/// virtio header), rounded up.
const SLOT: usize = 2048;
/// What a frame may take beyond its slot: the rest of the largest GSO frame (an IP packet of
/// 64 KiB, its Ethernet and virtio headers).
const BIG: usize = 64 << 10;

/// A frame's slot.
type Slot = Box<[u8; SLOT]>;
/// The space a GSO frame takes beyond its slot.
type Big = Box<[u8; BIG]>;

/// Longest the loop waits before it looks at its stop flag again, whether or not a frame
/// is due sooner: a frame held for a long delay (a 60 s link) must not hold up a stop.
const STOP_POLL: Duration = Duration::from_millis(20);
/// The last stretch before a frame is due is spun, not slept: a thread put to sleep wakes
/// late (tens of microseconds on an idle VM, hundreds on a busy one or when its vCPU was
/// halted), and that lateness is delay the link did not ask for. Within it the loop looks
/// for arrivals without blocking and yields the core between looks, so a sender or
/// receiver waiting for it runs. The stretch follows how late this thread's sleeps end
/// ([`SpinMargin`]), between these bounds.
const SPIN_MIN: Duration = Duration::from_micros(50);
const SPIN_MAX: Duration = Duration::from_millis(1);

/// How long before a frame is due the loop stops sleeping: one and a half times the
/// lateness of the latest timed-out sleep, or the margin so far less 1/32 of it, whichever
/// is more, within [`SPIN_MIN`]..=[`SPIN_MAX`]. One late wake-up widens it at once; it
/// narrows again over about a hundred punctual ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SpinMargin {
    ns: u64,
}

impl Default for SpinMargin {
    fn default() -> Self {
        Self {
            ns: SPIN_MIN.as_nanos() as u64,
        }
    }
}

impl SpinMargin {
    /// A sleep that was asked to end at some time ended `late_ns` after it.
    fn woke(&mut self, late_ns: u64) {
        let decayed = self.ns - self.ns / 32;
        self.ns = decayed
            .max(late_ns.saturating_add(late_ns / 2))
            .clamp(SPIN_MIN.as_nanos() as u64, SPIN_MAX.as_nanos() as u64);
    }
}
/// A GSO frame travels whole when the link delivers all of its wire packets within this
/// span, at the last one's time: no wire packet is held back longer to travel with its
/// neighbours. Otherwise it is cut into runs that each are. At 5 Gbit/s this is 21 packets
/// of 1500 bytes; at 1 Gbit/s, 4.
const HOLD: Duration = Duration::from_micros(50);

/// What one direction of a link did: the model's counters and the I/O loop's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionReport {
    /// The link model's counters (IP packets only).
    #[serde(flatten)]
    pub link: LinkCounters,
    /// Frames the kernel dropped before the emulator read them (its socket buffer was full):
    /// losses the configuration did not ask for. Should be 0.
    pub emulator_drops: u64,
    /// Frames the device refused when the emulator sent them. Should be 0.
    pub send_errors: u64,
    /// Frames the emulator could not carry, dropped: larger than its buffers, or a
    /// segmentation offload it cannot cut into wire packets. Should be 0.
    pub oversize: u64,
    /// Non-IP frames (ARP) passed straight through.
    pub non_ip: u64,
    /// Bytes of the IP packets delivered (lengths without the Ethernet header).
    pub delivered_bytes: u64,
    /// How late the emulator sent frames after their modelled delivery time: the sum, ns
    /// (divide by `delivered` for the mean)...
    pub late_ns_sum: u64,
    /// ... the most, ns ...
    pub late_ns_max: u64,
    /// ... and how many were more than 100 µs late.
    pub late_over_100us: u64,
    /// The receive buffer the kernel granted the emulator's socket on the link's input,
    /// bytes: how long a stall of the emulator it absorbs without `emulator_drops`.
    #[serde(default)]
    pub rcvbuf_bytes: u64,
    /// Whether the link ran with offloads on: frames carried a virtio header and could be
    /// GSO frames (false: the hosts' offloads were off and each frame was one wire packet).
    #[serde(default)]
    pub offload: bool,
    /// Frames that arrived as more than one wire packet (a sender's TSO or UDP GSO, kept
    /// whole by offloads): the model still met each of their wire packets on its own.
    #[serde(default)]
    pub gso_frames: u64,
    /// Of those, the frames the emulator cut because the link treated their wire packets
    /// apart: one lost or dropped, or delivered more than 50 µs after the first.
    #[serde(default)]
    pub split_frames: u64,
    /// Frames still in the delay line when the lab stopped, dropped unsent (counted in
    /// the model's `delivered`, which gives a delivery time, but never sent).
    #[serde(default)]
    pub unsent_at_stop: u64,
    /// Time delivered packets spent in the queue (their sojourn), percentiles, ns.
    #[serde(default)]
    pub sojourn_p50_ns: u64,
    /// See `sojourn_p50_ns`.
    #[serde(default)]
    pub sojourn_p90_ns: u64,
    /// See `sojourn_p50_ns`.
    #[serde(default)]
    pub sojourn_p99_ns: u64,
    /// Corrupted packets sent on (netem's `corrupt`): the receiving kernel finds their
    /// checksum wrong and drops them.
    #[serde(default)]
    pub corrupt_sent: u64,
    /// UDP datagrams as a receiver of this direction counts them, in the order they
    /// reached the link (for one UDP stream, the sender's order), when the link treats
    /// each wire packet apart (netem's reorder, duplicate, corrupt, or an AQM): datagrams
    /// that reached the link (copies not counted)...
    #[serde(default)]
    pub udp_in: u64,
    /// ... of those, sent on below one sent on before them (a receiver's `reordered`)...
    #[serde(default)]
    pub udp_late: u64,
    /// ... sent on more than once (a receiver's `duplicates`)...
    #[serde(default)]
    pub udp_duplicates: u64,
    /// ... never sent on whole (lost, dropped, corrupted, or held at the stop)...
    #[serde(default)]
    pub udp_lost: u64,
    /// ... and the copies of them sent on corrupted (a receiving kernel's UDP
    /// `InCsumErrors`).
    #[serde(default)]
    pub udp_corrupt: u64,
    /// The queue discipline's own counters, when the link has an AQM (or drop-head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aqm: Option<crate::aqm::AqmCounters>,
}

/// What one direction did in one interval of a link log (the row type is the link log's
/// own, in `wirebench-proto`, so that the report crate reads it without this crate).
pub use wirebench_proto::link_log::LinkInterval as Bin;

/// Most intervals a link log keeps per direction (about 56 MiB): later events are not
/// logged. At the default 100 ms that is 29 hours.
const MAX_BINS: usize = 1 << 20;

/// The intervals of one direction's link log.
struct Log {
    bin_ns: u64,
    bins: Vec<Bin>,
}

impl Log {
    /// The interval of time `t_ns` (since the lab's start), when logging; grows the log by
    /// whole intervals, not per packet.
    fn bin(&mut self, t_ns: u64) -> Option<&mut Bin> {
        if self.bin_ns == 0 {
            return None;
        }
        let i = usize::try_from(t_ns / self.bin_ns).ok()?;
        if i >= MAX_BINS {
            return None;
        }
        if i >= self.bins.len() {
            self.bins.resize(i + 1, Bin::default());
        }
        self.bins.get_mut(i)
    }
}

/// What a direction gives when it stops: its report and its log.
type Finished = (DirectionReport, Vec<Bin>);

/// A running direction; [`Direction::stop`] ends it and gives its report.
pub struct Direction {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<io::Result<Finished>>>,
}

impl Direction {
    /// Starts forwarding frames that arrive on `rx` out of `tx` through a link of `cfg`.
    /// Times are kept from `base`; with `log_ns` > 0, what the link does is also logged in
    /// intervals of that length. With `offload`, both sockets carry a virtio header per
    /// frame (`PACKET_VNET_HDR`, set by the caller) and frames may be GSO frames.
    pub fn start(
        name: String,
        rx: Arc<OwnedFd>,
        tx: Arc<OwnedFd>,
        cfg: LinkConfig,
        base: Instant,
        log_ns: u64,
        offload: bool,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || forward(&rx, &tx, cfg, &flag, base, log_ns, offload))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Asks the direction to stop without waiting for it: a lab asks all of its
    /// directions first, so that they wind down together rather than one after another.
    pub fn ask_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops the direction and returns what it did, and its log (empty when not logging).
    /// Frames it still holds are dropped (counted in `unsent_at_stop`); it ends within
    /// about 20 ms of the request, however long their delay.
    pub fn stop(mut self) -> io::Result<Finished> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("link thread panicked"))),
            None => Ok((DirectionReport::default(), Vec::new())),
        }
    }
}

impl Drop for Direction {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn is_ip(frame: &[u8]) -> bool {
    frame.len() > ETH_HLEN && matches!([frame[12], frame[13]], [0x08, 0x00] | [0x86, 0xdd])
}

/// The kind of an IP packet, for its loss draw (IPv4's protocol, IPv6's next header).
fn traffic(ip: &[u8]) -> Traffic {
    let proto = match ip.first().map(|b| b >> 4) {
        Some(4) => ip.get(9),
        Some(6) => ip.get(6),
        _ => None,
    };
    match proto {
        Some(17) => Traffic::Udp,
        Some(6) => Traffic::Tcp,
        _ => Traffic::Other,
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A frame the emulator holds: its slot and, for a GSO frame longer than a slot, the rest.
struct Frame {
    slot: Slot,
    big: Option<Big>,
    len: usize,
    /// Its place among the UDP datagrams that reached the link, when it is one and the link
    /// treats each wire packet apart; [`NOT_COUNTED`] otherwise. A copy keeps its original's.
    udp_index: u64,
    /// A bit of it was flipped.
    corrupt: bool,
}

/// [`Frame::udp_index`] of a frame that is not counted as a UDP datagram.
const NOT_COUNTED: u64 = u64::MAX;

impl Frame {
    /// A frame of `len` bytes in `slot` and `big`, not counted as a UDP datagram, intact.
    fn new(slot: Slot, big: Option<Big>, len: usize) -> Self {
        Self {
            slot,
            big,
            len,
            udp_index: NOT_COUNTED,
            corrupt: false,
        }
    }

    /// A copy of the frame, in buffers from `pool`, counted as the same datagram.
    fn copy(&self, pool: &mut Pool) -> Self {
        let mut c = Self {
            udp_index: self.udp_index,
            ..Self::new(pool.slot(), None, 0)
        };
        let (a, b) = self.parts();
        c.extend(a, pool);
        c.extend(b, pool);
        c
    }

    /// The frame's bytes, in its slot and past it.
    fn parts(&self) -> (&[u8], &[u8]) {
        let a = self.len.min(SLOT);
        let b = self.big.as_ref().map_or(&[][..], |b| &b[..self.len - a]);
        (&self.slot[..a], b)
    }

    /// Bytes `r` of the frame, in its slot and past it.
    fn range(&self, r: Range<usize>) -> (&[u8], &[u8]) {
        let (a, b) = self.parts();
        let split = r.start.min(a.len())..r.end.min(a.len());
        let rest = r.start.saturating_sub(a.len())..r.end.saturating_sub(a.len());
        (&a[split], &b[rest])
    }

    /// The frame's first bytes, those its slot holds: all of its headers.
    fn head_mut(&mut self) -> &mut [u8] {
        &mut self.slot[..self.len.min(SLOT)]
    }

    /// Appends `bytes`, past the slot into a buffer from `pool`.
    fn extend(&mut self, mut bytes: &[u8], pool: &mut Pool) {
        if self.len < SLOT {
            let k = bytes.len().min(SLOT - self.len);
            self.slot[self.len..self.len + k].copy_from_slice(&bytes[..k]);
            self.len += k;
            bytes = &bytes[k..];
        }
        if !bytes.is_empty() {
            let at = self.len - SLOT;
            let big = self.big.get_or_insert_with(|| pool.big());
            big[at..at + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }
}

/// Frame buffers for reuse: they grow to the most ever in flight, and nothing is allocated
/// per frame after that.
#[derive(Default)]
struct Pool {
    slots: Vec<Slot>,
    bigs: Vec<Big>,
}

impl Pool {
    fn slot(&mut self) -> Slot {
        self.slots.pop().unwrap_or_else(|| Box::new([0; SLOT]))
    }

    fn big(&mut self) -> Big {
        self.bigs.pop().unwrap_or_else(|| {
            // Made on the heap: 64 KiB is too much for a thread's stack in a debug build.
            match vec![0u8; BIG].into_boxed_slice().try_into() {
                Ok(b) => b,
                Err(_) => unreachable!("a boxed slice of BIG bytes is a boxed [u8; BIG]"),
            }
        })
    }

    fn put(&mut self, f: Frame) {
        self.slots.push(f.slot);
        self.bigs.extend(f.big);
    }
}

/// Offers one wire packet to the link, logs its fate, and says when it is delivered.
fn offer(
    link: &mut Link,
    books: &mut Books,
    at: u64,
    ip_len: u64,
    kind: Traffic,
) -> Option<(u64, bool)> {
    let fate = link.offer_kind(at, ip_len, kind);
    books.arrived(at, ip_len);
    match fate {
        Fate::Lost => books.dropped(at, Dropped::Loss),
        Fate::QueueFull => books.dropped(at, Dropped::Queue),
        Fate::Deliver {
            at_ns,
            waited_ns,
            reordered,
        } => {
            books.delivered(at, at_ns, waited_ns, ip_len, false);
            return Some((at_ns, reordered));
        }
    }
    None
}

/// One of the two lines of frames waiting for their time.
#[derive(Debug, Clone, Copy)]
enum Line {
    /// The delay line.
    Pending,
    /// Frames sent ahead of it.
    Ahead,
}

/// Puts a GSO frame's wire packets, delivered at `times` (`None`: dropped), on `pending`:
/// whole, when all of them are delivered within [`HOLD`]; else cut into runs of delivered
/// packets that each are: a run from the first packet in the frame's own buffers, the
/// others copied into frames of their own.
fn deliver_segments(
    plan: &Plan,
    frame: Frame,
    times: &[Option<u64>],
    pending: &mut VecDeque<(u64, Frame)>,
    pool: &mut Pool,
    report: &mut DirectionReport,
) {
    let within =
        |t0: u64, t: Option<u64>| t.is_some_and(|t| t.saturating_sub(t0) <= HOLD.as_nanos() as u64);
    // A GSO frame of one segment is one wire packet: counted in neither, so that the split
    // frames stay a part of the GSO frames.
    let many = u64::from(times.len() > 1);
    report.gso_frames += many;
    if let (Some(Some(t0)), Some(&last)) = (times.first(), times.last()) {
        if times.iter().all(|&t| within(*t0, t)) {
            pending.push_back((last.unwrap_or(*t0), frame));
            return;
        }
    }
    report.split_frames += many;
    // The first run, when it starts at the frame's first packet, stays in the frame's own
    // buffers (cut down to it once the other runs are copied out): with a full drop-tail
    // queue, the usual cut is a frame's tail dropped, and then nothing is copied.
    let at = pending.len();
    let mut first_run = None;
    let mut k = 0;
    while k < times.len() {
        let Some(t0) = times[k] else {
            k += 1;
            continue;
        };
        let mut j = k + 1;
        while j < times.len() && within(t0, times[j]) {
            j += 1;
        }
        if k == 0 {
            first_run = Some((j, times[j - 1].unwrap_or(t0)));
            k = j;
            continue;
        }
        let mut out = Frame::new(pool.slot(), None, plan.headers_len());
        plan.write_headers(
            &frame.slot[VNET_HDR_LEN..],
            k,
            j - k,
            &mut out.slot[..plan.headers_len()],
        );
        let r = plan.payload_range(k, j - k);
        let (a, b) = frame.range(VNET_HDR_LEN + r.start..VNET_HDR_LEN + r.end);
        out.extend(a, pool);
        out.extend(b, pool);
        pending.push_back((times[j - 1].unwrap_or(t0), out));
        k = j;
    }
    match first_run {
        Some((n, time)) => {
            let mut frame = frame;
            frame.len = plan.keep_first(frame.head_mut(), n);
            if frame.len <= SLOT {
                pool.bigs.extend(frame.big.take());
            }
            pending.insert(at, (time, frame));
        }
        None => pool.put(frame),
    }
}

fn forward(
    rx: &OwnedFd,
    tx: &OwnedFd,
    cfg: LinkConfig,
    stop: &AtomicBool,
    base: Instant,
    log_ns: u64,
    offload: bool,
) -> io::Result<Finished> {
    sys::fine_timer_slack();
    mmsg::timestamp_arrivals(rx.as_fd())?;
    let mut f = Forward::new(rx.as_fd(), tx.as_fd(), cfg, base, log_ns, offload);
    while !stop.load(Ordering::Relaxed) {
        f.poll_link();
        f.send_due();
        if f.wait_for_arrivals()? {
            f.receive()?;
        }
    }
    Ok(f.finish())
}

/// What one direction's loop holds: its sockets, the link, the frames in flight and the
/// buffers the next read goes into.
struct Forward<'a> {
    rx: BorrowedFd<'a>,
    tx: BorrowedFd<'a>,
    base: Instant,
    /// Frames carry a virtio header and may be GSO frames.
    offload: bool,
    link: Link,
    books: Books,
    /// A frame's buffers move into `pending` and back to the pool.
    pool: Pool,
    /// (delivery time, frame), in delivery order...
    pending: VecDeque<(u64, Frame)>,
    /// ... but for the frames sent ahead of it (netem's reorder), in an order of their own.
    ahead: VecDeque<(u64, Frame)>,
    /// The link treats each wire packet apart (see [`LinkConfig::per_packet`]).
    per_packet: bool,
    /// Frames the link's queue holds, by handle, and the free handles.
    held: Vec<Option<Frame>>,
    free: Vec<u32>,
    /// What the link's queue did since it was last asked.
    events: Vec<Event>,
    /// UDP datagrams that reached the link, and their order as a receiver would see it.
    udp_next: u64,
    udp_seen: SeqTracker,
    /// Where the next read puts each frame: [`BATCH`] slots, and as many [`Big`]s with
    /// offloads. A frame read takes its buffers and the pool gives others in their place.
    rx_slots: Vec<Slot>,
    rx_bigs: Vec<Big>,
    /// What the last read received (and the control buffers the kernel writes into).
    received: Received,
    /// Delivery times of a GSO frame's wire packets.
    times: Vec<Option<u64>>,
    last_offer: u64,
    spin: SpinMargin,
}

impl<'a> Forward<'a> {
    fn new(
        rx: BorrowedFd<'a>,
        tx: BorrowedFd<'a>,
        cfg: LinkConfig,
        base: Instant,
        log_ns: u64,
        offload: bool,
    ) -> Self {
        let mut pool = Pool::default();
        let rx_slots = (0..BATCH).map(|_| pool.slot()).collect();
        let rx_bigs = (0..if offload { BATCH } else { 0 })
            .map(|_| pool.big())
            .collect();
        let per_packet = cfg.per_packet();
        let report = DirectionReport {
            rcvbuf_bytes: socket2::SockRef::from(&rx)
                .recv_buffer_size()
                .map_or(0, |b| b as u64),
            offload,
            ..DirectionReport::default()
        };
        // Drops counted before the loop began are not ours.
        let _ = sys::packet_drops(rx);
        Self {
            rx,
            tx,
            base,
            offload,
            link: Link::new(cfg),
            books: Books {
                log: Log {
                    bin_ns: log_ns,
                    bins: Vec::new(),
                },
                report,
                sojourn: TimeHistogram::new(),
            },
            pool,
            pending: VecDeque::new(),
            ahead: VecDeque::new(),
            per_packet,
            held: Vec::new(),
            free: Vec::new(),
            events: Vec::new(),
            udp_next: 0,
            udp_seen: SeqTracker::new(),
            rx_slots,
            rx_bigs,
            received: Received::default(),
            times: Vec::new(),
            last_offer: 0,
            spin: SpinMargin::default(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Bytes before a frame's Ethernet header: its virtio header, with offloads.
    fn hdr(&self) -> usize {
        if self.offload {
            VNET_HDR_LEN
        } else {
            0
        }
    }

    /// Sends what is due, in order of time across the delay line and the frames sent ahead
    /// of it, a batch at a time, and takes their buffers back.
    fn send_due(&mut self) {
        let now = self.now_ns();
        loop {
            let head = |q: &VecDeque<(u64, Frame)>| q.front().map(|p| p.0).filter(|&t| t <= now);
            let (line, other) = match (head(&self.pending), head(&self.ahead)) {
                (None, None) => return,
                (Some(_), None) => (Line::Pending, None),
                (None, Some(_)) => (Line::Ahead, None),
                (Some(p), Some(a)) if a < p => (Line::Ahead, Some(p)),
                (Some(_), Some(a)) => (Line::Pending, Some(a)),
            };
            // Up to the other line's first due frame, if it has one.
            let until = other.unwrap_or(now);
            let q = match line {
                Line::Pending => &self.pending,
                Line::Ahead => &self.ahead,
            };
            let due = q.iter().take_while(|p| p.0 <= until).count().max(1);
            self.send_from(line, due, now);
        }
    }

    /// Sends the first `due` frames of `line` and takes their buffers back.
    fn send_from(&mut self, line: Line, due: usize, now: u64) {
        let q = match line {
            Line::Pending => &mut self.pending,
            Line::Ahead => &mut self.ahead,
        };
        let mut sent = 0;
        while sent < due {
            let n = (due - sent).min(BATCH);
            let frames = q.iter().skip(sent).take(n).map(|(_, f)| f.parts());
            let (took, refused) = send_frames(self.tx, frames);
            self.books.report.send_errors += refused as u64;
            sent += took.max(1);
        }
        let report = &mut self.books.report;
        for (at, frame) in q.drain(..due) {
            let late = now.saturating_sub(at);
            report.late_ns_sum += late;
            report.late_ns_max = report.late_ns_max.max(late);
            report.late_over_100us += u64::from(late > 100_000);
            if frame.corrupt {
                report.corrupt_sent += 1;
                report.udp_corrupt += u64::from(frame.udp_index != NOT_COUNTED);
            } else if frame.udp_index != NOT_COUNTED {
                self.udp_seen.record(frame.udp_index);
            }
            self.pool.put(frame);
        }
    }

    /// Waits for a frame to arrive until the spin margin before the next one is due, or
    /// [`STOP_POLL`]; within the margin, looks without blocking. True if one has arrived.
    fn wait_for_arrivals(&mut self) -> io::Result<bool> {
        let next = [
            self.pending.front().map(|p| p.0),
            self.ahead.front().map(|p| p.0),
            self.link.next_dequeue_ns(),
        ]
        .into_iter()
        .flatten()
        .min();
        let wait = match next {
            Some(at) => at.saturating_sub(self.now_ns()),
            None => u64::MAX,
        }
        .min(STOP_POLL.as_nanos() as u64);
        if wait == 0 {
            return Ok(true);
        }
        let sleep = wait.saturating_sub(self.spin.ns);
        let asleep = self.now_ns();
        if sys::wait_readable(self.rx, sleep)? {
            return Ok(true);
        }
        if sleep == 0 {
            std::thread::yield_now();
        } else {
            self.spin.woke(self.now_ns().saturating_sub(asleep + sleep));
        }
        Ok(false)
    }

    /// Reads what has arrived, each frame offered to the link at the kernel's arrival time
    /// (not the time of this read, which may come late, in bursts).
    fn receive(&mut self) -> io::Result<()> {
        let bigs = self.rx_bigs.iter_mut().map(|b| &mut b[..]);
        let bufs = self
            .rx_slots
            .iter_mut()
            .zip(bigs.chain(std::iter::repeat_with(|| &mut [][..])));
        let bufs = bufs.map(|(slot, big)| RecvBuf {
            head: &mut slot[..],
            tail: big,
        });
        let got = match mmsg::recv(self.rx, bufs, &mut self.received, Wait::Never) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            // A frame the kernel cannot describe in a virtio_net_hdr (a GSO kind it has no
            // header type for, as UDP GSO before Linux 6.2): the call dropped it. Counted,
            // and the link goes on.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.books.report.oversize += 1;
                0
            }
            Err(e) => return Err(e),
        };
        let now_mono = self.now_ns();
        let mono_minus_unix = now_mono.wrapping_sub(unix_ns());
        for i in 0..got {
            let Some(&meta) = self.received.meta().get(i) else {
                break;
            };
            let arrival = match meta.arrival_unix_ns {
                Some(stamp) => stamp.wrapping_add(mono_minus_unix).min(now_mono),
                None => now_mono,
            };
            self.take(i, meta, arrival);
        }
        Ok(())
    }

    /// Takes frame `i` of the last read, which arrived at `arrival`: passes it on at once
    /// (not IP), offers its wire packets to the link, or drops it (too large to carry).
    fn take(&mut self, i: usize, meta: RecvMeta, arrival: u64) {
        let hdr = self.hdr();
        let cap = if self.offload { SLOT + BIG } else { SLOT };
        let len = meta.len;
        if meta.truncated || len > cap {
            // Its buffers stay where they are, for the next read.
            self.books.report.oversize += 1;
            return;
        }
        let slot = std::mem::replace(&mut self.rx_slots[i], self.pool.slot());
        let big = (len > SLOT).then(|| std::mem::replace(&mut self.rx_bigs[i], self.pool.big()));
        let frame = Frame::new(slot, big, len);
        let head = &frame.slot[hdr..len.min(SLOT)];
        if !is_ip(head) {
            self.books.report.non_ip += 1;
            let (_, refused) = send_frames(self.tx, std::iter::once(frame.parts()));
            self.books.report.send_errors += refused as u64;
            self.pool.put(frame);
            return;
        }
        // The model wants non-decreasing times.
        let at = arrival.max(self.last_offer);
        self.last_offer = at;
        let kind = traffic(&head[ETH_HLEN..]);
        let plan = if self.offload {
            let vnet = VnetHdr::read(&frame.slot[..]).unwrap_or_default();
            match Plan::parse(&vnet, head, len - hdr) {
                Ok(plan) => plan,
                Err(_) => {
                    self.books.report.oversize += 1;
                    self.pool.put(frame);
                    return;
                }
            }
        } else {
            None
        };
        let (link, books) = (&mut self.link, &mut self.books);
        let Some(plan) = plan else {
            let ip_len = (len - hdr - ETH_HLEN) as u64;
            if self.per_packet {
                self.take_packet(frame, at, ip_len, kind);
                return;
            }
            match offer(link, books, at, ip_len, kind) {
                Some((at_ns, _)) => self.pending.push_back((at_ns, frame)),
                None => self.pool.put(frame),
            }
            return;
        };
        if self.per_packet {
            // The lab turns offloads off for such a link; a GSO frame here is one it cannot
            // treat packet by packet.
            books.report.oversize += 1;
            self.pool.put(frame);
            return;
        }
        // A GSO frame: each of its wire packets meets the link on its own.
        self.times.clear();
        for k in 0..plan.segments() {
            let ip_len = plan.ip_len(k) as u64;
            let time = offer(link, books, at, ip_len, kind).map(|(t, _)| t);
            self.times.push(time);
        }
        deliver_segments(
            &plan,
            frame,
            &self.times,
            &mut self.pending,
            &mut self.pool,
            &mut books.report,
        );
    }

    /// What the direction did, once it stops; frames still held are dropped unsent.
    fn finish(mut self) -> Finished {
        let mut report = self.books.report;
        report.unsent_at_stop = (self.pending.len() + self.ahead.len()) as u64;
        report.link = self.link.counters();
        report.aqm = self.link.aqm_counters();
        report.emulator_drops = sys::packet_drops(self.rx);
        let q = |p: f64| {
            self.books
                .sojourn
                .quantile(p)
                .map_or(0, |v| v.max(0) as u64)
        };
        (
            report.sojourn_p50_ns,
            report.sojourn_p90_ns,
            report.sojourn_p99_ns,
        ) = (q(0.5), q(0.9), q(0.99));
        if self.per_packet {
            self.udp_seen.finish(self.udp_next);
            report.udp_in = self.udp_next;
            report.udp_late = self.udp_seen.reordered();
            report.udp_duplicates = self.udp_seen.duplicates();
            report.udp_lost = self.udp_seen.lost(self.udp_next);
        }
        let capacity = self.link.capacity();
        let mut bins = self.books.log.bins;
        crate::trace::fill_capacity(&mut bins, self.books.log.bin_ns, &|a, b| {
            capacity.bytes_in(a, b)
        });
        (report, bins)
    }
}

/// Sends up to [`BATCH`] frames, each in one or two parts (the second may be empty), out
/// of `fd`'s interface; returns how many it took from `frames`, and how many of those the
/// device refused (lost, as on a busy wire).
fn send_frames<'a>(
    fd: BorrowedFd<'_>,
    frames: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
) -> (usize, usize) {
    let n = frames.clone().take(BATCH).count();
    let mut sent = 0;
    let mut refused = 0;
    while sent < n {
        let msgs = frames
            .clone()
            .take(n)
            .skip(sent)
            .map(|(head, tail)| Transmit {
                head,
                tail,
                segment_size: None,
            });
        match mmsg::send(fd, msgs) {
            Ok(k) if k > 0 => sent += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Skip the frame the device refused and go on with the rest.
            _ => {
                sent += 1;
                refused += 1;
            }
        }
    }
    (n, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 100;

    /// A UDP GSO frame as a packet socket hands it over (virtio header, Ethernet, IPv4,
    /// UDP), of `segments` payloads of [`MSS`] bytes, segment k's bytes all k; and its plan.
    fn udp_gso_frame(pool: &mut Pool, segments: usize) -> (Plan, Frame) {
        let mut b = vec![0u8; VNET_HDR_LEN + ETH_HLEN + 28 + segments * MSS];
        b[0] = 1; // the device completes the checksum
        b[1] = 5; // UDP segmentation
        for (at, v) in [(2, 42u16), (4, MSS as u16), (6, 34), (8, 6)] {
            b[at..at + 2].copy_from_slice(&v.to_ne_bytes());
        }
        let l3 = VNET_HDR_LEN + ETH_HLEN;
        b[l3 - 2..l3].copy_from_slice(&[0x08, 0x00]);
        b[l3] = 0x45;
        b[l3 + 9] = 17;
        for k in 0..segments {
            b[l3 + 28 + k * MSS..l3 + 28 + (k + 1) * MSS].fill(k as u8);
        }
        let vnet = VnetHdr::read(&b).expect("a virtio header");
        let plan = Plan::parse(&vnet, &b[VNET_HDR_LEN..], b.len() - VNET_HDR_LEN)
            .expect("well formed")
            .expect("a GSO frame");
        let mut frame = Frame::new(pool.slot(), None, 0);
        frame.extend(&b, pool);
        (plan, frame)
    }

    /// A frame's datagrams: (UDP length from its header, its payload's bytes).
    fn datagram(f: &Frame) -> (usize, Vec<u8>) {
        let (a, b) = f.parts();
        let bytes = [a, b].concat();
        let udp = VNET_HDR_LEN + ETH_HLEN + 20;
        let len = usize::from(u16::from_be_bytes([bytes[udp + 4], bytes[udp + 5]]));
        (len, bytes[udp + 8..].to_vec())
    }

    fn segments_bytes(ks: &[u8]) -> Vec<u8> {
        ks.iter().flat_map(|&k| [k; MSS]).collect()
    }

    #[test]
    fn a_frame_whose_tail_is_dropped_goes_on_in_its_own_buffers() {
        let mut pool = Pool::default();
        let (plan, frame) = udp_gso_frame(&mut pool, 30);
        assert!(frame.big.is_some(), "the frame is longer than a slot");
        let slot = frame.slot.as_ptr();
        let mut times = vec![Some(0), Some(10), Some(20)];
        times.resize(30, None);
        let (mut pending, mut report) = (VecDeque::new(), DirectionReport::default());
        deliver_segments(&plan, frame, &times, &mut pending, &mut pool, &mut report);
        assert_eq!((report.gso_frames, report.split_frames), (1, 1));
        assert_eq!(pending.len(), 1);
        let (at, f) = &pending[0];
        assert_eq!(*at, 20, "sent with its last packet");
        assert!(std::ptr::eq(f.slot.as_ptr(), slot), "not copied");
        assert!(f.big.is_none(), "the rest of its buffers back in the pool");
        assert_eq!(pool.bigs.len(), 1);
        assert_eq!(datagram(f), (8 + 3 * MSS, segments_bytes(&[0, 1, 2])));
    }

    #[test]
    fn a_frame_cut_in_runs_keeps_the_first_in_place_and_the_order_of_time() {
        let mut pool = Pool::default();
        let (plan, frame) = udp_gso_frame(&mut pool, 6);
        let slot = frame.slot.as_ptr();
        let hold = HOLD.as_nanos() as u64;
        // Packet 1 dropped; 2 and 3 together; 4 more than the hold after 2; 5 dropped.
        let times = [Some(0), None, Some(5), Some(6), Some(5 + hold + 1), None];
        let (mut pending, mut report) = (VecDeque::new(), DirectionReport::default());
        pending.push_back((0, udp_gso_frame(&mut pool, 1).1)); // one already waiting
        deliver_segments(&plan, frame, &times, &mut pending, &mut pool, &mut report);
        let at: Vec<u64> = pending.iter().map(|p| p.0).collect();
        assert_eq!(at, [0, 0, 6, 5 + hold + 1]);
        assert!(
            std::ptr::eq(pending[1].1.slot.as_ptr(), slot),
            "first run in place"
        );
        let got: Vec<(usize, Vec<u8>)> = pending.iter().skip(1).map(|p| datagram(&p.1)).collect();
        assert_eq!(
            got,
            [
                (8 + MSS, segments_bytes(&[0])),
                (8 + 2 * MSS, segments_bytes(&[2, 3])),
                (8 + MSS, segments_bytes(&[4])),
            ]
        );
    }

    #[test]
    fn a_frame_without_a_delivered_packet_goes_back_to_the_pool() {
        let mut pool = Pool::default();
        let (plan, frame) = udp_gso_frame(&mut pool, 30);
        let (mut pending, mut report) = (VecDeque::new(), DirectionReport::default());
        deliver_segments(
            &plan,
            frame,
            &[None; 30],
            &mut pending,
            &mut pool,
            &mut report,
        );
        assert!(pending.is_empty());
        assert_eq!((pool.slots.len(), pool.bigs.len()), (1, 1));
    }

    #[test]
    fn the_spin_margin_widens_at_once_and_narrows_slowly() {
        let us = 1_000u64;
        let mut m = SpinMargin::default();
        m.woke(10 * us);
        assert_eq!(m.ns, 50 * us, "punctual wake-ups keep the least margin");
        m.woke(300 * us);
        assert_eq!(m.ns, 450 * us);
        m.woke(0);
        assert_eq!(m.ns, 450 * us - 450 * us / 32);
        m.woke(5_000 * us);
        assert_eq!(m.ns, 1_000 * us, "at most SPIN_MAX");
        for _ in 0..200 {
            m.woke(0);
        }
        assert_eq!(
            m.ns,
            50 * us,
            "back to the least after a run of punctual ones"
        );
    }
}
