//! Serializable ranges answered without the driver thread.
//!
//! Design: the node decides when a serializable range may skip it
//! ([`DirectReads`]: auth off, no token). The driver publishes each
//! decision here as the node outputs it, before it carries out anything
//! queued after it, so a client told that auth is on sends no range that
//! skips its permission check. The [`Handle`](super::Handle) reads the
//! gate on the calling task and, when it is open, checks and counts the
//! range as the node would and reads it on a fresh snapshot right there:
//! two thread hand-offs fewer than through the node. The gate is shut
//! when the driver stops, so a stopped member answers nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use oxetcd_core::auth::Credentials;
use oxetcd_core::{DirectReads, Request};
use oxetcd_proto::etcdserverpb::{RangeRequest, ResponseHeader};

/// The node's latest [`DirectReads`], shared with every handle.
#[derive(Debug, Default)]
pub(crate) struct DirectGate {
    open: AtomicBool,
    cluster_id: AtomicU64,
    member_id: AtomicU64,
    raft_term: AtomicU64,
}

impl DirectGate {
    /// Publishes the node's decision (driver thread).
    pub(crate) fn publish(&self, reads: DirectReads) {
        // The header first: a reader that sees the gate open sees it.
        let header = reads.header;
        self.cluster_id.store(header.cluster_id, Ordering::Relaxed);
        self.member_id.store(header.member_id, Ordering::Relaxed);
        self.raft_term.store(header.raft_term, Ordering::Relaxed);
        self.open.store(reads.open, Ordering::SeqCst);
    }

    /// Shuts the gate for good: the driver stopped.
    pub(crate) fn shut(&self) {
        self.open.store(false, Ordering::SeqCst);
    }

    /// The range and its answer's header (revision to be filled in) when
    /// `request` may skip the node; otherwise `request` back.
    pub(crate) fn admit(
        &self,
        credentials: &Credentials,
        request: Request,
    ) -> Result<(RangeRequest, ResponseHeader), Request> {
        let may = matches!(&request, Request::Range(range) if range.serializable)
            && !matches!(credentials, Credentials::Token(_))
            && self.open.load(Ordering::SeqCst);
        match request {
            Request::Range(range) if may => Ok((
                range,
                ResponseHeader {
                    cluster_id: self.cluster_id.load(Ordering::Relaxed),
                    member_id: self.member_id.load(Ordering::Relaxed),
                    revision: 0,
                    raft_term: self.raft_term.load(Ordering::Relaxed),
                },
            )),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(serializable: bool) -> Request {
        Request::Range(RangeRequest {
            key: b"k".to_vec(),
            serializable,
            ..Default::default()
        })
    }

    fn open() -> DirectReads {
        DirectReads {
            open: true,
            header: ResponseHeader {
                cluster_id: 1,
                member_id: 2,
                revision: 0,
                raft_term: 3,
            },
        }
    }

    #[test]
    fn only_serializable_ranges_without_a_token_pass_an_open_gate() {
        let gate = DirectGate::default();
        let anonymous = Credentials::Anonymous;
        assert!(
            gate.admit(&anonymous, range(true)).is_err(),
            "shut at first"
        );
        gate.publish(open());
        let (_, header) = gate.admit(&anonymous, range(true)).expect("admitted");
        assert_eq!(
            (header.cluster_id, header.member_id, header.raft_term),
            (1, 2, 3)
        );
        assert!(
            gate.admit(&anonymous, range(false)).is_err(),
            "linearizable"
        );
        let token = Credentials::Token("t".into());
        assert!(
            gate.admit(&token, range(true)).is_err(),
            "a token is the node's to check"
        );
        let user = Credentials::User {
            name: "u".into(),
            revision: None,
        };
        assert!(gate.admit(&user, range(true)).is_ok());
        gate.publish(DirectReads {
            open: false,
            ..open()
        });
        assert!(
            gate.admit(&anonymous, range(true)).is_err(),
            "closed by the node"
        );
        gate.publish(open());
        gate.shut();
        assert!(gate.admit(&anonymous, range(true)).is_err(), "shut");
    }
}
