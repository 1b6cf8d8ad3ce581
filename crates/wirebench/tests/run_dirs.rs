//! Issue 45, the directories runs fill: no writer (`sweep`, `lab scenario` and its
//! `--resume`, `merge -o`, `report -o`, the lock files) writes through a link, opens a
//! FIFO or waits on one; and one lock per experiment directory, whatever runs in it.
//!
//! Each writer meets, at the name it writes, a link to a file outside the experiment, a
//! link to a sibling trial, a FIFO and a directory: a link is replaced (the file it led
//! to is byte for byte as it was), the rest is refused in one line naming it, and nothing
//! waits.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Loose: the runs take a second or two; only a hang comes near it.
const LIMIT: Duration = Duration::from_secs(60);

/// A fresh directory for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("wirebench-rundir-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Self(d)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn run(args: &[&str]) -> Output {
    common::run_confined(args, LIMIT)
}

fn ok(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts exit status 1 and a one-line `error:` that contains each of `needles`.
fn refused(out: &Output, what: &str, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    let line = err.trim_end();
    let last = line.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: "), "{what}: no error line: {err}");
    assert!(
        !line.lines().any(|l| l.starts_with("error:") && l != last),
        "{what}: {err}"
    );
    for n in needles {
        assert!(last.contains(n), "{what}: {n:?} not in {last}");
    }
}

/// One point, two trials, an in-process server: `trials/p001-r00{1,2}.json`.
fn sweep_args<'a>(out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "sweep", "-u", "-n", "100K", "--vary", "rate=10M", "--repeat", "2", "--out",
    ];
    a.push(s(out));
    a.extend_from_slice(extra);
    a
}

/// The outside file every link leads to, and its bytes.
fn outside(d: &Dir) -> (PathBuf, Vec<u8>) {
    let p = d.path("outside.txt");
    let bytes = b"the user's own file\n".to_vec();
    std::fs::write(&p, &bytes).expect("outside");
    (p, bytes)
}

/// What each test puts at a name a writer writes.
#[derive(Debug, Clone, Copy)]
enum Bad {
    LinkOut,
    LinkSibling,
    Fifo,
    Directory,
}

const ALL: [Bad; 4] = [Bad::LinkOut, Bad::LinkSibling, Bad::Fifo, Bad::Directory];

/// Puts `bad` at `at`; a sibling link leads to `sibling`.
fn place(bad: Bad, at: &Path, outside: &Path, sibling: &Path) {
    let _ = std::fs::remove_file(at);
    let _ = std::fs::remove_dir_all(at);
    match bad {
        Bad::LinkOut => std::os::unix::fs::symlink(outside, at).expect("link"),
        Bad::LinkSibling => std::os::unix::fs::symlink(sibling, at).expect("link"),
        Bad::Fifo => {
            let ok = Command::new("mkfifo").arg(at).status().expect("mkfifo");
            assert!(ok.success());
        }
        Bad::Directory => std::fs::create_dir(at).expect("dir"),
    }
}

/// After a writer met `bad` at `at`: a link was replaced by a regular file and what it led
/// to is as it was; a FIFO or a directory was refused by `out` and is still there.
fn check(bad: Bad, out: &Output, at: &Path, kept: &[(&Path, &[u8])], what: &str) {
    for (p, bytes) in kept {
        let now = std::fs::read(p).expect("kept file");
        assert!(now == *bytes, "{what} {bad:?}: {} changed", p.display());
    }
    let meta = std::fs::symlink_metadata(at).expect("still there");
    match bad {
        Bad::LinkOut | Bad::LinkSibling => {
            assert!(
                out.status.success(),
                "{what} {bad:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(meta.is_file(), "{what} {bad:?}: the link is still there");
        }
        Bad::Fifo => {
            refused(out, what, &["a FIFO"]);
            assert!(std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()));
        }
        Bad::Directory => {
            refused(out, what, &["a directory"]);
            assert!(meta.is_dir());
        }
    }
    if matches!(bad, Bad::Fifo | Bad::Directory) {
        let name = at.file_name().expect("name").to_string_lossy();
        refused(out, what, &[&name]);
    }
}

#[test]
fn sweep_never_writes_through_a_trial_file_and_never_opens_a_fifo() {
    let d = Dir::new("sweep");
    let (out_file, bytes) = outside(&d);
    let exp = d.path("exp");
    ok(&sweep_args(&exp, &[]));
    let r1 = exp.join("trials/p001-r001.json");
    let r2 = exp.join("trials/p001-r002.json");
    let first = std::fs::read(&r1).expect("r001");
    for bad in ALL {
        place(bad, &r2, &out_file, Path::new("p001-r001.json"));
        let out = run(&sweep_args(&exp, &[]));
        let kept: [(&Path, &[u8]); 2] = [(&out_file, &bytes), (&r1, &first)];
        check(bad, &out, &r2, &kept, "sweep");
    }
}

#[test]
fn merge_o_never_writes_through_what_it_finds_in_its_output() {
    let d = Dir::new("merge");
    let (out_file, bytes) = outside(&d);
    let exp = d.path("exp");
    ok(&sweep_args(&exp, &[]));
    let merged = d.path("merged");
    for bad in ALL {
        let _ = std::fs::remove_dir_all(&merged);
        std::fs::create_dir_all(merged.join("trials")).expect("trials");
        let r1 = merged.join("trials/p001-r001.json");
        std::fs::write(&r1, b"an earlier copy").expect("r1");
        let r2 = merged.join("trials/p001-r002.json");
        place(bad, &r2, &out_file, Path::new("p001-r001.json"));
        let out = run(&["merge", s(&exp), "-o", s(&merged)]);
        let kept: [(&Path, &[u8]); 1] = [(&out_file, &bytes)];
        check(bad, &out, &r2, &kept, "merge -o");
        if matches!(bad, Bad::LinkSibling) {
            // The sibling was merged itself (replaced, whole), not overwritten through r2.
            assert_eq!(
                std::fs::read(&r1).expect("r1"),
                std::fs::read(exp.join("trials/p001-r001.json")).expect("r1")
            );
        }
    }
}

#[test]
fn report_output_is_never_written_through_a_link_or_into_a_fifo() {
    let d = Dir::new("report");
    let (out_file, bytes) = outside(&d);
    let exp = d.path("exp");
    ok(&sweep_args(&exp, &[]));
    let sibling = exp.join("summary.json");
    let summary = std::fs::read(&sibling).expect("summary");
    let html = exp.join("report.html");
    for bad in ALL {
        place(bad, &html, &out_file, Path::new("summary.json"));
        let out = run(&["report", s(&exp), "-o", s(&html)]);
        let kept: [(&Path, &[u8]); 2] = [(&out_file, &bytes), (&sibling, &summary)];
        check(bad, &out, &html, &kept, "report -o");
    }
}

#[test]
fn a_lock_file_that_is_a_link_a_fifo_or_a_directory_is_refused_and_never_waited_on() {
    let d = Dir::new("lock");
    let (out_file, bytes) = outside(&d);
    let exp = d.path("exp");
    ok(&sweep_args(&exp, &[]));
    let lock = exp.join("shards/0-of-1.lock");
    let record = exp.join("shards/0-of-1.json");
    let record_bytes = std::fs::read(&record).expect("record");
    for bad in ALL {
        place(bad, &lock, &out_file, Path::new("0-of-1.json"));
        let out = run(&sweep_args(&exp, &[]));
        let needle = match bad {
            Bad::LinkOut | Bad::LinkSibling => "a symbolic link, not a regular file",
            Bad::Fifo => "a FIFO, not a regular file",
            Bad::Directory => "0-of-1.lock",
        };
        refused(
            &out,
            &format!("sweep, lock {bad:?}"),
            &[needle, "0-of-1.lock"],
        );
        // `merge` only looks at a lock it does not take: it neither waits nor fails on it.
        let merged = d.path("merged");
        let m = run(&["merge", s(&exp), "-o", s(&merged)]);
        assert!(
            m.status.success(),
            "merge, lock {bad:?}: {}",
            String::from_utf8_lossy(&m.stderr)
        );
        let _ = std::fs::remove_dir_all(&merged);
        assert_eq!(std::fs::read(&out_file).expect("outside"), bytes);
        assert_eq!(std::fs::read(&record).expect("record"), record_bytes);
    }
}

/// The scenario of the lab tests here: one link, one profile, one short test.
fn scenario(d: &Dir, time: &str, trials: u32) -> PathBuf {
    let p = d.path("s.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"mini\"\ntrials = {trials}\n[[link]]\na = \"h1\"\nb = \"h2\"\nrate = \"10M\"\n\
             [[profile]]\nname = \"p\"\n[[test]]\nname = \"m\"\nfrom = \"h1\"\nto = \"h2\"\n\
             args = [\"-t\", \"{time}\"]\n"
        ),
    )
    .expect("scenario");
    p
}

#[test]
#[ignore = "needs network namespaces"]
fn lab_scenario_and_its_resume_never_write_through_a_trial_file() {
    common::require_lab();
    let d = Dir::new("lab");
    let (out_file, bytes) = outside(&d);
    let sc = scenario(&d, "200ms", 2);
    let out = d.path("out");
    ok(&["lab", "scenario", s(&sc), "--out", s(&out)]);
    let (first, trial) = (
        out.join("trials/0000-p.json"),
        out.join("trials/0001-p.json"),
    );
    // A sibling a run leaves alone: another profile's trial (a copy of the first).
    let other = out.join("trials/0000-q.json");
    std::fs::copy(&first, &other).expect("sibling");
    for resume in [false, true] {
        // A resume keeps the first trial: the sibling link leads to it.
        let sibling = if resume { &first } else { &other };
        let sibling_bytes = std::fs::read(sibling).expect("sibling");
        let name = sibling.file_name().expect("name");
        for bad in ALL {
            place(bad, &trial, &out_file, Path::new(name));
            let mut args = vec!["lab", "scenario", s(&sc), "--out", s(&out)];
            if resume {
                args.push("--resume");
            }
            let got = run(&args);
            let kept: [(&Path, &[u8]); 2] = [(&out_file, &bytes), (sibling, &sibling_bytes)];
            check(
                bad,
                &got,
                &trial,
                &kept,
                &format!("lab scenario, resume {resume}"),
            );
        }
        let _ = std::fs::remove_dir(&trial);
        let _ = std::fs::remove_file(&trial);
        ok(&["lab", "scenario", s(&sc), "--out", s(&out)]);
    }
}

// --- one lock per directory ---------------------------------------------------------------

/// Starts every command of `runs` at the same instant (a barrier, then spawn) and returns
/// their outputs, in order.
fn at_once(runs: Vec<Vec<String>>) -> Vec<Output> {
    let barrier = Arc::new(Barrier::new(runs.len()));
    let threads: Vec<_> = runs
        .into_iter()
        .map(|args| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                barrier.wait();
                run(&args)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect()
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_string()).collect()
}

#[test]
fn a_plain_sweep_and_two_shards_started_at_once_never_run_together() {
    let d = Dir::new("mix");
    let exp = d.path("exp");
    // Each run measures for a second: the others reach the lock long before it ends.
    let base = sweep_args(&exp, &[]);
    let mut base: Vec<&str> = base.into_iter().filter(|a| *a != "100K").collect();
    base.retain(|a| *a != "-n");
    base.extend(["-t", "1s"]);
    let with = |extra: &[&str]| {
        let mut a = base.clone();
        a.extend_from_slice(extra);
        owned(&a)
    };
    let outs = at_once(vec![
        with(&[]),
        with(&["--shard", "0/2"]),
        with(&["--shard", "1/2"]),
    ]);
    let ran: Vec<bool> = outs.iter().map(|o| o.status.success()).collect();
    match ran.as_slice() {
        [true, false, false] => {
            for o in &outs[1..] {
                refused(
                    o,
                    "a shard beside the plain sweep",
                    &["is in use by `sweep` (pid"],
                );
            }
        }
        [false, true, true] => refused(
            &outs[0],
            "the plain sweep beside the shards",
            &["is in use by `sweep --shard ", "/2` (pid"],
        ),
        other => panic!(
            "runs {other:?}: only the plain sweep, or both shards, may run: {:?}",
            outs.iter()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .collect::<Vec<_>>()
        ),
    }
}

#[test]
fn merge_is_refused_while_a_shard_runs_naming_it() {
    let d = Dir::new("merge-running");
    let exp = d.path("exp");
    let mut args: Vec<&str> = vec![
        "sweep", "-u", "-t", "2s", "--vary", "rate=10M", "--repeat", "2", "--out",
    ];
    args.extend([s(&exp), "--shard", "0/2"]);
    let mut shard = common::wirebench()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("shard");
    // The shard holds the directory once its lock file names it: waited for, bounded.
    let lock = exp.join("shards/0-of-2.lock");
    let me = format!("\"pid\":{}", shard.id());
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains(&me)) {
        assert!(start.elapsed() < LIMIT, "the shard never took its lock");
        assert!(shard.try_wait().expect("wait").is_none(), "the shard ended");
        std::thread::yield_now();
    }
    let out = run(&["merge", s(&exp)]);
    let pid = format!("`sweep --shard 0/2` (pid {}", shard.id());
    refused(&out, "merge while a shard runs", &["is in use by", &pid]);
    let merged = d.path("merged");
    let out = run(&["merge", s(&exp), "-o", s(&merged)]);
    refused(&out, "merge -o while a shard runs", &["is in use by", &pid]);
    assert!(shard.wait().expect("shard").success());
}

#[test]
#[ignore = "needs network namespaces"]
fn two_lab_scenarios_on_one_out_started_at_once_never_run_together() {
    common::require_lab();
    let d = Dir::new("lab-mix");
    let sc = scenario(&d, "1s", 1);
    let out = d.path("out");
    let args = owned(&["lab", "scenario", s(&sc), "--out", s(&out)]);
    let outs = at_once(vec![args.clone(), args]);
    let ran: Vec<bool> = outs.iter().map(|o| o.status.success()).collect();
    let refused_one = match ran.as_slice() {
        [true, false] => &outs[1],
        [false, true] => &outs[0],
        other => panic!("runs {other:?}: exactly one of two scenario runs may run"),
    };
    refused(
        refused_one,
        "a second scenario run",
        &["is in use by `lab scenario` (pid"],
    );
}

// --- a run bound to its plan or file ------------------------------------------------------

#[test]
fn a_sweep_trial_whose_own_test_is_another_points_is_measured_again_and_refused_by_merge() {
    let d = Dir::new("retag");
    let exp = d.path("exp");
    let args = [
        "sweep",
        "-u",
        "-n",
        "100K",
        "--vary",
        "rate=10M,20M",
        "--out",
        s(&exp),
    ];
    ok(&args);
    // The 10M trial, re-tagged as the 20M point's.
    let p1 = exp.join("trials/p001-r001.json");
    let p2 = exp.join("trials/p002-r001.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&p1).expect("p1")).expect("json");
    doc["trial"]["point"] = 2.into();
    std::fs::write(&p2, serde_json::to_vec(&doc).expect("json")).expect("p2");
    let out = run(&["merge", s(&exp)]);
    refused(
        &out,
        "merge",
        &[
            "p002-r001.json",
            "its own test is another one (rate_bps 10000000)",
        ],
    );
    let out = run(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("its own test is another one"), "{err}");
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&p2).expect("p2")).expect("json");
    assert_eq!(again["test"]["rate_bps"], 20_000_000);
}

#[test]
#[ignore = "needs network namespaces"]
fn lab_resume_refuses_an_edited_scenario_naming_the_change_and_takes_declared_profiles() {
    common::require_lab();
    let d = Dir::new("bound");
    let sc = scenario(&d, "200ms", 1);
    let out = d.path("out");
    let resume = ["lab", "scenario", s(&sc), "--out", s(&out), "--resume"];
    ok(&["lab", "scenario", s(&sc), "--out", s(&out)]);
    let text = std::fs::read_to_string(&sc).expect("scenario");
    std::fs::write(&sc, text.replace("rate = \"10M\"", "rate = \"20M\"")).expect("edit");
    refused(
        &run(&resume),
        "a changed link",
        &[
            "another scenario",
            "link h1-h2 changed (rate \"10M\" → \"20M\")",
        ],
    );
    std::fs::write(&sc, text.replace("\"200ms\"", "\"300ms\"")).expect("edit");
    refused(&run(&resume), "a changed test", &["test m changed (args"]);
    let added = text.replace(
        "[[profile]]\nname = \"p\"\n",
        "[[profile]]\nname = \"p\"\n[[profile]]\nname = \"q\"\n",
    );
    std::fs::write(&sc, &added).expect("edit");
    refused(
        &run(&resume),
        "an undeclared profile",
        &["profile q added (declare it with --add-profiles)"],
    );
    let mut declared = resume.to_vec();
    declared.push("--add-profiles");
    ok(&declared);
    assert!(out.join("trials/0000-q.json").is_file());
    // The manifest is the new file's now: a plain resume goes on.
    ok(&resume);
}

// --- report and plot refuse a bad trial file ----------------------------------------------

#[test]
fn report_and_box_plots_refuse_a_bad_trial_file_naming_it() {
    let d = Dir::new("bad-trial");
    let exp = d.path("exp");
    ok(&sweep_args(&exp, &[]));
    let trial = exp.join("trials/p001-r002.json");
    let good = std::fs::read_to_string(&trial).expect("trial");
    let first = |key: &str, to: &str| -> String {
        let at = good.find(&format!("\"{key}\": ")).expect("key") + key.len() + 4;
        let end = at + good[at..].find([',', '\n']).expect("end");
        format!("{}{to}{}", &good[..at], &good[end..])
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("1e308", first("bytes", "1e308"), "= 1e308: out of range"),
        ("NaN", first("sent_bps", "NaN"), "expected value"),
        (
            "negative",
            first("messages", "-5"),
            "= -5: cannot be negative",
        ),
        ("1e400", first("sent_bps", "1e400"), "a number out of range"),
        ("2 GB", String::new(), "is too large"),
    ];
    let html = d.path("r.html");
    for (what, text, needle) in cases {
        std::fs::write(&trial, &text).expect("write");
        if what == "2 GB" {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&trial)
                .expect("open");
            f.set_len(2 << 30).expect("sparse 2 GB");
        }
        for args in [
            vec!["report", s(&exp), "-o", s(&html)],
            vec!["plot", s(&exp), "--kind", "box", "-o", s(&d.path("b.svg"))],
        ] {
            let out = run(&args);
            refused(
                &out,
                &format!("{} {what}", args[0]),
                &["p001-r002.json", needle, "remove it"],
            );
        }
    }
    assert!(!html.exists(), "a report was written");
}

// --- names on the terminal ----------------------------------------------------------------

#[test]
#[ignore = "needs network namespaces"]
fn names_from_a_scenario_reach_the_terminal_escaped() {
    common::require_lab();
    let d = Dir::new("names");
    let sc = scenario(&d, "100ms", 1);
    let text = std::fs::read_to_string(&sc).expect("scenario");
    let text = text
        .replace("name = \"mini\"", "name = \"mi\u{202e}ni\u{2066}\"")
        .replace("name = \"p\"", "name = \"p\u{202d}q\"");
    std::fs::write(&sc, text).expect("scenario");
    let out = run(&["lab", "scenario", s(&sc), "--out", s(&d.path("out"))]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for raw in ['\u{202e}', '\u{2066}', '\u{202d}'] {
        assert!(!err.contains(raw), "{raw:?} reached the terminal: {err}");
    }
    assert!(err.contains("scenario mi\\u{202e}ni\\u{2066}:"), "{err}");
    assert!(err.contains("(p\\u{202d}q #0)"), "{err}");
}
