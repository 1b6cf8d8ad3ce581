//! The experiment report: one self-contained HTML file (plots inline as SVG, no script, no
//! link to anything outside it) with the experiment's parameters, the summary table, the
//! knees and every plot that fits the data.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use wirebench_proto::units::format_rate_bps;

use crate::experiment::summary::ExperimentSummary;
use crate::meta::ExperimentMeta;
use crate::plot::{experiment_chart_in, svg_string, Kind, PlotError};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file of the experiment could not be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file of the experiment is not the JSON it should be.
    #[error("{name}: {source}")]
    Json {
        /// The file's name in the experiment directory.
        name: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The report of the experiment saved in `dir` (by `wirebench sweep`).
pub fn report(dir: &Path) -> Result<String, ReportError> {
    let read = |name: &'static str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| ReportError::Read { path, source })
    };
    let summary: ExperimentSummary =
        serde_json::from_slice(&read("summary.json")?).map_err(|source| ReportError::Json {
            name: "summary.json",
            source,
        })?;
    let meta: ExperimentMeta =
        serde_json::from_slice(&read("experiment.json")?).map_err(|source| ReportError::Json {
            name: "experiment.json",
            source,
        })?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>wirebench experiment</title><style>\
         body{{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         th{{background:#f0f0f0}} td.l,th.l{{text-align:left}} code{{background:#f4f4f4}}\
         figure{{margin:1.5em 0}} svg{{max-width:100%;height:auto}}\
         </style></head><body>\n<h1>wirebench experiment</h1>\n"
    );
    let cmd = meta.command.join(" ");
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "?".to_string()
        } else {
            esc(s)
        }
    };
    let _ = write!(
        h,
        "<p><code>{}</code></p>\n<table><tr><th class=\"l\">tool</th><td class=\"l\">{}</td></tr>\
         <tr><th class=\"l\">server</th><td class=\"l\">{}</td></tr>\
         <tr><th class=\"l\">trials per point</th><td class=\"l\">{}{}</td></tr>\
         <tr><th class=\"l\">machine</th><td class=\"l\">{}, {} cores, Linux {}</td></tr></table>\n",
        esc(&cmd),
        esc(&meta.wirebench),
        esc(&meta.server),
        meta.repeat,
        if meta.ordered { ", in grid order" } else { ", in random order" },
        or_unknown(&meta.machine.cpu),
        meta.machine.cores,
        or_unknown(&meta.machine.kernel),
    );
    // The summary table.
    let params: Vec<String> = summary
        .points
        .first()
        .map(|p| p.point.keys().cloned().collect())
        .unwrap_or_default();
    h.push_str("<h2>Summary</h2>\n<table><tr>");
    for p in &params {
        let _ = write!(h, "<th class=\"l\">{}</th>", esc(p));
    }
    // A lab scenario's headline is goodput, with TCP retransmits beside it.
    let goodput = summary.is_scenario();
    let main = summary.rate_figure();
    let _ = writeln!(
        h,
        "<th>trials</th><th>{} (mean ± 95% CI)</th><th>min</th><th>max</th>\
         <th>SD</th><th>delivered</th><th>loss</th><th>delay p99 (ms)</th>\
         <th>round trip p50 (µs)</th>{}</tr>",
        if goodput { "goodput" } else { "received" },
        if goodput {
            "<th>retransmits (mean)</th>"
        } else {
            ""
        },
    );
    for p in &summary.points {
        h.push_str("<tr>");
        for k in &params {
            let _ = write!(
                h,
                "<td class=\"l\">{}</td>",
                esc(p.point.get(k).map_or("", String::as_str))
            );
        }
        let f = |k: &str| p.figures.get(k);
        let rate = |v: f64| format_rate_bps(v);
        let _ = writeln!(
            h,
            "<td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}</tr>",
            p.trials,
            if p.failed > 0 { format!(" ({} failed)", p.failed) } else { String::new() },
            f(main).map_or("-".into(), |x| format!("{} ± {}", rate(x.mean), rate(x.ci95))),
            f(main).map_or("-".into(), |x| rate(x.min)),
            f(main).map_or("-".into(), |x| rate(x.max)),
            f(main).map_or("-".into(), |x| rate(x.stddev)),
            f("delivered_fraction").map_or("-".into(), |x| format!("{:.2}%", x.mean * 100.0)),
            f("loss_ratio").map_or("-".into(), |x| format!("{:.3}%", x.mean * 100.0)),
            f("delay_p99_ms").map_or("-".into(), |x| format!("{:.3}", x.mean)),
            f("latency_p50_us").map_or("-".into(), |x| format!("{:.1}", x.mean)),
            if goodput {
                format!("<td>{}</td>", f("retransmits").map_or("-".into(), |x| format!("{:.1}", x.mean)))
            } else {
                String::new()
            },
        );
    }
    h.push_str("</table>\n");
    if !summary.knees.is_empty() {
        h.push_str("<h2>Where loss begins</h2>\n<table><tr><th class=\"l\">series</th><th>99% delivered up to</th><th>95% delivered up to</th></tr>\n");
        for k in &summary.knees {
            let series: Vec<String> = k.series.iter().map(|(a, b)| format!("{a} {b}")).collect();
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&series.join(", ")),
                k.knee99_bps.map_or("none".into(), format_rate_bps),
                k.knee95_bps.map_or("none".into(), format_rate_bps),
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Plots</h2>\n");
    let mut drawn = 0;
    for kind in [Kind::Rate, Kind::Received, Kind::Time, Kind::Box] {
        // A plot that does not fit the data (no rate varied, say) is left out.
        if let Ok(chart) = experiment_chart_in(kind, &summary, Some(dir)) {
            let svg = svg_string(&chart)?;
            let _ = writeln!(h, "<figure>{svg}</figure>");
            drawn += 1;
        }
    }
    if drawn == 0 {
        h.push_str("<p>No plot fits this experiment's parameters.</p>\n");
    }
    h.push_str("<p>Every trial's results are in <code>trials/</code>; the summary in <code>summary.json</code> and <code>summary.csv</code>.</p>\n</body></html>\n");
    Ok(h)
}
