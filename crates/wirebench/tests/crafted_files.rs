//! Crafted files against the readers: `plot`, `report`, `packet-log`
//! and `lab scenario` on files made to crash them end with exit status 1 and a one-line
//! error, or draw within bounded memory, and never hang. Each run is bounded (a hang fails
//! the test instead of stalling it) and runs under an address-space limit of 2 GB, so an
//! allocation sized by a count in the file aborts it instead of passing unnoticed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use wirebench_proto::packet_log::{file_header, Arrived, Record, RECORD_LEN};

/// Loose: the real runs take milliseconds; only a hang comes near it.
const LIMIT: Duration = Duration::from_secs(60);

/// A fresh directory for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("wirebench-crafted-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Self(d)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str]) -> Output {
    common::run_confined(args, LIMIT)
}

/// Asserts exit status 1 and a one-line `error:` that contains `needle`.
fn refused(args: &[&str], needle: &str) {
    refused_with(1, args, needle);
}

/// Asserts exit status `code` and a one-line `error:` that contains `needle`.
fn refused_with(code: i32, args: &[&str], needle: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    let line = err.trim_end();
    assert!(
        line.starts_with("error: ") && !line.contains('\n'),
        "{args:?}: not one line: {err}"
    );
    assert!(line.contains(needle), "{args:?}: {line}");
}

fn log(records: &[Record]) -> Vec<u8> {
    let mut out = file_header().to_vec();
    for r in records {
        let mut b = [0u8; RECORD_LEN];
        r.encode(&mut b);
        out.extend_from_slice(&b);
    }
    out
}

fn datagram(seq: u64) -> Record {
    Record::Datagram {
        kind: Arrived::Received,
        seq,
        size: 100,
        send_unix_ns: 1_700_000_000_000_000_000,
        arrival_unix_ns: 1_700_000_000_000_100_000 + seq,
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// `wirebench packet-log F | head -1`: the reader closes the pipe, and that is no error.
#[test]
fn a_packet_log_printed_into_a_closed_pipe_exits_0() {
    use std::io::{BufRead, BufReader};
    let d = Dir::new("closed-pipe");
    // 100,000 rows of CSV: far more than a pipe's buffer.
    let records: Vec<Record> = (0..100_000).map(datagram).collect();
    let f = d.file("many.log", &log(&records));
    let mut child = common::wirebench()
        .args(["packet-log", s(&f)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run wirebench packet-log");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a line");
    assert!(first.starts_with("kind,seq"), "{first}");
    let out = child.wait_with_output().expect("it ends");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_packet_log_with_an_impossible_loss_run_is_refused() {
    let d = Dir::new("huge-count");
    let f = d.file(
        "huge.log",
        &log(&[
            datagram(0),
            Record::Lost {
                first: 1,
                count: 1 << 40,
            },
            Record::Lost {
                first: u64::MAX - 5,
                count: u64::MAX,
            },
        ]),
    );
    let out = d.0.join("x.svg");
    refused(&["plot", s(&f), "-o", s(&out)], "loss run");
    refused(&["packet-log", s(&f)], "loss run");
}

#[test]
fn a_packet_log_of_many_long_loss_runs_draws_in_bounded_memory() {
    // 100,000 runs of 10,000: marked one by one they were 10^9 points (16 GB) in the plot
    // and 10^9 lines of CSV; the reader's budget makes them a few megabytes.
    let d = Dir::new("many-runs");
    let mut recs = vec![datagram(0)];
    recs.extend((0..100_000u64).map(|k| Record::Lost {
        first: 1 + k * 10_000,
        count: 10_000,
    }));
    let f = d.file("runs.log", &log(&recs));
    let svg = d.0.join("runs.svg");
    let out = run(&["plot", s(&f), "-o", s(&svg)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["packet-log", s(&f)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn truncated_and_foreign_packet_logs_are_refused() {
    let d = Dir::new("truncated");
    let mut bytes = log(&[datagram(0), datagram(1)]);
    bytes.truncate(bytes.len() - 12);
    let f = d.file("cut.log", &bytes);
    let out = d.0.join("x.svg");
    refused(&["plot", s(&f), "-o", s(&out)], "truncated");
    refused(&["packet-log", s(&f)], "truncated");
    let f = d.file("magic.log", b"WBPKTLOX\0\0\0\x01\0\0\0\x20");
    refused(&["plot", s(&f), "-o", s(&out)], "bad magic");
    refused(&["packet-log", s(&f)], "bad magic");
}

/// A real results document, as `run --json` writes it (the fuzz seed).
fn results_doc() -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/results_json/tcp-stream.json");
    serde_json::from_slice(&std::fs::read(p).expect("seed")).expect("json")
}

/// A link log is drawn a series per link direction: thousands of names took minutes (a
/// linear search per row) and a 200 MB name aborted the text layout.
#[test]
fn a_link_log_naming_too_many_or_too_long_links_is_refused_at_once() {
    let d = Dir::new("wide-links");
    let svg = d.0.join("x.svg");
    let header = wirebench_proto::link_log::HEADER;
    let row = |name: &str| format!("0.1,{name},up,1,2,0,0,1,2,160,0.5,0,0,0\n");
    let wide: String = (0..200_000).map(|i| row(&format!("l{i}"))).collect();
    let f = d.file("wide.csv", format!("{header}\n{wide}").as_bytes());
    let started = std::time::Instant::now();
    refused(
        &["plot", s(&f), "-o", s(&svg)],
        "line 1002: more than 1000 link directions",
    );
    eprintln!("refused in {:?}", started.elapsed());
    let long = d.file(
        "long.csv",
        format!("{header}\n{}", row(&"x".repeat(300))).as_bytes(),
    );
    refused(
        &["plot", s(&long), "-o", s(&svg)],
        "line 2: a link's name and direction are at most 200 bytes",
    );
    // A thousand directions are still drawn.
    let ok: String = (0..1000).map(|i| row(&format!("l{i}"))).collect();
    let f = d.file("ok.csv", format!("{header}\n{ok}").as_bytes());
    let out = run(&["plot", s(&f), "-o", s(&svg)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn results_with_impossible_values_are_refused_by_key() {
    let d = Dir::new("results");
    let svg = d.0.join("x.svg");
    let good = d.file("good.json", results_doc().to_string().as_bytes());
    let out = run(&["plot", s(&good), "-o", s(&svg)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (key, value, needle) in [
        // 1e308 everywhere on the time axis: the plot's tick loop never ended.
        ("start_s", "1e308", "intervals[0].start_s = 1e308"),
        ("sent_bps", "-5", "cannot be negative"),
        ("received_bps", "1e16", "out of range"),
        ("end_s", "1e-308", "too small"),
        ("start_s", "NaN", "expected value"),
        ("start_s", "1e400", "number out of range"),
    ] {
        let mut text = results_doc().to_string();
        let at = text.find(&format!("\"{key}\":")).expect("key") + key.len() + 3;
        let end = at + text[at..].find([',', '}']).expect("end");
        text.replace_range(at..end, value);
        let f = d.file("bad.json", text.as_bytes());
        refused(&["plot", s(&f), "-o", s(&svg)], needle);
    }
}

#[test]
fn an_experiment_with_impossible_values_is_refused_by_plot_and_report() {
    let d = Dir::new("experiment");
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/summary_json");
    let summary = std::fs::read_to_string(seeds.join("sweep-summary.json")).expect("seed");
    let meta = std::fs::read(seeds.join("sweep-experiment.json")).expect("seed");
    d.file("experiment.json", &meta);
    let html = d.0.join("r.html");
    let svg = d.0.join("r.svg");
    d.file("summary.json", summary.as_bytes());
    let out = run(&["report", s(&d.0), "-o", s(&html)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at = summary.find("\"offered_bps\":").expect("offered_bps") + 14;
    let end = at + summary[at..].find(',').expect("end");
    let mut bad = summary.clone();
    bad.replace_range(at..end, " 1e308");
    d.file("summary.json", bad.as_bytes());
    refused(&["report", s(&d.0), "-o", s(&html)], "offered_bps = 1e308");
    refused(&["plot", s(&d.0), "-o", s(&svg)], "offered_bps = 1e308");
    // A trial file named twice (600,000 times made report allocate 6 GB and abort).
    let v: serde_json::Value = serde_json::from_str(&summary).expect("json");
    let first = v["points"][0]["files"][0]
        .as_str()
        .expect("a trial file")
        .to_owned();
    let mut twice = v.clone();
    let files = twice["points"][0]["files"].as_array_mut().expect("files");
    // Spelled otherwise: the same file.
    files.push(serde_json::Value::String(format!("./{first}")));
    let n = files.len() - 1;
    d.file("summary.json", twice.to_string().as_bytes());
    let says = format!("points[0].files[{n}] = ");
    refused(&["report", s(&d.0), "-o", s(&html)], &says);
    refused(
        &["plot", s(&d.0), "-o", s(&svg)],
        "names a trial file points[0].files[0] names already",
    );
}

/// A scenario file is the command's argument, so its problems are usage errors (exit 2), as
/// every other scenario mistake already was.
#[test]
fn huge_and_absurd_scenario_files_are_refused_before_anything_runs() {
    let d = Dir::new("scenario");
    let huge = d.file("huge.toml", "# padding\n".repeat(300_000).as_bytes());
    refused_with(
        2,
        &["lab", "scenario", s(&huge)],
        "too large for a scenario file",
    );
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/random-loss.toml");
    let text = std::fs::read_to_string(seed).expect("scenario");
    let many = d.file(
        "many.toml",
        format!(
            "trials = 4000000000\n{}",
            text.replace("\ntrials =", "\n#trials =")
        )
        .as_bytes(),
    );
    refused_with(2, &["lab", "scenario", s(&many)], "too many");
}
