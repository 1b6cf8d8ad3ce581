//! The control protocol driven in memory, in virtual time: a client session against a
//! server session (`pair`), or a server session fed raw bytes. No socket, no thread, no
//! sleep: each test runs in microseconds, inside a network namespace with no interface too.

mod admission;
mod driver;
mod ending;
mod hostile;
mod limits;
pub(super) mod pair;
mod peers;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use wirebench_proto::control::{encode, Message, MAX_HELLO_FRAME, PROTOCOL_VERSION};
use wirebench_proto::results::Role;
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use super::admission::{Admission, Refusal, SlotLimits, SpecLimits};
use super::client::{ClientAction, ClientEvent};
use super::server::{ServerAction, ServerEvent};
use super::Session;
use super::SessionError;
use super::{RunAction, REPORT_GRACE, SETUP_TIMEOUT, WRITE_TIMEOUT};
use pair::{client_params, key, server_params, slots, spec, Lone, Pair, CLIENT_IP, SENT};
use wirebench_proto::error_kind::ErrorKind;

const SECOND: Duration = Duration::from_secs(1);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn start_frame(spec: &TestSpec, version: u32, nonce: &str) -> Vec<u8> {
    encode(&Message::Start {
        version,
        tool: "wirebench test".into(),
        spec: spec.clone(),
        host_id: String::new(),
        nonce: nonce.into(),
    })
    .expect("encodes")
}

/// A pair whose server has these limits, run to the end; the client's error.
fn refused_by_limits(limits: SpecLimits, spec: TestSpec) -> (Pair, String) {
    let mut p = Pair::new(
        client_params(spec, None),
        server_params(limits, None, "5eed"),
        Admission::new(slots(4)),
    );
    p.run();
    let err = p.client_error();
    (p, err)
}

fn assert_refused(p: &Pair, err: &str, needle: &str) {
    assert!(err.starts_with("server refused the test: "), "{err}");
    assert!(err.contains(needle), "{err}");
    let o = p.client_outcome.as_ref().expect("the client is done");
    assert!(!o.started());
    let refusal = p.server_outcome.as_ref().and_then(|o| o.refusal.as_ref());
    let refusal = refusal.expect("the server refused");
    // The client reads the refusal's kind off the wire, not off its words.
    assert!(
        matches!(&o.error, Some(SessionError::Refused { kind, .. }) if *kind == refusal.error_kind()),
        "{:?}",
        o.error
    );
    assert!(p.admission.running() == 0, "no slot is left taken");
}

// --- the good path ---

#[test]
fn a_tcp_test_runs_and_both_reports_are_exchanged() {
    let mut p = Pair::with(spec());
    p.run();
    let (c, s) = (
        p.client_outcome.as_ref().unwrap(),
        p.server_outcome.as_ref().unwrap(),
    );
    assert!(
        c.error.is_none() && s.error.is_none(),
        "{:?} {:?}",
        c.error,
        s.error
    );
    assert!(c.started() && s.started());
    assert_eq!(c.peer.as_ref().map(|r| r.role), Some(Some(Role::Receiver)));
    assert_eq!(s.peer.as_ref().map(|r| r.messages), Some(SENT));
    // The server's receiver learnt what the client's sender sent, from its report.
    assert_eq!(p.server_roles.peer_counts, vec![(0, SENT)]);
    assert_eq!(p.admission.running(), 0);
    let begun = p
        .client_actions
        .iter()
        .position(|a| *a == ClientAction::StartRoles);
    assert!(begun.is_some());
    assert!(p.server_actions.contains(&ServerAction::StreamsReady));
}

#[test]
fn a_data_port_in_the_accept_reaches_the_client_and_is_left_out_when_absent() {
    // A server whose test traffic goes through a user-space stack takes data connections
    // on a port of their own; the client learns it from the accept.
    let mut p = Pair::with(spec());
    p.data_port = Some(5301);
    p.run();
    assert!(p.client_error().is_empty(), "{}", p.client_error());
    assert!(p.client_actions.iter().any(|a| matches!(
        a,
        ClientAction::Accepted {
            tcp_port: Some(5301),
            ..
        }
    )));
    // Without one the field is not on the wire: older clients see the accept they know.
    let accept = Message::Accept {
        cookie: 1,
        udp_port: 5201,
        tcp_port: None,
        tool: "wirebench".into(),
        host_id: String::new(),
        bytes: None,
        server_mac: None,
    };
    let frame = String::from_utf8_lossy(&encode(&accept).unwrap()).into_owned();
    assert!(!frame.contains("tcp_port"), "{frame}");
}

#[test]
fn udp_hellos_are_resent_every_100ms_until_confirmed() {
    let mut s = spec();
    s.protocol = Protocol::Udp;
    s.streams = 2;
    let mut p = Pair::with(s);
    p.lose_hellos = 3;
    p.run();
    assert!(p.client_error().is_empty(), "{}", p.client_error());
    assert_eq!(p.hellos_sent, 5, "3 lost + 1 for each stream");
    assert!(p.client_outcome.as_ref().unwrap().peer.is_some());
}

#[test]
fn bidir_sides_tell_each_other_their_senders_counts_per_stream() {
    let mut s = spec();
    s.direction = Direction::Bidir;
    let mut p = Pair::with(s);
    p.run();
    assert!(p.client_error().is_empty(), "{}", p.client_error());
    assert!(p.server_error().is_empty(), "{}", p.server_error());
    // Stream 0 goes forward (the server receives it), stream 1 back (the client does).
    assert!(p.server_roles.peer_counts.contains(&(0, SENT)));
    assert!(p.client_roles.peer_counts.contains(&(1, SENT)));
    assert!(p.client_roles.peer_counts.iter().all(|c| c.0 == 1));
    assert!(p.server_roles.peer_counts.iter().all(|c| c.0 == 0));
}

#[test]
fn a_reverse_test_gets_the_servers_counts_from_its_report() {
    let mut s = spec();
    s.direction = Direction::Reverse;
    s.streams = 3;
    let mut p = Pair::with(s);
    p.run();
    assert!(p.client_error().is_empty(), "{}", p.client_error());
    assert_eq!(
        p.client_roles.peer_counts.len(),
        3,
        "each receiver its count"
    );
}

#[test]
fn an_interrupted_client_stops_and_still_exchanges_results() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(60_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(60);
    p.run_for(secs(2));
    p.client.handle_event(p.now, ClientEvent::Interrupt);
    p.run();
    let c = p.client_outcome.as_ref().unwrap();
    assert!(c.interrupted && c.error.is_none(), "{:?}", c.error);
    assert!(c.peer.is_some());
    assert!(p.elapsed() < secs(10));
}

// --- the key ---

#[test]
fn the_right_key_runs_and_the_server_proves_it_too() {
    let mut p = Pair::new(
        client_params(spec(), Some(key("right"))),
        server_params(SpecLimits::default(), Some(key("right")), "5eed"),
        Admission::new(slots(4)),
    );
    p.run();
    assert!(p.client_error().is_empty(), "{}", p.client_error());
}

#[test]
fn a_wrong_key_is_refused() {
    let mut p = Pair::new(
        client_params(spec(), Some(key("wrong"))),
        server_params(SpecLimits::default(), Some(key("right")), "5eed"),
        Admission::new(slots(4)),
    );
    p.run();
    assert_refused(&p, &p.client_error(), "wrong pre-shared key");
    assert_eq!(
        p.server_outcome.as_ref().unwrap().refusal,
        Some(Refusal::AuthFailed)
    );
}

#[test]
fn a_recorded_auth_replayed_against_a_new_challenge_is_refused() {
    let k = key("right");
    let limits = SpecLimits::default();
    // Record an honest exchange.
    let mut honest = Lone::new(server_params(limits.clone(), Some(k.clone()), "nonce-one"));
    honest.feed(
        Duration::ZERO,
        &start_frame(&spec(), PROTOCOL_VERSION, "c0ffee"),
    );
    let Some(Message::Challenge { nonce }) = honest.sent.first().cloned() else {
        panic!("a challenge: {:?}", honest.sent);
    };
    let auth = encode(&Message::Auth {
        mac: k.client_mac("c0ffee", &nonce, &serde_json::to_string(&spec()).unwrap()),
    })
    .unwrap();
    honest.feed(Duration::ZERO, &auth);
    assert_eq!(
        honest.server.poll_action(),
        Some(ServerAction::Identified {
            tool: "wirebench test".into(),
            host_id: String::new()
        })
    );
    assert_eq!(honest.server.poll_action(), Some(ServerAction::Admit));
    // Replay both frames to a server that draws another nonce.
    let mut replay = Lone::new(server_params(limits, Some(k), "nonce-two"));
    replay.feed(
        Duration::ZERO,
        &start_frame(&spec(), PROTOCOL_VERSION, "c0ffee"),
    );
    replay.feed(Duration::ZERO, &auth);
    assert!(
        matches!(replay.sent.last(), Some(Message::Refuse { reason, error_kind: Some(ErrorKind::Auth) }) if reason.contains("wrong pre-shared key"))
    );
    assert!(replay.server.is_closed());
    assert_eq!(
        replay.server.outcome().unwrap().refusal,
        Some(Refusal::AuthFailed)
    );
}

#[test]
fn a_server_with_a_key_tells_a_client_without_one_what_to_do() {
    let mut p = Pair::new(
        client_params(spec(), None),
        server_params(SpecLimits::default(), Some(key("right")), "5eed"),
        Admission::new(slots(4)),
    );
    p.run();
    assert!(
        p.client_error().contains("--psk-file or WIREBENCH_PSK"),
        "{}",
        p.client_error()
    );
    assert!(p.elapsed() < SECOND, "at once, not after a timeout");
    assert!(matches!(
        p.server_outcome.as_ref().unwrap().error,
        Some(SessionError::PeerClosed)
    ));
}

#[test]
fn a_client_with_a_key_refuses_a_server_that_cannot_prove_it() {
    let mut p = Pair::new(
        client_params(spec(), Some(key("right"))),
        server_params(SpecLimits::default(), None, "5eed"),
        Admission::new(slots(4)),
    );
    p.run();
    assert!(
        p.client_error().contains("did not prove"),
        "{}",
        p.client_error()
    );
    assert!(!p.client_outcome.as_ref().unwrap().started());
}

// --- refusal by each limit ---

#[test]
fn another_protocol_version_is_refused_naming_both() {
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "5eed"));
    lone.feed(
        Duration::ZERO,
        &start_frame(&spec(), PROTOCOL_VERSION + 7, ""),
    );
    let Some(Message::Refuse {
        reason,
        error_kind: Some(ErrorKind::Version),
    }) = lone.sent.last()
    else {
        panic!("{:?}", lone.sent)
    };
    assert!(
        reason.contains(&format!("speaks control protocol {}", PROTOCOL_VERSION + 7)),
        "{reason}"
    );
    assert!(
        reason.contains(&format!("speaks {PROTOCOL_VERSION}")),
        "{reason}"
    );
    assert!(matches!(
        lone.server.outcome().unwrap().refusal,
        Some(Refusal::Version { .. })
    ));
}

#[test]
fn a_full_server_refuses_with_max_tests() {
    let mut p = Pair::new(
        client_params(spec(), None),
        server_params(SpecLimits::default(), None, "5eed"),
        Admission::new(slots(1)),
    );
    let held = p
        .admission
        .admit(p.now, IpAddr::V4(Ipv4Addr::LOCALHOST))
        .unwrap();
    p.run();
    let err = p.client_error();
    assert!(
        err.contains("server busy: 1 tests running, the limit is 1 (--max-tests)"),
        "{err}"
    );
    // A sweep retries on the kind the server sent, whatever its words.
    let kind = p.client_outcome.as_ref().and_then(|o| o.error.as_ref());
    assert_eq!(kind.map(SessionError::kind), Some(ErrorKind::Busy));
    p.admission.release(held);
    assert_eq!(p.admission.running(), 0);
}

#[test]
fn a_client_at_its_share_is_refused_with_max_tests_per_client() {
    let limits = SlotLimits {
        max_tests: 10,
        per_client: Some(1),
        per_minute: None,
    };
    let mut p = Pair::new(
        client_params(spec(), None),
        server_params(SpecLimits::default(), None, "n"),
        Admission::new(limits),
    );
    let held = p.admission.admit(p.now, CLIENT_IP).unwrap();
    p.run();
    let err = p.client_error();
    assert!(
        err.contains("192.0.2.7 already runs 1 tests") && err.contains("--max-tests-per-client"),
        "{err}"
    );
    p.admission.release(held);
}

#[test]
fn a_client_over_its_starts_per_minute_is_refused() {
    let limits = SlotLimits {
        max_tests: 10,
        per_client: None,
        per_minute: Some(2),
    };
    let mut p = Pair::new(
        client_params(spec(), None),
        server_params(SpecLimits::default(), None, "n"),
        Admission::new(limits),
    );
    for _ in 0..2 {
        let t = p.admission.admit(p.now, CLIENT_IP).unwrap();
        p.admission.release(t);
    }
    p.run();
    let err = p.client_error();
    assert!(
        err.contains("started 2 tests in the last minute, the limit is 2 (--max-tests-per-minute)"),
        "{err}"
    );
}

#[test]
fn max_duration_refuses_a_longer_test() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(20_000_000_000);
    let limits = SpecLimits {
        max_duration: Some(secs(2)),
        ..SpecLimits::default()
    };
    let (p, err) = refused_by_limits(limits, s);
    assert_refused(&p, &err, "exceeds the server's --max-duration");
    assert!(err.contains("--time 20"), "{err}");
}

#[test]
fn max_rate_refuses_the_sum_of_the_streams_and_an_unlimited_rate() {
    let mut s = spec();
    s.rate_bps = Some(60_000_000);
    s.streams = 2;
    let limits = SpecLimits {
        max_rate_bps: Some(100_000_000),
        ..SpecLimits::default()
    };
    let (p, err) = refused_by_limits(limits.clone(), s);
    assert_refused(&p, &err, "exceeds the server's --max-rate");
    let (p, err) = refused_by_limits(limits, spec());
    assert_refused(&p, &err, "an unlimited rate was asked");
}

#[test]
fn max_bytes_refuses_too_much_and_an_unbounded_test() {
    let mut s = spec();
    s.bytes = Some(100_000_000);
    let limits = SpecLimits {
        max_bytes: Some(10_000_000),
        ..SpecLimits::default()
    };
    let (p, err) = refused_by_limits(limits.clone(), s);
    assert_refused(&p, &err, "would exceed the server's --max-bytes");
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(1_000_000_000);
    let (p, err) = refused_by_limits(limits, s);
    assert_refused(&p, &err, "an unbounded test was asked");
}

#[test]
fn max_streams_refuses_more_streams() {
    let mut s = spec();
    s.streams = 20;
    let limits = SpecLimits {
        max_streams: Some(2),
        ..SpecLimits::default()
    };
    let (p, err) = refused_by_limits(limits, s);
    assert_refused(&p, &err, "20 streams exceed the server's --max-streams 2");
}

#[test]
fn max_size_refuses_larger_messages() {
    let mut s = spec();
    s.size = 100_000;
    let limits = SpecLimits {
        max_size: Some(10_000),
        ..SpecLimits::default()
    };
    let (p, err) = refused_by_limits(limits, s);
    assert_refused(
        &p,
        &err,
        "messages of 100000 bytes exceed the server's --max-size 10000",
    );
}

#[test]
fn a_server_shutting_down_refuses_new_tests() {
    let mut p = Pair::with(spec());
    p.shutting_down = true;
    p.run();
    assert_refused(&p, &p.client_error(), "the server is shutting down");
}

// --- every wait has its deadline ---

#[test]
fn a_silent_connection_is_closed_after_the_setup_timeout() {
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
    assert_eq!(lone.server.poll_timeout(), Some(lone.base + SETUP_TIMEOUT));
    lone.advance(SETUP_TIMEOUT - Duration::from_millis(1));
    assert!(!lone.server.is_closed());
    lone.advance(SETUP_TIMEOUT);
    assert!(lone.server.is_closed());
    assert!(
        matches!(lone.sent.last(), Some(Message::Error { reason, error_kind: Some(ErrorKind::Timeout) }) if reason.contains("first message"))
    );
}

#[test]
fn half_a_message_is_read_exactly_and_times_out() {
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
    assert_eq!(lone.server.read_limit(), 4, "the length prefix first");
    lone.feed(Duration::ZERO, &[0, 0]);
    assert_eq!(lone.server.read_limit(), 2);
    lone.feed(Duration::ZERO, &[0, 40]);
    assert_eq!(lone.server.read_limit(), 40, "then the frame, no byte more");
    lone.feed(SECOND, b"{\"type\":");
    lone.advance(SETUP_TIMEOUT);
    assert!(lone.server.is_closed());
    assert!(
        matches!(lone.server.outcome().unwrap().error, Some(SessionError::Timeout(w)) if w.contains("first message"))
    );
}

#[test]
fn an_attach_is_routed_and_nothing_behind_it_is_read() {
    let frame = encode(&Message::Attach {
        version: PROTOCOL_VERSION,
        cookie: 42,
        stream: 3,
    })
    .unwrap();
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
    let mut read = 0;
    while !lone.server.is_closed() {
        let n = lone.server.read_limit().min(frame.len() - read);
        lone.feed(Duration::ZERO, &frame[read..read + n]);
        read += n;
    }
    assert_eq!(read, frame.len());
    assert_eq!(
        lone.server.poll_action(),
        Some(ServerAction::Attach {
            cookie: 42,
            stream: 3
        })
    );
    assert!(lone.sent.is_empty());
}

#[test]
fn garbage_oversized_or_out_of_order_first_frames_get_an_error() {
    let too_big = ((MAX_HELLO_FRAME + 1) as u32).to_be_bytes().to_vec();
    let begin = encode(&Message::Begin).unwrap();
    let junk = [&5u32.to_be_bytes()[..], b"{nope"].concat();
    for bytes in [too_big, begin, junk] {
        let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
        lone.feed(Duration::ZERO, &bytes);
        assert!(lone.server.is_closed(), "{bytes:?}");
        assert!(
            matches!(lone.sent.last(), Some(Message::Error { .. })),
            "{:?}",
            lone.sent
        );
    }
}

#[test]
fn a_client_that_vanishes_mid_test_is_stopped_by_the_ceiling() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(5_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(5);
    p.run_for(SECOND);
    assert!(p.server_roles.started.is_some());
    // Gone without a word: no bytes, no close, no reading; the server's receiver hangs.
    p.client_vanished = true;
    p.server_roles.hang = true;
    p.run();
    let ceiling = secs(5) + SECOND + REPORT_GRACE;
    assert!(p.server_roles.stopped, "the ceiling stopped the roles");
    let o = p.server_outcome.as_ref().expect("the server session ends");
    assert!(o.error.is_some());
    assert!(
        p.elapsed() >= ceiling && p.elapsed() <= ceiling + WRITE_TIMEOUT + secs(2),
        "{:?}",
        p.elapsed()
    );
}

#[test]
fn a_client_that_stops_reading_is_dropped_after_the_write_timeout() {
    let mut s = spec();
    s.direction = Direction::Reverse;
    let mut p = Pair::with(s);
    p.run_for(Duration::from_millis(10));
    assert!(p.server_roles.started.is_some());
    // The server's sender ends at 1 s and its report cannot be written.
    p.client_reads = false;
    p.client_roles.hang = true;
    p.run_for(secs(60));
    let err = p.server_error();
    assert!(
        err.contains("the client to read the control connection"),
        "{err}"
    );
    assert_eq!(p.server_closed_at, Some(p.base + SECOND + WRITE_TIMEOUT));
}

#[test]
fn no_begin_ends_the_session_after_the_setup_timeout() {
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
    lone.feed(Duration::ZERO, &start_frame(&spec(), PROTOCOL_VERSION, "c"));
    while lone.server.poll_action().is_some() {}
    let now = lone.base;
    lone.server.handle_event(
        now,
        ServerEvent::Admitted {
            cookie: 1,
            bytes: None,
            tcp_port: None,
        },
    );
    lone.server
        .handle_event(now, ServerEvent::StreamArrived { stream: 0 });
    lone.advance(SECOND);
    assert!(matches!(
        lone.sent.first(),
        Some(Message::Accept { cookie: 1, .. })
    ));
    lone.advance(SETUP_TIMEOUT);
    assert!(lone.server.is_closed());
    assert!(lone
        .server
        .outcome()
        .unwrap()
        .error
        .unwrap()
        .to_string()
        .contains("the client's begin"));
}

#[test]
fn a_challenge_left_unanswered_ends_after_the_setup_timeout() {
    let mut lone = Lone::new(server_params(SpecLimits::default(), Some(key("k")), "n"));
    lone.feed(Duration::ZERO, &start_frame(&spec(), PROTOCOL_VERSION, "c"));
    assert!(matches!(lone.sent.first(), Some(Message::Challenge { .. })));
    lone.advance(SETUP_TIMEOUT - Duration::from_millis(1));
    assert!(!lone.server.is_closed());
    lone.advance(SETUP_TIMEOUT);
    assert!(lone.server.is_closed());
    let err = lone.server.outcome().unwrap().error.unwrap().to_string();
    assert!(
        err.contains("the client's answer to the challenge"),
        "{err}"
    );
}

#[test]
fn a_begin_that_overtakes_the_last_data_connection_is_kept() {
    let mut s = spec();
    s.streams = 2;
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
    lone.feed(Duration::ZERO, &start_frame(&s, PROTOCOL_VERSION, "c"));
    while lone.server.poll_action().is_some() {}
    let now = lone.base;
    lone.server.handle_event(
        now,
        ServerEvent::Admitted {
            cookie: 1,
            bytes: None,
            tcp_port: None,
        },
    );
    lone.server
        .handle_event(now, ServerEvent::StreamArrived { stream: 0 });
    // The client sent begin after attaching stream 1, but the driver routes it later.
    lone.feed(Duration::ZERO, &encode(&Message::Begin).unwrap());
    assert_eq!(lone.server.poll_action(), None);
    lone.server
        .handle_event(now, ServerEvent::StreamArrived { stream: 1 });
    assert_eq!(lone.server.poll_action(), Some(ServerAction::StreamsReady));
    assert_eq!(lone.server.poll_action(), Some(ServerAction::StartRoles));
}

#[test]
fn a_missing_data_stream_times_out_on_both_sides() {
    let mut s = spec();
    s.streams = 2;
    let mut p = Pair::with(s);
    p.lost_streams = vec![1];
    p.run();
    assert!(
        p.client_error().contains("a data connection"),
        "{}",
        p.client_error()
    );
    assert!(
        p.server_error().contains("data streams") || p.server_error().contains("closed"),
        "{}",
        p.server_error()
    );
    assert!(p.elapsed() <= SETUP_TIMEOUT + SECOND);
    assert_eq!(p.admission.running(), 0);
}

#[test]
fn a_udp_stream_never_confirmed_says_udp_may_be_blocked() {
    let mut s = spec();
    s.protocol = Protocol::Udp;
    let mut p = Pair::with(s);
    p.lose_hellos = u32::MAX;
    p.run();
    assert!(
        p.client_error()
            .contains("is UDP to the server's port blocked?"),
        "{}",
        p.client_error()
    );
    assert!(p.hellos_sent >= 90, "resent all along: {}", p.hellos_sent);
}

#[test]
fn a_peer_that_never_reports_is_given_drain_plus_grace() {
    let mut p = Pair::with(spec());
    p.run_for(Duration::from_millis(10));
    // The client's sender never ends, so it never reports; the server stops at the limit
    // of its own roles (they end here by the drain) and waits for the report.
    p.client_roles.hang = true;
    p.server_roles.hang = false;
    p.server.handle_event(
        p.now,
        ServerEvent::RolesDone {
            report: Default::default(),
        },
    );
    p.server_roles.done = true;
    let done_at = p.elapsed();
    p.run_for(secs(60));
    let err = p.server_error();
    assert!(err.contains("the peer's report"), "{err}");
    assert_eq!(p.elapsed(), done_at + SECOND + REPORT_GRACE);
}

#[test]
fn out_of_order_or_oversized_frames_mid_test_get_an_error_and_stop_the_test() {
    let oversized = (wirebench_proto::control::MAX_FRAME as u32 + 1)
        .to_be_bytes()
        .to_vec();
    for bytes in [encode(&Message::Begin).unwrap(), oversized] {
        let mut s = spec();
        s.bytes = None;
        s.duration_ns = Some(30_000_000_000);
        let mut p = Pair::with(s);
        p.run = secs(30);
        p.run_for(SECOND);
        p.inject_to_server(&bytes);
        p.run();
        assert!(p.server_roles.stopped && p.client_roles.stopped);
        assert!(
            p.server_error().starts_with("protocol error"),
            "{}",
            p.server_error()
        );
        assert!(
            p.client_error().starts_with("peer reported: "),
            "{}",
            p.client_error()
        );
        assert!(p.elapsed() < secs(2), "at once: {:?}", p.elapsed());
        assert_eq!(p.admission.running(), 0);
    }
}

#[test]
fn random_bytes_in_any_state_end_the_session_without_a_panic() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    for round in 0..200 {
        // A server at its first frame, then mid-test; a client awaiting its answer.
        let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
        let mut bytes = noise(round % 97);
        bytes.insert(0, 0);
        while !bytes.is_empty() && !lone.server.is_closed() {
            let n = lone.server.read_limit().min(bytes.len());
            let rest = bytes.split_off(n);
            lone.feed(Duration::ZERO, &bytes);
            bytes = rest;
        }
        let mut p = Pair::with(spec());
        p.run = secs(30);
        p.client.handle_bytes(p.now, &noise(1 + round % 13));
        p.run_for(SECOND);
        let mut p = Pair::with(spec());
        p.run = secs(30);
        p.run_for(SECOND);
        p.inject_to_server(&[&[0, 0, 0, 9][..], &noise(9)].concat());
        p.run();
        assert!(p.server_outcome.is_some() && p.client_outcome.is_some());
    }
}

#[test]
fn a_shutdown_mid_test_tells_the_client_and_stops_both() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(30_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(30);
    p.run_for(secs(2));
    p.server.handle_event(p.now, ServerEvent::Shutdown);
    p.run();
    assert!(p.server_roles.stopped && p.client_roles.stopped);
    let c = p.client_outcome.as_ref().unwrap();
    assert!(c.started());
    assert_eq!(
        p.client_error(),
        "peer reported: the server is shutting down"
    );
    assert!(p.elapsed() < secs(3));
}

#[test]
fn a_server_that_says_nothing_times_out_with_a_hint() {
    let mut p = Pair::with(spec());
    p.server_reads = false;
    p.run_for(secs(60));
    let err = p.client_error();
    assert!(
        err.contains("the server's answer (is a wirebench server listening there?)"),
        "{err}"
    );
    assert_eq!(p.elapsed(), SETUP_TIMEOUT);
}

#[test]
fn run_actions_reach_the_driver_in_order() {
    let mut p = Pair::with(spec());
    p.run();
    let first_run = p
        .server_actions
        .iter()
        .position(|a| matches!(a, ServerAction::Run(RunAction::PeerCounts(_))));
    let start = p
        .server_actions
        .iter()
        .position(|a| *a == ServerAction::StartRoles);
    assert!(start < first_run, "{:?}", p.server_actions);
}

#[test]
fn a_limit_mid_test_tells_the_client_which_and_stops_both() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(30_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(30);
    p.run_for(secs(2));
    let reason = "the server ended the test: more moved than its --max-bytes 1.00 MB allows";
    p.server.handle_event(
        p.now,
        ServerEvent::Limit {
            kind: ErrorKind::MaxBytes,
            reason: reason.into(),
        },
    );
    p.run();
    assert!(p.server_roles.stopped && p.client_roles.stopped);
    assert!(p.client_outcome.as_ref().unwrap().started());
    // What the server measured reaches the client before the reason: no made-up zeros.
    assert!(p.client_outcome.as_ref().unwrap().peer.is_some());
    assert_eq!(p.client_error(), format!("peer reported: {reason}"));
    assert_eq!(p.server_error(), reason);
    assert!(p.elapsed() < secs(3));
}

#[test]
fn a_limit_reaches_the_client_as_its_kind_whatever_its_words() {
    let mut s = spec();
    s.bytes = None;
    s.duration_ns = Some(30_000_000_000);
    let mut p = Pair::with(s);
    p.run = secs(30);
    p.run_for(secs(2));
    // Words that name no flag: what acts on the failure reads the kind.
    p.server.handle_event(
        p.now,
        ServerEvent::Limit {
            kind: ErrorKind::MaxRate,
            reason: "quota reached".into(),
        },
    );
    p.run();
    let kind =
        |o: Option<&super::Outcome>| o.and_then(|o| o.error.as_ref()).map(SessionError::kind);
    assert_eq!(kind(p.client_outcome.as_ref()), Some(ErrorKind::MaxRate));
    assert_eq!(kind(p.server_outcome.as_ref()), Some(ErrorKind::MaxRate));
}
