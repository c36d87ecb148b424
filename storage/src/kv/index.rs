//! The in-memory key index of the MVCC backend: for each user key, the
//! revisions at which a version of it is stored, oldest first, each with
//! its [`Gen`] (the key's create revision and version there).
//!
//! The `revisions` table is keyed by revision, so it cannot answer "the
//! newest version of key K at revision R" by itself; this index can, and the
//! table then supplies the record by point lookup. A put needs no record:
//! the newest version's [`Gen`] is all it continues from, and a lookup of a
//! random old record is a page read the put no longer makes. The index is
//! rebuilt at open by one pass over the table (each record's checksum
//! checked; a damaged one's generation is [`Gen::UNKNOWN`], so the put
//! reads the record and is refused as a read is) and never written to disk.
//!
//! # Snapshots
//!
//! Every commit that changes the index gets the next *commit sequence*
//! number, stored in the backend's meta table in the same redb transaction.
//! A read snapshot reads that number from its own redb snapshot, so it knows
//! exactly which commits it contains. Each index slot records the sequence
//! that added it and the one that removed it, and a snapshot at sequence `s`
//! sees the slots with `added <= s < removed`: later puts are invisible to
//! it, and versions that later commits removed (compaction) are still there
//! for it, exactly as its redb snapshot has them.
//!
//! Removed slots stay until no snapshot older than their removal is alive
//! ([`Snapshots`] counts the live ones per sequence); the commit after that
//! drops them. A long-lived snapshot thus keeps the removed slots in memory
//! as it keeps their pages in the redb file, and no more.
//!
//! The writer changes the index only after its redb commit succeeded
//! ([`SharedIndex::publish`]); until then its changes live in an [`Overlay`]
//! that its own reads merge in. A snapshot opened between the redb commit
//! and the index update waits (briefly) for the update
//! ([`Pin::settle`]).
//!
//! # Layout
//!
//! Each key's slots are found by hash, so the point lookups of a put (the
//! apply step's read, the generation the put continues from, the commit's
//! update) cost one hash each, not a descent through a tree of every key.
//! The same keys are kept in order beside it for scans, which look each
//! key's slots up by hash as they go; a scan reads a record per key
//! besides, which costs far more. A key's bytes are shared by both; the
//! ordered set holds each key's first bytes inline besides, so a new key's
//! place is found mostly without reading other keys' bytes (module
//! `ordered_key`).
//!
//! # Locking
//!
//! Readers take the index's read lock per batch of at most
//! [`SCAN_BATCH_KEYS`] keys, and never while they read records or call
//! their visitor, so a writer waits at most one batch. A panic while the
//! write lock is held poisons it, and every later use is a [`StorageError`].
//! Lock order: the index lock before the snapshot registry's mutex.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::RandomState;
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{RangeEnd, StorageError};

use super::ordered_key::OrderedKey;

/// A revision as stored: (main, sub), both non-negative.
pub(crate) type Rev = (u64, u64);

/// A scan examines at most this many keys per hold of the index's read lock,
/// so that a commit waits for at most one batch of a long scan.
pub(crate) const SCAN_BATCH_KEYS: usize = 256;

/// How long a snapshot or write transaction waits for the index to catch up
/// with a redb commit it already sees. The writer updates the index right
/// after its commit returns (microseconds); running out of this means the
/// writer died in between, and the store is unusable.
const INDEX_CATCH_UP_MAX: Duration = Duration::from_secs(10);

/// `removed` of a slot that no commit removed.
const LIVE: u64 = u64::MAX;

/// Where a stored version stands in its key's generation: what a put on
/// top of it continues from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gen {
    /// The key's create revision.
    pub(crate) create: i64,
    /// The key's version: 0 for a tombstone, [`Gen::UNKNOWN`]'s when the
    /// record's checksum failed at open.
    pub(crate) version: i64,
}

impl Gen {
    /// The generation of a version with these fields.
    pub(crate) fn new(create: i64, version: i64, tombstone: bool) -> Self {
        Self {
            create,
            version: if tombstone { 0 } else { version },
        }
    }

    /// The generation of a record that did not check out at open.
    pub(crate) const UNKNOWN: Self = Self {
        create: -1,
        version: -1,
    };
}

/// One stored version of a key, and the commits that added and removed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    rev: Rev,
    gen: Gen,
    added: u64,
    removed: u64,
}

impl Slot {
    fn visible(&self, seq: u64) -> bool {
        self.added <= seq && seq < self.removed
    }
}

/// The index proper.
#[derive(Debug, Default)]
struct KeyIndex {
    /// Slots per key, ordered by revision, then by `added` (a revision removed
    /// and stored again has two slots, never both visible to one snapshot).
    /// Hashed with a per-process random key: clients choose the keys.
    slots: hashbrown::HashMap<Arc<[u8]>, Vec<Slot>, RandomState>,
    /// The keys of `slots`, in order, each with its head inline (see
    /// module `ordered_key`).
    order: BTreeSet<OrderedKey>,
    /// Keys with removed slots still kept for older snapshots, with the
    /// sequence of the removal, oldest first.
    graveyard: VecDeque<(u64, Vec<u8>)>,
}

/// Which sequence the index has reached, and which snapshots are alive.
#[derive(Debug, Default)]
struct Snapshots {
    /// The newest commit sequence whose changes are in the index.
    applied: u64,
    /// Live snapshots per sequence (a lower bound of their redb snapshot's).
    pins: BTreeMap<u64, usize>,
    /// Readers waiting on `caught_up`: a commit with none skips the
    /// notification's syscall.
    waiting: usize,
}

/// The index shared by the writer and every reader of one store.
#[derive(Debug)]
pub(crate) struct SharedIndex {
    index: RwLock<KeyIndex>,
    snapshots: Mutex<Snapshots>,
    /// Signalled when `snapshots.applied` moves.
    caught_up: Condvar,
}

/// Changes of one write transaction, not yet in the shared index.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    keys: BTreeMap<Vec<u8>, Delta>,
}

#[derive(Debug, Default)]
struct Delta {
    /// Revisions stored by the transaction, ascending, with their
    /// generations.
    put: Vec<(Rev, Gen)>,
    /// Revisions removed by the transaction (and not stored again after the
    /// removal), ascending.
    removed: Vec<Rev>,
}

/// A snapshot's registration: removed slots it may see are kept until it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Pin {
    shared: Arc<SharedIndex>,
    seq: u64,
}

impl SharedIndex {
    /// An index at commit sequence `seq` holding `versions`, which must come
    /// in ascending revision order (a scan of the `revisions` table).
    pub(crate) fn build(
        seq: u64,
        versions: impl IntoIterator<Item = Result<(Vec<u8>, Rev, Gen), StorageError>>,
    ) -> Result<Self, StorageError> {
        let mut index = KeyIndex::default();
        for version in versions {
            let (key, rev, gen) = version?;
            index.slots_mut(&key, 1).push(Slot {
                rev,
                gen,
                added: 0,
                removed: LIVE,
            });
        }
        Ok(Self {
            index: RwLock::new(index),
            snapshots: Mutex::new(Snapshots {
                applied: seq,
                pins: BTreeMap::new(),
                waiting: 0,
            }),
            caught_up: Condvar::new(),
        })
    }

    /// Number of keys in the index (including keys whose every version is
    /// removed but still kept for older snapshots).
    pub(crate) fn key_count(&self) -> Result<usize, StorageError> {
        Ok(self.read()?.slots.len())
    }

    /// Registers a snapshot about to be opened, at the sequence the index
    /// has reached (its redb snapshot will be at least as new).
    pub(crate) fn pin(self: &Arc<Self>) -> Pin {
        let mut snapshots = self.snapshots();
        let seq = snapshots.applied;
        *snapshots.pins.entry(seq).or_default() += 1;
        Pin {
            shared: Arc::clone(self),
            seq,
        }
    }

    /// Waits until the index holds every commit up to `seq`.
    pub(crate) fn wait_for(&self, seq: u64) -> Result<(), StorageError> {
        drop(self.caught_up_to(seq)?);
        Ok(())
    }

    /// Up to [`SCAN_BATCH_KEYS`] keys in `(from, end)`, ascending, with the
    /// newest revision `<= at` that a reader at `seq` sees (merged with the
    /// writer's `overlay`, if any); keys with none are left out. Returns the
    /// last key examined when the range may go on after it.
    pub(crate) fn scan_batch(
        &self,
        from: Bound<&[u8]>,
        end: RangeEnd<'_>,
        seq: u64,
        at: u64,
        overlay: Option<&Overlay>,
        out: &mut Vec<(Vec<u8>, Rev)>,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let upper = match end {
            RangeEnd::Before(end) => Bound::Excluded(end),
            RangeEnd::Unbounded => Bound::Unbounded,
        };
        if !bounds_ordered(from, upper) {
            return Ok(None);
        }
        let index = self.read()?;
        if let (Bound::Included(key), RangeEnd::Before(end)) = (from, end) {
            if is_successor(key, end) {
                // A point read (the apply step's, before each put): one
                // hash lookup, no walk of the ordered keys.
                let slots = index.get(key);
                let delta = overlay.and_then(|overlay| overlay.keys.get(key));
                if let Some((rev, _)) = newest(slots, delta, seq, at) {
                    out.push((key.to_vec(), rev));
                }
                return Ok(None);
            }
        }
        let committed: Vec<(&[u8], &[Slot])> =
            index.range(from, upper).take(SCAN_BATCH_KEYS).collect();
        let more = committed.len() == SCAN_BATCH_KEYS;
        let last = committed.last().map(|(key, _)| *key);
        let overlay_upper = match last {
            Some(last) if more => Bound::Included(last),
            _ => upper,
        };
        let pending: Vec<(&[u8], &Delta)> = match overlay {
            Some(overlay) if bounds_ordered(from, overlay_upper) => overlay
                .keys
                .range::<[u8], _>((from, overlay_upper))
                .map(|(key, delta)| (key.as_slice(), delta))
                .collect(),
            _ => Vec::new(),
        };
        let mut committed = committed.into_iter().peekable();
        let mut pending = pending.into_iter().peekable();
        loop {
            let (key, slots, delta) = match (committed.peek(), pending.peek()) {
                (None, None) => break,
                (Some(_), None) => {
                    let (key, slots) = committed.next().expect("peeked");
                    (key, Some(slots), None)
                }
                (None, Some(_)) => {
                    let (key, delta) = pending.next().expect("peeked");
                    (key, None, Some(delta))
                }
                (Some((c, _)), Some((p, _))) => match c.cmp(p) {
                    std::cmp::Ordering::Less => {
                        let (key, slots) = committed.next().expect("peeked");
                        (key, Some(slots), None)
                    }
                    std::cmp::Ordering::Greater => {
                        let (key, delta) = pending.next().expect("peeked");
                        (key, None, Some(delta))
                    }
                    std::cmp::Ordering::Equal => {
                        let (key, slots) = committed.next().expect("peeked");
                        let (_, delta) = pending.next().expect("peeked");
                        (key, Some(slots), Some(delta))
                    }
                },
            };
            if let Some((rev, _)) = newest(slots, delta, seq, at) {
                out.push((key.to_vec(), rev));
            }
        }
        Ok(if more { last.map(<[u8]>::to_vec) } else { None })
    }

    /// The newest revision of `key` `<= at` that a reader at `seq` sees
    /// (merged with the writer's `overlay`, if any), with its generation.
    pub(crate) fn newest(
        &self,
        key: &[u8],
        seq: u64,
        at: u64,
        overlay: Option<&Overlay>,
    ) -> Result<Option<(Rev, Gen)>, StorageError> {
        let index = self.read()?;
        let delta = overlay.and_then(|overlay| overlay.keys.get(key));
        Ok(newest(index.get(key), delta, seq, at))
    }

    /// Every revision of `key` a reader at `seq` sees (merged with the
    /// writer's `overlay`, if any), newest first.
    pub(crate) fn versions(
        &self,
        key: &[u8],
        seq: u64,
        overlay: Option<&Overlay>,
    ) -> Result<Vec<Rev>, StorageError> {
        let delta = overlay.and_then(|overlay| overlay.keys.get(key));
        let mut revs: Vec<Rev> = {
            let index = self.read()?;
            index
                .get(key)
                .into_iter()
                .flatten()
                .filter(|slot| slot.visible(seq) && !delta.is_some_and(|d| d.removes(slot.rev)))
                .map(|slot| slot.rev)
                .collect()
        };
        if let Some(delta) = delta {
            revs.extend(delta.put.iter().map(|(rev, _)| *rev));
        }
        revs.sort_unstable_by(|a, b| b.cmp(a));
        revs.dedup();
        Ok(revs)
    }

    /// Adds the changes of the write transaction just committed in redb as
    /// commit sequence `seq`, wakes whoever waits for them, and drops the
    /// removed slots that no live snapshot can see any more.
    pub(crate) fn publish(&self, seq: u64, overlay: Overlay) -> Result<(), StorageError> {
        let mut guard = self
            .index
            .write()
            .map_err(|_| StorageError::IndexPoisoned)?;
        let index = &mut *guard;
        for (key, delta) in overlay.keys {
            if !delta.removed.is_empty() {
                if let Some(slots) = index.slots.get_mut(key.as_slice()) {
                    let mut removed_any = false;
                    for rev in &delta.removed {
                        let first = slots.partition_point(|slot| slot.rev < *rev);
                        for slot in slots[first..].iter_mut().take_while(|s| s.rev == *rev) {
                            if slot.removed == LIVE {
                                slot.removed = seq;
                                removed_any = true;
                            }
                        }
                    }
                    if removed_any {
                        index.graveyard.push_back((seq, key.clone()));
                    }
                }
            }
            if !delta.put.is_empty() {
                // Most keys hold one version: no room for more until needed.
                let slots = index.slots_mut(&key, delta.put.len());
                for (rev, gen) in delta.put {
                    // Usually the newest revision of the key: an append.
                    let after = slots.partition_point(|slot| slot.rev <= rev);
                    let stored = slots[..after]
                        .iter()
                        .rev()
                        .take_while(|slot| slot.rev == rev)
                        .any(|slot| slot.removed == LIVE);
                    // A stored revision written again keeps its slot: old
                    // snapshots read the old record from their redb snapshot.
                    if !stored {
                        slots.insert(
                            after,
                            Slot {
                                rev,
                                gen,
                                added: seq,
                                removed: LIVE,
                            },
                        );
                    }
                }
            }
        }
        let oldest_needed = {
            let mut snapshots = self.snapshots();
            snapshots.applied = seq;
            if snapshots.waiting > 0 {
                self.caught_up.notify_all();
            }
            snapshots
                .pins
                .first_key_value()
                .map_or(seq, |(&pinned, _)| pinned.min(seq))
        };
        // A slot removed at or before every live snapshot's sequence is seen
        // by none of them, nor by any later one.
        while index
            .graveyard
            .front()
            .is_some_and(|(removed, _)| *removed <= oldest_needed)
        {
            let Some((_, key)) = index.graveyard.pop_front() else {
                break;
            };
            if let Some(slots) = index.slots.get_mut(key.as_slice()) {
                slots.retain(|slot| slot.removed > oldest_needed);
                if slots.is_empty() {
                    index.slots.remove(key.as_slice());
                    index.order.remove(key.as_slice());
                }
            }
        }
        Ok(())
    }

    /// Number of slots, removed ones still kept included.
    #[cfg(test)]
    pub(crate) fn slot_count(&self) -> usize {
        self.read()
            .map_or(0, |index| index.slots.values().map(Vec::len).sum())
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, KeyIndex>, StorageError> {
        self.index.read().map_err(|_| StorageError::IndexPoisoned)
    }

    fn snapshots(&self) -> MutexGuard<'_, Snapshots> {
        // The registry is a counter map and a number, each changed by one
        // call that cannot panic half-way; it is valid whatever a panicking
        // holder was doing. (A panic that matters poisons the index lock.)
        self.snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn caught_up_to(&self, seq: u64) -> Result<MutexGuard<'_, Snapshots>, StorageError> {
        let deadline = Instant::now() + INDEX_CATCH_UP_MAX;
        let mut snapshots = self.snapshots();
        while snapshots.applied < seq {
            if self.index.is_poisoned() {
                return Err(StorageError::IndexPoisoned);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StorageError::invariant(format_args!(
                    "kv index: stuck at commit {} while redb has {seq}",
                    snapshots.applied
                )));
            }
            // Wake now and then to notice a writer that panicked.
            let wait = (deadline - now).min(Duration::from_millis(50));
            snapshots.waiting += 1;
            snapshots = self
                .caught_up
                .wait_timeout(snapshots, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            snapshots.waiting -= 1;
        }
        Ok(snapshots)
    }
}

impl KeyIndex {
    /// The slots of `key`, if it has any.
    fn get(&self, key: &[u8]) -> Option<&[Slot]> {
        self.slots.get(key).map(Vec::as_slice)
    }

    /// The slots of `key`, made (with room for `room`) if it is new.
    fn slots_mut(&mut self, key: &[u8], room: usize) -> &mut Vec<Slot> {
        match self.slots.entry_ref(key) {
            hashbrown::hash_map::EntryRef::Occupied(entry) => entry.into_mut(),
            hashbrown::hash_map::EntryRef::Vacant(entry) => {
                let entry = entry.insert_entry(Vec::with_capacity(room));
                self.order.insert(OrderedKey::new(Arc::clone(entry.key())));
                entry.into_mut()
            }
        }
    }

    /// The keys in `(from, upper)`, ascending, with their slots.
    fn range<'a>(
        &'a self,
        from: Bound<&[u8]>,
        upper: Bound<&[u8]>,
    ) -> impl Iterator<Item = (&'a [u8], &'a [Slot])> + 'a {
        self.order
            .range::<[u8], _>((from, upper))
            .filter_map(|key| {
                let key: &[u8] = key.borrow();
                Some((key, self.get(key)?))
            })
    }
}

impl Pin {
    /// The index this pin holds slots in.
    pub(crate) fn index(&self) -> &SharedIndex {
        &self.shared
    }

    /// The sequence this snapshot reads at.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Moves the pin to `seq`, the sequence of the redb snapshot just opened
    /// (at least the pinned one), once the index has caught up with it.
    pub(crate) fn settle(&mut self, seq: u64) -> Result<(), StorageError> {
        if seq < self.seq {
            return Err(StorageError::invariant(format_args!(
                "kv index: snapshot at commit {seq} is older than the index's {}",
                self.seq
            )));
        }
        let mut snapshots = self.shared.caught_up_to(seq)?;
        if seq != self.seq {
            unpin(&mut snapshots, self.seq);
            *snapshots.pins.entry(seq).or_default() += 1;
            self.seq = seq;
        }
        Ok(())
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        unpin(&mut self.shared.snapshots(), self.seq);
    }
}

impl Overlay {
    /// True when the transaction changed nothing in the index.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Records that the transaction stored `rev` of `key`, of generation
    /// `gen`.
    pub(crate) fn put(&mut self, key: &[u8], rev: Rev, gen: Gen) {
        let delta = match self.keys.get_mut(key) {
            Some(delta) => delta,
            None => self.keys.entry(key.to_vec()).or_default(),
        };
        // Usually the transaction's newest revision: an append.
        match delta.put.binary_search_by_key(&rev, |(r, _)| *r) {
            Ok(i) => delta.put[i].1 = gen,
            Err(i) => delta.put.insert(i, (rev, gen)),
        }
    }

    /// Records that the transaction removed `rev` of `key` (stored before
    /// the transaction, or by it).
    pub(crate) fn remove(&mut self, key: &[u8], rev: Rev) {
        let delta = match self.keys.get_mut(key) {
            Some(delta) => delta,
            None => self.keys.entry(key.to_vec()).or_default(),
        };
        if let Ok(i) = delta.put.binary_search_by_key(&rev, |(r, _)| *r) {
            delta.put.remove(i);
        }
        insert_sorted(&mut delta.removed, rev);
    }
}

impl Delta {
    fn removes(&self, rev: Rev) -> bool {
        self.removed.binary_search(&rev).is_ok()
    }
}

/// The newest revision `<= at`, with its generation, among the slots a
/// reader at `seq` sees and the writer's pending changes.
fn newest(slots: Option<&[Slot]>, delta: Option<&Delta>, seq: u64, at: u64) -> Option<(Rev, Gen)> {
    let committed = slots.and_then(|slots| {
        let end = slots.partition_point(|slot| slot.rev.0 <= at);
        slots[..end]
            .iter()
            .rev()
            .find(|slot| slot.visible(seq) && !delta.is_some_and(|d| d.removes(slot.rev)))
            .map(|slot| (slot.rev, slot.gen))
    });
    let pending = delta.and_then(|delta| {
        let end = delta.put.partition_point(|(rev, _)| rev.0 <= at);
        end.checked_sub(1).map(|i| delta.put[i])
    });
    match (committed, pending) {
        (Some(c), Some(p)) => Some(if p.0 >= c.0 { p } else { c }),
        (c, p) => c.or(p),
    }
}

/// True when `end` is `key` followed by a zero byte: `[key, end)` holds
/// `key` alone.
fn is_successor(key: &[u8], end: &[u8]) -> bool {
    end.len() == key.len() + 1 && end.ends_with(&[0]) && end.starts_with(key)
}

fn insert_sorted(revs: &mut Vec<Rev>, rev: Rev) {
    // Usually a transaction's newest revision: an append.
    if let Err(i) = revs.binary_search(&rev) {
        revs.insert(i, rev);
    }
}

fn unpin(snapshots: &mut Snapshots, seq: u64) {
    if let Some(count) = snapshots.pins.get_mut(&seq) {
        *count -= 1;
        if *count == 0 {
            snapshots.pins.remove(&seq);
        }
    }
}

/// False when `(from, upper)` is an empty or inverted range (which
/// `BTreeMap::range` would panic on).
fn bounds_ordered(from: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (from, upper) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(versions: &[(&str, u64)]) -> Arc<SharedIndex> {
        Arc::new(
            SharedIndex::build(
                0,
                versions
                    .iter()
                    .map(|(key, main)| Ok((key.as_bytes().to_vec(), (*main, 0), live(*main)))),
            )
            .unwrap(),
        )
    }

    /// The generation of a key created at `main` and put once.
    fn live(main: u64) -> Gen {
        Gen {
            create: main as i64,
            version: 1,
        }
    }

    fn scan(index: &SharedIndex, seq: u64, at: u64, overlay: Option<&Overlay>) -> Vec<String> {
        let mut out = Vec::new();
        let mut from = Bound::Included(Vec::new());
        loop {
            let mut batch = Vec::new();
            let next = index
                .scan_batch(
                    from.as_ref().map(Vec::as_slice),
                    RangeEnd::Unbounded,
                    seq,
                    at,
                    overlay,
                    &mut batch,
                )
                .unwrap();
            out.extend(
                batch
                    .into_iter()
                    .map(|(key, rev)| format!("{}@{}", String::from_utf8_lossy(&key), rev.0)),
            );
            match next {
                Some(last) => from = Bound::Excluded(last),
                None => return out,
            }
        }
    }

    #[test]
    fn snapshots_see_only_their_commits() {
        let index = index(&[("a", 2), ("b", 3), ("a", 4)]);
        let old = index.pin();
        let mut overlay = Overlay::default();
        overlay.put(b"a", (5, 0), live(5));
        overlay.put(b"c", (5, 1), live(5));
        overlay.remove(b"b", (3, 0));
        // The writer reads through its overlay; nobody else sees it.
        assert_eq!(scan(&index, 0, 9, Some(&overlay)), ["a@5", "c@5"]);
        assert_eq!(scan(&index, 0, 4, Some(&overlay)), ["a@4"]);
        assert_eq!(scan(&index, 0, 9, None), ["a@4", "b@3"]);
        index.publish(1, overlay).unwrap();
        assert_eq!(scan(&index, 1, 9, None), ["a@5", "c@5"]);
        // The old snapshot still sees `b`, and not the new versions.
        assert_eq!(scan(&index, old.seq(), 9, None), ["a@4", "b@3"]);
        assert_eq!(index.versions(b"b", old.seq(), None).unwrap(), [(3, 0)]);
        assert_eq!(index.versions(b"b", 1, None).unwrap(), []);
        assert_eq!(
            index.versions(b"a", 1, None).unwrap(),
            [(5, 0), (4, 0), (2, 0)]
        );
        assert_eq!(index.slot_count(), 5, "b@3 is kept for the old snapshot");
        drop(old);
        index.publish(2, Overlay::default()).unwrap();
        assert_eq!(index.slot_count(), 4, "dropped once no snapshot needs it");
        assert_eq!(index.key_count().unwrap(), 2);
    }

    #[test]
    fn removed_then_stored_again() {
        let index = index(&[("a", 2)]);
        let old = index.pin();
        let mut overlay = Overlay::default();
        overlay.remove(b"a", (2, 0));
        assert_eq!(scan(&index, 0, 9, Some(&overlay)), Vec::<String>::new());
        overlay.put(b"a", (2, 0), live(2));
        assert_eq!(scan(&index, 0, 9, Some(&overlay)), ["a@2"]);
        index.publish(1, overlay).unwrap();
        for seq in [old.seq(), 1] {
            assert_eq!(index.versions(b"a", seq, None).unwrap(), [(2, 0)]);
        }
        drop(old);
        index.publish(2, Overlay::default()).unwrap();
        assert_eq!(index.slot_count(), 1);
    }

    #[test]
    fn scans_go_in_batches() {
        let keys: Vec<String> = (0..SCAN_BATCH_KEYS * 2 + 3)
            .map(|i| format!("k{i:05}"))
            .collect();
        let index = index(&keys.iter().map(|k| (k.as_str(), 1)).collect::<Vec<_>>());
        let mut overlay = Overlay::default();
        // Pending keys inside, between and after the committed batches.
        for key in ["k00000x", "k00255x", "k00256", "zz"] {
            overlay.put(key.as_bytes(), (2, 0), live(2));
        }
        let scanned = scan(&index, 0, 9, Some(&overlay));
        let mut expected: Vec<String> = keys
            .iter()
            .map(|k| format!("{k}@{}", if k == "k00256" { 2 } else { 1 }))
            .collect();
        expected.extend(["k00000x@2", "k00255x@2", "zz@2"].map(String::from));
        expected.sort();
        assert_eq!(scanned, expected);
    }

    #[test]
    fn the_newest_version_comes_with_its_generation() {
        let index = index(&[("a", 2), ("b", 3)]);
        let continued = Gen {
            create: 2,
            version: 2,
        };
        let mut overlay = Overlay::default();
        overlay.put(b"a", (4, 0), continued);
        // A tombstone, then the key again in the same transaction.
        let tombstone = Gen {
            create: 0,
            version: 0,
        };
        overlay.put(b"b", (4, 1), tombstone);
        overlay.put(b"b", (4, 2), live(4));
        let newest = |key: &[u8], at, overlay| index.newest(key, 0, at, overlay).unwrap();
        assert_eq!(newest(b"a", 9, Some(&overlay)), Some(((4, 0), continued)));
        assert_eq!(newest(b"a", 3, Some(&overlay)), Some(((2, 0), live(2))));
        assert_eq!(newest(b"a", 9, None), Some(((2, 0), live(2))));
        assert_eq!(newest(b"b", 9, Some(&overlay)), Some(((4, 2), live(4))));
        assert_eq!(newest(b"c", 9, Some(&overlay)), None);
        index.publish(1, overlay).unwrap();
        assert_eq!(
            index.newest(b"a", 1, 9, None).unwrap(),
            Some(((4, 0), continued))
        );
        assert_eq!(
            index.newest(b"a", 0, 9, None).unwrap(),
            Some(((2, 0), live(2)))
        );
    }

    #[test]
    fn waiting_for_a_commit() {
        let index = index(&[]);
        let mut pin = index.pin();
        let publisher = {
            let index = Arc::clone(&index);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                index.publish(1, Overlay::default()).unwrap();
            })
        };
        pin.settle(1).unwrap();
        assert_eq!(pin.seq(), 1);
        publisher.join().unwrap();
        assert!(pin.settle(0).is_err(), "a snapshot older than its pin");
    }

    #[test]
    fn a_panicked_writer_is_an_error_not_a_panic() {
        let index = index(&[("a", 1)]);
        let poisoner = Arc::clone(&index);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.index.write().unwrap();
            panic!("writer dies holding the index");
        })
        .join();
        assert!(index.versions(b"a", 0, None).is_err());
        assert!(index
            .scan_batch(
                Bound::Unbounded,
                RangeEnd::Unbounded,
                0,
                9,
                None,
                &mut Vec::new()
            )
            .is_err());
        assert!(index.publish(1, Overlay::default()).is_err());
        let mut pin = index.pin();
        assert!(pin.settle(1).is_err(), "waiting stops at the poison");
    }
}
