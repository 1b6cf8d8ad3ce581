//! The receive loop every receiving role shares: close due intervals, look at stop, deadline,
//! silence and the drain, receive once, repeat; then close the last interval.
//!
//! A role says only how it receives ([`Receive`]); when it is done ([`Until`]) and the
//! checks between receives are the same for all, so they are written here once.

use std::sync::atomic::Ordering;

use wirebench_proto::results::IntervalRecord;

use super::count::{Count, Recorder, Snapshot};
use super::early_end::{early_stop, idle_limit_ns, RoleError};
use super::limit::over_counted;
use super::RoleParams;
use crate::Shared;

/// What one receive did.
pub(super) enum Flow {
    /// Data, or a timeout: go on.
    More,
    /// The peer closed its side: every message is in.
    Closed,
}

/// When a receiver is done without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// When the sender's count has arrived, or the drain time after its report has passed:
    /// datagrams may never come, and those still missing then are lost.
    Counted,
    /// When the peer closes its side (TCP): the drain time passing first is an error, as a
    /// byte stream loses nothing.
    Closed,
}

/// A receiving role's side of the loop.
pub(super) trait Receive {
    /// The totals so far: the loop's idle and drain checks read them.
    fn count(&self) -> &Count;

    /// Bytes this stream moved both ways, for the server's limits: what it received, and
    /// what it answered (rr and crr servers).
    fn moved(&self) -> u64 {
        self.count().bytes
    }

    /// Messages this stream moved both ways, for the server's `--max-pps`: what it
    /// received, and what it answered.
    fn packets(&self) -> u64 {
        self.count().messages
    }

    /// The totals as an interval closes (called once per interval, not per message).
    fn snapshot(&mut self) -> Snapshot;

    /// Waits for the next arrival, at most the socket's short timeout, and accounts for it.
    fn receive(&mut self, sh: &Shared, p: &RoleParams) -> Result<Flow, RoleError>;

    /// Settles what the loop's end leaves open (TCP: a last, shorter message), before the
    /// last interval closes.
    fn settle(&mut self) {}
}

/// Runs `r` until it is done as `until` says, or stops early; returns the intervals and why
/// it stopped early, if it did.
pub(super) fn run(
    r: &mut impl Receive,
    until: Until,
    p: &RoleParams,
    sh: &Shared,
) -> (Vec<IntervalRecord>, Option<RoleError>) {
    let mut rec = Recorder::of(p);
    let error = loop {
        let now = sh.now_ns();
        rec.tick(now, || r.snapshot());
        if let Some(end) = done(sh, p, r.count(), now, until) {
            break end;
        }
        if let Some(why) = over_counted(p.limit.as_ref(), r.moved(), r.packets(), now) {
            break Some(why);
        }
        match r.receive(sh, p) {
            Ok(Flow::More) => {}
            Ok(Flow::Closed) => break None,
            Err(e) => break Some(e),
        }
        r.count().publish(sh);
    };
    r.settle();
    let intervals = rec.finish(sh.now_ns(), || r.snapshot());
    (intervals, error)
}

/// Whether the loop ends now: `Some(None)` when the receiver is done as `until` says,
/// `Some(Some(why))` when it stops early (a stop, the deadline, a silent sender, data still
/// missing from a byte stream after the drain time).
#[inline]
fn done(
    sh: &Shared,
    p: &RoleParams,
    count: &Count,
    now_ns: u64,
    until: Until,
) -> Option<Option<RoleError>> {
    if let Some(why) =
        early_stop(sh, p, now_ns).or_else(|| idle_error(sh, p, count.last_ns, now_ns))
    {
        return Some(Some(why));
    }
    match until {
        Until::Counted => drained(sh, p, count.messages, now_ns).then_some(None),
        Until::Closed => drain_expired(sh, p, now_ns)
            .then_some(Some(RoleError::DrainExpired(p.spec.drain_ns / 1_000_000))),
    }
}

/// Receivers: an error once nothing arrived for the idle limit while the sender is not done.
fn idle_error(sh: &Shared, p: &RoleParams, last_ns: Option<u64>, now_ns: u64) -> Option<RoleError> {
    let limit = idle_limit_ns(&p.spec);
    let silent = now_ns.saturating_sub(last_ns.unwrap_or(0));
    (silent > limit && sh.peer_done_ns.load(Ordering::Relaxed) == u64::MAX)
        .then_some(RoleError::SenderSilent(silent / 1_000_000_000))
}

/// Receivers: true once the drain time after the sender's report has passed.
fn drain_expired(sh: &Shared, p: &RoleParams, now_ns: u64) -> bool {
    let done_ns = sh.peer_done_ns.load(Ordering::Relaxed);
    done_ns != u64::MAX && now_ns >= done_ns.saturating_add(p.spec.drain_ns)
}

/// Receivers: true once the sender's count is reached or the drain time has passed.
fn drained(sh: &Shared, p: &RoleParams, messages: u64, now_ns: u64) -> bool {
    messages >= sh.peer_messages.load(Ordering::Relaxed) || drain_expired(sh, p, now_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;

    use wirebench_proto::results::Datapath;
    use wirebench_proto::spec::{Protocol, TestSpec};

    const NS_PER_S: u64 = 1_000_000_000;

    use crate::sys::udp::Offloads;

    fn params(drain_ns: u64, deadline_ns: Option<u64>) -> RoleParams {
        RoleParams {
            spec: TestSpec::example()
                .protocol(Protocol::Udp)
                .size(100)
                .duration_ns(NS_PER_S)
                .drain_ns(drain_ns),
            deadline_ns,
            limit: None,
            hello: None,
            token: Default::default(),
            stream: 0,
            intervals: None,
            datapath: Datapath::default(),
            same_clock: true,
            packet_log: None,
            offloads: Offloads::default(),
            crr: None,
            file: None,
        }
    }

    fn shared() -> Shared {
        Shared::new(Instant::now(), 0, Arc::new(AtomicBool::new(false)))
    }

    /// A receiver that gets `left` messages of 100 bytes, one per receive, then closes or
    /// (with `close` false) only times out.
    #[derive(Default)]
    struct Script {
        count: Count,
        left: u64,
        close: bool,
        settled: bool,
    }

    impl Receive for Script {
        fn count(&self) -> &Count {
            &self.count
        }

        fn snapshot(&mut self) -> Snapshot {
            Snapshot::of(&self.count)
        }

        fn receive(&mut self, sh: &Shared, _p: &RoleParams) -> Result<Flow, RoleError> {
            if self.left > 0 {
                self.left -= 1;
                self.count.add(100, sh.now_ns());
                Ok(Flow::More)
            } else if self.close {
                Ok(Flow::Closed)
            } else {
                Ok(Flow::More)
            }
        }

        fn settle(&mut self) {
            self.settled = true;
        }
    }

    #[test]
    fn datagrams_end_once_the_senders_count_has_arrived() {
        let sh = shared();
        sh.peer_done(5);
        let p = params(u64::MAX, None);
        let mut r = Script {
            left: 10,
            ..Script::default()
        };
        let (intervals, error) = run(&mut r, Until::Counted, &p, &sh);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(r.count.messages, 5);
        assert!(r.settled);
        assert_eq!(intervals.iter().map(|i| i.messages).sum::<u64>(), 5);
        assert_eq!(
            sh.messages.load(Ordering::Relaxed),
            5,
            "progress is published"
        );
    }

    #[test]
    fn a_byte_stream_ends_when_the_peer_closes() {
        let sh = shared();
        let p = params(u64::MAX, None);
        let mut r = Script {
            left: 3,
            close: true,
            ..Script::default()
        };
        let (_, error) = run(&mut r, Until::Closed, &p, &sh);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(r.count.bytes, 300);
        assert!(r.settled);
    }

    #[test]
    fn a_byte_stream_still_open_after_the_drain_is_an_error() {
        let sh = shared();
        sh.peer_done(3);
        let p = params(0, None);
        let mut r = Script::default();
        let (_, error) = run(&mut r, Until::Closed, &p, &sh);
        assert!(
            matches!(error, Some(RoleError::DrainExpired(0))),
            "{error:?}"
        );
        // The same drain ends datagrams without an error: what is missing then is lost.
        let (_, error) = run(&mut r, Until::Counted, &p, &sh);
        assert!(error.is_none(), "{error:?}");
    }

    #[test]
    fn a_stop_or_the_servers_deadline_ends_the_loop() {
        let sh = shared();
        let mut r = Script::default();
        let (_, error) = run(&mut r, Until::Counted, &params(u64::MAX, Some(0)), &sh);
        assert!(
            matches!(error, Some(RoleError::ServerLimit(_))),
            "{error:?}"
        );
        sh.side_stop.store(true, Ordering::Relaxed);
        let (_, error) = run(&mut r, Until::Counted, &params(u64::MAX, None), &sh);
        assert!(matches!(error, Some(RoleError::Stopped)), "{error:?}");
    }
}
