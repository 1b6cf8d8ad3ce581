//! Testbeds that outlive the command that made them (`lab up|exec|down|list`).
//!
//! [`up`] starts a holder process (`wirebench lab __hold NAME -`, which calls [`hold`]; the
//! topology, traces named by their files, on its stdin) in a process group of its own. It builds the network, writes a state file (its
//! pid, and for each host the descriptor number of the host's namespace in the holder),
//! says "ready" and waits for SIGTERM. [`exec`] enters a host's namespace through
//! `/proc/PID/fd/N` (and the holder's user namespace, when it has one) and becomes the
//! command. [`down`] sends the holder SIGTERM: it stops the emulator, removes the state file
//! and exits; then `down` ends whatever still runs in the hosts (SIGTERM, SIGKILL after
//! 2 s), and with the last of them go the namespaces. A holder killed outright leaves only a
//! stale state file, which `up`, `list` and `down` recognise and remove.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::topo::{Lab, Topology};

/// The hidden subcommand the holder runs as: `wirebench lab __hold NAME TOPOLOGY`.
pub const HOLD_COMMAND: &str = "__hold";

/// The holder's TOPOLOGY argument that says the topology comes on its stdin.
const TOPOLOGY_ON_STDIN: &str = "-";

/// The most topology JSON a holder reads (256 links with every option are under 1 MiB).
const MAX_TOPOLOGY_BYTES: u64 = 16 << 20;

/// How long `down` waits for the holder to end.
const HOLDER_DEADLINE: Duration = Duration::from_secs(10);

/// What went wrong with a testbed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// A name that cannot be a file name.
    #[error("testbed name {0:?}: use 1 to 32 letters, digits, - and _")]
    Name(String),
    /// `up` of a name that is up.
    #[error("testbed {0} is already up")]
    AlreadyUp(String),
    /// `exec` or `down` of a name that is not up.
    #[error("testbed {0} is not up")]
    NotUp(String),
    /// `exec` in a host the testbed does not have.
    #[error("testbed {name} has no host {host:?} (hosts: {hosts})")]
    NoHost {
        /// The testbed.
        name: String,
        /// The host asked for.
        host: String,
        /// The hosts it has, comma-separated.
        hosts: String,
    },
    /// `exec` without a command.
    #[error("lab exec needs a COMMAND")]
    NoCommand,
    /// The holder did not come up; what it said.
    #[error("the testbed did not come up ({status}): {why}")]
    DidNotComeUp {
        /// How the holder ended.
        status: ExitStatus,
        /// Its error message.
        why: String,
    },
    /// The holder did not end after SIGTERM.
    #[error("the holder (pid {0}) did not end within 10 s")]
    Stuck(u32),
    /// An I/O step, named.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl crate::Usage for TestbedError {
    fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Name(_)
                | Self::AlreadyUp(_)
                | Self::NotUp(_)
                | Self::NoHost { .. }
                | Self::NoCommand
        )
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TestbedError {
    let what = what.into();
    move |source| TestbedError::Io { what, source }
}

fn json_err(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> TestbedError {
    let what = what.into();
    move |e| TestbedError::Io {
        what,
        source: e.into(),
    }
}

/// What `up` leaves for `exec` and `down`.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    pid: u32,
    userns: bool,
    hosts: Vec<Host>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Host {
    name: String,
    address: Option<String>,
    fd: i32,
}

/// A testbed that is up, as `up` and `list` tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestbedInfo {
    /// Its name.
    pub name: String,
    /// The holder's process id.
    pub pid: u32,
    /// Its hosts and their main addresses, in order.
    pub hosts: Vec<(String, Option<String>)>,
}

/// Where this process keeps testbeds' state: chosen once (the choice probes the directory),
/// and said once when it is not `/run/wirebench-lab`.
fn state_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(choose_state_dir).clone()
}

fn choose_state_dir() -> PathBuf {
    if let Ok(d) = std::env::var("WIREBENCH_LAB_DIR") {
        return PathBuf::from(d);
    }
    let run = PathBuf::from("/run/wirebench-lab");
    if writable(&run) {
        return run;
    }
    // Rootless, or /run/wirebench-lab is root's (made by an earlier root run): say where the
    // testbeds are kept instead. The fallback is this user's own.
    let dir = match std::env::var("XDG_RUNTIME_DIR") {
        Ok(d) => PathBuf::from(d).join("wirebench-lab"),
        Err(_) => {
            use std::os::unix::fs::MetadataExt;
            let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
            std::env::temp_dir().join(format!("wirebench-lab-{uid}"))
        }
    };
    eprintln!(
        "note: /run/wirebench-lab is not writable: keeping testbeds in {} (set WIREBENCH_LAB_DIR to choose)",
        dir.display()
    );
    dir
}

/// Whether this process can make files in `dir` (making it if need be): a directory that
/// is there but root's is not.
fn writable(dir: &Path) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .is_ok();
    if made {
        let _ = std::fs::remove_file(&probe);
    }
    made
}

/// The hint every failure to keep a testbed's state carries.
const STATE_HINT: &str = "set WIREBENCH_LAB_DIR to a directory you can write";

fn check_name(name: &str) -> Result<(), TestbedError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(TestbedError::Name(name.to_owned()))
    }
}

fn state_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.json"))
}

/// Whether `pid` is a holder of testbed `name` (and not a recycled pid).
fn holder_alive(pid: u32, name: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
        args.contains(&HOLD_COMMAND.as_bytes()) && args.contains(&name.as_bytes())
    })
}

fn read_state(name: &str) -> Result<Option<State>, TestbedError> {
    let path = state_path(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
    };
    let st: State =
        serde_json::from_str(&text).map_err(json_err(format!("reading {}", path.display())))?;
    if holder_alive(st.pid, name) {
        Ok(Some(st))
    } else {
        // The holder died without cleaning up (killed): its namespaces died with it.
        let _ = std::fs::remove_file(&path);
        Ok(None)
    }
}

/// Builds `topo` as testbed `name`, held by a process running `exe` (this program), and
/// returns once it is up.
///
/// # Errors
///
/// A bad or taken name, or a holder that did not come up (with its reason).
pub fn up(name: &str, topo: &Topology, exe: &Path) -> Result<TestbedInfo, TestbedError> {
    check_name(name)?;
    if read_state(name)?.is_some() {
        return Err(TestbedError::AlreadyUp(name.to_owned()));
    }
    // A report a holder killed outright left behind is not this testbed's.
    let _ = std::fs::remove_file(report_path(name));
    // On the holder's stdin, not its command line: an argument is at most 128 KiB, which a
    // topology of many links with all their options passes.
    let topology = serde_json::to_vec(topo).map_err(json_err("topology"))?;
    let mut child = Command::new(exe)
        // Where this user keeps testbeds, found here: the holder runs in a user namespace
        // (when not root), where it is uid 0 and cannot tell.
        .env("WIREBENCH_LAB_DIR", state_dir())
        .args(["lab", HOLD_COMMAND, name, TOPOLOGY_ON_STDIN])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(io_err("starting the testbed holder"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A holder that died at once shows in its readiness line below.
        let _ = stdin.write_all(&topology);
    }
    let mut line = String::new();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io_err("holder stdout")(io::ErrorKind::BrokenPipe.into()))?;
    // The readiness line: the holder says "ready" once the network is built.
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(io_err("waiting for the testbed"))?;
    if line.trim() != "ready" {
        let status = child.wait().map_err(io_err("waiting for the holder"))?;
        let why = line.trim().strip_prefix("error: ").unwrap_or("").to_owned();
        return Err(TestbedError::DidNotComeUp { status, why });
    }
    Ok(TestbedInfo {
        name: name.to_owned(),
        pid: child.id(),
        hosts: topo
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), topo.node_address(i).map(|a| a.to_string())))
            .collect(),
    })
}

/// The holder: builds the testbed from `topology` (JSON), writes its state, says "ready"
/// on stdout and holds it until SIGTERM, SIGINT or SIGHUP. A failure to come up is also
/// said on stdout ("error: ..."), for `up`: the holder's stderr goes nowhere, so that it
/// never holds the caller's pipes open.
///
/// # Errors
///
/// Any step of building or holding it.
pub fn hold(name: &str, topology: &str) -> Result<(), TestbedError> {
    let r = hold_inner(name, topology);
    if let Err(e) = &r {
        println!("error: {e}");
    }
    r
}

fn hold_inner(name: &str, topology: &str) -> Result<(), TestbedError> {
    check_name(name)?;
    let topo: Topology = if topology == TOPOLOGY_ON_STDIN {
        let mut text = Vec::new();
        io::Read::read_to_end(
            &mut io::Read::take(io::stdin().lock(), MAX_TOPOLOGY_BYTES),
            &mut text,
        )
        .map_err(io_err("reading the topology"))?;
        serde_json::from_slice(&text)
    } else {
        serde_json::from_str(topology)
    }
    .map_err(json_err("reading the topology"))?;
    crate::ensure_privilege().map_err(io_err("entering a user namespace"))?;
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(io_err("signal handler"))?;
    let lab = Lab::build(&topo).map_err(io_err("building the testbed"))?;
    let state = State {
        pid: std::process::id(),
        userns: crate::netns::in_own_user_namespace(),
        hosts: topo
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Host {
                name: n.name.clone(),
                address: topo.node_address(i).map(|a| a.to_string()),
                fd: lab.netns(i).as_raw_fd(),
            })
            .collect(),
    };
    let dir = state_dir();
    std::fs::create_dir_all(&dir)
        .map_err(io_err(format!("creating {} ({STATE_HINT})", dir.display())))?;
    let path = state_path(name);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&state).map_err(json_err("state"))?)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(io_err(format!("writing {} ({STATE_HINT})", path.display())))?;
    let mut out = io::stdout().lock();
    writeln!(out, "ready")
        .and_then(|()| out.flush())
        .map_err(io_err("saying ready"))?;
    drop(out);
    // Nobody reads further: let the parent see end of file and go.
    drop(io::stdout());
    // Blocks until one of the signals arrives.
    let _ = signals.forever().next();
    let stopped = lab.stop();
    // What the links did, for `down` to print, written before the state file goes (`down`
    // reads it once this process has ended).
    if let Ok(reports) = &stopped {
        let report = report_path(name);
        let tmp = report.with_extension("report-tmp");
        let _ = serde_json::to_vec(reports)
            .map_err(io::Error::from)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &report));
    }
    let _ = std::fs::remove_file(&path);
    stopped.map_err(io_err("stopping the emulator"))?;
    Ok(())
}

/// Where the holder leaves its links' reports as it stops.
fn report_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.report"))
}

/// What `down` did: the programs it ended, and what each link of the testbed did over its
/// life (as `lab -- run` reports its link; empty if the holder could not say).
#[derive(Debug)]
pub struct Down {
    /// Programs still running in the hosts, ended.
    pub ended: usize,
    /// Each link's report, in the topology's order.
    pub links: Vec<crate::topo::LinkReport>,
}

/// Becomes `command` in host `host` of testbed `name`, with `LAB_<HOST>` set to each host's
/// address. Returns only on failure.
///
/// # Errors
///
/// The testbed or host is not there, or the command cannot be run.
pub fn exec(name: &str, host: &str, command: &[String]) -> TestbedError {
    match exec_inner(name, host, command) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn exec_inner(
    name: &str,
    host: &str,
    command: &[String],
) -> Result<std::convert::Infallible, TestbedError> {
    check_name(name)?;
    let st = read_state(name)?.ok_or_else(|| TestbedError::NotUp(name.to_owned()))?;
    let h = st
        .hosts
        .iter()
        .find(|h| h.name == host)
        .ok_or_else(|| TestbedError::NoHost {
            name: name.to_owned(),
            host: host.to_owned(),
            hosts: st
                .hosts
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let (prog, args) = command.split_first().ok_or(TestbedError::NoCommand)?;
    // `wirebench` is this very executable (read before entering the host), on PATH or not.
    let prog = match std::env::current_exe() {
        Ok(exe) if prog == "wirebench" => exe.into_os_string(),
        _ => prog.into(),
    };
    crate::netns::enter_held(st.pid, h.fd, st.userns)
        .map_err(io_err(format!("entering host {host} of testbed {name}")))?;
    let mut c = Command::new(&prog);
    c.args(args);
    for other in &st.hosts {
        if let Some(a) = &other.address {
            c.env(
                format!("LAB_{}", other.name.to_uppercase().replace('-', "_")),
                a,
            );
        }
    }
    let e = c.exec();
    Err(io_err(format!("running {}", prog.to_string_lossy()))(e))
}

/// Takes testbed `name` down and ends what still ran in its hosts; returns how many
/// programs that was, and what its links did.
///
/// # Errors
///
/// It is not up, or its holder does not end.
pub fn down(name: &str) -> Result<Down, TestbedError> {
    check_name(name)?;
    let st = read_state(name)?.ok_or_else(|| TestbedError::NotUp(name.to_owned()))?;
    // The hosts' namespaces, known while the holder still holds them, so that what a
    // `lab exec` left running there (a daemon, a server never stopped) goes down too.
    let ids: Vec<_> = st
        .hosts
        .iter()
        .filter_map(|h| {
            crate::netns::ns_id(Path::new(&format!("/proc/{}/fd/{}", st.pid, h.fd))).ok()
        })
        .collect();
    crate::netns::terminate(st.pid).map_err(io_err("signalling the holder"))?;
    let until = Instant::now() + HOLDER_DEADLINE;
    // Polled, bounded: the holder is not our child, so there is no wait for it.
    while holder_alive(st.pid, name) {
        if Instant::now() > until {
            return Err(TestbedError::Stuck(st.pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(state_path(name));
    let report = report_path(name);
    let links = std::fs::read(&report)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    Ok(Down {
        ended: crate::netns::end_processes_in(&ids, Duration::from_secs(2)),
        links,
    })
}

/// The testbeds that are up, by name.
///
/// # Errors
///
/// A state file that cannot be read.
pub fn list() -> Result<Vec<TestbedInfo>, TestbedError> {
    let Ok(entries) = std::fs::read_dir(state_dir()) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "json").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        if let Some(st) = read_state(&n)? {
            out.push(TestbedInfo {
                name: n,
                pid: st.pid,
                hosts: st.hosts.into_iter().map(|h| (h.name, h.address)).collect(),
            });
        }
    }
    Ok(out)
}
