//! The experiment report: one self-contained HTML file (plots inline as SVG, no script, no
//! link to anything outside it) with the experiment's parameters, the summary table, the
//! knees and every plot that fits the data.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use wirebench_proto::results::Datapath;

use crate::experiment::summary::ExperimentSummary;
use crate::meta::ExperimentMeta;
use crate::plot::scale::{sig3, with_unit, Quantity, Unit};
use crate::plot::{experiment_chart_in, load_results, svg_string, Kind, PlotError};

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
    /// A file refused by the checked loaders.
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// Text for HTML: markup escaped, and control characters (not allowed in HTML, and a
/// terminal's commands when the file is `cat`) written as their escapes.
fn esc(s: &str) -> String {
    crate::text::printable(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The report of the experiment saved in `dir` (by `wirebench sweep`).
pub fn report(dir: &Path) -> Result<String, ReportError> {
    // Checked: sizes, then serde, then the values (see `crate::input`).
    let summary: ExperimentSummary = crate::input::summary(dir)?;
    let meta: ExperimentMeta = crate::input::json(&dir.join("experiment.json"))?;
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
         figcaption{{color:#444;font-size:90%;max-width:960px}}\
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
        "<p>Made by <code>{}</code></p>\n<table><tr><th class=\"l\">tool</th><td class=\"l\">{}</td></tr>\
         <tr><th class=\"l\">server</th><td class=\"l\">{}</td></tr>\
         <tr><th class=\"l\">trials per point</th><td class=\"l\">{}{}</td></tr>\
         <tr><th class=\"l\">machine</th><td class=\"l\">{}, {} cores, Linux {}</td></tr>{}</table>\n",
        esc(&cmd),
        esc(&meta.wirebench),
        esc(&meta.server),
        meta.repeat,
        if meta.ordered { ", in grid order" } else { ", in random order" },
        or_unknown(&meta.machine.cpu),
        meta.machine.cores,
        or_unknown(&meta.machine.kernel),
        datapath_rows(dir, &summary),
    );
    h.push_str("<h2>Summary</h2>\n");
    h.push_str(&summary_table(&summary));
    h.push_str(&warnings(&summary));
    if !summary.knees.is_empty() {
        h.push_str("<h2>Where loss begins</h2>\n<table><tr><th class=\"l\">series</th><th>99% delivered</th><th>95% delivered</th></tr>\n");
        for k in &summary.knees {
            let series: Vec<String> = k.series.iter().map(|(a, b)| format!("{a}={b}")).collect();
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&series.join(", ")),
                esc(&k.describe(0.99)),
                esc(&k.describe(0.95)),
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Plots</h2>\n");
    let mut drawn = 0;
    for kind in [
        Kind::Rate,
        Kind::Received,
        Kind::Time,
        Kind::Box,
        Kind::Latency,
    ] {
        // A plot that does not fit the data (no rate varied, say) is left out.
        if let Ok(mut chart) = experiment_chart_in(kind, &summary, Some(dir)) {
            // The caption goes below the figure as text, not in the image twice.
            let caption = std::mem::take(&mut chart.caption);
            let svg = svg_string(&chart)?;
            let _ = writeln!(
                h,
                "<figure>{svg}<figcaption>{}</figcaption></figure>",
                esc(&caption)
            );
            drawn += 1;
        }
    }
    if drawn == 0 {
        h.push_str("<p>No plot fits this experiment's parameters.</p>\n");
    }
    h.push_str("<p>Every trial's results are in <code>trials/</code>; the summary in <code>summary.json</code> and <code>summary.csv</code>.</p>\n</body></html>\n");
    Ok(h)
}

/// What goes in a cell without a value: a dash, and a column of nothing but dashes is left
/// out.
const NONE: &str = "–";

/// One column of a table: its header, whether it is left-aligned, its cells.
struct Column {
    header: String,
    left: bool,
    cells: Vec<String>,
}

/// A column of figure `key` (scaled by `scale` into `q`'s base unit). Rates and times
/// carry their unit in each cell ("20.0 Mbit/s"), as a sweep's span several prefixes;
/// other quantities carry it in the header. `show` makes a cell from the statistics and a
/// formatter of values.
fn figure_column(
    s: &ExperimentSummary,
    key: &str,
    title: &str,
    q: Quantity,
    scale: f64,
    show: impl Fn(&wirebench_stats::Summary, &dyn Fn(f64) -> String) -> String,
) -> Column {
    let per_cell = matches!(q, Quantity::BitRate | Quantity::Seconds);
    let unit: Unit = q.unit_for(1.0);
    let fmt = move |v: f64| {
        if per_cell {
            with_unit(q, v * scale)
        } else {
            sig3(v * scale / unit.divisor)
        }
    };
    Column {
        header: if per_cell || unit.name.is_empty() {
            title.to_string()
        } else {
            format!("{title} ({})", unit.name)
        },
        left: false,
        cells: s
            .points
            .iter()
            .map(|p| {
                p.figures
                    .get(key)
                    .map_or(NONE.to_string(), |f| show(f, &fmt))
            })
            .collect(),
    }
}

/// The summary table: the points' parameters, then each figure in its unit to 3
/// significant digits; columns without a value anywhere are left out.
fn summary_table(s: &ExperimentSummary) -> String {
    let mut cols = point_columns(s);
    cols.extend(figure_columns(s));
    cols.retain(|c| c.cells.iter().any(|x| x != NONE));
    html_table(&cols, s.points.len())
}

/// The columns that say which point a row is: its parameters, then its trials (and how
/// many of them failed).
fn point_columns(s: &ExperimentSummary) -> Vec<Column> {
    let params: Vec<String> = s
        .points
        .first()
        .map(|p| p.point.keys().cloned().collect())
        .unwrap_or_default();
    let mut cols: Vec<Column> = params
        .iter()
        .map(|k| Column {
            header: k.clone(),
            left: true,
            cells: s
                .points
                .iter()
                .map(|p| p.point.get(k).cloned().unwrap_or_else(|| NONE.into()))
                .collect(),
        })
        .collect();
    cols.push(Column {
        header: "trials".into(),
        left: false,
        cells: s
            .points
            .iter()
            .map(|p| match p.failed_words() {
                Some(w) => format!("{} ({w})", p.trials),
                None => p.trials.to_string(),
            })
            .collect(),
    });
    cols
}

/// The columns of what was measured: the main rate's statistics, then the mean of each
/// other figure.
fn figure_columns(s: &ExperimentSummary) -> Vec<Column> {
    let main = s.rate_figure();
    let what = if s.is_scenario() {
        "goodput"
    } else {
        "received"
    };
    let rate = Quantity::BitRate;
    let time = Quantity::Seconds;
    let pct = Quantity::Percent;
    let mean = |key, title, q, scale| figure_column(s, key, title, q, scale, |f, v| v(f.mean));
    vec![
        figure_column(
            s,
            main,
            &format!("{what}, mean ± 95% CI"),
            rate,
            1.0,
            |f, v| format!("{} ± {}", v(f.mean), v(f.ci95)),
        ),
        figure_column(s, main, "min", rate, 1.0, |f, v| v(f.min)),
        figure_column(s, main, "max", rate, 1.0, |f, v| v(f.max)),
        figure_column(s, main, "SD", rate, 1.0, |f, v| v(f.stddev)),
        mean("delivered_fraction", "delivered", pct, 100.0),
        mean("loss_ratio", "loss", pct, 100.0),
        mean("delay_p99_ms", "one-way delay p99", time, 1e-3),
        mean("latency_p50_us", "round trip p50", time, 1e-6),
        mean("latency_p99_us", "round trip p99", time, 1e-6),
        mean("retransmits", "retransmits (mean)", Quantity::Count, 1.0),
    ]
}

/// `cols` as an HTML table of `rows` rows, under a row of their headers.
fn html_table(cols: &[Column], rows: usize) -> String {
    let class = |c: &Column| if c.left { " class=\"l\"" } else { "" };
    let mut h = String::from("<table><tr>");
    for c in cols {
        let _ = write!(h, "<th{}>{}</th>", class(c), esc(&c.header));
    }
    h.push_str("</tr>\n");
    for i in 0..rows {
        h.push_str("<tr>");
        for c in cols {
            let cell = c.cells.get(i).map_or(NONE, String::as_str);
            let _ = write!(h, "<td{}>{}</td>", class(c), esc(cell));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    h
}

/// What the terminal warns of, said in the report too: points whose sender fell short of
/// the asked rate, and failed trials with their reasons (left out of every figure above).
fn warnings(s: &ExperimentSummary) -> String {
    let mut h = String::new();
    let short = s.shortfalls();
    let failed: Vec<_> = s.points.iter().filter(|p| p.failed > 0).collect();
    if short.is_empty() && failed.is_empty() {
        return h;
    }
    h.push_str("<h2>Warnings</h2>\n<ul>\n");
    for w in short {
        let _ = writeln!(h, "<li>{}</li>", esc(&w.to_string()));
    }
    for p in failed {
        let at: Vec<String> = p.point.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let reasons: Vec<String> = p
            .failures
            .iter()
            .map(|f| format!("{}: {}", f.file, f.reason))
            .collect();
        let _ = writeln!(
            h,
            "<li>{}: {}, left out of its figures{}{}</li>",
            esc(&at.join(" ")),
            esc(&p.failed_words().unwrap_or_default()),
            if reasons.is_empty() { "" } else { " (" },
            if reasons.is_empty() {
                String::new()
            } else {
                format!("{})", esc(&reasons.join("; ")))
            }
        );
    }
    h.push_str("</ul>\n");
    h
}

/// Table rows that say how the first trial moved its data (client and server), read from
/// its results file; empty if it cannot be read (a lab scenario's trials, say).
fn datapath_rows(dir: &Path, s: &ExperimentSummary) -> String {
    let Some(file) = s.points.first().and_then(|p| p.files.first()) else {
        return String::new();
    };
    let Ok(r) = load_results(&dir.join(file)) else {
        return String::new();
    };
    let describe = |d: &Datapath| {
        let mut parts = vec![format!("{} × {}", d.io, d.batch)];
        if !d.features.is_empty() {
            parts.push(d.features.join(", "));
        }
        if let Some(cc) = &d.tcp_congestion {
            parts.push(format!("congestion control {cc}"));
        }
        parts.push(format!(
            "buffers {} send, {} receive",
            with_unit(Quantity::Bytes, d.send_buffer_bytes as f64),
            with_unit(Quantity::Bytes, d.recv_buffer_bytes as f64)
        ));
        esc(&parts.join("; "))
    };
    let mut out = String::new();
    for (side, d) in [
        ("client", &r.datapath.client),
        ("server", &r.datapath.server),
    ] {
        if let Some(d) = d {
            let _ = write!(
                out,
                "<tr><th class=\"l\">datapath, {side}</th><td class=\"l\">{}</td></tr>",
                describe(d)
            );
        }
    }
    out
}
