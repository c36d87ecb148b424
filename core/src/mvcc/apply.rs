//! Applying one write request: put, delete range, txn (in `txn.rs`) and
//! compaction, each all-or-nothing.

use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, ResponseHeader,
};

use crate::error::Error;
use crate::storage::{KeyVersion, KvMeta, KvRead, KvWrite, RangeEnd, Revision};
use crate::{Response, Write};

use super::buffer::WriteBuffer;
use super::range::{self, key_value, Snapshot};
use super::{current_revision, txn, LeaseCheck};

/// See [`super::apply_with_leases`]. The request is taken whole: a put's
/// key and value move into the version written, uncopied.
pub(super) fn apply<W: KvWrite>(
    txn: &mut W,
    meta: &mut KvMeta,
    request: Write,
    leases: &dyn LeaseCheck,
    recorded: &mut Vec<KeyVersion>,
) -> Result<Response, Error> {
    let begin = current_revision(meta);
    let compacted = meta.compact_revision;
    let (response, changes) = {
        let mut buffer = WriteBuffer::new(&*txn, begin, compacted);
        let response = match request {
            Write::Put(put) => {
                // A top-level put checks its lease before anything else.
                check_lease(&put, leases)?;
                Response::Put(apply_put(&mut buffer, put)?)
            }
            Write::DeleteRange(delete) => {
                Response::DeleteRange(apply_delete_range(&mut buffer, &delete)?)
            }
            Write::Txn(request) => Response::Txn(txn::apply_txn(&mut buffer, &request, leases)?),
            Write::Compaction(request) => {
                return compact(txn, meta, &request).map(Response::Compact);
            }
            _ => {
                return Err(Error::Unimplemented("this request in mvcc"));
            }
        };
        (response, buffer.into_changes())
    };
    if !changes.is_empty() {
        for version in &changes {
            txn.put_version(version)?;
        }
        let mut updated = *meta;
        updated.revision = begin + 1;
        txn.set_meta(&updated)?;
        *meta = updated;
    }
    if recorded.is_empty() {
        *recorded = changes;
    } else {
        recorded.extend(changes);
    }
    Ok(response)
}

/// Fails with [`Error::LeaseNotFound`] when `put` attaches a lease that does
/// not exist.
pub(super) fn check_lease(put: &PutRequest, leases: &dyn LeaseCheck) -> Result<(), Error> {
    if put.lease != 0 && !leases.lease_exists(put.lease) {
        return Err(Error::LeaseNotFound);
    }
    Ok(())
}

/// A put (the lease already checked); its key and value become the
/// version's.
pub(super) fn apply_put<R: KvRead + ?Sized>(
    buffer: &mut WriteBuffer<'_, R>,
    put: PutRequest,
) -> Result<PutResponse, Error> {
    let PutRequest {
        key,
        mut value,
        mut lease,
        prev_kv,
        ignore_value,
        ignore_lease,
    } = put;
    let previous = if prev_kv || ignore_value || ignore_lease {
        buffer.live(&key)?
    } else {
        None
    };
    if ignore_value || ignore_lease {
        let Some(previous) = &previous else {
            return Err(Error::KeyNotFound);
        };
        if ignore_value {
            value = previous.value.clone();
        }
        if ignore_lease {
            lease = previous.lease;
        }
    }
    let canary = crate::canary::on(crate::canary::Canary::PrevKvWrongRevision);
    let reread = canary.then(|| key.clone());
    buffer.put(key, value, lease)?;
    let previous = match reread {
        Some(key) => buffer.live(&key)?,
        None => previous,
    };
    Ok(PutResponse {
        header: Some(header(buffer.begin() + 1)),
        prev_kv: if prev_kv {
            previous.map(key_value)
        } else {
            None
        },
    })
}

/// A delete range. Deleting nothing changes nothing.
pub(super) fn apply_delete_range<R: KvRead + ?Sized>(
    buffer: &mut WriteBuffer<'_, R>,
    delete: &DeleteRangeRequest,
) -> Result<DeleteRangeResponse, Error> {
    let mut doomed = Vec::new();
    range::visit_live(
        &*buffer,
        &delete.key,
        &delete.range_end,
        buffer.current_revision(),
        &mut |version| {
            doomed.push(version);
            ControlFlow::Continue(())
        },
    )?;
    for version in &doomed {
        buffer.delete(&version.key);
    }
    // As etcd: the revision is the new one if this txn changed anything so
    // far, this delete included.
    Ok(DeleteRangeResponse {
        header: Some(header(buffer.current_revision())),
        deleted: doomed.len() as i64,
        prev_kvs: if delete.prev_kv {
            doomed.into_iter().map(key_value).collect()
        } else {
            Vec::new()
        },
    })
}

/// Compaction: drops every version older than the newest one at or before
/// the revision, for each key, and that newest one too if it is a tombstone
/// older than the revision. A tombstone at the revision itself stays (as
/// etcd's since 3.5.15, etcd-io/etcd#18274): a watch may start at the
/// compaction revision, and must see the delete made there; the next
/// compaction drops it. It bumps no revision.
fn compact<W: KvWrite>(
    txn: &mut W,
    meta: &mut KvMeta,
    request: &CompactionRequest,
) -> Result<CompactionResponse, Error> {
    let current = current_revision(meta);
    let at = request.revision;
    // A store never compacted says -1, so compacting at 0 once succeeds (and
    // removes nothing), as etcd's does.
    if at <= meta.compact_revision {
        return Err(Error::Compacted);
    }
    if at > current {
        return Err(Error::FutureRevision);
    }
    txn.before_compaction(meta, at)?;
    let doomed = compaction_victims(&*txn, at)?;
    for (key, revision) in &doomed {
        txn.remove_version(key, *revision)?;
    }
    let mut updated = *meta;
    updated.compact_revision = at;
    txn.set_meta(&updated)?;
    *meta = updated;
    Ok(CompactionResponse {
        header: Some(header(current)),
    })
}

/// The versions compaction at `at` removes.
fn compaction_victims(view: &impl KvRead, at: i64) -> Result<Vec<(Vec<u8>, Revision)>, Error> {
    let mut keys = Vec::new();
    view.scan(b"", RangeEnd::Unbounded, at, &mut |version| {
        keys.push(version.key);
        ControlFlow::Continue(())
    })?;
    let mut doomed = Vec::new();
    for key in keys {
        let mut kept = false;
        view.versions(&key, &mut |version: KeyVersion| {
            if version.mod_revision.main <= at {
                let old_tombstone = version.tombstone && version.mod_revision.main < at;
                if kept || old_tombstone {
                    doomed.push((key.clone(), version.mod_revision));
                }
                kept = true;
            }
            ControlFlow::Continue(())
        })?;
    }
    Ok(doomed)
}

/// A header with only the revision set; the node fills in the rest.
pub(super) fn header(revision: i64) -> ResponseHeader {
    ResponseHeader {
        revision,
        ..ResponseHeader::default()
    }
}
