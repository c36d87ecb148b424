//! What a benchmark run measured, and its summary in the shape of etcd's
//! benchmark tool, so figures compare line by line.

use std::fmt::Write as _;
use std::time::Duration;

/// One completed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When it was sent, microseconds after the run started.
    pub start_us: u64,
    /// How long it took, microseconds.
    pub latency_us: u32,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every successful request, in no particular order.
    pub samples: Vec<Sample>,
    /// Requests that failed.
    pub errors: u64,
    /// First error message seen, for the summary.
    pub first_error: Option<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// Buckets in the latency histogram.
pub const HISTOGRAM_BUCKETS: usize = 10;

impl Report {
    /// Adds another client's part.
    pub fn merge(&mut self, part: Report) {
        self.samples.extend(part.samples);
        self.errors += part.errors;
        if self.first_error.is_none() {
            self.first_error = part.first_error;
        }
    }

    /// Records a failure.
    pub fn error(&mut self, message: impl Into<String>) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message.into());
        }
    }

    /// Successful requests.
    pub fn requests(&self) -> usize {
        self.samples.len()
    }

    /// Latencies sorted ascending, microseconds.
    pub fn sorted_latencies_us(&self) -> Vec<u32> {
        let mut sorted: Vec<u32> = self.samples.iter().map(|s| s.latency_us).collect();
        sorted.sort_unstable();
        sorted
    }

    /// Requests per second over the run.
    pub fn requests_per_second(&self) -> f64 {
        self.samples.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at quantile `q` (0..=1), in microseconds, over sorted
    /// samples: the smallest sample with at least `q` of them at or below.
    pub fn quantile_us(sorted: &[u32], q: f64) -> u32 {
        if sorted.is_empty() {
            return 0;
        }
        let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    /// The histogram: `(bucket start µs, count)` for equal-width buckets
    /// from fastest to slowest, the last one closed at the slowest sample.
    /// The counts add up to the number of samples.
    pub fn histogram(sorted: &[u32]) -> Vec<(f64, usize)> {
        let (Some(&low), Some(&high)) = (sorted.first(), sorted.last()) else {
            return Vec::new();
        };
        let width = (f64::from(high - low) / HISTOGRAM_BUCKETS as f64).max(1.0);
        let mut counts = [0usize; HISTOGRAM_BUCKETS + 1];
        for &v in sorted {
            let bucket = ((f64::from(v - low) / width) as usize).min(HISTOGRAM_BUCKETS);
            counts[bucket] += 1;
        }
        counts
            .iter()
            .enumerate()
            .map(|(i, &count)| (f64::from(low) + width * i as f64, count))
            .collect()
    }

    /// The human summary: totals, a latency histogram and percentiles.
    pub fn summary(&self) -> String {
        const BAR_MAX: usize = 40;
        let sorted = self.sorted_latencies_us();
        let secs = |us: f64| us / 1e6;
        let n = sorted.len().max(1) as f64;
        let mean = sorted.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let variance = sorted
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let mut out = String::new();
        let _ = writeln!(out, "Summary:");
        let _ = writeln!(out, "  Total:\t{:.4} secs.", self.elapsed.as_secs_f64());
        let _ = writeln!(
            out,
            "  Slowest:\t{:.4} secs.",
            secs(f64::from(sorted.last().copied().unwrap_or(0)))
        );
        let _ = writeln!(
            out,
            "  Fastest:\t{:.4} secs.",
            secs(f64::from(sorted.first().copied().unwrap_or(0)))
        );
        let _ = writeln!(out, "  Average:\t{:.4} secs.", secs(mean));
        let _ = writeln!(out, "  Stddev:\t{:.4} secs.", secs(variance.sqrt()));
        let _ = writeln!(out, "  Requests/sec:\t{:.4}", self.requests_per_second());
        let _ = writeln!(out, "  Requests:\t{}", sorted.len());
        let _ = writeln!(out, "  Errors:\t{}", self.errors);
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "  First error:\t{e}");
        }
        let _ = writeln!(out, "\nResponse time histogram:");
        let histogram = Self::histogram(&sorted);
        let most = histogram.iter().map(|b| b.1).max().unwrap_or(1).max(1);
        for (start_us, count) in histogram {
            let bar = "∎".repeat(count * BAR_MAX / most);
            let _ = writeln!(out, "  {:.4} [{count}]\t|{bar}", secs(start_us));
        }
        let _ = writeln!(out, "\nLatency distribution:");
        for q in [0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.999] {
            let _ = writeln!(
                out,
                "  {}% in {:.4} secs.",
                q * 100.0,
                secs(f64::from(Self::quantile_us(&sorted, q)))
            );
        }
        out
    }

    /// The raw samples as CSV, in start order: `start_us,latency_us`.
    pub fn csv(&self) -> String {
        let mut samples = self.samples.clone();
        samples.sort_unstable_by_key(|s| s.start_us);
        let mut out = String::from("start_us,latency_us\n");
        for s in samples {
            let _ = writeln!(out, "{},{}", s.start_us, s.latency_us);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_exact_ranks() {
        let sorted: Vec<u32> = (1..=100).collect();
        assert_eq!(Report::quantile_us(&sorted, 0.5), 50);
        assert_eq!(Report::quantile_us(&sorted, 0.99), 99);
        assert_eq!(Report::quantile_us(&sorted, 1.0), 100);
        assert_eq!(Report::quantile_us(&[], 0.5), 0);
    }

    #[test]
    fn histogram_counts_every_sample() {
        let sorted: Vec<u32> = (0..1000).map(|i| i * 7).collect();
        let counted: usize = Report::histogram(&sorted).iter().map(|b| b.1).sum();
        assert_eq!(counted, 1000);
        let one = Report::histogram(&[5, 5, 5]);
        assert_eq!(one.iter().map(|b| b.1).sum::<usize>(), 3);
    }

    #[test]
    fn csv_is_in_start_order() {
        let report = Report {
            samples: vec![
                Sample {
                    start_us: 20,
                    latency_us: 5,
                },
                Sample {
                    start_us: 10,
                    latency_us: 7,
                },
            ],
            ..Default::default()
        };
        assert_eq!(report.csv(), "start_us,latency_us\n10,7\n20,5\n");
    }
}
