//! Charts of an experiment (a sweep's or a lab scenario's `summary.json`, and its trials'
//! files when the directory is at hand): the rate curve, data received, transfer time
//! against size, box plots, and the latency distributions of its points.

use std::collections::BTreeMap;
use std::path::Path;

use wirebench_proto::results::{ProbeKind, Results};
use wirebench_proto::units::parse_size;
use wirebench_stats::Summary;

use super::chart::{Axis, BoxStat, Chart, Mark, Palette, Panel, Pt, Series, Style};
use super::latency::{latency_panels, Distribution};
use super::scale::{param_label, param_value, with_unit, Quantity};
use super::{load_results, Kind, PlotError};
use crate::experiment::summary::{figures, ExperimentSummary, PointSummary};

/// The parameter an experiment's curves run along: the rate if it varies, else the bytes.
fn x_param(s: &ExperimentSummary) -> Option<&'static str> {
    ["rate", "bytes"]
        .into_iter()
        .find(|k| s.points.iter().any(|p| p.point.contains_key(*k)))
}

/// `name value, name value` of a point's parameters other than `skip`, each value with its
/// unit ("size 1472 B, rate 79.4 Mbit/s"); "all" when none is left.
fn label(point: &BTreeMap<String, String>, skip: Option<&str>) -> String {
    let parts: Vec<String> = point
        .iter()
        .filter(|(k, _)| Some(k.as_str()) != skip)
        .map(|(k, v)| param_label(k, v))
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(", ")
    }
}

/// The series a point belongs to: its parameters without the one curves run along.
pub fn series_of(s: &ExperimentSummary, p: &PointSummary) -> String {
    label(&p.point, x_param(s))
}

/// The palette every plot of `s` shares: one colour per series label.
pub fn palette(s: &ExperimentSummary) -> Palette {
    Palette::new(s.points.iter().map(|p| series_of(s, p)))
}

/// A point's error bar: min–max of its trials, or the 95% confidence interval of the mean
/// with 5 trials or more; in units of `scale` times the figure.
fn bar(st: &Summary, x: f64, scale: f64) -> Pt {
    let (lo, hi) = if st.count >= 5 {
        (st.mean - st.ci95, st.mean + st.ci95)
    } else {
        (st.min, st.max)
    };
    // Every figure drawn is a rate, time, size or share: an interval below 0 is cut at 0.
    Pt {
        x,
        y: st.mean * scale,
        lo: (lo * scale).max(0.0),
        hi: hi * scale,
    }
}

/// How many trials the points had, and what the bars mean, for a caption.
fn trials_and_bars(s: &ExperimentSummary) -> String {
    let lo = s.points.iter().map(|p| p.trials).min().unwrap_or(0);
    let hi = s.points.iter().map(|p| p.trials).max().unwrap_or(0);
    let n = if lo == hi {
        format!("{lo}")
    } else {
        format!("{lo}–{hi}")
    };
    let bars = if lo >= 5 {
        "bars: 95% confidence interval of the mean (Student's t)"
    } else if hi >= 5 {
        "bars: 95% confidence interval of the mean where a point has 5 trials or more, else min–max"
    } else {
        "bars: min–max over the trials"
    };
    let failed: Vec<String> = s
        .points
        .iter()
        .filter_map(|p| {
            let words = p.failed_words()?;
            let at: Vec<String> = p.point.iter().map(|(k, v)| param_label(k, v)).collect();
            Some(format!("{} at {}", words, at.join(" ")))
        })
        .collect();
    let failed = if failed.is_empty() {
        String::new()
    } else {
        format!(" Failed trials are left out: {}.", failed.join("; "))
    };
    format!("{n} trial(s) per point; points: mean; {bars}.{failed}")
}

/// Whether values spread over enough decades to want a log axis: more than 30 times.
fn wide(values: impl Iterator<Item = f64>) -> bool {
    let (lo, hi) = values
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    hi > 0.0 && lo > 0.0 && hi / lo > 30.0
}

fn axis(label: &str, q: Quantity, log: bool) -> Axis {
    if log {
        Axis::log(label, q)
    } else {
        Axis::linear(label, q)
    }
}

/// Points of one figure per series, against `x` of each point.
fn curves(
    s: &ExperimentSummary,
    x: impl Fn(&PointSummary) -> Option<f64>,
    figure: &str,
    scale: f64,
) -> Vec<Series> {
    let mut by: BTreeMap<String, Vec<Pt>> = BTreeMap::new();
    for p in &s.points {
        let (Some(x), Some(st)) = (x(p), p.figures.get(figure)) else {
            continue;
        };
        by.entry(series_of(s, p))
            .or_default()
            .push(bar(st, x, scale));
    }
    by.into_iter()
        .map(|(label, mut points)| {
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Series::new(label, Style::LinePoints, points)
        })
        .collect()
}

/// A chart of an experiment's summary; `dir`, when given, is its directory, whose trial
/// files give box plots their outliers and latency plots their distributions.
pub fn experiment_chart_in(
    kind: Kind,
    s: &ExperimentSummary,
    dir: Option<&Path>,
) -> Result<Chart, PlotError> {
    let mut chart = Chart {
        palette: palette(s),
        ..Chart::default()
    };
    match kind {
        Kind::Rate | Kind::Received => rate(kind, s, &mut chart),
        Kind::Time => time(s, &mut chart),
        Kind::Box => boxes(s, dir, &mut chart),
        Kind::Latency => latency(s, dir, &mut chart)?,
        _ => return Err(PlotError::NotForExperiment(kind.name())),
    }
    if chart.series_count() == 0 {
        return Err(PlotError::NothingToDraw(kind.name()));
    }
    // One series of every point ("all"): a legend would say nothing.
    let boxes = chart.panels.iter().any(|p| !p.boxes.is_empty());
    if !boxes
        && chart
            .panels
            .iter()
            .flat_map(|p| p.series.iter().map(|s| s.label.as_str()))
            .all(|l| l == "all")
    {
        chart.no_legend = true;
    }
    Ok(chart)
}

fn rate(kind: Kind, s: &ExperimentSummary, chart: &mut Chart) {
    let log = wide(s.points.iter().filter_map(|p| p.offered_bps));
    let offered = |p: &PointSummary| p.offered_bps;
    let x = axis("offered rate", Quantity::BitRate, log);
    if kind == Kind::Received {
        let mut panel = Panel::new(x, Axis::linear("data received", Quantity::Percent));
        panel.series = curves(s, offered, "delivered_fraction", 100.0);
        let all = panel
            .series
            .iter()
            .flat_map(|c| &c.points)
            .all(|q| q.lo >= 99.9995);
        chart.panels.push(panel);
        chart.title = "Data received against offered rate".into();
        chart.caption = format!(
            "Received bytes / sent bytes of each trial.{} {}",
            if all {
                " Every trial received all it was sent: 100% at every point."
            } else {
                ""
            },
            trials_and_bars(s)
        );
        return;
    }
    let mut top = Panel::new(x.clone(), axis("received rate", Quantity::BitRate, log));
    top.ideal = true;
    top.weight = 2;
    top.series = curves(s, offered, "received_bps", 1.0);
    // The knee: where a series last delivers 99% of what was offered, ringed; a series
    // that delivered 99% at every rate tried has no knee to ring, only its note.
    let several = s.knees.len() > 1;
    for k in &s.knees {
        let Some(knee) = k.knee99_bps else { continue };
        let series = label(&k.series, None);
        let y = top
            .series
            .iter()
            .find(|c| c.label == series)
            .and_then(|c| c.points.iter().find(|q| (q.x - knee).abs() <= knee * 1e-9))
            .map_or(knee, |q| q.y);
        let ring = k.tested_up_to_bps.is_none_or(|t| knee < t);
        let whose = if several {
            format!("{series}: ")
        } else {
            String::new()
        };
        let text = if ring {
            format!("○ {whose}99% up to {}", with_unit(Quantity::BitRate, knee))
        } else {
            format!("{whose}no knee (99% at every rate)")
        };
        top.marks.push(Mark {
            x: knee,
            y,
            text,
            series,
            ring,
        });
    }
    chart.panels.push(top);
    // Loss: UDP's datagram count if the trials have it, else the bytes that did not arrive.
    let udp = s
        .points
        .iter()
        .any(|p| p.figures.contains_key("loss_ratio"));
    let mut loss = Panel::new(x, Axis::linear("loss", Quantity::Percent));
    loss.series = if udp {
        curves(s, offered, "loss_ratio", 100.0)
    } else {
        curves(s, offered, "delivered_fraction", 100.0)
            .into_iter()
            .map(|mut c| {
                for q in &mut c.points {
                    *q = Pt {
                        x: q.x,
                        y: 100.0 - q.y,
                        lo: 100.0 - q.hi,
                        hi: 100.0 - q.lo,
                    };
                }
                c
            })
            .collect()
    };
    // A loss panel that is a flat line at 0 says less than a word in the caption.
    let has_loss = !loss.series.is_empty();
    let lossless = loss
        .series
        .iter()
        .flat_map(|c| &c.points)
        .all(|q| q.hi <= 0.0005);
    if !loss.series.is_empty() && !lossless {
        chart.panels.push(loss);
    }
    chart.title = "Received against offered rate".into();
    let scale = if log {
        "both axes log"
    } else {
        "both axes linear"
    };
    chart.caption = format!(
        "Receive rate of each trial against the rate offered ({scale}: y = x is the grey line). \
         {} Knee (○): the highest offered rate at which 99% of the data arrived. Loss: {}{}.",
        trials_and_bars(s),
        if udp {
            "datagrams lost / sent"
        } else {
            "bytes that did not arrive / sent"
        },
        if lossless && has_loss {
            ", 0 at every point (not drawn)"
        } else {
            ""
        }
    );
}

fn time(s: &ExperimentSummary, chart: &mut Chart) {
    // The data size of each point, as the sweep spelled it ("10K", "1M").
    let bytes = |p: &PointSummary| {
        p.point
            .get("bytes")
            .and_then(|b| parse_size(b).ok())
            .map(|b| b as f64)
    };
    let log = wide(s.points.iter().filter_map(bytes));
    let x = axis("data transferred", Quantity::Bytes, log);
    let mut top = Panel::new(x.clone(), axis("transfer time", Quantity::Seconds, log));
    top.series = curves(s, bytes, "duration_s", 1.0);
    top.weight = 3;
    let mut rate = Panel::new(x, Axis::linear("receive rate", Quantity::BitRate));
    rate.series = curves(s, bytes, "received_bps", 1.0);
    rate.weight = 2;
    chart.panels.push(top);
    chart.panels.push(rate);
    chart.title = "Transfer time and rate against data size".into();
    chart.caption = format!(
        "The sender's time from its start to its last byte, and the receive rate, of each \
         transfer{}. {}",
        if log { " (log–log)" } else { "" },
        trials_and_bars(s)
    );
}

/// The trials' values of `figure` at point `p`, from their files (empty if unreadable).
fn trial_values(dir: &Path, p: &PointSummary, figure: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for f in &p.files {
        let Ok(r) = load_results(&dir.join(f)) else {
            return Vec::new();
        };
        if let Some(v) = figures(&r).get(figure) {
            out.push(*v);
        }
    }
    out
}

/// The x axis of box plots: its name, and the one parameter whose value labels each box
/// (the only one, or the one curves run along when the legend tells the series apart);
/// `None`: a line per parameter ("rate=79.4 Mbit/s" over "size=1472 B": the labels may
/// drop the names).
fn box_axis(s: &ExperimentSummary) -> (String, Option<String>) {
    let keys: Vec<&String> = s
        .points
        .first()
        .map(|p| p.point.keys().collect())
        .unwrap_or_default();
    if keys.len() == 1 && s.points.iter().all(|p| p.point.len() == 1) {
        return (keys[0].clone(), Some(keys[0].clone()));
    }
    if let Some(k) = x_param(s) {
        let series: std::collections::BTreeSet<String> =
            s.points.iter().map(|p| series_of(s, p)).collect();
        if series.len() > 1 && series.len() < s.points.len() {
            return (k.to_string(), Some(k.to_string()));
        }
    }
    ("point".to_string(), None)
}

fn box_category(p: &PointSummary, key: Option<&str>) -> String {
    match key {
        Some(k) => p
            .point
            .get(k)
            .map(|v| param_value(k, v))
            .unwrap_or_default(),
        None => {
            let lines: Vec<String> = p
                .point
                .iter()
                .map(|(k, v)| format!("{k}={}", param_value(k, v)))
                .collect();
            lines.join("\n")
        }
    }
}

/// Tukey's box of `values`: whiskers at the furthest value within 1.5 IQR of the box,
/// the values beyond them apart.
fn tukey(values: &[f64]) -> Option<([f64; 5], Vec<f64>)> {
    let st = wirebench_stats::summarize(values)?;
    let iqr = st.q3 - st.q1;
    let (f0, f1) = (st.q1 - 1.5 * iqr, st.q3 + 1.5 * iqr);
    let inside = values.iter().copied().filter(|v| *v >= f0 && *v <= f1);
    let w0 = inside.clone().fold(st.q1, f64::min);
    let w1 = inside.fold(st.q3, f64::max);
    let outliers = values
        .iter()
        .copied()
        .filter(|v| *v < f0 || *v > f1)
        .collect();
    Some(([w0, st.q1, st.median, st.q3, w1], outliers))
}

/// Puts the boxes in a panel over `categories`, its y axis log when they span more than
/// 30 times, and says whether it is log.
fn box_panel(
    chart: &mut Chart,
    x_name: &str,
    categories: Vec<String>,
    boxes: Vec<BoxStat>,
    y: (&str, Quantity),
) -> bool {
    let log = wide(boxes.iter().flat_map(|b| b.five));
    let mut x = Axis::linear(x_name, Quantity::Count);
    x.categories = categories;
    let mut panel = Panel::new(x, axis(y.0, y.1, log));
    panel.boxes = boxes;
    // One series, or one per box: the x labels say it all.
    let distinct: std::collections::BTreeSet<&str> =
        panel.boxes.iter().map(|b| b.series.as_str()).collect();
    chart.no_legend = distinct.len() <= 1 || distinct.len() == panel.boxes.len();
    chart.panels.push(panel);
    log
}

fn boxes(s: &ExperimentSummary, dir: Option<&Path>, chart: &mut Chart) {
    if s.points
        .iter()
        .any(|p| p.figures.contains_key("rrul_loaded_latency_p50_us"))
    {
        return rrul_boxes(s, dir, chart);
    }
    let goodput = s.is_scenario();
    let figure = s.rate_figure();
    let (x_name, key) = box_axis(s);
    let mut categories = Vec::new();
    let mut out = Vec::new();
    let mut all_tukey = true;
    for p in &s.points {
        let Some(st) = p.figures.get(figure) else {
            continue;
        };
        let values = dir.map(|d| trial_values(d, p, figure)).unwrap_or_default();
        let (five, outliers) = match tukey(&values).filter(|_| values.len() as u64 == st.count) {
            Some(t) => t,
            None => {
                all_tukey = false;
                ([st.min, st.q1, st.median, st.q3, st.max], Vec::new())
            }
        };
        out.push(BoxStat {
            category: categories.len(),
            series: series_of(s, p),
            five,
            outliers,
        });
        categories.push(box_category(p, key.as_deref()));
    }
    let what = if goodput { "goodput" } else { "receive rate" };
    let log = box_panel(chart, &x_name, categories, out, (what, Quantity::BitRate));
    chart.title = format!("The {what} of the repeated trials");
    let n = trials_and_bars(s);
    let n = n.split(';').next().unwrap_or("");
    let scale = if log {
        " y axis log (the boxes span more than 30×)."
    } else {
        ""
    };
    chart.caption = if all_tukey {
        format!(
            "The {what} of each trial; {n}. Box: first to third quartile; line: median; \
             whiskers: the furthest trial within 1.5 × IQR of the box (Tukey); small rings: \
             trials beyond the whiskers.{scale}"
        )
    } else {
        format!(
            "The {what} of each trial; {n}. Box: first to third quartile; line: median; \
             whiskers: smallest and largest trial (from the summary: its trials' values \
             one by one were not at hand, so no outlier is told apart).{scale}"
        )
    };
}

/// The loaded UDP probes' round trips of a point's rrul trials, pooled, seconds.
fn rrul_samples(dir: &Path, p: &PointSummary) -> Vec<f64> {
    p.files
        .iter()
        .filter_map(|f| load_results(&dir.join(f)).ok())
        .filter_map(|r| r.end.rrul)
        .flat_map(|rrul| super::rrul::samples(&rrul, ProbeKind::Udp, true))
        .collect()
}

/// Box plots of an rrul sweep: per point, the round trips of every UDP probe its trials
/// sent under load; without the trials' files, the trials' loaded medians.
fn rrul_boxes(s: &ExperimentSummary, dir: Option<&Path>, chart: &mut Chart) {
    let (x_name, key) = box_axis(s);
    let mut categories = Vec::new();
    let mut out = Vec::new();
    let mut from_probes = true;
    let mut counts = Vec::new();
    for p in &s.points {
        let samples = dir.map(|d| rrul_samples(d, p)).unwrap_or_default();
        let (five, outliers) = match tukey(&samples) {
            Some(t) => {
                counts.push(samples.len());
                t
            }
            None => {
                let Some(st) = p.figures.get("rrul_loaded_latency_p50_us") else {
                    continue;
                };
                from_probes = false;
                let us = |v: f64| v * 1e-6;
                (
                    [us(st.min), us(st.q1), us(st.median), us(st.q3), us(st.max)],
                    Vec::new(),
                )
            }
        };
        out.push(BoxStat {
            category: categories.len(),
            series: series_of(s, p),
            five,
            outliers,
        });
        categories.push(box_category(p, key.as_deref()));
    }
    let what = "loaded round-trip time";
    let log = box_panel(chart, &x_name, categories, out, (what, Quantity::Seconds));
    chart.title = "Round trips under load (rrul) across the sweep".into();
    let n = trials_and_bars(s);
    let n = n.split(';').next().unwrap_or("");
    let scale = if log {
        " y axis log (the boxes span more than 30×)."
    } else {
        ""
    };
    chart.caption = if from_probes {
        let lo = counts.iter().min().unwrap_or(&0);
        let hi = counts.iter().max().unwrap_or(&0);
        format!(
            "Every UDP probe sent while the load ran, its trials pooled ({lo}–{hi} answered \
             probes per point; {n}). Box: first to third quartile; line: median; whiskers: \
             the furthest probe within 1.5 × IQR of the box (Tukey); small rings: probes \
             beyond.{scale}"
        )
    } else {
        format!(
            "The loaded median round trip of each trial; {n}. Box: first to third quartile; \
             line: median; whiskers: smallest and largest trial (the trials' files were not \
             read).{scale}"
        )
    };
}

fn latency(s: &ExperimentSummary, dir: Option<&Path>, chart: &mut Chart) -> Result<(), PlotError> {
    let Some(dir) = dir else {
        return Err(PlotError::NothingToDraw("latency"));
    };
    let mut runs = Vec::new();
    for p in &s.points {
        let results: Vec<Results> = p
            .files
            .iter()
            .filter_map(|f| load_results(&dir.join(f)).ok())
            .collect();
        // rrul trials: their loaded UDP probes' round trips, pooled.
        let rrul: Vec<f64> = results
            .iter()
            .filter_map(|r| r.end.rrul.as_ref())
            .flat_map(|rrul| super::rrul::samples(rrul, ProbeKind::Udp, true))
            .collect();
        let d = Distribution::of_trials(&results).or_else(|| Distribution::of_samples(rrul));
        if let Some(d) = d {
            runs.push((label(&p.point, None), d));
        }
    }
    if runs.is_empty() {
        return Err(PlotError::NoLatency);
    }
    chart.palette = Palette::new(runs.iter().map(|(l, _)| l.clone()));
    latency_panels(chart, &runs);
    if s.points
        .iter()
        .any(|p| p.figures.contains_key("rrul_loaded_latency_p50_us"))
    {
        chart.caption = "The round trips of every UDP probe sent under load (rrul), the \
                         trials of each point pooled, one curve per point. Bottom: the share \
                         slower than x, on a log scale, for the tail."
            .into();
    }
    Ok(())
}
