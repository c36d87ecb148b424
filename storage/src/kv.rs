//! The MVCC backend on redb ([`RedbKv`]).
//!
//! Tables in `kv.redb`:
//!
//! ```text
//! revisions  main << 64 | sub  -> user key and version record (see codec)
//! meta       "kv_meta"         -> KvMeta, four LE words
//!            "kv_commit_seq"   -> commit sequence of the last index change, LE u64
//!            "alarms"          -> the active alarms (core's encode_alarms)
//!            "kv_used_bytes"   -> bytes in use (core's KvRead::used_bytes), LE u64
//!            "membership"      -> Membership::encode
//!            "auth"            -> AuthState::encode
//! leases     lease ID (i64)    -> TTL, remaining TTL: two LE words
//! ```
//!
//! Every record carries a CRC-32C checked on each read: version records
//! in their own encoding (module `codec`), `meta` records and leases in a
//! checksummed envelope (module `sealed`; module `meta` lists the meta
//! records), besides the format version and contents every database
//! carries (module `format`). A record refused as damaged is an error
//! naming the backend file ([`StorageError::in_file`]).
//!
//! Versions are stored by revision, the order in which the apply step writes
//! them, so a batch of puts fills the rightmost leaves of one B-tree and a
//! commit writes about as many pages as it has bytes, whatever the keys.
//! `changes` (watch replay) is a plain range of that table. A write
//! transaction holds the table open from begin to commit (`OpenTxn`), so
//! a batch of puts opens it once. What the table
//! cannot answer by itself, "the newest version of key K at revision R", the
//! in-memory key index (module `index`) does: it maps each user key to its stored
//! revisions, is rebuilt at open by one pass over the table, and is shared by
//! the writer and every reader. A scan walks the index in key order and
//! fetches each visible version by point lookup in the reader's own redb
//! snapshot.
//!
//! Each reader sees the index exactly as of its redb snapshot, compactions
//! after it included: the index versions its entries by commit sequence and
//! keeps removed ones until no older snapshot is alive (see module `index`). So a
//! read never fails or changes because of a later write or compaction.
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
//! the replay after a crash stays short. [`KvStore::sync`] forces one. The
//! key index needs no durability of its own: it is rebuilt from whatever
//! commit redb comes back at.

mod cadence;
#[cfg(test)]
mod crash_tests;
mod index;
mod meta;
mod online_defrag;
mod used;
mod view;

use std::collections::VecDeque;
use std::fmt;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{
    version_bytes, Alarms, AuthState, CompactionHash, KeyVersion, KvMeta, KvRead, KvStore, KvWrite,
    LeaseRecord, Membership, RangeEnd, Revision, StorageError, LEASE_BYTES,
};
use oxetcd_core::version::migration::Step;
use oxetcd_proto::etcdserverpb::AlarmMember;
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};

use crate::codec::{at_revision, encode_kv_meta, encode_lease, RevisionRecord};
use crate::error::{err, OpenError};
use crate::format::{open_database, refusing_panics, META};
use crate::log::file_size;
use crate::sealed::{seal, Address, Shape};
use cadence::DurableCadence;
use index::{Overlay, Pin, Rev, SharedIndex};
use meta::{
    read_alarms, read_auth, read_commit_seq, read_membership, read_meta, read_used_bytes, ALARMS,
    AUTH, COMMIT_SEQ, FRESH_META, KV_META, MEMBERSHIP, USED_BYTES,
};
use used::UsedBytes;
use view::{changes, leases, View};

/// A durable commit is made at least this often while commits keep coming,
/// so that redb can reclaim freed pages and replay after a crash stays short.
pub const DURABLE_INTERVAL: Duration = Duration::from_millis(100);
/// A durable commit is made at least once every this many commits.
pub const DURABLE_EVERY_COMMITS: u32 = 10_000;

/// Keyed by [`revision_key`]: one `u128` orders as (main, sub) does and is
/// cheaper for redb to open and compare than a tuple.
const REVISIONS: TableDefinition<u128, &[u8]> = TableDefinition::new("revisions");
const LEASES: TableDefinition<i64, &[u8]> = TableDefinition::new("leases");
/// A lease record's payload: TTL and remaining TTL, two LE words.
const LEASE_SHAPE: Shape = Shape::Fixed(16);
pub(crate) const CONTENTS: &str = "mvcc";

/// The MVCC backend in its own redb database. Cloning shares the database.
#[derive(Clone)]
pub struct RedbKv {
    shared: Arc<Shared>,
}

struct Shared {
    /// Shared by every read and write transaction as it begins; taken alone
    /// only by an online defragmentation, which needs the database to itself.
    /// A read snapshot holds its own reference: redb stops serving a
    /// database's pages once the `Database` drops, and a reader that began
    /// before a defragmentation's swap keeps reading the old file.
    db: RwLock<Arc<Db>>,
    /// The backend file, named in errors.
    path: Arc<Path>,
    index: Arc<SharedIndex>,
    cadence: Mutex<DurableCadence>,
    /// Hashes recorded at compactions, newest first, at most
    /// [`COMPACTION_HASHES_MAX`]; `None` while not kept.
    compaction_hashes: Mutex<Option<VecDeque<CompactionHash>>>,
    /// Told how long each commit took (the server's metrics).
    commit_observer: OnceLock<CommitObserver>,
    /// What changed since an online defragmentation last looked.
    dirty_from: online_defrag::DirtyFrom,
    /// Held by a defragmentation for its whole run: one at a time.
    defragmenting: Mutex<()>,
}

/// A redb database that closes without panicking. redb writes its
/// allocator state when a database closes, and on a damaged file that
/// can panic; a member that opened such a file (and refused it, or read
/// it) must still stop cleanly, so the close is caught and logged.
pub(crate) struct Db(Option<Database>);

impl Db {
    pub(crate) fn new(db: Database) -> Self {
        Self(Some(db))
    }
}

impl std::ops::Deref for Db {
    type Target = Database;

    fn deref(&self) -> &Database {
        // Taken only by `drop`.
        self.0.as_ref().expect("a database is open until dropped")
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(db) = self.0.take() {
            let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(db)));
            if closed.is_err() {
                tracing::error!("closing the backend failed: its file is damaged");
            }
        }
    }
}

/// Compaction hashes kept at most (etcd's `hashStorageMaxSize`): the
/// leader checks the newest it has not checked yet.
pub const COMPACTION_HASHES_MAX: usize = 10;

/// Called with the duration of every commit, on the committing thread.
pub type CommitObserver = Box<dyn Fn(Duration) + Send + Sync>;

/// The backend's tables and default records, made on every open (so a
/// table added within a format version appears in older files too).
fn init_tables(txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
    txn.open_table(REVISIONS)?;
    txn.open_table(LEASES)?;
    let mut table = txn.open_table(META)?;
    // Before a missing applied index is taken for a fresh store's.
    meta::check_keys(&table)?;
    meta::seal_old_records(&mut table)?;
    if table.get(KV_META.key)?.is_none() {
        let fresh = seal(Address::Meta(KV_META.key), &encode_kv_meta(&FRESH_META));
        table.insert(KV_META.key, fresh.as_slice())?;
    }
    Ok(())
}

impl RedbKv {
    /// Opens or creates the backend database at `path` (see [`crate::open`])
    /// and builds its key index.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        // A copy an interrupted online defragmentation left is not needed.
        online_defrag::remove_stale(&online_defrag::copy_path(path))
            .map_err(|e| OpenError::from_io(path, e))?;
        refusing_panics(path, || {
            let db = open_database(path, CONTENTS, init_tables)?;
            Self::serve(db, path)
        })
    }

    /// [`RedbKv::open`] on a storage backend of the tests' own (a
    /// simulated disk); `path` only names it.
    #[cfg(test)]
    pub(crate) fn open_on(
        backend: impl redb::StorageBackend,
        path: &Path,
    ) -> Result<Self, OpenError> {
        refusing_panics(path, || {
            let db = crate::format::open_database_on(backend, path, CONTENTS, init_tables)?;
            Self::serve(db, path)
        })
    }

    /// The store over an opened database: its key index built.
    fn serve(db: Database, path: &Path) -> Result<Self, OpenError> {
        let started = Instant::now();
        let (index, versions, version_bytes) =
            build_index(&db).map_err(|error| OpenError::Corrupt {
                path: path.to_path_buf(),
                detail: error.to_string(),
            })?;
        used::settle_used_bytes(&db, version_bytes).map_err(|error| OpenError::Corrupt {
            path: path.to_path_buf(),
            detail: error.to_string(),
        })?;
        let keys = index.key_count().unwrap_or(0);
        tracing::info!(
            path = %path.display(),
            keys,
            versions,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "built the kv key index"
        );
        Ok(Self {
            shared: Arc::new(Shared {
                db: RwLock::new(Arc::new(Db::new(db))),
                path: Arc::from(path),
                index: Arc::new(index),
                cadence: Mutex::new(DurableCadence::new(Instant::now())),
                compaction_hashes: Mutex::new(None),
                commit_observer: OnceLock::new(),
                dirty_from: online_defrag::DirtyFrom::default(),
                defragmenting: Mutex::new(()),
            }),
        })
    }

    /// From now on, every compaction records the hash of the history it
    /// drops (in memory, as etcd keeps them), for the compact hash check.
    /// Hashing costs a pass over that history inside the compaction's
    /// write, so it is off unless asked for.
    pub fn keep_compaction_hashes(&self) {
        let mut kept = self.kept_hashes();
        if kept.is_none() {
            *kept = Some(VecDeque::new());
        }
    }

    fn kept_hashes(&self) -> std::sync::MutexGuard<'_, Option<VecDeque<CompactionHash>>> {
        // A list of plain values, valid whatever a panicking holder did.
        self.shared
            .compaction_hashes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Size of the database file in bytes (the Status RPC's `dbSize`).
    ///
    /// redb has no cheap count of the bytes in use (its statistics walk every
    /// page and need the write lock), so there is no "in use" figure.
    pub fn size_bytes(&self) -> Result<u64, StorageError> {
        file_size(&self.shared.path)
    }

    /// Has `observer` told the duration of every commit from now on (the
    /// redb commit alone, durable or not). Only the first observer set is
    /// kept.
    pub fn observe_commits(&self, observer: CommitObserver) {
        let _ = self.shared.commit_observer.set(observer);
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The database, to begin a transaction on.
    fn db(&self) -> RwLockReadGuard<'_, Arc<Db>> {
        // A panicking defragmentation leaves the database as redb left it,
        // which redb keeps consistent.
        self.shared
            .db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
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

    fn compaction_hashes(&self) -> Vec<CompactionHash> {
        self.kept_hashes()
            .as_ref()
            .map(|kept| kept.iter().copied().collect())
            .unwrap_or_default()
    }

    fn read(&self) -> Result<RedbKvRead, StorageError> {
        // Pinned before the redb snapshot opens, so that no index slot the
        // snapshot may need is dropped in between.
        let mut pin = self.shared.index.pin();
        let db = Arc::clone(&self.db());
        let in_file = |e: StorageError| e.in_file(self.shared.path.display());
        let txn = db.begin_read().map_err(err("kv read")).map_err(in_file)?;
        // The tables hold the snapshot open after the transaction handle goes.
        let meta = txn
            .open_table(META)
            .map_err(err("kv read"))
            .map_err(in_file)?;
        pin.settle(read_commit_seq(&meta).map_err(in_file)?)?;
        Ok(RedbKvRead {
            revisions: txn
                .open_table(REVISIONS)
                .map_err(err("kv read"))
                .map_err(in_file)?,
            meta,
            leases: txn
                .open_table(LEASES)
                .map_err(err("kv read"))
                .map_err(in_file)?,
            pin,
            path: Arc::clone(&self.shared.path),
            _db: db,
        })
    }

    fn write(&self) -> Result<RedbKvWrite, StorageError> {
        let in_file = |e: StorageError| e.in_file(self.shared.path.display());
        let txn = self
            .db()
            .begin_write()
            .map_err(err("kv write"))
            .map_err(in_file)?;
        let (seq, used_bytes) = {
            let meta = txn
                .open_table(META)
                .map_err(err("kv write"))
                .map_err(in_file)?;
            let seq = read_commit_seq(&meta).map_err(in_file)?;
            (seq, read_used_bytes(&meta).map_err(in_file)?)
        };
        // The previous writer publishes its index changes just after its
        // redb commit, which already let this transaction begin.
        self.shared.index.wait_for(seq)?;
        let txn = OpenTxn::try_new(txn, |txn| txn.open_table(REVISIONS))
            .map_err(err("kv write"))
            .map_err(in_file)?;
        Ok(RedbKvWrite {
            txn,
            kv: self.clone(),
            seq,
            overlay: Overlay::default(),
            meta: None,
            used: UsedBytes::new(used_bytes),
            compaction_hashes: Vec::new(),
            lowest: u64::MAX,
        })
    }

    fn sync(&self) -> Result<(), StorageError> {
        let mut txn = self.db().begin_write().map_err(err("kv sync"))?;
        txn.set_durability(Durability::Immediate)
            .map_err(err("kv sync"))?;
        // An empty durable commit makes every earlier commit durable too.
        txn.commit().map_err(err("kv sync"))?;
        self.cadence().record(true, Instant::now());
        Ok(())
    }

    /// Online: the backend is copied while reads and writes go on, and
    /// swapped in with writes held only for the last changes (see
    /// `online_defrag`).
    fn defragment(&self) -> Result<(), StorageError> {
        // A second request waits for the first, then defragments again.
        let _one_at_a_time = self
            .shared
            .defragmenting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let report = online_defrag::defragment(self)?;
        tracing::info!(
            rounds = report.rounds,
            swap_versions = report.swap_versions,
            swap_ms = report.swap_ms,
            "defragmented the backend by copy and swap"
        );
        Ok(())
    }
}

/// A read snapshot of the backend; `Send + 'static`, so it may be moved to
/// another thread and read while writes go on.
pub struct RedbKvRead {
    revisions: ReadOnlyTable<u128, &'static [u8]>,
    meta: ReadOnlyTable<&'static str, &'static [u8]>,
    leases: ReadOnlyTable<i64, &'static [u8]>,
    /// Keeps the index slots this snapshot sees; knows its commit sequence.
    pin: Pin,
    /// The backend file, named in errors.
    path: Arc<Path>,
    /// Keeps the database open while the tables above read it (declared
    /// last, so dropped last).
    _db: Arc<Db>,
}

impl fmt::Debug for RedbKvRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbKvRead")
            .field("commit_seq", &self.pin.seq())
            .finish_non_exhaustive()
    }
}

impl KvRead for RedbKvRead {
    fn meta(&self) -> Result<KvMeta, StorageError> {
        in_file(&self.path, read_meta(&self.meta))
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let view = View {
            index: self.pin.index(),
            seq: self.pin.seq(),
            overlay: None,
            revisions: &self.revisions,
        };
        in_file(&self.path, view.scan(start, end, at, visit))
    }

    fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let view = View {
            index: self.pin.index(),
            seq: self.pin.seq(),
            overlay: None,
            revisions: &self.revisions,
        };
        in_file(&self.path, view.versions(key, visit))
    }

    fn changes(
        &self,
        from: i64,
        to: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        in_file(&self.path, changes(&self.revisions, from, to, visit))
    }

    fn leases(
        &self,
        visit: &mut dyn FnMut(LeaseRecord) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        in_file(&self.path, leases(&self.leases, visit))
    }

    fn membership(&self) -> Result<Option<Membership>, StorageError> {
        in_file(&self.path, read_membership(&self.meta))
    }

    fn auth(&self) -> Result<Option<AuthState>, StorageError> {
        in_file(&self.path, read_auth(&self.meta))
    }

    fn alarms(&self) -> Result<Alarms, StorageError> {
        in_file(&self.path, read_alarms(&self.meta))
    }

    fn used_bytes(&self) -> Result<u64, StorageError> {
        in_file(&self.path, read_used_bytes(&self.meta))
    }
}

/// The backend's write transaction. Dropping it without
/// [`KvWrite::commit`] discards its writes.
pub struct RedbKvWrite {
    txn: OpenTxn,
    kv: RedbKv,
    /// Commit sequence of the state this transaction started from.
    seq: u64,
    /// Index changes, published only once the redb commit succeeded.
    overlay: Overlay,
    /// The meta record set by the transaction, written at commit: the apply
    /// step sets it after every request, and one write per batch is enough.
    meta: Option<KvMeta>,
    /// Bytes in use, kept as versions and leases come and go.
    used: UsedBytes,
    /// Hashes recorded by compactions in this transaction, published at
    /// commit.
    compaction_hashes: Vec<CompactionHash>,
    /// Lowest main revision this transaction put or removed (`u64::MAX`:
    /// none), for an online defragmentation.
    lowest: u64,
}

/// The `revisions` table as a write transaction holds it.
type Revisions<'txn> = redb::Table<'txn, u128, &'static [u8]>;

self_cell::self_cell!(
    /// A write transaction with its `revisions` table open from begin to
    /// commit. Opening a table looks it up in redb's table tree and closing
    /// it writes its root back; a put did both twice (the live version's
    /// lookup, then the insert).
    struct OpenTxn {
        owner: WriteTransaction,
        #[not_covariant]
        dependent: Revisions,
    }
);

impl fmt::Debug for RedbKvWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbKvWrite")
            .field("commit_seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl RedbKvWrite {
    fn view<'a, T>(&'a self, revisions: &'a T) -> View<'a, T> {
        View {
            index: &self.kv.shared.index,
            seq: self.seq,
            overlay: Some(&self.overlay),
            revisions,
        }
    }

    /// `result`, a damaged record's error naming the backend file.
    fn named<T>(&self, result: Result<T, StorageError>) -> Result<T, StorageError> {
        in_file(&self.kv.shared.path, result)
    }

    /// One of the backend's tables, as this transaction sees it.
    fn table<K: redb::Key + 'static>(
        &self,
        table: TableDefinition<K, &'static [u8]>,
    ) -> Result<redb::Table<'_, K, &'static [u8]>, StorageError> {
        let txn = self.txn.borrow_owner();
        self.named(txn.open_table(table).map_err(err("kv read")))
    }

    fn meta_table(&self) -> Result<redb::Table<'_, &'static str, &'static [u8]>, StorageError> {
        self.table(META)
    }

    /// [`KvWrite::put_version`], its errors not yet naming the file.
    fn put_stored_version(&mut self, version: &KeyVersion) -> Result<(), StorageError> {
        let rev = stored_revision(version.mod_revision).ok_or_else(|| {
            StorageError::invariant(format_args!(
                "kv put: negative revision {:?}",
                version.mod_revision
            ))
        })?;
        let record = RevisionRecord {
            key: &version.key,
            create_revision: version.create_revision,
            version: version.version,
            lease: version.lease,
            tombstone: version.tombstone,
            value: &version.value,
        }
        .encode(revision_key(rev));
        self.lowest = self.lowest.min(rev.0);
        let used = &mut self.used;
        let clashed = self.txn.with_dependent_mut(|_, table| {
            // One B-tree operation in the common case: the replaced record,
            // if any, is checked after the fact and put back if it was
            // another key's.
            let clash = match table
                .insert(revision_key(rev), record.as_slice())
                .map_err(err("kv put"))?
            {
                Some(old) => {
                    let old = old.value();
                    let replaced = RevisionRecord::decode(old, revision_key(rev))?;
                    if replaced.key == version.key.as_slice() {
                        used.count(
                            false,
                            version_bytes(replaced.key.len(), replaced.value.len()),
                        );
                        None
                    } else {
                        Some(old.to_vec())
                    }
                }
                None => None,
            };
            if let Some(old) = &clash {
                table
                    .insert(revision_key(rev), old.as_slice())
                    .map_err(err("kv put"))?;
            }
            Ok::<_, StorageError>(clash.is_some())
        })?;
        if clashed {
            return Err(StorageError::invariant(format_args!(
                "kv put: revision {:?} already holds another key",
                version.mod_revision
            )));
        }
        self.overlay.put(&version.key, rev);
        self.used
            .count(true, version_bytes(version.key.len(), version.value.len()));
        Ok(())
    }

    /// [`KvWrite::remove_version`], its errors not yet naming the file.
    fn remove_stored_version(
        &mut self,
        key: &[u8],
        revision: Revision,
    ) -> Result<(), StorageError> {
        let Some(rev) = stored_revision(revision) else {
            return Ok(()); // never stored
        };
        let owned = self.txn.with_dependent_mut(|_, table| {
            let owned = match table.get(revision_key(rev)).map_err(err("kv remove"))? {
                Some(bytes) => {
                    let record = RevisionRecord::decode(bytes.value(), revision_key(rev))?;
                    (record.key == key).then(|| version_bytes(record.key.len(), record.value.len()))
                }
                None => None,
            };
            if owned.is_some() {
                table.remove(revision_key(rev)).map_err(err("kv remove"))?;
            }
            Ok::<_, StorageError>(owned)
        })?;
        if let Some(bytes) = owned {
            self.lowest = self.lowest.min(rev.0);
            self.used.count(false, bytes);
            self.overlay.remove(key, rev);
        }
        Ok(())
    }
}

impl KvRead for RedbKvWrite {
    fn meta(&self) -> Result<KvMeta, StorageError> {
        match self.meta {
            Some(meta) => Ok(meta),
            None => self.named(read_meta(&self.meta_table()?)),
        }
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let scanned = self
            .txn
            .with_dependent(|_, table| self.view(table).scan(start, end, at, visit));
        self.named(scanned)
    }

    fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let visited = self
            .txn
            .with_dependent(|_, table| self.view(table).versions(key, visit));
        self.named(visited)
    }

    fn changes(
        &self,
        from: i64,
        to: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let visited = self
            .txn
            .with_dependent(|_, table| changes(table, from, to, visit));
        self.named(visited)
    }

    fn leases(
        &self,
        visit: &mut dyn FnMut(LeaseRecord) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let table = self.table(LEASES)?;
        self.named(leases(&table, visit))
    }

    fn membership(&self) -> Result<Option<Membership>, StorageError> {
        self.named(read_membership(&self.meta_table()?))
    }

    fn auth(&self) -> Result<Option<AuthState>, StorageError> {
        self.named(read_auth(&self.meta_table()?))
    }

    fn alarms(&self) -> Result<Alarms, StorageError> {
        self.named(read_alarms(&self.meta_table()?))
    }

    fn used_bytes(&self) -> Result<u64, StorageError> {
        Ok(self.used.bytes)
    }
}

impl KvWrite for RedbKvWrite {
    fn migrate(&mut self, steps: &[Step]) -> Result<(), StorageError> {
        const WHAT: &str = "kv migrate";
        for step in steps {
            match *step {
                Step::AddTable(name) => {
                    self.txn
                        .borrow_owner()
                        .open_table(TableDefinition::<&[u8], &[u8]>::new(name))
                        .map_err(err(WHAT))?;
                }
                Step::DropTable(name) => {
                    self.txn
                        .borrow_owner()
                        .delete_table(TableDefinition::<&[u8], &[u8]>::new(name))
                        .map_err(err(WHAT))?;
                }
                Step::DropMetaKey(key) => {
                    let mut table = self
                        .txn
                        .borrow_owner()
                        .open_table(META)
                        .map_err(err(WHAT))?;
                    table.remove(key).map_err(err(WHAT))?;
                }
            }
        }
        Ok(())
    }

    fn put_version(&mut self, version: &KeyVersion) -> Result<(), StorageError> {
        let result = self.put_stored_version(version);
        self.named(result)
    }

    fn remove_version(&mut self, key: &[u8], revision: Revision) -> Result<(), StorageError> {
        let result = self.remove_stored_version(key, revision);
        self.named(result)
    }

    fn put_lease(&mut self, lease: &LeaseRecord) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(LEASES)
            .map_err(err("kv lease"))?;
        let sealed = seal(Address::Lease(lease.id), &encode_lease(lease));
        let replaced = table
            .insert(lease.id, sealed.as_slice())
            .map_err(err("kv lease"))?
            .is_some();
        drop(table);
        if !replaced {
            self.used.count(true, LEASE_BYTES);
        }
        Ok(())
    }

    fn remove_lease(&mut self, id: i64) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(LEASES)
            .map_err(err("kv lease"))?;
        let removed = table.remove(id).map_err(err("kv lease"))?.is_some();
        drop(table);
        if removed {
            self.used.count(false, LEASE_BYTES);
        }
        Ok(())
    }

    fn set_meta(&mut self, meta: &KvMeta) -> Result<(), StorageError> {
        self.meta = Some(*meta);
        Ok(())
    }

    fn set_membership(&mut self, membership: &Membership) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(META)
            .map_err(err("kv membership"))?;
        MEMBERSHIP.write(&mut table, &membership.encode(), "kv membership")
    }

    fn set_auth(&mut self, auth: &AuthState) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(META)
            .map_err(err("kv auth"))?;
        AUTH.write(&mut table, &auth.encode(), "kv auth")
    }

    fn set_alarms(&mut self, alarms: &[AlarmMember]) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(META)
            .map_err(err("kv alarms"))?;
        let payload = oxetcd_core::storage::encode_alarms(alarms);
        ALARMS.write(&mut table, &payload, "kv alarms")
    }

    fn commit(self) -> Result<(), StorageError> {
        let Self {
            txn,
            kv,
            seq,
            overlay,
            meta,
            used,
            compaction_hashes,
            lowest,
        } = self;
        // Closes `revisions`, writing its root back, before the commit.
        let mut txn = txn.into_owner();
        let (used_bytes, used_bytes_changed) = (used.bytes, used.changed);
        let changes_index = !overlay.is_empty();
        let seq = seq + 1;
        if changes_index || meta.is_some() || used_bytes_changed {
            let mut table = txn.open_table(META).map_err(err("kv commit"))?;
            if used_bytes_changed {
                USED_BYTES.write(&mut table, &used_bytes.to_le_bytes(), "kv commit")?;
            }
            if let Some(meta) = meta {
                KV_META.write(&mut table, &encode_kv_meta(&meta), "kv commit")?;
            }
            if changes_index {
                COMMIT_SEQ.write(&mut table, &seq.to_le_bytes(), "kv commit")?;
            }
        }
        let durable = kv.cadence().is_due(Instant::now());
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(durability).map_err(err("kv commit"))?;
        // Held across the commit, so that a defragmentation's snapshot
        // either shows this commit or finds it recorded.
        let recorded = (lowest != u64::MAX).then(|| kv.shared.dirty_from.record(lowest));
        let started = Instant::now();
        txn.commit().map_err(err("kv commit"))?;
        let committed = Instant::now();
        drop(recorded);
        kv.cadence().record(durable, committed);
        if let Some(observe) = kv.shared.commit_observer.get() {
            observe(committed - started);
        }
        if changes_index {
            kv.shared.index.publish(seq, overlay)?;
        }
        if let Some(kept) = kv.kept_hashes().as_mut() {
            for hash in compaction_hashes {
                kept.push_front(hash);
                kept.truncate(COMPACTION_HASHES_MAX);
            }
        }
        Ok(())
    }

    fn before_compaction(&mut self, meta: &KvMeta, revision: i64) -> Result<(), StorageError> {
        if self.kv.kept_hashes().is_none() {
            return Ok(());
        }
        match crate::bolt::hash::hash_kv_at(&*self, meta, revision) {
            Ok(hashed) => self.compaction_hashes.push(CompactionHash {
                hash: hashed.hash,
                compact_revision: hashed.compact_revision,
                revision,
            }),
            Err(oxetcd_core::Error::Storage(e)) => return Err(e),
            // A revision the compaction itself refuses: nothing to keep.
            Err(_) => {}
        }
        Ok(())
    }
}

/// Reads every stored version's key, in revision order, into a fresh
/// index; returns it with the number of versions and the bytes they count
/// for ([`version_bytes`]).
fn build_index(db: &Database) -> Result<(SharedIndex, u64, u64), StorageError> {
    let txn = db.begin_read().map_err(err("kv index"))?;
    let seq = read_commit_seq(&txn.open_table(META).map_err(err("kv index"))?)?;
    let table = txn.open_table(REVISIONS).map_err(err("kv index"))?;
    let mut versions = 0;
    let mut used_bytes = 0u64;
    let rows = table.iter().map_err(err("kv index"))?.map(|row| {
        let (rev, bytes) = row.map_err(err("kv index"))?;
        versions += 1;
        let rev = split_revision_key(rev.value());
        let record = RevisionRecord::decode_unverified(bytes.value())
            .map_err(|e| at_revision(e, revision_key(rev)))?;
        used_bytes += version_bytes(record.key.len(), record.value.len());
        Ok((record.key.to_vec(), rev))
    });
    let index = SharedIndex::build(seq, rows)?;
    Ok((index, versions, used_bytes))
}

/// `result`, a damaged record's error naming the backend file `path`.
fn in_file<T>(path: &Path, result: Result<T, StorageError>) -> Result<T, StorageError> {
    result.map_err(|error| error.in_file(path.display()))
}

/// A revision as stored: both parts must be non-negative.
fn stored_revision(revision: Revision) -> Option<(u64, u64)> {
    Some((
        u64::try_from(revision.main).ok()?,
        u64::try_from(revision.sub).ok()?,
    ))
}

/// The `revisions` table key of a revision.
fn revision_key((main, sub): Rev) -> u128 {
    (u128::from(main) << 64) | u128::from(sub)
}

fn split_revision_key(key: u128) -> Rev {
    ((key >> 64) as u64, key as u64)
}

#[cfg(test)]
mod tests;
