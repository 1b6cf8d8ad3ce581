//! What a plot shows, before it is drawn: panels that share an x axis, their series, error
//! bars, boxes and marks, and the colour of each series, which follows its label.

use std::collections::BTreeSet;

use plotters::style::RGBColor;

use super::scale::Quantity;

/// The Okabe–Ito palette (Okabe & Ito, "Color Universal Design", 2008), which people with
/// any common colour-vision deficiency can tell apart; yellow last, as it is faint on white.
pub const PALETTE: [RGBColor; 12] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0xF0, 0xE4, 0x42), // yellow
    // Past Okabe and Ito's eight, four of Paul Tol's muted scheme, distinct from them: a
    // lab's link log has ten link directions.
    RGBColor(0x33, 0x22, 0x88), // indigo
    RGBColor(0x88, 0x22, 0x55), // wine
    RGBColor(0x99, 0x99, 0x33), // olive
    RGBColor(0x44, 0xAA, 0x99), // teal
];

/// The colour of reference lines (the ideal y = x): a grey no series has.
pub const REFERENCE: RGBColor = RGBColor(0x88, 0x88, 0x88);

/// Colours by series label: every plot of an experiment is given the same palette, built
/// from all its series labels, so a series keeps its colour from plot to plot whatever
/// else a plot leaves out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Palette {
    labels: Vec<String>,
}

impl Palette {
    /// A palette for these labels, in sorted order (so it does not depend on the order in
    /// which a plot meets them).
    pub fn new<I: IntoIterator<Item = String>>(labels: I) -> Self {
        let set: BTreeSet<String> = labels.into_iter().collect();
        Self {
            labels: set.into_iter().collect(),
        }
    }

    /// A palette that keeps the labels' order (a result's fixed series: sent, received).
    pub fn ordered(labels: &[&str]) -> Self {
        Self {
            labels: labels.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The colour of `label`; a label the palette does not know gets one past the known.
    pub fn color(&self, label: &str) -> RGBColor {
        let i = self
            .labels
            .iter()
            .position(|l| l == label)
            .unwrap_or(self.labels.len());
        PALETTE[i % PALETTE.len()]
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A line through markers (sweep points).
    LinePoints,
    /// A line alone (intervals as steps, distributions).
    Line,
    /// Small dots, no line (thousands of packets).
    Dots,
    /// A box plot's series: a small box in the legend (the boxes are drawn as boxes).
    Box,
    /// A line with the area under it shaded (a link's capacity, as `mm-link` shades it
    /// under the delivered rate); a shaded box in the legend.
    Area,
}

/// One point, with its error bar (`lo..=hi`; equal to `y` when there is none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pt {
    /// x, in the axis' base unit.
    pub x: f64,
    /// y, in the axis' base unit.
    pub y: f64,
    /// Bottom of the error bar.
    pub lo: f64,
    /// Top of the error bar.
    pub hi: f64,
}

impl Pt {
    /// A point without an error bar.
    pub fn at(x: f64, y: f64) -> Self {
        Self { x, y, lo: y, hi: y }
    }

    /// A break in a line: nothing was measured here, so no line is drawn across it.
    pub fn gap(x: f64) -> Self {
        Self::at(x, f64::NAN)
    }

    /// Whether this is a break ([`Pt::gap`]).
    pub fn is_gap(&self) -> bool {
        !self.y.is_finite()
    }
}

/// A named series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its label: the legend's text and the key of its colour.
    pub label: String,
    /// How it is drawn.
    pub style: Style,
    /// Its points, in x order; a [`Pt::gap`] breaks the line.
    pub points: Vec<Pt>,
    /// Samples further apart in x than this are not joined (probes that got no answer for
    /// a while): the line breaks there. `None`: always joined (sweep points, CDFs).
    pub max_gap: Option<f64>,
}

impl Series {
    /// A series joined throughout (breaks only at [`Pt::gap`]s).
    pub fn new(label: impl Into<String>, style: Style, points: Vec<Pt>) -> Self {
        Self {
            label: label.into(),
            style,
            points,
            max_gap: None,
        }
    }

    /// The runs of points a line joins: split at gaps and at jumps wider than `max_gap`.
    pub fn runs(&self) -> Vec<&[Pt]> {
        let mut out = Vec::new();
        let mut start = 0;
        for i in 0..=self.points.len() {
            let cut = match (
                self.points.get(i),
                i.checked_sub(1).and_then(|j| self.points.get(j)),
            ) {
                (None, _) => true,
                (Some(p), _) if p.is_gap() => true,
                (Some(p), Some(q)) => self.max_gap.is_some_and(|g| p.x - q.x > g),
                (Some(_), None) => false,
            };
            if cut {
                let end = i;
                if end > start {
                    out.push(&self.points[start..end]);
                }
                start = if self.points.get(i).is_some_and(Pt::is_gap) {
                    i + 1
                } else {
                    i
                };
            }
        }
        out
    }
}

/// One box of a box plot, at a category of the x axis.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxStat {
    /// The category (x position).
    pub category: usize,
    /// The series it belongs to (its colour).
    pub series: String,
    /// Lower whisker, first quartile, median, third quartile, upper whisker.
    pub five: [f64; 5],
    /// Values beyond the whiskers.
    pub outliers: Vec<f64>,
}

/// A marked point and its note (the knee of a rate curve).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Where, in the axes' base units.
    pub x: f64,
    /// Where.
    pub y: f64,
    /// Its note, set with the other notes in a corner the data leave empty.
    pub text: String,
    /// The series it belongs to (its colour).
    pub series: String,
    /// A ring is drawn at (x, y) (a knee found); without, the note alone (no knee up to
    /// the highest rate tested: there is no point to mark).
    pub ring: bool,
}

/// A span of x shaded across the panel (a phase of a test: rrul's load), with a note at
/// its top left.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Where it starts, in the x axis' base unit.
    pub from: f64,
    /// Where it ends.
    pub to: f64,
    /// The note (empty: none).
    pub text: String,
}

/// One axis: what it measures and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// What it measures, without the unit ("received rate"); the unit is added when drawn.
    pub label: String,
    /// Its quantity, which decides the unit.
    pub quantity: Quantity,
    /// Logarithmic.
    pub log: bool,
    /// Start a linear axis at 0 (rates, counts), rather than at the data's smallest value.
    pub from_zero: bool,
    /// Named categories instead of numbers (box plots): category `i` is centred at `i`; a
    /// `\n` in a name breaks it into lines.
    pub categories: Vec<String>,
}

impl Axis {
    /// A linear axis from zero.
    pub fn linear(label: &str, quantity: Quantity) -> Self {
        Self {
            label: label.into(),
            quantity,
            log: false,
            from_zero: true,
            categories: Vec::new(),
        }
    }

    /// A logarithmic axis.
    pub fn log(label: &str, quantity: Quantity) -> Self {
        Self {
            log: true,
            from_zero: false,
            ..Self::linear(label, quantity)
        }
    }
}

/// One panel: a plotting area with its own y axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The x axis (panels of a chart show the same x range).
    pub x: Axis,
    /// The y axis.
    pub y: Axis,
    /// Line and point series.
    pub series: Vec<Series>,
    /// Boxes.
    pub boxes: Vec<BoxStat>,
    /// Draw y = x, and give both axes the same range and scale.
    pub ideal: bool,
    /// Marked points.
    pub marks: Vec<Mark>,
    /// Lost packets: crosses.
    pub lost: Vec<(f64, f64)>,
    /// Share of the chart's height, relative to the other panels.
    pub weight: u32,
    /// Shaded spans of x, drawn under the data.
    pub bands: Vec<Band>,
    /// Its y axis may end at the data's body (a time series): a few values far above the
    /// rest are drawn on the top edge as markers, said in the caption, rather than
    /// squeezing the rest into the bottom of the axis (unless drawn at full range).
    pub body: bool,
}

impl Panel {
    /// An empty panel with these axes.
    pub fn new(x: Axis, y: Axis) -> Self {
        Self {
            x,
            y,
            series: Vec::new(),
            boxes: Vec::new(),
            ideal: false,
            marks: Vec::new(),
            lost: Vec::new(),
            weight: 1,
            bands: Vec::new(),
            body: false,
        }
    }
}

/// A chart ready to draw: a title, panels stacked on one x axis, a caption that says what
/// was measured and what the bars mean, and the palette.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chart {
    /// The title above.
    pub title: String,
    /// The caption below: what was measured, how many trials, what bars and whiskers mean.
    pub caption: String,
    /// The panels, top to bottom.
    pub panels: Vec<Panel>,
    /// Colours by series label.
    pub palette: Palette,
    /// Leave the series out of the legend (box plots of one series, whose x labels say it).
    pub no_legend: bool,
    /// Several results side by side: each one's heading. The panels are then split evenly
    /// into this many stacks, drawn in a grid of [`Chart::columns`], and the panels at one
    /// place in every stack share their y axis (unit and range) and all share the x axis,
    /// so that they compare by eye. Empty: one stack.
    pub cells: Vec<String>,
    /// Columns of the grid of cells (0: as many as fit two to a row).
    pub columns: usize,
}

impl Chart {
    /// The number of data series (each box counts one).
    pub fn series_count(&self) -> usize {
        self.panels
            .iter()
            .map(|p| p.series.len() + p.boxes.len())
            .sum()
    }

    /// The title.
    pub fn title(&self) -> &str {
        &self.title
    }

    /// The caption.
    pub fn caption(&self) -> &str {
        &self.caption
    }

    /// The legend: each label once, in the order met, with its colour.
    pub fn legend(&self) -> Vec<(String, RGBColor, Style)> {
        let mut out: Vec<(String, RGBColor, Style)> = Vec::new();
        if self.no_legend {
            return out;
        }
        for p in &self.panels {
            let names = p
                .series
                .iter()
                .map(|s| (s.label.clone(), s.style))
                .chain(p.boxes.iter().map(|b| (b.series.clone(), Style::Box)));
            for (label, style) in names {
                if label.is_empty() || out.iter().any(|(l, _, _)| *l == label) {
                    continue;
                }
                let c = self.palette.color(&label);
                out.push((label, c, style));
            }
        }
        out
    }
}
