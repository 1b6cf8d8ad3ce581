//! A mesh's tests of every kind of `run`: rrul (its load asks to run alone, its probes
//! beside it) against wirebench servers, and tests against iperf3 servers
//! (`peer = "iperf3"`), each run a row with its figure; and a peer that says nothing.

mod common;

use std::process::{Child, Command, Stdio};

use common::mesh::{agent_rows, tempdir, Serve};
use common::wait_for_line;

/// Runs an agent on `text` (written to a file in `dir`) as host `two` for `secs`: its rows.
fn run_mesh(dir: &std::path::Path, text: &str, secs: &str) -> Vec<serde_json::Value> {
    let file = dir.join("mesh.toml");
    std::fs::write(&file, text).expect("mesh file");
    agent_rows(
        &file,
        &dir.join("a.sqlite"),
        &["--for", secs, "--as", "two"],
        0,
    )
}

#[test]
fn an_rrul_test_runs_in_a_mesh_and_its_row_has_the_loads_throughput() {
    let dir = tempdir("rrul");
    let server = Serve::on("127.0.0.1");
    let rows = run_mesh(
        &dir,
        &format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [tests.rrul]\ngroup = \"g\"\nrun = [\"--mode\", \"rrul\", \"-t\", \"1\", \"--idle\", \"500ms\"]\n\
             every = \"4s\"\nslip = \"500ms\"\n",
            server.1
        ),
        "9s",
    );
    assert!(rows.len() >= 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["outcome"], "done", "{r}");
        assert_eq!(r["kind"], "throughput", "{r}");
        assert!(r["throughput_bps"].as_f64().is_some_and(|b| b > 0.0), "{r}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `iperf3 -s` on 127.0.0.1 and a free port, once it listens; killed when dropped.
struct Iperf3(Child, u16);

impl Drop for Iperf3 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs iperf3"]
fn tests_against_an_iperf3_server_run_in_a_mesh() {
    common::require("iperf3");
    let dir = tempdir("iperf3");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let mut child = Command::new("iperf3")
        .args([
            "-s",
            "--forceflush",
            "-B",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    wait_for_line(&mut child, "Server listening");
    let server = Iperf3(child, port);
    let rows = run_mesh(
        &dir,
        &format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [tests.tcp]\ngroup = \"g\"\npeer = \"iperf3\"\nrun = [\"-t\", \"1\"]\nevery = \"3s\"\nslip = \"1s\"\n",
            server.1
        ),
        "8s",
    );
    assert!(rows.len() >= 2, "{rows:?}");
    let done: Vec<_> = rows.iter().filter(|r| r["outcome"] == "done").collect();
    assert!(done.len() >= 2, "{rows:?}");
    for r in done {
        assert!(r["throughput_bps"].as_f64().is_some_and(|b| b > 0.0), "{r}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A destination that takes connections and never says a word: each run ends within the
/// client's setup bound as a failed row with its reason, rounds that come meanwhile are
/// missed (the previous run still running), and the agent still stops on time.
#[test]
fn a_silent_peer_costs_failed_rows_and_never_a_hang() {
    let dir = tempdir("silent");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    // Accepts and holds every connection, reading nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let started = std::time::Instant::now();
    let rows = run_mesh(
        &dir,
        &format!(
            "[hosts]\none = \"127.0.0.1:{port}\"\ntwo = \"127.0.0.2\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [tests.latency]\ngroup = \"g\"\nrun = [\"--mode\", \"rr\", \"-t\", \"1\"]\nevery = \"4s\"\nslip = \"1s\"\n"
        ),
        "14s",
    );
    // The last run under way when --for ends is waited for: within its setup bound (10 s).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    assert!(rows.len() >= 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["outcome"], "failed", "{r}");
        assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
    }
    assert!(
        rows.iter().any(|r| r["error_kind"] == "overrun"),
        "{rows:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
