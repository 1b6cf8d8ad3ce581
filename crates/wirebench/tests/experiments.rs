//! Experiments on loopback: a small real sweep saves every trial and a summary that matches
//! them; every plot kind makes a valid SVG and PNG; the HTML report is self-contained and
//! renders in headless Chromium without console errors (those tests need Chromium: they are
//! `#[ignore]`d, and `.ci/run` installs it and runs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{u, wirebench};
use serde_json::Value;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wirebench-exp-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run wirebench");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json")
}

/// Width and height of a PNG, from its IHDR chunk.
fn png_size(p: &Path) -> (u32, u32) {
    let b = std::fs::read(p).expect("png");
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", p.display());
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

/// Checks an SVG plot's size and that every series name is in its legend.
fn check_svg(p: &Path, series: &[&str]) {
    let s = std::fs::read_to_string(p).expect("svg");
    assert!(s.trim_start().starts_with("<svg"), "{}", p.display());
    assert!(s.trim_end().ends_with("</svg>"));
    assert!(s.contains("width=\"960\"") && s.contains("height=\"600\""));
    for name in series {
        assert!(s.contains(name), "{}: no series {name:?}", p.display());
    }
}

/// Plots `input` as `kind` to SVG and PNG at 960 × 600 pixels and checks both.
fn plot_both(input: &Path, kind: &str, dir: &Path, series: &[&str]) {
    for ext in ["svg", "png"] {
        let out = dir.join(format!("{kind}.{ext}"));
        ok(wirebench()
            .args(["plot", input.to_str().expect("utf-8"), "--kind", kind])
            .args(["--width", "960", "--height", "600", "--dpi", "165", "-o"])
            .arg(&out));
        if ext == "svg" {
            check_svg(&out, series);
        } else {
            assert_eq!(png_size(&out), (960, 600));
        }
    }
}

#[test]
fn a_small_sweep_saves_every_trial_and_a_matching_summary() {
    let dir = tempdir("sweep");
    let exp = dir.join("exp");
    let out = ok(wirebench()
        .args([
            "sweep",
            "-u",
            "-n",
            "200K",
            "--vary",
            "rate=10M,50M",
            "--vary",
            "size=500,1000",
            "--repeat",
            "2",
            "--pause",
            "10ms",
            "--out",
        ])
        .arg(&exp));
    assert!(String::from_utf8_lossy(&out.stdout).contains("knee"));
    let meta = read_json(&exp.join("experiment.json"));
    assert_eq!(u(&meta, "repeat"), 2);
    assert!(meta["machine"]["kernel"].is_string());
    let summary = read_json(&exp.join("summary.json"));
    let points = summary["points"].as_array().expect("points");
    assert_eq!(points.len(), 4);
    for p in points {
        assert_eq!(u(p, "trials"), 2);
        let files: Vec<&str> = p["files"]
            .as_array()
            .expect("files")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(files.len(), 2);
        // The summary's mean is the mean of the saved trials.
        let rates: Vec<f64> = files
            .iter()
            .map(|f| {
                read_json(&exp.join(f))["end"]["received_bps"]
                    .as_f64()
                    .expect("rate")
            })
            .collect();
        let mean = rates.iter().sum::<f64>() / 2.0;
        let got = p["figures"]["received_bps"]["mean"].as_f64().expect("mean");
        assert!(
            (got - mean).abs() <= 1e-9 * mean.max(1.0),
            "{got} vs {mean}"
        );
        let min = p["figures"]["received_bps"]["min"].as_f64().expect("min");
        assert_eq!(min, rates.iter().copied().fold(f64::MAX, f64::min));
    }
    assert_eq!(
        std::fs::read_dir(exp.join("trials"))
            .expect("trials")
            .count(),
        8
    );
    let csv = std::fs::read_to_string(exp.join("summary.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 5);
    assert!(csv.starts_with("rate,size,trials,failed,"));
    assert_eq!(summary["knees"].as_array().map(Vec::len), Some(2));

    // Every plot of an experiment, as SVG and PNG.
    plot_both(
        &exp,
        "rate",
        &dir,
        &["size 500 B", "size 1000 B", "ideal", "trial(s) per point"],
    );
    plot_both(&exp, "received", &dir, &["size 500 B", "size 1000 B"]);
    // Box plots: each rate under its boxes, in SI units; the sizes in the legend, whiskers
    // defined in the caption.
    plot_both(
        &exp,
        "box",
        &dir,
        &[
            "10.0 Mbit/s",
            "size 500 B",
            "50.0 Mbit/s",
            "size 1000 B",
            "IQR",
        ],
    );
    // One result: throughput over time.
    let trial = exp.join(points[0]["files"][0].as_str().expect("file"));
    plot_both(&trial, "throughput", &dir, &["sent", "received"]);

    // The report: one file, plots inline, nothing fetched from outside.
    let html_path = dir.join("report.html");
    ok(wirebench()
        .arg("report")
        .arg(&exp)
        .arg("-o")
        .arg(&html_path));
    let html = std::fs::read_to_string(&html_path).expect("html");
    assert!(html.matches("<svg").count() >= 3, "plots inline");
    assert!(
        html.matches("<figcaption>").count() >= 3,
        "each plot with its caption"
    );
    assert!(html.contains("datapath, client") && html.contains("sweep"));
    // No column of dashes only (TCP-only columns, round trips), units in the headers.
    assert!(!html.contains("round trip p50") && html.contains("delivered (%)"));
    assert!(html.contains("Where loss begins"));
    let outside = html
        .replace("http://www.w3.org/2000/svg", "")
        .replace("http://www.w3.org/1999/xlink", "");
    assert!(
        !outside.contains("http://")
            && !outside.contains("https://")
            && !outside.contains("<script")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sweep's HTML report renders in Chromium with nothing logged and nothing loaded.
#[test]
#[ignore = "needs chromium"]
fn a_sweeps_report_renders_in_chromium() {
    common::require_chromium();
    let dir = tempdir("render");
    let exp = dir.join("exp");
    ok(wirebench()
        .args(["sweep", "-u", "-n", "200K", "--vary", "rate=10M,50M"])
        .args(["--vary", "size=500,1000", "--pause", "10ms", "--out"])
        .arg(&exp));
    let html_path = dir.join("report.html");
    ok(wirebench()
        .arg("report")
        .arg(&exp)
        .arg("-o")
        .arg(&html_path));
    chromium_renders(&html_path, &dir.join("report.png"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens the report in headless Chromium (Debian's chromium, which CI installs), takes a
/// screenshot, and checks that no console message was logged and nothing but the page was
/// loaded (a broken image is an image loaded from a file or the network).
fn chromium_renders(html: &Path, shot: &Path) {
    if let Err(e) = chromium_check(html, shot) {
        panic!("{}: {e}", html.display());
    }
}

/// Renders `html` to `shot`; `Err` names the console messages and the loads other than the
/// page itself. Fails the test where Chromium is missing.
fn chromium_check(html: &Path, shot: &Path) -> Result<(), String> {
    let chromium = common::require_chromium();
    let profile = html.with_extension("profile");
    let page = format!("file://{}", html.display());
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            // Level 1 logs every file the page loads, and console messages at every level.
            "--v=1",
            "--window-size=1100,1800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&page)
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("chromium failed: {log}"));
    }
    // A page without script logs nothing to the console: any message (console.error is
    // logged at INFO) is a fault.
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect();
    let loads: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("FileURLLoader::Start: ").nth(1))
        .filter(|u| u.trim() != page)
        .collect();
    if !console.is_empty() || !loads.is_empty() {
        return Err(format!(
            "console: {console:?}; loaded besides the page: {loads:?}"
        ));
    }
    assert_eq!(png_size(shot), (1100, 1800));
    Ok(())
}

#[test]
#[ignore = "needs chromium"]
fn the_chromium_check_fails_on_a_console_error_and_on_a_broken_image() {
    common::require_chromium();
    let dir = tempdir("chromium");
    let broken = dir.join("broken.html");
    std::fs::write(
        &broken,
        "<!DOCTYPE html><html><body><p>x</p><img src=\"missing.png\"></body></html>",
    )
    .expect("write");
    let err = chromium_check(&broken, &dir.join("b.png")).expect_err("a broken image");
    assert!(err.contains("missing.png"), "{err}");
    let console = dir.join("console.html");
    std::fs::write(
        &console,
        "<!DOCTYPE html><html><body><script>console.error(\"boom\")</script></body></html>",
    )
    .expect("write");
    let err = chromium_check(&console, &dir.join("c.png")).expect_err("a console error");
    assert!(err.contains("boom"), "{err}");
    let fine = dir.join("fine.html");
    std::fs::write(
        &fine,
        "<!DOCTYPE html><html><body><p>fine</p></body></html>",
    )
    .expect("write");
    chromium_check(&fine, &dir.join("f.png")).expect("a plain page passes");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn latency_and_arrival_plots_from_a_result_and_a_packet_log() {
    let dir = tempdir("plots");
    let rr = dir.join("rr.json");
    let out = ok(wirebench().args(["run", "--mode", "rr", "-n", "6400", "--json"]));
    std::fs::write(&rr, &out.stdout).expect("write rr");
    plot_both(&rr, "latency", &dir, &["round trip", "CCDF"]);
    let log = dir.join("packets.log");
    ok(wirebench()
        .args([
            "run",
            "-u",
            "-n",
            "1M",
            "-l",
            "1000",
            "-b",
            "100M",
            "--packet-log",
        ])
        .arg(&log));
    plot_both(&log, "arrival", &dir, &["received"]);
    // A kind that does not fit the input: one line, exit 1.
    let out = wirebench()
        .args(["plot", rr.to_str().expect("utf-8"), "--kind", "rate", "-o"])
        .arg(dir.join("x.svg"))
        .output()
        .expect("plot");
    assert_eq!(out.status.code(), Some(1));
    // A size out of range, or results compared that are not rrul's: a usage error, exit 2,
    // saying what would work.
    for (args, says) in [
        (vec!["--width", "10"], "pixels each way"),
        (vec!["--dpi", "5000"], "--dpi 5000"),
        (vec![rr.to_str().expect("utf-8")], "run --mode rrul"),
    ] {
        let out = wirebench()
            .args(["plot", rr.to_str().expect("utf-8")])
            .args(&args)
            .arg("-o")
            .arg(dir.join("x.svg"))
            .output()
            .expect("plot");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // The default: a column wide at 300 dots per inch (3.5 in), its height from the panels.
    let png = dir.join("column.png");
    ok(wirebench()
        .args([
            "plot",
            rr.to_str().expect("utf-8"),
            "--kind",
            "latency",
            "-o",
        ])
        .arg(&png));
    assert_eq!(png_size(&png).0, 1050);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_transfer_time_preset_runs_scaled_down_and_prints_its_table() {
    let dir = tempdir("preset");
    let exp = dir.join("transfer-time");
    let out = ok(wirebench()
        .args([
            "sweep",
            "--preset",
            "transfer-time",
            "--scale",
            "0.001",
            "--repeat",
            "1",
            "--out",
        ])
        .arg(&exp));
    // The transfer table, with its columns.
    let text = String::from_utf8_lossy(&out.stdout);
    for col in [
        "Time (ms)",
        "Sent messages",
        "Sent bytes",
        "Read messages",
        "Read bytes",
        "Protocol",
        "Mechanism",
    ] {
        assert!(text.contains(col), "{text}");
    }
    // Mechanisms spelled as in the JSON.
    assert!(text.contains("stop-and-wait"), "{text}");
    assert!(!text.contains("stop_and_wait"), "{text}");
    let summary = read_json(&exp.join("summary.json"));
    // TCP and UDP, streaming and stop-and-wait, seven sizes.
    assert_eq!(summary["points"].as_array().map(Vec::len), Some(28));
    plot_both(
        &exp,
        "time",
        &dir,
        &["mode stream, proto tcp", "mode stop-and-wait, proto udp"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Words of the documents wirebench started from, which users of the tool do not know: their
/// numbers, section marks and constant names. Help speaks of what things do instead.
const SOURCE_WORDS: [&str; 10] = [
    "seed 0",
    "seed-0",
    "seed_0",
    "§",
    "DELAY_AFTER",
    "MB_OF_DATA",
    "STOP_AND_WAIT",
    "TIMEOUT_AFTER_FIRST",
    "stop_and_wait",
    "STREAMING",
];

#[test]
fn no_help_speaks_of_source_documents() {
    let commands: [&[&str]; 13] = [
        &[],
        &["run"],
        &["serve"],
        &["sweep"],
        &["plot"],
        &["report"],
        &["packet-log"],
        &["lab"],
        &["lab", "up"],
        &["lab", "exec"],
        &["lab", "down"],
        &["lab", "list"],
        &["lab", "scenario"],
    ];
    for cmd in commands {
        let out = ok(wirebench().args(cmd).arg("--help"));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Usage:"), "{cmd:?}: {help}");
        for word in SOURCE_WORDS {
            assert!(
                !help.contains(word),
                "{cmd:?} --help says {word:?}:\n{help}"
            );
        }
    }
}

#[test]
fn presets_are_named_by_what_they_do_and_the_first_names_still_work() {
    let help = ok(wirebench().args(["sweep", "--help"])).stdout;
    let help = String::from_utf8_lossy(&help);
    assert!(
        help.contains("rate-sweep") && help.contains("transfer-time"),
        "{help}"
    );
    // An unknown name: a usage error that lists the presets, not the old names.
    let out = wirebench()
        .args(["sweep", "--preset", "nope"])
        .output()
        .expect("sweep");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the presets are rate-sweep and transfer-time"),
        "{err}"
    );
    // The old names are accepted: the flags are then checked further (here, --scale).
    for old in ["seed-000", "seed-001"] {
        let out = wirebench()
            .args(["sweep", "--preset", old, "--scale", "2"])
            .output()
            .expect("sweep");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--scale is above 0 and at most 1"),
            "{old}: {err}"
        );
    }
}

#[test]
fn run_prints_csv_and_ndjson_with_the_jsons_spellings() {
    let out = ok(wirebench().args([
        "run",
        "-u",
        "--mode",
        "stop-and-wait",
        "-n",
        "20K",
        "-l",
        "1000",
        "--format",
        "csv",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("direction,protocol,mechanism,"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("forward,udp,stop-and-wait,1000,"),
        "{text}"
    );
    let out = ok(wirebench().args(["run", "-n", "1M", "--format", "ndjson"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: Value = serde_json::from_str(text.trim()).expect("one JSON document");
    assert_eq!(v["test"]["mechanism"], "stream");
}
