//! The server's bounds by construction, attacked through the real binary one step to the
//! side of the generated peers of `control::tests::hostile`: a client that reads its
//! control connection at a drip holds no slot past the test's bound, drain and grace.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::attack::{connect_port, recv, send, spec, start};
use common::logged::LoggedServer;
use wirebench_proto::control::{FrameDecoder, Message, PROTOCOL_VERSION};

/// The attacker's address.
const ATTACKER: &str = "127.0.0.2";

/// Starts a `-t SECS` test of `streams` TCP streams from the attacker, live records of each
/// stream every 10 ms, every data connection attached and silent, and `begin` sent. The
/// control connection's receive buffer is small, so what the server queues stays with it.
fn slow_test(port: u16, streams: u32, secs: u64) -> (TcpStream, Vec<TcpStream>, u64) {
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let from = std::net::SocketAddr::from(([127, 0, 0, 2], 0));
    sock.bind(&from.into()).expect("bind 127.0.0.2");
    sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
        .expect("connect");
    let mut c: TcpStream = sock.into();
    let mut s = spec(1);
    s.bytes = None;
    s.duration_ns = Some(secs * 1_000_000_000);
    s.interval_ns = 10_000_000;
    s.streams = streams;
    s.live_streams = true;
    send(&mut c, &start(s, "slow reader"));
    let mut d = FrameDecoder::new(1 << 20);
    let Some(Message::Accept { cookie, .. }) = recv(&mut c, &mut d) else {
        panic!("no accept")
    };
    let data = (0..streams)
        .map(|stream| {
            let mut x = connect_port(ATTACKER, port).expect("data connection");
            let attach = Message::Attach {
                version: PROTOCOL_VERSION,
                cookie,
                stream,
            };
            send(&mut x, &attach);
            x
        })
        .collect();
    send(&mut c, &Message::Begin);
    (c, data, cookie)
}

/// Issue 44: a client reading its control connection at 16 KiB/s held a `-t 20s` test's
/// slot for ~130 s (`--max-tests 1` refused every other run meanwhile). The session now
/// ends at the test's bound (3 s), drain (1 s), grace (10 s) and the roles' stop (2 s),
/// whatever the client reads: the log says why, and the next test gets the slot.
#[test]
fn a_client_that_reads_at_a_drip_frees_its_slot_at_the_tests_bound() {
    let mut server = LoggedServer::start(&["--max-tests", "1"]);
    let log = server.stderr_lines();
    let (c, data, cookie) = slow_test(server.port, 64, 3);
    let began = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let mut c = c.try_clone().expect("clone");
        std::thread::spawn(move || {
            // The attacker's pace: 160 bytes every 10 ms.
            let mut buf = [0u8; 160];
            let mut total = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            total
        })
    };
    let bound = Duration::from_secs(3 + 1 + 10 + 2);
    let line = loop {
        let left = (bound + Duration::from_secs(5)).saturating_sub(began.elapsed());
        let line = log
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line for the test after {:?}", began.elapsed()));
        if line.contains("event=test") {
            break line;
        }
    };
    let ended = began.elapsed();
    assert!(
        ended <= bound + Duration::from_millis(1500),
        "the slot was held {ended:?}, past {bound:?}: {line}"
    );
    assert!(
        line.contains("result=") && line.contains("error"),
        "the log says why: {line}"
    );
    // The test's secret cookie is not in the log, whole or in part.
    let hex = format!("{cookie:016x}");
    assert!(
        line.contains("test=") && !line.contains(&hex[..8]) && !line.contains(&hex[8..]),
        "{line}"
    );
    // The slot is free: a good test from 127.0.0.1 runs (--max-tests 1).
    let out = common::wirebench()
        .args(["run", "127.0.0.1", "--port", &server.port.to_string()])
        .args(["-n", "1M", "--json"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = c.shutdown(std::net::Shutdown::Both);
    let read = reader.join().expect("reader");
    assert!(read > 0, "the attacker read something");
    drop(data);
    eprintln!("slot freed after {ended:?}; the attacker read {read} bytes; {line}");
}
