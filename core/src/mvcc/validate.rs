//! Request validation at the edge, before a request is proposed or run:
//! the checks etcd's gRPC layer makes, with its errors and in its order.

use std::collections::HashSet;

use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};

use crate::error::Error;
use crate::Request;

use super::Limits;

/// Checks a request before it is proposed or executed: empty keys, sort
/// options, `ignore_value`/`ignore_lease` conflicts, txn size and duplicate
/// keys. Checks that need the store (missing keys, leases, revisions) happen
/// when the request runs.
pub fn validate(request: &Request, limits: &Limits) -> Result<(), Error> {
    match request {
        Request::Range(range) => check_range(range),
        Request::Put(put) => check_put(put),
        Request::DeleteRange(delete) => check_delete(delete),
        Request::Txn(txn) => {
            let ops_max = i64::try_from(limits.txn_ops_max).unwrap_or(i64::MAX);
            check_txn(txn, ops_max)?;
            // Only after the shape checks, so the overlap check's work is
            // bounded by the ops limit.
            check_overlaps(&txn.success)?;
            check_overlaps(&txn.failure)?;
            Ok(())
        }
        // Compactions, status and lease requests are checked when they run.
        _ => Ok(()),
    }
}

/// [`validate`]'s checks of a range.
pub fn validate_range(range: &RangeRequest) -> Result<(), Error> {
    check_range(range)
}

fn check_range(range: &RangeRequest) -> Result<(), Error> {
    if range.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if SortOrder::try_from(range.sort_order).is_err()
        || SortTarget::try_from(range.sort_target).is_err()
    {
        return Err(Error::InvalidSortOption);
    }
    Ok(())
}

fn check_put(put: &PutRequest) -> Result<(), Error> {
    if put.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if put.ignore_value && !put.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if put.ignore_lease && put.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    Ok(())
}

fn check_delete(delete: &DeleteRangeRequest) -> Result<(), Error> {
    if delete.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

/// The op count of a txn is its longest list (compares, success, failure).
/// A nested txn gets what its parent leaves: the limit minus the parent's
/// count, which may be negative and then refuses any nested txn at all.
fn check_txn(txn: &TxnRequest, ops_max: i64) -> Result<(), Error> {
    let count = txn
        .compare
        .len()
        .max(txn.success.len())
        .max(txn.failure.len());
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    if count > ops_max {
        return Err(Error::TooManyOps);
    }
    if txn.compare.iter().any(|compare| compare.key.is_empty()) {
        return Err(Error::EmptyKey);
    }
    for op in txn.success.iter().chain(&txn.failure) {
        check_op(op, ops_max - count)?;
    }
    Ok(())
}

fn check_op(op: &RequestOp, ops_max: i64) -> Result<(), Error> {
    match &op.request {
        Some(Op::RequestRange(range)) => check_range(range),
        Some(Op::RequestPut(put)) => check_put(put),
        Some(Op::RequestDeleteRange(delete)) => check_delete(delete),
        Some(Op::RequestTxn(txn)) => check_txn(txn, ops_max),
        // etcd answers an empty op with this error.
        None => Err(Error::KeyNotFound),
    }
}

/// A deleted span, as etcd's overlap check sees it.
#[derive(Clone, Copy)]
enum Deleted<'a> {
    /// One key (empty `range_end`).
    Key(&'a [u8]),
    /// `[start, end)`. etcd compares the end as a plain string here, so a
    /// "from key" delete (`range_end` = `"\0"`) covers no key at all and
    /// never conflicts with a put.
    Span(&'a [u8], &'a [u8]),
}

impl Deleted<'_> {
    fn covers(&self, key: &[u8]) -> bool {
        match *self {
            Deleted::Key(deleted) => deleted == key,
            Deleted::Span(start, end) => start <= key && key < end,
        }
    }
}

/// etcd's duplicate-key rule for one branch: within the branch (nested txns
/// included) no key may be put twice, and no put may fall in a span this
/// branch deletes. Exactly which pairs count follows etcd:
///
/// - the same key put in a nested txn's success and failure is fine (only
///   one runs);
/// - a put in a nested txn conflicts with this level's deletes and with
///   deletes of nested txns *before* it, not after it;
/// - this level's puts conflict with every put and delete below and here;
/// - two deletes never conflict.
fn check_overlaps(branch: &[RequestOp]) -> Result<(), Error> {
    check_branch(branch).map(|_| ())
}

type Writes<'a> = (HashSet<&'a [u8]>, Vec<Deleted<'a>>);

fn check_branch(branch: &[RequestOp]) -> Result<Writes<'_>, Error> {
    let mut deleted: Vec<Deleted<'_>> = branch
        .iter()
        .filter_map(|op| match &op.request {
            Some(Op::RequestDeleteRange(delete)) if delete.range_end.is_empty() => {
                Some(Deleted::Key(&delete.key))
            }
            Some(Op::RequestDeleteRange(delete)) => {
                Some(Deleted::Span(&delete.key, &delete.range_end))
            }
            _ => None,
        })
        .collect();
    let conflicts = |key: &[u8], deleted: &[Deleted<'_>]| deleted.iter().any(|d| d.covers(key));

    let mut put = HashSet::new();
    for op in branch {
        let Some(Op::RequestTxn(txn)) = &op.request else {
            continue;
        };
        let (put_then, deleted_then) = check_branch(&txn.success)?;
        let (put_else, deleted_else) = check_branch(&txn.failure)?;
        for &key in &put_then {
            if put.contains(key) || conflicts(key, &deleted) {
                return Err(Error::DuplicateKey);
            }
            put.insert(key);
        }
        for &key in &put_else {
            if (put.contains(key) && !put_then.contains(key)) || conflicts(key, &deleted) {
                return Err(Error::DuplicateKey);
            }
            put.insert(key);
        }
        deleted.extend(deleted_then);
        deleted.extend(deleted_else);
    }

    for op in branch {
        let Some(Op::RequestPut(request)) = &op.request else {
            continue;
        };
        let key = request.key.as_slice();
        if put.contains(key) || conflicts(key, &deleted) {
            return Err(Error::DuplicateKey);
        }
        put.insert(key);
    }
    Ok((put, deleted))
}
