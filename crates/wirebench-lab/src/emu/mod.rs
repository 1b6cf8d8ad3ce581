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

mod frame;
mod per_packet;
use frame::{deliver_segments, Big, Frame, Pool, Slot, BIG, NOT_COUNTED, SLOT};
use per_packet::Books;

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
            left_ns,
            waited_ns,
            reordered,
        } => {
            books.delivered(at, left_ns, waited_ns, ip_len, false);
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
