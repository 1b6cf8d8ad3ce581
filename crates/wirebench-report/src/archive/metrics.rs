//! A mesh agent's metrics (`mesh --metrics ADDR`): each path's latest figures, its runs by
//! outcome, when it last ran, and whether a step to worse is among its latest runs, for
//! Prometheus to scrape (and `deploy/mesh/grafana-dashboard.json` to show). The series are
//! the mesh file's paths: as many as it names, no more.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::{prometheus_text, text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use wirebench_stats::steps::{steps, StepTest, Worse};

use super::{Outcome, Row};

/// The latest runs of a path kept for the step gauge: two of the test's windows.
const KEPT: usize = 32;

/// A path's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    test: String,
    source: String,
    destination: String,
}

/// A path's labels and a run's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    test: String,
    source: String,
    destination: String,
    outcome: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The agent's metrics, updated as each run is archived.
#[derive(Debug, Default)]
pub struct MeshMetrics {
    throughput: Family<PathLabels, FloatGauge>,
    latency: Family<PathLabels, FloatGauge>,
    loss: Family<PathLabels, FloatGauge>,
    last_run: Family<PathLabels, FloatGauge>,
    runs: Family<RunLabels, Counter>,
    step: Family<PathLabels, Gauge>,
    /// Each path's latest figures (throughput or latency), oldest first.
    recent: Mutex<HashMap<PathLabels, Vec<f64>>>,
}

impl MeshMetrics {
    /// Counts `row` (archived just now) and keeps its figures as its path's latest.
    pub fn record(&self, row: &Row) {
        let path = PathLabels {
            test: row.test.clone(),
            source: row.source.clone(),
            destination: row.destination.clone(),
        };
        let outcome = match row.outcome {
            Outcome::Done => "done",
            Outcome::Failed => "failed",
        };
        self.runs
            .get_or_create(&RunLabels {
                test: path.test.clone(),
                source: path.source.clone(),
                destination: path.destination.clone(),
                outcome,
            })
            .inc();
        self.last_run
            .get_or_create(&path)
            .set(row.ended_unix_ms as f64 / 1000.0);
        if row.outcome != Outcome::Done {
            return;
        }
        let (figure, worse) = match (row.throughput_bps, row.latency_us) {
            (Some(b), _) => {
                // Prometheus' base unit: bytes.
                self.throughput.get_or_create(&path).set(b / 8.0);
                (b, Worse::Down)
            }
            (None, Some(us)) => {
                self.latency.get_or_create(&path).set(us / 1e6);
                (us, Worse::Up)
            }
            _ => return,
        };
        if let Some(l) = row.loss_ratio {
            self.loss.get_or_create(&path).set(l);
        }
        let Ok(mut recent) = self.recent.lock() else {
            return;
        };
        let kept = recent.entry(path.clone()).or_default();
        kept.push(figure);
        if kept.len() > KEPT {
            kept.remove(0);
        }
        let found = !steps(kept, &StepTest::new(worse)).is_empty();
        self.step.get_or_create(&path).set(i64::from(found));
    }

    /// The metrics as OpenMetrics text (`openmetrics`) or Prometheus' text format 0.0.4.
    pub fn render(&self, openmetrics: bool) -> String {
        let mut reg = Registry::with_prefix("wirebench_mesh");
        reg.register(
            "throughput_bytes_per_second",
            "A path's latest throughput (received bytes/s over the test's time)",
            self.throughput.clone(),
        );
        reg.register(
            "latency_seconds",
            "A path's latest median round trip (request/response tests)",
            self.latency.clone(),
        );
        reg.register(
            "loss_ratio",
            "A path's latest UDP loss (lost over sent)",
            self.loss.clone(),
        );
        reg.register(
            "last_run_timestamp_seconds",
            "When a path's latest run ended, s since the Unix epoch",
            self.last_run.clone(),
        );
        reg.register("runs", "A path's runs by outcome", self.runs.clone());
        reg.register(
            "step_to_worse",
            "1 when a step to worse is among a path's latest 32 runs (a rank test of 16 against 16)",
            self.step.clone(),
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = if openmetrics {
            text::encode(&mut out, &reg)
        } else {
            prometheus_text::encode(&mut out, &reg)
        };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bps: Option<f64>) -> Row {
        Row {
            started_unix_ms: 1_000,
            ended_unix_ms: 2_000,
            source: "one".into(),
            destination: "t\"wo".into(),
            test: "throughput".into(),
            kind: "throughput".into(),
            outcome: if bps.is_some() {
                Outcome::Done
            } else {
                Outcome::Failed
            },
            error_kind: None,
            reason: None,
            throughput_bps: bps,
            latency_us: None,
            loss_ratio: None,
            results: None,
        }
    }

    #[test]
    fn latest_figures_runs_and_a_step_are_exported() {
        let m = MeshMetrics::default();
        for i in 0..32 {
            m.record(&row(Some(if i < 16 { 9e8 } else { 2e8 })));
        }
        m.record(&row(None));
        let om = m.render(true);
        assert!(om.contains("wirebench_mesh_throughput_bytes_per_second{test=\"throughput\",source=\"one\",destination=\"t\\\"wo\"} 25000000.0"), "{om}");
        assert!(om.contains("wirebench_mesh_runs_total{test=\"throughput\",source=\"one\",destination=\"t\\\"wo\",outcome=\"failed\"} 1"), "{om}");
        assert!(om.contains("wirebench_mesh_step_to_worse{test=\"throughput\",source=\"one\",destination=\"t\\\"wo\"} 1"), "{om}");
        assert!(om.trim_end().ends_with("# EOF"));
    }
}
