//! The iperf3 sessions against each other in memory, in virtual time: no socket.

use std::time::{Duration, Instant};

use super::client::{ClientAction, ClientSession};
use super::codec::{cookie_from, Params, ResultsDoc, StreamResult};
use super::server::{ServerAction, ServerSession};
use super::{Iperf3Error, STEP_TIMEOUT};

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
    let mut c = ClientSession::new(t0, cookie_from(&[1; 36]), params());
    let mut s = ServerSession::new(t0);
    pump(t0, &mut c, &mut s);
    assert!(matches!(s.poll_action(), Some(ServerAction::Cookie(_))));
    s.welcome(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(s.poll_action(), Some(ServerAction::Params(params())));
    s.accept(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::CreateStreams));
    s.run(t0, None);
    pump(t0, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::Run));
    // Running: no control deadline on either side.
    assert_eq!(c.poll_timeout(), None);
    let t1 = t0 + Duration::from_secs(1);
    c.end_test(t1);
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
    s.send_results(t1, &results(9));
    pump(t1, &mut c, &mut s);
    assert_eq!(c.poll_action(), Some(ClientAction::PeerResults(results(9))));
    assert_eq!(c.poll_action(), Some(ClientAction::Done));
    assert_eq!(s.poll_action(), Some(ServerAction::Done));
    assert!(c.is_over() && s.is_over());
}

#[test]
fn a_busy_server_is_one_line() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(t0, cookie_from(&[2; 36]), params());
    let mut s = ServerSession::new(t0);
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
    let mut c = ClientSession::new(t0, cookie_from(&[3; 36]), params());
    let mut s = ServerSession::new(t0);
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
    let mut c = ClientSession::new(t0, cookie_from(&[5; 36]), params());
    let mut s = ServerSession::new(t0);
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.welcome(t0);
    pump(t0, &mut c, &mut s);
    let _ = s.poll_action();
    s.accept(t0);
    s.run(t0, None);
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
    let mut c = ClientSession::new(t0, cookie_from(&[4; 36]), params());
    let mut s = ServerSession::new(t0);
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
    let mut s = ServerSession::new(t0);
    s.handle_bytes(t0, &[0xffu8; 37]);
    assert!(matches!(
        s.poll_action(),
        Some(ServerAction::Failed(Iperf3Error::Protocol(_)))
    ));
}
