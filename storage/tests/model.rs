//! Property tests: the redb stores against core's in-memory ones, run on the
//! same random operation sequences. The in-memory stores are the model; any
//! observable difference (scan, versions, changes, meta, log state and
//! entries, errors) fails the test, before and after a reopen.

use std::ops::ControlFlow;

use oxetcd_core::memory::{MemoryKv, MemoryLog};
use oxetcd_core::storage::{
    KeyVersion, KvMeta, KvRead, KvStore, KvWrite, LogStore, RangeEnd, Revision,
};
use oxetcd_storage::{RedbKv, RedbLog, WalLog, WalOptions};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use raft_proto::eraftpb::{Entry, HardState};

/// A small key space with prefixes and the extremes, so ranges and
/// neighbouring keys are exercised.
const KEYS: [&[u8]; 6] = [b"", b"a", b"a\0", b"ab", b"b", b"\xff"];

fn key(index: u8) -> &'static [u8] {
    KEYS[usize::from(index) % KEYS.len()]
}

#[derive(Clone, Debug)]
enum KvOp {
    /// Sub revisions are `key + 6 * n`, so a revision always belongs to the
    /// same key, as in a real store.
    Put {
        key: u8,
        main: u8,
        n: u8,
        tombstone: bool,
        value: u8,
        lease: i8,
    },
    Remove {
        key: u8,
        main: u8,
        n: u8,
    },
    SetMeta {
        applied_index: u8,
        revision: u8,
    },
    Commit,
    Abort,
    Scan {
        start: u8,
        end: Option<u8>,
        at: i8,
    },
    Versions {
        key: u8,
    },
    Changes {
        from: i8,
        to: i8,
    },
    /// Compaction as mvcc does it, inside the write transaction: for each
    /// key, removes the versions older than its newest one at or before
    /// `at`, and that one too if it is a tombstone.
    Compact {
        at: u8,
    },
    /// Takes a read snapshot of both stores and keeps it; every later query
    /// is also asked of every kept snapshot, which must not change.
    Snapshot,
    /// Drops the oldest kept snapshot.
    DropSnapshot,
}

/// Snapshots kept at once by a test case.
const SNAPSHOTS_MAX: usize = 4;

impl Arbitrary for KvOp {
    fn arbitrary(g: &mut Gen) -> Self {
        let small = |g: &mut Gen, n: u8| u8::arbitrary(g) % n;
        match small(g, 20) {
            0..=5 => KvOp::Put {
                key: small(g, 6),
                main: small(g, 12),
                n: small(g, 2),
                tombstone: small(g, 4) == 0,
                value: u8::arbitrary(g),
                lease: i8::arbitrary(g),
            },
            6 | 7 => KvOp::Remove {
                key: small(g, 6),
                main: small(g, 12),
                n: small(g, 2),
            },
            8 => KvOp::SetMeta {
                applied_index: u8::arbitrary(g),
                revision: small(g, 12),
            },
            9 | 10 => KvOp::Commit,
            11 => KvOp::Abort,
            12 | 13 => KvOp::Scan {
                start: small(g, 6),
                end: Option::<u8>::arbitrary(g).map(|e| e % 6),
                at: (i8::arbitrary(g) % 14),
            },
            14 => KvOp::Versions { key: small(g, 6) },
            16 => KvOp::Compact { at: small(g, 13) },
            17 | 18 => KvOp::Snapshot,
            19 => KvOp::DropSnapshot,
            _ => KvOp::Changes {
                from: i8::arbitrary(g) % 14,
                to: i8::arbitrary(g) % 14,
            },
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(std::iter::empty())
    }
}

fn revision(key: u8, main: u8, n: u8) -> Revision {
    Revision {
        main: i64::from(main),
        sub: i64::from(key % 6 + 6 * n),
    }
}

fn collect(result: &mut Vec<KeyVersion>) -> impl FnMut(KeyVersion) -> ControlFlow<()> + '_ {
    |v| {
        result.push(v);
        ControlFlow::Continue(())
    }
}

/// Everything observable through a read view, for one query.
fn query(view: &impl KvRead, op: &KvOp) -> Option<Vec<KeyVersion>> {
    let mut out = Vec::new();
    match *op {
        KvOp::Scan { start, end, at } => {
            let end = end.map_or(RangeEnd::Unbounded, |e| RangeEnd::Before(key(e)));
            view.scan(key(start), end, i64::from(at), &mut collect(&mut out))
                .unwrap();
        }
        KvOp::Versions { key: k } => view.versions(key(k), &mut collect(&mut out)).unwrap(),
        KvOp::Changes { from, to } => view
            .changes(i64::from(from), i64::from(to), &mut collect(&mut out))
            .unwrap(),
        _ => return None,
    }
    Some(out)
}

/// The whole history, by every means of reading it.
fn everything(view: &impl KvRead) -> (KvMeta, Vec<KeyVersion>, Vec<Vec<KeyVersion>>) {
    let mut changes = Vec::new();
    view.changes(i64::MIN, i64::MAX, &mut collect(&mut changes))
        .unwrap();
    let scans = (-1..14)
        .map(|at| {
            query(
                view,
                &KvOp::Scan {
                    start: 0,
                    end: None,
                    at,
                },
            )
            .unwrap()
        })
        .collect();
    (view.meta().unwrap(), changes, scans)
}

/// The versions compaction at `at` removes, as `mvcc` computes them.
fn compaction_victims(view: &impl KvRead, at: i64) -> Vec<(Vec<u8>, Revision)> {
    let mut keys = Vec::new();
    view.scan(b"", RangeEnd::Unbounded, at, &mut |version| {
        keys.push(version.key);
        ControlFlow::Continue(())
    })
    .unwrap();
    let mut doomed = Vec::new();
    for key in keys {
        let mut kept = false;
        view.versions(&key, &mut |version| {
            if version.mod_revision.main <= at {
                if kept || version.tombstone {
                    doomed.push((key.clone(), version.mod_revision));
                }
                kept = true;
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    }
    doomed
}

fn kv_matches_model(ops: Vec<KvOp>) -> TestResult {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let redb = RedbKv::open(&path).unwrap();
    let model = MemoryKv::default();
    let mut snapshots = std::collections::VecDeque::new();
    let mut txns = Some((redb.write().unwrap(), model.write().unwrap()));
    for op in &ops {
        let (redb_txn, model_txn) =
            txns.get_or_insert_with(|| (redb.write().unwrap(), model.write().unwrap()));
        match *op {
            KvOp::Put {
                key: k,
                main,
                n,
                tombstone,
                value,
                lease,
            } => {
                let version = KeyVersion {
                    key: key(k).to_vec(),
                    mod_revision: revision(k, main, n),
                    create_revision: if tombstone { 0 } else { i64::from(main) },
                    version: if tombstone { 0 } else { i64::from(n) + 1 },
                    lease: if tombstone { 0 } else { i64::from(lease) },
                    value: if tombstone {
                        Vec::new()
                    } else {
                        vec![value; usize::from(value % 5)]
                    },
                    tombstone,
                };
                redb_txn.put_version(&version).unwrap();
                model_txn.put_version(&version).unwrap();
            }
            KvOp::Remove { key: k, main, n } => {
                redb_txn
                    .remove_version(key(k), revision(k, main, n))
                    .unwrap();
                model_txn
                    .remove_version(key(k), revision(k, main, n))
                    .unwrap();
            }
            KvOp::SetMeta {
                applied_index,
                revision,
            } => {
                let meta = KvMeta {
                    applied_index: u64::from(applied_index),
                    applied_term: 1,
                    revision: i64::from(revision),
                    compact_revision: 0,
                };
                redb_txn.set_meta(&meta).unwrap();
                model_txn.set_meta(&meta).unwrap();
            }
            KvOp::Commit => {
                let (redb_txn, model_txn) = txns.take().unwrap();
                redb_txn.commit().unwrap();
                model_txn.commit().unwrap();
            }
            KvOp::Abort => txns = None,
            KvOp::Compact { at } => {
                let doomed = compaction_victims(&*model_txn, i64::from(at));
                if compaction_victims(&*redb_txn, i64::from(at)) != doomed {
                    return TestResult::error(format!("compaction victims differ at {op:?}"));
                }
                for (key, revision) in doomed {
                    redb_txn.remove_version(&key, revision).unwrap();
                    model_txn.remove_version(&key, revision).unwrap();
                }
            }
            KvOp::Snapshot => {
                if snapshots.len() == SNAPSHOTS_MAX {
                    snapshots.pop_front();
                }
                snapshots.push_back((redb.read().unwrap(), model.read().unwrap()));
            }
            KvOp::DropSnapshot => {
                snapshots.pop_front();
            }
            _ => {
                // Inside the write transaction (its own writes) and in a
                // snapshot of the committed state.
                let (redb_txn, model_txn) = txns.as_ref().unwrap();
                if query(redb_txn, op) != query(model_txn, op) {
                    return TestResult::error(format!("write view differs at {op:?}"));
                }
                if query(&redb.read().unwrap(), op) != query(&model.read().unwrap(), op) {
                    return TestResult::error(format!("read view differs at {op:?}"));
                }
                for (age, (redb_snapshot, model_snapshot)) in snapshots.iter().enumerate() {
                    if query(redb_snapshot, op) != query(model_snapshot, op) {
                        return TestResult::error(format!("kept snapshot {age} differs at {op:?}"));
                    }
                }
            }
        }
    }
    if let Some((redb_txn, model_txn)) = txns.take() {
        redb_txn.commit().unwrap();
        model_txn.commit().unwrap();
    }
    let expected = everything(&model.read().unwrap());
    if everything(&redb.read().unwrap()) != expected {
        return TestResult::error("final state differs");
    }
    for (age, (redb_snapshot, model_snapshot)) in snapshots.iter().enumerate() {
        if everything(redb_snapshot) != everything(model_snapshot) {
            return TestResult::error(format!("kept snapshot {age} differs at the end"));
        }
    }
    drop(snapshots);
    drop(redb);
    let reopened = RedbKv::open(&path).unwrap();
    if everything(&reopened.read().unwrap()) != expected {
        return TestResult::error("state differs after reopen");
    }
    TestResult::passed()
}

#[test]
fn redb_kv_matches_memory_kv() {
    QuickCheck::new()
        .tests(150)
        .quickcheck(kv_matches_model as fn(Vec<KvOp>) -> TestResult);
}

#[derive(Clone, Debug)]
enum LogOp {
    /// Entries `[index, index + len)` at `term`.
    Append {
        index: u8,
        len: u8,
        term: u8,
        hard_state: Option<u8>,
    },
    Compact {
        index: u8,
    },
    InstallSnapshot {
        index: u8,
        term: u8,
    },
    Entries {
        low: u8,
        high: u8,
    },
}

impl Arbitrary for LogOp {
    fn arbitrary(g: &mut Gen) -> Self {
        let small = |g: &mut Gen, n: u8| u8::arbitrary(g) % n;
        match small(g, 6) {
            0..=2 => LogOp::Append {
                index: small(g, 24) + 1,
                len: small(g, 4),
                term: small(g, 5),
                hard_state: Option::arbitrary(g),
            },
            3 => LogOp::Compact {
                index: small(g, 26),
            },
            4 => LogOp::InstallSnapshot {
                index: small(g, 26),
                term: small(g, 5),
            },
            _ => LogOp::Entries {
                low: small(g, 26),
                high: small(g, 26),
            },
        }
    }
}

fn log_matches_model(ops: Vec<LogOp>) -> TestResult {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.redb");
    store_matches_model(ops, || RedbLog::open(&path).unwrap())
}

/// Small segments, so that the operations rotate and release segments.
const SMALL_SEGMENTS: WalOptions = WalOptions {
    segment_bytes: 512,
    reserve_bytes: 0,
};

fn wal_matches_model(ops: Vec<LogOp>) -> TestResult {
    let dir = tempfile::tempdir().unwrap();
    store_matches_model(ops, || {
        WalLog::open_with(dir.path(), SMALL_SEGMENTS).unwrap()
    })
}

/// Runs `ops` on the store `open` opens and on the memory log, comparing
/// every answer, then reopens the store and compares again.
fn store_matches_model<L: LogStore>(ops: Vec<LogOp>, open: impl Fn() -> L) -> TestResult {
    let redb = open();
    let model = MemoryLog::default();
    for op in &ops {
        match *op {
            LogOp::Append {
                index,
                len,
                term,
                hard_state,
            } => {
                let entries: Vec<Entry> = (0..u64::from(len))
                    .map(|i| Entry {
                        index: u64::from(index) + i,
                        term: u64::from(term),
                        data: vec![term; usize::from(index % 3)].into(),
                        ..Entry::default()
                    })
                    .collect();
                let hard_state = hard_state.map(|commit| HardState {
                    term: u64::from(term),
                    commit: u64::from(commit),
                    ..HardState::default()
                });
                let a = redb.append(&entries, hard_state.as_ref()).is_ok();
                let b = model.append(&entries, hard_state.as_ref()).is_ok();
                if a != b {
                    return TestResult::error(format!(
                        "append result differs at {op:?}: redb ok {a}"
                    ));
                }
            }
            LogOp::Compact { index } => {
                redb.compact(u64::from(index)).unwrap();
                model.compact(u64::from(index)).unwrap();
            }
            LogOp::InstallSnapshot { index, term } => {
                let (index, term) = (u64::from(index), u64::from(term));
                redb.install_snapshot(index, term).unwrap();
                model.install_snapshot(index, term).unwrap();
            }
            LogOp::Entries { low, high } => {
                let a = redb.entries(u64::from(low), u64::from(high)).ok();
                let b = model.entries(u64::from(low), u64::from(high)).ok();
                if a != b {
                    return TestResult::error(format!("entries differ at {op:?}"));
                }
            }
        }
        if redb.state().unwrap() != model.state().unwrap() {
            return TestResult::error(format!("state differs after {op:?}"));
        }
    }
    drop(redb);
    let reopened = open();
    let state = model.state().unwrap();
    if reopened.state().unwrap() != state {
        return TestResult::error("state differs after reopen");
    }
    let low = state.first_index;
    if reopened.entries(low, state.last_index + 1).ok()
        != model.entries(low, state.last_index + 1).ok()
    {
        return TestResult::error("entries differ after reopen");
    }
    TestResult::passed()
}

#[test]
fn redb_log_matches_memory_log() {
    QuickCheck::new()
        .tests(150)
        .quickcheck(log_matches_model as fn(Vec<LogOp>) -> TestResult);
}

#[test]
fn wal_log_matches_memory_log() {
    QuickCheck::new()
        .tests(150)
        .quickcheck(wal_matches_model as fn(Vec<LogOp>) -> TestResult);
}
