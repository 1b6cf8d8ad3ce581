//! How a documented command is made to run here: what kind of block it is in, which hosts
//! its placeholders become, and how a long experiment is cut short without changing what
//! it does.

use crate::markdown::Cmd;

/// What a block needs, and so how the tests treat its commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Runs on this machine against the test's server: run.
    Local,
    /// Has a `wirebench lab` command (root, namespaces): run by the root test, whole, since
    /// its other commands read what the lab wrote.
    Lab,
    /// Uses a cluster's tools or hosts (Slurm, Kubernetes, ...): flags checked only.
    Cluster,
    /// Needs an iperf3 peer: run by the iperf3 test, flags checked in the others.
    Iperf3,
}

/// Programs that only a cluster has: a block that calls one is a cluster's.
pub const CLUSTER_TOOLS: [&str; 8] = [
    "sbatch",
    "srun",
    "kubectl",
    "podman",
    "docker",
    "ssh",
    "systemctl",
    "scontrol",
];

/// The class of a block, from its commands.
pub fn class(cmds: &[Cmd]) -> Class {
    let words = || cmds.iter().flat_map(|c| c.text.split_whitespace());
    if cmds.iter().any(|c| c.text.contains("wirebench lab")) {
        Class::Lab
    } else if words().any(|w| CLUSTER_TOOLS.contains(&w)) {
        Class::Cluster
    } else if words().any(|w| w == "--iperf3" || w == "iperf3") {
        Class::Iperf3
    } else {
        Class::Local
    }
}

/// A documented command that is not for this test at all: a build, an install or the test
/// suite itself (minutes each; the last would be this very test).
pub fn is_cargo(cmd: &str) -> bool {
    cmd.starts_with("cargo ")
}

/// `wirebench serve ...` on its own: a server, started and stopped by the test.
pub fn is_serve(cmd: &str) -> bool {
    cmd.split_whitespace().take(2).eq(["wirebench", "serve"])
}

/// Where the documents' placeholders lead here.
pub struct Peers {
    /// `SERVER`, `HOST`, `server.example.org` and the like: a wirebench server.
    pub server: String,
    /// An iperf3 server (`wirebench run --iperf3 iperf.example.net`, `10.0.0.2`).
    pub iperf3: String,
    /// The port `iperf3 -c server` reaches a wirebench server on.
    pub server_port: u16,
    /// A cluster's shared directories (`/shared/`, `/results/`) become relative ones, and
    /// the repository's files (`deploy/...`) are named from this root.
    pub repo: Option<String>,
}

impl Peers {
    /// Every host unreachable: 127.0.0.1 (and 127.0.0.2, ... for a list of hosts) on a
    /// port nothing listens on; a cluster's directories under the working directory.
    pub fn unreachable(port: u16, repo: &str) -> Self {
        Self {
            server: format!("127.0.0.1:{port}"),
            iperf3: format!("127.0.0.1:{port}"),
            server_port: port,
            repo: Some(repo.to_string()),
        }
    }
}

/// Host names the documents use for a server, which this machine must never look up.
const HOST_NAMES: [&str; 5] = [
    "HOST",
    "SERVER",
    "server.example.org",
    "measure.example.net",
    "iperf.example.net",
];

/// The command with its hosts and paths pointed at `peers`.
pub fn point(cmd: &str, peers: &Peers) -> String {
    let (words, gaps) = split(cmd);
    let mut out: Vec<String> = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let prev = if i > 0 { words[i - 1] } else { "" };
        let host = w.split(':').next().unwrap_or(w);
        let iperf3_client = *w == "server" && prev == "-c" && i >= 2 && words[i - 2] == "iperf3";
        let new = if iperf3_client {
            format!("127.0.0.1 -p {}", peers.server_port)
        } else if matches!(prev, "-B" | "--bind") {
            "127.0.0.1".to_string()
        } else if *w == "iperf.example.net" || host == "10.0.0.2" {
            peers.iperf3.clone()
        } else if HOST_NAMES.contains(&host) {
            peers.server.clone()
        } else if let Some(list) = host_list(w, &peers.server) {
            list
        } else if let Some(repo) = &peers.repo {
            cluster_path(w, repo)
        } else {
            w.to_string()
        };
        out.push(new);
    }
    join(&out, &gaps)
}

/// The words of `cmd` and the blanks after each (a loop's newlines are kept).
fn split(cmd: &str) -> (Vec<&str>, Vec<&str>) {
    let mut words = Vec::new();
    let mut gaps = Vec::new();
    let mut rest = cmd.trim_start();
    while !rest.is_empty() {
        let w = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let after = rest[w..].trim_start();
        words.push(&rest[..w]);
        gaps.push(&rest[w..rest.len() - after.len()]);
        rest = after;
    }
    (words, gaps)
}

/// Words and the blanks after them, back into one line.
fn join(words: &[String], gaps: &[&str]) -> String {
    words
        .iter()
        .zip(gaps.iter().chain(std::iter::repeat(&" ")))
        .map(|(w, g)| format!("{w}{g}"))
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// `h1,h2,h3,h4` (a `--mesh` of hosts) as as many distinct loopback addresses on the port
/// of `server`.
fn host_list(word: &str, server: &str) -> Option<String> {
    let names: Vec<&str> = word.split(',').collect();
    let numbered = |n: &&str| n.len() > 1 && n.starts_with('h') && n[1..].parse::<u8>().is_ok();
    if names.len() < 2 || !names.iter().all(numbered) {
        return None;
    }
    let port = server.rsplit(':').next().unwrap_or("5300");
    let addrs: Vec<String> = (0..names.len())
        .map(|k| format!("127.0.0.{}:{port}", k + 2))
        .collect();
    Some(addrs.join(","))
}

/// A cluster's paths made local: `/shared/X` and `/results/X` relative to the working
/// directory, `deploy/X` in the repository.
fn cluster_path(word: &str, repo: &str) -> String {
    for shared in ["/shared/", "/results/"] {
        if let Some(rest) = word.strip_prefix(shared) {
            return format!("{}{rest}", &shared[1..]);
        }
    }
    match word.strip_prefix("deploy/") {
        Some(rest) => format!("{repo}/deploy/{rest}"),
        None => word.to_string(),
    }
}

/// An IPv4 address in `cmd` that is not this machine's (nor, for the lab, its emulated
/// hosts'): a test must never send traffic off the machine.
pub fn foreign_address(cmd: &str, lab: bool) -> Option<String> {
    cmd.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() == 4 && parts.iter().all(|p| p.parse::<u8>().is_ok())
        })
        .find(|a| !(a.starts_with("127.") || (lab && a.starts_with("10.77."))))
        .map(str::to_string)
}

/// The command made short: `-t` to 300 ms (1 s where iperf3 measures: it counts whole
/// seconds), a lab scenario to one trial of each profile, all at once, at a hundredth of
/// its time (what remains is mostly setting up and draining: 5 to 15 s), latency under load to
/// idle phases of 500 ms; a sweep to one repeat, a tenth of its `-n` and of a preset's
/// `--scale`; a `run` (or `iperf3 -c`) with neither an amount nor a file gets such a `-t`.
pub fn shorten(cmd: &str) -> String {
    let (words, gaps) = split(cmd);
    let mut out: Vec<String> = Vec::new();
    let mut out_gaps: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        match short_flag(cmd, words[i], words.get(i + 1).copied()) {
            Some(new) if !new.is_empty() => {
                out.push(new.join(" "));
                out_gaps.push(gaps[i + 1]);
                i += 2;
            }
            Some(_) => i += 2,
            None => {
                out.push(words[i].to_string());
                out_gaps.push(gaps[i]);
                i += 1;
            }
        }
    }
    let mut line = join(&out, &out_gaps);
    if line.contains("wirebench sweep") && !line.contains("--repeat") && !line.contains("--preset")
    {
        line = line.replacen("wirebench sweep", "wirebench sweep --repeat 1", 1);
    }
    bound(&line)
}

/// What `flag value` becomes in `cmd` made short, when it changes: its words, a `;` that
/// ended the value kept (it ends the command).
fn short_flag(cmd: &str, flag: &str, value: Option<&str>) -> Option<Vec<String>> {
    let value = value?;
    let (v, end) = match value.strip_suffix(';') {
        Some(v) => (v, ";"),
        None => (value, ""),
    };
    let sweep = cmd.contains("wirebench sweep");
    let new: Vec<String> = match flag {
        "-n" | "--scale" if sweep => vec![flag.into(), tenth(v)?],
        "-t" if with_iperf3(cmd) => vec!["-t".into(), "1".into()],
        "-t" => vec!["-t".into(), "300ms".into()],
        "--trials" => ["--trials", "1", "--time-scale", "0.01"]
            .map(String::from)
            .to_vec(),
        // Given with --trials, which sets its own; every profile's trial at once.
        "--time-scale" | "--parallel" if cmd.contains("--trials") => return Some(Vec::new()),
        "--repeat" => vec![flag.into(), "1".into()],
        "--idle" => vec![flag.into(), "500ms".into()],
        _ => return None,
    };
    let mut new = new;
    if let Some(last) = new.last_mut() {
        last.push_str(end);
    }
    Some(new)
}

/// A tenth of a size (`2M`, `100K`, `1Mi`, in bytes) or of a scale (`0.1`).
fn tenth(v: &str) -> Option<String> {
    let digits = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let number: f64 = v[..digits].parse().ok()?;
    let unit: f64 = match &v[digits..] {
        "" => 1.0,
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        _ => return None,
    };
    let t = number * unit / 10.0;
    Some(if t.fract() == 0.0 {
        format!("{t:.0}")
    } else {
        format!("{t}")
    })
}

/// True when iperf3 takes part: its client or server, or `run --iperf3`.
fn with_iperf3(cmd: &str) -> bool {
    cmd.split_whitespace()
        .any(|w| w.trim_matches('\'') == "iperf3" || w == "--iperf3")
}

/// Each `;`-separated part that would run for its default time (a `run`, rrul's idle
/// phases, an iperf3 client) with a bound added, before any redirection.
fn bound(line: &str) -> String {
    let bound_part = |part: &str| {
        let p = format!("{part} ");
        let is_run = p.contains("wirebench run") || p.contains("-- run ");
        let is_iperf3_client = p.contains("iperf3 -c ");
        let has = |f: &str| p.contains(&format!(" {f} "));
        let bounded = ["-t", "-n", "-k", "--file"].iter().any(|f| has(f));
        let mut add = String::new();
        if (is_run || is_iperf3_client) && !bounded {
            add.push_str(if with_iperf3(&p) {
                " -t 1"
            } else {
                " -t 300ms"
            });
        }
        if p.contains("--mode rrul") && !has("--idle") {
            add.push_str(" --idle 500ms");
        }
        let (head, tail) = match part.find(" >") {
            Some(k) => part.split_at(k),
            None => (part, ""),
        };
        format!("{}{add}{tail}", head.trim_end())
    };
    // Commands end at a `;` or, in a loop's body, at the end of a line.
    line.split(';')
        .map(|part| {
            part.split('\n')
                .map(bound_part)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join(";")
}
