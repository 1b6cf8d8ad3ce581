//! How big things are drawn, shared by the layout (`draw`) and the text set among the
//! data (`marks`): type sizes in points at the image's resolution, and small helpers.

use plotters::prelude::*;

use super::axes::{Scale, Ticked};
use super::glyphs::text_width;
use super::{Options, PlotError, YScale};

/// Text colour of captions and axis notes: dark grey, quieter than the data.
pub(super) const NOTE: RGBColor = RGBColor(0x44, 0x44, 0x44);
/// Grid lines: light enough not to be read as data.
pub(super) const GRID: RGBColor = RGBColor(0xE2, 0xE2, 0xE2);
/// A shaded phase (rrul's load): lighter than the grid, so that lines stay on top of it.
pub(super) const BAND: RGBColor = RGBColor(0xE4, 0xE4, 0xF0);

// Type sizes in plotters' units (1.24 times the em in pixels: its SVG backend writes
// `font-size: size / 1.24`, and the PNG's text is drawn to match) at scale 1, which sets
// tick labels at 7 pt; `Look::font` scales them to the image's resolution.
/// The title: 10.5 pt.
pub(super) const TITLE_PX: f64 = 30.0;
/// Axis names: 7.4 pt.
pub(super) const AXIS_PX: f64 = 21.0;
/// Tick labels: 7 pt.
pub(super) const TICK_PX: f64 = 20.0;
/// Legend entries and notes at marks: 7 pt.
pub(super) const LABEL_PX: f64 = 20.0;
/// The caption and headings of cells: 6.7 pt.
pub(super) const NOTE_PX: f64 = 19.0;

/// How big things are drawn: `k` scales every size of the design (a 16-pixel em for tick
/// labels at `k` = 1) to the resolution asked, so that tick labels are 7 pt.
pub(super) struct Look {
    k: f64,
    pub full_range: bool,
    pub y_scale: YScale,
}

impl Look {
    /// The look of `opts`.
    pub fn new(opts: &Options) -> Self {
        // 7 pt at `dpi` dots per inch is 7 × dpi / 72 pixels; the design's is 16.
        Self {
            k: opts.dpi * 7.0 / 72.0 / 16.0,
            full_range: opts.full_range,
            y_scale: opts.y_scale,
        }
    }

    /// A length of the design, in pixels.
    pub fn px(&self, v: f64) -> i32 {
        (v * self.k).round() as i32
    }

    /// A type size of the design, in plotters' units.
    pub fn font(&self, size: f64) -> f64 {
        size * self.k
    }

    /// The em of a type size of the design, in pixels.
    pub fn em(&self, size: f64) -> f64 {
        size * self.k / 1.24
    }
}

pub(super) fn err<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Breaks `text` into lines no wider than `width` pixels at type size `font`, at spaces.
pub(super) fn wrap(text: &str, width: f64, font: f64) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        for word in para.split_whitespace() {
            let longer = if line.is_empty() {
                word.to_string()
            } else {
                format!("{line} {word}")
            };
            if !line.is_empty() && text_width(font, &longer) > width {
                lines.push(std::mem::replace(&mut line, word.to_string()));
            } else {
                line = longer;
            }
        }
        lines.push(line);
    }
    lines
}

/// A drawing y kept inside the axis.
pub(super) fn clamp(ys: &Scale, t: f64) -> f64 {
    t.clamp(ys.lo, ys.hi)
}

/// A chart context over the panel's two drawn scales.
pub(super) type PanelContext<'a, DB> = ChartContext<'a, DB, Cartesian2d<Ticked, Ticked>>;
