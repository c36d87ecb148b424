//! Membership changes asked by clients: `member add|remove|promote`,
//! `move-leader`, and the conf-change entries they become once applied.
//!
//! Design. A request is checked as etcd checks it (the member exists or
//! not, a learner is caught up enough to be promoted, the change keeps a
//! quorum of started members — etcd's strict reconfiguration check) and
//! becomes one raft membership entry whose context carries the member's
//! record. Applying the entry changes the raft configuration and the
//! member list together ([`Members`]), in the apply step's transaction.

use bytes::Bytes;
use oxetcd_proto::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};
use oxetcd_proto::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberPromoteResponse, MemberRemoveResponse,
    MoveLeaderResponse, ResponseHeader,
};
use prost::Message as _;
use protobuf::Message as _;
use tracing::warn;

use super::membership::enough_started;
use super::{Node, Ticket, LEARNER_READY_PERCENT};
use crate::error::Error;
use crate::raft::Role;
use crate::storage::{KvMeta, KvStore, LogStore};
use crate::Response;

impl<L: LogStore, K: KvStore> Node<L, K> {
    pub(super) fn member_add(&mut self, ticket: Ticket, request: MemberAddRequest) {
        if let Err(e) = self.members.check_add(&request, self.config.max_learners) {
            return self.answer(ticket, Err(e));
        }
        // The new member learns its ID from the cluster when it joins.
        let urls: Vec<&str> = request.peer_ur_ls.iter().map(String::as_str).collect();
        let salt = self.raft.last_index() + 1;
        let id = crate::ids::added_member_id(&urls, &self.config.cluster_token, salt);
        if self.members.get(id).is_some() {
            return self.answer(ticket, Err(Error::MemberExists));
        }
        let record = Member {
            id,
            name: String::new(),
            peer_ur_ls: request.peer_ur_ls.clone(),
            client_ur_ls: Vec::new(),
            is_learner: request.is_learner,
        };
        let change = if request.is_learner {
            ConfChangeType::AddLearnerNode
        } else {
            ConfChangeType::AddNode
        };
        self.member_change(ticket, change, id, Bytes::from(record.encode_to_vec()));
    }

    /// Proposes a membership change after etcd's checks.
    pub(super) fn member_change(
        &mut self,
        ticket: Ticket,
        change: ConfChangeType,
        id: u64,
        context: Bytes,
    ) {
        let adding = change != ConfChangeType::RemoveNode && !context.is_empty();
        let checked = match change {
            ConfChangeType::RemoveNode => self.members.check_remove(id),
            ConfChangeType::AddNode if !adding => self.members.check_promote(id),
            _ => Ok(()),
        };
        if let Err(e) = checked.and_then(|()| self.check_quorum_safe(change, id, adding)) {
            return self.answer(ticket, Err(e));
        }
        let cc = ConfChange {
            id: self.next_proposal_id(),
            change_type: change,
            node_id: id,
            context,
            ..Default::default()
        };
        let data = crate::raft::encode_conf_change(&cc);
        self.propose(ticket, cc.id, EntryType::EntryConfChange, data);
    }

    /// etcd's strict reconfiguration checks (`--strict-reconfig-check`),
    /// which need the leader's view of who is running (a follower forwards
    /// and lets the leader decide).
    pub(super) fn check_quorum_safe(
        &self,
        change: ConfChangeType,
        id: u64,
        adding: bool,
    ) -> Result<(), Error> {
        if self.raft.role() != Role::Leader {
            return Ok(());
        }
        let conf = self.raft.conf_state();
        let started = |voter: &u64| {
            *voter == self.config.member_id
                || self.raft.progress(*voter).is_some_and(|p| {
                    p.last_heard().is_some_and(|t| {
                        self.now.saturating_since(t) < self.config.election_timeout
                    })
                })
        };
        let voters = conf.voters.len();
        let running = conf.voters.iter().filter(|v| started(v)).count();
        // `--strict-reconfig-check=false` lets quorum be risked (etcd's
        // rule); a learner must still be caught up to be promoted.
        let strict = self.config.strict_reconfig_check;
        let enough_started = |members, running| !strict || enough_started(members, running);
        match change {
            ConfChangeType::AddNode if adding => {
                // Adding a second member to a lone one is allowed (etcd's
                // exception for restoring a cluster).
                let lone = running == 1 && voters == 1;
                if !lone && !enough_started(voters + 1, running) {
                    return Err(Error::MemberNotEnoughStarted);
                }
            }
            ConfChangeType::AddNode => {
                let leader_match = self
                    .raft
                    .progress(self.config.member_id)
                    .map_or(0, |p| p.matched());
                let learner_match = self.raft.progress(id).map_or(0, |p| p.matched());
                if learner_match * 100 < leader_match * LEARNER_READY_PERCENT {
                    return Err(Error::LearnerNotReady);
                }
                // The learner counts as running once promoted.
                if !enough_started(voters + 1, running + 1) {
                    return Err(Error::MemberNotEnoughStarted);
                }
            }
            ConfChangeType::RemoveNode => {
                if conf.voters.contains(&id) {
                    let running_after = conf
                        .voters
                        .iter()
                        .filter(|v| **v != id && started(v))
                        .count();
                    if !enough_started(voters - 1, running_after) {
                        return Err(Error::MemberNotEnoughStarted);
                    }
                }
            }
            ConfChangeType::AddLearnerNode => {}
        }
        Ok(())
    }

    pub(super) fn move_leader(&mut self, ticket: Ticket, target: u64) {
        if self.raft.role() != Role::Leader {
            return self.answer(ticket, Err(Error::NotLeader));
        }
        if target == self.config.member_id {
            let response = MoveLeaderResponse {
                header: Some(self.header()),
            };
            return self.answer(ticket, Ok(Response::MoveLeader(response)));
        }
        match self.raft.transfer_leader(self.now, target) {
            Ok(()) => self.move_leaders.push((ticket, target)),
            Err(_) => self.answer(ticket, Err(Error::BadLeaderTransferee)),
        }
    }

    /// Records a committed membership change; returns its proposal ID and
    /// the answer for its proposer.
    pub(super) fn apply_conf_change(
        &mut self,
        entry: &Entry,
        meta: &KvMeta,
    ) -> (u64, Result<Response, Error>) {
        let cc = match ConfChange::parse_from_bytes(&entry.data) {
            Ok(cc) => cc,
            Err(e) => {
                // The raft skipped it too.
                warn!(index = entry.index, error = %e, "membership entry does not decode; skipped");
                return (0, Err(Error::Stopped));
            }
        };
        let changed = self
            .members
            .apply_conf_change(&cc, &self.config.initial_members);
        if cc.node_id == self.config.member_id && cc.change_type != ConfChangeType::RemoveNode {
            self.removed = false;
        }
        if cc.change_type == ConfChangeType::RemoveNode {
            self.versions.forget_member(cc.node_id);
        }
        if cc.change_type == ConfChangeType::RemoveNode && cc.node_id == self.config.member_id {
            warn!(
                member_id = %format_args!("{:x}", self.config.member_id),
                index = entry.index,
                "applied this member's removal from the cluster"
            );
            self.removed = true;
        }
        let header = Some(ResponseHeader {
            revision: meta.revision,
            ..self.header()
        });
        let members = self.members.list();
        let response = match cc.change_type {
            ConfChangeType::RemoveNode => {
                Response::MemberRemove(MemberRemoveResponse { header, members })
            }
            ConfChangeType::AddNode if cc.context.is_empty() => {
                Response::MemberPromote(MemberPromoteResponse { header, members })
            }
            _ => Response::MemberAdd(MemberAddResponse {
                header,
                member: changed,
                members,
            }),
        };
        (cc.id, Ok(response))
    }
}
