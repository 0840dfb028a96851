//! A log-linear latency histogram (HDR-style, ~3% resolution).
//!
//! Values (microseconds) below 64 get a bucket each; above that every power
//! of two is split into 32 equal buckets, so any recorded value is reported
//! within 1/32 of itself. 1,920 counters cover all of `u64`, recording is a
//! few instructions, and per-worker histograms merge by adding counters, so
//! workers never share a lock on the hot path.

/// Sub-buckets per power of two (2^5).
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) << SUB_BITS;

/// A histogram of `u64` samples.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Bucket index of `v`.
fn index(v: u64) -> usize {
    if v < 2 * SUB {
        return usize::try_from(v).unwrap_or(0);
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let top = v >> shift; // in [SUB, 2*SUB)
    let idx = u64::from(shift + 1) * SUB + (top - SUB);
    usize::try_from(idx).unwrap_or(BUCKETS - 1)
}

/// Smallest value that lands in bucket `idx`.
fn lower_bound(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < 2 * SUB {
        return idx;
    }
    let shift = idx / SUB - 1;
    (SUB + idx % SUB) << shift
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Records one sample.
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds all of `other`'s samples.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Largest sample (0 if empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Smallest sample (0 if empty).
    pub fn min(&self) -> u64 {
        if self.count == 0 { 0 } else { self.min }
    }

    /// Mean of the samples (0 if empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum as f64 / self.count as f64
    }

    /// The value at quantile `q` (0.0..=1.0): the midpoint of the bucket
    /// holding that rank, clamped to the observed min and max.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0);
        let mut seen = 0u64;
        for (idx, &c) in self.counts.iter().enumerate() {
            seen += c;
            if c > 0 && seen as f64 >= rank {
                let lo = lower_bound(idx);
                let hi = lower_bound(idx + 1).saturating_sub(1).max(lo);
                return (lo + (hi - lo) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_u64() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 2, u64::MAX]) {
            let i = index(v);
            assert!(i >= last && i < BUCKETS, "v={v}");
            assert!(lower_bound(i) <= v, "v={v}");
            last = i;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_resolution() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        for (q, want) in [(0.5, 5_000.0), (0.9, 9_000.0), (0.99, 9_900.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.035, "q={q} got={got}");
        }
        assert_eq!(h.quantile(1.0), 10_000);
        assert_eq!(h.min(), 1);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(10);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert_eq!(a.max(), 1_000_000);
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }
}
