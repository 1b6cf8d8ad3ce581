//! Plots from saved results (never from live state): SVG or PNG, with the DejaVu Sans font
//! built in, so a PNG renders the same on a machine with no fonts installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use wirebench_proto::packet_log::{LogError, Reader, Record};
use wirebench_proto::results::Results;

use crate::experiment::summary::ExperimentSummary;

/// DejaVu Sans (fonts/DejaVu-LICENSE: Bitstream Vera license, free to embed).
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

fn register_font() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // A static font that plotters' ab_glyph backend parses once.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Why a plot could not be made; each message says what would work.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// A `--kind` that is not one.
    #[error("--kind {0}: rate, received, time, box, throughput, latency or arrival")]
    UnknownKind(String),
    /// A kind that draws one result or a packet log, asked of an experiment.
    #[error(
        "--kind {0} draws one result (a trial's JSON file) or a packet log, not an experiment"
    )]
    NotForExperiment(&'static str),
    /// An experiment without the parameter the kind plots against.
    #[error("--kind {0}: this experiment has nothing to draw (a rate plot needs --vary rate, a time plot --vary bytes)")]
    NothingToDraw(&'static str),
    /// A kind that draws an experiment or a packet log, asked of one result.
    #[error("--kind {0} draws an experiment directory, or a packet log")]
    NotForResult(&'static str),
    /// `--kind latency` of a result with no round trips.
    #[error("--kind latency needs a request/response result (--mode rr or crr)")]
    NoLatency,
    /// A kind a packet log cannot draw.
    #[error("--kind {0}: a packet log draws --kind arrival")]
    NotForPacketLog(&'static str),
    /// A kind a link log cannot draw.
    #[error("--kind {0}: a link log draws --kind throughput or latency")]
    NotForLinkLog(&'static str),
    /// A directory without `summary.json`.
    #[error("{}: not an experiment directory: {source}", .dir.display())]
    NotAnExperiment {
        /// The directory.
        dir: PathBuf,
        /// Why `summary.json` could not be read.
        source: std::io::Error,
    },
    /// A file that could not be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A JSON document that is not what it should be.
    #[error("{}: {source}", .path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A packet log that could not be read.
    #[error("{}: {source}", .path.display())]
    PacketLog {
        /// The file.
        path: PathBuf,
        /// Why.
        source: LogError,
    },
    /// A packet log in which no datagram arrived.
    #[error("{}: no datagram arrived", .0.display())]
    NoDatagram(PathBuf),
    /// A CSV file without a link log's column.
    #[error("{}: not a link log (no {column} column)", .path.display())]
    NotALinkLog {
        /// The file.
        path: PathBuf,
        /// The missing column.
        column: &'static str,
    },
    /// A link log row with a field that is not a number.
    #[error("{}: line {line}: bad field {field}", .path.display())]
    BadField {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The field, from 1.
        field: usize,
    },
    /// A link log without a row.
    #[error("{}: the link log is empty", .0.display())]
    EmptyLinkLog(PathBuf),
    /// An image name that is neither `.svg` nor `.png`.
    #[error("{}: the file must end in .svg or .png", .0.display())]
    Extension(PathBuf),
    /// The drawing library failed (writing the file, most often).
    #[error("drawing: {0}")]
    Draw(String),
}

/// What to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Receive rate against send (offered) rate, with the ideal line (a rate sweep).
    Rate,
    /// Percent of the data received against send rate (a rate sweep).
    Received,
    /// Transfer time against data size, per protocol and mechanism (a transfer-time sweep).
    Time,
    /// Box plots of the receive rate (a lab scenario: the goodput) of the repeated trials of
    /// each point.
    Box,
    /// Send and receive rate over time, from one result's intervals.
    Throughput,
    /// Round-trip latency distribution from one result's percentiles.
    Latency,
    /// Arrival time against sequence number, lost packets marked at zero (as UDPmon).
    Arrival,
}

impl Kind {
    /// Parses a kind's name.
    pub fn parse(s: &str) -> Result<Self, PlotError> {
        Ok(match s {
            "rate" => Self::Rate,
            "received" => Self::Received,
            "time" => Self::Time,
            "box" => Self::Box,
            "throughput" => Self::Throughput,
            "latency" => Self::Latency,
            "arrival" => Self::Arrival,
            other => return Err(PlotError::UnknownKind(other.to_string())),
        })
    }

    /// Every kind, for a report.
    pub const ALL: [Kind; 7] = [
        Kind::Rate,
        Kind::Received,
        Kind::Time,
        Kind::Box,
        Kind::Throughput,
        Kind::Latency,
        Kind::Arrival,
    ];

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Received => "received",
            Self::Time => "time",
            Self::Box => "box",
            Self::Throughput => "throughput",
            Self::Latency => "latency",
            Self::Arrival => "arrival",
        }
    }
}

/// Named series of (x, y) points.
type Series = Vec<(String, Vec<(f64, f64)>)>;

/// A chart ready to draw: title, axis labels, series, and how to scale the axes.
#[derive(Default)]
pub struct Chart {
    title: String,
    x_label: String,
    y_label: String,
    series: Series,
    /// Marked points in red (lost packets), drawn over the series.
    marks: Vec<(f64, f64)>,
    /// The ideal line y = x.
    ideal: bool,
    log_x: bool,
    /// Boxes: (x position label, min, q1, median, q3, max).
    boxes: Vec<(String, [f64; 5])>,
}

impl Chart {
    /// The number of data series (boxes count one each).
    pub fn series_count(&self) -> usize {
        self.series.len() + self.boxes.len()
    }
}

fn series_name(point: &BTreeMap<String, String>, skip: &[&str]) -> String {
    let parts: Vec<String> = point
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(", ")
    }
}

/// A chart from an experiment's summary, and the trial results its box plots need.
pub fn experiment_chart(kind: Kind, s: &ExperimentSummary) -> Result<Chart, PlotError> {
    let mut chart = Chart::default();
    let mut grouped: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    match kind {
        Kind::Rate | Kind::Received => {
            for p in &s.points {
                let Some(x) = p.offered_bps else { continue };
                let y = match kind {
                    Kind::Rate => p.figures.get("received_bps").map(|f| f.mean / 1e6),
                    _ => p.figures.get("delivered_fraction").map(|f| f.mean * 100.0),
                };
                if let Some(y) = y {
                    grouped
                        .entry(series_name(&p.point, &["rate"]))
                        .or_default()
                        .push((x / 1e6, y));
                }
            }
            chart.x_label = "send rate (Mbit/s)".into();
            if kind == Kind::Rate {
                chart.title = "Receive rate against send rate".into();
                chart.y_label = "receive rate (Mbit/s)".into();
                chart.ideal = true;
            } else {
                chart.title = "Data received against send rate".into();
                chart.y_label = "received (%)".into();
            }
            chart.log_x = true;
        }
        Kind::Time => {
            for p in &s.points {
                let (Some(b), Some(t)) = (
                    p.point.get("bytes").and_then(|b| b.parse::<f64>().ok()),
                    p.figures.get("duration_s"),
                ) else {
                    continue;
                };
                grouped
                    .entry(series_name(&p.point, &["bytes"]))
                    .or_default()
                    .push((b / 1e6, t.mean * 1000.0));
            }
            chart.title = "Transfer time against data size".into();
            chart.x_label = "data (MB)".into();
            chart.y_label = "time (ms)".into();
            chart.log_x = true;
        }
        Kind::Box => {
            // A lab scenario's points have goodput; a sweep's, the receive rate. The quartiles are over the point's trials.
            let goodput = s.is_scenario();
            let figure = s.rate_figure();
            for p in &s.points {
                let Some(st) = p.figures.get(figure) else {
                    continue;
                };
                let m = |x: f64| x / 1e6;
                chart.boxes.push((
                    series_name(&p.point, &[]),
                    [m(st.min), m(st.q1), m(st.median), m(st.q3), m(st.max)],
                ));
            }
            let what = if goodput { "goodput" } else { "receive rate" };
            chart.title = format!("The {what} of the repeated trials");
            chart.x_label = "point".into();
            chart.y_label = format!("{what} (Mbit/s)");
        }
        _ => return Err(PlotError::NotForExperiment(kind.name())),
    }
    for pts in grouped.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    chart.series = grouped.into_iter().collect();
    if chart.series.is_empty() && chart.boxes.is_empty() {
        return Err(PlotError::NothingToDraw(kind.name()));
    }
    Ok(chart)
}

/// Reads a results document.
pub fn load_results(path: &Path) -> Result<Results, PlotError> {
    let text = std::fs::read(path).map_err(|source| PlotError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| PlotError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads an experiment's `summary.json` from its directory.
pub fn load_summary(dir: &Path) -> Result<ExperimentSummary, PlotError> {
    let path = dir.join("summary.json");
    let text = std::fs::read(&path).map_err(|source| PlotError::NotAnExperiment {
        dir: dir.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| PlotError::Json { path, source })
}

/// The chart of `input` as `kind`, by what `input` is: an experiment directory (default: box
/// plots for a lab scenario's profiles, else the rate curve), a link log (`.csv`; default
/// throughput), one result (`.json`; default throughput), or else a packet log (arrival).
pub fn chart_for(input: &Path, kind: Option<Kind>) -> Result<Chart, PlotError> {
    if input.is_dir() {
        let summary = load_summary(input)?;
        let default = if summary.is_scenario() {
            Kind::Box
        } else {
            Kind::Rate
        };
        experiment_chart(kind.unwrap_or(default), &summary)
    } else if input.extension().is_some_and(|e| e == "csv") {
        link_log_chart(input, kind.unwrap_or(Kind::Throughput))
    } else if input.extension().is_some_and(|e| e == "json") {
        result_chart(kind.unwrap_or(Kind::Throughput), &load_results(input)?)
    } else {
        match kind {
            None | Some(Kind::Arrival) => arrival_chart(input),
            Some(k) => Err(PlotError::NotForPacketLog(k.name())),
        }
    }
}

/// A chart from one results document.
pub fn result_chart(kind: Kind, r: &Results) -> Result<Chart, PlotError> {
    let mut chart = Chart::default();
    match kind {
        Kind::Throughput => {
            let mid = |i: &wirebench_proto::results::IntervalView| (i.start_s + i.end_s) / 2.0;
            let sent: Vec<(f64, f64)> = r
                .intervals
                .iter()
                .map(|i| (mid(i), i.sent_bps / 1e6))
                .collect();
            let got: Vec<(f64, f64)> = r
                .intervals
                .iter()
                .map(|i| (mid(i), i.received_bps / 1e6))
                .collect();
            chart.series = vec![("sent".into(), sent), ("received".into(), got)];
            chart.title = "Rate over time".into();
            chart.x_label = "time (s)".into();
            chart.y_label = "rate (Mbit/s)".into();
        }
        Kind::Latency => {
            let l = r.end.latency_us.as_ref().ok_or(PlotError::NoLatency)?;
            let pts = vec![
                (l.min, 0.0),
                (l.p50, 50.0),
                (l.p90, 90.0),
                (l.p99, 99.0),
                (l.p999, 99.9),
                (l.max, 100.0),
            ];
            chart.series = vec![("round trip (at its percentiles)".into(), pts)];
            chart.title = "Round-trip latency distribution".into();
            chart.x_label = "round trip (µs)".into();
            chart.y_label = "transactions at or below (%)".into();
            chart.log_x = true;
        }
        _ => return Err(PlotError::NotForResult(kind.name())),
    }
    Ok(chart)
}

/// UDPmon's plot from a packet log: arrival time since the first datagram against sequence
/// number; lost datagrams marked at zero.
pub fn arrival_chart(log: &Path) -> Result<Chart, PlotError> {
    let f = std::fs::File::open(log).map_err(|source| PlotError::Read {
        path: log.to_path_buf(),
        source,
    })?;
    let bad = |source| PlotError::PacketLog {
        path: log.to_path_buf(),
        source,
    };
    let reader = Reader::new(std::io::BufReader::new(f)).map_err(bad)?;
    let mut first = None;
    let mut got = Vec::new();
    let mut lost = Vec::new();
    for rec in reader {
        match rec.map_err(bad)? {
            Record::Datagram {
                seq,
                arrival_unix_ns,
                ..
            } => {
                let t0 = *first.get_or_insert(arrival_unix_ns);
                got.push((seq as f64, arrival_unix_ns.saturating_sub(t0) as f64 / 1e6));
            }
            Record::Lost { first: s, count } => {
                // Long runs are drawn as their ends: a plot has no room for millions.
                if count <= 10_000 {
                    lost.extend((s..s + count).map(|q| (q as f64, 0.0)));
                } else {
                    lost.push((s as f64, 0.0));
                    lost.push(((s + count - 1) as f64, 0.0));
                }
            }
        }
    }
    if got.is_empty() {
        return Err(PlotError::NoDatagram(log.to_path_buf()));
    }
    Ok(Chart {
        title: "Arrival time against sequence number".into(),
        x_label: "sequence number".into(),
        y_label: "arrival since the first (ms)".into(),
        series: vec![("received".into(), got)],
        marks: lost,
        ideal: false,
        log_x: false,
        boxes: Vec::new(),
    })
}

/// Mahimahi's throughput and delay graphs from a link log (`wirebench lab --link-log`):
/// the rate each link direction delivered (`throughput`), or its longest queue wait
/// (`latency`), interval by interval.
pub fn link_log_chart(log: &Path, kind: Kind) -> Result<Chart, PlotError> {
    let text = std::fs::read_to_string(log).map_err(|source| PlotError::Read {
        path: log.to_path_buf(),
        source,
    })?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &'static str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| PlotError::NotALinkLog {
                path: log.to_path_buf(),
                column: name,
            })
    };
    let (t, link, dir) = (col("t_s")?, col("link")?, col("direction")?);
    let (y, y_label, title, scale) = match kind {
        Kind::Throughput => (
            col("delivered_bps")?,
            "delivered (Mbit/s)",
            "Link throughput",
            1e-6,
        ),
        Kind::Latency => (
            col("max_queue_delay_ms")?,
            "longest queue wait (ms)",
            "Link queueing delay",
            1.0,
        ),
        other => return Err(PlotError::NotForLinkLog(other.name())),
    };
    let mut series: Series = Vec::new();
    for (n, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> Result<f64, PlotError> {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| PlotError::BadField {
                    path: log.to_path_buf(),
                    line: n + 2,
                    field: i + 1,
                })
        };
        let name = format!(
            "{} {}",
            f.get(link).unwrap_or(&"?"),
            f.get(dir).unwrap_or(&"?")
        );
        let point = (num(t)?, num(y)? * scale);
        match series.iter_mut().find(|(s, _)| *s == name) {
            Some((_, pts)) => pts.push(point),
            None => series.push((name, vec![point])),
        }
    }
    if series.is_empty() {
        return Err(PlotError::EmptyLinkLog(log.to_path_buf()));
    }
    Ok(Chart {
        title: title.into(),
        x_label: "time since the lab began (s)".into(),
        y_label: y_label.into(),
        series,
        ..Chart::default()
    })
}

fn bounds(chart: &Chart) -> ((f64, f64), (f64, f64)) {
    let all = chart
        .series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .chain(chart.marks.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
    for (x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    for (_, b) in &chart.boxes {
        y1 = y1.max(b[4]);
    }
    if !chart.boxes.is_empty() {
        (x0, x1) = (0.0, chart.boxes.len() as f64);
    }
    if chart.ideal {
        y1 = y1.max(x1);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    ((x0, x1), (y0, y1 * 1.05))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(x.to_string());
    root.fill(&WHITE).map_err(e)?;
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let mut b = ChartBuilder::on(&root);
    b.caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64);
    let colors = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    macro_rules! finish {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(e)?;
            if chart.ideal {
                let line: Vec<(f64, f64)> = (0..=100)
                    .map(|i| x0 * (x1 / x0).powf(i as f64 / 100.0))
                    .map(|x| (x, x))
                    .collect();
                ctx.draw_series(LineSeries::new(line, BLACK.mix(0.4)))
                    .map_err(e)?
                    .label("ideal: all received")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.4)));
            }
            for (i, (name, pts)) in chart.series.iter().enumerate() {
                let c = colors[i % colors.len()];
                if pts.len() > 2000 {
                    ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 1, c.filled())))
                        .map_err(e)?
                        .label(name.as_str())
                        .legend(move |(x, y)| Circle::new((x + 8, y), 3, c.filled()));
                } else {
                    ctx.draw_series(LineSeries::new(pts.iter().copied(), c))
                        .map_err(e)?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
                    ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(e)?;
                }
            }
            if !chart.marks.is_empty() {
                ctx.draw_series(chart.marks.iter().map(|&p| Cross::new(p, 3, RED)))
                    .map_err(e)?
                    .label("lost")
                    .legend(|(x, y)| Cross::new((x + 8, y), 3, RED));
            }
            for (i, (_, q)) in chart.boxes.iter().enumerate() {
                let (l, r, m) = (i as f64 + 0.25, i as f64 + 0.75, i as f64 + 0.5);
                let c = colors[i % colors.len()];
                ctx.draw_series(std::iter::once(Rectangle::new(
                    [(l, q[1]), (r, q[3])],
                    c.stroke_width(2),
                )))
                .map_err(e)?;
                ctx.draw_series(
                    [
                        vec![(l, q[2]), (r, q[2])],
                        vec![(m, q[0]), (m, q[1])],
                        vec![(m, q[3]), (m, q[4])],
                        vec![(l + 0.1, q[0]), (r - 0.1, q[0])],
                        vec![(l + 0.1, q[4]), (r - 0.1, q[4])],
                    ]
                    .into_iter()
                    .map(|p| PathElement::new(p, c.stroke_width(2))),
                )
                .map_err(e)?
                .label(chart.boxes[i].0.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 4), (x + 12, y + 4)], c.stroke_width(2))
                });
            }
            ctx.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(e)?;
        }};
    }
    if chart.log_x && x0 > 0.0 {
        finish!(b
            .build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), y0..y1)
            .map_err(e)?);
    } else {
        finish!(b.build_cartesian_2d(x0..x1, y0..y1).map_err(e)?);
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Size of every plot, pixels.
pub const SIZE: (u32, u32) = (960, 600);

/// Writes `chart` to `out`: SVG or PNG by its extension.
pub fn write(chart: &Chart, out: &Path) -> Result<(), PlotError> {
    register_font();
    match out.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(SVGBackend::new(out, SIZE).into_drawing_area(), chart),
        Some("png") => draw(BitMapBackend::new(out, SIZE).into_drawing_area(), chart),
        _ => Err(PlotError::Extension(out.to_path_buf())),
    }
}

/// `chart` as an SVG document, for a report.
pub fn svg_string(chart: &Chart) -> Result<String, PlotError> {
    register_font();
    let mut s = String::new();
    draw(
        SVGBackend::with_string(&mut s, SIZE).into_drawing_area(),
        chart,
    )?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("wirebench-plot-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).expect("write");
        p
    }

    #[test]
    fn errors_keep_their_words_and_hints() {
        let e = Kind::parse("pie").expect_err("not a kind");
        assert_eq!(
            e.to_string(),
            "--kind pie: rate, received, time, box, throughput, latency or arrival"
        );
        let empty = ExperimentSummary {
            points: Vec::new(),
            knees: Vec::new(),
        };
        assert_eq!(
            experiment_chart(Kind::Rate, &empty)
                .err()
                .map(|e| e.to_string()),
            Some("--kind rate: this experiment has nothing to draw (a rate plot needs --vary rate, a time plot --vary bytes)".into())
        );
        assert!(matches!(
            experiment_chart(Kind::Arrival, &empty),
            Err(PlotError::NotForExperiment("arrival"))
        ));
        let log = temp("links.csv", b"t_s,link,direction\n");
        assert_eq!(
            link_log_chart(&log, Kind::Throughput)
                .err()
                .map(|e| e.to_string()),
            Some(format!(
                "{}: not a link log (no delivered_bps column)",
                log.display()
            ))
        );
        let junk = temp("junk.log", b"junk");
        assert!(matches!(
            chart_for(&junk, Some(Kind::Rate)),
            Err(PlotError::NotForPacketLog("rate"))
        ));
        assert!(matches!(
            chart_for(&junk, None),
            Err(PlotError::PacketLog { .. })
        ));
        let chart = Chart::default();
        assert_eq!(
            write(&chart, Path::new("plot.gif")).map_err(|e| e.to_string()),
            Err("plot.gif: the file must end in .svg or .png".to_string())
        );
        let _ = std::fs::remove_file(log);
        let _ = std::fs::remove_file(junk);
    }
}
