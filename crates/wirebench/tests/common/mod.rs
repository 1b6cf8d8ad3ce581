//! Drives the `wirebench` binary for integration tests: a server on a free loopback port,
//! clients with JSON output, and their exit codes.
#![allow(dead_code)]

pub mod attack;
pub mod logged;
pub mod mesh;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The binary under test.
pub fn wirebench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wirebench"))
}

/// A `wirebench serve` on 127.0.0.1 and a free port, killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    /// The QUIC key's fingerprint the banner names.
    pub quic_key: Option<String>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Self {
        Self::launch(extra).0
    }

    /// A server with `--metrics` on a free loopback port, and where the metrics are
    /// (`127.0.0.1:PORT`, as the server's second line names it).
    pub fn start_with_metrics(extra: &[&str]) -> (Self, SocketAddr) {
        let (server, mut stdout) = Self::launch(&[&["--metrics", "127.0.0.1:0"], extra].concat());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("metrics line");
        // "metrics at http://127.0.0.1:PORT/metrics (...)"
        let addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .and_then(|w| w.strip_suffix("/metrics"))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no metrics address in {line:?}"));
        (server, addr)
    }

    /// Starts the server; its stdout past the banner (for `--live` lines).
    pub fn launch(extra: &[&str]) -> (Self, BufReader<ChildStdout>) {
        let mut child = wirebench()
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start wirebench serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("server stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("server banner");
        // "wirebench server listening on 127.0.0.1:PORT (...)"
        let addr = line
            .split_whitespace()
            .nth(4)
            .unwrap_or_else(|| panic!("unexpected banner {line:?}"));
        let port = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        // "...; QUIC, key sha256:HEX)" unless --no-quic.
        let quic_key = line
            .split("key ")
            .nth(1)
            .map(|k| k.trim().trim_end_matches(')').to_string());
        (
            Self {
                child,
                port,
                quic_key,
            },
            stdout,
        )
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the server to exit by itself; its status if it did.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let until = std::time::Instant::now() + limit;
        while std::time::Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }

    /// True while the server process is alive.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Runs a client against this server with `args`.
    pub fn run(&self, args: &[&str]) -> Output {
        wirebench()
            .args(["run", "127.0.0.1", "--port", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run wirebench")
    }

    /// Runs a client with `--json` and returns the document; panics unless it exits 0.
    pub fn run_json(&self, args: &[&str]) -> Value {
        let out = self.run(&[args, &["--json"]].concat());
        assert!(
            out.status.success(),
            "wirebench run {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("results JSON")
    }

    /// A client running in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        wirebench()
            .args(["run", "127.0.0.1", "--port", &self.port.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wirebench run")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary with `args` under a 2 GB address-space limit, stdout discarded (a CSV
/// can be long), and kills it if it outlives `limit`: a read that never ends, or memory
/// that grows without bound, fails the test instead of stalling it.
pub fn run_confined(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec \"$0\" \"$@\"")
        .arg(wirebench().get_program())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirebench");
    let start = std::time::Instant::now();
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("wirebench {args:?} still ran after {limit:?}: a hang");
            }
            // A bound on a possible hang, not synchronisation: the exit is what is awaited.
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// Reads lines of a child's stdout until one contains `needle` (the child is running).
pub fn wait_for_line(child: &mut Child, needle: &str) {
    let stdout = child.stdout.take().expect("child stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("read child stdout");
        assert!(n > 0, "child ended before printing {needle:?}");
        if line.contains(needle) {
            // Keep draining in the background so the child never blocks on a full pipe.
            std::thread::spawn(move || {
                let mut sink = String::new();
                while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                    sink.clear();
                }
            });
            return;
        }
    }
}

/// A TCP connection to `to` from the loopback address `from` (e.g. "127.0.0.2": loopback
/// answers on all of 127/8), as an attacker from another address would make it.
pub fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let from: SocketAddr = format!("{from}:0").parse().map_err(std::io::Error::other)?;
    s.bind(&from.into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(5))?;
    Ok(s.into())
}

/// An integer at a JSON path like "end.sent.bytes".
pub fn u(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not an integer in {v}"))
}

/// A number at a JSON path.
pub fn f(v: &Value, path: &str) -> f64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

/// `wirebench lab LINK -- run ARGS --json`, which must succeed: the results, with the `lab`
/// object.
pub fn lab_run(link: &[&str], run: &[&str]) -> Value {
    let out = wirebench()
        .arg("lab")
        .args(link)
        .args(["--", "run"])
        .args(run)
        .arg("--json")
        .output()
        .expect("run wirebench lab");
    assert!(
        out.status.success(),
        "lab {link:?} -- run {run:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("results JSON")
}

/// Fails the test, in one line, unless the lab can build a network here (`wirebench lab --
/// exec -- true`: root, or unprivileged user namespaces). Tests that need it are
/// `#[ignore = "needs network namespaces"]`, which `.ci/run` runs.
#[track_caller]
pub fn require_lab() {
    let out = wirebench()
        .args(["lab", "--", "exec", "--", "true"])
        .output()
        .expect("run wirebench lab");
    let why = String::from_utf8_lossy(&out.stderr);
    let why = why.trim().replace('\n', "; ");
    assert!(
        out.status.success(),
        "this test needs the lab (network namespaces: root or user namespaces), which cannot start here: {why}"
    );
}

/// Fails the test, in one line, unless `tool` is a program on PATH: a test that needs a
/// tool is `#[ignore = "needs TOOL"]` and says it was not run, never passes without it.
#[track_caller]
pub fn require(tool: &str) {
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    });
    let package = match tool {
        "nft" => "nftables",
        "promtool" => "prometheus",
        "ip" => "iproute2",
        "unshare" | "setpriv" => "util-linux",
        other => other,
    };
    assert!(
        found,
        "this test needs {tool}, which is not on PATH: install it (apt-get install {package}, as .ci/run does)"
    );
}

/// Fails the test, in one line, unless it runs as root (an effective uid of 0).
#[track_caller]
pub fn require_root() {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    });
    assert!(
        root,
        "this test needs root (CAP_NET_ADMIN); run it as root, as CI does"
    );
}

/// Headless Chromium's path; fails the test, in one line, where it is not installed.
#[track_caller]
pub fn require_chromium() -> &'static str {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(chromium) = found else {
        panic!(
            "this test needs chromium (/usr/bin/chromium): install it (apt-get install chromium, as .ci/run does)"
        );
    };
    chromium
}
