//! One direction of an emulated link, as a pure, seeded state machine: each packet offered
//! at `now` is lost at random, or dropped by a full queue, or given the exact time it leaves
//! the far end. No clock, no socket: the I/O loop around it passes `now` in and holds each
//! packet until its time (DESIGN.md, "The emulated network").
//!
//! ```text
//! offer ─► loss (Bernoulli or Gilbert-Elliott) ─► drop-tail queue (packets, bytes)
//!       ─► serializer at rate_bps (wire size = len + overhead) ─► delay (+ jitter, in order)
//! ```
//!
//! Times are virtual: a packet's departure is computed from the link's own schedule, so a
//! late timer in the I/O loop delays a packet but never changes the modelled rate.

use serde::{Deserialize, Serialize};

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

/// splitmix64's output function.
fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One direction's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
    /// Seed of the link's random numbers: the same seed, the same losses and jitter.
    pub seed: u64,
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
        /// How long it waited in the queue for the serializer, ns.
        waited_ns: u64,
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

/// One direction of a link.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    /// Random streams: [`Traffic::Other`]'s (loss and jitter), then UDP's and TCP's losses.
    rng: [u64; 3],
    /// Gilbert-Elliott's state, per kind of traffic.
    bad: [bool; 3],
    /// When the serializer is free again.
    busy_until_ns: u64,
    /// Serialization start time and wire bytes of each packet still waiting in the queue.
    queue: std::collections::VecDeque<(u64, u64)>,
    queued_bytes: u64,
    /// The last delivery time given, so jitter never reorders.
    last_delivery_ns: u64,
    counters: LinkCounters,
}

impl Link {
    /// A link in its idle state.
    pub fn new(cfg: LinkConfig) -> Self {
        Self {
            // splitmix64 of the seed: a zero seed still gives a useful stream; the other kinds'
            // streams start from the seed's own splitmix outputs, far from the first.
            rng: [
                cfg.seed ^ 0x9E37_79B9_7F4A_7C15,
                splitmix(cfg.seed.wrapping_add(1)),
                splitmix(cfg.seed.wrapping_add(2)),
            ],
            cfg,
            bad: [false; 3],
            busy_until_ns: 0,
            queue: std::collections::VecDeque::new(),
            queued_bytes: 0,
            last_delivery_ns: 0,
            counters: LinkCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// A uniform number in [0, 1) from stream `k` (splitmix64).
    fn uniform_in(&mut self, k: usize) -> f64 {
        self.rng[k] = self.rng[k].wrapping_add(0x9E37_79B9_7F4A_7C15);
        (splitmix(self.rng[k]) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform number in [0, 1) from the shared stream (jitter).
    fn uniform(&mut self) -> f64 {
        self.uniform_in(0)
    }

    fn lost(&mut self, kind: Traffic) -> bool {
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

    /// Time to put `wire_bytes` on the wire, ns.
    fn serialization_ns(&self, wire_bytes: u64) -> u64 {
        if self.cfg.rate_bps == 0 {
            return 0;
        }
        let ns = u128::from(wire_bytes) * 8 * 1_000_000_000 / u128::from(self.cfg.rate_bps);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Offers a packet of `len` bytes at `now_ns` (non-decreasing from call to call), its
    /// loss drawn from the [`Traffic::Other`] stream.
    pub fn offer(&mut self, now_ns: u64, len: u64) -> Fate {
        self.offer_kind(now_ns, len, Traffic::Other)
    }

    /// Offers a packet of `len` bytes of `kind` at `now_ns` (non-decreasing from call to
    /// call).
    pub fn offer_kind(&mut self, now_ns: u64, len: u64, kind: Traffic) -> Fate {
        self.counters.packets_in += 1;
        if self.lost(kind) {
            self.counters.dropped_loss += 1;
            return Fate::Lost;
        }
        // Packets whose serialization has begun by now have left the queue.
        while let Some(&(start, bytes)) = self.queue.front() {
            if start > now_ns {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= bytes;
        }
        let wire = len + u64::from(self.cfg.overhead_bytes);
        let start = self.busy_until_ns.max(now_ns);
        let waits = start > now_ns;
        if waits {
            let full_count =
                self.cfg.queue_packets > 0 && self.queue.len() >= self.cfg.queue_packets as usize;
            let full_bytes =
                self.cfg.queue_bytes > 0 && self.queued_bytes + wire > self.cfg.queue_bytes;
            if full_count || full_bytes {
                self.counters.dropped_queue += 1;
                return Fate::QueueFull;
            }
            self.queue.push_back((start, wire));
            self.queued_bytes += wire;
        }
        self.busy_until_ns = start + self.serialization_ns(wire);
        let jitter = if self.cfg.jitter_ns > 0 {
            (self.uniform() * (self.cfg.jitter_ns + 1) as f64) as u64
        } else {
            0
        };
        let at = (self.busy_until_ns + self.cfg.delay_ns + jitter).max(self.last_delivery_ns);
        self.last_delivery_ns = at;
        let waited = start - now_ns;
        self.counters.delivered += 1;
        self.counters.queue_delay_ns += waited;
        self.counters.max_queue_delay_ns = self.counters.max_queue_delay_ns.max(waited);
        Fate::Deliver {
            at_ns: at,
            waited_ns: waited,
        }
    }
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
        }
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
}
