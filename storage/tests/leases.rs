//! The lease table: leases written in a backend transaction are read back in
//! ID order, removed ones are gone, uncommitted ones never appear, and all of
//! it survives closing and reopening the database — the same as core's
//! in-memory backend.

use std::ops::ControlFlow;

use oxetcd_core::memory::MemoryKv;
use oxetcd_core::storage::{KvRead, KvStore, KvWrite, LeaseRecord};
use oxetcd_storage::RedbKv;

fn leases(view: &impl KvRead) -> Vec<LeaseRecord> {
    let mut out = Vec::new();
    view.leases(&mut |lease| {
        out.push(lease);
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn lease(id: i64, ttl_secs: i64, remaining_ttl_secs: i64) -> LeaseRecord {
    LeaseRecord {
        id,
        ttl_secs,
        remaining_ttl_secs,
    }
}

fn exercise<K: KvStore>(kv: &K) {
    let mut txn = kv.write().unwrap();
    txn.put_lease(&lease(9, 60, 0)).unwrap();
    txn.put_lease(&lease(-3, 10, 0)).unwrap();
    txn.put_lease(&lease(4, 30, 0)).unwrap();
    // A write sees its own leases before commit.
    assert_eq!(leases(&txn).len(), 3);
    txn.commit().unwrap();
    let mut txn = kv.write().unwrap();
    txn.put_lease(&lease(4, 30, 17)).unwrap();
    txn.remove_lease(-3).unwrap();
    txn.remove_lease(12345).unwrap();
    txn.commit().unwrap();
    // Dropped without commit: invisible.
    let mut txn = kv.write().unwrap();
    txn.put_lease(&lease(5, 5, 0)).unwrap();
    drop(txn);
}

#[test]
fn redb_lease_table_matches_memory_and_survives_reopen() {
    let memory = MemoryKv::default();
    exercise(&memory);
    let expected = vec![lease(4, 30, 17), lease(9, 60, 0)];
    assert_eq!(leases(&memory.read().unwrap()), expected);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let redb = RedbKv::open(&path).unwrap();
    exercise(&redb);
    assert_eq!(leases(&redb.read().unwrap()), expected);
    redb.sync().unwrap();
    drop(redb);
    let reopened = RedbKv::open(&path).unwrap();
    assert_eq!(leases(&reopened.read().unwrap()), expected);
}
