//! Generated hostile peers: a server session against clients drawn at random (how fast they
//! read, in stalls and slow drips; how many streams, how often intervals close and whether
//! each stream's are sent live; how long the test runs; when the client vanishes), in
//! virtual time. At every step the bytes the session holds for the client stay under the
//! control connection's bound, and the session (its slot with it) ends by the test's time
//! bound, drain, grace and the roles' stop, whatever the client read.

use std::time::Duration;

use proptest::prelude::*;
use wirebench_proto::spec::{Direction, Mechanism, TestSpec};

use super::pair::Pair;
use crate::server::STOP_GRACE;
use crate::wire::OUTPUT_BYTES;
use crate::{REPORT_GRACE, SETUP_TIMEOUT, WRITE_TIMEOUT};

/// One drawn client.
#[derive(Debug, Clone)]
struct Peer {
    streams: u32,
    interval_ms: u64,
    duration_s: u64,
    live_streams: bool,
    direction: Direction,
    rr: bool,
    /// Bytes it reads each tick of the harness (10 ms), cycled.
    reads: Vec<usize>,
    /// When it vanishes without a word, s.
    vanish_s: Option<u64>,
}

/// Bytes a reader takes in a tick: a stall, a drip, a slow reader, a fast one.
fn read_rate() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        1usize..=16,
        100usize..=2_000,
        16_384usize..=1_048_576,
    ]
}

fn peer() -> impl Strategy<Value = Peer> {
    (
        1u32..=64,
        prop_oneof![Just(10u64), 10u64..=1000],
        1u64..=30,
        any::<bool>(),
        prop_oneof![
            Just(Direction::Forward),
            Just(Direction::Reverse),
            Just(Direction::Bidir)
        ],
        any::<bool>(),
        prop::collection::vec(read_rate(), 1..8),
        prop::option::of(0u64..=40),
    )
        .prop_map(
            |(streams, interval_ms, duration_s, live_streams, direction, rr, reads, vanish_s)| {
                Peer {
                    streams,
                    interval_ms,
                    duration_s,
                    live_streams,
                    direction,
                    rr,
                    reads,
                    vanish_s,
                }
            },
        )
}

impl Peer {
    fn spec(&self) -> TestSpec {
        let mut s = TestSpec::example()
            .streams(self.streams)
            .interval_ns(self.interval_ms * 1_000_000)
            .duration_ns(self.duration_s * 1_000_000_000);
        s.bytes = None;
        s.live_streams = self.live_streams;
        if self.rr {
            s.mechanism = Mechanism::Rr;
        } else {
            s.direction = self.direction;
        }
        s
    }
}

/// Runs `peer` against a server session; the error says which bound broke.
fn check(peer: &Peer) -> Result<(), TestCaseError> {
    let spec = peer.spec();
    prop_assume!(spec.validate().is_ok());
    let drain = Duration::from_nanos(spec.drain_ns);
    let mut p = Pair::with(spec);
    p.run = Duration::from_secs(peer.duration_s);
    p.client_read_plan = Some(peer.reads.clone());
    p.server_intervals = Some(Duration::from_millis(peer.interval_ms));
    let bound = Duration::from_secs(peer.duration_s);
    let horizon = SETUP_TIMEOUT * 3 + WRITE_TIMEOUT + bound + drain + REPORT_GRACE * 3;
    if let Some(at) = peer.vanish_s {
        p.run_for(Duration::from_secs(at));
        p.client_vanished = true;
    }
    p.run_for(horizon);
    prop_assert!(
        p.max_server_output <= OUTPUT_BYTES,
        "the server held {} bytes of output, over {OUTPUT_BYTES}",
        p.max_server_output
    );
    let closed = p.server_closed_at.ok_or_else(|| {
        TestCaseError::fail(format!(
            "the server session was still open after {:?}",
            p.elapsed()
        ))
    })?;
    let began = p.server_outcome.as_ref().and_then(|o| o.began);
    let latest = match began {
        Some(b) => b + bound + drain + REPORT_GRACE + STOP_GRACE,
        None => p.base + SETUP_TIMEOUT * 3 + WRITE_TIMEOUT,
    };
    prop_assert!(
        closed <= latest,
        "the server session ended {:?} after its bound (began: {})",
        closed - latest,
        began.is_some()
    );
    prop_assert_eq!(p.admission.running(), 0, "the slot was given back");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Bytes held and the session's end, for clients drawn at random.
    #[test]
    fn a_server_session_holds_bounded_output_and_ends_by_its_bound(peer in peer()) {
        check(&peer)?;
    }
}

/// The case the generator found against the unbounded output (issue 44): 64 streams'
/// live records every 10 ms to a client that reads 16 KiB a second. Before, the session
/// held 2.1 MB after 20 s and ended only when the client had read it all.
#[test]
fn a_slow_reader_of_live_streams_is_bounded() {
    let peer = Peer {
        streams: 64,
        interval_ms: 10,
        duration_s: 20,
        live_streams: true,
        direction: Direction::Forward,
        rr: true,
        reads: vec![160],
        vanish_s: None,
    };
    check(&peer).expect("bounded");
}
