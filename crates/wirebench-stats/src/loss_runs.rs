//! Histogram of loss-run lengths in power-of-two buckets.

use serde::ser::{Serialize, SerializeStruct, Serializer};

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
/// Serialized (serde) as a struct `{ runs, lost, buckets }` where `runs` is the
/// number of runs, `lost` the sum of their lengths (saturating at `u64::MAX`)
/// and `buckets` lists only the non-empty buckets in ascending order, each as
/// `{ label, min, max, count }` (`min`/`max` are the inclusive run-length bounds
/// of the bucket).
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

/// One non-empty bucket, as serialized.
#[derive(serde::Serialize)]
struct BucketView {
    label: String,
    min: u64,
    max: u64,
    count: u64,
}

impl Serialize for LossRuns {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let buckets: Vec<BucketView> = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .filter_map(|(i, &count)| {
                Self::bounds(i).map(|(min, max)| BucketView {
                    label: Self::label(i),
                    min,
                    max,
                    count,
                })
            })
            .collect();
        let mut s = serializer.serialize_struct("LossRuns", 3)?;
        s.serialize_field("runs", &self.runs)?;
        s.serialize_field("lost", &self.lost)?;
        s.serialize_field("buckets", &buckets)?;
        s.end()
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
    fn is_serialize() {
        fn assert_serialize<T: Serialize>(_: &T) {}
        assert_serialize(&LossRuns::new());
    }
}
