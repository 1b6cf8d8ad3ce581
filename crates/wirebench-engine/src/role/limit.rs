//! What one stream of a server's test may move, counted on the server's own socket: its
//! share of `--max-bytes` and of `--max-rate`, the rate over a short window so that a burst
//! cannot exceed it by much. The client's word (its spec) is checked at admission; this is
//! the check on what really moves, both ways (an rr server's responses count too).
//!
//! The state is a few `Cell`s read once per receive or send (a batch where the kernel
//! batches): no lock, no allocation, no system call on the data path.

use std::cell::Cell;

use wirebench_proto::units::{format_bytes, format_rate_bps};

use super::end::RoleError;

/// The window over which `--max-rate` is held.
pub(crate) const RATE_WINDOW_NS: u64 = 250_000_000;

/// A server's limits on what a test moves, for the whole test; [`MoveLimit::share`] gives
/// one stream its part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestLimits {
    /// `--max-bytes`: bytes moved both ways, all streams.
    pub max_bytes: Option<u64>,
    /// `--max-rate`: bits/s, all streams.
    pub max_rate_bps: Option<u64>,
}

/// One stream's share of [`TestLimits`], with the rate window's state.
#[derive(Debug, Clone)]
pub struct MoveLimit {
    test: TestLimits,
    max_bytes: Option<u64>,
    window_bytes: Option<u64>,
    window_start_ns: Cell<u64>,
    window_base: Cell<u64>,
}

impl MoveLimit {
    /// Stream's share of `test` among `streams`; `message_bytes` (the largest message both
    /// ways) is the burst a well-behaved peer may add to a window.
    pub fn share(test: TestLimits, streams: u32, message_bytes: u64) -> Self {
        let streams = u64::from(streams.max(1));
        // Four messages and 256 KiB of slack: a paced sender's message, a receive that
        // returns what the kernel coalesced. A window allows twice its share on top.
        let slack = message_bytes.saturating_mul(4).saturating_add(256 * 1024);
        let window_bytes = test.max_rate_bps.map(|bps| {
            let per_window = u128::from(bps / streams) * u128::from(RATE_WINDOW_NS) / 8_000_000_000;
            u64::try_from(per_window.saturating_mul(2))
                .unwrap_or(u64::MAX)
                .saturating_add(slack)
        });
        Self {
            test,
            max_bytes: test.max_bytes.map(|b| b / streams),
            window_bytes,
            window_start_ns: Cell::new(0),
            window_base: Cell::new(0),
        }
    }

    /// Why the stream must end, once it has moved `moved` bytes by `now_ns`.
    #[inline]
    pub(super) fn check(&self, moved: u64, now_ns: u64) -> Option<RoleError> {
        if let Some(max) = self.max_bytes {
            if moved > max {
                let max = self.test.max_bytes.unwrap_or(max);
                return Some(RoleError::OverLimit(format!(
                    "--max-bytes {}",
                    format_bytes(max)
                )));
            }
        }
        let window = self.window_bytes?;
        if now_ns.saturating_sub(self.window_start_ns.get()) >= RATE_WINDOW_NS {
            self.window_start_ns.set(now_ns);
            self.window_base.set(moved);
        } else if moved.saturating_sub(self.window_base.get()) > window {
            let max = self.test.max_rate_bps.unwrap_or(0);
            return Some(RoleError::OverLimit(format!(
                "--max-rate {}",
                format_rate_bps(max as f64)
            )));
        }
        None
    }
}

/// [`MoveLimit::check`] for an optional limit (clients have none).
#[inline]
pub(super) fn over(limit: Option<&MoveLimit>, moved: u64, now_ns: u64) -> Option<RoleError> {
    limit.and_then(|l| l.check(moved, now_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_shared_between_streams_and_counted_on_what_moved() {
        let t = TestLimits {
            max_bytes: Some(1_000_000),
            max_rate_bps: None,
        };
        let l = MoveLimit::share(t, 2, 1000);
        assert!(l.check(500_000, 0).is_none());
        let e = l
            .check(500_001, 1)
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("--max-bytes 1"), "{e}");
    }

    #[test]
    fn a_burst_over_the_rate_window_ends_the_stream_and_a_paced_one_does_not() {
        // 8 Mbit/s: 250 kB a window, twice that and the slack allowed.
        let t = TestLimits {
            max_bytes: None,
            max_rate_bps: Some(8_000_000),
        };
        let l = MoveLimit::share(t, 1, 1000);
        let mut moved = 0;
        for w in 0..40u64 {
            moved += 250_000;
            assert!(l.check(moved, w * RATE_WINDOW_NS).is_none(), "window {w}");
        }
        let burst = moved + 2 * 250_000 + 300 * 1024;
        let e = l
            .check(burst, 40 * RATE_WINDOW_NS - 1)
            .map(|e| e.to_string());
        assert!(e.unwrap_or_default().contains("--max-rate"));
    }
}
