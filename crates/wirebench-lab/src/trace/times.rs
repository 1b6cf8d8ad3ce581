//! A trace's opportunity times, held compactly: about 2.25 bytes an opportunity rather than
//! 4, with O(1) access by index and O(log n) search by time, which is all the serializer
//! asks ([`super::TraceLink`]: the time of opportunity `n`, and how many come before a time).
//!
//! The times are cut into blocks of [`BLOCK`]. A block keeps its first time (u32 ms) and
//! each time's offset from it (u16), which fits whenever the block spans at most 65,535 ms;
//! Mahimahi's traces have many opportunities a second, so their blocks span a few ms. A
//! block that spans more (a trace with gaps of over a second between lines) keeps its times
//! whole (u32) in `wide`, and its offsets are unused. A 64 MiB trace (at most 32 Mi
//! opportunities, of two bytes a line) is then about 72 MiB, where a `u32` each was 128 MiB.

/// Opportunities per block.
const BLOCK: usize = 64;

/// A block whose times are its base plus offsets (not in `wide`).
const NARROW: usize = usize::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    /// Its first time, ms.
    base: u32,
    /// Where its times start in `wide`, or [`NARROW`].
    wide: usize,
}

/// Non-decreasing times in ms, in blocks.
#[derive(Debug, Default)]
pub(super) struct Times {
    blocks: Vec<Block>,
    /// One per time (0 for the times of a wide block).
    offsets: Vec<u16>,
    wide: Vec<u32>,
}

impl Times {
    /// How many times.
    pub(super) fn len(&self) -> usize {
        self.offsets.len()
    }

    /// The time of index `i`, ms; `None` past the end.
    pub(super) fn get(&self, i: usize) -> Option<u32> {
        let block = self.blocks.get(i / BLOCK)?;
        if block.wide == NARROW {
            let offset = *self.offsets.get(i)?;
            Some(block.base.saturating_add(u32::from(offset)))
        } else {
            self.wide.get(block.wide + i % BLOCK).copied()
        }
    }

    /// How many times are below `y`: the index of the first at or after it.
    pub(super) fn below(&self, y: u64) -> usize {
        let b = self.blocks.partition_point(|blk| u64::from(blk.base) < y);
        if b == 0 {
            return 0;
        }
        // Every block before b − 1 ends at or before the base of the next, which is below y:
        // only block b − 1 can hold times at or after y.
        let (mut lo, mut hi) = ((b - 1) * BLOCK, (b * BLOCK).min(self.len()));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.get(mid).is_some_and(|m| u64::from(m) < y) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The heap the times take, bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>()
            + self.offsets.capacity() * 2
            + self.wide.capacity() * 4
    }
}

impl PartialEq for Times {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && (0..self.len()).all(|i| self.get(i) == other.get(i))
    }
}

/// Builds [`Times`] from times given in order (the caller checks they never go back).
#[derive(Debug, Default)]
pub(super) struct TimesBuilder {
    times: Times,
    pending: Vec<u32>,
}

impl TimesBuilder {
    /// Adds the next time, ms (not before the one added last).
    pub(super) fn push(&mut self, ms: u32) {
        self.pending.push(ms);
        if self.pending.len() == BLOCK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let (Some(&base), Some(&last)) = (self.pending.first(), self.pending.last()) else {
            return;
        };
        let t = &mut self.times;
        match u16::try_from(last.saturating_sub(base)) {
            Ok(_) => {
                t.blocks.push(Block { base, wide: NARROW });
                // Each fits: the times are in order, so none is further from base than last.
                t.offsets.extend(
                    self.pending
                        .iter()
                        .map(|&m| u16::try_from(m.saturating_sub(base)).unwrap_or(u16::MAX)),
                );
            }
            Err(_) => {
                t.blocks.push(Block {
                    base,
                    wide: t.wide.len(),
                });
                t.wide.extend_from_slice(&self.pending);
                t.offsets.resize(t.offsets.len() + self.pending.len(), 0);
            }
        }
        self.pending.clear();
    }

    /// The times added, their storage trimmed to fit.
    pub(super) fn finish(mut self) -> Times {
        self.flush();
        let mut t = self.times;
        t.blocks.shrink_to_fit();
        t.offsets.shrink_to_fit();
        t.wide.shrink_to_fit();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(v: &[u32]) -> Times {
        let mut b = TimesBuilder::default();
        for &m in v {
            b.push(m);
        }
        b.finish()
    }

    #[test]
    fn narrow_and_wide_blocks_read_back_and_search_as_a_list() {
        // Dense stretches (narrow blocks), a stretch of long gaps (wide blocks), repeats,
        // and a last block that is not full.
        let mut v = Vec::new();
        let mut m = 0u32;
        let mut rng = 0xfeed_u64;
        for i in 0..1000u32 {
            let r = crate::splitmix::next(&mut rng);
            m += match i {
                300..=450 => 70_000 + (r % 5000) as u32,
                _ => (r % 3) as u32,
            };
            v.push(m);
        }
        let t = build(&v);
        assert_eq!(t.len(), v.len());
        assert!(t.wide.len() >= 128, "some blocks are wide");
        assert!(t.blocks.iter().any(|b| b.wide == NARROW));
        for (i, &m) in v.iter().enumerate() {
            assert_eq!(t.get(i), Some(m), "index {i}");
        }
        assert_eq!(t.get(v.len()), None);
        let probes = v.iter().flat_map(|&m| {
            [
                u64::from(m),
                u64::from(m) + 1,
                u64::from(m).saturating_sub(1),
            ]
        });
        for y in probes.chain([0, u64::MAX]) {
            let want = v.partition_point(|&m| u64::from(m) < y);
            assert_eq!(t.below(y), want, "below {y}");
        }
        assert_eq!(build(&[]).below(5), 0);
    }

    #[test]
    fn a_dense_trace_takes_about_two_bytes_an_opportunity() {
        // 10 opportunities a ms for 100 s: Mahimahi's densest traces.
        let v: Vec<u32> = (0..1_000_000u32).map(|i| i / 10).collect();
        let t = build(&v);
        let per = t.heap_bytes() as f64 / v.len() as f64;
        assert!(per < 2.3, "{per} bytes an opportunity");
        assert_eq!(t, build(&v));
        assert_ne!(t, build(&v[1..]));
    }
}
