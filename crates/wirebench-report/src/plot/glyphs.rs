//! Text for PNG plots, laid out and rasterised here rather than by plotters.
//!
//! plotters 0.3's ab_glyph text drops each glyph's left side bearing and rounds each
//! glyph's top toward zero on its own, so in a PNG a decimal point sits raised beside its
//! digit ("2·00") and letters drift apart ("lon g"). [`Glyphs`] wraps a bitmap backend and
//! draws text the way a browser draws the SVG: at the em the SVG backend writes as
//! `font-size`, glyphs on one baseline at their fractional pen positions, with kerning.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// plotters' text size over the em its SVG backend writes (plotters-svg: `size / 1.24`).
const SVG_EM: f32 = 1.24;

/// The embedded font, parsed once.
fn font() -> Option<&'static FontRef<'static>> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(super::FONT).ok())
        .as_ref()
}

/// One line of text laid out at `size` pixels to the em: each glyph with its pen position
/// on a baseline at y = 0, and the line's advance width, ascent and descent (negative).
struct Line {
    glyphs: Vec<ab_glyph::Glyph>,
    width: f32,
    ascent: f32,
    descent: f32,
}

fn layout(font: &FontRef<'static>, size: f64, text: &str) -> Line {
    // plotters' SVG backend writes `font-size: size / 1.24`, an em in CSS; ab_glyph scales
    // by ascent - descent instead, so the em is converted to that height.
    let em_px = size as f32 / SVG_EM;
    let px = em_px * font.height_unscaled() / font.units_per_em().unwrap_or(2048.0);
    let scaled = font.as_scaled(PxScale::from(px));
    let mut pen = 0f32;
    let mut prev = None;
    let mut glyphs = Vec::with_capacity(text.len());
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            pen += scaled.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(px, point(pen, 0.0)));
        pen += scaled.h_advance(id);
        prev = Some(id);
    }
    Line {
        glyphs,
        width: pen,
        ascent: scaled.ascent(),
        descent: scaled.descent(),
    }
}

/// The advance width in pixels of `text` at plotters' `size` (the em times 1.24), as both
/// the PNG and a browser showing the SVG lay it out: what layouts measure labels with.
pub(super) fn text_width(size: f64, text: &str) -> f64 {
    match font() {
        Some(f) => f64::from(layout(f, size, text).width),
        // Never without the embedded font; a generous guess all the same.
        None => size / SVG_EM as f64 * 0.65 * text.chars().count() as f64,
    }
}

/// A drawing backend that draws text with the embedded font (see the module's comment) and
/// passes everything else to the backend it wraps.
pub(super) struct Glyphs<B>(pub B);

impl<B: DrawingBackend> DrawingBackend for Glyphs<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.present()
    }
    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.fill_polygon(vert, style)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<TStyle: BackendTextStyle>(
        &self,
        text: &str,
        style: &TStyle,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let Some(font) = font() else {
            return self.0.estimate_text_size(text, style);
        };
        let line = layout(font, style.size(), text);
        Ok((
            line.width.ceil() as u32,
            (line.ascent - line.descent).ceil() as u32,
        ))
    }

    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let Some(font) = font() else {
            return self.0.draw_text(text, style, pos);
        };
        let line = layout(font, style.size(), text);
        // The anchor as the SVG backend places it: a box of the advance width and the
        // line's height, with the baseline `ascent` below its top.
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Right => -line.width,
            HPos::Center => -line.width / 2.0,
        };
        let height = line.ascent - line.descent;
        let top = match style.anchor().v_pos {
            VPos::Top => 0.0,
            VPos::Center => -height / 2.0,
            VPos::Bottom => -height,
        };
        let (ox, oy) = (dx.round() as i32, (top + line.ascent).round() as i32);
        let trans = style.transform();
        let (w, h) = self.get_size();
        for glyph in line.glyphs {
            let Some(outline) = font.outline_glyph(glyph) else {
                continue;
            };
            let b = outline.px_bounds();
            let (gx, gy) = (ox + b.min.x as i32, oy + b.min.y as i32);
            let mut failed = None;
            outline.draw(|x, y, cover| {
                let (x, y) = trans.transform(gx + x as i32, gy + y as i32);
                let (x, y) = (pos.0 + x, pos.1 + y);
                let inside = x >= 0 && y >= 0 && (x as u32) < w && (y as u32) < h;
                if inside && cover > 0.0 && failed.is_none() {
                    let c = BackendColor {
                        alpha: color.alpha * f64::from(cover.min(1.0)),
                        rgb: color.rgb,
                    };
                    failed = self.0.draw_pixel((x, y), c).err();
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::prelude::*;

    /// Draws `text` at `size` black on white and returns, for each inked run of columns
    /// (a glyph, when glyphs do not touch), its first and last column and lowest row.
    fn glyph_boxes(text: &str, size: u32) -> Vec<(usize, usize, usize)> {
        let (w, h) = (200usize, 60usize);
        let mut rgb = vec![0u8; w * h * 3];
        super::super::register_font();
        {
            let root = Glyphs(BitMapBackend::with_buffer(&mut rgb, (w as u32, h as u32)))
                .into_drawing_area();
            root.fill(&WHITE).expect("fill");
            root.draw(&Text::new(text, (10, 10), ("sans-serif", size).into_font()))
                .expect("text");
        }
        let ink = |x: usize, y: usize| rgb[(y * w + x) * 3] < 128;
        let mut boxes = Vec::new();
        let mut run: Option<(usize, usize)> = None;
        for x in 0..w {
            let low = (0..h).rev().find(|&y| ink(x, y));
            match (low, run) {
                (Some(y), None) => run = Some((x, y)),
                (Some(y), Some((s, b))) => run = Some((s, b.max(y))),
                (None, Some((s, b))) => {
                    boxes.push((s, x - 1, b));
                    run = None;
                }
                (None, None) => {}
            }
        }
        boxes
    }

    #[test]
    fn a_decimal_point_sits_on_the_digits_baseline_between_them() {
        for size in [14, 17, 20, 25] {
            let b = glyph_boxes("0.0", size);
            assert_eq!(b.len(), 3, "size {size}: {b:?}");
            // A raised dot ("0·0") ends rows above the digits' baseline.
            assert!(b[1].2.abs_diff(b[0].2) <= 1, "size {size}: {b:?}");
            // Blank columns either side of the dot, and about as many on each.
            let (left, right) = (b[1].0 - b[0].1, b[2].0 - b[1].1);
            assert!(left >= 2 && right >= 2, "size {size}: {b:?}");
            assert!(left.abs_diff(right) <= 1, "size {size}: {b:?}");
        }
    }

    #[test]
    fn the_em_is_the_svg_font_size() {
        // "0" in DejaVu Sans advances 0.636 em: 10 of them at a 16-pixel em, 102 pixels.
        let w = layout(font().expect("font"), 20.0, "0000000000").width;
        assert!((100.0..=104.0).contains(&w), "{w}");
    }
}
