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

use crate::link::{Fate, Link, LinkConfig, LinkCounters};
use crate::sys;

/// Largest frame a slot holds: a 1500-byte MTU with its Ethernet and VLAN headers, rounded up.
const SLOT: usize = 2048;
/// Most frames read in one go before due frames are sent.
const RX_BURST: usize = 64;
/// Longest wait with nothing to deliver, so that a stop is seen.
const IDLE_WAIT: Duration = Duration::from_millis(20);
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
}

/// A running direction; [`Direction::stop`] ends it and gives its report.
pub struct Direction {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<io::Result<DirectionReport>>>,
}

impl Direction {
    /// Starts forwarding frames that arrive on `rx` out of `tx` through a link of `cfg`.
    pub fn start(
        name: String,
        rx: Arc<OwnedFd>,
        tx: Arc<OwnedFd>,
        cfg: LinkConfig,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || forward(&rx, &tx, cfg, &flag))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the direction and returns what it did.
    pub fn stop(mut self) -> io::Result<DirectionReport> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("link thread panicked"))),
            None => Ok(DirectionReport::default()),
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

/// Fixed-size frame slots, reused.
struct Pool {
    slots: Vec<[u8; SLOT]>,
    free: Vec<usize>,
}

impl Pool {
    fn take(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.slots.push([0; SLOT]);
            self.slots.len() - 1
        })
    }
}

fn is_ip(frame: &[u8]) -> bool {
    frame.len() > ETH_HLEN && matches!([frame[12], frame[13]], [0x08, 0x00] | [0x86, 0xdd])
}

fn forward(
    rx: &OwnedFd,
    tx: &OwnedFd,
    cfg: LinkConfig,
    stop: &AtomicBool,
) -> io::Result<DirectionReport> {
    sys::fine_timer_slack();
    let base = Instant::now();
    let now_ns = || base.elapsed().as_nanos() as u64;
    let mut link = Link::new(cfg);
    let mut pool = Pool {
        slots: Vec::new(),
        free: Vec::new(),
    };
    // (delivery time, slot, length), in delivery order: the model never reorders.
    let mut pending: VecDeque<(u64, usize, usize)> = VecDeque::new();
    let mut report = DirectionReport::default();
    // Drops counted before the loop began are not ours.
    let _ = sys::packet_drops(rx.as_fd());
    while !stop.load(Ordering::Relaxed) {
        // Send what is due.
        let now = now_ns();
        while let Some(&(at, slot, len)) = pending.front() {
            if at > now {
                break;
            }
            pending.pop_front();
            if sys::send_frame(tx.as_fd(), &pool.slots[slot][..len]).is_err() {
                report.send_errors += 1;
            }
            pool.free.push(slot);
        }
        let wait = match pending.front() {
            Some(&(at, _, _)) => at.saturating_sub(now),
            None => IDLE_WAIT.as_nanos() as u64,
        };
        if wait > 0 && !sys::wait_readable(rx.as_fd(), wait)? {
            continue;
        }
        // Read what has arrived.
        for _ in 0..RX_BURST {
            let slot = pool.take();
            let Some(n) = sys::recv_frame(rx.as_fd(), &mut pool.slots[slot][..])? else {
                pool.free.push(slot);
                break;
            };
            if n > SLOT {
                report.oversize += 1;
                pool.free.push(slot);
                continue;
            }
            let frame = &pool.slots[slot][..n];
            if !is_ip(frame) {
                report.non_ip += 1;
                if sys::send_frame(tx.as_fd(), frame).is_err() {
                    report.send_errors += 1;
                }
                pool.free.push(slot);
                continue;
            }
            let ip_len = (n - ETH_HLEN) as u64;
            match link.offer(now_ns(), ip_len) {
                Fate::Deliver { at_ns } => {
                    report.delivered_bytes += ip_len;
                    pending.push_back((at_ns, slot, n));
                }
                Fate::Lost | Fate::QueueFull => pool.free.push(slot),
            }
        }
    }
    report.link = link.counters();
    report.emulator_drops = sys::packet_drops(rx.as_fd());
    Ok(report)
}
