//! The raft's view of its log: a compaction point, durable entries it reads
//! back through a [`LogSource`], and an in-memory window at the tail.
//!
//! ```text
//!  snapshot_index      offset                 stable            last
//!  ──────┤ durable, read through LogSource ├ in memory ─────────────┤
//!                                            ├ not yet durable ─────┤
//! ```
//!
//! Every entry after `stable` is in memory (it exists nowhere else); durable
//! entries stay in memory as a cache, bounded by [`LOG_CACHE_BYTES_MAX`] and
//! [`LOG_CACHE_ENTRIES_MAX`], so a leader serves followers that are a little
//! behind without touching storage. Writes leave as batches (`take_unpersisted`)
//! and become durable when the runtime acknowledges them (`persisted`); a
//! truncation while a batch is in flight lowers what that batch can vouch for,
//! so `stable` never covers an entry the storage holds in an older version.
//!
//! This module never writes storage and never reads the clock.

use std::collections::VecDeque;

use oxetcd_proto::eraftpb::{Entry, SnapshotMetadata};
use tracing::debug;

use crate::storage::{LogStore, StorageError};

/// Bytes of durable entries kept in memory beyond what is needed, so a
/// leader can feed followers that lag slightly without reading storage.
pub const LOG_CACHE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Durable entries kept in memory at most (the byte bound alone would let
/// millions of tiny entries accumulate).
pub const LOG_CACHE_ENTRIES_MAX: usize = 16_384;

/// Entries read or sent in one go at most: one append message, one apply
/// batch, one storage read. Bounds allocation when sizes are tiny.
pub const ENTRIES_PER_BATCH_MAX: u64 = 4_096;

/// Steps a conflict search walks back at most; beyond it the search gives a
/// looser hint, which only costs the leader another probe.
const CONFLICT_SEARCH_STEPS_MAX: u64 = 4_096;

/// Accounting overhead per entry beyond its payload (index, term, type and
/// framing), so empty entries still count against byte limits.
pub(crate) const ENTRY_OVERHEAD_BYTES: usize = 24;

/// Where the raft reads durable entries it no longer holds in memory.
pub trait LogSource {
    /// Entries with index in `[low, high)`, in order. The raft only asks for
    /// entries it was told are durable and not compacted.
    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError>;
}

impl<L: LogStore> LogSource for L {
    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
        LogStore::entries(self, low, high)
    }
}

/// Why an entry or a term is not available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LogError {
    /// Before the compaction point: only a snapshot covers it.
    Compacted,
    /// After the last index.
    Unavailable,
    /// Reading storage failed; the raft stops.
    Storage(StorageError),
}

impl From<StorageError> for LogError {
    fn from(e: StorageError) -> Self {
        LogError::Storage(e)
    }
}

/// What became of entries offered by a leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AppendOutcome {
    /// The previous entry did not match; nothing changed.
    Mismatch,
    /// The log matches the leader's up to `last_new`; if entries were
    /// replaced, the first replaced index is `truncated_at`.
    Accepted {
        last_new: u64,
        truncated_at: Option<u64>,
    },
    /// The leader's entries conflict with a committed entry: a broken or
    /// byzantine peer. Nothing changed.
    ConflictsWithCommitted(u64),
}

/// A write handed out and not yet acknowledged.
#[derive(Clone, Copy, Debug)]
struct InflightWrite {
    seq: u64,
    /// The highest index this write can make durable; lowered when the
    /// entries it carries are truncated.
    last_index: u64,
    /// The write installs a snapshot at this index.
    restores: Option<u64>,
}

/// The log as the raft sees it.
pub(crate) struct RaftLog<S> {
    source: S,
    snapshot_index: u64,
    snapshot_term: u64,
    /// Entries `offset..=last`, contiguous.
    memory: VecDeque<Entry>,
    offset: u64,
    memory_bytes: usize,
    /// Everything up to here is durable and matches this view.
    stable: u64,
    committed: u64,
    /// Entries up to here were handed out to be applied.
    applied: u64,
    /// First index not yet handed out for persisting.
    unpersisted_from: u64,
    /// A received snapshot not yet handed out for persisting.
    pending_restore: Option<SnapshotMetadata>,
    inflight: VecDeque<InflightWrite>,
}

impl<S: LogSource> RaftLog<S> {
    /// The log as storage holds it: compacted up to `snapshot_index`,
    /// durable up to `last_index`.
    pub(crate) fn new(
        source: S,
        snapshot_index: u64,
        snapshot_term: u64,
        last_index: u64,
        committed: u64,
        applied: u64,
    ) -> Result<Self, StorageError> {
        if last_index < snapshot_index {
            return Err(StorageError::invariant(format_args!(
                "log ends at {last_index}, before its snapshot at {snapshot_index}"
            )));
        }
        let applied = applied.max(snapshot_index);
        if applied > last_index {
            return Err(StorageError::invariant(format_args!(
                "applied index {applied} is past the last log index {last_index}"
            )));
        }
        let mut memory = VecDeque::new();
        let mut memory_bytes = 0;
        if last_index > snapshot_index {
            // Keep the last entry in memory: its term is needed constantly.
            let last = source.entries(last_index, last_index + 1)?;
            let entry = check_read(last, last_index, last_index + 1)?
                .pop()
                .expect("one entry checked");
            memory_bytes += entry_bytes(&entry);
            memory.push_back(entry);
        }
        Ok(Self {
            source,
            snapshot_index,
            snapshot_term,
            offset: last_index.max(snapshot_index + 1),
            memory,
            memory_bytes,
            stable: last_index,
            committed: committed.max(applied).min(last_index),
            applied,
            unpersisted_from: last_index + 1,
            pending_restore: None,
            inflight: VecDeque::new(),
        })
    }

    pub(crate) fn snapshot_index(&self) -> u64 {
        self.snapshot_index
    }

    pub(crate) fn last_index(&self) -> u64 {
        self.offset + self.memory.len() as u64 - 1
    }

    pub(crate) fn last_term(&self) -> u64 {
        self.memory.back().map_or(self.snapshot_term, |e| e.term)
    }

    pub(crate) fn committed(&self) -> u64 {
        self.committed
    }

    pub(crate) fn applied(&self) -> u64 {
        self.applied
    }

    pub(crate) fn stable(&self) -> u64 {
        self.stable
    }

    /// The term of the entry at `index`.
    pub(crate) fn term(&self, index: u64) -> Result<u64, LogError> {
        if index == self.snapshot_index {
            return Ok(self.snapshot_term);
        }
        if index < self.snapshot_index {
            return Err(LogError::Compacted);
        }
        if index > self.last_index() {
            return Err(LogError::Unavailable);
        }
        if index >= self.offset {
            return Ok(self.memory[(index - self.offset) as usize].term);
        }
        let read = self.source.entries(index, index + 1)?;
        Ok(check_read(read, index, index + 1)?[0].term)
    }

    /// Whether the entry at `index` has `term` (false if absent).
    pub(crate) fn match_term(&self, index: u64, term: u64) -> Result<bool, StorageError> {
        match self.term(index) {
            Ok(t) => Ok(t == term),
            Err(LogError::Storage(e)) => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// Entries from `low` up to `high` (exclusive), at most `max_bytes` of
    /// them (always at least one) and at most [`ENTRIES_PER_BATCH_MAX`].
    pub(crate) fn entries(
        &self,
        low: u64,
        high: u64,
        max_bytes: u64,
    ) -> Result<Vec<Entry>, LogError> {
        if low <= self.snapshot_index {
            return Err(LogError::Compacted);
        }
        let high = high
            .min(self.last_index() + 1)
            .min(low + ENTRIES_PER_BATCH_MAX);
        if low >= high {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        if low < self.offset {
            let end = high.min(self.offset);
            for entry in check_read(self.source.entries(low, end)?, low, end)? {
                bytes += entry_bytes(&entry) as u64;
                if !out.is_empty() && bytes > max_bytes {
                    return Ok(out);
                }
                out.push(entry);
            }
        }
        let start = low.max(self.offset);
        for index in start..high {
            let entry = &self.memory[(index - self.offset) as usize];
            bytes += entry_bytes(entry) as u64;
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(entry.clone());
        }
        Ok(out)
    }

    /// Offers a leader's entries following `(prev_index, prev_term)`; commits
    /// up to `leader_commit` as far as they reach.
    pub(crate) fn maybe_append(
        &mut self,
        prev_index: u64,
        prev_term: u64,
        leader_commit: u64,
        entries: Vec<Entry>,
    ) -> Result<AppendOutcome, StorageError> {
        if !self.match_term(prev_index, prev_term)? {
            return Ok(AppendOutcome::Mismatch);
        }
        let last_new = prev_index + entries.len() as u64;
        let conflict = self.find_conflict(&entries)?;
        let mut truncated_at = None;
        if conflict != 0 {
            if conflict <= self.committed {
                return Ok(AppendOutcome::ConflictsWithCommitted(conflict));
            }
            if conflict <= self.last_index() {
                truncated_at = Some(conflict);
            }
            let skip = (conflict - prev_index - 1) as usize;
            self.append(entries.into_iter().skip(skip).collect());
        }
        self.commit_to(leader_commit.min(last_new));
        Ok(AppendOutcome::Accepted {
            last_new,
            truncated_at,
        })
    }

    /// The first of `entries` that is absent or has another term here, or 0.
    fn find_conflict(&self, entries: &[Entry]) -> Result<u64, StorageError> {
        for entry in entries {
            match self.term(entry.index) {
                Ok(term) if term == entry.term => {}
                // Below the compaction point everything is committed, and
                // committed entries match on every member.
                Err(LogError::Compacted) => {}
                Err(LogError::Storage(e)) => return Err(e),
                Ok(_) | Err(LogError::Unavailable) => return Ok(entry.index),
            }
        }
        Ok(0)
    }

    /// The highest index at or below `index` whose term is at most `term`,
    /// with its term: where a follower's and a leader's logs may match.
    pub(crate) fn find_conflict_by_term(
        &self,
        index: u64,
        term: u64,
    ) -> Result<(u64, u64), StorageError> {
        let mut i = index.min(self.last_index());
        for _ in 0..CONFLICT_SEARCH_STEPS_MAX {
            match self.term(i) {
                Ok(t) if t <= term => return Ok((i, t)),
                Ok(_) => {}
                Err(LogError::Compacted) | Err(LogError::Unavailable) => {
                    return Ok((self.snapshot_index, self.snapshot_term))
                }
                Err(LogError::Storage(e)) => return Err(e),
            }
            if i == 0 {
                break;
            }
            i -= 1;
        }
        Ok((i, 0))
    }

    /// Appends entries (contiguous, starting at most one past the end),
    /// replacing any at or after the first one's index. Returns the new
    /// last index.
    pub(crate) fn append(&mut self, entries: Vec<Entry>) -> u64 {
        let Some(first) = entries.first().map(|e| e.index) else {
            return self.last_index();
        };
        assert!(
            first > self.committed,
            "appending at {first} would overwrite committed entries (committed {})",
            self.committed
        );
        assert!(
            first <= self.last_index() + 1,
            "appending at {first} leaves a gap after {}",
            self.last_index()
        );
        if first <= self.last_index() {
            self.truncate_from(first);
        }
        for entry in entries {
            assert_eq!(
                entry.index,
                self.last_index() + 1,
                "entries to append are not contiguous"
            );
            self.memory_bytes += entry_bytes(&entry);
            self.memory.push_back(entry);
        }
        self.last_index()
    }

    /// Drops entries at and after `index` from the view.
    fn truncate_from(&mut self, index: u64) {
        debug!(index, last = self.last_index(), "truncating the log");
        if index < self.offset {
            self.memory.clear();
            self.memory_bytes = 0;
            self.offset = index;
        } else {
            let keep = (index - self.offset) as usize;
            for entry in self.memory.drain(keep..) {
                self.memory_bytes -= entry_bytes(&entry);
            }
        }
        self.stable = self.stable.min(index - 1);
        self.unpersisted_from = self.unpersisted_from.min(index);
        for write in &mut self.inflight {
            write.last_index = write.last_index.min(index - 1);
        }
    }

    /// Raises the commit index to `index`, clamped to the last index.
    /// Returns whether it moved.
    pub(crate) fn commit_to(&mut self, index: u64) -> bool {
        let index = index.min(self.last_index());
        let moved = index > self.committed;
        if moved {
            self.committed = index;
        }
        debug_assert!(
            self.committed >= index && self.committed <= self.last_index(),
            "commit {} outside [{index}, {}]",
            self.committed,
            self.last_index()
        );
        moved
    }

    /// Replaces the whole log with a received snapshot. The change is not
    /// durable (and nothing is applied) until its write is acknowledged.
    pub(crate) fn restore(&mut self, meta: SnapshotMetadata) {
        assert!(
            meta.index > self.committed,
            "restoring snapshot {} at or below commit {}",
            meta.index,
            self.committed
        );
        // Storage holds the old log until the restore is durable; of it,
        // only committed entries agree with the snapshot.
        let durable = self.stable.min(self.committed);
        self.stable = durable;
        for write in &mut self.inflight {
            write.last_index = write.last_index.min(durable);
        }
        self.memory.clear();
        self.memory_bytes = 0;
        self.snapshot_index = meta.index;
        self.snapshot_term = meta.term;
        self.offset = meta.index + 1;
        self.committed = meta.index;
        self.unpersisted_from = meta.index + 1;
        self.pending_restore = Some(meta);
    }

    /// Something is waiting to be handed out for persisting.
    pub(crate) fn has_unpersisted(&self) -> bool {
        self.pending_restore.is_some() || self.unpersisted_from <= self.last_index()
    }

    /// Hands out everything not yet handed out, as write number `seq`.
    pub(crate) fn take_unpersisted(&mut self, seq: u64) -> (Option<SnapshotMetadata>, Vec<Entry>) {
        let restore = self.pending_restore.take();
        let last = self.last_index();
        let from = self.unpersisted_from.max(self.offset);
        let entries: Vec<Entry> = self
            .memory
            .iter()
            .skip((from - self.offset) as usize)
            .cloned()
            .collect();
        self.unpersisted_from = last + 1;
        self.inflight.push_back(InflightWrite {
            seq,
            last_index: last,
            restores: restore.as_ref().map(|m| m.index),
        });
        (restore, entries)
    }

    /// Writes up to number `seq` are durable.
    pub(crate) fn persisted(&mut self, seq: u64) {
        while let Some(write) = self.inflight.front().copied() {
            if write.seq > seq {
                break;
            }
            self.inflight.pop_front();
            if let Some(index) = write.restores {
                if index == self.snapshot_index {
                    self.applied = self.applied.max(index);
                }
            }
            let durable = write.last_index.min(self.last_index());
            self.stable = self.stable.max(durable);
        }
        self.trim_cache();
    }

    /// A snapshot restore is on its way to storage: nothing may be applied
    /// until the state machine has it.
    fn restoring(&self) -> bool {
        self.pending_restore.is_some() || self.inflight.iter().any(|w| w.restores.is_some())
    }

    /// Hands out the next committed, durable entries to apply (at most
    /// `max_bytes`, at least one), advancing the applied index; they stop
    /// before the first entry `held` holds back (none, if it is the first).
    pub(crate) fn next_to_apply(
        &mut self,
        max_bytes: u64,
        mut held: impl FnMut(&Entry) -> bool,
    ) -> Result<Vec<Entry>, LogError> {
        if self.restoring() {
            return Ok(Vec::new());
        }
        let high = self.committed.min(self.stable);
        if self.applied >= high {
            return Ok(Vec::new());
        }
        let mut entries = self.entries(self.applied + 1, high + 1, max_bytes)?;
        if let Some(at) = entries.iter().position(&mut held) {
            entries.truncate(at);
        }
        if let Some(last) = entries.last() {
            self.applied = last.index;
        }
        Ok(entries)
    }

    /// Entries committed but not yet handed out for applying.
    pub(crate) fn unapplied(&self, max: u64) -> Result<Vec<Entry>, LogError> {
        if self.applied >= self.committed || self.restoring() {
            return Ok(Vec::new());
        }
        self.entries(self.applied + 1, self.committed + 1, max)
    }

    /// Storage dropped entries up to `index`: forget them. Only applied,
    /// durable entries may be compacted.
    pub(crate) fn compact_to(&mut self, index: u64) -> Result<bool, LogError> {
        if index <= self.snapshot_index || index > self.applied || index > self.stable {
            return Ok(false);
        }
        let term = self.term(index)?;
        if self.offset <= index {
            let drop = ((index - self.offset + 1) as usize).min(self.memory.len());
            for entry in self.memory.drain(..drop) {
                self.memory_bytes -= entry_bytes(&entry);
            }
        }
        self.snapshot_index = index;
        self.snapshot_term = term;
        self.offset = self.offset.max(index + 1);
        Ok(true)
    }

    /// Sum of the sizes of in-memory entries in `[low, high]`.
    pub(crate) fn memory_bytes_between(&self, low: u64, high: u64) -> u64 {
        let low = low.max(self.offset);
        (low..=high.min(self.last_index()))
            .map(|i| entry_bytes(&self.memory[(i - self.offset) as usize]) as u64)
            .sum()
    }

    /// Drops durable entries from the front of memory while over budget,
    /// always keeping the last entry.
    fn trim_cache(&mut self) {
        while self.memory.len() > 1
            && (self.memory_bytes > LOG_CACHE_BYTES_MAX
                || self.memory.len() > LOG_CACHE_ENTRIES_MAX)
            && self.offset <= self.stable
        {
            let entry = self.memory.pop_front().expect("length checked");
            self.memory_bytes -= entry_bytes(&entry);
            self.offset += 1;
        }
    }

    /// The log's state, for assertions in tests.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        assert!(
            self.snapshot_index < self.offset,
            "memory starts inside the snapshot"
        );
        // Entries after `stable` exist only in memory, or in a snapshot
        // waiting to be installed.
        assert!(
            self.offset <= self.stable.max(self.snapshot_index) + 1,
            "entries before {} are neither in memory nor durable (stable {})",
            self.offset,
            self.stable
        );
        assert!(self.stable <= self.last_index(), "stable past the end");
        assert!(
            self.applied <= self.committed,
            "applied {} > committed {}",
            self.applied,
            self.committed
        );
        assert!(self.committed <= self.last_index(), "commit past the end");
        for (k, e) in self.memory.iter().enumerate() {
            assert_eq!(e.index, self.offset + k as u64, "memory not contiguous");
        }
        assert_eq!(
            self.memory_bytes,
            self.memory.iter().map(entry_bytes).sum::<usize>()
        );
    }
}

/// Bytes an entry counts for in size limits.
pub(crate) fn entry_bytes(entry: &Entry) -> usize {
    entry.data.len() + entry.context.len() + ENTRY_OVERHEAD_BYTES
}

/// Checks that storage returned exactly the entries `[low, high)`.
fn check_read(entries: Vec<Entry>, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
    let contiguous = entries.len() as u64 == high - low
        && entries
            .iter()
            .enumerate()
            .all(|(k, e)| e.index == low + k as u64);
    if contiguous {
        Ok(entries)
    } else {
        Err(StorageError::invariant(format_args!(
            "log storage returned {} entries for [{low}, {high})",
            entries.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    use quickcheck::{Arbitrary, Gen, QuickCheck};

    /// A durable log for tests: a vector of entries from index 1.
    #[derive(Clone, Default)]
    struct Disk(Rc<RefCell<Vec<Entry>>>);

    impl LogSource for Disk {
        fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
            let disk = self.0.borrow();
            Ok(disk
                .iter()
                .filter(|e| e.index >= low && e.index < high)
                .cloned()
                .collect())
        }
    }

    impl Disk {
        fn write(&self, entries: &[Entry]) {
            let mut disk = self.0.borrow_mut();
            if let Some(first) = entries.first() {
                disk.retain(|e| e.index < first.index);
            }
            disk.extend(entries.iter().cloned());
        }
    }

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: bytes::Bytes::from(vec![index as u8; (index % 5) as usize]),
            ..Default::default()
        }
    }

    #[derive(Clone, Debug)]
    enum LogOp {
        /// A leader of term `term` offers entries after the model's entry at
        /// `prev` (an index into the model, may be past its end).
        Offer {
            prev: u8,
            count: u8,
            term: u8,
        },
        /// Persist what is unpersisted (write lands on disk, then ack).
        Persist,
        /// Persist but acknowledge only after the next operation.
        PersistLater,
        Commit(u8),
        Apply,
    }

    impl Arbitrary for LogOp {
        fn arbitrary(g: &mut Gen) -> Self {
            match u8::arbitrary(g) % 6 {
                0 | 1 => LogOp::Offer {
                    prev: u8::arbitrary(g) % 24,
                    count: u8::arbitrary(g) % 4,
                    term: u8::arbitrary(g) % 6 + 1,
                },
                2 => LogOp::Persist,
                3 => LogOp::PersistLater,
                4 => LogOp::Commit(u8::arbitrary(g) % 24),
                _ => LogOp::Apply,
            }
        }
    }

    /// The log against a `Vec<term>` model under offers from leaders of
    /// varying terms (conflicts and truncations included), persists whose
    /// acknowledgements lag, commits and applies: the view always equals
    /// the model, every index it calls stable is on disk with the same
    /// term, committed entries are never rewritten, and applied entries
    /// come out once each, in order.
    #[test]
    fn log_matches_model() {
        fn property(ops: Vec<LogOp>) -> bool {
            let disk = Disk::default();
            let mut log = RaftLog::new(disk.clone(), 0, 0, 0, 0, 0).unwrap();
            let mut model: Vec<u64> = Vec::new(); // model[i-1] = term of index i
            let mut seq = 0;
            let mut delayed: Option<u64> = None;
            let mut applied_seen = 0;
            for op in ops {
                let ack_after = delayed.take();
                match op {
                    LogOp::Offer { prev, count, term } => {
                        let prev = u64::from(prev).min(model.len() as u64);
                        let term = u64::from(term);
                        let prev_term = if prev == 0 {
                            0
                        } else {
                            model[prev as usize - 1]
                        };
                        // Leaders only extend logs whose terms are not newer.
                        if prev_term > term {
                            continue;
                        }
                        let entries: Vec<Entry> = (1..=u64::from(count))
                            .map(|k| entry(prev + k, term))
                            .collect();
                        // Model: a conflict truncates; a committed conflict is refused.
                        let mut next = model.clone();
                        let mut refused = false;
                        for e in &entries {
                            let i = e.index as usize;
                            if i <= next.len() && next[i - 1] != e.term {
                                if e.index <= log.committed() {
                                    refused = true;
                                }
                                next.truncate(i - 1);
                            }
                            if i > next.len() {
                                next.push(e.term);
                            }
                        }
                        let outcome = log.maybe_append(prev, prev_term, 0, entries).unwrap();
                        match outcome {
                            AppendOutcome::Accepted { .. } if !refused => model = next,
                            AppendOutcome::ConflictsWithCommitted(_) if refused => {}
                            _ => return false,
                        }
                    }
                    LogOp::Persist | LogOp::PersistLater => {
                        if log.has_unpersisted() {
                            seq += 1;
                            let (_, entries) = log.take_unpersisted(seq);
                            disk.write(&entries);
                            if matches!(op, LogOp::Persist) {
                                log.persisted(seq);
                            } else {
                                delayed = Some(seq);
                            }
                        }
                    }
                    LogOp::Commit(i) => {
                        log.commit_to(u64::from(i));
                    }
                    LogOp::Apply => {
                        let entries = log.next_to_apply(u64::MAX, |_| false).unwrap();
                        for e in entries {
                            if e.index != applied_seen + 1 || e.term != model[e.index as usize - 1]
                            {
                                return false;
                            }
                            applied_seen = e.index;
                        }
                    }
                }
                if let Some(s) = ack_after {
                    log.persisted(s);
                }
                log.check_invariants();
                if log.last_index() != model.len() as u64 {
                    return false;
                }
                for (k, &t) in model.iter().enumerate() {
                    if log.term(k as u64 + 1) != Ok(t) {
                        return false;
                    }
                }
                let on_disk = disk.0.borrow();
                for i in 1..=log.stable() {
                    if on_disk.get(i as usize - 1).map(|e| e.term) != Some(model[i as usize - 1]) {
                        return false;
                    }
                }
                if applied_seen > log.stable() || applied_seen > log.committed() {
                    return false;
                }
            }
            true
        }
        QuickCheck::new()
            .tests(2_000)
            .quickcheck(property as fn(Vec<LogOp>) -> bool);
    }

    #[test]
    fn restart_reads_older_entries_from_the_source_and_compacts() {
        let disk = Disk::default();
        disk.write(&(1..=10).map(|i| entry(i, 1 + i / 4)).collect::<Vec<_>>());
        let mut log = RaftLog::new(disk.clone(), 0, 0, 10, 7, 5).unwrap();
        assert_eq!(log.last_term(), 3);
        assert_eq!(log.term(3), Ok(1));
        assert_eq!(log.committed(), 7);
        let batch = log.entries(2, 11, 3 * ENTRY_OVERHEAD_BYTES as u64).unwrap();
        assert_eq!(
            batch.len(),
            2,
            "byte limit applies across source and memory"
        );
        assert_eq!(log.next_to_apply(u64::MAX, |_| false).unwrap().len(), 2);
        assert!(log.compact_to(6).unwrap());
        assert_eq!(log.term(5), Err(LogError::Compacted));
        assert_eq!(log.term(6), Ok(2));
        assert_eq!(log.entries(6, 8, u64::MAX), Err(LogError::Compacted));
        assert_eq!(log.entries(7, 11, u64::MAX).unwrap().len(), 4);
        // The conflict search walks back to the last entry of term <= 2.
        assert_eq!(log.find_conflict_by_term(10, 2).unwrap(), (7, 2));
        log.check_invariants();
    }

    #[test]
    fn restore_replaces_the_log_and_blocks_apply_until_durable() {
        let disk = Disk::default();
        let mut log = RaftLog::new(disk.clone(), 0, 0, 0, 0, 0).unwrap();
        log.append((1..=3).map(|i| entry(i, 1)).collect());
        let meta = SnapshotMetadata {
            index: 20,
            term: 4,
            ..Default::default()
        };
        log.restore(meta);
        assert_eq!(log.last_index(), 20);
        assert_eq!(log.last_term(), 4);
        assert!(log.next_to_apply(u64::MAX, |_| false).unwrap().is_empty());
        let (restore, entries) = log.take_unpersisted(1);
        assert_eq!(restore.map(|m| m.index), Some(20));
        assert!(entries.is_empty());
        log.persisted(1);
        assert_eq!(log.applied(), 20);
        assert_eq!(log.stable(), 20);
        log.check_invariants();
    }
}
