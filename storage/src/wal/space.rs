//! Free space kept for the backend: the log refuses new entries once the
//! file system holding it has less than a reserve free.
//!
//! Design. A full disk must turn into refused writes, not a dead member.
//! The log's appends rarely fail for space (segments are preallocated), but
//! the backend (`kv.redb`) grows as entries are applied, and redb closes a
//! database whose commit failed for an I/O error. So the log, which every
//! write passes first, refuses an append of entries with
//! [`StorageError::DiskFull`] while less than the reserve is free: nothing
//! new is committed, so the backend only has to hold what was already
//! logged, and that fits in the reserve. The refusal changes nothing on
//! disk, and the same append succeeds once space returns. Hard-state-only
//! writes (a term, a vote) are tiny and pass, so a member with a full disk
//! still takes part in elections.

use std::io;
use std::path::Path;

use oxetcd_core::storage::StorageError;

use crate::error::io_error;

/// Space kept free for the backend by default: far more than one apply
/// batch grows the backend by.
pub(crate) const RESERVE_BYTES: u64 = 16 * 1024 * 1024;

/// Fails with [`StorageError::DiskFull`] when the file system holding
/// `dir` has less than `reserve + needed` bytes free to unprivileged
/// writers. A reserve of 0 checks nothing.
pub(crate) fn check(dir: &Path, reserve: u64, needed: u64) -> Result<(), StorageError> {
    if reserve == 0 {
        return Ok(());
    }
    let stat = rustix::fs::statvfs(dir).map_err(|e| {
        io_error(
            format!("reading the free space of {}", dir.display()),
            io::Error::from(e),
        )
    })?;
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    if free >= reserve.saturating_add(needed) {
        return Ok(());
    }
    let error = io::Error::new(
        io::ErrorKind::StorageFull,
        format!("{free} bytes free, below the {reserve} kept for the backend"),
    );
    Err(io_error(format!("log append in {}", dir.display()), error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_larger_than_the_disk_refuses_as_disk_full() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(
            check(dir.path(), 0, u64::MAX).is_ok(),
            "no reserve, no check"
        );
        assert!(check(dir.path(), 1, 0).is_ok());
        let error = check(dir.path(), u64::MAX / 2, 0).unwrap_err();
        assert!(matches!(error, StorageError::DiskFull { .. }), "{error:?}");
        assert!(
            error.to_string().contains("kept for the backend"),
            "{error}"
        );
    }
}
