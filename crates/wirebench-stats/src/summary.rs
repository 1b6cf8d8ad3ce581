//! Summary statistics of a sample of `f64` values.

/// Descriptive statistics of a non-empty sample of finite values, as
/// returned by [`summarize`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Number of values.
    pub count: u64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor `n - 1`); 0 for a single value.
    /// Can be `+inf` only if the true value exceeds `f64::MAX` (values near
    /// `±f64::MAX` of both signs).
    pub stddev: f64,
    /// Median: the middle value, or the mean of the two middle values for
    /// an even count.
    pub median: f64,
    /// Half-width of the 95% confidence interval of the mean, `t(0.975, n-1) × sd / √n`
    /// (Student's t; 0 for a single value, where no interval can be given).
    pub ci95: f64,
    /// First quartile (linear interpolation between order statistics, as R's type 7).
    pub q1: f64,
    /// Third quartile (as `q1`).
    pub q3: f64,
}

/// Two-sided 97.5% quantile of Student's t with `df` degrees of freedom: exact table values
/// for 1 to 30 (any statistics text, e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2), then
/// the normal approximation's 1.96 refined by the Cornish-Fisher term `(z³ + z) / (4 df)`.
pub fn t975(df: u64) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[(df - 1) as usize],
        _ => {
            let z = 1.959_964;
            z + (z * z * z + z) / (4.0 * df as f64)
        }
    }
}

/// The `p` quantile (0 to 1) of sorted values, interpolating between order statistics.
fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// The knee of a rate sweep (where loss starts, as the MELECON 2000 UDP/TCP measurements plotted it): the highest offered rate at which at
/// least `fraction` of the data arrived, among `(offered, delivered_fraction)` points, and
/// only if every lower offered rate also met it (the first failure ends the search: a
/// recovery above it is noise, not capacity). `None` when even the lowest rate fails.
pub fn knee(points: &[(f64, f64)], fraction: f64) -> Option<f64> {
    let mut sorted: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best = None;
    for (offered, delivered) in sorted {
        if delivered + 1e-12 < fraction {
            break;
        }
        best = Some(offered);
    }
    best
}

/// Exactly `2^e`, for `-1022 <= e <= 1023` (built from the bit pattern).
fn pow2(e: i16) -> f64 {
    let biased = u64::try_from(1023 + i64::from(e)).unwrap_or(1023);
    f64::from_bits(biased << 52)
}

/// Summarizes `values`: count, min, max, mean, sample standard deviation and
/// median.
///
/// Returns `None` if `values` is empty or contains any NaN or infinity
/// (nothing is silently skipped). The mean and variance use Welford's
/// single-pass algorithm, on values rescaled by an exact power of two when
/// their magnitude is extreme, so neither overflows nor underflows
/// needlessly. The median sorts a copy of the input (one allocation per
/// call; not meant for a per-packet path).
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }

    let mut min = f64::INFINITY;
    let mut max = f64::NEG_INFINITY;
    for &v in values {
        min = min.min(v);
        max = max.max(v);
    }
    // Rescale by an exact power of two when magnitudes are extreme, so the
    // squared deviations stay inside the f64 range.
    let max_abs = min.abs().max(max.abs());
    let scale = if max_abs > pow2(500) {
        pow2(-600)
    } else if max_abs > 0.0 && max_abs < pow2(-500) {
        pow2(600)
    } else {
        1.0
    };

    // Welford on scaled values: |x| <= 2^524 after scaling, so the squared
    // deviations stay finite.
    let mut n = 0u64;
    let mut mean = 0.0f64;
    let mut m2 = 0.0f64;
    for &v in values {
        let x = v * scale;
        n += 1;
        let delta = x - mean;
        mean += delta / n as f64;
        m2 += delta * (x - mean);
    }
    let var = if n > 1 { m2 / (n - 1) as f64 } else { 0.0 };
    // Mean of finite values lies within [min, max]; clamp away rounding.
    let mean = (mean / scale).clamp(min, max);
    let stddev = var.max(0.0).sqrt() / scale;

    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        // halves first, so two huge values cannot overflow
        sorted[mid - 1] / 2.0 + sorted[mid] / 2.0
    };
    let ci95 = if n > 1 {
        t975(n - 1) * stddev / (n as f64).sqrt()
    } else {
        0.0
    };

    Some(Summary {
        count: n,
        min,
        max,
        mean,
        stddev,
        median,
        ci95,
        q1: quantile_sorted(&sorted, 0.25),
        q3: quantile_sorted(&sorted, 0.75),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn empty_and_non_finite() {
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[1.0, f64::NAN]), None);
        assert_eq!(summarize(&[f64::INFINITY]), None);
        assert_eq!(summarize(&[2.0, f64::NEG_INFINITY, 3.0]), None);
    }

    #[test]
    fn single_value() {
        let s = summarize(&[42.5]).expect("non-empty");
        assert_eq!(s.count, 1);
        assert!(close(s.min, 42.5) && close(s.max, 42.5));
        assert!(close(s.mean, 42.5) && close(s.median, 42.5));
        assert_eq!(s.stddev.to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn known_values_even() {
        // classic example: mean 5, population SD 2, sample SD sqrt(32/7)
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).expect("non-empty");
        assert_eq!(s.count, 8);
        assert!(close(s.min, 2.0));
        assert!(close(s.max, 9.0));
        assert!(close(s.mean, 5.0));
        assert!(close(s.stddev, (32.0f64 / 7.0).sqrt()), "{}", s.stddev);
        assert!(close(s.median, 4.5));
    }

    #[test]
    fn known_values_odd_unsorted() {
        let s = summarize(&[3.0, -1.0, 10.0, 2.0, 6.0]).expect("non-empty");
        assert_eq!(s.count, 5);
        assert!(close(s.min, -1.0));
        assert!(close(s.max, 10.0));
        assert!(close(s.mean, 4.0));
        // deviations -5, -2, 1, 6, 2 (sorted: -1,2,3,6,10) -> squares 25+4+1+4+36 = 70
        assert!(close(s.stddev, (70.0f64 / 4.0).sqrt()), "{}", s.stddev);
        assert!(close(s.median, 3.0));
    }

    #[test]
    fn confidence_interval_and_quartiles_by_hand() {
        // 2, 4, 4, 4, 5, 5, 7, 9: sd = sqrt(32/7), t(0.975, 7) = 2.365
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).expect("values");
        let expect = 2.365 * (32.0f64 / 7.0).sqrt() / 8.0f64.sqrt();
        assert!(close(s.ci95, expect), "{}", s.ci95);
        // type-7 quartiles: h = 7 × 0.25 = 1.75 -> 4 + 0.75 × 0 = 4; h = 5.25 -> 5 + 0.25 × 2
        assert!(close(s.q1, 4.0) && close(s.q3, 5.5), "{s:?}");
        // identical values: no spread, no interval
        let same = summarize(&[3.0; 10]).expect("values");
        assert_eq!(
            (same.stddev, same.ci95, same.q1, same.q3),
            (0.0, 0.0, 3.0, 3.0)
        );
        // one value: no interval
        assert_eq!(summarize(&[1.0]).expect("one").ci95, 0.0);
        assert!((t975(1) - 12.706).abs() < 1e-9);
        assert!((t975(1000) - 1.962).abs() < 1e-3);
        assert!(t975(0).is_nan());
    }

    #[test]
    fn knee_is_the_last_rate_before_the_first_shortfall() {
        let curve = [
            (100.0, 1.0),
            (200.0, 1.0),
            (400.0, 0.995),
            (800.0, 0.97),
            (1600.0, 0.6),
            (3200.0, 0.99), // a recovery after a failure does not count
        ];
        assert_eq!(knee(&curve, 0.99), Some(400.0));
        assert_eq!(knee(&curve, 0.95), Some(800.0));
        assert_eq!(knee(&curve, 0.999), Some(200.0));
        // unsorted input, and nothing meets it
        assert_eq!(knee(&[(50.0, 0.5), (10.0, 0.9)], 0.99), None);
        assert_eq!(knee(&[], 0.99), None);
        assert_eq!(knee(&[(1.0, f64::NAN)], 0.99), None);
    }

    #[test]
    fn large_offset_is_stable() {
        // Welford keeps precision where a naive sum of squares would not
        let base = 1e9;
        let s = summarize(&[base + 4.0, base + 7.0, base + 13.0, base + 16.0]).expect("non-empty");
        assert!(close(s.mean, base + 10.0));
        assert!(close(s.stddev, 30.0f64.sqrt()), "{}", s.stddev);
        assert!(close(s.median, base + 10.0));
    }

    #[test]
    fn extreme_magnitudes() {
        let s = summarize(&[f64::MAX, f64::MAX]).expect("non-empty");
        assert_eq!(s.mean, f64::MAX);
        assert_eq!(s.median, f64::MAX);
        assert_eq!(s.stddev.to_bits(), 0.0f64.to_bits());

        let s = summarize(&[f64::MAX, -f64::MAX]).expect("non-empty");
        assert!(s.mean.is_finite() && s.mean.abs() <= 1e300);
        assert!(s.median.abs() <= 1e300);
        assert!(!s.stddev.is_nan());

        let s = summarize(&[1e200, 3e200]).expect("non-empty");
        assert!(close(s.mean, 2e200));
        assert!(close(s.stddev, 2f64.sqrt() * 1e200), "{}", s.stddev);

        let s = summarize(&[1e-200, 3e-200]).expect("non-empty");
        assert!((s.mean - 2e-200).abs() <= 1e-212);
        assert!(
            (s.stddev - 2f64.sqrt() * 1e-200).abs() <= 1e-212,
            "{}",
            s.stddev
        );

        let s = summarize(&[0.0, 0.0, -0.0]).expect("non-empty");
        assert_eq!(s.mean, 0.0);
        assert_eq!(s.stddev, 0.0);
    }
}
