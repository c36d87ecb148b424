//! A 500 MB result read by `KV.RangeStream` costs the member memory of
//! the order of a chunk, not of the result: while the stream runs, the
//! member's resident memory never grows more than [`GROWTH_BOUND_MIB`]
//! over what it was before (chunks aim at `--max-request-bytes`, 1.5 MiB
//! by default; the bound leaves room for a few chunks in flight, their
//! encodings and HTTP/2's buffers). The unary `Range` of a smaller result
//! is measured alongside, to show what the bound saves.
//!
//! The data is written first and read while the backend's cache holds it,
//! so growth during the read is the read path's own. Both binaries.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::{Server, ServerKind};
use tonic::transport::Endpoint;

/// Values of 1 MiB, 500 of them.
const VALUE_BYTES: usize = 1 << 20;
const KEYS: usize = 500;

/// What the stream may add to the member's resident memory.
const GROWTH_BOUND_MIB: u64 = 64;

/// The member's resident memory now, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Samples `pid`'s resident memory every 10 ms until stopped; the highest.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
        let (stopped, highest) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                highest.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self { stop, peak, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak.load(Ordering::Relaxed)
    }
}

fn check(kind: ServerKind) {
    let server = Server::start_flags(kind, &["--quota-backend-bytes=4294967296"])
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = server.pid().expect("a running server");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let channel = Endpoint::from_shared(server.endpoint().to_owned())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let mut kv = KvClient::new(channel).max_decoding_message_size(usize::MAX);
        for i in 0..KEYS {
            let put = PutRequest {
                key: format!("big/{i:04}").into_bytes(),
                value: vec![b'v' ^ (i as u8); VALUE_BYTES],
                ..Default::default()
            };
            kv.put(put).await.expect("put");
        }
        let all = RangeRequest {
            key: b"big/".to_vec(),
            range_end: b"big0".to_vec(),
            ..Default::default()
        };

        let before = rss_kib(pid);
        let sampler = Sampler::start(pid);
        let mut stream = kv
            .range_stream(all.clone())
            .await
            .expect("range stream")
            .into_inner();
        let (mut keys, mut bytes) = (0usize, 0usize);
        // Bounded: 500 values come in at most 500 chunks.
        for _ in 0..=KEYS {
            let Some(chunk) = stream.message().await.expect("a chunk") else {
                break;
            };
            for kv in chunk.range_response.unwrap_or_default().kvs {
                keys += 1;
                bytes += kv.value.len();
            }
        }
        let peak = sampler.stop();
        assert_eq!((keys, bytes), (KEYS, KEYS * VALUE_BYTES), "{}", kind.name());
        let growth_mib = peak.saturating_sub(before) / 1024;
        println!(
            "{}: RangeStream of {} MB: resident {} MiB before, peak growth {growth_mib} MiB",
            kind.name(),
            KEYS * VALUE_BYTES / 1_000_000,
            before / 1024,
        );
        assert!(
            growth_mib <= GROWTH_BOUND_MIB,
            "{}: the stream grew the member by {growth_mib} MiB",
            kind.name()
        );

        // The unary Range of a tenth of it, for the record: it holds the
        // result (and its encoding) at once.
        let before = rss_kib(pid);
        let sampler = Sampler::start(pid);
        let tenth = RangeRequest {
            limit: (KEYS / 10) as i64,
            ..all
        };
        let response = kv.range(tenth).await.expect("range").into_inner();
        let peak = sampler.stop();
        assert_eq!(response.kvs.len(), KEYS / 10);
        println!(
            "{}: Range of {} MB: peak growth {} MiB",
            kind.name(),
            KEYS / 10 * VALUE_BYTES / 1_000_000,
            peak.saturating_sub(before) / 1024
        );
    });
}

#[test]
fn a_500_mb_range_stream_stays_within_its_memory_bound_on_oxetcd() {
    check(ServerKind::Oxetcd);
}

#[test]
fn a_500_mb_range_stream_stays_within_its_memory_bound_on_oxetcd_smol() {
    check(ServerKind::OxetcdSmol);
}
