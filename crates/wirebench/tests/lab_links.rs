//! The lab's richer links end to end: active queue management cures the bufferbloat a long
//! drop-tail queue shows, ECN marks instead of drops, netem's reorder, duplicate and corrupt
//! are counted by the receiver exactly as the emulator counts them, and Mahimahi traces
//! deliver their opportunities. Each check compares two instruments (the receiver and the
//! emulator's counters, or the trace) and demands that both saw something.
//!
//! Needs network namespaces: `#[ignore]`d, and fails in one line where the lab cannot start;
//! `.ci/run` runs them. One emulated network at a time.

mod common;

use std::sync::Mutex;

use common::{f, lab_run};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// rrul through 20 Mbit/s and 10 ms each way with `link` (an AQM): the loaded UDP probes'
/// median above the idle one, ms, the load's retransmits and the up direction's report.
fn rrul_through(link: &[&str]) -> (f64, f64, Value) {
    let mut args = vec!["--rate", "20M", "--delay", "10ms"];
    args.extend_from_slice(link);
    let v = lab_run(
        &args,
        &[
            "--mode", "rrul", "--cc", "cubic", "-t", "10s", "--idle", "2s",
        ],
    );
    let idle = f(&v, "end.rrul.idle_latency_us.p50") / 1e3;
    let loaded = f(&v, "end.rrul.loaded_latency_us.p50") / 1e3;
    let retransmits = f(&v, "end.rrul.retransmits");
    let up = v["lab"]["links"][0]["up"].clone();
    eprintln!(
        "{link:?}: idle p50 {idle:.1} ms, loaded p50 {loaded:.1} ms, retransmits {retransmits}, \
         up {:.1} Mbit/s, down {:.1} Mbit/s, up link {up}",
        f(&v, "end.rrul.upload_bps") / 1e6,
        f(&v, "end.rrul.download_bps") / 1e6,
    );
    // The load ran both ways: an AQM that starved it would pass the latency checks.
    assert!(
        f(&v, "end.rrul.upload_bps") > 10e6,
        "{link:?}: upload starved"
    );
    assert!(
        f(&v, "end.rrul.download_bps") > 10e6,
        "{link:?}: download starved"
    );
    (loaded - idle, retransmits, up)
}

#[test]
#[ignore = "needs network namespaces"]
fn fq_codel_and_codel_keep_latency_under_load_near_idle() {
    let _l = lock();
    common::require_lab();
    let (fq, _, fq_up) = rrul_through(&["--aqm", "fq_codel"]);
    assert!(fq <= 10.0, "fq_codel: loaded p50 {fq:.1} ms above idle");
    assert!(
        f(&fq_up, "dropped_aqm") > 0.0,
        "fq_codel dropped nothing: the load did not fill the queue"
    );
    let (codel, _, codel_up) = rrul_through(&["--aqm", "codel"]);
    assert!(codel <= 25.0, "codel: loaded p50 {codel:.1} ms above idle");
    assert!(f(&codel_up, "dropped_aqm") > 0.0, "codel dropped nothing");
}

#[test]
#[ignore = "needs network namespaces"]
fn ecn_marks_instead_of_dropping_and_retransmits_fall() {
    let _l = lock();
    common::require_lab();
    let (_, drops_retx, _) = rrul_through(&["--aqm", "codel"]);
    let (_, ecn_retx, up) = rrul_through(&["--aqm", "codel", "--ecn"]);
    assert!(f(&up, "marked") > 0.0, "nothing marked: {up}");
    assert!(
        ecn_retx < drops_retx,
        "with ECN {ecn_retx} retransmits, without {drops_retx}"
    );
}

#[test]
#[ignore = "needs network namespaces"]
fn reorder_duplicate_and_corrupt_are_what_the_receiver_counts() {
    let _l = lock();
    common::require_lab();
    // Both directions of the link do it; the test's datagrams go up.
    let v = lab_run(
        &[
            "--delay",
            "5ms",
            "--reorder",
            "10%",
            "--reorder-gap",
            "3",
            "--duplicate",
            "3%",
            "--corrupt",
            "2%",
            "--loss",
            "1%",
            "--seed",
            "11",
        ],
        &["-u", "-b", "20M", "-l", "1000", "-n", "2M"],
    );
    let up = &v["lab"]["links"][0]["up"];
    eprintln!("end.udp {}\nup {up}", v["end"]["udp"]);
    for (receiver, link) in [
        ("end.udp.reordered", "udp_late"),
        ("end.udp.duplicates", "udp_duplicates"),
        ("end.udp.lost", "udp_lost"),
        ("end.udp.checksum_errors", "udp_corrupt"),
    ] {
        let (r, l) = (f(&v, receiver), f(up, link));
        assert!(l > 0.0, "the link saw no {link}: {up}");
        assert_eq!(r, l, "receiver {receiver} against the link's {link}");
    }
    // The link saw the client's UDP hello too (one datagram: with this seed the link does
    // nothing to the first of the UDP stream's draws), then every datagram sent.
    assert_eq!(f(up, "udp_in"), f(&v, "end.sent.messages") + 1.0);
    // The netem decisions themselves were made, and the offloads were off for them.
    for k in ["reordered", "duplicated", "corrupted"] {
        assert!(f(up, k) > 0.0, "{k}: {up}");
    }
    assert_eq!(up["offload"], Value::Bool(false));
}

/// A trace file shipped in `scenarios/traces/`.
fn trace(name: &str) -> String {
    format!(
        "{}/../../scenarios/traces/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
#[ignore = "needs network namespaces"]
fn a_trace_delivers_its_mean_rate() {
    let _l = lock();
    common::require_lab();
    // One opportunity per ms: 1000 datagrams of 1472 bytes a second.
    let c = trace("const-12mbit");
    let v = lab_run(
        &["--trace", &c, "--queue", "50"],
        &["-u", "-b", "20M", "-l", "1472", "-t", "4"],
    );
    let got = f(&v, "end.received_bps");
    eprintln!("constant trace: {got} bit/s of payload");
    assert!(
        (got / 11.776e6 - 1.0).abs() <= 0.02,
        "constant trace: {got} bit/s of payload, want 11.776 Mbit/s within 2%"
    );
    // 1 s at 48 Mbit/s, 1 s at 6: over 4 s (two periods, whatever the phase) its mean.
    let a = trace("alternating-48-6");
    let v = lab_run(
        &["--trace", &a, "--queue", "50"],
        &["-u", "-b", "60M", "-l", "1472", "-t", "4"],
    );
    let got = f(&v, "end.received_bps");
    eprintln!("alternating trace: {got} bit/s of payload");
    assert!(
        (got / 26.496e6 - 1.0).abs() <= 0.03,
        "alternating trace: {got} bit/s of payload, want 26.496 Mbit/s within 3%"
    );
}

#[test]
#[ignore = "needs network namespaces"]
fn a_saturating_flow_uses_every_opportunity_of_mahimahis_lte_trace() {
    let _l = lock();
    common::require_lab();
    let dir = std::env::temp_dir().join(format!("wb-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("link.csv");
    let lte = trace("TMobile-LTE-driving-30s.down");
    let v = lab_run(
        &[
            "--trace-up",
            &lte,
            "--queue",
            "200",
            // A delay after the serializer: the log counts deliveries when they leave it,
            // as mm-link does, so no interval delivers more than its capacity.
            "--delay",
            "20ms",
            "--link-log",
            log.to_str().unwrap(),
            "--link-log-interval",
            "100ms",
        ],
        &["-u", "-b", "60M", "-l", "1472", "-t", "8"],
    );
    // The intervals of the up direction from 1 s after it got busy to 1 s before its
    // last: the queue was never empty there, so every opportunity carried a packet.
    let text = std::fs::read_to_string(&log).expect("the link log");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let rows: Vec<Vec<f64>> = lines
        .filter(|l| l.split(',').nth(col("direction")) == Some("up"))
        .map(|l| {
            l.split(',')
                .map(|x| x.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let busy: Vec<&Vec<f64>> = rows
        .iter()
        .filter(|r| r[col("delivered_bytes")] > 0.0)
        .collect();
    assert!(busy.len() > 40, "{} busy intervals", busy.len());
    // Each interval: at most its opportunities' bytes (and a packet that began in the one
    // before).
    for r in &rows {
        let (got, cap) = (r[col("delivered_bytes")], r[col("capacity_bps")] / 80.0);
        assert!(
            got <= cap * 1500.0 / 1504.0 + 1500.0,
            "at {} s: delivered {got} B of {cap} B of opportunities",
            r[col("t_s")]
        );
    }
    let steady = &busy[10..busy.len() - 10];
    let delivered: f64 = steady.iter().map(|r| r[col("delivered_bytes")]).sum();
    // capacity_bps of a 100 ms interval, as bytes.
    let capacity: f64 = steady.iter().map(|r| r[col("capacity_bps")] / 80.0).sum();
    // Each opportunity is 1504 bytes: a 1500-byte IP packet and the 4 bytes of TUN header
    // Mahimahi counts.
    let ratio = delivered / (capacity * 1500.0 / 1504.0);
    eprintln!("LTE trace: delivered {delivered} B of {capacity} B of opportunities: {ratio:.4}");
    assert!(capacity > 0.0, "the log has no capacity");
    assert!(
        (ratio - 1.0).abs() <= 0.01,
        "delivered / opportunities = {ratio}"
    );
    assert!(
        f(&v["lab"]["links"][0]["up"], "dropped_queue") > 0.0,
        "the flow did not saturate"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The arrival times (Unix ns) a receiver's packet log holds, in its order.
fn arrivals(log: &std::path::Path) -> Vec<u64> {
    let out = common::wirebench()
        .arg("packet-log")
        .arg(log)
        .output()
        .expect("wirebench packet-log");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = header.iter().position(|h| *h == "arrival_unix_ns");
    let col = col.expect("an arrival column");
    lines
        .filter_map(|l| l.split(',').nth(col)?.parse().ok())
        .collect()
}

/// A link's idle time under load is the gap in its load, as the receiver sees it. Two UDP
/// tests above the link's rate with a pause between them: both overflow the queue, and the
/// link idles between them from the first test's last datagram to the second's first, which
/// the receiver sees as the gap between its arrivals (less the 1.2 ms the second's first
/// datagram takes on the wire, and a few small control packets). Within each test the queue
/// (240 ms) covers any stall of the sender.
#[test]
#[ignore = "needs network namespaces"]
fn idle_under_load_is_the_gap_the_receiver_sees() {
    let _l = lock();
    common::require_lab();
    let exe = env!("CARGO_BIN_EXE_wirebench");
    let dir = std::env::temp_dir().join(format!("wb-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let (first, second) = (dir.join("first.log"), dir.join("second.log"));
    let test = |log: &std::path::Path| {
        format!(
            "{exe} run $LAB_SERVER -u -b 20M -t 1 --packet-log {} >/dev/null",
            log.display()
        )
    };
    // The pause is the load's gap, the thing measured.
    let script = format!("{} && sleep 0.3 && {}", test(&first), test(&second));
    let out = common::wirebench()
        .args(["lab", "--rate", "10M", "--queue", "200", "--no-offload"])
        .args(["--", "exec", "--", "sh", "-c", &script])
        .output()
        .expect("lab");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let up = err
        .lines()
        .find(|l| l.starts_with("lab link 0 up"))
        .unwrap_or_else(|| panic!("no up line: {err}"));
    let idle_ms: f64 = up
        .split(", idle ")
        .nth(1)
        .and_then(|s| s.split(" ms under load").next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no idle time under load: {up}"));
    let (a, b) = (arrivals(&first), arrivals(&second));
    let (Some(last), Some(next)) = (a.iter().max(), b.iter().min()) else {
        panic!(
            "a receiver saw nothing: {} and {} arrivals",
            a.len(),
            b.len()
        );
    };
    let gap_ms = next.saturating_sub(*last) as f64 / 1e6;
    eprintln!("link idle under load {idle_ms} ms; the receiver's gap {gap_ms} ms; {up}");
    assert!(gap_ms >= 300.0, "the receiver's gap {gap_ms} ms");
    assert!(
        (idle_ms - (gap_ms - 1.2)).abs() <= 15.0,
        "idle under load {idle_ms} ms, the receiver's gap {gap_ms} ms"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
