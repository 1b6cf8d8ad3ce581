//! Sharded sweeps: shards run as separate processes into one shared directory,
//! or into directories of their own, merge into the summary a one-process run of the same
//! grid makes; a rerun of a shard skips what it saved; a missing trial and a different
//! experiment are named. Also the sweep's flag checks and honest knees.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{wirebench, Server};
use serde_json::Value;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wirebench-shards-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn ok(cmd: &mut Command) -> Output {
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

/// The grid every run here shares: 2 × 2 points, 3 trials each, short UDP transfers.
const GRID: [&str; 10] = [
    "sweep",
    "-u",
    "-n",
    "100K",
    "--vary",
    "rate=20M,40M",
    "--vary",
    "size=500,1000",
    "--repeat",
    "3",
];

fn sweep(out: &Path, extra: &[&str]) -> Command {
    let mut c = wirebench();
    c.args(GRID).args(extra).arg("--out").arg(out);
    c
}

/// What must be equal between a merged run and a one-process run: every point's
/// parameters, trial count, trial files and the figures it has, and the knees' series.
fn shape(summary: &Value) -> Value {
    let points: Vec<Value> = summary["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            let figures: Vec<&String> = p["figures"].as_object().expect("figures").keys().collect();
            serde_json::json!([
                p["point"],
                p["trials"],
                p["failed"],
                p["files"],
                figures,
                p["offered_bps"]
            ])
        })
        .collect();
    let knees: Vec<&Value> = summary["knees"]
        .as_array()
        .expect("knees")
        .iter()
        .map(|k| &k["series"])
        .collect();
    serde_json::json!({ "points": points, "knees": knees })
}

#[test]
fn shards_run_as_processes_merge_into_the_one_process_summary() {
    let dir = tempdir("merge");
    let one = dir.join("one");
    ok(&mut sweep(&one, &[]));
    let whole = read_json(&one.join("summary.json"));
    let whole_meta = read_json(&one.join("experiment.json"));

    // Three shards at once, as three processes, into one shared directory.
    let shared = dir.join("shared");
    let children: Vec<_> = (0..3)
        .map(|i| {
            sweep(&shared, &["--shard", &format!("{i}/3")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn a shard")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success());
    }
    assert!(
        !shared.join("summary.json").exists(),
        "a shard leaves the summary to merge"
    );
    ok(wirebench().arg("merge").arg(&shared));
    let merged = read_json(&shared.join("summary.json"));
    assert_eq!(shape(&merged), shape(&whole));
    let meta = read_json(&shared.join("experiment.json"));
    assert_eq!(meta["manifest_hash"], whole_meta["manifest_hash"]);
    assert_eq!(meta["shards"], 3);
    assert_eq!(meta["varies"], whole_meta["varies"]);
    // Every trial's placement: 12 rows, each naming its shard, client and server.
    let placements = std::fs::read_to_string(shared.join("trials.csv")).expect("trials.csv");
    assert_eq!(placements.lines().count(), 13, "{placements}");
    for row in placements.lines().skip(1) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), 4, "{row}");
        assert!(f[1].ends_with("-of-3") && !f[2].is_empty() && f[3].starts_with("127.0.0.1:"));
    }

    // Two shards in directories of their own, merged into a third.
    let (a, b, out) = (dir.join("a"), dir.join("b"), dir.join("ab"));
    ok(&mut sweep(&a, &["--shard", "0/2"]));
    ok(&mut sweep(&b, &["--shard", "1/2"]));
    let missing = wirebench().arg("merge").arg(&a).output().expect("merge");
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("6 of 12 trials missing") && err.contains("of shard 1/2"),
        "{err}"
    );
    ok(wirebench().arg("merge").arg(&a).arg(&b).arg("-o").arg(&out));
    assert_eq!(shape(&read_json(&out.join("summary.json"))), shape(&whole));

    // `report` and `plot` given the shards' directories merge them first.
    let html = dir.join("shards.html");
    ok(wirebench()
        .arg("report")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&html));
    assert!(std::fs::metadata(&html).expect("report").len() > 1000);
    let svg = dir.join("shards.svg");
    ok(wirebench()
        .arg("plot")
        .arg(&a)
        .arg(&b)
        .args(["--kind", "rate", "-o"])
        .arg(&svg));
    assert!(std::fs::read_to_string(&svg)
        .expect("svg")
        .trim_start()
        .starts_with("<svg"));
    // The report reads a merged directory as it reads a one-process one.
    ok(wirebench()
        .arg("report")
        .arg(&out)
        .arg("-o")
        .arg(dir.join("report.html")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rerun_shard_skips_its_saved_trials_and_a_missing_one_is_run_again() {
    let dir = tempdir("resume");
    let exp = dir.join("exp");
    ok(&mut sweep(&exp, &["--shard", "1/2"]));
    let file = exp.join("trials/p001-r002.json");
    let before = std::fs::read(&file).expect("shard 1 saved trial 1");
    let again = ok(&mut sweep(&exp, &["--shard", "1/2"]));
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("0 trials run, 6 already saved"), "{text}");
    assert_eq!(std::fs::read(&file).expect("kept"), before);
    // A trial lost (a preempted job) is the only one run again.
    std::fs::remove_file(&file).expect("remove");
    let third = ok(&mut sweep(&exp, &["--shard", "1/2"]));
    let text = String::from_utf8_lossy(&third.stdout);
    assert!(text.contains("1 trials run, 5 already saved"), "{text}");
    assert!(file.is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn another_experiment_in_the_same_directory_is_refused() {
    let dir = tempdir("clash");
    let exp = dir.join("exp");
    ok(&mut sweep(&exp, &["--shard", "0/2"]));
    let out = sweep(&exp, &["--shard", "1/2", "--vary", "parallel=2"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another experiment's manifest"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shard_auto_reads_a_slurm_array_and_a_kubernetes_index() {
    let dir = tempdir("auto");
    let exp = dir.join("exp");
    // --array=1-2: task 2 is shard 1 of 2.
    let out = ok(sweep(&exp, &["--shard", "auto"])
        .env("SLURM_ARRAY_TASK_ID", "2")
        .env("SLURM_ARRAY_TASK_MIN", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "2")
        .env_remove("JOB_COMPLETION_INDEX"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("shard 1/2"));
    let out = ok(sweep(&exp, &["--shard", "auto"])
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env("JOB_COMPLETION_INDEX", "0")
        .env("WIREBENCH_SHARD_COUNT", "2"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("shard 0/2"));
    ok(wirebench().arg("merge").arg(&exp));
    let none = sweep(&exp, &["--shard", "auto"])
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("run");
    assert_eq!(none.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn targets_give_each_shard_its_own_server_and_say_which_measured_what() {
    let (s1, s2) = (Server::start(&[]), Server::start(&[]));
    let t1 = format!("127.0.0.1:{}", s1.port);
    let t2 = format!("127.0.0.1:{}", s2.port);
    let targets = format!("{t1},{t2}");
    let dir = tempdir("targets");
    let exp = dir.join("exp");
    for i in 0..2 {
        ok(wirebench()
            .args([
                "sweep", "-u", "-n", "50K", "--vary", "size=500", "--repeat", "2",
            ])
            .args(["--targets", &targets, "--shard", &format!("{i}/2"), "--out"])
            .arg(&exp));
    }
    ok(wirebench().arg("merge").arg(&exp));
    let placements = std::fs::read_to_string(exp.join("trials.csv")).expect("trials.csv");
    for row in placements.lines().skip(1) {
        // Server 1's points are the first (p001), measured by shard 0 only.
        let (want_shard, want_server) = if row.starts_with("trials/p001") {
            ("0-of-2", &t1)
        } else {
            ("1-of-2", &t2)
        };
        assert!(
            row.contains(want_shard) && row.ends_with(want_server.as_str()),
            "{row}"
        );
    }
    let summary = read_json(&exp.join("summary.json"));
    assert_eq!(summary["points"][1]["point"]["server"], Value::from(t2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vary_server_takes_host_and_port_as_targets_and_run_do() {
    let server = Server::start(&[]);
    let target = format!("127.0.0.1:{}", server.port);
    let dir = tempdir("vary-server");
    let exp = dir.join("exp");
    ok(wirebench()
        .args(["sweep", "-u", "-n", "50K", "--repeat", "1"])
        .args(["--vary", &format!("server={target}"), "--out"])
        .arg(&exp));
    let summary = read_json(&exp.join("summary.json"));
    assert_eq!(summary["points"][0]["point"]["server"], Value::from(target));
    assert_eq!(summary["points"][0]["failed"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sweep_flags_are_checked_per_kind_and_knees_are_honest() {
    let dir = tempdir("flags");
    for (args, flag) in [
        (
            &["sweep", "--vary", "size=1", "--scale", "0.1"][..],
            "--scale",
        ),
        (
            &["sweep", "--preset", "rate-sweep", "-t", "1s"][..],
            "--preset rate-sweep",
        ),
        (
            &["sweep", "--vary", "size=1", "--shard", "0/2"][..],
            "--shard needs --out",
        ),
        (
            &["sweep", "--vary", "size=1", "--shard", "2/2", "--out", "x"][..],
            "--shard 2/2",
        ),
    ] {
        let out = wirebench().args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines().count() == 1 && err.contains(flag),
            "{args:?}: {err}"
        );
    }
    // Loopback delivers a slow rate whole: the knee is past the highest rate tried.
    let out = ok(wirebench()
        .args([
            "sweep",
            "-u",
            "-n",
            "50K",
            "--vary",
            "rate=2M,4M",
            "--repeat",
            "1",
        ])
        .arg("--out")
        .arg(dir.join("knee")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no knee up to 4"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs network namespaces"]
fn lab_scenario_shards_share_a_directory_and_resume_makes_the_whole_summary() {
    common::require_lab();
    let dir = tempdir("lab");
    let file = dir.join("s.toml");
    std::fs::write(
        &file,
        r#"
name = "shards"
trials = 2
[[link]]
a = "h1"
b = "h2"
rate = "20M"
delay = "1ms"
[[profile]]
name = "reno"
cc = "reno"
[[profile]]
name = "cubic"
cc = "cubic"
[[test]]
name = "measured"
from = "h1"
to = "h2"
args = ["-t", "200ms"]
"#,
    )
    .expect("scenario");
    let out = dir.join("out");
    let scenario = |extra: &[&str]| {
        let mut c = wirebench();
        c.args(["lab", "scenario"])
            .arg(&file)
            .arg("--out")
            .arg(&out)
            .args(extra);
        c
    };
    ok(&mut scenario(&["--shard", "0/2"]));
    // Each profile's trials go round the shards: shard 0 ran trial 0 of both.
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d.join("trials"))
            .expect("trials")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&out), ["0000-cubic.json", "0000-reno.json"]);
    ok(&mut scenario(&["--shard", "1/2"]));
    assert_eq!(names(&out).len(), 4);
    // Merge into a directory of its own: the trials gathered, the scenario's summary made,
    // nothing run. A resumed run with no shard does the same in place.
    let merged = dir.join("merged");
    ok(wirebench().arg("merge").arg(&out).arg("-o").arg(&merged));
    assert_eq!(names(&merged).len(), 4);
    ok(&mut scenario(&["--resume"]));
    let summary = read_json(&merged.join("summary.json"));
    assert_eq!(summary, read_json(&out.join("summary.json")));
    let trials: Vec<u64> = summary["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .filter_map(|p| p["trials"].as_u64())
        .collect();
    assert_eq!(trials, [2, 2], "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mesh_runs_every_host_against_every_other_one_client_per_shard() {
    let (s1, s2) = (Server::start(&[]), Server::start(&[]));
    let h1 = format!("127.0.0.1:{}", s1.port);
    let h2 = format!("127.0.0.1:{}", s2.port);
    let dir = tempdir("mesh");
    let exp = dir.join("exp");
    for i in 0..2 {
        ok(wirebench()
            .args([
                "sweep", "-u", "-n", "50K", "--vary", "size=500", "--repeat", "2",
            ])
            .args([
                "--mesh",
                &format!("{h1},{h2}"),
                "--shard",
                &format!("{i}/2"),
                "--out",
            ])
            .arg(&exp));
    }
    ok(wirebench().arg("merge").arg(&exp));
    let summary = read_json(&exp.join("summary.json"));
    let pairs: Vec<(String, String)> = summary["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            let s = |k: &str| p["point"][k].as_str().unwrap_or_default().to_string();
            (s("client"), s("server"))
        })
        .collect();
    assert_eq!(pairs, [(h1.clone(), h2.clone()), (h2.clone(), h1.clone())]);
    let placements = std::fs::read_to_string(exp.join("trials.csv")).expect("trials.csv");
    for row in placements.lines().skip(1) {
        // Client 1's point (p001) is shard 0's, against server 2.
        let (shard, server) = if row.starts_with("trials/p001") {
            ("0-of-2", &h2)
        } else {
            ("1-of-2", &h1)
        };
        assert!(
            row.contains(shard) && row.ends_with(server.as_str()),
            "{row}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `limit`.
fn poll(what: &str, limit: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + limit;
    while !cond() {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The saved trial files of an experiment directory (no temporary ones).
fn trial_files(exp: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(exp.join("trials"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        p.extension().is_some_and(|x| x == "json")
            && !p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
    });
    v.sort();
    v
}

/// The issue's campaign: the server killed during a UDP rate sweep, restarted, the same
/// command again. The failed trials were kept as zeros ("delivered 50.00% (1 failed)",
/// knee "none"); now they are recorded as failed, left out of every figure, the sweep
/// exits 3, and the rerun measures exactly them again.
#[test]
fn trials_failed_by_a_killed_server_are_left_out_and_measured_again_on_resume() {
    let dir = tempdir("killed");
    let exp = dir.join("exp");
    let cmd = |port: u16| {
        let mut c = wirebench();
        c.args(["sweep", "127.0.0.1", "--port", &port.to_string()])
            .args(["-u", "-n", "1M", "--vary", "rate=10M,20M", "--repeat", "2"])
            .args(["--ordered", "--out"])
            .arg(&exp);
        c
    };
    let server = Server::start(&[]);
    let first = cmd(server.port)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the sweep");
    poll(
        "the first trial file",
        std::time::Duration::from_secs(60),
        || !trial_files(&exp).is_empty(),
    );
    drop(server); // killed by its pid: the second trial is running or about to connect
    let out = first.wait_with_output().expect("the sweep ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("3 of 4 trials failed"), "{err}");
    let summary = read_json(&exp.join("summary.json"));
    let ten = &summary["points"][0];
    assert_eq!(
        (ten["trials"].as_u64(), ten["failed"].as_u64()),
        (Some(2), Some(1))
    );
    // The completed trial alone makes the figures: no zero in them.
    assert_eq!(ten["files"], serde_json::json!(["trials/p001-r001.json"]));
    assert!(
        ten["figures"]["received_bytes"]["min"].as_f64() > Some(0.0),
        "{ten}"
    );
    assert!(ten["failures"][0]["reason"].as_str().is_some(), "{ten}");
    let twenty = &summary["points"][1];
    assert_eq!(twenty["failed"], 2);
    assert!(twenty["figures"].as_object().is_some_and(|f| f.is_empty()));
    assert_eq!(summary["points"][1]["offered_bps"], 20e6);
    let failed = read_json(&exp.join("trials/p001-r002.json"));
    assert_eq!(failed["trial"]["failed"], true);
    assert_eq!(failed["trial"]["attempt"], 1);
    let kept = std::fs::read(exp.join("trials/p001-r001.json")).expect("trial 1");
    // The report says it too, point by point, with the reason.
    let html = dir.join("report.html");
    ok(wirebench().arg("report").arg(&exp).arg("-o").arg(&html));
    let html = std::fs::read_to_string(&html).expect("report");
    assert!(
        html.contains("2 (1 of 2 trials failed)"),
        "the summary table"
    );
    assert!(
        html.contains(">rate 20.0 Mbit/s</a>: all 2 trials failed: the point has no figures"),
        "the warnings at the top"
    );
    let svg = dir.join("rate.svg");
    ok(wirebench()
        .arg("plot")
        .arg(&exp)
        .args(["--kind", "rate", "-o"])
        .arg(&svg));
    let svg = std::fs::read_to_string(&svg).expect("plot");
    // The caption's words, whatever lines it was wrapped into.
    let words: Vec<&str> = svg
        .split('<')
        .filter_map(|t| t.split_once('>').map(|(_, text)| text))
        .flat_map(str::split_whitespace)
        .collect();
    assert!(
        words
            .join(" ")
            .contains("1 of 2 trials failed at rate 10.0 Mbit/s"),
        "the caption: {svg}"
    );

    // Restarted (on another port: the server is not part of the experiment), same command.
    let server = Server::start(&[]);
    let again = cmd(server.port).output().expect("rerun");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert_eq!(
        std::fs::read(exp.join("trials/p001-r001.json")).expect("kept"),
        kept
    );
    let summary = read_json(&exp.join("summary.json"));
    for (i, p) in summary["points"]
        .as_array()
        .expect("points")
        .iter()
        .enumerate()
    {
        assert_eq!(
            (p["trials"].as_u64(), p["failed"].as_u64()),
            (Some(2), Some(0)),
            "{p}"
        );
        assert_eq!(p["files"].as_array().map(Vec::len), Some(2));
        assert!(p.get("failures").is_none(), "{p}");
        assert_eq!(p["offered_bps"], [10e6, 20e6][i]);
        assert!(
            p["figures"]["received_bytes"]["min"].as_f64() > Some(0.0),
            "{p}"
        );
    }
    let measured = read_json(&exp.join("trials/p001-r002.json"));
    assert_eq!(measured["trial"]["failed"], false);
    assert_eq!(measured["trial"]["attempt"], 2);
    // Measured later than the rest: the warnings (and so the report) say which.
    let warnings = read_json(&exp.join("warnings.json"));
    let retried = warnings
        .as_array()
        .and_then(|w| w.iter().find(|w| w["kind"] == "retried" && w["point"] == 1));
    assert_eq!(
        retried.map(|w| w["retried"].clone()),
        Some(serde_json::json!([
            {"file": "trials/p001-r002.json", "attempts": 2, "completed": true}
        ])),
        "{warnings}"
    );
    assert_eq!(
        measured["trial"]["manifest"],
        read_json(&exp.join("manifest.json"))["hash"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trial copied from a 10M experiment into a 40M one was "already saved" and showed as
/// 40M's figure; with manifest.json gone, another grid adopted the old trials. Now a trial
/// that does not belong is measured again, and `merge` refuses it naming the file.
#[test]
fn a_trial_from_another_experiment_is_measured_again_and_refused_by_merge() {
    let dir = tempdir("foreign");
    let (ten, forty) = (dir.join("ten"), dir.join("forty"));
    let small = |rate: &str, out: &Path| {
        let mut c = wirebench();
        c.args(["sweep", "-u", "-n", "100K", "--repeat", "1", "--vary"])
            .arg(format!("rate={rate}"))
            .arg("--out")
            .arg(out);
        c
    };
    ok(&mut small("10M", &ten));
    ok(&mut small("40M", &forty));
    let file = "trials/p001-r001.json";
    let copy = || std::fs::copy(ten.join(file), forty.join(file)).expect("copy");
    let forty_hash = read_json(&forty.join("manifest.json"))["hash"].clone();

    copy();
    let merged = wirebench()
        .arg("merge")
        .arg(&forty)
        .output()
        .expect("merge");
    let err = String::from_utf8_lossy(&merged.stderr);
    assert_eq!(merged.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(file) && err.contains("belongs to another experiment"),
        "{err}"
    );

    let rerun = ok(&mut small("40M", &forty));
    let err = String::from_utf8_lossy(&rerun.stderr);
    assert!(
        err.contains("belongs to another experiment") && err.contains("measured again"),
        "{err}"
    );
    assert_eq!(
        read_json(&forty.join(file))["trial"]["manifest"],
        forty_hash
    );
    // The warning is kept for the report, with the point and what was wrong.
    // (Others may be there too: a loaded machine's sender falls short of 40 Mbit/s.)
    let warnings = read_json(&forty.join("warnings.json"));
    let replaced = warnings
        .as_array()
        .and_then(|w| w.iter().find(|w| w["kind"] == "replaced"))
        .unwrap_or_else(|| panic!("no replaced warning: {warnings}"));
    assert_eq!(
        (&replaced["kind"], &replaced["point"], &replaced["file"]),
        (&"replaced".into(), &1.into(), &file.into()),
        "{warnings}"
    );
    assert!(replaced["why"]
        .as_str()
        .is_some_and(|w| w.starts_with("belongs to another experiment")));
    let summary = read_json(&forty.join("summary.json"));
    assert_eq!(summary["points"][0]["offered_bps"], 40e6);

    // No manifest: another grid starts its own experiment and adopts no old trial.
    std::fs::remove_file(forty.join("manifest.json")).expect("remove the manifest");
    let other = ok(&mut small("20M", &forty));
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("measured again"), "{err}");
    let summary = read_json(&forty.join("summary.json"));
    assert_eq!(summary["points"][0]["point"]["rate"], "20M");
    assert_eq!(summary["points"][0]["offered_bps"], 20e6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two directories holding the same shard: `merge` used to keep the first silently. The
/// same trial measured twice differently is refused naming both copies; identical copies
/// are merged, saying which was kept.
#[test]
fn merge_of_duplicate_shards_names_the_copy_kept_or_refuses_if_they_differ() {
    let dir = tempdir("dup");
    let (a, b, out) = (dir.join("a"), dir.join("b"), dir.join("out"));
    let part = |shard: &str, to: &Path| {
        let mut c = wirebench();
        c.args([
            "sweep",
            "-u",
            "-n",
            "100K",
            "--repeat",
            "1",
            "--vary",
            "rate=20M,40M",
        ])
        .args(["--ordered", "--shard", shard, "--out"])
        .arg(to);
        c
    };
    ok(&mut part("0/2", &a));
    ok(&mut part("0/2", &b));
    ok(&mut part("1/2", &b));
    let merge = || {
        wirebench()
            .arg("merge")
            .args([&a, &b])
            .arg("-o")
            .arg(&out)
            .output()
            .expect("merge")
    };
    let refused = merge();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("measured twice with different results"),
        "{err}"
    );
    assert!(
        err.contains(&a.join("trials/p001-r001.json").display().to_string()),
        "{err}"
    );

    std::fs::copy(
        a.join("trials/p001-r001.json"),
        b.join("trials/p001-r001.json"),
    )
    .expect("copy");
    let merged = merge();
    let err = String::from_utf8_lossy(&merged.stderr);
    assert!(merged.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "kept {}",
            a.join("trials/p001-r001.json").display()
        )) && err.contains("the copies are the same"),
        "{err}"
    );
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["points"].as_array().map(Vec::len), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two processes on one shard measured under each other's load and the last rename won.
#[test]
fn a_second_process_on_a_running_shard_is_refused() {
    let dir = tempdir("locked");
    let exp = dir.join("exp");
    let shard = || {
        let mut c = wirebench();
        c.args(["sweep", "-t", "3s", "--repeat", "1", "--vary", "size=1000"])
            .args(["--shard", "0/2", "--out"])
            .arg(&exp);
        c
    };
    let mut first = shard()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the first");
    let lock = exp.join("shards/0-of-2.lock");
    poll(
        "the first process's lock",
        std::time::Duration::from_secs(30),
        // The record names its holder (issue 45: JSON, with the kind of run).
        || std::fs::read_to_string(&lock).is_ok_and(|s| s.contains("\"pid\":")),
    );
    let second = shard().output().expect("the second");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(
        err.contains("shard 0/2") && err.contains("being run by another process"),
        "{err}"
    );
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");
    // Another shard of the same directory runs meanwhile.
    let other = wirebench()
        .args(["sweep", "-t", "3s", "--repeat", "1", "--vary", "size=1000"])
        .args(["--shard", "1/2", "--out"])
        .arg(&exp)
        .output()
        .expect("shard 1");
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    assert!(first.wait().expect("first ends").success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sweep --iperf3-json` writes each trial in iperf3's schema too (`iperf3/`, named as the
/// trial's file), its totals the trial's own; `merge` gathers the shards' copies with their
/// trials; a point iperf3's schema cannot hold is refused before anything runs.
#[test]
fn iperf3_json_trials_are_written_beside_the_trials_and_merged() {
    let server = Server::start(&[]);
    let dir = tempdir("iperf3-json");
    let port = server.port.to_string();
    let grid = |out: &Path, shard: &str| {
        let mut c = wirebench();
        c.args([
            "sweep",
            "127.0.0.1",
            "--port",
            &port,
            "-t",
            "0.5",
            "--iperf3-json",
        ])
        .args(["--vary", "parallel=1,2", "--shard", shard, "--out"])
        .arg(out);
        c
    };
    let (a, b, out) = (dir.join("a"), dir.join("b"), dir.join("ab"));
    ok(&mut grid(&a, "0/2"));
    ok(&mut grid(&b, "1/2"));
    ok(wirebench().arg("merge").arg(&a).arg(&b).arg("-o").arg(&out));
    let mut seen = 0;
    for point in 1..=2 {
        for repeat in 1..=3 {
            let name = format!("p{point:03}-r{repeat:03}.json");
            let trial = read_json(&out.join("trials").join(&name));
            let theirs = read_json(&out.join("iperf3").join(&name));
            let sent = &trial["end"]["sent"]["bytes"];
            assert!(sent.as_u64().is_some_and(|b| b > 0), "{name}: {trial}");
            assert_eq!(&theirs["end"]["sum_sent"]["bytes"], sent, "{name}");
            assert_eq!(
                theirs["start"]["test_start"]["num_streams"], point,
                "{name}"
            );
            let streams = theirs["intervals"][0]["streams"]
                .as_array()
                .expect("streams");
            assert_eq!(streams.len(), point as usize, "{name}");
            seen += 1;
        }
    }
    assert_eq!(seen, 6);
    let refused = wirebench()
        .args([
            "sweep",
            "--vary",
            "mode=stream,rr",
            "--iperf3-json",
            "-t",
            "1",
        ])
        .output()
        .expect("sweep");
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("point mode=rr") && err.contains("--json"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
