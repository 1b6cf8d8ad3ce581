//! How a running test's session ends when the server ends it: reclaimed for its idle memory,
//! and the last words it keeps for a client that fetches them.

use std::time::Duration;

use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::spec::TestSpec;

use super::pair::{spec, Pair};
use crate::server::ServerEvent;
use crate::SessionError;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn a_reclaimed_test_ends_its_session_soon_whatever_the_client_reads() {
    // A 90 s test of 16 streams with live lines every 10 ms: its report after 20 s is far
    // more than a client taking a byte every tick reads by the test's bound.
    let mut s = TestSpec::example()
        .streams(16)
        .interval_ns(10_000_000)
        .duration_ns(90_000_000_000);
    s.bytes = None;
    s.live_streams = true;
    let mut p = Pair::with(s);
    p.run = secs(90);
    p.server_intervals = Some(Duration::from_millis(10));
    p.run_for(secs(20));
    // A client that takes a byte a tick: never stalled long enough for the write deadline.
    p.client_read_plan = Some(vec![1]);
    let at = p.now;
    p.server.handle_event(p.now, ServerEvent::Reclaimed);
    p.run_for(secs(120));
    let closed = p.server_closed_at.expect("the session ended");
    assert!(
        closed - at <= crate::REPORT_GRACE + crate::server::STOP_GRACE,
        "ended {:?} after the reclaim",
        closed - at
    );
    let e = p.server_outcome.as_ref().and_then(|o| o.error.as_ref());
    assert_eq!(e.map(SessionError::kind), Some(ErrorKind::MaxMemory));
}

/// What the server keeps for a client that fetches its results (`control::shelf`): its
/// report as sent, after the reason when the test ended early; the client takes them as if
/// they had come on the control connection, and bytes that are not whole frames change
/// nothing.
#[test]
fn the_servers_last_words_are_its_report_after_its_reason() {
    let decode_all = |mut b: &[u8]| {
        let mut names = Vec::new();
        while let Ok(Some((m, n))) =
            wirebench_proto::control::decode(b, wirebench_proto::control::MAX_FRAME)
        {
            names.push(m.name());
            b = &b[n..];
        }
        names
    };
    let mut p = Pair::with(spec());
    p.run();
    let words = p.server.take_last_words().expect("the report was made");
    assert_eq!(decode_all(&words), ["done"]);
    assert_eq!(p.server.take_last_words(), None, "taken once");

    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(30_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(30);
    p.run_for(secs(2));
    p.server.handle_event(
        p.now,
        ServerEvent::Limit {
            kind: ErrorKind::MaxBytes,
            reason: "over --max-bytes".into(),
        },
    );
    p.run();
    let words = p.server.take_last_words().expect("the report was made");
    assert_eq!(decode_all(&words), ["error", "done"]);
}
