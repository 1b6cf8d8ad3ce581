//! `run --quic-perf` against an independent QUIC implementation: aioquic (from PyPI, in the
//! virtual environment `.ci/run` makes), running the perf protocol's server in
//! `tests/quic_perf_peer.py`. Its own count of what it received and sent must be ours,
//! byte for byte, both ways. Needs that environment: `#[ignore]`d, and fails in one line
//! without it; `.ci/run` runs them.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{u, wirebench};
use serde_json::Value;

/// The virtual environment's Python, with aioquic.
fn python_with_aioquic() -> String {
    let dir = std::env::var("XDG_CACHE_HOME")
        .or_else(|_| std::env::var("HOME").map(|h| format!("{h}/.cache")))
        .unwrap_or_default();
    let python = format!("{dir}/wirebench-aioquic/bin/python3");
    let found = Command::new(&python)
        .args(["-c", "import aioquic"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "this test needs aioquic in {python}: python3 -m venv DIR and DIR/bin/pip install aioquic==1.7.2, as .ci/run does"
    );
    python
}

/// aioquic's perf server: its process, port and key, and its lines after the first.
struct Peer {
    child: Child,
    port: u16,
    pin: String,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Peer {
    fn start() -> Self {
        let peer = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/quic_perf_peer.py");
        let mut child = Command::new(python_with_aioquic())
            .args([peer, "server"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the aioquic peer");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let mut words = first.split_whitespace();
        assert_eq!(words.next(), Some("listening"), "{first}");
        let port = words.next().and_then(|p| p.parse().ok()).expect("its port");
        let pin = words.next().expect("its key").to_string();
        Self {
            child,
            port,
            pin,
            lines,
        }
    }

    /// The peer's account of the next stream it finished.
    fn next_stream(&mut self) -> Value {
        let line = self
            .lines
            .next()
            .and_then(Result::ok)
            .expect("a line from the peer");
        serde_json::from_str(&line).expect("the peer's JSON")
    }

    fn run(&self, args: &[&str]) -> Value {
        let target = format!("127.0.0.1:{}", self.port);
        let out = wirebench()
            .args([
                "run",
                "--quic-perf",
                &target,
                "--quic-pin",
                &self.pin,
                "--json",
            ])
            .args(args)
            .output()
            .expect("run wirebench");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("results JSON")
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "needs aioquic (PyPI)"]
fn uploads_and_downloads_agree_with_aioquic_to_the_byte() {
    let mut peer = Peer::start();
    // Upload: what we sent is what aioquic read, and it was asked for nothing back.
    let v = peer.run(&["-n", "5000001", "-l", "65536"]);
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(u(&v, "end.sent.bytes"), 5_000_001);
    assert_eq!(v["peer"]["tool"], "quic-perf");
    assert!(
        v["end"]["received"]["bytes"].is_null(),
        "the server reports nothing: {v}"
    );
    let p = peer.next_stream();
    assert_eq!(
        (p["received"].as_u64(), p["asked"].as_u64()),
        (Some(5_000_001), Some(0))
    );
    // Download: what we asked for is what aioquic sent and what we received.
    let v = peer.run(&["-n", "3000007", "-R"]);
    assert_eq!(u(&v, "end.received.bytes"), 3_000_007, "{v}");
    let p = peer.next_stream();
    assert_eq!(
        (p["sent"].as_u64(), p["received"].as_u64()),
        (Some(3_000_007), Some(0))
    );
    // Two streams of one connection, each its own count.
    let v = peer.run(&["-n", "1000000", "-P", "2"]);
    assert_eq!(u(&v, "end.sent.bytes"), 2_000_000, "{v}");
    assert_eq!(u(&v, "end.quic.connections"), 1, "{v}");
    let got: u64 = (0..2).map(|_| u(&peer.next_stream(), "received")).sum();
    assert_eq!(got, 2_000_000);
    // A timed upload: whatever we sent in the time, aioquic read all of it.
    let v = peer.run(&["-t", "1"]);
    let sent = u(&v, "end.sent.bytes");
    assert!(sent > 0, "{v}");
    assert_eq!(u(&peer.next_stream(), "received"), sent);
}

/// `--mode rr`: each transaction a stream of its own, its request and response counted to
/// the byte by aioquic, and by wirebench's own perf server.
#[test]
#[ignore = "needs aioquic (PyPI)"]
fn request_response_is_a_stream_per_transaction_counted_by_aioquic() {
    let mut peer = Peer::start();
    let v = peer.run(&[
        "--mode",
        "rr",
        "-n",
        "6400",
        "-l",
        "64",
        "--response-size",
        "1000",
    ]);
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(u(&v, "end.sent.messages"), 100, "{v}");
    assert_eq!(u(&v, "end.latency_us.count"), 100, "{v}");
    assert_eq!(u(&v, "end.quic.connections"), 1, "{v}");
    for _ in 0..100 {
        let p = peer.next_stream();
        assert_eq!(
            (p["received"].as_u64(), p["sent"].as_u64()),
            (Some(64), Some(1000)),
            "{p}"
        );
    }
    // Timed, two at a time, against wirebench's own perf server that serves two streams at
    // once: each next request's stream comes as soon as the last answer did, and is
    // served; the log line counts every stream; the connection's figures come once.
    let mut s = PerfServe::start(&["--max-streams", "2"]);
    let target = format!("127.0.0.1:{}", s.port);
    let out = wirebench()
        .args([
            "run",
            "--quic-perf",
            &target,
            "--quic-insecure",
            "--mode",
            "rr",
        ])
        .args(["-t", "1", "-l", "100", "-P", "2", "--json"])
        .output()
        .expect("run wirebench");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(u(&v, "end.quic.connections"), 1, "{v}");
    let n = u(&v, "end.sent.messages");
    assert!(n > 100, "{v}");
    let line = s.next_log();
    assert_eq!(field(&line, "streams"), Some(n), "{line}");
    assert_eq!(field(&line, "received_bytes"), Some(n * 100), "{line}");
    assert_eq!(field(&line, "sent_bytes"), Some(n * 100), "{line}");
}

#[test]
#[ignore = "needs aioquic (PyPI)"]
fn a_perf_server_is_checked_by_its_key_and_what_it_cannot_carry_is_refused() {
    let peer = Peer::start();
    let target = format!("127.0.0.1:{}", peer.port);
    let run = |extra: &[&str]| {
        wirebench()
            .args(["run", "--quic-perf", &target, "-t", "1"])
            .args(extra)
            .output()
            .expect("run wirebench")
    };
    // No check named: a usage error that names both.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // A wrong key: refused in the handshake, in words.
    let wrong = format!("sha256:{}", "cd".repeat(32));
    let out = run(&["--quic-pin", &wrong]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not the one pinned"));
    // The protocol streams bytes, or a request and response per stream: crr (a
    // connection per transaction) is refused before anything is sent.
    let out = run(&["--quic-insecure", "--mode", "crr"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--quic-perf"));
    // --quic-insecure: no check, and the test runs.
    let out = run(&["--quic-insecure"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wirebench serve --quic-perf-port`, its log on stderr.
struct PerfServe {
    child: Child,
    port: u16,
    log: std::io::Lines<BufReader<std::process::ChildStderr>>,
}

impl PerfServe {
    fn start(extra: &[&str]) -> Self {
        let mut child = wirebench()
            .args([
                "serve",
                "-p",
                "0",
                "--bind",
                "127.0.0.1",
                "--quic-perf-port",
                "0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wirebench serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut banner = String::new();
        out.read_line(&mut banner).expect("the banner");
        let port = banner
            .split("QUIC perf on UDP port ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no perf port in {banner:?}"));
        let log = BufReader::new(child.stderr.take().expect("stderr")).lines();
        Self { child, port, log }
    }

    /// aioquic's perf client: its own account of what it sent and received.
    fn client(&self, upload: u64, download: u64, streams: u32) -> Value {
        let peer = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/quic_perf_peer.py");
        let out = Command::new(python_with_aioquic())
            .args([
                peer,
                "client",
                "--port",
                &self.port.to_string(),
                "--timeout",
                "5",
            ])
            .args([
                "--upload",
                &upload.to_string(),
                "--download",
                &download.to_string(),
            ])
            .args(["--streams", &streams.to_string()])
            .output()
            .expect("run the aioquic client");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
    }

    /// The server's next log line about a perf connection.
    fn next_log(&mut self) -> String {
        self.log
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.contains("protocol=quic-perf"))
            .expect("a log line")
    }
}

impl Drop for PerfServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `key=value` of a log line.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}

#[test]
#[ignore = "needs aioquic (PyPI)"]
fn the_server_answers_aioquic_perf_clients_to_the_byte() {
    let mut s = PerfServe::start(&[]);
    for (upload, download, streams) in [
        (3_000_001, 0, 1),
        (0, 2_000_003, 1),
        (1_000_000, 1_000_000, 4),
    ] {
        let c = s.client(upload, download, streams);
        assert!(c.get("error").is_none(), "{c}");
        let all = u64::from(streams);
        // aioquic's own count of what came back is what it asked for.
        assert_eq!(u(&c, "received"), download * all, "{c}");
        // The server's count of what it read is what aioquic sent, and it sent what it
        // was asked for.
        let line = s.next_log();
        assert_eq!(field(&line, "received_bytes"), Some(upload * all), "{line}");
        assert_eq!(field(&line, "sent_bytes"), Some(download * all), "{line}");
        assert_eq!(field(&line, "streams"), Some(all), "{line}");
    }
}

#[test]
#[ignore = "needs aioquic (PyPI)"]
fn perf_clients_meet_the_servers_limits_and_admission() {
    // --max-bytes over what a connection's streams move both ways: the server ends the
    // connection saying which limit, whichever way the bytes go.
    let mut s = PerfServe::start(&["--max-bytes", "1M"]);
    for (upload, download) in [(5_000_000, 0), (0, 5_000_000)] {
        // aioquic hears of it (the close names the limit), or gives up waiting for the rest
        // of its download when the close was lost behind the burst it ended; it never has
        // all it asked for.
        let c = s.client(upload, download, 1);
        assert!(
            c.get("error").is_some() || u(&c, "received") < download,
            "{c}"
        );
        if upload > 0 {
            let err = c["error"].as_str().unwrap_or_default();
            assert!(err.contains("max-bytes"), "{c}");
        }
        let line = s.next_log();
        assert!(line.contains("ended=max-bytes"), "{line}");
        let moved =
            field(&line, "received_bytes").unwrap_or(0) + field(&line, "sent_bytes").unwrap_or(0);
        assert!(
            (1_000_000..=1_000_000 + 64 * 1024).contains(&moved),
            "{line}"
        );
    }
    // Admission: a perf connection is a test; past the starts a minute allows, refused.
    let mut s = PerfServe::start(&["--max-tests-per-minute", "1"]);
    let c = s.client(1000, 1000, 1);
    assert!(c.get("error").is_none(), "{c}");
    let _ = s.next_log();
    // The second is refused as its handshake ends (aioquic says only that the connection
    // closed); the server's log names the limit.
    let c = s.client(1000, 1000, 1);
    assert!(c["error"].as_str().is_some(), "{c}");
    let line = s.next_log();
    assert!(
        line.contains("event=refused") && line.contains("--max-tests-per-minute"),
        "{line}"
    );
}
