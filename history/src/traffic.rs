//! The client traffic the fault tests send: puts, linearizable and
//! serializable reads, compare-and-sets on a key's mod revision, and
//! deletes over a few keys `k0`, `k1`, …, each value unique, so that a
//! history says which write a read saw; and leases: grants, puts attached
//! to a lease, revokes, and the expiries a recorder adds for the leader.
//!
//! Design. Randomness stays with the caller (a seeded simulator, a
//! process test's own generator): [`request`] maps two numbers the caller
//! drew, which kind and which key, to a request. The node simulator and
//! the process tests send the same mix this way.

use oxetcd_proto::etcdserverpb::{
    compare, request_op, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest,
};

use crate::model::Request;

/// Draws of the kind number range over `0..KINDS`.
pub const KINDS: u64 = 12;

/// Key `k` of the traffic.
pub fn key(k: u64) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

/// The request of kind `kind` (`0..KINDS`, in twelfths: 3 puts, 2 reads,
/// 1 serializable read of every key, 3 compare-and-sets, 1 delete, and
/// Kubernetes' two other optimistic writes: 1 create if absent, 1 delete
/// if unchanged) on key `k`. `tag` makes the values unique;
/// `cas_revision` is the mod revision a compare-and-set or a guarded
/// delete expects the key to have.
pub fn request(kind: u64, k: u64, tag: &str, cas_revision: i64) -> Request {
    match kind % KINDS {
        0..=2 => Request::Put(PutRequest {
            key: key(k),
            value: tag.as_bytes().to_vec(),
            prev_kv: true,
            ..Default::default()
        }),
        3..=4 => Request::Range(RangeRequest {
            key: key(k),
            ..Default::default()
        }),
        5 => Request::Range(RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            serializable: true,
            ..Default::default()
        }),
        6..=8 => guarded(
            k,
            compare::CompareTarget::Mod,
            compare::TargetUnion::ModRevision(cas_revision),
            request_op::Request::RequestPut(PutRequest {
                key: key(k),
                value: format!("{tag}-cas").into_bytes(),
                ..Default::default()
            }),
        ),
        9 => Request::DeleteRange(DeleteRangeRequest {
            key: key(k),
            prev_kv: true,
            ..Default::default()
        }),
        // Kubernetes' create: only if the key does not exist.
        10 => guarded(
            k,
            compare::CompareTarget::Create,
            compare::TargetUnion::CreateRevision(0),
            request_op::Request::RequestPut(PutRequest {
                key: key(k),
                value: format!("{tag}-create").into_bytes(),
                ..Default::default()
            }),
        ),
        // Kubernetes' delete: only if the key is as last read.
        _ => guarded(
            k,
            compare::CompareTarget::Mod,
            compare::TargetUnion::ModRevision(cas_revision),
            request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: key(k),
                prev_kv: true,
                ..Default::default()
            }),
        ),
    }
}

/// A txn on key `k`: `then` if the key's `target` equals `value`, else a
/// read of the key (what Kubernetes does to learn the current object).
fn guarded(
    k: u64,
    target: compare::CompareTarget,
    value: compare::TargetUnion,
    then: request_op::Request,
) -> Request {
    Request::Txn(TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: target as i32,
            key: key(k),
            target_union: Some(value),
            ..Default::default()
        }],
        success: vec![RequestOp {
            request: Some(then),
        }],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: key(k),
                ..Default::default()
            })),
        }],
    })
}

/// A grant of lease `id` (the caller picks IDs, so that it can attach keys
/// to a lease before the grant is answered) for `ttl_secs`.
pub fn lease_grant(id: i64, ttl_secs: i64) -> Request {
    Request::LeaseGrant(LeaseGrantRequest { ttl: ttl_secs, id })
}

/// A put of key `k` attached to lease `lease`, with `prev_kv`; refused
/// while the lease does not exist.
pub fn lease_put(k: u64, tag: &str, lease: i64) -> Request {
    Request::Put(PutRequest {
        key: key(k),
        value: format!("{tag}-lease").into_bytes(),
        lease,
        prev_kv: true,
        ..Default::default()
    })
}

/// A revoke of lease `id`.
pub fn lease_revoke(id: i64) -> Request {
    Request::LeaseRevoke(LeaseRevokeRequest { id })
}

/// The expiry of lease `id`, as a history records it: a revoke the leader
/// proposed for itself, which nobody answered. A recorder adds one, with
/// an unknown outcome, for every lease whose TTL may have run out (invoked
/// when its grant was): the checker then lets it explain deletions of the
/// lease's keys, all at one revision, wherever they happened.
pub fn lease_expiry(id: i64) -> Request {
    lease_revoke(id)
}
