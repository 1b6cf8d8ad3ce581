//! `wirebench archive report`: the archive as one self-contained HTML file (plots inline as
//! SVG, no script, nothing fetched). Per test: a time series per path (throughput or the
//! median round trip; the steps to worse ringed), and a table of its paths: runs, done,
//! failed (and the last reason), the median and the last figure, the steps found.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::query::{utc, QueriedRow};
use super::Outcome;
use crate::plot::scale::{with_unit, Quantity};
use crate::plot::{svg_string, Axis, Chart, Mark, Panel, Pt, Series, Style};

fn esc(s: &str) -> String {
    crate::text::printable(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}\
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right} td{white-space:nowrap}\
th{background:#f0f0f0} td.l,th.l{text-align:left} td.r{white-space:normal;text-align:left}\
figure{margin:1.5em 0 0.5em} svg{max-width:100%;height:auto}\
figcaption{color:#444;font-size:90%;max-width:960px} .step{color:#a33}";

/// One test's runs, by path (source, destination).
type ByPath<'a> = BTreeMap<(String, String), Vec<&'a QueriedRow>>;

/// The figure a row is drawn by: throughput in bit/s, or the median round trip in s.
fn value(r: &QueriedRow) -> Option<(f64, Quantity)> {
    match (r.row.throughput_bps, r.row.latency_us) {
        (Some(b), _) => Some((b, Quantity::BitRate)),
        (None, Some(us)) => Some((us / 1e6, Quantity::Seconds)),
        _ => None,
    }
}

/// The report of `rows` (oldest first, steps marked), from the archive at `name`.
///
/// # Errors
///
/// A plot could not be drawn.
pub fn report(rows: &[QueriedRow], name: &str) -> Result<String, crate::plot::PlotError> {
    let mut tests: BTreeMap<&str, ByPath<'_>> = BTreeMap::new();
    for r in rows {
        let path = (r.row.source.clone(), r.row.destination.clone());
        tests
            .entry(r.row.test.as_str())
            .or_default()
            .entry(path)
            .or_default()
            .push(r);
    }
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>wirebench archive {}</title>\
         <style>{STYLE}</style></head><body><h1>wirebench archive <code>{}</code></h1>",
        esc(name),
        esc(name)
    );
    let (first, last) = (rows.first(), rows.last());
    let failed = rows
        .iter()
        .filter(|r| r.row.outcome == Outcome::Failed)
        .count();
    let steps = rows.iter().filter(|r| r.step.is_some()).count();
    let _ = write!(
        html,
        "<p>{} runs ({failed} failed) of {} tests, from {} to {} (UTC); {steps} steps to worse \
         (a Mann–Whitney rank test of each 16 runs of a path against the 16 before, p ≤ 0.00001 \
         and a change of the median of 15% or more).</p>",
        rows.len(),
        tests.len(),
        first.map_or_else(String::new, |r| r.started.clone()),
        last.map_or_else(String::new, |r| r.started.clone()),
    );
    let t0 = first.map_or(0, |r| r.row.started_unix_ms);
    for (test, paths) in &tests {
        let _ = write!(html, "<h2>{}</h2>", esc(test));
        if let Some(chart) = chart(test, paths, t0, first.map(|r| r.started.as_str())) {
            // The plot carries its caption.
            let _ = write!(html, "<figure>{}</figure>", svg_string(&chart)?);
        }
        html.push_str(&path_table(paths));
    }
    html.push_str("</body></html>\n");
    Ok(html)
}

/// One test's chart: a series per path over time, steps ringed; `None` when no run of it
/// has a figure.
fn chart(test: &str, paths: &ByPath<'_>, t0: i64, from: Option<&str>) -> Option<Chart> {
    let quantity = paths.values().flatten().find_map(|r| value(r))?.1;
    let label = match quantity {
        Quantity::BitRate => "throughput",
        _ => "median round trip",
    };
    let mut panel = Panel::new(
        Axis {
            from_zero: false,
            ..Axis::linear("time since the first run", Quantity::Seconds)
        },
        Axis::linear(label, quantity),
    );
    panel.body = true;
    for ((src, dst), runs) in paths {
        let name = format!("{src} → {dst}");
        let points: Vec<Pt> = runs
            .iter()
            .map(|r| {
                let x = (r.row.started_unix_ms - t0) as f64 / 1000.0;
                value(r).map_or_else(|| Pt::gap(x), |(y, _)| Pt::at(x, y))
            })
            .collect();
        for r in runs {
            if let (Some(s), Some((y, _))) = (r.step, value(r)) {
                panel.marks.push(Mark {
                    x: (r.row.started_unix_ms - t0) as f64 / 1000.0,
                    y,
                    text: format!(
                        "{name}: step {} {:.0}% at {}",
                        if s.change < 0.0 { "down" } else { "up" },
                        s.change.abs() * 100.0,
                        r.started
                    ),
                    series: name.clone(),
                    ring: true,
                });
            }
        }
        panel
            .series
            .push(Series::new(name, Style::LinePoints, points));
    }
    Some(Chart {
        title: format!("{label} of each path of {test}"),
        caption: format!(
            "Each point is one run, at its start, from {} (UTC); a break in a line is a run \
             that failed. Rings mark steps to worse.",
            from.unwrap_or("the first run")
        ),
        panels: vec![panel],
        ..Chart::default()
    })
}

/// The table of a test's paths.
fn path_table(paths: &ByPath<'_>) -> String {
    let mut t = String::from(
        "<table><tr><th class=l>path</th><th>runs</th><th>done</th><th>failed</th>\
         <th>median</th><th>last</th><th class=l>last failure</th><th class=l>steps to worse</th></tr>",
    );
    for ((src, dst), runs) in paths {
        let done: Vec<&&QueriedRow> = runs
            .iter()
            .filter(|r| r.row.outcome == Outcome::Done)
            .collect();
        let failed = runs.len() - done.len();
        let quantity = runs.iter().find_map(|r| value(r)).map(|v| v.1);
        let vals: Vec<f64> = done.iter().filter_map(|r| value(r).map(|v| v.0)).collect();
        let last = vals.last().copied();
        let show = |v: Option<f64>| match (v, quantity) {
            (Some(v), Some(q)) => with_unit(q, v),
            _ => "–".into(),
        };
        let med = wirebench_stats::summarize(&vals).map(|s| s.median);
        let last_failure = runs
            .iter()
            .rev()
            .find(|r| r.row.outcome == Outcome::Failed)
            .map(|r| {
                format!(
                    "{}: {}",
                    utc(r.row.started_unix_ms),
                    r.row.reason.as_deref().unwrap_or("")
                )
            })
            .unwrap_or_default();
        let steps: Vec<String> = runs
            .iter()
            .filter_map(|r| {
                r.step.map(|s| {
                    format!(
                        "{} {} {:.0}%",
                        r.started,
                        if s.change < 0.0 { "down" } else { "up" },
                        s.change.abs() * 100.0
                    )
                })
            })
            .collect();
        let _ = write!(
            t,
            "<tr><td class=l>{} → {}</td><td>{}</td><td>{}</td><td>{failed}</td><td>{}</td>\
             <td>{}</td><td class=r>{}</td><td class=\"r step\">{}</td></tr>",
            esc(src),
            esc(dst),
            runs.len(),
            done.len(),
            show(med),
            show(last),
            esc(&last_failure),
            esc(&steps.join("; "))
        );
    }
    t.push_str("</table>");
    t
}

#[cfg(test)]
mod tests {
    use super::super::query::with_steps;
    use super::super::Row;
    use super::*;

    fn row(t: i64, dst: &str, bps: Option<f64>) -> Row {
        Row {
            started_unix_ms: t,
            ended_unix_ms: t + 1,
            source: "one".into(),
            destination: dst.into(),
            test: "throughput".into(),
            kind: "throughput".into(),
            outcome: if bps.is_some() {
                Outcome::Done
            } else {
                Outcome::Failed
            },
            error_kind: bps.is_none().then(|| "connect".into()),
            reason: bps.is_none().then(|| "connection refused <b>".into()),
            throughput_bps: bps,
            latency_us: None,
            loss_ratio: None,
            results: None,
        }
    }

    #[test]
    fn a_report_has_a_chart_and_a_row_per_path_and_escapes_reasons() {
        let mut rows: Vec<Row> = (0..40)
            .map(|i| {
                row(
                    i * 10_000,
                    "two",
                    Some(if i < 20 { 9e8 } else { 3e8 } + i as f64),
                )
            })
            .collect();
        rows.push(row(400_000, "three", None));
        let html = report(&with_steps(rows), "a.sqlite").expect("report");
        assert!(
            html.contains("<svg") && html.contains("one → two"),
            "{html}"
        );
        assert!(html.contains("one → three") && html.contains("&lt;b&gt;"));
        assert!(html.contains("down 67%"), "{html}");
        assert!(!html.contains("<script"));
    }
}
