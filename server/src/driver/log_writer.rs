//! The log writer thread: appends (and fsyncs) the raft log for each
//! `Persist` in order, installs received snapshots into the backend, and
//! compacts the log, answering the driver once each write is durable.
//! An append that fails for want of space is retried (see
//! [`super::disk_full`]); nothing after it is written meanwhile.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Instant;

use oxetcd_core::storage::{KvStore, KvWrite, LogStore, StorageError};
use oxetcd_storage::snapshot as backend_snapshot;
use tracing::{info, warn};

use super::disk_full::{append_retrying, DiskState};
use super::run::fatal;
use super::{Command, LogJob};
use crate::metrics::Metrics;
use crate::peer::ReceivedSnapshot;

/// The log writer thread's body: one fsynced append per persist,
/// acknowledged in order; compactions after a backend sync. `pending`
/// counts the jobs sent and not yet done: each is counted off before it is
/// acknowledged.
pub(super) fn write_log<L: LogStore, K: KvStore>(
    log: L,
    kv: K,
    jobs: Receiver<LogJob>,
    commands: Sender<Command>,
    pending: &AtomicUsize,
    disk: &DiskState,
    metrics: &Metrics,
) {
    for job in jobs {
        let done = || pending.fetch_sub(1, Ordering::AcqRel);
        match job {
            LogJob::Persist(persist, data) => {
                if let Some(snapshot) = &persist.snapshot {
                    let what = format!("installing snapshot {}", snapshot.index);
                    let Some(data) = data else {
                        fatal(&what, &"no snapshot data was received");
                    };
                    let started = Instant::now();
                    if let Err(e) = install_snapshot(&log, &kv, snapshot, &data) {
                        fatal(&what, &e);
                    }
                    metrics
                        .snap_db_save
                        .observe(started.elapsed().as_secs_f64());
                }
                let started = Instant::now();
                let full = || {
                    let _ = commands.send(Command::DiskFull(true));
                };
                match append_retrying(&log, &persist, disk, full) {
                    Ok(true) => {}
                    // Stopping with the disk full: this append and every
                    // later one are dropped, none acknowledged.
                    Ok(false) => break,
                    Err(e) => fatal("appending to the raft log", &e),
                }
                metrics.wal_fsync.observe(started.elapsed().as_secs_f64());
                done();
                if disk.mark_written() && commands.send(Command::DiskFull(false)).is_err() {
                    break;
                }
                if commands.send(Command::Persisted(persist.id)).is_err() {
                    break;
                }
            }
            LogJob::ClusterId(id) => {
                if let Err(e) = log.store_cluster_id(id) {
                    fatal("storing the cluster ID", &e);
                }
                done();
            }
            LogJob::Compact(index) => {
                // The log is the durable record of what the backend holds
                // only as far as the backend is durable: no sync, no
                // compaction.
                match kv.sync() {
                    Ok(()) => {}
                    Err(e @ StorageError::DiskFull { .. }) => {
                        warn!(error = %e, "syncing the backend failed for want of space; the raft log is not compacted");
                        done();
                        continue;
                    }
                    Err(e) => fatal("syncing the backend", &e),
                }
                match log.compact(index + 1) {
                    Ok(()) => {}
                    // The log keeps more than it must until the next
                    // compaction; nothing is lost.
                    Err(e @ StorageError::DiskFull { .. }) => {
                        warn!(error = %e, "compacting the raft log failed for want of space; skipped");
                    }
                    Err(e) => fatal("compacting the raft log", &e),
                }
                done();
            }
        }
    }
}

/// Replaces the backend with a received snapshot, makes it durable, then
/// resets the log to start after it.
pub(super) fn install_snapshot<L: LogStore, K: KvStore>(
    log: &L,
    kv: &K,
    snapshot: &oxetcd_proto::eraftpb::SnapshotMetadata,
    data: &ReceivedSnapshot,
) -> Result<(), String> {
    let file = std::fs::File::open(data.path())
        .map_err(|e| format!("opening {}: {e}", data.path().display()))?;
    let mut write = kv.write().map_err(|e| e.to_string())?;
    let meta = backend_snapshot::import(&mut write, std::io::BufReader::new(file))
        .map_err(|e| e.to_string())?;
    if meta.applied_index != snapshot.index {
        return Err(format!(
            "the data holds index {} but the snapshot is at {}",
            meta.applied_index, snapshot.index
        ));
    }
    write.commit().map_err(|e| e.to_string())?;
    kv.sync().map_err(|e| e.to_string())?;
    log.install_snapshot(snapshot.index, snapshot.term)
        .map_err(|e| e.to_string())?;
    info!(
        index = snapshot.index,
        revision = meta.revision,
        "installed a snapshot into the backend"
    );
    Ok(())
}
