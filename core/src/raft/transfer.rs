//! Leader transfer: handing leadership to a chosen voter.
//!
//! The leader first brings the transferee's log up to date, then sends it
//! `MsgTimeoutNow`, on which it campaigns at once (its vote requests
//! override the voters' leader lease). Proposals are refused meanwhile; a
//! transfer that has not completed within an election timeout is
//! abandoned, as is one whose transferee stops being a voter.

use std::fmt;

use oxetcd_proto::eraftpb::MessageType;
use tracing::info;

use super::{LogSource, Raft, Role};
use crate::Instant;

/// Why a leadership transfer could not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferLeaderError {
    /// Only the leader transfers leadership.
    NotLeader,
    /// The target is not a voter (a learner cannot lead).
    NotVoter(u64),
}

impl fmt::Display for TransferLeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferLeaderError::NotLeader => write!(f, "not leader"),
            TransferLeaderError::NotVoter(id) => write!(f, "member {id:x} is not a voter"),
        }
    }
}

impl std::error::Error for TransferLeaderError {}

impl<S: LogSource> Raft<S> {
    /// Hands leadership to voter `to` once its log is caught up (it is sent
    /// `MsgTimeoutNow` and campaigns at once). Proposals are refused
    /// meanwhile; the transfer is abandoned after an election timeout.
    pub fn transfer_leader(&mut self, now: Instant, to: u64) -> Result<(), TransferLeaderError> {
        self.observe(now);
        if self.role != Role::Leader {
            return Err(TransferLeaderError::NotLeader);
        }
        if to == self.id {
            return Ok(());
        }
        if !self.tracker.is_voter(to) {
            return Err(TransferLeaderError::NotVoter(to));
        }
        if self.lead_transferee == Some(to) {
            return Ok(());
        }
        info!(member_id = %format_args!("{:x}", self.id), to = %format_args!("{to:x}"), term = self.term, "transferring leadership");
        self.lead_transferee = Some(to);
        self.transfer_deadline = Some(now + self.config.election_timeout);
        let caught_up = self
            .tracker
            .get(to)
            .is_some_and(|p| p.matched() == self.log.last_index());
        if caught_up {
            self.send_timeout_now(to);
        } else {
            let result = self.send_append(to, false);
            self.check(result.map(|_| ()));
        }
        Ok(())
    }

    /// The voter (other than this member) with the most of the log, for a
    /// graceful hand-over on shutdown. Leader only.
    pub fn most_caught_up_voter(&self) -> Option<u64> {
        if self.role != Role::Leader {
            return None;
        }
        self.tracker
            .voters()
            .iter()
            .filter(|&id| id != self.id)
            .max_by_key(|&id| {
                (
                    self.tracker.get(id).map_or(0, |p| p.matched()),
                    std::cmp::Reverse(id),
                )
            })
    }

    /// The transferee is caught up: it campaigns at once.
    pub(super) fn send_timeout_now(&mut self, to: u64) {
        info!(to = %format_args!("{to:x}"), term = self.term, "transferee caught up; sending timeout-now");
        let m = self.message(to, MessageType::MsgTimeoutNow);
        self.send(m);
    }

    /// Gives up the transfer under way; proposals are accepted again.
    pub(super) fn abort_transfer(&mut self) {
        self.lead_transferee = None;
        self.transfer_deadline = None;
    }
}
