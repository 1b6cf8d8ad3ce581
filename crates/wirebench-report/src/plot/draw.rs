//! Drawing a [`Chart`]: the title above, the legend in a column to the right (or in rows
//! under the title when a column would take too much of the width), the caption below,
//! and the panels stacked on one x axis; several results' stacks side by side in a grid,
//! sharing their scales.
//!
//! Sizes are in points at the image's resolution (see [`Look`]): tick labels are 7 pt, so
//! an image printed at the width its pixels and dots per inch give keeps them readable.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

use super::axes::{body_top, sustained_top, Scale, Ticked};
use super::chart::{Axis, Chart, Panel, Style, PALETTE, REFERENCE};
use super::glyphs::text_width;
use super::look::{
    clamp, err, wrap, Look, PanelContext, AXIS_PX, BAND, GRID, LABEL_PX, NOTE, NOTE_PX, TICK_PX,
    TITLE_PX,
};
use super::marks::{draw_marks, CategoryLabels};
use super::scale::Quantity;
use super::{Options, PlotError, YScale};

/// The chart's panels as stacks (one per cell), and the grid's columns.
struct Grid<'a> {
    stacks: Vec<&'a [Panel]>,
    columns: usize,
}

impl<'a> Grid<'a> {
    fn of(chart: &'a Chart) -> Self {
        let n = chart.cells.len();
        if n < 2 || !chart.panels.len().is_multiple_of(n) || chart.panels.is_empty() {
            return Self {
                stacks: vec![&chart.panels],
                columns: 1,
            };
        }
        let per = chart.panels.len() / n;
        let columns = if chart.columns > 0 {
            chart.columns.min(n)
        } else {
            n.min(2)
        };
        Self {
            stacks: chart.panels.chunks(per).collect(),
            columns,
        }
    }

    fn rows(&self) -> usize {
        self.stacks.len().div_ceil(self.columns)
    }

    /// Panels per stack.
    fn depth(&self) -> usize {
        self.stacks.first().map_or(0, |s| s.len())
    }
}

/// The image's size in pixels when the options leave it to the chart: 3.5 inches wide
/// per column at the options' resolution (a paper's column), and as tall as its panels
/// need (more for more panels) plus its title, legend and caption.
pub(super) fn default_size(chart: &Chart, opts: &Options) -> (u32, u32) {
    let g = Grid::of(chart);
    let look = Look::new(opts);
    let col = (3.5 * opts.dpi).round();
    let w = opts.width.unwrap_or((col * g.columns.min(2) as f64) as u32);
    if let Some(h) = opts.height {
        return (w, h);
    }
    let per_col = f64::from(w) / g.columns as f64;
    let stack = per_col * (0.3 + 0.2 * g.depth().max(1) as f64);
    let legend = match place_legend(&legend_entries(chart), w, &look) {
        LegendPlace::Rows(r) => f64::from(look.px(26.0)) * r.len() as f64,
        _ => 0.0,
    };
    // The caption as wrapped, and a line more for what a cut axis adds to it.
    let caption = if chart.caption.is_empty() {
        0.0
    } else {
        let lines = wrap(
            &chart.caption,
            f64::from(w) - f64::from(look.px(32.0)),
            look.font(NOTE_PX),
        );
        (lines.len() + 1) as f64 * look.em(NOTE_PX) * 1.3
    };
    let extra = look.em(TITLE_PX) * 1.8 + legend + caption;
    let h = stack * g.rows() as f64 + extra;
    // Within what an image may be, whatever width was asked.
    let (lo, hi) = (*super::SIZE_RANGE.start(), *super::SIZE_RANGE.end());
    (w, (h.min(f64::from(w) * 3.0) as u32).clamp(lo, hi))
}

/// The y axis of panel `p`, as asked: forced linear or log, else as the chart chose.
fn y_axis(p: &Panel, look: &Look) -> Axis {
    let mut a = p.y.clone();
    if a.categories.is_empty() && !p.ideal {
        match look.y_scale {
            YScale::Auto => {}
            YScale::Linear => {
                a.log = false;
                a.from_zero = !matches!(a.quantity, Quantity::Count);
            }
            YScale::Log => {
                a.log = true;
                a.from_zero = false;
            }
        }
    }
    a
}

/// Every y value of a panel.
fn y_values(p: &Panel) -> Vec<f64> {
    p.series
        .iter()
        .flat_map(|s| s.points.iter().flat_map(|q| [q.y, q.lo, q.hi]))
        .chain(p.lost.iter().map(|q| q.1))
        .chain(p.marks.iter().filter(|m| m.ring).map(|m| m.y))
        .chain(
            p.boxes
                .iter()
                .flat_map(|b| b.five.iter().chain(&b.outliers).copied()),
        )
        .filter(|v| v.is_finite())
        .collect()
}

/// The top of the panel's shaded areas (a link's capacity), if it has any.
fn area_top(p: &Panel) -> Option<f64> {
    p.series
        .iter()
        .filter(|s| s.style == Style::Area)
        .flat_map(|s| s.points.iter().map(|q| q.y))
        .filter(|v| v.is_finite())
        .reduce(f64::max)
}

/// Every x value of the chart's panels (the x axis is shared).
fn x_values(chart: &Chart) -> Vec<f64> {
    let mut xv = Vec::new();
    for p in &chart.panels {
        xv.extend(p.series.iter().flat_map(|s| s.points.iter().map(|q| q.x)));
        xv.extend(p.lost.iter().map(|q| q.0));
        xv.extend(p.marks.iter().filter(|m| m.ring).map(|m| m.x));
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
    xv.retain(|v| v.is_finite());
    xv
}

/// The y scale of the panels at `row` of every stack, `ph` pixels high: one for all, so
/// that stacks side by side compare; with `same_scale`, the x values' (y = x).
fn row_scale(g: &Grid, row: usize, xv: &[f64], ph: f64, look: &Look) -> Scale {
    let first = &g.stacks[0][row];
    if first.ideal {
        return Scale::new(&first.y, xv, 8, false, None);
    }
    let mut yv = Vec::new();
    // The body's top of the row: the highest of each stack's (a stack without a spike
    // shows all of itself), so a comparison keeps every result's body in view.
    let mut top: Option<f64> = None;
    for s in &g.stacks {
        let v = y_values(&s[row]);
        // A stretch of the data above the body is the data's own, not a spike; a shaded
        // capacity is the link's own: the body reaches both.
        let xy: Vec<Vec<(f64, f64)>> = s[row]
            .series
            .iter()
            .map(|l| l.points.iter().map(|q| (q.x, q.y)).collect())
            .collect();
        let b = body_top(&v).and_then(|b| sustained_top(b, xy.iter().map(Vec::as_slice), &v));
        let t = match (b, area_top(&s[row])) {
            (Some(b), Some(a)) => Some(b.max(a)),
            (b, _) => b,
        };
        let t = t.or_else(|| v.iter().copied().reduce(f64::max));
        top = match (top, t) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        yv.extend(v);
    }
    let body = first.body && !look.full_range;
    // A tick label every three ems at most, and never more than 6.
    let ticks = (ph / (3.0 * look.em(TICK_PX))).floor().clamp(2.0, 6.0) as usize;
    Scale::new(&y_axis(first, look), &yv, ticks, true, top.filter(|_| body))
}

/// What a cut axis leaves out, for the caption: "round-trip time: 5 values, up to 268 ms".
fn cut_notes(g: &Grid, scales: &[Scale]) -> Vec<String> {
    let mut notes = Vec::new();
    for (row, ys) in scales.iter().enumerate() {
        if !ys.cut {
            continue;
        }
        let above: Vec<f64> = g
            .stacks
            .iter()
            .flat_map(|s| y_values(&s[row]))
            .filter(|v| *v > ys.hi)
            .collect();
        let Some(max) = above.iter().copied().reduce(f64::max) else {
            continue;
        };
        notes.push(format!(
            "{}: {} value(s), up to {}",
            g.stacks[0][row].y.label,
            above.len(),
            ys.with_unit(max)
        ));
    }
    notes
}

/// The legend's entries: the chart's series, then the reference line, lost packets and
/// shaded phases.
fn legend_entries(chart: &Chart) -> Vec<(String, RGBColor, Style)> {
    let mut out = chart.legend();
    if chart.panels.iter().any(|p| p.ideal) {
        out.push(("ideal: received = offered".into(), REFERENCE, Style::Line));
    }
    if chart.panels.iter().any(|p| !p.lost.is_empty()) {
        out.push(("lost (drawn at 0)".into(), PALETTE[1], Style::Dots));
    }
    for b in chart.panels.iter().flat_map(|p| &p.bands) {
        if !b.text.is_empty() && !out.iter().any(|(l, _, _)| *l == b.text) {
            out.push((b.text.clone(), BAND, Style::Box));
        }
    }
    out
}

/// Where the legend goes: a column to the right `width` pixels wide, or rows under the
/// title (each a list of entries) when a column would take more than 30% of the width.
enum LegendPlace {
    None,
    Column(u32),
    Rows(Vec<Vec<usize>>),
}

/// The width of one legend entry: its glyph, its text and the gap after it.
fn entry_width(label: &str, look: &Look) -> f64 {
    f64::from(look.px(42.0)) + text_width(look.font(LABEL_PX), label) + f64::from(look.px(20.0))
}

fn place_legend(entries: &[(String, RGBColor, Style)], w: u32, look: &Look) -> LegendPlace {
    if entries.is_empty() {
        return LegendPlace::None;
    }
    let widest = entries
        .iter()
        .map(|(l, _, _)| entry_width(l, look))
        .fold(0.0, f64::max);
    if widest <= f64::from(w) * 0.3 {
        return LegendPlace::Column(widest.ceil() as u32);
    }
    let room = f64::from(w) - f64::from(look.px(24.0));
    let mut rows: Vec<Vec<usize>> = vec![Vec::new()];
    let mut used = 0.0;
    for (i, (l, _, _)) in entries.iter().enumerate() {
        let ew = entry_width(l, look);
        if used + ew > room && rows.last().is_some_and(|r| !r.is_empty()) {
            rows.push(Vec::new());
            used = 0.0;
        }
        if let Some(r) = rows.last_mut() {
            r.push(i);
        }
        used += ew;
    }
    LegendPlace::Rows(rows)
}

/// Draws `chart` on `root`, sized by `look`.
pub(super) fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    chart: &Chart,
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let area = root
        .titled(
            &chart.title,
            ("sans-serif", look.font(TITLE_PX))
                .into_font()
                .color(&BLACK),
        )
        .map_err(err)?;
    let (w, h) = area.dim_in_pixel();
    let g = Grid::of(chart);
    if g.depth() == 0 {
        return root.present().map_err(err);
    }
    let xv = x_values(chart);
    // A first pass at the y scales, for what a cut axis leaves out: the caption says it.
    let rough: Vec<Scale> = (0..g.depth())
        .map(|r| row_scale(&g, r, &xv, 200.0, look))
        .collect();
    let mut caption = chart.caption.clone();
    let cut = cut_notes(&g, &rough);
    if !cut.is_empty() {
        caption = format!(
            "{caption} ▲: values above the axis, which ends at the data's body (Tukey's outer \
             fence + 10%, over any stretch of 5 intervals or more; --full-range draws all): \
             {}.",
            cut.join("; ")
        )
        .trim()
        .to_string();
    }
    let font = look.font(NOTE_PX);
    let line_h = look.em(NOTE_PX) * 1.3;
    let lines = if caption.is_empty() {
        Vec::new()
    } else {
        wrap(&caption, f64::from(w) - f64::from(look.px(32.0)), font)
    };
    let caption_h = ((lines.len() as f64 * line_h) as u32 + look.px(10.0) as u32).min(h / 3);
    let (body, foot) = area.split_vertically(h - caption_h);
    for (i, line) in lines.iter().enumerate() {
        foot.draw(&Text::new(
            line.as_str(),
            (look.px(16.0), look.px(4.0) + (i as f64 * line_h) as i32),
            ("sans-serif", font).into_font().color(&NOTE),
        ))
        .map_err(err)?;
    }
    let legend = legend_entries(chart);
    let (bw, _) = body.dim_in_pixel();
    let plot = match place_legend(&legend, bw, look) {
        LegendPlace::None => body,
        LegendPlace::Column(lw) => {
            let (plot, side) = body.split_horizontally(bw - lw);
            let rows: Vec<Vec<usize>> = (0..legend.len()).map(|i| vec![i]).collect();
            draw_legend(&side, &legend, &rows, look)?;
            plot
        }
        LegendPlace::Rows(rows) => {
            let row_h = look.px(26.0);
            let (top, plot) = body.split_vertically(rows.len() as i32 * row_h + look.px(6.0));
            draw_legend(&top, &legend, &rows, look)?;
            plot
        }
    };
    draw_grid(&plot, chart, &g, &xv, look)?;
    root.present().map_err(err)
}

/// How opaque a shaded area is: light enough that the lines over it read as on white.
const AREA_SHADE: f64 = 0.25;

/// One legend entry per element of `rows`' lists, row by row, left to right.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, Style)],
    rows: &[Vec<usize>],
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let p = |v: f64| look.px(v);
    for (r, row) in rows.iter().enumerate() {
        let y = p(18.0) + r as i32 * p(26.0);
        let mut x = p(6.0);
        for &i in row {
            let (label, c, style) = &entries[i];
            match style {
                Style::Dots => {
                    area.draw(&Circle::new((x + p(14.0), y), p(4.0) as u32, c.filled()))
                        .map_err(err)?;
                }
                Style::Box | Style::Area => {
                    let r = [(x + p(4.0), y - p(7.0)), (x + p(26.0), y + p(7.0))];
                    let shade = if *style == Style::Area {
                        AREA_SHADE
                    } else {
                        0.35
                    };
                    area.draw(&Rectangle::new(r, c.mix(shade).filled()))
                        .map_err(err)?;
                    area.draw(&Rectangle::new(r, c.stroke_width(p(1.5) as u32)))
                        .map_err(err)?;
                }
                _ => {
                    let line = vec![(x, y), (x + p(28.0), y)];
                    area.draw(&PathElement::new(line, c.stroke_width(p(3.0) as u32)))
                        .map_err(err)?;
                    if *style == Style::LinePoints {
                        area.draw(&Circle::new((x + p(14.0), y), p(4.0) as u32, c.filled()))
                            .map_err(err)?;
                    }
                }
            }
            area.draw(&Text::new(
                label.as_str(),
                (x + p(36.0), y),
                ("sans-serif", look.font(LABEL_PX))
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
            x += entry_width(label, look) as i32;
        }
    }
    Ok(())
}

/// The stacks in their grid: the scales first (shared: x by all, y by each row of every
/// stack), then each stack in its cell under its heading.
fn draw_grid<DB: DrawingBackend>(
    plot: &DrawingArea<DB, Shift>,
    chart: &Chart,
    g: &Grid,
    xv: &[f64],
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let cells = plot.split_evenly((g.rows(), g.columns));
    let heading_h = if chart.cells.len() > 1 {
        (look.em(NOTE_PX) * 1.6) as u32
    } else {
        0
    };
    let (cw, ch) = cells[0].dim_in_pixel();
    let stack_h = ch.saturating_sub(heading_h);
    let total: u32 = g.stacks[0].iter().map(|p| p.weight.max(1)).sum();
    let heights: Vec<u32> = g.stacks[0]
        .iter()
        .map(|p| stack_h * p.weight.max(1) / total)
        .collect();
    let first = &g.stacks[0][0];
    let mut xs = Scale::new(&first.x, xv, 8, false, None);
    // The category labels at a first guess of the plot's width, for the height they take.
    let guess = CategoryLabels::fit(&xs, f64::from(cw) * 0.8, look);
    let mut y_scales: Vec<Scale> = (0..g.depth())
        .map(|r| {
            let plot_h = f64::from(heights[r]) - x_area(look, r + 1 == g.depth(), Some(&guess));
            let mut ys = row_scale(g, r, xv, plot_h, look);
            ys.fit_y(plot_h.max(1.0), look.font(TICK_PX));
            ys
        })
        .collect();
    let y_titles = y_titles(&mut y_scales, &heights, &guess, look);
    let title_lines = y_titles
        .iter()
        .filter(|t| !t.1)
        .map(|t| t.0.len())
        .max()
        .unwrap_or(0) as f64;
    // One width of y labels for every panel, so that their x axes line up.
    let tick = look.font(TICK_PX);
    let widest = y_scales
        .iter()
        .flat_map(|ys| ys.ticks.iter().map(|t| text_width(tick, &ys.label(*t))))
        .fold(0.0, f64::max);
    let y_label_w =
        (widest + look.em(AXIS_PX) * 1.3 * title_lines + f64::from(look.px(18.0))) as u32;
    let plot_w = f64::from(cw) - f64::from(y_label_w) - f64::from(look.px(24.0));
    xs.fit_x(plot_w, tick);
    // Room at the right for half the last tick label, which centres on the plot's edge.
    let right = xs
        .ticks
        .last()
        .filter(|t| xs.categories.is_empty() && (xs.hi - **t) < (xs.hi - xs.lo) * 0.05)
        .map_or(0.0, |t| text_width(tick, &xs.label(*t)) / 2.0);
    let right = (right + f64::from(look.px(4.0))).max(f64::from(look.px(18.0))) as i32;
    let cats = CategoryLabels::fit(&xs, plot_w, look);
    for (i, stack) in g.stacks.iter().enumerate() {
        let Some(cell) = cells.get(i) else { break };
        let mut rest = cell.clone();
        if heading_h > 0 {
            let (head, below) = cell.split_vertically(heading_h);
            head.draw(&Text::new(
                chart.cells[i].clone(),
                ((cw / 2) as i32, (heading_h / 2) as i32),
                ("sans-serif", look.font(LABEL_PX))
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            ))
            .map_err(err)?;
            rest = below;
        }
        for (r, p) in stack.iter().enumerate() {
            let last = r + 1 == stack.len();
            let (this, below) = if last {
                (rest.clone(), rest.clone())
            } else {
                rest.split_vertically(heights[r])
            };
            let frame = Frame {
                right,
                xs: &xs,
                ys: &y_scales[r],
                y_title: &y_titles[r].0,
                y_title_above: y_titles[r].1,
                cats: &cats,
                y_label_w,
                last,
            };
            draw_panel(&this, p, chart, &frame, look)?;
            rest = below;
        }
    }
    Ok(())
}

/// Each y axis's title in lines that fit beside its panel; a word longer than the panel
/// is high puts the title above the panel instead, in one line (and thins its ticks again,
/// as it takes from the panel's height).
fn y_titles(
    y_scales: &mut [Scale],
    heights: &[u32],
    cats: &CategoryLabels,
    look: &Look,
) -> Vec<(Vec<String>, bool)> {
    let axis_font = look.font(AXIS_PX);
    let depth = y_scales.len();
    let mut out = Vec::with_capacity(depth);
    for (r, ys) in y_scales.iter_mut().enumerate() {
        let room = f64::from(heights[r]) - x_area(look, false, None) - f64::from(look.px(10.0));
        let lines = wrap(&ys.title, room.max(1.0), axis_font);
        if lines.iter().any(|l| text_width(axis_font, l) > room) {
            let plot_h = f64::from(heights[r])
                - x_area(look, r + 1 == depth, Some(cats))
                - look.em(AXIS_PX) * 1.3;
            ys.fit_y(plot_h.max(1.0), look.font(TICK_PX));
            out.push((vec![ys.title.clone()], true));
        } else {
            out.push((lines, false));
        }
    }
    out
}

/// What a panel is drawn with: its scales, the x labels, the y labels' width, and
/// whether it is the bottom of its stack (which carries the x axis's title).
struct Frame<'a> {
    /// The margin at the right, pixels.
    right: i32,
    xs: &'a Scale,
    ys: &'a Scale,
    /// The y axis's title, in lines.
    y_title: &'a [String],
    /// The title is set above the panel (too long to stand beside it).
    y_title_above: bool,
    cats: &'a CategoryLabels,
    y_label_w: u32,
    last: bool,
}

/// Draws one panel: its frame, grid and axes, then what it holds from the back to the
/// front (shaded phases, the ideal line, series, boxes, lost packets, notes).
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    chart: &Chart,
    f: &Frame,
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (xs, ys) = (f.xs, f.ys);
    let mut ctx = frame(area, f, look)?;
    f.cats.draw(area, &ctx, ys, look)?;
    draw_bands(&ctx, p, xs, ys)?;
    if p.ideal {
        // Two points: the line y = x, straight because both axes share one scale.
        let (a, b) = (ys.lo, ys.hi);
        ctx.draw_series(LineSeries::new(
            vec![(a, a), (b, b)],
            REFERENCE.stroke_width(look.px(2.0) as u32),
        ))
        .map_err(err)?;
    }
    draw_series(&mut ctx, p, chart, xs, ys, look)?;
    draw_boxes(&ctx, p, chart, ys, look)?;
    if !p.lost.is_empty() {
        let r = look.px(4.0);
        ctx.draw_series(p.lost.iter().map(|&(x, y)| {
            Cross::new((xs.t(x), clamp(ys, ys.t(y))), r, PALETTE[1].stroke_width(1))
        }))
        .map_err(err)?;
    }
    draw_marks(&ctx, p, chart, xs, ys, look)
}

/// The panel's frame: its axes, grid and tick labels (the x axis's title under the last
/// panel only, which stands for all of them); the context to draw its contents in.
fn frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    f: &Frame,
    look: &Look,
) -> Result<PanelContext<'a, DB>, PlotError>
where
    DB::ErrorType: 'static,
{
    let x_area = x_area(look, f.last, Some(f.cats)) as u32;
    let mut b = ChartBuilder::on(area);
    let above = if f.y_title_above {
        (look.em(AXIS_PX) * 1.3) as i32
    } else {
        0
    };
    b.margin_top(look.px(10.0) + above)
        .margin_right(f.right)
        .margin_left(look.px(6.0))
        .x_label_area_size(x_area)
        .y_label_area_size(f.y_label_w);
    let (xs, ys) = (f.xs, f.ys);
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
    let x_desc = if f.last {
        f.cats.x_title.clone().unwrap_or_else(|| xs.title.clone())
    } else {
        String::new()
    };
    ctx.configure_mesh()
        .x_desc(x_desc)
        // Only the bottom panel of a stack labels the x axis they share.
        .x_label_formatter(&|v| {
            if xs.categories.is_empty() && f.last {
                xs.label(*v)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| ys.label(*v))
        .set_all_tick_mark_size(look.px(5.0))
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(NOTE)
        .x_label_style(("sans-serif", look.font(TICK_PX)))
        .y_label_style(("sans-serif", look.font(TICK_PX)))
        .axis_desc_style(("sans-serif", look.font(AXIS_PX)))
        .draw()
        .map_err(err)?;
    // The y axis's title, upright, a line each, centred on the plot's height; or above it.
    let (xr, yr) = ctx.plotting_area().get_pixel_range();
    let base = area.get_base_pixel();
    let mid = (yr.start + yr.end) / 2 - base.1;
    let line_h = look.em(AXIS_PX) * 1.3;
    if f.y_title_above {
        for line in f.y_title {
            area.draw(&Text::new(
                line.clone(),
                (xr.start - base.0, yr.start - base.1 - look.px(4.0)),
                ("sans-serif", look.font(AXIS_PX))
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Bottom)),
            ))
            .map_err(err)?;
        }
        return Ok(ctx);
    }
    for (i, line) in f.y_title.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (look.px(6.0) + (i as f64 * line_h) as i32, mid),
            ("sans-serif", look.font(AXIS_PX))
                .into_font()
                .color(&BLACK)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(err)?;
    }
    Ok(ctx)
}

/// The height under a panel for its x labels (category labels when given, the bottom
/// panel's tick labels) and, under the bottom one, the axis's title.
fn x_area(look: &Look, last: bool, cats: Option<&CategoryLabels>) -> f64 {
    let tick_em = look.em(TICK_PX);
    let title_h = if last { look.em(AXIS_PX) * 1.6 } else { 0.0 };
    let labels_h = match cats {
        Some(c) if c.rows() > 0 => c.height(look),
        _ if last => tick_em * 1.3,
        _ => 0.0,
    };
    labels_h + title_h + f64::from(look.px(14.0))
}

/// Shaded phases (their notes are in the legend, off the data).
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
            .draw(&Rectangle::new(
                [(x0, ys.lo), (x1, ys.hi)],
                BAND.mix(0.6).filled(),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// Each series in its style, with its error bars; a line breaks at gaps, and values
/// above a cut axis are drawn on its top edge with a ▲.
fn draw_series<DB: DrawingBackend>(
    ctx: &mut PanelContext<'_, DB>,
    p: &Panel,
    chart: &Chart,
    xs: &Scale,
    ys: &Scale,
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let pt = |x: f64, y: f64| (xs.t(x), clamp(ys, ys.t(y)));
    let width = look.px(2.0) as u32;
    for s in &p.series {
        let c = chart.palette.color(&s.label);
        let above: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|q| !q.is_gap() && ys.t(q.y) > ys.hi)
            .map(|q| (xs.t(q.x), ys.hi))
            .collect();
        for run in s.runs() {
            let pts: Vec<(f64, f64)> = run.iter().map(|q| pt(q.x, q.y)).collect();
            match s.style {
                Style::Dots => {
                    let r = if s.points.len() > 2000 { 1 } else { 2 };
                    ctx.draw_series(
                        pts.iter()
                            .map(|&q| Circle::new(q, look.px(r as f64), c.filled())),
                    )
                    .map_err(err)?;
                }
                Style::Line | Style::Box => {
                    ctx.draw_series(LineSeries::new(pts, c.stroke_width(width)))
                        .map_err(err)?;
                }
                Style::Area => {
                    // Down to the axis's foot (a rate axis starts at 0), then its edge.
                    let mut shape = pts.clone();
                    if let (Some(&(x0, _)), Some(&(x1, _))) = (pts.first(), pts.last()) {
                        shape.extend([(x1, ys.lo), (x0, ys.lo)]);
                    }
                    ctx.plotting_area()
                        .draw(&Polygon::new(shape, c.mix(AREA_SHADE).filled()))
                        .map_err(err)?;
                    ctx.draw_series(LineSeries::new(pts, c.stroke_width(width / 2 + 1)))
                        .map_err(err)?;
                }
                Style::LinePoints => {
                    ctx.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(width)))
                        .map_err(err)?;
                    let r = look.px(if s.max_gap.is_some() { 2.5 } else { 4.0 });
                    ctx.draw_series(pts.iter().map(|&q| Circle::new(q, r, c.filled())))
                        .map_err(err)?;
                }
            }
        }
        let tri = look.px(6.0);
        ctx.draw_series(
            above
                .into_iter()
                .map(|q| TriangleMarker::new(q, tri, c.filled())),
        )
        .map_err(err)?;
        // Error bars with caps.
        for q in s.points.iter().filter(|q| q.hi > q.lo) {
            let (x, lo) = pt(q.x, q.lo);
            let hi = clamp(ys, ys.t(q.hi));
            let style = c.stroke_width(width);
            ctx.draw_series([PathElement::new(vec![(x, lo), (x, hi)], style)])
                .map_err(err)?;
            let cap = look.px(5.0);
            for y in [lo, hi] {
                ctx.plotting_area()
                    .draw(
                        &(EmptyElement::at((x, y))
                            + PathElement::new(vec![(-cap, 0), (cap, 0)], style)),
                    )
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Box plots: the box from the first to the third quartile, the median across it,
/// whiskers with caps, outliers as small rings.
fn draw_boxes<DB: DrawingBackend>(
    ctx: &PanelContext<'_, DB>,
    p: &Panel,
    chart: &Chart,
    ys: &Scale,
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let width = look.px(2.0) as u32;
    for bx in &p.boxes {
        let c = chart.palette.color(&bx.series);
        let x = bx.category as f64;
        let [w0, q1, med, q3, w1] = bx.five.map(|v| clamp(ys, ys.t(v)));
        let area = ctx.plotting_area();
        area.draw(&Rectangle::new(
            [(x - 0.28, q1), (x + 0.28, q3)],
            c.mix(0.2).filled(),
        ))
        .map_err(err)?;
        area.draw(&Rectangle::new(
            [(x - 0.28, q1), (x + 0.28, q3)],
            c.stroke_width(width),
        ))
        .map_err(err)?;
        for line in [
            vec![(x - 0.28, med), (x + 0.28, med)],
            vec![(x, w0), (x, q1)],
            vec![(x, q3), (x, w1)],
            vec![(x - 0.12, w0), (x + 0.12, w0)],
            vec![(x - 0.12, w1), (x + 0.12, w1)],
        ] {
            area.draw(&PathElement::new(line, c.stroke_width(width)))
                .map_err(err)?;
        }
        for o in &bx.outliers {
            area.draw(&Circle::new(
                (x, clamp(ys, ys.t(*o))),
                look.px(3.0),
                c.stroke_width(look.px(1.5) as u32),
            ))
            .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captions_wrap_at_spaces_by_measured_width() {
        // "aa bb" is about 2.8 ems wide at a 16-pixel em: 45 pixels.
        assert_eq!(wrap("aa bb cc", 50.0, 20.0), ["aa bb", "cc"]);
        assert_eq!(wrap("one\ntwo", 800.0, 20.0), ["one", "two"]);
    }

    #[test]
    fn the_default_image_is_a_column_wide_with_7_point_ticks() {
        let opts = Options::default();
        let look = Look::new(&opts);
        let chart = Chart {
            panels: vec![Panel::new(
                Axis::linear("t", Quantity::Seconds),
                Axis::linear("r", Quantity::BitRate),
            )],
            ..Chart::default()
        };
        let (w, _) = default_size(&chart, &opts);
        // Printed 3.5 inches wide, a tick label's em in points.
        let pt = look.em(TICK_PX) / f64::from(w) * 3.5 * 72.0;
        assert!((7.0..7.5).contains(&pt), "{pt}");
    }
}
