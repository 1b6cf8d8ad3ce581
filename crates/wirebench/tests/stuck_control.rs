//! A control connection stuck behind its own test's traffic still ends with both sides'
//! results: the client fetches the server's report on a new connection (`attach` to the
//! results stream), which a flooded path's retransmission backoff does not hold up.
//!
//! The stuck path is a proxy between client and server that forwards every connection, but
//! drops what the server sends on the first one (the control connection) once the test's
//! data connection has come: the server's live lines and its report go nowhere, as they do
//! when they queue behind a flood that drops them for a minute.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use common::logged::LoggedServer;
use common::wirebench;

/// What reaches the client of the server's close of its control connection.
#[derive(Clone, Copy)]
enum Close {
    /// Dropped with the rest: the client must fetch.
    Dropped,
    /// Forwarded: it overtakes the dropped report.
    Forwarded,
    /// Forwarded once the server (this process id) is killed: a fetch finds nobody.
    AfterKilling(u32),
}

/// The proxy: what it dropped of the server's control bytes.
struct Proxy {
    port: u16,
    dropped: Arc<AtomicU64>,
}

impl Proxy {
    /// A proxy to `server_port`; `close` says what becomes of the server's close of the
    /// control connection. It stops taking connections once the server refuses one.
    fn start(server_port: u16, close: Close) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        let dropped = Arc::new(AtomicU64::new(0));
        let dark = Arc::new(AtomicBool::new(false));
        let counted = Arc::clone(&dropped);
        thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)) else {
                    break;
                };
                if n == 1 {
                    // The data connection came: the control connection goes dark.
                    dark.store(true, Ordering::SeqCst);
                }
                let dark = (n == 0).then(|| (Arc::clone(&dark), Arc::clone(&counted), close));
                pipe(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                    None,
                );
                pipe(server, client, dark);
            }
        });
        Self { port, dropped }
    }
}

/// Copies `from` to `to` on a thread; with `dark`, drops (and counts) what comes once it is
/// set.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    dark: Option<(Arc<AtomicBool>, Arc<AtomicU64>, Close)>,
) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some((dark, dropped, _)) = &dark {
                if dark.load(Ordering::SeqCst) {
                    dropped.fetch_add(n as u64, Ordering::SeqCst);
                    continue;
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        match dark {
            // A dark path does not deliver the close either: the client's end stays open
            // (for as long as the test process runs) and it must fetch.
            Some((dark, _, Close::Dropped)) if dark.load(Ordering::SeqCst) => std::mem::forget(to),
            Some((_, _, Close::AfterKilling(pid))) => {
                // The server dies; then its close arrives.
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
                let _ = to.shutdown(Shutdown::Write);
            }
            _ => {
                let _ = to.shutdown(Shutdown::Write);
            }
        }
    });
}

/// Runs a `-R` test through a proxy that drops the server's control bytes once the data
/// connection came; checks it ended with both sides' counts, fetched. Returns the client's
/// error output.
fn through_a_dark_control_connection(close: Close) {
    let mut server = LoggedServer::start(&[]);
    let log = server.stderr_lines();
    let proxy = Proxy::start(server.port, close);
    let out = wirebench()
        .args(["run", "127.0.0.1", "--port", &proxy.port.to_string()])
        .args(["-R", "-b", "20M", "-t", "2s", "--json"])
        .output()
        .expect("run wirebench");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The server's report went into the dark, and still reached the client.
    assert!(
        proxy.dropped.load(Ordering::SeqCst) > 0,
        "the proxy dropped nothing"
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    let end = &doc["end"];
    // -R: the server sent, the client received; both sides' counts are there.
    let sent = end["sent"]["bytes"]
        .as_u64()
        .expect("the server's sent bytes");
    let received = end["received"]["bytes"]
        .as_u64()
        .expect("the client's bytes");
    assert!(sent > 0 && received > 0, "{end}");
    assert_eq!(sent, received, "TCP delivers what was sent");
    assert!(doc["error"].is_null(), "{}", doc["error"]);
    assert_eq!(doc["server_report_fetched"], true);
    drop(server);
    let lines: Vec<String> = log.iter().collect();
    assert!(
        lines.iter().any(|l| l.contains("event=results_fetched")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("event=test") && l.contains("result=ok")),
        "{lines:#?}"
    );
}

#[test]
fn a_report_stuck_on_the_control_connection_is_fetched_on_a_new_one() {
    through_a_dark_control_connection(Close::Dropped);
}

/// The server's close overtakes its report (before: "the server closed the connection
/// after 2.1 s", the results lost): the client fetches at once.
#[test]
fn a_close_that_overtakes_the_report_still_gets_it_fetched() {
    through_a_dark_control_connection(Close::Forwarded);
}

/// One step to the side: the server dies, and its close reaches the client before its
/// report. The fetch finds nobody (the port refuses), and the test ends as a close does:
/// an error saying so, what the server measured unknown, never a hang or a made-up count.
#[test]
fn a_close_from_a_server_that_died_ends_the_test_as_a_close() {
    let server = LoggedServer::start(&[]);
    let proxy = Proxy::start(server.port, Close::AfterKilling(server.pid()));
    let out = wirebench()
        .args(["run", "127.0.0.1", "--port", &proxy.port.to_string()])
        .args(["-R", "-b", "20M", "-t", "2", "--json"])
        .output()
        .expect("run wirebench");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("the server closed the connection"), "{doc}");
    assert!(doc["end"]["sent"]["bytes"].is_null(), "{doc}");
    assert!(doc["server_report_fetched"].is_null(), "{doc}");
    drop(server);
}
