//! The I/O loop around the link model: one thread per direction of a link reads each frame
//! from the packet socket on one side, asks the [`Link`] its fate, holds it until its
//! delivery time and writes it out of the other side.
//!
//! Frames are kept in a pool of fixed slots that grows to the most ever in flight and is
//! then reused: nothing is allocated per frame. Non-IP frames (ARP) pass at once, untouched
//! by loss, queue or delay, so that address resolution never stalls a test; their count is
//! kept apart.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::link::{Fate, Link, LinkConfig, LinkCounters, Traffic};
use crate::sys::{self, Batch, Slot, BATCH, SLOT};

/// Longest wait with nothing to deliver, so that a stop is seen.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// The last stretch before a frame is due is spun, not slept: a thread put to sleep wakes
/// late (tens of microseconds on this VM, more when its vCPU was halted), and that lateness
/// is delay the link did not ask for. Within it the loop looks for arrivals without
/// blocking and yields the core between looks, so a sender or receiver waiting for it runs.
const SPIN: Duration = Duration::from_micros(50);
/// Ethernet header length.
const ETH_HLEN: usize = 14;

/// What one direction of a link did: the model's counters and the I/O loop's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionReport {
    /// The link model's counters (IP packets only).
    #[serde(flatten)]
    pub link: LinkCounters,
    /// Frames the kernel dropped before the emulator read them (its socket buffer was full):
    /// losses the configuration did not ask for. Should be 0.
    pub emulator_drops: u64,
    /// Frames the device refused when the emulator sent them. Should be 0.
    pub send_errors: u64,
    /// Frames larger than a slot (offloads not off?), dropped.
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
    /// intervals of that length.
    pub fn start(
        name: String,
        rx: Arc<OwnedFd>,
        tx: Arc<OwnedFd>,
        cfg: LinkConfig,
        base: Instant,
        log_ns: u64,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || forward(&rx, &tx, cfg, &flag, base, log_ns))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the direction and returns what it did, and its log (empty when not logging).
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

fn forward(
    rx: &OwnedFd,
    tx: &OwnedFd,
    cfg: LinkConfig,
    stop: &AtomicBool,
    base: Instant,
    log_ns: u64,
) -> io::Result<Finished> {
    sys::fine_timer_slack();
    sys::timestamp_arrivals(rx.as_fd())?;
    let now_ns = || base.elapsed().as_nanos() as u64;
    let mut log = Log {
        bin_ns: log_ns,
        bins: Vec::new(),
    };
    let mut link = Link::new(cfg);
    // Free slots; a frame's slot moves into `pending` and back, so nothing is allocated per
    // frame once the pool has grown to the most frames ever in flight.
    let mut free: Vec<Slot> = Vec::new();
    let mut rx_slots: Vec<Slot> = Vec::with_capacity(BATCH);
    let mut rx_out = [(0usize, 0u64); BATCH];
    let mut batch = Batch::default();
    // (delivery time, slot, length), in delivery order: the model never reorders.
    let mut pending: VecDeque<(u64, Slot, usize)> = VecDeque::new();
    let mut report = DirectionReport {
        rcvbuf_bytes: socket2::SockRef::from(rx)
            .recv_buffer_size()
            .map_or(0, |b| b as u64),
        ..DirectionReport::default()
    };
    let mut last_offer = 0u64;
    // Drops counted before the loop began are not ours.
    let _ = sys::packet_drops(rx.as_fd());
    while !stop.load(Ordering::Relaxed) {
        // Send what is due, a batch at a time.
        let now = now_ns();
        let due = pending.iter().take_while(|p| p.0 <= now).count();
        let mut sent = 0;
        while sent < due {
            let n = (due - sent).min(BATCH);
            let (took, refused) = batch.send(
                tx.as_fd(),
                pending
                    .iter()
                    .skip(sent)
                    .take(n)
                    .map(|(_, s, len)| &s[..*len]),
            );
            report.send_errors += refused as u64;
            sent += took.max(1);
        }
        for (at, slot, _) in pending.drain(..due) {
            let late = now.saturating_sub(at);
            report.late_ns_sum += late;
            report.late_ns_max = report.late_ns_max.max(late);
            report.late_over_100us += u64::from(late > 100_000);
            free.push(slot);
        }
        let wait = match pending.front() {
            Some(&(at, _, _)) => at.saturating_sub(now_ns()),
            None => IDLE_WAIT.as_nanos() as u64,
        };
        if wait > 0 {
            // Sleep until SPIN before the due time; within SPIN, look without blocking.
            let sleep = wait.saturating_sub(SPIN.as_nanos() as u64);
            if !sys::wait_readable(rx.as_fd(), sleep)? {
                if sleep == 0 {
                    std::thread::yield_now();
                }
                continue;
            }
        }
        // Read what has arrived, offered to the link at the kernel's arrival time (not the
        // time of this read, which may come late, in bursts).
        while rx_slots.len() < BATCH {
            rx_slots.push(free.pop().unwrap_or_else(|| Box::new([0; SLOT])));
        }
        let got = batch.recv(rx.as_fd(), &mut rx_slots, &mut rx_out)?;
        let now_mono = now_ns();
        let mono_minus_unix = now_mono.wrapping_sub(unix_ns());
        for (slot, &(n, stamp)) in rx_slots.drain(..got).zip(&rx_out[..got]) {
            if n > SLOT {
                report.oversize += 1;
                free.push(slot);
                continue;
            }
            if !is_ip(&slot[..n]) {
                report.non_ip += 1;
                let (_, refused) = batch.send(tx.as_fd(), std::iter::once(&slot[..n]));
                report.send_errors += refused as u64;
                free.push(slot);
                continue;
            }
            let arrival = if stamp == 0 {
                now_mono
            } else {
                stamp.wrapping_add(mono_minus_unix).min(now_mono)
            };
            // The model wants non-decreasing times.
            let at = arrival.max(last_offer);
            last_offer = at;
            let ip_len = (n - ETH_HLEN) as u64;
            let fate = link.offer_kind(at, ip_len, traffic(&slot[ETH_HLEN..n]));
            if let Some(b) = log.bin(at) {
                b.packets_in += 1;
                b.bytes_in += ip_len;
                match fate {
                    Fate::Lost => b.dropped_loss += 1,
                    Fate::QueueFull => b.dropped_queue += 1,
                    Fate::Deliver { waited_ns, .. } => {
                        b.max_queue_delay_ns = b.max_queue_delay_ns.max(waited_ns);
                    }
                }
            }
            match fate {
                Fate::Deliver { at_ns, .. } => {
                    report.delivered_bytes += ip_len;
                    if let Some(b) = log.bin(at_ns) {
                        b.delivered += 1;
                        b.delivered_bytes += ip_len;
                    }
                    pending.push_back((at_ns, slot, n));
                }
                Fate::Lost | Fate::QueueFull => free.push(slot),
            }
        }
    }
    report.link = link.counters();
    report.emulator_drops = sys::packet_drops(rx.as_fd());
    Ok((report, log.bins))
}
