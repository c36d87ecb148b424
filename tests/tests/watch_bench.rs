//! Watch and lease figures, oxetcd beside Debian's etcd in the same run.
//! Ignored by default; run in release:
//!
//! ```text
//! cargo build --release --bins
//! cargo test --release -p oxetcd-tests --test watch_bench -- --ignored --nocapture
//! ```
//!
//! Prints, per server: watch events delivered per second with 1, 100 and
//! 10,000 watchers of one prefix under a fixed write load, with the server
//! process's CPU time (user + system) per event, which depends less on
//! what else the machine runs, the CPU time of this test process (the
//! client: watchers and writers) per event, and responses per event (the
//! fewer, the less a client spends per event); resident memory per idle
//! watcher;
//! keep-alive round trips per second.
//!
//! `BENCH_SERVERS=oxetcd` (or `etcd`) measures one server only, and
//! `BENCH_WATCHERS=10000` (a comma-separated list) only those watcher
//! counts, e.g. while profiling.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::lease_client::LeaseClient;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, PutRequest, WatchCreateRequest, WatchRequest,
};
use oxetcd_tests::{Server, ServerKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};

/// How long each measurement writes.
const MEASURE: Duration = Duration::from_secs(3);
/// Concurrent writers (each waits for its put before the next).
const WRITERS: usize = 16;
/// Watchers per stream.
const WATCHERS_PER_STREAM: usize = 100;

#[test]
#[ignore]
fn watch_and_lease_figures() {
    let only = std::env::var("BENCH_SERVERS").ok();
    for kind in [ServerKind::Oxetcd, ServerKind::Etcd] {
        if only
            .as_deref()
            .is_some_and(|only| !only.split(',').any(|n| n == kind.name()))
        {
            continue;
        }
        let server = Server::start(kind).expect("server starts");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let endpoint = server.endpoint().to_owned();
        let pid = pid_of(&server);
        runtime.block_on(async {
            let channel = Endpoint::from_shared(endpoint.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
            let only_memory = std::env::var_os("BENCH_MEMORY_ONLY").is_some();
            // Memory first, on the fresh server: RSS only shows what the
            // watchers take before the allocator has memory from earlier
            // phases to reuse.
            let before = rss_kib(pid);
            let (senders, _keep) = idle_watchers(&channel, 10_000).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let after = rss_kib(pid);
            eprintln!(
                "{:<7} memory per idle watcher: {:.0} bytes ({} KiB for 10,000; pid {pid}, RSS {before} -> {after} KiB)",
                kind.name(),
                (after.saturating_sub(before) * 1024) as f64 / 10_000.0,
                after.saturating_sub(before)
            );
            drop(senders);
            let counts = std::env::var("BENCH_WATCHERS").ok();
            for watchers in [1, 100, 10_000] {
                if only_memory {
                    break;
                }
                if counts
                    .as_deref()
                    .is_some_and(|c| !c.split(',').any(|n| n == watchers.to_string()))
                {
                    continue;
                }
                let cpu_before = cpu_seconds(pid);
                let client_before = cpu_seconds(std::process::id());
                let (events, writes, delivered, responses) =
                    events_per_second(&channel, watchers).await;
                let cpu = cpu_seconds(pid) - cpu_before;
                let client = cpu_seconds(std::process::id()) - client_before;
                eprintln!(
                    "{:<7} {watchers:>6} watchers: {events:>10.0} events/s delivered ({writes:.0} writes/s; server CPU {:.2} us/event; client CPU {:.2} us/event; {:.3} responses/event)",
                    kind.name(),
                    cpu * 1e6 / delivered.max(1) as f64,
                    client * 1e6 / delivered.max(1) as f64,
                    responses as f64 / delivered.max(1) as f64,
                );
            }
            eprintln!(
                "{:<7} keep-alive round trips: {:.0}/s on one stream, {:.0}/s on 16 streams",
                kind.name(),
                keep_alives_per_second(&channel, 1).await,
                keep_alives_per_second(&channel, 16).await
            );
        });
    }
}

/// Events per second, writes per second, events delivered, and the
/// responses that carried them.
async fn events_per_second(channel: &Channel, watchers: usize) -> (f64, f64, u64, u64) {
    let prefix = format!("bench/{watchers}/");
    let received = Arc::new(AtomicU64::new(0));
    let responses_with_events = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    let mut created = Vec::new();
    for first in (0..watchers).step_by(WATCHERS_PER_STREAM) {
        let (sender, receiver) = unbounded_channel();
        let count = (watchers - first).min(WATCHERS_PER_STREAM);
        for _ in 0..count {
            let _ = sender.send(create(&prefix));
        }
        let mut client = WatchClient::new(channel.clone());
        let mut responses = client.watch(Requests(receiver)).await.unwrap().into_inner();
        let received = received.clone();
        let with_events = responses_with_events.clone();
        let (ready, is_ready) = tokio::sync::oneshot::channel();
        created.push(is_ready);
        tokio::spawn(async move {
            let mut ready = Some(ready);
            let mut pending = count;
            while let Ok(Some(response)) = responses.message().await {
                if response.created {
                    pending -= 1;
                    if pending == 0 {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                    }
                }
                if !response.events.is_empty() {
                    with_events.fetch_add(1, Ordering::Relaxed);
                }
                received.fetch_add(response.events.len() as u64, Ordering::Relaxed);
            }
        });
        senders.push(sender);
    }
    for ready in created {
        let _ = ready.await;
    }
    let writes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut kv = KvClient::new(channel.clone());
        let prefix = prefix.clone();
        let writes = writes.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while started.elapsed() < MEASURE {
                let put = PutRequest {
                    key: format!("{prefix}{w}/{n}").into_bytes(),
                    value: vec![b'v'; 64],
                    ..Default::default()
                };
                if kv.put(put).await.is_ok() {
                    writes.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let expected = writes.load(Ordering::Relaxed) * watchers as u64;
    // Let delivery finish (bounded), then measure from the first write.
    while received.load(Ordering::Relaxed) < expected && started.elapsed() < MEASURE * 10 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(senders);
    (
        received.load(Ordering::Relaxed) as f64 / elapsed,
        writes.load(Ordering::Relaxed) as f64 / MEASURE.as_secs_f64(),
        received.load(Ordering::Relaxed),
        responses_with_events.load(Ordering::Relaxed),
    )
}

async fn idle_watchers(
    channel: &Channel,
    watchers: usize,
) -> (
    Vec<UnboundedSender<WatchRequest>>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let mut senders = Vec::new();
    let mut readers = Vec::new();
    for first in (0..watchers).step_by(WATCHERS_PER_STREAM) {
        let (sender, receiver) = unbounded_channel();
        let count = (watchers - first).min(WATCHERS_PER_STREAM);
        for i in 0..count {
            let _ = sender.send(create(&format!("idle/{first}/{i}")));
        }
        let mut client = WatchClient::new(channel.clone());
        let mut responses = client.watch(Requests(receiver)).await.unwrap().into_inner();
        let (ready, is_ready) = tokio::sync::oneshot::channel();
        readers.push(tokio::spawn(async move {
            let mut ready = Some(ready);
            let mut pending = count;
            while let Ok(Some(_)) = responses.message().await {
                pending = pending.saturating_sub(1);
                if pending == 0 {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
            }
        }));
        let _ = is_ready.await;
        senders.push(sender);
    }
    (senders, readers)
}

async fn keep_alives_per_second(channel: &Channel, streams: usize) -> f64 {
    let mut lease = LeaseClient::new(channel.clone());
    let id = lease
        .lease_grant(LeaseGrantRequest { ttl: 60, id: 0 })
        .await
        .unwrap()
        .into_inner()
        .id;
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let mut lease = LeaseClient::new(channel.clone());
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let (sender, receiver) = unbounded_channel();
            let _ = sender.send(LeaseKeepAliveRequest { id });
            let mut responses = lease
                .lease_keep_alive(Requests(receiver))
                .await
                .unwrap()
                .into_inner();
            while let Ok(Some(_)) = responses.message().await {
                done.fetch_add(1, Ordering::Relaxed);
                if started.elapsed() >= MEASURE {
                    break;
                }
                let _ = sender.send(LeaseKeepAliveRequest { id });
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn create(prefix: &str) -> WatchRequest {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            ..Default::default()
        })),
    }
}

/// The server's process: the one whose command line names its data dir.
fn pid_of(server: &Server) -> u32 {
    let dir = server.data_dir().to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&dir) {
            return pid;
        }
    }
    panic!("no process for {dir}");
}

/// The process's user plus system CPU time so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // utime and stime are fields 14 and 15 of the line, in clock ticks
    // (100 a second on Linux).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A channel's receiving end as the request stream of a call.
struct Requests<T>(UnboundedReceiver<T>);

impl<T> Stream for Requests<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
