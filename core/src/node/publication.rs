//! Publication: this member's name and client URLs reach the membership
//! through the log, as etcd's publish after start does.
//!
//! Design. [`Publication`] decides, and the node acts: once a leader is
//! known and this member's own record exists, [`Publication::poll`] says
//! to propose the attributes, then again every retry interval until the
//! applied membership shows them; from then on it says nothing more.
//! Lost proposals carry no client, so retrying is all that recovery
//! needs. Invariant: once published, always published (a member's record
//! only changes through its own later publish or a peer URL update, which
//! keeps the name and client URLs). The node's side — building the
//! proposal and sending it to the leader — is the `impl Node` below.

use std::time::Duration;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{Entry, EntryType, Message, MessageType};
use oxetcd_proto::oxetcdpb::{proposal, MemberAttributes, Proposal};
use prost::Message as _;
use tracing::{debug, info};

use super::{Node, Output};
use crate::storage::{KvStore, LogStore};
use crate::Instant;

/// What the node should do about its attributes now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing, for now.
    Wait,
    /// The membership shows them: log it, once.
    Published,
    /// Propose them (to the leader).
    Propose,
}

/// Where this member's publication stands.
#[derive(Debug, Default)]
pub(super) struct Publication {
    published: bool,
    /// When to propose again if the membership does not show them yet.
    retry_at: Option<Instant>,
}

/// What the node knows that publication depends on.
pub(super) struct Situation {
    pub(super) now: Instant,
    /// The applied membership shows this member's name and client URLs.
    pub(super) shown: bool,
    /// A leader is known and this member's own record exists.
    pub(super) can_propose: bool,
    /// How long to wait before proposing again.
    pub(super) retry: Duration,
}

impl Publication {
    /// True once the applied membership showed the attributes.
    pub(super) fn is_published(&self) -> bool {
        self.published
    }

    /// When [`Publication::poll`] next has something to do on its own.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.retry_at.filter(|_| !self.published)
    }

    /// This member was removed: it publishes nothing more, and keeps no
    /// retry due (a runtime waking for it would find nothing to do, and
    /// wake again at once). A member added back starts over.
    pub(super) fn stop_retrying(&mut self) {
        self.retry_at = None;
    }

    pub(super) fn poll(&mut self, situation: Situation) -> Step {
        if self.published {
            return Step::Wait;
        }
        if situation.shown {
            self.published = true;
            self.retry_at = None;
            return Step::Published;
        }
        if self.retry_at.is_some_and(|at| at > situation.now) {
            return Step::Wait;
        }
        // Without a leader or an own record nothing happens until an
        // input brings one; no timer is kept for it.
        self.retry_at = None;
        if !situation.can_propose {
            return Step::Wait;
        }
        self.retry_at = Some(situation.now + situation.retry);
        Step::Propose
    }
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Publishes this member's name and client URLs through the log until
    /// its record shows them ([`Publication`] decides when). A member
    /// forwards its publish to the leader only once its own record exists,
    /// so the leader knows the member that forwards it.
    pub(super) fn maybe_publish(&mut self) {
        // Checked first: this runs on every drain.
        if self.publication.is_published() {
            return;
        }
        if self.removed {
            return self.publication.stop_retrying();
        }
        let id = self.config.member_id;
        let leader = self.raft.leader();
        let situation = Situation {
            now: self.now,
            shown: self
                .members
                .shows(id, &self.config.name, &self.config.client_urls)
                && self.versions.member(id) == Some(self.config.server_version),
            can_propose: leader.is_some() && self.members.get(id).is_some(),
            retry: self.config.election_timeout,
        };
        match self.publication.poll(situation) {
            Step::Wait => {}
            Step::Published => info!(
                member_id = %format_args!("{id:x}"),
                name = %self.config.name,
                client_urls = ?self.config.client_urls,
                "member attributes applied"
            ),
            Step::Propose => {
                let proposal = Proposal {
                    user: String::new(),
                    auth_revision: 0,
                    id: 0,
                    request: Some(proposal::Request::MemberAttributes(MemberAttributes {
                        id,
                        name: self.config.name.clone(),
                        client_urls: self.config.client_urls.clone(),
                        server_version: self.config.server_version.to_string(),
                    })),
                };
                let data = Bytes::from(proposal.encode_to_vec());
                if leader == Some(id) {
                    if let Err(e) = self.raft.propose(data) {
                        debug!(error = %e, "publishing member attributes refused; retrying later");
                    }
                    return;
                }
                let mut m = Message {
                    msg_type: MessageType::MsgPropose,
                    to: leader.unwrap_or(0),
                    from: id,
                    term: self.raft.term(),
                    ..Default::default()
                };
                m.entries = vec![Entry {
                    entry_type: EntryType::EntryNormal,
                    data,
                    ..Default::default()
                }]
                .into();
                self.outputs.push_back(Output::Send(m));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn situation(ms: u64, shown: bool, can_propose: bool) -> Situation {
        Situation {
            now: at(ms),
            shown,
            can_propose,
            retry: Duration::from_millis(1_000),
        }
    }

    #[test]
    fn proposes_then_retries_until_shown_then_stays_published() {
        let mut p = Publication::default();
        assert_eq!(p.poll(situation(0, false, false)), Step::Wait);
        assert_eq!(p.poll_timeout(), None, "no timer without a leader");
        assert_eq!(p.poll(situation(10, false, true)), Step::Propose);
        assert_eq!(p.poll_timeout(), Some(at(1_010)));
        assert_eq!(p.poll(situation(500, false, true)), Step::Wait);
        assert_eq!(p.poll(situation(1_010, false, true)), Step::Propose);
        assert!(!p.is_published());
        assert_eq!(p.poll(situation(1_100, true, true)), Step::Published);
        assert!(p.is_published());
        assert_eq!(p.poll_timeout(), None);
        assert_eq!(p.poll(situation(5_000, false, true)), Step::Wait);
        assert!(p.is_published());
    }

    #[test]
    fn a_removed_member_keeps_no_retry_due_and_starts_over_if_added_back() {
        let mut p = Publication::default();
        assert_eq!(p.poll(situation(10, false, true)), Step::Propose);
        p.stop_retrying();
        assert_eq!(p.poll_timeout(), None);
        assert_eq!(p.poll(situation(20, false, true)), Step::Propose);
        assert_eq!(p.poll_timeout(), Some(at(1_020)));
    }

    #[test]
    fn shown_at_start_needs_no_proposal() {
        let mut p = Publication::default();
        assert_eq!(p.poll(situation(0, true, false)), Step::Published);
        assert_eq!(p.poll(situation(0, true, true)), Step::Wait);
    }
}
