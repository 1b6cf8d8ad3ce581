//! The iperf3 sessions against each other in memory, in virtual time: no socket.

use std::time::{Duration, Instant};

use super::client::{ClientAction, ClientSession, Progress};
use super::codec::{cookie_from, Params, ResultsDoc, State, StreamResult};
use super::server::{ServerAction, ServerSession, TimeUp, DECLARED_GRACE, IDLE_LIMIT};
use super::{Iperf3Error, STEP_TIMEOUT};
use crate::admission::{Refusal, SpecLimits};
use crate::Session;

/// Moves every byte each side has for the other.
fn pump(now: Instant, c: &mut ClientSession, s: &mut ServerSession) {
    for _ in 0..8 {
        if let Some(out) = c.poll_transmit().map(<[u8]>::to_vec) {
            c.handle_written(now, out.len());
            // The server reads at most what its read limit allows; feed in pieces.
            let mut rest = &out[..];
            while !rest.is_empty() {
                let n = s.read_limit().min(rest.len());
                if n == 0 {
                    break;
                }
                s.handle_bytes(now, &rest[..n]);
                rest = &rest[n..];
            }
            assert!(rest.is_empty(), "server stopped reading with bytes left");
        }
        if let Some(out) = s.poll_transmit().map(<[u8]>::to_vec) {
            s.handle_written(now, out.len());
            c.handle_bytes(now, &out);
        }
    }
}

fn params() -> Params {
    Params {
        tcp: true,
        time: 1,
        parallel: 2,
        len: 1000,
        ..Params::default()
    }
}

fn results(bytes: u64) -> ResultsDoc {
    ResultsDoc {
        streams: vec![StreamResult {
            id: 1,
            bytes,
            ..StreamResult::default()
        }],
        ..ResultsDoc::default()
    }
}

#[test]
fn a_whole_test_runs_through() {
    let t0 = Instant::now();
    let one_s = Some(Duration::from_secs(1));
    let mut c = ClientSession::new(t0, cookie_from(&[1; 36]), params(), one_s);
    let mut s = ServerSession::new(t0, SpecLimits::default());
    pump(t0, &mut c, &mut s);
    assert!(matches!(s.poll_action(), Some(ServerAction::Cookie(_))));
    s.welcome(t0);
    pump(t0, &mut c, &mut s);
    assert!(matches!(s.poll_action(), Some(ServerAction::Params(a)) if a.params() == &params()));
    s.accept(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::CreateStreams));
    s.run(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::Run));
    // Running: the client's one deadline is its test's end.
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(c.poll_timeout(), Some(t1));
    c.handle_timeout(t1);
    assert_eq!(c.poll_action(), Some(ClientAction::StopSending));
    pump(t1, &mut c, &mut s);
    assert_eq!(s.poll_action(), Some(ServerAction::TestEnd));
    s.exchange(t1);
    pump(t1, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::SendResults));
    c.send_results(t1, &results(10));
    pump(t1, &mut c, &mut s);
    assert_eq!(
        s.poll_action(),
        Some(ServerAction::PeerResults(results(10)))
    );
    s.send_results(t1, &results(9)).unwrap();
    pump(t1, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::PeerResults(results(9))));
    assert_eq!(c.poll_action(), Some(ClientAction::Done));
    assert_eq!(s.poll_action(), Some(ServerAction::Done));
    assert!(c.is_over() && s.is_over());
}

#[test]
fn a_busy_server_is_one_line() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(t0, cookie_from(&[2; 36]), params(), None);
    let mut s = ServerSession::new(t0, SpecLimits::default());
    pump(t0, &mut c, &mut s);
    assert!(matches!(s.poll_action(), Some(ServerAction::Cookie(_))));
    s.deny();
    pump(t0, &mut c, &mut s);
    let Some(ClientAction::Failed(e)) = c.poll_action() else {
        panic!("no failure");
    };
    assert_eq!(e, Iperf3Error::Busy);
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn a_server_error_carries_its_code() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(t0, cookie_from(&[3; 36]), params(), None);
    let mut s = ServerSession::new(t0, SpecLimits::default());
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.welcome(t0);
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.refuse(100, 1);
    pump(t0, &mut c, &mut s);
    let Some(ClientAction::Failed(e @ Iperf3Error::Server { code: 100, .. })) = c.poll_action()
    else {
        panic!("no server error");
    };
    let text = e.to_string();
    assert!(
        text.contains("unable to create a new test (iperf3 error code 100): "),
        "{text}"
    );
    assert!(!text.contains('\n'), "{text}");
}

#[test]
fn a_running_test_ended_by_the_server_is_one_line_for_the_client() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(t0, cookie_from(&[5; 36]), params(), None);
    let mut s = ServerSession::new(t0, SpecLimits::default());
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.welcome(t0);
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.accept(t0);
    s.run(t0);
    pump(t0, &mut c, &mut s);
    while c
        .poll_action()
        .is_some_and(|a| !matches!(a, ClientAction::Run))
    {}
    s.terminate();
    assert!(s.is_over());
    pump(t0, &mut c, &mut s);
    assert_eq!(
        c.poll_action(),
        Some(ClientAction::Failed(Iperf3Error::ServerTerminated))
    );
}

#[test]
fn silence_times_out_on_both_sides() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(t0, cookie_from(&[4; 36]), params(), None);
    let mut s = ServerSession::new(t0, SpecLimits::default());
    let late = t0 + STEP_TIMEOUT + Duration::from_millis(1);
    c.handle_timeout(late);
    s.handle_timeout(late);
    assert!(matches!(
        c.poll_action(),
        Some(ClientAction::Failed(Iperf3Error::Timeout(_)))
    ));
    assert!(matches!(
        s.poll_action(),
        Some(ServerAction::Failed(Iperf3Error::Timeout("cookie")))
    ));
}

#[test]
fn a_bad_cookie_ends_the_server_session() {
    let t0 = Instant::now();
    let mut s = ServerSession::new(t0, SpecLimits::default());
    s.handle_bytes(t0, &[0xffu8; 37]);
    assert!(matches!(
        s.poll_action(),
        Some(ServerAction::Failed(Iperf3Error::Protocol(_)))
    ));
}

/// The stages a client can go silent at, in the order a test passes them.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Cookie,
    Params,
    Streams,
    Running,
    Results,
    Done,
}

/// A server session taken to `stage` with a client declaring `time` s, all at `t0`: the
/// client's last byte was at `t0`.
fn session_at(t0: Instant, stage: Stage, time: u64) -> ServerSession {
    let p = Params { time, ..params() };
    let length = Some(Duration::from_secs(time));
    let mut c = ClientSession::new(t0, cookie_from(&[6; 36]), p, length);
    let mut s = ServerSession::new(t0, SpecLimits::default());
    if stage == Stage::Cookie {
        return s;
    }
    pump(t0, &mut c, &mut s);
    while s.poll_action().is_some() {}
    s.welcome(t0);
    if stage == Stage::Params {
        return s;
    }
    pump(t0, &mut c, &mut s);
    while s.poll_action().is_some() {}
    s.accept(t0);
    if stage == Stage::Streams {
        return s;
    }
    s.run(t0);
    pump(t0, &mut c, &mut s);
    if stage == Stage::Running {
        return s;
    }
    c.handle_timeout(t0 + Duration::from_secs(time));
    pump(t0, &mut c, &mut s);
    assert_eq!(s.poll_action(), Some(ServerAction::TestEnd));
    s.exchange(t0);
    if stage == Stage::Results {
        return s;
    }
    s.send_results(t0, &results(1)).unwrap();
    s
}

/// Follows the session's deadlines from `from` until it acts; returns when and what.
fn first_action(s: &mut ServerSession, from: Instant) -> (Instant, ServerAction) {
    let mut now = from;
    for _ in 0..100 {
        if let Some(a) = s.poll_action() {
            return (now, a);
        }
        let Some(next) = s.poll_timeout() else {
            panic!("no deadline at {:?}", now - from);
        };
        now = now.max(next);
        s.handle_timeout(now);
    }
    panic!("no action");
}

/// The issue's third finding in virtual time: a client that goes silent at any stage, also
/// after declaring an hour-long test, is ended within 50 s of its last byte.
#[test]
fn a_silent_client_is_ended_within_50_s_of_its_last_byte_at_every_stage() {
    let bound = Duration::from_secs(50);
    for stage in [
        Stage::Cookie,
        Stage::Params,
        Stage::Streams,
        Stage::Running,
        Stage::Results,
        Stage::Done,
    ] {
        for time in [1, 3600] {
            let t0 = Instant::now();
            let mut s = session_at(t0, stage, time);
            let (at, action) = first_action(&mut s, t0);
            match action {
                ServerAction::Failed(_) => {}
                // The driver ends a test at its time bound.
                ServerAction::TimeUp(_) => s.terminate(),
                other => panic!("{stage:?} {time}: {other:?}"),
            }
            assert!(
                at - t0 <= bound,
                "{stage:?} {time} s: ended after {:?}",
                at - t0
            );
            assert!(s.is_over(), "{stage:?}");
        }
    }
    // Running, it is the idle limit that ends it, and the client hears SERVER_TERMINATE.
    let t0 = Instant::now();
    let mut s = session_at(t0, Stage::Running, 3600);
    let _ = s
        .poll_transmit()
        .map(<[u8]>::to_vec)
        .map(|b| s.handle_written(t0, b.len()));
    let (at, action) = first_action(&mut s, t0);
    assert_eq!(action, ServerAction::Failed(Iperf3Error::Idle(30)));
    assert_eq!(at - t0, IDLE_LIMIT);
    assert_eq!(s.poll_transmit(), Some(&[11u8][..]));
}

/// Data moving keeps a running test alive past the idle limit; when it stops, the test
/// ends the idle limit after the last movement.
#[test]
fn data_on_the_streams_keeps_a_test_alive_and_its_end_frees_it() {
    let t0 = Instant::now();
    let mut s = session_at(t0, Stage::Running, 3600);
    let step = Duration::from_secs(10);
    let mut last = t0;
    for i in 1..=30 {
        last = t0 + step * i;
        s.handle_timeout(last);
        s.handle_activity(last);
    }
    assert_eq!(s.poll_action(), None, "alive for 300 s of data");
    let (at, action) = first_action(&mut s, last);
    assert_eq!(action, ServerAction::Failed(Iperf3Error::Idle(30)));
    assert_eq!(at - last, IDLE_LIMIT);
}

/// A timed test that moves data but never sends TEST_END ends its own time and a grace
/// after its start; a test of an amount ends at the server's longest test.
#[test]
fn a_test_ends_at_its_declared_time_or_the_servers_longest() {
    let t0 = Instant::now();
    let mut s = session_at(t0, Stage::Running, 60);
    let mut now = t0;
    let action = loop {
        now += Duration::from_secs(5);
        s.handle_activity(now);
        s.handle_timeout(now);
        if let Some(a) = s.poll_action() {
            break a;
        }
    };
    assert_eq!(
        action,
        ServerAction::TimeUp(TimeUp::Declared { time_s: 60 })
    );
    assert_eq!(now - t0, Duration::from_secs(60) + DECLARED_GRACE);
    s.terminate();
    assert!(s.is_over());

    let limits = SpecLimits {
        max_duration: Some(Duration::from_secs(20)),
        ..SpecLimits::default()
    };
    let p = Params {
        time: 0,
        num: 1 << 30,
        ..params()
    };
    let mut c = ClientSession::new(t0, cookie_from(&[7; 36]), p, None);
    let mut s = ServerSession::new(t0, limits);
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.welcome(t0);
    pump(t0, &mut c, &mut s);
    assert!(matches!(s.poll_action(), Some(ServerAction::Params(_))));
    s.accept(t0);
    s.run(t0);
    let late = t0 + Duration::from_secs(21);
    s.handle_activity(late - Duration::from_millis(1));
    s.handle_timeout(late);
    assert_eq!(
        s.poll_action(),
        Some(ServerAction::TimeUp(TimeUp::MaxDuration))
    );
}

/// Parameters over a bound are answered by the session itself with iperf3's SERVER_ERROR
/// and the right code, and reported to the driver as a typed refusal.
#[test]
fn parameters_over_a_bound_are_refused_with_iperf3s_codes() {
    let t0 = Instant::now();
    let over = [
        (
            Params {
                len: 1 << 40,
                reverse: true,
                ..params()
            },
            SpecLimits::default(),
            7,
        ),
        (
            Params {
                parallel: u32::MAX,
                ..params()
            },
            SpecLimits::default(),
            6,
        ),
        (
            Params {
                bandwidth: 1 << 30,
                ..params()
            },
            SpecLimits {
                max_rate_bps: Some(1_000_000),
                ..SpecLimits::default()
            },
            27,
        ),
    ];
    for (p, limits, code) in over {
        let mut c = ClientSession::new(t0, cookie_from(&[8; 36]), p.clone(), None);
        let mut s = ServerSession::new(t0, limits);
        pump(t0, &mut c, &mut s);
        let _ = s.poll_action();
        s.welcome(t0);
        pump(t0, &mut c, &mut s);
        let Some(ServerAction::Refused(r)) = s.poll_action() else {
            panic!("{p:?} not refused");
        };
        assert!(matches!(
            r,
            Refusal::Invalid(_) | Refusal::Streams { .. } | Refusal::Rate { .. }
        ));
        assert!(s.is_over());
        pump(t0, &mut c, &mut s);
        assert!(
            matches!(c.poll_action(), Some(ClientAction::Failed(Iperf3Error::Server { code: c, .. })) if c == code),
            "{p:?}"
        );
    }
}

#[test]
fn documents_past_their_steps_cap_end_the_session_at_their_length() {
    let t0 = Instant::now();
    // Parameters: iperf3's own 8 KiB.
    let mut s = session_at(t0, Stage::Params, 1);
    s.handle_bytes(t0, &(8 * 1024 + 1u32).to_be_bytes());
    assert!(matches!(
        s.poll_action(),
        Some(ServerAction::Failed(Iperf3Error::Protocol(e))) if e.contains("8192-byte limit")
    ));
    // The client's results: 64 KiB.
    let mut s = session_at(t0, Stage::Results, 1);
    while s.poll_action().is_some() {}
    s.handle_bytes(t0, &(64 * 1024 + 1u32).to_be_bytes());
    assert!(matches!(
        s.poll_action(),
        Some(ServerAction::Failed(Iperf3Error::Protocol(e))) if e.contains("65536-byte limit")
    ));
}

/// A client session brought to TEST_RUNNING at `t0` by a server's state bytes alone.
fn running_client(p: Params, length: Option<Duration>, t0: Instant) -> ClientSession {
    let mut c = ClientSession::new(t0, cookie_from(&[9; 36]), p, length);
    let states = [
        State::ParamExchange,
        State::CreateStreams,
        State::TestStart,
        State::TestRunning,
    ];
    c.handle_bytes(t0, &states.map(State::byte));
    while c.poll_action().is_some_and(|a| a != ClientAction::Run) {}
    let n = c.poll_transmit().map_or(0, <[u8]>::len);
    c.handle_written(t0, n);
    c
}

/// A timed test ends at its own length, to the nanosecond (iperf3's `-t` is whole
/// seconds), not a moment before: the senders stop, then TEST_END goes out.
#[test]
fn a_timed_test_ends_at_its_length_and_not_before() {
    let t0 = Instant::now();
    let length = Duration::from_millis(2_500);
    let p = Params {
        time: 3,
        ..params()
    };
    let mut c = running_client(p, Some(length), t0);
    assert_eq!(c.poll_timeout(), Some(t0 + length));
    c.handle_timeout(t0 + length - Duration::from_nanos(1));
    assert_eq!(c.poll_action(), None);
    assert_eq!(c.poll_transmit(), None);
    c.handle_timeout(t0 + length);
    assert_eq!(c.poll_action(), Some(ClientAction::StopSending));
    assert_eq!(c.poll_transmit(), Some(&[State::TestEnd.byte()][..]));
    // Then the results step's deadline, and one TEST_END only.
    assert_eq!(c.poll_timeout(), Some(t0 + length + STEP_TIMEOUT));
    c.handle_progress(t0 + length, Progress::default());
    assert_eq!(c.poll_action(), None);
}

/// A test of an amount ends once every direction this side takes part in moved it: its
/// senders their shares, its receivers the whole amount.
#[test]
fn a_test_of_an_amount_ends_once_each_direction_moved_it() {
    let t0 = Instant::now();
    let amount = Params {
        time: 0,
        num: 1_000_000,
        ..params()
    };
    let bidir = Params {
        bidirectional: true,
        ..amount.clone()
    };
    let mut c = running_client(bidir, None, t0);
    assert_eq!(c.poll_timeout(), None);
    let sent = Progress {
        senders_finished: true,
        received: 999_999,
    };
    c.handle_progress(t0, sent);
    assert_eq!(c.poll_action(), None);
    let received = Progress {
        senders_finished: false,
        received: 1_000_000,
    };
    c.handle_progress(t0, received);
    assert_eq!(c.poll_action(), None);
    c.handle_progress(
        t0,
        Progress {
            senders_finished: true,
            ..received
        },
    );
    assert_eq!(c.poll_action(), Some(ClientAction::StopSending));

    // -R: only what it receives counts; sending alone ends nothing.
    let reverse = Params {
        reverse: true,
        ..amount.clone()
    };
    let mut c = running_client(reverse, None, t0);
    c.handle_progress(t0, sent);
    assert_eq!(c.poll_action(), None);
    c.handle_progress(t0, received);
    assert_eq!(c.poll_action(), Some(ClientAction::StopSending));

    // Forward: its senders' shares.
    let mut c = running_client(amount, None, t0);
    c.handle_progress(t0, received);
    assert_eq!(c.poll_action(), None);
    c.handle_progress(t0, sent);
    assert_eq!(c.poll_action(), Some(ClientAction::StopSending));
}

/// The time bound that ended a test says which in the log's words; only the server's own
/// counts as a limit for `--metrics`.
#[test]
fn a_time_bound_says_which_and_only_the_servers_is_a_limit() {
    let server = TimeUp::MaxDuration;
    assert_eq!(
        server.limit(),
        Some(wirebench_proto::error_kind::ErrorKind::MaxDuration)
    );
    assert!(
        server.to_string().contains("serve --max-duration"),
        "{server}"
    );
    let client = TimeUp::Declared { time_s: 60 };
    assert_eq!(client.limit(), None);
    assert_eq!(
        client.to_string(),
        format!(
            "the client did not end its 60 s test within {} s of its end",
            DECLARED_GRACE.as_secs()
        )
    );
}

/// Runs a server session with these parameters (as raw JSON, as any client may send them)
/// up to its answer; returns it and the bytes it wrote after PARAM_EXCHANGE.
fn answer_to(t0: Instant, doc: &str) -> (ServerSession, Option<ServerAction>, Vec<u8>) {
    let mut s = ServerSession::new(t0, SpecLimits::default());
    s.handle_bytes(t0, &cookie_from(&[11; 36]));
    assert!(matches!(s.poll_action(), Some(ServerAction::Cookie(_))));
    s.welcome(t0);
    let sent = s.poll_transmit().map_or(0, <[u8]>::len);
    s.handle_written(t0, sent);
    let mut framed = (doc.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(doc.as_bytes());
    s.handle_bytes(t0, &framed);
    let action = s.poll_action();
    let out = s.poll_transmit().map(<[u8]>::to_vec).unwrap_or_default();
    (s, action, out)
}

/// `-O` and `-k` are served: a timed test's bound counts the omitted seconds, a test of
/// blocks has none of its own (the client ends it).
#[test]
fn omit_and_blockcount_are_admitted_with_their_time_bounds() {
    let t0 = Instant::now();
    let doc = r#"{"tcp":true,"omit":2,"time":5,"num":0,"blockcount":0,"parallel":1,"len":1000}"#;
    let (mut s, a, _) = answer_to(t0, doc);
    let Some(ServerAction::Params(a)) = a else {
        panic!("-O 2 not admitted: {a:?}");
    };
    assert_eq!(a.declared(), Some(Duration::from_secs(7)));
    s.accept(t0);
    s.run(t0);
    let (when, what) = first_action(&mut s, t0);
    assert_eq!(what, ServerAction::TimeUp(TimeUp::Declared { time_s: 7 }));
    assert_eq!(when, t0 + Duration::from_secs(7) + DECLARED_GRACE);

    let doc = r#"{"tcp":true,"omit":0,"time":0,"num":0,"blockcount":1024,"parallel":1,"len":1000}"#;
    let (_, a, _) = answer_to(t0, doc);
    let Some(ServerAction::Params(a)) = a else {
        panic!("-k 1K not admitted: {a:?}");
    };
    assert_eq!(a.declared(), None);
    assert_eq!(a.params().blockcount, 1024);
}

/// What the server does not do, or over iperf3's own bounds, is refused with the code whose
/// text says so (the client prints `iperf_error.c`'s words for it), and the socket options
/// it does are read.
#[test]
fn options_are_read_and_refused_with_the_code_that_says_why() {
    let t0 = Instant::now();
    let base = r#""tcp":true,"time":1,"parallel":1,"len":1000"#;
    for (extra, code, errno) in [
        (r#""sctp":true"#, 18i32, 0i32),
        (r#""server_affinity":1"#, 132, super::errno::EPERM),
        (r#""burst":1001"#, 15, 0),
        (r#""TOS":256"#, 21, 0),
        (r#""MSS":100000"#, 10, 0),
        (r#""omit":601"#, 12, 0),
        (r#""window":1099511627776"#, 124, super::errno::ENOBUFS),
    ] {
        let (s, a, out) = answer_to(t0, &format!("{{{base},{extra}}}"));
        assert!(
            matches!(a, Some(ServerAction::Refused(_))),
            "{extra}: {a:?}"
        );
        assert!(s.is_over());
        let mut want = vec![State::ServerError.byte()];
        want.extend_from_slice(&code.to_be_bytes());
        want.extend_from_slice(&errno.to_be_bytes());
        assert_eq!(out, want, "{extra}");
    }
    let doc = format!(
        r#"{{{base},"fqrate":5000000,"burst":100,"TOS":184,"nodelay":true,"MSS":1000,"dont_fragment":1}}"#
    );
    let (_, a, _) = answer_to(t0, &doc);
    let Some(ServerAction::Params(a)) = a else {
        panic!("options not admitted: {a:?}");
    };
    let o = a.options();
    assert_eq!(
        (o.fq_rate_bps, o.burst, o.tos, o.mss),
        (5_000_000, 100, 184, 1000)
    );
    assert!(o.nodelay && o.dont_fragment && !o.sctp);
    // A number that is not a count is a protocol error, as in the parameters.
    let (_, a, _) = answer_to(t0, &format!(r#"{{{base},"fqrate":-1}}"#));
    assert!(matches!(a, Some(ServerAction::Failed(_))), "{a:?}");
}
