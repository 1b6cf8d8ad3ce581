//! The experiment report: one self-contained HTML file (plots inline as SVG, no script, no
//! link to anything outside it) with the experiment's parameters, the summary table, the
//! knees and every plot that fits the data.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use wirebench_proto::results::Datapath;

use crate::experiment::plan::{point_words, shown_value};
use crate::experiment::summary::ExperimentSummary;
use crate::experiment::warnings::{warnings_of, Warning};
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

/// The report's style: tables, figures, and the warning boxes (amber, with a bar on the
/// left, so a warning reads as one in print and in grey scale too).
const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}\
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right} td{white-space:nowrap}\
th{background:#f0f0f0} td.l,th.l{text-align:left} code{background:#f4f4f4}\
figure{margin:1.5em 0 0.5em} svg{max-width:100%;height:auto}\
figcaption{color:#444;font-size:90%;max-width:960px}\
.warn{background:#fff4e0;border:1px solid #e0a040;border-left:6px solid #c76b00;\
padding:6px 12px;margin:0.8em 0;max-width:1060px}\
.warn ul{margin:0.3em 0;padding-left:1.4em} .warn li{margin:0.15em 0}\
tr.w td{background:#fff8ec} tr.wr td{background:#fff4e0;text-align:left;\
border-left:6px solid #c76b00;font-size:92%;white-space:normal}\
tr.wr ul{margin:0;padding-left:1.2em}";

/// The report of the experiment saved in `dir` (by `wirebench sweep`).
pub fn report(dir: &Path) -> Result<String, ReportError> {
    // Checked: sizes, then serde, then the values (see `crate::input`).
    let summary: ExperimentSummary = crate::input::summary(dir)?;
    // The plots read the trials' own files: a bad one stops the report, named, rather
    // than leaving its point out of a plot without a word.
    crate::experiment::trial::check_files(dir, summary.points.iter().flat_map(|p| &p.files))?;
    let meta: ExperimentMeta = crate::input::json(&dir.join("experiment.json"))?;
    let warnings = read_warnings(dir, &summary)?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>wirebench experiment</title><style>{STYLE}</style></head><body>\n\
         <h1>wirebench experiment</h1>\n<p>Made by <code>{}</code></p>\n",
        esc(&meta.command.join(" "))
    );
    h.push_str(&warnings_box(&summary, &warnings));
    h.push_str(&meta_table(dir, &meta, &summary));
    h.push_str("<h2>Summary</h2>\n");
    h.push_str(&summary_table(&summary, &warnings));
    h.push_str(&knee_table(&summary));
    h.push_str("<h2>Plots</h2>\n");
    let beside_plots = plot_note(&summary, &warnings);
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
                "<figure>{svg}<figcaption>{}</figcaption></figure>{beside_plots}",
                esc(&caption)
            );
            drawn += 1;
        }
    }
    if drawn == 0 {
        h.push_str("<p>No plot fits this experiment's parameters.</p>\n");
    }
    // Only the files that are there (a lab scenario's directory has no warnings.json).
    let warnings_file = if dir.join("warnings.json").is_file() {
        ", the warnings in <code>warnings.json</code>"
    } else {
        ""
    };
    let _ = writeln!(
        h,
        "<p>Every trial's results are in <code>trials/</code>; the summary in <code>summary.json</code> and <code>summary.csv</code>{warnings_file}.</p>\n</body></html>"
    );
    Ok(h)
}

/// The experiment's warnings: `warnings.json` as the sweep or merge saved it, or, for a
/// directory without one (a lab scenario's, or one saved before it was written), those the
/// summary alone shows (all but the trials measured again).
fn read_warnings(dir: &Path, s: &ExperimentSummary) -> Result<Vec<Warning>, ReportError> {
    match crate::input::json::<Vec<Warning>>(&dir.join("warnings.json")) {
        Ok(w) => Ok(w),
        Err(crate::input::InputError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(warnings_of(s, &[]))
        }
        Err(e) => Err(e.into()),
    }
}

/// The table of how the experiment was made: tool, server, trials, machine, datapath.
fn meta_table(dir: &Path, meta: &ExperimentMeta, summary: &ExperimentSummary) -> String {
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "?".to_string()
        } else {
            esc(s)
        }
    };
    format!(
        "<table><tr><th class=\"l\">tool</th><td class=\"l\">{}</td></tr>\
         <tr><th class=\"l\">server</th><td class=\"l\">{}</td></tr>\
         <tr><th class=\"l\">trials per point</th><td class=\"l\">{}{}</td></tr>\
         <tr><th class=\"l\">machine</th><td class=\"l\">{}, {} cores, Linux {}</td></tr>{}</table>\n",
        esc(&meta.wirebench),
        esc(&meta.server),
        meta.repeat,
        if meta.ordered { ", in grid order" } else { ", in random order" },
        or_unknown(&meta.machine.cpu),
        meta.machine.cores,
        or_unknown(&meta.machine.kernel),
        datapath_rows(dir, summary),
    )
}

/// The knees of a rate sweep: the series (left out when only the rate varied, as there is
/// one), and the highest rate at which 99% and 95% arrived.
fn knee_table(s: &ExperimentSummary) -> String {
    if s.knees.is_empty() {
        return String::new();
    }
    let series: Vec<String> = s.knees.iter().map(|k| point_words(&k.series)).collect();
    let named = s.knees.iter().any(|k| !k.series.is_empty());
    let rate = |v: f64| with_unit(Quantity::BitRate, v);
    let cols = vec![
        Column {
            header: "series".into(),
            left: true,
            cells: if named { series } else { Vec::new() },
        },
        Column {
            header: "99% delivered".into(),
            left: true,
            cells: s
                .knees
                .iter()
                .map(|k| k.describe_with(0.99, rate))
                .collect(),
        },
        Column {
            header: "95% delivered".into(),
            left: true,
            cells: s
                .knees
                .iter()
                .map(|k| k.describe_with(0.95, rate))
                .collect(),
        },
    ];
    let cols: Vec<Column> = cols.into_iter().filter(|c| !c.cells.is_empty()).collect();
    format!(
        "<h2>Where loss begins</h2>\n{}",
        html_table(&cols, s.knees.len(), |_| Row::default())
    )
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
/// significant digits; columns without a value anywhere are left out. A point with a
/// warning has its row marked and its warnings in a row of their own right under it.
fn summary_table(s: &ExperimentSummary, warnings: &[Warning]) -> String {
    let mut cols = point_columns(s);
    cols.extend(figure_columns(s));
    cols.retain(|c| c.cells.iter().any(|x| x != NONE));
    let width = cols.len();
    html_table(&cols, s.points.len(), |i| {
        let mine: Vec<&Warning> = warnings.iter().filter(|w| w.point == Some(i + 1)).collect();
        Row {
            id: Some(format!("p{}", i + 1)),
            after: (!mine.is_empty()).then(|| warning_row(&mine, width)),
        }
    })
}

/// The points' parameters, each value in its unit ("79.4 Mbit/s", not `79370053`), then
/// their trials (and how many of them failed).
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
                .map(|p| {
                    p.point
                        .get(k)
                        .map_or_else(|| NONE.into(), |v| shown_value(k, v))
                })
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
            // One trial has no interval: "± 0" would claim a certainty it does not have.
            |f, v| {
                if f.count < 2 {
                    format!("{} (one trial)", v(f.mean))
                } else {
                    format!("{} ± {}", v(f.mean), v(f.ci95))
                }
            },
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

/// What a table row has besides its cells: an anchor, and a row (already HTML) to put
/// right under it, which marks the row as warned.
#[derive(Default)]
struct Row {
    id: Option<String>,
    after: Option<String>,
}

/// `cols` as an HTML table of `rows` rows, under a row of their headers; `row(i)` gives
/// row `i`'s anchor and the row under it.
fn html_table(cols: &[Column], rows: usize, row: impl Fn(usize) -> Row) -> String {
    let class = |c: &Column| if c.left { " class=\"l\"" } else { "" };
    let mut h = String::from("<table><tr>");
    for c in cols {
        let _ = write!(h, "<th{}>{}</th>", class(c), esc(&c.header));
    }
    h.push_str("</tr>\n");
    for i in 0..rows {
        let r = row(i);
        h.push_str("<tr");
        if let Some(id) = &r.id {
            let _ = write!(h, " id=\"{}\"", esc(id));
        }
        if r.after.is_some() {
            h.push_str(" class=\"w\"");
        }
        h.push('>');
        for c in cols {
            let cell = c.cells.get(i).map_or(NONE, String::as_str);
            let _ = write!(h, "<td{}>{}</td>", class(c), esc(cell));
        }
        h.push_str("</tr>\n");
        if let Some(after) = r.after {
            h.push_str(&after);
        }
    }
    h.push_str("</table>\n");
    h
}

/// At most this many failed trials' files are named per reason; the rest are counted.
const FILES_NAMED: usize = 4;

/// One point's warnings, as a table row across `width` columns under the point's row: each
/// warning's kind and sentence, and the failed trials' reasons with their files.
fn warning_row(mine: &[&Warning], width: usize) -> String {
    let mut h = format!("<tr class=\"wr\"><td colspan=\"{width}\"><ul>");
    for w in mine {
        let _ = write!(
            h,
            "<li>⚠ <strong>{}</strong>: {}",
            esc(w.concern.title()),
            esc(&w.concern.text())
        );
        for (reason, files) in w.concern.reasons() {
            let mut named: Vec<&str> = files.iter().take(FILES_NAMED).map(String::as_str).collect();
            let more = files.len().saturating_sub(FILES_NAMED);
            let more = format!("and {more} more");
            if files.len() > FILES_NAMED {
                named.push(&more);
            }
            let _ = write!(h, "<br>“{}” ({})", esc(&reason), esc(&named.join(", ")));
        }
        h.push_str("</li>");
    }
    h.push_str("</ul></td></tr>\n");
    h
}

/// At most this many warnings are listed at the top of the report; all are beside their
/// rows.
const LISTED_AT_TOP: usize = 24;

/// The box at the top of the report: how many warnings at how many points, by kind, and
/// each in a line linked to its point's row. Nothing when there is none.
fn warnings_box(s: &ExperimentSummary, warnings: &[Warning]) -> String {
    if warnings.is_empty() {
        return String::new();
    }
    let mut points: Vec<usize> = warnings.iter().filter_map(|w| w.point).collect();
    points.sort_unstable();
    points.dedup();
    let mut h = format!(
        "<div class=\"warn\" id=\"warnings\"><strong>⚠ {} warning{} at {} of {} points</strong>: {}. \
         Each is also beside its point's row in the summary and under every plot.<ul>",
        warnings.len(),
        if warnings.len() == 1 { "" } else { "s" },
        points.len(),
        s.points.len(),
        esc(&by_kind(s, warnings).join("; "))
    );
    for w in warnings.iter().take(LISTED_AT_TOP) {
        let _ = write!(
            h,
            "<li>{}: {}</li>",
            point_link(s, w),
            esc(&w.concern.text())
        );
    }
    if warnings.len() > LISTED_AT_TOP {
        let _ = write!(
            h,
            "<li>and {} more, beside their rows below</li>",
            warnings.len() - LISTED_AT_TOP
        );
    }
    h.push_str("</ul></div>\n");
    h
}

/// The warnings counted by kind, in the order first met: "trials failed at 2 points".
fn by_kind(s: &ExperimentSummary, warnings: &[Warning]) -> Vec<String> {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for w in warnings {
        match kinds.iter_mut().find(|(t, _)| *t == w.concern.title()) {
            Some((_, n)) => *n += 1,
            None => kinds.push((w.concern.title(), 1)),
        }
    }
    let failed: u64 = s.points.iter().map(|p| p.failed).sum();
    let trials: u64 = s.points.iter().map(|p| p.trials).sum();
    kinds
        .into_iter()
        .map(|(t, n)| {
            let at = format!("{t} at {n} point{}", if n == 1 { "" } else { "s" });
            if t == "trials failed" {
                format!("{at} ({failed} of {trials} trials)")
            } else {
                at
            }
        })
        .collect()
}

/// The point a warning concerns, as a link to its row; or the experiment.
fn point_link(s: &ExperimentSummary, w: &Warning) -> String {
    match (w.point, w.point_in(s)) {
        (Some(n), Some(p)) => format!("<a href=\"#p{n}\">{}</a>", esc(&point_words(&p.point))),
        (Some(n), None) => format!("point {n}"),
        (None, _) => "the experiment".into(),
    }
}

/// The box under each plot: the points with a warning, by kind, each linked to its row
/// (every plot of an experiment is drawn from the same points, and leaves out the same
/// failed trials). Nothing when there is no warning.
fn plot_note(s: &ExperimentSummary, warnings: &[Warning]) -> String {
    if warnings.is_empty() {
        return String::new();
    }
    let mut kinds: Vec<(&str, Vec<String>)> = Vec::new();
    for w in warnings {
        let link = point_link(s, w);
        match kinds.iter_mut().find(|(t, _)| *t == w.concern.title()) {
            Some((_, at)) => at.push(link),
            None => kinds.push((w.concern.title(), vec![link])),
        }
    }
    let parts: Vec<String> = kinds
        .into_iter()
        .map(|(t, at)| format!("<strong>{}</strong>: {}", esc(t), at.join(", ")))
        .collect();
    format!(
        "<div class=\"warn\">⚠ In this plot, {}. Failed trials are not drawn; the details \
         are beside each point's row in the summary.</div>\n",
        parts.join("; ")
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::summary::{summarize_points, FailedTrial, PointTrials};
    use crate::experiment::trial::tests::udp;
    use crate::experiment::{grid, parse_vary};
    use wirebench_proto::error_kind::ErrorKind;

    /// A rate sweep of three points, the preset's raw rates: the last refused by the
    /// server's --max-rate in both trials, with a reason that is markup.
    fn sweep() -> ExperimentSummary {
        let points = grid(&[parse_vary("rate=25000,79370053,5000000000").expect("vary")]);
        let ok = |f: &str| (f.to_string(), udp(1_000_000, 1_000_000, 1_000_000, None));
        let refused = |f: &str| FailedTrial {
            file: f.into(),
            reason: "refused <b>here</b>".into(),
            cause: Some(ErrorKind::MaxRate),
        };
        let trials = vec![
            PointTrials {
                completed: vec![ok("a"), ok("b")],
                ..PointTrials::default()
            },
            PointTrials {
                completed: vec![ok("c"), ok("d")],
                ..PointTrials::default()
            },
            PointTrials {
                failed: vec![refused("e"), refused("f")],
                ..PointTrials::default()
            },
        ];
        // Offered as the sender sent (10 Mbit/s): no shortfall in this summary.
        summarize_points(&points, &[Some(10e6), Some(10e6), Some(10e6)], &trials)
    }

    #[test]
    fn rates_are_in_si_units_and_a_warned_row_has_its_warnings_under_it() {
        let s = sweep();
        let w = warnings_of(&s, &[]);
        let table = summary_table(&s, &w);
        for shown in ["25.0 kbit/s", "79.4 Mbit/s", "5.00 Gbit/s"] {
            assert!(table.contains(shown), "{shown}: {table}");
        }
        assert!(!table.contains("79370053") && !table.contains("5000000000"));
        // The refused point's row is marked, and the next row holds its warnings.
        let row = table
            .find("<tr id=\"p3\" class=\"w\">")
            .expect("a warned row");
        let next = &table[row..];
        let under = next.find("<tr class=\"wr\">").expect("a warning row");
        assert!(next[..under].matches("<tr").count() == 1, "right under it");
        assert!(next.contains("server limit hit") && next.contains("--max-rate"));
        // A reason from a file is text, never markup.
        assert!(next.contains("refused &lt;b&gt;here&lt;/b&gt;"), "{next}");
        assert!(
            table.contains("<tr id=\"p1\"><td"),
            "unwarned rows are plain"
        );
    }

    #[test]
    fn the_top_box_counts_and_links_and_every_plot_gets_the_note() {
        let s = sweep();
        let w = warnings_of(&s, &[]);
        let top = warnings_box(&s, &w);
        assert!(
            top.contains(
                "⚠ 2 warnings at 1 of 3 points</strong>: trials failed at 1 point \
                          (2 of 6 trials); server limit hit at 1 point"
            ),
            "{top}"
        );
        assert!(
            top.contains("<a href=\"#p3\">rate 5.00 Gbit/s</a>"),
            "{top}"
        );
        let note = plot_note(&s, &w);
        assert!(
            note.contains("<strong>trials failed</strong>: <a href=\"#p3\">"),
            "{note}"
        );
        assert_eq!(warnings_box(&s, &[]), "");
        assert_eq!(plot_note(&s, &[]), "");
    }

    #[test]
    fn one_trial_has_no_confidence_interval() {
        let mut s = sweep();
        let table = summary_table(&s, &[]);
        assert!(
            table.contains("s ± ") && !table.contains("(one trial)"),
            "{table}"
        );
        for p in &mut s.points {
            for f in p.figures.values_mut() {
                f.count = f.count.min(1);
            }
        }
        let table = summary_table(&s, &[]);
        assert!(
            table.contains("(one trial)") && !table.contains("s ± "),
            "{table}"
        );
    }

    /// A directory with `summary` and `warnings` (as `warnings.json`'s bytes, or none).
    fn experiment_dir(tag: &str, summary: &ExperimentSummary, warnings: Option<&str>) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wb-html-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).expect(name);
        write(
            "summary.json",
            &serde_json::to_vec(summary).expect("summary"),
        );
        write(
            "experiment.json",
            &serde_json::to_vec(&ExperimentMeta::default()).expect("meta"),
        );
        if let Some(w) = warnings {
            write("warnings.json", w.as_bytes());
        }
        dir
    }

    #[test]
    fn a_crafted_warnings_file_is_text_and_a_point_out_of_range_is_only_named() {
        let s = sweep();
        let crafted = r#"[{"point": 99999999999, "kind": "failed_trials", "failed": 1,
            "trials": 1, "failures": [{"file": "<img src=x>", "reason": "<script>x</script>"}]},
            {"kind": "too_few_good", "good": 1, "trials": 2}]"#;
        let dir = experiment_dir("crafted", &s, Some(crafted));
        let html = report(&dir).expect("a report");
        assert!(
            html.contains("point 99999999999: its one trial failed"),
            "{html}"
        );
        assert!(html.contains("the experiment: only 1 of 2 trials completed"));
        assert!(!html.contains("<script>") && !html.contains("<img"));
        // Not a list of warnings: refused in one line naming the file, not a report without.
        std::fs::write(dir.join("warnings.json"), "{\"kind\": 1}").expect("write");
        let e = report(&dir).expect_err("not warnings");
        assert!(e.to_string().contains("warnings.json"), "{e}");
        assert!(html.contains("the warnings in <code>warnings.json</code>"));
        // No file (a directory saved before it existed): those the summary shows, and the
        // page does not point to a file that is not there.
        std::fs::remove_file(dir.join("warnings.json")).expect("remove");
        let html = report(&dir).expect("a report");
        assert!(html.contains("⚠ 2 warnings at 1 of 3 points"), "{html}");
        assert!(!html.contains("<code>warnings.json</code>"), "{html}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_knee_table_of_one_series_has_no_empty_series_column() {
        let s = sweep();
        assert_eq!(s.knees.len(), 1);
        let t = knee_table(&s);
        assert!(!t.contains(">series<"), "{t}");
        // 3 significant digits, where the terminal's table says "10.00 Mbit/s".
        assert!(t.contains("no knee up to 10.0 Mbit/s (the highest"), "{t}");
    }
}
