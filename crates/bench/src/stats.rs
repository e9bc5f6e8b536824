//! Summary statistics over latency samples: mean, median, p90, p95, p99.
//!
//! Percentiles use linear interpolation between closest ranks (NumPy's default method, which
//! is what vLLM's `bench serve` reports): for `n` sorted samples the p-th percentile sits at
//! rank `p / 100 * (n - 1)`, and a fractional rank interpolates between its two neighbours.
//!
//! ```text
//!   sorted:   10   20   30   40        p90 of 4 samples: rank = 0.9 * 3 = 2.7
//!   rank:      0    1    2    3        value = 30 + 0.7 * (40 - 30) = 37
//! ```

use serde::Serialize;

/// The p-th percentile (`0.0..=100.0`) of already **sorted** samples, or `None` when empty.
///
/// Values of `p` outside `0..=100` are clamped.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = p.clamp(0.0, 100.0) / 100.0 * last as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// Distribution summary of one latency metric, in milliseconds.
///
/// When `count` is 0 (no samples, e.g. TPOT when every request produced one token) all values
/// are 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median (p50).
    pub median_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Population standard deviation.
    pub std_ms: f64,
    /// Smallest sample.
    pub min_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

impl LatencyStats {
    /// Summarizes samples given in milliseconds (any order; NaNs are dropped).
    pub fn from_ms(samples: &[f64]) -> Self {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len();
        if count == 0 {
            return Self::empty();
        }
        let mean = sorted.iter().sum::<f64>() / count as f64;
        let var = sorted.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / count as f64;
        let pct = |p| percentile(&sorted, p).unwrap_or(0.0);
        Self {
            count,
            mean_ms: mean,
            median_ms: pct(50.0),
            p90_ms: pct(90.0),
            p95_ms: pct(95.0),
            p99_ms: pct(99.0),
            std_ms: var.sqrt(),
            min_ms: sorted[0],
            max_ms: sorted[count - 1],
        }
    }

    fn empty() -> Self {
        Self {
            count: 0,
            mean_ms: 0.0,
            median_ms: 0.0,
            p90_ms: 0.0,
            p95_ms: 0.0,
            p99_ms: 0.0,
            std_ms: 0.0,
            min_ms: 0.0,
            max_ms: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn percentile_of_empty_is_none() {
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn percentile_of_single_sample_is_that_sample() {
        for p in [0.0, 50.0, 99.0, 100.0] {
            assert_eq!(percentile(&[7.5], p), Some(7.5));
        }
    }

    #[test]
    fn percentile_interpolates_linearly_like_numpy() {
        let s = [10.0, 20.0, 30.0, 40.0];
        // numpy.percentile([10,20,30,40], [0,25,50,90,99,100])
        let expected = [
            (0.0, 10.0),
            (25.0, 17.5),
            (50.0, 25.0),
            (90.0, 37.0),
            (99.0, 39.7),
        ];
        for (p, want) in expected {
            let got = percentile(&s, p).unwrap();
            assert!(close(got, want), "p{p}: got {got}, want {want}");
        }
        assert_eq!(percentile(&s, 100.0), Some(40.0));
    }

    #[test]
    fn percentile_on_1_to_100() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!(close(percentile(&s, 50.0).unwrap(), 50.5));
        assert!(close(percentile(&s, 90.0).unwrap(), 90.1));
        assert!(close(percentile(&s, 99.0).unwrap(), 99.01));
    }

    #[test]
    fn percentile_clamps_out_of_range_p() {
        let s = [1.0, 2.0, 3.0];
        assert_eq!(percentile(&s, -5.0), Some(1.0));
        assert_eq!(percentile(&s, 250.0), Some(3.0));
    }

    #[test]
    fn stats_sort_their_input() {
        let st = LatencyStats::from_ms(&[40.0, 10.0, 30.0, 20.0]);
        assert_eq!(st.count, 4);
        assert!(close(st.mean_ms, 25.0));
        assert!(close(st.median_ms, 25.0));
        assert!(close(st.p90_ms, 37.0));
        assert!(close(st.p95_ms, 38.5));
        assert!(close(st.p99_ms, 39.7));
        assert!(close(st.std_ms, 125f64.sqrt()));
        assert_eq!((st.min_ms, st.max_ms), (10.0, 40.0));
    }

    #[test]
    fn stats_of_no_samples_are_zero() {
        let st = LatencyStats::from_ms(&[f64::NAN]);
        assert_eq!(st.count, 0);
        assert_eq!(st.mean_ms, 0.0);
        assert_eq!(st.p99_ms, 0.0);
    }
}
