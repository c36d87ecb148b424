//! Transactions: compares, the branch taken at every level, the checks made
//! before anything is written, and execution as one revision.
//!
//! As etcd does, every compare (nested txns' included) is decided on the
//! state before the txn, so a nested txn's guard does not see the writes of
//! the ops before it; the ops themselves do see earlier writes.

use std::cmp::Ordering;
use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::response_op::Response as OpResponse;
use oxetcd_proto::etcdserverpb::{
    Compare, RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use oxetcd_proto::mvccpb::KeyValue;

use crate::error::Error;
use crate::storage::KvRead;

use super::apply::{apply_delete_range, apply_put, check_lease, header};
use super::buffer::WriteBuffer;
use super::range::{self, key_value, Snapshot};
use super::LeaseCheck;

/// Applies a txn into `buffer` (which must be fresh: the txn is the whole
/// request).
pub(super) fn apply_txn<R: KvRead + ?Sized>(
    buffer: &mut WriteBuffer<'_, R>,
    request: &TxnRequest,
    leases: &dyn LeaseCheck,
) -> Result<TxnResponse, Error> {
    let decision = decide(&*buffer, request)?;
    check_puts(&*buffer, request, &decision, leases)?;
    check_ranges(&*buffer, request, &decision)?;
    let mut response = execute(buffer, request, &decision)?;
    response.header = Some(header(buffer.current_revision()));
    Ok(response)
}

/// Which branch a txn takes, and the decisions of the txns nested in it, in
/// op order.
struct Decision {
    succeeded: bool,
    nested: Vec<Decision>,
}

impl Decision {
    fn branch<'r>(&self, request: &'r TxnRequest) -> &'r [RequestOp] {
        if self.succeeded {
            &request.success
        } else {
            &request.failure
        }
    }
}

fn decide(snapshot: &impl Snapshot, request: &TxnRequest) -> Result<Decision, Error> {
    let mut succeeded = true;
    for compare in &request.compare {
        if !holds(snapshot, compare)? {
            succeeded = false;
            break;
        }
    }
    let branch = if succeeded {
        &request.success
    } else {
        &request.failure
    };
    let nested = nested_txns(branch)
        .map(|txn| decide(snapshot, txn))
        .collect::<Result<_, _>>()?;
    Ok(Decision { succeeded, nested })
}

fn nested_txns(branch: &[RequestOp]) -> impl Iterator<Item = &TxnRequest> {
    branch.iter().filter_map(|op| match &op.request {
        Some(Op::RequestTxn(txn)) => Some(txn),
        _ => None,
    })
}

/// A compare holds when it holds for every live key in its span. With no key
/// in the span it is judged against an all-zero key, except that a VALUE
/// compare then always fails (a missing value is not an empty one).
fn holds(snapshot: &impl Snapshot, compare: &Compare) -> Result<bool, Error> {
    let mut any = false;
    let mut all_hold = true;
    range::visit_live(
        snapshot,
        &compare.key,
        &compare.range_end,
        if crate::canary::on(crate::canary::Canary::TxnCompareStale) {
            snapshot.current_revision() - 1
        } else {
            snapshot.current_revision()
        },
        &mut |version| {
            any = true;
            if compare_one(compare, &key_value(version)) {
                ControlFlow::Continue(())
            } else {
                all_hold = false;
                ControlFlow::Break(())
            }
        },
    )?;
    if !any {
        return Ok(compare.target != CompareTarget::Value as i32
            && compare_one(compare, &KeyValue::default()));
    }
    Ok(all_hold)
}

/// One compare against one key. A target union of another kind than the
/// target compares against zero (or the empty value); an unknown result
/// holds, an unknown target compares equal, as in etcd.
fn compare_one(compare: &Compare, kv: &KeyValue) -> bool {
    let union = compare.target_union.as_ref();
    let ordering = match CompareTarget::try_from(compare.target) {
        Ok(CompareTarget::Value) => {
            let wanted: &[u8] = match union {
                Some(TargetUnion::Value(value)) => value,
                _ => &[],
            };
            kv.value.as_slice().cmp(wanted)
        }
        Ok(CompareTarget::Create) => kv.create_revision.cmp(&match union {
            Some(TargetUnion::CreateRevision(r)) => *r,
            _ => 0,
        }),
        Ok(CompareTarget::Mod) => kv.mod_revision.cmp(&match union {
            Some(TargetUnion::ModRevision(r)) => *r,
            _ => 0,
        }),
        Ok(CompareTarget::Version) => kv.version.cmp(&match union {
            Some(TargetUnion::Version(v)) => *v,
            _ => 0,
        }),
        Ok(CompareTarget::Lease) => kv.lease.cmp(&match union {
            Some(TargetUnion::Lease(l)) => *l,
            _ => 0,
        }),
        Err(_) => Ordering::Equal,
    };
    match CompareResult::try_from(compare.result) {
        Ok(CompareResult::Equal) => ordering == Ordering::Equal,
        Ok(CompareResult::NotEqual) => ordering != Ordering::Equal,
        Ok(CompareResult::Greater) => ordering == Ordering::Greater,
        Ok(CompareResult::Less) => ordering == Ordering::Less,
        Err(_) => true,
    }
}

/// Before writing: every put on the taken path that uses `ignore_value` or
/// `ignore_lease` needs its key to exist, and every lease must exist.
fn check_puts(
    snapshot: &WriteBuffer<'_, impl KvRead + ?Sized>,
    request: &TxnRequest,
    decision: &Decision,
    leases: &dyn LeaseCheck,
) -> Result<(), Error> {
    let mut nested = decision.nested.iter();
    for op in decision.branch(request) {
        match &op.request {
            Some(Op::RequestTxn(txn)) => {
                let inner = nested.next().expect("a decision for every nested txn");
                check_puts(snapshot, txn, inner, leases)?;
            }
            Some(Op::RequestPut(put)) => {
                if (put.ignore_value || put.ignore_lease) && snapshot.live(&put.key)?.is_none() {
                    return Err(Error::KeyNotFound);
                }
                check_lease(put, leases)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Before writing: every range on the taken path must ask for a revision
/// that exists before the txn. A store never compacted says -1, so a
/// negative revision is compacted only once something was compacted, or
/// below -1, as etcd's is.
fn check_ranges(
    snapshot: &impl Snapshot,
    request: &TxnRequest,
    decision: &Decision,
) -> Result<(), Error> {
    let first = snapshot.compact_revision();
    let mut nested = decision.nested.iter();
    for op in decision.branch(request) {
        match &op.request {
            Some(Op::RequestTxn(txn)) => {
                let inner = nested.next().expect("a decision for every nested txn");
                check_ranges(snapshot, txn, inner)?;
            }
            Some(Op::RequestRange(range)) => {
                if range.revision == 0 {
                    continue;
                }
                if range.revision > snapshot.current_revision() {
                    return Err(Error::FutureRevision);
                }
                if range.revision < first {
                    return Err(Error::Compacted);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn execute<R: KvRead + ?Sized>(
    buffer: &mut WriteBuffer<'_, R>,
    request: &TxnRequest,
    decision: &Decision,
) -> Result<TxnResponse, Error> {
    let mut nested = decision.nested.iter();
    let mut responses = Vec::new();
    for op in decision.branch(request) {
        let response = match &op.request {
            None => None,
            Some(Op::RequestRange(range)) => {
                Some(OpResponse::ResponseRange(range::execute(&*buffer, range)?))
            }
            Some(Op::RequestPut(put)) => {
                Some(OpResponse::ResponsePut(apply_put(buffer, put.clone())?))
            }
            Some(Op::RequestDeleteRange(delete)) => Some(OpResponse::ResponseDeleteRange(
                apply_delete_range(buffer, delete)?,
            )),
            Some(Op::RequestTxn(txn)) => {
                let inner = nested.next().expect("a decision for every nested txn");
                let mut response = execute(buffer, txn, inner)?;
                // etcd leaves a nested txn's header empty.
                response.header = Some(ResponseHeader::default());
                Some(OpResponse::ResponseTxn(response))
            }
        };
        responses.push(ResponseOp { response });
    }
    Ok(TxnResponse {
        header: None,
        succeeded: decision.succeeded,
        responses,
    })
}
