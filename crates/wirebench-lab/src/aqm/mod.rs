//! Queue disciplines for the link's queue, as pure state machines in virtual time: drop-tail
//! and drop-head FIFOs (Mahimahi's `droptail` and `drophead`), CoDel (RFC 8289), FQ-CoDel
//! (RFC 8290) and PIE (RFC 8033).
//!
//! The link offers each packet to [`Aqm::enqueue`] and its serializer takes the next one with
//! [`Aqm::dequeue`], both at a `now_ns` the caller passes in. Packets are small copies
//! ([`QueuedPacket`]); the caller keeps the bytes under the packet's `id`. Nothing here
//! allocates once the queue has grown to the most it has held, so it runs on the emulator's
//! data path.
//!
//! Configurations are written in tc's own syntax (`fq_codel target 5ms interval 100ms ecn`):
//! [`AqmConfig::parse`] reads it and `Display` writes it back with every parameter spelled out.
//!
//! ```
//! use wirebench_lab::aqm::{Aqm, AqmConfig, QueuedPacket};
//!
//! let cfg = AqmConfig::parse("fq_codel target 5ms ecn").unwrap();
//! // The link's queue: 1000 packets, no byte limit.
//! let mut q = Aqm::new(&cfg, 1000, 0, 1);
//! let p = QueuedPacket { id: 7, bytes: 1500, flow: 0x9e37, ect: true, enqueued_ns: 0 };
//! let mut dropped = Vec::new();
//! q.enqueue(1_000, p, &mut |p, cause| dropped.push((p.id, cause)));
//! // When the serializer is free: the next packet, and whether to set CE on it.
//! let d = q.dequeue(2_000, &mut |p, cause| dropped.push((p.id, cause))).unwrap();
//! assert_eq!((d.packet.id, d.mark_ce, 2_000 - d.packet.enqueued_ns), (7, false, 1_000));
//! assert!(dropped.is_empty() && q.is_empty());
//! ```

mod codel;
mod config;
mod fifo;
mod fq_codel;
mod pie;

use serde::{Deserialize, Serialize};

pub use config::{
    AqmConfig, AqmError, AqmKind, DROP_BATCH, FLOWS, MAX_QUEUE_BYTES, MAX_QUEUE_PACKETS,
    MAX_TIME_NS, QUANTUM, TUPDATE_NS,
};

/// A packet as a queue sees it (copied in and out; the caller keeps the bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedPacket {
    /// The caller's handle for the packet's bytes.
    pub id: u32,
    /// Bytes on the wire: what byte limits, byte-mode PIE and fq_codel's quantum count.
    pub bytes: u32,
    /// Hash of the packet's flow (addresses, protocol, ports), for fq_codel's flow queues.
    pub flow: u32,
    /// ECN-capable transport (ECT(0) or ECT(1), or already CE): may be marked instead of
    /// dropped.
    pub ect: bool,
    /// When it entered the queue, ns; set by `enqueue`.
    pub enqueued_ns: u64,
}

/// Why a queue dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// The queue was full (its packet or byte limit). Never a mark, ECN or not.
    Overflow,
    /// The AQM decided to drop it (CoDel's dequeue drops, PIE's early drops).
    Aqm,
}

/// The packet the serializer takes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dequeued {
    /// The packet.
    pub packet: QueuedPacket,
    /// Set ECN CE on it: the AQM would have dropped it, and it is ECN-capable.
    pub mark_ce: bool,
}

/// What a queue did, for the link log and the results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AqmCounters {
    /// Packets taken into the queue (marked ones too; not those dropped on arrival).
    pub enqueued: u64,
    /// Packets handed to the serializer.
    pub dequeued: u64,
    /// Packets dropped because the queue was full.
    pub dropped_overflow: u64,
    /// Packets the AQM dropped (CoDel's dequeue drops, PIE's early drops).
    pub dropped_aqm: u64,
    /// Packets marked CE instead of dropped.
    pub marked: u64,
    /// Most packets held at once.
    pub packets_max: u64,
    /// Most bytes held at once.
    pub bytes_max: u64,
    /// FQ-CoDel: times a flow queue joined the new flows (RFC 8290 §4.1).
    pub new_flows: u64,
    /// FQ-CoDel: most flow queues active (in the new or old list) at once.
    pub flows_max: u32,
    /// PIE: the drop probability now, 0 to 1.
    pub drop_probability: f64,
    /// PIE: the highest drop probability so far.
    pub drop_probability_max: f64,
}

impl AqmCounters {
    /// Notes a packet taken in, with the queue's size after it.
    fn took(&mut self, packets: usize, bytes: u64) {
        self.enqueued += 1;
        self.packets_max = self.packets_max.max(packets as u64);
        self.bytes_max = self.bytes_max.max(bytes);
    }
}

/// A queue's limits; 0 is no limit by that measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    packets: u32,
    bytes: u64,
}

impl Limits {
    /// Whether `packets` packets of `bytes` bytes in all are over the limits.
    fn exceeded(&self, packets: usize, bytes: u64) -> bool {
        (self.packets > 0 && packets > self.packets as usize)
            || (self.bytes > 0 && bytes > self.bytes)
    }
}

/// A splitmix64 stream, for PIE's random drops: seeded, so a run repeats.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        crate::splitmix::uniform(&mut self.0)
    }
}

#[derive(Debug, Clone)]
enum Inner {
    Fifo(fifo::Fifo),
    Codel(codel::Codel),
    FqCodel(fq_codel::FqCodel),
    Pie(pie::Pie),
}

/// A queue discipline with its packets.
#[derive(Debug, Clone)]
pub struct Aqm {
    inner: Inner,
}

impl Aqm {
    /// `limit_packets`/`limit_bytes`: the link's queue (0 = no limit by that measure), used
    /// unless the config gives its own `limit` or `limit_bytes`. `seed` seeds PIE's drops.
    pub fn new(cfg: &AqmConfig, limit_packets: u32, limit_bytes: u64, seed: u64) -> Self {
        let limits = Limits {
            packets: cfg.limit.unwrap_or(limit_packets),
            bytes: cfg.limit_bytes.unwrap_or(limit_bytes),
        };
        let inner = match cfg.kind {
            AqmKind::DropTail => Inner::Fifo(fifo::Fifo::new(limits, false)),
            AqmKind::DropHead => Inner::Fifo(fifo::Fifo::new(limits, true)),
            AqmKind::Codel => Inner::Codel(codel::Codel::new(cfg, limits)),
            AqmKind::FqCodel => Inner::FqCodel(fq_codel::FqCodel::new(cfg, limits)),
            AqmKind::Pie => Inner::Pie(pie::Pie::new(cfg, limits, seed)),
        };
        Self { inner }
    }

    /// Takes a packet at `now_ns` (non-decreasing across calls of both methods). Every packet
    /// dropped as a result — this one (tail drop, PIE's enqueue drop), the head (drophead), a
    /// packet of the fattest flow (fq_codel's overflow) — is passed to `drop`.
    pub fn enqueue(
        &mut self,
        now_ns: u64,
        mut p: QueuedPacket,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) {
        p.enqueued_ns = now_ns;
        match &mut self.inner {
            Inner::Fifo(q) => q.enqueue(p, drop),
            Inner::Codel(q) => q.enqueue(p, drop),
            Inner::FqCodel(q) => q.enqueue(p, drop),
            Inner::Pie(q) => q.enqueue(now_ns, p, drop),
        }
    }

    /// The packet the serializer takes at `now_ns`, and whether to set CE on it; packets the
    /// AQM drops on the way (CoDel's dequeue drops) are passed to `drop`. None: empty.
    pub fn dequeue(
        &mut self,
        now_ns: u64,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) -> Option<Dequeued> {
        match &mut self.inner {
            Inner::Fifo(q) => q.dequeue(),
            Inner::Codel(q) => q.dequeue(now_ns, drop),
            Inner::FqCodel(q) => q.dequeue(now_ns, drop),
            Inner::Pie(q) => q.dequeue(now_ns),
        }
    }

    /// Whether it holds no packet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Fifo(q) => q.packets.len(),
            Inner::Codel(q) => q.packets.len(),
            Inner::FqCodel(q) => q.len(),
            Inner::Pie(q) => q.packets.len(),
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        match &self.inner {
            Inner::Fifo(q) => q.packets.bytes(),
            Inner::Codel(q) => q.packets.bytes(),
            Inner::FqCodel(q) => q.bytes(),
            Inner::Pie(q) => q.packets.bytes(),
        }
    }

    /// Packets it can hold without allocating: grows to the most held, then stays.
    pub fn capacity(&self) -> usize {
        match &self.inner {
            Inner::Fifo(q) => q.packets.capacity(),
            Inner::Codel(q) => q.packets.capacity(),
            Inner::FqCodel(q) => q.capacity(),
            Inner::Pie(q) => q.packets.capacity(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> AqmCounters {
        match &self.inner {
            Inner::Fifo(q) => q.counters,
            Inner::Codel(q) => q.counters,
            Inner::FqCodel(q) => q.counters,
            Inner::Pie(q) => q.counters(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(id: u32, flow: u32) -> QueuedPacket {
        QueuedPacket {
            id,
            bytes: 1000 + id % 500,
            flow,
            ect: id.is_multiple_of(3),
            enqueued_ns: 0,
        }
    }

    /// Bursts of 64 packets from 8 flows every 100 µs, 40 packets sent in between: a queue
    /// that fills, overflows and drains. Returns packets offered, sent and dropped.
    fn load(q: &mut Aqm, start_ns: u64) -> (u64, u64, u64) {
        let (mut offered, mut sent, mut dropped) = (0, 0, 0);
        let mut count = |_: QueuedPacket, _: DropCause| dropped += 1;
        for step in 0..20_000u64 {
            let now = start_ns + step * 100_000;
            if step % 1000 < 700 {
                for i in 0..64u32 {
                    q.enqueue(now, pkt(step as u32 * 64 + i, i % 8), &mut count);
                    offered += 1;
                }
            }
            for _ in 0..40 {
                sent += u64::from(q.dequeue(now, &mut count).is_some());
            }
        }
        while q.dequeue(start_ns + 3_000_000_000, &mut count).is_some() {
            sent += 1;
        }
        (offered, sent, dropped)
    }

    #[test]
    fn nothing_grows_after_the_first_run_of_a_load() {
        for text in [
            "droptail",
            "drophead",
            "codel ecn",
            "fq_codel ecn",
            "pie ecn",
        ] {
            let mut q = Aqm::new(&AqmConfig::parse(text).unwrap(), 5000, 0, 7);
            let (offered, sent, dropped) = load(&mut q, 0);
            let cap = q.capacity();
            assert!(q.is_empty() && q.bytes() == 0, "{text}");
            assert!(cap >= 1000, "{text}: {cap}");
            let second = load(&mut q, 10_000_000_000);
            assert_eq!(q.capacity(), cap, "{text} grew on the second run");
            // Every packet offered was sent or passed to `drop`, once, and counted.
            assert_eq!(offered, sent + dropped, "{text}");
            assert_eq!(second.0, second.1 + second.2, "{text}");
            let c = q.counters();
            assert_eq!(c.dequeued, sent + second.1, "{text}");
            assert_eq!(
                c.dropped_overflow + c.dropped_aqm,
                dropped + second.2,
                "{text}"
            );
            assert!(sent > 100_000 && dropped > 1000, "{text}: {sent} {dropped}");
        }
    }
}
