//! What a reader copies from the documents works, and what they follow leads somewhere.
//! The documents are README.md, ARCHITECTURE.md, SECURITY.md, every docs/*.md and every
//! README.md under deploy/.
//!
//! - Every fenced block names its language (`sh`, `text`, `toml`, `yaml`, ...): a block
//!   without one could hold a command that no test runs.
//! - Every relative link and image leads to a file that exists, and a `#anchor` to a
//!   heading of that file, by GitHub's rule for anchors.
//! - Every command of an `sh` block runs, or where it cannot run here, has its flags
//!   checked. What a block needs decides which (`adapt::class`):
//!   - **Run** (`every_doc_command_runs`): each command, in its document's order and in a
//!     working directory of that document's, must exit 0 within 20 s. `SERVER` (and `HOST`)
//!     is a `wirebench serve` this test starts, with a files directory holding `big.iso`;
//!     a `wirebench serve` line is started on loopback and must stop with 0 on SIGTERM.
//!     Long runs are cut short without changing what they do (`adapt::shorten`): `-t` to
//!     300 ms, a `run` with no amount gets `-t 300ms`, a sweep runs one repeat, latency
//!     under load has idle phases of 500 ms.
//!   - **Lab** (`every_lab_command_runs`, `#[ignore = "needs root"]`, which `.ci/run` runs
//!     as root): a block with a `wirebench lab` command needs network namespaces; the whole
//!     block runs there, since its plots read what the lab wrote. A lab scenario runs one
//!     trial of each profile, all at once, at a hundredth of its time.
//!   - **iperf3** (`every_iperf3_command_runs`, `#[ignore = "needs iperf3"]`, run by
//!     `.ci/run`): a block that talks to iperf3 runs against an `iperf3 -s` and the test's
//!     server, with `-t 1` (iperf3 counts whole seconds). The run test checks its flags.
//!   - **Flags checked, not run**: a block that uses a cluster's tools (`sbatch`,
//!     `kubectl`, `podman`, ...): Slurm and Kubernetes are not here, nor their hosts and
//!     shared directories. Each `wirebench` in it runs with every peer unreachable
//!     (loopback ports nothing listens on; `/shared/` and `/results/` inside the working
//!     directory), so the binary parses and validates all its flags and values, as it does
//!     before any work, and then fails for want of a peer; an exit code of 2 (bad flags)
//!     fails the test. `sbatch` runs its script here as the array's first task, so the
//!     script's own flags are checked too; `kubectl` and `podman` only check that the files
//!     they are given exist. Appending `--help` would not do: clap stops at `--help`
//!     before the checks clap does not make, such as a `--vary` value's
//!     (`help_alone_would_not_check_a_vary`).
//!   - **Skipped**: the `cargo` lines. A release build, an install and the whole test
//!     suite take minutes, and the last is this very test; what makes the first work is
//!     checked by `cargo_run_at_the_root_finds_the_one_binary`.

mod adapt;
#[path = "../common/mod.rs"]
mod common;
mod markdown;
mod shell;
mod unit;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use adapt::{Class, Peers};
use markdown::Cmd;

/// Which commands a test takes, and what it does with them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    /// Runs the local blocks, checks the flags of the cluster's and iperf3's.
    Main,
    /// Runs the lab's blocks.
    Lab,
    /// Runs the iperf3 blocks.
    Iperf3,
}

/// What is done with one block's commands.
#[derive(Clone, Copy)]
enum Act {
    Run,
    Check,
}

fn act(which: Which, class: Class) -> Option<Act> {
    match (which, class) {
        (Which::Main, Class::Local) | (Which::Lab, Class::Lab) => Some(Act::Run),
        (Which::Iperf3, Class::Iperf3) => Some(Act::Run),
        (Which::Main, Class::Cluster | Class::Iperf3) => Some(Act::Check),
        _ => None,
    }
}

/// Every `sh` block of the documents: its commands and class.
fn sh_blocks() -> Vec<(Vec<Cmd>, Class)> {
    let mut out = Vec::new();
    for file in markdown::doc_files() {
        let text = markdown::read(&file);
        // An unclosed block is every_fenced_block_names_its_language's to report.
        for block in markdown::blocks(&file, &text).unwrap_or_default() {
            if block.tag == "sh" {
                let cmds = markdown::commands(&block);
                let class = adapt::class(&cmds);
                out.push((cmds, class));
            }
        }
    }
    out
}

/// What a test did with the documents' commands.
#[derive(Default)]
struct Outcome {
    ran: usize,
    checked: usize,
    failed: Vec<String>,
}

/// Runs (or checks) the commands `which` takes, in working directories under `base`.
fn run_docs(which: Which, base: &Path, peers: &Peers) -> Outcome {
    let repo = markdown::repo().canonicalize().expect("the repository");
    let nowhere = Peers::unreachable(shell::free_port(), &repo.display().to_string());
    let mut outcome = Outcome::default();
    for (cmds, class) in sh_blocks() {
        let Some(act) = act(which, class) else {
            continue;
        };
        for cmd in cmds {
            let at = format!("{}:{}", cmd.file, cmd.line);
            if adapt::is_cargo(&cmd.text) {
                eprintln!(
                    "skipped (a build, an install or the tests): {at}: {}",
                    cmd.text
                );
                continue;
            }
            let dir = shell::work_dir(base, &cmd.file);
            let start = Instant::now();
            let (line, result) = match act {
                _ if adapt::is_serve(&cmd.text) => {
                    (cmd.text.clone(), shell::check_serve(&cmd.text, &dir))
                }
                Act::Run => {
                    let line = adapt::point(&adapt::shorten(&cmd.text), peers);
                    let result = stays_here(&line, which == Which::Lab)
                        .and_then(|()| shell::run_line(&line, &dir, &[], &[]))
                        .and_then(|ended| match ended.code {
                            Some(0) => Ok(()),
                            code => Err(format!("exit {code:?}: {}", ended.stderr.trim())),
                        });
                    (line, result)
                }
                Act::Check => {
                    let line = adapt::point(&cmd.text, &nowhere);
                    let result =
                        stays_here(&line, false).and_then(|()| shell::check_flags(&line, &dir));
                    (line, result)
                }
            };
            let secs = start.elapsed().as_secs_f64();
            match (act, result) {
                (Act::Run, Ok(())) => outcome.ran += 1,
                (Act::Check, Ok(())) => outcome.checked += 1,
                (_, Err(e)) => outcome.failed.push(format!("{at}: {line}: {e}")),
            }
            let verb = if matches!(act, Act::Run) {
                "ran"
            } else {
                "checked"
            };
            eprintln!("{verb} in {secs:.1} s: {at}: {line}");
        }
    }
    outcome
}

/// Refuses a command that would send traffic off this machine.
fn stays_here(line: &str, lab: bool) -> Result<(), String> {
    match adapt::foreign_address(line, lab) {
        Some(a) => Err(format!(
            "{a} is not this machine: point it at a test's peer"
        )),
        None => Ok(()),
    }
}

/// A fresh directory for one test's working directories, removed when dropped (also when
/// the test fails).
struct BaseDir(PathBuf);

impl BaseDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("wirebench-docs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Self(dir)
    }
}

impl Drop for BaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `wirebench serve` for the documents' `SERVER`, its files directory holding `big.iso`.
fn doc_server(base: &Path) -> common::Server {
    let files = base.join("server-files");
    std::fs::create_dir_all(&files).expect("server files");
    std::fs::write(files.join("big.iso"), vec![0x5au8; 1_000_000]).expect("big.iso");
    let files = files.display().to_string();
    common::Server::start(&["--files-dir", &files])
}

fn assert_outcome(outcome: &Outcome, least_ran: usize, least_checked: usize) {
    assert!(
        outcome.failed.is_empty(),
        "documented commands that failed:\n{}",
        outcome.failed.join("\n")
    );
    assert!(
        outcome.ran >= least_ran && outcome.checked >= least_checked,
        "only {} commands ran and {} were checked: are the documents read?",
        outcome.ran,
        outcome.checked
    );
}

/// The tests that run commands take turns: on a small machine, measurements side by side
/// slow each other past the limit.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn every_doc_command_runs() {
    let _turn = take_turn();
    let base = BaseDir::new("main");
    let server = doc_server(&base.0);
    let peers = Peers {
        server: format!("127.0.0.1:{}", server.port),
        iperf3: format!("127.0.0.1:{}", shell::free_port()),
        server_port: server.port,
        repo: None,
    };
    let outcome = run_docs(Which::Main, &base.0, &peers);
    drop(server);
    assert_outcome(&outcome, 40, 5);
}

/// The lab's blocks, which need root here.
#[test]
#[ignore = "needs root"]
fn every_lab_command_runs() {
    common::require_root();
    let _turn = take_turn();
    let base = BaseDir::new("lab");
    let nowhere = format!("127.0.0.1:{}", shell::free_port());
    let peers = Peers {
        server: nowhere.clone(),
        iperf3: nowhere,
        server_port: 0,
        repo: None,
    };
    let outcome = run_docs(Which::Lab, &base.0, &peers);
    assert_outcome(&outcome, 20, 0);
}

/// An `iperf3 -s` on a free loopback port, killed when dropped.
struct Iperf3Server {
    child: Child,
    port: u16,
}

impl Iperf3Server {
    fn start(dir: &Path) -> Self {
        let port = shell::free_port();
        let log = dir.join("iperf3-server.log");
        let out = std::fs::File::create(&log).expect("iperf3's log");
        // --forceflush: its lines reach the log as printed, "listening" first.
        let child = Command::new("iperf3")
            .args([
                "-s",
                "--forceflush",
                "-B",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -s");
        let server = Self { child, port };
        let until = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listening")) {
            assert!(Instant::now() < until, "iperf3 -s did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The blocks that talk to iperf3, against an `iperf3 -s` and the test's server.
#[test]
#[ignore = "needs iperf3"]
fn every_iperf3_command_runs() {
    common::require("iperf3");
    let _turn = take_turn();
    let base = BaseDir::new("iperf3");
    let server = doc_server(&base.0);
    let iperf3 = Iperf3Server::start(&base.0);
    let peers = Peers {
        server: format!("127.0.0.1:{}", server.port),
        iperf3: format!("127.0.0.1:{}", iperf3.port),
        server_port: server.port,
        repo: None,
    };
    let outcome = run_docs(Which::Iperf3, &base.0, &peers);
    drop(iperf3);
    drop(server);
    assert_outcome(&outcome, 4, 0);
}

#[test]
fn every_fenced_block_names_its_language() {
    let mut bad = Vec::new();
    for file in markdown::doc_files() {
        match markdown::blocks(&file, &markdown::read(&file)) {
            Ok(blocks) => bad.extend(
                blocks
                    .iter()
                    .filter(|b| b.tag.is_empty())
                    .map(|b| format!("{}:{}", b.file, b.line)),
            ),
            Err(e) => bad.push(e),
        }
    }
    assert!(
        bad.is_empty(),
        "fenced blocks without a language (```sh for commands, ```text for output, \
         ```toml, ```yaml, ```json for files):\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let root = markdown::repo();
    let mut bad = Vec::new();
    let mut seen = 0;
    for file in markdown::doc_files() {
        let text = markdown::read(&file);
        let here = Path::new(&file).parent().unwrap_or(Path::new(""));
        for (line, target) in markdown::links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            seen += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                root.join(&file)
            } else {
                root.join(here).join(path)
            };
            if let Err(why) = lands(&dest, anchor) {
                bad.push(format!("{file}:{line}: ({target}) {why}"));
            }
        }
    }
    assert!(
        seen > 50,
        "only {seen} links found: are the documents read?"
    );
    assert!(
        bad.is_empty(),
        "links that lead nowhere:\n{}",
        bad.join("\n")
    );
}

/// Ok when `dest` exists and, for an anchor, is a Markdown file with that heading.
fn lands(dest: &Path, anchor: &str) -> Result<(), String> {
    if !dest.exists() {
        return Err("no such file".into());
    }
    if anchor.is_empty() {
        return Ok(());
    }
    let text = std::fs::read_to_string(dest).map_err(|e| e.to_string())?;
    if markdown::anchors(&text).contains(anchor) {
        Ok(())
    } else {
        Err(format!("no heading whose anchor is #{anchor}"))
    }
}

/// The README's first command, `cargo run --release -- run`, is skipped above (a release
/// build): what makes it work is that a plain `cargo run` at the root finds exactly one
/// binary, wirebench's. Checked from the workspace's metadata, without building.
#[test]
fn cargo_run_at_the_root_finds_the_one_binary() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(markdown::repo())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let default: Vec<&serde_json::Value> = m["workspace_default_members"]
        .as_array()
        .expect("workspace_default_members")
        .iter()
        .collect();
    let bins: Vec<String> = m["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| default.contains(&&p["id"]))
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        bins,
        ["wirebench"],
        "`cargo run` at the root would have to choose"
    );
}
