//! The log as the WAL's items describe it, held in memory.
//!
//! Design. Replaying the segments and appending at run time apply the same
//! [`Item`]s to one [`Image`], so the two cannot disagree. The image keeps
//! every entry from the first index on (etcd's MemoryStorage does the same
//! between snapshots), so [`LogStore::entries`] never reads the disk. After
//! older segments are removed, replay starts from a segment header that
//! names entries held only by removed segments; they must all lie below the
//! first index by the end of the replay, which [`Image::check_complete`]
//! verifies.
//!
//! [`LogStore::entries`]: oxetcd_core::storage::LogStore::entries

use std::collections::VecDeque;

use oxetcd_core::storage::{LogState, StorageError};
use raft_proto::eraftpb::{Entry, HardState};

use super::frame::{Item, SegmentHeader};

#[derive(Clone, Debug)]
pub(crate) struct Image {
    pub(crate) hard_state: HardState,
    pub(crate) cluster_id: u64,
    pub(crate) first_index: u64,
    pub(crate) last_index: u64,
    pub(crate) snapshot_term: u64,
    /// Entries `[last_index + 1 - len, last_index]`.
    entries: VecDeque<Entry>,
}

impl Default for Image {
    fn default() -> Self {
        Self {
            hard_state: HardState::default(),
            cluster_id: 0,
            first_index: 1,
            last_index: 0,
            snapshot_term: 0,
            entries: VecDeque::new(),
        }
    }
}

impl Image {
    /// The image a replay starts from: the oldest segment's header.
    pub(crate) fn from_header(header: &SegmentHeader) -> Self {
        Self {
            hard_state: header.hard_state.clone(),
            cluster_id: header.cluster_id,
            first_index: header.first_index,
            last_index: header.last_index,
            snapshot_term: header.snapshot_term,
            entries: VecDeque::new(),
        }
    }

    /// An image with `state`'s fields and no entries (an import fills them).
    pub(crate) fn from_state(state: &LogState) -> Self {
        Self {
            hard_state: state.hard_state.clone(),
            cluster_id: state.cluster_id,
            first_index: state.first_index,
            last_index: state.first_index - 1,
            snapshot_term: state.snapshot_term,
            entries: VecDeque::new(),
        }
    }

    /// The header a new segment `seq` starts with.
    pub(crate) fn header(&self, seq: u64) -> SegmentHeader {
        SegmentHeader {
            seq,
            first_index: self.first_index,
            last_index: self.last_index,
            snapshot_term: self.snapshot_term,
            cluster_id: self.cluster_id,
            hard_state: self.hard_state.clone(),
        }
    }

    pub(crate) fn state(&self) -> LogState {
        LogState {
            hard_state: self.hard_state.clone(),
            first_index: self.first_index,
            last_index: self.last_index,
            snapshot_term: self.snapshot_term,
            cluster_id: self.cluster_id,
        }
    }

    /// Index of the first entry held in memory.
    fn base(&self) -> u64 {
        self.last_index + 1 - self.entries.len() as u64
    }

    /// The term of the entry at `index`, if it is held.
    pub(crate) fn term(&self, index: u64) -> Option<u64> {
        let offset = index.checked_sub(self.base())?;
        self.entries
            .get(usize::try_from(offset).ok()?)
            .map(|e| e.term)
    }

    pub(crate) fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
        let (first, last) = (self.first_index, self.last_index);
        if low > high || low < first || high > last + 1 {
            return Err(StorageError::EntriesUnavailable {
                low,
                high,
                first,
                last,
            });
        }
        let base = self.base();
        if low < base {
            // Only a replay that did not complete leaves a hole.
            return Err(StorageError::invariant(format_args!(
                "log entries [{low}, {base}) are not in memory"
            )));
        }
        let from = (low - base) as usize;
        let to = (high - base) as usize;
        Ok(self.entries.range(from..to).cloned().collect())
    }

    /// Where an append of entries starting at `first_new` would go, or why
    /// it cannot (the same rules as every other log store).
    pub(crate) fn check_append(&self, first_new: u64) -> Result<(), StorageError> {
        let (mut first, mut last) = (self.first_index, self.last_index);
        let gap = |first, last| StorageError::AppendGap {
            at: first_new,
            first,
            last,
        };
        if first_new == 0 {
            return Err(gap(first, last));
        }
        if last < first && first_new != first {
            (first, last) = (first_new, first_new - 1);
        }
        if first_new < first || first_new > last + 1 {
            return Err(gap(first, last));
        }
        Ok(())
    }

    /// Applies one item. An item that breaks the rules the writer checked
    /// is damage (or a bug): the error says what is wrong.
    pub(crate) fn apply(&mut self, item: Item) -> Result<(), String> {
        match item {
            Item::Header(header) => {
                if header.first_index != self.first_index || header.last_index != self.last_index {
                    return Err(format!(
                        "segment header says the log is [{}, {}], the segments before it say [{}, {}]",
                        header.first_index, header.last_index, self.first_index, self.last_index
                    ));
                }
                self.hard_state = header.hard_state;
                self.cluster_id = header.cluster_id;
                self.snapshot_term = header.snapshot_term;
            }
            Item::Entry(entry) => self.push(entry)?,
            Item::HardState(hard_state) => self.hard_state = hard_state,
            Item::Mark {
                first_index,
                snapshot_term,
                replace,
            } => {
                if first_index == 0 {
                    return Err("compaction mark at index 0".into());
                }
                if replace || first_index > self.last_index + 1 {
                    self.entries.clear();
                    self.last_index = first_index - 1;
                } else {
                    let drop = first_index.saturating_sub(self.base());
                    let drop = usize::try_from(drop).unwrap_or(usize::MAX);
                    self.entries.drain(..drop.min(self.entries.len()));
                }
                self.first_index = first_index;
                self.snapshot_term = snapshot_term;
            }
            Item::ClusterId(id) => self.cluster_id = id,
        }
        Ok(())
    }

    fn push(&mut self, entry: Entry) -> Result<(), String> {
        let index = entry.index;
        if index == 0 {
            return Err("log entry at index 0".into());
        }
        if self.last_index < self.first_index {
            // An empty log continues wherever its next entry says.
            self.first_index = index;
            self.last_index = index - 1;
            self.entries.clear();
        }
        if index < self.first_index || index > self.last_index + 1 {
            return Err(format!(
                "log entry {index} does not follow the log [{}, {}]",
                self.first_index, self.last_index
            ));
        }
        if index <= self.last_index {
            // Overwritten by a new leader: everything from `index` goes.
            let base = self.base();
            if index < base {
                self.entries.clear();
            } else {
                self.entries.truncate((index - base) as usize);
            }
            self.last_index = index - 1;
        }
        self.entries.push_back(entry);
        self.last_index = index;
        Ok(())
    }

    /// After a replay: every entry from the first index on is in memory.
    pub(crate) fn check_complete(&self) -> Result<(), String> {
        let base = self.base();
        if self.last_index >= self.first_index && base > self.first_index {
            return Err(format!(
                "log entries [{}, {base}) are in no segment (the log is [{}, {}])",
                self.first_index, self.first_index, self.last_index
            ));
        }
        Ok(())
    }
}
