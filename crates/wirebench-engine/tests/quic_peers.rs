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
        quic_perf_port: None,
        watch: None,
        user_stack: None,
        quic: Some(Arc::clone(&identity)),
    })
    .expect("bind the server");
    let addr = server.local_addr().expect("its address");
    std::thread::spawn(move || server.run());
    (addr, identity)
}

/// Writes `m` on `s`.
fn send(s: &mut QuicStream, m: &Message) {
    s.write_all(&encode(m).expect("encode")).expect("send");
}

/// The server's first answer on `s` within `wait`, if any.
fn answer(s: &mut QuicStream, wait: Duration) -> Option<Message> {
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

/// A `start` of a QUIC test of 1 MB.
fn start() -> Message {
    Message::Start {
        version: PROTOCOL_VERSION,
        tool: "test".into(),
        spec: TestSpec::example()
            .protocol(Protocol::Quic)
            .bytes(1_000_000),
        host_id: String::new(),
        nonce: String::new(),
    }
}

/// A connection takes streams while its test sets up, and none later: a peer whose test
/// runs (and so keeps its connection open) and opens a stream after that is never read,
/// however often it opened one before, so it cannot keep a server thread reading its
/// streams. (Before, each stream gave the connection the set-up time again: the late
/// stream here, 6 s after the one before it, was answered.)
#[test]
fn a_connection_takes_no_streams_after_its_test_set_up() {
    let (addr, identity) = server();
    let check = ServerCheck::Pin(identity.fingerprint());
    let conn = Arc::new(
        quic::connect(addr, None, check, Congestion::Cubic, ALPN, None).expect("a QUIC connection"),
    );
    let opened = Instant::now();
    let mut control = QuicStream::open(&conn, Duration::from_secs(5)).expect("a stream");
    send(&mut control, &start());
    let accept = answer(&mut control, Duration::from_secs(5));
    let Some(Message::Accept { cookie, .. }) = accept else {
        panic!("the test is admitted: {accept:?}");
    };
    // Its data stream, in time, then `begin`: the test runs, waiting for data that this
    // peer never sends (it ends 30 s after its start for want of it).
    let mut data = QuicStream::open(&conn, Duration::from_secs(5)).expect("a stream");
    send(
        &mut data,
        &Message::Attach {
            version: PROTOCOL_VERSION,
            cookie,
            stream: 0,
        },
    );
    send(&mut control, &Message::Begin);
    // Halfway, another stream: read and answered (a second test, admitted or refused).
    // Streams that keep coming do not keep the connection taking them.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(opened.elapsed()));
    let mut halfway = QuicStream::open(&conn, Duration::from_secs(5)).expect("a stream");
    send(&mut halfway, &start());
    assert!(
        answer(&mut halfway, Duration::from_secs(3)).is_some(),
        "a stream within the set-up time is answered"
    );
    // The bound under test is a time: 10 s after the first stream's first frame. Past
    // it, the connection is open (its test runs), but a new stream is never read.
    std::thread::sleep(Duration::from_secs(11).saturating_sub(opened.elapsed()));
    let mut late = QuicStream::open(&conn, Duration::from_secs(5)).expect("the connection is open");
    send(&mut late, &start());
    assert_eq!(
        answer(&mut late, Duration::from_secs(3)),
        None,
        "a stream after the set-up time is not read"
    );
    // The test itself was not disturbed: no error came on its control stream.
    let said = answer(&mut control, Duration::from_millis(200));
    assert!(
        !matches!(said, Some(Message::Error { .. } | Message::Refuse { .. })),
        "{said:?}"
    );
}
