//! The MVCC backend on redb ([`RedbKv`]).
//!
//! Tables in `kv.redb`:
//!
//! ```text
//! versions  (user key, !main, !sub) -> VersionRecord (see codec)
//! changes   (main, sub)             -> user key
//! meta      "kv_meta"               -> KvMeta, four LE words
//! ```
//!
//! `!n` is `u64::MAX - n`: redb compares tuple keys element by element, so
//! inverting the revision puts each key's newest version first. A read at
//! revision `at` seeks straight to `(key, !at, 0)` and finds the newest
//! version at or before `at` without walking the newer ones; after visiting
//! it, the scan skips the key's older versions (stepping over a few, seeking
//! past the key when there are more). `changes` replays history in revision
//! order for watches and finds what compaction must remove.
//!
//! # Durability
//!
//! [`KvWrite::commit`] commits with [`Durability::None`]: the commit is
//! visible to new readers at once but not fsync'd. The raft log is the
//! durable record, and [`KvMeta::applied_index`] commits in the same
//! transaction as the data, so after a crash redb comes back at some earlier
//! commit, data and applied index together, and the node replays the log from
//! there. At least every [`DURABLE_INTERVAL`] or [`DURABLE_EVERY_COMMITS`]
//! commits, whichever comes first, a commit is made durable instead: redb
//! reclaims pages freed by non-durable commits only after a durable one, and
//! the replay after a crash stays short. [`KvStore::sync`] forces one.

use std::fmt;
use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{
    KeyVersion, KvMeta, KvRead, KvStore, KvWrite, RangeEnd, Revision, StorageError,
};
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};

use crate::codec::{decode_kv_meta, encode_kv_meta, VersionRecord};
use crate::error::{err, OpenError};
use crate::format::{open_database, META};
use crate::log::file_size;

/// A durable commit is made at least this often while commits keep coming,
/// so that redb can reclaim freed pages and replay after a crash stays short.
pub const DURABLE_INTERVAL: Duration = Duration::from_millis(100);
/// A durable commit is made at least once every this many commits.
pub const DURABLE_EVERY_COMMITS: u32 = 10_000;

/// A scan steps over at most this many unwanted versions (a visited key's
/// older ones, or versions newer than the read revision) before it seeks
/// instead: stepping is cheaper for keys with few versions, seeking for keys
/// with long histories.
const SCAN_STEPS_BEFORE_SEEK: u32 = 8;

type VersionKey = (&'static [u8], u64, u64);
const VERSIONS: TableDefinition<VersionKey, &[u8]> = TableDefinition::new("versions");
const CHANGES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("changes");
const KV_META_KEY: &str = "kv_meta";
const CONTENTS: &str = "mvcc";

/// The meta record of a fresh store: revision 1 and never compacted, as etcd.
const FRESH_META: KvMeta = KvMeta {
    applied_index: 0,
    applied_term: 0,
    revision: 1,
    compact_revision: -1,
};

/// The MVCC backend in its own redb database. Cloning shares the database.
#[derive(Clone)]
pub struct RedbKv {
    shared: Arc<Shared>,
}

struct Shared {
    db: Database,
    path: PathBuf,
    cadence: Mutex<DurableCadence>,
}

impl RedbKv {
    /// Opens or creates the backend database at `path` (see [`crate::open`]).
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let db = open_database(path, CONTENTS, |txn| {
            txn.open_table(VERSIONS)?;
            txn.open_table(CHANGES)?;
            let mut meta = txn.open_table(META)?;
            if meta.get(KV_META_KEY)?.is_none() {
                meta.insert(KV_META_KEY, encode_kv_meta(&FRESH_META).as_slice())?;
            }
            Ok(())
        })?;
        Ok(Self {
            shared: Arc::new(Shared {
                db,
                path: path.to_path_buf(),
                cadence: Mutex::new(DurableCadence::new(Instant::now())),
            }),
        })
    }

    /// Size of the database file in bytes (the Status RPC's `dbSize`).
    ///
    /// redb has no cheap count of the bytes in use (its statistics walk every
    /// page and need the write lock), so there is no "in use" figure.
    pub fn size_bytes(&self) -> Result<u64, StorageError> {
        file_size(&self.shared.path)
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    fn cadence(&self) -> std::sync::MutexGuard<'_, DurableCadence> {
        // The cadence is two plain numbers, valid whatever a panicking
        // holder was doing.
        self.shared
            .cadence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for RedbKv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbKv")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

impl KvStore for RedbKv {
    type Read = RedbKvRead;
    type Write = RedbKvWrite;

    fn read(&self) -> Result<RedbKvRead, StorageError> {
        let txn = self.shared.db.begin_read().map_err(err("kv read"))?;
        // The tables hold the snapshot open after the transaction handle goes.
        Ok(RedbKvRead {
            versions: txn.open_table(VERSIONS).map_err(err("kv read"))?,
            changes: txn.open_table(CHANGES).map_err(err("kv read"))?,
            meta: txn.open_table(META).map_err(err("kv read"))?,
        })
    }

    fn write(&self) -> Result<RedbKvWrite, StorageError> {
        let txn = self.shared.db.begin_write().map_err(err("kv write"))?;
        Ok(RedbKvWrite {
            txn,
            kv: self.clone(),
        })
    }

    fn sync(&self) -> Result<(), StorageError> {
        let mut txn = self.shared.db.begin_write().map_err(err("kv sync"))?;
        txn.set_durability(Durability::Immediate)
            .map_err(err("kv sync"))?;
        // An empty durable commit makes every earlier commit durable too.
        txn.commit().map_err(err("kv sync"))?;
        self.cadence().record(true, Instant::now());
        Ok(())
    }
}

/// A read snapshot of the backend; `Send + 'static`, so it may be moved to
/// another thread and read while writes go on.
pub struct RedbKvRead {
    versions: ReadOnlyTable<VersionKey, &'static [u8]>,
    changes: ReadOnlyTable<(u64, u64), &'static [u8]>,
    meta: ReadOnlyTable<&'static str, &'static [u8]>,
}

impl fmt::Debug for RedbKvRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbKvRead").finish_non_exhaustive()
    }
}

impl KvRead for RedbKvRead {
    fn meta(&self) -> Result<KvMeta, StorageError> {
        read_meta(&self.meta)
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        scan(&self.versions, start, end, at, visit)
    }

    fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        versions(&self.versions, key, visit)
    }

    fn changes(
        &self,
        from: i64,
        to: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        changes(&self.versions, &self.changes, from, to, visit)
    }
}

/// The backend's write transaction. Dropping it without
/// [`KvWrite::commit`] discards its writes.
pub struct RedbKvWrite {
    txn: WriteTransaction,
    kv: RedbKv,
}

impl fmt::Debug for RedbKvWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbKvWrite").finish_non_exhaustive()
    }
}

impl KvRead for RedbKvWrite {
    fn meta(&self) -> Result<KvMeta, StorageError> {
        read_meta(&self.txn.open_table(META).map_err(err("kv read"))?)
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let table = self.txn.open_table(VERSIONS).map_err(err("kv read"))?;
        scan(&table, start, end, at, visit)
    }

    fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let table = self.txn.open_table(VERSIONS).map_err(err("kv read"))?;
        versions(&table, key, visit)
    }

    fn changes(
        &self,
        from: i64,
        to: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let versions = self.txn.open_table(VERSIONS).map_err(err("kv read"))?;
        let changes_table = self.txn.open_table(CHANGES).map_err(err("kv read"))?;
        changes(&versions, &changes_table, from, to, visit)
    }
}

impl KvWrite for RedbKvWrite {
    fn put_version(&mut self, version: &KeyVersion) -> Result<(), StorageError> {
        let (main, sub) = stored_revision(version.mod_revision).ok_or_else(|| {
            StorageError::new(format_args!(
                "kv put: negative revision {:?}",
                version.mod_revision
            ))
        })?;
        let mut versions = self.txn.open_table(VERSIONS).map_err(err("kv put"))?;
        let mut changes = self.txn.open_table(CHANGES).map_err(err("kv put"))?;
        if let Some(owner) = changes.get((main, sub)).map_err(err("kv put"))? {
            if owner.value() != version.key.as_slice() {
                return Err(StorageError::new(format_args!(
                    "kv put: revision {:?} already holds another key",
                    version.mod_revision
                )));
            }
        }
        let record = VersionRecord {
            create_revision: version.create_revision,
            version: version.version,
            lease: version.lease,
            tombstone: version.tombstone,
            value: &version.value,
        };
        versions
            .insert(
                (version.key.as_slice(), !main, !sub),
                record.encode().as_slice(),
            )
            .map_err(err("kv put"))?;
        changes
            .insert((main, sub), version.key.as_slice())
            .map_err(err("kv put"))?;
        Ok(())
    }

    fn remove_version(&mut self, key: &[u8], revision: Revision) -> Result<(), StorageError> {
        let Some((main, sub)) = stored_revision(revision) else {
            return Ok(()); // never stored
        };
        let mut versions = self.txn.open_table(VERSIONS).map_err(err("kv remove"))?;
        let mut changes = self.txn.open_table(CHANGES).map_err(err("kv remove"))?;
        versions
            .remove((key, !main, !sub))
            .map_err(err("kv remove"))?;
        let owned = changes
            .get((main, sub))
            .map_err(err("kv remove"))?
            .is_some_and(|owner| owner.value() == key);
        if owned {
            changes.remove((main, sub)).map_err(err("kv remove"))?;
        }
        Ok(())
    }

    fn set_meta(&mut self, meta: &KvMeta) -> Result<(), StorageError> {
        let mut table = self.txn.open_table(META).map_err(err("kv meta"))?;
        table
            .insert(KV_META_KEY, encode_kv_meta(meta).as_slice())
            .map_err(err("kv meta"))?;
        Ok(())
    }

    fn commit(mut self) -> Result<(), StorageError> {
        let durable = self.kv.cadence().is_due(Instant::now());
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        self.txn
            .set_durability(durability)
            .map_err(err("kv commit"))?;
        self.txn.commit().map_err(err("kv commit"))?;
        self.kv.cadence().record(durable, Instant::now());
        Ok(())
    }
}

/// When the next backend commit must be durable.
#[derive(Debug)]
struct DurableCadence {
    last_durable: Instant,
    commits_since_durable: u32,
}

impl DurableCadence {
    fn new(now: Instant) -> Self {
        Self {
            last_durable: now,
            commits_since_durable: 0,
        }
    }

    fn is_due(&self, now: Instant) -> bool {
        self.commits_since_durable + 1 >= DURABLE_EVERY_COMMITS
            || now.saturating_duration_since(self.last_durable) >= DURABLE_INTERVAL
    }

    fn record(&mut self, durable: bool, now: Instant) {
        if durable {
            self.last_durable = now;
            self.commits_since_durable = 0;
        } else {
            self.commits_since_durable += 1;
        }
    }
}

/// A revision as stored: both parts must be non-negative.
fn stored_revision(revision: Revision) -> Option<(u64, u64)> {
    Some((
        u64::try_from(revision.main).ok()?,
        u64::try_from(revision.sub).ok()?,
    ))
}

fn read_meta(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<KvMeta, StorageError> {
    match table.get(KV_META_KEY).map_err(err("kv read"))? {
        Some(bytes) => decode_kv_meta(bytes.value()),
        None => Ok(FRESH_META),
    }
}

fn scan(
    table: &impl ReadableTable<VersionKey, &'static [u8]>,
    start: &[u8],
    end: RangeEnd<'_>,
    at: i64,
    visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
) -> Result<(), StorageError> {
    let Ok(at) = u64::try_from(at) else {
        return Ok(()); // nothing is stored below revision 0
    };
    if let RangeEnd::Before(end) = end {
        if end <= start {
            return Ok(());
        }
    }
    // Smallest inverted main revision that is visible at `at`.
    let visible_from = !at;
    let mut seek_key = start.to_vec();
    let mut seek = Bound::Included((0, 0));
    loop {
        let lower = match seek {
            Bound::Included((main, sub)) => Bound::Included((seek_key.as_slice(), main, sub)),
            Bound::Excluded((main, sub)) => Bound::Excluded((seek_key.as_slice(), main, sub)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let rows = table
            .range::<(&[u8], u64, u64)>((lower, Bound::Unbounded))
            .map_err(err("kv scan"))?;
        // The key whose visible version was already visited.
        let mut visited: Option<Vec<u8>> = None;
        let mut steps = 0;
        let mut reseek = None;
        for row in rows {
            let (row_key, bytes) = row.map_err(err("kv scan"))?;
            let (key, inverted_main, inverted_sub) = row_key.value();
            if let RangeEnd::Before(end) = end {
                if key >= end {
                    return Ok(());
                }
            }
            let is_visited = visited.as_deref() == Some(key);
            if is_visited || inverted_main < visible_from {
                steps += 1;
                if steps > SCAN_STEPS_BEFORE_SEEK {
                    reseek = Some((
                        key.to_vec(),
                        if is_visited {
                            Bound::Excluded((u64::MAX, u64::MAX))
                        } else {
                            Bound::Included((visible_from, 0))
                        },
                    ));
                    break;
                }
                continue;
            }
            // Every newer version of this key came before it: this is the
            // newest one visible at `at`.
            steps = 0;
            let version = key_version(key, inverted_main, inverted_sub, bytes.value())?;
            if visit(version).is_break() {
                return Ok(());
            }
            visited = Some(key.to_vec());
        }
        match reseek {
            Some((key, bound)) => {
                seek_key = key;
                seek = bound;
            }
            None => return Ok(()),
        }
    }
}

fn versions(
    table: &impl ReadableTable<VersionKey, &'static [u8]>,
    key: &[u8],
    visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
) -> Result<(), StorageError> {
    let rows = table
        .range::<(&[u8], u64, u64)>((key, 0, 0)..=(key, u64::MAX, u64::MAX))
        .map_err(err("kv versions"))?;
    for row in rows {
        let (row_key, bytes) = row.map_err(err("kv versions"))?;
        let (key, inverted_main, inverted_sub) = row_key.value();
        if visit(key_version(
            key,
            inverted_main,
            inverted_sub,
            bytes.value(),
        )?)
        .is_break()
        {
            break;
        }
    }
    Ok(())
}

fn changes(
    versions: &impl ReadableTable<VersionKey, &'static [u8]>,
    changes: &impl ReadableTable<(u64, u64), &'static [u8]>,
    from: i64,
    to: i64,
    visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
) -> Result<(), StorageError> {
    let Ok(to) = u64::try_from(to) else {
        return Ok(());
    };
    let from = u64::try_from(from).unwrap_or(0);
    if from > to {
        return Ok(());
    }
    for row in changes
        .range((from, 0)..=(to, u64::MAX))
        .map_err(err("kv changes"))?
    {
        let (revision, key) = row.map_err(err("kv changes"))?;
        let (main, sub) = revision.value();
        let key = key.value();
        let bytes = versions
            .get((key, !main, !sub))
            .map_err(err("kv changes"))?
            .ok_or_else(|| {
                StorageError::new(format_args!(
                    "kv changes: revision {main}.{sub} names a version that is not stored"
                ))
            })?;
        if visit(key_version(key, !main, !sub, bytes.value())?).is_break() {
            break;
        }
    }
    Ok(())
}

fn key_version(
    key: &[u8],
    inverted_main: u64,
    inverted_sub: u64,
    bytes: &[u8],
) -> Result<KeyVersion, StorageError> {
    let revision = |inverted: u64| {
        i64::try_from(!inverted)
            .map_err(|_| StorageError::new("corrupt version key: revision out of range"))
    };
    let record = VersionRecord::decode(bytes)?;
    Ok(KeyVersion {
        key: key.to_vec(),
        mod_revision: Revision {
            main: revision(inverted_main)?,
            sub: revision(inverted_sub)?,
        },
        create_revision: record.create_revision,
        version: record.version,
        lease: record.lease,
        value: record.value.to_vec(),
        tombstone: record.tombstone,
    })
}

#[cfg(test)]
mod tests;
