//! `run --iperf3-json` (issue 46): the same test run by `iperf3 -c -J` against `iperf3 -s`
//! and by `wirebench run --iperf3-json` against `wirebench serve`, on loopback (TCP, `-R`,
//! `-P 2`, UDP at 10 Mbit/s, `--bidir`). Every key path of iperf3's document must be in ours
//! with the same JSON type, but for the exceptions listed in [`NULL`] and [`ABSENT`] (what
//! wirebench does not measure: null, never a made-up number; docs/results.md "iperf3's
//! schema"). Then an independent reader of iperf3's JSON, the iperf3 Python package's
//! `TestResult`, reads our documents. Both need tools (iperf3; the package, in the virtual
//! environment `.ci/run` makes), so they are `#[ignore]`d and fail without them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::process::{Command, Stdio};

use common::{require, wait_for_line, Server};
use serde_json::Value;

/// The tests compared, as iperf3's and wirebench's flags (they take the same ones).
const CASES: &[(&str, &[&str])] = &[
    ("tcp", &[]),
    ("reverse", &["-R"]),
    ("parallel", &["-P", "2"]),
    ("udp", &["-u", "-b", "10M"]),
    ("bidir", &["--bidir"]),
];

/// Keys iperf3 fills with a number or string that are `null` in ours: wirebench has no
/// measurement for them.
const NULL: &[(&str, &str)] = &[
    (
        "start.cookie",
        "wirebench's cookie keys the UDP sequence numbers: a secret",
    ),
    (
        "intervals[].streams[].snd_wnd",
        "TCP_INFO's window, round trip and path MTU are read at the end only (end.tcp)",
    ),
    ("intervals[].streams[].rtt", "as snd_wnd"),
    ("intervals[].streams[].rttvar", "as snd_wnd"),
    ("intervals[].streams[].pmtu", "as snd_wnd"),
    ("end.streams[].sender.max_snd_wnd", "as snd_wnd"),
    (
        "end.streams[].sender.max_rtt",
        "only the smoothed round trip at the end is measured",
    ),
    ("end.streams[].sender.min_rtt", "as max_rtt"),
    ("end.streams[].sender.mean_rtt", "as max_rtt"),
    (
        "end.sum_sent.jitter_ms",
        "UDP: the sender measures no jitter (iperf3 prints 0)",
    ),
];

/// Every key path of `v` (array elements as `[]`) and the JSON types found there.
fn paths(v: &Value, at: &str, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(a) => {
            for x in a {
                paths(x, &format!("{at}[]"), out);
            }
            "array"
        }
        Value::Object(m) => {
            for (k, x) in m {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                paths(x, &p, out);
            }
            "object"
        }
    };
    out.entry(at.to_string()).or_default().insert(kind);
}

/// Where iperf3's document and ours differ: keys missing from ours, or of another type,
/// that no exception explains.
fn differences(theirs: &Value, ours: &Value) -> Vec<String> {
    let (mut t, mut o) = (BTreeMap::new(), BTreeMap::new());
    paths(theirs, "", &mut t);
    paths(ours, "", &mut o);
    let mut wrong = Vec::new();
    for (path, kinds) in &t {
        let null_ok = NULL.iter().any(|(p, _)| p == path);
        let Some(ours) = o.get(path) else {
            wrong.push(format!("{path}: missing (iperf3: {kinds:?})"));
            continue;
        };
        let allowed: BTreeSet<&str> = match null_ok {
            true => kinds.iter().copied().chain(["null"]).collect(),
            false => kinds.clone(),
        };
        if !ours.is_subset(&allowed) {
            wrong.push(format!("{path}: {ours:?}, iperf3: {kinds:?}"));
        }
    }
    wrong
}

/// A free TCP port on loopback (iperf3 takes no port 0).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `iperf3 -c -J` with `args` for 1 s against an `iperf3 -s -1` of its own: its document.
fn iperf3_document(args: &[&str]) -> Value {
    let port = free_port().to_string();
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "--forceflush", "-B", "127.0.0.1", "-p", &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start iperf3 -s");
    wait_for_line(&mut server, "Server listening");
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port, "-t", "1", "-J"])
        .args(args)
        .output()
        .expect("run iperf3 -c");
    let _ = server.kill();
    let _ = server.wait();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J {args:?} ({e}): {:?}", out.stdout))
}

/// `wirebench run --iperf3-json` with `args` for 1 s against `server`: its document.
fn our_document(server: &Server, args: &[&str]) -> Value {
    let out = server.run(&[&["-t", "1", "--iperf3-json"], args].concat());
    assert!(
        out.status.success(),
        "wirebench run --iperf3-json {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--iperf3-json's JSON")
}

#[test]
#[ignore = "needs iperf3"]
fn every_key_of_iperf3s_document_is_in_ours_with_its_type() {
    require("iperf3");
    let server = Server::start(&[]);
    let mut wrong = Vec::new();
    for (case, args) in CASES {
        let theirs = iperf3_document(args);
        let ours = our_document(&server, args);
        assert!(ours.get("error").is_none(), "{case}: {ours}");
        for d in differences(&theirs, &ours) {
            wrong.push(format!("{case}: {d}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_stray_key_or_type_is_found_and_an_exception_is_not() {
    let theirs = serde_json::json!({"start": {"cookie": "x", "version": "iperf 3.12"},
        "intervals": [{"streams": [{"bytes": 1}]}], "end": {"sum": {"bytes": 2}}});
    let ours = serde_json::json!({"start": {"cookie": null, "version": 3},
        "intervals": [{"streams": []}], "end": {}});
    let d = differences(&theirs, &ours);
    assert_eq!(
        d,
        [
            "end.sum: missing (iperf3: {\"object\"})",
            "end.sum.bytes: missing (iperf3: {\"number\"})",
            "intervals[].streams[]: missing (iperf3: {\"object\"})",
            "intervals[].streams[].bytes: missing (iperf3: {\"number\"})",
            "start.version: {\"number\"}, iperf3: {\"string\"}",
        ]
    );
}

/// With `-P 2` (and `--bidir`, each way), each interval has an entry per stream, the
/// client's own record of it, and the entries add up to the interval's sum; every stream's
/// connection is named with this side's and the server's address.
#[test]
fn each_streams_intervals_add_up_to_the_sum_and_its_connection_is_named() {
    let server = Server::start(&[]);
    for args in [
        &["-P", "2"][..],
        &["-P", "2", "-R"],
        &["-P", "2", "--bidir"],
    ] {
        let ours = our_document(&server, args);
        let ways = if args.contains(&"--bidir") { 2 } else { 1 };
        let connected = ours["start"]["connected"].as_array().expect("connected");
        assert_eq!(connected.len(), 2 * ways, "{args:?}: {connected:?}");
        for (i, c) in connected.iter().enumerate() {
            assert_eq!(c["socket"], i as u64 + 1, "{args:?}");
            assert_eq!(c["remote_host"], "127.0.0.1", "{args:?}");
            assert_eq!(c["remote_port"], server.port, "{args:?}");
            assert!(c["local_port"].as_u64().is_some_and(|p| p > 0), "{c}");
        }
        let intervals = ours["intervals"].as_array().expect("intervals");
        assert!(!intervals.is_empty(), "{args:?}");
        let mut moved = 0;
        for iv in intervals {
            let streams = iv["streams"].as_array().expect("streams");
            assert_eq!(streams.len(), 2 * ways, "{args:?}: {iv}");
            for (key, way) in [("sum", 0), ("sum_bidir_reverse", 1)].iter().take(ways) {
                let own = &streams[2 * way..2 * way + 2];
                let bytes: u64 = own
                    .iter()
                    .map(|s| s["bytes"].as_u64().expect("bytes"))
                    .sum();
                assert_eq!(iv[key]["bytes"], bytes, "{args:?} {key}: {iv}");
                moved += bytes;
            }
        }
        assert!(moved > 0, "{args:?}: nothing moved");
    }
}

/// The iperf3 Python package's interpreter: the virtual environment `.ci/run` makes.
fn python_with_iperf3() -> String {
    let dir = std::env::var("XDG_CACHE_HOME")
        .or_else(|_| std::env::var("HOME").map(|h| format!("{h}/.cache")))
        .unwrap_or_default();
    let python = format!("{dir}/wirebench-iperf3-python/bin/python3");
    let found = Command::new(&python)
        .args(["-c", "import iperf3"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "this test needs the iperf3 Python package in {python}: python3 -m venv DIR and DIR/bin/pip install iperf3==0.1.11, as .ci/run does"
    );
    python
}

/// What `iperf3.TestResult` read from a document, as JSON.
const READ: &str = r#"
import json, sys, iperf3
r = iperf3.TestResult(sys.stdin.read())
assert r.error is None, r.error
out = {"protocol": r.protocol, "num_streams": r.num_streams, "reverse": r.reverse,
       "type": r.type, "host_total": r.local_cpu_total, "remote_total": r.remote_cpu_total}
if r.protocol == "TCP":
    out.update(sent_bps=r.sent_bps, received_Mbps=r.received_Mbps, retransmits=r.retransmits)
else:
    out.update(bps=r.bps, packets=r.packets, lost_percent=r.lost_percent, jitter_ms=r.jitter_ms)
print(json.dumps(out))
"#;

#[test]
#[ignore = "needs the iperf3 Python package"]
fn the_iperf3_python_package_reads_our_documents() {
    let python = python_with_iperf3();
    let server = Server::start(&[]);
    for (case, args) in CASES {
        let ours = our_document(&server, args);
        let mut child = Command::new(&python)
            .args(["-c", READ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run python");
        serde_json::to_writer(child.stdin.take().expect("stdin"), &ours).expect("write");
        let out = child.wait_with_output().expect("python's output");
        assert!(
            out.status.success(),
            "{case}: TestResult failed on our document: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read: Value = serde_json::from_slice(&out.stdout).expect("python's JSON");
        let udp = args.contains(&"-u");
        assert_eq!(read["protocol"], if udp { "UDP" } else { "TCP" }, "{case}");
        assert_eq!(read["type"], "client", "{case}");
        assert_eq!(read["reverse"], args.contains(&"-R"), "{case}");
        let streams = if args.contains(&"2") { 2 } else { 1 };
        assert_eq!(read["num_streams"], streams, "{case}");
        assert!(read["host_total"].as_f64().is_some(), "{case}: {read}");
        if udp {
            assert_eq!(read["bps"], ours["end"]["sum"]["bits_per_second"]);
            assert!(read["packets"].as_u64().is_some_and(|p| p > 0), "{read}");
            assert!(read["lost_percent"].as_f64().is_some(), "{read}");
        } else {
            let sum = &ours["end"]["sum_sent"];
            assert_eq!(read["sent_bps"], sum["bits_per_second"], "{case}");
            assert!(read["received_Mbps"].as_f64().is_some_and(|m| m > 0.0));
            assert_eq!(read["retransmits"], sum["retransmits"], "{case}");
        }
    }
}
