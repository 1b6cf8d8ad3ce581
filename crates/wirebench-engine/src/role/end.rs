//! Why a loop ends before its natural end: a stop, the server's deadline, a peer gone idle.

use wirebench_proto::spec::TestSpec;

use super::RoleParams;
use crate::Shared;

/// Why a loop ended early.
pub(super) fn early_stop(sh: &Shared, p: &RoleParams, now_ns: u64) -> Option<String> {
    if sh.stopped() {
        Some("stopped".into())
    } else if now_ns >= p.deadline_ns {
        Some("stopped at the server's --max-duration limit".into())
    } else {
        None
    }
}

/// How long a side waits without any progress from its peer (no data arriving, or a full
/// socket that never drains) before it gives up: the peer is stuck or gone. Long enough for
/// the slowest legitimate test: the message gap and an ack timeout on top of half a minute.
pub(super) fn idle_limit_ns(spec: &TestSpec) -> u64 {
    30_000_000_000 + spec.gap_ns + spec.ack_timeout_ns
}
