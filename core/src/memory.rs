//! In-memory implementations of the storage interfaces, for tests, the
//! simulator and the doctest on the crate's first page.
//!
//! Nothing here is durable: a "crash" in the simulator is modelled by keeping
//! a clone of the handle and dropping the node. Both types are cheap handles;
//! clones share the same state. The backend keeps, beside what readers see,
//! what its last durable commit held: every [`DURABLE_EVERY_COMMITS`]th
//! commit is durable, as the redb backend makes one durable at a cadence,
//! and so is a sync. A crash drops the commits since
//! ([`MemoryKv::lose_unsynced`]), as a process crash drops the redb
//! backend's non-durable commits, and the node replays them from the log.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use oxetcd_proto::etcdserverpb::AlarmMember;
use raft_proto::eraftpb::{Entry, HardState};

use crate::storage::{
    version_bytes, Alarms, AuthState, KeyVersion, KvMeta, KvRead, KvStore, KvWrite, LeaseRecord,
    LogState, LogStore, Membership, RangeEnd, Revision, StorageError, LEASE_BYTES,
};

/// An in-memory MVCC backend.
///
/// Readers hold an immutable snapshot (`Arc<KvState>`); a write transaction
/// copies the state on its first change and publishes the copy on commit, so
/// a read view never changes after it is taken. Only one write transaction is
/// expected at a time (the apply step); if two overlap, the last commit wins.
#[derive(Clone, Debug, Default)]
pub struct MemoryKv {
    shared: Arc<Mutex<Arc<KvState>>>,
    /// What a crash keeps.
    durable: Arc<Mutex<Durable>>,
}

/// Every this many commits, one is durable.
pub const DURABLE_EVERY_COMMITS: u32 = 8;

/// The state as of the last durable commit, sync or snapshot restore.
#[derive(Debug, Default)]
struct Durable {
    state: Arc<KvState>,
    /// Commits since.
    commits: u32,
}

impl Durable {
    fn set(&mut self, state: Arc<KvState>) {
        self.state = state;
        self.commits = 0;
    }
}

/// A read snapshot of a [`MemoryKv`].
#[derive(Clone, Debug)]
pub struct MemoryKvRead {
    state: Arc<KvState>,
}

/// A write transaction on a [`MemoryKv`].
#[derive(Debug)]
pub struct MemoryKvWrite {
    shared: Arc<Mutex<Arc<KvState>>>,
    durable: Arc<Mutex<Durable>>,
    /// Shared with readers until the first change, then private.
    state: Arc<KvState>,
    /// The membership changed: the commit is durable.
    membership_changed: bool,
}

/// Everything a [`MemoryKv`] stores.
#[derive(Clone, Debug)]
struct KvState {
    meta: KvMeta,
    /// Every stored version, by key, then by revision.
    keys: BTreeMap<Vec<u8>, BTreeMap<Revision, KeyVersion>>,
    /// The key written at each revision, for [`KvRead::changes`].
    by_revision: BTreeMap<Revision, Vec<u8>>,
    /// Granted leases, by ID.
    leases: BTreeMap<i64, LeaseRecord>,
    membership: Option<Membership>,
    auth: Option<AuthState>,
    alarms: Alarms,
    /// [`KvRead::used_bytes`], kept as versions and leases come and go.
    used_bytes: u64,
}

impl Default for KvState {
    fn default() -> Self {
        Self {
            // A fresh store is at revision 1 and never compacted, as etcd's is.
            meta: KvMeta {
                revision: 1,
                compact_revision: -1,
                ..KvMeta::default()
            },
            keys: BTreeMap::new(),
            by_revision: BTreeMap::new(),
            leases: BTreeMap::new(),
            membership: None,
            auth: None,
            alarms: Alarms::new(),
            used_bytes: 0,
        }
    }
}

impl MemoryKv {
    /// Replaces everything this store holds with the state `view` saw: how
    /// a member installs a snapshot received from another member's store
    /// (the in-process stand-in for streaming it).
    pub fn restore(&self, view: &MemoryKvRead) {
        *lock(&self.shared) = Arc::clone(&view.state);
        // A received snapshot is written durably before the log moves on.
        lock(&self.durable).set(Arc::clone(&view.state));
    }

    /// Drops every commit since the last sync: what a crash of the process
    /// costs the backend (its commits need no fsync of their own; the raft
    /// log is the durable record).
    pub fn lose_unsynced(&self) {
        let durable = Arc::clone(&lock(&self.durable).state);
        *lock(&self.shared) = durable;
    }
}

impl KvStore for MemoryKv {
    type Read = MemoryKvRead;
    type Write = MemoryKvWrite;

    fn read(&self) -> Result<MemoryKvRead, StorageError> {
        Ok(MemoryKvRead {
            state: Arc::clone(&lock(&self.shared)),
        })
    }

    fn write(&self) -> Result<MemoryKvWrite, StorageError> {
        Ok(MemoryKvWrite {
            shared: Arc::clone(&self.shared),
            durable: Arc::clone(&self.durable),
            state: Arc::clone(&lock(&self.shared)),
            membership_changed: false,
        })
    }

    fn sync(&self) -> Result<(), StorageError> {
        let current = Arc::clone(&lock(&self.shared));
        lock(&self.durable).set(current);
        Ok(())
    }
}

/// Reads and writes both read through their `state`; one body serves both.
macro_rules! read_through_state {
    ($($view:ty),+) => {$(
        impl KvRead for $view {
            fn meta(&self) -> Result<KvMeta, StorageError> {
                Ok(self.state.meta)
            }

            fn scan(
                &self,
                start: &[u8],
                end: RangeEnd<'_>,
                at: i64,
                visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
            ) -> Result<(), StorageError> {
                self.state.scan(start, end, at, visit);
                Ok(())
            }

            fn versions(
                &self,
                key: &[u8],
                visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
            ) -> Result<(), StorageError> {
                self.state.versions(key, visit);
                Ok(())
            }

            fn changes(
                &self,
                from: i64,
                to: i64,
                visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
            ) -> Result<(), StorageError> {
                self.state.changes(from, to, visit);
                Ok(())
            }

            fn leases(
                &self,
                visit: &mut dyn FnMut(LeaseRecord) -> ControlFlow<()>,
            ) -> Result<(), StorageError> {
                for lease in self.state.leases.values() {
                    if visit(*lease).is_break() {
                        break;
                    }
                }
                Ok(())
            }

            fn membership(&self) -> Result<Option<Membership>, StorageError> {
                Ok(self.state.membership.clone())
            }

            fn auth(&self) -> Result<Option<AuthState>, StorageError> {
                Ok(self.state.auth.clone())
            }

            fn alarms(&self) -> Result<Alarms, StorageError> {
                Ok(self.state.alarms.clone())
            }

            fn used_bytes(&self) -> Result<u64, StorageError> {
                Ok(self.state.used_bytes)
            }
        }
    )+};
}

read_through_state!(MemoryKvRead, MemoryKvWrite);

impl KvWrite for MemoryKvWrite {
    fn put_version(&mut self, version: &KeyVersion) -> Result<(), StorageError> {
        let state = Arc::make_mut(&mut self.state);
        let replaced = state
            .keys
            .entry(version.key.clone())
            .or_default()
            .insert(version.mod_revision, version.clone());
        state.used_bytes += version_bytes(version.key.len(), version.value.len());
        if let Some(old) = replaced {
            state.used_bytes = state
                .used_bytes
                .saturating_sub(version_bytes(old.key.len(), old.value.len()));
        }
        state
            .by_revision
            .insert(version.mod_revision, version.key.clone());
        Ok(())
    }

    fn remove_version(&mut self, key: &[u8], revision: Revision) -> Result<(), StorageError> {
        let state = Arc::make_mut(&mut self.state);
        if let Some(versions) = state.keys.get_mut(key) {
            if let Some(old) = versions.remove(&revision) {
                state.by_revision.remove(&revision);
                state.used_bytes = state
                    .used_bytes
                    .saturating_sub(version_bytes(old.key.len(), old.value.len()));
            }
            if versions.is_empty() {
                state.keys.remove(key);
            }
        }
        Ok(())
    }

    fn put_lease(&mut self, lease: &LeaseRecord) -> Result<(), StorageError> {
        let state = Arc::make_mut(&mut self.state);
        if state.leases.insert(lease.id, *lease).is_none() {
            state.used_bytes += LEASE_BYTES;
        }
        Ok(())
    }

    fn remove_lease(&mut self, id: i64) -> Result<(), StorageError> {
        if self.state.leases.contains_key(&id) {
            let state = Arc::make_mut(&mut self.state);
            state.leases.remove(&id);
            state.used_bytes = state.used_bytes.saturating_sub(LEASE_BYTES);
        }
        Ok(())
    }

    fn set_auth(&mut self, auth: &AuthState) -> Result<(), StorageError> {
        Arc::make_mut(&mut self.state).auth = Some(auth.clone());
        Ok(())
    }

    fn set_alarms(&mut self, alarms: &[AlarmMember]) -> Result<(), StorageError> {
        Arc::make_mut(&mut self.state).alarms = alarms.to_vec();
        Ok(())
    }

    fn set_membership(&mut self, membership: &Membership) -> Result<(), StorageError> {
        Arc::make_mut(&mut self.state).membership = Some(membership.clone());
        self.membership_changed = true;
        Ok(())
    }

    fn set_meta(&mut self, meta: &KvMeta) -> Result<(), StorageError> {
        Arc::make_mut(&mut self.state).meta = *meta;
        Ok(())
    }

    fn commit(self) -> Result<(), StorageError> {
        let mut durable = lock(&self.durable);
        durable.commits += 1;
        if durable.commits >= DURABLE_EVERY_COMMITS || self.membership_changed {
            durable.set(Arc::clone(&self.state));
        }
        *lock(&self.shared) = self.state;
        Ok(())
    }
}

impl KvState {
    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) {
        let upper = match end {
            // BTreeMap::range panics on an inverted range; it is simply empty.
            RangeEnd::Before(end) if end <= start => return,
            RangeEnd::Before(end) => Bound::Excluded(end),
            RangeEnd::Unbounded => Bound::Unbounded,
        };
        let newest_allowed = Revision {
            main: at,
            sub: i64::MAX,
        };
        for (_, versions) in self.keys.range::<[u8], _>((Bound::Included(start), upper)) {
            if let Some((_, version)) = versions.range(..=newest_allowed).next_back() {
                if visit(version.clone()).is_break() {
                    return;
                }
            }
        }
    }

    fn versions(&self, key: &[u8], visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>) {
        let Some(versions) = self.keys.get(key) else {
            return;
        };
        for version in versions.values().rev() {
            if visit(version.clone()).is_break() {
                return;
            }
        }
    }

    fn changes(&self, from: i64, to: i64, visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>) {
        if from > to {
            return;
        }
        let low = Revision {
            main: from,
            sub: i64::MIN,
        };
        let high = Revision {
            main: to,
            sub: i64::MAX,
        };
        for (revision, key) in self.by_revision.range(low..=high) {
            let version = self
                .keys
                .get(key)
                .and_then(|versions| versions.get(revision));
            if let Some(version) = version {
                if visit(version.clone()).is_break() {
                    return;
                }
            }
        }
    }
}

/// An in-memory raft log and hard state.
#[derive(Clone, Debug, Default)]
pub struct MemoryLog {
    inner: Arc<Mutex<LogInner>>,
}

#[derive(Debug)]
struct LogInner {
    hard_state: HardState,
    /// Index of `entries[0]` (or of the next entry when there are none).
    first_index: u64,
    /// Term of the entry at `first_index - 1`.
    snapshot_term: u64,
    cluster_id: u64,
    entries: Vec<Entry>,
}

impl Default for LogInner {
    fn default() -> Self {
        Self {
            hard_state: HardState::default(),
            first_index: 1,
            snapshot_term: 0,
            cluster_id: 0,
            entries: Vec::new(),
        }
    }
}

impl LogInner {
    fn last_index(&self) -> u64 {
        self.first_index + self.entries.len() as u64 - 1
    }
}

impl LogStore for MemoryLog {
    fn state(&self) -> Result<LogState, StorageError> {
        let inner = lock(&self.inner);
        Ok(LogState {
            hard_state: inner.hard_state.clone(),
            first_index: inner.first_index,
            last_index: inner.last_index(),
            snapshot_term: inner.snapshot_term,
            cluster_id: inner.cluster_id,
        })
    }

    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
        let inner = lock(&self.inner);
        if low > high || low < inner.first_index || high > inner.last_index() + 1 {
            return Err(StorageError::EntriesUnavailable {
                low,
                high,
                first: inner.first_index,
                last: inner.last_index(),
            });
        }
        let from = (low - inner.first_index) as usize;
        let to = (high - inner.first_index) as usize;
        Ok(inner.entries[from..to].to_vec())
    }

    fn append(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<(), StorageError> {
        let mut inner = lock(&self.inner);
        if let Some(first) = entries.first() {
            if inner.entries.is_empty() {
                // An empty log may start anywhere (after a snapshot).
                inner.first_index = first.index;
            }
            if first.index < inner.first_index || first.index > inner.last_index() + 1 {
                return Err(StorageError::AppendGap {
                    at: first.index,
                    first: inner.first_index,
                    last: inner.last_index(),
                });
            }
            let keep = (first.index - inner.first_index) as usize;
            inner.entries.truncate(keep);
            inner.entries.extend_from_slice(entries);
        }
        if let Some(hard_state) = hard_state {
            inner.hard_state = hard_state.clone();
        }
        Ok(())
    }

    fn compact(&self, index: u64) -> Result<(), StorageError> {
        let mut inner = lock(&self.inner);
        if index <= inner.first_index {
            return Ok(());
        }
        // The snapshot term is the term of entry `index - 1`, when stored;
        // compacting past the end keeps the recorded one.
        if let Some(entry) = inner.entries.get((index - 1 - inner.first_index) as usize) {
            inner.snapshot_term = entry.term;
        }
        let drop = ((index - inner.first_index) as usize).min(inner.entries.len());
        inner.entries.drain(..drop);
        inner.first_index = index;
        Ok(())
    }

    fn install_snapshot(&self, index: u64, term: u64) -> Result<(), StorageError> {
        let mut inner = lock(&self.inner);
        inner.entries.clear();
        inner.first_index = index + 1;
        inner.snapshot_term = term;
        Ok(())
    }

    fn store_cluster_id(&self, cluster_id: u64) -> Result<(), StorageError> {
        lock(&self.inner).cluster_id = cluster_id;
        Ok(())
    }
}

/// Locks shared state. A panic elsewhere while holding the lock cannot leave
/// it half-written (every mutation is a single assignment or a complete
/// method), so a poisoned lock is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(key: &[u8], main: i64, sub: i64, value: &[u8]) -> KeyVersion {
        KeyVersion {
            key: key.to_vec(),
            mod_revision: Revision { main, sub },
            create_revision: main,
            version: 1,
            lease: 0,
            value: value.to_vec(),
            tombstone: false,
        }
    }

    fn scan_all(view: &impl KvRead, at: i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        view.scan(b"", RangeEnd::Unbounded, at, &mut |v| {
            out.push((v.key, v.value));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    #[test]
    fn fresh_store_is_at_revision_one() {
        let kv = MemoryKv::default();
        assert_eq!(kv.read().unwrap().meta().unwrap().revision, 1);
    }

    #[test]
    fn read_view_never_changes() {
        let kv = MemoryKv::default();
        let before = kv.read().unwrap();
        let mut w = kv.write().unwrap();
        w.put_version(&version(b"a", 2, 0, b"1")).unwrap();
        // The write sees itself, the old view does not, even after commit.
        assert_eq!(scan_all(&w, 2).len(), 1);
        assert!(scan_all(&before, 2).is_empty());
        w.commit().unwrap();
        assert!(scan_all(&before, 2).is_empty());
        assert_eq!(scan_all(&kv.read().unwrap(), 2).len(), 1);
    }

    #[test]
    fn uncommitted_write_is_invisible() {
        let kv = MemoryKv::default();
        let mut w = kv.write().unwrap();
        w.put_version(&version(b"a", 2, 0, b"1")).unwrap();
        drop(w);
        assert!(scan_all(&kv.read().unwrap(), 2).is_empty());
    }

    #[test]
    fn scan_picks_newest_at_revision_and_respects_bounds() {
        let kv = MemoryKv::default();
        let mut w = kv.write().unwrap();
        w.put_version(&version(b"a", 2, 0, b"1")).unwrap();
        w.put_version(&version(b"a", 3, 0, b"2")).unwrap();
        w.put_version(&version(b"b", 3, 1, b"3")).unwrap();
        w.commit().unwrap();
        let r = kv.read().unwrap();
        assert_eq!(scan_all(&r, 2), vec![(b"a".to_vec(), b"1".to_vec())]);
        assert_eq!(scan_all(&r, 3).len(), 2);
        let mut n = 0;
        r.scan(b"b", RangeEnd::Before(b"a"), 3, &mut |_| {
            n += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(n, 0);
        let mut changes = Vec::new();
        r.changes(3, 3, &mut |v| {
            changes.push(v.mod_revision);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(
            changes,
            vec![Revision { main: 3, sub: 0 }, Revision { main: 3, sub: 1 }]
        );
        let mut newest_first = Vec::new();
        r.versions(b"a", &mut |v| {
            newest_first.push(v.mod_revision.main);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(newest_first, vec![3, 2]);
    }

    #[test]
    fn remove_version_forgets_it() {
        let kv = MemoryKv::default();
        let mut w = kv.write().unwrap();
        w.put_version(&version(b"a", 2, 0, b"1")).unwrap();
        w.remove_version(b"a", Revision { main: 2, sub: 0 })
            .unwrap();
        assert!(scan_all(&w, 5).is_empty());
        let mut n = 0;
        w.changes(0, 5, &mut |_| {
            n += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Entry::default()
        }
    }

    #[test]
    fn log_appends_truncates_and_compacts() {
        let log = MemoryLog::default();
        let s = log.state().unwrap();
        assert_eq!((s.first_index, s.last_index), (1, 0));
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)], None)
            .unwrap();
        // A conflicting append replaces the tail.
        log.append(&[entry(2, 2)], None).unwrap();
        let s = log.state().unwrap();
        assert_eq!((s.first_index, s.last_index), (1, 2));
        assert_eq!(log.entries(1, 3).unwrap()[1].term, 2);
        assert!(log.append(&[entry(5, 2)], None).is_err());
        log.compact(2).unwrap();
        assert_eq!(log.state().unwrap().first_index, 2);
        assert_eq!(log.state().unwrap().snapshot_term, 1);
        assert!(log.entries(1, 2).is_err());
        let hs = HardState {
            term: 7,
            ..HardState::default()
        };
        log.clone().append(&[], Some(&hs)).unwrap();
        assert_eq!(log.state().unwrap().hard_state.term, 7);
        log.install_snapshot(9, 5).unwrap();
        let s = log.state().unwrap();
        assert_eq!((s.first_index, s.last_index, s.snapshot_term), (10, 9, 5));
        log.append(&[entry(10, 6)], None).unwrap();
        assert_eq!(log.state().unwrap().last_index, 10);
    }
}
