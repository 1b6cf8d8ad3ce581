//! Plots from saved results (never from live state): SVG or PNG, with the DejaVu Sans font
//! built in, so a PNG renders the same on a machine with no fonts installed.
//!
//! Every plot is first a [`Chart`] (`chart`: panels, series, error bars, boxes, colours by
//! series label), built from an experiment (`experiment`), one result (`result`, with the
//! latency distributions of `latency`), a packet log or a link log (here), then drawn
//! (`draw`, with the axes of `axes` and the labels and notes of `marks`) with the units and
//! ticks of `scale`, at the size and resolution of [`Options`].

mod axes;
mod chart;
mod draw;
mod experiment;
mod glyphs;
mod latency;
mod look;
mod marks;
mod result;
mod rrul;
pub mod scale;
#[cfg(test)]
mod svg_checks;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use wirebench_proto::packet_log::{LogError, Reader, Record};
use wirebench_proto::results::Results;

pub use chart::{
    Axis, Band, BoxStat, Chart, Mark, Palette, Panel, Pt, Series, Style, PALETTE, REFERENCE,
};
pub use experiment::{experiment_chart_in, palette, series_of};
pub use latency::Distribution;
pub use result::result_chart;
pub use rrul::{rrul_chart, rrul_comparison};

use crate::experiment::summary::ExperimentSummary;
use scale::Quantity;

/// DejaVu Sans (fonts/DejaVu-LICENSE: Bitstream Vera license, free to embed).
static FONT: &[u8] = include_bytes!("../../fonts/DejaVuSans.ttf");

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
    #[error("--kind {0}: rate, received, time, box, throughput, latency, arrival or rrul")]
    UnknownKind(String),
    /// Several inputs that are not all results of the kind a comparison draws.
    #[error("{}: several inputs are compared only as results (.json) of `run --mode rrul`, drawn with --kind rrul; an experiment's shards are directories", .0.display())]
    NotComparable(PathBuf),
    /// A size or resolution out of range.
    #[error("{0}")]
    Size(String),
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
    #[error("--kind {0}: a packet log draws --kind arrival or latency")]
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
    /// A link log naming more link directions, or longer names, than a plot can show.
    #[error("{}: line {line}: {why}", .path.display())]
    LinkLogTooWide {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is too much.
        why: &'static str,
    },
    /// An image name that is neither `.svg` nor `.png`.
    #[error("{}: the file must end in .svg or .png", .0.display())]
    Extension(PathBuf),
    /// A file refused by the checked loaders.
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    /// The drawing library failed.
    #[error("drawing: {0}")]
    Draw(String),
    /// The image could not be written (an earlier one of that name is intact).
    #[error(transparent)]
    Write(#[from] crate::output::WriteError),
}

/// How y axes are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum YScale {
    /// As the chart chose: log where the values span more than 30 times.
    #[default]
    Auto,
    /// Linear.
    Linear,
    /// Logarithmic.
    Log,
}

/// How a chart is drawn: its size and resolution, and its axes' ranges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Width, pixels (`None`: 3.5 inches at `dpi`, a paper's column; two columns for a
    /// comparison side by side).
    pub width: Option<u32>,
    /// Height, pixels (`None`: from the width and the number of panels).
    pub height: Option<u32>,
    /// Dots per inch the image is meant to print at: text is set in points (tick labels
    /// 7 pt), so more dots per inch is larger text in pixels.
    pub dpi: f64,
    /// Draw every y axis to its largest value, rather than to the data's body.
    pub full_range: bool,
    /// y axes: as chosen, or forced linear or log.
    pub y_scale: YScale,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            width: None,
            height: None,
            dpi: 300.0,
            full_range: false,
            y_scale: YScale::Auto,
        }
    }
}

/// Sizes an image may be, pixels: enough for a poster, and a buffer that stays bounded.
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 200..=8000;
/// Resolutions, dots per inch.
pub const DPI_RANGE: std::ops::RangeInclusive<f64> = 50.0..=1200.0;

impl Options {
    /// The image's size for `chart`, checked.
    pub fn size(&self, chart: &Chart) -> Result<(u32, u32), PlotError> {
        if !DPI_RANGE.contains(&self.dpi) {
            return Err(PlotError::Size(format!(
                "--dpi {}: give {} to {}",
                self.dpi,
                DPI_RANGE.start(),
                DPI_RANGE.end()
            )));
        }
        let (w, h) = draw::default_size(chart, self);
        for (name, v) in [("--width", w), ("--height", h)] {
            if !SIZE_RANGE.contains(&v) {
                return Err(PlotError::Size(format!(
                    "{name} {v}: an image is {} to {} pixels each way",
                    SIZE_RANGE.start(),
                    SIZE_RANGE.end()
                )));
            }
        }
        Ok((w, h))
    }
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
    /// Latency under load (`run --mode rrul`): download, upload and the probes' round trips
    /// over time, the load's phase shaded.
    Rrul,
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
            "rrul" => Self::Rrul,
            other => return Err(PlotError::UnknownKind(other.to_string())),
        })
    }

    /// Every kind, for a report.
    pub const ALL: [Kind; 8] = [
        Kind::Rate,
        Kind::Received,
        Kind::Time,
        Kind::Box,
        Kind::Throughput,
        Kind::Latency,
        Kind::Arrival,
        Kind::Rrul,
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
            Self::Rrul => "rrul",
        }
    }
}

/// A chart from an experiment's summary alone (box plots then show min–max whiskers, and
/// no latency plot can be drawn: those need the trials' files, see [`experiment_chart_in`]).
pub fn experiment_chart(kind: Kind, s: &ExperimentSummary) -> Result<Chart, PlotError> {
    experiment_chart_in(kind, s, None)
}

/// The kind an experiment is drawn as by default: box plots of a lab scenario's profiles,
/// the rate curve of a rate sweep, transfer time of a bytes sweep, else box plots.
/// (A packet log draws `arrival`, or `latency`: the one-way delay of every datagram.)
pub fn default_kind(s: &ExperimentSummary) -> Kind {
    let has = |k: &str| s.points.iter().any(|p| p.point.contains_key(k));
    if s.is_scenario() {
        Kind::Box
    } else if has("rate") {
        Kind::Rate
    } else if has("bytes") {
        Kind::Time
    } else {
        Kind::Box
    }
}

/// Reads a results document (checked: see [`crate::input`]).
pub fn load_results(path: &Path) -> Result<Results, PlotError> {
    Ok(crate::input::results(path)?)
}

/// Reads an experiment's `summary.json` from its directory (checked: see [`crate::input`]).
pub fn load_summary(dir: &Path) -> Result<ExperimentSummary, PlotError> {
    Ok(crate::input::summary(dir)?)
}

/// Up to the first 16 bytes of a regular file (none of anything else, or of a file that
/// cannot be read: what reads it next says why).
fn first_bytes(path: &Path) -> Vec<u8> {
    let mut head = Vec::new();
    if let Ok(f) = crate::input::open_regular(path, "file", u64::MAX) {
        let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 16), &mut head);
    }
    head
}

/// The chart of `input` as `kind`, by what `input` is: an experiment directory (default: box
/// plots for a lab scenario's profiles, else the rate curve), a link log (`.csv`; default
/// throughput), one result (`.json`; default throughput, or rrul for an rrul run), or else
/// a packet log (arrival); a file named otherwise that begins as a link log or a JSON
/// document is read as one.
pub fn chart_for(input: &Path, kind: Option<Kind>) -> Result<Chart, PlotError> {
    let named = |ext: &str| input.extension().is_some_and(|e| e == ext);
    // A file named otherwise (`links.txt`) is known by its first bytes.
    let head = if input.is_dir() || named("csv") || named("json") {
        Vec::new()
    } else {
        first_bytes(input)
    };
    let head = String::from_utf8_lossy(&head);
    if input.is_dir() {
        let summary = load_summary(input)?;
        let kind = kind.unwrap_or_else(|| default_kind(&summary));
        if matches!(kind, Kind::Box | Kind::Latency) {
            // Drawn from the trials' own files: a bad one stops the plot, named, rather
            // than leaving its point's box out.
            let files = summary.points.iter().flat_map(|p| &p.files);
            crate::experiment::trial::check_files(input, files)?;
        }
        experiment_chart_in(kind, &summary, Some(input))
    } else if named("csv") || head.starts_with("t_s,link,") {
        link_log_chart(input, kind.unwrap_or(Kind::Throughput))
    } else if named("json") || head.trim_start().starts_with('{') {
        let r = load_results(input)?;
        // An rrul result is drawn as flent's "all" view unless another kind is asked.
        let fallback = if r.end.rrul.is_some() {
            Kind::Rrul
        } else {
            Kind::Throughput
        };
        result_chart(kind.unwrap_or(fallback), &r)
    } else {
        match kind {
            None | Some(Kind::Arrival) => arrival_chart(input),
            Some(Kind::Latency) => packet_delay_chart(input),
            Some(k) => Err(PlotError::NotForPacketLog(k.name())),
        }
    }
}

/// The chart of several inputs: results of `run --mode rrul` compared side by side, with
/// shared scales (`--kind rrul`, or no kind). One input is drawn as [`chart_for`] does.
pub fn chart_for_all(inputs: &[PathBuf], kind: Option<Kind>) -> Result<Chart, PlotError> {
    match inputs {
        [] => Err(PlotError::Size("nothing to draw".into())),
        [one] => chart_for(one, kind),
        many => {
            let mut results = Vec::with_capacity(many.len());
            for path in many {
                let json = path.extension().is_some_and(|e| e == "json");
                if !json || !matches!(kind, None | Some(Kind::Rrul)) {
                    return Err(PlotError::NotComparable(path.clone()));
                }
                let r = load_results(path)?;
                if r.end.rrul.is_none() {
                    return Err(PlotError::NotComparable(path.clone()));
                }
                let name = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                results.push((name, r));
            }
            rrul_comparison(&results)
        }
    }
}

/// UDPmon's plot from a packet log: arrival time since the first datagram against sequence
/// number; lost datagrams marked at zero.
pub fn arrival_chart(log: &Path) -> Result<Chart, PlotError> {
    let f = crate::input::packet_log(log)?;
    let bad = |source| PlotError::PacketLog {
        path: log.to_path_buf(),
        source,
    };
    // Checked: loss runs marked within a budget, whatever the records claim.
    let crate::input::Arrivals {
        received,
        received_count,
        every,
        lost,
        lost_count,
    } = crate::input::arrivals_from(std::io::BufReader::new(f)).map_err(bad)?;
    let got: Vec<Pt> = received.into_iter().map(|(x, y)| Pt::at(x, y)).collect();
    if got.is_empty() {
        return Err(PlotError::NoDatagram(log.to_path_buf()));
    }
    let drawn = if every > 1 {
        format!(
            " One datagram in {every} is drawn ({} dots), evenly through the log.",
            got.len()
        )
    } else {
        String::new()
    };
    let mut panel = Panel::new(
        Axis::linear("sequence number", Quantity::Count),
        Axis::linear("arrival since the first datagram", Quantity::Seconds),
    );
    let received = received_count;
    panel.series.push(Series::new("received", Style::Dots, got));
    panel.lost = lost;
    Ok(Chart {
        title: "Arrival time against sequence number".into(),
        caption: format!(
            "Every datagram of one UDP run (packet log): when it arrived, since the first, \
             against its sequence number; {received} arrived, {lost_count} were lost (crosses \
             at 0). A straight line is an even arrival rate; steps are bursts or stalls.{drawn}"
        ),
        panels: vec![panel],
        palette: Palette::ordered(&["received"]),
        ..Chart::default()
    })
}

/// The one-way delay of every datagram of a packet log (arrival minus send time), as a CDF
/// and CCDF: a full distribution, not a summary. Absolute only when both ends read one
/// clock (loopback, a lab): the caption says so.
pub fn packet_delay_chart(log: &Path) -> Result<Chart, PlotError> {
    let f = crate::input::packet_log(log)?;
    let bad = |source| PlotError::PacketLog {
        path: log.to_path_buf(),
        source,
    };
    let reader = Reader::new(std::io::BufReader::new(f)).map_err(bad)?;
    // Every delay counted in an HDR histogram (exact to 0.1%, fixed memory): a log of a
    // billion datagrams is read in the memory of a thousand.
    let mut delays = wirebench_stats::TimeHistogram::new();
    for rec in reader {
        if let Record::Datagram {
            send_unix_ns,
            arrival_unix_ns,
            ..
        } = rec.map_err(bad)?
        {
            delays.record(arrival_unix_ns as i64 - send_unix_ns as i64);
        }
    }
    let n = delays.count();
    let (Some(min), Some(max)) = (delays.quantile(0.0), delays.quantile(1.0)) else {
        return Err(PlotError::NoDatagram(log.to_path_buf()));
    };
    // A thousand steps of the CDF are more than a plot can show; the extremes are exact.
    let s = |ns: i64| ns as f64 * 1e-9;
    let mut cumulative = vec![(s(min), 1.0 / n as f64)];
    cumulative.extend((1..1000).filter_map(|i| {
        let q = f64::from(i) / 1000.0;
        Some((s(delays.quantile(q)?), q))
    }));
    cumulative.push((s(max), 1.0));
    let d = Distribution {
        cumulative,
        count: n,
        buckets: usize::try_from(n).unwrap_or(usize::MAX),
    };
    let mut chart = Chart {
        palette: Palette::ordered(&["one-way delay"]),
        ..Chart::default()
    };
    latency::latency_panels(&mut chart, &[("one-way delay".into(), d)]);
    chart.title = "One-way delay distribution".into();
    for p in &mut chart.panels {
        p.x.label = "one-way delay".into();
    }
    chart.caption = format!(
        "Every datagram of one UDP run (packet log): arrival time minus send time, {n} \
         datagrams, each one counted, to 0.1% of its value (absolute only if both ends read \
         one clock, as on loopback or in a lab). Bottom: the share of datagrams later than x, \
         on a log scale."
    );
    Ok(chart)
}

/// Mahimahi's throughput and delay graphs from a link log (`wirebench lab --link-log`):
/// the rate each link direction delivered (`throughput`), or its longest queue wait
/// (`latency`), interval by interval.
pub fn link_log_chart(log: &Path, kind: Kind) -> Result<Chart, PlotError> {
    // Checked: size capped, every number finite and in range.
    let text = crate::input::link_log_text(log)?;
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
    // The columns every view needs first, then the kind (a log without them is not a
    // link log, whatever was asked of it).
    let (t, link, dir) = (col("t_s")?, col("link")?, col("direction")?);
    let view = LinkLogView::of(kind)?;
    let columns = LinkLogColumns {
        t,
        link,
        dir,
        y: col(view.column)?,
    };
    let mut series = link_log_series(log, lines.clone(), &columns, view.scale)?;
    if series.is_empty() {
        return Err(PlotError::EmptyLinkLog(log.to_path_buf()));
    }
    let quiet = leave_out_quiet(&mut series);
    // Beside the delivered rate, what each direction could carry (a log from before the
    // column has none; a direction without a limit logs 0 and has none either).
    let capacity = match (kind, header.iter().position(|h| *h == "capacity_bps")) {
        (Kind::Throughput, Some(y)) => {
            let c = LinkLogColumns { y, ..columns };
            let mut cap = link_log_series(log, lines, &c, 1.0)?;
            cap.retain(|(_, pts)| pts.iter().any(|p| p.1 > 0.0));
            cap
        }
        _ => Vec::new(),
    };
    let has_capacity = !capacity.is_empty();
    let (panels, palette) = link_log_panels(&view, series, capacity);
    Ok(Chart {
        title: view.title.into(),
        caption: format!(
            "From a lab link log ({}): {}{}, per logging interval (each step one interval).{}",
            log.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            view.what,
            if has_capacity {
                ", over the capacity it had (shaded: wire bytes, as a fixed rate or a \
                 trace's 1504-byte opportunities count them; delivered counts IP bytes)"
            } else {
                ""
            },
            if quiet.is_empty() {
                String::new()
            } else {
                format!(" Always 0, not drawn: {}.", quiet.join(", "))
            }
        ),
        palette,
        panels,
        ..Chart::default()
    })
}

/// The most link directions drawn a panel each, with their capacity; more share one.
const CAPACITY_PANELS: usize = 4;

/// The panels of a link log chart and their palette: one panel of every direction's line;
/// or, with capacities, a panel per direction with its capacity shaded under what it
/// delivered, as `mm-link` graphs each direction on its own (more than
/// [`CAPACITY_PANELS`] directions share one panel, each capacity shaded).
fn link_log_panels(
    view: &LinkLogView,
    series: Vec<LinkSeries>,
    capacity: Vec<LinkSeries>,
) -> (Vec<Panel>, Palette) {
    let x = Axis::linear("time since the lab began", Quantity::Seconds);
    let panel = |y_label: &str, series: Vec<Series>| {
        let mut p = Panel::new(x.clone(), Axis::linear(y_label, view.quantity));
        p.series = series;
        // A burst in one interval is marked at the top rather than setting the axis.
        p.body = true;
        p
    };
    let line = |label: String, pts: &[(f64, f64)]| Series::new(label, Style::Line, steps(pts));
    let area = |label: String, pts: &[(f64, f64)]| Series::new(label, Style::Area, steps(pts));
    if capacity.is_empty() {
        let palette = Palette::new(series.iter().map(|(label, _)| label.clone()));
        let lines = series.iter().map(|(l, pts)| line(l.clone(), pts)).collect();
        return (vec![panel(view.y_label, lines)], palette);
    }
    if series.len() <= CAPACITY_PANELS {
        let panels = series
            .iter()
            .map(|(name, pts)| {
                let cap = capacity.iter().find(|(c, _)| c == name);
                let drawn = cap
                    .map(|(_, c)| area("capacity".into(), c))
                    .into_iter()
                    .chain([line("delivered".into(), pts)])
                    .collect();
                panel(name, drawn)
            })
            .collect();
        return (panels, Palette::ordered(&["delivered", "capacity"]));
    }
    // Deliveries keep the colours they have without capacities; shaded ones drawn first.
    let mut labels: Vec<String> = series.iter().map(|(l, _)| l.clone()).collect();
    labels.sort();
    let mut caps: Vec<String> = capacity
        .iter()
        .map(|(l, _)| format!("{l} capacity"))
        .collect();
    caps.sort();
    labels.extend(caps);
    let palette = Palette::ordered(&labels.iter().map(String::as_str).collect::<Vec<_>>());
    let drawn = capacity
        .iter()
        .map(|(l, pts)| area(format!("{l} capacity"), pts))
        .chain(series.iter().map(|(l, pts)| line(l.clone(), pts)))
        .collect();
    (vec![panel(view.y_label, drawn)], palette)
}

/// What a link log chart of one kind draws, and how it names it.
struct LinkLogView {
    /// The column drawn on the y axis.
    column: &'static str,
    /// Its scale into `quantity`'s base unit (ms to s).
    scale: f64,
    quantity: Quantity,
    y_label: &'static str,
    title: &'static str,
    /// What the caption says is drawn.
    what: &'static str,
}

impl LinkLogView {
    /// The view of `kind`: `throughput` or `latency`, the kinds a link log draws.
    fn of(kind: Kind) -> Result<Self, PlotError> {
        Ok(match kind {
            Kind::Throughput => Self {
                column: "delivered_bps",
                scale: 1.0,
                quantity: Quantity::BitRate,
                y_label: "delivered rate",
                title: "Link throughput",
                what: "the rate each link direction delivered",
            },
            Kind::Latency => Self {
                column: "max_queue_delay_ms",
                scale: 1e-3,
                quantity: Quantity::Seconds,
                y_label: "longest queue wait",
                title: "Link queueing delay",
                what: "the longest time a packet waited in each link direction's queue",
            },
            other => return Err(PlotError::NotForLinkLog(other.name())),
        })
    }
}

/// Where a link log's columns are, from its header.
#[derive(Clone, Copy)]
struct LinkLogColumns {
    t: usize,
    link: usize,
    dir: usize,
    /// The column drawn.
    y: usize,
}

/// Most link directions a link log's plot draws (each a series, with a legend entry).
const MAX_LINK_SERIES: usize = 1000;
/// Longest link name and direction, bytes.
const MAX_LINK_NAME: usize = 200;

/// A link direction's name ("0 up") and its points, (time, value) each.
type LinkSeries = (String, Vec<(f64, f64)>);

/// The rows of a link log (after its header) as a series per link direction ("0 up"),
/// in the order they first appear: (time, the drawn column × `scale`) each.
fn link_log_series<'a>(
    log: &Path,
    rows: impl Iterator<Item = &'a str>,
    c: &LinkLogColumns,
    scale: f64,
) -> Result<Vec<LinkSeries>, PlotError> {
    let mut series: Vec<LinkSeries> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (n, line) in rows.enumerate() {
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
        // A link known by its index reads "link 0 up" (a bare "0 up" reads as a count).
        let link = f.get(c.link).unwrap_or(&"?");
        let link = if link.chars().all(|ch| ch.is_ascii_digit()) {
            format!("link {link}")
        } else {
            link.to_string()
        };
        let dir = f.get(c.dir).unwrap_or(&"?");
        let too_wide = |why| PlotError::LinkLogTooWide {
            path: log.to_path_buf(),
            line: n + 2,
            why,
        };
        if link.len() + dir.len() > MAX_LINK_NAME {
            return Err(too_wide(
                "a link's name and direction are at most 200 bytes",
            ));
        }
        let name = format!("{link} {dir}");
        let point = (num(c.t)?, num(c.y)? * scale);
        match index.get(&name) {
            Some(&i) => series[i].1.push(point),
            None if series.len() >= MAX_LINK_SERIES => {
                return Err(too_wide(
                    "more than 1000 link directions: more than a plot can show",
                ))
            }
            None => {
                index.insert(name.clone(), series.len());
                series.push((name, vec![point]));
            }
        }
    }
    Ok(series)
}

/// Takes out the series that were zero throughout (no traffic, or never a queue: a line
/// on the axis) and returns their names for the caption; if every one was, none is taken
/// out, so that the plot shows what there was.
fn leave_out_quiet(series: &mut Vec<LinkSeries>) -> Vec<String> {
    let quiet: Vec<String> = series
        .iter()
        .filter(|(_, pts)| pts.iter().all(|p| p.1 == 0.0))
        .map(|(name, _)| name.clone())
        .collect();
    if quiet.len() == series.len() {
        return Vec::new();
    }
    let gone: std::collections::HashSet<&String> = quiet.iter().collect();
    series.retain(|(name, _)| !gone.contains(name));
    quiet
}

/// The median gap between successive values of `xs` (in increasing order): a series' own
/// interval. None for fewer than two values.
fn median_gap(xs: &[f64]) -> Option<f64> {
    let mut gaps: Vec<f64> = xs.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    gaps.get(gaps.len() / 2).copied()
}

/// Each row held from its time to the next row's, as the rate was counted over the whole
/// interval: a step per row (the last as wide as the one before it). Rows further apart
/// than two logging intervals leave a gap: nothing was logged between them.
fn steps(pts: &[(f64, f64)]) -> Vec<Pt> {
    let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let interval = median_gap(&xs).unwrap_or(0.0);
    let mut out = Vec::with_capacity(pts.len() * 2);
    for (i, &(t, y)) in pts.iter().enumerate() {
        let next = pts.get(i + 1).map(|n| n.0 - t);
        let width = match next {
            Some(d) if d <= interval * 2.0 => d,
            _ => interval,
        };
        out.push(Pt::at(t, y));
        out.push(Pt::at(t + width, y));
        if next.is_some_and(|d| d > interval * 2.0) {
            out.push(Pt::gap(t + width));
        }
    }
    out
}

/// Writes `chart` to `out` at the default size: SVG or PNG by its extension.
pub fn write(chart: &Chart, out: &Path) -> Result<(), PlotError> {
    write_with(chart, out, &Options::default())
}

/// Writes `chart` to `out` as `opts` asks: SVG or PNG by its extension.
pub fn write_with(chart: &Chart, out: &Path, opts: &Options) -> Result<(), PlotError> {
    // Drawn in memory, then written whole (see `crate::output`): an interrupted or failed
    // write leaves an earlier plot of that name as it was, never a 0-byte file.
    let bytes = match out.extension().and_then(|e| e.to_str()) {
        Some("svg") => svg_string_with(chart, opts)?.into_bytes(),
        Some("png") => png_bytes(chart, opts)?,
        _ => return Err(PlotError::Extension(out.to_path_buf())),
    };
    // As every output: a link there is replaced, never written through.
    crate::rundir::write(out, &bytes)?;
    Ok(())
}

/// `chart` as a PNG image.
fn png_bytes(chart: &Chart, opts: &Options) -> Result<Vec<u8>, PlotError> {
    register_font();
    let (w, h) = opts.size(chart)?;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    draw::draw(
        glyphs::Glyphs(BitMapBackend::with_buffer(&mut rgb, (w, h))).into_drawing_area(),
        chart,
        &look::Look::new(opts),
    )?;
    let mut png = Vec::new();
    let mut enc = png::Encoder::new(&mut png, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    // The resolution, so that an editor places it at its size in inches.
    let ppm = (opts.dpi / 0.0254).round() as u32;
    enc.set_pixel_dims(Some(png::PixelDimensions {
        xppu: ppm,
        yppu: ppm,
        unit: png::Unit::Meter,
    }));
    enc.write_header()
        .and_then(|mut wr| wr.write_image_data(&rgb))
        .map_err(|e| PlotError::Draw(e.to_string()))?;
    Ok(png)
}

/// `chart` as an SVG document at the default size, for a report or a file.
pub fn svg_string(chart: &Chart) -> Result<String, PlotError> {
    svg_string_with(chart, &Options::default())
}

/// `chart` as an SVG document, as `opts` asks. Labels come from files (profile and
/// parameter names); a control character in one would make the document invalid XML (XML
/// 1.0 allows none but tab and line breaks), which browsers refuse to render, so each is
/// written as its escape, `\u{1b}`.
pub fn svg_string_with(chart: &Chart, opts: &Options) -> Result<String, PlotError> {
    register_font();
    let size = opts.size(chart)?;
    let mut s = String::new();
    draw::draw(
        SVGBackend::with_string(&mut s, size).into_drawing_area(),
        chart,
        &look::Look::new(opts),
    )?;
    Ok(match crate::text::printable_text(&s) {
        std::borrow::Cow::Borrowed(_) => s,
        std::borrow::Cow::Owned(clean) => clean,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::experiment::summary::{Knee, PointSummary};
    use std::collections::BTreeMap;

    /// A point of a summary with these parameters and figures (each from its trials).
    fn point(
        params: &[(&str, &str)],
        offered: Option<f64>,
        figs: &[(&str, &[f64])],
    ) -> PointSummary {
        PointSummary {
            point: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            offered_bps: offered,
            trials: figs.first().map_or(0, |f| f.1.len() as u64),
            failed: 0,
            figures: figs
                .iter()
                .filter_map(|(k, v)| wirebench_stats::summarize(v).map(|s| (k.to_string(), s)))
                .collect(),
            files: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// A rate sweep of two series (size 500 and 1400) at 10M, 100M, 1G offered.
    fn sweep(sizes: &[&str]) -> ExperimentSummary {
        let mut points = Vec::new();
        for size in sizes {
            for (rate, bps) in [("10M", 1e7), ("100M", 1e8), ("1G", 1e9)] {
                points.push(point(
                    &[("rate", rate), ("size", size)],
                    Some(bps),
                    &[
                        ("received_bps", &[bps * 0.97, bps * 0.99, bps]),
                        ("delivered_fraction", &[0.97, 0.99, 1.0]),
                        ("loss_ratio", &[0.03, 0.01, 0.0]),
                    ],
                ));
            }
        }
        ExperimentSummary {
            points,
            knees: vec![Knee {
                series: BTreeMap::from([("size".to_string(), sizes[0].to_string())]),
                knee99_bps: Some(1e8),
                knee95_bps: Some(1e9),
                tested_up_to_bps: Some(1e9),
            }],
        }
    }

    /// The `points` of every `<polyline>` in an SVG whose stroke is `color`.
    fn polylines(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split("<polyline")
            .skip(1)
            .filter(|e| e.contains(&format!("stroke=\"{color}\"")))
            .filter_map(|e| {
                let pts = e.split("points=\"").nth(1)?.split('"').next()?;
                Some(
                    pts.split_whitespace()
                        .filter_map(|p| {
                            let (x, y) = p.split_once(',')?;
                            Some((x.parse().ok()?, y.parse().ok()?))
                        })
                        .collect(),
                )
            })
            .collect()
    }

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    /// The text of every `<text>` element of an SVG.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|e| {
                Some(
                    e.split_once('>')?
                        .1
                        .split("</text>")
                        .next()?
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn an_axis_takes_the_unit_of_its_datas_range() {
        // 30,000 Mbit/s reads 30 Gbit/s.
        let s = ExperimentSummary {
            points: vec![
                point(
                    &[("profile", "a")],
                    None,
                    &[("received_bps", &[28e9, 30e9, 29e9])],
                ),
                point(
                    &[("profile", "b")],
                    None,
                    &[("received_bps", &[10e9, 12e9, 11e9])],
                ),
            ],
            knees: Vec::new(),
        };
        let svg = svg_string(&experiment_chart(Kind::Box, &s).expect("box")).expect("svg");
        let t = texts(&svg);
        assert!(t.iter().any(|x| x == "receive rate (Gbit/s)"), "{t:?}");
        assert!(t.iter().any(|x| x == "30"), "{t:?}");
        assert!(!svg.contains("Mbit/s") && !svg.contains("10.0"));
        // Round trips of tens of µs read in µs.
        let s = ExperimentSummary {
            points: vec![
                point(
                    &[("bytes", "1M")],
                    None,
                    &[
                        ("duration_s", &[0.000_020, 0.000_040]),
                        ("received_bps", &[1e9, 2e9]),
                    ],
                ),
                point(
                    &[("bytes", "2M")],
                    None,
                    &[
                        ("duration_s", &[0.000_030, 0.000_050]),
                        ("received_bps", &[1e9, 2e9]),
                    ],
                ),
            ],
            knees: Vec::new(),
        };
        let svg = svg_string(&experiment_chart(Kind::Time, &s).expect("time")).expect("svg");
        assert!(
            texts(&svg).iter().any(|x| x == "transfer time (µs)"),
            "{:?}",
            texts(&svg)
        );
    }

    #[test]
    fn box_plot_labels_too_wide_for_their_slot_break_after_hyphens() {
        let names = [
            "reno-sack",
            "reno-nosack",
            "cubic-sack",
            "cubic-nosack",
            "bbr-sack",
            "bbr-nosack",
            "smoltcp",
            "smoltcp-receiver",
        ];
        let s = ExperimentSummary {
            points: names
                .iter()
                .map(|n| point(&[("profile", n)], None, &[("goodput_bps", &[1e6, 2e6])]))
                .collect(),
            knees: Vec::new(),
        };
        let chart = experiment_chart(Kind::Box, &s).expect("box");
        // Twice a column's width: room for the broken names side by side.
        let wide = Options {
            width: Some(2100),
            ..Options::default()
        };
        let svg = svg_string_with(&chart, &wide).expect("svg");
        let t = texts(&svg);
        for part in ["smoltcp-", "receiver", "bbr-", "nosack", "smoltcp"] {
            assert!(t.iter().any(|x| x == part), "{part}: {t:?}");
        }
        assert!(!t.iter().any(|x| x == "smoltcp-receiver"), "{t:?}");
        // A column wide: upright, each whole, none shrunk below the tick labels' size.
        let svg = svg_string(&chart).expect("svg");
        assert!(svg.contains("rotate(270"), "upright labels");
        assert!(texts(&svg).iter().any(|x| x == "smoltcp-receiver"));
    }

    #[test]
    fn box_plot_x_labels_are_the_point_labels() {
        let s = ExperimentSummary {
            points: vec![
                point(
                    &[("profile", "reno, SACK")],
                    None,
                    &[("goodput_bps", &[1e7, 2e7, 3e7])],
                ),
                point(
                    &[("profile", "cubic, no SACK")],
                    None,
                    &[("goodput_bps", &[1e7, 2e7])],
                ),
            ],
            knees: Vec::new(),
        };
        let svg = svg_string(&experiment_chart(Kind::Box, &s).expect("box")).expect("svg");
        let t = texts(&svg);
        assert!(t.iter().any(|x| x == "reno, SACK"), "{t:?}");
        assert!(t.iter().any(|x| x == "cubic, no SACK"), "{t:?}");
        assert!(t.iter().any(|x| x == "profile"), "{t:?}");
        // A box per series: the labels name them, no legend repeats them.
        assert!(experiment_chart(Kind::Box, &s)
            .expect("box")
            .legend()
            .is_empty());
        // Two series over several boxes: the legend tells the colours apart.
        let two = experiment_chart(Kind::Box, &sweep(&["500", "1400"])).expect("box");
        assert_eq!(two.legend().len(), 2);
        // A sweep's points: a line per parameter.
        let svg =
            svg_string(&experiment_chart(Kind::Box, &sweep(&["500"])).expect("box")).expect("svg");
        let t = texts(&svg);
        for label in ["rate 10.0 Mbit/s", "rate 1.00 Gbit/s", "size 500 B"] {
            assert!(t.iter().any(|x| x == label), "{label}: {t:?}");
        }
    }

    #[test]
    fn a_control_character_in_a_label_never_reaches_the_svg() {
        // A profile named to clear the terminal: as a raw U+001B it made the SVG invalid
        // XML, which browsers refuse to render.
        let s = ExperimentSummary {
            points: vec![point(
                &[("profile", "cu\u{1b}[2J")],
                None,
                &[("goodput_bps", &[1e7, 2e7, 3e7])],
            )],
            knees: Vec::new(),
        };
        let svg = svg_string(&experiment_chart(Kind::Box, &s).expect("box")).expect("svg");
        assert!(
            !svg.chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r')),
            "a raw control character in the SVG"
        );
        assert!(
            texts(&svg).iter().any(|x| x == "cu\\u{1b}[2J"),
            "{:?}",
            texts(&svg)
        );
    }

    #[test]
    fn the_ideal_line_is_one_straight_segment_and_the_knee_is_marked() {
        for log in [true, false] {
            let mut s = sweep(&["500", "1400"]);
            if !log {
                // 10M to 1G is log; 100M to 150M is linear.
                for (p, r) in s.points.iter_mut().zip([1e8, 1.2e8, 1.5e8].iter().cycle()) {
                    p.offered_bps = Some(*r);
                }
            }
            let chart = experiment_chart(Kind::Rate, &s).expect("rate");
            let top = &chart.panels[0];
            assert!(top.ideal && top.x.log == log && top.y.log == log);
            let svg = svg_string(&chart).expect("svg");
            // The line and its legend's glyph: each two points, a straight segment.
            let ideal = polylines(&svg, &hex(REFERENCE));
            assert!(!ideal.is_empty());
            assert!(ideal.iter().all(|l| l.len() == 2), "{ideal:?}");
            let line = ideal
                .iter()
                .max_by(|a, b| (a[1].0 - a[0].0).total_cmp(&(b[1].0 - b[0].0)))
                .expect("the line");
            let [(x0, y0), (x1, y1)] = [line[0], line[1]];
            // Up to the right (y grows downwards in pixels).
            assert!(x1 > x0 + 100.0 && y1 < y0 - 100.0, "{line:?}");
            // Knee at 100M for size 500 (ringed), none for 1400 (a note alone).
            let t = texts(&svg);
            assert!(
                t.iter().any(|t| t.contains("○ 99% up to 100 Mbit/s")),
                "{t:?}"
            );
            assert!(chart.panels[0].marks.iter().filter(|m| m.ring).count() == 1);
            assert_eq!(chart.panels.len(), 2, "the loss panel");
            assert!(chart.caption().contains("min–max"));
        }
    }

    #[test]
    fn a_series_keeps_its_colour_from_plot_to_plot() {
        let both = sweep(&["500", "1400"]);
        let rate = experiment_chart(Kind::Rate, &both).expect("rate");
        let got = experiment_chart(Kind::Received, &both).expect("received");
        let boxes = experiment_chart(Kind::Box, &both).expect("box");
        for label in ["size 500 B", "size 1400 B"] {
            let c = rate.palette.color(label);
            assert_eq!(c, got.palette.color(label));
            assert_eq!(c, boxes.palette.color(label));
            for chart in [&rate, &got] {
                let svg = svg_string(chart).expect("svg");
                assert!(
                    !polylines(&svg, &hex(c)).is_empty(),
                    "{label} drawn in its colour"
                );
            }
        }
        assert_ne!(
            rate.palette.color("size 500 B"),
            rate.palette.color("size 1400 B")
        );
        // The colour follows the label, not the order in which a plot meets it.
        let ab = Palette::new(["a".to_string(), "b".to_string()]);
        let ba = Palette::new(["b".to_string(), "a".to_string()]);
        assert_eq!(ab.color("b"), ba.color("b"));
        assert_eq!(rate.legend()[0].1, rate.palette.color(&rate.legend()[0].0));
        // Five trials or more: a 95% interval, said in the caption.
        let mut five = sweep(&["500"]);
        for p in &mut five.points {
            p.figures.insert(
                "received_bps".into(),
                wirebench_stats::summarize(&[1e7, 1.1e7, 0.9e7, 1e7, 1.05e7]).expect("five"),
            );
            p.trials = 5;
        }
        let chart = experiment_chart(Kind::Rate, &five).expect("rate");
        assert!(chart.caption().contains("95% confidence interval"));
    }

    #[test]
    fn latency_is_drawn_from_the_histogram_when_the_document_has_one() {
        use wirebench_proto::results::{Percentiles, UsBucket};
        let buckets: Vec<UsBucket> = (0..50)
            .map(|i| UsBucket {
                min_us: 10.0 + i as f64,
                max_us: 10.0 + i as f64 + 0.9,
                count: 100 - i,
            })
            .collect();
        let d = Distribution::of_buckets(&buckets).expect("distribution");
        assert_eq!(d.buckets, 50);
        assert_eq!(d.cumulative.last().map(|p| p.1), Some(1.0));
        assert!(d
            .cumulative
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let p = Percentiles {
            count: 10,
            p50: 20.0,
            ..Percentiles::default()
        };
        assert_eq!(Distribution::of_percentiles(&p).buckets, 0);
        let mut chart = Chart::default();
        latency::latency_panels(&mut chart, &[("a".into(), d.clone()), ("b".into(), d)]);
        assert_eq!(chart.panels.len(), 2);
        assert!(chart.panels[1].y.log, "the CCDF's y is log");
        assert!(chart.caption().contains("full histogram"));
    }

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("wirebench-plot-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).expect("write");
        p
    }

    #[test]
    fn a_link_log_leaves_out_directions_that_were_zero_throughout() {
        let log = temp(
            "quiet-links.csv",
            b"t_s,link,direction,delivered_bps,max_queue_delay_ms\n\
              0.000,a-b,up,1000,1.0\n0.000,a-b,down,0,0.0\n\
              1.000,a-b,up,2000,2.0\n1.000,a-b,down,0,0.0\n",
        );
        let chart = link_log_chart(&log, Kind::Throughput).expect("a chart");
        let labels: Vec<&str> = chart.panels[0]
            .series
            .iter()
            .map(|s| s.label.as_str())
            .collect();
        assert_eq!(labels, ["a-b up"]);
        assert!(
            chart.caption.ends_with("Always 0, not drawn: a-b down."),
            "{}",
            chart.caption
        );
        // Every colour of the palette is distinct.
        let seen: std::collections::BTreeSet<(u8, u8, u8)> =
            PALETTE.iter().map(|c| (c.0, c.1, c.2)).collect();
        assert_eq!(seen.len(), PALETTE.len());
    }

    #[test]
    fn a_file_named_otherwise_is_known_by_its_first_bytes() {
        let text = b"t_s,link,direction,delivered_bps,max_queue_delay_ms\n\
              0.000,a-b,up,1000,1.0\n1.000,a-b,up,2000,2.0\n";
        let log = temp("links.txt", text);
        let chart = chart_for(&log, None).expect("read as a link log");
        assert_eq!(chart.title, "Link throughput");
        // Anything else is still taken for a packet log, and refused as one.
        let other = temp("other.txt", b"hello");
        let e = chart_for(&other, None).expect_err("not a packet log");
        assert!(e.to_string().contains("packet log"), "{e}");
    }

    #[test]
    fn errors_keep_their_words_and_hints() {
        let e = Kind::parse("pie").expect_err("not a kind");
        assert_eq!(
            e.to_string(),
            "--kind pie: rate, received, time, box, throughput, latency, arrival or rrul"
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
