//! The receive loop every receiving role shares: close due intervals, look at stop, deadline,
//! silence and the drain, receive once, repeat; then close the last interval.

use std::sync::atomic::Ordering;

use super::count::Count;
use super::end::{early_stop, idle_limit_ns};
use super::RoleParams;
use crate::Shared;

/// Receivers: an error once nothing arrived for the idle limit while the sender is not done.
pub(super) fn idle_error(
    sh: &Shared,
    p: &RoleParams,
    last_ns: Option<u64>,
    now_ns: u64,
) -> Option<String> {
    let limit = idle_limit_ns(&p.spec);
    let silent = now_ns.saturating_sub(last_ns.unwrap_or(0));
    (silent > limit && sh.peer_done_ns.load(Ordering::Relaxed) == u64::MAX)
        .then(|| format!("no data from the sender for {} s", silent / 1_000_000_000))
}

/// Receivers: true once the drain time after the sender's report has passed.
pub(super) fn drain_expired(sh: &Shared, p: &RoleParams, now_ns: u64) -> bool {
    let done_ns = sh.peer_done_ns.load(Ordering::Relaxed);
    done_ns != u64::MAX && now_ns >= done_ns.saturating_add(p.spec.drain_ns)
}

/// Receivers: whether the loop ends now: `Some(None)` when every message arrived or the drain
/// time passed, `Some(Some(why))` when it stops early (a stop, the deadline, a silent sender).
pub(super) fn receiver_done(
    sh: &Shared,
    p: &RoleParams,
    count: &Count,
    now_ns: u64,
) -> Option<Option<String>> {
    if let Some(why) =
        early_stop(sh, p, now_ns).or_else(|| idle_error(sh, p, count.last_ns, now_ns))
    {
        return Some(Some(why));
    }
    drained(sh, p, count.messages, now_ns).then_some(None)
}

/// Receivers: true once the sender's count is reached or the drain time has passed.
pub(super) fn drained(sh: &Shared, p: &RoleParams, messages: u64, now_ns: u64) -> bool {
    messages >= sh.peer_messages.load(Ordering::Relaxed) || drain_expired(sh, p, now_ns)
}
