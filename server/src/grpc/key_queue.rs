//! The queue under a prefix that elections and locks share: each
//! contender's key is `prefix/<lease in hex>`, and the key with the lowest
//! create revision owns the prefix (etcd's `clientv3/concurrency`).
//!
//! Design. A contender waits for its turn by watching only its immediate
//! predecessor — the newest key created before its own — until that key is
//! deleted, then looks again ([`wait_deletes`]); a release wakes one
//! waiter, never the whole queue. A call whose client goes away while it
//! waits must not leave its key queued: [`Abandon`] deletes it when the
//! call is dropped unfinished, as etcd's client does on a cancelled
//! context. It is armed only once the queuing txn has answered, as etcd's
//! client cleans up only after it: armed earlier, a second `Lock` of a
//! held lock (same lease, same key) whose client went away mid-txn would
//! delete the key the first still holds.

use oxetcd_core::storage::KvStore;
use oxetcd_core::Request;
use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::{
    compare, request_op, Compare, DeleteRangeRequest, RangeRequest, RequestOp, ResponseHeader,
    TxnRequest, WatchCreateRequest,
};
use oxetcd_proto::mvccpb::event::EventType;
use tonic::Status;

use super::caller::Caller;
use super::key_watch::KeyWatch;

/// The key a contender holding `lease` queues under `prefix` (which ends
/// in `/`): Go's `%x` of the lease ID, so a negative ID keeps its sign.
pub(crate) fn queue_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let hex = if lease < 0 {
        format!("-{:x}", lease.unsigned_abs())
    } else {
        format!("{lease:x}")
    };
    let mut key = prefix.to_vec();
    key.extend_from_slice(hex.as_bytes());
    key
}

pub(crate) use oxetcd_proto::prefix_end;

/// The range of the oldest key under `prefix`: its owner.
pub(crate) fn owner_range(prefix: &[u8]) -> RangeRequest {
    RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        ..Default::default()
    }
}

/// A compare that `key` was created at `revision` (0: does not exist).
pub(crate) fn created_at(key: &[u8], revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::CreateRevision(revision)),
    }
}

/// A txn operation.
pub(crate) fn op(request: request_op::Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// Waits until no key under `prefix` was created at or before
/// `max_create_revision`, watching the newest such key each round; the
/// header of the range that found none.
pub(crate) async fn wait_deletes<K: KvStore>(
    caller: &Caller<K>,
    prefix: &[u8],
    max_create_revision: i64,
) -> Result<Option<ResponseHeader>, Status> {
    loop {
        let newest = caller
            .range(RangeRequest {
                key: prefix.to_vec(),
                range_end: prefix_end(prefix),
                limit: 1,
                sort_order: SortOrder::Descend as i32,
                sort_target: SortTarget::Create as i32,
                max_create_revision,
                ..Default::default()
            })
            .await?;
        let Some(predecessor) = newest.kvs.first() else {
            return Ok(newest.header);
        };
        let from = newest.header.as_ref().map_or(0, |h| h.revision);
        wait_delete(caller, predecessor.key.clone(), from).await?;
    }
}

/// Waits for `key`'s deletion at or after revision `from`.
async fn wait_delete<K: KvStore>(
    caller: &Caller<K>,
    key: Vec<u8>,
    from: i64,
) -> Result<(), Status> {
    let mut watch = KeyWatch::open(
        caller,
        WatchCreateRequest {
            key,
            start_revision: from,
            ..Default::default()
        },
    )?;
    loop {
        let response = watch.next().await?;
        if response
            .events
            .iter()
            .any(|e| e.r#type == EventType::Delete as i32)
        {
            return Ok(());
        }
    }
}

/// Deletes a queued key when dropped armed: the clean-up of a call whose
/// client went away. Disarmed once the call answers.
pub(crate) struct Abandon<K: KvStore> {
    caller: Caller<K>,
    /// The key, and the create revision it must still have (so a key a
    /// later call of the same lease made is left alone); `None`: disarmed.
    armed: Option<(Vec<u8>, Option<i64>)>,
}

impl<K: KvStore> Abandon<K> {
    /// Armed to delete `key` if it still has `create_revision` (any
    /// revision when `None`, as etcd's `Mutex` deletes its key).
    pub(crate) fn new(caller: &Caller<K>, key: Vec<u8>, create_revision: Option<i64>) -> Self {
        Self {
            caller: caller.clone(),
            armed: Some((key, create_revision)),
        }
    }

    /// The call finished: leave the key alone.
    pub(crate) fn disarm(&mut self) {
        self.armed = None;
    }
}

impl<K: KvStore> Drop for Abandon<K> {
    fn drop(&mut self) {
        let Some((key, create_revision)) = self.armed.take() else {
            return;
        };
        let delete = DeleteRangeRequest {
            key: key.clone(),
            ..Default::default()
        };
        let request = match create_revision {
            None => Request::DeleteRange(delete),
            Some(revision) => Request::Txn(TxnRequest {
                compare: vec![created_at(&key, revision)],
                success: vec![op(request_op::Request::RequestDeleteRange(delete))],
                failure: Vec::new(),
            }),
        };
        self.caller.send_detached(request);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_gos_hex_of_the_lease() {
        assert_eq!(queue_key(b"e/", 0x694d7c1f0b3a2c05), b"e/694d7c1f0b3a2c05");
        assert_eq!(queue_key(b"e/", 10), b"e/a");
        assert_eq!(queue_key(b"e/", -1), b"e/-1");
        assert_eq!(queue_key(b"e/", i64::MIN), b"e/-8000000000000000");
    }

    #[test]
    fn prefix_ends_as_etcds_client() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
