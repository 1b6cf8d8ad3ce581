//! `wirebench lab [LINK] -- run|exec`: one emulated link between a client host
//! (10.77.0.1) and a server host (10.77.0.2), a server in one, a test or any program in the
//! other, and what the link did.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};

use serde::Serialize;
use wirebench_proto::link_log::LinkLog;

use crate::link_options::{LinkProps, PropsError};
use crate::server::{LabServer, ServerError};
use crate::topo::{Lab, LinkReport, Topology};
use crate::user_stack::{self, Stack};

/// The client host's address on a one-link lab.
pub const CLIENT_ADDR: &str = "10.77.0.1";
/// The server host's address on a one-link lab.
pub const SERVER_ADDR: &str = "10.77.0.2";

/// What runs in the client host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCommand {
    /// `wirebench run SERVER_ADDR ARGS`.
    Run(Vec<String>),
    /// Any program and its arguments (not empty).
    Exec(Vec<String>),
}

/// A one-link lab run.
#[derive(Debug, Clone)]
pub struct PairRun {
    /// The link.
    pub link: LinkProps,
    /// What runs in the client host.
    pub client: ClientCommand,
    /// A program to run in the server host instead of `wirebench serve`, split at spaces
    /// (with `server_stack`, a `wirebench serve` command: the stack's options are added).
    pub serve: Option<String>,
    /// Log the link in intervals of this many ns (0: no log).
    pub link_log_ns: u64,
    /// The wirebench executable.
    pub exe: PathBuf,
    /// The client host's TCP/IP stack for its test traffic (`--stack`).
    pub client_stack: Stack,
    /// The server host's (`--server-stack`): `wirebench serve` takes each test's data
    /// connection there.
    pub server_stack: Stack,
    /// Offloads off on the link's interfaces, so that the emulator reads one wire packet per
    /// frame (`--no-offload`; by default it reads GSO frames whole where the kernel lets it).
    pub no_offload: bool,
}

/// Where the server host's user-space stack takes data connections: the port after
/// `wirebench serve`'s default control port, as `serve --stack` does by default.
pub const SERVER_STACK_PORT: u16 = 5301;

/// Why a one-link run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// A bad link property.
    #[error(transparent)]
    Props(#[from] PropsError),
    /// `exec` without a program, or `--serve` without one.
    #[error("{0} needs a command")]
    NoCommand(&'static str),
    /// The lab cannot make namespaces here; the message says what it needs.
    #[error("{0}")]
    Privilege(io::Error),
    /// The server did not start.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// An I/O step, named.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl crate::Usage for PairError {
    fn is_usage(&self) -> bool {
        matches!(self, Self::Props(_) | Self::NoCommand(_))
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> PairError {
    let what = what.into();
    move |source| PairError::Io { what, source }
}

/// What a one-link run did.
#[derive(Debug)]
pub struct PairOutcome {
    /// How the client's command ended.
    pub status: ExitStatus,
    /// The signal (SIGINT, SIGTERM or SIGHUP) that asked the lab to stop while the command
    /// ran, passed on to the command; `None` when none came.
    pub interrupted: Option<i32>,
    /// Its stdout, for `run ... --json` (the results document), else empty.
    pub stdout: String,
    /// What each direction of the link did.
    pub reports: Vec<LinkReport>,
    /// The link log (empty without `link_log_ns`).
    pub log: LinkLog,
}

/// Whether `wirebench run` options ask for JSON.
pub fn wants_json(args: &[String]) -> bool {
    args.iter().any(|a| a == "--json" || a == "-J")
}

/// Builds the link, starts the server and the client's command, waits for the command and
/// stops the link.
///
/// # Errors
///
/// A bad link, no privilege, or a server or command that cannot be started.
pub fn run_pair(p: &PairRun) -> Result<PairOutcome, PairError> {
    let (up, down) = p.link.configs()?;
    let serve_words: Option<Vec<&str>> = p.serve.as_deref().map(|s| s.split_whitespace().collect());
    if serve_words.as_ref().is_some_and(Vec::is_empty) {
        return Err(PairError::NoCommand("--serve"));
    }
    if matches!(&p.client, ClientCommand::Exec(c) if c.is_empty()) {
        return Err(PairError::NoCommand("lab -- exec"));
    }
    crate::ensure_privilege().map_err(PairError::Privilege)?;
    let topo = Topology {
        no_offload: p.no_offload,
        ..Topology::pair(up, down)
    };
    let lab = Lab::build_logged(&topo, p.link_log_ns).map_err(io_err("building the lab"))?;
    let server_args = match p.server_stack {
        Stack::Kernel => Vec::new(),
        Stack::Smoltcp => user_stack::prepare_server(
            lab.netns(1),
            std::net::Ipv4Addr::new(10, 77, 0, 2),
            0,
            SERVER_STACK_PORT,
        )
        .map_err(io_err("preparing the server's user-space stack"))?
        .serve_args(p.server_stack, SERVER_STACK_PORT),
    };
    let server = match &serve_words {
        // `--serve 'wirebench serve ...'` with --server-stack: the stack's options follow.
        Some(words) => {
            let mut words = words.clone();
            words.extend(server_args.iter().map(String::as_str));
            LabServer::program(&lab, 1, &words)?
        }
        None => LabServer::wirebench(&lab, &p.exe, 1, SERVER_ADDR, &server_args)?,
    };
    let site = match p.client_stack {
        Stack::Kernel => None,
        Stack::Smoltcp => Some(
            user_stack::prepare(lab.netns(0), std::net::Ipv4Addr::new(10, 77, 0, 1), 0)
                .map_err(io_err("preparing the client's user-space stack"))?,
        ),
    };
    let (mut client, json, what) = match &p.client {
        ClientCommand::Run(args) => {
            let mut c = lab.command(0, &p.exe);
            // A group of its own, so that a terminal's Ctrl-C reaches it once, from the lab
            // (an `exec` command stays in the terminal's group: it may read from it).
            c.process_group(0);
            c.arg("run").arg(SERVER_ADDR);
            if let Some(site) = &site {
                c.args(site.run_args(p.client_stack));
            }
            c.args(args);
            // The lab's own server: a QUIC test pins the key it printed.
            if let Some(pin) = quic_pin(args, server.quic_key.as_deref()) {
                c.args(["--quic-pin", pin]);
            }
            (c, wants_json(args), "wirebench run".to_owned())
        }
        ClientCommand::Exec(words) => {
            // `wirebench` is this very executable, installed on PATH or not.
            let prog = if words[0] == "wirebench" {
                p.exe.as_os_str()
            } else {
                words[0].as_ref()
            };
            let mut c = lab.command(0, prog);
            c.args(&words[1..]);
            (c, false, words[0].clone())
        }
    };
    client
        .env("LAB_SERVER", SERVER_ADDR)
        .env("LAB_CLIENT", CLIENT_ADDR);
    if let Some(site) = &site {
        // For `exec`: what `wirebench run` needs to use the stack.
        client.env("LAB_STACK_ARGS", site.run_args(p.client_stack).join(" "));
    }
    if json {
        client.stdout(Stdio::piped());
    }
    // Caught from before the command starts, so that no signal ends the lab meanwhile.
    let relay = Relay::start(matches!(p.client, ClientCommand::Run(_)))
        .map_err(io_err("handling signals"))?;
    let mut child = client
        .spawn()
        .map_err(io_err(format!("starting {what} in the client host")))?;
    relay.attach(child.id());
    let mut stdout = String::new();
    if let Some(mut so) = child.stdout.take() {
        so.read_to_string(&mut stdout)
            .map_err(io_err("reading the test's output"))?;
    }
    let status = child.wait().map_err(io_err("waiting for the command"))?;
    let interrupted = relay.finish();
    drop(server);
    let (reports, log) = lab.stop_logged().map_err(io_err("stopping the emulator"))?;
    Ok(PairOutcome {
        status,
        interrupted,
        stdout,
        reports,
        log,
    })
}

/// The key a `run` with `--quic` pins, when it checks none itself: the lab's own server's.
fn quic_pin<'a>(args: &[String], key: Option<&'a str>) -> Option<&'a str> {
    let has = |flag: &str| {
        args.iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    (has("--quic") && !has("--quic-pin") && !has("--quic-insecure"))
        .then_some(key)
        .flatten()
}

/// While the client's command runs, SIGINT, SIGTERM and SIGHUP do not end the lab: it passes
/// each on to the command, which stops its test cleanly and prints what it measured, and the
/// lab then stops the link and reports as usual. A signal half a second or more after the
/// first ends the command at once (`run` does so itself; an `exec` command is sent SIGKILL),
/// as a second Ctrl-C ends `run`. An `exec`
/// command in the terminal's process group gets a terminal's SIGINT itself, so only the
/// other two are passed on to it. Signals go through a pidfd: never to another process
/// that took the command's id after it was reaped.
struct Relay {
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<()>,
    /// The command, once started.
    target: std::sync::Arc<std::sync::Mutex<Option<std::os::fd::OwnedFd>>>,
    /// The first signal that came (0: none yet).
    first: std::sync::Arc<std::sync::atomic::AtomicI32>,
    pass_int: bool,
}

impl Relay {
    fn start(pass_int: bool) -> io::Result<Self> {
        use std::sync::atomic::Ordering;
        let mut signals = signal_hook::iterator::Signals::new(RELAYED)?;
        let handle = signals.handle();
        let target = std::sync::Arc::new(std::sync::Mutex::new(None::<std::os::fd::OwnedFd>));
        let first = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
        let (to, seen) = (target.clone(), first.clone());
        let thread = std::thread::Builder::new()
            .name("lab-signals".into())
            .spawn(move || {
                let mut since: Option<std::time::Instant> = None;
                for sig in signals.forever() {
                    let _ = seen.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                    let again = since.is_some_and(|t| t.elapsed() >= SAME_REQUEST);
                    since.get_or_insert_with(std::time::Instant::now);
                    // `run` ends at once on a second signal itself; an exec command that
                    // ignores them is killed.
                    let send = if again && !pass_int {
                        Some(libc::SIGKILL)
                    } else {
                        passed_on(sig, pass_int).then_some(sig)
                    };
                    let target = to.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let (Some(fd), Some(send)) = (target.as_ref(), send) {
                        let _ = crate::sys::pidfd_signal(fd.as_fd(), send);
                    }
                }
            })?;
        Ok(Self {
            handle,
            thread,
            target,
            first,
            pass_int,
        })
    }

    /// The command started as process `pid`: signals go to it from now on, and one that
    /// came while it was starting is passed on now.
    fn attach(&self, pid: u32) {
        use std::sync::atomic::Ordering;
        let Ok(fd) = crate::sys::pidfd_open(pid) else {
            return;
        };
        let mut target = self
            .target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let early = self.first.load(Ordering::SeqCst);
        if early != 0 && passed_on(early, self.pass_int) {
            let _ = crate::sys::pidfd_signal(fd.as_fd(), early);
        }
        *target = Some(fd);
    }

    /// Stops relaying, and gives the three signals their default action again (the lab ends
    /// on them while it writes its report); the first signal that came, if one did.
    fn finish(self) -> Option<i32> {
        self.handle.close();
        let _ = self.thread.join();
        for sig in RELAYED {
            let always = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
            let _ = signal_hook::flag::register_conditional_default(sig, always);
        }
        match self.first.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }
}

/// The signals that stop a lab's command.
const RELAYED: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// Whether `sig` is passed on to the command: all three to a `run`; an `exec` command in
/// the terminal's group gets a terminal's SIGINT itself.
fn passed_on(sig: i32, pass_int: bool) -> bool {
    sig != signal_hook::consts::SIGINT || pass_int
}

/// A signal this soon after the first is the first delivered again, not a second.
const SAME_REQUEST: std::time::Duration = std::time::Duration::from_millis(500);

/// The `lab` object added to a results document: the link as configured, the two
/// addresses and what each direction did.
#[derive(Debug, Serialize)]
struct LabObject<'a> {
    link: &'a LinkProps,
    client: &'static str,
    server: &'static str,
    links: &'a [LinkReport],
}

/// A results document (`run --json`'s text) with the `lab` object added, pretty-printed.
///
/// # Errors
///
/// When `results` is not JSON.
pub fn with_lab(
    results: &str,
    link: &LinkProps,
    reports: &[LinkReport],
) -> serde_json::Result<String> {
    let mut v: serde_json::Value = serde_json::from_str(results)?;
    // The discipline as it ran, every parameter spelled out (docs/lab.md): `codel` is
    // recorded `codel target 5ms interval 100ms ...`, which `--aqm` reads back.
    let mut link = link.clone();
    if let Ok(Some(cfg)) = link.aqm() {
        link.aqm = Some(cfg.to_string());
    }
    if let Some(obj) = v.as_object_mut() {
        let lab = LabObject {
            link: &link,
            client: CLIENT_ADDR,
            server: SERVER_ADDR,
            links: reports,
        };
        obj.insert("lab".into(), serde_json::to_value(lab)?);
    }
    serde_json::to_string_pretty(&v)
}

/// A few lines on what the emulated link did.
pub fn report_lines(reports: &[LinkReport]) -> String {
    let mut s = String::new();
    for (i, r) in reports.iter().enumerate() {
        for (dir, d) in [
            ("up (client → server)", &r.up),
            ("down (server → client)", &r.down),
        ] {
            let mean_q = if d.link.delivered > 0 {
                d.link.queue_delay_ns as f64 / d.link.delivered as f64 / 1e6
            } else {
                0.0
            };
            // Said only when it happened: frames a stop cut off in the delay line, and what
            // an AQM or netem's options did.
            let unsent = match d.unsent_at_stop {
                0 => String::new(),
                n => format!(", {n} frames unsent at stop"),
            };
            let l = &d.link;
            // Idle time under load: the senders' gaps the queue did not cover.
            let idle = match l.idle_under_load_ns {
                0 => String::new(),
                ns => format!(", idle {:.3} ms under load", ns as f64 / 1e6),
            };
            let extra: String = [
                (l.dropped_aqm, "AQM drops"),
                (l.marked, "ECN marks"),
                (l.reordered, "reordered"),
                (l.duplicated, "duplicated"),
                (l.corrupted, "corrupted"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!(", {n} {what}"))
            .collect();
            s += &format!(
                "lab link {i} {dir}: {} packets in, {} lost, {} queue drops, {} delivered, \
                 queue delay mean {mean_q:.3} ms max {:.3} ms, {} emulator drops{extra}{idle}{unsent}\n",
                d.link.packets_in,
                d.link.dropped_loss,
                d.link.dropped_queue,
                d.link.delivered,
                d.link.max_queue_delay_ns as f64 / 1e6,
                d.emulator_drops + d.send_errors + d.oversize,
            );
        }
    }
    s
}

/// A link log's interval, ns, from its flag's text: 1 ms or more.
///
/// # Errors
///
/// A malformed duration, or one under 1 ms.
pub fn log_interval_ns(text: &str) -> Result<u64, LogIntervalError> {
    let d = wirebench_proto::units::parse_duration(text)?;
    if d < std::time::Duration::from_millis(1) {
        return Err(LogIntervalError::TooShort);
    }
    Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A link log interval that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LogIntervalError {
    /// Not a duration.
    #[error("--link-log-interval: {0}")]
    Malformed(#[from] wirebench_proto::units::UnitError),
    /// Too short to be useful (and too many intervals to keep).
    #[error("--link-log-interval must be at least 1ms")]
    TooShort,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aqm_is_recorded_spelled_out_as_it_ran() {
        let link = LinkProps {
            aqm: Some("codel".into()),
            ..LinkProps::default()
        };
        let text = with_lab("{}", &link, &[]).expect("JSON");
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let aqm = v["lab"]["link"]["aqm"].as_str().expect("aqm").to_string();
        assert!(aqm.starts_with("codel target 5ms interval 100ms"), "{aqm}");
        // What is recorded reads back as the same discipline.
        let again = LinkProps {
            aqm: Some(aqm.clone()),
            ..LinkProps::default()
        };
        let cfg = again.aqm().expect("reads back").expect("some");
        assert_eq!(cfg.to_string(), aqm);
    }
}
