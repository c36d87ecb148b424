//! Timers: the one deadline the raft waits for, and what fires at it.
//!
//! A follower or candidate waits for its election deadline (and then
//! campaigns, see [`super::election`]). A leader waits for its next
//! heartbeat — which is also when it checks that a quorum is still in
//! contact (check-quorum) and restarts read rounds that were lost — and,
//! while it transfers leadership, for the transfer's deadline.
//! [`Raft::poll_timeout`] is the minimum over these; nothing here reads a
//! clock: the time comes with every input.

use tracing::{info, warn};

use super::election::CampaignKind;
use super::{LogSource, Raft, Role};
use crate::storage::StorageError;
use crate::Instant;

impl<S: LogSource> Raft<S> {
    /// Fires the timers due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.observe(now);
        if self.fatal.is_some() {
            return;
        }
        self.farewell_tick();
        let result = self.tick();
        self.check(result);
    }

    /// When [`Raft::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.fatal.is_some() {
            return None;
        }
        match self.role {
            Role::Leader => match (self.heartbeat_deadline, self.transfer_deadline) {
                (Some(h), Some(t)) => Some(h.min(t)),
                (h, t) => h.or(t),
            },
            _ => Some(
                self.farewell_timeout()
                    .map_or(self.election_deadline, |f| f.min(self.election_deadline)),
            ),
        }
    }

    /// Fires what is due at `self.now`: the leader's transfer deadline and
    /// heartbeat (with its check-quorum), or anyone else's election timer.
    fn tick(&mut self) -> Result<(), StorageError> {
        let now = self.now;
        if self.role == Role::Leader {
            if self.transfer_deadline.is_some_and(|d| now >= d) {
                info!(member_id = %format_args!("{:x}", self.id), transferee = ?self.lead_transferee, "leadership transfer timed out");
                self.abort_transfer();
            }
            if self.heartbeat_deadline.is_some_and(|d| now >= d) {
                self.heartbeat_deadline = Some(now + self.config.heartbeat_interval);
                if self.config.check_quorum
                    && !self
                        .tracker
                        .quorum_active(self.id, now, self.config.election_timeout)
                {
                    warn!(member_id = %format_args!("{:x}", self.id), term = self.term, "lost contact with a quorum; stepping down");
                    self.become_follower(self.term, None);
                    return Ok(());
                }
                // Reads waiting for a round that was lost get a fresh one.
                if self.reads.has_unconfirmed() {
                    self.reads.start_round();
                }
                self.broadcast_heartbeat();
            }
            return Ok(());
        }
        if now >= self.election_deadline {
            self.reset_election_timer(now);
            if self.is_voter() {
                let kind = if self.config.pre_vote {
                    CampaignKind::PreVote
                } else {
                    CampaignKind::Election
                };
                return self.start_campaign(kind);
            }
        }
        Ok(())
    }
}
