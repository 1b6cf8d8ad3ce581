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
    // The protocol streams bytes: rr is refused before anything is sent.
    let out = run(&["--quic-insecure", "--mode", "rr"]);
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
