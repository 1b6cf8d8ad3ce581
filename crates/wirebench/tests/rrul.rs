//! `run --mode rrul` against the in-process server: one document with `end.rrul`, whose keys
//! docs/results.md lists, and `plot` draws it as the rrul kind by default. The lab test of
//! bufferbloat itself is in lab.rs.

mod common;

use common::wirebench;
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
        "upload_bps",
        "download_bps",
        "load_start_s",
        "load_end_s",
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
