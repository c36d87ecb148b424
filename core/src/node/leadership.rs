//! Leadership as this member sees it: requests held while no leader is
//! known, what a change of leader or role means for the requests in
//! flight, a sole voter's immediate campaign, and the hand-over on stop.
//!
//! Design. The raft reports role and leader changes as actions; the node
//! reacts here. Requests that need a leader wait in [`Leaderless`] at most
//! an election timeout and go on once one is known. When the leader
//! changes, what this member can no longer follow fails with `etcdserver:
//! leader changed` ([`Proposals`], [`Reads`] and forwarded lease requests
//! decide which); the lessor is promoted or demoted with the role.

use bytes::Bytes;
use oxetcd_proto::eraftpb::EntryType;
use oxetcd_proto::etcdserverpb::MoveLeaderResponse;
use tracing::info;

use super::{Held, Leadership, Node, Ticket, LEADERLESS_REQUESTS_MAX};
use crate::error::Error;
use crate::raft::Role;
use crate::storage::{KvStore, LogStore};
use crate::{Instant, Response};

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Before a graceful stop: a leader hands leadership to the most
    /// caught-up voter (`MsgTimeoutNow`). Returns the member it hands to;
    /// the runtime then drains and waits (bounded) until
    /// [`Node::leader`] is no longer this member.
    pub fn transfer_leadership_for_shutdown(&mut self, now: Instant) -> Option<u64> {
        self.now = self.now.max(now);
        let to = self.raft.most_caught_up_voter()?;
        self.raft.transfer_leader(self.now, to).ok()?;
        Some(to)
    }

    /// An encoded proposal waits for a leader, as a request that proposes
    /// it again once one is known.
    pub(super) fn hold_entry(
        &mut self,
        ticket: Ticket,
        proposal_id: u64,
        entry_type: EntryType,
        data: Bytes,
    ) {
        let held = Held::Entry {
            proposal_id,
            entry_type,
            data,
        };
        self.hold_for_leader(ticket, held);
    }

    pub(super) fn hold_for_leader(&mut self, ticket: Ticket, held: Held) {
        // An election takes at most about one election timeout.
        let give_up = self.now + self.config.election_timeout;
        if !self
            .leaderless
            .hold(ticket, held, give_up, LEADERLESS_REQUESTS_MAX)
        {
            self.answer(ticket, Err(Error::NoLeader));
        }
    }

    /// A leader is known: the requests held for one go on.
    pub(super) fn release_leaderless(&mut self) {
        for (ticket, held) in self.leaderless.release() {
            if !self.requests.waits(ticket) {
                continue;
            }
            match held {
                Held::Request(request, who) => self.dispatch(ticket, request, who),
                Held::Entry {
                    proposal_id,
                    entry_type,
                    data,
                } => self.propose(ticket, proposal_id, entry_type, data),
                Held::Read(kind) => self.queue_read(ticket, kind),
            }
        }
    }

    pub(super) fn role_changed(&mut self, role: Role, term: u64, leader: Option<u64>) {
        info!(
            member_id = %format_args!("{:x}", self.config.member_id),
            ?role,
            term,
            leader = ?leader.map(|l| format!("{l:x}")),
            "raft role changed"
        );
        let was_leader = self.role == Role::Leader;
        if role == Role::Leader && !was_leader {
            self.lessor.promote(self.now);
        }
        if was_leader && role != Role::Leader {
            self.lessor.demote();
            for ticket in std::mem::take(&mut self.parked_renewals)
                .into_values()
                .flatten()
            {
                self.answer(ticket, Err(Error::LeaderChanged));
            }
        }
        if leader != self.leader {
            // etcd counts a change to a known leader, not the loss of one.
            self.counters.leader_changes_seen += u64::from(leader.is_some());
            self.leader_changed(leader);
        }
        self.role = role;
        self.leader = leader;
        if leader.is_some() {
            self.release_leaderless();
            self.redispatch_forwarded();
        }
    }

    /// Requests whose outcome this member can no longer learn fail: those
    /// that went to another leader, or to this one in an earlier term. (The
    /// raft reports changes lazily, so requests may already have gone to
    /// the leader being reported.)
    pub(super) fn leader_changed(&mut self, leader: Option<u64>) {
        let committed = self.raft.committed();
        let current = Leadership {
            leader: leader.unwrap_or(0),
            term: self.raft.term(),
        };
        let current = leader.map(|_| current);
        for ticket in self.proposals.leadership_changed(current, committed) {
            self.counters.proposals_failed += 1;
            self.answer(ticket, Err(Error::LeaderChanged));
        }
        for read in self.reads.leadership_changed(current) {
            self.counters.read_indexes_failed += 1;
            self.answer(read.ticket, Err(Error::LeaderChanged));
        }
        if let Some(leader) = leader {
            let (done, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut self.move_leaders)
                .into_iter()
                .partition(|(_, target)| *target == leader);
            for (ticket, _) in done {
                let response = MoveLeaderResponse {
                    header: Some(self.header()),
                };
                self.answer(ticket, Ok(Response::MoveLeader(response)));
            }
            for (ticket, _) in pending {
                self.answer(ticket, Err(Error::LeaderChanged));
            }
        }
    }

    /// A sole voter need not wait for an election timeout: nobody else
    /// could lead, and nobody is disrupted (a restarted single member
    /// serves again at once, as before consensus was general).
    pub(super) fn campaign_if_alone(&mut self) {
        if self.sole_voter
            && self.raft.role() == Role::Follower
            && self.raft.leader().is_none()
            && self.raft.applied() == self.raft.committed()
        {
            self.raft.campaign(self.now);
        }
    }

    pub(super) fn update_sole_voter(&mut self) {
        self.sole_voter = self.raft.conf_state().voters == [self.config.member_id];
    }
}
