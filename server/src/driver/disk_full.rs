//! A full disk: the log write that failed for want of space is retried
//! until it goes through, and the node refuses new writes meanwhile.
//!
//! Design. When a log append fails with [`StorageError::DiskFull`] (the
//! WAL refuses entries while less than its reserve is free, or could not
//! make its next segment), nothing of it was written, so it is not
//! acknowledged: the node hears `Input::DiskFull { full: true }` and
//! answers new writes with `etcdserver: no space left on device`
//! (`ResourceExhausted`), while reads are served as usual. The log writer
//! retries the same append every [`RETRY_INTERVAL`]; once it goes through
//! it is acknowledged as any other, the node hears `full: false`, and the
//! writes that waited for it are answered. Appends are never reordered:
//! nothing else is written while one is retried, and a member stopping
//! while its disk is full drops the unwritten append (nobody was told it
//! was durable) and everything after it.
//!
//! etcd has no such state (its member exits); this is not etcd's NOSPACE
//! alarm either, which is about the backend quota, is replicated, and
//! clears only when an operator disarms it.
//!
//! The backend: a sync that fails for want of space (before a log
//! compaction, or when the member stops) is not final either. The
//! compaction is skipped, and a stopping member stops as after a crash:
//! the backend comes back at its last durable commit and the log, never
//! compacted past it, replays the rest. A backend commit while applying
//! entries stays final (the apply step changes the node's memory too):
//! the WAL's reserve is what keeps it from meeting a full disk, since no
//! entry is logged, so none applied, while less than the reserve is
//! free. Any other storage error stays final.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use oxetcd_core::raft::Persist;
use oxetcd_core::storage::{LogStore, StorageError};
use tracing::{info, warn};

/// How often a log append that failed for want of space is retried.
pub(super) const RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// Whether the log's disk is full, and whether the member is stopping,
/// shared by the driver and the log writer.
#[derive(Debug, Default)]
pub(super) struct DiskState {
    full: AtomicBool,
    stopping: AtomicBool,
}

impl DiskState {
    /// Records a failure for space; true when the disk was not known full
    /// (the node must be told).
    pub(super) fn mark_full(&self, error: &StorageError) -> bool {
        let newly = !self.full.swap(true, Ordering::AcqRel);
        if newly {
            warn!(
                error = %error,
                "the disk is full: writes are refused until space is freed; \
                 the last log write is retried"
            );
        }
        newly
    }

    /// Records a log write that went through; true when the disk was
    /// known full (the node must be told).
    pub(super) fn mark_written(&self) -> bool {
        let was = self.full.swap(false, Ordering::AcqRel);
        if was {
            info!("the log is written again: writes are accepted");
        }
        was
    }

    /// The member is stopping: a retried append is given up.
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// Appends `persist`'s entries and hard state, retrying while the disk is
/// full. `Ok(true)`: written; `Ok(false)`: given up because the member is
/// stopping. `on_full` runs when the disk is first found full.
pub(super) fn append_retrying<L: LogStore>(
    log: &L,
    persist: &Persist,
    disk: &DiskState,
    mut on_full: impl FnMut(),
) -> Result<bool, StorageError> {
    loop {
        match log.append(&persist.entries, persist.hard_state.as_ref()) {
            Ok(()) => return Ok(true),
            Err(e @ StorageError::DiskFull { .. }) => {
                if disk.mark_full(&e) {
                    on_full();
                }
            }
            Err(e) => return Err(e),
        }
        if !pause(disk) {
            return Ok(false);
        }
    }
}

/// Waits [`RETRY_INTERVAL`], in short steps so that a stop is seen soon;
/// false when the member is stopping.
fn pause(disk: &DiskState) -> bool {
    const STEP: Duration = Duration::from_millis(50);
    let steps = RETRY_INTERVAL.as_millis() / STEP.as_millis();
    for _ in 0..steps {
        if disk.stopping() {
            return false;
        }
        std::thread::sleep(STEP);
    }
    !disk.stopping()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use oxetcd_core::memory::MemoryLog;
    use oxetcd_core::raft::PersistId;
    use oxetcd_core::storage::Cause;
    use oxetcd_proto::eraftpb::Entry;

    use super::*;

    /// A log whose first `failures` appends fail for space.
    #[derive(Clone, Default)]
    struct FullFor {
        log: MemoryLog,
        failures: std::sync::Arc<AtomicUsize>,
    }

    impl LogStore for FullFor {
        fn state(&self) -> Result<oxetcd_core::storage::LogState, StorageError> {
            self.log.state()
        }

        fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
            self.log.entries(low, high)
        }

        fn append(
            &self,
            entries: &[Entry],
            hard_state: Option<&oxetcd_proto::eraftpb::HardState>,
        ) -> Result<(), StorageError> {
            let left = self.failures.load(Ordering::Acquire);
            if left > 0 {
                self.failures.store(left - 1, Ordering::Release);
                return Err(StorageError::DiskFull {
                    during: "log append".into(),
                    source: Cause::new(std::io::Error::from(std::io::ErrorKind::StorageFull)),
                });
            }
            self.log.append(entries, hard_state)
        }

        fn compact(&self, index: u64) -> Result<(), StorageError> {
            self.log.compact(index)
        }

        fn install_snapshot(&self, index: u64, term: u64) -> Result<(), StorageError> {
            self.log.install_snapshot(index, term)
        }

        fn store_cluster_id(&self, cluster_id: u64) -> Result<(), StorageError> {
            self.log.store_cluster_id(cluster_id)
        }
    }

    fn persist() -> Persist {
        Persist {
            id: PersistId(1),
            snapshot: None,
            entries: vec![Entry {
                index: 1,
                term: 1,
                ..Entry::default()
            }],
            hard_state: None,
        }
    }

    #[test]
    fn an_append_is_retried_until_space_returns() {
        let log = FullFor::default();
        log.failures.store(2, Ordering::Release);
        let disk = DiskState::default();
        let mut told = 0;
        assert_eq!(
            append_retrying(&log, &persist(), &disk, || told += 1),
            Ok(true)
        );
        assert_eq!(told, 1, "told once, not on every retry");
        assert_eq!(log.state().map(|s| s.last_index), Ok(1));
        assert!(disk.mark_written(), "still known full until told");
        assert!(!disk.mark_written());
    }

    #[test]
    fn a_stopping_member_gives_the_append_up() {
        let log = FullFor::default();
        log.failures.store(usize::MAX, Ordering::Release);
        let disk = DiskState::default();
        disk.stop();
        assert_eq!(append_retrying(&log, &persist(), &disk, || {}), Ok(false));
        assert_eq!(log.state().map(|s| s.last_index), Ok(0));
    }
}
