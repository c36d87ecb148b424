//! The backend's record of the bytes in use.
//!
//! Design. The bytes in use are kept by every write transaction as it puts
//! and removes versions and leases, and stored with its commit. At open the
//! figure is counted again from the data (the key index pass reads every
//! version anyway; leases are few) and stored if it differs, so a store
//! written before the figure existed, or one restored from a snapshot, holds
//! the exact figure from its first read on.

use redb::{Database, ReadableTableMetadata};

use oxetcd_core::storage::{StorageError, LEASE_BYTES};

use super::meta::{read_used_bytes, USED_BYTES};
use super::LEASES;
use crate::error::err;
use crate::format::META;

/// A write transaction's count of the bytes in use.
#[derive(Debug)]
pub(super) struct UsedBytes {
    pub(super) bytes: u64,
    /// Whether the commit must store `bytes`.
    pub(super) changed: bool,
}

impl UsedBytes {
    pub(super) fn new(bytes: u64) -> Self {
        Self {
            bytes,
            changed: false,
        }
    }

    /// Counts `bytes` stored (`added`) or removed.
    pub(super) fn count(&mut self, added: bool, bytes: u64) {
        self.bytes = if added {
            self.bytes.saturating_add(bytes)
        } else {
            self.bytes.saturating_sub(bytes)
        };
        self.changed = true;
    }
}

/// Stores the bytes in use counted at open (`version_bytes` for the
/// versions, plus the leases), if the stored figure differs.
pub(super) fn settle_used_bytes(db: &Database, version_bytes: u64) -> Result<(), StorageError> {
    let txn = db.begin_write().map_err(err("kv used bytes"))?;
    {
        let leases = txn.open_table(LEASES).map_err(err("kv used bytes"))?;
        let lease_count = leases.len().map_err(err("kv used bytes"))?;
        let counted = version_bytes.saturating_add(lease_count.saturating_mul(LEASE_BYTES));
        let mut meta = txn.open_table(META).map_err(err("kv used bytes"))?;
        if read_used_bytes(&meta)? == counted {
            return Ok(());
        }
        USED_BYTES.write(&mut meta, &counted.to_le_bytes(), "kv used bytes")?;
    }
    txn.commit().map_err(err("kv used bytes"))
}
