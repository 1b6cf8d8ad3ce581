//! What one stream of a server's test may move, counted on the server's own socket: its
//! share of `--max-bytes` and of `--max-rate`, the rate over a short window so that a burst
//! cannot exceed it by much. The client's word (its spec) is checked at admission; this is
//! the check on what really moves, both ways (an rr server's responses count too).
//!
//! `--max-pps` is held the same way on the messages a stream moves (datagrams over UDP, each
//! request and each response of rr): tiny messages cannot turn a byte limit into a flood of
//! packets.
//!
//! The state is a few `Cell`s read once per receive or send (a batch where the kernel
//! batches): no lock, no allocation, no system call on the data path.

use std::cell::Cell;

use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::units::{format_bytes, format_rate_bps};

use super::early_end::RoleError;

/// The window over which `--max-rate` and `--max-pps` are held.
pub(crate) const RATE_WINDOW_NS: u64 = 250_000_000;

/// Messages a window may carry beyond twice its share of `--max-pps`: two of the largest
/// batches a call moves (32 messages of up to 64 GSO or GRO segments each).
const PACKET_SLACK: u64 = 2 * 32 * 64;

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
    /// `--max-pps` for the whole test, and this stream's messages a window may carry.
    packets: Option<(u64, u64)>,
    packets_start_ns: Cell<u64>,
    packets_base: Cell<u64>,
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
            packets: None,
            packets_start_ns: Cell::new(0),
            packets_base: Cell::new(0),
        }
    }

    /// The same share, with the stream's part of `max_pps` (messages per second over all
    /// `streams`) held over the rate window as bytes are.
    #[must_use]
    pub fn with_packets(mut self, max_pps: Option<u64>, streams: u32) -> Self {
        self.packets = max_pps.map(|pps| {
            let share = pps / u64::from(streams.max(1));
            let per_window = u128::from(share) * u128::from(RATE_WINDOW_NS) / 1_000_000_000;
            let window = u64::try_from(per_window.saturating_mul(2))
                .unwrap_or(u64::MAX)
                .saturating_add(PACKET_SLACK);
            (pps, window)
        });
        self
    }

    /// [`check`](Self::check), and `--max-pps` on the `packets` (messages) moved by `now`.
    #[inline]
    pub(super) fn check_counted(&self, moved: u64, packets: u64, now_ns: u64) -> Option<RoleError> {
        if let Some((pps, window)) = self.packets {
            if now_ns.saturating_sub(self.packets_start_ns.get()) >= RATE_WINDOW_NS {
                self.packets_start_ns.set(now_ns);
                self.packets_base.set(packets);
            } else if packets.saturating_sub(self.packets_base.get()) > window {
                return Some(RoleError::OverLimit {
                    kind: ErrorKind::MaxPps,
                    value: pps.to_string(),
                });
            }
        }
        self.check(moved, now_ns)
    }

    /// Why the stream must end, once it has moved `moved` bytes by `now_ns`.
    #[inline]
    pub(super) fn check(&self, moved: u64, now_ns: u64) -> Option<RoleError> {
        if let Some(max) = self.max_bytes {
            if moved > max {
                let max = self.test.max_bytes.unwrap_or(max);
                return Some(RoleError::OverLimit {
                    kind: ErrorKind::MaxBytes,
                    value: format_bytes(max),
                });
            }
        }
        let window = self.window_bytes?;
        if now_ns.saturating_sub(self.window_start_ns.get()) >= RATE_WINDOW_NS {
            self.window_start_ns.set(now_ns);
            self.window_base.set(moved);
        } else if moved.saturating_sub(self.window_base.get()) > window {
            let max = self.test.max_rate_bps.unwrap_or(0);
            return Some(RoleError::OverLimit {
                kind: ErrorKind::MaxRate,
                value: format_rate_bps(max as f64),
            });
        }
        None
    }
}

/// [`MoveLimit::check_counted`] for an optional limit (clients have none).
#[inline]
pub(super) fn over_counted(
    limit: Option<&MoveLimit>,
    moved: u64,
    packets: u64,
    now_ns: u64,
) -> Option<RoleError> {
    limit.and_then(|l| l.check_counted(moved, packets, now_ns))
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

    #[test]
    fn a_flood_of_tiny_messages_is_ended_at_max_pps_and_a_paced_one_is_not() {
        // 10,000 messages/s over 2 streams: 1,250 a window for each, twice that and the
        // slack allowed.
        let l = MoveLimit::share(TestLimits::default(), 2, 1).with_packets(Some(10_000), 2);
        let mut packets = 0;
        for w in 0..40u64 {
            packets += 1_250;
            let now = w * RATE_WINDOW_NS;
            assert!(
                l.check_counted(packets, packets, now).is_none(),
                "window {w}"
            );
        }
        let flood = packets + 2 * 1_250 + PACKET_SLACK + 1;
        let e = l.check_counted(flood, flood, 40 * RATE_WINDOW_NS - 1);
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("--max-pps 10000"), "{e}");
        // Bytes alone never trip it, and no limit is no check.
        let none = MoveLimit::share(TestLimits::default(), 1, 1).with_packets(None, 1);
        assert!(none.check_counted(u64::MAX, u64::MAX, 1).is_none());
    }

    #[test]
    fn extreme_packet_limits_do_not_overflow() {
        for pps in [0, 1, u64::from(u32::MAX), u64::MAX] {
            for streams in [0, 1, u32::MAX] {
                let l = MoveLimit::share(TestLimits::default(), streams, u64::MAX)
                    .with_packets(Some(pps), streams);
                let _ = l.check_counted(u64::MAX, u64::MAX, u64::MAX);
                let _ = l.check_counted(0, 0, 0);
            }
        }
    }
}
