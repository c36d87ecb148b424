//! Upgrading a data directory in place: a raft log kept in `log.redb` (the
//! format before the WAL) is copied into a new WAL once, then removed.
//!
//! Design. The WAL is built in a temporary directory beside the final one,
//! synced, and renamed into place; only then is `log.redb` removed. A crash
//! before the rename leaves `log.redb` untouched and the import starts over
//! at the next open; a crash after it leaves a complete WAL, and the
//! leftover `log.redb` is removed at the next open.

use std::fs;
use std::path::Path;

use oxetcd_core::storage::LogStore;
use tracing::info;

use super::image::Image;
use super::segment::sync_dir;
use super::store::{WalLog, WalOptions};
use crate::error::OpenError;
use crate::log::RedbLog;

/// Entries copied per WAL write during an import.
const IMPORT_BATCH_ENTRIES: u64 = 1024;

/// Where a WAL is built before it is renamed into place.
pub(crate) const IMPORT_DIR: &str = "wal.import";

/// Imports `member/<legacy>` into `member/<wal_dir>` if there is no WAL yet,
/// and removes a `log.redb` that was already imported.
pub(crate) fn import_legacy_log(
    member: &Path,
    legacy: &str,
    wal_dir: &str,
    options: WalOptions,
) -> Result<(), OpenError> {
    let legacy_path = member.join(legacy);
    let wal_path = member.join(wal_dir);
    if !legacy_path.exists() {
        return Ok(());
    }
    if wal_path.exists() {
        info!(path = %legacy_path.display(), "removing the raft log already imported into the WAL");
        return remove_synced(member, &legacy_path);
    }
    let staging = member.join(IMPORT_DIR);
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| OpenError::from_io(&staging, e))?;
    }
    let redb = RedbLog::open(&legacy_path)?;
    let read_error = |e: oxetcd_core::storage::StorageError| OpenError::Corrupt {
        path: legacy_path.clone(),
        detail: format!("reading it for the WAL import: {e}"),
    };
    let state = redb.state().map_err(read_error)?;
    {
        let wal = WalLog::open_or_create(&staging, options, Image::from_state(&state))?;
        let write_error = |e: oxetcd_core::storage::StorageError| OpenError::Io {
            path: staging.clone(),
            error: std::io::Error::other(e.to_string()),
        };
        let mut low = state.first_index;
        while low <= state.last_index {
            let high = (low + IMPORT_BATCH_ENTRIES).min(state.last_index + 1);
            let entries = redb.entries(low, high).map_err(read_error)?;
            wal.append(&entries, None).map_err(write_error)?;
            low = high;
        }
        let imported = wal.state().map_err(write_error)?;
        if imported != state {
            return Err(OpenError::Corrupt {
                path: legacy_path.clone(),
                detail: format!("the WAL import reads back {imported:?}, not {state:?}"),
            });
        }
    }
    fs::rename(&staging, &wal_path)
        .and_then(|()| sync_dir(member))
        .map_err(|e| OpenError::from_io(&wal_path, e))?;
    drop(redb);
    info!(
        from = %legacy_path.display(),
        to = %wal_path.display(),
        first_index = state.first_index,
        last_index = state.last_index,
        "imported the raft log into the WAL"
    );
    remove_synced(member, &legacy_path)
}

fn remove_synced(member: &Path, path: &Path) -> Result<(), OpenError> {
    fs::remove_file(path)
        .and_then(|()| sync_dir(member))
        .map_err(|e| OpenError::from_io(path, e))
}
