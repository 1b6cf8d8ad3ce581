//! The summary of an experiment's trials (`summary.json`): statistics of every figure per
//! grid point, and the knee of each rate series.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
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
        f.insert("loss_ratio", u.loss_ratio);
        f.insert("jitter_ms", u.jitter_ms);
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
    f
}

/// The statistics of one grid point over its trials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointSummary {
    /// The point's parameter values.
    pub point: BTreeMap<String, String>,
    /// The offered rate in bits/s, when the sweep set one (for rate plots).
    pub offered_bps: Option<f64>,
    /// Trials run.
    pub trials: u64,
    /// Trials that ended with an error (their figures are still counted).
    pub failed: u64,
    /// Each figure's statistics over the trials.
    pub figures: BTreeMap<String, Summary>,
    /// The trials' result files, relative to the experiment's directory.
    pub files: Vec<String>,
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
        let knee = if fraction >= 0.99 {
            self.knee99_bps
        } else {
            self.knee95_bps
        };
        match (knee, self.tested_up_to_bps) {
            (None, _) => "none (short even at the lowest rate)".into(),
            (Some(k), Some(top)) if k >= top => format!(
                "no knee up to {} (the highest rate tested)",
                wirebench_proto::units::format_rate_bps(top)
            ),
            (Some(k), _) => format!("up to {}", wirebench_proto::units::format_rate_bps(k)),
        }
    }
}

/// A point whose sender did not reach the rate asked by more than [`SHORTFALL`]: its
/// figures measure the sender (CPU, pacing, socket buffer), not the path.
#[derive(Debug, Clone, PartialEq)]
pub struct Shortfall {
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
            .filter_map(|p| {
                let offered = p.offered_bps.filter(|o| *o > 0.0)?;
                let sent = p.figures.get("sent_bps")?.mean;
                (sent < offered * (1.0 - SHORTFALL)).then(|| Shortfall {
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

/// The offered rate of a trial, bits/s, if it asked for one.
fn offered(r: &Results) -> Option<f64> {
    match (r.test.rate_bps, r.test.rate_pps) {
        (_, pps) if pps > 0 => Some((pps * r.test.size * 8 * u64::from(r.test.streams)) as f64),
        (bps, _) if bps > 0 => Some((bps * u64::from(r.test.streams)) as f64),
        _ => None,
    }
}

/// Summarizes each point's trials: `trials[i]` holds point `i`'s results and their files.
pub fn summarize_experiment(
    points: &[Point],
    trials: &[Vec<(String, Results)>],
) -> ExperimentSummary {
    let summaries: Vec<PointSummary> = points
        .iter()
        .zip(trials)
        .map(|(point, runs)| {
            let mut by_name: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
            for (_, r) in runs {
                for (k, v) in figures(r) {
                    by_name.entry(k).or_default().push(v);
                }
            }
            PointSummary {
                point: point
                    .iter()
                    .map(|(p, v)| (p.name().to_string(), v.clone()))
                    .collect(),
                offered_bps: runs.first().and_then(|(_, r)| offered(r)),
                trials: runs.len() as u64,
                failed: runs.iter().filter(|(_, r)| r.error.is_some()).count() as u64,
                figures: by_name
                    .into_iter()
                    .filter_map(|(k, vs)| summarize(&vs).map(|s| (k.to_string(), s)))
                    .collect(),
                files: runs.iter().map(|(f, _)| f.clone()).collect(),
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
