//! The receive loop every receiving role shares: close due intervals, look at stop, deadline,
//! silence and the drain, receive once, repeat; then close the last interval.
//!
//! A role says only how it receives ([`Receive`]); when it is done ([`Until`]) and the
//! checks between receives are the same for all, so they are written here once.

use std::sync::atomic::Ordering;

use wirebench_proto::results::IntervalRecord;

use super::count::{Count, Recorder, Snapshot};
use super::end::{early_stop, idle_limit_ns, RoleError};
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
        match r.receive(sh, p) {
            Ok(Flow::More) => {}
            Ok(Flow::Closed) => break None,
            Err(e) => break Some(e),
        }
        let count = r.count();
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
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
