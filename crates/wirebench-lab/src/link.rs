//! One direction of an emulated link, as a pure, seeded state machine: each packet offered
//! at `now` is lost at random, or dropped by the queue, or given the exact time it leaves
//! the far end. No clock, no socket: the I/O loop around it passes `now` in and holds each
//! packet until its time (DESIGN.md, "The emulated network").
//!
//! ```text
//! offer ─► loss (Bernoulli or Gilbert-Elliott) ─► queue (drop-tail, or an AQM)
//!       ─► serializer (a rate, or a Mahimahi trace's delivery opportunities)
//!       ─► delay (+ jitter, in order; netem's distributions; reordered packets skip it)
//! ```
//!
//! Times are virtual: a packet's departure is computed from the link's own schedule, so a
//! late timer in the I/O loop delays a packet but never changes the modelled rate.
//!
//! With a drop-tail queue a packet's departure is known the moment it is offered (no later
//! arrival changes it), and [`Link::offer_kind`] answers at once. An AQM decides at dequeue
//! time (CoDel drops at the head; fq_codel serves flows in turn), so with one the packet
//! waits in the queue under a handle: [`Link::enqueue`] takes it, and [`Link::poll`] gives
//! each packet's fate as the serializer reaches it ([`Event`]).

use serde::{Deserialize, Serialize};

use crate::aqm::{Aqm, AqmConfig, AqmCounters, AqmKind, DropCause, QueuedPacket};
use crate::netem::{Delay, Netem, NetemConfig, Slot, SlotConfig};
use crate::splitmix::mix as splitmix;
use crate::trace::{Trace, TraceLink};

/// How packets are lost before they reach the queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Loss {
    /// No random loss.
    None,
    /// Each packet independently with probability `p`.
    Bernoulli {
        /// Loss probability, 0 to 1.
        p: f64,
    },
    /// Gilbert-Elliott: a good and a bad state with their own loss probabilities; after each
    /// packet the state changes with probability `p_gb` (good to bad) or `p_bg` (bad to
    /// good). The mean burst (stay in bad) is `1 / p_bg` packets.
    GilbertElliott {
        /// Good → bad, per packet.
        p_gb: f64,
        /// Bad → good, per packet.
        p_bg: f64,
        /// Loss probability in the good state.
        loss_good: f64,
        /// Loss probability in the bad state.
        loss_bad: f64,
    },
}

/// The size of a full packet on an Ethernet path (its MTU).
const FULL_PACKET_BYTES: u64 = 1500;

/// One direction's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// Serialization rate, bits/s; 0: infinitely fast.
    pub rate_bps: u64,
    /// Bytes added to each packet's length on the wire (framing, preamble), for the rate.
    pub overhead_bytes: u32,
    /// Propagation delay, ns.
    pub delay_ns: u64,
    /// Extra delay drawn uniformly from `0..=jitter_ns` per packet, never reordering.
    pub jitter_ns: u64,
    /// Most packets waiting for the serializer; 0: no limit by count.
    pub queue_packets: u32,
    /// Most bytes waiting for the serializer; 0: no limit by size.
    pub queue_bytes: u64,
    /// Random loss.
    pub loss: Loss,
    /// The IP lengths random loss applies to, inclusive (`--loss-sizes`): a packet outside
    /// them is never lost at random, nor draws from the loss's random numbers. None: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_sizes: Option<(u64, u64)>,
    /// Seed of the link's random numbers: the same seed, the same losses and jitter.
    pub seed: u64,
    /// The queue's discipline, its limits `queue_packets` and `queue_bytes` unless it sets
    /// its own; none: drop-tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aqm: Option<AqmConfig>,
    /// netem's delay distributions, reordering, duplication and corruption.
    #[serde(default)]
    pub netem: NetemConfig,
    /// netem's `slot`: packets leave the delay line only in slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<SlotConfig>,
    /// Delivery opportunities of a Mahimahi trace, in place of `rate_bps`. Serialized as its
    /// file, which the reader loads again (`lab up`'s holder): a testbed replays the trace
    /// it was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Trace>,
}

impl LinkConfig {
    /// A link of `rate_bps` and `delay_ns`, and nothing else: no jitter, no limit to its
    /// drop-tail queue, no loss.
    pub fn new(rate_bps: u64, delay_ns: u64) -> Self {
        Self {
            rate_bps,
            overhead_bytes: 0,
            delay_ns,
            jitter_ns: 0,
            queue_packets: 0,
            queue_bytes: 0,
            loss: Loss::None,
            loss_sizes: None,
            seed: 1,
            aqm: None,
            netem: NetemConfig::default(),
            slot: None,
            trace: None,
        }
    }

    /// The longest `bytes` queued at once take to leave this direction and cross it, ns:
    /// serialized in 1500-byte packets at its rate (a trace: in its slowest stretch), then
    /// the delay at its longest (the jitter, and netem's spread four times over).
    pub fn carry_ns(&self, bytes: u64) -> u64 {
        let packets = bytes.div_ceil(FULL_PACKET_BYTES);
        let serialize = match &self.trace {
            Some(trace) => trace.slowest_ns(packets),
            None if self.rate_bps == 0 => 0,
            None => {
                let wire =
                    u128::from(bytes) + u128::from(packets) * u128::from(self.overhead_bytes);
                u64::try_from(wire * 8 * 1_000_000_000 / u128::from(self.rate_bps))
                    .unwrap_or(u64::MAX)
            }
        };
        serialize
            .saturating_add(self.delay_ns)
            .saturating_add(self.jitter_ns)
            .saturating_add(self.netem.jitter_ns.saturating_mul(4))
    }

    /// Whether the queue decides at dequeue time (an AQM, or drop-head), so that packets wait
    /// in it under a handle ([`Link::enqueue`]) rather than learn their fate when offered.
    pub fn queues_packets(&self) -> bool {
        self.aqm
            .as_ref()
            .is_some_and(|a| a.kind != AqmKind::DropTail)
    }

    /// Whether the link treats each wire packet apart in ways a GSO frame cannot carry
    /// whole: an AQM, reordering, duplication or corruption. The lab turns offloads off
    /// for such a link, so that each frame the emulator reads is one wire packet.
    pub fn per_packet(&self) -> bool {
        let n = &self.netem;
        self.queues_packets() || n.reorder > 0.0 || n.duplicate > 0.0 || n.corrupt > 0.0
    }
}

/// What became of an offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Lost at random.
    Lost,
    /// The queue was full.
    QueueFull,
    /// Leaves the far end at this time (ns, on the caller's clock).
    Deliver {
        /// When.
        at_ns: u64,
        /// When its last bit left the serializer (before the delay): when the link log
        /// counts it delivered, as `mm-link` counts its departures.
        left_ns: u64,
        /// How long it waited in the queue for the serializer, ns.
        waited_ns: u64,
        /// Reordered: sent ahead of the packets in the delay line (netem's `reorder`), so
        /// that its time comes before theirs.
        reordered: bool,
    },
}

/// A packet offered to a link whose queue holds it ([`LinkConfig::queues_packets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// The caller's handle for its bytes.
    pub id: u32,
    /// IP length, bytes.
    pub len: u64,
    /// Its kind, for its loss draw.
    pub kind: Traffic,
    /// Hash of its flow (addresses, protocol, ports), for fq_codel.
    pub flow: u32,
    /// ECN-capable transport: an AQM with ECN marks it rather than drop it.
    pub ect: bool,
}

/// Why a packet did not cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Lost at random.
    Loss,
    /// The queue was full.
    Queue,
    /// The AQM dropped it.
    Aqm,
}

/// What became of a packet the queue held: [`Link::enqueue`] and [`Link::poll`] give these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// It leaves the far end at `at_ns`.
    Deliver {
        /// Its handle.
        id: u32,
        /// When it was offered.
        arrived_ns: u64,
        /// When it leaves the far end.
        at_ns: u64,
        /// When its last bit left the serializer (before the delay).
        left_ns: u64,
        /// How long it waited in the queue, ns (its sojourn time).
        waited_ns: u64,
        /// The AQM marked it Congestion Experienced (it was ECN-capable).
        mark_ce: bool,
        /// Sent ahead of the delay line (netem's `reorder`).
        reordered: bool,
    },
    /// It was dropped.
    Dropped {
        /// Its handle.
        id: u32,
        /// Why.
        why: Dropped,
    },
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Packets offered.
    pub packets_in: u64,
    /// Lost at random.
    pub dropped_loss: u64,
    /// Dropped by a full queue.
    pub dropped_queue: u64,
    /// Given a delivery time.
    pub delivered: u64,
    /// Sum of the time delivered packets waited for the serializer, ns.
    pub queue_delay_ns: u64,
    /// Longest such wait, ns.
    pub max_queue_delay_ns: u64,
    /// Dropped by the AQM's decision (not a full queue).
    #[serde(default)]
    pub dropped_aqm: u64,
    /// Marked Congestion Experienced by the AQM instead of dropped.
    #[serde(default)]
    pub marked: u64,
    /// Sent ahead of the packets in the delay line (netem's `reorder`).
    #[serde(default)]
    pub reordered: u64,
    /// Copies made (netem's `duplicate`): each is offered as a packet of its own.
    #[serde(default)]
    pub duplicated: u64,
    /// Packets given a flipped bit (netem's `corrupt`), whatever became of them after.
    #[serde(default)]
    pub corrupted: u64,
    /// Time a link of a fixed rate had nothing to send between its queue's first overflow
    /// and its last, ns: its queue stood empty and its serializer was free. Under a load
    /// above the link's rate, the gaps in that load the queue did not cover, so the link
    /// delivered its rate for all of the load's time but this. 0 when it did throughout,
    /// and when the queue overflowed once or never (a load below the rate, an AQM that
    /// keeps its queue short); always 0 on a trace-driven link, whose outages are not the
    /// senders' gaps. A pause between two loads that both overflow the queue counts.
    #[serde(default)]
    pub idle_under_load_ns: u64,
}

/// The link's idle time under a load that overflows its queue ([`LinkCounters::idle_under_load_ns`]).
#[derive(Debug, Clone, Copy, Default)]
struct IdleUnderLoad {
    /// The link has a fixed rate: its idle time is counted.
    counts: bool,
    /// Idle time since the last overflow; `None` before the first.
    since_overflow: Option<u64>,
    /// Idle time between overflows.
    counted: u64,
}

impl IdleUnderLoad {
    /// A packet reaches an empty queue at `now_ns`, the serializer free from `free_ns`.
    fn arrival(&mut self, free_ns: u64, now_ns: u64) {
        if !self.counts {
            return;
        }
        if let Some(idle) = self.since_overflow.as_mut() {
            *idle += now_ns.saturating_sub(free_ns);
        }
    }

    /// The queue overflowed: the idle time since the last overflow was under load.
    fn overflow(&mut self) {
        self.counted += self.since_overflow.replace(0).unwrap_or(0);
    }
}

/// The kind of a packet, for its loss draw. Each kind draws its losses from a stream of its
/// own, so a seed fixes which datagrams of a UDP test are lost however many packets of the
/// test's TCP control connection (whose count depends on timing) cross the link too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// UDP datagrams.
    Udp,
    /// TCP segments.
    Tcp,
    /// Anything else, and callers that do not tell (the stream that also draws the jitter).
    Other,
}

impl Traffic {
    fn index(self) -> usize {
        match self {
            Self::Other => 0,
            Self::Udp => 1,
            Self::Tcp => 2,
        }
    }
}

/// The serializer: when each packet's last byte leaves.
#[derive(Debug, Clone)]
enum Serializer {
    /// A fixed rate (`rate_bps`; 0: infinitely fast).
    Rate,
    /// A trace's delivery opportunities.
    Trace(TraceLink),
}

/// One direction of a link.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    /// Random streams: [`Traffic::Other`]'s (loss and jitter), then UDP's and TCP's losses.
    rng: [u64; 3],
    /// Gilbert-Elliott's state, per kind of traffic.
    bad: [bool; 3],
    serializer: Serializer,
    /// When the serializer is free again (with a trace: when the last packet left).
    busy_until_ns: u64,
    /// Drop-tail: serialization start time and wire bytes of each packet still waiting in
    /// the queue.
    queue: std::collections::VecDeque<(u64, u64)>,
    queued_bytes: u64,
    /// An AQM (or drop-head) that holds the packets themselves; see [`Link::enqueue`].
    aqm: Option<Aqm>,
    /// netem's decisions, when any of its options is on: one per kind of traffic, so that a
    /// seed fixes which datagrams of a UDP test are duplicated, corrupted or reordered
    /// however many TCP packets (whose count depends on timing) cross between them.
    netem: Option<Box<[Netem; 3]>>,
    /// The kind of each packet the queue holds, by handle (grows to the most held).
    kinds: Vec<Traffic>,
    /// netem's slots, when asked for.
    slot: Option<Slot>,
    /// The last delivery time given, so jitter never reorders.
    last_delivery_ns: u64,
    idle: IdleUnderLoad,
    counters: LinkCounters,
}

impl Link {
    /// A link in its idle state.
    pub fn new(cfg: LinkConfig) -> Self {
        // A trace's outages are the link's, not the senders' gaps: not counted as idle.
        let idle = IdleUnderLoad {
            counts: cfg.trace.is_none(),
            ..IdleUnderLoad::default()
        };
        let serializer = match &cfg.trace {
            Some(t) => Serializer::Trace(TraceLink::new(t.clone())),
            None => Serializer::Rate,
        };
        let aqm = cfg.aqm.filter(|_| cfg.queues_packets()).map(|a| {
            Aqm::new(
                &a,
                cfg.queue_packets,
                cfg.queue_bytes,
                splitmix(cfg.seed ^ 0xA9),
            )
        });
        let netem = cfg.netem.is_active().then(|| {
            Box::new(std::array::from_fn(|k| {
                Netem::new(
                    cfg.netem,
                    splitmix(cfg.seed.wrapping_add(3 + 16 * k as u64)),
                )
            }))
        });
        let slot = cfg
            .slot
            .map(|s| Slot::new(s, splitmix(cfg.seed.wrapping_add(4))));
        Self {
            // splitmix64 of the seed: a zero seed still gives a useful stream; the other kinds'
            // streams start from the seed's own splitmix outputs, far from the first.
            rng: [
                cfg.seed ^ 0x9E37_79B9_7F4A_7C15,
                splitmix(cfg.seed.wrapping_add(1)),
                splitmix(cfg.seed.wrapping_add(2)),
            ],
            serializer,
            cfg,
            bad: [false; 3],
            busy_until_ns: 0,
            queue: std::collections::VecDeque::new(),
            queued_bytes: 0,
            aqm,
            netem,
            kinds: Vec::new(),
            slot,
            last_delivery_ns: 0,
            idle,
            counters: LinkCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> LinkCounters {
        let mut c = self.counters;
        c.idle_under_load_ns = self.idle.counted;
        if let Some(a) = &self.aqm {
            let AqmCounters {
                dropped_aqm,
                marked,
                ..
            } = a.counters();
            c.dropped_aqm = dropped_aqm;
            c.marked = marked;
        }
        c
    }

    /// What the link can carry: its trace, its rate, or no limit (for the link log).
    pub fn capacity(&self) -> crate::trace::Capacity {
        crate::trace::Capacity::of(self.cfg.rate_bps, self.cfg.trace.as_ref())
    }

    /// The AQM's own counters, when the link has one.
    pub fn aqm_counters(&self) -> Option<AqmCounters> {
        self.aqm.as_ref().map(Aqm::counters)
    }

    /// A uniform number in [0, 1) from stream `k` (splitmix64).
    fn uniform_in(&mut self, k: usize) -> f64 {
        crate::splitmix::uniform(&mut self.rng[k])
    }

    /// A uniform number in [0, 1) from the shared stream (jitter).
    fn uniform(&mut self) -> f64 {
        self.uniform_in(0)
    }

    fn lost(&mut self, kind: Traffic, len: u64) -> bool {
        if self
            .cfg
            .loss_sizes
            .is_some_and(|(min, max)| !(min..=max).contains(&len))
        {
            return false;
        }
        let k = kind.index();
        match self.cfg.loss {
            Loss::None => false,
            Loss::Bernoulli { p } => self.uniform_in(k) < p,
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let p = if self.bad[k] { loss_bad } else { loss_good };
                let lost = self.uniform_in(k) < p;
                let flip = if self.bad[k] { p_bg } else { p_gb };
                if self.uniform_in(k) < flip {
                    self.bad[k] = !self.bad[k];
                }
                lost
            }
        }
    }

    /// Whether an arriving packet is to be duplicated (netem decides this first, before
    /// loss): the caller then offers a copy as a packet of its own.
    pub fn duplicate(&mut self, kind: Traffic) -> bool {
        let dup = self
            .netem
            .as_mut()
            .is_some_and(|n| n[kind.index()].duplicate());
        self.counters.duplicated += u64::from(dup);
        dup
    }

    /// Whether an arriving packet is to be corrupted; `Some(r)`: a random number that
    /// chooses the bit (see [`crate::netem::corrupt_payload`]).
    pub fn corrupt(&mut self, kind: Traffic) -> Option<u64> {
        let r = self.netem.as_mut().and_then(|n| n[kind.index()].corrupt());
        self.counters.corrupted += u64::from(r.is_some());
        r
    }

    /// Time to put `wire_bytes` on the wire at the link's rate, ns.
    fn serialization_ns(&self, wire_bytes: u64) -> u64 {
        if self.cfg.rate_bps == 0 {
            return 0;
        }
        let ns = u128::from(wire_bytes) * 8 * 1_000_000_000 / u128::from(self.cfg.rate_bps);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// When the serializer may begin a packet that is ready at `ready_ns`.
    fn next_start(&mut self, ready_ns: u64) -> u64 {
        let ready = ready_ns.max(self.busy_until_ns);
        match &mut self.serializer {
            Serializer::Rate => ready,
            Serializer::Trace(t) => t.next_start(ready),
        }
    }

    /// Puts `wire` bytes on the wire from `start` (a time [`Self::next_start`] gave); the
    /// serializer is busy until their last byte has left, which is returned.
    fn serialize(&mut self, start: u64, wire: u64) -> u64 {
        let end = match &mut self.serializer {
            Serializer::Rate => start + self.serialization_ns(wire),
            Serializer::Trace(t) => t.send(start, wire),
        };
        self.busy_until_ns = end;
        end
    }

    /// When a packet of `wire` bytes that left the serializer at `depart` leaves the far
    /// end, and whether it was sent ahead of the delay line.
    fn delivery(&mut self, depart: u64, wire: u64, kind: Traffic) -> (u64, bool) {
        let delay_ns = self.cfg.delay_ns;
        let delay = match self.netem.as_mut().map(|n| n[kind.index()].delay(delay_ns)) {
            Some(Delay::Reordered) => {
                self.counters.reordered += 1;
                return (depart, true);
            }
            Some(Delay::After(d)) => d,
            None => self.cfg.delay_ns,
        };
        let jitter = if self.cfg.jitter_ns > 0 {
            (self.uniform() * (self.cfg.jitter_ns + 1) as f64) as u64
        } else {
            0
        };
        let mut at = (depart + delay + jitter).max(self.last_delivery_ns);
        if let Some(slot) = self.slot.as_mut() {
            at = slot.release(at, wire);
        }
        self.last_delivery_ns = at;
        (at, false)
    }

    /// Counts a packet that waited `waited` ns in the queue and is delivered.
    fn count_delivery(&mut self, waited: u64) {
        self.counters.delivered += 1;
        self.counters.queue_delay_ns += waited;
        self.counters.max_queue_delay_ns = self.counters.max_queue_delay_ns.max(waited);
    }

    /// Offers a packet of `len` bytes at `now_ns` (non-decreasing from call to call), its
    /// loss drawn from the [`Traffic::Other`] stream.
    pub fn offer(&mut self, now_ns: u64, len: u64) -> Fate {
        self.offer_kind(now_ns, len, Traffic::Other)
    }

    /// Offers a packet of `len` bytes of `kind` at `now_ns` (non-decreasing from call to
    /// call) to a drop-tail link (one that does not [queue packets](LinkConfig::queues_packets)).
    pub fn offer_kind(&mut self, now_ns: u64, len: u64, kind: Traffic) -> Fate {
        self.counters.packets_in += 1;
        if self.lost(kind, len) {
            self.counters.dropped_loss += 1;
            return Fate::Lost;
        }
        self.drop_tail(now_ns, len, kind)
    }

    /// A packet of `len` bytes that was not lost meets the drop-tail queue at `now_ns`.
    fn drop_tail(&mut self, now_ns: u64, len: u64, kind: Traffic) -> Fate {
        // Packets whose serialization has begun by now have left the queue.
        while let Some(&(start, bytes)) = self.queue.front() {
            if start > now_ns {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= bytes;
        }
        let wire = len + u64::from(self.cfg.overhead_bytes);
        self.idle.arrival(self.busy_until_ns, now_ns);
        let start = self.next_start(now_ns);
        let waits = start > now_ns;
        if waits {
            let full_count =
                self.cfg.queue_packets > 0 && self.queue.len() >= self.cfg.queue_packets as usize;
            let full_bytes =
                self.cfg.queue_bytes > 0 && self.queued_bytes + wire > self.cfg.queue_bytes;
            if full_count || full_bytes {
                self.idle.overflow();
                self.counters.dropped_queue += 1;
                return Fate::QueueFull;
            }
            self.queue.push_back((start, wire));
            self.queued_bytes += wire;
        }
        let depart = self.serialize(start, wire);
        let (at, reordered) = self.delivery(depart, wire, kind);
        let waited = start - now_ns;
        self.count_delivery(waited);
        Fate::Deliver {
            at_ns: at,
            left_ns: depart,
            waited_ns: waited,
            reordered,
        }
    }

    /// Offers packet `p` at `now_ns` (non-decreasing from call to call) to a link whose queue
    /// holds it ([`LinkConfig::queues_packets`]); what becomes of it, and of any packet whose
    /// time has come, is pushed on `out`: at once if it is lost or dropped, or as soon as it
    /// reaches the serializer (now, or in a later [`Self::poll`]).
    pub fn enqueue(&mut self, now_ns: u64, p: Packet, out: &mut Vec<Event>) {
        self.poll(now_ns, out);
        self.counters.packets_in += 1;
        if self.lost(p.kind, p.len) {
            self.counters.dropped_loss += 1;
            out.push(Event::Dropped {
                id: p.id,
                why: Dropped::Loss,
            });
            return;
        }
        let Some(aqm) = self.aqm.as_mut() else {
            // A drop-tail link: its fate is known now.
            let event = match self.drop_tail(now_ns, p.len, p.kind) {
                Fate::Lost => unreachable!("loss was drawn above"),
                Fate::QueueFull => Event::Dropped {
                    id: p.id,
                    why: Dropped::Queue,
                },
                Fate::Deliver {
                    at_ns,
                    left_ns,
                    waited_ns,
                    reordered,
                } => Event::Deliver {
                    id: p.id,
                    arrived_ns: now_ns,
                    at_ns,
                    left_ns,
                    waited_ns,
                    mark_ce: false,
                    reordered,
                },
            };
            out.push(event);
            return;
        };
        let slot = p.id as usize;
        if self.kinds.len() <= slot {
            self.kinds.resize(slot + 1, Traffic::Other);
        }
        self.kinds[slot] = p.kind;
        // The serializer cannot begin a packet before it arrives.
        if aqm.is_empty() {
            self.idle.arrival(self.busy_until_ns, now_ns);
            self.busy_until_ns = self.busy_until_ns.max(now_ns);
        }
        let wire = p.len + u64::from(self.cfg.overhead_bytes);
        let queued = QueuedPacket {
            id: p.id,
            bytes: u32::try_from(wire).unwrap_or(u32::MAX),
            flow: p.flow,
            ect: p.ect,
            enqueued_ns: now_ns,
        };
        let (counters, idle) = (&mut self.counters, &mut self.idle);
        aqm.enqueue(now_ns, queued, &mut |q, cause| {
            if matches!(cause, DropCause::Overflow) {
                idle.overflow();
            }
            push_drop(out, counters, q, cause);
        });
        self.poll(now_ns, out);
    }

    /// Moves the packets the serializer reaches by `now_ns` out of the queue, and pushes
    /// what becomes of them (and of those the AQM drops on the way) on `out`.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<Event>) {
        loop {
            if self.aqm.as_ref().is_none_or(Aqm::is_empty) {
                return;
            }
            let start = self.next_start(0);
            if start > now_ns {
                return;
            }
            let Some(aqm) = self.aqm.as_mut() else { return };
            let counters = &mut self.counters;
            let got = aqm.dequeue(start, &mut |q, cause| {
                push_drop(out, counters, q, cause);
            });
            let Some(d) = got else { return };
            let wire = u64::from(d.packet.bytes);
            let depart = self.serialize(start, wire);
            let kind = self
                .kinds
                .get(d.packet.id as usize)
                .copied()
                .unwrap_or(Traffic::Other);
            let (at, reordered) = self.delivery(depart, wire, kind);
            let waited = start.saturating_sub(d.packet.enqueued_ns);
            self.count_delivery(waited);
            out.push(Event::Deliver {
                id: d.packet.id,
                arrived_ns: d.packet.enqueued_ns,
                at_ns: at,
                left_ns: depart,
                waited_ns: waited,
                mark_ce: d.mark_ce,
                reordered,
            });
        }
    }

    /// When the serializer next takes a packet from the queue: the time to call
    /// [`Self::poll`] at. None: the queue holds nothing.
    pub fn next_dequeue_ns(&mut self) -> Option<u64> {
        if self.aqm.as_ref().is_none_or(Aqm::is_empty) {
            return None;
        }
        Some(self.next_start(0))
    }
}

/// Counts a packet the queue dropped and pushes its event.
fn push_drop(out: &mut Vec<Event>, counters: &mut LinkCounters, q: QueuedPacket, cause: DropCause) {
    let why = match cause {
        DropCause::Overflow => {
            counters.dropped_queue += 1;
            Dropped::Queue
        }
        // Counted by the AQM itself (see `Link::counters`).
        DropCause::Aqm => Dropped::Aqm,
    };
    out.push(Event::Dropped { id: q.id, why });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LinkConfig {
        LinkConfig {
            rate_bps: 8_000_000, // a byte per microsecond
            overhead_bytes: 0,
            delay_ns: 10_000_000,
            jitter_ns: 0,
            queue_packets: 0,
            queue_bytes: 0,
            loss: Loss::None,
            seed: 1,
            ..LinkConfig::new(0, 0)
        }
    }

    #[test]
    fn a_batch_takes_its_serialization_and_the_longest_delay() {
        // 15 packets at a byte per µs, then 10 ms; overhead counts per packet.
        let c = cfg();
        assert_eq!(c.carry_ns(22_500), 22_500_000 + 10_000_000);
        let c = LinkConfig {
            overhead_bytes: 100,
            jitter_ns: 1_000_000,
            ..cfg()
        };
        assert_eq!(c.carry_ns(22_500), 24_000_000 + 10_000_000 + 1_000_000);
        assert_eq!(
            LinkConfig::new(0, 5_000_000).carry_ns(1 << 30),
            5_000_000,
            "no rate"
        );
        // netem's spread, four times over.
        let mut c = LinkConfig::new(0, 5_000_000);
        c.netem.jitter_ns = 2_000_000;
        assert_eq!(c.carry_ns(1500), 13_000_000);
    }

    fn at(f: Fate) -> u64 {
        match f {
            Fate::Deliver { at_ns, .. } => at_ns,
            other => panic!("not delivered: {other:?}"),
        }
    }

    #[test]
    fn delivery_is_serialization_plus_queueing_plus_delay() {
        let mut l = Link::new(LinkConfig {
            overhead_bytes: 24,
            ..cfg()
        });
        // 1000 bytes + 24 overhead at 8 Mbit/s: 1024 µs on the wire, then 10 ms.
        assert_eq!(at(l.offer(0, 1000)), 1_024_000 + 10_000_000);
        // Offered while the first is on the wire: waits for it (queueing), then its own.
        assert_eq!(at(l.offer(24_000, 1000)), 2_048_000 + 10_000_000);
        // Offered after the link went idle: no queueing.
        assert_eq!(
            at(l.offer(5_000_000, 476)),
            5_000_000 + 500_000 + 10_000_000
        );
        let c = l.counters();
        assert_eq!((c.packets_in, c.delivered), (3, 3));
        assert_eq!(c.queue_delay_ns, 1_024_000 - 24_000);
        assert_eq!(c.max_queue_delay_ns, 1_000_000);
    }

    #[test]
    fn the_queue_drops_exactly_what_a_drop_tail_of_its_size_drops() {
        // 10 back-to-back packets at once into a queue of 3: one goes on the wire, three
        // wait, six are dropped.
        let mut l = Link::new(LinkConfig {
            queue_packets: 3,
            ..cfg()
        });
        let fates: Vec<Fate> = (0..10).map(|_| l.offer(0, 1000)).collect();
        assert_eq!(fates.iter().filter(|f| **f == Fate::QueueFull).count(), 6);
        assert_eq!(l.counters().dropped_queue, 6);
        // Once the first two have left (2 ms), two places are free again.
        assert!(matches!(l.offer(2_000_000, 1000), Fate::Deliver { .. }));
        assert!(matches!(l.offer(2_000_000, 1000), Fate::Deliver { .. }));
        assert_eq!(l.offer(2_000_000, 1000), Fate::QueueFull);
        // By bytes: 2500 bytes of room take two 1000-byte packets, not a third.
        let mut b = Link::new(LinkConfig {
            queue_bytes: 2500,
            ..cfg()
        });
        let ok = (0..5)
            .filter(|_| matches!(b.offer(0, 1000), Fate::Deliver { .. }))
            .count();
        assert_eq!(ok, 3); // one on the wire, two waiting
    }

    #[test]
    fn udp_losses_do_not_shift_with_the_tcp_packets_between_them() {
        let udp_fates = |tcp_every: u64| {
            let mut l = Link::new(LinkConfig {
                loss: Loss::Bernoulli { p: 0.1 },
                seed: 7,
                ..cfg()
            });
            let mut fates = Vec::new();
            for i in 0..2000u64 {
                if tcp_every > 0 && i % tcp_every == 0 {
                    l.offer_kind(i, 60, Traffic::Tcp);
                }
                fates.push(l.offer_kind(i, 200, Traffic::Udp) == Fate::Lost);
            }
            fates
        };
        assert_eq!(udp_fates(0), udp_fates(7));
        assert_eq!(udp_fates(3), udp_fates(50));
    }

    #[test]
    fn loss_by_size_spares_other_packets_and_keeps_its_draws() {
        // Lose at random only packets of 1000 to 1100 bytes: the 60-byte ones between them
        // all pass, and the big ones lose the same as with no small ones at all.
        let fates = |small_every: u64| {
            let mut l = Link::new(LinkConfig {
                loss: Loss::Bernoulli { p: 0.2 },
                loss_sizes: Some((1000, 1100)),
                seed: 3,
                ..cfg()
            });
            let mut big = Vec::new();
            for i in 0..2000u64 {
                if small_every > 0 && i % small_every == 0 {
                    assert_ne!(l.offer_kind(i, 60, Traffic::Udp), Fate::Lost);
                }
                big.push(l.offer_kind(i, 1050, Traffic::Udp) == Fate::Lost);
            }
            (big, l.counters().dropped_loss)
        };
        let (alone, dropped) = fates(0);
        assert_eq!(fates(3), (alone.clone(), dropped));
        assert_eq!(alone.iter().filter(|x| **x).count() as u64, dropped);
        assert!((300..500).contains(&dropped), "{dropped} of 2000 at 20%");
    }

    #[test]
    fn loss_is_reproducible_from_the_seed_and_near_its_rate() {
        let lossy = |seed| {
            let mut l = Link::new(LinkConfig {
                loss: Loss::Bernoulli { p: 0.05 },
                rate_bps: 0,
                seed,
                ..cfg()
            });
            (0..100_000u64)
                .map(|i| l.offer(i, 100) == Fate::Lost)
                .collect::<Vec<bool>>()
        };
        assert_eq!(lossy(7), lossy(7));
        assert_ne!(lossy(7), lossy(8));
        let n = lossy(7).iter().filter(|x| **x).count() as f64;
        // Binomial(100000, 0.05): sd = 68.9; 6 sd is a safe bound.
        assert!((n - 5000.0).abs() < 6.0 * 68.9, "{n}");
    }

    #[test]
    fn gilbert_elliott_gives_the_configured_mean_burst() {
        // Lose everything in the bad state, nothing in the good one: a loss run is a stay in
        // the bad state, of mean 1 / p_bg = 4 packets.
        let mut l = Link::new(LinkConfig {
            loss: Loss::GilbertElliott {
                p_gb: 0.01,
                p_bg: 0.25,
                loss_good: 0.0,
                loss_bad: 1.0,
            },
            rate_bps: 0,
            seed: 3,
            ..cfg()
        });
        let (mut runs, mut lost, mut in_run) = (0u64, 0u64, false);
        for i in 0..1_000_000u64 {
            let l = l.offer(i, 100) == Fate::Lost;
            if l {
                lost += 1;
                if !in_run {
                    runs += 1;
                }
            }
            in_run = l;
        }
        let mean = lost as f64 / runs as f64;
        assert!((mean - 4.0).abs() < 0.2, "mean burst {mean}");
        // Stationary loss: p_gb / (p_gb + p_bg) = 0.01 / 0.26
        let rate = lost as f64 / 1e6;
        assert!((rate - 0.01 / 0.26).abs() < 0.005, "{rate}");
    }

    #[test]
    fn jitter_never_reorders() {
        let mut l = Link::new(LinkConfig {
            jitter_ns: 5_000_000,
            rate_bps: 0,
            seed: 11,
            ..cfg()
        });
        let mut last = 0;
        let mut spread = (u64::MAX, 0u64);
        for i in 0..10_000u64 {
            let t = at(l.offer(i * 1000, 100));
            assert!(t >= last, "reordered at {i}");
            last = t;
            let extra = t - (i * 1000 + 10_000_000);
            spread = (spread.0.min(extra), spread.1.max(extra));
        }
        assert!(spread.1 > 0, "jitter applied");
    }

    /// Offers `n` packets through the queue-holding path, returning each one's event.
    fn through_queue(l: &mut Link, arrivals: &[(u64, u64)]) -> Vec<Event> {
        let mut out = Vec::new();
        for (i, &(t, len)) in arrivals.iter().enumerate() {
            let p = Packet {
                id: i as u32,
                len,
                kind: Traffic::Other,
                flow: 0,
                ect: false,
            };
            l.enqueue(t, p, &mut out);
        }
        while let Some(t) = l.next_dequeue_ns() {
            l.poll(t, &mut out);
        }
        out
    }

    #[test]
    fn a_queue_that_never_drops_schedules_as_drop_tail() {
        // Bursts and gaps, packets of many sizes: a drop-head queue too long to fill must
        // give every packet the time and wait the drop-tail link computes at once.
        let mut x = 12345u64;
        let mut t = 0;
        let arrivals: Vec<(u64, u64)> = (0..5000)
            .map(|_| {
                x = splitmix(x);
                t += if x.is_multiple_of(7) {
                    5_000_000
                } else {
                    x % 300_000
                };
                (t, 40 + (x >> 20) % 1460)
            })
            .collect();
        let mut tail = Link::new(cfg());
        let want: Vec<(u64, u64)> = arrivals
            .iter()
            .map(|&(t, len)| match tail.offer(t, len) {
                Fate::Deliver {
                    at_ns, waited_ns, ..
                } => (at_ns, waited_ns),
                other => panic!("{other:?}"),
            })
            .collect();
        let mut head = Link::new(LinkConfig {
            aqm: Some(AqmConfig::parse("drophead").unwrap()),
            ..cfg()
        });
        let mut got = vec![(0, 0); arrivals.len()];
        for e in through_queue(&mut head, &arrivals) {
            match e {
                Event::Deliver {
                    id,
                    at_ns,
                    waited_ns,
                    arrived_ns,
                    ..
                } => {
                    assert_eq!(arrived_ns, arrivals[id as usize].0);
                    got[id as usize] = (at_ns, waited_ns);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, want);
        assert_eq!(head.counters(), tail.counters());
    }

    #[test]
    fn idle_under_load_is_the_idle_time_between_overflows() {
        // A queue of two packets at a byte per µs (1 ms per packet): one packet at 0, then
        // a burst of four at 2 ms overflows the queue and keeps the link busy to 5 ms; the
        // next burst, at 10 ms, overflows it again: the 5 ms between count. Not the idle
        // time before the first overflow (1 to 2 ms), nor the 37 ms from 13 ms to a packet
        // at 50 ms with no overflow after it.
        let first = [(0, 1000)];
        let burst = |t: u64| [(t, 1000); 4];
        let arrivals: Vec<(u64, u64)> = first
            .into_iter()
            .chain(burst(2_000_000))
            .chain(burst(10_000_000))
            .chain([(50_000_000, 1000)])
            .collect();
        let limited = LinkConfig {
            queue_packets: 2,
            ..cfg()
        };
        let mut tail = Link::new(limited.clone());
        for &(t, len) in &arrivals {
            tail.offer(t, len);
        }
        let mut head = Link::new(LinkConfig {
            aqm: Some(AqmConfig::parse("drophead").unwrap()),
            ..limited.clone()
        });
        through_queue(&mut head, &arrivals);
        for l in [&tail, &head] {
            let c = l.counters();
            assert_eq!(c.dropped_queue, 2);
            assert_eq!(c.idle_under_load_ns, 10_000_000 - 5_000_000);
        }
        // A packet lost at random never reaches the queue: the link counts the same idle
        // time as one offered only the packets that were not lost.
        let mut lossy = Link::new(LinkConfig {
            loss: Loss::Bernoulli { p: 0.3 },
            ..limited.clone()
        });
        let bigger: Vec<(u64, u64)> = first
            .into_iter()
            .chain([(2_000_000, 1000); 12])
            .chain([(10_000_000, 1000); 12])
            .chain([(50_000_000, 1000)])
            .collect();
        let mut busy_arrivals = Vec::new();
        for &(t, len) in &bigger {
            let before = lossy.counters().dropped_loss;
            lossy.offer(t, len);
            if lossy.counters().dropped_loss == before {
                busy_arrivals.push((t, len));
            }
        }
        let mut replay = Link::new(limited.clone());
        for &(t, len) in &busy_arrivals {
            replay.offer(t, len);
        }
        assert!(lossy.counters().dropped_loss > 0);
        assert!(replay.counters().idle_under_load_ns > 0);
        assert_eq!(
            lossy.counters().idle_under_load_ns,
            replay.counters().idle_under_load_ns,
            "the lost packets change nothing"
        );
        // A trace's outages are the link's own, not idle time under load.
        let mut traced = Link::new(LinkConfig {
            trace: Some(Trace::parse("1\n40\n").expect("a trace")),
            ..limited
        });
        for &(t, len) in &arrivals {
            traced.offer(t, len);
        }
        assert!(traced.counters().dropped_queue >= 2);
        assert_eq!(traced.counters().idle_under_load_ns, 0);
    }

    #[test]
    fn a_packet_never_leaves_before_it_arrives() {
        // The serializer is idle from 1 ms: a packet offered at 10 ms starts then, not at 1 ms.
        let mut l = Link::new(LinkConfig {
            aqm: Some(AqmConfig::parse("drophead").unwrap()),
            ..cfg()
        });
        let events = through_queue(&mut l, &[(0, 1000), (10_000_000, 1000)]);
        let times: Vec<u64> = events
            .iter()
            .map(|e| match e {
                Event::Deliver { at_ns, .. } => *at_ns,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(times, [11_000_000, 21_000_000]);
    }
}
