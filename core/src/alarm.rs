//! Alarms and the backend quota.
//!
//! Design. An alarm (`NOSPACE`, `CORRUPT`) is raised for one member and
//! travels through the log as an `AlarmRequest`, so every member applies
//! the same activations in the same order and stores them with the applied
//! index ([`crate::storage::KvWrite::set_alarms`]), as etcd keeps its
//! `alarm` bucket. [`AlarmSet`] is that list and what it means for
//! requests: while any `NOSPACE` alarm is active, writes that grow the data
//! (puts, transactions with puts, lease grants) fail with `etcdserver:
//! mvcc: database space exceeded`, as etcd's capped applier; while any
//! `CORRUPT` alarm is active, every write fails with `etcdserver: corrupt
//! cluster`. Reads, deletes, compaction, defragmentation and disarming keep
//! working under `NOSPACE`. [`Quota`] is etcd's admission estimate: a
//! request whose cost would take the bytes in use to the quota is refused,
//! and the member raises `NOSPACE` for itself.
//!
//! This module never touches storage; the node stores what it changes.

use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::{
    request_op, AlarmMember, AlarmRequest, AlarmResponse, AlarmType, TxnRequest,
};
use oxetcd_proto::oxetcdpb::proposal;

use crate::error::Error;

/// The quota when `--quota-backend-bytes` is 0: etcd's default, 2 GiB.
pub const QUOTA_BYTES_DEFAULT: u64 = 2 * 1024 * 1024 * 1024;

/// A quota above this is allowed but warned about: etcd's suggested
/// maximum, 8 GiB.
pub const QUOTA_BYTES_WARN: u64 = 8 * 1024 * 1024 * 1024;

/// What one put is estimated to add, besides its key and value (etcd's
/// `kvOverhead`).
const KV_OVERHEAD_BYTES: u64 = 256;

/// What one lease grant is estimated to add (etcd's `leaseOverhead`).
const LEASE_OVERHEAD_BYTES: u64 = 64;

/// The backend quota: writes that would take the bytes in use to it are
/// refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// The limit in bytes; `None`: no quota (`--quota-backend-bytes` < 0).
    pub limit_bytes: Option<u64>,
}

impl Default for Quota {
    fn default() -> Self {
        Self {
            limit_bytes: Some(QUOTA_BYTES_DEFAULT),
        }
    }
}

impl Quota {
    /// The quota `--quota-backend-bytes` asks for: negative disables it, 0
    /// means the default, as etcd reads the flag.
    pub fn from_flag(bytes: i64) -> Self {
        let limit_bytes = match u64::try_from(bytes) {
            Err(_) => None,
            Ok(0) => Some(QUOTA_BYTES_DEFAULT),
            Ok(bytes) => Some(bytes),
        };
        Self { limit_bytes }
    }

    /// Whether a write costing `cost` bytes fits beside `used` bytes
    /// (etcd's `Available`: strictly below the quota).
    pub fn admits(&self, used: u64, cost: u64) -> bool {
        match self.limit_bytes {
            Some(limit) if cost > 0 => used.saturating_add(cost) < limit,
            _ => true,
        }
    }
}

/// etcd's estimate of what a write adds to the backend; 0 for writes that
/// do not grow it (deletes, compaction, read-only transactions).
pub fn cost(request: &proposal::Request) -> u64 {
    match request {
        proposal::Request::Put(r) => put_cost(r.key.len(), r.value.len()),
        proposal::Request::Txn(r) => txn_cost(r),
        proposal::Request::LeaseGrant(_) => LEASE_OVERHEAD_BYTES,
        _ => 0,
    }
}

fn put_cost(key_len: usize, value_len: usize) -> u64 {
    KV_OVERHEAD_BYTES + key_len as u64 + value_len as u64
}

/// The larger branch's puts (nested transactions count as etcd counts
/// them: not at all).
fn txn_cost(txn: &TxnRequest) -> u64 {
    let branch = |ops: &[oxetcd_proto::etcdserverpb::RequestOp]| -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(request_op::Request::RequestPut(p)) => put_cost(p.key.len(), p.value.len()),
                _ => 0,
            })
            .sum()
    };
    branch(&txn.success).max(branch(&txn.failure))
}

/// Whether a transaction writes in either branch (nested ones included).
fn writes(txn: &TxnRequest) -> bool {
    txn.success
        .iter()
        .chain(&txn.failure)
        .any(|op| match &op.request {
            Some(
                request_op::Request::RequestPut(_) | request_op::Request::RequestDeleteRange(_),
            ) => true,
            Some(request_op::Request::RequestTxn(inner)) => writes(inner),
            _ => false,
        })
}

/// The active alarms, ordered by type, then member.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AlarmSet {
    alarms: Vec<AlarmMember>,
}

impl AlarmSet {
    /// The alarms the backend stored.
    pub fn recover(stored: Vec<AlarmMember>) -> Self {
        let mut set = Self { alarms: stored };
        set.alarms.sort_by_key(|a| (a.alarm, a.member_id));
        set.alarms.dedup();
        set
    }

    /// Every active alarm, as stored.
    pub fn list(&self) -> &[AlarmMember] {
        &self.alarms
    }

    /// Whether an alarm of `alarm`'s type is active for any member.
    pub fn has(&self, alarm: AlarmType) -> bool {
        self.alarms.iter().any(|a| a.alarm == alarm as i32)
    }

    /// Whether `alarm` is active for `member_id`.
    pub fn has_for(&self, member_id: u64, alarm: AlarmType) -> bool {
        self.alarms
            .iter()
            .any(|a| a.member_id == member_id && a.alarm == alarm as i32)
    }

    /// The refusal the active alarms give `request`, if any: every write
    /// under CORRUPT (etcd's corrupt applier), growing writes under NOSPACE
    /// (its capped applier). Alarm requests are never refused, so an
    /// alarm can always be cleared.
    pub fn refusal(&self, request: &proposal::Request) -> Option<Error> {
        use proposal::Request as R;
        let write = match request {
            R::Put(_) | R::DeleteRange(_) | R::Compaction(_) | R::LeaseGrant(_) => true,
            R::LeaseRevoke(_) => true,
            // etcd serves a read-only transaction without its applier.
            R::Txn(txn) => writes(txn),
            _ => false,
        };
        if write && self.has(AlarmType::Corrupt) {
            return Some(Error::Corrupt);
        }
        if cost(request) > 0 && self.has(AlarmType::Nospace) {
            return Some(Error::NoSpace);
        }
        None
    }

    /// Applies an alarm request, as etcd's apply does: GET lists the
    /// alarms of a type (NONE: all), ACTIVATE answers the alarm (active
    /// before or not), DEACTIVATE answers the alarm it cleared (nothing
    /// when it was not active). Returns the answer and whether the set
    /// changed.
    pub fn apply(&mut self, request: &AlarmRequest) -> (AlarmResponse, bool) {
        let member = AlarmMember {
            member_id: request.member_id,
            alarm: request.alarm,
        };
        let mut response = AlarmResponse::default();
        let mut changed = false;
        match AlarmAction::try_from(request.action) {
            Ok(AlarmAction::Get) => {
                response.alarms = self
                    .alarms
                    .iter()
                    .filter(|a| request.alarm == AlarmType::None as i32 || a.alarm == request.alarm)
                    .copied()
                    .collect();
            }
            Ok(AlarmAction::Activate) => {
                // etcd stores NONE alarms too, but they change nothing.
                if !self.alarms.contains(&member) {
                    self.alarms.push(member);
                    self.alarms.sort_by_key(|a| (a.alarm, a.member_id));
                    changed = true;
                }
                response.alarms.push(member);
            }
            Ok(AlarmAction::Deactivate) => {
                if let Some(at) = self.alarms.iter().position(|a| *a == member) {
                    self.alarms.remove(at);
                    response.alarms.push(member);
                    changed = true;
                }
            }
            Err(_) => {}
        }
        (response, changed)
    }
}

#[cfg(test)]
mod tests {
    use oxetcd_proto::etcdserverpb::{PutRequest, RequestOp};

    use super::*;

    fn request(action: AlarmAction, member_id: u64, alarm: AlarmType) -> AlarmRequest {
        AlarmRequest {
            action: action as i32,
            member_id,
            alarm: alarm as i32,
        }
    }

    #[test]
    fn activate_deactivate_and_get_answer_as_etcd() {
        let mut set = AlarmSet::default();
        let (r, changed) = set.apply(&request(AlarmAction::Activate, 2, AlarmType::Nospace));
        assert!(changed);
        assert_eq!(r.alarms.len(), 1);
        let (r, changed) = set.apply(&request(AlarmAction::Activate, 2, AlarmType::Nospace));
        assert!(
            !changed && r.alarms.len() == 1,
            "already active, answered again"
        );
        set.apply(&request(AlarmAction::Activate, 1, AlarmType::Corrupt));
        set.apply(&request(AlarmAction::Activate, 1, AlarmType::Nospace));
        let (all, _) = set.apply(&request(AlarmAction::Get, 0, AlarmType::None));
        let order: Vec<(i32, u64)> = all.alarms.iter().map(|a| (a.alarm, a.member_id)).collect();
        assert_eq!(order, vec![(1, 1), (1, 2), (2, 1)], "by type, then member");
        let (nospace, _) = set.apply(&request(AlarmAction::Get, 0, AlarmType::Nospace));
        assert_eq!(nospace.alarms.len(), 2);
        let (r, changed) = set.apply(&request(AlarmAction::Deactivate, 2, AlarmType::Nospace));
        assert!(changed && r.alarms.len() == 1);
        let (r, changed) = set.apply(&request(AlarmAction::Deactivate, 2, AlarmType::Nospace));
        assert!(!changed && r.alarms.is_empty());
        assert!(set.has_for(1, AlarmType::Nospace) && !set.has_for(2, AlarmType::Nospace));
    }

    #[test]
    fn nospace_refuses_growing_writes_and_corrupt_every_write() {
        let put = proposal::Request::Put(PutRequest {
            key: b"k".to_vec(),
            ..Default::default()
        });
        let delete = proposal::Request::DeleteRange(Default::default());
        let read_only_txn = proposal::Request::Txn(TxnRequest::default());
        let deleting_txn = proposal::Request::Txn(TxnRequest {
            failure: vec![RequestOp {
                request: Some(request_op::Request::RequestTxn(TxnRequest {
                    success: vec![RequestOp {
                        request: Some(request_op::Request::RequestDeleteRange(Default::default())),
                    }],
                    ..Default::default()
                })),
            }],
            ..Default::default()
        });
        let alarm = proposal::Request::Alarm(AlarmRequest::default());
        let mut set = AlarmSet::default();
        assert_eq!(set.refusal(&put), None);
        set.apply(&request(AlarmAction::Activate, 3, AlarmType::Nospace));
        assert_eq!(set.refusal(&put), Some(Error::NoSpace));
        assert_eq!(set.refusal(&delete), None);
        assert_eq!(set.refusal(&read_only_txn), None);
        set.apply(&request(AlarmAction::Activate, 3, AlarmType::Corrupt));
        assert_eq!(set.refusal(&delete), Some(Error::Corrupt));
        assert_eq!(set.refusal(&deleting_txn), Some(Error::Corrupt));
        assert_eq!(set.refusal(&read_only_txn), None, "served as a read");
        assert_eq!(set.refusal(&alarm), None, "alarms can always be cleared");
    }

    #[test]
    fn the_quota_reads_the_flag_and_costs_as_etcd() {
        assert_eq!(Quota::from_flag(0).limit_bytes, Some(QUOTA_BYTES_DEFAULT));
        assert_eq!(Quota::from_flag(-1).limit_bytes, None);
        assert!(Quota::from_flag(-1).admits(u64::MAX, 1));
        let quota = Quota::from_flag(1000);
        let put = |value: usize| PutRequest {
            key: b"ab".to_vec(),
            value: vec![0; value],
            ..Default::default()
        };
        assert_eq!(cost(&proposal::Request::Put(put(10))), 256 + 12);
        let txn = TxnRequest {
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(put(10))),
            }],
            failure: vec![
                RequestOp {
                    request: Some(request_op::Request::RequestPut(put(20))),
                },
                RequestOp::default(),
            ],
            ..Default::default()
        };
        assert_eq!(
            cost(&proposal::Request::Txn(txn)),
            256 + 22,
            "larger branch"
        );
        assert!(quota.admits(700, 299));
        assert!(!quota.admits(700, 300), "reaching the quota is refused");
        assert!(quota.admits(5000, 0), "what costs nothing always fits");
    }
}
