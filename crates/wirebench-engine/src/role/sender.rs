//! What a sender decides before each message: stop, done, or wait for the pacer.

use wirebench_proto::spec::TestSpec;

use super::count::{Count, Recorder, Snapshot};
use super::early_end::{early_stop, RoleError};
use super::limit::over_counted;
use super::{RoleParams, POLL};
use crate::pace::{wait_until, Pacer};
use crate::Shared;

/// The amount left to send: the next message's length, or `None` when done.
pub(super) fn next_len(spec: &TestSpec, sent: &Count, now_ns: u64) -> Option<u64> {
    match (spec.bytes, spec.duration_ns) {
        (Some(total), _) => {
            let left = total.saturating_sub(sent.bytes);
            (left > 0).then(|| left.min(spec.size))
        }
        (None, Some(d)) => (now_ns < d).then_some(spec.size),
        (None, None) => None,
    }
}

/// Waits for the pacer; returns false if the wait was cut short to look at the clock again.
pub(super) fn pace(pacer: &mut Pacer, sh: &Shared, now_ns: u64) -> bool {
    if pacer.unlimited() {
        return true;
    }
    let due = pacer.next_ns(now_ns);
    wait_for(sh, now_ns, due)
}

/// Waits until `due` (ns since the start), in slices so that a stop or an interval boundary
/// is not missed during long gaps; true when `due` has come.
pub(super) fn wait_for(sh: &Shared, now_ns: u64, due: u64) -> bool {
    if due <= now_ns {
        return true;
    }
    let slice_end = now_ns + POLL.as_nanos() as u64;
    wait_until(sh.start, due.min(slice_end));
    due <= slice_end
}

/// Sleeps until `due` (ns since the start), at most one slice as [`wait_for`], without
/// spinning the last stretch: for a sender that sends in batches, where a late wake-up
/// only makes the next batch larger (it takes all that fell due, within the pacer's
/// catch-up bound), so that a spin would buy nothing and take a core from a receiver or an
/// emulator on the same machine. Measured through a 10 Gbit/s lab link: a quarter less CPU
/// for the whole lab (BENCHMARKS.md, "Richer links and 10 Gbit/s").
pub(super) fn sleep_for(now_ns: u64, due: u64) {
    if due > now_ns {
        let until = due.min(now_ns + POLL.as_nanos() as u64);
        std::thread::sleep(std::time::Duration::from_nanos(until - now_ns));
    }
}

/// What a sender does next.
pub(super) enum Step {
    /// Send a message of this many bytes now.
    Send(u64),
    /// Nothing yet: the pacer cut its wait short to look at the clock again.
    Again,
    /// The sender is done; with the reason if it stopped early.
    Done(Option<RoleError>),
}

/// Closes due intervals, then decides whether the next message goes now.
pub(super) fn next_step(
    rec: &mut Recorder,
    pacer: &mut Pacer,
    sh: &Shared,
    p: &RoleParams,
    count: &Count,
    snap: &dyn Fn(&Count) -> Snapshot,
) -> Step {
    let now = sh.now_ns();
    rec.tick(now, || snap(count));
    if let Some(why) = early_stop(sh, p, now)
        .or_else(|| over_counted(p.limit.as_ref(), count.bytes, count.messages, now))
    {
        return Step::Done(Some(why));
    }
    let Some(len) = next_len(&p.spec, count, now) else {
        return Step::Done(None);
    };
    if pace(pacer, sh, now) {
        Step::Send(len)
    } else {
        Step::Again
    }
}
