//! Message stepping: where every peer message enters the raft.
//!
//! A message is first checked against this member's term — a higher term
//! makes it follow (a pre-vote excepted: it never changes terms), an older
//! one is answered only where that tells a stale leader it lost, or
//! dropped — then handed to the concept that handles it, by role: votes to
//! [`super::election`], appends and acknowledgements to
//! [`super::replication`] (leader) and [`super::follow`] (follower), reads
//! to [`super::read_index`], transfers to [`super::transfer`].
//!
//! Misaddressed, local-only and stale messages are dropped and logged at
//! debug: a peer's message never reaches an assertion.

use oxetcd_proto::eraftpb::{Message, MessageType};
use tracing::{debug, info};

use super::election::{CampaignKind, CAMPAIGN_TRANSFER_CONTEXT};
use super::{LogSource, Raft, Role};
use crate::storage::StorageError;
use crate::Instant;

impl<S: LogSource> Raft<S> {
    /// Handles a message from a peer.
    pub fn step(&mut self, now: Instant, message: Message) {
        self.observe(now);
        if self.fatal.is_some() {
            return;
        }
        if message.to != self.id || message.from == 0 || message.from == self.id {
            debug!(
                to = message.to,
                from = message.from,
                "dropping misaddressed message"
            );
            return;
        }
        if matches!(
            message.msg_type,
            MessageType::MsgHup
                | MessageType::MsgBeat
                | MessageType::MsgPropose
                | MessageType::MsgUnreachable
                | MessageType::MsgSnapStatus
                | MessageType::MsgCheckQuorum
        ) {
            debug!(msg_type = ?message.msg_type, from = message.from, "dropping local-only message from a peer");
            return;
        }
        let result = self.step_inner(message);
        self.check(result);
    }

    /// A well-addressed message: first its term, then its role's handler.
    fn step_inner(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        if m.term > self.term {
            if matches!(m.msg_type, MsgRequestVote | MsgRequestPreVote) {
                let forced = m.context.as_ref() == CAMPAIGN_TRANSFER_CONTEXT;
                if !forced && self.in_leader_lease() {
                    debug!(
                        from = m.from,
                        term = m.term,
                        "ignoring vote request: in contact with a leader"
                    );
                    return Ok(());
                }
            }
            match m.msg_type {
                // A pre-vote never changes terms; a granted pre-vote
                // carries the term the candidate will campaign in.
                MsgRequestPreVote => {}
                MsgRequestPreVoteResponse if !m.reject => {}
                MsgAppend | MsgHeartbeat | MsgSnapshot => {
                    self.become_follower(m.term, Some(m.from))
                }
                _ => self.become_follower(m.term, None),
            }
        } else if m.term < self.term {
            if (self.config.check_quorum || self.config.pre_vote)
                && matches!(m.msg_type, MsgHeartbeat | MsgAppend)
            {
                // A leader cut off in an older term hears the current term
                // and steps down (its followers ignore its messages, and with
                // pre-vote it would otherwise never learn it lost).
                let reply = self.message(m.from, MsgAppendResponse);
                self.send(reply);
            } else if m.msg_type == MsgRequestPreVote {
                let mut reply = self.message(m.from, MsgRequestPreVoteResponse);
                reply.reject = true;
                self.send(reply);
            } else {
                debug!(from = m.from, term = m.term, msg_type = ?m.msg_type, "dropping message of an older term");
            }
            return Ok(());
        }
        if matches!(m.msg_type, MsgRequestVote | MsgRequestPreVote) {
            self.handle_vote_request(&m);
            return Ok(());
        }
        match self.role {
            Role::Leader => self.step_leader(m),
            Role::Candidate | Role::PreCandidate => self.step_candidate(m),
            Role::Follower => self.step_follower(m),
        }
    }

    /// What a leader takes from the members of its term.
    fn step_leader(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        match m.msg_type {
            MsgAppendResponse => self.handle_append_response(&m),
            MsgHeartbeatResponse => self.handle_heartbeat_response(&m),
            MsgTransferLeader => {
                if let Err(e) = self.transfer_leader(self.now, m.from) {
                    debug!(from = m.from, error = %e, "refusing transfer request");
                }
                Ok(())
            }
            MsgReadIndex => {
                self.handle_read_index(m);
                Ok(())
            }
            _ => {
                debug!(from = m.from, msg_type = ?m.msg_type, "leader ignoring message");
                Ok(())
            }
        }
    }

    /// What a (pre-)candidate takes: answers to its campaign, or word that
    /// someone else won the term.
    fn step_candidate(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        match m.msg_type {
            MsgAppend | MsgHeartbeat | MsgSnapshot => {
                // Someone won this term.
                self.become_follower(m.term, Some(m.from));
                self.step_follower(m)
            }
            MsgRequestPreVoteResponse if self.role == Role::PreCandidate => {
                // Grants carry the term we would campaign in; rejections
                // of our term count too (higher ones made us follow).
                let ours = if m.reject {
                    m.term == self.term
                } else {
                    m.term == self.term + 1
                };
                if ours {
                    self.record_vote(m.from, !m.reject);
                }
                Ok(())
            }
            MsgRequestVoteResponse if self.role == Role::Candidate => {
                self.record_vote(m.from, !m.reject);
                Ok(())
            }
            _ => {
                debug!(from = m.from, msg_type = ?m.msg_type, "candidate ignoring message");
                Ok(())
            }
        }
    }

    /// What a follower takes from its leader.
    fn step_follower(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        match m.msg_type {
            MsgAppend | MsgHeartbeat | MsgSnapshot => {
                if self.leader != Some(m.from) {
                    self.leader = Some(m.from);
                }
                self.leader_contact = Some(self.now);
                self.reset_election_timer(self.now);
                match m.msg_type {
                    MsgAppend => self.handle_append(m),
                    MsgHeartbeat => {
                        self.handle_heartbeat(m);
                        Ok(())
                    }
                    _ => self.handle_snapshot(m),
                }
            }
            MsgTimeoutNow => {
                if self.is_voter() {
                    info!(member_id = %format_args!("{:x}", self.id), from = m.from, term = self.term, "campaigning at the leader's request");
                    self.start_campaign(CampaignKind::Transfer)
                } else {
                    debug!(from = m.from, "not a voter; ignoring timeout-now");
                    Ok(())
                }
            }
            MsgReadIndexResp => {
                self.handle_read_index_response(m);
                Ok(())
            }
            MsgHeartbeatResponse if self.saying_farewell() => {
                self.farewell_heard(&m);
                Ok(())
            }
            _ => {
                debug!(from = m.from, msg_type = ?m.msg_type, "follower ignoring message");
                Ok(())
            }
        }
    }
}
