//! What the driver tells the sessions and what they decide for it: events it repeats
//! every round (a shutdown, a Ctrl-C) are acted on once, roles that cannot start end the
//! test with their reason, the server's roles stop at a deadline the session sets, and a
//! data connection the driver hands over late does not lose what overtook it.

use std::time::Duration;
use wirebench_proto::error_kind::ErrorKind;

use super::pair::{client_params, server_params, slots, spec, Pair};
use super::secs;
use crate::admission::{Admission, SpecLimits, DEFAULT_MAX_DURATION};
use crate::client::{ClientAction, ClientEvent};
use crate::server::{ServerAction, ServerEvent};
use crate::RunAction;

/// The driver says "shutting down" on every round until the end: the session acts once.
#[test]
fn a_shutdown_said_every_round_is_told_once() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(30_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(30);
    p.run_for(secs(2));
    for _ in 0..5 {
        p.server.handle_event(p.now, ServerEvent::Shutdown);
        let next = p.elapsed() + Duration::from_millis(50);
        p.run_for(next);
    }
    p.run();
    let stops = p
        .server_actions
        .iter()
        .filter(|a| **a == ServerAction::Run(RunAction::StopRoles))
        .count();
    assert_eq!(stops, 1, "{:?}", p.server_actions);
    assert_eq!(
        p.client_error(),
        "peer reported: the server is shutting down"
    );
    assert!(p.elapsed() < secs(3));
}

/// A user's Ctrl-C is seen on every round after it: the session stops the roles once
/// and still exchanges what was measured.
#[test]
fn an_interrupt_said_every_round_stops_once() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(60_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(60);
    p.run_for(secs(2));
    for _ in 0..5 {
        p.client.handle_event(p.now, ClientEvent::Interrupt);
        let next = p.elapsed() + Duration::from_millis(50);
        p.run_for(next);
    }
    p.run();
    let stops = p
        .client_actions
        .iter()
        .filter(|a| **a == ClientAction::Run(RunAction::StopRoles))
        .count();
    assert_eq!(stops, 1, "{:?}", p.client_actions);
    let c = p.client_outcome.as_ref().unwrap();
    assert!(c.interrupted && c.error.is_none(), "{:?}", c.error);
    assert!(c.peer.is_some());
}

/// Roles that cannot start end the test with their reason in this side's report, which
/// the peer gets as any other.
#[test]
fn roles_that_cannot_start_end_the_test_with_their_reason() {
    let mut p = Pair::with(spec());
    p.server_roles.hang = true;
    while p.server_roles.started.is_none() {
        let next = p.elapsed() + Duration::from_millis(1);
        p.run_for(next);
    }
    let reason = "starting a role: no threads left".to_string();
    p.server.handle_event(
        p.now,
        ServerEvent::RolesFailed {
            reason: reason.clone(),
            kind: ErrorKind::Io,
        },
    );
    p.run();
    let s = p.server_outcome.as_ref().unwrap();
    assert_eq!(
        s.local.as_ref().and_then(|l| l.error.clone()),
        Some(reason.clone())
    );
    let c = p.client_outcome.as_ref().unwrap();
    assert_eq!(c.peer.as_ref().and_then(|r| r.error.clone()), Some(reason));
    assert_eq!(
        c.peer.as_ref().and_then(|r| r.error_kind),
        Some(ErrorKind::Io)
    );
}

/// The server's roles stop by themselves at its longest test and the test's drain,
/// whatever the client asked: `--max-duration` when set, else the documented ceiling.
#[test]
fn the_servers_roles_stop_at_its_longest_test_and_the_drain() {
    let drain_ns = spec().drain_ns;
    let limits = SpecLimits {
        max_duration: Some(secs(20)),
        ..SpecLimits::default()
    };
    for (limits, longest) in [
        (limits, secs(20)),
        (SpecLimits::default(), DEFAULT_MAX_DURATION),
    ] {
        let mut p = Pair::new(
            client_params(spec(), None),
            server_params(limits, None, "5eed"),
            Admission::new(slots(4)),
        );
        p.run_for(Duration::from_millis(1));
        assert!(p.server.spec().is_some());
        let want = u64::try_from(longest.as_nanos()).unwrap() + drain_ns;
        assert_eq!(p.server.role_deadline_ns(), want);
    }
}

#[test]
fn a_short_test_that_ends_before_the_server_sees_its_stream_completes() {
    // A 1 MB test on loopback ends in a millisecond: the client's counts and report can
    // reach the control session before the driver hands it the data connection.
    let mut p = Pair::with(spec());
    p.hold_arrivals = true;
    p.run_for(Duration::from_secs(5));
    assert!(p.server_outcome.is_none(), "{}", p.server_error());
    assert!(!p.held_arrivals.is_empty(), "the stream was held");
    p.release_arrivals();
    p.run();
    assert_eq!(p.client_error(), "", "client");
    assert_eq!(p.server_error(), "", "server");
}

/// A client that sends a second report before its last stream reaches the session is
/// refused: the session holds one report at most, what the test's memory reserve covers.
#[test]
fn a_second_early_report_is_refused_not_held() {
    let mut p = Pair::with(spec());
    p.hold_arrivals = true;
    p.run_for(Duration::from_secs(5));
    assert!(p.server_outcome.is_none(), "{}", p.server_error());
    // The client's report is held; a copy of it is one report too many.
    let report = wirebench_proto::control::Message::Done {
        report: Box::default(),
    };
    let frame = wirebench_proto::control::encode(&report).expect("encodes");
    p.inject_to_server(&frame);
    p.run_for(Duration::from_secs(6));
    assert!(
        p.server_error()
            .contains("unexpected control message during set-up: done"),
        "{}",
        p.server_error()
    );
}
