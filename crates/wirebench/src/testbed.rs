//! `lab up|exec|down|list`: a testbed that outlives the command that made it.
//!
//! `up` starts a holder process (`lab __hold`) in a process group of its own. It builds the
//! network, writes a state file (its pid, and for each host the descriptor number of the
//! host's namespace in the holder), says "ready" and waits for SIGTERM. `exec` enters a
//! host's namespace through `/proc/PID/fd/N` (and the holder's user namespace, when it has
//! one) and becomes the command. `down` sends the holder SIGTERM: it stops the emulator,
//! removes the state file and exits; then `down` ends whatever still runs in the hosts
//! (SIGTERM, SIGKILL after 2 s), and with the last of them go the namespaces. A holder killed outright leaves only a stale state file, which `up`, `list` and
//! `down` recognise and remove.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use wirebench_lab::topo::{Lab, Topology};

use crate::cli::LinkArgs;
use crate::Failure;

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

fn state_dir() -> PathBuf {
    if let Ok(d) = std::env::var("WIREBENCH_LAB_DIR") {
        return PathBuf::from(d);
    }
    if std::fs::create_dir_all("/run/wirebench-lab").is_ok() {
        return PathBuf::from("/run/wirebench-lab");
    }
    match std::env::var("XDG_RUNTIME_DIR") {
        Ok(d) => PathBuf::from(d).join("wirebench-lab"),
        Err(_) => std::env::temp_dir().join("wirebench-lab"),
    }
}

fn check_name(name: &str) -> Result<(), Failure> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "testbed name {name:?}: use 1 to 32 letters, digits, - and _"
        )))
    }
}

fn state_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.json"))
}

/// Whether `pid` is a holder of testbed `name` (and not a recycled pid).
fn holder_alive(pid: u32, name: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
        args.contains(&&b"__hold"[..]) && args.contains(&name.as_bytes())
    })
}

fn read_state(name: &str) -> Result<Option<State>, Failure> {
    let path = state_path(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(anyhow!(e)
                .context(format!("reading {}", path.display()))
                .into())
        }
    };
    let st: State =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if holder_alive(st.pid, name) {
        Ok(Some(st))
    } else {
        // The holder died without cleaning up (killed): its namespaces died with it.
        let _ = std::fs::remove_file(&path);
        Ok(None)
    }
}

pub fn up(name: &str, scenario: Option<&Path>, link: &LinkArgs) -> Result<(), Failure> {
    check_name(name)?;
    if read_state(name)?.is_some() {
        return Err(Failure::Usage(format!("testbed {name} is already up")));
    }
    let topo = match scenario {
        Some(file) => crate::scenario::load(file)?
            .topology()
            .map_err(Failure::Usage)?,
        None => {
            let (up, down) = link.props().configs().map_err(Failure::Usage)?;
            Topology::pair(up, down)
        }
    };
    let exe = std::env::current_exe().context("finding the wirebench executable")?;
    let mut child = Command::new(exe)
        .args(["lab", "__hold", name])
        .arg(serde_json::to_string(&topo).context("topology")?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the testbed holder")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("holder stdout")?)
        .read_line(&mut line)
        .context("waiting for the testbed")?;
    if line.trim() != "ready" {
        let status = child.wait().context("waiting for the holder")?;
        let why = line.trim().strip_prefix("error: ").unwrap_or("");
        return Err(Failure::Runtime(anyhow!(
            "the testbed did not come up ({status}): {why}"
        )));
    }
    println!("testbed {name} is up (holder pid {})", child.id());
    for (i, n) in topo.nodes.iter().enumerate() {
        let addr = topo
            .node_address(i)
            .map(|a| a.to_string())
            .unwrap_or_default();
        println!("  {:<10} {addr}", n.name);
    }
    println!(
        "run in it: wirebench lab exec {name} HOST -- COMMAND; end it: wirebench lab down {name}"
    );
    Ok(())
}

pub fn hold(name: &str, topology: &str) -> Result<(), Failure> {
    // Its stderr goes nowhere (it must not hold the caller's pipes open): a failure to come
    // up is told to `up` on stdout instead.
    let r = hold_inner(name, topology);
    if let Err(Failure::Runtime(e)) = &r {
        println!("error: {e:#}");
    } else if let Err(Failure::Usage(e)) = &r {
        println!("error: {e}");
    }
    r
}

fn hold_inner(name: &str, topology: &str) -> Result<(), Failure> {
    check_name(name)?;
    let topo: Topology = serde_json::from_str(topology).context("reading the topology")?;
    wirebench_lab::ensure_privilege().map_err(|e| anyhow!(e))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("signal handler")?;
    }
    let lab = Lab::build(&topo).context("building the testbed")?;
    let state = State {
        pid: std::process::id(),
        userns: wirebench_lab::netns::in_own_user_namespace(),
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
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = state_path(name);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&state).context("state")?)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .with_context(|| format!("writing {}", path.display()))?;
    println!("ready");
    // Nobody reads further: let the parent see end of file and go.
    drop(std::io::stdout());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(&path);
    lab.stop().context("stopping the emulator")?;
    Ok(())
}

pub fn exec(name: &str, host: &str, command: &[String]) -> Result<(), Failure> {
    check_name(name)?;
    let st =
        read_state(name)?.ok_or_else(|| Failure::Usage(format!("testbed {name} is not up")))?;
    let h = st.hosts.iter().find(|h| h.name == host).ok_or_else(|| {
        let names: Vec<&str> = st.hosts.iter().map(|h| h.name.as_str()).collect();
        Failure::Usage(format!(
            "testbed {name} has no host {host:?} (hosts: {})",
            names.join(", ")
        ))
    })?;
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| Failure::Usage("lab exec needs a COMMAND".into()))?;
    wirebench_lab::netns::enter_held(st.pid, h.fd, st.userns)
        .with_context(|| format!("entering host {host} of testbed {name}"))?;
    let mut c = Command::new(prog);
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
    Err(anyhow!(e).context(format!("running {prog}")).into())
}

pub fn down(name: &str) -> Result<(), Failure> {
    check_name(name)?;
    let Some(st) = read_state(name)? else {
        return Err(Failure::Usage(format!("testbed {name} is not up")));
    };
    // The hosts' namespaces, known while the holder still holds them, so that what a
    // `lab exec` left running there (a daemon, a server never stopped) goes down too.
    let ids: Vec<_> = st
        .hosts
        .iter()
        .filter_map(|h| {
            wirebench_lab::netns::ns_id(Path::new(&format!("/proc/{}/fd/{}", st.pid, h.fd))).ok()
        })
        .collect();
    wirebench_lab::netns::terminate(st.pid).context("signalling the holder")?;
    let until = Instant::now() + Duration::from_secs(10);
    while holder_alive(st.pid, name) {
        if Instant::now() > until {
            return Err(Failure::Runtime(anyhow!(
                "the holder (pid {}) did not end within 10 s",
                st.pid
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(state_path(name));
    let ended = wirebench_lab::netns::end_processes_in(&ids, Duration::from_secs(2));
    if ended > 0 {
        println!("testbed {name} is down (ended {ended} program(s) still running in it)");
    } else {
        println!("testbed {name} is down");
    }
    Ok(())
}

pub fn list() -> Result<(), Failure> {
    let Ok(entries) = std::fs::read_dir(state_dir()) else {
        return Ok(());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "json").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    for n in names {
        if let Some(st) = read_state(&n)? {
            let hosts: Vec<String> = st
                .hosts
                .iter()
                .map(|h| format!("{}={}", h.name, h.address.as_deref().unwrap_or("-")))
                .collect();
            println!("{n}\tpid {}\t{}", st.pid, hosts.join(" "));
        }
    }
    Ok(())
}
