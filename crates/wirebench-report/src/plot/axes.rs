//! An axis as drawn: its range (the data's body, or all of it), its ticks (thinned until
//! their labels fit side by side) and how each is labelled.
//!
//! Log axes are drawn as linear axes over log10 of the values, with the ticks placed and
//! labelled here: one coordinate type for every axis, and ticks at 1, 2, 5 × 10ⁿ.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

use super::chart::Axis;
use super::glyphs::text_width;
use super::scale::{clean, linear_ticks, log_ticks, nice_step, Quantity, Unit};

/// How far above the third quartile, in interquartile ranges, a value is far out (Tukey's
/// outer fence): a spike, not the body of the data.
const FAR_OUT: f64 = 3.0;
/// Headroom above the body's top, as flent's scaled view leaves.
const BODY_HEADROOM: f64 = 1.1;

/// An axis as drawn: its range and ticks in drawing coordinates (log10 of the value on a
/// log axis), and how a tick is labelled.
pub(super) struct Scale {
    pub log: bool,
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<f64>,
    pub unit: Unit,
    /// Each tick carries its own unit ("100 kbit/s", "1 Gbit/s"): log axes over decades.
    pub per_tick: bool,
    pub quantity: Quantity,
    pub categories: Vec<String>,
    pub title: String,
    /// The axis ends at the data's body: values above `hi` are drawn on the edge.
    pub cut: bool,
    /// The ticks' multipliers on a log axis (1, 2, 5; thinned to 1), and the decades
    /// between labelled ones.
    log_mult: Vec<f64>,
    log_every: usize,
    /// The range in data units, before log10: for retick.
    data_lo: f64,
    data_hi: f64,
}

/// The top of `values`' body, if some lie far above it: the largest value within Tukey's
/// outer fence (third quartile + 3 × IQR, and at least 1.25 × the third quartile), with
/// 10% headroom. A queue that fills for a
/// third of a run is the body; a few stalls of ten times the rest are not.
pub(super) fn body_top(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if v.len() < 8 {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let (q1, q3) = (at(0.25), at(0.75));
    // A steady series (a rate at its link's) has almost no IQR: jitter a quarter above
    // its third quartile is still its body.
    let fence = (q3 + FAR_OUT * (q3 - q1)).max(q3 * 1.25);
    let inside = v
        .iter()
        .copied()
        .filter(|x| *x <= fence)
        .fold(f64::MIN, f64::max);
    let top = inside * BODY_HEADROOM;
    (inside > 0.0 && v[v.len() - 1] > top).then_some(top)
}

/// Fewest intervals a stretch of one series above the body's top spans to be the data's
/// own rather than a spike: a download's first second in 100 ms intervals (10) is a
/// stretch; a TCP stall of an interval or two is not.
const SUSTAINED_INTERVALS: f64 = 5.0;

/// The body's `top` ([`body_top`]) raised over every sustained stretch of `series` (each a
/// run of (x, y) in the order of x, as drawn: steps have two points per interval) above it:
/// consecutive points above the top whose x spans [`SUSTAINED_INTERVALS`] of the series'
/// own spacing (the median gap between its distinct x) or more. With `values`, all that the
/// axis shows: `None` when that leaves none of them above, and the axis is not cut.
pub(super) fn sustained_top<'a>(
    top: f64,
    series: impl Iterator<Item = &'a [(f64, f64)]>,
    values: &[f64],
) -> Option<f64> {
    let mut raised = top;
    for pts in series {
        let mut xs: Vec<f64> = pts.iter().map(|p| p.0).filter(|x| x.is_finite()).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let Some(spacing) = super::median_gap(&xs) else {
            continue;
        };
        // A missing value (NaN) ends a run too.
        for run in pts.split(|p| p.1.is_nan() || p.1 <= top) {
            let (Some(first), Some(last)) = (run.first(), run.last()) else {
                continue;
            };
            if last.0 - first.0 >= SUSTAINED_INTERVALS * spacing {
                let high = run.iter().map(|p| p.1).fold(f64::MIN, f64::max);
                raised = raised.max(high * BODY_HEADROOM);
            }
        }
    }
    values.iter().any(|v| *v > raised).then_some(raised)
}

impl Scale {
    /// The scale of `axis` over `values`; `pad` leaves headroom above the largest (y axes,
    /// so that the top point is not on the frame; an x axis ends at its data); `top`, below
    /// the largest value, ends a linear axis there (the data's body, see [`body_top`]).
    pub fn new(
        axis: &Axis,
        values: &[f64],
        max_ticks: usize,
        pad_asked: bool,
        top: Option<f64>,
    ) -> Self {
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
            cut: false,
            log_mult: vec![1.0, 2.0, 5.0],
            log_every: 1,
            data_lo: 0.0,
            data_hi: 1.0,
        };
        if !s.categories.is_empty() {
            s.lo = -0.5;
            s.hi = s.categories.len() as f64 - 0.5;
            s.ticks = (0..s.categories.len()).map(|i| i as f64).collect();
            return s;
        }
        let finite = values.iter().copied().filter(|v| v.is_finite());
        if axis.log {
            s.log_axis(finite.filter(|v| *v > 0.0).collect());
        } else {
            s.linear_axis(axis, finite.collect(), max_ticks, pad_asked, top);
        }
        // A log axis of percentages labels each tick "10%": its title needs no unit.
        let log_percent = s.log && axis.quantity == Quantity::Percent;
        if !(s.per_tick || s.unit.name.is_empty() || log_percent) {
            s.title = format!("{} ({})", axis.label, s.unit.name);
        }
        s
    }

    fn log_axis(&mut self, pos: Vec<f64>) {
        let (mut lo, mut hi) = pos
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
        if pos.is_empty() {
            (lo, hi) = (1.0, 10.0);
        }
        lo /= 1.25;
        hi *= 1.25;
        if log_ticks(lo, hi).len() < 2 {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil());
        }
        self.data_lo = lo;
        self.data_hi = hi;
        self.lo = lo.log10();
        self.hi = hi.log10();
        if (hi / lo).log10() > 3.0 {
            self.log_mult = vec![1.0];
        }
        self.relog();
        self.per_tick = matches!(
            self.quantity,
            Quantity::BitRate | Quantity::Seconds | Quantity::Bytes
        );
    }

    /// The log ticks at the current multipliers and decade spacing.
    fn relog(&mut self) {
        let (lo, hi) = (self.data_lo, self.data_hi);
        let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        let mut out = Vec::new();
        for d in d0..=d1 {
            if !((d - d0) as usize).is_multiple_of(self.log_every) {
                continue;
            }
            for m in &self.log_mult {
                let v = m * 10f64.powi(d);
                if v >= lo * 0.9999 && v <= hi * 1.0001 {
                    out.push(v.log10());
                }
            }
        }
        // Between two decades' ticks on a short axis: keep what log_ticks found (unless
        // thinned that far on purpose).
        if out.len() < 2 && self.log_every == 1 {
            out = log_ticks(lo, hi).into_iter().map(f64::log10).collect();
        }
        self.ticks = out;
    }

    fn linear_axis(
        &mut self,
        axis: &Axis,
        values: Vec<f64>,
        max_ticks: usize,
        pad_asked: bool,
        top: Option<f64>,
    ) {
        let (mut lo, mut hi) = values
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
        if lo > hi {
            (lo, hi) = (0.0, 1.0);
        }
        if let Some(top) = top.filter(|t| *t > lo && *t < hi) {
            hi = top;
            self.cut = true;
        }
        if axis.from_zero {
            lo = lo.min(0.0);
        }
        // A little headroom, so the top point is not on the frame (none for an axis made
        // up for lack of data, or cut at the body, which has its own). Percentages stop at
        // 100 when the data do.
        let headroom =
            pad_asked && !self.cut && !(axis.quantity == Quantity::Percent && hi <= 100.0);
        let mut pad = if headroom { (hi - lo) * 0.03 } else { 0.0 };
        if hi <= lo {
            hi = lo + if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            pad = 0.0;
        }
        self.unit = axis.quantity.unit_for(lo.abs().max(hi.abs()));
        let d = self.unit.divisor;
        let (a, mut b, mut ticks) = linear_ticks(lo / d, (hi + pad) / d, max_ticks.max(2));
        // An axis without headroom ends at its data unless a tick is very near; one with
        // headroom, at its headroom when the next tick is far above (0–40 for 21 Mbit/s).
        let end = (hi + pad) / d;
        if (!pad_asked && b - hi / d > (b - a) * 0.02) || (pad_asked && b - end > (b - a) * 0.2) {
            b = if pad_asked { end } else { hi / d };
            ticks.retain(|t| *t <= b * (1.0 + 1e-9));
        }
        self.lo = a * d;
        self.hi = b * d;
        self.ticks = ticks.into_iter().map(|t| t * d).collect();
    }

    /// At most `max_ticks` ticks on a linear axis, at 1, 2, 5 × 10ⁿ within its range.
    pub fn retick(&mut self, max_ticks: usize) {
        if self.log || !self.categories.is_empty() {
            return;
        }
        let d = self.unit.divisor;
        let (a, b) = (self.lo / d, self.hi / d);
        let step = nice_step(b - a, max_ticks.max(1));
        let first = (a / step - 1e-9).ceil() as i64;
        let last = (b / step + 1e-9).floor() as i64;
        self.ticks = (first..=last).map(|i| i as f64 * step * d).collect();
    }

    /// Thins the ticks of an x axis `px` pixels long until labels set at `font` (plotters'
    /// size) leave at least an em between them: fewer steps on a linear axis; on a log
    /// axis the 2s and 5s give way to 3s, then those go, then every other decade.
    pub fn fit_x(&mut self, px: f64, font: f64) {
        if !self.categories.is_empty() || self.hi <= self.lo {
            return;
        }
        let mut n = self.ticks.len();
        for _ in 0..16 {
            if self.labels_fit(px, font) {
                return;
            }
            if self.log {
                self.thin_log();
            } else {
                n = n.saturating_sub(1).max(2);
                self.retick(n);
                if n == 2 {
                    return;
                }
            }
        }
    }

    /// Thins the ticks of a y axis `px` pixels high until labels at `font` are at least
    /// 1.6 ems apart: as [`Scale::fit_x`], by height.
    pub fn fit_y(&mut self, px: f64, font: f64) {
        if !self.categories.is_empty() || self.hi <= self.lo {
            return;
        }
        let need = font / 1.24 * 1.6;
        let apart = |s: &Self| {
            s.ticks
                .windows(2)
                .all(|w| (w[1] - w[0]) / (s.hi - s.lo) * px >= need)
        };
        let mut n = self.ticks.len();
        for _ in 0..16 {
            if apart(self) {
                return;
            }
            if self.log {
                self.thin_log();
            } else {
                n = n.saturating_sub(1).max(2);
                self.retick(n);
                if n == 2 && !apart(self) {
                    // Too short for two labels: the lowest alone.
                    self.ticks.truncate(1);
                    return;
                }
            }
        }
    }

    /// One step fewer ticks on a log axis: the 2s and 5s give way to 3s, then those go, then
    /// every other decade.
    fn thin_log(&mut self) {
        if self.log_mult.len() > 2 {
            self.log_mult = vec![1.0, 3.0];
        } else if self.log_mult.len() > 1 {
            self.log_mult = vec![1.0];
        } else {
            self.log_every += 1;
        }
        self.relog();
    }

    /// Whether the tick labels, each centred on its tick, leave an em between neighbours.
    fn labels_fit(&self, px: f64, font: f64) -> bool {
        let em = font / 1.24;
        let at = |t: f64| (t - self.lo) / (self.hi - self.lo) * px;
        self.ticks.windows(2).all(|w| {
            let (a, b) = (
                text_width(font, &self.label(w[0])),
                text_width(font, &self.label(w[1])),
            );
            at(w[1]) - at(w[0]) >= (a + b) / 2.0 + em
        })
    }

    /// Drawing coordinate of a value.
    pub fn t(&self, v: f64) -> f64 {
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

    /// The label of the tick at `tv` (drawing coordinates).
    pub fn label(&self, tv: f64) -> String {
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

    /// `v` in its base unit with this axis' unit: "268 ms".
    pub fn with_unit(&self, v: f64) -> String {
        super::scale::with_unit(self.quantity, v)
    }
}

/// A linear coordinate whose ticks are exactly the given ones (plotters' own choose
/// their ticks and format them with a fixed number of decimals).
pub(super) struct Ticked {
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<f64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linear_rate_axis_names_its_unit_and_a_log_one_labels_each_tick() {
        let lin = Scale::new(
            &Axis::linear("received rate", Quantity::BitRate),
            &[1e9, 30e9],
            6,
            true,
            None,
        );
        assert_eq!(lin.title, "received rate (Gbit/s)");
        assert_eq!(lin.label(10e9), "10");
        let log = Scale::new(
            &Axis::log("offered rate", Quantity::BitRate),
            &[10e6, 1e9],
            8,
            false,
            None,
        );
        assert_eq!(log.title, "offered rate");
        assert_eq!(log.label(1e8f64.log10()), "100 Mbit/s");
        assert_eq!(log.label(9.0), "1 Gbit/s");
    }

    #[test]
    fn a_spike_does_not_set_the_axis_but_a_broad_rise_does() {
        // 200 round trips near 20–28 ms and two TCP stalls at 260 ms.
        let mut v: Vec<f64> = (0..200).map(|i| 0.020 + f64::from(i % 9) * 0.001).collect();
        v.extend([0.260, 0.268]);
        let axis = Axis::linear("round-trip time", Quantity::Seconds);
        let s = Scale::new(&axis, &v, 6, true, body_top(&v));
        assert!(s.cut && s.hi < 0.040, "{}", s.hi);
        assert_eq!(s.title, "round-trip time (ms)");
        // At full range (no body), the spike sets the top.
        let full = Scale::new(&axis, &v, 6, true, None);
        assert!(!full.cut && full.hi >= 0.268);
        // A queue that fills: a third of the values high is the body, not a spike.
        let ramp: Vec<f64> = (0..300)
            .map(|i| {
                if i < 200 {
                    0.020
                } else {
                    0.400 + f64::from(i) * 0.001
                }
            })
            .collect();
        assert!(body_top(&ramp).is_none());
        // A receive burst of 120 Mbit/s on a 20 Mbit/s link.
        let mut rates: Vec<f64> = (0..50).map(|i| 19e6 + f64::from(i % 3) * 0.5e6).collect();
        rates.push(120e6);
        let top = body_top(&rates).expect("cut");
        assert!(top < 25e6, "{top}");
    }

    #[test]
    fn a_sustained_stretch_above_the_body_is_the_data_not_a_spike() {
        // 300 intervals of 100 ms of ACKs at about 60 kbit/s, the first ten (a download's
        // first second) at 200 kbit/s, drawn as steps (two points an interval): the body's
        // rule alone cuts them; as a stretch, they stay.
        let drawn = |ys: &[f64]| -> (Vec<(f64, f64)>, Vec<f64>) {
            let timed: Vec<(f64, f64)> = ys
                .iter()
                .enumerate()
                .map(|(i, y)| (i as f64 * 0.1, *y))
                .collect();
            let pts: Vec<(f64, f64)> = super::super::steps(&timed)
                .iter()
                .map(|p| (p.x, p.y))
                .collect();
            let values = pts.iter().map(|p| p.1).filter(|y| y.is_finite()).collect();
            (pts, values)
        };
        let mut acks: Vec<f64> = (0..300).map(|i| 60e3 + f64::from(i % 4) * 1e3).collect();
        acks[..10].fill(200e3);
        let (pts, v) = drawn(&acks);
        let top = body_top(&v).expect("the body's rule cuts the stretch");
        assert!(top < 200e3);
        assert_eq!(sustained_top(top, [&pts[..]].into_iter(), &v), None);
        // Four intervals high in a row (a stall) are still a spike.
        let mut spiky = acks.clone();
        spiky[..10].fill(60e3);
        spiky[100..104].fill(200e3);
        let (pts, v) = drawn(&spiky);
        let top = body_top(&v).expect("cut");
        assert_eq!(sustained_top(top, [&pts[..]].into_iter(), &v), Some(top));
        // Five are a stretch.
        spiky[104] = 200e3;
        let (pts, v) = drawn(&spiky);
        let top = body_top(&v).expect("cut");
        assert_eq!(sustained_top(top, [&pts[..]].into_iter(), &v), None);
        // A stretch raises the top over it; a taller spike elsewhere is still cut.
        let mut both = acks.clone();
        both[200] = 900e3;
        let (pts, v) = drawn(&both);
        let top = body_top(&v).expect("cut");
        let raised = sustained_top(top, [&pts[..]].into_iter(), &v).expect("the spike is cut");
        assert!((220e3..900e3).contains(&raised), "{raised}");
        // A series of one point has no spacing: nothing is raised.
        assert_eq!(
            sustained_top(top, [&[(0.0, 1e9)][..]].into_iter(), &[1e9]),
            Some(top)
        );
    }

    #[test]
    fn x_ticks_thin_until_their_labels_fit() {
        let mut log = Scale::new(
            &Axis::log("offered rate", Quantity::BitRate),
            &[20e6, 2e9],
            8,
            false,
            None,
        );
        let all = log.ticks.len();
        log.fit_x(300.0, 36.0);
        assert!(
            log.ticks.len() < all && log.labels_fit(300.0, 36.0),
            "{:?}",
            log.ticks
        );
        let mut lin = Scale::new(
            &Axis::linear("time", Quantity::Seconds),
            &[0.0, 5000.0],
            8,
            false,
            None,
        );
        lin.fit_x(200.0, 36.0);
        assert!(lin.labels_fit(200.0, 36.0) || lin.ticks.len() <= 3);
        assert!(lin.ticks.iter().all(|t| !lin.label(*t).contains('.')));
    }
}
