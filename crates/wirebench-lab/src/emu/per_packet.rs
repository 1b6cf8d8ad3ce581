//! The emulator's books (its report, log and sojourn times), and its path for links that
//! treat each wire packet apart: netem's copies and bit flips at arrival, a queue that holds
//! frames under a handle (an AQM), CE marks as they leave it.

use wirebench_stats::TimeHistogram;

use super::{DirectionReport, Forward, Frame, Log, SLOT};
use crate::gso::ETH_HLEN;
use crate::headers;
use crate::link::{Dropped, Event, Packet, Traffic};
use crate::netem::corrupt_payload;

/// What a direction writes down about the packets it carries: its report, its log and
/// the sojourn times.
pub(super) struct Books {
    pub(super) log: Log,
    pub(super) report: DirectionReport,
    pub(super) sojourn: TimeHistogram,
}

impl Books {
    /// A packet of `ip_len` bytes arrived at `at`.
    pub(super) fn arrived(&mut self, at: u64, ip_len: u64) {
        if let Some(b) = self.log.bin(at) {
            b.packets_in += 1;
            b.bytes_in += ip_len;
        }
    }

    /// A packet was dropped at `at`.
    pub(super) fn dropped(&mut self, at: u64, why: Dropped) {
        if let Some(b) = self.log.bin(at) {
            match why {
                Dropped::Loss => b.dropped_loss += 1,
                Dropped::Queue => b.dropped_queue += 1,
                Dropped::Aqm => b.dropped_aqm += 1,
            }
        }
    }

    /// A packet of `ip_len` bytes offered at `now` waited `waited_ns` in the queue and left
    /// the serializer at `left_ns` (its delivery, in the log, as `mm-link` counts it: before
    /// the delay, so that no interval delivers more than the link's capacity in it), marked
    /// CE or not.
    pub(super) fn delivered(
        &mut self,
        now: u64,
        left_ns: u64,
        waited_ns: u64,
        ip_len: u64,
        marked: bool,
    ) {
        self.report.delivered_bytes += ip_len;
        self.sojourn
            .record(i64::try_from(waited_ns).unwrap_or(i64::MAX));
        if let Some(b) = self.log.bin(now) {
            b.max_queue_delay_ns = b.max_queue_delay_ns.max(waited_ns);
            b.marked += u64::from(marked);
        }
        if let Some(b) = self.log.bin(left_ns) {
            b.delivered += 1;
            b.delivered_bytes += ip_len;
        }
    }
}

impl Forward<'_> {
    /// Takes one wire packet on a link that treats each apart: a copy of it too if netem
    /// duplicates it, each copy perhaps corrupted, then offered to the link.
    pub(super) fn take_packet(&mut self, mut frame: Frame, at: u64, ip_len: u64, kind: Traffic) {
        let hdr = self.hdr();
        let ip = hdr + ETH_HLEN..frame.len.min(SLOT);
        if kind == Traffic::Udp {
            frame.udp_index = self.udp_next;
            self.udp_next += 1;
        }
        let copy = self
            .link
            .duplicate(kind)
            .then(|| frame.copy(&mut self.pool));
        for mut f in std::iter::once(frame).chain(copy) {
            if let Some(r) = self.link.corrupt(kind) {
                f.corrupt = corrupt_payload(&mut f.slot[ip.clone()], r).is_some();
            }
            self.offer_packet(f, at, ip_len, kind);
        }
    }

    /// Offers one wire packet to a link that treats each apart.
    fn offer_packet(&mut self, frame: Frame, at: u64, ip_len: u64, kind: Traffic) {
        self.books.arrived(at, ip_len);
        let hdr = self.hdr();
        let ip = &frame.slot[hdr + ETH_HLEN..frame.len.min(SLOT)];
        let packet = Packet {
            id: 0,
            len: ip_len,
            kind,
            flow: headers::flow_hash(ip),
            ect: headers::ecn(ip) != 0,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.held[id as usize] = Some(frame);
                id
            }
            None => {
                self.held.push(Some(frame));
                (self.held.len() - 1) as u32
            }
        };
        self.link
            .enqueue(at, Packet { id, ..packet }, &mut self.events);
        self.settle(at);
    }

    /// Asks the link for the packets its serializer has reached by now.
    pub(super) fn poll_link(&mut self) {
        if self.link.next_dequeue_ns().is_some() {
            let now = self.now_ns();
            self.link.poll(now, &mut self.events);
            self.settle(now);
        }
    }

    /// Moves the frames of the link's latest events, at `now`, to the delay line (marked CE
    /// if the AQM said so) or back to the pool.
    fn settle(&mut self, now: u64) {
        let hdr = self.hdr();
        for event in self.events.drain(..) {
            let id = match event {
                Event::Deliver { id, .. } | Event::Dropped { id, .. } => id,
            };
            let Some(mut frame) = self.held.get_mut(id as usize).and_then(Option::take) else {
                continue;
            };
            self.free.push(id);
            match event {
                Event::Deliver {
                    arrived_ns,
                    at_ns,
                    left_ns,
                    waited_ns,
                    mark_ce,
                    reordered,
                    ..
                } => {
                    let ip_len = (frame.len - hdr - ETH_HLEN) as u64;
                    let marked = mark_ce && headers::set_ce(&mut frame.slot[hdr + ETH_HLEN..]);
                    self.books
                        .delivered(arrived_ns, left_ns, waited_ns, ip_len, marked);
                    let line = if reordered {
                        &mut self.ahead
                    } else {
                        &mut self.pending
                    };
                    line.push_back((at_ns, frame));
                }
                Event::Dropped { why, .. } => {
                    self.books.dropped(now, why);
                    self.pool.put(frame);
                }
            }
        }
    }
}
