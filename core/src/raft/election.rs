//! Elections: campaigns, votes cast and counted, and the role transitions
//! they cause.
//!
//! A voter that hears no leader for a randomized election timeout
//! campaigns — first with a pre-vote when configured, which asks whether
//! it could win without raising anyone's term — and becomes leader once a
//! majority of voters granted its vote. With check-quorum, a member in
//! contact with a leader ignores vote requests (its leader lease), unless
//! the leader itself asked for the campaign (`MsgTimeoutNow`, marked with
//! [`CAMPAIGN_TRANSFER_CONTEXT`]).
//!
//! A vote granted (a candidate's own included) counts only once it is
//! durable. Invariants, asserted in debug builds: the term never
//! decreases; a member casts at most one vote per term; a candidate and a
//! leader voted for themselves in their term.

use std::time::Duration;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{EntryType, Message, MessageType};
use tracing::{debug, info};

use super::persist::Deferred;
use super::{LogSource, Raft, Role, VoteResult};
use crate::storage::StorageError;
use crate::Instant;

/// Context of vote requests sent on a leader's request (`MsgTimeoutNow`):
/// voters grant them even while in contact with the old leader.
pub const CAMPAIGN_TRANSFER_CONTEXT: &[u8] = b"CampaignTransfer";

/// How a campaign starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CampaignKind {
    PreVote,
    Election,
    Transfer,
}

impl<S: LogSource> Raft<S> {
    /// Campaigns now, as if the election timer had fired (with a pre-vote
    /// if configured). Ignored on a leader or a non-voter.
    pub fn campaign(&mut self, now: Instant) {
        self.observe(now);
        if self.fatal.is_some() || self.role == Role::Leader {
            return;
        }
        let kind = if self.config.pre_vote {
            CampaignKind::PreVote
        } else {
            CampaignKind::Election
        };
        let result = self.start_campaign(kind);
        self.check(result);
    }

    /// Answers a vote or pre-vote request of the current term (the
    /// stepping made it current, or refused it). A pre-vote changes
    /// nothing here; a vote is recorded and answered once durable.
    pub(super) fn handle_vote_request(&mut self, m: &Message) {
        let pre = m.msg_type == MessageType::MsgRequestPreVote;
        let reply_type = if pre {
            MessageType::MsgRequestPreVoteResponse
        } else {
            MessageType::MsgRequestVoteResponse
        };
        let can_vote = self.vote == m.from
            || (self.vote == 0 && self.leader.is_none())
            || (pre && m.term > self.term);
        let up_to_date = m.log_term > self.log.last_term()
            || (m.log_term == self.log.last_term() && m.index >= self.log.last_index())
            || crate::canary::on(crate::canary::Canary::VoteWithoutLogCheck);
        let mut reply = self.message(m.from, reply_type);
        if can_vote && up_to_date {
            debug!(from = m.from, term = m.term, pre, "granting vote");
            reply.term = m.term;
            if pre {
                self.send(reply);
            } else {
                debug_assert_eq!(m.term, self.term, "a vote is cast in the current term only");
                if self.vote != m.from {
                    debug_assert_eq!(
                        self.vote, 0,
                        "member {:x} voted twice in term {}",
                        self.id, self.term
                    );
                    self.vote = m.from;
                    self.hard_state_dirty = true;
                }
                self.reset_election_timer(self.now);
                self.send_after_persist(reply);
            }
        } else {
            debug!(
                from = m.from,
                term = m.term,
                pre,
                can_vote,
                up_to_date,
                "rejecting vote"
            );
            reply.reject = true;
            self.send(reply);
        }
    }

    /// The next election deadline: the base timeout plus a jitter below it,
    /// drawn from the raft's own seeded RNG.
    pub(super) fn reset_election_timer(&mut self, now: Instant) {
        let base = self.config.election_timeout;
        self.election_deadline = now + base + self.jitter(base);
    }

    /// A random duration below `bound`, from the raft's own seeded RNG.
    pub(super) fn jitter(&mut self, bound: Duration) -> Duration {
        let bound = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.below(bound))
    }

    /// With check-quorum, a follower that heard its leader within an
    /// election timeout refuses to help depose it, and a leader (which
    /// steps down by itself once it loses its quorum) ignores challengers.
    pub(super) fn in_leader_lease(&self) -> bool {
        self.config.check_quorum
            && (self.role == Role::Leader
                || (self.leader.is_some()
                    && self.leader_contact.is_some_and(|t| {
                        self.now.saturating_since(t) < self.config.election_timeout
                    })))
    }

    /// Follows `leader` (if known) in `term`, which is the current term or
    /// a newer one; a newer term comes with no vote cast yet.
    pub(super) fn become_follower(&mut self, term: u64, leader: Option<u64>) {
        debug_assert!(
            term >= self.term,
            "term would go back from {} to {term}",
            self.term
        );
        debug_assert_ne!(leader, Some(self.id), "a follower follows another member");
        if term > self.term {
            self.term = term;
            self.vote = 0;
            self.hard_state_dirty = true;
        }
        if self.role == Role::Leader {
            let dropped = self.reads.clear();
            if dropped > 0 {
                debug!(dropped, "dropping reads: no longer leader");
            }
        }
        self.role = Role::Follower;
        self.leader = leader;
        if leader.is_some() {
            self.leader_contact = Some(self.now);
        }
        self.votes.clear();
        self.lead_transferee = None;
        self.transfer_deadline = None;
        self.heartbeat_deadline = None;
        self.broadcast_pending = false;
        self.commit_pending = false;
        self.reset_election_timer(self.now);
    }

    /// Campaigns as `kind` says: a pre-vote asks for the next term without
    /// raising this member's; an election (or a transfer's) raises the term
    /// and votes for itself, a vote that counts once durable.
    pub(super) fn start_campaign(&mut self, kind: CampaignKind) -> Result<(), StorageError> {
        if !self.is_voter() {
            debug!("not a voter; not campaigning");
            return Ok(());
        }
        if self.has_unapplied_conf_change()? {
            debug!("a committed membership change is not applied yet; not campaigning");
            return Ok(());
        }
        let now = self.now;
        self.votes.clear();
        self.leader = None;
        self.reset_election_timer(now);
        let (request, term) = if kind == CampaignKind::PreVote {
            self.role = Role::PreCandidate;
            self.votes.insert(self.id, true);
            (MessageType::MsgRequestPreVote, self.term + 1)
        } else {
            self.role = Role::Candidate;
            // A new term: no vote was cast in it yet, so this one is the only.
            self.term += 1;
            self.vote = self.id;
            self.hard_state_dirty = true;
            // Our own vote counts once it is durable.
            let term = self.term;
            self.defer(Deferred::SelfVote { term });
            (MessageType::MsgRequestVote, self.term)
        };
        info!(member_id = %format_args!("{:x}", self.id), term, ?kind, "campaigning");
        for id in self.tracker.voters().iter().collect::<Vec<_>>() {
            if id == self.id {
                continue;
            }
            let mut m = self.message(id, request);
            m.term = term;
            m.index = self.log.last_index();
            m.log_term = self.log.last_term();
            if kind == CampaignKind::Transfer {
                m.context = Bytes::from_static(CAMPAIGN_TRANSFER_CONTEXT);
            }
            self.send(m);
        }
        self.tally_votes();
        Ok(())
    }

    /// Records a voter's answer to this member's (pre-)campaign; the first
    /// answer of each voter counts.
    pub(super) fn record_vote(&mut self, from: u64, granted: bool) {
        if !self.tracker.is_voter(from) {
            debug!(from, "vote from a non-voter ignored");
            return;
        }
        self.votes.entry(from).or_insert(granted);
        self.tally_votes();
    }

    /// Moves on once the campaign is decided: a won pre-vote becomes an
    /// election, a won election makes a leader, a lost one a follower.
    pub(super) fn tally_votes(&mut self) {
        let result = self
            .tracker
            .voters()
            .vote_result(|id| self.votes.get(&id).copied());
        match (result, self.role) {
            (VoteResult::Won, Role::PreCandidate) => {
                let result = self.start_campaign(CampaignKind::Election);
                self.check(result);
            }
            (VoteResult::Won, Role::Candidate) => self.become_leader(),
            (VoteResult::Lost, Role::PreCandidate | Role::Candidate) => {
                debug!(term = self.term, "lost the election");
                self.become_follower(self.term, None);
            }
            _ => {}
        }
    }

    fn become_leader(&mut self) {
        assert_eq!(
            self.role,
            Role::Candidate,
            "only a candidate becomes leader"
        );
        // Its own vote may not be durable yet: a majority of the others then
        // elected it, and their votes are durable, so no other member can
        // win this term even if this one forgets its vote in a crash.
        debug_assert_eq!(self.vote, self.id, "a candidate voted for itself");

        let now = self.now;
        self.role = Role::Leader;
        self.leader = Some(self.id);
        self.votes.clear();
        let next = self.log.last_index() + 1;
        self.tracker
            .reset_all(next, now, self.id, self.log.stable());
        self.lead_transferee = None;
        self.transfer_deadline = None;
        self.reads.clear();
        self.term_committed = false;
        self.uncommitted_bytes = 0;
        self.heartbeat_deadline = Some(now + self.config.heartbeat_interval);
        info!(member_id = %format_args!("{:x}", self.id), term = self.term, "became leader");
        // The term's first entry: committing it commits everything before,
        // tells the leader its commit index (reads wait for it), and no
        // membership change may be proposed until it is applied.
        self.pending_conf_index = self.append_entry(EntryType::EntryNormal, Bytes::new());
        debug_assert_eq!(
            self.tracker.get(self.id).map(|p| p.matched()),
            Some(self.log.stable()),
            "a new leader's own match index is its durable index"
        );
    }
}
