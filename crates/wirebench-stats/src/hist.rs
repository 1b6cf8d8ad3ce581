//! Distributions of signed nanosecond values (delays, gaps, round trips) in HDR histograms.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest magnitude kept at full precision: one hour in ns. Larger values are clamped to it
/// in the histogram (min, max and mean stay exact).
const HIGHEST_NS: u64 = 3_600_000_000_000;

/// Significant decimal digits the histogram keeps: values are exact to 0.1 %.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A distribution of signed nanosecond values with HDR precision: percentiles are exact to
/// 0.1 % of the value, min, max and mean are exact, memory is fixed at construction (about
/// 0.25 MiB, twice that once a negative value was seen) and [`record`](Self::record)
/// allocates only for the first negative value.
///
/// Signed, because a one-way delay between two hosts is a difference of two clocks with an
/// unknown offset and may come out negative; negative values are kept as magnitudes in a
/// second histogram. HDR histogram: Gil Tene's HdrHistogram, as used by wrk2 and sockperf's
/// peers, through the `hdrhistogram` crate.
#[derive(Debug, Clone)]
pub struct TimeHistogram {
    pos: Histogram<u64>,
    /// Made on the first negative value: most distributions never have one, and each
    /// histogram is about a quarter of a MiB.
    neg: Option<Box<Histogram<u64>>>,
    count: u64,
    sum: i128,
    min: i64,
    max: i64,
}

/// Percentiles and moments of a [`TimeHistogram`], in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSummary {
    /// Values recorded.
    pub count: u64,
    /// Smallest value (exact).
    pub min_ns: i64,
    /// Arithmetic mean (exact up to f64 rounding).
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: i64,
    /// 90th percentile.
    pub p90_ns: i64,
    /// 99th percentile.
    pub p99_ns: i64,
    /// 99.9th percentile.
    pub p999_ns: i64,
    /// Largest value (exact).
    pub max_ns: i64,
}

impl TimeSummary {
    /// The same summary with `offset_ns` subtracted from every value (e.g. the minimum, to
    /// turn one-way delays with an unknown clock offset into delay variation).
    pub fn shifted(&self, offset_ns: i64) -> Self {
        let s = |v: i64| v.saturating_sub(offset_ns);
        Self {
            count: self.count,
            min_ns: s(self.min_ns),
            mean_ns: self.mean_ns - offset_ns as f64,
            p50_ns: s(self.p50_ns),
            p90_ns: s(self.p90_ns),
            p99_ns: s(self.p99_ns),
            p999_ns: s(self.p999_ns),
            max_ns: s(self.max_ns),
        }
    }
}

fn hdr() -> Histogram<u64> {
    // Constant bounds that HdrHistogram accepts (1 <= low, high >= 2 * low, digits <= 5).
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("constant bounds accepted by HdrHistogram")
}

impl Default for TimeHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeHistogram {
    /// An empty distribution.
    pub fn new() -> Self {
        Self {
            pos: hdr(),
            neg: None,
            count: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
        }
    }

    /// Adds one value.
    #[inline]
    pub fn record(&mut self, value_ns: i64) {
        let h = if value_ns < 0 {
            self.neg.get_or_insert_with(|| Box::new(hdr()))
        } else {
            &mut self.pos
        };
        h.saturating_record(value_ns.unsigned_abs());
        self.count += 1;
        self.sum += i128::from(value_ns);
        self.min = self.min.min(value_ns);
        self.max = self.max.max(value_ns);
    }

    /// Adds `n` copies of one value.
    #[inline]
    pub fn record_n(&mut self, value_ns: i64, n: u64) {
        if n == 0 {
            return;
        }
        let h = if value_ns < 0 {
            self.neg.get_or_insert_with(|| Box::new(hdr()))
        } else {
            &mut self.pos
        };
        let _ = h.record_n(value_ns.unsigned_abs().min(HIGHEST_NS), n);
        self.count += n;
        self.sum += i128::from(value_ns) * i128::from(n);
        self.min = self.min.min(value_ns);
        self.max = self.max.max(value_ns);
    }

    /// Adds every value of `other` (e.g. an interval's into the whole test's).
    pub fn add(&mut self, other: &TimeHistogram) {
        if other.count == 0 {
            return;
        }
        // Same bounds on both sides: adding cannot fail.
        let _ = self.pos.add(&other.pos);
        if let Some(theirs) = &other.neg {
            let _ = self
                .neg
                .get_or_insert_with(|| Box::new(hdr()))
                .add(theirs.as_ref());
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Forgets every value (keeps the memory).
    pub fn reset(&mut self) {
        self.pos.reset();
        if let Some(n) = &mut self.neg {
            n.reset();
        }
        self.count = 0;
        self.sum = 0;
        self.min = i64::MAX;
        self.max = i64::MIN;
    }

    /// The value below which a fraction `q` (0 to 1) of the values lie: the value of rank
    /// `ceil(q * count)` (at least 1) in ascending order, to HDR precision. `q >= 1` gives
    /// the exact maximum, `q <= 0` the exact minimum; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        if self.count == 0 {
            return None;
        }
        if q <= 0.0 {
            return Some(self.min);
        }
        if q >= 1.0 {
            return Some(self.max);
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let negatives = self.neg.as_ref().map_or(0, |n| n.len());
        let v = match &self.neg {
            // Ascending order runs through the negatives from the largest magnitude down.
            Some(neg) if rank <= negatives => -(kth(neg, negatives - rank + 1) as i64),
            _ => kth(&self.pos, rank - negatives) as i64,
        };
        Some(v.clamp(self.min, self.max))
    }

    /// Percentiles and moments; `None` when empty.
    pub fn summary(&self) -> Option<TimeSummary> {
        let q = |p| self.quantile(p).unwrap_or(0);
        (self.count > 0).then(|| TimeSummary {
            count: self.count,
            min_ns: self.min,
            mean_ns: (self.sum as f64) / self.count as f64,
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: self.max,
        })
    }

    /// Counts of the values in power-of-two buckets of ns: `(low, high, count)` for each
    /// non-empty bucket `low ..= high`, the first being `0 ..= 1023` (about a microsecond).
    /// Negative values are not included (this is for gaps between arrivals, which are not
    /// negative on one clock).
    pub fn log2_buckets(&self) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        if self.pos.is_empty() {
            return out;
        }
        let top = self.pos.max();
        let mut low = 0u64;
        let mut high = 1023u64;
        loop {
            let n = self.pos.count_between(low, high);
            if n > 0 {
                out.push((low, high, n));
            }
            if high >= top || high >= u64::MAX / 2 {
                break;
            }
            low = high + 1;
            high = high * 2 + 1;
        }
        out
    }
}

impl TimeHistogram {
    /// The non-negative values in log-spaced buckets `low ..= high` of ns, each about
    /// `growth` times as wide as the one before (1.02: 2% wide) from 0 ..= 1000 ns, with
    /// their counts; empty buckets are left out. The HDR histogram merged this way keeps a
    /// latency CDF's shape at a few hundred buckets, small enough for the control channel
    /// and the results document.
    pub fn log_buckets(&self, growth: f64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        if self.pos.is_empty() || growth.is_nan() || growth <= 1.0 {
            return out;
        }
        // Each HDR bucket goes whole into the log bucket of its value: counts are never
        // split or counted twice.
        let (mut low, mut high) = (0u64, 1000u64);
        for v in self.pos.iter_recorded() {
            let value = v.value_iterated_to();
            while value > high {
                low = high + 1;
                high = ((high as f64 * growth) as u64).max(low);
            }
            let n = v.count_at_value();
            match out.last_mut() {
                Some(b) if b.0 == low => b.2 += n,
                _ => out.push((low, high, n)),
            }
        }
        out
    }
}

/// The value of rank `k` (1-based, ascending) in `h`, as the highest value equivalent to
/// its bucket.
fn kth(h: &Histogram<u64>, k: u64) -> u64 {
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_since_last_iteration();
        if seen >= k {
            return h.highest_equivalent(v.value_iterated_to());
        }
    }
    h.max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_buckets_hold_every_value_in_few_buckets() {
        let mut h = TimeHistogram::new();
        for v in 1..=100_000i64 {
            h.record(v * 100);
        }
        let b = h.log_buckets(1.02);
        assert_eq!(b.iter().map(|x| x.2).sum::<u64>(), 100_000);
        assert!(b.len() < 600, "{}", b.len());
        assert!(b.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(b.last().is_some_and(|l| l.1 >= 10_000_000));
    }

    fn near(a: i64, b: i64) -> bool {
        // HDR keeps three significant digits: within 0.1 % (and 1 ns).
        (a - b).abs() <= (b.abs() / 1000).max(1)
    }

    #[test]
    fn empty_has_no_summary() {
        let h = TimeHistogram::new();
        assert_eq!(h.summary(), None);
        assert_eq!(h.quantile(0.5), None);
        assert!(h.log2_buckets().is_empty());
    }

    #[test]
    fn one_value() {
        let mut h = TimeHistogram::new();
        h.record(123_456);
        let s = h.summary().expect("one value");
        assert_eq!((s.count, s.min_ns, s.max_ns), (1, 123_456, 123_456));
        // the clamp to [min, max] makes every percentile of one value exact
        assert_eq!((s.p50_ns, s.p999_ns), (123_456, 123_456));
        assert_eq!(s.mean_ns, 123_456.0);
    }

    #[test]
    fn percentiles_of_one_to_ten_thousand() {
        let mut h = TimeHistogram::new();
        for v in 1..=10_000i64 {
            h.record(v * 1000);
        }
        let s = h.summary().expect("values");
        assert_eq!(s.count, 10_000);
        assert_eq!(s.min_ns, 1000);
        assert_eq!(s.max_ns, 10_000_000);
        assert!(near(s.p50_ns, 5_000_000), "{s:?}");
        assert!(near(s.p90_ns, 9_000_000), "{s:?}");
        assert!(near(s.p99_ns, 9_900_000), "{s:?}");
        assert!(near(s.p999_ns, 9_990_000), "{s:?}");
        assert!((s.mean_ns - 5_000_500.0).abs() < 1e-6);
    }

    #[test]
    fn negative_values_sort_before_positive_ones() {
        let mut h = TimeHistogram::new();
        for v in [-3000i64, -1000, -2000, 0, 1000, 2000] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.0), Some(-3000));
        assert!(near(h.quantile(1.0 / 6.0).expect("rank 1"), -3000));
        assert!(near(h.quantile(2.0 / 6.0).expect("rank 2"), -2000));
        assert!(near(h.quantile(0.5).expect("rank 3"), -1000));
        assert_eq!(h.quantile(4.0 / 6.0), Some(0));
        assert!(near(h.quantile(5.0 / 6.0).expect("rank 5"), 1000));
        assert_eq!(h.quantile(1.0), Some(2000));
        let s = h.summary().expect("values");
        assert_eq!(s.mean_ns, -500.0);
        let v = s.shifted(s.min_ns);
        assert_eq!((v.min_ns, v.max_ns), (0, 5000));
    }

    #[test]
    fn huge_values_are_clamped_not_lost() {
        let mut h = TimeHistogram::new();
        h.record(i64::MAX);
        h.record(i64::MIN);
        h.record(5);
        let s = h.summary().expect("values");
        assert_eq!((s.min_ns, s.max_ns, s.count), (i64::MIN, i64::MAX, 3));
        assert_eq!(h.quantile(0.5), Some(5));
        h.reset();
        assert_eq!(h.count(), 0);
        assert_eq!(h.summary(), None);
    }

    #[test]
    fn record_n_and_add_equal_recording_one_by_one() {
        let mut a = TimeHistogram::new();
        let mut b = TimeHistogram::new();
        let mut c = TimeHistogram::new();
        for v in [-5i64, 0, 0, 0, 17, 1_000_000] {
            a.record(v);
        }
        b.record(-5);
        b.record_n(0, 3);
        b.record_n(99, 0);
        c.record(17);
        c.record(1_000_000);
        b.add(&c);
        b.add(&TimeHistogram::new());
        assert_eq!(a.summary(), b.summary());
    }

    #[test]
    fn log2_buckets_count_every_value() {
        let mut h = TimeHistogram::new();
        for v in [10i64, 500, 1023, 1024, 2047, 2048, 1_000_000] {
            h.record(v);
        }
        let b = h.log2_buckets();
        assert_eq!(b[0], (0, 1023, 3));
        assert_eq!(b[1], (1024, 2047, 2));
        assert_eq!(b[2], (2048, 4095, 1));
        assert_eq!(b.iter().map(|x| x.2).sum::<u64>(), 7);
        let last = b.last().expect("buckets");
        assert!(last.0 <= 1_000_000 && 1_000_000 <= last.1, "{b:?}");
    }
}
