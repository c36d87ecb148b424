//! The scenarios: etcd's KV behaviour, written once, asserted exactly.
//!
//! Every scenario starts on a fresh single-member store (revision 1), so it
//! may name absolute revisions. Answers are compared through a compact text
//! rendering (see [`render`]) that shows every deterministic field and
//! leaves out cluster ID, member ID and raft term:
//!
//! ```text
//! rev 5 count 3 more [a=1 c2 m2 v1, b=x c4 m4 v1 l7]    range
//! rev 3 prev a=1 c2 m2 v1                              put with prev_kv
//! rev 4 deleted 2 prev [..]                             delete range
//! rev 3 succeeded {put(rev 3); range(rev 3 count 0 [])} txn
//! error 11 etcdserver: mvcc: required revision has been compacted
//! ```
//!
//! where `c`, `m`, `v` and `l` are create revision, mod revision, version and
//! lease (shown when non-zero).

mod alarm;
mod auth;
mod auth_checks;
mod compaction;
mod election;
mod hash;
mod health;
mod kv;
mod lease;
mod limits;
mod range;
pub mod render;
mod status;
mod txn;
mod version;
mod watch;

use std::panic::Location;

use oxetcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::{
    request_op, CompactionRequest, Compare, DeleteRangeRequest, PutRequest, RangeRequest,
    RequestOp, TxnRequest,
};

use crate::target::{Failure, Target};
use render::Render;

/// One named scenario.
pub struct Scenario {
    /// Unique name, used in reports and by the `SCENARIO` filter.
    pub name: &'static str,
    /// The body: `Err` says what differed from etcd.
    pub run: fn(&mut Target) -> Result<(), String>,
}

/// Shorthand for declaring scenarios.
macro_rules! scenarios {
    ($($module:ident :: $name:ident),* $(,)?) => {
        &[$(Scenario { name: stringify!($name), run: $module::$name }),*]
    };
}

/// Every scenario, in report order.
pub const ALL: &[Scenario] = scenarios![
    kv::revisions_across_put_delete_reput,
    kv::delete_missing_key_keeps_revision,
    kv::delete_range_prev_kv_and_counts,
    kv::put_prev_kv,
    kv::put_ignore_value,
    kv::put_ignore_lease,
    kv::put_unknown_lease,
    kv::history_across_generations,
    range::range_end_prefix_and_from_key,
    range::binary_keys_order_bytewise,
    range::limit_more_and_count,
    range::historical_revisions,
    range::sort_orders_and_targets,
    range::keys_only_and_count_only,
    range::mod_and_create_revision_filters,
    range::many_keys_in_order,
    range::negative_and_huge_limits,
    txn::compare_every_target_and_result,
    txn::compare_over_a_range,
    txn::branches_and_revisions,
    txn::reads_see_earlier_writes,
    txn::nested_txns,
    txn::duplicate_keys,
    txn::too_many_ops,
    txn::ops_inside_honour_their_options,
    txn::ops_inside_are_validated,
    compaction::compacted_and_future_revisions,
    compaction::compaction_keeps_latest_versions,
    compaction::compaction_edge_revisions,
    limits::empty_key_errors,
    limits::oversized_requests_then_still_serves,
    status::status_reports_revision_and_leader,
    version::version_reporting,
    version::downgrade_rules,
    watch::watch_live_events_with_prev_kv,
    watch::watch_history_and_compaction,
    watch::watch_filters_ranges_ids_and_cancel,
    watch::watch_progress_and_streams,
    watch::watch_fragments_large_revisions,
    watch::watch_periodic_progress_notify,
    lease::lease_grant_rules,
    lease::lease_attach_and_revoke,
    lease::lease_expiry_and_keep_alive,
    alarm::alarm_activate_get_deactivate,
    alarm::alarm_corrupt_refuses_writes,
    alarm::alarm_quota_fill_then_recover,
    hash::hash_follows_the_data,
    health::health_follows_alarms,
    election::election_campaign_proclaim_resign,
    election::election_leader_is_the_oldest_key,
    election::election_errors,
    election::lock_and_unlock,
    auth::auth_enable_needs_root,
    auth::auth_users_and_roles,
    auth::auth_role_permissions,
    auth::auth_user_without_password,
    auth_checks::auth_key_permissions,
    auth_checks::auth_txn_permissions,
    auth_checks::auth_leases_tokens_and_disable,
];

/// Compares the rendering of `actual` with `expected`, naming the caller's
/// line on mismatch.
#[track_caller]
pub(crate) fn expect<T: Render>(actual: &Result<T, Failure>, expected: &str) -> Result<(), String> {
    let actual = actual.render();
    if actual == expected {
        Ok(())
    } else {
        let at = Location::caller();
        Err(format!(
            "{}:{}\n  expected: {expected}\n  actual:   {actual}",
            at.file(),
            at.line()
        ))
    }
}

/// Fails with `message` and the caller's line unless `condition` holds.
#[track_caller]
pub(crate) fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        let at = Location::caller();
        Err(format!("{}:{}: {}", at.file(), at.line(), message()))
    }
}

/// Unwraps an answer that must succeed, naming the caller's line otherwise.
#[track_caller]
pub(crate) fn ok<T>(answer: Result<T, Failure>) -> Result<T, String> {
    let at = Location::caller();
    answer.map_err(|e| format!("{}:{}: unexpected error {e}", at.file(), at.line()))
}

// ---------------------------------------------------------------- requests

pub(crate) use oxetcd_proto::prefix_end;

/// A range of the single key `key`.
pub(crate) fn get(key: impl AsRef<[u8]>) -> RangeRequest {
    RangeRequest {
        key: key.as_ref().to_vec(),
        ..Default::default()
    }
}

/// A range of `[key, end)`.
pub(crate) fn range(key: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> RangeRequest {
    RangeRequest {
        key: key.as_ref().to_vec(),
        range_end: end.as_ref().to_vec(),
        ..Default::default()
    }
}

/// A range of every key starting with `prefix`.
pub(crate) fn prefix(prefix: impl AsRef<[u8]>) -> RangeRequest {
    range(prefix.as_ref(), prefix_end(prefix.as_ref()))
}

/// A range of every key.
pub(crate) fn everything() -> RangeRequest {
    range(b"\0", b"\0")
}

/// `range` sorted.
pub(crate) fn sorted(request: RangeRequest, target: SortTarget, order: SortOrder) -> RangeRequest {
    RangeRequest {
        sort_target: target as i32,
        sort_order: order as i32,
        ..request
    }
}

/// A plain put.
pub(crate) fn put(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> PutRequest {
    PutRequest {
        key: key.as_ref().to_vec(),
        value: value.as_ref().to_vec(),
        ..Default::default()
    }
}

/// A delete of the single key `key`.
pub(crate) fn del(key: impl AsRef<[u8]>) -> DeleteRangeRequest {
    DeleteRangeRequest {
        key: key.as_ref().to_vec(),
        ..Default::default()
    }
}

/// A delete of `[key, end)`.
pub(crate) fn del_range(key: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> DeleteRangeRequest {
    DeleteRangeRequest {
        key: key.as_ref().to_vec(),
        range_end: end.as_ref().to_vec(),
        ..Default::default()
    }
}

/// A compaction of history before `revision`.
pub(crate) fn compact(revision: i64) -> CompactionRequest {
    CompactionRequest {
        revision,
        physical: false,
    }
}

/// A txn from its three parts.
pub(crate) fn txn(
    compare: Vec<Compare>,
    success: Vec<RequestOp>,
    failure: Vec<RequestOp>,
) -> TxnRequest {
    TxnRequest {
        compare,
        success,
        failure,
    }
}

/// A compare of `target` of `key` against `value`.
pub(crate) fn cmp(
    key: impl AsRef<[u8]>,
    target: CompareTarget,
    result: CompareResult,
    value: TargetUnion,
) -> Compare {
    Compare {
        result: result as i32,
        target: target as i32,
        key: key.as_ref().to_vec(),
        range_end: Vec::new(),
        target_union: Some(value),
    }
}

/// Compare builders, one per target.
pub(crate) fn cmp_version(key: impl AsRef<[u8]>, result: CompareResult, version: i64) -> Compare {
    cmp(
        key,
        CompareTarget::Version,
        result,
        TargetUnion::Version(version),
    )
}

pub(crate) fn cmp_create(key: impl AsRef<[u8]>, result: CompareResult, revision: i64) -> Compare {
    cmp(
        key,
        CompareTarget::Create,
        result,
        TargetUnion::CreateRevision(revision),
    )
}

pub(crate) fn cmp_mod(key: impl AsRef<[u8]>, result: CompareResult, revision: i64) -> Compare {
    cmp(
        key,
        CompareTarget::Mod,
        result,
        TargetUnion::ModRevision(revision),
    )
}

pub(crate) fn cmp_value(
    key: impl AsRef<[u8]>,
    result: CompareResult,
    value: impl AsRef<[u8]>,
) -> Compare {
    cmp(
        key,
        CompareTarget::Value,
        result,
        TargetUnion::Value(value.as_ref().to_vec()),
    )
}

pub(crate) fn cmp_lease(key: impl AsRef<[u8]>, result: CompareResult, lease: i64) -> Compare {
    cmp(key, CompareTarget::Lease, result, TargetUnion::Lease(lease))
}

/// `compare` over `[compare.key, end)` instead of one key.
pub(crate) fn over(compare: Compare, end: impl AsRef<[u8]>) -> Compare {
    Compare {
        range_end: end.as_ref().to_vec(),
        ..compare
    }
}

/// Txn operations.
pub(crate) fn op_range(request: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(request)),
    }
}

pub(crate) fn op_put(request: PutRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(request)),
    }
}

pub(crate) fn op_del(request: DeleteRangeRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestDeleteRange(request)),
    }
}

pub(crate) fn op_txn(request: TxnRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestTxn(request)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_matches_etcd() {
        assert_eq!(prefix_end(b"a"), b"b");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    #[test]
    fn scenario_names_are_unique() {
        let mut names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn rendering_escapes_separators_and_binary() {
        assert_eq!(
            render::bytes(b"a=b, c\\\x00\xff"),
            "a\\x3db\\x2c\\x20c\\x5c\\x00\\xff"
        );
    }
}
