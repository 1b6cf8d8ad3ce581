//! Files a campaign reads back and writes (issue "Campaigns that never lie", items 8, 9 and
//! 12): a FIFO or a link to `/dev/zero` as a trial file ends `sweep` resume, `lab --resume`,
//! `report` and `merge` at once with a one-line error under a memory limit; a summary whose
//! `files` lead out of the experiment is refused; an output whose write fails leaves the
//! earlier file intact and no temporary file; temporary files a killed write left behind
//! are removed when the next run starts in their directory.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::wirebench;

/// Loose: the runs take milliseconds; only a hang or an endless read comes near it.
const LIMIT: Duration = Duration::from_secs(60);

/// A fresh directory for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("wirebench-saved-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Self(d)
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
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    let line = err.trim_end();
    assert!(
        line.starts_with("error: ") && !line.contains('\n'),
        "{args:?}: not one line: {err}"
    );
    assert!(line.contains(needle), "{args:?}: {line}");
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The sweep every test here makes (and resumes): one point, two trials, in-process server.
const SWEEP: &[&str] = &[
    "sweep", "-u", "-n", "100K", "--vary", "rate=10M", "--repeat", "2",
];

fn sweep_args(out: &Path) -> Vec<&str> {
    let mut a = SWEEP.to_vec();
    a.extend(["--out", s(out)]);
    a
}

/// A finished experiment directory `exp` in `d`.
fn experiment(d: &Dir) -> PathBuf {
    let exp = d.0.join("exp");
    let out = run(&sweep_args(&exp));
    assert!(
        out.status.success(),
        "sweep: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exp
}

fn mkfifo(p: &Path) {
    let _ = std::fs::remove_file(p);
    let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(ok.success());
}

fn link_to_dev_zero(p: &Path) {
    let _ = std::fs::remove_file(p);
    std::os::unix::fs::symlink("/dev/zero", p).expect("symlink");
}

/// The trial file each test replaces.
const TRIAL: &str = "trials/p001-r001.json";

#[test]
fn a_fifo_or_dev_zero_as_a_trial_file_ends_sweep_resume_report_and_merge_at_once() {
    let d = Dir::new("trials");
    let exp = experiment(&d);
    let merged = d.0.join("merged");
    let html = d.0.join("r.html");
    for (make, kind) in [
        (mkfifo as fn(&Path), "(a FIFO)"),
        (link_to_dev_zero, "(a character device)"),
    ] {
        make(&exp.join(TRIAL));
        let needle = format!("p001-r001.json is not a regular file {kind}");
        refused(&sweep_args(&exp), &needle);
        refused(&["report", s(&exp), "-o", s(&html)], &needle);
        refused(
            &[
                "plot",
                s(&exp),
                "--kind",
                "box",
                "-o",
                s(&d.0.join("b.svg")),
            ],
            &needle,
        );
        refused(&["merge", s(&exp), "-o", s(&merged)], &needle);
        // Refused, not run over: what the user put there is still there.
        let still = std::fs::symlink_metadata(exp.join(TRIAL)).expect("still there");
        assert!(!still.is_file(), "{kind}: replaced");
    }
    assert!(!html.exists());
}

#[test]
fn a_fifo_or_dev_zero_as_a_trial_file_ends_lab_resume_at_once() {
    let d = Dir::new("lab");
    let scenario = d.0.join("s.toml");
    std::fs::write(
        &scenario,
        "name = \"mini\"\ntrials = 1\n[[link]]\na = \"h1\"\nb = \"h2\"\n[[profile]]\n\
         name = \"p\"\n[[test]]\nname = \"m\"\nfrom = \"h1\"\nto = \"h2\"\nargs = [\"-t\", \"1s\"]\n",
    )
    .expect("scenario");
    let out = d.0.join("out");
    std::fs::create_dir_all(out.join("trials")).expect("trials");
    let trial = out.join("trials/0000-p.json");
    for (make, kind) in [
        (mkfifo as fn(&Path), "(a FIFO)"),
        (link_to_dev_zero, "(a character device)"),
    ] {
        make(&trial);
        // Read before the lab is made, so this needs no privilege.
        refused(
            &[
                "lab",
                "scenario",
                s(&scenario),
                "--out",
                s(&out),
                "--resume",
            ],
            &format!("0000-p.json is not a regular file {kind}"),
        );
    }
}

#[test]
fn a_summary_whose_files_lead_outside_the_experiment_is_refused() {
    let d = Dir::new("outside");
    let exp = experiment(&d);
    let summary = exp.join("summary.json");
    let original = std::fs::read_to_string(&summary).expect("summary");
    std::fs::write(d.0.join("x"), b"{}").expect("x");
    std::os::unix::fs::symlink("/etc/passwd", exp.join("trials/out.json")).expect("link");
    for (name, why) in [
        ("/etc/passwd", "it is an absolute path"),
        ("../x", "it goes up with `..`"),
        ("trials/../../x", "it goes up with `..`"),
        ("trials/out.json", "a link that leads out of it"),
    ] {
        std::fs::write(&summary, original.replacen(TRIAL, name, 1)).expect("write");
        let needle = format!("points[0].files[0] = {name:?} leads outside");
        refused(&["report", s(&exp), "-o", s(&d.0.join("r.html"))], &needle);
        refused(&["plot", s(&exp), "-o", s(&d.0.join("p.svg"))], why);
    }
}

#[test]
fn temp_files_of_killed_writes_are_cleaned_when_a_resume_or_report_starts() {
    let d = Dir::new("temps");
    let exp = experiment(&d);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    // As a write killed mid-way leaves them: this host, a process that is gone (no pid is
    // above Linux's largest, 2^22).
    let left = |dir: &Path, name: &str| {
        let p = dir.join(format!(".{name}.wirebench-tmp-4194304-0@{host}"));
        std::fs::write(&p, b"half a file").expect("temp");
        p
    };
    let in_trials = left(&exp.join("trials"), "p001-r001.json");
    let in_dir = left(&exp, "summary.json");
    // A live writer's (this test's own process) is kept.
    let live = exp.join(format!(
        ".summary.csv.wirebench-tmp-{}-0@{host}",
        std::process::id()
    ));
    std::fs::write(&live, b"being written").expect("live");
    let out = run(&sweep_args(&exp));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!in_trials.exists() && !in_dir.exists());
    assert!(live.exists());

    let reports = d.0.join("reports");
    std::fs::create_dir_all(&reports).expect("reports");
    let in_out = left(&reports, "r.html");
    let out = run(&["report", s(&exp), "-o", s(&reports.join("r.html"))]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!in_out.exists());
}

/// An existing report, plot and image survive a write that fails: the output directory is
/// a full 64 KiB tmpfs, mounted in a user and mount namespace (`unshare -Urm`).
#[test]
#[ignore = "needs user namespaces"]
fn existing_outputs_survive_a_failed_write_on_a_full_disk() {
    common::require("unshare");
    let d = Dir::new("full");
    let exp = experiment(&d);
    let full = d.0.join("full");
    std::fs::create_dir_all(&full).expect("mount point");
    let script = r#"
        D="$1"; EXP="$2"
        mount -t tmpfs -o size=64k none "$D" || exit 99
        printf 'the report of last month' > "$D/report.html"
        printf 'last month' > "$D/plot.svg"
        printf 'last month' > "$D/plot.png"
        dd if=/dev/zero of="$D/fill" bs=1k count=256 2>/dev/null
        "$0" report "$EXP" -o "$D/report.html"; echo "report=$?"
        "$0" plot "$EXP" --kind box -o "$D/plot.svg"; echo "svg=$?"
        "$0" plot "$EXP" --kind box -o "$D/plot.png"; echo "png=$?"
        cat "$D/report.html"; echo; cat "$D/plot.svg"; echo; cat "$D/plot.png"; echo
        ls -A "$D"
    "#;
    let out = Command::new("unshare")
        .args(["-Urm", "sh", "-c", script])
        .arg(wirebench().get_program())
        .args([s(&full), s(&exp)])
        .output();
    let out = out.expect("run unshare");
    assert_ne!(
        out.status.code(),
        Some(99),
        "this test needs user namespaces: cannot mount a tmpfs in `unshare -Urm` here: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    for (tag, file) in [
        ("report", "report.html"),
        ("svg", "plot.svg"),
        ("png", "plot.png"),
    ] {
        assert!(text.contains(&format!("{tag}=1")), "{tag}: {text} {err}");
        assert!(
            err.contains(&format!("writing {}", s(&full.join(file)))),
            "{tag}: {err}"
        );
    }
    assert!(err.contains("No space left on device"), "{err}");
    // Each old file whole; nothing else but the filler (no temp file, no 0-byte output).
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"the report of last month"), "{text}");
    assert_eq!(
        lines.iter().filter(|l| **l == "last month").count(),
        2,
        "{text}"
    );
    let listed: Vec<&str> = lines.iter().rev().take(4).copied().collect();
    let mut listed = listed;
    listed.sort_unstable();
    assert_eq!(
        listed,
        ["fill", "plot.png", "plot.svg", "report.html"],
        "{text}"
    );
}

#[test]
fn a_fifo_given_to_plot_or_packet_log_is_refused_at_once() {
    let d = Dir::new("given");
    for name in ["run.log", "run.json", "links.csv"] {
        let fifo = d.0.join(name);
        mkfifo(&fifo);
        refused(
            &["plot", s(&fifo), "-o", s(&d.0.join("p.svg"))],
            "is not a regular file (a FIFO)",
        );
    }
    refused(
        &["packet-log", s(&d.0.join("run.log"))],
        "is not a regular file (a FIFO)",
    );
}
