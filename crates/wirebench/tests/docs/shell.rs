//! Running a documented command: in bash, in a working directory of its document's, with
//! the binary under test first on PATH and a time limit; a server started and stopped; and
//! the flag check, which runs a command with nothing to measure against.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The longest a documented command may take.
pub const LIMIT: Duration = Duration::from_secs(20);

/// The binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wirebench"))
}

/// A port nothing listens on (one the kernel just gave and took back).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

/// The working directory of one document's commands under `base`, made on first use: the
/// files its commands name (`big.iso`, `files/big.iso`) and the repository's `scenarios/`
/// and `deploy/` (the mesh files).
pub fn work_dir(base: &Path, file: &str) -> PathBuf {
    let dir = base.join(file.replace('/', "-"));
    if dir.exists() {
        return dir;
    }
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("a working directory");
    let big = vec![0x5au8; 1_000_000];
    std::fs::write(dir.join("big.iso"), &big).expect("big.iso");
    std::fs::write(files.join("big.iso"), &big).expect("files/big.iso");
    let scenarios = crate::markdown::repo().join("scenarios");
    std::os::unix::fs::symlink(scenarios, dir.join("scenarios")).expect("scenarios/");
    let deploy = crate::markdown::repo().join("deploy");
    std::os::unix::fs::symlink(deploy, dir.join("deploy")).expect("deploy/");
    dir
}

/// How a command ended: its exit code (None: a signal) and what it wrote on stderr.
pub struct Ended {
    pub code: Option<i32>,
    pub stderr: String,
}

/// Runs `line` with `bash -ec` in `dir`, `path` first on PATH and `env` set; its end, if
/// it came within the limit. Output goes to files, so that a program the line leaves in
/// the background (`serve &`) holds no pipe open.
pub fn run_line(
    line: &str,
    dir: &Path,
    path: &[PathBuf],
    env: &[(&str, String)],
) -> Result<Ended, String> {
    let mut dirs: Vec<PathBuf> = path.to_vec();
    dirs.push(binary().parent().expect("target dir").to_path_buf());
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let path = std::env::join_paths(dirs).map_err(|e| e.to_string())?;
    let out = File::create(dir.join(".stdout")).map_err(|e| e.to_string())?;
    let err = File::create(dir.join(".stderr")).map_err(|e| e.to_string())?;
    let mut child = Command::new("bash")
        .args(["-ec", line])
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("bash: {e}"))?;
    let until = Instant::now() + LIMIT;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(dir.join(".stderr")).unwrap_or_default();
    Ok(Ended {
        code: status.code(),
        stderr,
    })
}

/// `wirebench serve ...` as documented, on loopback and a free port (its `--bind`,
/// `--port` and a fixed `--iperf3-port` replaced): it must come up, then end with 0 on
/// SIGTERM.
pub fn check_serve(cmd: &str, dir: &Path) -> Result<(), String> {
    let words: Vec<&str> = cmd.split_whitespace().skip(2).collect();
    let mut args: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "&" => {}
            "-B" | "--bind" | "-p" | "--port" => i += 1,
            "--iperf3-port" => {
                args.extend(["--iperf3-port".to_string(), free_port().to_string()]);
                i += 1;
            }
            w => args.push(w.to_string()),
        }
        i += 1;
    }
    args.extend(["--bind", "127.0.0.1", "--port", "0"].map(String::from));
    let mut child = Command::new(binary())
        .arg("serve")
        .args(&args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut banner = String::new();
        let _ = BufReader::new(stdout).read_line(&mut banner);
        let _ = tx.send(banner);
    });
    let banner = rx.recv_timeout(LIMIT).unwrap_or_default();
    // SIGTERM, as a service manager stops it; to the server this test started, by its pid.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().map_err(|e| e.to_string())?;
    if banner.contains("listening") && status.success() {
        Ok(())
    } else {
        Err(format!(
            "serve {}: banner {banner:?}, {status}",
            args.join(" ")
        ))
    }
}

/// What the flag check puts before a command: stand-ins for a cluster's tools (this
/// machine has no cluster), which only check that the files they are given exist, and
/// `sbatch`, which runs its script here as the array's first task.
const STAND_INS: &str = r#"
need_files() {
    for a in "$@"; do
        case "$a" in
        *.yaml | *.sbatch | *Containerfile) [ -f "$a" ] || { echo "no such file: $a" >&2; return 1; } ;;
        esac
    done
}
kubectl() { need_files "$@"; }
podman() { need_files "$@"; }
docker() { need_files "$@"; }
srun() { :; }
ssh() { :; }
systemctl() { :; }
scontrol() { :; }
iperf3() { :; }
sbatch() {
    local lo=0 hi=0
    while [ $# -gt 0 ]; do
        case "$1" in
        --array=*) r=${1#--array=}; lo=${r%%-*}; hi=${r#*-} ;;
        --*) ;;
        *) break ;;
        esac
        shift
    done
    need_files "$1"
    SLURM_ARRAY_TASK_ID=$lo SLURM_ARRAY_TASK_MIN=$lo SLURM_ARRAY_TASK_STEP=1 \
        SLURM_ARRAY_TASK_COUNT=$((hi - lo + 1)) bash "$@"
}
"#;

/// `wirebench` as the flag check calls it: the binary under test, whose exit code 2 (bad
/// flags) is written down; any other end (it found no peer, no cluster directory) is what
/// the check expects.
const CHECKING_WIREBENCH: &str = r#"#!/bin/sh
"$WIREBENCH_BINARY" "$@" >/dev/null 2>"$WIREBENCH_CHECK.last"
if [ $? -eq 2 ]; then
    { echo "wirebench $*"; cat "$WIREBENCH_CHECK.last"; } >>"$WIREBENCH_CHECK"
fi
exit 0
"#;

/// Checks the flags of every `wirebench` invocation in `line` (already pointed at hosts
/// where nothing listens), running it in `dir` with the cluster's stand-ins: Ok unless an
/// invocation ends with exit code 2 (bad flags), the line fails, or it hangs.
pub fn check_flags(line: &str, dir: &Path) -> Result<(), String> {
    let bin = dir.join(".checking-bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let wrapper = bin.join("wirebench");
    std::fs::write(&wrapper, CHECKING_WIREBENCH).map_err(|e| e.to_string())?;
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&wrapper, mode).map_err(|e| e.to_string())?;
    let errors = dir.join(".flag-errors");
    let _ = std::fs::remove_file(&errors);
    let env = [
        ("WIREBENCH_BINARY", binary().display().to_string()),
        ("WIREBENCH_CHECK", errors.display().to_string()),
    ];
    let ended = run_line(&format!("{STAND_INS}\n{line}"), dir, &[bin], &env)?;
    let bad = std::fs::read_to_string(&errors).unwrap_or_default();
    if !bad.is_empty() {
        return Err(format!("bad flags: {}", bad.trim()));
    }
    match ended.code {
        Some(0) => Ok(()),
        code => Err(format!("exit {code:?}: {}", ended.stderr.trim())),
    }
}
