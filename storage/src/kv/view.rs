//! Reading the backend's versions and leases out of one snapshot: scans
//! and a key's history through the key index, watch replay (`changes`) in
//! revision order, and the leases.
//!
//! Design. Every record read is checked (its checksum, module `codec` for
//! versions and `sealed` for leases) before it is handed on, and the
//! storage engine's own steps run under `refusing_engine_panics`, so that
//! a damaged page is refused as damage rather than crashing the member.
//! The visitors run outside that guard: their panics are bugs, not damage.

use std::ops::{Bound, ControlFlow};

use oxetcd_core::storage::{KeyVersion, LeaseRecord, RangeEnd, Revision, StorageError};
use redb::ReadableTable;

use super::index::{Overlay, Rev, SharedIndex};
use super::{revision_key, split_revision_key, LEASE_SHAPE};
use crate::codec::{decode_lease, RevisionRecord};
use crate::error::{err, refusing_engine_panics};
use crate::sealed::{unseal, Address};

/// What a scan needs: the index as one reader sees it, and that reader's
/// `revisions` table.
pub(super) struct View<'a, T> {
    pub(super) index: &'a SharedIndex,
    pub(super) seq: u64,
    pub(super) overlay: Option<&'a Overlay>,
    pub(super) revisions: &'a T,
}

impl<T: ReadableTable<u128, &'static [u8]>> View<'_, T> {
    pub(super) fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let Ok(at) = u64::try_from(at) else {
            return Ok(()); // nothing is stored below revision 0
        };
        let mut after: Option<Vec<u8>> = None;
        let mut batch = Vec::new();
        loop {
            let from = match &after {
                Some(last) => Bound::Excluded(last.as_slice()),
                None => Bound::Included(start),
            };
            let next = self
                .index
                .scan_batch(from, end, self.seq, at, self.overlay, &mut batch)?;
            // The index lock is released: reading records and visiting them
            // holds up no writer.
            for (key, rev) in batch.drain(..) {
                if visit(self.load(key, rev)?).is_break() {
                    return Ok(());
                }
            }
            match next {
                Some(last) => after = Some(last),
                None => return Ok(()),
            }
        }
    }

    pub(super) fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        for rev in self.index.versions(key, self.seq, self.overlay)? {
            if visit(self.load(key.to_vec(), rev)?).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// The version of `key` stored at `rev`, which the index says this view
    /// sees.
    fn load(&self, key: Vec<u8>, (main, sub): Rev) -> Result<KeyVersion, StorageError> {
        let at = format_args!("version record at revision {main}.{sub}");
        refusing_engine_panics(at, || {
            let bytes = self
                .revisions
                .get(revision_key((main, sub)))
                .map_err(err("kv read"))?
                .ok_or_else(|| {
                    StorageError::invariant(format_args!(
                        "kv index names revision {main}.{sub}, which the snapshot does not store"
                    ))
                })?;
            let record = RevisionRecord::decode(bytes.value(), revision_key((main, sub)))?;
            if record.key != key.as_slice() {
                return Err(StorageError::invariant(format_args!(
                    "kv index names revision {main}.{sub} for another key"
                )));
            }
            key_version(key, main, sub, &record)
        })
    }
}

pub(super) fn changes(
    table: &impl ReadableTable<u128, &'static [u8]>,
    from: i64,
    to: i64,
    visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
) -> Result<(), StorageError> {
    let Ok(to) = u64::try_from(to) else {
        return Ok(());
    };
    let from = u64::try_from(from).unwrap_or(0);
    if from > to {
        return Ok(());
    }
    let mut rows = refusing_engine_panics("revisions table", || {
        table
            .range(revision_key((from, 0))..=revision_key((to, u64::MAX)))
            .map_err(err("kv changes"))
    })?;
    // Only the engine's steps are guarded, not `visit`.
    while let Some(version) = refusing_engine_panics("revisions table", || {
        let Some(row) = rows.next() else {
            return Ok(None);
        };
        let (rev, bytes) = row.map_err(err("kv changes"))?;
        let (main, sub) = split_revision_key(rev.value());
        let record = RevisionRecord::decode(bytes.value(), rev.value())?;
        key_version(record.key.to_vec(), main, sub, &record).map(Some)
    })? {
        if visit(version).is_break() {
            break;
        }
    }
    Ok(())
}

pub(super) fn leases(
    table: &impl ReadableTable<i64, &'static [u8]>,
    visit: &mut dyn FnMut(LeaseRecord) -> ControlFlow<()>,
) -> Result<(), StorageError> {
    let mut rows =
        refusing_engine_panics("leases table", || table.iter().map_err(err("kv leases")))?;
    // Only the engine's steps are guarded, not `visit`.
    while let Some(lease) = refusing_engine_panics("leases table", || {
        let Some(row) = rows.next() else {
            return Ok(None);
        };
        let (id, bytes) = row.map_err(err("kv leases"))?;
        let id = id.value();
        let payload = unseal(Address::Lease(id), LEASE_SHAPE, bytes.value())?;
        decode_lease(id, payload).map(Some)
    })? {
        if visit(lease).is_break() {
            break;
        }
    }
    Ok(())
}

fn key_version(
    key: Vec<u8>,
    main: u64,
    sub: u64,
    record: &RevisionRecord<'_>,
) -> Result<KeyVersion, StorageError> {
    let revision = |n: u64| {
        i64::try_from(n).map_err(|_| StorageError::corrupt("revision key", "out of range"))
    };
    Ok(KeyVersion {
        key,
        mod_revision: Revision {
            main: revision(main)?,
            sub: revision(sub)?,
        },
        create_revision: record.create_revision,
        version: record.version,
        lease: record.lease,
        value: record.value.to_vec(),
        tombstone: record.tombstone,
    })
}
