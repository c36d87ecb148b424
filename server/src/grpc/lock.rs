//! The `v3lockpb.Lock` service: etcd's distributed lock, served with etcd
//! 3.4's semantics (`etcdserver/api/v3lock`, `concurrency.Mutex`).
//!
//! Design. A locker's key is `name/<lease in hex>` under the caller's
//! lease; the oldest key under `name/` holds the lock
//! ([`super::key_queue`]). One txn queues the key (or finds the lease's
//! key already queued) and reads the owner, so an uncontended `Lock` is a
//! single write. A waiter that fails, or whose client goes away, deletes
//! its key. `Unlock` deletes the key it is given. Every step is a KV call
//! made as the caller ([`Caller`]).

use oxetcd_core::storage::KvStore;
use oxetcd_proto::etcdserverpb::{request_op, response_op, PutRequest, RangeRequest, TxnRequest};
use oxetcd_proto::mvccpb::KeyValue;
use oxetcd_proto::v3lockpb::lock_server::Lock;
use oxetcd_proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use tonic::Status;

use super::caller::{recipe_error, Caller};
use super::credentials::Gate;
use super::key_queue::{created_at, op, owner_range, queue_key, wait_deletes, Abandon};
use crate::driver::Handle;

/// Serves `v3lockpb.Lock` through the node.
pub struct LockService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
}

impl<K: KvStore> LockService<K> {
    /// A service sending its requests to `handle`.
    pub fn new(handle: Handle<K>, gate: Gate) -> Self {
        Self { handle, gate }
    }
}

#[tonic::async_trait]
impl<K: KvStore> Lock for LockService<K> {
    async fn lock(
        &self,
        request: tonic::Request<LockRequest>,
    ) -> Result<tonic::Response<LockResponse>, Status> {
        let caller = Caller::new(self.handle.clone(), self.gate.credentials(&request));
        let LockRequest { name, lease } = request.into_inner();
        let lease = caller.session_lease(lease).await?;
        let mut prefix = name;
        prefix.push(b'/');
        let key = queue_key(&prefix, lease);
        let queued = caller
            .txn(TxnRequest {
                compare: vec![created_at(&key, 0)],
                success: vec![
                    op(request_op::Request::RequestPut(PutRequest {
                        key: key.clone(),
                        lease,
                        ..Default::default()
                    })),
                    op(request_op::Request::RequestRange(owner_range(&prefix))),
                ],
                failure: vec![
                    op(request_op::Request::RequestRange(RangeRequest {
                        key: key.clone(),
                        ..Default::default()
                    })),
                    op(request_op::Request::RequestRange(owner_range(&prefix))),
                ],
            })
            .await?;
        let mut my_rev = queued.header.as_ref().map_or(0, |h| h.revision);
        if !queued.succeeded {
            my_rev = range_kvs(&queued, 0)
                .first()
                .map(|kv| kv.create_revision)
                // Cannot happen: the compare failed because the key exists.
                .ok_or_else(|| recipe_error("lock: key vanished inside a txn"))?;
        }
        let owner = range_kvs(&queued, 1);
        if owner.first().is_none_or(|kv| kv.create_revision == my_rev) {
            return Ok(tonic::Response::new(LockResponse {
                header: queued.header,
                key,
            }));
        }
        let mut abandon = Abandon::new(&caller, key.clone(), None);
        match wait_deletes(&caller, &prefix, my_rev - 1).await {
            Ok(header) => {
                abandon.disarm();
                Ok(tonic::Response::new(LockResponse { header, key }))
            }
            Err(e) => {
                // etcd's mutex unlocks when its wait fails.
                abandon.disarm();
                let _ = caller.delete(key).await;
                Err(e)
            }
        }
    }

    async fn unlock(
        &self,
        request: tonic::Request<UnlockRequest>,
    ) -> Result<tonic::Response<UnlockResponse>, Status> {
        let caller = Caller::new(self.handle.clone(), self.gate.credentials(&request));
        let deleted = caller.delete(request.into_inner().key).await?;
        Ok(tonic::Response::new(UnlockResponse {
            header: deleted.header,
        }))
    }
}

/// The keys of the range at `index` of a txn's answer.
fn range_kvs(response: &oxetcd_proto::etcdserverpb::TxnResponse, index: usize) -> &[KeyValue] {
    match response
        .responses
        .get(index)
        .and_then(|r| r.response.as_ref())
    {
        Some(response_op::Response::ResponseRange(range)) => &range.kvs,
        _ => &[],
    }
}
