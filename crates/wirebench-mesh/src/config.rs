//! A mesh file (TOML), checked: hosts (their wirebench servers), groups (a full mesh, or
//! sources against destinations, as perfSONAR's psconfig has them), tests (`run`'s flags, a
//! group, how often) and the paths they make. Every error names its place in the file.
//!
//! ```toml
//! [hosts]
//! one = "127.0.0.1:5201"
//! two = "127.0.0.2:5201"
//!
//! [groups.all]
//! mesh = ["one", "two"]
//!
//! [tests.throughput]
//! group = "all"
//! run = ["-t", "2"]
//! every = "10s"
//! slip = "2s"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use wirebench_proto::units::parse_duration;

/// The most hosts a mesh file may name.
pub const MAX_HOSTS: usize = 1024;
/// The most tests a mesh file may name.
pub const MAX_TESTS: usize = 256;
/// The most paths (test, source, destination) a mesh may make.
pub const MAX_PATHS: usize = 100_000;
/// The most words a test's `run` may have.
pub const MAX_RUN_WORDS: usize = 64;
/// The shortest `every`: a run a second per path at most.
pub const MIN_EVERY: Duration = Duration::from_secs(1);

/// What the file says, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    hosts: BTreeMap<String, String>,
    #[serde(default)]
    groups: BTreeMap<String, GroupEntry>,
    tests: BTreeMap<String, TestEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupEntry {
    mesh: Option<Vec<String>>,
    sources: Option<Vec<String>>,
    destinations: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestEntry {
    group: String,
    #[serde(default)]
    run: Vec<String>,
    every: String,
    slip: Option<String>,
    kind: Option<Kind>,
    #[serde(default)]
    peer: Peer,
}

/// What the destinations' servers are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    /// `wirebench serve` (port 5300 unless the address names one).
    #[default]
    Wirebench,
    /// `iperf3 -s` (port 5201 unless the address names one): `run --iperf3`.
    Iperf3,
}

/// Whether a test needs the hosts to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// It loads the path (streaming, rrul): never beside another throughput test involving
    /// either end.
    Throughput,
    /// It probes (rr, crr): it may run beside anything.
    Latency,
}

impl Kind {
    /// The word the file, the archive and the metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Throughput => "throughput",
            Kind::Latency => "latency",
        }
    }

    /// What `run`'s flags make: latency for `--mode rr` and `crr`, else throughput (rrul's
    /// load too).
    pub fn of_run(words: &[String]) -> Self {
        let mode = words
            .windows(2)
            .find(|w| w[0] == "--mode")
            .map(|w| w[1].as_str())
            .or_else(|| words.iter().find_map(|w| w.strip_prefix("--mode=")));
        match mode {
            Some("rr" | "crr") => Kind::Latency,
            _ => Kind::Throughput,
        }
    }
}

/// A host: a name and its wirebench server's address (`HOST[:PORT]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Its name in the file.
    pub name: String,
    /// Where its server listens, as `run` takes it.
    pub address: String,
}

/// A test of the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Test {
    /// Its name in the file.
    pub name: String,
    /// `run`'s flags, without the host.
    pub run: Vec<String>,
    /// How often each of its paths runs.
    pub every: Duration,
    /// The most a run may start after its round's time (drawn at random, so that agents do
    /// not synchronise), and the time a busy host is asked again within.
    pub slip: Duration,
    /// Whether it needs the hosts to itself.
    pub kind: Kind,
    /// What the destinations' servers are.
    pub peer: Peer,
}

/// One test from one host to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path {
    /// Index into [`Mesh::tests`].
    pub test: usize,
    /// Index into [`Mesh::hosts`]: where the test runs from.
    pub source: usize,
    /// Index into [`Mesh::hosts`]: whose server it runs against.
    pub destination: usize,
}

/// A mesh file, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mesh {
    /// The hosts, in the file's (alphabetical) order.
    pub hosts: Vec<Host>,
    /// The tests, in the file's (alphabetical) order.
    pub tests: Vec<Test>,
    /// Every path of every test.
    pub paths: Vec<Path>,
}

/// What is wrong with a mesh file, and where.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MeshError {
    /// Not TOML, or not this file's shape (an unknown key, a wrong type).
    #[error("{0}")]
    Syntax(String),
    /// A value that does not hold, at its place in the file.
    #[error("{place}: {why}")]
    Value {
        /// The key's path, as `tests.throughput.every`.
        place: String,
        /// What is wrong, with the fix where there is one.
        why: String,
    },
}

fn value(place: impl Into<String>, why: impl Into<String>) -> MeshError {
    MeshError::Value {
        place: place.into(),
        why: why.into(),
    }
}

impl Mesh {
    /// Reads and checks a mesh file's text.
    ///
    /// # Errors
    ///
    /// The text is not a mesh file, or a value in it does not hold: the error names where.
    pub fn parse(text: &str) -> Result<Self, MeshError> {
        let file: File = toml::from_str(text).map_err(|e| {
            // toml's message spans lines (the line and a caret): one line here.
            let msg = e.message().trim().to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text.as_bytes()[..s.start.min(text.len())]
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count()
                        + 1;
                    format!("line {line}: ")
                })
                .unwrap_or_default();
            MeshError::Syntax(format!("{at}{msg}"))
        })?;
        let hosts = hosts(&file)?;
        let index = |place: &str, name: &str| {
            hosts.iter().position(|h| h.name == name).ok_or_else(|| {
                value(
                    place,
                    format!("no host named {name:?} (the [hosts] table names them)"),
                )
            })
        };
        let mut groups = BTreeMap::new();
        for (name, g) in &file.groups {
            let place = format!("groups.{name}");
            let pairs = group_pairs(&place, g, &index)?;
            groups.insert(name.clone(), pairs);
        }
        if file.tests.is_empty() {
            return Err(value("tests", "no tests: add a [tests.NAME] table"));
        }
        if file.tests.len() > MAX_TESTS {
            return Err(value("tests", format!("more than {MAX_TESTS} tests")));
        }
        let mut tests = Vec::new();
        let mut paths = Vec::new();
        for (i, (name, t)) in file.tests.iter().enumerate() {
            let place = format!("tests.{name}");
            let pairs = groups.get(&t.group).ok_or_else(|| {
                value(
                    format!("{place}.group"),
                    format!(
                        "no group named {:?} (the [groups.NAME] tables name them)",
                        t.group
                    ),
                )
            })?;
            tests.push(test(&place, name, t)?);
            for &(source, destination) in pairs {
                paths.push(Path {
                    test: i,
                    source,
                    destination,
                });
            }
            if paths.len() > MAX_PATHS {
                return Err(value(
                    place,
                    format!("the mesh makes more than {MAX_PATHS} paths"),
                ));
            }
        }
        Ok(Self {
            hosts,
            tests,
            paths,
        })
    }
}

/// The hosts, checked: named, and with an address.
fn hosts(file: &File) -> Result<Vec<Host>, MeshError> {
    if file.hosts.is_empty() {
        return Err(value(
            "hosts",
            "no hosts: name them as NAME = \"ADDRESS[:PORT]\"",
        ));
    }
    if file.hosts.len() > MAX_HOSTS {
        return Err(value("hosts", format!("more than {MAX_HOSTS} hosts")));
    }
    file.hosts
        .iter()
        .map(|(name, address)| {
            let address = address.trim();
            if address.is_empty() || address.chars().any(char::is_whitespace) {
                return Err(value(
                    format!("hosts.{name}"),
                    format!("{address:?} is not an address: write HOST or HOST:PORT"),
                ));
            }
            Ok(Host {
                name: name.clone(),
                address: address.to_string(),
            })
        })
        .collect()
}

/// A group's (source, destination) pairs: every ordered pair of a mesh's members, or every
/// source against every destination; never a host against itself.
fn group_pairs(
    place: &str,
    g: &GroupEntry,
    index: &dyn Fn(&str, &str) -> Result<usize, MeshError>,
) -> Result<Vec<(usize, usize)>, MeshError> {
    let names = |key: &str, v: &[String]| -> Result<Vec<usize>, MeshError> {
        let place = format!("{place}.{key}");
        let mut out: Vec<usize> = Vec::new();
        for n in v {
            let i = index(&place, n)?;
            if out.contains(&i) {
                return Err(value(&place, format!("{n:?} is named twice")));
            }
            out.push(i);
        }
        Ok(out)
    };
    let (sources, destinations) =
        match (&g.mesh, &g.sources, &g.destinations) {
            (Some(m), None, None) => {
                let m = names("mesh", m)?;
                (m.clone(), m)
            }
            (None, Some(s), Some(d)) => (names("sources", s)?, names("destinations", d)?),
            _ => return Err(value(
                place,
                "give either mesh = [HOSTS] or both sources = [HOSTS] and destinations = [HOSTS]",
            )),
        };
    let pairs: Vec<(usize, usize)> = sources
        .iter()
        .flat_map(|&s| destinations.iter().map(move |&d| (s, d)))
        .filter(|(s, d)| s != d)
        .collect();
    if pairs.is_empty() {
        return Err(value(
            place,
            "makes no path: a host is never tested against itself",
        ));
    }
    Ok(pairs)
}

/// A test's entry, checked.
fn test(place: &str, name: &str, t: &TestEntry) -> Result<Test, MeshError> {
    let dur = |key: &str, s: &str| {
        parse_duration(s).map_err(|e| value(format!("{place}.{key}"), e.to_string()))
    };
    let every = dur("every", &t.every)?;
    if every < MIN_EVERY {
        return Err(value(
            format!("{place}.every"),
            format!("{} is too often: at least 1s", t.every),
        ));
    }
    // A tenth of the period by default, as slip.
    let slip = match &t.slip {
        Some(s) => dur("slip", s)?,
        None => every / 10,
    };
    if slip > every {
        return Err(value(
            format!("{place}.slip"),
            format!(
                "longer than every ({}): a run would overlap its next round",
                t.every
            ),
        ));
    }
    if t.run.len() > MAX_RUN_WORDS {
        return Err(value(
            format!("{place}.run"),
            format!("more than {MAX_RUN_WORDS} words"),
        ));
    }
    if let Some(w) = t
        .run
        .iter()
        .find(|w| ["-c", "--client", "-s", "--server"].contains(&w.as_str()))
    {
        return Err(value(
            format!("{place}.run"),
            format!("{w:?}: the host comes from the group; give run's flags only"),
        ));
    }
    Ok(Test {
        name: name.to_string(),
        run: t.run.clone(),
        every,
        slip,
        kind: t.kind.unwrap_or_else(|| Kind::of_run(&t.run)),
        peer: t.peer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[hosts]
one = "127.0.0.1:5201"
two = "127.0.0.2:5201"
three = "127.0.0.3:5201"

[groups.all]
mesh = ["one", "two", "three"]

[groups.out]
sources = ["one"]
destinations = ["two", "three"]

[tests.throughput]
group = "all"
run = ["-t", "2"]
every = "10s"
slip = "2s"

[tests.latency]
group = "out"
run = ["--mode", "rr", "-t", "1"]
every = "5s"
"#;

    #[test]
    fn a_mesh_makes_every_ordered_pair_and_sources_their_destinations() {
        let m = Mesh::parse(GOOD).expect("good");
        assert_eq!(m.hosts.len(), 3);
        let t = |name: &str| m.tests.iter().position(|t| t.name == name).expect("test");
        let (tp, lat) = (t("throughput"), t("latency"));
        assert_eq!(m.paths.iter().filter(|p| p.test == tp).count(), 6);
        assert_eq!(m.paths.iter().filter(|p| p.test == lat).count(), 2);
        assert!(m.paths.iter().all(|p| p.source != p.destination));
        assert_eq!(m.tests[tp].kind, Kind::Throughput);
        assert_eq!(m.tests[lat].kind, Kind::Latency);
        assert_eq!(m.tests[lat].slip, Duration::from_millis(500));
    }

    #[test]
    fn errors_name_their_place() {
        let cases = [
            (
                GOOD.replace("every = \"5s\"", "every = \"5q\""),
                "tests.latency.every",
            ),
            (
                GOOD.replace("every = \"5s\"", "every = \"100ms\""),
                "tests.latency.every",
            ),
            (
                GOOD.replace("slip = \"2s\"", "slip = \"20s\""),
                "tests.throughput.slip",
            ),
            (
                GOOD.replace("\"three\"]\n\n[groups.out]", "\"four\"]\n\n[groups.out]"),
                "groups.all.mesh",
            ),
            (
                GOOD.replace("group = \"out\"", "group = \"in\""),
                "tests.latency.group",
            ),
            (GOOD.replace("sources = [\"one\"]\n", ""), "groups.out"),
            (GOOD.replace("slip = \"2s\"", "slipp = \"2s\""), "line 18"),
            (
                GOOD.replace("run = [\"-t\", \"2\"]", "run = [\"-c\", \"x\"]"),
                "tests.throughput.run",
            ),
        ];
        for (text, place) in cases {
            let e = Mesh::parse(&text).expect_err(place).to_string();
            assert!(e.starts_with(place), "{place}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
