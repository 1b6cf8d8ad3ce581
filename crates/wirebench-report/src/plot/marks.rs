//! Text placed among the data: the labels of a category axis (fitted to their slots:
//! values only, broken lines, then turned upright, then thinned; never shrunk below the
//! tick labels' size), and the notes of marked points, set in a corner the data leave empty.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

use super::axes::Scale;
use super::chart::{Chart, Panel};
use super::glyphs::text_width;
use super::look::{clamp, err, wrap, Look, PanelContext, LABEL_PX, TICK_PX};
use super::PlotError;

/// The labels under a category axis, fitted to the width of a category's slot.
pub(super) struct CategoryLabels {
    /// Each label: the first category it stands under, how many neighbours with the same
    /// label it spans (boxes of several series at one rate share one label), and its lines,
    /// top to bottom (one line when upright).
    groups: Vec<(usize, usize, Vec<String>)>,
    /// Turned to read upwards (too wide side by side even broken into lines).
    upright: bool,
    /// Every `every`th label is drawn (upright labels too tall for their slots).
    every: usize,
    /// The x axis's title, when the labels changed it (the parameters' names when the
    /// labels hold values only).
    pub x_title: Option<String>,
}

/// `name=value` shown as "name value".
fn shown(s: &str) -> String {
    s.replacen('=', " ", 1)
}

/// Runs of equal labels, as (first, length, lines).
fn runs(lines: Vec<Vec<String>>) -> Vec<(usize, usize, Vec<String>)> {
    let mut out: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for (i, l) in lines.into_iter().enumerate() {
        match out.last_mut() {
            Some(last) if last.2 == l => last.1 += 1,
            _ => out.push((i, 1, l)),
        }
    }
    out
}

impl CategoryLabels {
    /// The labels of `xs`'s categories in a plot `pw` pixels wide: a line per parameter
    /// ("rate 10.0 Mbit/s" over "size 500 B"); if too wide for its slot, values only (the
    /// parameters' names then in the axis title); then names broken after hyphens; then
    /// turned upright; then every other one.
    pub fn fit(xs: &Scale, pw: f64, look: &Look) -> Self {
        let font = look.font(TICK_PX);
        let slot = pw / xs.categories.len().max(1) as f64;
        let margin = look.em(TICK_PX) * 0.6;
        let mut groups = runs(
            xs.categories
                .iter()
                .map(|c| c.split('\n').map(String::from).collect())
                .collect(),
        );
        let too_wide = |g: &[(usize, usize, Vec<String>)]| {
            g.iter().any(|(_, n, l)| {
                l.iter()
                    .any(|s| text_width(font, &shown(s)) > slot * *n as f64 - margin)
            })
        };
        let mut x_title = None;
        if too_wide(&groups) && groups.iter().flat_map(|g| &g.2).all(|s| s.contains('=')) {
            let names: Vec<String> = groups
                .first()
                .map(|g| {
                    g.2.iter()
                        .map(|s| s.split('=').next().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default();
            x_title = Some(if names.len() > 1 {
                format!("{} (top to bottom)", names.join(", "))
            } else {
                names.concat()
            });
            for g in &mut groups {
                for s in g.2.iter_mut() {
                    *s = s.split_once('=').map_or(s.clone(), |(_, v)| v.to_string());
                }
            }
        }
        // Names of one line ("smoltcp-receiver") break after their hyphens.
        if too_wide(&groups) && groups.iter().all(|g| g.2.len() == 1) {
            for g in &mut groups {
                g.2 = g.2[0].split_inclusive('-').map(String::from).collect();
            }
        }
        let mut upright = false;
        let mut every = 1;
        if too_wide(&groups) {
            // Still too wide: one line each, read upwards.
            upright = true;
            for g in &mut groups {
                let joined = g.2.iter().map(|s| shown(s)).collect::<Vec<_>>();
                g.2 = vec![joined.join(", ").replace("-, ", "-")];
            }
            let narrowest = groups.iter().map(|g| g.1).min().unwrap_or(1) as f64;
            let line_h = look.em(TICK_PX) * 1.3;
            every = (line_h / (slot * narrowest).max(1.0)).ceil().max(1.0) as usize;
        }
        Self {
            groups,
            upright,
            every,
            x_title,
        }
    }

    /// Lines of the tallest label (0 without categories).
    pub fn rows(&self) -> u32 {
        self.groups.iter().map(|g| g.2.len()).max().unwrap_or(0) as u32
    }

    /// The height the labels take under the axis, pixels.
    pub fn height(&self, look: &Look) -> f64 {
        let em = look.em(TICK_PX);
        if self.upright {
            let font = look.font(TICK_PX);
            self.groups
                .iter()
                .flat_map(|g| &g.2)
                .map(|s| text_width(font, s))
                .fold(0.0, f64::max)
                + em * 0.8
        } else {
            f64::from(self.rows()) * em * 1.25 + em * 0.5
        }
    }

    /// Draws each label centred under its categories.
    pub fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        ctx: &PanelContext<'_, DB>,
        ys: &Scale,
        look: &Look,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        let base = area.get_base_pixel();
        let line_h = (look.em(TICK_PX) * 1.25) as i32;
        let gap = look.px(8.0);
        for (first, n, lines) in self.groups.iter().step_by(self.every) {
            let centre = *first as f64 + (*n as f64 - 1.0) / 2.0;
            let (px, py) = ctx.backend_coord(&(centre, ys.lo));
            let (x, y) = (px - base.0, py - base.1 + gap);
            for (k, line) in lines.iter().enumerate() {
                let font = ("sans-serif", look.font(TICK_PX)).into_font().color(&BLACK);
                let text = if self.upright {
                    Text::new(
                        shown(line),
                        (x, y),
                        font.transform(FontTransform::Rotate270)
                            .pos(Pos::new(HPos::Right, VPos::Center)),
                    )
                } else {
                    Text::new(
                        shown(line),
                        (x, y + k as i32 * line_h),
                        font.pos(Pos::new(HPos::Center, VPos::Top)),
                    )
                };
                area.draw(&text).map_err(err)?;
            }
        }
        Ok(())
    }
}

/// Pixels of the data in a panel (points, and points along its lines), to keep notes off.
fn data_pixels<DB: DrawingBackend>(
    ctx: &PanelContext<'_, DB>,
    p: &Panel,
    xs: &Scale,
    ys: &Scale,
) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    let at = |x: f64, y: f64| ctx.backend_coord(&(x, clamp(ys, y)));
    let mut segment = |a: (f64, f64), b: (f64, f64)| {
        for k in 0..=12 {
            let f = f64::from(k) / 12.0;
            out.push(at(a.0 + (b.0 - a.0) * f, a.1 + (b.1 - a.1) * f));
        }
    };
    for s in &p.series {
        for run in s.runs() {
            let pts: Vec<(f64, f64)> = run.iter().map(|q| (xs.t(q.x), ys.t(q.y))).collect();
            if pts.len() == 1 {
                segment(pts[0], pts[0]);
            }
            for w in pts.windows(2) {
                segment(w[0], w[1]);
            }
        }
    }
    if p.ideal {
        segment((ys.lo, ys.lo), (ys.hi, ys.hi));
    }
    for b in &p.boxes {
        let x = b.category as f64;
        segment((x, ys.t(b.five[0])), (x, ys.t(b.five[4])));
    }
    out
}

/// Marked points (knees): a ring where the mark has a point, and every mark's note in a
/// block set in the corner of the panel the data cross least, inside the plot.
pub(super) fn draw_marks<DB: DrawingBackend>(
    ctx: &PanelContext<'_, DB>,
    p: &Panel,
    chart: &Chart,
    xs: &Scale,
    ys: &Scale,
    look: &Look,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    if p.marks.is_empty() {
        return Ok(());
    }
    let font = look.font(LABEL_PX);
    for m in p.marks.iter().filter(|m| m.ring) {
        let c = chart.palette.color(&m.series);
        ctx.plotting_area()
            .draw(&Circle::new(
                (xs.t(m.x), clamp(ys, ys.t(m.y))),
                look.px(8.0),
                c.stroke_width(look.px(2.0) as u32),
            ))
            .map_err(err)?;
    }
    let line_h = look.em(LABEL_PX) * 1.3;
    let (xr, yr) = ctx.plotting_area().get_pixel_range();
    let pad = look.px(8.0);
    // Each note in lines that fit the plot's width, in its series' colour.
    let room = f64::from(xr.end - xr.start - 2 * pad).max(1.0);
    let lines: Vec<(String, RGBColor)> = p
        .marks
        .iter()
        .flat_map(|m| {
            let c = chart.palette.color(&m.series);
            wrap(&m.text, room, font).into_iter().map(move |l| (l, c))
        })
        .collect();
    let bw = lines
        .iter()
        .map(|(l, _)| text_width(font, l))
        .fold(0.0, f64::max) as i32;
    let bh = (line_h * lines.len() as f64) as i32;
    let data = data_pixels(ctx, p, xs, ys);
    // The corners first (top left, top right, bottom right, bottom left), then places
    // between them; the first that the data cross least.
    let left = xr.start + pad;
    let right = (xr.end - pad - bw).max(left);
    let top = yr.start + pad;
    let bottom = (yr.end - pad - bh).max(top);
    let mut corners = vec![(left, top), (right, top), (right, bottom), (left, bottom)];
    for i in 0..=4 {
        for j in 0..=4 {
            corners.push((left + (right - left) * i / 4, top + (bottom - top) * j / 4));
        }
    }
    let crossed = |(x, y): (i32, i32)| {
        data.iter()
            .filter(|(dx, dy)| {
                (x - pad..=x + bw + pad).contains(dx) && (y - pad..=y + bh + pad).contains(dy)
            })
            .count()
    };
    let (x0, y0) = corners
        .iter()
        .copied()
        .min_by_key(|c| crossed(*c))
        .unwrap_or((left, top));
    let origin = ctx.backend_coord(&(xs.lo, ys.hi));
    for (i, (line, c)) in lines.into_iter().enumerate() {
        let y = y0 + (i as f64 * line_h) as i32;
        ctx.plotting_area()
            .draw(
                &(EmptyElement::at((xs.lo, ys.hi))
                    + Text::new(
                        line,
                        (x0 - origin.0, y - origin.1),
                        ("sans-serif", font)
                            .into_font()
                            .color(&c)
                            .pos(Pos::new(HPos::Left, VPos::Top)),
                    )),
            )
            .map_err(err)?;
    }
    Ok(())
}
