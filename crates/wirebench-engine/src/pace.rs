//! Pacing: when the next message may leave.
//!
//! Deadlines are absolute (ns since the sender's start), computed from what was sent so far,
//! so rounding never accumulates. After a stall longer than [`MAX_LAG_NS`] the schedule is
//! moved forward instead of sending a catch-up burst above the asked rate. Sans-IO: the caller
//! passes `now` in and does the waiting (see [`wait_until`]).

use std::time::{Duration, Instant};
use wirebench_proto::spec::TestSpec;

/// How far behind schedule the sender may fall before the schedule is reset.
pub const MAX_LAG_NS: u64 = 10_000_000;

/// A batching sender waits until this much of its schedule is due and sends it in one call
/// (at 6 Gbit/s, 25 datagrams of 1500 bytes rather than the 3 or 4 that fall due during one
/// call): a message leaves at most this much after its deadline, the rate over any
/// millisecond is unchanged, and the sender makes a fraction of the calls and hands the
/// path GSO batches that stay whole. Linux's own pacing allows more (TCP sizes its TSO bursts
/// to about 1 ms of its pacing rate; `fq` lets 10 packets go at once).
pub const QUANTUM_NS: u64 = 50_000;

/// Sleep for the bulk of a wait, then spin for the last stretch, which the scheduler would
/// otherwise overshoot by tens of microseconds.
const SPIN_NS: u64 = 100_000;

/// Computes send deadlines for a rate in bits/s or messages/s plus a gap after each message.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate_bps: u64,
    rate_pps: u64,
    gap_ns: u64,
    /// Schedule origin, ns since start; moved forward after stalls.
    base_ns: u64,
    /// Bytes and messages sent since `base_ns`.
    bytes: u64,
    messages: u64,
    /// Earliest time the gap allows the next message.
    gap_until_ns: u64,
    /// How far behind the schedule may fall before it is reset ([`MAX_LAG_NS`] unless set).
    max_lag_ns: u64,
}

impl Pacer {
    /// A pacer; `rate_pps` wins over `rate_bps` when both are set, and 0 means unlimited.
    pub fn new(rate_bps: u64, rate_pps: u64, gap_ns: u64) -> Self {
        Self {
            rate_bps,
            rate_pps,
            gap_ns,
            base_ns: 0,
            bytes: 0,
            messages: 0,
            gap_until_ns: 0,
            max_lag_ns: MAX_LAG_NS,
        }
    }

    /// The same pacer, catching up on stalls of up to `ns` (a burst of what fell due
    /// meanwhile) instead of [`MAX_LAG_NS`]: iperf3 paces to the average since the start,
    /// so its peers' rate over a test is the rate asked even on a loaded host.
    pub fn with_max_lag_ns(mut self, ns: u64) -> Self {
        self.max_lag_ns = ns;
        self
    }

    /// The pacer of a test: its rate (`rate_pps` first) and its gap.
    pub fn of(spec: &TestSpec) -> Self {
        Self::new(
            spec.rate_bps.unwrap_or(0),
            spec.rate_pps.unwrap_or(0),
            spec.gap_ns,
        )
    }

    /// True when no rate and no gap apply: the sender never waits.
    pub fn unlimited(&self) -> bool {
        self.rate_bps == 0 && self.rate_pps == 0 && self.gap_ns == 0
    }

    fn rate_deadline_ns(&self) -> u64 {
        let offset = if self.rate_pps > 0 {
            u128::from(self.messages) * 1_000_000_000 / u128::from(self.rate_pps)
        } else if self.rate_bps > 0 {
            u128::from(self.bytes) * 8_000_000_000 / u128::from(self.rate_bps)
        } else {
            0
        };
        self.base_ns
            .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
    }

    /// The time at which the next message may be sent, given `now_ns`; resets the schedule if
    /// the sender has fallen more than [`MAX_LAG_NS`] behind.
    pub fn next_ns(&mut self, now_ns: u64) -> u64 {
        let due = self.rate_deadline_ns();
        if (self.rate_bps > 0 || self.rate_pps > 0) && now_ns > due.saturating_add(self.max_lag_ns)
        {
            self.base_ns = now_ns;
            self.bytes = 0;
            self.messages = 0;
        }
        self.rate_deadline_ns().max(self.gap_until_ns)
    }

    /// Records that a message of `len` bytes left at `now_ns`.
    pub fn sent(&mut self, len: u64, now_ns: u64) {
        self.sent_many(1, len, now_ns);
    }

    /// Records that `messages` messages of `bytes` bytes in all left at `now_ns`.
    pub fn sent_many(&mut self, messages: u64, bytes: u64, now_ns: u64) {
        self.bytes += bytes;
        self.messages += messages;
        if self.gap_ns > 0 {
            self.gap_until_ns = now_ns.saturating_add(self.gap_ns);
        }
    }

    /// How many messages of `len` bytes the schedule lets go in [`QUANTUM_NS`]: at least 1,
    /// at most `max`; 1 with a gap after each message, `max` with no rate.
    pub fn quantum(&self, len: u64, max: u64) -> u64 {
        let q = u128::from(QUANTUM_NS);
        let per = if self.gap_ns > 0 {
            1
        } else if self.rate_pps > 0 {
            q * u128::from(self.rate_pps) / 1_000_000_000
        } else if self.rate_bps > 0 {
            q * u128::from(self.rate_bps) / 8_000_000_000 / u128::from(len.max(1))
        } else {
            u128::from(max)
        };
        u64::try_from(per).unwrap_or(u64::MAX).clamp(1, max.max(1))
    }

    /// When the next `k` messages of `len` bytes will all be due: the last one's deadline
    /// (the next one's, [`next_ns`](Self::next_ns), for `k` ≤ 1 or with a gap).
    pub fn due_by_ns(&mut self, now_ns: u64, len: u64, k: u64) -> u64 {
        let first = self.next_ns(now_ns);
        if k <= 1 || self.gap_ns > 0 {
            return first;
        }
        let more = u128::from(k - 1);
        let offset = if self.rate_pps > 0 {
            (u128::from(self.messages) + more) * 1_000_000_000 / u128::from(self.rate_pps)
        } else if self.rate_bps > 0 {
            (u128::from(self.bytes) + more * u128::from(len)) * 8_000_000_000
                / u128::from(self.rate_bps)
        } else {
            return first;
        };
        self.base_ns
            .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
            .max(first)
    }

    /// How many messages of `len` bytes are due by `now_ns`, at most `max`: 0 means wait
    /// until [`next_ns`](Self::next_ns). A batch never runs ahead of the schedule: each of its
    /// messages is one whose deadline has passed, so sending in batches adds no burst above
    /// the rate beyond what the schedule already owes (at most [`MAX_LAG_NS`] of it).
    pub fn due(&mut self, now_ns: u64, len: u64, max: u64) -> u64 {
        if self.next_ns(now_ns) > now_ns || max == 0 {
            return 0;
        }
        if self.gap_ns > 0 {
            return 1;
        }
        let elapsed = u128::from(now_ns.saturating_sub(self.base_ns));
        // Index (from the next message) of the last message whose deadline has passed.
        let last = if self.rate_pps > 0 {
            (elapsed * u128::from(self.rate_pps) / 1_000_000_000)
                .saturating_sub(u128::from(self.messages))
        } else if self.rate_bps > 0 {
            let budget = elapsed * u128::from(self.rate_bps) / 8_000_000_000;
            budget.saturating_sub(u128::from(self.bytes)) / u128::from(len.max(1))
        } else {
            u128::from(max)
        };
        u64::try_from(last + 1).unwrap_or(u64::MAX).min(max)
    }
}

/// Waits until `deadline_ns` after `start`: sleeps, then spins the last 100 µs, yielding the
/// core between looks at the clock, so that a receiver or an emulator sharing it runs (on an
/// idle core a yield returns at once).
pub fn wait_until(start: Instant, deadline_ns: u64) {
    loop {
        let now = start.elapsed().as_nanos() as u64;
        if now >= deadline_ns {
            return;
        }
        let left = deadline_ns - now;
        if left > SPIN_NS {
            std::thread::sleep(Duration::from_nanos(left - SPIN_NS));
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_waits() {
        let mut p = Pacer::new(0, 0, 0);
        assert!(p.unlimited());
        for i in 0..10 {
            assert_eq!(p.next_ns(i), 0);
            p.sent(1000, i);
        }
    }

    #[test]
    fn bit_rate_spaces_messages() {
        // 8 Mbit/s, 1000-byte messages: one per millisecond.
        let mut p = Pacer::new(8_000_000, 0, 0);
        let mut now = 0;
        for i in 0..100u64 {
            let due = p.next_ns(now);
            assert_eq!(due, i * 1_000_000);
            now = due;
            p.sent(1000, now);
        }
    }

    #[test]
    fn packet_rate_ignores_size() {
        let mut p = Pacer::new(1, 1000, 0);
        p.sent(1, 0);
        p.sent(60_000, 0);
        assert_eq!(p.next_ns(0), 2_000_000);
    }

    #[test]
    fn gap_follows_each_message() {
        let mut p = Pacer::new(0, 0, 5_000);
        p.sent(10, 100);
        assert_eq!(p.next_ns(100), 5_100);
    }

    #[test]
    fn due_counts_the_messages_whose_deadline_passed() {
        // 8 Mbit/s, 1000-byte messages: one per ms.
        let mut p = Pacer::new(8_000_000, 0, 0);
        assert_eq!(p.due(0, 1000, 64), 1);
        p.sent_many(1, 1000, 0);
        assert_eq!(p.due(999_999, 1000, 64), 0);
        assert_eq!(p.due(1_000_000, 1000, 64), 1);
        assert_eq!(p.due(4_500_000, 1000, 64), 4); // deadlines 1, 2, 3, 4 ms
        assert_eq!(p.due(4_500_000, 1000, 3), 3);
        p.sent_many(4, 4000, 4_500_000);
        assert_eq!(p.due(4_500_000, 1000, 64), 0);
        // packets/s
        let mut q = Pacer::new(0, 1000, 0);
        assert_eq!(q.due(2_500_000, 64, 100), 3);
        // unlimited: a full batch; a gap: one at a time
        assert_eq!(Pacer::new(0, 0, 0).due(0, 1, 32), 32);
        let mut g = Pacer::new(0, 0, 1000);
        assert_eq!(g.due(0, 1, 32), 1);
        g.sent_many(1, 1, 0);
        assert_eq!(g.due(999, 1, 32), 0);
        // a stall longer than MAX_LAG_NS restarts the schedule: no catch-up batch
        let mut r = Pacer::new(8_000_000, 0, 0);
        r.sent_many(1, 1000, 0);
        assert_eq!(r.due(100_000_000, 1000, 64), 1);
    }

    #[test]
    fn a_quantum_is_what_falls_due_in_50_microseconds() {
        // 6 Gbit/s of 1500-byte messages: one every 2 µs, 25 in 50 µs.
        let mut p = Pacer::new(6_000_000_000, 0, 0);
        assert_eq!(p.quantum(1500, 64), 25);
        assert_eq!(p.quantum(1500, 10), 10);
        // 100 Mbit/s: one every 120 µs, so batches of one, as without a quantum.
        assert_eq!(Pacer::new(100_000_000, 0, 0).quantum(1500, 64), 1);
        assert_eq!(Pacer::new(0, 1_000_000, 0).quantum(64, 64), 50);
        assert_eq!(Pacer::new(0, 0, 1000).quantum(64, 64), 1);
        assert_eq!(Pacer::new(0, 0, 0).quantum(64, 32), 32);
        // The 25th message from now is due at 48 µs, and then all 25 are.
        assert_eq!(p.due_by_ns(0, 1500, 25), 48_000);
        assert_eq!(p.due(48_000, 1500, 64), 25);
        p.sent_many(25, 25 * 1500, 48_000);
        assert_eq!(p.due_by_ns(48_000, 1500, 1), 50_000);
        assert_eq!(p.due_by_ns(48_000, 1500, 25), 98_000);
    }

    #[test]
    fn no_catch_up_burst_after_a_stall() {
        let mut p = Pacer::new(8_000_000, 0, 0);
        p.sent(1000, 0);
        // Stalled for 50 ms: the schedule restarts at now, rather than allowing 50 messages
        // at once.
        let now = 50_000_000;
        assert_eq!(p.next_ns(now), now);
        p.sent(1000, now);
        assert_eq!(p.next_ns(now), now + 1_000_000);
    }
}
