//! First in, first out: the packet store CoDel and PIE keep, and the drop-tail and drop-head
//! queues (Mahimahi's `droptail` and `drophead`, tc's `pfifo` and `pfifo_head_drop`).

use std::collections::VecDeque;

use super::{AqmCounters, Dequeued, DropCause, Limits, QueuedPacket};

/// Packets in arrival order with their total bytes. The ring grows to the most packets held
/// and keeps that room, so a steady load allocates nothing.
#[derive(Debug, Clone, Default)]
pub(super) struct PacketFifo {
    ring: VecDeque<QueuedPacket>,
    bytes: u64,
    /// The largest packet seen, bytes: CoDel's `maxpacket` and PIE's mean packet size
    /// stand-in (RFC 8289 §4.2, RFC 8033 §4.1).
    max_packet: u32,
}

impl PacketFifo {
    pub(super) fn push(&mut self, p: QueuedPacket) {
        self.bytes += u64::from(p.bytes);
        self.max_packet = self.max_packet.max(p.bytes);
        self.ring.push_back(p);
    }

    pub(super) fn pop(&mut self) -> Option<QueuedPacket> {
        let p = self.ring.pop_front()?;
        self.bytes -= u64::from(p.bytes);
        Some(p)
    }

    pub(super) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn max_packet(&self) -> u32 {
        self.max_packet
    }

    pub(super) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Whether `p` would take the queue past `limits`.
    pub(super) fn overflows(&self, limits: Limits, p: &QueuedPacket) -> bool {
        limits.exceeded(self.len() + 1, self.bytes + u64::from(p.bytes))
    }
}

/// A drop-tail or drop-head FIFO.
#[derive(Debug, Clone)]
pub(super) struct Fifo {
    pub(super) packets: PacketFifo,
    limits: Limits,
    /// Drop the oldest packets to make room, rather than the arriving one.
    head_drop: bool,
    pub(super) counters: AqmCounters,
}

impl Fifo {
    pub(super) fn new(limits: Limits, head_drop: bool) -> Self {
        Self {
            packets: PacketFifo::default(),
            limits,
            head_drop,
            counters: AqmCounters::default(),
        }
    }

    pub(super) fn enqueue(
        &mut self,
        p: QueuedPacket,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) {
        // A packet larger than the byte limit alone never fits: drop it, not the queue.
        let alone_too_big = self.limits.exceeded(1, u64::from(p.bytes));
        if self.head_drop && !alone_too_big {
            while self.packets.overflows(self.limits, &p) {
                let Some(old) = self.packets.pop() else { break };
                self.counters.dropped_overflow += 1;
                drop(old, DropCause::Overflow);
            }
        }
        if self.packets.overflows(self.limits, &p) {
            self.counters.dropped_overflow += 1;
            drop(p, DropCause::Overflow);
            return;
        }
        self.packets.push(p);
        self.counters.took(self.packets.len(), self.packets.bytes());
    }

    pub(super) fn dequeue(&mut self) -> Option<Dequeued> {
        let packet = self.packets.pop()?;
        self.counters.dequeued += 1;
        Some(Dequeued {
            packet,
            mark_ce: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Aqm, AqmConfig, AqmKind};
    use super::*;

    fn pkt(id: u32, bytes: u32) -> QueuedPacket {
        QueuedPacket {
            id,
            bytes,
            flow: 0,
            ect: false,
            enqueued_ns: 0,
        }
    }

    /// Offers packets 0..n of `bytes` each; returns the ids dropped.
    fn offer(q: &mut Aqm, n: u32, bytes: u32) -> Vec<u32> {
        let mut dropped = Vec::new();
        for id in 0..n {
            q.enqueue(u64::from(id), pkt(id, bytes), &mut |p, cause| {
                assert_eq!(cause, DropCause::Overflow);
                dropped.push(p.id);
            });
        }
        dropped
    }

    fn ids(q: &mut Aqm) -> Vec<u32> {
        std::iter::from_fn(|| q.dequeue(1_000, &mut |_, _| panic!("no AQM drops")))
            .map(|d| d.packet.id)
            .collect()
    }

    #[test]
    fn droptail_drops_the_newest_by_packets() {
        let mut q = Aqm::new(&AqmConfig::new(AqmKind::DropTail), 3, 0, 1);
        assert_eq!(offer(&mut q, 5, 100), [3, 4]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.bytes(), 300);
        assert_eq!(ids(&mut q), [0, 1, 2]);
        let c = q.counters();
        assert_eq!((c.enqueued, c.dequeued, c.dropped_overflow), (3, 3, 2));
        assert_eq!(c.packets_max, 3);
    }

    #[test]
    fn drophead_drops_the_oldest_by_packets() {
        let mut q = Aqm::new(&AqmConfig::new(AqmKind::DropHead), 3, 0, 1);
        assert_eq!(offer(&mut q, 5, 100), [0, 1]);
        assert_eq!(ids(&mut q), [2, 3, 4]);
    }

    #[test]
    fn byte_limits_count_bytes() {
        // 250 bytes hold two packets of 100: the third overflows.
        let mut q = Aqm::new(&AqmConfig::new(AqmKind::DropTail), 0, 250, 1);
        assert_eq!(offer(&mut q, 4, 100), [2, 3]);
        let mut q = Aqm::new(&AqmConfig::new(AqmKind::DropHead), 0, 250, 1);
        assert_eq!(offer(&mut q, 4, 100), [0, 1]);
        assert_eq!(ids(&mut q), [2, 3]);
        // A packet larger than the whole limit is dropped itself, the queue kept.
        let mut q = Aqm::new(&AqmConfig::new(AqmKind::DropHead), 0, 250, 1);
        offer(&mut q, 1, 100);
        let mut dropped = Vec::new();
        q.enqueue(9, pkt(7, 300), &mut |p, _| dropped.push(p.id));
        assert_eq!((dropped, q.len()), (vec![7], 1));
    }

    #[test]
    fn the_configs_own_limit_wins_over_the_links() {
        let cfg = AqmConfig::parse("pfifo limit 2").unwrap();
        let mut q = Aqm::new(&cfg, 1000, 0, 1);
        assert_eq!(offer(&mut q, 3, 100), [2]);
        let cfg = AqmConfig::parse("bfifo limit 150").unwrap();
        let mut q = Aqm::new(&cfg, 1000, 0, 1);
        assert_eq!(offer(&mut q, 3, 100), [1, 2]);
    }

    #[test]
    fn no_limit_takes_everything() {
        let mut q = Aqm::new(&AqmConfig::new(AqmKind::DropTail), 0, 0, 1);
        assert!(offer(&mut q, 5000, 1500).is_empty());
        assert_eq!(q.len(), 5000);
    }
}
