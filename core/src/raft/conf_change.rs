//! Membership changes: single-step, through the log.
//!
//! A new cluster's members are its first log entries
//! ([`Raft::bootstrap`]), so a member added later learns them from the
//! log. Each change adds a voter (or promotes a learner), adds a learner,
//! or removes a member; it takes effect when it is handed out to apply,
//! and only one may be pending at a time. Joint consensus is not
//! implemented. A leader removed from the voters steps down, and keeps
//! telling the remaining voters the commit index for a while (its
//! farewell, see `farewell`); a follower whose leader was removed
//! campaigns within a heartbeat interval. A quorum change may commit what
//! was waiting for it.

use std::fmt;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType};
use protobuf::Message as _;
use tracing::{info, warn};

use super::progress::ProgressTracker;
use super::{log_error, LogSource, ProposeError, Raft, Role};
use crate::storage::StorageError;

/// Why [`Raft::bootstrap`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapError {
    /// The log or term is not empty: this member already has history.
    NotEmpty,
    /// At least one voter is needed, and IDs must not be 0.
    InvalidMembers,
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::NotEmpty => write!(f, "cannot bootstrap a member with history"),
            BootstrapError::InvalidMembers => {
                write!(f, "bootstrap needs at least one voter and non-zero IDs")
            }
        }
    }
}

impl std::error::Error for BootstrapError {}

impl<S: LogSource> Raft<S> {
    /// Makes a brand-new member of a new cluster: the initial membership
    /// becomes the first log entries (one `AddNode`/`AddLearnerNode` each,
    /// term 1, committed), identical on every initial member, so a member
    /// added later learns it from the log. `record` gives each member's
    /// context (its member record, as etcd's bootstrap entries carry it):
    /// whoever replays the log, even with other flags, learns who the
    /// members are and where. Call once, before anything else.
    pub fn bootstrap(
        &mut self,
        voters: &[u64],
        learners: &[u64],
        record: impl Fn(u64) -> Bytes,
    ) -> Result<(), BootstrapError> {
        if self.term != 0 || self.log.last_index() != 0 {
            return Err(BootstrapError::NotEmpty);
        }
        if voters.is_empty() || voters.iter().chain(learners).any(|&id| id == 0) {
            return Err(BootstrapError::InvalidMembers);
        }
        let mut voters = voters.to_vec();
        voters.sort_unstable();
        voters.dedup();
        let mut learners: Vec<u64> = learners
            .iter()
            .copied()
            .filter(|id| !voters.contains(id))
            .collect();
        learners.sort_unstable();
        learners.dedup();
        let changes = voters
            .iter()
            .map(|&id| (ConfChangeType::AddNode, id))
            .chain(
                learners
                    .iter()
                    .map(|&id| (ConfChangeType::AddLearnerNode, id)),
            );
        let mut entries = Vec::new();
        for (k, (change_type, node_id)) in changes.enumerate() {
            let cc = ConfChange {
                change_type,
                node_id,
                context: record(node_id),
                ..Default::default()
            };
            entries.push(Entry {
                entry_type: EntryType::EntryConfChange,
                term: 1,
                index: k as u64 + 1,
                data: encode_conf_change(&cc),
                ..Default::default()
            });
        }
        let last = self.log.append(entries);
        self.log.commit_to(last);
        self.term = 1;
        self.hard_state_dirty = true;
        // The membership is in effect at once (the entries apply it again,
        // harmlessly), so the member can campaign as soon as its timer fires.
        let conf = ConfState {
            voters,
            learners,
            ..Default::default()
        };
        self.tracker = ProgressTracker::new(&conf, last + 1, self.config.max_inflight_msgs);
        Ok(())
    }

    /// Proposes a single-step membership change: add a voter (`AddNode`,
    /// also promotes a learner), add a learner, or remove a member. One
    /// change at a time: refused until the previous one is applied, and
    /// until the leader's first entry of its term is applied. `data` is
    /// the encoded `ConfChange`, appended as it is.
    pub fn propose_conf_change(&mut self, data: Bytes) -> Result<u64, ProposeError> {
        let change = ConfChange::parse_from_bytes(&data)
            .map_err(|_| ProposeError::InvalidConfChange("does not decode"))?;
        self.check_can_propose()?;
        if self.pending_conf_index > self.log.applied() {
            return Err(ProposeError::ConfChangePending);
        }
        let id = change.node_id;
        if id == 0 {
            return Err(ProposeError::InvalidConfChange("member id 0"));
        }
        match change.change_type {
            ConfChangeType::AddNode if self.tracker.is_voter(id) => {
                return Err(ProposeError::InvalidConfChange("already a voter"))
            }
            ConfChangeType::AddLearnerNode if self.tracker.is_voter(id) => {
                return Err(ProposeError::InvalidConfChange(
                    "a voter cannot be demoted to learner",
                ))
            }
            ConfChangeType::AddLearnerNode if self.tracker.is_learner(id) => {
                return Err(ProposeError::InvalidConfChange("already a learner"))
            }
            ConfChangeType::RemoveNode
                if !self.tracker.is_voter(id) && !self.tracker.is_learner(id) =>
            {
                return Err(ProposeError::InvalidConfChange("not a member"))
            }
            ConfChangeType::RemoveNode
                if self.tracker.is_voter(id) && self.tracker.voters().len() == 1 =>
            {
                return Err(ProposeError::InvalidConfChange(
                    "cannot remove the last voter",
                ))
            }
            _ => {}
        }
        let index = self.append_entry(EntryType::EntryConfChange, data);
        self.pending_conf_index = index;
        Ok(index)
    }

    /// A membership change handed out to apply takes effect in the raft.
    pub(super) fn apply_conf_change(&mut self, entry: &Entry) {
        let cc = match ConfChange::parse_from_bytes(&entry.data) {
            Ok(cc) => cc,
            Err(e) => {
                warn!(index = entry.index, error = %e, "membership change does not decode; skipped");
                return;
            }
        };
        let id = cc.node_id;
        let next = self.log.last_index() + 1;
        let now = self.now;
        match cc.change_type {
            ConfChangeType::AddNode => {
                self.tracker.add_voter(id, next);
                if let Some(p) = self.tracker.get_mut(id) {
                    if p.last_heard().is_none() {
                        p.heard_at(now);
                    }
                }
            }
            ConfChangeType::AddLearnerNode => {
                if self.tracker.is_voter(id) {
                    warn!(
                        index = entry.index,
                        id, "membership change would demote a voter; skipped"
                    );
                    return;
                }
                self.tracker.add_learner(id, next);
                if let Some(p) = self.tracker.get_mut(id) {
                    p.heard_at(now);
                }
            }
            ConfChangeType::RemoveNode => self.tracker.remove(id),
        }
        info!(
            member_id = %format_args!("{:x}", self.id),
            index = entry.index,
            change = ?cc.change_type,
            node = %format_args!("{id:x}"),
            voters = ?self.tracker.voters().iter().collect::<Vec<_>>(),
            "applied membership change"
        );
        if self.role != Role::Leader {
            if cc.change_type == ConfChangeType::RemoveNode && self.leader == Some(id) {
                self.leader_removed();
            }
            return;
        }
        if !self.is_voter() {
            // A leader removed from the voters steps down; the others elect,
            // once they know the removal committed.
            self.begin_farewell();
            self.become_follower(self.term, None);
            return;
        }
        if self
            .lead_transferee
            .is_some_and(|t| !self.tracker.is_voter(t))
        {
            self.abort_transfer();
        }
        // The quorum changed: what counts as committed may have too.
        let result = self.maybe_commit();
        self.check(result.map(|_| ()));
        self.broadcast_pending = true;
    }

    /// This follower's leader was removed: it steps down (see above) and
    /// leads no more, so there is no lease to keep; the follower campaigns
    /// within a heartbeat interval, not a whole election timeout.
    fn leader_removed(&mut self) {
        self.leader = None;
        self.leader_contact = None;
        self.election_deadline = self.now + self.jitter(self.config.heartbeat_interval);
    }

    /// A committed membership change is not yet applied (a member does not
    /// campaign then: it may not know the voters it needs).
    pub(super) fn has_unapplied_conf_change(&self) -> Result<bool, StorageError> {
        let entries = self.log.unapplied(u64::MAX).map_err(log_error)?;
        Ok(entries
            .iter()
            .any(|e| e.entry_type != EntryType::EntryNormal))
    }
}

/// A membership change as a log entry carries it.
pub fn encode_conf_change(cc: &ConfChange) -> Bytes {
    Bytes::from(cc.write_to_bytes().expect("a ConfChange always encodes"))
}
