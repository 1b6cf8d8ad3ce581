//! `serve --metrics`: an HTTP server that a slowloris cannot block. Attackers connect from
//! other loopback addresses (127.0.0.2, 127.0.0.3) than the scraper (127.0.0.1), as they
//! would from other hosts. Bounds are loose: a scrape that waited on another client would
//! wait seconds (a whole request-head deadline), one that does not takes milliseconds.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{connect_from, Server};

/// The server's deadline for a whole request head, from the connection.
const HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// One HTTP request from 127.0.0.1 (`request` is the head, `\r\n\r\n` included): the
/// answer's status line, its head and its body. A server that does not answer within 10 s
/// fails the test rather than hanging it.
fn ask(addr: SocketAddr, request: &str) -> (String, String, String) {
    let mut c = TcpStream::connect(addr).expect("metrics port");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    c.write_all(request.as_bytes()).expect("request");
    let mut raw = String::new();
    c.read_to_string(&mut raw)
        .expect("an answer, then the server closes");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// A scrape as a plain client makes it.
fn scrape(addr: SocketAddr) -> (String, String, String) {
    ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// A slowloris from 127.0.0.2: a request head that never ends, one byte every 1.5 s, until
/// the server closes the connection (at most 20 bytes). Sends on `connected` once it is
/// connected, and returns how long after connecting the server closed it.
fn slowloris(addr: SocketAddr, connected: mpsc::Sender<()>) -> Option<Duration> {
    let mut c = connect_from("127.0.0.2", addr).expect("connect from 127.0.0.2");
    let began = Instant::now();
    let _ = connected.send(());
    // The read's timeout paces the bytes and notices the close as it comes.
    c.set_read_timeout(Some(Duration::from_millis(1500)))
        .expect("read timeout");
    let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Wait: 0000000000";
    let mut answer = [0u8; 512];
    for byte in head.iter().take(20) {
        if c.write_all(&[*byte]).is_err() {
            return Some(began.elapsed());
        }
        loop {
            match c.read(&mut answer) {
                // The server closed it (after an answer such as 408, or none).
                Ok(0) => return Some(began.elapsed()),
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(_) => return Some(began.elapsed()),
            }
        }
    }
    None
}

/// Whether the server has closed `c` (a read sees the end, or a reset) within `limit`.
fn closed_within(c: &mut TcpStream, limit: Duration) -> bool {
    let _ = c.set_read_timeout(Some(limit));
    let mut buf = [0u8; 256];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }
}

#[test]
fn a_slowloris_and_100_idle_connections_never_delay_a_scrape() {
    let (server, metrics) = Server::start_with_metrics(&[]);
    let (connected, is_connected) = mpsc::channel();
    let loris = std::thread::spawn(move || slowloris(metrics, connected));
    is_connected
        .recv_timeout(Duration::from_secs(10))
        .expect("the slowloris connects");
    let mut idle: Vec<TcpStream> = (0..100)
        .map(|_| connect_from("127.0.0.3", metrics).expect("connect from 127.0.0.3"))
        .collect();

    // Scrape while the slowloris trickles and the idle connections wait, until it is closed.
    let mut took = Vec::new();
    while !loris.is_finished() && took.len() < 100 {
        let began = Instant::now();
        let (status, _, body) = scrape(metrics);
        took.push(began.elapsed());
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("wirebench_tests_started_total 0"), "{body}");
        // Pacing, not synchronisation: a scrape every 100 ms over the slowloris' life.
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed_after = loris.join().expect("the slowloris thread");
    let slowest = took.iter().max().copied().unwrap_or_default();
    eprintln!(
        "{} scrapes under the slowloris: slowest {slowest:?}, median {:?}; slowloris closed after {closed_after:?}",
        took.len(),
        {
            let mut sorted = took.clone();
            sorted.sort();
            sorted.get(sorted.len() / 2).copied().unwrap_or_default()
        }
    );
    assert!(
        took.len() >= 5,
        "only {} scrapes before the slowloris ended",
        took.len()
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a scrape took {slowest:?}"
    );
    // Its head never completes: the server closes it at the head's deadline, whatever
    // trickles (a byte every 1.5 s would otherwise hold it for ever).
    let closed_after = closed_after.expect("the server never closed the slowloris");
    assert!(
        closed_after >= HEAD_DEADLINE - Duration::from_millis(100)
            && closed_after < HEAD_DEADLINE * 2 + Duration::from_secs(1),
        "the slowloris was closed after {closed_after:?}"
    );
    // The idle connections are all closed: those pushed out by the per-address cap at once,
    // the rest at the head's deadline.
    for c in &mut idle {
        assert!(
            closed_within(c, HEAD_DEADLINE * 3),
            "an idle connection outlived its deadline"
        );
    }
    // The server still serves tests, and scrapes.
    let out = server.run(&["-n", "100000", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, _, body) = scrape(metrics);
    assert!(body.contains("wirebench_tests_started_total 1"), "{body}");
}

#[test]
fn connections_filling_the_port_from_many_addresses_do_not_shut_out_a_scrape() {
    let (_server, metrics) = Server::start_with_metrics(&[]);
    // 8 from each of 10 addresses: more than the port holds in all.
    let _idle: Vec<TcpStream> = (4..14)
        .flat_map(|a| (0..8).map(move |_| a))
        .map(|a| connect_from(&format!("127.0.0.{a}"), metrics).expect("connect"))
        .collect();
    for _ in 0..5 {
        let began = Instant::now();
        let (status, _, _) = scrape(metrics);
        let took = began.elapsed();
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(took < Duration::from_secs(1), "a scrape took {took:?}");
    }
}

#[test]
fn metrics_answer_get_and_head_at_metrics_in_the_format_asked_and_nothing_else() {
    let (_server, metrics) = Server::start_with_metrics(&[]);
    let (status, head, body) = scrape(metrics);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(!body.contains("# EOF"), "{body}");

    let (status, head, body) = ask(
        metrics,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.3\r\n\r\n",
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");

    let (status, head, body) = ask(metrics, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(head.contains("content-length: "), "{head}");
    assert_eq!(body, "");

    let (status, _, _) = ask(metrics, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, head, _) = ask(
        metrics,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(head.contains("allow: get, head"), "{head}");
}
