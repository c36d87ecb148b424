//! The part of a history worth reading when it broke a rule.
//!
//! Design. A failing run can record hundreds of operations; the violation
//! names one operation and one revision. The excerpt keeps what can
//! explain it: the operation at fault, every answer whose header revision
//! lies within [`REVISIONS_AROUND`] of the violation's, and every write
//! without an answer that was in flight while the operation at fault was
//! (one of those may have made the revision in question). The rest is
//! left out; a seed replays the whole run.

use crate::check::{Operation, Outcome, Violation};
use crate::model::{Request, Response};

/// Answers kept on each side of the violation's revision.
pub const REVISIONS_AROUND: i64 = 2;

/// The header revision of an answer.
fn answered_revision(response: &Response) -> Option<i64> {
    let header = match response {
        Response::Range(r) => r.header.as_ref(),
        Response::Put(r) => r.header.as_ref(),
        Response::DeleteRange(r) => r.header.as_ref(),
        Response::Txn(r) => r.header.as_ref(),
        Response::Compaction(r) => r.header.as_ref(),
        Response::LeaseGrant(r) => r.header.as_ref(),
        Response::LeaseRevoke(r) => r.header.as_ref(),
    };
    header.map(|h| h.revision)
}

/// The indexes into `history` of the operations that can explain
/// `violation`, in history order (see the module note).
pub fn excerpt(history: &[Operation], violation: &Violation) -> Vec<usize> {
    let at_fault = violation
        .operation
        .and_then(|i| history.get(i).map(|op| (i, op)));
    let window = (violation.revision - REVISIONS_AROUND)..=(violation.revision + REVISIONS_AROUND);
    let overlaps = |op: &Operation| match at_fault {
        Some((_, fault)) => {
            op.invoke <= fault.complete.unwrap_or(u64::MAX)
                && fault.invoke <= op.complete.unwrap_or(u64::MAX)
        }
        None => true,
    };
    history
        .iter()
        .enumerate()
        .filter(|&(i, op)| {
            at_fault.is_some_and(|(fault, _)| fault == i)
                || match &op.outcome {
                    Outcome::Ok(response) => {
                        answered_revision(response).is_some_and(|r| window.contains(&r))
                    }
                    Outcome::Unknown => !matches!(op.request, Request::Range(_)) && overlaps(op),
                    Outcome::Failed => false,
                }
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::etcdserverpb::{PutRequest, PutResponse, RangeRequest, ResponseHeader};

    fn put(invoke: u64, complete: Option<u64>, revision: Option<i64>) -> Operation {
        Operation {
            client: 0,
            invoke,
            complete,
            request: Request::Put(PutRequest::default()),
            outcome: match revision {
                Some(revision) => Outcome::Ok(Response::Put(PutResponse {
                    header: Some(ResponseHeader {
                        revision,
                        ..Default::default()
                    }),
                    prev_kv: None,
                })),
                None => Outcome::Unknown,
            },
        }
    }

    #[test]
    fn keeps_the_fault_its_neighbouring_revisions_and_the_writes_in_flight() {
        let mut history: Vec<Operation> = (0..20)
            .map(|i| put(i * 10, Some(i * 10 + 5), Some(i as i64 + 2)))
            .collect();
        // An unknown write in flight with operation 10, one long before.
        history.push(put(101, None, None));
        history.push(put(1, None, None));
        // A read that failed changes nothing: left out.
        history.push(Operation {
            client: 0,
            invoke: 100,
            complete: None,
            request: Request::Range(RangeRequest::default()),
            outcome: Outcome::Failed,
        });
        let violation = Violation {
            operation: Some(10),
            revision: 12,
            what: String::new(),
            undecided: false,
        };
        // Revisions 10..=14 were answered by operations 8..=12; 20 was in
        // flight with 10; 21 began long before but never ended, so it too
        // may have been applied while 10 ran.
        assert_eq!(
            excerpt(&history, &violation),
            vec![8, 9, 10, 11, 12, 20, 21]
        );
    }
}
