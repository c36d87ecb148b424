use std::ops::ControlFlow;
use std::path::Path;

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
