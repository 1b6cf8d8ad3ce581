//! Drawing a [`Chart`]: title above, panels stacked on one x axis, the legend in a column
//! of its own to the right (so it never covers data), the caption below.
//!
//! Log axes are drawn as linear axes over log10 of the values, with the ticks placed and
//! labelled here: one coordinate type for every axis, and ticks at 1, 2, 5 × 10ⁿ.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::chart::{Axis, Chart, Panel, Style, PALETTE, REFERENCE};
use super::scale::{clean, linear_ticks, log_ticks, Quantity, Unit};
use super::PlotError;

/// Text colour of captions and axis notes: dark grey, quieter than the data.
const NOTE: RGBColor = RGBColor(0x44, 0x44, 0x44);
/// Grid lines: light enough not to be read as data.
const GRID: RGBColor = RGBColor(0xE2, 0xE2, 0xE2);
/// A shaded phase (rrul's load): lighter than the grid, so that lines stay on top of it.
const BAND: RGBColor = RGBColor(0xEE, 0xEE, 0xF4);

/// An axis as drawn: its range and ticks in drawing coordinates (log10 of the value on a
/// log axis), and how a tick is labelled.
struct Scale {
    log: bool,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    unit: Unit,
    /// Each tick carries its own unit ("100 kbit/s", "1 Gbit/s"): log axes over decades.
    per_tick: bool,
    quantity: Quantity,
    categories: Vec<String>,
    title: String,
}

impl Scale {
    /// The scale of `axis` over `values`; `pad` leaves headroom above the largest (y axes,
    /// so that the top point is not on the frame; an x axis ends at its data).
    fn new(axis: &Axis, values: &[f64], max_ticks: usize, pad_asked: bool) -> Self {
        let mut s = Self {
            log: axis.log,
            lo: 0.0,
            hi: 1.0,
            ticks: Vec::new(),
            unit: axis.quantity.unit_for(1.0),
            per_tick: false,
            quantity: axis.quantity,
            categories: axis.categories.clone(),
            title: axis.label.clone(),
        };
        if !s.categories.is_empty() {
            s.lo = -0.5;
            s.hi = s.categories.len() as f64 - 0.5;
            s.ticks = (0..s.categories.len()).map(|i| i as f64).collect();
            return s;
        }
        let finite = values.iter().copied().filter(|v| v.is_finite());
        if axis.log {
            let pos: Vec<f64> = finite.filter(|v| *v > 0.0).collect();
            let (mut lo, mut hi) = pos
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
            if pos.is_empty() {
                (lo, hi) = (1.0, 10.0);
            }
            lo /= 1.25;
            hi *= 1.25;
            let mut ticks = log_ticks(lo, hi);
            if ticks.len() < 2 {
                lo = 10f64.powf(lo.log10().floor());
                hi = 10f64.powf(hi.log10().ceil());
                ticks = log_ticks(lo, hi);
            }
            s.lo = lo.log10();
            s.hi = hi.log10();
            s.ticks = ticks.into_iter().map(f64::log10).collect();
            s.per_tick = matches!(
                axis.quantity,
                Quantity::BitRate | Quantity::Seconds | Quantity::Bytes
            );
        } else {
            let (mut lo, mut hi) =
                finite.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
            if lo > hi {
                (lo, hi) = (0.0, 1.0);
            }
            if axis.from_zero {
                lo = lo.min(0.0);
            }
            // A little headroom, so the top point is not on the frame (none for an axis
            // made up for lack of data).
            // Percentages stop at 100 when the data do.
            let headroom = pad_asked && !(axis.quantity == Quantity::Percent && hi <= 100.0);
            let mut pad = if headroom { (hi - lo) * 0.03 } else { 0.0 };
            if hi <= lo {
                hi = lo + if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
                pad = 0.0;
            }
            s.unit = axis.quantity.unit_for(lo.abs().max(hi.abs()));
            let d = s.unit.divisor;
            let (a, mut b, mut ticks) = linear_ticks(lo / d, (hi + pad) / d, max_ticks);
            // An axis without headroom ends at its data unless a tick is very near.
            if !pad_asked && b - hi / d > (b - a) * 0.02 {
                b = hi / d;
                ticks.retain(|t| *t <= b * (1.0 + 1e-9));
            }
            s.lo = a * d;
            s.hi = b * d;
            s.ticks = ticks.into_iter().map(|t| t * d).collect();
        }
        // A log axis of percentages labels each tick "10%": its title needs no unit.
        let log_percent = s.log && axis.quantity == Quantity::Percent;
        if !(s.per_tick || s.unit.name.is_empty() || log_percent) {
            s.title = format!("{} ({})", axis.label, s.unit.name);
        }
        s
    }

    /// Drawing coordinate of a value.
    fn t(&self, v: f64) -> f64 {
        if self.log {
            if v > 0.0 {
                v.log10()
            } else {
                self.lo
            }
        } else {
            v
        }
    }

    fn label(&self, tv: f64) -> String {
        if !self.categories.is_empty() {
            let i = tv.round();
            return if i >= 0.0 {
                self.categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            };
        }
        let v = if self.log { 10f64.powf(tv) } else { tv };
        if self.per_tick {
            let u = self.quantity.unit_for(v);
            format!("{} {}", clean(v / u.divisor), u.name)
        } else if self.quantity == Quantity::Percent && self.log {
            format!("{}%", clean(v))
        } else {
            clean(v / self.unit.divisor)
        }
    }
}

/// A linear coordinate whose ticks are exactly the given ones (plotters' own choose
/// their ticks and format them with a fixed number of decimals).
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let r = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (r * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

fn err<E: std::error::Error + Send + Sync + 'static>(e: DrawingAreaErrorKind<E>) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Breaks `text` into lines of at most `width` characters, at spaces.
/// `name` as lines that end after its hyphens: "bbr-nosack" → "bbr-", "nosack".
fn break_after_hyphens(name: &str) -> Vec<String> {
    name.split_inclusive('-').map(String::from).collect()
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        for word in para.split_whitespace() {
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    lines
}

// Type sizes in plotters' units, 1.24 times the em in pixels (its SVG backend writes
// `font-size: size / 1.24`, and the PNG's text is drawn to match): for a 960-pixel-wide plot
// printed at a paper's column width (about 3.3 in), tick labels of a 16-pixel em print at
// about 4 pt, as flent's do.
/// The title: a 24-pixel em.
const TITLE_PX: u32 = 30;
/// Axis names: 17 pixels.
const AXIS_PX: u32 = 21;
/// Tick labels: 16 pixels.
const TICK_PX: u32 = 20;
/// Legend entries and the notes at marks: 16 pixels.
const LABEL_PX: u32 = 20;
/// The caption and band notes: 15 pixels.
const NOTE_PX: u32 = 19;

/// Draws `chart` on `root`.
pub fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    chart: &Chart,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let area = root
        .titled(
            &chart.title,
            ("sans-serif", TITLE_PX).into_font().color(&BLACK),
        )
        .map_err(err)?;
    let (w, h) = area.dim_in_pixel();
    // The caption, in 15-pixel type: about 7.5 pixels a character (7.25 measured on one).
    let lines = if chart.caption.is_empty() {
        Vec::new()
    } else {
        wrap(&chart.caption, ((w as usize).saturating_sub(32)) * 2 / 15)
    };
    let caption_h = (lines.len() as u32 * 19 + 10).min(h / 3);
    let (body, foot) = area.split_vertically(h - caption_h);
    for (i, line) in lines.iter().enumerate() {
        foot.draw(&Text::new(
            line.as_str(),
            (16, 4 + i as i32 * 19),
            ("sans-serif", NOTE_PX).into_font().color(&NOTE),
        ))
        .map_err(err)?;
    }
    let legend = legend_entries(chart);
    let longest = legend
        .iter()
        .map(|(l, _, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let legend_w = if legend.is_empty() {
        0
    } else {
        ((longest as u32) * 9 + 56).clamp(110, 340)
    };
    let (bw, bh) = body.dim_in_pixel();
    let (plot, side) = body.split_horizontally(bw - legend_w);
    draw_legend(&side, &legend)?;
    // The panels share the x range: every series of every panel decides it.
    let Some(first) = chart.panels.first() else {
        return root.present().map_err(err);
    };
    let ideal = chart.panels.iter().any(|p| p.ideal);
    let mut xv = Vec::new();
    for p in &chart.panels {
        xv.extend(p.series.iter().flat_map(|s| s.points.iter().map(|q| q.x)));
        xv.extend(p.lost.iter().map(|q| q.0));
        xv.extend(p.marks.iter().map(|m| m.x));
        xv.extend(p.bands.iter().flat_map(|b| [b.from, b.to]));
        if p.ideal {
            // y = x is straight only if both axes have one scale: x takes y's range too.
            xv.extend(
                p.series
                    .iter()
                    .flat_map(|s| s.points.iter().flat_map(|q| [q.y, q.lo, q.hi])),
            );
        }
    }
    let x_ticks = if first.x.categories.is_empty() { 8 } else { 0 };
    let xs = Scale::new(&first.x, &xv, x_ticks, false);
    let total: u32 = chart.panels.iter().map(|p| p.weight.max(1)).sum();
    let heights: Vec<u32> = chart
        .panels
        .iter()
        .map(|p| bh * p.weight.max(1) / total)
        .collect();
    let y_scales: Vec<Scale> = chart
        .panels
        .iter()
        .zip(&heights)
        .map(|(p, h)| y_scale(p, &xv, *h, ideal && p.ideal))
        .collect();
    // One width of y labels for every panel, so that their x axes line up.
    let y_label_w = y_scales
        .iter()
        .flat_map(|ys| ys.ticks.iter().map(|t| ys.label(*t).chars().count() as u32))
        .max()
        .unwrap_or(3)
        * 10
        + 44;
    let mut rest = plot;
    let mut rest_h = bh;
    for (i, (p, ys)) in chart.panels.iter().zip(&y_scales).enumerate() {
        let last = i + 1 == chart.panels.len();
        let ph = heights[i];
        let (this, below) = if last {
            (rest.clone(), rest.clone())
        } else {
            rest.split_vertically(ph.min(rest_h))
        };
        draw_panel(&this, p, chart, &xs, ys, y_label_w, last)?;
        rest = below;
        rest_h = rest_h.saturating_sub(ph);
    }
    root.present().map_err(err)
}

/// The legend's entries: the chart's series, then the reference line and lost packets.
fn legend_entries(chart: &Chart) -> Vec<(String, RGBColor, Style)> {
    let mut out = chart.legend();
    if chart.panels.iter().any(|p| p.ideal) {
        out.push(("ideal: received = offered".into(), REFERENCE, Style::Line));
    }
    if chart.panels.iter().any(|p| !p.lost.is_empty()) {
        out.push(("lost (drawn at 0)".into(), PALETTE[1], Style::Dots));
    }
    out
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, Style)],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    for (i, (label, c, style)) in entries.iter().enumerate() {
        let y = 24 + i as i32 * 24;
        match style {
            Style::Dots => {
                area.draw(&Circle::new((20, y), 4, c.filled()))
                    .map_err(err)?;
            }
            _ => {
                area.draw(&PathElement::new(vec![(6, y), (34, y)], c.stroke_width(3)))
                    .map_err(err)?;
                if *style == Style::LinePoints {
                    area.draw(&Circle::new((20, y), 4, c.filled()))
                        .map_err(err)?;
                }
            }
        }
        area.draw(&Text::new(
            label.as_str(),
            (42, y - 9),
            ("sans-serif", LABEL_PX).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// The y scale of panel `p`, `ph` pixels high; with `same_scale`, the x values' (y = x).
fn y_scale(p: &Panel, xv: &[f64], ph: u32, same_scale: bool) -> Scale {
    if same_scale {
        return Scale::new(&p.y, xv, 8, false);
    }
    let yv: Vec<f64> = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().flat_map(|q| [q.y, q.lo, q.hi]))
        .chain(p.lost.iter().map(|q| q.1))
        .chain(p.marks.iter().map(|m| m.y))
        .chain(
            p.boxes
                .iter()
                .flat_map(|b| b.five.iter().chain(&b.outliers).copied()),
        )
        .collect();
    Scale::new(&p.y, &yv, if ph < 220 { 4 } else { 6 }, true)
}

/// A chart context over the panel's two drawn scales.
type PanelContext<'a, DB> = ChartContext<'a, DB, Cartesian2d<Ticked, Ticked>>;

/// Draws one panel: its frame, grid and axes, then what it holds from the back to the
/// front (shaded phases, the ideal line, series, boxes, lost packets, notes).
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    chart: &Chart,
    xs: &Scale,
    ys: &Scale,
    y_label_w: u32,
    last: bool,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (pw, _) = area.dim_in_pixel();
    let cats = CategoryLabels::fit(xs, pw, y_label_w);
    let mut ctx = frame(area, xs, ys, &cats, y_label_w, last)?;
    cats.draw(area, &ctx, ys)?;
    draw_bands(&ctx, p, xs, ys)?;
    if p.ideal {
        // Two points: the line y = x, straight because both axes share one scale.
        let (a, b) = (ys.lo, ys.hi);
        ctx.draw_series(LineSeries::new(
            vec![(a, a), (b, b)],
            REFERENCE.stroke_width(2),
        ))
        .map_err(err)?;
    }
    draw_series(&mut ctx, p, chart, xs, ys)?;
    draw_boxes(&ctx, p, chart, ys)?;
    if !p.lost.is_empty() {
        ctx.draw_series(
            p.lost
                .iter()
                .map(|&(x, y)| Cross::new((xs.t(x), ys.t(y)), 4, PALETTE[1].stroke_width(1))),
        )
        .map_err(err)?;
    }
    draw_marks(&ctx, p, chart, xs, ys)
}

/// The panel's frame: its axes, grid and tick labels (the x axis's title under the last
/// panel only, which stands for all of them); the context to draw its contents in.
fn frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    xs: &Scale,
    ys: &Scale,
    cats: &CategoryLabels,
    y_label_w: u32,
    last: bool,
) -> Result<PanelContext<'a, DB>, PlotError>
where
    DB::ErrorType: 'static,
{
    let x_area = if cats.rows() > 0 {
        cats.rows() * (cats.font + 3) + 40
    } else if last {
        58
    } else {
        32
    };
    let mut b = ChartBuilder::on(area);
    b.margin_top(10)
        .margin_right(18)
        .margin_left(6)
        .x_label_area_size(x_area)
        .y_label_area_size(y_label_w);
    let mut ctx = b
        .build_cartesian_2d(
            Ticked {
                lo: xs.lo,
                hi: xs.hi,
                ticks: xs.ticks.clone(),
            },
            Ticked {
                lo: ys.lo,
                hi: ys.hi,
                ticks: ys.ticks.clone(),
            },
        )
        .map_err(err)?;
    let x_desc = if last {
        cats.x_title.clone()
    } else {
        String::new()
    };
    ctx.configure_mesh()
        .x_desc(x_desc)
        .y_desc(ys.title.as_str())
        .x_label_formatter(&|v| {
            if xs.categories.is_empty() {
                xs.label(*v)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| ys.label(*v))
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(NOTE)
        .x_label_style(("sans-serif", TICK_PX))
        .y_label_style(("sans-serif", TICK_PX))
        .axis_desc_style(("sans-serif", AXIS_PX))
        .draw()
        .map_err(err)?;
    Ok(ctx)
}

/// The labels under a category axis, fitted to the width of a category's slot.
struct CategoryLabels {
    /// A category's lines, top to bottom.
    lines: Vec<Vec<String>>,
    /// Their font size, pixels.
    font: u32,
    /// The x axis's title (the parameters' names when the labels hold values only).
    x_title: String,
}

impl CategoryLabels {
    /// The labels of `xs`'s categories in a panel `pw` pixels wide: a line per parameter
    /// ("rate=10M" over "size=500"); if that is too wide for its slot, values only, the
    /// parameters' names then in the axis title.
    fn fit(xs: &Scale, pw: u32, y_label_w: u32) -> Self {
        let slot = (pw.saturating_sub(y_label_w + 24)) as usize / xs.categories.len().max(1);
        let mut lines: Vec<Vec<String>> = xs
            .categories
            .iter()
            .map(|c| c.split('\n').map(String::from).collect())
            .collect();
        let mut x_title = xs.title.clone();
        if widest(&lines) * 7 > slot && lines.iter().flatten().all(|s| s.contains('=')) {
            let names: Vec<String> = lines
                .first()
                .map(|l| {
                    l.iter()
                        .map(|s| s.split('=').next().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default();
            x_title = format!("{} (top to bottom)", names.join(", "));
            for l in &mut lines {
                for s in l.iter_mut() {
                    *s = s.split_once('=').map_or(s.clone(), |(_, v)| v.to_string());
                }
            }
        }
        // Still too wide for a readable font: names of one line ("smoltcp-receiver") break
        // after their hyphens.
        if widest(&lines) * 7 > slot * 10 / 12 && lines.iter().all(|l| l.len() == 1) {
            for l in &mut lines {
                *l = break_after_hyphens(&l[0]);
            }
        }
        let font = (slot * 10 / (widest(&lines) * 7)).clamp(9, TICK_PX as usize) as u32;
        Self {
            lines,
            font,
            x_title,
        }
    }

    /// Lines of the tallest label (0 without categories).
    fn rows(&self) -> u32 {
        self.lines.iter().map(Vec::len).max().unwrap_or(0) as u32
    }

    /// Draws each label centred under its category.
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        ctx: &PanelContext<'_, DB>,
        ys: &Scale,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        let base = area.get_base_pixel();
        for (i, lines) in self.lines.iter().enumerate() {
            let (px, py) = ctx.backend_coord(&(i as f64, ys.lo));
            for (k, line) in lines.iter().enumerate() {
                area.draw(&Text::new(
                    line.clone(),
                    (
                        px - base.0,
                        py - base.1 + 8 + k as i32 * (self.font as i32 + 3),
                    ),
                    ("sans-serif", self.font)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(err)?;
            }
        }
        Ok(())
    }
}

/// Characters in the longest line of any label (at least 1).
fn widest(lines: &[Vec<String>]) -> usize {
    lines
        .iter()
        .flatten()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Shaded phases, each with its note at its top left.
fn draw_bands<DB: DrawingBackend>(
    ctx: &PanelContext<'_, DB>,
    p: &Panel,
    xs: &Scale,
    ys: &Scale,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    for band in &p.bands {
        let (x0, x1) = (xs.t(band.from), xs.t(band.to));
        ctx.plotting_area()
            .draw(&Rectangle::new([(x0, ys.lo), (x1, ys.hi)], BAND.filled()))
            .map_err(err)?;
        if !band.text.is_empty() {
            ctx.plotting_area()
                .draw(
                    &(EmptyElement::at((x0, ys.hi))
                        + Text::new(
                            band.text.clone(),
                            (6, 4),
                            ("sans-serif", NOTE_PX).into_font().color(&NOTE),
                        )),
                )
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Each series in its style, with its error bars.
fn draw_series<DB: DrawingBackend>(
    ctx: &mut PanelContext<'_, DB>,
    p: &Panel,
    chart: &Chart,
    xs: &Scale,
    ys: &Scale,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let pt = |x: f64, y: f64| (xs.t(x), ys.t(y));
    for s in &p.series {
        let c = chart.palette.color(&s.label);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|q| pt(q.x, q.y)).collect();
        match s.style {
            Style::Dots => {
                let r = if pts.len() > 2000 { 1 } else { 2 };
                ctx.draw_series(pts.iter().map(|&q| Circle::new(q, r, c.filled())))
                    .map_err(err)?;
            }
            Style::Line => {
                ctx.draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(err)?;
            }
            Style::LinePoints => {
                ctx.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?;
                ctx.draw_series(pts.iter().map(|&q| Circle::new(q, 4, c.filled())))
                    .map_err(err)?;
            }
        }
        // Error bars with caps.
        for q in s.points.iter().filter(|q| q.hi > q.lo) {
            let (x, lo) = pt(q.x, q.lo);
            let hi = ys.t(q.hi);
            let style = c.stroke_width(2);
            ctx.draw_series([PathElement::new(vec![(x, lo), (x, hi)], style)])
                .map_err(err)?;
            for y in [lo, hi] {
                ctx.plotting_area()
                    .draw(
                        &(EmptyElement::at((x, y))
                            + PathElement::new(vec![(-5, 0), (5, 0)], style)),
                    )
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Box plots: the box from the first to the third quartile, the median across it,
/// whiskers with caps, outliers as rings.
fn draw_boxes<DB: DrawingBackend>(
    ctx: &PanelContext<'_, DB>,
    p: &Panel,
    chart: &Chart,
    ys: &Scale,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    for bx in &p.boxes {
        let c = chart.palette.color(&bx.series);
        let x = bx.category as f64;
        let [w0, q1, med, q3, w1] = bx.five.map(|v| ys.t(v));
        let area = ctx.plotting_area();
        area.draw(&Rectangle::new(
            [(x - 0.28, q1), (x + 0.28, q3)],
            c.mix(0.2).filled(),
        ))
        .map_err(err)?;
        area.draw(&Rectangle::new(
            [(x - 0.28, q1), (x + 0.28, q3)],
            c.stroke_width(2),
        ))
        .map_err(err)?;
        for line in [
            vec![(x - 0.28, med), (x + 0.28, med)],
            vec![(x, w0), (x, q1)],
            vec![(x, q3), (x, w1)],
            vec![(x - 0.12, w0), (x + 0.12, w0)],
            vec![(x - 0.12, w1), (x + 0.12, w1)],
        ] {
            area.draw(&PathElement::new(line, c.stroke_width(2)))
                .map_err(err)?;
        }
        for o in &bx.outliers {
            area.draw(&Circle::new((x, ys.t(*o)), 4, c.stroke_width(2)))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Marked points (knees): a ring with its note beside it.
fn draw_marks<DB: DrawingBackend>(
    ctx: &PanelContext<'_, DB>,
    p: &Panel,
    chart: &Chart,
    xs: &Scale,
    ys: &Scale,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    for (i, m) in p.marks.iter().enumerate() {
        let c = chart.palette.color(&m.series);
        let (x, y) = (xs.t(m.x), ys.t(m.y));
        // The note goes to the side with more room.
        let right_half = (x - xs.lo) / (xs.hi - xs.lo) > 0.55;
        let font = ("sans-serif", LABEL_PX).into_font().color(&c);
        let dx = if right_half {
            // Measured, and kept inside the plot: a long note would run over the y labels.
            let text_w = ctx
                .plotting_area()
                .estimate_text_size(&m.text, &font)
                .map_or(m.text.chars().count() as i32 * 9, |(tw, _)| tw as i32);
            let room = ctx.backend_coord(&(x, y)).0 - ctx.plotting_area().get_pixel_range().0.start;
            -(text_w + 12).min(room - 2).max(0)
        } else {
            12
        };
        ctx.plotting_area()
            .draw(
                &(EmptyElement::at((x, y))
                    + Circle::new((0, 0), 8, c.stroke_width(2))
                    // Each note a line lower than the one before: knees of several
                    // series often fall at one rate.
                    + Text::new(
                        m.text.clone(),
                        (dx, 6 + i as i32 * 20),
                        font.clone(),
                    )),
            )
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captions_wrap_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("one\ntwo", 80), ["one", "two"]);
    }

    #[test]
    fn a_linear_rate_axis_names_its_unit_and_a_log_one_labels_each_tick() {
        let lin = Scale::new(
            &Axis::linear("received rate", Quantity::BitRate),
            &[1e9, 30e9],
            6,
            true,
        );
        assert_eq!(lin.title, "received rate (Gbit/s)");
        assert_eq!(lin.label(10e9), "10");
        let log = Scale::new(
            &Axis::log("offered rate", Quantity::BitRate),
            &[10e6, 1e9],
            8,
            false,
        );
        assert_eq!(log.title, "offered rate");
        assert_eq!(log.label(1e8f64.log10()), "100 Mbit/s");
        assert_eq!(log.label(9.0), "1 Gbit/s");
    }
}
