//! Memory a test reserved and does not use goes to a test that waits for it.
//!
//! A test's reservation (`control::memory`) is made whole at admission and held for its life:
//! an address that opens a test with large buffers and then moves a byte a stream every few
//! seconds (enough to pass every idle limit) would hold its share of `--max-memory` for as
//! long as `--max-duration`, and a few such addresses all of it. The rule: **a test that
//! moved fewer than [`MESSAGES_PER_STREAM`] messages a stream in the last [`WINDOW`] is
//! idle**, and when a new test would be refused for `--max-memory`, the idle tests (the
//! largest first) are ended to make room, with a reason that names the rule, if and only if
//! that makes room. A test that moves one message a stream every 2 s is never idle, whatever
//! its rate; an idle one is ended only when another test needs its memory.
//!
//! A message is the test's own unit: a TCP or UDP message of `-l` bytes, an rr or crr
//! transaction, an iperf3 block. Keeping a test of 64 streams of 800 KiB messages in use
//! takes 64 × 5 × 800 KiB every 10 s (about 210 Mbit/s): its memory is used, not parked.
//!
//! [`UseWindow`] is what a test's driver feeds with its running count of messages; it says
//! when the test turns idle or busy again, which the driver tells `Admission::set_idle`.
//! Pure and driven in virtual time by its tests.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How far back a test's use is looked at.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The messages a stream must move in [`WINDOW`] for its test to be in use.
pub const MESSAGES_PER_STREAM: u64 = 5;

/// How often a count is kept: the window is judged to within this.
const MARK_EVERY: Duration = Duration::from_secs(1);

/// Marks kept: one a second over the window, and the one just before it.
const MARKS: usize = (WINDOW.as_secs() / MARK_EVERY.as_secs()) as usize + 2;

/// A running test's use, judged over the last [`WINDOW`].
#[derive(Debug)]
pub struct UseWindow {
    /// The messages the test must move in the window to be in use.
    need: u64,
    /// `(when, messages moved by then)`, oldest first; allocated once.
    marks: VecDeque<(Instant, u64)>,
    idle: bool,
}

impl UseWindow {
    /// The window of a test of `streams` streams that starts at `now`.
    pub fn new(now: Instant, streams: u32) -> Self {
        let mut marks = VecDeque::with_capacity(MARKS);
        marks.push_back((now, 0));
        Self {
            need: u64::from(streams.max(1)).saturating_mul(MESSAGES_PER_STREAM),
            marks,
            idle: false,
        }
    }

    /// The test had moved `messages` (in all, since its start) by `now`. Returns its new
    /// state when it changed: `Some(true)` when it turned idle, `Some(false)` busy again.
    pub fn observe(&mut self, now: Instant, messages: u64) -> Option<bool> {
        let newest = self.marks.back().map_or(now, |m| m.0);
        if now.saturating_duration_since(newest) >= MARK_EVERY {
            if self.marks.len() == MARKS {
                self.marks.pop_front();
            }
            self.marks.push_back((now, messages));
        }
        // The count at the window's start: the newest mark at or before it.
        let start = now.checked_sub(WINDOW)?;
        while self.marks.len() > 1 && self.marks[1].0 <= start {
            self.marks.pop_front();
        }
        let idle = match self.marks.front() {
            Some(&(t, then)) if t <= start => messages.saturating_sub(then) < self.need,
            // Younger than the window: in use.
            _ => false,
        };
        (idle != self.idle).then(|| {
            self.idle = idle;
            idle
        })
    }
}

/// Which idle tests to end so that `short` more bytes are free: the largest first, as few as
/// that takes; none when all of them would not free enough. `idle` is `(id, bytes held)`.
pub fn choose(mut idle: Vec<(u64, u64)>, short: u64) -> Vec<u64> {
    idle.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut freed = 0u64;
    let mut chosen = Vec::new();
    for (id, bytes) in idle {
        if freed >= short {
            break;
        }
        freed = freed.saturating_add(bytes);
        chosen.push(id);
    }
    if freed >= short {
        chosen
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_test_that_stops_moving_turns_idle_after_the_window_and_busy_when_it_moves() {
        let t0 = Instant::now();
        let mut w = UseWindow::new(t0, 4);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Moving 1 message a stream a second: in use.
        for s in 1..=20 {
            assert_eq!(w.observe(at(s), 4 * s), None, "at {s} s");
        }
        // Nothing more from 20 s: idle once the window holds fewer than 5 a stream (20).
        for s in 21..=25 {
            assert_eq!(w.observe(at(s), 80), None, "at {s} s");
        }
        assert_eq!(w.observe(at(26), 80), Some(true));
        assert_eq!(w.observe(at(31), 80), None);
        // Twenty messages in the window again: busy.
        assert_eq!(w.observe(at(32), 100), Some(false));
    }

    #[test]
    fn a_drip_that_passes_every_idle_limit_is_idle() {
        // The attack: 64 streams, a byte (no whole message) a stream every few
        // seconds.
        let t0 = Instant::now();
        let mut w = UseWindow::new(t0, 64);
        let mut changes = Vec::new();
        for ms in (0..60_000).step_by(100) {
            if let Some(c) = w.observe(t0 + Duration::from_millis(ms), 0) {
                changes.push((ms, c));
            }
        }
        assert_eq!(changes, vec![(10_000, true)]);
    }

    #[test]
    fn the_largest_idle_tests_are_ended_only_when_they_free_enough() {
        assert_eq!(choose(vec![(1, 10), (2, 30), (3, 20)], 45), vec![2, 3]);
        assert_eq!(choose(vec![(1, 10), (2, 30)], 41), Vec::<u64>::new());
        assert_eq!(choose(vec![(1, 10)], 0), Vec::<u64>::new());
        assert_eq!(choose(vec![], 1), Vec::<u64>::new());
    }

    proptest! {
        /// Whatever a test moves and however irregularly it is looked at (the driver looks at
        /// least once a second), it is idle exactly when it is older than the window and
        /// moved fewer than its need since a mark at most two mark steps older than the
        /// window's start: never idle while it moves its need in every window, always idle
        /// when it moved less over the window and two mark steps more.
        #[test]
        fn idle_means_too_few_messages_in_the_window(
            streams in 1u32..=64,
            steps in prop::collection::vec((1u64..=1_000, 0u64..=40), 1..400),
        ) {
            let t0 = Instant::now();
            let mut w = UseWindow::new(t0, streams);
            let need = u64::from(streams) * MESSAGES_PER_STREAM;
            let (mut now, mut total) = (t0, 0u64);
            let mut history = vec![(t0, 0u64)];
            let mut idle = false;
            for (gap_ms, moved) in steps {
                now += Duration::from_millis(gap_ms);
                total += moved;
                history.push((now, total));
                if let Some(c) = w.observe(now, total) {
                    prop_assert_ne!(c, idle, "a change that is none");
                    idle = c;
                }
                let Some(start) = now.checked_sub(WINDOW) else { continue };
                if now.duration_since(t0) < WINDOW {
                    prop_assert!(!idle, "idle before a whole window");
                    continue;
                }
                // Moved over a span a little longer than the window: at least the need
                // means busy. Moved over the window exactly, short of the need and with a
                // mark step to spare: idle.
                let at = |t: Instant| history.iter().rev().find(|h| h.0 <= t).map_or(0, |h| h.1);
                let wide = total - at(start.checked_sub(MARK_EVERY * 2).unwrap_or(t0));
                let narrow = total - at(start);
                if wide < need {
                    prop_assert!(idle, "moved {wide} of {need} in the window, not idle");
                }
                if narrow >= need {
                    prop_assert!(!idle, "moved {narrow} of {need} in the window, idle");
                }
            }
        }
    }
}
