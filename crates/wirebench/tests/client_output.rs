//! What `run` shows on every path, through the real binary: iperf3's lines (on a pipe too,
//! per stream and their sum, each role's figures on its own lines, request/response in
//! transactions and round trips), one answer in the lines' summary, the table and the JSON,
//! 80 columns without `-V`, JSON on failure, the NDJSON stream, Ctrl-C, a server that goes
//! away, errors with hints, iperf3's habits, and text from a hostile server made printable.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use common::{wirebench, Server};
use serde_json::Value;

/// A port on loopback that nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Reads `child`'s stdout until a line contains `needle`; returns the lines read and the
/// reader, to read the rest after.
fn read_until(
    child: &mut Child,
    needle: &str,
) -> (Vec<String>, BufReader<std::process::ChildStdout>) {
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "ended before {needle:?}; got {lines:?}");
        let hit = line.contains(needle);
        lines.push(line);
        if hit {
            return (lines, reader);
        }
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

/// The interval lines of `text`: tagged lines but the headings and the summary's, which
/// end with their role.
fn interval_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with('[') && !l.starts_with("[ ID]"))
        .filter(|l| !l.ends_with("  sender") && !l.ends_with("  receiver"))
        .filter(|l| !l.contains("sender: unknown") && !l.contains("receiver: unknown"))
        .collect()
}

/// The summary's lines of `role` (`sender`, `receiver`).
fn summary_lines<'a>(text: &'a str, role: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with('[') && l.ends_with(&format!("  {role}")))
        .collect()
}

#[test]
fn udp_live_lines_show_what_the_receiver_got_and_a_summary_of_both_sides() {
    let server = Server::start(&[]);
    let out = server.run(&["-u", "-b", "20M", "-t", "2", "-i", "1"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = interval_lines(&text);
    // The server's view, as it received: loss (of a total, in %) and jitter on every line.
    assert!(lines.len() >= 2, "a line per interval:\n{text}");
    for l in &lines {
        assert!(l.contains(" ms  ") && l.contains("%)"), "{l}\n{text}");
    }
    let (sender, receiver) = (
        summary_lines(&text, "sender"),
        summary_lines(&text, "receiver"),
    );
    assert_eq!((sender.len(), receiver.len()), (1, 1), "{text}");
    // Loss and jitter are the receiver's: not on the sender's line.
    assert!(
        !sender[0].contains(" ms") && !sender[0].contains('%'),
        "{text}"
    );
    assert!(
        receiver[0].contains(" ms") && receiver[0].contains("(0%)"),
        "{text}"
    );
    // Not a terminal: no escape codes at all.
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

#[test]
fn reverse_tcp_lines_are_the_receivers_and_interval_zero_turns_them_off() {
    let server = Server::start(&[]);
    let out = server.run(&["-R", "-t", "2", "-i", "1"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Reverse mode, remote host 127.0.0.1 is sending"),
        "{text}"
    );
    let header = text
        .lines()
        .find(|l| l.starts_with("[ ID]"))
        .expect("a heading");
    let retr = header.find("Retr").expect("a Retr column");
    // This side receives: no sender figure (retransmits, window) on its lines.
    let lines = interval_lines(&text);
    assert!(lines.len() >= 2, "{text}");
    for l in &lines {
        assert!(l.trim_end().chars().count() < retr, "{l}\n{text}");
    }
    // The summary: the sender's retransmits on the sender's line only.
    let sender = summary_lines(&text, "sender");
    let receiver = summary_lines(&text, "receiver");
    let cell = |l: &str| l.get(retr..retr + 4).unwrap_or("").trim().to_string();
    assert!(cell(sender[0]).parse::<u64>().is_ok(), "{text}");
    assert!(cell(receiver[0]).is_empty(), "{text}");
    let out = server.run(&["-t", "1", "-i", "0"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(interval_lines(&text).is_empty(), "{text}");
    assert_eq!(summary_lines(&text, "receiver").len(), 1, "{text}");
}

// Live lines on a terminal: tests/client_habits.rs, through a pseudo-terminal.

#[test]
fn refused_connection_is_one_line_with_a_hint_and_the_os_text_once() {
    let port = closed_port().to_string();
    let out = wirebench()
        .args(["run", &format!("127.0.0.1:{port}")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("refused").count(), 1, "{err}");
    assert!(
        err.contains("wirebench serve") && err.contains("-p"),
        "{err}"
    );
}

#[test]
fn json_on_failure_is_one_document_with_the_error() {
    let port = closed_port().to_string();
    for flag in ["--json", "-J"] {
        let out = wirebench()
            .args(["run", "127.0.0.1", "-p", &port, flag])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert!(
            doc["error"].as_str().is_some_and(|e| e.contains("refused")),
            "{doc}"
        );
        assert_eq!(doc["error_kind"], "connect");
        assert_eq!(doc["exit_code"], 1);
        assert_eq!(doc["test"]["protocol"], "tcp");
    }
}

#[test]
fn json_stream_writes_start_intervals_and_end() {
    let server = Server::start(&[]);
    let out = server.run(&["-u", "-b", "10M", "-t", "2", "--json-stream"]);
    assert!(out.status.success(), "{out:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(events.first().map(|e| &e["event"]), Some(&"start".into()));
    assert_eq!(events.last().map(|e| &e["event"]), Some(&"end".into()));
    let end = events.last().expect("end");
    // The same keys as the document.
    assert!(
        end["end"]["received"]["bytes"]
            .as_u64()
            .is_some_and(|b| b > 0),
        "{end}"
    );
    assert!(events
        .iter()
        .any(|e| e["event"] == "interval" && e["side"] == "server" && e["role"] == "receiver"));
    let port = closed_port().to_string();
    let out = wirebench()
        .args(["run", "127.0.0.1", "-p", &port, "--json-stream"])
        .output()
        .expect("run");
    let last: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("an error event");
    assert_eq!(last["event"], "error");
    assert_eq!(last["exit_code"], 1);
}

#[test]
fn ctrl_c_prints_the_partial_summary_and_exits_130() {
    let server = Server::start(&[]);
    let mut child = server.spawn(&["-t", "60", "-i", "1"]);
    let (_, mut rest) = read_until(&mut child, "[  1]");
    signal(&child, "-INT");
    let mut tail = String::new();
    rest.read_to_string(&mut tail).expect("read");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{tail}");
    assert!(tail.contains("interrupted after"), "{tail}");
    assert_eq!(summary_lines(&tail, "sender").len(), 1, "{tail}");
}

/// The same signal twice at once (a job manager signals every process of a job, and a lab
/// passes its own signal on too) is one request to stop: the summary is still printed.
#[test]
fn a_signal_delivered_twice_at_once_still_prints_the_summary() {
    let server = Server::start(&[]);
    let mut child = server.spawn(&["-t", "60", "-i", "1"]);
    let (_, mut rest) = read_until(&mut child, "[  1]");
    signal(&child, "-TERM");
    signal(&child, "-TERM");
    let mut tail = String::new();
    rest.read_to_string(&mut tail).expect("read");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(143), "{tail}");
    assert!(tail.contains("interrupted after"), "{tail}");
    assert_eq!(summary_lines(&tail, "sender").len(), 1, "{tail}");
}

#[test]
fn a_server_that_goes_away_gives_partial_results_not_a_made_up_loss() {
    let server = Server::start(&[]);
    let mut child = server.spawn(&["-u", "-b", "10M", "-t", "60", "-i", "1"]);
    let (_, mut rest) = read_until(&mut child, "[  1]");
    drop(server); // kills it mid-test
    let mut out = String::new();
    rest.read_to_string(&mut out).expect("read");
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("the server closed the connection after"),
        "{err}"
    );
    assert_eq!(summary_lines(&out, "sender").len(), 1, "{out}");
    assert!(!out.contains("100%") && !out.contains("100.000%"), "{out}");
}

#[test]
fn host_port_forms_and_iperf3_habits() {
    let server = Server::start(&[]);
    let out = wirebench()
        .args([
            "run",
            &format!("127.0.0.1:{}", server.port),
            "-t",
            "1",
            "-f",
            "m",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let out = wirebench()
        .args(["run", &format!("[::1]:{}", closed_port()), "-t", "1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    for (args, want) in [
        (&["-s"][..], "wirebench serve"),
        (&["-c", "example.net"][..], "wirebench run example.net"),
        (
            &["run", "-c", "example.net"][..],
            "wirebench run example.net",
        ),
    ] {
        let out = wirebench().args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let help = wirebench().args(["--help"]).output().expect("help");
    assert!(String::from_utf8_lossy(&help.stdout).contains("130 interrupted"));
}

/// A fake server that answers the first frame with a refusal full of escape sequences.
#[test]
fn a_hostile_servers_text_is_made_printable() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let fake = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let mut len = [0u8; 4];
        conn.read_exact(&mut len).expect("frame length");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        conn.read_exact(&mut body).expect("frame");
        let reason = "\u{1b}]0;owned\u{7}\u{1b}[31mred\nerror: forged line";
        let msg = serde_json::json!({"type": "refuse", "reason": reason}).to_string();
        let mut frame = (msg.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(msg.as_bytes());
        conn.write_all(&frame).expect("write");
    });
    let out = wirebench()
        .args(["run", &format!("127.0.0.1:{port}"), "-t", "1"])
        .output()
        .expect("run");
    fake.join().expect("fake server");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("forged line"), "{err}");
}

#[test]
fn completions_and_man_page_come_from_the_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let out = wirebench()
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("json-stream"), "{shell}");
    }
    let out = wirebench().arg("man").output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(".TH wirebench") && text.contains("wirebench-run"));
}

#[test]
fn file_both_directions_works_without_a_server() {
    let dir = std::env::temp_dir().join(format!("wb-both-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("payload.bin");
    std::fs::write(&file, vec![42u8; 200_000]).expect("write");
    let out = wirebench()
        .args(["run", "--file"])
        .arg(&file)
        .args(["--both-directions", "-i", "0"])
        .output()
        .expect("run");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("send: file payload.bin arrived identical")
            && text.contains("receive: file payload.bin arrived identical"),
        "{text}"
    );
}

/// An iperf3 server is named as such, at once (not after the set-up timeout).
#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_server_is_recognised() {
    common::require("iperf3");
    let port = closed_port().to_string();
    let mut iperf3 = Command::new("iperf3")
        .args(["-s", "-1", "--forceflush", "-p", &port, "-B", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start iperf3");
    // iperf3 prints its banner once it listens.
    let mut reader = BufReader::new(iperf3.stdout.take().expect("stdout"));
    let mut line = String::new();
    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line.contains("listening") {
            break;
        }
        line.clear();
    }
    let out = wirebench()
        .args(["run", &format!("127.0.0.1:{port}"), "-t", "1"])
        .output()
        .expect("run");
    let _ = iperf3.kill();
    let _ = iperf3.wait();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("iperf3 server"), "{err}");
}

#[test]
fn a_busy_port_names_the_flag() {
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port().to_string();
    let out = wirebench()
        .args(["serve", "--bind", "127.0.0.1", "-p", &port])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("in use").count(), 1, "{err}");
    assert!(err.contains("-p"), "{err}");
}

/// A server that prints a line per interval of each test (`serve --live always`), so a test
/// knows when data moves even while a `--json` client prints nothing; killed when dropped.
struct LiveServer {
    server: Server,
    lines: BufReader<std::process::ChildStdout>,
}

impl LiveServer {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// With more of `serve`'s flags.
    fn start_with(flags: &[&str]) -> Self {
        let mut args = vec!["--live", "always"];
        args.extend_from_slice(flags);
        let (server, lines) = Server::launch(&args);
        Self { server, lines }
    }

    /// A client of this server running in the background.
    fn spawn(&self, args: &[&str]) -> Child {
        self.server.spawn(args)
    }

    /// Waits for the server's first interval line: the test's data is moving.
    fn wait_for_data(&mut self) {
        loop {
            let mut line = String::new();
            let n = self.lines.read_line(&mut line).expect("server stdout");
            assert!(n > 0, "the server ended before a test's interval");
            if line.starts_with('[') {
                return;
            }
        }
    }
}

/// The client's whole stdout and its exit code, once it has ended.
fn finish(child: Child) -> (String, Option<i32>) {
    let out = child.wait_with_output().expect("wait");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

#[test]
fn sigterm_mid_run_prints_one_json_document_marked_interrupted_and_exits_143() {
    let mut server = LiveServer::start();
    let child = server.spawn(&["-t", "60", "-i", "0.2", "--json"]);
    server.wait_for_data();
    signal(&child, "-TERM");
    let (out, code) = finish(child);
    assert_eq!(code, Some(143), "{out}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["error_kind"], "interrupted");
    assert_eq!(doc["signal"], "SIGTERM");
    assert_eq!(doc["exit_code"], 143);
    // What both sides measured until then: the server's report was exchanged.
    for side in ["sent", "received"] {
        let bytes = doc["end"][side]["bytes"].as_u64().unwrap_or(0);
        assert!(bytes > 0, "{side}: {}", doc["end"]);
    }
    assert!(doc["end"]["duration_s"].as_f64().unwrap_or(0.0) < 60.0);
}

#[test]
fn sigterm_during_both_directions_prints_the_measured_way_as_one_document() {
    let dir = std::env::temp_dir().join(format!("wirebench-both-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // The server can send the file back (it refuses --both-directions otherwise).
    let files = dir.to_str().expect("utf-8").to_owned();
    let mut server = LiveServer::start_with(&["--files-dir", &files]);
    let file = dir.join("f.bin");
    std::fs::write(&file, vec![7u8; 20_000_000]).expect("file");
    let path = file.to_str().expect("utf-8");
    // 20 MB at 20 Mbit/s: 8 s each way; the signal comes in the first.
    let child = server.spawn(&["--file", path, "--both-directions", "-b", "20M", "--json"]);
    server.wait_for_data();
    signal(&child, "-TERM");
    let (out, code) = finish(child);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(143), "{out}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["error_kind"], "interrupted");
    assert_eq!(doc["signal"], "SIGTERM");
    let sent = doc["end"]["sent"]["bytes"].as_u64().unwrap_or(0);
    assert!(sent > 0 && sent < 20_000_000, "{}", doc["end"]);
}

#[test]
fn sighup_mid_run_ends_the_json_stream_with_the_interrupted_document() {
    let server = Server::start(&[]);
    let mut child = server.spawn(&["-R", "-t", "60", "-i", "0.2", "--json-stream"]);
    let (_, mut rest) = read_until(&mut child, "\"interval\"");
    signal(&child, "-HUP");
    let mut tail = String::new();
    rest.read_to_string(&mut tail).expect("read");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(129), "{tail}");
    let last: Value = tail
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("a last event");
    // The stream's closing event of a test that did not complete (docs/results.md).
    assert_eq!(last["event"], "error", "{last}");
    assert_eq!(last["error_kind"], "interrupted");
    assert_eq!(last["signal"], "SIGHUP");
    assert_eq!(last["exit_code"], 129);
    assert!(
        last["end"]["received"]["bytes"].as_u64().unwrap_or(0) > 0,
        "{last}"
    );
    assert!(
        last["end"]["sent"]["bytes"].as_u64().unwrap_or(0) > 0,
        "{last}"
    );
}

#[test]
fn reverse_with_the_server_killed_says_unknown_for_what_it_sent_never_zero() {
    // JSON: null.
    let mut server = LiveServer::start();
    let child = server.spawn(&["-R", "-t", "60", "-i", "0.2", "--json"]);
    server.wait_for_data();
    drop(server); // kills it mid-test
    let (out, code) = finish(child);
    assert_eq!(code, Some(1), "{out}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert!(doc["end"]["sent"]["bytes"].is_null(), "{}", doc["end"]);
    assert!(doc["end"]["sent"]["messages"].is_null(), "{}", doc["end"]);
    assert!(doc["end"]["sent_bps"].is_null(), "{}", doc["end"]);
    assert!(doc["end"]["received"]["bytes"].as_u64().unwrap_or(0) > 0);
    // Interval by interval too: the sender's figures unknown, the receiver's measured.
    let intervals = doc["intervals"].as_array().expect("intervals");
    assert!(!intervals.is_empty(), "{doc}");
    for i in intervals {
        assert!(i["sent_bytes"].is_null() && i["sent_bps"].is_null(), "{i}");
        assert!(i["received_bytes"].as_u64().is_some(), "{i}");
    }
    // The table: "unknown", not 0; in the summary and in -V's totals.
    let mut server = LiveServer::start();
    let child = server.spawn(&["-R", "-t", "60", "-i", "0.2", "-V"]);
    server.wait_for_data();
    drop(server);
    let (out, code) = finish(child);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("[  1]  sender: unknown")),
        "{out}"
    );
    assert_eq!(summary_lines(&out, "receiver").len(), 1, "{out}");
    let row = out
        .lines()
        .find(|l| l.contains(" tcp ") && l.contains("stream"))
        .unwrap_or_else(|| panic!("no table row in {out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // Time, sent messages, sent bytes, read messages, read bytes, ...
    assert_eq!(&cells[1..3], ["unknown", "unknown"], "{row}");
    assert!(cells[4].parse::<u64>().is_ok_and(|b| b > 0), "{row}");
    assert!(!out.contains(" 0 bit/s"), "{out}");
}

#[test]
fn sweep_takes_host_port_as_run_does() {
    let server = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("wirebench-hostport-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let target = format!("127.0.0.1:{}", server.port);
    for (i, args) in [
        vec![target.as_str(), "--vary", "size=1000"],
        vec!["--targets", target.as_str()],
    ]
    .into_iter()
    .enumerate()
    {
        let exp = dir.join(i.to_string());
        let out = wirebench()
            .args(["sweep", "-n", "100K", "--repeat", "1", "--pause", "0s"])
            .args(&args)
            .arg("--out")
            .arg(&exp)
            .output()
            .expect("run sweep");
        assert!(
            out.status.success(),
            "sweep {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value =
            serde_json::from_slice(&std::fs::read(exp.join("summary.json")).expect("summary"))
                .expect("summary JSON");
        let file = summary["points"][0]["files"][0].as_str().expect("a trial");
        let trial: Value =
            serde_json::from_slice(&std::fs::read(exp.join(file)).expect("trial")).expect("JSON");
        assert_eq!(trial["server"], target.as_str(), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rate as the summary prints it: the figure and its unit (`9.48 Gbit/s`).
fn rate_of(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.ends_with("bit/s") || w.ends_with("B/s"))
        .unwrap_or_else(|| panic!("no rate in {line:?}"));
    format!("{} {}", words[at - 1], words[at])
}

#[test]
fn on_a_pipe_connecting_comes_at_once_then_lines_while_the_test_runs() {
    // A server that takes the connection and never answers: the client waits for its
    // greeting, and has already said what it is doing.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port().to_string();
    let mut child = wirebench()
        .args(["run", "127.0.0.1", "-p", &port, "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let (lines, _) = read_until(&mut child, "Connecting to host");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        lines,
        [format!("Connecting to host 127.0.0.1, port {port}\n")],
        "the first line"
    );
    drop(silent);
    // Without -i, on a pipe: a line per second, printed as the test goes (the test is
    // still running when the first arrives), without escape codes.
    let server = Server::start(&[]);
    let mut child = server.spawn(&["-t", "4"]);
    let (first, mut rest) = read_until(&mut child, "0.00-1.00 s");
    let running = child.try_wait().expect("try_wait").is_none();
    let mut tail = String::new();
    rest.read_to_string(&mut tail).expect("read");
    let status = child.wait().expect("wait");
    assert!(status.success(), "{first:?}{tail}");
    assert!(running, "the first line came only at the end:\n{first:?}");
    assert!(
        first[0].starts_with("Connecting to host 127.0.0.1"),
        "{first:?}"
    );
    let text = format!("{}{tail}", first.concat());
    assert!(interval_lines(&text).len() >= 4, "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

#[test]
fn parallel_streams_show_a_line_each_and_their_sum_with_the_senders_figures() {
    let server = Server::start(&[]);
    let out = server.run(&["-P", "2", "-t", "2"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = interval_lines(&text);
    for tag in ["[  1]", "[  2]", "[SUM]"] {
        let n = lines.iter().filter(|l| l.starts_with(tag)).count();
        assert!(n >= 2, "{tag}: {n} lines\n{text}");
    }
    // This side sends: every stream's line has its retransmits and window.
    let header = text
        .lines()
        .find(|l| l.starts_with("[ ID]"))
        .expect("heading");
    assert!(header.ends_with("Retr       Cwnd"), "{header}");
    for l in lines.iter().filter(|l| !l.starts_with("[SUM]")) {
        let cells: Vec<&str> = l.split_whitespace().collect();
        assert!(cells[cells.len() - 3].parse::<u64>().is_ok(), "{l}");
        assert!(l.ends_with("MB") || l.ends_with("KB"), "{l}");
    }
    // The summary: a sender and a receiver line per stream and for the sum; the
    // retransmits on the senders' lines add up to the sum's.
    for role in ["sender", "receiver"] {
        let tags: Vec<&str> = summary_lines(&text, role).iter().map(|l| &l[..5]).collect();
        assert_eq!(tags, ["[  1]", "[  2]", "[SUM]"], "{role}\n{text}");
    }
    let retr = |l: &str| -> u64 {
        let cells: Vec<&str> = l.split_whitespace().collect();
        cells[cells.len() - 2].parse().expect("retransmits")
    };
    let senders = summary_lines(&text, "sender");
    assert_eq!(
        retr(senders[0]) + retr(senders[1]),
        retr(senders[2]),
        "{text}"
    );
    // This side receiving (TCP), and the server receiving UDP (its streams' lines come
    // over the control connection): a line per stream and their sum too.
    for args in [&["-R"][..], &["-u", "-b", "20M"][..]] {
        let out = server.run(&[&["-P", "2", "-t", "2"], args].concat());
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for tag in ["[  1]", "[  2]", "[SUM]"] {
            let n = interval_lines(&text)
                .iter()
                .filter(|l| l.starts_with(tag))
                .count();
            assert!(n >= 2, "{args:?} {tag}\n{text}");
        }
        if args[0] == "-u" {
            // The receiver's loss on every line of it, each stream's and the sum's.
            assert!(
                interval_lines(&text).iter().all(|l| l.contains("%)")),
                "{text}"
            );
        }
    }
}

#[test]
fn one_answer_in_the_lines_summary_the_table_and_the_json() {
    let server = Server::start(&[]);
    for omit in [&[][..], &["-O", "1"][..]] {
        // The summary and -V's totals table of one run give the receiver the same rate.
        let out = server.run(&[&["-t", "2", "-f", "m", "-V"], omit].concat());
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let receiver = summary_lines(&text, "receiver");
        assert_eq!(receiver.len(), 1, "{text}");
        let answer = rate_of(receiver[0]);
        assert!(answer.ends_with(" Mbit/s"), "-f m: {answer}");
        let row = text
            .lines()
            .find(|l| l.contains(" tcp ") && l.contains(" stream "))
            .unwrap_or_else(|| panic!("no totals row in {text}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        // ..., send rate, its unit, receive rate, its unit, lost.
        let n = cells.len();
        assert_eq!(
            format!("{} {}", cells[n - 3], cells[n - 2]),
            answer,
            "{text}"
        );
        if !omit.is_empty() {
            assert!(receiver[0].contains(" 1.00-"), "after the omit: {text}");
        }
        // The JSON's figure, printed by the same table, is what the summary shows of it.
        let v = server.run_json(&[&["-t", "2"], omit].concat());
        let doc: wirebench_proto::results::Results =
            serde_json::from_value(v.clone()).expect("a results document");
        let key = if omit.is_empty() {
            &v["end"]["received_bps"]
        } else {
            &v["end"]["after_omit"]["received_bps"]
        };
        let bps = key.as_f64().expect("received_bps");
        let mut table = Vec::new();
        let human = wirebench_report::Human {
            units: wirebench_report::export::RateUnits::Bits('m'),
            verbose: true,
        };
        wirebench_report::Exporter::export(&human, &doc, &mut table).expect("table");
        let table = String::from_utf8(table).expect("utf-8");
        let want = format!("{:.2} Mbit/s", bps / 1e6);
        assert_eq!(
            rate_of(summary_lines(&table, "receiver")[0]),
            want,
            "{table}"
        );
        assert!(
            table.matches(&want).count() >= 2,
            "summary and totals: {table}"
        );
    }
}

#[test]
fn without_verbose_every_line_fits_80_columns() {
    let server = Server::start(&[]);
    for args in [
        &["-t", "2"][..],
        &["-t", "2", "-P", "2"][..],
        &["-t", "2", "--bidir"][..],
        &["-t", "2", "-u", "-b", "100M"][..],
        &["-t", "2", "-u", "-b", "100M", "-R", "-P", "2"][..],
        &["-t", "2", "--mode", "rr"][..],
        &["-t", "2", "-O", "1"][..],
    ] {
        let out = server.run(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for l in text.lines() {
            assert!(l.chars().count() <= 80, "{args:?}: {l:?}\n{text}");
        }
        // A few lines of summary: no percentiles, pacing, cost or data path without -V.
        for word in [
            "p99.9",
            "interarrival",
            "pacing",
            "cost:",
            "TCP_INFO",
            "udpmon",
        ] {
            assert!(!text.contains(word), "{args:?}: {word}\n{text}");
        }
        if !args.contains(&"-u") {
            assert!(!text.contains("jitter"), "{args:?}: a TCP test\n{text}");
        }
    }
}

#[test]
fn verbose_is_dash_v_and_the_version_is_still_there() {
    let server = Server::start(&[]);
    for flag in ["-V", "--verbose"] {
        let out = server.run(&["-u", "-b", "50M", "-t", "1", flag]);
        assert!(out.status.success(), "{flag}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for word in [
            "one-way delay",
            "interarrival",
            "p99.9",
            "cost:",
            "Time (ms)",
        ] {
            assert!(text.contains(word), "{flag}: {word}\n{text}");
        }
    }
    for args in [&["--version"][..], &["run", "--version"][..]] {
        let out = wirebench().args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(env!("CARGO_PKG_VERSION")), "{args:?}: {text}");
    }
}

#[test]
fn request_response_lines_are_in_transactions_and_round_trips() {
    let server = Server::start(&[]);
    let out = server.run(&["--mode", "rr", "-t", "2"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text
        .lines()
        .find(|l| l.starts_with("[ ID]"))
        .expect("heading");
    assert!(
        header.contains("Trans/s") && header.contains("RTT p99"),
        "{header}"
    );
    let lines = interval_lines(&text);
    assert!(lines.len() >= 2, "{text}");
    for l in &lines {
        assert!(!l.contains("bit/s") && !l.contains(" MB"), "{l}");
        let cells: Vec<&str> = l.split_whitespace().collect();
        assert!(cells[4].parse::<u64>().is_ok_and(|n| n > 0), "{l}");
    }
    // The totals in one unit style, each figure with its own unit (as rrul's).
    let rr = text
        .lines()
        .find(|l| l.starts_with("rr: "))
        .expect("rr line");
    assert!(
        rr.contains(" transactions, ") && rr.contains("RTT p50 "),
        "{rr}"
    );
    for part in rr
        .split(", ")
        .filter(|p| p.contains("p50") || p.contains("max"))
    {
        assert!(
            part.ends_with("µs") || part.ends_with("ms") || part.ends_with(" s"),
            "{part}: {rr}"
        );
    }
}

/// Issue 46: `run -b 100 -t 3` printed `0.00-0.00 s  131.07 KB  867.75 Mbit/s  sender`, and
/// `-u -b 100 -t 3` 21.45 Mbit/s for one datagram. The summary lines and the JSON's headline
/// rates are over the test's own time, as iperf3's (here -t 1); an amount's over the time
/// it took; the old figure stays as `active_bps`.
#[test]
fn headline_rates_are_over_the_tests_own_time() {
    let s = Server::start(&[]);
    for (args, bytes, shown) in [
        (&["-b", "100", "-t", "1"][..], 131_072u64, "1.05 Mbit/s"),
        (&["-u", "-b", "100", "-t", "1"][..], 1472, "11.78 kbit/s"),
    ] {
        let v = s.run_json(args);
        let end = &v["end"];
        let secs = end["duration_s"].as_f64().expect("duration_s");
        assert!((1.0..1.05).contains(&secs), "{args:?}: {end}");
        for side in ["sent", "received"] {
            assert_eq!(end[side]["bytes"], bytes, "{args:?}: {end}");
            let rate = end[format!("{side}_bps")].as_f64().expect("rate");
            let over_the_test = bytes as f64 * 8.0 / end[side]["duration_s"].as_f64().expect("s");
            assert!((rate - over_the_test).abs() < 1e-6, "{args:?}: {end}");
            assert!(rate < 1.1e6, "{args:?}: {side} at {rate} bit/s");
            // The message's own moment is kept, under its own name.
            assert!(end[side]["active_bps"].as_f64().expect("active") > rate);
        }
        let out = s.run(&[args, &["-i", "0"]].concat());
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for role in ["sender", "receiver"] {
            let line = summary_lines(&text, role).pop().expect("a summary line");
            assert!(
                line.contains("0.00-1.00 s") && line.contains(shown),
                "{line}"
            );
        }
    }
    // An amount: its time is the time it took, on each side.
    let v = s.run_json(&["-n", "50M"]);
    let end = &v["end"];
    let secs = end["sent"]["duration_s"].as_f64().expect("s");
    assert!(secs > 0.0 && secs < 5.0, "{end}");
    assert_eq!(end["sent"]["duration_s"], end["sent"]["active_s"], "{end}");
}
