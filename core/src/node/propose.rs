//! Getting entries into the log: proposing on the leader, forwarding to
//! it from a follower (as etcd's raft forwards proposals), taking the
//! proposals followers forward, and the leader's own entries that no
//! client waits for.

use bytes::Bytes;
use oxetcd_proto::eraftpb::{ConfChange, EntryType, Message, MessageType};
use oxetcd_proto::oxetcdpb::{proposal, Proposal};
use prost::Message as _;
use protobuf::Message as _;
use tracing::debug;

use super::*;

impl<L: LogStore, K: KvStore> Node<L, K> {
    pub(super) fn next_proposal_id(&mut self) -> u64 {
        self.proposals.next_id()
    }

    /// Proposes an entry on the leader, or forwards it to the leader.
    pub(super) fn propose(
        &mut self,
        ticket: Ticket,
        proposal_id: u64,
        entry_type: EntryType,
        data: Bytes,
    ) {
        let Some(leader) = self.raft.leader() else {
            // Keep the encoded request: it goes out once a leader is known.
            return self.hold_entry(ticket, proposal_id, entry_type, data);
        };
        if leader == self.config.member_id {
            if self.too_many_unapplied(entry_type, &data) {
                return self.answer(ticket, Err(Error::TooManyRequests));
            }
            let proposed = match entry_type {
                EntryType::EntryConfChange => self.raft.propose_conf_change(data.clone()),
                _ => self.raft.propose(data.clone()),
            };
            match proposed {
                Ok(index) => {
                    let leadership = self.leadership();
                    self.proposals
                        .proposed(proposal_id, ticket, leadership, Some(index), data);
                }
                Err(ProposeError::TransferringLeadership | ProposeError::NotLeader { .. }) => {
                    self.hold_entry(ticket, proposal_id, entry_type, data)
                }
                Err(ProposeError::Busy | ProposeError::ConfChangePending) => {
                    self.answer(ticket, Err(Error::TooManyRequests))
                }
                Err(ProposeError::InvalidConfChange(why)) => {
                    debug!(why, "membership change refused by the raft");
                    self.answer(ticket, Err(Error::MemberNotFound))
                }
            }
            return;
        }
        let mut m = Message {
            msg_type: MessageType::MsgPropose,
            to: leader,
            from: self.config.member_id,
            term: self.raft.term(),
            ..Default::default()
        };
        m.entries = vec![Entry {
            entry_type,
            data: data.clone(),
            ..Default::default()
        }]
        .into();
        self.outputs.push_back(Output::Send(m));
        let leadership = self.leadership();
        self.proposals
            .proposed(proposal_id, ticket, leadership, None, data);
    }

    /// Whether the entry must wait for the applied index to catch up
    /// (etcd's `etcdserver: too many requests`): past the usual gap, only a
    /// client's lease revoke with `priority_request` on, up to its own gap.
    /// The entry is decoded only past the usual gap.
    fn too_many_unapplied(&self, entry_type: EntryType, data: &Bytes) -> bool {
        let unapplied = self.unapplied();
        if unapplied < UNAPPLIED_ENTRIES_MAX {
            return false;
        }
        let priority = self.config.priority_request
            && unapplied < UNAPPLIED_PRIORITY_MAX
            && entry_type == EntryType::EntryNormal
            && Proposal::decode(data.as_ref())
                .is_ok_and(|p| matches!(p.request, Some(proposal::Request::LeaseRevoke(_))));
        !priority
    }

    pub(super) fn unapplied(&self) -> u64 {
        self.raft
            .last_index()
            .saturating_sub(self.meta.applied_index)
    }

    /// A peer's message. Forwarded proposals are the node's business (the
    /// raft takes proposals only from its own member); everything else is
    /// the raft's.
    pub(super) fn handle_peer(&mut self, mut message: Message) {
        if message.msg_type != MessageType::MsgPropose {
            return self.raft.step(self.now, message);
        }
        if is_lease_forward(&message) {
            return self.handle_lease_forward(&message);
        }
        if message.to != self.config.member_id || self.raft.role() != Role::Leader {
            debug!(
                from = message.from,
                "not the leader; dropping a forwarded proposal"
            );
            return;
        }
        if self.members.get(message.from).is_none() {
            debug!(
                from = message.from,
                "forwarded proposal from a non-member; dropped"
            );
            return;
        }
        for entry in message.take_entries().into_vec() {
            if entry.data.len() > self.config.max_request_bytes
                || self.too_many_unapplied(entry.entry_type, &entry.data)
            {
                debug!(
                    from = message.from,
                    "forwarded proposal too large or too many; dropped"
                );
                continue;
            }
            // Peer input never reaches the apply step undecoded: an entry
            // that would not decode there is dropped here.
            let result = match entry.entry_type {
                EntryType::EntryNormal if Proposal::decode(entry.data.as_ref()).is_ok() => {
                    self.raft.propose(entry.data).map(|_| ())
                }
                EntryType::EntryConfChange => match ConfChange::parse_from_bytes(&entry.data) {
                    Ok(cc) => self
                        .check_quorum_safe(cc.change_type, cc.node_id, !cc.context.is_empty())
                        .map_err(|_| ProposeError::InvalidConfChange("not safe now"))
                        .and_then(|()| self.raft.propose_conf_change(entry.data).map(|_| ())),
                    Err(_) => Err(ProposeError::InvalidConfChange("does not decode")),
                },
                _ => Err(ProposeError::InvalidConfChange("not a proposal")),
            };
            if let Err(e) = result {
                debug!(from = message.from, error = %e, "forwarded proposal refused");
            }
        }
    }

    // ----- reads ----------------------------------------------------------

    /// Proposes, as leader, an entry no client waits for. Refusals are
    /// dropped: the lessor proposes again later.
    pub(super) fn propose_internal(&mut self, request: proposal::Request) {
        let proposal = Proposal {
            id: 0,
            request: Some(request),
            ..Proposal::default()
        };
        if let Err(e) = self.raft.propose(Bytes::from(proposal.encode_to_vec())) {
            debug!(error = %e, "internal proposal refused");
        }
    }
}
