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
//! transaction (module `write`) holds the table open from begin to commit,
//! so a batch of puts opens it once. What the table
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
//! the replay after a crash stays short. A commit that changes the
//! membership is durable too: the members are known after a crash without
//! a replay. [`KvStore::sync`] forces one. The
//! key index needs no durability of its own: it is rebuilt from whatever
//! commit redb comes back at.

mod cadence;
#[cfg(test)]
mod crash_tests;
mod index;
mod meta;
mod online_defrag;
mod ordered_key;
mod used;
mod view;
mod write;

use std::collections::VecDeque;
use std::fmt;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{
    version_bytes, Alarms, AuthState, CompactionHash, KeyVersion, KvMeta, KvRead, KvStore,
    LeaseRecord, Membership, RangeEnd, Revision, StorageError,
};
use redb::{Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition};

use crate::codec::{at_revision, encode_kv_meta, RevisionRecord};
use crate::error::{err, OpenError};
use crate::format::{open_database, refusing_panics, META};
use crate::log::file_size;
use crate::sealed::{seal, Address, Shape};
use cadence::DurableCadence;
use index::{Gen, Pin, Rev, SharedIndex};
use meta::{
    read_alarms, read_auth, read_commit_seq, read_membership, read_meta, read_used_bytes,
    FRESH_META, KV_META,
};
use view::{changes, leases, View};
pub use write::RedbKvWrite;

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
        RedbKvWrite::begin(self)
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

/// Reads every stored version's key and generation, in revision order,
/// into a fresh index; returns it with the number of versions and the bytes they count
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
        let table_key = rev.value();
        let rev = split_revision_key(table_key);
        // A damaged record keeps its place under the key it names, with no
        // generation: whoever reads it is refused.
        let (record, gen) = match RevisionRecord::decode(bytes.value(), table_key) {
            Ok(record) => {
                let gen = Gen::new(record.create_revision, record.version, record.tombstone);
                (record, gen)
            }
            Err(_) => (
                RevisionRecord::decode_unverified(bytes.value())
                    .map_err(|e| at_revision(e, table_key))?,
                Gen::UNKNOWN,
            ),
        };
        used_bytes += version_bytes(record.key.len(), record.value.len());
        Ok((record.key.to_vec(), rev, gen))
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
