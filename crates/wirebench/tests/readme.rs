//! Every command in the README's `sh` code blocks runs and exits 0 within 20 s:
//! what a new user copies works. `SERVER` is a `wirebench serve` this test starts (with a
//! files directory holding the README's `big.iso`), durations are cut short (`-t` to 300 ms,
//! lab scenarios to one trial at a twentieth of their time) and a `run` without an amount gets
//! `-t 300ms`. The lab's commands are a test of their own, `#[ignore = "needs root"]` (the lab
//! needs namespaces), which `.ci/run` runs. Skipped, and said so: the `cargo` lines (a release build, an install into ~/.cargo and the whole test suite
//! take minutes, and the last is this very test).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;

/// The longest a README command may take.
const LIMIT: Duration = Duration::from_secs(20);

/// The commands of the README's `sh` blocks, comments removed.
fn readme_commands() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh || t.is_empty() {
            continue;
        }
        // A comment starts at a '#' after blanks (none of the commands quotes one).
        let cmd = match t.find(" #") {
            Some(i) => t[..i].trim_end(),
            None => t,
        };
        out.push(cmd.to_string());
    }
    out
}

/// The command made short and pointed at the test's server.
fn adapt(cmd: &str, server: &str) -> String {
    let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        match w.as_str() {
            "-t" if i + 1 < words.len() => {
                // Keep a `;` that ends the value: it ends the command.
                let end = if words[i + 1].ends_with(';') { ";" } else { "" };
                out.extend(["-t".into(), format!("300ms{end}")]);
                i += 2;
                continue;
            }
            "--trials" if i + 1 < words.len() => {
                out.extend(["--trials", "1", "--time-scale", "0.05"].map(String::from));
                i += 2;
                continue;
            }
            _ => {}
        }
        let w = w.replace("SERVER:5201", server).replace("SERVER", server);
        out.push(w);
        i += 1;
    }
    let mut line = out.join(" ");
    // A `run` with neither an amount nor a file would take its default 10 s.
    for part in line.clone().split(';') {
        let p = part.trim();
        let is_run = p.starts_with("wirebench run") || p.contains("-- run");
        let bounded =
            [" -t ", " -n ", " --file "].iter().any(|f| p.contains(f)) || p.ends_with(" -t");
        if is_run && !bounded {
            let (head, tail) = match p.find(" >") {
                Some(k) => (&p[..k], &p[k..]),
                None => (p, ""),
            };
            line = line.replace(p, &format!("{head} -t 300ms{tail}"));
        }
    }
    line.replace("CMD", "true")
}

/// Runs `line` in `dir` with the binary under test first on PATH; its exit status, if it
/// ended within the limit.
fn run_line(line: &str, dir: &Path) -> Result<std::process::Output, String> {
    let bin = Path::new(env!("CARGO_BIN_EXE_wirebench"));
    let path = format!(
        "{}:{}",
        bin.parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .args(["-ec", line])
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("bash: {e}"))?;
    let out_pipe = child.stdout.take();
    let err_pipe = child.stderr.take();
    let read = |p: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let so = read(out_pipe.map(|p| Box::new(p) as _));
    let se = read(err_pipe.map(|p| Box::new(p) as _));
    let until = Instant::now() + LIMIT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Ok(std::process::Output {
                status,
                stdout: so.join().unwrap_or_default(),
                stderr: se.join().unwrap_or_default(),
            });
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `wirebench serve` runs until told to stop: it must come up, then end with 0 on SIGTERM.
fn check_serve(line: &str) -> Result<(), String> {
    let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
    args.extend(["--bind", "127.0.0.1", "--port", "0"]);
    let mut child = common::wirebench()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut banner = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    BufReader::new(stdout)
        .read_line(&mut banner)
        .map_err(|e| e.to_string())?;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().map_err(|e| e.to_string())?;
    if banner.contains("listening") && status.success() {
        Ok(())
    } else {
        Err(format!("banner {banner:?}, {status}"))
    }
}

#[test]
fn every_readme_command_runs() {
    run_readme_commands(false);
}

/// The README's `wirebench lab` commands, which need root here.
#[test]
#[ignore = "needs root"]
fn every_readme_lab_command_runs() {
    common::require_root();
    run_readme_commands(true);
}

/// Runs the README's commands: those of the lab when `lab`, the others when not.
fn run_readme_commands(lab: bool) {
    // A directory per test: the lab's and the others' run at once.
    let tag = if lab { "lab" } else { "main" };
    let dir = std::env::temp_dir().join(format!("wirebench-readme-{}-{tag}", std::process::id()));
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("temp dir");
    let big = vec![0x5au8; 1_000_000];
    std::fs::write(dir.join("big.iso"), &big).expect("big.iso");
    std::fs::write(files.join("big.iso"), &big).expect("files/big.iso");
    // The README's relative paths (scenario files) are the repository's.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let _ = std::os::unix::fs::symlink(repo.join("scenarios"), dir.join("scenarios"));
    let files_arg = files.display().to_string();
    let server = Server::start(&["--files-dir", &files_arg]);
    let target = format!("127.0.0.1:{}", server.port);
    let mut failed = Vec::new();
    let mut ran = 0;
    for cmd in readme_commands() {
        if cmd.starts_with("cargo ") {
            eprintln!("skipped (a build, an install or the test suite itself): {cmd}");
            continue;
        }
        if cmd.contains("wirebench lab") != lab {
            continue;
        }
        if cmd.split_whitespace().take(2).eq(["wirebench", "serve"]) {
            if let Err(e) = check_serve(&cmd) {
                failed.push(format!("{cmd}: {e}"));
            }
            ran += 1;
            continue;
        }
        let line = adapt(&cmd, &target);
        ran += 1;
        match run_line(&line, &dir) {
            Ok(out) if out.status.success() => eprintln!("ok: {line}"),
            Ok(out) => failed.push(format!(
                "{line}: {}; {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => failed.push(format!("{line}: {e}")),
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    // The README keeps its first measurement; the rest moved to docs/ (and the lab's
    // commands with it).
    let least = if lab { 0 } else { 8 };
    assert!(ran >= least, "only {ran} README commands found");
    assert!(
        failed.is_empty(),
        "README commands that failed:\n{}",
        failed.join("\n")
    );
}

/// The README's first command, `cargo run --release -- run`, is skipped above (a release
/// build): what makes it work is that a plain `cargo run` at the root finds exactly one
/// binary, wirebench's. Checked from the workspace's metadata, without building.
#[test]
fn cargo_run_at_the_root_finds_the_one_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
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

#[test]
fn adapting_keeps_the_command_and_shortens_it() {
    let s = "127.0.0.1:9";
    assert_eq!(
        adapt("wirebench run SERVER", s),
        "wirebench run 127.0.0.1:9 -t 300ms"
    );
    assert_eq!(
        adapt("wirebench run SERVER:5201 -t 5s", s),
        "wirebench run 127.0.0.1:9 -t 300ms"
    );
    assert_eq!(
        adapt("wirebench run SERVER -u -n 1M --json > result.json", s),
        "wirebench run 127.0.0.1:9 -u -n 1M --json > result.json"
    );
    assert_eq!(
        adapt("wirebench lab -- run -t 10; wirebench plot x", s),
        "wirebench lab -- run -t 300ms; wirebench plot x"
    );
    assert_eq!(
        adapt("wirebench run SERVER --mode rr -l 64 > r.txt", s),
        "wirebench run 127.0.0.1:9 --mode rr -l 64 -t 300ms > r.txt"
    );
}
