//! The summary of an experiment's trials (`summary.json`): statistics of every figure per
//! grid point, and the knee of each rate series.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::results::Results;
use wirebench_stats::{knee, summarize, Summary};

use super::plan::Point;

/// The figures a trial yields, by name (only those it has: a figure a side never reported
/// is left out, so it counts in no mean rather than as 0).
pub fn figures(r: &Results) -> BTreeMap<&'static str, f64> {
    let e = &r.end;
    let mut f = BTreeMap::new();
    let mut put = |name, v: Option<f64>| {
        if let Some(v) = v {
            f.insert(name, v);
        }
    };
    put("sent_bps", e.sent_bps);
    put("received_bps", e.received_bps);
    put("duration_s", Some(e.duration_s));
    put("sent_bytes", e.sent.bytes.map(|b| b as f64));
    put("sent_messages", e.sent.messages.map(|m| m as f64));
    put("received_bytes", e.received.bytes.map(|b| b as f64));
    put("received_messages", e.received.messages.map(|m| m as f64));
    put("received_duration_s", e.received.duration_s);
    if let (Some(sent), Some(got)) = (e.sent.bytes, e.received.bytes) {
        if sent > 0 {
            put("delivered_fraction", Some(got as f64 / sent as f64));
        }
    }
    if let Some(u) = &e.udp {
        // Unknown (the receiver, or for the ratio the sender, never reported): in no mean.
        put("loss_ratio", u.loss_ratio);
        put("jitter_ms", u.jitter_ms);
        if let Some(d) = u.delay_ms.as_ref().or(u.delay_variation_ms.as_ref()) {
            f.insert("delay_p50_ms", d.p50);
            f.insert("delay_p99_ms", d.p99);
        }
    }
    if let Some(l) = &e.latency_us {
        f.insert("latency_p50_us", l.p50);
        f.insert("latency_p99_us", l.p99);
    }
    if let Some(t) = e.transactions_per_s {
        f.insert("transactions_per_s", t);
    }
    if let Some(rrul) = &e.rrul {
        // A swept rrul compares latency under load across its points.
        if let Some(l) = &rrul.idle_latency_us {
            f.insert("rrul_idle_latency_p50_us", l.p50);
        }
        if let Some(l) = &rrul.loaded_latency_us {
            f.insert("rrul_loaded_latency_p50_us", l.p50);
            f.insert("rrul_loaded_latency_p99_us", l.p99);
        }
        for (name, v) in [
            ("rrul_latency_ratio_p50", rrul.latency_ratio_p50),
            ("rrul_upload_bps", rrul.upload_bps),
            ("rrul_download_bps", rrul.download_bps),
        ] {
            if let Some(v) = v {
                f.insert(name, v);
            }
        }
    }
    f
}

/// The statistics of one grid point over its trials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointSummary {
    /// The point's parameter values.
    pub point: BTreeMap<String, String>,
    /// The offered rate in bits/s, when the sweep set one (for rate plots).
    pub offered_bps: Option<f64>,
    /// Trials measured: those that completed and those that failed.
    pub trials: u64,
    /// Trials that failed (an error, nothing sent or received, less sent than asked):
    /// counted here and in `failures`, never in `figures`.
    pub failed: u64,
    /// Each figure's statistics over the trials that completed.
    pub figures: BTreeMap<String, Summary>,
    /// The completed trials' result files, relative to the experiment's directory.
    pub files: Vec<String>,
    /// The failed trials, each with its file and reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<FailedTrial>,
}

/// A trial that failed, as a summary lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTrial {
    /// Its file, relative to the experiment's directory.
    pub file: String,
    /// Why it failed, in words.
    pub reason: String,
    /// Why it failed, for code (a server limit by its kind, `busy`, `timeout`, ...), when
    /// the failing side said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<ErrorKind>,
}

/// A trial measured more than once: a rerun measured it again after it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetriedTrial {
    /// Its file, relative to the experiment's directory.
    pub file: String,
    /// How many times it was measured, the last one kept.
    pub attempts: u32,
    /// Whether the last measurement completed.
    pub completed: bool,
}

/// One point's trials: those that completed, whose figures count, and those that failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointTrials {
    /// The completed trials, their files and results.
    pub completed: Vec<(String, Results)>,
    /// The failed trials.
    pub failed: Vec<FailedTrial>,
    /// The trials (completed or failed) measured more than once.
    pub retried: Vec<RetriedTrial>,
}

impl PointSummary {
    /// "k of n trials failed", or `None` when none did.
    pub fn failed_words(&self) -> Option<String> {
        (self.failed > 0).then(|| format!("{} of {} trials failed", self.failed, self.trials))
    }
}

/// The knee of one series of a rate sweep (the other parameters fixed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The series: the point's parameters other than the rate.
    pub series: BTreeMap<String, String>,
    /// Highest offered rate with at least 99% of the data delivered (mean over trials).
    pub knee99_bps: Option<f64>,
    /// The same at 95%.
    pub knee95_bps: Option<f64>,
    /// The highest offered rate of the series: a knee equal to it is no knee, only the
    /// end of what was tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tested_up_to_bps: Option<f64>,
}

impl Knee {
    /// The knee at `fraction` (0.99 or 0.95) in words: "up to R", "no knee up to R"
    /// when every rate tried delivered that much (the path may go further), or "none"
    /// when even the lowest rate fell short.
    pub fn describe(&self, fraction: f64) -> String {
        self.describe_with(fraction, wirebench_proto::units::format_rate_bps)
    }

    /// [`Knee::describe`] with rates written by `rate` (the report's 3 significant digits).
    pub fn describe_with(&self, fraction: f64, rate: impl Fn(f64) -> String) -> String {
        let knee = if fraction >= 0.99 {
            self.knee99_bps
        } else {
            self.knee95_bps
        };
        match (knee, self.tested_up_to_bps) {
            (None, _) => "none (short even at the lowest rate)".into(),
            (Some(k), Some(top)) if k >= top => {
                format!("no knee up to {} (the highest rate tested)", rate(top))
            }
            (Some(k), _) => format!("up to {}", rate(k)),
        }
    }
}

/// A point whose sender did not reach the rate asked by more than [`SHORTFALL`]: its
/// figures measure the sender (CPU, pacing, socket buffer), not the path.
#[derive(Debug, Clone, PartialEq)]
pub struct Shortfall {
    /// The point's index in the summary's `points`, from 0.
    pub index: usize,
    /// The point, `name=value` words.
    pub point: String,
    /// The rate asked, bits/s.
    pub offered_bps: f64,
    /// The mean rate sent, bits/s.
    pub sent_bps: f64,
}

/// How far below the asked rate a sender may fall before a sweep warns: 2%.
pub const SHORTFALL: f64 = 0.02;

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use wirebench_proto::units::format_rate_bps;
        write!(
            f,
            "{}: the sender reached {} of the {} asked ({:.0}% short); this point measures \
             the sender, not the path",
            self.point,
            format_rate_bps(self.sent_bps),
            format_rate_bps(self.offered_bps),
            (1.0 - self.sent_bps / self.offered_bps) * 100.0
        )
    }
}

impl ExperimentSummary {
    /// The points whose sender fell short of the asked rate by more than [`SHORTFALL`].
    pub fn shortfalls(&self) -> Vec<Shortfall> {
        self.points
            .iter()
            .enumerate()
            .filter_map(|(index, p)| {
                let offered = p.offered_bps.filter(|o| *o > 0.0)?;
                let sent = p.figures.get("sent_bps")?.mean;
                (sent < offered * (1.0 - SHORTFALL)).then(|| Shortfall {
                    index,
                    point: p
                        .point
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    offered_bps: offered,
                    sent_bps: sent,
                })
            })
            .collect()
    }
}

/// The `summary.json` of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentSummary {
    /// One entry per grid point, in grid order.
    pub points: Vec<PointSummary>,
    /// Rate sweeps: the knee of each series.
    pub knees: Vec<Knee>,
}

impl ExperimentSummary {
    /// Whether these are a lab scenario's stack profiles, whose figure is goodput, rather
    /// than a sweep's points.
    pub fn is_scenario(&self) -> bool {
        self.points
            .iter()
            .any(|p| p.figures.contains_key("goodput_bps"))
    }

    /// The rate figure to lead with: `goodput_bps` for a scenario, else `received_bps`.
    pub fn rate_figure(&self) -> &'static str {
        if self.is_scenario() {
            "goodput_bps"
        } else {
            "received_bps"
        }
    }
}

/// The offered rate of a trial, bits/s, if it asked for one: what a lab scenario's profiles
/// have (a sweep takes its offered rates from its manifest, [`offered_of_test`]).
fn offered(r: &Results) -> Option<f64> {
    offered_bps(
        r.test.rate_bps,
        r.test.rate_pps,
        r.test.size,
        r.test.streams,
    )
}

/// The rate a test asks for over all its streams, bits/s (`None`: as fast as it can).
pub fn offered_bps(rate_bps: u64, rate_pps: u64, size: u64, streams: u32) -> Option<f64> {
    let streams = f64::from(streams.max(1));
    match (rate_bps, rate_pps) {
        (_, pps) if pps > 0 => Some(pps as f64 * size as f64 * 8.0 * streams),
        (bps, _) if bps > 0 => Some(bps as f64 * streams),
        _ => None,
    }
}

/// The offered rate of a point's test as the manifest records it (the engine's spec in
/// JSON), so that a trial file cannot say what rate its point asked for.
pub fn offered_of_test(test: &serde_json::Value) -> Option<f64> {
    let spec: wirebench_proto::spec::TestSpec = serde_json::from_value(test.clone()).ok()?;
    offered_bps(
        spec.rate_bps.unwrap_or(0),
        spec.rate_pps.unwrap_or(0),
        spec.size,
        spec.streams,
    )
}

/// Summarizes each point's trials, every one counted: `trials[i]` holds point `i`'s results
/// and their files. A lab scenario's summary uses this, and decides itself which tests count
/// (an incomplete test with results does) and how many failed; its offered rate is read from
/// the first trial, as its profiles vary no rate. A sweep uses [`summarize_points`].
pub fn summarize_experiment(
    points: &[Point],
    trials: &[Vec<(String, Results)>],
) -> ExperimentSummary {
    let offered: Vec<Option<f64>> = trials
        .iter()
        .map(|runs| runs.first().and_then(|(_, r)| offered(r)))
        .collect();
    let all: Vec<PointTrials> = trials
        .iter()
        .map(|runs| PointTrials {
            completed: runs.clone(),
            ..PointTrials::default()
        })
        .collect();
    summarize_points(points, &offered, &all)
}

/// Summarizes each point's completed trials (`trials[i]` for point `i`, offered at
/// `offered[i]` bits/s): failed trials are counted and listed, never in a figure, and the
/// knees use completed trials only.
pub fn summarize_points(
    points: &[Point],
    offered: &[Option<f64>],
    trials: &[PointTrials],
) -> ExperimentSummary {
    let summaries: Vec<PointSummary> = points
        .iter()
        .zip(trials)
        .enumerate()
        .map(|(i, (point, runs))| {
            let mut by_name: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
            for (_, r) in &runs.completed {
                for (k, v) in figures(r) {
                    by_name.entry(k).or_default().push(v);
                }
            }
            PointSummary {
                point: point
                    .iter()
                    .map(|(p, v)| (p.name().to_string(), v.clone()))
                    .collect(),
                offered_bps: offered.get(i).copied().flatten(),
                trials: (runs.completed.len() + runs.failed.len()) as u64,
                failed: runs.failed.len() as u64,
                figures: by_name
                    .into_iter()
                    .filter_map(|(k, vs)| summarize(&vs).map(|s| (k.to_string(), s)))
                    .collect(),
                files: runs.completed.iter().map(|(f, _)| f.clone()).collect(),
                failures: runs.failed.clone(),
            }
        })
        .collect();
    // Knees: for each series (the point without its rate), the delivered fraction against
    // the offered rate.
    let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
    for p in &summaries {
        let (Some(rate), Some(frac)) = (p.offered_bps, p.figures.get("delivered_fraction")) else {
            continue;
        };
        if !p.point.contains_key("rate") {
            continue;
        }
        let mut key = p.point.clone();
        key.remove("rate");
        series.entry(key).or_default().push((rate, frac.mean));
    }
    let knees = series
        .into_iter()
        .map(|(series, pts)| Knee {
            knee99_bps: knee(&pts, 0.99),
            knee95_bps: knee(&pts, 0.95),
            tested_up_to_bps: pts.iter().map(|p| p.0).reduce(f64::max),
            series,
        })
        .collect();
    ExperimentSummary {
        points: summaries,
        knees,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::trial::tests::udp;
    use crate::experiment::{grid, parse_vary};

    /// The sweep: rate=10M,20M, 2 trials each, the second at 10M failed when its
    /// server was killed. Its zero made "delivered 50.00% (1 failed)", a mean of 4.99
    /// Mbit/s and no knee, while every trial that ran delivered 100%.
    #[test]
    fn a_failed_trial_is_counted_but_never_in_a_figure_or_the_knee() {
        let points = grid(&[parse_vary("rate=10M,20M").expect("vary")]);
        let ok = |f: &str| (f.to_string(), udp(1_000_000, 1_000_000, 1_000_000, None));
        let trials = vec![
            PointTrials {
                completed: vec![ok("a")],
                failed: vec![FailedTrial {
                    file: "b".into(),
                    reason: "the peer closed the control connection".into(),
                    cause: None,
                }],
                retried: vec![],
            },
            PointTrials {
                completed: vec![ok("c"), ok("d")],
                ..PointTrials::default()
            },
        ];
        let s = summarize_points(&points, &[Some(10e6), Some(20e6)], &trials);
        let p = &s.points[0];
        assert_eq!((p.trials, p.failed), (2, 1));
        assert_eq!(p.failed_words().as_deref(), Some("1 of 2 trials failed"));
        assert_eq!(p.files, vec!["a".to_string()]);
        assert_eq!(p.failures.len(), 1);
        let delivered = p.figures.get("delivered_fraction").map(|f| (f.mean, f.min));
        assert_eq!(delivered, Some((1.0, 1.0)));
        // The offered rates are the ones given (the manifest's), not the trial files'.
        assert_eq!(s.points[1].offered_bps, Some(20e6));
        assert_eq!(s.knees.len(), 1);
        assert_eq!(
            s.knees[0].describe(0.99),
            "no knee up to 20.00 Mbit/s (the highest rate tested)"
        );
        assert_eq!(s.points[1].failed_words(), None);
    }
}
