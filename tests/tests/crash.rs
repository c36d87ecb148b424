//! Crash safety: concurrent writers, SIGKILL mid-stream, restart on the
//! same data dir. Every acknowledged write must survive with its value and
//! revision, nothing may be applied twice, and revisions must continue.
//!
//! Each writer puts its own keys `crash/w<writer>/<n>` once each, in order,
//! waiting for each acknowledgement. So after a restart: every key has
//! version 1, each writer's keys are a contiguous run that covers all its
//! acknowledged puts plus at most one unacknowledged one, and the store's
//! revision is exactly 1 + the number of keys.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::{Grpc, Server, ServerKind};

/// Concurrent writers (each its own connection).
const WRITERS: usize = 4;

/// Kill rounds: write, kill, restart and verify, then again on top.
const ROUNDS: usize = 2;

/// Acknowledged writes (over all writers) to wait for before the kill.
const ACKS_BEFORE_KILL: usize = 300;

/// Longest to wait for those acknowledgements; if the server is slow the
/// kill happens anyway once every writer has at least one.
const WRITE_PHASE_MAX: Duration = Duration::from_secs(5);

/// Hard bound on puts per writer per round.
const PUTS_PER_WRITER_MAX: usize = 100_000;

/// One acknowledged put.
#[derive(Clone, Debug)]
struct Ack {
    writer: usize,
    n: usize,
    revision: i64,
}

fn key(writer: usize, n: usize) -> Vec<u8> {
    format!("crash/w{writer}/{n:06}").into_bytes()
}

fn value(writer: usize, n: usize) -> Vec<u8> {
    format!("value-{writer}-{n}").into_bytes()
}

#[test]
fn oxetcd_keeps_every_acknowledged_write_across_sigkill() {
    crash_and_verify(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_keeps_every_acknowledged_write_across_sigkill() {
    crash_and_verify(ServerKind::OxetcdSmol);
}

/// The reference: proves the test's expectations hold for etcd.
#[test]
fn etcd_keeps_every_acknowledged_write_across_sigkill() {
    crash_and_verify(ServerKind::Etcd);
}

fn crash_and_verify(kind: ServerKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let mut acks: Vec<Ack> = Vec::new();
    // The next key index each writer starts at in the coming round.
    let mut next = [0usize; WRITERS];
    for round in 0..ROUNDS {
        let mut server = start(kind, &data_dir);
        let new_acks = write_until_killed(&mut server, &next);
        assert!(
            !new_acks.is_empty(),
            "round {round}: no write was acknowledged\n{}",
            server.log_tail()
        );
        acks.extend(new_acks);
        drop(server);
        let server = start(kind, &data_dir);
        let present = verify(&server, &acks, round);
        for (writer, n) in next.iter_mut().enumerate() {
            *n = present.get(&writer).copied().unwrap_or(0);
        }
    }
}

fn start(kind: ServerKind, data_dir: &Path) -> Server {
    Server::start_in(kind, data_dir).unwrap_or_else(|e| panic!("start {}: {e}", kind.name()))
}

/// Runs the writers until enough puts are acknowledged, kills the server
/// with SIGKILL while they are still writing, and returns the acks.
fn write_until_killed(server: &mut Server, first: &[usize; WRITERS]) -> Vec<Ack> {
    let endpoint = server.endpoint().to_owned();
    let acked = AtomicUsize::new(0);
    let writers_with_an_ack = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (endpoint, acked, with_ack) = (&endpoint, &acked, &writers_with_an_ack);
                let start_at = first[writer];
                scope.spawn(move || {
                    let mut client = Grpc::connect(endpoint).expect("connect writer");
                    let mut mine = Vec::new();
                    for n in start_at..start_at + PUTS_PER_WRITER_MAX {
                        let put = PutRequest {
                            key: key(writer, n),
                            value: value(writer, n),
                            ..Default::default()
                        };
                        match client.put(put) {
                            Ok(response) => {
                                let revision = response.header.map_or(0, |h| h.revision);
                                if mine.is_empty() {
                                    with_ack.fetch_add(1, Ordering::Relaxed);
                                }
                                mine.push(Ack {
                                    writer,
                                    n,
                                    revision,
                                });
                                acked.fetch_add(1, Ordering::Relaxed);
                            }
                            // The server is gone (killed): stop this writer.
                            Err(_) => break,
                        }
                    }
                    mine
                })
            })
            .collect();
        let started = Instant::now();
        while started.elapsed() < WRITE_PHASE_MAX * 4 {
            let enough = acked.load(Ordering::Relaxed) >= ACKS_BEFORE_KILL;
            let late = started.elapsed() >= WRITE_PHASE_MAX
                && writers_with_an_ack.load(Ordering::Relaxed) == WRITERS;
            if enough || late {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        server.kill();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("writer panicked"))
            .collect()
    })
}

/// Checks the restarted server against the acks; returns, per writer, the
/// number of its keys present (the next index to write).
fn verify(server: &Server, acks: &[Ack], round: usize) -> BTreeMap<usize, usize> {
    let summary = std::cell::OnceCell::new();
    let context = || {
        format!(
            "round {round}, {}, {}:\n{}",
            server.kind().name(),
            summary.get().map_or("", String::as_str),
            server.log_tail()
        )
    };
    let mut client = Grpc::connect(server.endpoint())
        .unwrap_or_else(|e| panic!("reconnect: {e}\n{}", context()));

    let revisions: BTreeSet<i64> = acks.iter().map(|a| a.revision).collect();
    assert_eq!(
        revisions.len(),
        acks.len(),
        "two acknowledged puts share a revision; {}",
        context()
    );

    let all = client
        .range(RangeRequest {
            key: b"crash/".to_vec(),
            range_end: b"crash0".to_vec(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("range after restart: {e}; {}", context()));
    let store_revision = all.header.as_ref().map_or(0, |h| h.revision);
    let by_key: BTreeMap<Vec<u8>, _> = all.kvs.iter().map(|kv| (kv.key.clone(), kv)).collect();
    let _ = summary.set(format!(
        "after restart: store revision {store_revision}, {} keys; {} acks, highest revision {}",
        all.kvs.len(),
        acks.len(),
        acks.iter().map(|a| a.revision).max().unwrap_or(0)
    ));

    for ack in acks {
        let k = key(ack.writer, ack.n);
        let kv = by_key.get(&k).unwrap_or_else(|| {
            let later = visible_after_a_write(&mut client, &k);
            panic!(
                "acknowledged put {} (revision {}) is missing from the first read after restart{}; {}",
                String::from_utf8_lossy(&k),
                ack.revision,
                if later {
                    " (it appears after one more write: the restarted server served a \
                     linearizable read before applying its log)"
                } else {
                    " (still missing after one more write: lost)"
                },
                context()
            )
        });
        assert_eq!(
            kv.value,
            value(ack.writer, ack.n),
            "value of {:?}; {}",
            String::from_utf8_lossy(&k),
            context()
        );
        assert_eq!(
            (kv.mod_revision, kv.create_revision, kv.version),
            (ack.revision, ack.revision, 1),
            "mod/create revision and version of {}; {}",
            String::from_utf8_lossy(&k),
            context()
        );
    }

    let mut present = BTreeMap::new();
    let mut acked_per_writer: BTreeMap<usize, usize> = BTreeMap::new();
    for ack in acks {
        *acked_per_writer.entry(ack.writer).or_default() += 1;
    }
    for writer in 0..WRITERS {
        let prefix = format!("crash/w{writer}/");
        let ns: Vec<usize> = by_key
            .keys()
            .filter_map(|k| {
                std::str::from_utf8(k)
                    .ok()?
                    .strip_prefix(&prefix)?
                    .parse()
                    .ok()
            })
            .collect();
        let count = ns.len();
        assert!(
            ns.iter().enumerate().all(|(i, &n)| i == n),
            "writer {writer}'s keys are not a contiguous run from 0: {ns:?}; {}",
            context()
        );
        let acked = acked_per_writer.get(&writer).copied().unwrap_or(0);
        // Each writer's keys: all acknowledged ones, plus at most one per
        // round whose acknowledgement the kill cut off.
        assert!(
            count >= acked && count <= acked + round + 1,
            "writer {writer}: {count} keys present, {acked} acknowledged; {}",
            context()
        );
        present.insert(writer, count);
    }

    for kv in &all.kvs {
        assert_eq!(
            kv.version,
            1,
            "{} applied twice (version {}); {}",
            String::from_utf8_lossy(&kv.key),
            kv.version,
            context()
        );
    }
    let applied = all.kvs.len() as i64;
    // Each earlier round's check wrote a marker and deleted it: two revisions.
    let markers = 2 * round as i64;
    assert_eq!(
        store_revision,
        1 + applied + markers,
        "store revision {store_revision} != 1 + {applied} applied puts + {markers} marker writes \
         (a put applied twice, or a revision lost); {}",
        context()
    );
    let highest_ack = acks.iter().map(|a| a.revision).max().unwrap_or(0);
    let fresh = client
        .put(PutRequest {
            key: b"after-restart".to_vec(),
            value: round.to_string().into_bytes(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("put after restart: {e}; {}", context()));
    let fresh_revision = fresh.header.map_or(0, |h| h.revision);
    assert!(
        fresh_revision > highest_ack && fresh_revision == store_revision + 1,
        "put after restart got revision {fresh_revision}; highest acknowledged {highest_ack}, store at {store_revision}; {}",
        context()
    );
    // The marker is outside crash/; deleting it keeps later rounds' key
    // counts simple (its two revisions are counted as `markers`).
    let deleted = client
        .delete_range(oxetcd_proto::etcdserverpb::DeleteRangeRequest {
            key: b"after-restart".to_vec(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("delete after restart: {e}; {}", context()));
    assert_eq!(deleted.deleted, 1, "{}", context());
    present
}

/// Whether `key` shows up once the server has committed one more write.
fn visible_after_a_write(client: &mut Grpc, key: &[u8]) -> bool {
    let probe = PutRequest {
        key: b"probe".to_vec(),
        value: b"1".to_vec(),
        ..Default::default()
    };
    if client.put(probe).is_err() {
        return false;
    }
    client
        .range(RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        })
        .is_ok_and(|r| r.count == 1)
}
