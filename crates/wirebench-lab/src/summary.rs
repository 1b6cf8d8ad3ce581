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
use wirebench_report::text::printable;
use wirebench_stats::Summary;

use crate::scenario::{Profile, Scenario, Sysctls};
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
    pub sysctls: BTreeMap<String, Sysctls>,
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
///
/// The window is the receiver's own: its intervals' bounds (`received_start_s`,
/// `received_end_s`), not the sender's, which end earlier (issue 45: the receiver's last
/// interval, running on through the drain, was counted as if it had ended with the
/// sender's, and two 200 ms tests on a 10 Mbit/s link read 12.5 Mbit/s). So no more is
/// counted than the link delivered in the test's time. Documents written before those keys
/// fall back to the sender's bounds.
pub fn goodput_bps(r: &Results) -> f64 {
    let Some(t) = r.test.duration_s.filter(|t| *t > 0.0) else {
        // A receiver that never reported counts as nothing received here, as its interval
        // records (none) do below.
        return r.end.received_bps.unwrap_or(0.0);
    };
    let mut bytes = 0.0;
    for i in &r.intervals {
        let b = i.received_bytes.unwrap_or(0) as f64;
        let (start, end) = match (i.received_start_s, i.received_end_s) {
            (Some(a), Some(z)) => (a, z),
            _ => (i.start_s, i.end_s),
        };
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
    /// Retransmits of the sender: TCP's segments, or the packets QUIC declared lost.
    pub retransmits: Option<Summary>,
    /// The measured tests' client process's peak resident memory, KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_max_rss_kib: Option<Summary>,
    /// A user-space stack's own packet and socket buffer memory, bytes (absent when the
    /// kernel's stack carried the tests: its socket memory is not in any process's RSS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_buffer_memory_bytes: Option<Summary>,
    /// The sysctls the profile sets, `net.ipv4.tcp_sack` = "0".
    pub settings: BTreeMap<String, String>,
    /// Trials with results (at least one measured test's): each is one value of each
    /// figure, the mean over its measured tests.
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

/// Figures a profile's row has that are not a point's (the point's are a sweep's, plus
/// `goodput_bps` and `retransmits`).
const ROW_ONLY: [&str; 2] = ["client_max_rss_kib", "stack_buffer_memory_bytes"];

/// Every figure of one measured test's results, by name.
fn test_figures(r: &Results) -> BTreeMap<String, f64> {
    let mut f: BTreeMap<String, f64> = experiment::figures(r)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    f.insert("goodput_bps".into(), goodput_bps(r));
    // A QUIC sender's are the packets its stack declared lost (each sent again).
    if let Some(tcp) = &r.end.tcp {
        f.insert("retransmits".into(), tcp.retransmits as f64);
    } else if let Some(q) = &r.end.quic {
        f.insert("retransmits".into(), q.info.lost_packets as f64);
    }
    if let Some(c) = &r.end.resources.client {
        f.insert(ROW_ONLY[0].into(), c.max_rss_kib as f64);
    }
    let sides = [&r.datapath.client, &r.datapath.server];
    if let Some(st) = sides.into_iter().flatten().find_map(|d| d.stack.as_ref()) {
        f.insert(ROW_ONLY[1].into(), st.buffer_memory_bytes as f64);
    }
    f
}

/// One profile's trials as the summary counts them: each trial that has results is one
/// value of each figure, the mean over its measured tests (issue 45: a scenario of two
/// tests counted each trial twice, and its SD and CI were over tests).
#[derive(Default)]
struct ProfileTrials {
    /// Trials that did not run, and measured tests without results.
    failed: u64,
    /// Measured tests that ended incomplete but have results.
    incomplete: u64,
    /// Per trial with results: each figure's mean over its measured tests.
    trials: Vec<BTreeMap<String, f64>>,
    /// Every measured test's results, with its trial's file.
    results: Vec<(String, Results)>,
}

impl ProfileTrials {
    fn of(here: &[&TrialFile], profile: &str) -> Self {
        let mut out = Self::default();
        for t in here {
            let TrialFile::Done(doc) = t else {
                out.failed += 1;
                continue;
            };
            let mut sums: BTreeMap<String, (f64, u32)> = BTreeMap::new();
            for test in doc.tests.iter().filter(|t| t.measured) {
                let r = test
                    .result
                    .as_ref()
                    .filter(|r| r.is_object())
                    .and_then(|r| serde_json::from_value::<Results>(r.clone()).ok());
                let Some(r) = r else {
                    out.failed += 1;
                    continue;
                };
                // A figure a test lacks (a side never reported) counts in no mean.
                for (k, v) in test_figures(&r) {
                    let e = sums.entry(k).or_insert((0.0, 0));
                    *e = (e.0 + v, e.1 + 1);
                }
                if test.error.is_some() {
                    out.incomplete += 1;
                }
                out.results.push((trial_file(doc.trial, profile), r));
            }
            if !sums.is_empty() {
                let means = sums
                    .into_iter()
                    .map(|(k, (sum, n))| (k, sum / f64::from(n)))
                    .collect();
                out.trials.push(means);
            }
        }
        out
    }

    /// The statistics of `figure` over the trials, each value divided by `scale`.
    fn summary(&self, figure: &str, scale: f64) -> Option<Summary> {
        let values: Vec<f64> = self
            .trials
            .iter()
            .filter_map(|t| t.get(figure).map(|v| v / scale))
            .collect();
        wirebench_stats::summarize(&values)
    }
}

/// Summarizes the trials: `done` holds each trial's file with the index of its profile in
/// `profiles`. Each trial is one value of each figure (the mean over its measured tests):
/// `trials`, the SD and the CI are over trials.
pub fn summarize(
    sc: &Scenario,
    profiles: &[Profile],
    done: &[(usize, TrialFile)],
) -> ScenarioSummary {
    let mut rows = Vec::new();
    let mut all = Vec::new();
    for (pi, p) in profiles.iter().enumerate() {
        let mut here: Vec<&TrialFile> = done
            .iter()
            .filter(|(i, _)| *i == pi)
            .map(|(_, t)| t)
            .collect();
        here.sort_by_key(|t| t.trial());
        let trials = ProfileTrials::of(&here, &p.name);
        rows.push(ProfileRow {
            failed: trials.failed,
            goodput_kbps: trials.summary("goodput_bps", 1e3),
            incomplete: trials.incomplete,
            profile: p.name.clone(),
            received_kbps: trials.summary("received_bps", 1e3),
            retransmits: trials.summary("retransmits", 1.0),
            client_max_rss_kib: trials.summary(ROW_ONLY[0], 1.0),
            stack_buffer_memory_bytes: trials.summary(ROW_ONLY[1], 1.0),
            settings: p
                .sysctls()
                .into_iter()
                .map(|(k, v)| (k.replace('/', "."), v))
                .collect(),
            trials: trials.trials.len() as u64,
        });
        let files: Vec<String> = here
            .iter()
            .map(|t| trial_file(t.trial(), &p.name))
            .collect();
        all.push((files, trials));
    }
    // The report crate's experiment summary, one point per profile (no swept parameter),
    // for its offered rate; then the figures over trials, the profile's name and its trial
    // files (failed ones too).
    let runs: Vec<Vec<(String, Results)>> = all.iter().map(|(_, t)| t.results.clone()).collect();
    let mut experiment = experiment::summarize_experiment(&vec![Vec::new(); profiles.len()], &runs);
    for ((point, p), (files, trials)) in experiment.points.iter_mut().zip(profiles).zip(all) {
        point.point = BTreeMap::from([("profile".to_owned(), p.name.clone())]);
        point.offered_bps = None;
        point.trials = files.len() as u64;
        point.failed = point.trials.saturating_sub(trials.trials.len() as u64);
        point.files = files;
        let names: std::collections::BTreeSet<&String> =
            trials.trials.iter().flat_map(|t| t.keys()).collect();
        point.figures = names
            .into_iter()
            .filter(|k| !ROW_ONLY.contains(&k.as_str()))
            .filter_map(|k| Some((k.clone(), trials.summary(k, 1.0)?)))
            .collect();
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

    /// The table printed at the end and saved as `summary.txt`: goodput per profile, the
    /// sender's retransmits, and memory: the client's peak RSS and, for a user-space stack,
    /// the buffer memory it holds itself (a kernel stack's is in no process's RSS: "-").
    pub fn table(&self) -> String {
        let line = |c: [&str; 9]| {
            format!(
                "{:<16} {:>6} {:>10} {:>10} {:>10} {:>9} {:>12} {:>14} {:>15}\n",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]
            )
        };
        let mut s = line([
            "profile",
            "trials",
            "min kbit/s",
            "mean",
            "max",
            "SD",
            "retrans mean",
            "peak RSS MiB",
            "stack buf KiB",
        ]);
        for r in &self.profiles {
            let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
            let g = r.goodput_kbps.as_ref();
            let mean = |v: &Option<Summary>, d: f64| f(v.as_ref().map(|v| v.mean / d));
            s += &line([
                // Read back from files (a resumed or merged run): shown, never obeyed.
                &printable(&r.profile),
                &r.trials.to_string(),
                &f(g.map(|g| g.min)),
                &f(g.map(|g| g.mean)),
                &f(g.map(|g| g.max)),
                &f(g.map(|g| g.stddev)),
                &mean(&r.retransmits, 1.0),
                &mean(&r.client_max_rss_kib, 1024.0),
                &mean(&r.stack_buffer_memory_bytes, 1024.0),
            ]);
        }
        // A profile whose every test failed shows "0" trials and no figures: the line
        // below says so, rather than leaving an empty row to be taken for a result.
        let failed: Vec<String> = self
            .profiles
            .iter()
            .filter(|r| r.failed > 0)
            .map(|r| format!("{} {}", printable(&r.profile), r.failed))
            .collect();
        if !failed.is_empty() {
            let n: u64 = self.profiles.iter().map(|r| r.failed).sum();
            s += &format!(
                "failed: {n} ({}): trials that did not run, or measured tests without results\n",
                failed.join(", ")
            );
        }
        s
    }
}

/// Most distinct reasons a failure line lists, and the longest each is shown.
const MAX_REASONS: usize = 5;
const MAX_REASON_CHARS: usize = 200;

/// Why the failures counted in the summary's `failed` happened: each distinct reason (the
/// error of a trial that did not run; the last `error:` line, or else the last line, a
/// measured test without results said)
/// with how many times, most frequent first. Printable and at most 200 characters each.
pub fn failure_reasons(done: &[(usize, TrialFile)]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut add = |text: &str| {
        // wirebench says why on its `error:` line; usage help may follow it.
        let mut lines = text.lines().rev().filter(|l| !l.trim().is_empty());
        let last = (lines.clone())
            .find(|l| l.trim_start().starts_with("error:"))
            .or_else(|| lines.next())
            .unwrap_or("");
        let mut reason: String = printable(last.trim())
            .chars()
            .take(MAX_REASON_CHARS)
            .collect();
        if reason.is_empty() {
            reason = "no results and no message".into();
        }
        *counts.entry(reason).or_default() += 1;
    };
    for (_, t) in done {
        match t {
            TrialFile::Failed(f) => add(&f.error),
            TrialFile::Done(doc) => {
                for test in doc.tests.iter().filter(|t| t.measured) {
                    let results = test
                        .result
                        .as_ref()
                        .is_some_and(|r| serde_json::from_value::<Results>(r.clone()).is_ok());
                    if !results {
                        add(test.error.as_deref().unwrap_or(""));
                    }
                }
            }
        }
    }
    let mut reasons: Vec<(String, usize)> = counts.into_iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    reasons
}

/// The line under the table that says why tests failed: `why: REASON (×N); ...`, the most
/// frequent reasons first; `None` when none failed.
pub fn reasons_line(reasons: &[(String, usize)]) -> Option<String> {
    if reasons.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = reasons
        .iter()
        .take(MAX_REASONS)
        .map(|(r, n)| format!("{r} (×{n})"))
        .collect();
    if reasons.len() > MAX_REASONS {
        parts.push(format!(
            "and {} other reasons (see trials/)",
            reasons.len() - MAX_REASONS
        ));
    }
    Some(format!("why: {}\n", parts.join("; ")))
}

/// A scenario run's `experiment.json`: how it was made, as a sweep's says it (keys sorted).
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentInfo<'a> {
    /// The command line.
    pub command: &'a [String],
    /// Facts of the machine a rerun should match.
    pub machine: &'a wirebench_report::meta::Machine,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A results document of a TCP test of `duration_s` with these intervals (start, end,
    /// received bytes) and retransmits.
    fn result(duration_s: f64, intervals: &[(f64, f64, u64)], retransmits: u64) -> Value {
        let received: u64 = intervals.iter().map(|i| i.2).sum();
        let end_s = intervals.last().map_or(0.0, |i| i.1);
        let totals = json!({"bytes": received, "messages": received / 1000, "duration_s": end_s});
        json!({
            "schema": 1,
            "wirebench": "wirebench 0.1.0",
            "server": "10.77.3.2:5300",
            "test": {
                "protocol": "tcp", "mechanism": "stream", "direction": "forward",
                "size": 131072, "duration_s": duration_s, "rate_bps": 0, "rate_pps": 0,
                "gap_s": 0.0, "streams": 1, "interval_s": 1.0, "drain_s": 10.0,
                "ack_timeout_s": 0.2
            },
            "datapath": {"client": null, "server": null},
            "intervals": intervals.iter().map(|(s, e, b)| json!({
                "start_s": s, "end_s": e, "sent_bytes": b, "sent_messages": b / 1000,
                "received_bytes": b, "received_messages": b / 1000,
                "sent_bps": *b as f64 * 8.0 / (e - s), "received_bps": *b as f64 * 8.0 / (e - s)
            })).collect::<Vec<_>>(),
            "end": {
                "duration_s": end_s, "sent": totals, "received": totals,
                "sent_bps": received as f64 * 8.0 / end_s,
                "received_bps": received as f64 * 8.0 / end_s,
                "retransmits": 0, "local_drops": 0,
                "tcp": {"retransmits": retransmits, "rtt_us": 100000, "rttvar_us": 5000,
                        "snd_cwnd_segments": 10, "snd_mss_bytes": 1448},
                "resources": {"client": {"cpu_user_s": 0.1, "cpu_system_s": 0.2,
                                          "cpu_percent": 10.0, "max_rss_kib": 7000 + retransmits},
                              "server": null}
            }
        })
    }

    /// [`result`] as a user-space stack's client would have written it.
    fn user_stack(mut r: Value) -> Value {
        r["datapath"]["client"] = json!({
            "io": "smoltcp send/recv over TUN", "batch": 1,
            "send_buffer_bytes": 65536, "recv_buffer_bytes": 65536,
            "stack": {"name": "smoltcp", "version": "0.12.0", "device": "wbsmol0",
                      "address": "10.77.0.101/24", "mtu_bytes": 1500, "mss_bytes": 1460,
                      "congestion_control": "cubic", "send_buffer_bytes": 65536,
                      "recv_buffer_bytes": 65536, "buffer_memory_bytes": 132572}
        });
        r
    }

    fn test(name: &str, measured: bool, result: Option<Value>, error: Option<&str>) -> TestOutcome {
        TestOutcome {
            name: name.into(),
            from: if measured { "h1" } else { "h4" }.into(),
            to: if measured { "h2" } else { "h3" }.into(),
            measured,
            result,
            error: error.map(str::to_owned),
        }
    }

    fn doc(profile: &str, trial: u32, measured: TestOutcome) -> TrialFile {
        TrialFile::Done(TrialDoc {
            scenario: "mini".into(),
            profile: profile.into(),
            trial,
            time_scale: 1.0,
            sysctls: BTreeMap::new(),
            tests: vec![
                test(
                    "cross",
                    false,
                    Some(result(2.0, &[(0.0, 2.0, 500_000)], 9)),
                    None,
                ),
                measured,
            ],
            links: Vec::new(),
        })
    }

    const SCENARIO: &str = r#"
name = "mini"
description = "two stacks over a 10 Mbit/s bottleneck"
[[link]]
a = "h1"
b = "h2"
rate = "10M"
[[link]]
a = "h4"
b = "h3"
[[profile]]
name = "reno-nosack"
cc = "reno"
sack = false
[[profile]]
name = "cubic-sack"
cc = "cubic"
sack = true
[[test]]
name = "cross"
from = "h4"
to = "h3"
measured = false
[[test]]
name = "measured"
from = "h1"
to = "h2"
args = ["-t", "2s"]
"#;

    /// The fixed trials: reno-nosack has two good trials and one incomplete (data still
    /// missing after the drain, its figures counted); cubic-sack one good trial, one that
    /// did not run, and one whose measured test printed nothing.
    fn trials() -> Vec<(usize, TrialFile)> {
        let r = |a: u64, b: u64, drain: u64, rt: u64| {
            Some(result(
                2.0,
                &[(0.0, 1.0, a), (1.0, 2.0, b), (2.0, 3.0, drain)],
                rt,
            ))
        };
        vec![
            (
                0,
                doc(
                    "reno-nosack",
                    1,
                    test("measured", true, r(120_000, 130_000, 0, 3), None),
                ),
            ),
            (
                0,
                doc(
                    "reno-nosack",
                    0,
                    test("measured", true, r(100_000, 110_000, 5_000, 4), None),
                ),
            ),
            (
                0,
                doc(
                    "reno-nosack",
                    2,
                    test(
                        "measured",
                        true,
                        r(90_000, 95_000, 40_000, 11),
                        Some("error: test incomplete"),
                    ),
                ),
            ),
            (
                1,
                doc(
                    "cubic-sack",
                    0,
                    test(
                        "measured",
                        true,
                        r(200_000, 210_000, 0, 1).map(user_stack),
                        None,
                    ),
                ),
            ),
            (
                1,
                TrialFile::Failed(FailedTrial {
                    profile: "cubic-sack".into(),
                    trial: 1,
                    error: "building the network: Operation not permitted (os error 1)".into(),
                }),
            ),
            (
                1,
                doc(
                    "cubic-sack",
                    2,
                    test("measured", true, None, Some("error: no route")),
                ),
            ),
        ]
    }

    #[test]
    fn failures_are_counted_under_the_table_with_their_reasons() {
        let reasons = failure_reasons(&trials());
        assert_eq!(
            reasons_line(&reasons).as_deref(),
            Some(
                "why: building the network: Operation not permitted (os error 1) (×1); \
                 error: no route (×1)\n"
            )
        );
        assert_eq!(reasons_line(&[]), None);
        // A test's stderr: its last line says why; control characters are escaped.
        let failed = vec![
            (
                0,
                doc(
                    "p",
                    0,
                    test("m", true, None, Some("warning\nerror: cu\u{1b}[2J")),
                ),
            ),
            (
                0,
                doc("p", 1, test("m", true, None, Some("error: cu\u{1b}[2J"))),
            ),
            (0, doc("p", 2, test("m", true, None, None))),
            (
                0,
                doc(
                    "p",
                    4,
                    test(
                        "m",
                        true,
                        None,
                        Some("error: bad flag\n\nUsage: x\n\ntry '--help'."),
                    ),
                ),
            ),
            (0, doc("p", 3, test("cross", false, None, Some("ignored")))),
        ];
        assert_eq!(
            failure_reasons(&failed),
            [
                ("error: cu\\u{1b}[2J".to_owned(), 2),
                ("error: bad flag".to_owned(), 1),
                ("no results and no message".to_owned(), 1)
            ]
        );
        let sc = Scenario::parse(
            "name = \"s\"\n[[link]]\na = \"a\"\nb = \"b\"\n[[test]]\nfrom = \"a\"\nto = \"b\"\n",
        )
        .unwrap();
        let p = Profile {
            name: "p".into(),
            ..Profile::default()
        };
        let table = summarize(&sc, &[p], &failed).table();
        assert!(
            table.ends_with(
                "failed: 4 (p 4): trials that did not run, or measured tests without results\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn goodput_counts_what_was_read_within_the_test_only() {
        let r = |duration: f64, intervals: &[(f64, f64, u64)]| {
            let v = result(duration, intervals, 0);
            goodput_bps(&serde_json::from_value(v).expect("a results document"))
        };
        // 3 s of 1000 bytes each, then a drain the window leaves out.
        let full = [
            (0.0, 1.0, 1000),
            (1.0, 2.0, 1000),
            (2.0, 3.0, 1000),
            (3.0, 4.0, 5000),
        ];
        assert_eq!(r(3.0, &full), 8000.0);
        // A window that ends inside an interval takes its share.
        assert_eq!(r(2.5, &full[..3]), 2500.0 * 8.0 / 2.5);
        // A test by size has no window: the whole transfer's rate.
        assert_eq!(r(0.0, &full[..1]), 8000.0);
    }

    /// Issue 45: `-t 4500ms` over 2 Mbit/s. The sender's last interval is 4.0–4.787 s; the
    /// receiver's, holding the same bytes, 4.0–5.0 s. Counted on the sender's bounds the
    /// goodput read 1,986 kbit/s, over the 1,931 a 2 Mbit/s link carries of TCP payload.
    #[test]
    fn goodput_is_counted_on_the_receivers_own_clock() {
        let sender = [
            (0.0, 1.0, 241_440),
            (1.0, 2.0, 241_816),
            (2.0, 3.0, 240_368),
            (3.0, 4.0, 241_816),
            (4.0, 4.787, 238_920),
        ];
        let mut v = result(4.5, &sender, 0);
        let old: Results = serde_json::from_value(v.clone()).expect("a document");
        assert!(goodput_bps(&old) > 1.98e6, "{}", goodput_bps(&old));
        for (i, iv) in v["intervals"]
            .as_array_mut()
            .expect("intervals")
            .iter_mut()
            .enumerate()
        {
            iv["received_start_s"] = json!(i as f64);
            iv["received_end_s"] = json!(i as f64 + 1.0);
        }
        let r: Results = serde_json::from_value(v).expect("a document");
        let got = goodput_bps(&r);
        let want = (965_440.0 + 238_920.0 / 2.0) * 8.0 / 4.5;
        assert!((got - want).abs() < 1e-6, "{got} against {want}");
        assert!(got <= 2e6 * 1448.0 / 1500.0, "{got}");
    }

    /// Issue 45: two measured tests in one trial are one trial, whose figures are their
    /// mean; the SD is over trials; `points[].trials` agrees with the row.
    #[test]
    fn two_tests_of_one_trial_are_one_trial() {
        let text = SCENARIO.replace(
            "[[test]]\nname = \"cross\"",
            "[[test]]\nname = \"second\"\nfrom = \"h1\"\nto = \"h2\"\n[[test]]\nname = \"cross\"",
        );
        let sc = Scenario::parse(&text).expect("scenario");
        let p = Profile {
            name: "p".into(),
            ..Profile::default()
        };
        let two = |trial: u32, a: u64, b: u64| {
            let t = |n: &str, bytes: u64| {
                let r = result(1.0, &[(0.0, 1.0, bytes)], 2);
                test(n, true, Some(r), None)
            };
            let TrialFile::Done(mut d) = doc("p", trial, t("measured", a)) else {
                unreachable!()
            };
            d.tests.push(t("second", b));
            (0, TrialFile::Done(d))
        };
        let s = summarize(&sc, std::slice::from_ref(&p), &[two(0, 1000, 3000)]);
        let row = &s.profiles[0];
        assert_eq!(row.trials, 1);
        let g = row.goodput_kbps.as_ref().expect("goodput");
        assert_eq!((g.count, g.mean, g.stddev), (1, 16.0, 0.0));
        let point = &s.experiment.points[0];
        assert_eq!((point.trials, point.failed), (1, 0));
        assert_eq!(point.figures["goodput_bps"].count, 1);
        // Two trials: the SD of their means (16 and 32 kbit/s), not of four tests.
        let s = summarize(&sc, &[p], &[two(0, 1000, 3000), two(1, 3000, 5000)]);
        let g = s.profiles[0].goodput_kbps.as_ref().expect("goodput");
        assert_eq!((s.profiles[0].trials, g.count, g.mean), (2, 2, 24.0));
        let sd = g.stddev;
        assert!((sd - 8.0 * 2f64.sqrt()).abs() < 1e-9, "{sd}");
        assert_eq!(s.experiment.points[0].trials, 2);
    }

    #[test]
    fn trial_files_read_back_as_written() {
        for (_, t) in trials() {
            let text = serde_json::to_string(&t).expect("serializes");
            let back: TrialFile = serde_json::from_str(&text).expect("reads back");
            assert_eq!(back, t);
        }
    }

    /// `summary.json`, `summary.csv` and `experiment.json` are a contract (plot, report and
    /// people's scripts read them): their keys and values for a fixed set of trials.
    #[test]
    fn the_summary_files_keep_their_keys_and_values() {
        let sc = Scenario::parse(SCENARIO).expect("scenario");
        let summary = summarize(&sc, &sc.profiles(), &trials());
        let json = String::from_utf8(summary.to_json().expect("json")).expect("utf-8");
        let v: Value = serde_json::from_str(&json).expect("json");
        let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
        assert_eq!(
            keys,
            ["description", "knees", "points", "profiles", "scenario"]
        );
        assert_eq!(v["scenario"], "mini");
        assert_eq!(v["knees"], json!([]));
        let reno = &v["profiles"][0];
        assert_eq!(
            reno.as_object().expect("row").keys().collect::<Vec<_>>(),
            [
                "client_max_rss_kib",
                "failed",
                "goodput_kbps",
                "incomplete",
                "profile",
                "received_kbps",
                "retransmits",
                "settings",
                "trials"
            ]
        );
        assert_eq!(
            (
                &reno["profile"],
                &reno["trials"],
                &reno["failed"],
                &reno["incomplete"]
            ),
            (&json!("reno-nosack"), &json!(3), &json!(0), &json!(1))
        );
        assert_eq!(
            reno["settings"],
            json!({"net.ipv4.tcp_congestion_control": "reno", "net.ipv4.tcp_sack": "0"})
        );
        // Goodput: the bytes read within the 2 s, over 2 s, in kbit/s.
        assert_eq!(reno["goodput_kbps"]["min"], json!(740.0));
        assert_eq!(reno["goodput_kbps"]["max"], json!(1000.0));
        assert_eq!(reno["retransmits"]["mean"], json!(6.0));
        let cubic = &v["profiles"][1];
        assert_eq!((&cubic["trials"], &cubic["failed"]), (&json!(1), &json!(2)));
        // Memory: the client's peak RSS for every profile, a user-space stack's own buffers
        // only where one carried the test.
        assert_eq!(reno["client_max_rss_kib"]["mean"], json!(7006.0));
        assert_eq!(reno.get("stack_buffer_memory_bytes"), None);
        assert_eq!(cubic["stack_buffer_memory_bytes"]["mean"], json!(132_572.0));
        let point = &v["points"][1];
        assert_eq!(
            point.as_object().expect("point").keys().collect::<Vec<_>>(),
            [
                "failed",
                "figures",
                "files",
                "offered_bps",
                "point",
                "trials"
            ]
        );
        assert_eq!(point["point"], json!({"profile": "cubic-sack"}));
        assert_eq!((&point["trials"], &point["failed"]), (&json!(3), &json!(2)));
        assert_eq!(
            point["files"],
            json!([
                "trials/0000-cubic-sack.json",
                "trials/0001-cubic-sack.json",
                "trials/0002-cubic-sack.json"
            ])
        );
        assert_eq!(point["offered_bps"], Value::Null);
        assert_eq!(point["figures"]["goodput_bps"]["mean"], json!(1_640_000.0));
        assert_eq!(v["points"][0]["figures"]["received_bps"]["count"], json!(3));
        // The whole files, pinned (checked once against the binary's summary before it moved
        // here: the same bytes).
        pinned("summary.json", &json);
        pinned("summary.csv", &summary.to_csv());
        pinned("summary.txt", &summary.table());
        // Read back as plot and report read it.
        let e: ExperimentSummary = serde_json::from_str(&json).expect("an experiment summary");
        assert!(e.is_scenario());
        let back: ScenarioSummary = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back.profiles, summary.profiles);

        let machine = wirebench_report::meta::Machine {
            kernel: "6.1.0".into(),
            cpu: "test".into(),
            cores: 2,
        };
        let info = ExperimentInfo {
            command: &[
                "wirebench".into(),
                "lab".into(),
                "scenario".into(),
                "mini.toml".into(),
            ],
            machine: &machine,
            ordered: true,
            parallel: 2,
            repeat: 3,
            scenario: &sc,
            server: "lab scenario mini".into(),
            time_scale: 1.0,
            wirebench: "wirebench 0.1.0".into(),
        };
        let e: Value = serde_json::from_slice(&info.to_json().expect("json")).expect("json");
        assert_eq!(
            e.as_object().expect("object").keys().collect::<Vec<_>>(),
            [
                "command",
                "machine",
                "ordered",
                "parallel",
                "repeat",
                "scenario",
                "server",
                "time_scale",
                "wirebench"
            ]
        );
        assert_eq!(e["scenario"]["name"], "mini");
        assert_eq!(e["scenario"]["link"][0]["rate"], "10M");
        assert_eq!(e["scenario"]["profile"][1]["sack"], true);
        assert_eq!(e["scenario"]["test"][1]["args"], json!(["-t", "2s"]));
        pinned(
            "experiment.json",
            &String::from_utf8(info.to_json().expect("json")).expect("utf-8"),
        );
    }

    /// Compares `text` with `tests/data/scenario-summary/NAME`; with `WIREBENCH_BLESS` set,
    /// writes it there instead (then review the diff).
    fn pinned(name: &str, text: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/scenario-summary")
            .join(name);
        if std::env::var_os("WIREBENCH_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
            std::fs::write(&path, text).expect("bless");
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            text, want,
            "{name} changed; with WIREBENCH_BLESS=1 it is rewritten"
        );
    }
}
