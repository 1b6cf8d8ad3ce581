//! What a scenario's trials leave on disk, and their summary.
//!
//! Each trial is one JSON file ([`TrialFile`]); the summary ([`ScenarioSummary`]) is the
//! report crate's experiment summary (one point per stack profile, so that `plot` and
//! `report` read a scenario's directory as they read a sweep's) with a row per profile
//! beside it. `summary.json`, `summary.csv` and `experiment.json` are a contract: their
//! keys and values stay (see the test at the bottom).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wirebench_proto::results::Results;
use wirebench_report::experiment::{self, ExperimentSummary};
use wirebench_stats::Summary;

use crate::scenario::{Profile, Scenario};
use crate::topo::LinkReport;

/// One test of a trial, as it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestOutcome {
    /// Its name.
    pub name: String,
    /// The client host.
    pub from: String,
    /// The server host.
    pub to: String,
    /// Whether it counts in the summary (false: cross traffic).
    pub measured: bool,
    /// Its results document as `wirebench run --json` printed it (kept whole), if any.
    pub result: Option<serde_json::Value>,
    /// What it said on stderr when it did not exit 0.
    pub error: Option<String>,
}

/// One link's report in a trial, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedLinkReport {
    /// The link, `a-b`.
    pub link: String,
    /// What it did.
    pub report: LinkReport,
}

/// A trial that ran (some of its tests may still have failed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialDoc {
    /// The scenario's name.
    pub scenario: String,
    /// The stack profile.
    pub profile: String,
    /// The trial's number, from 0.
    pub trial: u32,
    /// How the tests' durations were scaled.
    pub time_scale: f64,
    /// Per host the profile went to: each sysctl as read back.
    pub sysctls: BTreeMap<String, BTreeMap<String, String>>,
    /// The tests, in the scenario's order.
    pub tests: Vec<TestOutcome>,
    /// The links, in the scenario's order.
    pub links: Vec<NamedLinkReport>,
}

/// A trial that could not run at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTrial {
    /// The stack profile.
    pub profile: String,
    /// The trial's number.
    pub trial: u32,
    /// Why.
    pub error: String,
}

/// A trial's file, `trials/NNNN-PROFILE.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TrialFile {
    /// It ran.
    Done(TrialDoc),
    /// It could not run.
    Failed(FailedTrial),
}

impl TrialFile {
    /// The trial's number.
    pub fn trial(&self) -> u32 {
        match self {
            Self::Done(d) => d.trial,
            Self::Failed(f) => f.trial,
        }
    }
}

/// The file name of a trial, relative to the run's directory.
pub fn trial_file(trial: u32, profile: &str) -> String {
    format!("trials/{trial:04}-{profile}.json")
}

/// Goodput as the scenario files define it: the bytes the receiving application read during
/// the test's duration, over that duration, from the receiver's interval records (bit/s).
/// Data still in flight or in the sender's socket buffer when the time is up (a drain that
/// can take longer than the test on a lossy path) does not count. A test set by size rather
/// than time has no window: its whole transfer counts (`end.received_bps`).
pub fn goodput_bps(r: &Results) -> f64 {
    let Some(t) = r.test.duration_s.filter(|t| *t > 0.0) else {
        return r.end.received_bps;
    };
    let mut bytes = 0.0;
    for i in &r.intervals {
        let (start, end, b) = (i.start_s, i.end_s, i.received_bytes as f64);
        if end <= t + 1e-6 {
            bytes += b;
        } else if start < t && end > start {
            // The interval the window ends in: its share, as if received evenly.
            bytes += b * (t - start) / (end - start);
        }
    }
    bytes * 8.0 / t
}

/// A profile's row of the summary: goodput of its measured tests ([`goodput_bps`]), the
/// receiver's rate over the whole transfer (`end.received_bps`, the drain included) and the
/// sender's TCP retransmits, over the trials. Fields in the order the file has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileRow {
    /// Trials that did not run, and measured tests without results.
    pub failed: u64,
    /// Goodput, kbit/s.
    pub goodput_kbps: Option<Summary>,
    /// Measured tests that ended incomplete but have results (they count).
    pub incomplete: u64,
    /// The profile's name.
    pub profile: String,
    /// The receiver's whole-transfer rate, kbit/s.
    pub received_kbps: Option<Summary>,
    /// TCP retransmits of the sender.
    pub retransmits: Option<Summary>,
    /// The sysctls the profile sets, `net.ipv4.tcp_sack` = "0".
    pub settings: BTreeMap<String, String>,
    /// Measured tests with results.
    pub trials: u64,
}

/// A scenario's `summary.json`: the profiles' rows, and the experiment summary (`points`,
/// one per profile, whose figures are a sweep's plus `goodput_bps` and `retransmits`; and
/// `knees`, none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    /// What the scenario reproduces.
    pub description: Option<String>,
    /// The experiment summary: `points` and `knees`.
    #[serde(flatten)]
    pub experiment: ExperimentSummary,
    /// One row per profile.
    pub profiles: Vec<ProfileRow>,
    /// The scenario's name.
    pub scenario: String,
}

/// Summarizes the trials: `done` holds each trial's file with the index of its profile in
/// `profiles`.
pub fn summarize(
    sc: &Scenario,
    profiles: &[Profile],
    done: &[(usize, TrialFile)],
) -> ScenarioSummary {
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let mut extra = Vec::new();
    for (pi, p) in profiles.iter().enumerate() {
        let mut here: Vec<&TrialFile> = done
            .iter()
            .filter(|(i, _)| *i == pi)
            .map(|(_, t)| t)
            .collect();
        here.sort_by_key(|t| t.trial());
        let (mut failed, mut incomplete) = (0u64, 0u64);
        let mut results = Vec::new();
        let (mut goodput, mut received, mut retransmits) = (Vec::new(), Vec::new(), Vec::new());
        for t in &here {
            let TrialFile::Done(doc) = t else {
                failed += 1;
                continue;
            };
            for test in doc.tests.iter().filter(|t| t.measured) {
                let r = test
                    .result
                    .as_ref()
                    .filter(|r| r.is_object())
                    .and_then(|r| serde_json::from_value::<Results>(r.clone()).ok());
                let Some(r) = r else {
                    failed += 1;
                    continue;
                };
                goodput.push(goodput_bps(&r));
                received.push(r.end.received_bps);
                if let Some(tcp) = &r.end.tcp {
                    retransmits.push(tcp.retransmits as f64);
                }
                if test.error.is_some() {
                    incomplete += 1;
                }
                results.push((trial_file(doc.trial, &p.name), r));
            }
        }
        let per = |v: &[f64], d: f64| {
            wirebench_stats::summarize(&v.iter().map(|x| x / d).collect::<Vec<_>>())
        };
        rows.push(ProfileRow {
            failed,
            goodput_kbps: per(&goodput, 1e3),
            incomplete,
            profile: p.name.clone(),
            received_kbps: per(&received, 1e3),
            retransmits: per(&retransmits, 1.0),
            settings: p
                .sysctls()
                .into_iter()
                .map(|(k, v)| (k.replace('/', "."), v))
                .collect(),
            trials: goodput.len() as u64,
        });
        extra.push((
            here.len() as u64,
            here.iter()
                .map(|t| trial_file(t.trial(), &p.name))
                .collect::<Vec<_>>(),
            [("goodput_bps", goodput), ("retransmits", retransmits)],
        ));
        runs.push(results);
    }
    // The report crate's experiment summary, one point per profile (no swept parameter);
    // then what only a scenario has: the profile's name, goodput and retransmits, and its
    // trial files (failed ones too).
    let mut experiment = experiment::summarize_experiment(&vec![Vec::new(); profiles.len()], &runs);
    for ((point, p), (trials, files, figures)) in
        experiment.points.iter_mut().zip(profiles).zip(extra)
    {
        point.point = BTreeMap::from([("profile".to_owned(), p.name.clone())]);
        point.offered_bps = None;
        point.failed = trials.saturating_sub(point.trials);
        point.trials = trials;
        point.files = files;
        for (name, values) in figures {
            if let Some(s) = wirebench_stats::summarize(&values) {
                point.figures.insert(name.to_owned(), s);
            }
        }
    }
    ScenarioSummary {
        description: sc.description.clone(),
        experiment,
        profiles: rows,
        scenario: sc.name.clone(),
    }
}

impl ScenarioSummary {
    /// `summary.json`: keys sorted, as the file always had them.
    ///
    /// # Errors
    ///
    /// A figure serde_json cannot write (not a finite number is written as null).
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec_pretty(&serde_json::to_value(self)?)
    }

    /// `summary.csv`: the experiment's CSV, a row per profile.
    pub fn to_csv(&self) -> String {
        experiment::summary_csv(&self.experiment)
    }

    /// The table printed at the end and saved as `summary.txt`: goodput per profile.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<16} {:>6} {:>10} {:>10} {:>10} {:>9} {:>12}\n",
            "profile", "trials", "min kbit/s", "mean", "max", "SD", "retrans mean"
        );
        for r in &self.profiles {
            let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
            let g = r.goodput_kbps.as_ref();
            s += &format!(
                "{:<16} {:>6} {:>10} {:>10} {:>10} {:>9} {:>12}\n",
                r.profile,
                r.trials,
                f(g.map(|g| g.min)),
                f(g.map(|g| g.mean)),
                f(g.map(|g| g.max)),
                f(g.map(|g| g.stddev)),
                f(r.retransmits.as_ref().map(|r| r.mean)),
            );
        }
        s
    }
}

/// A scenario run's `experiment.json`: how it was made, as a sweep's says it (keys sorted).
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentInfo<'a> {
    /// The command line.
    pub command: &'a [String],
    /// Facts of the machine a rerun should match.
    pub machine: &'a serde_json::Value,
    /// Trials interleave the profiles in a fixed order.
    pub ordered: bool,
    /// Copies of the network at once.
    pub parallel: u32,
    /// Trials per profile.
    pub repeat: u32,
    /// The scenario as read.
    pub scenario: &'a Scenario,
    /// `lab scenario NAME`.
    pub server: String,
    /// How the tests' durations were scaled.
    pub time_scale: f64,
    /// The tool's version, `wirebench X.Y.Z`.
    pub wirebench: String,
}

impl ExperimentInfo<'_> {
    /// `experiment.json`, keys sorted.
    ///
    /// # Errors
    ///
    /// As serde_json's.
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec_pretty(&serde_json::to_value(self)?)
    }
}
