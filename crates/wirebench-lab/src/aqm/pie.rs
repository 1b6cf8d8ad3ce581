//! PIE (RFC 8033): drop (or mark) arriving packets at random with a probability that a
//! proportional-integral controller updates every `tupdate` from the queueing delay:
//! `p += alpha × (delay − target) + beta × (delay − previous delay)`, scaled down while `p`
//! is small (§4.2's auto-tuning) so that it neither overshoots nor crawls.
//!
//! RFC 8033's pseudo-code, with Linux's sch_pie/pie.c where the RFC leaves a choice:
//! - the delay is measured with timestamps (Linux's default, the RFC's §5.2 option): the
//!   sojourn of the last packet dequeued, 0 when it left the queue empty;
//! - drops are derandomized (§5.1, always on in Linux): an accumulated probability below
//!   0.85 never drops, at 8.5 always;
//! - a delay above 250 ms adds 2% at once (Linux's non-linear step);
//! - ECN: an ECN-capable packet is marked instead of dropped only while the probability is
//!   at most 10% (Linux, the RFC's `mark_ecnth`), so marks cannot stand in for drops under
//!   overload; the mark is decided at enqueue and delivered with the packet.
//!
//! With the RFC: the decay is ×0.98 per update while the delay stays 0, and the burst
//! allowance goes down by `tupdate` per update and is refilled to `max_burst` once the
//! probability is 0 and the delay has been below half the target for two updates.
//!
//! The updates, a timer in Linux, run here as `now` passes their times, on either call;
//! an idle queue whose state no longer changes skips ahead at once.

use std::collections::VecDeque;

use super::fifo::PacketFifo;
use super::{AqmConfig, AqmCounters, Dequeued, DropCause, Limits, QueuedPacket, Rng, TUPDATE_NS};

/// Above this probability PIE drops ECN-capable packets too (RFC 8033 §5.1, Linux).
const MARK_ECN_THRESHOLD: f64 = 0.1;
/// A delay above this adds 2% to the probability in one update (Linux).
const DELAY_SPIKE_NS: u64 = 250_000_000;

/// The PIE queue.
#[derive(Debug, Clone)]
pub(super) struct Pie {
    pub(super) packets: PacketFifo,
    /// Whether each queued packet, in order, is to be marked CE.
    marks: VecDeque<bool>,
    limits: Limits,
    target_ns: u64,
    tupdate_ns: u64,
    alpha: f64,
    beta: f64,
    max_burst_ns: u64,
    bytemode: bool,
    ecn: bool,
    /// The drop probability, 0 to 1.
    prob: f64,
    /// The latest delay measured, and the one the previous update used.
    qdelay_ns: u64,
    qdelay_old_ns: u64,
    /// Burst allowance left.
    burst_ns: u64,
    /// The derandomizer's accumulated probability.
    accu_prob: f64,
    /// When the next update is due; None before the first call.
    next_update_ns: Option<u64>,
    rng: Rng,
    counters: AqmCounters,
}

impl Pie {
    pub(super) fn new(cfg: &AqmConfig, limits: Limits, seed: u64) -> Self {
        Self {
            packets: PacketFifo::default(),
            marks: VecDeque::new(),
            limits,
            target_ns: cfg.target_ns,
            // As `parse` bounds it: a shorter period would be work on every packet.
            tupdate_ns: cfg.tupdate_ns.clamp(*TUPDATE_NS.start(), *TUPDATE_NS.end()),
            alpha: cfg.alpha,
            beta: cfg.beta,
            max_burst_ns: cfg.max_burst_ns,
            bytemode: cfg.bytemode,
            ecn: cfg.ecn,
            prob: 0.0,
            qdelay_ns: 0,
            qdelay_old_ns: 0,
            burst_ns: cfg.max_burst_ns,
            accu_prob: 0.0,
            next_update_ns: None,
            rng: Rng(seed ^ 0x5049_4520_5049_4521),
            counters: AqmCounters::default(),
        }
    }

    pub(super) fn counters(&self) -> AqmCounters {
        AqmCounters {
            drop_probability: self.prob,
            ..self.counters
        }
    }

    /// Runs the updates due by `now_ns`.
    fn catch_up(&mut self, now_ns: u64) {
        let tupdate = self.tupdate_ns;
        let mut next = *self
            .next_update_ns
            .get_or_insert(now_ns.saturating_add(tupdate));
        while now_ns >= next {
            self.update();
            next = next.saturating_add(tupdate);
            let still = self.prob == 0.0
                && self.qdelay_ns == 0
                && self.qdelay_old_ns == 0
                && self.burst_ns == self.max_burst_ns;
            if still && now_ns >= next {
                // Every further update would leave this state as it is.
                next += (now_ns - next) / tupdate * tupdate + tupdate;
            }
        }
        self.next_update_ns = Some(next);
    }

    /// RFC 8033 §4.2's `calculate_drop_prob()`.
    fn update(&mut self) {
        let s = |ns: u64| ns as f64 / 1e9;
        let (qdelay, old, target) = (s(self.qdelay_ns), s(self.qdelay_old_ns), s(self.target_ns));
        let mut p = self.alpha * (qdelay - target) + self.beta * (qdelay - old);
        // Auto-tuning: small probabilities move in small steps.
        p /= match self.prob {
            x if x < 0.000_001 => 2048.0,
            x if x < 0.000_01 => 512.0,
            x if x < 0.000_1 => 128.0,
            x if x < 0.001 => 32.0,
            x if x < 0.01 => 8.0,
            x if x < 0.1 => 2.0,
            _ => 1.0,
        };
        // At most 2% more per update once it is at 10%, to avoid overshoot.
        if self.prob >= 0.1 && p > 0.02 {
            p = 0.02;
        }
        if self.qdelay_ns > DELAY_SPIKE_NS {
            p += 0.02;
        }
        self.prob = (self.prob + p).clamp(0.0, 1.0);
        if self.qdelay_ns == 0 && self.qdelay_old_ns == 0 {
            // Congestion gone: decay exponentially.
            self.prob *= 0.98;
        }
        self.counters.drop_probability_max = self.counters.drop_probability_max.max(self.prob);
        self.burst_ns = self.burst_ns.saturating_sub(self.tupdate_ns);
        let low = self.target_ns / 2;
        if self.prob == 0.0 && self.qdelay_ns < low && self.qdelay_old_ns < low {
            self.burst_ns = self.max_burst_ns;
        }
        self.qdelay_old_ns = self.qdelay_ns;
    }

    /// RFC 8033 §4.1's `drop_early()` with §5.1's derandomization.
    fn drop_early(&mut self, bytes: u32) -> bool {
        if self.burst_ns > 0 {
            return false;
        }
        // Work conserving: no drops while the delay is low and the probability modest, or
        // with two packets or fewer queued.
        if self.qdelay_ns < self.target_ns / 2 && self.prob < 0.2 {
            return false;
        }
        let mtu = self.packets.max_packet().max(bytes);
        if self.packets.bytes() <= 2 * u64::from(mtu) {
            return false;
        }
        let local = if self.bytemode && bytes <= mtu {
            self.prob * f64::from(bytes) / f64::from(mtu)
        } else {
            self.prob
        };
        if local == 0.0 {
            self.accu_prob = 0.0;
        } else {
            self.accu_prob += local;
        }
        if self.accu_prob < 0.85 {
            return false;
        }
        if self.accu_prob >= 8.5 {
            return true;
        }
        if self.rng.uniform() < local {
            self.accu_prob = 0.0;
            return true;
        }
        false
    }

    pub(super) fn enqueue(
        &mut self,
        now_ns: u64,
        p: QueuedPacket,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) {
        self.catch_up(now_ns);
        let mut mark = false;
        if self.packets.overflows(self.limits, &p) {
            self.accu_prob = 0.0;
            self.counters.dropped_overflow += 1;
            drop(p, DropCause::Overflow);
            return;
        }
        if self.drop_early(p.bytes) {
            if self.ecn && p.ect && self.prob <= MARK_ECN_THRESHOLD {
                mark = true;
                self.counters.marked += 1;
            } else {
                self.accu_prob = 0.0;
                self.counters.dropped_aqm += 1;
                drop(p, DropCause::Aqm);
                return;
            }
        }
        self.packets.push(p);
        self.marks.push_back(mark);
        self.counters.took(self.packets.len(), self.packets.bytes());
    }

    pub(super) fn dequeue(&mut self, now_ns: u64) -> Option<Dequeued> {
        self.catch_up(now_ns);
        let packet = self.packets.pop()?;
        let mark_ce = self.marks.pop_front().unwrap_or(false);
        self.qdelay_ns = if self.packets.len() == 0 {
            0
        } else {
            now_ns.saturating_sub(packet.enqueued_ns)
        };
        self.counters.dequeued += 1;
        Some(Dequeued { packet, mark_ce })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Aqm, Inner};
    use super::*;

    const MS: u64 = 1_000_000;

    fn pie(text: &str) -> Pie {
        Pie::new(
            &AqmConfig::parse(text).unwrap(),
            Limits {
                packets: 100_000,
                bytes: 0,
            },
            1,
        )
    }

    fn pkt(id: u32, ect: bool) -> QueuedPacket {
        QueuedPacket {
            id,
            bytes: 1500,
            flow: 0,
            ect,
            enqueued_ns: 0,
        }
    }

    /// Runs one update with the delay measured since the last being `qdelay_ms`.
    fn update(q: &mut Pie, qdelay_ms: u64) -> f64 {
        q.qdelay_ns = qdelay_ms * MS;
        q.update();
        q.prob
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn the_probability_follows_alpha_beta_and_the_auto_tuning() {
        let mut q = pie("pie");
        // 0.125 × (0.030 − 0.015) + 1.25 × (0.030 − 0) = 0.039375, ÷ 2048 (p < 0.0001%).
        assert!(
            close(update(&mut q, 30), 1.922_607_421_875e-5),
            "{}",
            q.prob
        );
        // 0.125 × 0.015 + 0 = 0.001875, ÷ 128 (p < 0.01%): + 1.46484375e-5.
        assert!(
            close(update(&mut q, 30), 3.387_451_171_875e-5),
            "{}",
            q.prob
        );
        assert!(
            close(update(&mut q, 30), 4.852_294_921_875e-5),
            "{}",
            q.prob
        );
        // At 5%: ÷ 2.
        q.prob = 0.05;
        assert!(close(update(&mut q, 30), 0.050_937_5), "{}", q.prob);
        // At 20% the step is at most 2%: 0.125 × 0.185 + 1.25 × 0.17 = 0.235625 → 0.02.
        q.prob = 0.2;
        assert!(close(update(&mut q, 200), 0.22), "{}", q.prob);
        // Above 250 ms, 2% more at once: capped 2% + 2%.
        q.prob = 0.2;
        assert!(close(update(&mut q, 300), 0.24), "{}", q.prob);
        // Below target it falls: 0.125 × (0.005 − 0.015) + 1.25 × (0.005 − 0.3) = −0.37
        // → the probability is clamped at 0.
        assert_eq!(update(&mut q, 5), 0.0);
        assert!(close(q.counters().drop_probability_max, 0.24));
    }

    #[test]
    fn it_decays_when_the_delay_stays_zero() {
        let mut q = pie("pie");
        q.prob = 0.05;
        // 0.125 × (0 − 0.015) ÷ 2 = −0.0009375, then × 0.98.
        assert!(close(update(&mut q, 0), 0.049_062_5 * 0.98), "{}", q.prob);
        let mut last = q.prob;
        for _ in 0..200 {
            let p = update(&mut q, 0);
            assert!(p < last || p == 0.0);
            last = p;
        }
        assert_eq!(last, 0.0);
        assert_eq!(q.burst_ns, 150 * MS, "the burst allowance is back");
    }

    /// Ten packets a ms, sent 100 ms after they arrive, from `from_ms` to `to_ms`; the AQM
    /// drop times, ms.
    fn congest(q: &mut Aqm, from_ms: u64, to_ms: u64) -> Vec<u64> {
        let mut drops = Vec::new();
        let mut id = 0;
        for ms in from_ms..to_ms {
            for _ in 0..10 {
                q.enqueue(ms * MS, pkt(id, false), &mut |_, c| {
                    assert_eq!(c, DropCause::Aqm);
                    drops.push(ms);
                });
                id += 1;
            }
            if ms >= from_ms + 100 {
                while q.len() > 1000 {
                    q.dequeue(ms * MS, &mut |_, _| panic!());
                }
            }
        }
        drops
    }

    #[test]
    fn the_burst_allowance_holds_off_drops_for_max_burst() {
        let cfg = AqmConfig::parse("pie").unwrap();
        let mut q = Aqm::new(&cfg, 100_000, 0, 1);
        let drops = congest(&mut q, 0, 3_000);
        // The delay is measured from 100 ms; the allowance runs out 150 ms later, 10
        // updates of 15 ms: nothing may drop before 100 + 150 ms.
        assert!(!drops.is_empty());
        assert!(drops[0] >= 250, "first drop at {} ms", drops[0]);
        let cfg = AqmConfig::parse("pie max_burst 0ms").unwrap();
        let mut q = Aqm::new(&cfg, 100_000, 0, 1);
        let early = congest(&mut q, 0, 3_000);
        assert!(early[0] < drops[0], "{} vs {}", early[0], drops[0]);
        assert!(q.counters().drop_probability_max > 0.0);
    }

    #[test]
    fn an_idle_queue_decays_and_skips_ahead() {
        let cfg = AqmConfig::parse("pie").unwrap();
        let mut q = Aqm::new(&cfg, 100_000, 0, 1);
        congest(&mut q, 0, 2_000);
        let busy = q.counters().drop_probability;
        assert!(busy > 0.01, "{busy}");
        while q.dequeue(2_000 * MS, &mut |_, _| {}).is_some() {}
        // An hour idle: decayed to 0, and catching up is no work.
        q.enqueue(3_600_000 * MS, pkt(0, false), &mut |_, _| panic!());
        assert_eq!(q.counters().drop_probability, 0.0);
        let Inner::Pie(p) = &q.inner else { panic!() };
        assert_eq!(p.burst_ns, 150 * MS);
    }

    /// A queue of 100 packets at `prob`, the delay above target, no burst allowance;
    /// offers 1000 ECN-capable packets at 0 (no update runs). Returns (marked, dropped).
    fn at_probability(prob: f64, ecn: bool) -> (u64, u64) {
        at_probability_in(if ecn { "pie ecn" } else { "pie" }, prob, 1500)
    }

    fn at_probability_in(text: &str, prob: f64, bytes: u32) -> (u64, u64) {
        let mut q = pie(text);
        for id in 0..100 {
            q.enqueue(0, pkt(id, true), &mut |_, _| panic!());
        }
        (q.prob, q.qdelay_ns, q.burst_ns) = (prob, 20 * MS, 0);
        for id in 100..1100 {
            let p = QueuedPacket {
                bytes,
                ..pkt(id, true)
            };
            q.enqueue(0, p, &mut |_, _| {});
        }
        let c = q.counters();
        let mut marked = 0;
        while let Some(d) = q.dequeue(0) {
            marked += u64::from(d.mark_ce);
        }
        assert_eq!(marked, c.marked);
        (c.marked, c.dropped_aqm)
    }

    #[test]
    fn ecn_marks_only_up_to_ten_percent() {
        let (marked, dropped) = at_probability(0.05, true);
        assert_eq!(dropped, 0);
        // Derandomized (RFC 8033 §5.1): none until 0.85 has accumulated (17 packets), then
        // one in 20 at random: about one in 37.
        assert!((15..=45).contains(&marked), "{marked}");
        let (marked, dropped) = at_probability(0.5, true);
        assert_eq!(marked, 0);
        // One packet, then one in 2: about one in 3.
        assert!((250..=420).contains(&dropped), "{dropped}");
        let (marked, dropped) = at_probability(0.05, false);
        assert_eq!(marked, 0);
        assert!((15..=45).contains(&dropped), "{dropped}");
    }

    #[test]
    fn bytemode_drops_small_packets_less() {
        // At 50%, 150-byte packets in byte mode see 5%: the derandomized one in ~37.
        let (_, full) = at_probability_in("pie", 0.5, 150);
        let (_, scaled) = at_probability_in("pie bytemode", 0.5, 150);
        assert!((250..=420).contains(&full), "{full}");
        assert!((15..=45).contains(&scaled), "{scaled}");
    }

    #[test]
    fn a_short_queue_is_never_dropped_from() {
        let mut q = pie("pie");
        (q.prob, q.qdelay_ns, q.burst_ns) = (0.9, 20 * MS, 0);
        // Two packets queued at most: PIE stays work conserving.
        for id in 0..1000 {
            q.enqueue(0, pkt(id, false), &mut |_, _| {
                panic!("dropped from a short queue")
            });
            if q.packets.len() >= 2 {
                q.dequeue(0);
            }
        }
    }
}
