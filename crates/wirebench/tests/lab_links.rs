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

use common::wirebench;
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `wirebench lab LINK -- run ARGS --json`: the results, with the `lab` object.
fn lab_run(link: &[&str], run: &[&str]) -> Value {
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

fn f(v: &Value, ptr: &str) -> f64 {
    v.pointer(ptr)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {ptr} in {v}"))
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
    let idle = f(&v, "/end/rrul/idle_latency_us/p50") / 1e3;
    let loaded = f(&v, "/end/rrul/loaded_latency_us/p50") / 1e3;
    let retransmits = f(&v, "/end/rrul/retransmits");
    let up = v["lab"]["links"][0]["up"].clone();
    eprintln!(
        "{link:?}: idle p50 {idle:.1} ms, loaded p50 {loaded:.1} ms, retransmits {retransmits}, \
         up {:.1} Mbit/s, down {:.1} Mbit/s, up link {up}",
        f(&v, "/end/rrul/upload_bps") / 1e6,
        f(&v, "/end/rrul/download_bps") / 1e6,
    );
    // The load ran both ways: an AQM that starved it would pass the latency checks.
    assert!(
        f(&v, "/end/rrul/upload_bps") > 10e6,
        "{link:?}: upload starved"
    );
    assert!(
        f(&v, "/end/rrul/download_bps") > 10e6,
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
        f(&fq_up, "/dropped_aqm") > 0.0,
        "fq_codel dropped nothing: the load did not fill the queue"
    );
    let (codel, _, codel_up) = rrul_through(&["--aqm", "codel"]);
    assert!(codel <= 25.0, "codel: loaded p50 {codel:.1} ms above idle");
    assert!(f(&codel_up, "/dropped_aqm") > 0.0, "codel dropped nothing");
}

#[test]
#[ignore = "needs network namespaces"]
fn ecn_marks_instead_of_dropping_and_retransmits_fall() {
    let _l = lock();
    common::require_lab();
    let (_, drops_retx, _) = rrul_through(&["--aqm", "codel"]);
    let (_, ecn_retx, up) = rrul_through(&["--aqm", "codel", "--ecn"]);
    assert!(f(&up, "/marked") > 0.0, "nothing marked: {up}");
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
        ("/end/udp/reordered", "/udp_late"),
        ("/end/udp/duplicates", "/udp_duplicates"),
        ("/end/udp/lost", "/udp_lost"),
        ("/end/udp/checksum_errors", "/udp_corrupt"),
    ] {
        let (r, l) = (f(&v, receiver), f(up, link));
        assert!(l > 0.0, "the link saw no {link}: {up}");
        assert_eq!(r, l, "receiver {receiver} against the link's {link}");
    }
    assert_eq!(f(up, "/udp_in"), f(&v, "/end/sent/messages"));
    // The netem decisions themselves were made, and the offloads were off for them.
    for k in ["/reordered", "/duplicated", "/corrupted"] {
        assert!(f(up, k) > 0.0, "{k}: {up}");
    }
    assert_eq!(up["offload"], Value::Bool(false));
}
