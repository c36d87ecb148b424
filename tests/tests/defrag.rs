//! `Maintenance.Defragment` online, on both binaries: while a member
//! defragments a backend with most of its space freed by a compaction,
//! writers keep putting and readers keep reading, with no request failing
//! and puts completing while the defragmentation runs; the file shrinks
//! and every key holds its last value afterwards (and after a restart).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::{CompactionRequest, PutRequest, RangeRequest};
use oxetcd_tests::{Grpc, Server, ServerKind};

/// Keys of the loaded data, each written [`ROUNDS`] times.
const KEYS: usize = 1000;
const ROUNDS: usize = 3;
const VALUE_BYTES: usize = 16 * 1024;
/// Writers and readers beside the defragmentation.
const WRITERS: usize = 4;
/// No writer or reader runs longer than this.
const LOAD_DEADLINE: Duration = Duration::from_secs(120);

fn value(key: usize, round: usize) -> Vec<u8> {
    vec![b'a' + ((key + round) % 26) as u8; VALUE_BYTES]
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:04}").into_bytes()
}

fn defragments_under_load(kind: ServerKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_in(kind, dir.path()).expect("server starts");
    let endpoint = format!("http://{}", server.address());
    let mut client = Grpc::connect(&endpoint).expect("connect");
    let mut revision = 0;
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            let put = PutRequest {
                key: key(i),
                value: value(i, round),
                ..Default::default()
            };
            revision = client
                .put(put)
                .expect("load")
                .header
                .expect("header")
                .revision;
        }
    }
    client
        .compact(CompactionRequest {
            revision,
            physical: true,
        })
        .expect("compact");
    let before = client.status().expect("status").db_size;

    let stop = Arc::new(AtomicBool::new(false));
    let puts = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (stop, puts, endpoint) = (stop.clone(), puts.clone(), endpoint.clone());
            thread::spawn(move || {
                let mut client = Grpc::connect(&endpoint).expect("connect");
                let started = Instant::now();
                let mut failures = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) && started.elapsed() < LOAD_DEADLINE {
                    let put = PutRequest {
                        key: format!("load-{w}-{}", n % 50).into_bytes(),
                        value: n.to_le_bytes().to_vec(),
                        ..Default::default()
                    };
                    match client.put(put) {
                        Ok(_) => {
                            puts.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(e) => failures.push(format!("put: {e:?}")),
                    }
                    let read = RangeRequest {
                        key: key((n as usize * 7) % KEYS),
                        ..Default::default()
                    };
                    if let Err(e) = client.range(read) {
                        failures.push(format!("range: {e:?}"));
                    }
                    n += 1;
                }
                failures
            })
        })
        .collect();

    // Let the load start, then defragment.
    while puts.load(Ordering::Acquire) < 20 {
        thread::sleep(Duration::from_millis(5));
    }
    let before_defrag = puts.load(Ordering::Acquire);
    let started = Instant::now();
    client.defragment().expect("defragment");
    let took = started.elapsed();
    let during = puts.load(Ordering::Acquire) - before_defrag;
    thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Release);
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    assert!(failures.is_empty(), "{kind:?}: {failures:?}");
    assert!(
        during > 0,
        "{kind:?}: no put completed during the {took:?} defragmentation"
    );
    let after = client.status().expect("status").db_size;
    assert!(
        after < before / 2,
        "{kind:?}: the backend went from {before} to {after} bytes"
    );
    eprintln!(
        "{kind:?}: defragmented {before} -> {after} bytes in {took:?}, {during} puts meanwhile"
    );

    let check = |client: &mut Grpc| {
        for i in (0..KEYS).step_by(97) {
            let got = client
                .range(RangeRequest {
                    key: key(i),
                    ..Default::default()
                })
                .expect("range");
            assert_eq!(got.kvs[0].value, value(i, ROUNDS - 1), "{kind:?}: key {i}");
        }
    };
    check(&mut client);
    drop(client);
    drop(server);
    let server = Server::start_in(kind, dir.path()).expect("server restarts");
    let mut client = Grpc::connect(&format!("http://{}", server.address())).expect("connect");
    check(&mut client);
}

#[test]
fn oxetcd_defragments_online() {
    defragments_under_load(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_defragments_online() {
    defragments_under_load(ServerKind::OxetcdSmol);
}
