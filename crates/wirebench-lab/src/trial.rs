//! One trial of a scenario: a fresh copy of its network, the stack profile applied, a
//! server in each host tests go to, and every test at once (each after its start delay).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use wirebench_proto::link_log::LinkLog;
use wirebench_report::export::link_log::LinkLogCsv;
use wirebench_report::Exporter;

use crate::scenario::{trial_topology, Profile, Scenario, Sysctls, TestDef};
use crate::server::{LabServer, ServerError};
use crate::summary::{NamedLinkReport, TestOutcome, TrialDoc};
use crate::topo::{Lab, Topology};
use crate::user_stack::{self, Stack};

/// The control port of the server of test `i` whose host uses a user-space stack is this
/// + 2i, its stack's data port the next (the kernel's servers keep the default port).
const SERVER_STACK_PORTS: u16 = 5400;

/// Why a trial could not run; saved in its file as `error`.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// An I/O step, named.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
    /// A host's server.
    #[error("starting the server in {host}: {source}")]
    Server {
        /// The host.
        host: String,
        /// Why.
        source: ServerError,
    },
    /// A node the scenario names and its topology lacks (a bug: the file was checked).
    #[error("no node {0:?} in the topology")]
    Node(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TrialError {
    let what = what.into();
    move |source| TrialError::Io { what, source }
}

/// What a trial needs besides its scenario.
#[derive(Debug, Clone)]
pub struct TrialSetup<'a> {
    /// The scenario.
    pub scenario: &'a Scenario,
    /// Its topology.
    pub topology: &'a Topology,
    /// How to scale the tests' durations.
    pub time_scale: f64,
    /// The wirebench executable, for servers and tests.
    pub exe: &'a Path,
    /// With a link log: its interval, ns, and its file.
    pub link_log: Option<(u64, PathBuf)>,
}

/// Scales the first duration after -t/--time in a test's options.
fn scaled_args(args: &[String], scale: f64) -> Vec<String> {
    let mut out = args.to_vec();
    if scale == 1.0 {
        return out;
    }
    for i in 0..out.len().saturating_sub(1) {
        if out[i] == "-t" || out[i] == "--time" {
            if let Ok(d) = wirebench_proto::units::parse_duration(&out[i + 1]) {
                out[i + 1] = format!(
                    "{}ms",
                    ((d.as_secs_f64() * scale * 1000.0).round() as u64).max(100)
                );
            }
        }
    }
    out
}

fn node(t: &Topology, name: &str) -> Result<usize, TrialError> {
    t.node(name)
        .ok_or_else(|| TrialError::Node(name.to_owned()))
}

/// Runs trial `n` of `profile`.
///
/// # Errors
///
/// When the network, a server or a test cannot be started; a test that fails is recorded
/// in the document, not returned.
pub fn run_trial(s: &TrialSetup<'_>, profile: &Profile, n: u32) -> Result<TrialDoc, TrialError> {
    let sc = s.scenario;
    let t = trial_topology(s.topology, n);
    let log_ns = s.link_log.as_ref().map_or(0, |l| l.0);
    let lab = Lab::build_logged(&t, log_ns).map_err(io_err("building the network"))?;
    let net = TrialNet {
        sc,
        exe: s.exe,
        time_scale: s.time_scale,
        profile,
        t: &t,
        lab: &lab,
        user_stack: profile.stack.filter(|&st| st != Stack::Kernel),
        stack_hosts: sc.stack_hosts(profile),
        profile_hosts: sc.profile_hosts(profile),
    };
    let sysctls = net.apply_profile()?;
    let (servers, reach) = net.start_servers()?;
    let children = net.start_tests(&reach)?;
    let tests = wait_for_tests(sc, children);
    drop(servers);
    let (links, log) = lab.stop_logged().map_err(io_err("stopping the emulator"))?;
    if let Some((_, path)) = &s.link_log {
        write_link_log(path, &log)?;
    }
    let names = t.link_names();
    Ok(TrialDoc {
        scenario: sc.name.clone(),
        profile: profile.name.clone(),
        trial: n,
        time_scale: s.time_scale,
        sysctls,
        tests,
        links: names
            .into_iter()
            .zip(links)
            .map(|(link, report)| NamedLinkReport { link, report })
            .collect(),
    })
}

/// A trial's network, built, with what decides how its servers and tests start.
struct TrialNet<'a> {
    sc: &'a Scenario,
    exe: &'a Path,
    time_scale: f64,
    profile: &'a Profile,
    /// This trial's copy of the topology.
    t: &'a Topology,
    lab: &'a Lab,
    /// The profile's user-space stack (none: the kernel's).
    user_stack: Option<Stack>,
    /// The hosts that use it.
    stack_hosts: Vec<String>,
    /// The hosts the profile's sysctls and congestion control apply to.
    profile_hosts: Vec<String>,
}

impl TrialNet<'_> {
    /// Sets the profile's sysctls in its hosts; what each host then had, by host.
    fn apply_profile(&self) -> Result<BTreeMap<String, Sysctls>, TrialError> {
        let mut sysctls = BTreeMap::new();
        for host in &self.profile_hosts {
            let got = self
                .profile
                .apply(self.lab.netns(node(self.t, host)?))
                .map_err(io_err(format!(
                    "applying profile {} to {host}",
                    self.profile.name
                )))?;
            sysctls.insert(host.clone(), got);
        }
        Ok(sysctls)
    }

    /// One server per host that tests go to, on the kernel's stack; they end when dropped.
    /// A test to a host of the profile's user-space stack has a server of its own instead,
    /// with a stack of its own (a TUN device takes one), on ports of its own: those ports
    /// by test (none: the default port), with the QUIC key each test's server printed.
    fn start_servers(&self) -> Result<(Vec<LabServer>, Vec<Reach>), TrialError> {
        let mut servers: Vec<LabServer> = Vec::new();
        let mut server_hosts: Vec<(&str, Option<String>)> = Vec::new();
        let mut ports: Vec<Reach> = vec![Reach::default(); self.sc.tests.len()];
        for (i, test) in self.sc.tests.iter().enumerate() {
            let server_err = |source| TrialError::Server {
                host: test.to.clone(),
                source,
            };
            let to = node(self.t, &test.to)?;
            match self.user_stack {
                Some(stack) if self.stack_hosts.contains(&test.to) => {
                    let (server, port) = self.stack_server(i, test, stack)?;
                    ports[i] = Reach {
                        port: Some(port),
                        quic_key: server.quic_key.clone(),
                    };
                    servers.push(server);
                }
                _ => {
                    if !server_hosts.iter().any(|(h, _)| *h == test.to) {
                        let server = LabServer::wirebench(self.lab, self.exe, to, "0.0.0.0", &[])
                            .map_err(server_err)?;
                        server_hosts.push((&test.to, server.quic_key.clone()));
                        servers.push(server);
                    }
                    ports[i].quic_key = server_hosts
                        .iter()
                        .find(|(h, _)| *h == test.to)
                        .and_then(|(_, k)| k.clone());
                }
            }
        }
        Ok((servers, ports))
    }

    /// The server of test `i` on the user-space `stack` in its host, and its control port.
    fn stack_server(
        &self,
        i: usize,
        test: &TestDef,
        stack: Stack,
    ) -> Result<(LabServer, u16), TrialError> {
        let to = node(self.t, &test.to)?;
        let host = self
            .t
            .node_address(to)
            .ok_or_else(|| TrialError::Node(test.to.clone()))?;
        let n = u8::try_from(i).unwrap_or(u8::MAX);
        let port = SERVER_STACK_PORTS + 2 * u16::from(n);
        let site =
            user_stack::prepare_server(self.lab.netns(to), host, n, port + 1).map_err(io_err(
                format!("preparing the {} stack in {}", stack.name(), test.to),
            ))?;
        let mut extra = vec!["--port".to_owned(), port.to_string()];
        extra.extend(site.serve_args(stack, port + 1));
        if let Some(b) = &self.profile.stack_buffer {
            extra.extend(["--stack-buffer".to_owned(), b.clone()]);
        }
        let server =
            LabServer::wirebench(self.lab, self.exe, to, "0.0.0.0", &extra).map_err(|source| {
                TrialError::Server {
                    host: test.to.clone(),
                    source,
                }
            })?;
        Ok((server, port))
    }

    /// Starts every test in the order of their start delays, each when its delay is up:
    /// the processes, by test.
    fn start_tests(&self, ports: &[Reach]) -> Result<Vec<(usize, Child)>, TrialError> {
        let tests = &self.sc.tests;
        let mut order: Vec<usize> = (0..tests.len()).collect();
        let delay = |i: usize| {
            tests[i]
                .delay()
                .unwrap_or_default()
                .mul_f64(self.time_scale)
        };
        order.sort_by_key(|&i| delay(i));
        let t0 = Instant::now();
        let mut children = Vec::new();
        for &i in &order {
            // The scenario's start delay: time itself is what is waited for.
            std::thread::sleep(delay(i).saturating_sub(t0.elapsed()));
            let mut c = self.test_command(i, &tests[i], &ports[i])?;
            children.push((i, c.spawn().map_err(io_err("starting a test"))?));
        }
        Ok(children)
    }

    /// The command of test `i`: `wirebench run` in its `from` host to its `to` host's
    /// server (on `port` if not the default), with the profile's stack and congestion
    /// control, and its output captured. A QUIC test pins its server's key.
    fn test_command(&self, i: usize, test: &TestDef, reach: &Reach) -> Result<Command, TrialError> {
        let port = reach.port;
        let to = node(self.t, &test.to)?;
        let addr = self
            .t
            .node_address(to)
            .ok_or_else(|| TrialError::Node(test.to.clone()))?;
        let from = node(self.t, &test.from)?;
        let mut c = self.lab.command(from, self.exe);
        c.arg("run").arg(addr.to_string()).arg("--json");
        if let Some(port) = port {
            c.args(["--port", &port.to_string()]);
        }
        // A user-space stack for this test's data connection: one per test (a TUN device
        // takes one stack), beside its host's address.
        if let Some(stack) = self.user_stack {
            if self.stack_hosts.contains(&test.from) {
                let host = self
                    .t
                    .node_address(from)
                    .ok_or_else(|| TrialError::Node(test.from.clone()))?;
                let n = u8::try_from(i).unwrap_or(u8::MAX);
                let site = user_stack::prepare(self.lab.netns(from), host, n).map_err(io_err(
                    format!("preparing the {} stack in {}", stack.name(), test.from),
                ))?;
                c.args(site.run_args(stack));
                if let Some(b) = &self.profile.stack_buffer {
                    c.args(["--stack-buffer", b]);
                }
            }
        }
        // The profile's congestion control, per socket too (see Profile::apply); a UDP test
        // has none (as iperf3 ignores -C with -u).
        // A QUIC profile's measured tests go over QUIC (a UDP test stays UDP).
        let to_quic = self.profile.transport == Some(crate::scenario::Transport::Quic)
            && test.measured
            && self.profile_hosts.contains(&test.from)
            && !test.is_udp()
            && !test.is_quic();
        if to_quic {
            c.arg("--quic");
        }
        // QUIC's controllers are its own: the profile's applies where QUIC has it (reno is
        // QUIC's newreno).
        let quic = test.is_quic() || to_quic;
        if let Some(cc) = &self.profile.cc {
            let cc = match cc.as_str() {
                "reno" if quic => "newreno",
                other => other,
            };
            let has = !quic || wirebench_proto::spec::QUIC_CONGESTION.contains(&cc);
            if self.profile_hosts.contains(&test.from)
                && !test.is_udp()
                && has
                && !test.args.iter().any(|a| a == "--cc")
            {
                c.args(["--cc", cc]);
            }
        }
        if let Some(key) = reach.quic_key.as_deref().filter(|_| quic) {
            if !test
                .args
                .iter()
                .any(|a| a == "--quic-pin" || a == "--quic-insecure")
            {
                c.args(["--quic-pin", key]);
            }
        }
        c.args(scaled_args(&test.args, self.time_scale))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(c)
    }
}

/// How a test reaches its server: its control port (none: the default) and the QUIC key
/// the server printed.
#[derive(Debug, Clone, Default)]
struct Reach {
    port: Option<u16>,
    quic_key: Option<String>,
}

/// Waits for every test's process: their outcomes in the scenario's order. A test whose
/// thread panicked has no outcome; it is left out.
fn wait_for_tests(sc: &Scenario, children: Vec<(usize, Child)>) -> Vec<TestOutcome> {
    let mut tests: Vec<Option<TestOutcome>> = vec![None; sc.tests.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = children
            .into_iter()
            .map(|(i, child)| scope.spawn(move || (i, child.wait_with_output())))
            .collect();
        for h in handles {
            if let Ok((i, out)) = h.join() {
                tests[i] = Some(test_outcome(&sc.tests[i], &out));
            }
        }
    });
    tests.into_iter().flatten().collect()
}

/// What a test's process left: its results, and why it failed if it did.
fn test_outcome(test: &TestDef, out: &io::Result<std::process::Output>) -> TestOutcome {
    let (ok, stdout, stderr) = match out {
        Ok(o) => {
            let mut said = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            if said.is_empty() && !o.status.success() {
                // Killed by a signal, or gone without a word: the status is all there is,
                // and a trial file must say why a test failed.
                said = format!("the test's process ended without a message ({})", o.status);
            }
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                said,
            )
        }
        Err(e) => (
            false,
            String::new(),
            format!("waiting for the test's process: {e}"),
        ),
    };
    let result: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
    let error = match (ok, &result) {
        (false, _) => Some(stderr),
        // Exit 0 without a document: its args changed what `--json` prints.
        (true, None) => Some(
            "the test ended well but printed no JSON results: leave --format and other \
             output flags out of a scenario's args"
                .to_owned(),
        ),
        (true, Some(_)) => None,
    };
    TestOutcome {
        name: test.label(),
        from: test.from.clone(),
        to: test.to.clone(),
        measured: test.measured,
        result,
        error,
    }
}

/// Writes a link log as CSV to `path`.
///
/// # Errors
///
/// The file cannot be made or written.
pub fn write_link_log(path: &Path, log: &LinkLog) -> Result<(), TrialError> {
    // Whole or not at all (see `wirebench_report::output`).
    wirebench_report::rundir::write_with(path, |w| LinkLogCsv.export(log, w))
        .map_err(|e| io_err(format!("writing {}", path.display()))(e.source))
}
