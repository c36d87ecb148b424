//! A load generator for any etcd-compatible endpoint.
//!
//! `clients` tasks share `conns` connections and issue requests back to back
//! until `total` requests have been started or `duration` has passed. Every
//! latency is kept (4 bytes each), so percentiles are exact; the summary has
//! the shape of etcd's benchmark tool so figures compare line by line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use tonic::transport::Channel;

/// What each request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A put of a fresh value.
    Put,
    /// A range of one key; `serializable` skips the linearizable read path.
    Range {
        /// Serve from the member's local state.
        serializable: bool,
    },
}

/// How to run a benchmark.
#[derive(Clone, Debug)]
pub struct Options {
    /// The request to send.
    pub workload: Workload,
    /// Concurrent request loops.
    pub clients: usize,
    /// Requests to send in all (ignored when `duration` is set).
    pub total: u64,
    /// Run for this long instead of a count.
    pub duration: Option<Duration>,
    /// Bytes per key.
    pub key_size: usize,
    /// Bytes per value.
    pub val_size: usize,
    /// Distinct keys to spread requests over.
    pub key_space_size: u64,
    /// Walk the key space in order instead of at random.
    pub sequential_keys: bool,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Latency of every successful request, microseconds.
    pub latencies_us: Vec<u32>,
    /// Requests that failed.
    pub errors: u64,
    /// First error message seen, for the summary.
    pub first_error: Option<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// Runs the benchmark over `channels` (clients are spread over them).
pub async fn run(channels: Vec<Channel>, options: Options) -> Report {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let deadline = options.duration.map(|d| started + d);
    let total = if options.duration.is_some() {
        u64::MAX
    } else {
        options.total
    };
    let mut tasks = Vec::with_capacity(options.clients);
    for client in 0..options.clients.max(1) {
        let channel = channels[client % channels.len()].clone();
        let next = Arc::clone(&next);
        let options = options.clone();
        tasks.push(tokio::spawn(async move {
            client_loop(channel, client as u64, next, total, deadline, options).await
        }));
    }
    let mut report = Report::default();
    for task in tasks {
        if let Ok(part) = task.await {
            report.latencies_us.extend(part.latencies_us);
            report.errors += part.errors;
            if report.first_error.is_none() {
                report.first_error = part.first_error;
            }
        }
    }
    report.elapsed = started.elapsed();
    report
}

async fn client_loop(
    channel: Channel,
    client: u64,
    next: Arc<AtomicU64>,
    total: u64,
    deadline: Option<Instant>,
    options: Options,
) -> Report {
    let mut kv = KvClient::new(channel).max_decoding_message_size(usize::MAX);
    let mut rng =
        XorShift(0x9E37_79B9_7F4A_7C15 ^ (client + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    let value = vec![b'v'; options.val_size];
    let mut report = Report::default();
    loop {
        let n = next.fetch_add(1, Ordering::Relaxed);
        if n >= total || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let key_number = if options.sequential_keys {
            n % options.key_space_size.max(1)
        } else {
            rng.next() % options.key_space_size.max(1)
        };
        let key = key_bytes(key_number, options.key_size);
        let sent = Instant::now();
        let result = match options.workload {
            Workload::Put => kv
                .put(PutRequest {
                    key,
                    value: value.clone(),
                    ..Default::default()
                })
                .await
                .map(drop),
            Workload::Range { serializable } => kv
                .range(RangeRequest {
                    key,
                    serializable,
                    ..Default::default()
                })
                .await
                .map(drop),
        };
        match result {
            Ok(()) => {
                let us = sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                report.latencies_us.push(us);
            }
            Err(status) => {
                report.errors += 1;
                if report.first_error.is_none() {
                    report.first_error = Some(status.message().to_owned());
                }
            }
        }
    }
    report
}

/// A key of `size` bytes naming `number`, zero-padded decimal so keys sort
/// as numbers.
fn key_bytes(number: u64, size: usize) -> Vec<u8> {
    let digits = number.to_string();
    let mut key = vec![b'0'; size.max(digits.len())];
    let start = key.len() - digits.len();
    key[start..].copy_from_slice(digits.as_bytes());
    key
}

/// A small seeded generator: benchmarks need spread, not cryptography.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

impl Report {
    /// Requests per second over the run.
    pub fn requests_per_second(&self) -> f64 {
        self.latencies_us.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at quantile `q` (0..=1), in microseconds, over sorted
    /// samples.
    pub fn quantile_us(sorted: &[u32], q: f64) -> u32 {
        if sorted.is_empty() {
            return 0;
        }
        let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    /// The human summary: totals, a latency histogram and percentiles.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let secs = |us: f64| us / 1e6;
        let n = sorted.len().max(1) as f64;
        let mean = sorted.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = sorted
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
        let _ = writeln!(out, "  Stddev:\t{:.4} secs.", secs(var.sqrt()));
        let _ = writeln!(out, "  Requests/sec:\t{:.4}", self.requests_per_second());
        let _ = writeln!(out, "  Requests:\t{}", sorted.len());
        let _ = writeln!(out, "  Errors:\t{}", self.errors);
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "  First error:\t{e}");
        }
        let _ = writeln!(out, "\nResponse time histogram:");
        out.push_str(&histogram(&sorted));
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
}

/// Ten equal-width buckets from fastest to slowest, with bars.
fn histogram(sorted: &[u32]) -> String {
    use std::fmt::Write;
    const BUCKETS: usize = 10;
    const BAR_MAX: usize = 40;
    let mut out = String::new();
    let (Some(&low), Some(&high)) = (sorted.first(), sorted.last()) else {
        return out;
    };
    let width = (f64::from(high - low) / BUCKETS as f64).max(1.0);
    let mut counts = [0usize; BUCKETS + 1];
    for &v in sorted {
        let b = ((f64::from(v - low) / width) as usize).min(BUCKETS);
        counts[b] += 1;
    }
    let most = counts.iter().copied().max().unwrap_or(1).max(1);
    for (i, count) in counts.iter().enumerate() {
        let mark = f64::from(low) + width * i as f64;
        let bar = "∎".repeat(count * BAR_MAX / most);
        let _ = writeln!(out, "  {:.4} [{count}]\t|{bar}", mark / 1e6);
    }
    out
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
        let text = histogram(&sorted);
        let counted: usize = text
            .lines()
            .filter_map(|l| {
                l.split('[')
                    .nth(1)?
                    .split(']')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .sum();
        assert_eq!(counted, 1000);
    }

    #[test]
    fn keys_are_padded_to_size() {
        assert_eq!(key_bytes(42, 8), b"00000042");
        assert_eq!(key_bytes(123_456, 3), b"123456");
    }
}
