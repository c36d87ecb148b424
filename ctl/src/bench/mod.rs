//! A load generator for any etcd-compatible endpoint, in the manner of
//! etcd's `benchmark` tool.
//!
//! `clients` tasks share `conns` connections and issue requests back to back
//! (or paced to `--rate` requests per second in all) until `total` requests
//! have been started or `duration` has passed. Every sample is kept (12
//! bytes each), so percentiles are exact and the raw data can be written as
//! CSV or drawn as SVG or PNG ([`plot`]).

mod gateway;
pub mod plot;
pub mod report;

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::lease_client::LeaseClient;
use oxetcd_proto::etcdserverpb::request_op::Request;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    WatchCreateRequest, WatchRequest,
};
use tokio::sync::mpsc;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;

pub use report::{Report, Sample};

/// How long watchers wait for events still in flight after the last put.
const WATCH_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// TTL of the leases the keepalive benchmark renews: long enough never to
/// expire during a run.
const BENCH_LEASE_TTL_S: i64 = 300;

/// How often the progress bar redraws.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);

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
    /// A transaction of `ops` puts (to consecutive keys).
    TxnPut {
        /// Puts per transaction.
        ops: usize,
    },
    /// `watchers` watch streams each receive every one of `events` puts;
    /// each delivery is one sample (put sent → event received).
    Watch {
        /// Watch streams.
        watchers: usize,
        /// Puts made while they watch.
        events: u64,
    },
    /// Each client renews its own lease over one keepalive stream; each
    /// round trip is one sample.
    LeaseKeepalive,
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
    /// Bytes every key starts with (before its `key_size` bytes).
    pub key_prefix: Vec<u8>,
    /// Bytes per key.
    pub key_size: usize,
    /// Bytes per value.
    pub val_size: usize,
    /// Distinct keys to spread requests over.
    pub key_space_size: u64,
    /// Walk the key space in order instead of at random.
    pub sequential_keys: bool,
    /// Requests per second in all; unlimited when `None`.
    pub rate: Option<f64>,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
    /// The auth token every request carries (`--user`), if any.
    pub token: Option<AsciiMetadataValue>,
    /// Send the KV workloads to the JSON gateway at this `host:port`
    /// instead of over gRPC.
    pub gateway: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workload: Workload::Put,
            clients: 1,
            total: 10_000,
            duration: None,
            key_prefix: Vec::new(),
            key_size: 8,
            val_size: 8,
            key_space_size: 1,
            sequential_keys: false,
            rate: None,
            progress: false,
            token: None,
            gateway: None,
        }
    }
}

/// Runs the benchmark over `channels` (clients are spread over them).
pub async fn run(channels: Vec<Channel>, options: Options) -> Report {
    let started = Instant::now();
    let shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        done: AtomicU64::new(0),
        started,
        deadline: options.duration.map(|d| started + d),
        total: if options.duration.is_some() {
            u64::MAX
        } else {
            options.total
        },
        options: options.clone(),
    });
    let finished = Arc::new(AtomicBool::new(false));
    let progress = options
        .progress
        .then(|| tokio::spawn(progress_bar(Arc::clone(&shared), Arc::clone(&finished))));
    let mut report = match options.workload {
        Workload::Watch { watchers, events } => watch(&channels, &shared, watchers, events).await,
        _ => {
            let mut tasks = Vec::with_capacity(options.clients);
            for client in 0..options.clients.max(1) {
                let channel = channels[client % channels.len()].clone();
                let shared = Arc::clone(&shared);
                tasks.push(tokio::spawn(async move {
                    if let Some(address) = shared.options.gateway.clone() {
                        gateway::kv_loop(address, client as u64, shared).await
                    } else if shared.options.workload == Workload::LeaseKeepalive {
                        keepalive_loop(channel, shared).await
                    } else {
                        kv_loop(channel, client as u64, shared).await
                    }
                }));
            }
            let mut report = Report::default();
            for task in tasks {
                match task.await {
                    Ok(part) => report.merge(part),
                    Err(e) => report.error(format!("client task failed: {e}")),
                }
            }
            report
        }
    };
    report.elapsed = started.elapsed();
    finished.store(true, Ordering::Relaxed);
    if let Some(task) = progress {
        let _ = task.await;
    }
    report
}

/// State every client of a run shares.
struct Shared {
    /// The next request number to claim.
    next: AtomicU64,
    /// Requests completed, for the progress bar.
    done: AtomicU64,
    started: Instant,
    deadline: Option<Instant>,
    total: u64,
    options: Options,
}

impl Shared {
    /// Claims the next request number and waits for its turn under
    /// `--rate`; `None` when the run is over.
    async fn claim(&self) -> Option<u64> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n >= self.total || self.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        if let Some(rate) = self.options.rate.filter(|r| *r > 0.0) {
            let due = self.started + Duration::from_secs_f64(n as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
        }
        Some(n)
    }

    fn key(&self, n: u64, rng: &mut XorShift) -> Vec<u8> {
        let space = self.options.key_space_size.max(1);
        let number = if self.options.sequential_keys {
            n % space
        } else {
            rng.next() % space
        };
        self.prefixed(key_bytes(number, self.options.key_size))
    }

    /// `key` after the run's key prefix.
    fn prefixed(&self, key: Vec<u8>) -> Vec<u8> {
        if self.options.key_prefix.is_empty() {
            key
        } else {
            [self.options.key_prefix.as_slice(), &key].concat()
        }
    }

    /// The keys of transaction `n` of `ops` puts: consecutive, wrapping
    /// around the key space.
    fn txn_keys(&self, n: u64, ops: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..ops.max(1) as u64).map(move |i| {
            self.prefixed(key_bytes(
                (n * ops as u64 + i) % self.options.key_space_size.max(1),
                self.options.key_size,
            ))
        })
    }

    /// `message` as a request, with the run's token if it has one.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.options.token {
            request.metadata_mut().insert("token", token.clone());
        }
        request
    }

    fn since_start_us(&self, at: Instant) -> u64 {
        at.duration_since(self.started).as_micros() as u64
    }

    fn sample(&self, sent: Instant) -> Sample {
        self.done.fetch_add(1, Ordering::Relaxed);
        Sample {
            start_us: self.since_start_us(sent),
            latency_us: sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32,
        }
    }
}

async fn kv_loop(channel: Channel, client: u64, shared: Arc<Shared>) -> Report {
    let mut kv = KvClient::new(channel).max_decoding_message_size(usize::MAX);
    let mut rng = XorShift::for_client(client);
    let value = vec![b'v'; shared.options.val_size];
    let mut report = Report::default();
    while let Some(n) = shared.claim().await {
        let key = shared.key(n, &mut rng);
        let sent = Instant::now();
        let result = match shared.options.workload {
            Workload::Put => kv
                .put(shared.request(PutRequest {
                    key,
                    value: value.clone(),
                    ..Default::default()
                }))
                .await
                .map(drop),
            Workload::Range { serializable } => kv
                .range(shared.request(RangeRequest {
                    key,
                    serializable,
                    ..Default::default()
                }))
                .await
                .map(drop),
            Workload::TxnPut { ops } => {
                let success = shared
                    .txn_keys(n, ops)
                    .map(|key| RequestOp {
                        request: Some(Request::RequestPut(PutRequest {
                            key,
                            value: value.clone(),
                            ..Default::default()
                        })),
                    })
                    .collect();
                kv.txn(shared.request(TxnRequest {
                    success,
                    ..Default::default()
                }))
                .await
                .map(drop)
            }
            Workload::Watch { .. } | Workload::LeaseKeepalive => unreachable!("not a kv workload"),
        };
        match result {
            Ok(()) => report.samples.push(shared.sample(sent)),
            Err(status) => report.error(status.message()),
        }
    }
    report
}

async fn keepalive_loop(channel: Channel, shared: Arc<Shared>) -> Report {
    let mut report = Report::default();
    let mut lease = LeaseClient::new(channel);
    let id = match lease
        .lease_grant(shared.request(LeaseGrantRequest {
            ttl: BENCH_LEASE_TTL_S,
            id: 0,
        }))
        .await
    {
        Ok(r) => r.into_inner().id,
        Err(status) => {
            report.error(status.message());
            return report;
        }
    };
    let (sender, mut receiver) = mpsc::channel(1);
    let requests = futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let Some(mut n) = shared.claim().await else {
        return report;
    };
    let mut sent = Instant::now();
    let _ = sender.try_send(LeaseKeepAliveRequest { id });
    let mut responses = match lease.lease_keep_alive(shared.request(requests)).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            report.error(status.message());
            return report;
        }
    };
    loop {
        match responses.message().await {
            Ok(Some(_)) => report.samples.push(shared.sample(sent)),
            Ok(None) => {
                report.error("keepalive stream ended");
                return report;
            }
            Err(status) => {
                report.error(status.message());
                return report;
            }
        }
        let _ = n;
        match shared.claim().await {
            Some(next) => n = next,
            None => return report,
        }
        sent = Instant::now();
        if sender.send(LeaseKeepAliveRequest { id }).await.is_err() {
            return report;
        }
    }
}

/// The watch benchmark: open every watcher, then put `events` values whose
/// first eight bytes number them, and time each delivery to each watcher.
async fn watch(channels: &[Channel], shared: &Arc<Shared>, watchers: usize, events: u64) -> Report {
    let mut report = Report::default();
    let sent_us: Arc<Vec<AtomicU64>> = Arc::new((0..events).map(|_| AtomicU64::new(0)).collect());
    let mut streams = Vec::with_capacity(watchers);
    for w in 0..watchers.max(1) {
        let mut client = WatchClient::new(channels[w % channels.len()].clone());
        let (sender, mut receiver) = mpsc::channel(1);
        let _ = sender.try_send(WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: vec![0],
                range_end: vec![0],
                ..Default::default()
            })),
        });
        let requests = futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx));
        match client.watch(shared.request(requests)).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                // Wait for the created notice so no put can precede the watch.
                match stream.message().await {
                    Ok(Some(_)) => streams.push((stream, sender)),
                    Ok(None) => report.error("watch stream ended before it was created"),
                    Err(status) => report.error(status.message()),
                }
            }
            Err(status) => report.error(status.message()),
        }
    }
    if streams.is_empty() {
        return report;
    }
    let mut tasks = Vec::new();
    for (mut stream, sender) in streams {
        let shared = Arc::clone(shared);
        let sent_us = Arc::clone(&sent_us);
        tasks.push(tokio::spawn(async move {
            let _keep_open = sender;
            let mut part = Report::default();
            let mut received = 0u64;
            while received < events {
                let message = tokio::time::timeout(
                    WATCH_DRAIN_TIMEOUT + shared.options.duration.unwrap_or_default(),
                    stream.message(),
                )
                .await;
                let response = match message {
                    Ok(Ok(Some(r))) => r,
                    Ok(Ok(None)) => break,
                    Ok(Err(status)) => {
                        part.error(status.message());
                        break;
                    }
                    Err(_) => break,
                };
                let now = shared.since_start_us(Instant::now());
                for event in response.events {
                    let Some(kv) = event.kv else { continue };
                    let Some(seq) = kv
                        .value
                        .get(..8)
                        .map(|b| u64::from_be_bytes(b.try_into().expect("eight bytes")))
                    else {
                        continue;
                    };
                    let Some(sent) = sent_us.get(seq as usize) else {
                        continue;
                    };
                    let start_us = sent.load(Ordering::Acquire);
                    part.samples.push(Sample {
                        start_us,
                        latency_us: now.saturating_sub(start_us).min(u64::from(u32::MAX)) as u32,
                    });
                    shared.done.fetch_add(1, Ordering::Relaxed);
                    received += 1;
                }
            }
            for _ in received..events {
                part.error("event not delivered");
            }
            part
        }));
    }
    // The putters: `clients` loops sharing the event numbers.
    let mut putters = Vec::new();
    let put_shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        done: AtomicU64::new(0),
        started: shared.started,
        deadline: None,
        total: events,
        options: shared.options.clone(),
    });
    for client in 0..shared.options.clients.max(1) {
        let mut kv = KvClient::new(channels[client % channels.len()].clone());
        let put_shared = Arc::clone(&put_shared);
        let sent_us = Arc::clone(&sent_us);
        putters.push(tokio::spawn(async move {
            let mut rng = XorShift(0x2545_F491_4F6C_DD1D ^ (client as u64 + 1));
            let mut part = Report::default();
            while let Some(n) = put_shared.claim().await {
                let mut value = n.to_be_bytes().to_vec();
                value.resize(put_shared.options.val_size.max(8), b'v');
                let key = put_shared.key(n, &mut rng);
                sent_us[n as usize]
                    .store(put_shared.since_start_us(Instant::now()), Ordering::Release);
                if let Err(status) = kv
                    .put(put_shared.request(PutRequest {
                        key,
                        value,
                        ..Default::default()
                    }))
                    .await
                {
                    part.error(status.message());
                }
            }
            part
        }));
    }
    for putter in putters {
        if let Ok(part) = putter.await {
            report.errors += part.errors;
            if report.first_error.is_none() {
                report.first_error = part.first_error;
            }
        }
    }
    for task in tasks {
        match task.await {
            Ok(part) => report.merge(part),
            Err(e) => report.error(format!("watcher task failed: {e}")),
        }
    }
    report
}

async fn progress_bar(shared: Arc<Shared>, finished: Arc<AtomicBool>) {
    const BAR_WIDTH: usize = 40;
    let expected = match shared.options.workload {
        Workload::Watch { watchers, events } => Some(watchers as u64 * events),
        _ if shared.options.duration.is_some() => None,
        _ => Some(shared.options.total),
    };
    loop {
        let stop = finished.load(Ordering::Relaxed);
        let done = shared.done.load(Ordering::Relaxed);
        let fraction = match (expected, shared.options.duration) {
            (Some(total), _) => done as f64 / total.max(1) as f64,
            (None, Some(d)) => shared.started.elapsed().as_secs_f64() / d.as_secs_f64().max(1e-9),
            (None, None) => 0.0,
        }
        .clamp(0.0, 1.0);
        let filled = (fraction * BAR_WIDTH as f64) as usize;
        eprint!(
            "\r{}{} {done} ({:.1}%)",
            "█".repeat(filled),
            "░".repeat(BAR_WIDTH - filled),
            fraction * 100.0
        );
        if stop {
            eprintln!();
            return;
        }
        tokio::time::sleep(PROGRESS_INTERVAL).await;
    }
}

/// A key of `size` bytes naming `number`, zero-padded decimal so keys sort
/// as numbers.
pub fn key_bytes(number: u64, size: usize) -> Vec<u8> {
    let digits = number.to_string();
    let mut key = vec![b'0'; size.max(digits.len())];
    let start = key.len() - digits.len();
    key[start..].copy_from_slice(digits.as_bytes());
    key
}

/// A small seeded generator: benchmarks need spread, not cryptography.
struct XorShift(u64);

impl XorShift {
    /// Client `client`'s generator: each client its own sequence.
    fn for_client(client: u64) -> Self {
        Self(0x9E37_79B9_7F4A_7C15 ^ (client + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// `oxetcdctl bench <workload> [flags]`.
#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// The workload.
    #[command(subcommand)]
    pub workload: BenchWorkload,
    /// Concurrent request loops.
    #[arg(long, global = true, default_value_t = 1)]
    pub clients: usize,
    /// gRPC connections shared by the clients.
    #[arg(long, global = true, default_value_t = 1)]
    pub conns: usize,
    /// Requests in all.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub total: u64,
    /// Run for a time instead of a count (e.g. 10s).
    #[arg(long, global = true, value_parser = crate::parse_go_duration)]
    pub duration: Option<Duration>,
    /// Bytes per key.
    #[arg(long, global = true, default_value_t = 8)]
    pub key_size: usize,
    /// Bytes per value.
    #[arg(long, global = true, default_value_t = 8)]
    pub val_size: usize,
    /// Distinct keys.
    #[arg(long, global = true, default_value_t = 1)]
    pub key_space_size: u64,
    /// Walk keys in order.
    #[arg(long, global = true)]
    pub sequential_keys: bool,
    /// Requests per second in all (0: as fast as possible).
    #[arg(long, global = true, default_value_t = 0.0)]
    pub rate: f64,
    /// Write every sample (start_us,latency_us) to this CSV file.
    #[arg(long, global = true)]
    pub csv: Option<std::path::PathBuf>,
    /// Draw latency over time and latency against throughput as SVG, or as
    /// PNG if the file name ends in `.png`.
    #[arg(long, global = true)]
    pub plot: Option<std::path::PathBuf>,
    /// Send put, range and txn-put to the first endpoint's JSON gateway
    /// (HTTP/1.1, one connection per client) instead of over gRPC.
    #[arg(long, global = true)]
    pub gateway: bool,
}

/// The workloads.
#[derive(Subcommand, Clone, Copy, Debug)]
pub enum BenchWorkload {
    /// Puts of `--val-size` bytes.
    Put,
    /// Ranges of one key.
    Range {
        /// `l` for linearizable, `s` for serializable.
        #[arg(long, default_value = "l")]
        consistency: char,
    },
    /// Transactions of `--txn-ops` puts.
    TxnPut {
        /// Puts per transaction.
        #[arg(long, default_value_t = 1)]
        txn_ops: usize,
    },
    /// `--watchers` streams each receiving `--events` puts (samples = watchers × events).
    Watch {
        /// Watch streams.
        #[arg(long, default_value_t = 10)]
        watchers: usize,
        /// Puts made while they watch.
        #[arg(long, default_value_t = 100)]
        events: u64,
    },
    /// Lease keepalive round trips, one lease and stream per client.
    LeaseKeepalive,
}

impl BenchArgs {
    /// The run's options.
    pub fn options(&self) -> Result<Options, String> {
        let workload = match self.workload {
            BenchWorkload::Put => Workload::Put,
            BenchWorkload::Range { consistency } => match consistency {
                'l' => Workload::Range {
                    serializable: false,
                },
                's' => Workload::Range { serializable: true },
                other => return Err(format!("unknown consistency flag \"{other}\"")),
            },
            BenchWorkload::TxnPut { txn_ops } => Workload::TxnPut { ops: txn_ops },
            BenchWorkload::Watch { watchers, events } => Workload::Watch { watchers, events },
            BenchWorkload::LeaseKeepalive => Workload::LeaseKeepalive,
        };
        Ok(Options {
            workload,
            clients: self.clients,
            total: self.total,
            duration: self.duration,
            key_prefix: Vec::new(),
            key_size: self.key_size,
            val_size: self.val_size,
            key_space_size: self.key_space_size,
            sequential_keys: self.sequential_keys,
            rate: (self.rate > 0.0).then_some(self.rate),
            progress: std::io::stderr().is_terminal(),
            token: None,
            gateway: None,
        })
    }

    /// A title for plots.
    pub fn title(&self) -> String {
        let name = match self.workload {
            BenchWorkload::Put => "put".to_owned(),
            BenchWorkload::Range { consistency } => format!("range --consistency {consistency}"),
            BenchWorkload::TxnPut { txn_ops } => format!("txn-put --txn-ops {txn_ops}"),
            BenchWorkload::Watch { watchers, events } => {
                format!("watch --watchers {watchers} --events {events}")
            }
            BenchWorkload::LeaseKeepalive => "lease-keepalive".to_owned(),
        };
        let over = if self.gateway { " --gateway" } else { "" };
        format!(
            "oxetcdctl bench {name} --clients {} --conns {}{over}",
            self.clients, self.conns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_padded_to_size() {
        assert_eq!(key_bytes(42, 8), b"00000042");
        assert_eq!(key_bytes(123_456, 3), b"123456");
    }
}
