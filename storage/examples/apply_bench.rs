//! Apply throughput of the redb MVCC backend: 100,000 puts of random keys
//! (key space 100,000, 256-byte values) through `mvcc::apply`, committed in
//! batches as the node's apply step does (`set_meta` + `commit` per batch).
//!
//! `cargo run --release -p oxetcd-storage --example apply_bench`

use std::time::Instant;

use oxetcd_core::mvcc;
use oxetcd_core::storage::{KvRead, KvStore, KvWrite};
use oxetcd_core::Write;
use oxetcd_proto::etcdserverpb::PutRequest;

/// Puts applied per run.
const PUTS: u64 = 100_000;
/// Distinct keys the puts draw from.
const KEY_SPACE: u64 = 100_000;
/// Bytes per value.
const VALUE_BYTES: usize = 256;

/// Runs per batch size; the machine is shared, so the best run is the
/// figure that least measures the neighbours.
const RUNS: usize = 3;

fn main() {
    for batch in [16, 256, 4096] {
        let written_before = bytes_written();
        let runs: Vec<f64> = (0..RUNS).map(|_| run(batch)).collect();
        let written = bytes_written().zip(written_before).map(|(b, a)| b - a);
        let best = runs.iter().copied().fold(f64::INFINITY, f64::min);
        let all: Vec<String> = runs.iter().map(|us| format!("{us:.2}")).collect();
        let per_put = written.map_or("?".to_string(), |w| {
            format!("{:.0}", w as f64 / (RUNS as u64 * PUTS) as f64)
        });
        println!(
            "batch {batch:>5}: {best:>6.2} µs/put (best of {RUNS}: {}), {per_put} bytes written/put",
            all.join(", ")
        );
    }
}

/// Applies [`PUTS`] puts in batches of `batch` on a fresh store; returns
/// microseconds per put.
fn run(batch: u64) -> f64 {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (_log, kv) = oxetcd_storage::open(dir.path()).expect("open storage");
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let value = vec![b'v'; VALUE_BYTES];
    let mut meta = kv.read().and_then(|r| r.meta()).expect("meta");
    let mut applied = 0;
    let started = Instant::now();
    while applied < PUTS {
        let mut txn = kv.write().expect("write");
        for _ in 0..batch.min(PUTS - applied) {
            let key = format!("key/{:08}", next(&mut rng) % KEY_SPACE);
            let request = Write::Put(PutRequest {
                key: key.into_bytes(),
                value: value.clone(),
                ..PutRequest::default()
            });
            mvcc::apply(&mut txn, &mut meta, request).expect("apply");
            applied += 1;
            meta.applied_index += 1;
        }
        txn.set_meta(&meta).expect("set meta");
        txn.commit().expect("commit");
    }
    started.elapsed().as_secs_f64() * 1e6 / PUTS as f64
}

/// Bytes this process has handed to write syscalls so far (Linux).
fn bytes_written() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .and_then(|n| n.trim().parse().ok())
}

/// xorshift64*: deterministic and dependency-free.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}
