//! `run --mode rrul` against the in-process server: one document with `end.rrul`, whose keys
//! docs/results.md lists, and `plot` draws it as the rrul kind by default. The lab test of
//! bufferbloat itself is in lab.rs. `sweep HOST --mode rrul` saves a trial per point with
//! `end.rrul`, which `report` reads.

mod common;

use common::{wirebench, Server};
use serde_json::Value;

#[test]
fn rrul_on_loopback_writes_its_figures_and_plots_them() {
    let out = wirebench()
        .args([
            "run", "--mode", "rrul", "-t", "1s", "--idle", "500ms", "--json",
        ])
        .output()
        .expect("run wirebench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    let rrul = &v["end"]["rrul"];
    for key in [
        "idle_latency_us/p50",
        "idle_latency_us/p90",
        "idle_latency_us/p99",
        "loaded_latency_us/p50",
        "loaded_latency_us/p90",
        "loaded_latency_us/p99",
        "idle_after_latency_us/p50",
        "tcp_idle_latency_us/p50",
        "tcp_loaded_latency_us/p50",
        "upload_bps",
        "download_bps",
        "load_start_s",
        "load_end_s",
        "retransmits",
        "udp_probe_timeouts",
        "udp_probe/timeout_s",
    ] {
        assert!(
            rrul.pointer(&format!("/{key}"))
                .is_some_and(Value::is_number),
            "end.rrul.{key} missing: {rrul}"
        );
    }
    assert_eq!(
        rrul["streams"].as_array().map(Vec::len),
        Some(8),
        "4 streams each way"
    );
    let probes = rrul["probes"].as_array().expect("probes");
    for kind in ["udp", "tcp"] {
        assert!(
            probes
                .iter()
                .any(|p| p["kind"] == kind && p["rtt_us"].as_f64().is_some_and(|r| r > 0.0)),
            "no {kind} probe"
        );
    }
    assert_eq!(v["test"]["direction"], "bidir");
    // The UDP probe is open loop; every probe it sent is answered or lost, phase by phase.
    assert_eq!(rrul["udp_probe"]["open_loop"], true);
    assert!(rrul["lost_probes"].is_array());
    let counts = &rrul["probe_counts"];
    let n = |p: &str| counts.pointer(p).and_then(Value::as_u64).expect(p);
    for phase in ["idle_before", "loaded", "idle_after"] {
        let (sent, answered, lost) = (
            n(&format!("/udp/{phase}/sent")),
            n(&format!("/udp/{phase}/answered")),
            n(&format!("/udp/{phase}/lost")),
        );
        assert!(sent > 0, "no UDP probe {phase}: {counts}");
        assert_eq!(sent, answered + lost, "{phase}: {counts}");
        assert!(n(&format!("/tcp/{phase}/sent")) > 0, "{phase}: {counts}");
    }
    let udp_answered: u64 = ["idle_before", "loaded", "idle_after"]
        .iter()
        .map(|p| n(&format!("/udp/{p}/answered")))
        .sum();
    assert_eq!(
        probes.iter().filter(|p| p["kind"] == "udp").count() as u64,
        udp_answered
    );
    let dir = std::env::temp_dir().join(format!("wirebench-rrul-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let json = dir.join("rrul.json");
    std::fs::write(&json, &out.stdout).expect("write the result");
    let svg = dir.join("rrul.svg");
    let plot = wirebench()
        .arg("plot")
        .arg(&json)
        .arg("-o")
        .arg(&svg)
        .output()
        .expect("run wirebench plot");
    assert!(
        plot.status.success(),
        "{}",
        String::from_utf8_lossy(&plot.stderr)
    );
    let text = std::fs::read_to_string(&svg).expect("the svg");
    assert!(text.contains("Latency under load"), "not the rrul kind");
    assert!(text.contains("TCP round trip") && text.contains("UDP round trip"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A line a second while it runs, piped or not (the table's), and with `--json-stream` an
/// event a second between the start and the end.
#[test]
fn rrul_shows_a_line_a_second_and_streams_events() {
    let server = Server::start(&[]);
    let target = format!("127.0.0.1:{}", server.port);
    let out = wirebench()
        .args(["run", &target, "--mode", "rrul", "-t", "2s", "--idle", "1s"])
        .output()
        .expect("run wirebench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("UDP rtt p50"), "{text}");
    // About 4 s of probes: loose, a line a second.
    let lines = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains(" s "))
        .count();
    assert!((2..=7).contains(&lines), "{lines} lines: {text}");
    assert!(text.contains("bit/s"), "no load rate in a line: {text}");
    let out = wirebench()
        .args([
            "run",
            &target,
            "--mode",
            "rrul",
            "-t",
            "2s",
            "--idle",
            "1s",
            "--probe-interval",
            "50ms",
            "--json-stream",
        ])
        .output()
        .expect("run wirebench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("an NDJSON line"))
        .collect();
    assert_eq!(
        events.first().map(|e| &e["event"]),
        Some(&Value::from("start"))
    );
    assert_eq!(
        events.last().map(|e| &e["event"]),
        Some(&Value::from("end"))
    );
    let seconds: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "rrul_interval")
        .collect();
    assert!(seconds.len() >= 2, "{events:?}");
    for s in &seconds {
        assert!(s["t_s"].is_number() && s["udp_sent"].is_u64() && s["udp_lost"].is_u64());
    }
    assert!(
        seconds
            .iter()
            .any(|s| s["udp_rtt_p50_us"].as_f64().is_some_and(|r| r > 0.0)),
        "{seconds:?}"
    );
    assert!(seconds.iter().any(|s| s["download_bps"].is_number()));
    let end = events.last().expect("end");
    assert_eq!(end["end"]["rrul"]["probe_interval_s"], 0.05);
}

#[test]
fn rrul_sweeps_its_streams_and_time_into_trials_report_reads() {
    let server = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("wirebench-rrul-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exp = dir.join("exp");
    let out = wirebench()
        .arg("sweep")
        .arg(format!("127.0.0.1:{}", server.port))
        .args([
            "--mode",
            "rrul",
            "--idle",
            "200ms",
            "--repeat",
            "1",
            "--ordered",
        ])
        .args(["--vary", "parallel=2,3", "--vary", "time=500ms,1s", "--out"])
        .arg(&exp)
        .output()
        .expect("run wirebench sweep");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| -> Value {
        serde_json::from_slice(&std::fs::read(exp.join(f)).expect(f)).expect("JSON")
    };
    // Grid order: parallel slowest, then time.
    for (n, (streams, time_s)) in [(2, 0.5), (2, 1.0), (3, 0.5), (3, 1.0)]
        .into_iter()
        .enumerate()
    {
        let t = read(&format!("trials/p{:03}-r001.json", n + 1));
        assert_eq!(t["trial"]["failed"], false, "trial {n}: {}", t["trial"]);
        assert_eq!(t["test"]["streams"], streams);
        assert_eq!(t["test"]["direction"], "bidir");
        assert_eq!(t["test"]["duration_s"], time_s);
        let rrul = &t["end"]["rrul"];
        assert_eq!(
            rrul["streams"].as_array().map(Vec::len),
            Some(2 * streams),
            "{streams} streams each way"
        );
        assert!(
            rrul["loaded_latency_us"]["p50"]
                .as_f64()
                .is_some_and(|v| v > 0.0),
            "no loaded latency: {rrul}"
        );
    }
    let summary = read("summary.json");
    let points = summary["points"].as_array().expect("points");
    assert_eq!(points.len(), 4);
    for p in points {
        let f = &p["figures"];
        for figure in [
            "rrul_loaded_latency_p50_us",
            "rrul_upload_bps",
            "received_bps",
        ] {
            assert!(
                f[figure]["mean"].as_f64().is_some_and(|v| v > 0.0),
                "{figure} missing: {f}"
            );
        }
    }
    let html = exp.join("report.html");
    let report = wirebench()
        .arg("report")
        .arg(&exp)
        .arg("-o")
        .arg(&html)
        .output()
        .expect("run wirebench report");
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let text = std::fs::read_to_string(&html).expect("the report");
    // The points in the plots' legends, each value with its unit.
    assert!(
        text.contains("parallel 3 streams") && text.contains("time 1.00 s"),
        "the points' labels"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
