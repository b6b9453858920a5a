//! Latency statistics: an HDR histogram at nanosecond resolution for the percentiles, plus exact
//! running sums so that the minimum, the **true** maximum, the mean and the standard deviation
//! are exact (perftest drops the two largest samples from t_max and truncates every deviation
//! to a whole microsecond; we do neither).

use hdrhistogram::Histogram;

/// Records latency samples in nanoseconds. Recording does not allocate.
pub struct LatRecorder {
    hist: Histogram<u64>,
    min: u64,
    max: u64,
    count: u64,
    sum: u128,
    /// Welford's running mean and sum of squared deviations: numerically stable.
    mean: f64,
    m2: f64,
}

/// Highest trackable latency: 1 hour, far above any timeout of ours.
const MAX_NS: u64 = 3_600_000_000_000;

impl Default for LatRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatRecorder {
    pub fn new() -> LatRecorder {
        LatRecorder {
            // 3 significant digits: every percentile within 0.1% of the true sample.
            hist: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds"),
            min: u64::MAX,
            max: 0,
            count: 0,
            sum: 0,
            mean: 0.0,
            m2: 0.0,
        }
    }

    /// Records one sample (nanoseconds). Values above one hour are clamped in the histogram but
    /// kept exact in min/max/mean.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, MAX_NS));
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.count += 1;
        self.sum += ns as u128;
        let x = ns as f64;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The statistics of everything recorded, or `None` without samples.
    pub fn stats(&self) -> Option<LatStats> {
        if self.count == 0 {
            return None;
        }
        // The histogram answers with the highest value of a sample's bucket (up to 0.1% above
        // it), which can pass the largest sample: `-n 1000` of 10001 ns each would have a median
        // of 10007 ns and a maximum of 10001 ns. The true percentile lies between the exact
        // minimum and maximum, so clamping there only brings the answer closer to it.
        let q = |p: f64| self.hist.value_at_quantile(p).clamp(self.min, self.max) as f64 / 1000.0;
        let stdev = if self.count > 1 {
            (self.m2 / (self.count - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(LatStats {
            samples: self.count,
            min_us: self.min as f64 / 1000.0,
            max_us: self.max as f64 / 1000.0,
            median_us: q(0.5),
            avg_us: self.sum as f64 / self.count as f64 / 1000.0,
            stdev_us: stdev / 1000.0,
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
        })
    }
}

/// Summary of a latency run, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    pub samples: u64,
    pub min_us: f64,
    /// The largest sample, none dropped.
    pub max_us: f64,
    /// perftest's t_typical.
    pub median_us: f64,
    pub avg_us: f64,
    /// Sample standard deviation (n − 1).
    pub stdev_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
}

impl LatStats {
    /// The statistics of no sample: a count of 0 and every time NaN, which the text row prints
    /// as `nan`, JSON as `null`, and which fails any `--max-lat` gate. For a side that took part
    /// in the rounds but could time none (a ping-pong server's one round of `-n 1`): its row
    /// says so instead of going missing.
    pub fn none() -> LatStats {
        LatStats {
            samples: 0,
            min_us: f64::NAN,
            max_us: f64::NAN,
            median_us: f64::NAN,
            avg_us: f64::NAN,
            stdev_us: f64::NAN,
            p99_us: f64::NAN,
            p999_us: f64::NAN,
            p9999_us: f64::NAN,
        }
    }

    /// The statistics in the order of the table and CSV columns: min, median, average,
    /// standard deviation, p99, p99.9, p99.99, max (µs).
    pub fn columns_us(&self) -> [f64; 8] {
        [
            self.min_us,
            self.median_us,
            self.avg_us,
            self.stdev_us,
            self.p99_us,
            self.p999_us,
            self.p9999_us,
            self.max_us,
        ]
    }

    /// The value of a named percentile gate key: `min`, `max`, `avg`, `median`/`p50`, `p99`,
    /// `p99.9`, `p99.99`.
    pub fn by_name(&self, key: &str) -> Option<f64> {
        Some(match key {
            "min" => self.min_us,
            "max" => self.max_us,
            "avg" | "mean" => self.avg_us,
            "median" | "typical" | "p50" => self.median_us,
            "p99" => self.p99_us,
            "p99.9" | "p999" => self.p999_us,
            "p99.99" | "p9999" => self.p9999_us,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward reference: sort, index, two-pass variance.
    fn reference(samples: &[u64]) -> (f64, f64, f64, f64, f64, f64) {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let n = s.len() as f64;
        let mean = s.iter().sum::<u64>() as f64 / n;
        let var = s.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
        // Nearest-rank percentile, as HdrHistogram defines it.
        let pct = |p: f64| s[((p * n).ceil() as usize).clamp(1, s.len()) - 1] as f64;
        (
            s[0] as f64,
            *s.last().unwrap() as f64,
            mean,
            var.sqrt(),
            pct(0.5),
            pct(0.99),
        )
    }

    #[test]
    fn matches_a_reference_computation() {
        // A skewed distribution with a long tail, deterministic.
        let mut x: u64 = 12345;
        let samples: Vec<u64> = (0..20_000)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let base = 2_000 + (x >> 33) % 500;
                if i % 1000 == 0 {
                    base * 40
                } else {
                    base
                }
            })
            .collect();
        let mut r = LatRecorder::new();
        for &s in &samples {
            r.record(s);
        }
        let st = r.stats().unwrap();
        let (min, max, mean, stdev, p50, p99) = reference(&samples);
        assert_eq!(st.samples, 20_000);
        assert_eq!(st.min_us * 1000.0, min);
        assert_eq!(st.max_us * 1000.0, max, "the true maximum, nothing dropped");
        assert!((st.avg_us * 1000.0 - mean).abs() < 1e-6 * mean);
        assert!(
            (st.stdev_us * 1000.0 - stdev).abs() < 1e-6 * stdev,
            "{} vs {stdev}",
            st.stdev_us * 1000.0
        );
        // Percentiles within the histogram's 3 significant digits.
        assert!(
            (st.median_us * 1000.0 - p50).abs() <= p50 * 1e-3,
            "{} vs {p50}",
            st.median_us
        );
        assert!(
            (st.p99_us * 1000.0 - p99).abs() <= p99 * 1e-3,
            "{} vs {p99}",
            st.p99_us
        );
    }

    #[test]
    fn stdev_keeps_sub_microsecond_precision() {
        let mut r = LatRecorder::new();
        for s in [1000, 1200, 1400] {
            r.record(s);
        }
        let st = r.stats().unwrap();
        assert!((st.stdev_us - 0.2).abs() < 1e-9, "{}", st.stdev_us);
        assert_eq!(st.by_name("p99.9"), Some(st.p999_us));
        assert_eq!(st.by_name("nope"), None);
    }

    #[test]
    fn percentiles_never_pass_the_true_extremes() {
        // 10001 ns lies in a histogram bucket 8 ns wide whose highest value is 10007 ns.
        let mut r = LatRecorder::new();
        for _ in 0..1000 {
            r.record(10_001);
        }
        let st = r.stats().unwrap();
        assert_eq!(
            (st.median_us, st.p99_us, st.p999_us, st.p9999_us),
            (10.001, 10.001, 10.001, 10.001)
        );
        // A tail: every percentile between min and max, and in order.
        let mut r = LatRecorder::new();
        for i in 0..10_000u64 {
            r.record(2_001 + i % 7 + if i == 9_999 { 1_000_003 } else { 0 });
        }
        let st = r.stats().unwrap();
        let c = st.columns_us();
        let percentiles = [c[1], c[4], c[5], c[6]];
        assert!(
            percentiles
                .iter()
                .all(|&p| st.min_us <= p && p <= st.max_us),
            "{c:?}"
        );
        assert!(percentiles.windows(2).all(|w| w[0] <= w[1]), "{c:?}");
    }

    #[test]
    fn a_slow_round_is_the_maximum_and_the_tail() {
        // 99 rounds of 20 µs and one of 25 ms (a wait that looked at the channel): the slow
        // one is t_max and p99.9, the median stays with the many.
        let mut r = LatRecorder::new();
        for i in 0..100 {
            r.record(if i == 57 { 25_000_000 } else { 20_000 });
        }
        let st = r.stats().unwrap();
        assert_eq!(st.samples, 100);
        assert_eq!((st.min_us, st.max_us), (20.0, 25_000.0));
        // Percentiles within the histogram's 0.1%.
        assert!((st.median_us - 20.0).abs() <= 0.02, "{}", st.median_us);
        assert!((st.p999_us - 25_000.0).abs() <= 25.0, "{}", st.p999_us);
    }

    #[test]
    fn single_and_empty() {
        assert!(LatRecorder::new().stats().is_none());
        let none = LatStats::none();
        assert_eq!(none.samples, 0);
        assert!(none.columns_us().iter().all(|x| x.is_nan()));
        let mut r = LatRecorder::new();
        r.record(5000);
        let st = r.stats().unwrap();
        assert_eq!((st.min_us, st.max_us, st.stdev_us), (5.0, 5.0, 0.0));
    }
}
