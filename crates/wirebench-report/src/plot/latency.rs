//! Latency distributions: the CDF, and the CCDF on a log scale for the tail, from the
//! results document's histogram (`end.latency_us.histogram`), or from its seven
//! percentiles when an older document carries none (and the caption says so).

use wirebench_proto::results::{Percentiles, Results, UsBucket};

use super::chart::{Axis, Chart, Panel, Pt, Series, Style};
use super::scale::Quantity;

/// A distribution of round trips as its cumulative curve: (value in s, fraction at or
/// below it), ascending.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// The curve's points.
    pub cumulative: Vec<(f64, f64)>,
    /// Values counted.
    pub count: u64,
    /// Histogram buckets it was built from; 0 when built from percentiles.
    pub buckets: usize,
}

impl Distribution {
    /// The pooled distribution of buckets in µs (several runs' buckets may be given at once:
    /// the CDF of the pooled values is the running sum over the sorted bucket tops).
    ///
    /// A bucket whose bottom is above its top is no bucket, and left out. Counts add up in
    /// 128 bits: a crafted document's counts of 2^64 − 1 cannot overflow the sum.
    pub fn of_buckets(buckets: &[UsBucket]) -> Option<Self> {
        let mut b: Vec<UsBucket> = buckets
            .iter()
            .copied()
            .filter(|b| b.count > 0 && b.min_us <= b.max_us)
            .collect();
        b.sort_by(|x, y| x.max_us.total_cmp(&y.max_us));
        let total: u128 = b.iter().map(|x| u128::from(x.count)).sum();
        let first = b.first()?;
        let mut cumulative = vec![(first.min_us * 1e-6, 0.0)];
        let mut seen = 0u128;
        for x in &b {
            seen += u128::from(x.count);
            cumulative.push((x.max_us * 1e-6, seen as f64 / total as f64));
        }
        Some(Self {
            cumulative,
            count: u64::try_from(total).unwrap_or(u64::MAX),
            buckets: b.len(),
        })
    }

    /// The curve through a document's percentiles (µs): all an older document has.
    pub fn of_percentiles(p: &Percentiles) -> Self {
        let us = 1e-6;
        Self {
            cumulative: vec![
                (p.min * us, 0.0),
                (p.p50 * us, 0.5),
                (p.p90 * us, 0.9),
                (p.p99 * us, 0.99),
                (p.p999 * us, 0.999),
                (p.max * us, 1.0),
            ],
            count: p.count,
            buckets: 0,
        }
    }

    /// The empirical distribution of samples in seconds (every value a step; a thousand
    /// steps at most, the extremes exact).
    pub fn of_samples(mut v: Vec<f64>) -> Option<Self> {
        v.retain(|x| x.is_finite());
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let last = *v.last()?;
        let step = (n / 1000).max(1);
        let mut cumulative: Vec<(f64, f64)> = (0..n)
            .step_by(step)
            .map(|i| (v[i], (i + 1) as f64 / n as f64))
            .collect();
        cumulative.push((last, 1.0));
        Some(Self {
            cumulative,
            count: n as u64,
            buckets: n,
        })
    }

    /// One result's round trips.
    pub fn of(r: &Results) -> Option<Self> {
        let l = r.end.latency_us.as_ref()?;
        Self::of_buckets(&l.histogram).or_else(|| Some(Self::of_percentiles(l)))
    }

    /// The pooled round trips of several trials, if every one has a histogram; else the
    /// first trial's percentiles.
    pub fn of_trials(rs: &[Results]) -> Option<Self> {
        let lat: Vec<&Percentiles> = rs
            .iter()
            .filter_map(|r| r.end.latency_us.as_ref())
            .collect();
        if !lat.is_empty() && lat.iter().all(|l| !l.histogram.is_empty()) {
            let all: Vec<UsBucket> = lat
                .iter()
                .flat_map(|l| l.histogram.iter().copied())
                .collect();
            return Self::of_buckets(&all);
        }
        lat.first().map(|l| Self::of_percentiles(l))
    }
}

/// Fills `chart` with the CDF and CCDF panels of `runs` (label, distribution), overlaid.
pub fn latency_panels(chart: &mut Chart, runs: &[(String, Distribution)]) {
    let values = runs
        .iter()
        .flat_map(|(_, d)| d.cumulative.iter().map(|p| p.0))
        .filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    // Log where the values span more than 30 times: a 57 µs idle round trip and a 300 ms
    // loaded one both readable.
    let log = lo > 0.0 && hi / lo > 30.0;
    let x = if log {
        Axis::log("round-trip time", Quantity::Seconds)
    } else {
        Axis::linear("round-trip time", Quantity::Seconds)
    };
    let mut cdf = Panel::new(
        x.clone(),
        Axis::linear("CDF: at or below", Quantity::Percent),
    );
    let mut ccdf = Panel::new(x, Axis::log("CCDF: above (log)", Quantity::Percent));
    for (label, d) in runs {
        cdf.series.push(Series::new(
            label.clone(),
            Style::Line,
            d.cumulative
                .iter()
                .map(|&(v, f)| Pt::at(v, f * 100.0))
                .collect(),
        ));
        // The last point's tail is 0, which a log axis cannot show.
        ccdf.series.push(Series::new(
            label.clone(),
            Style::Line,
            d.cumulative
                .iter()
                .filter(|(_, f)| *f < 1.0)
                .map(|&(v, f)| Pt::at(v, (1.0 - f) * 100.0))
                .collect(),
        ));
    }
    chart.panels = vec![cdf, ccdf];
    chart.title = "Round-trip time distribution".into();
    let counts: Vec<String> = runs.iter().map(|(_, d)| d.count.to_string()).collect();
    let from = if runs.iter().all(|(_, d)| d.buckets > 0) {
        "drawn from each run's full histogram (end.latency_us.histogram)".to_string()
    } else {
        "drawn through the document's 7 percentiles (min, p50, p90, p99, p99.9, max): it \
         carries no histogram, so the curve between them is a straight guess"
            .to_string()
    };
    chart.caption = format!(
        "Time from a request's write to its response's last byte, {} transaction(s); {from}. \
         Bottom: the share of transactions slower than x, on a log scale, for the tail.",
        counts.join(" / ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crafted_buckets_neither_overflow_nor_run_backwards() {
        let bucket = |min_us, max_us, count| UsBucket {
            min_us,
            max_us,
            count,
        };
        // Two buckets of 2^64 − 1: the sum does not overflow and the curve ends at 1.
        let d =
            Distribution::of_buckets(&[bucket(10.0, 20.0, u64::MAX), bucket(20.0, 30.0, u64::MAX)])
                .expect("a distribution");
        assert_eq!(d.count, u64::MAX);
        assert_eq!(d.cumulative.last().map(|p| p.1), Some(1.0));
        assert!((d.cumulative[1].1 - 0.5).abs() < 1e-12);
        // A bucket upside down is left out.
        let d = Distribution::of_buckets(&[bucket(50.0, 10.0, 7), bucket(10.0, 20.0, 3)])
            .expect("a distribution");
        assert_eq!((d.count, d.buckets), (3, 1));
        assert!(d
            .cumulative
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(Distribution::of_buckets(&[bucket(50.0, 10.0, 7)]).is_none());
    }
}
