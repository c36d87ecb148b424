//! The raft log and hard state on redb ([`RedbLog`]): the format before
//! the WAL ([`crate::wal`]). [`crate::open`] imports a member's `log.redb`
//! into the WAL once; this store remains for that import and as a second
//! implementation of [`LogStore`] the tests compare with.
//!
//! Tables in `log.redb`:
//!
//! ```text
//! entries  u64 index -> eraftpb::Entry (protobuf)
//! meta     "hard_state"  -> eraftpb::HardState (protobuf)
//!          "first_index" -> u64 LE, index of the first entry kept (1 when absent)
//!          "snapshot_term" -> u64 LE, term of entry first_index - 1 (0 when absent)
//!          "cluster_id"    -> u64 LE, the cluster ID learned from peers (0 when absent)
//! ```
//!
//! Every write is one transaction committed with
//! [`Durability::Immediate`]: when [`LogStore::append`] returns, the entries
//! and hard state have been fsync'd. This module never writes without that.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oxetcd_core::storage::{Cause, LogState, LogStore, StorageError};
use protobuf::Message;
use raft_proto::eraftpb::{Entry, HardState};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};

use crate::codec::decode_u64;
use crate::error::{err, io_error, OpenError};
use crate::format::{open_database, META};

const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
const HARD_STATE_KEY: &str = "hard_state";
const FIRST_INDEX_KEY: &str = "first_index";
const SNAPSHOT_TERM_KEY: &str = "snapshot_term";
const CLUSTER_ID_KEY: &str = "cluster_id";
pub(crate) const CONTENTS: &str = "raft-log";

/// The raft log in its own redb database. Cloning shares the database.
#[derive(Clone, Debug)]
pub struct RedbLog {
    db: Arc<Database>,
    path: Arc<PathBuf>,
}

impl RedbLog {
    /// Opens or creates the log database at `path` (see [`crate::open`]).
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let db = open_database(path, CONTENTS, |txn| {
            txn.open_table(ENTRIES)?;
            Ok(())
        })?;
        Ok(Self {
            db: Arc::new(db),
            path: Arc::new(path.to_path_buf()),
        })
    }

    /// Size of the database file in bytes.
    pub fn size_bytes(&self) -> Result<u64, StorageError> {
        file_size(&self.path)
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn begin_durable_write(&self) -> Result<WriteTransaction, StorageError> {
        let mut txn = self.db.begin_write().map_err(err("log write"))?;
        // The default, spelled out: this store's writes are the durable record.
        txn.set_durability(Durability::Immediate)
            .map_err(err("log write"))?;
        Ok(txn)
    }
}

impl LogStore for RedbLog {
    fn state(&self) -> Result<LogState, StorageError> {
        let txn = self.db.begin_read().map_err(err("log read"))?;
        let meta = txn.open_table(META).map_err(err("log read"))?;
        let entries = txn.open_table(ENTRIES).map_err(err("log read"))?;
        let hard_state = match meta.get(HARD_STATE_KEY).map_err(err("log read"))? {
            Some(bytes) => HardState::parse_from_bytes(bytes.value())
                .map_err(|e| StorageError::corrupt("hard state", e))?,
            None => HardState::default(),
        };
        let first_index = first_index(&meta)?;
        let last_index = last_index(&entries, first_index)?;
        let snapshot_term = match meta.get(SNAPSHOT_TERM_KEY).map_err(err("log read"))? {
            Some(bytes) => decode_u64("snapshot term", bytes.value())?,
            None => 0,
        };
        let cluster_id = match meta.get(CLUSTER_ID_KEY).map_err(err("log read"))? {
            Some(bytes) => decode_u64("cluster ID", bytes.value())?,
            None => 0,
        };
        Ok(LogState {
            hard_state,
            first_index,
            last_index,
            snapshot_term,
            cluster_id,
        })
    }

    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
        let txn = self.db.begin_read().map_err(err("log read"))?;
        let meta = txn.open_table(META).map_err(err("log read"))?;
        let table = txn.open_table(ENTRIES).map_err(err("log read"))?;
        let first = first_index(&meta)?;
        let last = last_index(&table, first)?;
        if low > high || low < first || high > last + 1 {
            return Err(StorageError::EntriesUnavailable {
                low,
                high,
                first,
                last,
            });
        }
        if low == high {
            return Ok(Vec::new());
        }
        let capacity = usize::try_from(high - low).unwrap_or(0);
        let mut out = Vec::with_capacity(capacity);
        for row in table.range(low..high).map_err(err("log read"))? {
            let (index, bytes) = row.map_err(err("log read"))?;
            let index = index.value();
            let entry = Entry::parse_from_bytes(bytes.value())
                .map_err(|e| StorageError::corrupt(format_args!("log entry {index}"), e))?;
            let expected = low + out.len() as u64;
            if index != expected || entry.index != index {
                return Err(StorageError::corrupt(
                    "log",
                    format_args!(
                        "entry {expected} missing (found stored index {index}, entry index {})",
                        entry.index
                    ),
                ));
            }
            out.push(entry);
        }
        if out.len() as u64 != high - low {
            return Err(StorageError::corrupt(
                "log",
                format_args!(
                    "entries [{low}, {high}) not all stored: found {}",
                    out.len()
                ),
            ));
        }
        Ok(out)
    }

    fn append(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<(), StorageError> {
        if entries.is_empty() && hard_state.is_none() {
            return Ok(());
        }
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(StorageError::AppendNotContiguous {
                    index: pair[1].index,
                    after: pair[0].index,
                });
            }
        }
        let txn = self.begin_durable_write()?;
        {
            let mut meta = txn.open_table(META).map_err(err("log append"))?;
            if let Some(first_new) = entries.first().map(|e| e.index) {
                let mut table = txn.open_table(ENTRIES).map_err(err("log append"))?;
                let mut first = first_index(&meta)?;
                let mut last = last_index(&table, first)?;
                let gap = |first, last| StorageError::AppendGap {
                    at: first_new,
                    first,
                    last,
                };
                if first_new == 0 {
                    return Err(gap(first, last));
                }
                if last < first && first_new != first {
                    // An empty log may start anywhere: after a snapshot it
                    // continues at the snapshot's index + 1.
                    meta.insert(FIRST_INDEX_KEY, first_new.to_le_bytes().as_slice())
                        .map_err(err("log append"))?;
                    (first, last) = (first_new, first_new - 1);
                }
                if first_new < first || first_new > last + 1 {
                    return Err(gap(first, last));
                }
                // A follower's log may be overwritten by a new leader's
                // entries: everything from the first new index goes.
                if first_new <= last {
                    table
                        .retain_in(first_new.., |_, _| false)
                        .map_err(err("log append"))?;
                }
                for entry in entries {
                    let bytes = entry.write_to_bytes().map_err(|e| {
                        StorageError::invariant(format_args!("encode log entry: {e}"))
                    })?;
                    table
                        .insert(entry.index, bytes.as_slice())
                        .map_err(err("log append"))?;
                }
            }
            if let Some(hard_state) = hard_state {
                let bytes = hard_state
                    .write_to_bytes()
                    .map_err(|e| StorageError::invariant(format_args!("encode hard state: {e}")))?;
                meta.insert(HARD_STATE_KEY, bytes.as_slice())
                    .map_err(err("log append"))?;
            }
        }
        txn.commit().map_err(err("log append commit"))
    }

    fn compact(&self, index: u64) -> Result<(), StorageError> {
        let txn = self.begin_durable_write()?;
        {
            let mut meta = txn.open_table(META).map_err(err("log compact"))?;
            if index <= first_index(&meta)? {
                return Ok(());
            }
            let mut table = txn.open_table(ENTRIES).map_err(err("log compact"))?;
            // The last dropped entry's term is the snapshot term; compacting
            // past the end leaves the recorded one (install_snapshot sets it).
            let snapshot_term = match table.get(index - 1).map_err(err("log compact"))? {
                Some(bytes) => Some(
                    Entry::parse_from_bytes(bytes.value())
                        .map_err(|e| {
                            StorageError::corrupt(format_args!("log entry {}", index - 1), e)
                        })?
                        .term,
                ),
                None => None,
            };
            if let Some(term) = snapshot_term {
                meta.insert(SNAPSHOT_TERM_KEY, term.to_le_bytes().as_slice())
                    .map_err(err("log compact"))?;
            }
            table
                .retain_in(..index, |_, _| false)
                .map_err(err("log compact"))?;
            // `index` may lie past the last entry (a snapshot replaced the
            // whole log): the log is then empty and continues at `index`.
            meta.insert(FIRST_INDEX_KEY, index.to_le_bytes().as_slice())
                .map_err(err("log compact"))?;
        }
        txn.commit().map_err(err("log compact commit"))
    }

    fn install_snapshot(&self, index: u64, term: u64) -> Result<(), StorageError> {
        let txn = self.begin_durable_write()?;
        {
            let mut table = txn.open_table(ENTRIES).map_err(err("log install"))?;
            table
                .retain_in(0u64.., |_, _| false)
                .map_err(err("log install"))?;
            let mut meta = txn.open_table(META).map_err(err("log install"))?;
            meta.insert(FIRST_INDEX_KEY, (index + 1).to_le_bytes().as_slice())
                .map_err(err("log install"))?;
            meta.insert(SNAPSHOT_TERM_KEY, term.to_le_bytes().as_slice())
                .map_err(err("log install"))?;
        }
        txn.commit().map_err(err("log install commit"))
    }

    fn store_cluster_id(&self, cluster_id: u64) -> Result<(), StorageError> {
        let txn = self.begin_durable_write()?;
        {
            let mut meta = txn.open_table(META).map_err(err("log write"))?;
            meta.insert(CLUSTER_ID_KEY, cluster_id.to_le_bytes().as_slice())
                .map_err(err("log write"))?;
        }
        txn.commit().map_err(err("log write commit"))
    }
}

fn first_index(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<u64, StorageError> {
    match meta.get(FIRST_INDEX_KEY).map_err(err("log read"))? {
        Some(bytes) => match decode_u64("first index", bytes.value())? {
            0 => Err(StorageError::corrupt("first index record", 0)),
            index => Ok(index),
        },
        None => Ok(1),
    }
}

fn last_index(
    entries: &impl ReadableTable<u64, &'static [u8]>,
    first_index: u64,
) -> Result<u64, StorageError> {
    Ok(match entries.last().map_err(err("log read"))? {
        Some((index, _)) => index.value(),
        None => first_index - 1,
    })
}

pub(crate) fn file_size(path: &Path) -> Result<u64, StorageError> {
    fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => StorageError::FileMissing {
                path: path.display().to_string(),
                source: Cause::new(e),
            },
            _ => io_error(format!("reading the size of {}", path.display()), e),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: format!("{index}@{term}").into_bytes().into(),
            ..Entry::default()
        }
    }

    fn hard_state(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..HardState::default()
        }
    }

    fn terms(log: &RedbLog, low: u64, high: u64) -> Vec<(u64, u64)> {
        log.entries(low, high)
            .unwrap()
            .iter()
            .map(|e| (e.index, e.term))
            .collect()
    }

    #[test]
    fn fresh_log_state() {
        let dir = tempfile::tempdir().unwrap();
        let log = RedbLog::open(&dir.path().join("log.redb")).unwrap();
        let state = log.state().unwrap();
        assert_eq!(
            state,
            LogState {
                hard_state: HardState::default(),
                first_index: 1,
                last_index: 0,
                snapshot_term: 0,
                cluster_id: 0,
            }
        );
        assert_eq!(log.entries(1, 1).unwrap(), vec![]);
        assert!(log.entries(1, 2).is_err());
    }

    #[test]
    fn the_learned_cluster_id_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        let log = RedbLog::open(&path).unwrap();
        log.store_cluster_id(0xc1_u64 << 40).unwrap();
        drop(log);
        let log = RedbLog::open(&path).unwrap();
        assert_eq!(log.state().unwrap().cluster_id, 0xc1_u64 << 40);
        assert_eq!(log.state().unwrap().first_index, 1);
    }

    #[test]
    fn append_overwrite_compact_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        {
            let log = RedbLog::open(&path).unwrap();
            let batch: Vec<_> = (1..=5).map(|i| entry(i, 1)).collect();
            log.append(&batch, Some(&hard_state(1, 2, 3))).unwrap();
            assert_eq!(log.state().unwrap().last_index, 5);
            assert_eq!(log.entries(2, 4).unwrap(), batch[1..3].to_vec());

            // A new leader overwrites the tail from index 4.
            log.append(&[entry(4, 2)], None).unwrap();
            assert_eq!(terms(&log, 1, 5), vec![(1, 1), (2, 1), (3, 1), (4, 2)]);
            assert!(log.entries(1, 6).is_err());

            // Hard state alone.
            log.append(&[], Some(&hard_state(2, 1, 4))).unwrap();
            log.compact(3).unwrap();
            log.compact(2).unwrap(); // no-op: already compacted further
            assert!(log.entries(2, 4).is_err());
        }
        let log = RedbLog::open(&path).unwrap();
        let state = log.state().unwrap();
        assert_eq!(state.hard_state, hard_state(2, 1, 4));
        assert_eq!((state.first_index, state.last_index), (3, 4));
        assert_eq!(state.snapshot_term, 1, "the term of entry 2");
        assert_eq!(terms(&log, 3, 5), vec![(3, 1), (4, 2)]);
        log.append(&[entry(5, 2), entry(6, 2)], None).unwrap();
        assert_eq!(terms(&log, 3, 7), vec![(3, 1), (4, 2), (5, 2), (6, 2)]);
    }

    #[test]
    fn compact_past_the_end_empties_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = RedbLog::open(&dir.path().join("log.redb")).unwrap();
        log.append(&[entry(1, 1), entry(2, 1)], None).unwrap();
        log.compact(11).unwrap();
        let state = log.state().unwrap();
        assert_eq!((state.first_index, state.last_index), (11, 10));
        log.append(&[entry(11, 3)], None).unwrap();
        assert_eq!(terms(&log, 11, 12), vec![(11, 3)]);
    }

    #[test]
    fn installing_a_snapshot_replaces_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        {
            let log = RedbLog::open(&path).unwrap();
            log.append(&[entry(1, 1), entry(2, 1)], None).unwrap();
            log.install_snapshot(20, 4).unwrap();
            log.append(&[entry(21, 5)], None).unwrap();
        }
        let log = RedbLog::open(&path).unwrap();
        let state = log.state().unwrap();
        assert_eq!(
            (state.first_index, state.last_index, state.snapshot_term),
            (21, 21, 4)
        );
        assert!(log.entries(2, 3).is_err());
    }

    #[test]
    fn bad_appends_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let log = RedbLog::open(&dir.path().join("log.redb")).unwrap();
        let gap = |at, first, last| Err(StorageError::AppendGap { at, first, last });
        assert_eq!(log.append(&[entry(0, 1)], None), gap(0, 1, 0), "index 0");
        assert_eq!(
            log.append(&[entry(1, 1), entry(3, 1)], None),
            Err(StorageError::AppendNotContiguous { index: 3, after: 1 }),
        );
        log.append(&[entry(1, 1), entry(2, 1)], None).unwrap();
        assert_eq!(log.append(&[entry(4, 1)], None), gap(4, 1, 2));
        log.compact(2).unwrap();
        assert_eq!(log.append(&[entry(1, 2)], None), gap(1, 2, 2));
        assert_eq!(terms(&log, 2, 3), vec![(2, 1)]);
        assert!(matches!(
            log.entries(3, 2),
            Err(StorageError::EntriesUnavailable {
                low: 3,
                high: 2,
                ..
            })
        ));
    }

    #[test]
    fn empty_log_starts_where_the_first_append_says() {
        // After a snapshot at 9 a fresh log continues at 10.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        let log = RedbLog::open(&path).unwrap();
        log.append(&[entry(10, 2), entry(11, 2)], None).unwrap();
        drop(log);
        let log = RedbLog::open(&path).unwrap();
        let state = log.state().unwrap();
        assert_eq!((state.first_index, state.last_index), (10, 11));
        assert!(log.append(&[entry(9, 2)], None).is_err());
    }

    #[test]
    fn clones_share_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let log = RedbLog::open(&dir.path().join("log.redb")).unwrap();
        let other = log.clone();
        let writer = std::thread::spawn(move || other.append(&[entry(1, 1)], None));
        writer.join().unwrap().unwrap();
        assert_eq!(log.state().unwrap().last_index, 1);
    }
}
