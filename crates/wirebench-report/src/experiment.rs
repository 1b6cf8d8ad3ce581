//! Experiments: the grid of a sweep (`--vary`), and the summary of its trials (statistics
//! per point, the knee of a rate sweep). Pure: the binary runs the trials; this module only
//! plans them and reads their results.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wirebench_proto::results::Results;
use wirebench_proto::units::{parse_rate, parse_size, Rate};
use wirebench_stats::{knee, summarize, Summary};

/// A parameter of `run` that a sweep can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Param {
    /// `-b`: bits/s (or `Npps`).
    Rate,
    /// `-l`: message size, bytes.
    Size,
    /// `-n`: amount, bytes.
    Bytes,
    /// `-t`: duration.
    Time,
    /// `--mode`.
    Mode,
    /// `--tcp` / `--udp`.
    Proto,
    /// `-P`.
    Parallel,
    /// `-R`: `forward` or `reverse`.
    Direction,
}

impl Param {
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "rate" | "b" => Self::Rate,
            "size" | "l" => Self::Size,
            "bytes" | "n" => Self::Bytes,
            "time" | "t" => Self::Time,
            "mode" => Self::Mode,
            "proto" | "protocol" => Self::Proto,
            "parallel" | "P" => Self::Parallel,
            "direction" => Self::Direction,
            other => {
                return Err(format!(
                    "--vary {other}: not a parameter (rate, size, bytes, time, mode, proto, parallel, direction)"
                ))
            }
        })
    }

    /// The name in results and CSV headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Size => "size",
            Self::Bytes => "bytes",
            Self::Time => "time",
            Self::Mode => "mode",
            Self::Proto => "proto",
            Self::Parallel => "parallel",
            Self::Direction => "direction",
        }
    }
}

/// One `--vary NAME=VALUES`: the parameter and its values, as `run` would take them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vary {
    /// What varies.
    pub param: Param,
    /// Its values, in order.
    pub values: Vec<String>,
}

/// A number of a range end: a size or a rate, with suffixes.
fn range_number(param: Param, s: &str) -> Result<f64, String> {
    match param {
        Param::Rate => match parse_rate(s).map_err(|e| e.to_string())? {
            Rate::BitsPerSecond(b) => Ok(b as f64),
            Rate::PacketsPerSecond(_) => {
                Err("a rate range takes bits/s (e.g. 1M..1G:log:10), not packets/s".into())
            }
        },
        Param::Size | Param::Bytes | Param::Parallel => {
            Ok(parse_size(s).map_err(|e| e.to_string())? as f64)
        }
        _ => Err(format!("--vary {}: no ranges, give a list", param.name())),
    }
}

/// Parses `NAME=V1,V2,...` or `NAME=FROM..TO:log:N` / `NAME=FROM..TO:lin:N` (N points,
/// ends included; log spaces them evenly in ratio, as seed 000's send speeds).
pub fn parse_vary(s: &str) -> Result<Vary, String> {
    let (name, values) = s
        .split_once('=')
        .ok_or_else(|| format!("--vary {s}: expected NAME=VALUES"))?;
    let param = Param::parse(name.trim())?;
    let values = values.trim();
    let list: Vec<String> = if let Some((range, spec)) = values.split_once(':') {
        let (from, to) = range
            .split_once("..")
            .ok_or_else(|| format!("--vary {s}: a range is FROM..TO:log|lin:N"))?;
        let (scale, n) = spec
            .split_once(':')
            .ok_or_else(|| format!("--vary {s}: a range is FROM..TO:log|lin:N"))?;
        let n: usize = n
            .parse()
            .ok()
            .filter(|n| (2..=1000).contains(n))
            .ok_or_else(|| format!("--vary {s}: N must be 2 to 1000"))?;
        if scale != "log" && scale != "lin" {
            return Err(format!("--vary {s}: the scale is log or lin"));
        }
        let (a, b) = (range_number(param, from)?, range_number(param, to)?);
        if !(a > 0.0 && b > a) {
            return Err(format!("--vary {s}: FROM must be above 0 and below TO"));
        }
        (0..n)
            .map(|i| {
                let f = i as f64 / (n - 1) as f64;
                let v = match scale {
                    "log" => a * (b / a).powf(f),
                    "lin" => a + (b - a) * f,
                    _ => f64::NAN,
                };
                format!("{}", v.round() as u64)
            })
            .collect()
    } else {
        values
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect()
    };
    if list.is_empty() {
        return Err(format!("--vary {s}: no values"));
    }
    Ok(Vary {
        param,
        values: list,
    })
}

/// One point of the grid: a value for each varied parameter.
pub type Point = Vec<(Param, String)>;

/// Every combination of the values, the first `--vary` varying slowest.
pub fn grid(varies: &[Vary]) -> Vec<Point> {
    let mut points: Vec<Point> = vec![Vec::new()];
    for v in varies {
        points = points
            .into_iter()
            .flat_map(|p| {
                v.values.iter().map(move |val| {
                    let mut q = p.clone();
                    q.push((v.param, val.clone()));
                    q
                })
            })
            .collect();
    }
    points
}

/// The figures a trial yields, by name (only those it has).
pub fn figures(r: &Results) -> BTreeMap<&'static str, f64> {
    let e = &r.end;
    let mut f = BTreeMap::new();
    f.insert("sent_bps", e.sent_bps);
    f.insert("received_bps", e.received_bps);
    f.insert("duration_s", e.duration_s);
    f.insert("sent_bytes", e.sent.bytes as f64);
    f.insert("sent_messages", e.sent.messages as f64);
    f.insert("received_bytes", e.received.bytes as f64);
    f.insert("received_messages", e.received.messages as f64);
    f.insert("received_duration_s", e.received.duration_s);
    if e.sent.bytes > 0 {
        f.insert(
            "delivered_fraction",
            e.received.bytes as f64 / e.sent.bytes as f64,
        );
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
    /// Whether these are a lab scenario's stack profiles, whose figure is goodput (seed
    /// 003's), rather than a sweep's points.
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
            series,
        })
        .collect();
    ExperimentSummary {
        points: summaries,
        knees,
    }
}

/// Seed 001's table, a row per point (means over the trials): time (ms), sent messages and
/// bytes, read messages and bytes, protocol, mechanism; for experiments that vary the amount.
pub fn seed_001_table(s: &ExperimentSummary) -> Option<String> {
    if !s.points.iter().any(|p| p.point.contains_key("bytes")) {
        return None;
    }
    let mut rows = vec![[
        "Time (ms)",
        "Sent messages",
        "Sent bytes",
        "Read messages",
        "Read bytes",
        "Protocol",
        "Mechanism",
    ]
    .map(String::from)
    .to_vec()];
    for p in &s.points {
        let m = |k: &str| p.figures.get(k).map_or(0.0, |x| x.mean);
        rows.push(vec![
            format!("{:.0}", m("duration_s") * 1000.0),
            format!("{:.0}", m("sent_messages")),
            format!("{:.0}", m("sent_bytes")),
            format!("{:.0}", m("received_messages")),
            format!("{:.0}", m("received_bytes")),
            p.point
                .get("proto")
                .cloned()
                .unwrap_or_else(|| "tcp".into()),
            p.point
                .get("mode")
                .map(|m| m.replace('-', "_"))
                .unwrap_or_else(|| "stream".into()),
        ]);
    }
    Some(crate::columns(&rows))
}

/// The experiment's summary as CSV: a row per point, the parameters, then for each figure
/// its mean, sd, min, median, max and 95% CI half-width.
pub fn summary_csv(s: &ExperimentSummary) -> String {
    let params: Vec<String> = {
        let mut v: Vec<String> = s
            .points
            .iter()
            .flat_map(|p| p.point.keys().cloned())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let figs: Vec<String> = {
        let mut v: Vec<String> = s
            .points
            .iter()
            .flat_map(|p| p.figures.keys().cloned())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let mut out = String::new();
    let mut head: Vec<String> = params.clone();
    head.push("trials".into());
    head.push("failed".into());
    for f in &figs {
        for stat in ["mean", "sd", "min", "median", "max", "ci95"] {
            head.push(format!("{f}_{stat}"));
        }
    }
    out.push_str(&head.join(","));
    out.push('\n');
    for p in &s.points {
        let mut row: Vec<String> = params
            .iter()
            .map(|k| p.point.get(k).cloned().unwrap_or_default())
            .collect();
        row.push(p.trials.to_string());
        row.push(p.failed.to_string());
        for f in &figs {
            match p.figures.get(f) {
                Some(x) => {
                    for v in [x.mean, x.stddev, x.min, x.median, x.max, x.ci95] {
                        row.push(format!("{v}"));
                    }
                }
                None => row.extend(std::iter::repeat_n(String::new(), 6)),
            }
        }
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varies_parse_lists_and_ranges() {
        let v = parse_vary("size=2,500").expect("list");
        assert_eq!(
            (v.param, v.values.clone()),
            (Param::Size, vec!["2".into(), "500".into()])
        );
        let r = parse_vary("rate=1M..1G:log:4").expect("range");
        assert_eq!(
            r.values,
            vec!["1000000", "10000000", "100000000", "1000000000"]
        );
        let l = parse_vary("bytes=1M..4M:lin:4").expect("lin");
        assert_eq!(l.values, vec!["1000000", "2000000", "3000000", "4000000"]);
        for bad in [
            "size",
            "color=1",
            "rate=1G..1M:log:3",
            "rate=1M..1G:cube:3",
            "rate=1M..1G:log:1",
            "size=",
            "mode=1..2:lin:2",
        ] {
            assert!(parse_vary(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_grid_is_every_combination_first_slowest() {
        let g = grid(&[
            parse_vary("proto=tcp,udp").expect("v"),
            parse_vary("size=1,2,3").expect("v"),
        ]);
        assert_eq!(g.len(), 6);
        assert_eq!(
            g[0],
            vec![(Param::Proto, "tcp".into()), (Param::Size, "1".into())]
        );
        assert_eq!(
            g[5],
            vec![(Param::Proto, "udp".into()), (Param::Size, "3".into())]
        );
        assert_eq!(grid(&[]), vec![Vec::<(Param, String)>::new()]);
    }
}
