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

/// A maximal run of consecutive sequence numbers that never arrived:
/// `first ..= first + count - 1`, settled for good (see [`SeqTracker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostRun {
    /// The first missing sequence number of the run.
    pub first: u64,
    /// How many consecutive sequence numbers are missing (at least 1).
    pub count: u64,
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
/// # Settled loss
///
/// A sequence number that leaves the window without having arrived is lost
/// for good ("settled"): whatever arrives for it later is [`Arrival::TooOld`].
/// So is, at [`finish`](Self::finish), every sequence number below the
/// sender's count that has not arrived. Settled losses are merged into
/// maximal [`LostRun`]s, which go to the [`LossRuns`] histogram and to the
/// callback of [`record_with`](Self::record_with) /
/// [`finish_with`](Self::finish_with) (a packet log, say) in increasing
/// order. After `finish`, the runs add up to exactly [`lost`](Self::lost):
/// a gap that late arrivals filled is reordering, never loss.
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
/// # The in-order prefix
///
/// [`prefix`](Self::prefix) is the length of the longest run `0, 1, ...`
/// received without a hole, whatever the arrival order: UDPmon's "last
/// sequence number received without loss" is `prefix - 1`. It is advanced
/// eagerly (amortized O(1) per datagram), so a caller that notes the time
/// whenever it grows knows when each prefix was complete.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    /// Bit `s % window` is set iff sequence number `s` (within the window)
    /// has been received.
    bits: Box<[u64]>,
    /// Window size in sequence numbers; a power of two (so a slot is a mask, not a division,
    /// on the per-datagram path) of at least 64, equal to
    /// `bits.len() * 64`.
    window: u64,
    highest: Option<u64>,
    received: u64,
    duplicates: u64,
    reordered: u64,
    max_reorder_extent: u64,
    too_old: u64,
    loss_runs: LossRuns,
    /// Every sequence number below this one is settled: received, or lost.
    settled: u64,
    /// The last settled loss run, still open: the next one may continue it.
    open_run: Option<LostRun>,
    /// `0 .. prefix` have all been received.
    prefix: u64,
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
    /// to a power of two, at least 64 and at most 2^30.
    pub fn with_window(window: u64) -> Self {
        let window = window.clamp(64, MAX_WINDOW).next_power_of_two();
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
            settled: 0,
            open_run: None,
            prefix: 0,
            finished: false,
        }
    }

    /// The window actually in use (after rounding), in sequence numbers.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Classifies and counts one received datagram with sequence number `seq`.
    #[inline]
    pub fn record(&mut self, seq: u64) -> Arrival {
        self.record_with(seq, &mut |_| {})
    }

    /// As [`record`](Self::record), and hands every loss run this arrival
    /// settles to `on_lost`.
    #[inline]
    pub fn record_with(&mut self, seq: u64, on_lost: &mut impl FnMut(LostRun)) -> Arrival {
        let Some(high) = self.highest else {
            // First datagram: the sender starts at 0, so anything below
            // `seq` is (so far) missing.
            self.settle(self.window_low(seq), on_lost);
            self.set(seq);
            self.highest = Some(seq);
            self.received = 1;
            self.advance_prefix();
            return if seq == 0 {
                Arrival::InOrder
            } else {
                Arrival::Gap { missing: seq }
            };
        };

        if seq == high.wrapping_add(1) && seq != 0 && !self.finished {
            // The common case, kept to a few word operations: the next datagram. Its slot
            // last held `seq - window`, which leaves the window now (the general path below
            // does the same through settle and advance).
            let (w, mask) = self.slot(seq);
            let word = self.bits.get(w).copied().unwrap_or(0);
            if seq >= self.window {
                if word & mask == 0 {
                    self.lost_run(seq - self.window, 1, on_lost);
                }
                self.settled = self.window_low(seq);
            }
            if let Some(word) = self.bits.get_mut(w) {
                *word |= mask;
            }
            self.highest = Some(seq);
            self.received = self.received.saturating_add(1);
            self.advance_prefix();
            return Arrival::InOrder;
        }
        if seq > high {
            let ahead = seq - high;
            // Settle what leaves the window before its slots are reused.
            self.settle(self.window_low(seq), on_lost);
            self.advance(high, ahead);
            self.set(seq);
            self.highest = Some(seq);
            self.received = self.received.saturating_add(1);
            self.advance_prefix();
            let missing = ahead - 1;
            if missing == 0 {
                Arrival::InOrder
            } else {
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
                self.advance_prefix();
                Arrival::Late { extent }
            }
        }
    }

    /// Settles everything once the sender's final datagram count `sent` is
    /// known: every sequence number below `sent` that has not arrived is lost
    /// (the tail `highest + 1 .. sent` included), and the last run is closed.
    /// Only the first call has an effect; use [`lost`](Self::lost) for the
    /// final loss count.
    pub fn finish(&mut self, sent: u64) {
        self.finish_with(sent, &mut |_| {});
    }

    /// As [`finish`](Self::finish), handing the loss runs it settles to
    /// `on_lost`.
    pub fn finish_with(&mut self, sent: u64, on_lost: &mut impl FnMut(LostRun)) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.settle(sent, on_lost);
        if let Some(run) = self.open_run.take() {
            self.close_run(run, on_lost);
        }
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

    /// Length of the hole-free run `0, 1, ..., prefix - 1` received so far.
    pub fn prefix(&self) -> u64 {
        self.prefix
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

    /// The loss-run histogram of settled runs; complete once
    /// [`finish`](Self::finish) has been called.
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

    /// The lowest sequence number still in the window once `high` is the
    /// highest: `high + 1 - window`, at least 0.
    fn window_low(&self, high: u64) -> u64 {
        // In u128: `high + 1` overflows u64 at the top of the sequence space.
        let low = (u128::from(high) + 1).saturating_sub(u128::from(self.window));
        u64::try_from(low).unwrap_or(u64::MAX)
    }

    /// Settles every sequence number in `self.settled .. upto`: those with a
    /// slot (up to the highest seen) are lost if their bit is clear; those
    /// above the highest never arrived at all.
    fn settle(&mut self, upto: u64, on_lost: &mut impl FnMut(LostRun)) {
        let from = self.settled;
        if upto <= from {
            return;
        }
        let slotted_end = self
            .highest
            .map_or(from, |h| upto.min(h.saturating_add(1)).max(from));
        if slotted_end > from {
            self.scan_missing(from, slotted_end, on_lost);
        }
        if upto > slotted_end {
            self.lost_run(slotted_end, upto - slotted_end, on_lost);
        }
        self.settled = upto;
    }

    /// Reports the clear bits of `from .. to` (all within the window) as
    /// loss, a word at a time: a word with every bit set costs one test.
    fn scan_missing(&mut self, from: u64, to: u64, on_lost: &mut impl FnMut(LostRun)) {
        let mut seq = from;
        let mut idx = from & (self.window - 1);
        while seq < to {
            let bit = idx % 64;
            let n = (to - seq).min(64 - bit).min(self.window - idx);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            let word = self.bits.get((idx / 64) as usize).copied().unwrap_or(0);
            let mut missing = !word & mask;
            while missing != 0 {
                let at = missing.trailing_zeros();
                let len = (missing >> at).trailing_ones();
                self.lost_run(seq + u64::from(at - bit as u32), u64::from(len), on_lost);
                missing &= if at + len >= 64 {
                    0
                } else {
                    !0u64 << (at + len)
                };
            }
            seq += n;
            idx += n;
            if idx >= self.window {
                idx = 0;
            }
        }
    }

    /// Adds `first .. first + count` to the open run, or closes that run and
    /// opens a new one.
    fn lost_run(&mut self, first: u64, count: u64, on_lost: &mut impl FnMut(LostRun)) {
        match &mut self.open_run {
            Some(run) if run.first.checked_add(run.count) == Some(first) => {
                run.count = run.count.saturating_add(count);
            }
            _ => {
                if let Some(run) = self.open_run.replace(LostRun { first, count }) {
                    self.close_run(run, on_lost);
                }
            }
        }
    }

    fn close_run(&mut self, run: LostRun, on_lost: &mut impl FnMut(LostRun)) {
        self.loss_runs.record(run.count);
        on_lost(run);
    }

    /// Extends the in-order prefix over every received sequence number that
    /// continues it.
    #[inline]
    fn advance_prefix(&mut self) {
        let Some(high) = self.highest else { return };
        while self.prefix <= high && self.prefix >= self.settled && self.is_set(self.prefix) {
            if self.prefix == u64::MAX {
                break;
            }
            self.prefix += 1;
        }
    }

    /// Bit position of `seq` in the bitmap: (word index, mask).
    fn slot(&self, seq: u64) -> (usize, u64) {
        let idx = seq & (self.window - 1);
        // idx < window <= 2^30: the word index fits usize.
        ((idx / 64) as usize, 1u64 << (idx % 64))
    }

    fn is_set(&self, seq: u64) -> bool {
        let (w, mask) = self.slot(seq);
        self.bits.get(w).is_some_and(|word| word & mask != 0)
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
        let mut idx = (high + 1) & (self.window - 1);
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

    fn run(first: u64, count: u64) -> LostRun {
        LostRun { first, count }
    }

    /// Finishes `t` at `sent` and returns every loss run it settles then.
    fn runs_of(t: &mut SeqTracker, sent: u64) -> Vec<LostRun> {
        let mut out = Vec::new();
        t.finish_with(sent, &mut |r| out.push(r));
        out
    }

    #[test]
    fn runs_settle_as_the_window_moves() {
        let mut t = SeqTracker::with_window(64);
        let mut out = Vec::new();
        let rec = |t: &mut SeqTracker, s: u64, out: &mut Vec<LostRun>| {
            t.record_with(s, &mut |r| out.push(r));
        };
        for s in (0..200).filter(|s| s % 10 != 3 && !(40..45).contains(s)) {
            rec(&mut t, s, &mut out);
        }
        // 0..=199 seen less the holes; the window holds 136..=199, so the holes below
        // 136 are settled, and closed up to the last one that may still grow.
        let settled: Vec<LostRun> = [3, 13, 23, 33]
            .into_iter()
            .map(|f| run(f, 1))
            .chain([run(40, 5), run(53, 1)])
            .chain((63..=123).step_by(10).map(|f| run(f, 1)))
            .collect();
        assert_eq!(out, settled);
        // a hole inside the window can still be filled: 143 arrives late
        rec(&mut t, 143, &mut out);
        // the holes still in the window and the tail settle at the end
        let mut tail = Vec::new();
        t.finish_with(205, &mut |r| tail.push(r));
        assert_eq!(
            tail,
            vec![
                run(133, 1),
                run(153, 1),
                run(163, 1),
                run(173, 1),
                run(183, 1),
                run(193, 1),
                run(200, 5)
            ]
        );
        let lost: u64 = out.iter().chain(&tail).map(|r| r.count).sum();
        assert_eq!(lost, t.lost(205));
        assert_eq!(t.loss_runs().lost(), lost);
        assert_eq!(t.prefix(), 3);
    }

    #[test]
    fn adjacent_runs_merge_across_words_and_the_tail() {
        let mut t = SeqTracker::with_window(64);
        feed(&mut t, 0..60);
        // 60..=199 missing, then 200 arrives: the run crosses word and window edges
        assert_eq!(t.record(200), Arrival::Gap { missing: 140 });
        assert_eq!(runs_of(&mut t, 300), vec![run(60, 140), run(201, 99)]);
        // a lost run reaching the tail merges with it
        let mut u = SeqTracker::new();
        feed(&mut u, 0..10);
        assert_eq!(u.record(12), Arrival::Gap { missing: 2 });
        assert_eq!(runs_of(&mut u, 20), vec![run(10, 2), run(13, 7)]);
        let mut v = SeqTracker::new();
        feed(&mut v, [0, 1, 2]);
        assert_eq!(runs_of(&mut v, 10), vec![run(3, 7)]);
    }

    #[test]
    fn prefix_follows_late_arrivals_and_freezes_at_a_settled_loss() {
        let mut t = SeqTracker::with_window(64);
        feed(&mut t, [1, 2, 3]);
        assert_eq!(t.prefix(), 0);
        t.record(0);
        assert_eq!(t.prefix(), 4);
        feed(&mut t, 5..100);
        assert_eq!(t.prefix(), 4);
        // 4 left the window without arriving: lost, and now too old
        assert_eq!(t.record(4), Arrival::TooOld);
        assert_eq!(t.prefix(), 4);
        // settled while recording, the run stays open (it might grow) until finish
        assert_eq!(t.loss_runs().runs(), 0);
        assert_eq!(runs_of(&mut t, 100), vec![run(4, 1)]);
        assert_eq!(t.loss_runs().runs(), 1);
    }

    #[test]
    fn gro_sized_batches_of_two_to_the_32_and_more() {
        // sequence numbers past u32: a stream that starts high is all loss below it
        let mut t = SeqTracker::new();
        let base = (1u64 << 32) - 3;
        feed(&mut t, base..base + 10);
        assert_eq!(t.prefix(), 0);
        assert_eq!(
            runs_of(&mut t, base + 12),
            vec![run(0, base), run(base + 10, 2)]
        );
        assert_eq!(t.lost(base + 12), base + 2);
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
        assert_eq!(SeqTracker::with_window(200).window(), 256);
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
        assert_eq!(t.prefix(), 50);
        assert_eq!(runs_of(&mut t, 100), vec![run(50, 1)]);
        assert_eq!(t.loss_runs().runs(), 1);
        assert_eq!(t.loss_runs().buckets()[0], 1);
    }

    #[test]
    fn first_datagram_lost() {
        let mut t = SeqTracker::new();
        assert_eq!(t.record(1), Arrival::Gap { missing: 1 });
        assert_eq!(t.lost_so_far(), 1);
        assert_eq!(t.prefix(), 0);
        assert_eq!(runs_of(&mut t, 2), vec![run(0, 1)]);
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
        assert_eq!(
            runs_of(&mut t, 126),
            vec![run(10, 5), run(20, 100), run(121, 1), run(123, 2)]
        );
        assert_eq!(t.prefix(), 10);
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
        // a gap that late arrivals filled is reordering, not a loss run
        assert_eq!(t.prefix(), 14);
        assert_eq!(runs_of(&mut t, 14), vec![]);
        assert_eq!(t.loss_runs().runs(), 0);
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
        assert_eq!(
            runs_of(&mut t, START + 200_006),
            vec![
                run(0, START),
                run(START + 200_000, 1),
                run(START + 200_002, 3)
            ]
        );
        assert_eq!(t.loss_runs().runs(), 3);
        assert_eq!(t.loss_runs().lost(), START + 4);
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
            // The settled runs are exactly the missing sequence numbers below `sent`.
            let sent = next.max(h + 1) + 3;
            let mut expect_runs: Vec<LostRun> = Vec::new();
            let mut prefix = None;
            for s in 0..sent {
                if seen.contains(&s) {
                    continue;
                }
                prefix.get_or_insert(s);
                match expect_runs.last_mut() {
                    Some(r) if r.first + r.count == s => r.count += 1,
                    _ => expect_runs.push(run(s, 1)),
                }
            }
            let mut got = Vec::new();
            t.finish_with(sent, &mut |r| got.push(r));
            let lost_total: u64 = expect_runs.iter().map(|r| r.count).sum();
            assert_eq!(t.lost(sent), lost_total, "seed {seed}");
            assert_eq!(t.loss_runs().lost(), lost_total, "seed {seed}");
            assert_eq!(
                t.loss_runs().runs(),
                expect_runs.len() as u64,
                "seed {seed}"
            );
            assert_eq!(got.last(), expect_runs.last(), "seed {seed}");
            assert!(prefix.is_some_and(|p| p == t.prefix()), "seed {seed}");
            // the random stream really exercised every path
            assert!(recv > 0 && dup > 0 && reord > 0 && old > 0, "seed {seed}");
            assert!(t.loss_runs().runs() > 0);
        }
    }
}
