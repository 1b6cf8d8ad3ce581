//! Hostile QUIC peers against the server's QUIC side, with the engine's own QUIC client
//! speaking the control protocol by hand: what a connection may do after its test set up.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wirebench_engine::quic::{self, Congestion, Identity, QuicStream, ServerCheck, ALPN};
use wirebench_engine::{Server, ServerConfig};
use wirebench_proto::control::{encode, FrameDecoder, Message, PROTOCOL_VERSION};
use wirebench_proto::spec::{Protocol, TestSpec};

/// A QUIC server on loopback; its address and its key.
fn server() -> (SocketAddr, Arc<Identity>) {
    let identity = Arc::new(Identity::generate().expect("a key"));
    let server = Server::bind(ServerConfig {
        bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        ipv6_only: false,
        max_tests: 8,
        max_duration: None,
        max_timing: Duration::from_secs(10),
        metrics: None,
        max_rate_bps: None,
        budget: Default::default(),
        max_bytes: None,
        max_streams: None,
        max_size: None,
        max_tests_per_client: None,
        max_tests_per_minute: None,
        log: false,
        stats_every: None,
        psk: None,
        save_dir: None,
        files_dir: None,
        allow_iperf3: false,
        iperf3_json: false,
        iperf3_port: None,
        watch: None,
        user_stack: None,
        quic: Some(Arc::clone(&identity)),
    })
    .expect("bind the server");
    let addr = server.local_addr().expect("its address");
    std::thread::spawn(move || server.run());
    (addr, identity)
}

/// Sends a test's `start` on `s` and waits (at most `wait`) for the server's first answer.
fn start(s: &mut QuicStream, wait: Duration) -> Option<Message> {
    let start = Message::Start {
        version: PROTOCOL_VERSION,
        tool: "test".into(),
        spec: TestSpec::example()
            .protocol(Protocol::Quic)
            .bytes(1_000_000),
        host_id: String::new(),
        nonce: String::new(),
    };
    s.write_all(&encode(&start).expect("encode"))
        .expect("send start");
    s.set_timeout(Duration::from_millis(100));
    let mut d = FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if let Ok(Some(m)) = d.next_message() {
            return Some(m);
        }
        match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => d.feed(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
    None
}

/// A connection takes streams while its test sets up, and none later: a peer that keeps
/// its connection and opens a stream after that gets no answer on it (the server's thread
/// that took streams is gone), while one opened in time is answered.
#[test]
fn a_connection_takes_no_streams_after_its_test_set_up() {
    let (addr, identity) = server();
    let check = ServerCheck::Pin(identity.fingerprint());
    let conn = Arc::new(
        quic::connect(addr, None, check, Congestion::Cubic, ALPN).expect("a QUIC connection"),
    );
    let opened = Instant::now();
    let mut control = QuicStream::open(&conn, Duration::from_secs(5)).expect("a stream");
    let first = start(&mut control, Duration::from_secs(5));
    assert!(
        matches!(first, Some(Message::Accept { .. })),
        "the first test is admitted: {first:?}"
    );
    // A second stream in time: read, and answered (a second test from this client).
    let mut in_time = QuicStream::open(&conn, Duration::from_secs(5)).expect("a stream");
    assert!(
        start(&mut in_time, Duration::from_secs(5)).is_some(),
        "a stream in the set-up time is answered"
    );
    // Past the set-up time (10 s) of the first stream, the connection is still open (its
    // control stream is), but a new stream is never read.
    let past = Duration::from_secs(11).saturating_sub(opened.elapsed());
    std::thread::sleep(past);
    let mut late = QuicStream::open(&conn, Duration::from_secs(5)).expect("a stream");
    assert_eq!(
        start(&mut late, Duration::from_secs(3)),
        None,
        "a stream after the set-up time is not read"
    );
}
