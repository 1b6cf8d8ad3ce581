//! Histogram of loss-run lengths in power-of-two buckets.

/// Number of buckets in a [`LossRuns`] histogram.
const BUCKETS: usize = 64;

/// A histogram of loss runs (maximal stretches of consecutive missing
/// sequence numbers), in power-of-two buckets.
///
/// Bucket 0 counts runs of exactly 1, bucket 1 runs of 2, and bucket `i >= 2`
/// runs of length `2^(i-1) + 1 ..= 2^i` ("3-4", "5-8", "9-16", ...). The last
/// bucket (63, nominally "2^62+1 ..= 2^63") is open-ended: it also holds the
/// (purely theoretical) runs longer than 2^63, so no run is ever dropped.
///
/// [`SeqTracker`](crate::SeqTracker) fills this as gaps are first observed;
/// see its documentation for what that means for late arrivals.
///
/// [`summary`](Self::summary) turns it into data for a results document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossRuns {
    buckets: [u64; BUCKETS],
    runs: u64,
    lost: u64,
}

impl Default for LossRuns {
    fn default() -> Self {
        Self::new()
    }
}

impl LossRuns {
    /// An empty histogram.
    pub const fn new() -> Self {
        Self {
            buckets: [0; BUCKETS],
            runs: 0,
            lost: 0,
        }
    }

    /// Counts one loss run of `len` consecutive missing sequence numbers.
    /// A run of length 0 is ignored.
    pub fn record(&mut self, len: u64) {
        if len == 0 {
            return;
        }
        let i = Self::bucket_of(len);
        self.buckets[i] = self.buckets[i].saturating_add(1);
        self.runs = self.runs.saturating_add(1);
        self.lost = self.lost.saturating_add(len);
    }

    /// Adds every run counted in `other` to `self` (e.g. to combine
    /// parallel streams).
    pub fn merge(&mut self, other: &LossRuns) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a = a.saturating_add(*b);
        }
        self.runs = self.runs.saturating_add(other.runs);
        self.lost = self.lost.saturating_add(other.lost);
    }

    /// The bucket index a run of `len >= 1` falls into (0 for `len == 0`,
    /// which [`record`](Self::record) never stores).
    pub fn bucket_of(len: u64) -> usize {
        if len <= 1 {
            return 0;
        }
        // len in 2^(i-1)+1 ..= 2^i  <=>  len-1 in 2^(i-1) ..= 2^i - 1
        let i = (u64::BITS - (len - 1).leading_zeros()) as usize;
        i.min(BUCKETS - 1)
    }

    /// The per-bucket run counts, indexed as described on [`LossRuns`].
    pub fn buckets(&self) -> &[u64; 64] {
        &self.buckets
    }

    /// Total number of runs recorded.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Sum of the lengths of all runs recorded (saturating at `u64::MAX`).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Inclusive run-length bounds `(min, max)` of bucket `i`, or `None` if
    /// `i >= 64`. The last bucket's upper bound is `u64::MAX`.
    pub fn bounds(i: usize) -> Option<(u64, u64)> {
        match i {
            0 => Some((1, 1)),
            1 => Some((2, 2)),
            _ if i < BUCKETS - 1 => Some(((1u64 << (i - 1)) + 1, 1u64 << i)),
            _ if i == BUCKETS - 1 => Some(((1u64 << (i - 1)) + 1, u64::MAX)),
            _ => None,
        }
    }

    /// Human-readable label of bucket `i`: `"1"`, `"2"`, `"3-4"`, `"5-8"`,
    /// ..., and for the open-ended last bucket `"4611686018427387905+"`.
    /// Returns an empty string for `i >= 64`.
    pub fn label(i: usize) -> String {
        match Self::bounds(i) {
            None => String::new(),
            Some((lo, hi)) if lo == hi => lo.to_string(),
            Some((lo, u64::MAX)) => format!("{lo}+"),
            Some((lo, hi)) => format!("{lo}-{hi}"),
        }
    }
}

/// One non-empty bucket of a [`LossRuns`] histogram.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LossRunBucket {
    /// Human-readable run lengths: "1", "2", "3-4", "5-8", ...
    pub label: String,
    /// Shortest run length in the bucket.
    pub min: u64,
    /// Longest run length in the bucket.
    pub max: u64,
    /// Runs counted.
    pub count: u64,
}

/// A [`LossRuns`] histogram as data: what the results document carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LossRunsSummary {
    /// Number of runs.
    pub runs: u64,
    /// Sum of their lengths.
    pub lost: u64,
    /// The non-empty buckets, shortest runs first.
    #[serde(deserialize_with = "crate::bounded::list")]
    pub buckets: Vec<LossRunBucket>,
}

impl LossRuns {
    /// The histogram as data, with only the non-empty buckets.
    pub fn summary(&self) -> LossRunsSummary {
        let buckets = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .filter_map(|(i, &count)| {
                Self::bounds(i).map(|(min, max)| LossRunBucket {
                    label: Self::label(i),
                    min,
                    max,
                    count,
                })
            })
            .collect();
        LossRunsSummary {
            runs: self.runs,
            lost: self.lost,
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_boundaries() {
        assert_eq!(LossRuns::bucket_of(1), 0);
        assert_eq!(LossRuns::bucket_of(2), 1);
        assert_eq!(LossRuns::bucket_of(3), 2);
        assert_eq!(LossRuns::bucket_of(4), 2);
        assert_eq!(LossRuns::bucket_of(5), 3);
        assert_eq!(LossRuns::bucket_of(8), 3);
        assert_eq!(LossRuns::bucket_of(9), 4);
        assert_eq!(LossRuns::bucket_of(16), 4);
        assert_eq!(LossRuns::bucket_of(17), 5);
        assert_eq!(LossRuns::bucket_of(1 << 62), 62);
        assert_eq!(LossRuns::bucket_of((1 << 62) + 1), 63);
        assert_eq!(LossRuns::bucket_of(1 << 63), 63);
        assert_eq!(LossRuns::bucket_of((1 << 63) + 1), 63);
        assert_eq!(LossRuns::bucket_of(u64::MAX), 63);
        // every bucket's bounds map back to that bucket
        for i in 0..64 {
            let (lo, hi) = LossRuns::bounds(i).expect("bucket in range");
            assert_eq!(LossRuns::bucket_of(lo), i, "lo of {i}");
            assert_eq!(LossRuns::bucket_of(hi), i, "hi of {i}");
        }
        assert_eq!(LossRuns::bounds(64), None);
    }

    #[test]
    fn labels() {
        assert_eq!(LossRuns::label(0), "1");
        assert_eq!(LossRuns::label(1), "2");
        assert_eq!(LossRuns::label(2), "3-4");
        assert_eq!(LossRuns::label(3), "5-8");
        assert_eq!(LossRuns::label(4), "9-16");
        assert_eq!(LossRuns::label(10), "513-1024");
        assert_eq!(
            LossRuns::label(62),
            "2305843009213693953-4611686018427387904"
        );
        assert_eq!(LossRuns::label(63), "4611686018427387905+");
        assert_eq!(LossRuns::label(64), "");
        assert_eq!(LossRuns::label(usize::MAX), "");
    }

    #[test]
    fn record_and_merge() {
        let mut a = LossRuns::new();
        a.record(0);
        a.record(1);
        a.record(1);
        a.record(3);
        a.record(u64::MAX);
        assert_eq!(a.runs(), 4);
        assert_eq!(a.lost(), u64::MAX); // saturates
        assert_eq!(a.buckets()[0], 2);
        assert_eq!(a.buckets()[2], 1);
        assert_eq!(a.buckets()[63], 1);
        assert_eq!(a.buckets().iter().sum::<u64>(), 4);

        let mut b = LossRuns::default();
        b.record(2);
        b.record(4);
        b.merge(&a);
        assert_eq!(b.runs(), 6);
        assert_eq!(b.buckets()[0], 2);
        assert_eq!(b.buckets()[1], 1);
        assert_eq!(b.buckets()[2], 2);
        assert_eq!(b.buckets()[63], 1);
    }

    #[test]
    fn summary_lists_non_empty_buckets() {
        let mut a = LossRuns::new();
        for len in [1, 1, 3, 4, 100] {
            a.record(len);
        }
        let s = a.summary();
        assert_eq!((s.runs, s.lost), (5, 109));
        let got: Vec<(&str, u64, u64, u64)> = s
            .buckets
            .iter()
            .map(|b| (b.label.as_str(), b.min, b.max, b.count))
            .collect();
        assert_eq!(
            got,
            vec![("1", 1, 1, 2), ("3-4", 3, 4, 2), ("65-128", 65, 128, 1)]
        );
        assert_eq!(LossRuns::new().summary(), LossRunsSummary::default());
    }
}
