use std::ops::ControlFlow;
use std::path::Path;

use oxetcd_core::storage::{KvWrite, LEASE_BYTES};
use oxetcd_proto::etcdserverpb::AlarmMember;

use super::meta::USED_BYTES;
use super::*;

fn open_kv(dir: &Path) -> RedbKv {
    RedbKv::open(&dir.join("kv.redb")).unwrap()
}

fn put(key: &str, main: i64, sub: i64, create: i64, version: i64, value: &str) -> KeyVersion {
    KeyVersion {
        key: key.as_bytes().to_vec(),
        mod_revision: Revision { main, sub },
        create_revision: create,
        version,
        lease: 0,
        value: value.as_bytes().to_vec(),
        tombstone: false,
    }
}

fn tombstone(key: &str, main: i64, sub: i64) -> KeyVersion {
    KeyVersion {
        key: key.as_bytes().to_vec(),
        mod_revision: Revision { main, sub },
        tombstone: true,
        ..KeyVersion::default()
    }
}

fn write_all(kv: &RedbKv, versions: &[KeyVersion], revision: i64) {
    let mut txn = kv.write().unwrap();
    for v in versions {
        txn.put_version(v).unwrap();
    }
    let meta = KvMeta {
        revision,
        ..txn.meta().unwrap()
    };
    txn.set_meta(&meta).unwrap();
    txn.commit().unwrap();
}

/// `key=value@main` per visited version, `key!@main` for tombstones.
fn show(versions: Vec<KeyVersion>) -> Vec<String> {
    versions
        .into_iter()
        .map(|v| {
            let key = String::from_utf8_lossy(&v.key);
            if v.tombstone {
                format!("{key}!@{}", v.mod_revision.main)
            } else {
                format!(
                    "{key}={}@{}",
                    String::from_utf8_lossy(&v.value),
                    v.mod_revision.main
                )
            }
        })
        .collect()
}

fn scan_all(read: &impl KvRead, start: &str, end: Option<&str>, at: i64) -> Vec<String> {
    let mut out = Vec::new();
    let end = end.map_or(RangeEnd::Unbounded, |e| RangeEnd::Before(e.as_bytes()));
    read.scan(start.as_bytes(), end, at, &mut |v| {
        out.push(v);
        ControlFlow::Continue(())
    })
    .unwrap();
    show(out)
}

fn changes_all(read: &impl KvRead, from: i64, to: i64) -> Vec<String> {
    let mut out = Vec::new();
    read.changes(from, to, &mut |v| {
        out.push(v);
        ControlFlow::Continue(())
    })
    .unwrap();
    show(out)
}

fn versions_all(read: &impl KvRead, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    read.versions(key.as_bytes(), &mut |v| {
        out.push(v);
        ControlFlow::Continue(())
    })
    .unwrap();
    show(out)
}

/// History used by several tests:
///
/// rev 2: put a=1, b=1       rev 3: put a=2
/// rev 4: delete a, put c=1  rev 5: put a=3 (second generation)
/// rev 6: put b=2
fn history(kv: &RedbKv) {
    write_all(
        kv,
        &[put("a", 2, 0, 2, 1, "1"), put("b", 2, 1, 2, 1, "1")],
        2,
    );
    write_all(kv, &[put("a", 3, 0, 2, 2, "2")], 3);
    write_all(kv, &[tombstone("a", 4, 0), put("c", 4, 1, 4, 1, "1")], 4);
    write_all(kv, &[put("a", 5, 0, 5, 1, "3")], 5);
    write_all(kv, &[put("b", 6, 0, 2, 2, "2")], 6);
}

#[test]
fn fresh_meta_and_set_meta() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    assert_eq!(kv.read().unwrap().meta().unwrap(), FRESH_META);
    let meta = KvMeta {
        applied_index: 9,
        applied_term: 2,
        revision: 7,
        compact_revision: 3,
    };
    let mut txn = kv.write().unwrap();
    txn.set_meta(&meta).unwrap();
    assert_eq!(
        txn.meta().unwrap(),
        meta,
        "a transaction sees its own writes"
    );
    txn.commit().unwrap();
    assert_eq!(kv.read().unwrap().meta().unwrap(), meta);
    drop(kv);
    assert_eq!(open_kv(dir.path()).read().unwrap().meta().unwrap(), meta);
}

#[test]
fn scan_at_historical_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    history(&kv);
    let read = kv.read().unwrap();
    assert_eq!(scan_all(&read, "", None, 1), Vec::<String>::new());
    assert_eq!(scan_all(&read, "", None, 2), ["a=1@2", "b=1@2"]);
    assert_eq!(scan_all(&read, "", None, 3), ["a=2@3", "b=1@2"]);
    assert_eq!(scan_all(&read, "", None, 4), ["a!@4", "b=1@2", "c=1@4"]);
    assert_eq!(scan_all(&read, "", None, 5), ["a=3@5", "b=1@2", "c=1@4"]);
    assert_eq!(scan_all(&read, "", None, 6), ["a=3@5", "b=2@6", "c=1@4"]);
    assert_eq!(
        scan_all(&read, "", None, i64::MAX),
        ["a=3@5", "b=2@6", "c=1@4"]
    );
    assert_eq!(scan_all(&read, "", None, -1), Vec::<String>::new());
    // Ranges.
    assert_eq!(scan_all(&read, "b", None, 6), ["b=2@6", "c=1@4"]);
    assert_eq!(scan_all(&read, "a", Some("c"), 4), ["a!@4", "b=1@2"]);
    assert_eq!(scan_all(&read, "a0", Some("b0"), 6), ["b=2@6"]);
    assert_eq!(scan_all(&read, "b", Some("b"), 6), Vec::<String>::new());
    assert_eq!(scan_all(&read, "c", Some("a"), 6), Vec::<String>::new());
    assert_eq!(scan_all(&read, "d", None, 6), Vec::<String>::new());
    // Generations: the second put of `a`'s second generation counts from 1.
    let mut a = Vec::new();
    read.scan(b"a", RangeEnd::Before(b"b"), 5, &mut |v| {
        a.push(v);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!((a[0].create_revision, a[0].version), (5, 1));
    // Early stop.
    let mut seen = 0;
    read.scan(b"", RangeEnd::Unbounded, 6, &mut |_| {
        seen += 1;
        ControlFlow::Break(())
    })
    .unwrap();
    assert_eq!(seen, 1);
}

#[test]
fn scan_over_long_histories() {
    // More versions per key than the scan steps over before seeking.
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    let mut txn = kv.write().unwrap();
    for main in 1..=50 {
        for (sub, key) in ["k1", "k2", "k3"].iter().enumerate() {
            if (main + sub as i64) % 3 != 0 {
                txn.put_version(&put(key, main, sub as i64, 1, main, &main.to_string()))
                    .unwrap();
            }
        }
    }
    txn.commit().unwrap();
    let read = kv.read().unwrap();
    for at in 0..=52 {
        let mut expected = Vec::new();
        for (sub, key) in ["k1", "k2", "k3"].iter().enumerate() {
            if let Some(main) = (1..=at.min(50)).rev().find(|m| (m + sub as i64) % 3 != 0) {
                expected.push(format!("{key}={main}@{main}"));
            }
        }
        assert_eq!(scan_all(&read, "", None, at), expected, "at {at}");
    }
}

#[test]
fn versions_and_changes() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    history(&kv);
    let read = kv.read().unwrap();
    assert_eq!(
        versions_all(&read, "a"),
        ["a=3@5", "a!@4", "a=2@3", "a=1@2"]
    );
    assert_eq!(versions_all(&read, "zz"), Vec::<String>::new());
    assert_eq!(
        changes_all(&read, 0, 100),
        ["a=1@2", "b=1@2", "a=2@3", "a!@4", "c=1@4", "a=3@5", "b=2@6"]
    );
    assert_eq!(changes_all(&read, 4, 5), ["a!@4", "c=1@4", "a=3@5"]);
    assert_eq!(changes_all(&read, 5, 4), Vec::<String>::new());
    assert_eq!(changes_all(&read, -5, -1), Vec::<String>::new());
    let mut subs = Vec::new();
    read.changes(4, 4, &mut |v| {
        subs.push(v.mod_revision);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(
        subs,
        [Revision { main: 4, sub: 0 }, Revision { main: 4, sub: 1 }]
    );
}

#[test]
fn remove_version_as_compaction_does() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    history(&kv);
    let mut txn = kv.write().unwrap();
    // Compact at 4: drop everything older than each key's newest version <= 4,
    // and `a`'s tombstone at 4 as well.
    txn.remove_version(b"a", Revision { main: 2, sub: 0 })
        .unwrap();
    txn.remove_version(b"a", Revision { main: 3, sub: 0 })
        .unwrap();
    txn.remove_version(b"a", Revision { main: 4, sub: 0 })
        .unwrap();
    // Not stored, or another key's revision: no effect.
    txn.remove_version(b"a", Revision { main: 4, sub: 1 })
        .unwrap();
    txn.remove_version(b"zz", Revision { main: 9, sub: 0 })
        .unwrap();
    txn.remove_version(b"a", Revision { main: -1, sub: 0 })
        .unwrap();
    assert_eq!(versions_all(&txn, "a"), ["a=3@5"]);
    txn.commit().unwrap();
    let read = kv.read().unwrap();
    assert_eq!(versions_all(&read, "a"), ["a=3@5"]);
    assert_eq!(
        changes_all(&read, 0, 100),
        ["b=1@2", "c=1@4", "a=3@5", "b=2@6"]
    );
    assert_eq!(scan_all(&read, "", None, 4), ["b=1@2", "c=1@4"]);
}

#[test]
fn bad_puts_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    let mut txn = kv.write().unwrap();
    assert!(txn.put_version(&put("a", -1, 0, 1, 1, "x")).is_err());
    txn.put_version(&put("a", 2, 0, 2, 1, "x")).unwrap();
    assert!(
        txn.put_version(&put("b", 2, 0, 2, 1, "x")).is_err(),
        "revision taken by another key"
    );
    // Rewriting the same version is allowed.
    txn.put_version(&put("a", 2, 0, 2, 1, "y")).unwrap();
    assert_eq!(versions_all(&txn, "a"), ["a=y@2"]);
}

#[test]
fn uncommitted_writes_are_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    let mut txn = kv.write().unwrap();
    txn.put_version(&put("a", 2, 0, 2, 1, "x")).unwrap();
    assert_eq!(scan_all(&txn, "", None, 2), ["a=x@2"]);
    drop(txn);
    assert_eq!(
        scan_all(&kv.read().unwrap(), "", None, 2),
        Vec::<String>::new()
    );
}

#[test]
fn reader_snapshot_does_not_see_later_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    write_all(&kv, &[put("a", 2, 0, 2, 1, "old")], 2);
    let before = kv.read().unwrap();
    // The reader lives on another thread while the write commits.
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        (
            scan_all(&before, "", None, i64::MAX),
            before.meta().unwrap().revision,
        )
    });
    write_all(
        &kv,
        &[put("a", 3, 0, 2, 2, "new"), put("b", 3, 1, 3, 1, "new")],
        3,
    );
    assert_eq!(reader.join().unwrap(), (vec!["a=old@2".to_string()], 2));
    assert_eq!(
        scan_all(&kv.read().unwrap(), "", None, i64::MAX),
        ["a=new@3", "b=new@3"]
    );
}

#[test]
fn snapshot_taken_before_a_batch_never_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    write_all(&kv, &[put("a", 2, 0, 2, 1, "old")], 2);
    let before = kv.read().unwrap();
    write_all(
        &kv,
        &[put("a", 3, 0, 2, 2, "new"), put("b", 3, 1, 3, 1, "new")],
        3,
    );
    // The batch is committed and in the shared index: new readers see it.
    let after = kv.read().unwrap();
    assert_eq!(scan_all(&after, "", None, i64::MAX), ["a=new@3", "b=new@3"]);
    assert_eq!(kv.shared.index.slot_count(), 3);
    // The older snapshot sees none of it, whatever revision it asks for.
    for at in [2, 3, i64::MAX] {
        assert_eq!(scan_all(&before, "", None, at), ["a=old@2"], "at {at}");
    }
    assert_eq!(versions_all(&before, "a"), ["a=old@2"]);
    assert_eq!(versions_all(&before, "b"), Vec::<String>::new());
    assert_eq!(changes_all(&before, 0, i64::MAX), ["a=old@2"]);
    assert_eq!(before.meta().unwrap().revision, 2);
}

#[test]
fn uncommitted_index_changes_stay_private() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    history(&kv);
    let mut txn = kv.write().unwrap();
    txn.put_version(&put("d", 7, 0, 7, 1, "1")).unwrap();
    txn.remove_version(b"b", Revision { main: 2, sub: 1 })
        .unwrap();
    txn.remove_version(b"b", Revision { main: 6, sub: 0 })
        .unwrap();
    // The transaction reads through its own changes...
    assert_eq!(scan_all(&txn, "", None, 7), ["a=3@5", "c=1@4", "d=1@7"]);
    assert_eq!(versions_all(&txn, "b"), Vec::<String>::new());
    // ...which nobody else sees until it commits.
    let read = kv.read().unwrap();
    assert_eq!(scan_all(&read, "", None, 7), ["a=3@5", "b=2@6", "c=1@4"]);
    txn.commit().unwrap();
    assert_eq!(
        scan_all(&kv.read().unwrap(), "", None, 7),
        ["a=3@5", "c=1@4", "d=1@7"]
    );
    assert_eq!(scan_all(&read, "", None, 7), ["a=3@5", "b=2@6", "c=1@4"]);
}

/// The compaction race: a snapshot taken before a compaction asks for
/// revisions the compaction removed. It must get them, exactly as before,
/// for as long as it lives; the index forgets them only afterwards.
#[test]
fn compaction_after_a_snapshot_does_not_change_it() {
    use oxetcd_core::mvcc;
    use oxetcd_core::{Error, Write};
    use oxetcd_proto::etcdserverpb::{CompactionRequest, RangeRequest};

    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    history(&kv);
    let before = kv.read().unwrap();
    let range_a_at = |view: &RedbKvRead, revision| {
        mvcc::range(
            view,
            &RangeRequest {
                key: b"a".to_vec(),
                revision,
                ..RangeRequest::default()
            },
        )
        .map(|response| {
            response
                .kvs
                .into_iter()
                .map(|kv| kv.value)
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(range_a_at(&before, 3).unwrap(), [b"2".to_vec()]);

    // Compact at 5 through mvcc, as the node does.
    let mut txn = kv.write().unwrap();
    let mut meta = txn.meta().unwrap();
    mvcc::apply(
        &mut txn,
        &mut meta,
        Write::Compaction(CompactionRequest {
            revision: 5,
            ..CompactionRequest::default()
        }),
    )
    .unwrap();
    txn.commit().unwrap();

    let after = kv.read().unwrap();
    assert_eq!(versions_all(&after, "a"), ["a=3@5"]);
    assert_eq!(versions_all(&after, "b"), ["b=2@6", "b=1@2"]);
    assert!(matches!(range_a_at(&after, 3), Err(Error::Compacted)));
    assert_eq!(scan_all(&after, "", None, 5), ["a=3@5", "b=1@2", "c=1@4"]);

    // The older snapshot still has the whole history, from another thread
    // too, while the index serves the newer one without it.
    let before = std::thread::spawn(move || {
        assert_eq!(
            versions_all(&before, "a"),
            ["a=3@5", "a!@4", "a=2@3", "a=1@2"]
        );
        assert_eq!(scan_all(&before, "", None, 3), ["a=2@3", "b=1@2"]);
        assert_eq!(scan_all(&before, "", None, 4), ["a!@4", "b=1@2", "c=1@4"]);
        assert_eq!(range_a_at(&before, 3).unwrap(), [b"2".to_vec()]);
        assert_eq!(changes_all(&before, 0, 4).len(), 5);
        before
    })
    .join()
    .unwrap();
    assert_eq!(kv.shared.index.slot_count(), 7, "kept for the old snapshot");

    // Once it is gone, the next commit drops the removed versions.
    drop(before);
    write_all(&kv, &[put("d", 7, 0, 7, 1, "1")], 7);
    assert_eq!(kv.shared.index.slot_count(), 5);
    assert_eq!(versions_all(&after, "b"), ["b=2@6", "b=1@2"]);
    drop(after);

    // A reopened store rebuilds the same index.
    drop(kv);
    let kv = open_kv(dir.path());
    assert_eq!(kv.shared.index.slot_count(), 5);
    let read = kv.read().unwrap();
    assert_eq!(versions_all(&read, "a"), ["a=3@5"]);
    assert_eq!(
        scan_all(&read, "", None, 7),
        ["a=3@5", "b=2@6", "c=1@4", "d=1@7"]
    );
}

/// Readers on other threads take snapshots while batches and compactions
/// commit; each snapshot must be internally consistent: one revision's
/// state, whatever the writer does meanwhile.
#[test]
fn concurrent_readers_see_consistent_snapshots() {
    const KEYS: i64 = 8;
    const BATCHES: i64 = 150;
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
    let write_batch = |kv: &RedbKv, main: i64| {
        let mut txn = kv.write().unwrap();
        for (sub, key) in keys.iter().enumerate() {
            txn.put_version(&put(key, main, sub as i64, 2, main - 1, &main.to_string()))
                .unwrap();
        }
        let mut meta = txn.meta().unwrap();
        meta.revision = main;
        // Every tenth batch compacts at `main - 4`: every key has a version
        // at each revision, so all older ones go.
        if main % 10 == 0 {
            for (sub, key) in keys.iter().enumerate() {
                for old in meta.compact_revision.max(2)..main - 4 {
                    let revision = Revision {
                        main: old,
                        sub: sub as i64,
                    };
                    txn.remove_version(key.as_bytes(), revision).unwrap();
                }
            }
            meta.compact_revision = main - 4;
        }
        txn.set_meta(&meta).unwrap();
        txn.commit().unwrap();
    };
    write_batch(&kv, 2);
    let first = kv.read().unwrap();
    let check = {
        let keys = keys.clone();
        move |read: &RedbKvRead| check_consistent(read, &keys)
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let kv = kv.clone();
            let stop = Arc::clone(&stop);
            let check = check.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                let mut checked = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let read = kv.read().unwrap();
                    check(&read);
                    checked += 1;
                    // Keep a few snapshots across later commits and
                    // compactions, and check them again.
                    held.push(read);
                    if held.len() > 3 {
                        check(&held.remove(0));
                    }
                }
                checked
            })
        })
        .collect();
    for main in 3..=BATCHES {
        write_batch(&kv, main);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    // The first snapshot outlived every compaction.
    assert_eq!(first.meta().unwrap().revision, 2);
    check(&first);
    assert_eq!(versions_all(&first, "k0"), ["k0=2@2"]);
    drop(first);
    write_batch(&kv, BATCHES + 1);
    check(&kv.read().unwrap());
}

/// Checks that `read` shows one revision's state of the history that
/// [`concurrent_readers_see_consistent_snapshots`] writes.
fn check_consistent(read: &RedbKvRead, keys: &[String]) {
    let meta = read.meta().unwrap();
    let current = meta.revision;
    let expected: Vec<String> = keys
        .iter()
        .map(|k| format!("{k}={current}@{current}"))
        .collect();
    assert_eq!(scan_all(read, "", None, i64::MAX), expected);
    let oldest = meta.compact_revision.max(2);
    for at in [oldest, (oldest + current) / 2, current] {
        let expected: Vec<String> = keys.iter().map(|k| format!("{k}={at}@{at}")).collect();
        assert_eq!(
            scan_all(read, "", None, at),
            expected,
            "at {at} in {meta:?}"
        );
    }
    let versions = versions_all(read, "k3");
    assert_eq!(versions.first(), Some(&format!("k3={current}@{current}")));
    assert!(
        versions.len() as i64 > current - oldest,
        "{versions:?} {meta:?}"
    );
    assert_eq!(changes_all(read, current, current).len(), keys.len());
    assert!(changes_all(read, current + 1, i64::MAX).is_empty());
}

#[test]
fn corrupt_record_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    history(&open_kv(dir.path()));
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(REVISIONS)
            .unwrap()
            .insert(revision_key((9, 0)), [0x07, 1].as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let error = RedbKv::open(&path).unwrap_err();
    assert!(
        matches!(&error, OpenError::Corrupt { detail, .. } if detail.contains("revision 9.0")),
        "{error}"
    );
}

#[test]
fn read_snapshot_is_send_and_static() {
    fn check<T: Send + 'static>() {}
    check::<RedbKvRead>();
    check::<RedbKv>();
}

#[test]
fn synced_data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let kv = open_kv(dir.path());
        history(&kv);
        kv.sync().unwrap();
    }
    let kv = open_kv(dir.path());
    let read = kv.read().unwrap();
    assert_eq!(scan_all(&read, "", None, 6), ["a=3@5", "b=2@6", "c=1@4"]);
    assert_eq!(read.meta().unwrap().revision, 6);
    assert!(kv.size_bytes().unwrap() > 0);
}

#[test]
fn durable_cadence() {
    let start = Instant::now();
    let mut cadence = DurableCadence::new(start);
    assert!(!cadence.is_due(start));
    assert!(cadence.is_due(start + DURABLE_INTERVAL));
    for _ in 0..DURABLE_EVERY_COMMITS - 2 {
        cadence.record(false, start);
    }
    assert!(!cadence.is_due(start));
    cadence.record(false, start);
    assert!(
        cadence.is_due(start),
        "every {DURABLE_EVERY_COMMITS}th commit is durable"
    );
    let later = start + Duration::from_millis(30);
    cadence.record(true, later);
    assert!(!cadence.is_due(later + DURABLE_INTERVAL / 2));
    assert!(cadence.is_due(later + DURABLE_INTERVAL));
}

/// Environment variable that makes [`crash_child`] do its work.
const CRASH_DIR_ENV: &str = "OXETCD_STORAGE_CRASH_DIR";

/// Run as a child process by [`crash_keeps_data_and_applied_index_together`]:
/// writes, syncs, writes more non-durably, then dies without closing.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR_ENV) else {
        return;
    };
    let kv = open_kv(Path::new(&dir));
    for main in 2..=20 {
        let mut txn = kv.write().unwrap();
        txn.put_version(&put("k", main, 0, 2, main - 1, &main.to_string()))
            .unwrap();
        txn.set_meta(&KvMeta {
            applied_index: main as u64,
            applied_term: 1,
            revision: main,
            compact_revision: 0,
        })
        .unwrap();
        txn.commit().unwrap();
        if main == 10 {
            kv.sync().unwrap();
        }
    }
    std::process::abort();
}

#[test]
fn crash_keeps_data_and_applied_index_together() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kv::tests::crash_child",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CRASH_DIR_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "the child must die without closing the database"
    );
    let kv = open_kv(dir.path());
    let read = kv.read().unwrap();
    let meta = read.meta().unwrap();
    // Whatever survived, the applied index describes exactly the data: the
    // node would replay the log from there.
    assert!(
        (10..=20).contains(&meta.applied_index),
        "synced commits survive: {meta:?}"
    );
    let main = meta.applied_index as i64;
    assert_eq!(
        scan_all(&read, "", None, i64::MAX),
        [format!("k={main}@{main}")]
    );
    assert_eq!(meta.revision, main);
}

/// The bytes in use follow every put and removal exactly, agree with the
/// in-memory backend on the same writes, survive a reopen, and are
/// counted again at open when the stored figure is missing; alarms are
/// stored beside them.
#[test]
fn used_bytes_and_alarms_are_exact_and_survive_reopen() {
    use oxetcd_core::memory::MemoryKv;
    use oxetcd_proto::etcdserverpb::AlarmMember;
    let dir = tempfile::tempdir().unwrap();
    let memory = MemoryKv::default();
    let versions = [
        put("a", 2, 0, 2, 1, "one"),
        put("b", 3, 0, 3, 1, "two!"),
        tombstone("a", 4, 0),
    ];
    let lease = LeaseRecord {
        id: 7,
        ttl_secs: 10,
        remaining_ttl_secs: 0,
    };
    let alarms = [AlarmMember {
        member_id: 9,
        alarm: 1,
    }];
    let expected = version_bytes(1, 3) + version_bytes(1, 4) + version_bytes(1, 0) + LEASE_BYTES;
    {
        let kv = open_kv(dir.path());
        assert_eq!(kv.read().unwrap().used_bytes().unwrap(), 0);
        let mut redb_txn = kv.write().unwrap();
        let mut memory_txn = memory.write().unwrap();
        for v in &versions {
            redb_txn.put_version(v).unwrap();
            memory_txn.put_version(v).unwrap();
        }
        redb_txn.put_lease(&lease).unwrap();
        redb_txn.put_lease(&lease).unwrap();
        memory_txn.put_lease(&lease).unwrap();
        memory_txn.put_lease(&lease).unwrap();
        redb_txn.set_alarms(&alarms).unwrap();
        assert_eq!(redb_txn.used_bytes().unwrap(), expected);
        assert_eq!(memory_txn.used_bytes().unwrap(), expected);
        redb_txn.commit().unwrap();
        memory_txn.commit().unwrap();
        let mut txn = kv.write().unwrap();
        txn.remove_version(b"a", Revision { main: 2, sub: 0 })
            .unwrap();
        txn.remove_version(b"b", Revision { main: 2, sub: 0 })
            .unwrap();
        txn.commit().unwrap();
        let mut txn = memory.write().unwrap();
        txn.remove_version(b"a", Revision { main: 2, sub: 0 })
            .unwrap();
        txn.commit().unwrap();
        let after = expected - version_bytes(1, 3);
        assert_eq!(kv.read().unwrap().used_bytes().unwrap(), after);
        assert_eq!(memory.read().unwrap().used_bytes().unwrap(), after);
        kv.sync().unwrap();
    }
    let after = expected - version_bytes(1, 3);
    let kv = open_kv(dir.path());
    assert_eq!(kv.read().unwrap().used_bytes().unwrap(), after);
    assert_eq!(kv.read().unwrap().alarms().unwrap(), alarms.to_vec());
    // A store without the figure gets it counted at open.
    {
        let db = kv.shared.db.read().unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .remove(USED_BYTES.key)
            .unwrap();
        txn.commit().unwrap();
    }
    drop(kv);
    let kv = open_kv(dir.path());
    assert_eq!(kv.read().unwrap().used_bytes().unwrap(), after);
}

/// A compaction records, once asked to, what `HashKV` at its revision
/// answered just before it; the newest first, at most ten.
#[test]
fn compactions_record_the_hash_of_the_history_they_drop() {
    let dir = tempfile::tempdir().unwrap();
    let kv = open_kv(dir.path());
    history(&kv);
    let compact = |kv: &RedbKv, at: i64| {
        let mut txn = kv.write().unwrap();
        let meta = txn.meta().unwrap();
        txn.before_compaction(&meta, at).unwrap();
        txn.set_meta(&KvMeta {
            compact_revision: at,
            ..meta
        })
        .unwrap();
        txn.commit().unwrap();
    };
    compact(&kv, 3);
    assert!(kv.compaction_hashes().is_empty(), "not kept unless asked");
    kv.keep_compaction_hashes();
    let before = crate::bolt::hash::hash_kv(&kv.read().unwrap(), 5).unwrap();
    compact(&kv, 5);
    let kept = kv.compaction_hashes();
    assert_eq!(
        kept,
        vec![CompactionHash {
            hash: before.hash,
            compact_revision: 3,
            revision: 5,
        }]
    );
    let last = 7 + COMPACTION_HASHES_MAX as i64;
    for at in 7..=last {
        write_all(&kv, &[put("d", at, 0, 7, at - 6, "x")], at);
        compact(&kv, at);
    }
    let kept = kv.compaction_hashes();
    assert_eq!(kept.len(), COMPACTION_HASHES_MAX);
    assert_eq!(kept[0].revision, last, "newest first");
}

/// The names of `db`'s tables and of the keys of its `meta` table.
fn tables_and_meta_keys(db: &redb::Database) -> (Vec<String>, Vec<String>) {
    use redb::ReadableDatabase as _;
    let read = db.begin_read().unwrap();
    let tables = read
        .list_tables()
        .unwrap()
        .map(|t| redb::TableHandle::name(&t).to_owned())
        .collect();
    let meta = read.open_table(crate::format::META).unwrap();
    let keys = redb::ReadableTable::iter(&meta)
        .unwrap()
        .map(|entry| entry.unwrap().0.value().to_owned())
        .collect();
    (tables, keys)
}

/// What the backend writes (its tables, and the keys of its `meta`
/// table once every kind of record was written) is exactly the schema of
/// the newest storage version in `oxetcd_core::version::migration`, which
/// plans the migrations: a format change that forgets the schema fails
/// here.
#[test]
fn the_backend_is_the_newest_schema() {
    use oxetcd_core::storage::{AuthState, LeaseRecord, Membership};
    use oxetcd_core::version::migration::SCHEMAS;

    let dir = tempfile::tempdir().unwrap();
    {
        let kv = open_kv(dir.path());
        let mut txn = kv.write().unwrap();
        txn.put_version(&put("a", 2, 0, 2, 1, "v")).unwrap();
        txn.put_lease(&LeaseRecord {
            id: 7,
            ttl_secs: 60,
            remaining_ttl_secs: 0,
        })
        .unwrap();
        txn.set_meta(&KvMeta {
            revision: 2,
            applied_index: 3,
            ..KvMeta::default()
        })
        .unwrap();
        txn.set_membership(&Membership::default()).unwrap();
        txn.set_auth(&AuthState::default()).unwrap();
        txn.set_alarms(&[AlarmMember {
            member_id: 1,
            alarm: 1,
        }])
        .unwrap();
        txn.commit().unwrap();
        kv.sync().unwrap();
    }
    let db = redb::Database::open(dir.path().join("kv.redb")).unwrap();
    let (mut tables, mut keys) = tables_and_meta_keys(&db);
    let newest = SCHEMAS.last().unwrap();
    let mut want_tables: Vec<String> = newest.tables.iter().map(|t| t.to_string()).collect();
    let mut want_keys: Vec<String> = newest.meta_keys.iter().map(|k| k.to_string()).collect();
    for list in [&mut tables, &mut keys, &mut want_tables, &mut want_keys] {
        list.sort();
    }
    assert_eq!(tables, want_tables);
    assert_eq!(keys, want_keys);
}

/// A migration's steps apply inside the write transaction they are
/// given: nothing of them shows before its commit, nor ever when it is
/// dropped uncommitted, and all of them after.
#[test]
fn migration_steps_apply_with_their_transaction() {
    use oxetcd_core::version::migration::Step;

    let dir = tempfile::tempdir().unwrap();
    let tables_and_keys = |kv: &RedbKv| tables_and_meta_keys(&kv.shared.db.read().unwrap());
    let kv = open_kv(dir.path());
    let mut txn = kv.write().unwrap();
    txn.set_alarms(&[AlarmMember {
        member_id: 1,
        alarm: 1,
    }])
    .unwrap();
    txn.commit().unwrap();
    let (tables, keys) = tables_and_keys(&kv);
    assert!(!tables.contains(&"extra".to_owned()));
    assert!(keys.contains(&"alarms".to_owned()));

    let up = [Step::AddTable("extra"), Step::DropMetaKey("alarms")];
    let mut txn = kv.write().unwrap();
    txn.migrate(&up).unwrap();
    drop(txn);
    assert_eq!(tables_and_keys(&kv).0, tables, "dropped uncommitted");
    assert!(tables_and_keys(&kv).1.contains(&"alarms".to_owned()));

    let mut txn = kv.write().unwrap();
    txn.migrate(&up).unwrap();
    txn.commit().unwrap();
    let (after, keys) = tables_and_keys(&kv);
    assert!(after.contains(&"extra".to_owned()), "{after:?}");
    assert!(!keys.contains(&"alarms".to_owned()), "{keys:?}");
    assert_eq!(kv.read().unwrap().alarms().unwrap(), vec![]);

    let mut txn = kv.write().unwrap();
    txn.migrate(&[Step::DropTable("extra")]).unwrap();
    txn.commit().unwrap();
    assert_eq!(tables_and_keys(&kv).0, tables);
}
