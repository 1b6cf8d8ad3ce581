//! `wirebench archive query`: the runs as a table, JSON or CSV, each path's series tested
//! for steps to worse (`wirebench_stats::steps`): throughput down, latency up. A step is
//! marked on the run it begins at.

use std::io::{self, Write};

use serde::Serialize;
use wirebench_stats::steps::{steps, StepTest, Worse};

use super::{Outcome, Row};

/// A run with the step found at it, if one was.
#[derive(Debug, Clone, Serialize)]
pub struct QueriedRow {
    /// The run.
    #[serde(flatten)]
    pub row: Row,
    /// When it started, UTC (RFC 3339).
    pub started: String,
    /// The step to worse that begins at this run, if its series has one here.
    pub step: Option<StepMark>,
}

/// A step to worse in a path's series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepMark {
    /// The figure: `throughput_bps` or `latency_us`.
    pub figure: &'static str,
    /// The median of the runs before it.
    pub before: f64,
    /// The median of the runs from it.
    pub after: f64,
    /// The change, as a share of `before` (negative: down).
    pub change: f64,
    /// The rank test's one-sided p-value.
    pub p: f64,
}

/// An instant in ms since the Unix epoch, UTC, as RFC 3339 (`2026-11-29T04:10:05.123Z`).
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (y, m, d) = crate::meta::civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60,
        ms.rem_euclid(1000)
    )
}

/// The rows (oldest first), each path's series of done runs tested for steps.
pub fn with_steps(rows: Vec<Row>) -> Vec<QueriedRow> {
    let mut out: Vec<QueriedRow> = rows
        .into_iter()
        .map(|row| QueriedRow {
            started: utc(row.started_unix_ms),
            row,
            step: None,
        })
        .collect();
    let mut series: std::collections::BTreeMap<(String, String, String), Vec<usize>> =
        std::collections::BTreeMap::new();
    for (i, q) in out.iter().enumerate() {
        if q.row.outcome == Outcome::Done {
            let r = &q.row;
            let key = (r.source.clone(), r.destination.clone(), r.test.clone());
            series.entry(key).or_default().push(i);
        }
    }
    for idx in series.values() {
        let pick = |q: &QueriedRow| match (q.row.throughput_bps, q.row.latency_us) {
            (Some(b), _) => Some(("throughput_bps", b, Worse::Down)),
            (None, Some(us)) => Some(("latency_us", us, Worse::Up)),
            _ => None,
        };
        let Some((figure, _, worse)) = idx.first().and_then(|&i| pick(&out[i])) else {
            continue;
        };
        let values: Vec<f64> = idx
            .iter()
            .map(|&i| pick(&out[i]).map_or(f64::NAN, |(_, v, _)| v))
            .collect();
        for s in steps(&values, &StepTest::new(worse)) {
            out[idx[s.index]].step = Some(StepMark {
                figure,
                before: s.before,
                after: s.after,
                change: s.change(),
                p: s.p,
            });
        }
    }
    out
}

/// The figure a row shows: the rate, the round trip, or why it failed.
fn figure(r: &Row) -> String {
    match (r.outcome, r.throughput_bps, r.latency_us) {
        (Outcome::Failed, _, _) => format!(
            "failed ({}): {}",
            r.error_kind.as_deref().unwrap_or("unknown"),
            r.reason.as_deref().unwrap_or("")
        ),
        (_, Some(b), _) => format!("{:.2} Mbit/s", b / 1e6),
        (_, _, Some(us)) => format!("{us:.1} µs"),
        _ => "done".into(),
    }
}

fn step_words(s: &StepMark) -> String {
    let which = if s.change < 0.0 { "down" } else { "up" };
    format!(
        "step {which} {:.0}% (p {:.1e})",
        s.change.abs() * 100.0,
        s.p
    )
}

/// The table: a line per run, the steps marked.
///
/// # Errors
///
/// Writing failed.
pub fn table(rows: &[QueriedRow], out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{:<24}  {:<24}  {:<12}  figure",
        "started (UTC)", "path", "test"
    )?;
    for q in rows {
        let r = &q.row;
        let path = format!("{} -> {}", r.source, r.destination);
        let step = q.step.as_ref().map(step_words).unwrap_or_default();
        writeln!(
            out,
            "{:<24}  {path:<24}  {:<12}  {}{}{step}",
            q.started,
            r.test,
            figure(r),
            if step.is_empty() { "" } else { "  " }
        )?;
    }
    let steps = rows.iter().filter(|q| q.step.is_some()).count();
    writeln!(out, "{} runs, {steps} steps to worse", rows.len())
}

/// CSV: a header and a line per run.
///
/// # Errors
///
/// Writing failed.
pub fn csv(rows: &[QueriedRow], out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    let header = [
        "started",
        "started_unix_ms",
        "ended_unix_ms",
        "source",
        "destination",
        "test",
        "kind",
        "outcome",
        "error_kind",
        "reason",
        "throughput_bps",
        "latency_us",
        "loss_ratio",
        "step",
    ];
    w.write_record(header)?;
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for q in rows {
        let r = &q.row;
        w.write_record([
            q.started.clone(),
            r.started_unix_ms.to_string(),
            r.ended_unix_ms.to_string(),
            r.source.clone(),
            r.destination.clone(),
            r.test.clone(),
            r.kind.clone(),
            if r.outcome == Outcome::Done {
                "done"
            } else {
                "failed"
            }
            .into(),
            r.error_kind.clone().unwrap_or_default(),
            r.reason.clone().unwrap_or_default(),
            opt(r.throughput_bps),
            opt(r.latency_us),
            opt(r.loss_ratio),
            q.step.as_ref().map(step_words).unwrap_or_default(),
        ])?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(t: i64, bps: f64) -> Row {
        Row {
            started_unix_ms: t,
            ended_unix_ms: t + 1,
            source: "a".into(),
            destination: "b".into(),
            test: "throughput".into(),
            kind: "throughput".into(),
            outcome: Outcome::Done,
            error_kind: None,
            reason: None,
            throughput_bps: Some(bps),
            latency_us: None,
            loss_ratio: None,
            results: None,
        }
    }

    #[test]
    fn a_step_down_is_marked_on_the_run_it_begins_at() {
        let rows: Vec<Row> = (0..80)
            .map(|i| {
                done(
                    i * 10_000,
                    if i < 50 {
                        9e8 + (i % 7) as f64 * 1e7
                    } else {
                        5e8 + (i % 5) as f64 * 1e7
                    },
                )
            })
            .collect();
        let q = with_steps(rows);
        let marked: Vec<usize> = (0..q.len()).filter(|&i| q[i].step.is_some()).collect();
        assert_eq!(
            marked,
            [50],
            "{:?}",
            q.iter().map(|r| r.step).collect::<Vec<_>>()
        );
        let mut text = Vec::new();
        table(&q, &mut text).expect("table");
        let text = String::from_utf8(text).expect("utf8");
        assert!(
            text.contains("step down") && text.contains("80 runs, 1 steps"),
            "{text}"
        );
    }

    #[test]
    fn utc_is_rfc3339() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_795_915_636_123), "2026-11-29T01:27:16.123Z");
    }
}
