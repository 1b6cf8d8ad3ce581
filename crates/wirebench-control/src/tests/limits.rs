//! Limits in the server's state machines: one deadline for the whole
//! handshake, the build withheld before authentication, server bounds on the timing flags,
//! rr responses counted against `--max-bytes`, and per-address caps by IPv6 /64.

use std::net::IpAddr;
use std::time::Duration;

use wirebench_proto::control::{encode, Message, MAX_FRAME, MAX_HELLO_FRAME, PROTOCOL_VERSION};
use wirebench_proto::spec::{Direction, Mechanism, Protocol};

use super::pair::{key, server_params, slots, spec, Lone};
use super::start_frame;
use crate::admission::{client_key, Admission, Refusal, SpecLimits};
use crate::SETUP_TIMEOUT;

#[test]
fn the_whole_handshake_shares_one_deadline_from_the_connection() {
    let mut lone = Lone::new(server_params(SpecLimits::default(), Some(key("k")), "n"));
    // A trickling peer sends its start just before the deadline ...
    let late = SETUP_TIMEOUT - Duration::from_millis(10);
    lone.feed(late, &start_frame(&spec(), PROTOCOL_VERSION, "c"));
    assert!(matches!(lone.sent.first(), Some(Message::Challenge { .. })));
    // ... and gets no fresh deadline for its answer.
    lone.advance(SETUP_TIMEOUT);
    assert!(lone.server.is_closed());
    let err = lone.server.outcome().unwrap().error.unwrap().to_string();
    assert!(err.contains("answer to the challenge"), "{err}");
}

#[test]
fn frames_stay_at_the_hellos_cap_until_the_key_is_proven() {
    // A peer that said start under a key, then announces a frame larger than a hello: the
    // server ends the session at the announcement, holding nothing for the frame.
    for len in [MAX_HELLO_FRAME + 1, MAX_FRAME] {
        let mut lone = Lone::new(server_params(SpecLimits::default(), Some(key("k")), "n"));
        lone.feed(Duration::ZERO, &start_frame(&spec(), PROTOCOL_VERSION, "c"));
        assert!(matches!(lone.sent.first(), Some(Message::Challenge { .. })));
        lone.feed(Duration::ZERO, &(len as u32).to_be_bytes());
        assert!(
            lone.server.is_closed(),
            "a {len}-byte frame before the proof"
        );
        let err = lone.server.outcome().unwrap().error.unwrap().to_string();
        assert!(err.contains("exceeds the limit of 65536"), "{err}");
    }
    // Without a key the same holds until the test is admitted.
    let mut lone = Lone::new(server_params(SpecLimits::default(), None, "n"));
    lone.feed(Duration::ZERO, &start_frame(&spec(), PROTOCOL_VERSION, "c"));
    lone.feed(
        Duration::ZERO,
        &((MAX_HELLO_FRAME + 1) as u32).to_be_bytes(),
    );
    assert!(lone.server.is_closed());
}

#[test]
fn a_server_with_a_key_does_not_tell_its_build_before_authentication() {
    let mut params = server_params(SpecLimits::default(), Some(key("k")), "n");
    params.tool = "wirebench 9.9.9-secret".into();
    let mut lone = Lone::new(params);
    lone.feed(
        Duration::ZERO,
        &start_frame(&spec(), PROTOCOL_VERSION + 1, "c"),
    );
    let Some(Message::Refuse { reason, .. }) = lone.sent.last() else {
        panic!("{:?}", lone.sent)
    };
    assert!(!reason.contains("9.9.9"), "{reason}");
    assert!(
        reason.contains(&format!("speaks {PROTOCOL_VERSION}")),
        "{reason}"
    );
}

#[test]
fn timing_flags_past_the_server_bound_are_refused_naming_the_flag() {
    for (flag, set) in [
        (
            "--drain",
            &(|s: &mut wirebench_proto::spec::TestSpec| s.drain_ns = 30_000_000_000)
                as &dyn Fn(&mut _),
        ),
        ("--gap", &|s: &mut wirebench_proto::spec::TestSpec| {
            s.gap_ns = 30_000_000_000
        }),
        (
            "--ack-timeout",
            &|s: &mut wirebench_proto::spec::TestSpec| s.ack_timeout_ns = 30_000_000_000,
        ),
    ] {
        let mut s = spec();
        set(&mut s);
        let r = SpecLimits::default().check(&s);
        match r {
            Err(Refusal::Timing { flag: f, .. }) => assert_eq!(f, flag),
            other => panic!("{flag}: {other:?}"),
        }
    }
    assert!(SpecLimits::default().check(&spec()).is_ok());
}

#[test]
fn rr_responses_count_against_max_bytes() {
    let mut s = spec();
    s.mechanism = Mechanism::Rr;
    s.size = 64;
    s.response_size = Some(1_000_000);
    s.bytes = Some(64 * 1000);
    let limits = SpecLimits {
        max_bytes: Some(1_000_000),
        ..SpecLimits::default()
    };
    // 64 kB of requests, but a thousand 1 MB answers: refused.
    assert!(matches!(limits.check(&s), Err(Refusal::Bytes { .. })));
    s.response_size = Some(64);
    assert!(limits.check(&s).is_ok());
}

#[test]
fn a_reverse_file_transfer_is_not_refused_as_unbounded_before_its_size_is_known() {
    let mut s = spec();
    s.bytes = None;
    s.direction = Direction::Reverse;
    s.file = Some("f.bin".into());
    let limits = SpecLimits {
        max_bytes: Some(1_000_000),
        ..SpecLimits::default()
    };
    assert!(limits.check(&s).is_ok(), "{:?}", limits.check(&s));
    // Once the server's file sets the amount, the limit holds on it.
    s.bytes = Some(2_000_000);
    assert!(matches!(limits.check(&s), Err(Refusal::Bytes { .. })));
}

#[test]
fn ipv6_addresses_of_one_64_share_their_caps() {
    let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(client_key(a), client_key(b));
    assert_ne!(client_key(a), client_key(c));
    let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
    assert_eq!(client_key(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    let mut adm = Admission::with_pending_caps(slots(4), 10, 2);
    let (a1, _) = adm.pending_open(a);
    let _ = adm.pending_open(b);
    // A third address of the same /64 pushes out the first.
    let (_, evicted) = adm.pending_open("2001:db8:1:2::77".parse().unwrap());
    assert_eq!(evicted, Some(a1));
    let _ = encode(&Message::Begin);
}

/// The finding's shapes: `-u -R -l 1 -b 10M` asks 1.25 M datagrams a second; a test without
/// a rate cannot say how many; a paced one of large messages passes.
#[test]
fn packet_rates_past_max_pps_are_refused_naming_the_flag() {
    let limits = SpecLimits {
        max_pps: Some(19_531),
        ..SpecLimits::default()
    };
    let tiny = spec()
        .protocol(Protocol::Udp)
        .direction(Direction::Reverse)
        .size(1)
        .duration_ns(2_000_000_000)
        .rate_bps(10_000_000);
    let e = limits.check(&tiny).map_err(|e| (e.kind(), e.to_string()));
    let Err(("max_pps", text)) = e else {
        panic!("{e:?}")
    };
    assert!(
        text.contains("1250000 packets/s exceed the server's --max-pps 19531"),
        "{text}"
    );
    let by_pps = tiny.clone().rate_bps(0).rate_pps(20_000);
    assert!(matches!(
        limits.check(&by_pps),
        Err(Refusal::Pps { asked: 20_000, .. })
    ));
    // Each rr transaction is a request and a response.
    let rr = tiny
        .clone()
        .mechanism(Mechanism::Rr)
        .direction(Direction::Forward)
        .size(64)
        .rate_pps(10_000)
        .rate_bps(0);
    assert!(matches!(
        limits.check(&rr),
        Err(Refusal::Pps { asked: 20_000, .. })
    ));
    let unlimited = tiny.clone().rate_bps(0);
    assert!(matches!(
        limits.check(&unlimited),
        Err(Refusal::UnlimitedPps { max: 19_531 })
    ));
    let fine = tiny.size(1400);
    assert_eq!(limits.check(&fine), Ok(()));
}

/// `-u -l 16 -n 1M --packet-log` streams 2 MB of log back for 1 MB of data: under
/// `--max-bytes 1M` it is refused up front; the log counts against `--max-rate` too.
#[test]
fn the_servers_packet_log_counts_against_max_bytes_and_max_rate() {
    let logged = spec()
        .protocol(Protocol::Udp)
        .size(16)
        .bytes(1_000_000)
        .rate_bps(20_000_000)
        .packet_log(true);
    let bytes = SpecLimits {
        max_bytes: Some(1_000_000),
        ..SpecLimits::default()
    };
    assert_eq!(
        bytes.check(&logged),
        Err(Refusal::Bytes {
            asked: 1_000_000 + 62_500 * 32 + 16,
            max: 1_000_000
        })
    );
    let unlogged = logged.clone().packet_log(false);
    assert_eq!(bytes.check(&unlogged), Ok(()));
    // The client writes the log of a reverse test itself: the server sends none.
    let reverse = logged.clone().direction(Direction::Reverse);
    assert_eq!(bytes.check(&reverse), Ok(()));
    // 20 Mbit/s of 16-byte datagrams is 40 Mbit/s of log on top.
    let rate = SpecLimits {
        max_rate_bps: Some(25_000_000),
        ..SpecLimits::default()
    };
    assert!(matches!(
        rate.check(&logged),
        Err(Refusal::Rate {
            asked: 60_000_000,
            ..
        })
    ));
    assert_eq!(rate.check(&unlogged), Ok(()));
}

/// Every limit at once against extreme sizes, rates and streams: an answer, never a panic
/// or an overflow.
#[test]
fn extreme_specs_against_every_limit_never_panic() {
    let all = [
        SpecLimits::default(),
        SpecLimits {
            max_duration: Some(Duration::from_secs(1)),
            max_rate_bps: Some(1),
            max_pps: Some(1),
            max_bytes: Some(1),
            max_streams: Some(1),
            max_size: Some(1),
            max_timing: Duration::ZERO,
        },
        SpecLimits {
            max_duration: Some(Duration::MAX),
            max_rate_bps: Some(u64::MAX),
            max_pps: Some(u64::MAX),
            max_bytes: Some(u64::MAX),
            max_streams: Some(u32::MAX),
            max_size: Some(u64::MAX),
            max_timing: Duration::MAX,
        },
    ];
    for v in [0, 1, u64::from(u32::MAX), u64::MAX] {
        for streams in [0, 1, 64, u32::MAX] {
            for log in [false, true] {
                for mechanism in [Mechanism::Stream, Mechanism::Rr] {
                    // Set as fields: zeros too (`Some(0)`), which the setters would not make.
                    let mut s = spec()
                        .protocol(Protocol::Udp)
                        .mechanism(mechanism)
                        .size(v)
                        .bytes(v)
                        .streams(streams)
                        .packet_log(log);
                    s.rate_bps = Some(v);
                    s.rate_pps = Some(v);
                    s.response_size = Some(v);
                    for l in &all {
                        let _ = l.check(&s);
                    }
                    let _ = crate::memory::test_memory(&s, crate::memory::SocketCaps::default());
                }
            }
        }
    }
}
