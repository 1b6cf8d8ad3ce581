//! What the mesh tests share: servers on loopback addresses, ports nothing listens on, the
//! archive read back through `archive query`, the agent's count of its runs, and a
//! PostgreSQL server of the test's own.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::wirebench;

/// A fresh temporary directory for test `tag`.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wirebench-mesh-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// `wirebench serve` on `ip` and a free port, killed when dropped.
pub struct Serve(pub Child, pub u16);

impl Serve {
    pub fn on(ip: &str) -> Self {
        let mut child = wirebench()
            .args(["serve", "--bind", ip, "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("banner");
        let port = line
            .split_whitespace()
            .find_map(|w| w.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Self(child, port)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on, on 127.0.0.4.
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.4:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a port")
}

pub fn query(archive: &Path) -> Vec<Value> {
    let out = wirebench()
        .args(["archive", "query", "--json"])
        .arg(archive)
        .output()
        .expect("query");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v.as_array().expect("rows").clone()
}

/// The agent's own count: "mesh: N runs: D done, F failed; ...".
pub fn agent_count(stderr: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("mesh: ")?
                .split_once(" runs:")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no count in {text}"))
}

/// A PostgreSQL server of the test's own (Debian's binaries, as user postgres, on a free
/// port of 127.0.0.1, trusting local connections), stopped when dropped.
pub struct Postgres {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

impl Postgres {
    pub fn start(dir: &Path) -> Self {
        super::require_root();
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| {
                d.flatten()
                    .map(|e| e.path().join("bin"))
                    .find(|b| b.join("initdb").exists())
            })
            .expect(
                "this test needs PostgreSQL's server (apt-get install postgresql, as .ci/run does)",
            );
        let data = dir.join("pg");
        std::fs::create_dir_all(&data).expect("dir");
        let chown = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(dir)
            .status();
        assert!(chown.is_ok_and(|s| s.success()), "chown to postgres");
        let init = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .args(["-A", "trust", "-U", "wirebench", "-D"])
            .arg(data.join("data"))
            .output()
            .expect("initdb");
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let child = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(data.join("data"))
            .arg("-k")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres");
        // Ready when pg_isready says so (bounded: a server that does not come up fails).
        let ready = (0..200).any(|_| {
            let ok = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            ok
        });
        assert!(ready, "PostgreSQL did not come up");
        Self {
            child,
            dir: data,
            url: format!("postgres://wirebench@127.0.0.1:{port}/postgres"),
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGTERM: PostgreSQL's smart shutdown (runuser passes it on).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nothing listens on, on `ip`.
pub fn closed_port_on(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a port")
}

/// Runs `wirebench mesh FILE --archive ARCHIVE` with `args`, which must succeed: the
/// archive's rows, which must be the `before` rows it held and one for each run the agent
/// counted.
pub fn agent_rows(file: &Path, archive: &Path, args: &[&str], before: usize) -> Vec<Value> {
    let out = wirebench()
        .arg("mesh")
        .arg(file)
        .arg("--archive")
        .arg(archive)
        .args(args)
        .output()
        .expect("mesh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = query(archive);
    assert_eq!(
        rows.len() as u64,
        before as u64 + agent_count(&out.stderr),
        "every run a row"
    );
    rows
}

/// The done runs of `rows` of test `test` (of every test: `None`), each checked never to
/// overlap another that shares a host with it: start, end, source and destination.
pub fn apart(rows: &[Value], test: Option<&str>) -> Vec<(i64, i64, String, String)> {
    let runs: Vec<(i64, i64, String, String)> = rows
        .iter()
        .filter(|r| r["outcome"] == "done" && test.is_none_or(|t| r["test"] == t))
        .map(|r| {
            (
                r["started_unix_ms"].as_i64().expect("start"),
                r["ended_unix_ms"].as_i64().expect("end"),
                r["source"].as_str().expect("source").to_string(),
                r["destination"].as_str().expect("destination").to_string(),
            )
        })
        .collect();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let shared = [&a.2, &a.3].iter().any(|h| **h == b.2 || **h == b.3);
            assert!(
                !shared || a.1 <= b.0 || b.1 <= a.0,
                "runs overlap on a host: {a:?} and {b:?}"
            );
        }
    }
    runs
}
