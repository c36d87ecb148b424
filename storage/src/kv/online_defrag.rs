//! Online defragmentation: the backend is copied into a fresh file while
//! the member keeps reading and writing the old one, then swapped in.
//!
//! Design. redb gives freed pages back to the file system only by
//! compacting, which needs the database to itself: every reader and writer
//! would wait for the whole pass (what etcd's defragmentation does too).
//! Instead:
//!
//! 1. Rounds, with nobody waiting: a read snapshot of the old database is
//!    copied into `kv.redb.defrag`. Every write transaction records the
//!    lowest revision it put or removed ([`DirtyFrom`]) before it commits,
//!    so the next round re-syncs only the versions from there on (the
//!    appended tail, normally; back to the oldest removed version after a
//!    compaction). Leases and the meta records are small and copied whole.
//!    Rounds repeat while they still have much to copy.
//! 2. The swap, brief: the copy is made durable first; then new
//!    transactions wait on the database lock, a write transaction begun
//!    on the old database waits out the one in flight, and through it the
//!    last changes are synced; the copy is committed durably (only those
//!    changes are left to write), renamed over `kv.redb`, and becomes the
//!    database. Readers
//!    that began before keep their snapshot of the old file, which closes
//!    when the last of them ends.
//!
//! The copy holds exactly the old database's records (commit sequence
//! included), so the in-memory key index stays valid across the swap. A
//! crash before the rename leaves the old file as it was and a stale copy,
//! which the next open removes; after it, the copy is the backend.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use oxetcd_core::storage::StorageError;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};

use super::{RedbKv, CONTENTS, LEASES, REVISIONS};
use crate::error::{err, io_error};
use crate::format::{open_database, META};

/// What the errors of a defragmentation say it was doing.
const WHAT: &str = "kv defragment";

/// A round that copied fewer versions than this is the last before the
/// swap, which then has about as few left to copy while writes wait.
const SWAP_BELOW_VERSIONS: u64 = 4096;
/// Rounds at most before the swap, however busy the writers are.
const ROUNDS_MAX: usize = 8;
/// Bytes of versions per write transaction of the copy, each made
/// durable: the copy reaches the disk in steps this large, so a member's
/// own log writes never queue behind one large flush of it.
const COPY_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The lowest main revision written or removed since it was last taken
/// (`u64::MAX`: none). A writer holds it across its commit, and a round
/// takes it while it begins its snapshot, so every change a snapshot
/// misses is recorded for the next round.
#[derive(Debug)]
pub(super) struct DirtyFrom(Mutex<u64>);

impl Default for DirtyFrom {
    fn default() -> Self {
        Self(Mutex::new(u64::MAX))
    }
}

impl DirtyFrom {
    /// Records that the commit about to be made touches revision `main`
    /// and later; hold the answer until the commit is done.
    pub(super) fn record(&self, main: u64) -> MutexGuard<'_, u64> {
        let mut lowest = self.lock();
        *lowest = (*lowest).min(main);
        lowest
    }

    /// Takes what was recorded, as a revision key, running `then` before
    /// anyone can record again.
    fn take_then<T>(&self, then: impl FnOnce() -> T) -> (Option<u128>, T) {
        let mut lowest = self.lock();
        let taken = std::mem::replace(&mut *lowest, u64::MAX);
        let after = then();
        let from = (taken != u64::MAX).then(|| super::revision_key((taken, 0)));
        (from, after)
    }

    fn lock(&self) -> MutexGuard<'_, u64> {
        // A plain number, valid whatever a panicking holder did.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where the copy of `path` is made.
pub(super) fn copy_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".defrag");
    PathBuf::from(name)
}

/// What one defragmentation did, for its log line.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) rounds: usize,
    /// Versions synced while the database was held for the swap.
    pub(super) swap_versions: u64,
    pub(super) swap_ms: u64,
}

pub(super) fn defragment(kv: &RedbKv) -> Result<Report, StorageError> {
    let path = kv.shared.path.clone();
    let copy_at = copy_path(&path);
    remove_stale(&copy_at).map_err(|e| io_error(WHAT, e))?;
    let copy = open_database(&copy_at, CONTENTS, |txn| {
        txn.open_table(REVISIONS)?;
        txn.open_table(LEASES)?;
        Ok(())
    })
    .map_err(|error| io_error(WHAT, std::io::Error::other(error.to_string())))?;
    let dirty = &kv.shared.dirty_from;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let (recorded, source) = dirty.take_then(|| kv.db().begin_read());
        // The first round copies everything, whatever was recorded.
        let from = if rounds == 1 { Some(0) } else { recorded };
        let copied = sync(&Source::Reader(source.map_err(err(WHAT))?), &copy, from)?;
        if copied < SWAP_BELOW_VERSIONS || rounds == ROUNDS_MAX {
            break;
        }
    }

    // The copy's pages reach the disk now, so that the commit made while
    // writes wait has only the last changes to sync.
    make_durable(&copy)?;

    let mut db = kv.shared.db.write().unwrap_or_else(PoisonError::into_inner);
    let held = Instant::now();
    // Waits for the write transaction in flight, if any; no other can
    // begin while the lock is held.
    let last = db.begin_write().map_err(err(WHAT))?;
    let (from, ()) = dirty.take_then(|| ());
    let swap_versions = sync(&Source::Writer(&last), &copy, from)?;
    drop(last);
    make_durable(&copy)?;
    // Until the rename, a failure leaves the old file in use and intact.
    std::fs::rename(&copy_at, &path).map_err(|e| io_error(WHAT, e))?;
    // From the rename on, the copy is the backend whatever else fails: the
    // writes that follow must go to the file at `path`.
    let old = std::mem::replace(&mut *db, Arc::new(super::Db::new(copy)));
    drop(db);
    let swap_ms = held.elapsed().as_millis() as u64;
    let synced = sync_dir(&path);
    // The old file closes when its last reader ends.
    drop(old);
    synced?;
    Ok(Report {
        rounds,
        swap_versions,
        swap_ms,
    })
}

/// An empty durable commit: every earlier commit of `copy` is on disk.
fn make_durable(copy: &Database) -> Result<(), StorageError> {
    let mut txn = copy.begin_write().map_err(err(WHAT))?;
    txn.set_durability(Durability::Immediate)
        .map_err(err(WHAT))?;
    txn.commit().map_err(err(WHAT))
}

/// Removes a copy a crashed defragmentation left behind.
pub(super) fn remove_stale(copy_at: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(copy_at) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn sync_dir(path: &Path) -> Result<(), StorageError> {
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| io_error(WHAT, e))?;
    }
    Ok(())
}

/// What a round copies from: a read snapshot, or (for the swap) the write
/// transaction that holds the old database still.
enum Source<'a> {
    Reader(redb::ReadTransaction),
    Writer(&'a WriteTransaction),
}

/// Makes `copy` hold what `source` holds: the versions from revision key
/// `from` on (none when `None`), and every lease and meta record. Answers
/// how many versions it wrote or removed.
fn sync(source: &Source<'_>, copy: &Database, from: Option<u128>) -> Result<u64, StorageError> {
    match source {
        Source::Reader(txn) => {
            let versions = txn.open_table(REVISIONS).map_err(err(WHAT))?;
            let leases = txn.open_table(LEASES).map_err(err(WHAT))?;
            let meta = txn.open_table(META).map_err(err(WHAT))?;
            sync_tables(&versions, &leases, &meta, copy, from)
        }
        Source::Writer(txn) => {
            let versions = txn.open_table(REVISIONS).map_err(err(WHAT))?;
            let leases = txn.open_table(LEASES).map_err(err(WHAT))?;
            let meta = txn.open_table(META).map_err(err(WHAT))?;
            sync_tables(&versions, &leases, &meta, copy, from)
        }
    }
}

fn sync_tables(
    versions: &impl ReadableTable<u128, &'static [u8]>,
    leases: &impl ReadableTable<i64, &'static [u8]>,
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    copy: &Database,
    from: Option<u128>,
) -> Result<u64, StorageError> {
    let mut changed = 0;
    if let Some(from) = from {
        changed += remove_gone(versions, copy, from)?;
        let mut cursor = from;
        loop {
            let mut txn = begin(copy)?;
            let mut batch = 0;
            let mut next = None;
            {
                let mut table = txn.open_table(REVISIONS).map_err(err(WHAT))?;
                for entry in versions.range(cursor..).map_err(err(WHAT))? {
                    let (key, value) = entry.map_err(err(WHAT))?;
                    let (key, value) = (key.value(), value.value());
                    if batch >= COPY_BATCH_BYTES {
                        next = Some(key);
                        break;
                    }
                    let same = table
                        .get(key)
                        .map_err(err(WHAT))?
                        .is_some_and(|held| held.value() == value);
                    if !same {
                        table.insert(key, value).map_err(err(WHAT))?;
                        changed += 1;
                        batch += value.len();
                    }
                }
            }
            if next.is_some() {
                txn.set_durability(Durability::Immediate)
                    .map_err(err(WHAT))?;
            }
            txn.commit().map_err(err(WHAT))?;
            match next {
                Some(key) => cursor = key,
                None => break,
            }
        }
    }
    let txn = begin(copy)?;
    replace_all(&txn, LEASES, leases)?;
    replace_all(&txn, META, meta)?;
    txn.commit().map_err(err(WHAT))?;
    Ok(changed)
}

/// Removes from `copy` the versions from `from` on that `versions` no
/// longer holds (compacted, or replaced by an installed snapshot).
fn remove_gone(
    versions: &impl ReadableTable<u128, &'static [u8]>,
    copy: &Database,
    from: u128,
) -> Result<u64, StorageError> {
    let mut gone = Vec::new();
    {
        let txn = copy.begin_read().map_err(err(WHAT))?;
        let table = txn.open_table(REVISIONS).map_err(err(WHAT))?;
        for entry in table.range(from..).map_err(err(WHAT))? {
            let key = entry.map_err(err(WHAT))?.0.value();
            if versions.get(key).map_err(err(WHAT))?.is_none() {
                gone.push(key);
            }
        }
    }
    if gone.is_empty() {
        return Ok(0);
    }
    let txn = begin(copy)?;
    {
        let mut table = txn.open_table(REVISIONS).map_err(err(WHAT))?;
        for key in &gone {
            table.remove(*key).map_err(err(WHAT))?;
        }
    }
    txn.commit().map_err(err(WHAT))?;
    Ok(gone.len() as u64)
}

/// A write transaction on the copy; unless it is a full batch, its
/// commit is made durable later, with the next one or before the swap.
fn begin(copy: &Database) -> Result<WriteTransaction, StorageError> {
    let mut txn = copy.begin_write().map_err(err(WHAT))?;
    txn.set_durability(Durability::None).map_err(err(WHAT))?;
    Ok(txn)
}

fn replace_all<K: redb::Key + 'static>(
    txn: &WriteTransaction,
    table: TableDefinition<K, &'static [u8]>,
    source: &impl ReadableTable<K, &'static [u8]>,
) -> Result<(), StorageError> {
    let mut target = txn.open_table(table).map_err(err(WHAT))?;
    target.retain(|_, _| false).map_err(err(WHAT))?;
    for entry in source.iter().map_err(err(WHAT))? {
        let (key, value) = entry.map_err(err(WHAT))?;
        target
            .insert(key.value(), value.value())
            .map_err(err(WHAT))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::ControlFlow;
    use std::sync::atomic::{AtomicBool, Ordering};

    use oxetcd_core::storage::{KeyVersion, KvMeta, KvRead, KvStore, KvWrite, LeaseRecord};

    use super::*;

    /// Everything a store holds, as comparable values.
    type Image = (
        BTreeMap<(i64, i64), (Vec<u8>, Vec<u8>, bool)>,
        BTreeMap<i64, i64>,
        KvMeta,
    );

    fn image(read: &impl KvRead) -> Image {
        let mut versions = BTreeMap::new();
        read.changes(0, i64::MAX, &mut |v| {
            let at = (v.mod_revision.main, v.mod_revision.sub);
            versions.insert(at, (v.key, v.value, v.tombstone));
            ControlFlow::Continue(())
        })
        .unwrap();
        let mut leases = BTreeMap::new();
        read.leases(&mut |l| {
            leases.insert(l.id, l.ttl_secs);
            ControlFlow::Continue(())
        })
        .unwrap();
        (versions, leases, read.meta().unwrap())
    }

    fn version(key: usize, main: i64, value_bytes: usize) -> KeyVersion {
        KeyVersion {
            key: format!("key-{key:05}").into_bytes(),
            mod_revision: oxetcd_core::storage::Revision { main, sub: 0 },
            create_revision: main,
            version: 1,
            lease: 0,
            value: vec![(main % 251) as u8; value_bytes],
            tombstone: false,
        }
    }

    /// Writes `count` revisions after `from`, one per commit, with a
    /// lease every tenth, and removes (as a compaction does) every other
    /// version below `from` once, halfway. Answers the last revision.
    fn write_while(kv: &RedbKv, from: i64, count: i64, removed: &[KeyVersion]) -> i64 {
        let mut main = from;
        for i in 0..count {
            main += 1;
            let mut txn = kv.write().unwrap();
            txn.put_version(&version((main % 500) as usize, main, 100))
                .unwrap();
            if i % 10 == 0 {
                txn.put_lease(&LeaseRecord {
                    id: main,
                    ttl_secs: 60,
                    remaining_ttl_secs: 0,
                })
                .unwrap();
            }
            if i == count / 2 {
                for v in removed {
                    txn.remove_version(&v.key, v.mod_revision).unwrap();
                }
            }
            let meta = KvMeta {
                revision: main,
                ..txn.meta().unwrap()
            };
            txn.set_meta(&meta).unwrap();
            txn.commit().unwrap();
        }
        main
    }

    /// Reads and writes go on while the backend is defragmented; the
    /// result holds exactly what the writes left (a compaction during the
    /// copy included), survives a reopen, and is smaller; a reader that
    /// began before keeps its snapshot.
    #[test]
    fn defragments_while_writes_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        let kv = RedbKv::open(&path).unwrap();
        // 4,000 versions of 4 KiB; half of them removed before the
        // defragmentation starts, so there is space to give back.
        let mut txn = kv.write().unwrap();
        let all: Vec<KeyVersion> = (1..=4000)
            .map(|i| version(i as usize, i + 1, 4096))
            .collect();
        for v in &all {
            txn.put_version(v).unwrap();
        }
        txn.set_meta(&KvMeta {
            revision: 4001,
            ..txn.meta().unwrap()
        })
        .unwrap();
        txn.commit().unwrap();
        let mut txn = kv.write().unwrap();
        for v in all.iter().step_by(2) {
            txn.remove_version(&v.key, v.mod_revision).unwrap();
        }
        txn.commit().unwrap();
        kv.sync().unwrap();
        let before_bytes = kv.size_bytes().unwrap();
        let early = kv.read().unwrap();
        let early_image = image(&early);

        // Removed while the copy runs: a compaction racing it.
        let racing: Vec<KeyVersion> = all.iter().skip(1).step_by(4).cloned().collect();
        let writing = Arc::new(AtomicBool::new(true));
        let writer = {
            let (kv, racing, writing) = (kv.clone(), racing.clone(), writing.clone());
            std::thread::spawn(move || {
                let last = write_while(&kv, 4001, 1500, &racing);
                writing.store(false, Ordering::Release);
                last
            })
        };
        let mut defrags = 0;
        // At least one defragmentation overlaps the writes, and at most
        // ten run in all.
        while defrags < 10 && (defrags == 0 || writing.load(Ordering::Acquire)) {
            kv.defragment().unwrap();
            defrags += 1;
            // Reads go on meanwhile too.
            assert!(kv.read().unwrap().meta().unwrap().revision >= 4001);
        }
        let last = writer.join().unwrap();
        assert_eq!(image(&early), early_image, "an early reader's snapshot");
        drop(early);

        let now = image(&kv.read().unwrap());
        assert_eq!(now.2.revision, last);
        // Every put is there; every removed version is gone.
        for main in 4002..=last {
            assert!(now.0.contains_key(&(main, 0)), "revision {main}");
        }
        for v in all.iter().step_by(2).chain(&racing) {
            let at = (v.mod_revision.main, 0);
            assert!(!now.0.contains_key(&at), "removed {at:?}");
        }
        assert_eq!(now.0.len() as i64, 4000 - 2000 - 1000 + (last - 4001));
        assert_eq!(now.1.len(), 150, "a lease every tenth write");

        // The same after a defragmentation with nothing going on, and
        // after a reopen from the file.
        kv.defragment().unwrap();
        assert_eq!(image(&kv.read().unwrap()), now);
        kv.sync().unwrap();
        let after_bytes = kv.size_bytes().unwrap();
        drop(kv);
        let reopened = RedbKv::open(&path).unwrap();
        assert_eq!(image(&reopened.read().unwrap()), now);
        assert!(
            after_bytes < before_bytes,
            "the file went from {before_bytes} to {after_bytes} bytes"
        );
        assert!(!copy_path(&path).exists(), "no copy is left");
    }

    /// A copy left by a crash is removed when the backend opens.
    #[test]
    fn a_stale_copy_is_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        std::fs::write(copy_path(&path), b"half a copy").unwrap();
        let _kv = RedbKv::open(&path).unwrap();
        assert!(!copy_path(&path).exists());
    }
}
