//! Issue 44, "Unknown stays unknown": a server killed mid-test measured nothing the client
//! can show. Whatever side or direction lost its peer, each figure that side could not
//! observe is null in the document (docs/results.md), never 0 nor "all lost", and each it
//! did observe is there. A test per protocol and direction, each killing the server by its
//! pid once data is seen moving in the client's NDJSON stream.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::Command;

use common::Server;
use serde_json::Value;

/// An interval event that says data moved: `side` (client or server) as `role`.
type Flow = (&'static str, &'static str);

/// Runs `run ARGS --json-stream` (60 s, 0.2 s intervals) against a fresh server, kills the
/// server with SIGKILL by its pid once every flow of `until` has reported an interval with
/// bytes in it, and returns the stream's closing event and the client's exit code.
fn killed_mid_test(args: &[&str], until: &[Flow]) -> (Value, Option<i32>) {
    let server = Server::start(&[]);
    let mut child = server.spawn(&[args, &["-t", "60", "-i", "0.2", "--json-stream"]].concat());
    let mut lines = BufReader::new(child.stdout.take().expect("client stdout"));
    let mut seen: Vec<Flow> = Vec::new();
    while !until.iter().all(|f| seen.contains(f)) {
        let mut line = String::new();
        let n = lines
            .read_line(&mut line)
            .expect("read the client's stream");
        assert!(
            n > 0,
            "the client ended before data moved ({seen:?} of {until:?})"
        );
        let ev: Value = serde_json::from_str(&line).expect("an NDJSON event");
        assert_ne!(ev["event"], "error", "{ev}");
        if ev["event"] == "interval" && ev["bytes"].as_u64().unwrap_or(0) > 0 {
            if let Some(f) = until
                .iter()
                .find(|(side, role)| ev["side"] == *side && ev["role"] == *role)
            {
                seen.push(*f);
            }
        }
    }
    let killed = Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let mut rest = String::new();
    lines
        .read_to_string(&mut rest)
        .expect("the rest of the stream");
    let status = child.wait().expect("wait for the client");
    let last = rest
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no closing event after the kill: {rest:?}"));
    let doc: Value = serde_json::from_str(last).expect("the closing event");
    assert_eq!(doc["event"], "error", "{doc}");
    assert_eq!(doc["error_kind"], "peer_closed", "{}", doc["error"]);
    (doc, status.code())
}

/// The keys of `end.udp` the receiver counts: all null without its report.
const RECEIVER_UDP: [&str; 13] = [
    "lost",
    "duplicates",
    "reordered",
    "loss_ratio",
    "jitter_ms",
    "too_old",
    "foreign",
    "max_reorder_extent",
    "clocks",
    "loss_runs",
    "last_in_order_seq",
    "first_lost_seq",
    "bandwidth_without_loss_bps",
];

/// The totals of one side (`sent` or `received`) of `end`.
const TOTALS: [&str; 5] = [
    "bytes",
    "messages",
    "duration_s",
    "transfer_s",
    "transfer_bps",
];

/// `key` is in `v` and null: unknown, the key kept.
#[track_caller]
fn null(v: &Value, key: &str) {
    assert!(
        v.get(key).is_some_and(Value::is_null),
        "{key} should be null: {v}"
    );
}

/// A positive number at `key` of `v`.
#[track_caller]
fn positive(v: &Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} should be a number: {v}"));
    assert!(x > 0.0, "{key}: {v}");
    x
}

/// The client sent and the server, receiving, died: what was sent is known; what arrived,
/// and so any loss, is not.
#[track_caller]
fn receiver_gone(half: &Value, udp: bool) {
    let e = &half["end"];
    for key in TOTALS {
        null(&e["received"], key);
        assert!(e["sent"][key].is_number(), "sent.{key}: {e}");
    }
    null(e, "received_bps");
    positive(e, "sent_bps");
    let sent = positive(&e["sent"], "bytes");
    assert!(positive(&e["sent"], "messages") <= sent);
    positive(&e["sent"], "duration_s");
    if udp {
        let u = &e["udp"];
        for key in RECEIVER_UDP {
            null(u, key);
        }
        assert_eq!(u["sequenced"], true, "{u}");
        assert_eq!(e["local_drops"], 0, "the client's own count: {e}");
    } else {
        assert!(e.get("udp").is_none(), "{e}");
    }
    let intervals = half["intervals"].as_array().expect("intervals");
    assert!(!intervals.is_empty(), "{half}");
    for i in intervals {
        for key in ["received_bytes", "received_messages", "received_bps"] {
            null(i, key);
        }
        assert!(i["sent_bytes"].as_u64().is_some(), "{i}");
        if udp {
            null(i, "lost");
        }
    }
}

/// The server sent and died; the client received: what arrived is known, what was sent is
/// not. Over UDP `lost` is the gaps the client saw (its loss runs), and with the sender's
/// count unknown, `loss_ratio` is null.
#[track_caller]
fn sender_gone(half: &Value, udp: bool, size: u64) {
    let e = &half["end"];
    for key in TOTALS {
        null(&e["sent"], key);
    }
    for key in ["sent_bps", "retransmits", "local_drops"] {
        null(e, key);
    }
    positive(e, "received_bps");
    let bytes = positive(&e["received"], "bytes");
    let messages = positive(&e["received"], "messages");
    positive(&e["received"], "duration_s");
    if udp {
        assert_eq!(
            bytes,
            messages * size as f64,
            "every datagram counted once: {e}"
        );
        let u = &e["udp"];
        let lost = u["lost"].as_u64().unwrap_or_else(|| panic!("lost: {u}"));
        assert_eq!(u["loss_runs"]["lost"], lost, "{u}");
        assert!((lost as f64) < messages, "loopback loses little: {u}");
        null(u, "loss_ratio");
        assert!(u["jitter_ms"].as_f64().is_some_and(|j| j >= 0.0), "{u}");
        for key in ["duplicates", "reordered", "too_old", "foreign"] {
            assert!(u[key].as_u64().is_some(), "{key}: {u}");
        }
        assert_eq!(u["clocks"], "same-host", "{u}");
        assert!(u["last_in_order_seq"].as_u64().is_some(), "{u}");
    }
    let intervals = half["intervals"].as_array().expect("intervals");
    assert!(!intervals.is_empty(), "{half}");
    for i in intervals {
        for key in ["sent_bytes", "sent_messages", "sent_bps"] {
            null(i, key);
        }
        assert!(i["received_bytes"].as_u64().is_some(), "{i}");
        if udp {
            assert!(i["lost"].as_u64().is_some(), "{i}");
        }
    }
}

const UDP: &[&str] = &["-u", "-b", "10M", "-l", "1200"];
const TCP: &[&str] = &["-b", "200M"];
const CLIENT_SENDS: Flow = ("server", "receiver");
const CLIENT_RECEIVES: Flow = ("client", "receiver");

#[test]
fn issue_44_udp_forward_with_the_server_killed() {
    let (doc, code) = killed_mid_test(UDP, &[("client", "sender"), CLIENT_SENDS]);
    assert_eq!(code, Some(1));
    receiver_gone(&doc, true);
}

#[test]
fn issue_44_udp_reverse_with_the_server_killed() {
    let (doc, code) = killed_mid_test(&[UDP, &["-R"]].concat(), &[CLIENT_RECEIVES]);
    assert_eq!(code, Some(1));
    sender_gone(&doc, true, 1200);
}

#[test]
fn issue_44_udp_bidir_with_the_server_killed() {
    let (doc, code) = killed_mid_test(
        &[UDP, &["--bidir"]].concat(),
        &[CLIENT_SENDS, CLIENT_RECEIVES],
    );
    assert_eq!(code, Some(1));
    receiver_gone(&doc, true);
    sender_gone(&doc["reverse"], true, 1200);
}

#[test]
fn issue_44_tcp_forward_with_the_server_killed() {
    let (doc, code) = killed_mid_test(TCP, &[("client", "sender"), CLIENT_SENDS]);
    assert_eq!(code, Some(1));
    receiver_gone(&doc, false);
}

#[test]
fn issue_44_tcp_reverse_with_the_server_killed() {
    let (doc, code) = killed_mid_test(&[TCP, &["-R"]].concat(), &[CLIENT_RECEIVES]);
    assert_eq!(code, Some(1));
    sender_gone(&doc, false, 0);
}

#[test]
fn issue_44_tcp_bidir_with_the_server_killed() {
    let (doc, code) = killed_mid_test(
        &[TCP, &["--bidir"]].concat(),
        &[CLIENT_SENDS, CLIENT_RECEIVES],
    );
    assert_eq!(code, Some(1));
    receiver_gone(&doc, false);
    sender_gone(&doc["reverse"], false, 0);
}

/// The text summary says "unknown" where the JSON says null: a line for each side that
/// never reported, and the totals' loss, never "100%" nor "0/0".
#[test]
fn issue_44_the_summary_says_unknown_for_both_halves_of_a_bidir_test() {
    let server = Server::start(&[]);
    let mut child = server.spawn(&[UDP, &["--bidir", "-t", "60", "-i", "0.2", "-V"]].concat());
    let mut lines = BufReader::new(child.stdout.take().expect("client stdout"));
    // The live lines of both directions: the server's (c->s) come over the control
    // connection, the client's (s->c) are its own.
    let mut seen = [false, false];
    while seen != [true, true] {
        let mut line = String::new();
        let n = lines.read_line(&mut line).expect("read the client's lines");
        assert!(n > 0, "the client ended before data moved both ways");
        for (i, tag) in ["[  1][c->s]", "[  1][s->c]"].into_iter().enumerate() {
            seen[i] |= line.starts_with(tag) && !line.contains(" 0 B ");
        }
    }
    let killed = Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let mut out = String::new();
    lines.read_to_string(&mut out).expect("the rest");
    assert_eq!(child.wait().expect("wait").code(), Some(1), "{out}");
    assert!(
        out.contains("[  1][c->s]  receiver: unknown"),
        "the server received: {out}"
    );
    assert!(
        out.contains("[  1][s->c]  sender: unknown"),
        "the server sent: {out}"
    );
    let receiver = out
        .lines()
        .find(|l| l.starts_with("[  1][s->c]") && l.ends_with("receiver"))
        .unwrap_or_else(|| panic!("no s->c receiver line: {out}"));
    assert!(
        receiver.contains("/unknown"),
        "lost of a total unknown: {receiver}"
    );
    assert!(
        out.contains("udp: unknown lost, unknown duplicates, unknown reordered, jitter unknown"),
        "{out}"
    );
    assert!(!out.contains("100%") && !out.contains("100.000%"), "{out}");
}
