//! Steps in a series (a path's throughput getting worse from one day to the next): the
//! Mann–Whitney U test (Mann and Whitney, 1947) of each `window` values against the
//! `window` before them, one-sided in the direction that is worse, with the normal
//! approximation and its correction for ties. A step is flagged where the test's p-value is
//! at most `max_p` *and* the medians differ by at least `min_change` of the earlier one (a
//! tiny shift in a very quiet series is not news); of neighbouring candidates, the one with
//! the smallest p-value is the step. Rank-based, so one outlier does not make a step, and
//! the noise's distribution does not matter.

/// Which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worse {
    /// Lower is worse (throughput).
    Down,
    /// Higher is worse (latency, loss).
    Up,
}

/// The test's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTest {
    /// Values on each side of a candidate step.
    pub window: usize,
    /// The largest p-value flagged.
    pub max_p: f64,
    /// The smallest change of the median flagged, as a share of the earlier median.
    pub min_change: f64,
    /// Which way is worse.
    pub worse: Worse,
}

impl StepTest {
    /// The archive's defaults: 16 values a side, p ≤ 0.00001 (a series tests every point:
    /// a looser p flags noise somewhere in a long one), a change of 15% or more.
    pub fn new(worse: Worse) -> Self {
        Self {
            window: 16,
            max_p: 1e-5,
            min_change: 0.15,
            worse,
        }
    }
}

/// A step found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The first value after the step.
    pub index: usize,
    /// The median of the window before it.
    pub before: f64,
    /// The median of the window from it.
    pub after: f64,
    /// The one-sided p-value.
    pub p: f64,
}

impl Step {
    /// The median's change, as a share of the earlier one (negative: down).
    pub fn change(&self) -> f64 {
        if self.before == 0.0 {
            0.0
        } else {
            (self.after - self.before) / self.before.abs()
        }
    }
}

/// The median (the values are finite: [`steps`] leaves the others out).
fn median(v: &[f64]) -> f64 {
    crate::summarize(v).map_or(0.0, |s| s.median)
}

/// The standard normal's upper tail, P(Z > z): erfc by Abramowitz and Stegun 7.1.26
/// (absolute error below 1.5e-7).
fn upper_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}

/// The one-sided p-value that `after` is worse than `before`: Mann–Whitney U with ties
/// ranked by their mean rank, normal approximation with the tie correction and a
/// continuity correction.
fn p_worse(before: &[f64], after: &[f64], worse: Worse) -> f64 {
    let (n1, n2) = (before.len() as f64, after.len() as f64);
    let mut all: Vec<(f64, bool)> = before
        .iter()
        .map(|&v| (v, false))
        .chain(after.iter().map(|&v| (v, true)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = all.len();
    let (mut rank_after, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        ties += t * t * t - t;
        rank_after += rank * all[i..=j].iter().filter(|x| x.1).count() as f64;
        i = j + 1;
    }
    let u = rank_after - n2 * (n2 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let nn = n1 + n2;
    let var = n1 * n2 / 12.0 * ((nn + 1.0) - ties / (nn * (nn - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    // Worse down: `after` ranks low (U small).
    let z = match worse {
        Worse::Down => (mean - u - 0.5) / var.sqrt(),
        Worse::Up => (u - mean - 0.5) / var.sqrt(),
    };
    upper_tail(z)
}

/// The steps for the worse in `values` (in time order), as `test` defines them. Values that
/// are not finite are left out of every window.
pub fn steps(values: &[f64], test: &StepTest) -> Vec<Step> {
    let idx: Vec<usize> = (0..values.len())
        .filter(|&i| values[i].is_finite())
        .collect();
    let w = test.window.max(2);
    if idx.len() < 2 * w {
        return Vec::new();
    }
    let mut candidates: Vec<(usize, Step)> = Vec::new();
    for k in w..=idx.len() - w {
        let before: Vec<f64> = idx[k - w..k].iter().map(|&i| values[i]).collect();
        let after: Vec<f64> = idx[k..k + w].iter().map(|&i| values[i]).collect();
        let step = Step {
            index: idx[k],
            before: median(&before),
            after: median(&after),
            p: p_worse(&before, &after, test.worse),
        };
        let worse_by = match test.worse {
            Worse::Down => -step.change(),
            Worse::Up => step.change(),
        };
        if step.p <= test.max_p && worse_by >= test.min_change {
            candidates.push((k, step));
        }
    }
    // Candidates within a window of each other are one step: its smallest p-value.
    let mut out: Vec<(usize, usize, Step)> = Vec::new();
    for (k, c) in candidates {
        match out.last_mut() {
            Some((_, last_k, best)) if k - *last_k < w => {
                *last_k = k;
                if c.p < best.p {
                    *best = c;
                }
            }
            _ => out.push((k, k, c)),
        }
    }
    out.into_iter().map(|(_, _, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic noise source for the tests: uniform in [-1, 1).
    fn noise(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    #[test]
    fn a_step_down_is_found_where_it_is() {
        let mut seed = 42;
        let series: Vec<f64> = (0..100)
            .map(|i| {
                let level = if i < 60 { 900.0 } else { 600.0 };
                level + 40.0 * noise(&mut seed)
            })
            .collect();
        let found = steps(&series, &StepTest::new(Worse::Down));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((59..=61).contains(&found[0].index), "{found:?}");
        assert!(found[0].change() < -0.25, "{found:?}");
        // Up is not worse for throughput, and a step up in latency is found the same way.
        let up: Vec<f64> = series.iter().map(|v| 1000.0 - v).collect();
        assert!(steps(&series, &StepTest::new(Worse::Up)).is_empty());
        assert_eq!(steps(&up, &StepTest::new(Worse::Up)).len(), 1);
    }

    #[test]
    fn a_noisy_flat_series_raises_nothing() {
        let mut flagged = 0;
        for s in 1..1000u64 {
            let mut seed = s * 7919;
            // ±30% noise, 500 points, and a few wild outliers.
            let series: Vec<f64> = (0..500)
                .map(|i| {
                    let v = 1000.0 + 300.0 * noise(&mut seed);
                    if i % 97 == 0 {
                        v / 10.0
                    } else {
                        v
                    }
                })
                .collect();
            for worse in [Worse::Down, Worse::Up] {
                flagged += usize::from(!steps(&series, &StepTest::new(worse)).is_empty());
            }
        }
        assert_eq!(flagged, 0);
    }

    #[test]
    fn the_normal_tail_is_right_where_it_matters() {
        assert!((upper_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((upper_tail(1.959_964) - 0.025).abs() < 1e-6);
        assert!((upper_tail(3.090_232) - 0.001).abs() < 1e-6);
        assert!((upper_tail(-1.959_964) - 0.975).abs() < 1e-6);
    }

    #[test]
    fn short_series_and_gaps_give_no_step_and_no_panic() {
        let t = StepTest::new(Worse::Down);
        assert!(steps(&[], &t).is_empty());
        assert!(steps(&[1.0; 31], &t).is_empty());
        let mut v = vec![10.0; 20];
        v.extend([f64::NAN; 5]);
        v.extend([1.0; 20]);
        let found = steps(&v, &t);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].index, 25);
    }
}
