//! Receiver-side sequence-number accounting: loss, duplicates, reordering.

use crate::loss_runs::LossRuns;

/// Default duplicate-detection window: this many sequence numbers at and
/// below the highest one seen are remembered exactly.
const DEFAULT_WINDOW: u64 = 1 << 16;

/// Largest window [`SeqTracker::with_window`] accepts (2^30 sequence
/// numbers, a 128 MiB bitmap); larger requests are clamped to it.
const MAX_WINDOW: u64 = 1 << 30;

/// How one datagram was classified by [`SeqTracker::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next expected sequence number (highest seen + 1, or 0 for the
    /// first datagram of a stream).
    InOrder,
    /// A new highest sequence number that skips `missing` sequence numbers
    /// (for the first datagram: its own sequence number, since the sender
    /// starts at 0).
    Gap {
        /// How many sequence numbers were skipped.
        missing: u64,
    },
    /// A datagram not seen before whose sequence number is below the highest
    /// seen; `extent = highest - seq` (at least 1).
    Late {
        /// Distance below the highest sequence number seen before it.
        extent: u64,
    },
    /// A sequence number already received (within the window).
    Duplicate,
    /// A sequence number at least `window` below the highest seen: it can no
    /// longer be told apart as late or duplicate, and is counted only in
    /// [`SeqTracker::too_old`].
    TooOld,
}

/// Receiver-side accounting of UDP datagram sequence numbers.
///
/// The sender numbers datagrams `0, 1, 2, ...` (u64, so streams longer than
/// 2^32 datagrams are fine). Feed every received sequence number to
/// [`record`](Self::record), in arrival order; the counts are exact for any
/// arrival order as long as no datagram arrives `window` or more sequence
/// numbers behind the highest one seen before it.
///
/// # The window
///
/// A fixed-size bitmap remembers which of the last `window` sequence numbers
/// (`highest - window + 1 ..= highest`) have arrived; it is allocated once in
/// the constructor and [`record`](Self::record) never allocates. Moving the
/// window forward costs O(distance / 64) word operations and is bounded by
/// O(window / 64) however far ahead a datagram jumps.
///
/// # Too-old arrivals
///
/// A datagram `window` or more below the highest seen is classified
/// [`Arrival::TooOld`] and counted only in [`too_old`](Self::too_old): it is
/// **not** counted in [`received`](Self::received), [`duplicates`](Self::duplicates)
/// or [`reordered`](Self::reordered), because the tracker can no longer tell
/// whether it fills a gap or repeats a datagram already counted. Counting it
/// as received could inflate `received` above the number of distinct
/// datagrams (and hide loss); leaving it out means that if it really was a
/// late, first copy, loss is over-reported by one. Report `too_old` next to
/// loss so the reader can judge; with the default window of 65536 it should
/// be zero on any sane path.
///
/// # Loss runs
///
/// [`loss_runs`](Self::loss_runs) records each gap once, with its size as
/// first observed when the [`Arrival::Gap`] happens. A later
/// [`Arrival::Late`] that fills part or all of a gap does **not** rewrite the
/// histogram, so it describes gaps as they appeared in arrival order (loss
/// plus reordering), not the final set of missing sequence numbers.
/// [`finish`](Self::finish) adds the tail gap once the sender's count is known.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    /// Bit `s % window` is set iff sequence number `s` (within the window)
    /// has been received.
    bits: Box<[u64]>,
    /// Window size in sequence numbers; a multiple of 64, equal to
    /// `bits.len() * 64`.
    window: u64,
    highest: Option<u64>,
    received: u64,
    duplicates: u64,
    reordered: u64,
    max_reorder_extent: u64,
    too_old: u64,
    loss_runs: LossRuns,
    finished: bool,
}

/// A copyable, serializable snapshot of a [`SeqTracker`]'s counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SeqCounts {
    /// See [`SeqTracker::highest`].
    pub highest: Option<u64>,
    /// See [`SeqTracker::received`].
    pub received: u64,
    /// See [`SeqTracker::duplicates`].
    pub duplicates: u64,
    /// See [`SeqTracker::reordered`].
    pub reordered: u64,
    /// See [`SeqTracker::max_reorder_extent`].
    pub max_reorder_extent: u64,
    /// See [`SeqTracker::lost_so_far`].
    pub lost_so_far: u64,
    /// See [`SeqTracker::too_old`].
    pub too_old: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl SeqTracker {
    /// A tracker with the default window of 65536 (2^16) sequence numbers.
    pub fn new() -> Self {
        Self::with_window(DEFAULT_WINDOW)
    }

    /// A tracker remembering the last `window` sequence numbers, rounded up
    /// to a multiple of 64, at least 64 and at most 2^30.
    pub fn with_window(window: u64) -> Self {
        let window = window.clamp(64, MAX_WINDOW).next_multiple_of(64);
        // window <= 2^30, so the word count fits any usize of 32 bits or more.
        let words = usize::try_from(window / 64).unwrap_or(MAX_WINDOW as usize / 64);
        Self {
            bits: vec![0u64; words].into_boxed_slice(),
            window: words as u64 * 64,
            highest: None,
            received: 0,
            duplicates: 0,
            reordered: 0,
            max_reorder_extent: 0,
            too_old: 0,
            loss_runs: LossRuns::new(),
            finished: false,
        }
    }

    /// The window actually in use (after rounding), in sequence numbers.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Classifies and counts one received datagram with sequence number `seq`.
    pub fn record(&mut self, seq: u64) -> Arrival {
        let Some(high) = self.highest else {
            // First datagram: the sender starts at 0, so anything below
            // `seq` is (so far) missing.
            self.set(seq);
            self.highest = Some(seq);
            self.received = 1;
            return if seq == 0 {
                Arrival::InOrder
            } else {
                self.loss_runs.record(seq);
                Arrival::Gap { missing: seq }
            };
        };

        if seq > high {
            let ahead = seq - high;
            self.advance(high, ahead);
            self.set(seq);
            self.highest = Some(seq);
            self.received = self.received.saturating_add(1);
            let missing = ahead - 1;
            if missing == 0 {
                Arrival::InOrder
            } else {
                self.loss_runs.record(missing);
                Arrival::Gap { missing }
            }
        } else {
            let extent = high - seq;
            if extent >= self.window {
                self.too_old = self.too_old.saturating_add(1);
                Arrival::TooOld
            } else if self.test_and_set(seq) {
                self.duplicates = self.duplicates.saturating_add(1);
                Arrival::Duplicate
            } else {
                // extent >= 1 here: `seq == high` always has its bit set.
                self.received = self.received.saturating_add(1);
                self.reordered = self.reordered.saturating_add(1);
                self.max_reorder_extent = self.max_reorder_extent.max(extent);
                Arrival::Late { extent }
            }
        }
    }

    /// Records the tail gap once the sender's final datagram count `sent` is
    /// known: the run `highest + 1 ..= sent - 1` (or `0 ..= sent - 1` if
    /// nothing arrived) is added to [`loss_runs`](Self::loss_runs). Only the
    /// first call has an effect; counters other than the histogram are not
    /// changed (use [`lost`](Self::lost) for the final loss count).
    pub fn finish(&mut self, sent: u64) {
        if self.finished {
            return;
        }
        self.finished = true;
        let tail = match self.highest {
            None => sent,
            Some(h) => sent.saturating_sub(h.saturating_add(1)),
        };
        self.loss_runs.record(tail);
    }

    /// Unique datagrams counted (duplicates and too-old arrivals excluded).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Datagrams whose sequence number had already been received.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Unique datagrams that arrived with a sequence number below the highest
    /// seen before them ([`Arrival::Late`]).
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// The largest `highest_seen - seq` over all reordered arrivals (0 if
    /// none).
    pub fn max_reorder_extent(&self) -> u64 {
        self.max_reorder_extent
    }

    /// The highest sequence number seen, if any datagram arrived.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Sequence numbers up to the highest seen that have not (yet) arrived:
    /// `(highest + 1) - received`, 0 before the first datagram. A late
    /// arrival reduces it; it is never negative. Does not count tail loss
    /// (see [`lost`](Self::lost)).
    pub fn lost_so_far(&self) -> u64 {
        match self.highest {
            None => 0,
            Some(h) => {
                let expected = u128::from(h) + 1;
                let missing = expected.saturating_sub(u128::from(self.received));
                u64::try_from(missing).unwrap_or(u64::MAX)
            }
        }
    }

    /// Final loss given the sender's datagram count: `sent - received`
    /// (saturating at 0). This includes tail loss after the highest sequence
    /// number seen.
    pub fn lost(&self, sent: u64) -> u64 {
        sent.saturating_sub(self.received)
    }

    /// Arrivals `window` or more below the highest sequence number seen,
    /// which could not be classified as late or duplicate. They are not in
    /// [`received`](Self::received); see the type-level documentation.
    pub fn too_old(&self) -> u64 {
        self.too_old
    }

    /// The loss-run histogram: gaps as first observed, plus the tail gap
    /// once [`finish`](Self::finish) has been called.
    pub fn loss_runs(&self) -> &LossRuns {
        &self.loss_runs
    }

    /// A snapshot of all counters.
    pub fn counts(&self) -> SeqCounts {
        SeqCounts {
            highest: self.highest,
            received: self.received,
            duplicates: self.duplicates,
            reordered: self.reordered,
            max_reorder_extent: self.max_reorder_extent,
            lost_so_far: self.lost_so_far(),
            too_old: self.too_old,
        }
    }

    /// Bit position of `seq` in the bitmap: (word index, mask).
    fn slot(&self, seq: u64) -> (usize, u64) {
        let idx = seq % self.window;
        // idx < window <= 2^30: the word index fits usize.
        ((idx / 64) as usize, 1u64 << (idx % 64))
    }

    fn set(&mut self, seq: u64) {
        let (w, mask) = self.slot(seq);
        if let Some(word) = self.bits.get_mut(w) {
            *word |= mask;
        }
    }

    /// Sets the bit of `seq`; returns whether it was already set.
    fn test_and_set(&mut self, seq: u64) -> bool {
        let (w, mask) = self.slot(seq);
        match self.bits.get_mut(w) {
            Some(word) => {
                let was = *word & mask != 0;
                *word |= mask;
                was
            }
            None => false,
        }
    }

    /// Moves the window from highest `high` to `high + ahead` (`ahead >= 1`):
    /// clears the bits of `high + 1 ..= high + ahead`, whose slots last held
    /// sequence numbers that now fall out of the window.
    fn advance(&mut self, high: u64, ahead: u64) {
        if ahead >= self.window {
            self.bits.fill(0);
            return;
        }
        // ahead < window, and high < u64::MAX because high + ahead is a u64.
        let mut idx = (high + 1) % self.window;
        let mut left = ahead;
        while left > 0 {
            let bit = idx % 64;
            let to_word_end = 64 - bit;
            let n = left.min(to_word_end).min(self.window - idx);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            if let Some(word) = self.bits.get_mut((idx / 64) as usize) {
                *word &= !mask;
            }
            left -= n;
            idx += n;
            if idx >= self.window {
                idx = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn feed(t: &mut SeqTracker, seqs: impl IntoIterator<Item = u64>) {
        for s in seqs {
            t.record(s);
        }
    }

    #[test]
    fn window_rounding() {
        assert_eq!(SeqTracker::new().window(), 65536);
        assert_eq!(SeqTracker::default().window(), 65536);
        assert_eq!(SeqTracker::with_window(0).window(), 64);
        assert_eq!(SeqTracker::with_window(1).window(), 64);
        assert_eq!(SeqTracker::with_window(64).window(), 64);
        assert_eq!(SeqTracker::with_window(65).window(), 128);
        assert_eq!(SeqTracker::with_window(1000).window(), 1024);
        assert_eq!(SeqTracker::with_window(u64::MAX).window(), MAX_WINDOW);
    }

    #[test]
    fn empty() {
        let t = SeqTracker::new();
        assert_eq!(t.highest(), None);
        assert_eq!(t.received(), 0);
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.lost(10), 10);
        let mut t = t;
        t.finish(10);
        assert_eq!(t.loss_runs().runs(), 1);
        assert_eq!(t.loss_runs().buckets()[LossRuns::bucket_of(10)], 1);
    }

    #[test]
    fn in_order_1000() {
        let mut t = SeqTracker::new();
        for s in 0..1000 {
            assert_eq!(t.record(s), Arrival::InOrder);
        }
        assert_eq!(t.received(), 1000);
        assert_eq!(t.highest(), Some(999));
        assert_eq!(t.duplicates(), 0);
        assert_eq!(t.reordered(), 0);
        assert_eq!(t.max_reorder_extent(), 0);
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.lost(1000), 0);
        assert_eq!(t.too_old(), 0);
        t.finish(1000);
        assert_eq!(t.loss_runs().runs(), 0);
    }

    #[test]
    fn single_loss() {
        let mut t = SeqTracker::new();
        feed(&mut t, 0..50);
        assert_eq!(t.record(51), Arrival::Gap { missing: 1 });
        feed(&mut t, 52..100);
        assert_eq!(t.received(), 99);
        assert_eq!(t.lost_so_far(), 1);
        assert_eq!(t.lost(100), 1);
        assert_eq!(t.reordered(), 0);
        assert_eq!(t.loss_runs().runs(), 1);
        assert_eq!(t.loss_runs().buckets()[0], 1);
    }

    #[test]
    fn first_datagram_lost() {
        let mut t = SeqTracker::new();
        assert_eq!(t.record(1), Arrival::Gap { missing: 1 });
        assert_eq!(t.lost_so_far(), 1);
        assert_eq!(t.loss_runs().buckets()[0], 1);
    }

    #[test]
    fn tail_loss() {
        let mut t = SeqTracker::new();
        feed(&mut t, 0..90);
        // the last 10 of 100 never arrive: invisible until the sender's count
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.loss_runs().runs(), 0);
        assert_eq!(t.lost(100), 10);
        t.finish(100);
        assert_eq!(t.loss_runs().runs(), 1);
        assert_eq!(t.loss_runs().lost(), 10);
        assert_eq!(t.loss_runs().buckets()[4], 1); // 9-16
                                                   // finish is idempotent
        t.finish(100);
        assert_eq!(t.loss_runs().runs(), 1);
        // a sender count below what arrived never underflows
        let mut u = SeqTracker::new();
        feed(&mut u, 0..10);
        assert_eq!(u.lost(5), 0);
        u.finish(5);
        assert_eq!(u.loss_runs().runs(), 0);
    }

    #[test]
    fn burst_loss() {
        let mut t = SeqTracker::new();
        feed(&mut t, 0..10);
        assert_eq!(t.record(15), Arrival::Gap { missing: 5 }); // 10..=14
        feed(&mut t, 16..20);
        assert_eq!(t.record(120), Arrival::Gap { missing: 100 }); // 20..=119
        assert_eq!(t.record(122), Arrival::Gap { missing: 1 });
        assert_eq!(t.record(125), Arrival::Gap { missing: 2 });
        assert_eq!(t.received(), 10 + 1 + 4 + 3);
        assert_eq!(t.lost_so_far(), 5 + 100 + 1 + 2);
        assert_eq!(t.lost(126), 5 + 100 + 1 + 2);
        let runs = t.loss_runs();
        assert_eq!(runs.runs(), 4);
        assert_eq!(runs.lost(), 108);
        assert_eq!(runs.buckets()[0], 1); // 1
        assert_eq!(runs.buckets()[1], 1); // 2
        assert_eq!(runs.buckets()[3], 1); // 5-8
        assert_eq!(runs.buckets()[7], 1); // 65-128
        assert_eq!(runs.buckets().iter().sum::<u64>(), 4);
    }

    #[test]
    fn duplicates_immediate_and_old() {
        let mut t = SeqTracker::new();
        feed(&mut t, 0..2);
        assert_eq!(t.record(1), Arrival::Duplicate);
        assert_eq!(t.record(1), Arrival::Duplicate);
        feed(&mut t, 2..100);
        assert_eq!(t.record(50), Arrival::Duplicate);
        assert_eq!(t.record(0), Arrival::Duplicate);
        assert_eq!(t.received(), 100);
        assert_eq!(t.duplicates(), 4);
        assert_eq!(t.reordered(), 0);
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.lost(100), 0);
        // a late datagram repeated: late once, then duplicate
        assert_eq!(t.record(102), Arrival::Gap { missing: 2 });
        assert_eq!(t.record(100), Arrival::Late { extent: 2 });
        assert_eq!(t.record(100), Arrival::Duplicate);
        assert_eq!(t.duplicates(), 5);
        assert_eq!(t.reordered(), 1);
        assert_eq!(t.lost_so_far(), 1);
    }

    #[test]
    fn reorder_by_one() {
        let mut t = SeqTracker::new();
        assert_eq!(t.record(0), Arrival::InOrder);
        assert_eq!(t.record(2), Arrival::Gap { missing: 1 });
        assert_eq!(t.lost_so_far(), 1);
        assert_eq!(t.record(1), Arrival::Late { extent: 1 });
        assert_eq!(t.record(3), Arrival::InOrder);
        assert_eq!(t.received(), 4);
        assert_eq!(t.reordered(), 1);
        assert_eq!(t.max_reorder_extent(), 1);
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.lost(4), 0);
        assert_eq!(t.duplicates(), 0);
    }

    #[test]
    fn reorder_by_1000() {
        let mut t = SeqTracker::new();
        t.record(0);
        assert_eq!(t.record(2), Arrival::Gap { missing: 1 });
        feed(&mut t, 3..=1001);
        assert_eq!(t.lost_so_far(), 1);
        assert_eq!(t.record(1), Arrival::Late { extent: 1000 });
        assert_eq!(t.received(), 1002);
        assert_eq!(t.reordered(), 1);
        assert_eq!(t.max_reorder_extent(), 1000);
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.lost(1002), 0);
    }

    #[test]
    fn late_arrival_turns_loss_into_reorder() {
        let mut t = SeqTracker::new();
        feed(&mut t, 0..10);
        assert_eq!(t.record(13), Arrival::Gap { missing: 3 }); // 10, 11, 12 missing
        assert_eq!(t.lost_so_far(), 3);
        assert_eq!(t.record(11), Arrival::Late { extent: 2 });
        assert_eq!(t.lost_so_far(), 2);
        assert_eq!(t.record(10), Arrival::Late { extent: 3 });
        assert_eq!(t.lost_so_far(), 1);
        assert_eq!(t.record(12), Arrival::Late { extent: 1 });
        assert_eq!(t.lost_so_far(), 0);
        // duplicates of the late ones do not push it negative (or change it)
        assert_eq!(t.record(12), Arrival::Duplicate);
        assert_eq!(t.record(10), Arrival::Duplicate);
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.received(), 14);
        assert_eq!(t.reordered(), 3);
        assert_eq!(t.max_reorder_extent(), 3);
        assert_eq!(t.duplicates(), 2);
        assert_eq!(t.lost(14), 0);
        // the histogram keeps the gap as first observed
        assert_eq!(t.loss_runs().runs(), 1);
        assert_eq!(t.loss_runs().buckets()[2], 1); // 3-4
    }

    #[test]
    fn above_2_pow_32() {
        const START: u64 = 5_000_000_000;
        let mut t = SeqTracker::new();
        // the sender starts at 0, so everything below START counts as missing
        assert_eq!(t.record(START), Arrival::Gap { missing: START });
        for s in START + 1..START + 200_000 {
            assert_eq!(t.record(s), Arrival::InOrder);
        }
        assert_eq!(t.record(START + 200_005), Arrival::Gap { missing: 5 });
        assert_eq!(
            t.record(START + 200_001),
            Arrival::Late { extent: 4 },
            "late across the u32 boundary"
        );
        assert_eq!(t.record(START + 199_999), Arrival::Duplicate);
        assert_eq!(t.record(START), Arrival::TooOld);
        assert_eq!(t.highest(), Some(START + 200_005));
        assert_eq!(t.received(), 200_002);
        assert_eq!(t.duplicates(), 1);
        assert_eq!(t.reordered(), 1);
        assert_eq!(t.too_old(), 1);
        assert_eq!(t.lost_so_far(), START + 4);
        assert_eq!(t.lost(START + 200_006), START + 4);
        assert_eq!(t.loss_runs().runs(), 2);
        assert_eq!(t.loss_runs().lost(), START + 5);
    }

    #[test]
    fn jump_far_beyond_window() {
        let mut t = SeqTracker::new();
        feed(&mut t, 0..100);
        let far = 10_000_000_000u64;
        assert_eq!(t.record(far), Arrival::Gap { missing: far - 100 });
        assert_eq!(t.record(far + 1), Arrival::InOrder);
        assert_eq!(t.record(far), Arrival::Duplicate);
        // whatever was remembered before the jump is gone: not a false duplicate
        assert_eq!(t.record(far - 100), Arrival::Late { extent: 101 });
        assert_eq!(t.record(far - 65534), Arrival::Late { extent: 65535 });
        assert_eq!(t.record(far - 65535), Arrival::TooOld);
        assert_eq!(t.record(50), Arrival::TooOld);
        assert_eq!(t.received(), 104);
        assert_eq!(t.too_old(), 2);
        assert_eq!(t.reordered(), 2);
        assert_eq!(t.max_reorder_extent(), 65535);
        assert_eq!(t.lost_so_far(), far + 2 - 104);
        // jump to the very top of the sequence space
        assert_eq!(
            t.record(u64::MAX),
            Arrival::Gap {
                missing: u64::MAX - far - 2
            }
        );
        assert_eq!(t.record(u64::MAX), Arrival::Duplicate);
        assert_eq!(t.record(u64::MAX - 1), Arrival::Late { extent: 1 });
        assert_eq!(t.lost_so_far(), u64::MAX - 105);
        t.finish(u64::MAX);
        t.finish(0);
    }

    #[test]
    fn jump_just_within_window() {
        let mut t = SeqTracker::with_window(64);
        feed(&mut t, 0..64);
        // 63 ahead: the slots of 0..=62 are reused for 64..=126; 63 stays
        assert_eq!(t.record(126), Arrival::Gap { missing: 62 });
        for s in 64..126 {
            assert_eq!(t.record(s), Arrival::Late { extent: 126 - s }, "seq {s}");
        }
        assert_eq!(t.record(63), Arrival::Duplicate);
        assert_eq!(t.record(62), Arrival::TooOld);
        assert_eq!(t.received(), 127);
        assert_eq!(t.lost_so_far(), 0);
    }

    #[test]
    fn jump_by_exactly_window() {
        let mut t = SeqTracker::with_window(64);
        feed(&mut t, 0..64);
        // 64 ahead: the whole bitmap is recycled
        assert_eq!(t.record(127), Arrival::Gap { missing: 63 });
        for s in 64..127 {
            assert_eq!(t.record(s), Arrival::Late { extent: 127 - s }, "seq {s}");
        }
        assert_eq!(t.record(63), Arrival::TooOld);
        assert_eq!(t.received(), 128);
        assert_eq!(t.lost_so_far(), 0);
    }

    #[test]
    fn partial_clear_wraps_around() {
        let mut t = SeqTracker::with_window(128);
        feed(&mut t, 0..=100);
        // 100 ahead: clears slots 101..=127 and 0..=72, keeps 73..=100
        assert_eq!(t.record(200), Arrival::Gap { missing: 99 });
        for s in 73..=100 {
            assert_eq!(t.record(s), Arrival::Duplicate, "seq {s}");
        }
        for s in 101..200 {
            assert_eq!(t.record(s), Arrival::Late { extent: 200 - s }, "seq {s}");
        }
        assert_eq!(t.record(72), Arrival::TooOld);
        assert_eq!(t.received(), 201);
        assert_eq!(t.duplicates(), 28);
        assert_eq!(t.reordered(), 99);
        assert_eq!(t.max_reorder_extent(), 99);
        assert_eq!(t.lost_so_far(), 0);
    }

    #[test]
    fn too_old() {
        let mut t = SeqTracker::with_window(64);
        feed(&mut t, 0..=100);
        // in window: highest - seq <= 63
        assert_eq!(t.record(37), Arrival::Duplicate);
        assert_eq!(t.record(36), Arrival::TooOld);
        assert_eq!(t.record(0), Arrival::TooOld);
        assert_eq!(t.too_old(), 2);
        assert_eq!(t.duplicates(), 1);
        assert_eq!(t.received(), 101);
        assert_eq!(t.lost_so_far(), 0);

        // a genuinely missing datagram arriving too late stays counted as lost
        let mut u = SeqTracker::with_window(64);
        u.record(0);
        assert_eq!(u.record(1000), Arrival::Gap { missing: 999 });
        assert_eq!(u.record(5), Arrival::TooOld);
        assert_eq!(u.record(937), Arrival::Late { extent: 63 });
        assert_eq!(u.received(), 3);
        assert_eq!(u.too_old(), 1);
        assert_eq!(u.reordered(), 1);
        assert_eq!(u.lost_so_far(), 998);
        assert_eq!(u.lost(1001), 998);
    }

    #[test]
    fn three_million_in_order() {
        let mut t = SeqTracker::new();
        let mut in_order = 0u64;
        for s in 0..3_000_000u64 {
            if t.record(s) == Arrival::InOrder {
                in_order += 1;
            }
        }
        assert_eq!(in_order, 3_000_000);
        assert_eq!(t.received(), 3_000_000);
        assert_eq!(t.highest(), Some(2_999_999));
        assert_eq!(t.lost_so_far(), 0);
        assert_eq!(t.lost(3_000_000), 0);
        assert_eq!(t.duplicates() + t.reordered() + t.too_old(), 0);
        assert_eq!(t.record(2_999_999 - 65535), Arrival::Duplicate);
        assert_eq!(t.record(2_999_999 - 65536), Arrival::TooOld);
    }

    #[test]
    fn counts_snapshot() {
        let mut t = SeqTracker::new();
        feed(&mut t, [0, 2, 1, 1]);
        assert_eq!(
            t.counts(),
            SeqCounts {
                highest: Some(2),
                received: 3,
                duplicates: 1,
                reordered: 1,
                max_reorder_extent: 1,
                lost_so_far: 0,
                too_old: 0,
            }
        );
    }

    /// Small deterministic PRNG (xorshift64*) for the model test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Compares against a straightforward set-based model on random
    /// arrival orders with loss, duplication, reordering and jumps.
    #[test]
    fn matches_naive_model() {
        for (seed, window) in [(1u64, 64u64), (2, 128), (3, 200), (4, 65536), (5, 64)] {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
            let mut t = SeqTracker::with_window(window);
            let w = t.window();
            let mut seen: HashSet<u64> = HashSet::new();
            let mut high: Option<u64> = None;
            let (mut recv, mut dup, mut reord, mut old, mut ext) = (0u64, 0u64, 0u64, 0u64, 0u64);
            let mut next = 0u64;
            for _ in 0..20_000 {
                let seq = match rng.below(10) {
                    0..=4 => {
                        next += 1;
                        next - 1
                    }
                    5 => {
                        let span = match rng.below(50) {
                            0 => 3 * w,
                            1..=3 => w - 1,
                            _ => 5,
                        };
                        next += 1 + rng.below(span);
                        next - 1
                    }
                    6 | 7 => next.saturating_sub(1 + rng.below(2 * w)),
                    8 => next.saturating_sub(1 + rng.below(4)),
                    _ => next.saturating_sub(rng.below(w + 2)),
                };
                let expect = match high {
                    None => {
                        recv += 1;
                        high = Some(seq);
                        seen.insert(seq);
                        if seq == 0 {
                            Arrival::InOrder
                        } else {
                            Arrival::Gap { missing: seq }
                        }
                    }
                    Some(h) if seq > h => {
                        recv += 1;
                        high = Some(seq);
                        seen.insert(seq);
                        if seq == h + 1 {
                            Arrival::InOrder
                        } else {
                            Arrival::Gap {
                                missing: seq - h - 1,
                            }
                        }
                    }
                    Some(h) if h - seq >= w => {
                        old += 1;
                        Arrival::TooOld
                    }
                    Some(h) => {
                        if seen.insert(seq) {
                            recv += 1;
                            reord += 1;
                            ext = ext.max(h - seq);
                            Arrival::Late { extent: h - seq }
                        } else {
                            dup += 1;
                            Arrival::Duplicate
                        }
                    }
                };
                assert_eq!(t.record(seq), expect, "seed {seed} seq {seq}");
            }
            assert_eq!(t.received(), recv);
            assert_eq!(t.duplicates(), dup);
            assert_eq!(t.reordered(), reord);
            assert_eq!(t.too_old(), old);
            assert_eq!(t.max_reorder_extent(), ext);
            let h = high.expect("something arrived");
            assert_eq!(t.lost_so_far(), h + 1 - recv);
            // the random stream really exercised every path
            assert!(recv > 0 && dup > 0 && reord > 0 && old > 0, "seed {seed}");
            assert!(t.loss_runs().runs() > 0);
        }
    }
}
