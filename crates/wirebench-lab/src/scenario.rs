//! Scenario files (TOML): a topology of links between named nodes, the stack profiles to
//! compare, the tests to run at once in each trial, and the trial count.
//!
//! ```toml
//! name = "random-loss"
//! trials = 100
//! parallel = 4
//!
//! [[link]]
//! a = "h1"
//! b = "r1"
//! rate = "100M"
//!
//! [[link]]
//! a = "r1"
//! b = "r2"
//! rate = "2M"
//! delay = "100ms"
//! loss = "5%"
//!
//! [[profile]]
//! name = "cubic-sack"
//! cc = "cubic"
//! sack = true
//!
//! [[test]]
//! from = "h1"
//! to = "h2"
//! args = ["-t", "60s"]
//! ```
//!
//! Nodes are the names the links join, in order of appearance. A test runs
//! `wirebench run <address of to> --json ARGS` in `from` against a server in `to`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wirebench_proto::units::parse_duration;

use crate::link_options::{LinkProps, PropsError};
use crate::netns::NetNs;
use crate::topo::{LinkSpec, NodeSpec, Topology, TopologyError};

/// A scenario file that cannot be run; each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a regular file (a FIFO, a device): refused before it is read.
    #[error(transparent)]
    NotAFile(Box<wirebench_report::input::InputError>),
    /// A problem in a file, which the message is prefixed with.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: std::path::PathBuf,
        /// The problem.
        source: Box<ScenarioError>,
    },
    /// TOML syntax or an unknown key, at a line when known.
    #[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Syntax {
        /// The line, from 1.
        line: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A file larger than any scenario.
    #[error("{size} bytes is too large for a scenario file (at most {MAX_SCENARIO_BYTES} bytes)")]
    TooLarge {
        /// Its size.
        size: u64,
    },
    /// More of something than a scenario runs.
    #[error("{count} {what} is too many (at most {max})")]
    TooMany {
        /// What: links, tests, profiles, trials, arguments of a test.
        what: &'static str,
        /// How many the file has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// No `[[link]]`.
    #[error("a scenario needs at least one [[link]]")]
    NoLinks,
    /// No `[[test]]`.
    #[error("a scenario needs at least one [[test]]")]
    NoTests,
    /// Trials or copies out of range.
    #[error("trials must be at least 1 and parallel 1 to 64")]
    Counts,
    /// A test between nodes no link joins.
    #[error("test {test}: no node {node:?}")]
    TestNode {
        /// The test's name.
        test: String,
        /// The unknown node.
        node: String,
    },
    /// A malformed `start-after`.
    #[error("test {test}: start-after: {source}")]
    StartAfter {
        /// The test's name.
        test: String,
        /// Why.
        source: wirebench_proto::units::UnitError,
    },
    /// A name that would escape its directory as part of a file name, or write control
    /// characters to a terminal.
    #[error(
        "{key} {value:?}: a name has 1 to {MAX_NAME_BYTES} bytes and no /, \\, .. or control \
         characters (it is part of file names, and printed)"
    )]
    Name {
        /// Where it is: `name`, `[[profile]] name`, `[[link]] a`, ...
        key: &'static str,
        /// The name as given.
        value: String,
    },
    /// A `start-after` past the longest a trial waits to start a test.
    #[error("test {test}: start-after {value:?}: at most 1h")]
    StartAfterTooLong {
        /// The test's name.
        test: String,
        /// What it says.
        value: String,
    },
    /// Two profiles of one name.
    #[error("profile {0:?} is defined twice")]
    ProfileTwice(String),
    /// Two tests of one name (a test's name defaults to `FROM-TO`).
    #[error(
        "test {0:?} is defined twice: each test is told apart by its name in the results; \
         give one of them another name = \"...\""
    )]
    TestTwice(String),
    /// A profile for a node no link joins.
    #[error("profile {profile}: no node {node:?}")]
    ProfileNode {
        /// The profile.
        profile: String,
        /// The unknown node.
        node: String,
    },
    /// A `stack-buffer` that is not a size from 4K to 64M.
    #[error("profile {profile}: stack-buffer {value:?}: give a size from 4K to 64M, e.g. \"64K\"")]
    StackBuffer {
        /// The profile.
        profile: String,
        /// What it says.
        value: String,
    },
    /// `stack-hosts` where no test starts or ends: the stack would carry nothing.
    #[error(
        "profile {0}: no test starts or ends in stack-hosts ({1}): the stack would carry nothing"
    )]
    StackHostsUnused(String, String),
    /// `stack-hosts` without a user-space stack to put there.
    #[error("profile {0}: stack-hosts needs stack = \"smoltcp\"")]
    StackHostsWithoutStack(String),
    /// A link property that does not parse.
    #[error("link {index} ({a}-{b}): {source}")]
    Link {
        /// The link's place in the file, from 0.
        index: usize,
        /// One end.
        a: String,
        /// The other end.
        b: String,
        /// Why.
        source: PropsError,
    },
    /// The links do not make a topology.
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// The longest name of a scenario, profile, test or node, bytes: the trial files'
/// names (`NNNN-PROFILE-links.csv`) and the run's directory stay far below a file
/// system's 255.
pub const MAX_NAME_BYTES: usize = 64;

/// The longest `start-after`: a trial waits that long before it starts the test.
pub const MAX_START_AFTER: Duration = Duration::from_secs(3600);

/// Checks a name that becomes part of a file name (a scenario's run directory, its
/// trials' files) or is printed in tables: not empty, at most [`MAX_NAME_BYTES`], and no
/// path separator, `..`, NUL or other control character.
///
/// # Errors
///
/// [`ScenarioError::Name`], naming `key`.
pub fn check_name(key: &'static str, value: &str) -> Result<(), ScenarioError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME_BYTES
        && !value.contains(['/', '\\'])
        && !value.contains("..")
        && !value.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(ScenarioError::Name {
            key,
            value: value.to_owned(),
        })
    }
}

/// The largest scenario file read: scenarios are a few kB; the cap bounds the parser's
/// memory before it starts.
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// The most links, tests, profiles, trials and arguments of one test a scenario may have:
/// each link is two namespaces' worth of devices and each trial a run of every test, so
/// more is a crafted file, not an experiment.
pub const SCENARIO_LIMITS: [(&str, usize); 5] = [
    ("links", 256),
    ("tests", 256),
    ("profiles", 64),
    ("trials", 100_000),
    ("arguments of a test", 256),
];

/// The most trials one scenario run makes in all, its profiles' trials together: 64
/// profiles × 100,000 trials (6.4 M runs of every test) is a crafted file, not an
/// experiment.
pub const MAX_TRIALS_IN_ALL: usize = 100_000;

/// Refuses `trials` per profile of `profiles` profiles past [`MAX_TRIALS_IN_ALL`].
///
/// # Errors
///
/// [`ScenarioError::TooMany`], naming the limit.
pub fn check_trials_in_all(trials: u32, profiles: usize) -> Result<(), ScenarioError> {
    let count = trials as usize * profiles.max(1);
    if count > MAX_TRIALS_IN_ALL {
        return Err(ScenarioError::TooMany {
            what: "trials in all (trials × profiles)",
            count,
            max: MAX_TRIALS_IN_ALL,
        });
    }
    Ok(())
}

/// A scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name (for result directories).
    pub name: String,
    /// What it reproduces.
    #[serde(default)]
    pub description: Option<String>,
    /// Trials per stack profile.
    #[serde(default = "one")]
    pub trials: u32,
    /// Copies of the network run at once.
    #[serde(default = "one")]
    pub parallel: u32,
    /// The links.
    #[serde(rename = "link")]
    pub links: Vec<LinkDef>,
    /// The stack profiles to compare (none: the kernel's defaults, once).
    #[serde(rename = "profile", default)]
    pub profiles: Vec<Profile>,
    /// The tests run at once in each trial.
    #[serde(rename = "test")]
    pub tests: Vec<TestDef>,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

/// One link of a scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct LinkDef {
    /// One end (node name).
    pub a: String,
    /// The other end.
    pub b: String,
    /// Its properties; `up` is a → b.
    #[serde(flatten)]
    pub props: LinkProps,
}

impl TryFrom<toml::Table> for LinkDef {
    type Error = String;

    // By hand, because serde's `flatten` would let unknown keys through.
    fn try_from(mut t: toml::Table) -> Result<Self, String> {
        let mut end = |k: &str| match t.remove(k) {
            Some(toml::Value::String(s)) => Ok(s),
            _ => Err(format!("a [[link]] needs {k} = \"NODE\"")),
        };
        let (a, b) = (end("a")?, end("b")?);
        let props = LinkProps::deserialize(toml::Value::Table(t))
            .map_err(|e| format!("link {a}-{b}: {}", e.message()))?;
        Ok(Self { a, b, props })
    }
}

/// A host's TCP stack settings, applied as sysctls of its namespace. Unset fields keep the
/// kernel's defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Its name in tables.
    pub name: String,
    /// `net.ipv4.tcp_congestion_control` (reno, cubic, bbr, ...).
    #[serde(default)]
    pub cc: Option<String>,
    /// `net.ipv4.tcp_sack`.
    #[serde(default)]
    pub sack: Option<bool>,
    /// `net.ipv4.tcp_timestamps`.
    #[serde(default)]
    pub timestamps: Option<bool>,
    /// `net.ipv4.tcp_ecn` (true: ask for ECN; false: never).
    #[serde(default)]
    pub ecn: Option<bool>,
    /// `net.ipv4.tcp_rmem`, "min default max" bytes.
    #[serde(default)]
    pub rmem: Option<String>,
    /// `net.ipv4.tcp_wmem`, "min default max" bytes.
    #[serde(default)]
    pub wmem: Option<String>,
    /// The hosts it applies to (default: every host a measured test runs between).
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// The TCP/IP stack of tests that start or end in its hosts: "kernel" (the default) or
    /// "smoltcp" (user space, on a TUN device; see [`crate::user_stack`]). A test's client
    /// in such a host opens its data connection there; a test's server takes it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<crate::user_stack::Stack>,
    /// With `stack = "smoltcp"`: its socket buffer each way ("64K"; its `--stack-buffer`).
    /// smoltcp does not read the kernel's tcp_rmem and tcp_wmem.
    #[serde(
        default,
        rename = "stack-buffer",
        skip_serializing_if = "Option::is_none"
    )]
    pub stack_buffer: Option<String>,
    /// With `stack`: the hosts it applies to (default: `hosts`), e.g. the receiver only,
    /// while the sysctls and `cc` still apply to the sender as well.
    #[serde(
        default,
        rename = "stack-hosts",
        skip_serializing_if = "Option::is_none"
    )]
    pub stack_hosts: Option<Vec<String>>,
    /// The transport of the measured tests that start in its hosts: "tcp" (the default:
    /// their args say) or "quic" (`--quic` is added, so that one scenario compares TCP and
    /// QUIC under the same links; `cc` is then QUIC's controller, reno being its newreno).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
}

/// A profile's transport for its measured tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// As the tests' args say.
    Tcp,
    /// QUIC streams (`run --quic`).
    Quic,
}

impl Profile {
    /// The sysctls this profile sets, in order.
    pub fn sysctls(&self) -> Vec<(&'static str, String)> {
        let b = |v: bool| if v { "1" } else { "0" }.to_owned();
        let mut out = Vec::new();
        if let Some(cc) = &self.cc {
            out.push(("net/ipv4/tcp_congestion_control", cc.clone()));
        }
        if let Some(v) = self.sack {
            out.push(("net/ipv4/tcp_sack", b(v)));
        }
        if let Some(v) = self.timestamps {
            out.push(("net/ipv4/tcp_timestamps", b(v)));
        }
        if let Some(v) = self.ecn {
            out.push(("net/ipv4/tcp_ecn", b(v)));
        }
        if let Some(v) = &self.rmem {
            out.push(("net/ipv4/tcp_rmem", v.clone()));
        }
        if let Some(v) = &self.wmem {
            out.push(("net/ipv4/tcp_wmem", v.clone()));
        }
        out
    }

    /// Applies the profile to a host's namespace and reads each value back.
    ///
    /// # Errors
    ///
    /// A refused value (e.g. a congestion control the kernel does not have), named.
    ///
    /// Outside the initial network namespace the kernel lets a host's default congestion
    /// control be only one of `net.ipv4.tcp_allowed_congestion_control`; when it refuses,
    /// the value read back stays the kernel's and tests pass `--cc` so that each socket
    /// asks for it (which root in the namespace may).
    pub fn apply(&self, ns: &NetNs) -> std::io::Result<Sysctls> {
        let mut got = BTreeMap::new();
        for (key, value) in self.sysctls() {
            match ns.sysctl(key, &value) {
                Err(e)
                    if key.ends_with("congestion_control")
                        && e.kind() == std::io::ErrorKind::PermissionDenied => {}
                r => r?,
            }
            got.insert(key.replace('/', "."), ns.read_sysctl(key)?);
        }
        Ok(got)
    }
}

/// Sysctls as read back from a host, by key (`net.ipv4.tcp_sack` = "0").
pub type Sysctls = BTreeMap<String, String>;

/// One test of a trial.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TestDef {
    /// Its name in results (default: "FROM-TO").
    #[serde(default)]
    pub name: Option<String>,
    /// The client host.
    pub from: String,
    /// The server host.
    pub to: String,
    /// Options of `wirebench run` (e.g. ["-t", "60s"]).
    #[serde(default)]
    pub args: Vec<String>,
    /// Whether its goodput goes into the tables (false: cross traffic).
    #[serde(default = "yes")]
    pub measured: bool,
    /// Start this long after the trial's first test (e.g. "2s"; key `start-after`).
    #[serde(default)]
    pub start_after: Option<String>,
}

impl TestDef {
    /// Its name.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", self.from, self.to))
    }

    /// Whether its args ask for UDP (`-u`, `--udp`, or `-u` among other short flags, as
    /// `-uR` or `-ub10M`, before a value): a profile's congestion control is not for it.
    pub fn is_udp(&self) -> bool {
        self.args.iter().any(|a| {
            a == "--udp"
                || a.strip_prefix('-').is_some_and(|shorts| {
                    !shorts.starts_with('-')
                        && shorts
                            .chars()
                            .take_while(char::is_ascii_alphabetic)
                            .any(|c| c == 'u')
                })
        })
    }

    /// Whether its args ask for QUIC (`--quic`).
    pub fn is_quic(&self) -> bool {
        self.args.iter().any(|a| a == "--quic")
    }

    /// Its start delay.
    ///
    /// # Errors
    ///
    /// A malformed duration.
    pub fn delay(&self) -> Result<Duration, ScenarioError> {
        let Some(s) = self.start_after.as_deref() else {
            return Ok(Duration::ZERO);
        };
        let d = parse_duration(s).map_err(|source| ScenarioError::StartAfter {
            test: self.label(),
            source,
        })?;
        if d > MAX_START_AFTER {
            return Err(ScenarioError::StartAfterTooLong {
                test: self.label(),
                value: s.to_owned(),
            });
        }
        Ok(d)
    }
}

impl Scenario {
    /// Parses and checks a scenario.
    ///
    /// # Errors
    ///
    /// A one-line message: TOML syntax, an unknown key, or an inconsistency.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        Self::parse_in(text, None)
    }

    /// [`Scenario::parse`] of a file in `dir`: the paths it names (trace files) are made
    /// relative to that directory before it is checked, so that a scenario and its traces
    /// move together.
    fn parse_in(text: &str, dir: Option<&std::path::Path>) -> Result<Self, ScenarioError> {
        if text.len() as u64 > MAX_SCENARIO_BYTES {
            return Err(ScenarioError::TooLarge {
                size: text.len() as u64,
            });
        }
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Syntax {
            // The line the error starts on: one more than the line breaks before it (an
            // error at the start of a line is on that line, not the one before).
            line: e.span().map(|sp| {
                text.as_bytes()[..sp.start.min(text.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1
            }),
            message: e.message().to_owned(),
        })?;
        if let Some(dir) = dir {
            for l in &mut s.links {
                l.props.resolve_traces(dir);
            }
        }
        s.check()?;
        Ok(s)
    }

    /// Reads and checks a scenario file; errors name the file.
    ///
    /// # Errors
    ///
    /// The file cannot be read, or [`Scenario::parse`] refuses it.
    pub fn load(path: &std::path::Path) -> Result<Self, ScenarioError> {
        let read = |source| ScenarioError::Read {
            path: path.to_owned(),
            source,
        };
        // A regular file only (a FIFO would block the open, a device never end); the size
        // next, so a huge file is refused before a byte of it is held.
        let f = wirebench_report::input::open_regular(path, "scenario file", u64::MAX).map_err(
            |e| match e {
                wirebench_report::input::InputError::Read { source, .. } => read(source),
                e => ScenarioError::NotAFile(Box::new(e)),
            },
        )?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(f, MAX_SCENARIO_BYTES + 1),
            &mut text,
        )
        .map_err(read)?;
        if text.len() as u64 > MAX_SCENARIO_BYTES {
            return Err(ScenarioError::InFile {
                path: path.to_owned(),
                source: Box::new(ScenarioError::TooLarge {
                    size: std::fs::metadata(path).map_or(text.len() as u64, |m| m.len()),
                }),
            });
        }
        let dir = path.parent().unwrap_or(std::path::Path::new(""));
        Self::parse_in(&text, Some(dir)).map_err(|e| ScenarioError::InFile {
            path: path.to_owned(),
            source: Box::new(e),
        })
    }

    /// The checks [`Scenario::parse`] makes once the file is read.
    pub(crate) fn check(&self) -> Result<(), ScenarioError> {
        // Counts before anything is built from them (the topology, the trial jobs).
        let args = self.tests.iter().map(|t| t.args.len()).max().unwrap_or(0);
        let counts = [
            self.links.len(),
            self.tests.len(),
            self.profiles.len(),
            self.trials as usize,
            args,
        ];
        for ((what, max), count) in SCENARIO_LIMITS.into_iter().zip(counts) {
            if count > max {
                return Err(ScenarioError::TooMany { what, count, max });
            }
        }
        if self.links.is_empty() {
            return Err(ScenarioError::NoLinks);
        }
        if self.tests.is_empty() {
            return Err(ScenarioError::NoTests);
        }
        if self.trials == 0 || !(1..=64).contains(&self.parallel) {
            return Err(ScenarioError::Counts);
        }
        check_trials_in_all(self.trials, self.profiles.len())?;
        self.check_names()?;
        let mut tests = std::collections::HashSet::new();
        if let Some(t) = self.tests.iter().find(|t| !tests.insert(t.label())) {
            return Err(ScenarioError::TestTwice(t.label()));
        }
        let topo = self.topology()?;
        let known = |n: &str| topo.node(n).is_some();
        for t in &self.tests {
            for h in [&t.from, &t.to] {
                if !known(h) {
                    return Err(ScenarioError::TestNode {
                        test: t.label(),
                        node: h.clone(),
                    });
                }
            }
            t.delay()?;
        }
        let mut names = std::collections::HashSet::new();
        for p in &self.profiles {
            if !names.insert(&p.name) {
                return Err(ScenarioError::ProfileTwice(p.name.clone()));
            }
            for h in p
                .hosts
                .iter()
                .flatten()
                .chain(p.stack_hosts.iter().flatten())
            {
                if !known(h) {
                    return Err(ScenarioError::ProfileNode {
                        profile: p.name.clone(),
                        node: h.clone(),
                    });
                }
            }
            if p.stack_hosts.is_some() && self.stack_hosts(p).is_empty() {
                return Err(ScenarioError::StackHostsWithoutStack(p.name.clone()));
            }
            let on = self.stack_hosts(p);
            if p.stack_hosts.is_some()
                && !self
                    .tests
                    .iter()
                    .any(|t| on.contains(&t.from) || on.contains(&t.to))
            {
                return Err(ScenarioError::StackHostsUnused(
                    p.name.clone(),
                    on.join(", "),
                ));
            }
            // Said now, not by each trial's `run` once the network is built.
            if let Some(b) = &p.stack_buffer {
                match wirebench_proto::units::parse_size(b) {
                    Ok(n) if (4096..=(64 << 20)).contains(&n) => {}
                    _ => {
                        return Err(ScenarioError::StackBuffer {
                            profile: p.name.clone(),
                            value: b.clone(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Every name of the file that becomes part of a file name or is printed, before any
    /// message quotes it.
    fn check_names(&self) -> Result<(), ScenarioError> {
        check_name("name", &self.name)?;
        for l in &self.links {
            check_name("[[link]] a", &l.a)?;
            check_name("[[link]] b", &l.b)?;
        }
        for p in &self.profiles {
            check_name("[[profile]] name", &p.name)?;
        }
        for t in &self.tests {
            if let Some(n) = &t.name {
                check_name("[[test]] name", n)?;
            }
        }
        Ok(())
    }

    /// The topology its links describe.
    ///
    /// # Errors
    ///
    /// A bad link property or too many links.
    pub fn topology(&self) -> Result<Topology, ScenarioError> {
        // A scenario's links run one wire packet per frame, as when its published trials
        // (docs/lab.md) were measured: at their rates every GSO frame would be cut anyway,
        // and the hosts' TCP stays as it was measured (no TSO).
        let mut topo = Topology {
            no_offload: true,
            ..Topology::default()
        };
        let index = |name: &str, topo: &mut Topology| -> usize {
            topo.node(name).unwrap_or_else(|| {
                topo.nodes.push(NodeSpec {
                    name: name.to_owned(),
                });
                topo.nodes.len() - 1
            })
        };
        for (i, l) in self.links.iter().enumerate() {
            let (up, down) = l.props.configs().map_err(|source| ScenarioError::Link {
                index: i,
                a: l.a.clone(),
                b: l.b.clone(),
                source,
            })?;
            let a = index(&l.a, &mut topo);
            let b = index(&l.b, &mut topo);
            topo.links.push(LinkSpec { a, b, up, down });
        }
        topo.validate()?;
        Ok(topo)
    }

    /// The profiles to run: the file's, or one that changes nothing.
    pub fn profiles(&self) -> Vec<Profile> {
        if self.profiles.is_empty() {
            vec![Profile {
                name: "default".into(),
                ..Profile::default()
            }]
        } else {
            self.profiles.clone()
        }
    }

    /// The hosts whose tests go through the profile's user-space stack: `stack-hosts`, or
    /// else [`Self::profile_hosts`]; none without a user-space stack.
    pub fn stack_hosts(&self, p: &Profile) -> Vec<String> {
        match (p.stack, &p.stack_hosts) {
            (None | Some(crate::user_stack::Stack::Kernel), _) => Vec::new(),
            (_, Some(h)) => h.clone(),
            (_, None) => self.profile_hosts(p),
        }
    }

    /// The hosts a profile applies to.
    pub fn profile_hosts(&self, p: &Profile) -> Vec<String> {
        match &p.hosts {
            Some(h) => h.clone(),
            None => {
                let mut v: Vec<String> = Vec::new();
                for t in self.tests.iter().filter(|t| t.measured) {
                    for h in [&t.from, &t.to] {
                        if !v.contains(h) {
                            v.push(h.clone());
                        }
                    }
                }
                v
            }
        }
    }
}

/// The topology of trial `trial`: the same as `topo` but with every link direction's seed
/// mixed with the trial number, so trials differ and each is reproducible.
pub fn trial_topology(topo: &Topology, trial: u32) -> Topology {
    let mut t = topo.clone();
    for l in &mut t.links {
        for c in [&mut l.up, &mut l.down] {
            c.seed = c.seed ^ (u64::from(trial) << 32) ^ 0x5EED;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_asks_for_udp_by_any_spelling() {
        let test = |args: &[&str]| TestDef {
            name: None,
            from: "a".into(),
            to: "b".into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            measured: true,
            start_after: None,
        };
        for udp in [
            &["-u"][..],
            &["--udp"],
            &["-t", "2", "-uR"],
            &["-Ru"],
            &["-ub10M"],
        ] {
            assert!(test(udp).is_udp(), "{udp:?}");
        }
        for tcp in [
            &[][..],
            &["--tcp"],
            &["-t", "2"],
            &["--udp-probe"],
            &["-l", "1u"],
        ] {
            assert!(!test(tcp).is_udp(), "{tcp:?}");
        }
    }

    const DUMBBELL: &str = r#"
name = "t"
trials = 3
[[link]]
a = "h1"
b = "r1"
[[link]]
a = "h3"
b = "r1"
[[link]]
a = "r1"
b = "r2"
rate = "2M"
delay = "50ms"
queue = 8
[[link]]
a = "r2"
b = "h2"
[[link]]
a = "r2"
b = "h4"
[[profile]]
name = "reno"
cc = "reno"
sack = false
[[test]]
from = "h1"
to = "h2"
args = ["-t", "60s"]
[[test]]
from = "h4"
to = "h3"
measured = false
start-after = "1s"
"#;

    #[test]
    fn the_dumbbell_parses_into_nodes_links_and_routes() {
        let s = Scenario::parse(DUMBBELL).unwrap();
        let topo = s.topology().unwrap();
        let names: Vec<&str> = topo.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["h1", "r1", "h3", "r2", "h2", "h4"]);
        assert_eq!(topo.links[2].up.rate_bps, 2_000_000);
        assert_eq!(topo.links[2].up.queue_packets, 8);
        // h1 reaches the bottleneck (link 2) and h2's link (3) through r1 (10.77.0.2).
        let routes = topo.routes(0);
        assert!(routes.contains(&("10.77.2.0".parse().unwrap(), "10.77.0.2".parse().unwrap())));
        assert!(routes.contains(&("10.77.3.0".parse().unwrap(), "10.77.0.2".parse().unwrap())));
        assert_eq!(routes.len(), 4);
        // r1 reaches h2's link through r2, on the bottleneck.
        assert!(topo
            .routes(1)
            .contains(&("10.77.3.0".parse().unwrap(), "10.77.2.2".parse().unwrap())));
        assert_eq!(s.profile_hosts(&s.profiles[0]), ["h1", "h2"]);
        assert!(s.stack_hosts(&s.profiles[0]).is_empty());
        // A user-space stack covers the profile's hosts, or only its stack-hosts.
        let with = |extra: &str| {
            let s = Scenario::parse(&DUMBBELL.replace("sack = false", extra)).unwrap();
            s.stack_hosts(&s.profiles[0])
        };
        assert_eq!(with("stack = \"smoltcp\""), ["h1", "h2"]);
        assert_eq!(with("stack = \"smoltcp\"\nstack-hosts = [\"h2\"]"), ["h2"]);
        assert_eq!(
            s.profiles[0].sysctls(),
            [
                ("net/ipv4/tcp_congestion_control", "reno".to_owned()),
                ("net/ipv4/tcp_sack", "0".to_owned())
            ]
        );
    }

    #[test]
    fn mistakes_are_one_line_errors() {
        for (text, needle) in [
            ("name = 1", "line 1"),
            // At the start of its line: that line, not the one before.
            ("name = \"s\"\n\nbogus = 1\n", "line 3"),
            (
                &DUMBBELL.replace("queue = 8", "queue = 8\ncolour = 1"),
                "colour",
            ),
            (&DUMBBELL.replace("to = \"h2\"", "to = \"h9\""), "h9"),
            (
                &DUMBBELL.replace("sack = false", "stack-hosts = [\"h7\"]"),
                "h7",
            ),
            (
                &DUMBBELL.replace("sack = false", "stack-hosts = [\"h2\"]"),
                "stack-hosts needs stack",
            ),
            (
                &DUMBBELL.replace(
                    "sack = false",
                    "stack = \"smoltcp\"\nstack-buffer = \"64X\"",
                ),
                "stack-buffer \"64X\"",
            ),
            (
                &DUMBBELL.replace(
                    "sack = false",
                    "stack = \"smoltcp\"\nstack-hosts = [\"r1\"]",
                ),
                "no test starts or ends in stack-hosts (r1)",
            ),
            (
                &DUMBBELL.replace("rate = \"2M\"", "rate = \"fast\""),
                "link 2",
            ),
            (&DUMBBELL.replace("\"1s\"", "\"later\""), "later"),
            // Counts are refused before anything is built.
            (
                &DUMBBELL.replace("trials = 3", "trials = 4000000000"),
                "4000000000 trials is too many",
            ),
            (&"#".repeat(2 << 20), "too large for a scenario file"),
            (
                &DUMBBELL.replace(
                    "from = \"h4\"\nto = \"h3\"",
                    "name = \"h1-h2\"\nfrom = \"h4\"\nto = \"h3\"",
                ),
                "test \"h1-h2\" is defined twice",
            ),
            (
                &format!(
                    "{}{}",
                    DUMBBELL.replace("trials = 3", "trials = 100000"),
                    "[[profile]]\nname = \"b\"\n"
                ),
                "200000 trials in all (trials × profiles) is too many (at most 100000)",
            ),
            (
                &DUMBBELL.replace("\"1s\"", "\"2h\""),
                "start-after \"2h\": at most 1h",
            ),
            // Names become file names: none escapes the run's directory.
            (
                &DUMBBELL.replace("name = \"reno\"", "name = \"../../x\""),
                "[[profile]] name \"../../x\": a name has",
            ),
            (
                &DUMBBELL.replace("name = \"t\"", "name = \"x/../../../../escaped\""),
                "name \"x/../../../../escaped\"",
            ),
            (
                &DUMBBELL.replace("name = \"reno\"", "name = \"cu\\u001b[2J\""),
                "[[profile]] name \"cu\\u{1b}[2J\"",
            ),
            (
                &DUMBBELL.replace("a = \"h3\"", "a = \"h\\u0000\""),
                "[[link]] a \"h\\0\"",
            ),
            (
                &DUMBBELL.replace("from = \"h4\"", "name = \"a\\\\b\"\nfrom = \"h4\""),
                "[[test]] name",
            ),
            (
                &DUMBBELL.replace("name = \"t\"", "name = \"\""),
                "name \"\"",
            ),
            (
                &DUMBBELL.replace("name = \"t\"", &format!("name = \"{}\"", "x".repeat(65))),
                "a name has 1 to 64 bytes",
            ),
        ] {
            let e = Scenario::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn trace_paths_are_relative_to_the_scenario_file() {
        let dir = std::env::temp_dir().join(format!("wirebench-scenario-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("lte.toml");
        // Loading reads the traces: both exist, one named relative to the file.
        let absolute = dir.join("elsewhere/lte.down");
        for t in [dir.join("traces/lte.up"), absolute.clone()] {
            std::fs::create_dir_all(t.parent().expect("a directory")).expect("trace dir");
            std::fs::write(&t, "1\n").expect("trace");
        }
        let text = DUMBBELL.replace(
            "rate = \"2M\"",
            &format!(
                "trace-up = \"traces/lte.up\"\ntrace-down = \"{}\"",
                absolute.display()
            ),
        );
        std::fs::write(&file, &text).expect("write");
        let s = Scenario::load(&file).expect("loads");
        let props = &s.links[2].props;
        assert_eq!(
            props.trace_up.as_deref(),
            Some(dir.join("traces/lte.up").as_path())
        );
        assert_eq!(props.trace_down.as_deref(), Some(absolute.as_path()));
        // Parsed from text, a path stays as written (and is read from the working
        // directory: the crate's, under cargo test).
        let shipped = "../../scenarios/traces/const-12mbit";
        let from_text = DUMBBELL.replace("rate = \"2M\"", &format!("trace = \"{shipped}\""));
        let s = Scenario::parse(&from_text).expect("parses");
        assert_eq!(
            s.links[2].props.trace.as_deref(),
            Some(std::path::Path::new(shipped))
        );
        // A trace and a rate on one direction: one line naming both.
        let both = DUMBBELL.replace("rate = \"2M\"", "rate = \"2M\"\ntrace-up = \"x\"");
        let e = Scenario::parse(&both).expect_err("both").to_string();
        assert!(e.contains("trace-up and rate both set"), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
