//! Applying one committed proposal to the backend: key-space writes, lease
//! grants, revokes and checkpoints. Membership entries and empty entries
//! never reach this module (the node records membership itself, and an
//! empty entry changes nothing).
//!
//! This module writes storage only through the [`KvWrite`] it is handed.

use oxetcd_proto::etcdserverpb::{
    request_op, DeleteRangeRequest, LeaseGrantResponse, LeaseRevokeResponse, RequestOp,
    ResponseHeader, TxnRequest,
};
use oxetcd_proto::oxetcdpb::proposal;

use crate::error::Error;
use crate::lease::{self, Lessor};
use crate::mvcc;
use crate::storage::{KvMeta, KvWrite, StorageError};
use crate::watch::WatchRegistry;
use crate::{Instant, Request, Response};

/// What applying one entry needs besides the transaction, borrowed from
/// the node's fields.
pub(super) struct ApplyContext<'a> {
    pub(super) lessor: &'a mut Lessor,
    pub(super) watches: &'a mut WatchRegistry,
    pub(super) now: Instant,
    pub(super) cluster_id: u64,
    pub(super) identity: ResponseHeader,
    /// Leases revoked in the batch (parked keep-alives are answered).
    pub(super) revoked: &'a mut Vec<i64>,
}

/// Applies one proposal at `index`. The outer error is a storage failure
/// (fatal); the inner one is the client's answer.
pub(super) fn apply_proposal(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    index: u64,
    request: proposal::Request,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let request = match request {
        proposal::Request::Put(r) => Request::Put(r),
        proposal::Request::DeleteRange(r) => Request::DeleteRange(r),
        proposal::Request::Txn(r) => Request::Txn(r),
        proposal::Request::Compaction(r) => Request::Compact(r),
        proposal::Request::LeaseGrant(grant) => {
            let id = if grant.id == 0 {
                let lessor = &*cx.lessor;
                lease::choose_id(cx.cluster_id, index, |id| lessor.contains(id))
            } else {
                grant.id
            };
            let granted = cx.lessor.grant(txn, id, grant.ttl, cx.now)?;
            return Ok(granted.map(|ttl| {
                Response::LeaseGrant(LeaseGrantResponse {
                    header: Some(ResponseHeader {
                        revision: meta.revision,
                        ..cx.identity
                    }),
                    id,
                    ttl,
                    error: String::new(),
                })
            }));
        }
        proposal::Request::LeaseRevoke(revoke) => {
            return apply_revoke(txn, meta, revoke.id, cx);
        }
        proposal::Request::LeaseCheckpoint(request) => {
            for checkpoint in &request.checkpoints {
                cx.lessor.checkpoint(txn, checkpoint, cx.now)?;
            }
            return Ok(Err(Error::Stopped));
        }
        proposal::Request::MemberUpdate(_) | proposal::Request::MemberAttributes(_) => {
            // Recorded by the node with the membership, never here.
            return Ok(Err(Error::Stopped));
        }
    };
    apply_kv(txn, meta, &request, cx)
}

/// Applies a key-space write, then moves keys between leases and tells the
/// watchers.
fn apply_kv(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    request: &Request,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let mut changes = Vec::new();
    let result = mvcc::apply_recording(txn, meta, request, &*cx.lessor, &mut changes);
    if let Err(Error::Storage(e)) = result {
        return Err(e);
    }
    if !changes.is_empty() {
        cx.lessor.on_changes(&changes);
        cx.watches
            .on_revision(meta.revision, &changes, &*txn, cx.identity)?;
    }
    Ok(result)
}

/// A revoke: the lease goes, and its keys are deleted in one revision.
fn apply_revoke(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    id: i64,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let Some(keys) = cx.lessor.revoke(txn, id)? else {
        return Ok(Err(Error::LeaseNotFound));
    };
    cx.revoked.push(id);
    if !keys.is_empty() {
        let deletes = keys
            .into_iter()
            .map(|key| RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key,
                        ..Default::default()
                    },
                )),
            })
            .collect();
        let txn_request = Request::Txn(TxnRequest {
            compare: Vec::new(),
            success: deletes,
            failure: Vec::new(),
        });
        if let Err(e) = apply_kv(txn, meta, &txn_request, cx)? {
            return Err(StorageError::new(format!(
                "deleting the keys of lease {id:x}: {e}"
            )));
        }
    }
    Ok(Ok(Response::LeaseRevoke(LeaseRevokeResponse {
        header: Some(ResponseHeader {
            revision: meta.revision,
            ..cx.identity
        }),
    })))
}

/// Stamps the member's identity and term on an answer's header. mvcc sets
/// the revision each answer must report (its own write's, not the batch's).
pub(super) fn stamp(response: &mut Response, identity: &ResponseHeader) {
    let header = match response {
        Response::Put(r) => &mut r.header,
        Response::DeleteRange(r) => &mut r.header,
        Response::Txn(r) => &mut r.header,
        Response::Compact(r) => &mut r.header,
        Response::Range(r) => &mut r.header,
        Response::Status(r) => &mut r.header,
        Response::LeaseGrant(r) => &mut r.header,
        Response::LeaseRevoke(r) => &mut r.header,
        Response::LeaseKeepAlive(r) => &mut r.header,
        Response::LeaseTimeToLive(r) => &mut r.header,
        Response::LeaseLeases(r) => &mut r.header,
        Response::MemberAdd(r) => &mut r.header,
        Response::MemberRemove(r) => &mut r.header,
        Response::MemberUpdate(r) => &mut r.header,
        Response::MemberPromote(r) => &mut r.header,
        Response::MemberList(r) => &mut r.header,
        Response::MoveLeader(r) => &mut r.header,
    };
    let header = header.get_or_insert(ResponseHeader {
        revision: identity.revision,
        ..Default::default()
    });
    header.cluster_id = identity.cluster_id;
    header.member_id = identity.member_id;
    header.raft_term = identity.raft_term;
}
