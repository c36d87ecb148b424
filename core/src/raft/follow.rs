//! A follower's side of replication: the leader's appends, heartbeats and
//! snapshots, accepted into the log and acknowledged.
//!
//! An acknowledgement promises that what it names is durable, so it goes
//! out only once the write that covers it is acknowledged by the runtime
//! (see [`super::persist`]); when entries are replaced before that, the
//! acknowledgements that vouched for them are withdrawn. An append whose
//! entries do not follow its previous entry is malformed and dropped; one
//! that conflicts with committed entries is dropped with a warning —
//! neither reaches an assertion. A snapshot replaces the log only when it
//! is ahead of the commit index and the log does not already hold its
//! last entry.

use oxetcd_proto::eraftpb::{Entry, Message, MessageType};
use tracing::{debug, info, warn};

use super::log::AppendOutcome;
use super::progress::ProgressTracker;
use super::{LogSource, Raft};
use crate::storage::StorageError;

impl<S: LogSource> Raft<S> {
    /// An append from the leader: accepted (acknowledged up to its last
    /// entry once durable), or rejected with a hint where the logs may
    /// match.
    pub(super) fn handle_append(&mut self, mut m: Message) -> Result<(), StorageError> {
        let entries = m.take_entries().into_vec();
        if let Err(problem) = check_append(&m, &entries) {
            debug!(from = m.from, problem, "dropping malformed append");
            return Ok(());
        }
        let committed = self.log.committed();
        let mut reply = self.message(m.from, MessageType::MsgAppendResponse);
        if m.index < committed {
            reply.index = committed;
            self.send_after_persist(reply);
            return Ok(());
        }
        match self
            .log
            .maybe_append(m.index, m.log_term, m.commit, entries)?
        {
            AppendOutcome::Accepted {
                last_new,
                truncated_at,
            } => {
                if let Some(index) = truncated_at {
                    self.forget_acks_from(index);
                }
                reply.index = last_new;
                self.send_after_persist(reply);
            }
            AppendOutcome::Mismatch => {
                let hint = m.index.min(self.log.last_index());
                let (hint_index, hint_term) = self.log.find_conflict_by_term(hint, m.log_term)?;
                debug!(
                    from = m.from,
                    index = m.index,
                    log_term = m.log_term,
                    hint_index,
                    hint_term,
                    "rejecting append"
                );
                reply.index = m.index;
                reply.reject = true;
                reply.reject_hint = hint_index;
                reply.log_term = hint_term;
                self.send_after_persist(reply);
            }
            AppendOutcome::ConflictsWithCommitted(index) => {
                warn!(
                    from = m.from,
                    index, committed, "append conflicts with committed entries; dropped"
                );
            }
        }
        Ok(())
    }

    /// A heartbeat: commits what the leader says this member holds, and
    /// echoes the read round it carries.
    pub(super) fn handle_heartbeat(&mut self, m: Message) {
        // The leader sends at most what this member acknowledged as durable.
        self.log.commit_to(m.commit);
        let mut reply = self.message(m.from, MessageType::MsgHeartbeatResponse);
        reply.context = m.context;
        self.send(reply);
    }

    /// The end of a snapshot stream: installs the snapshot if it is ahead
    /// of this member's log, and acknowledges it once durable.
    pub(super) fn handle_snapshot(&mut self, m: Message) -> Result<(), StorageError> {
        let meta = m.get_snapshot().get_metadata().clone();
        if meta.index == 0 || meta.get_conf_state().voters.is_empty() {
            debug!(
                from = m.from,
                "dropping snapshot message without metadata or voters"
            );
            return Ok(());
        }
        let mut reply = self.message(m.from, MessageType::MsgAppendResponse);
        if meta.index <= self.log.committed() {
            debug!(
                from = m.from,
                index = meta.index,
                committed = self.log.committed(),
                "ignoring stale snapshot"
            );
            reply.index = self.log.committed();
        } else if self.log.match_term(meta.index, meta.term)? {
            // The log already holds the snapshot's last entry: just commit.
            debug!(
                from = m.from,
                index = meta.index,
                "snapshot already in the log; fast-forwarding commit"
            );
            self.log.commit_to(meta.index);
            reply.index = self.log.committed();
        } else {
            info!(
                member_id = %format_args!("{:x}", self.id),
                index = meta.index,
                term = meta.term,
                "installing snapshot"
            );
            let old_committed = self.log.committed();
            self.forget_acks_from(old_committed + 1);
            let conf = meta.get_conf_state().clone();
            self.log.restore(meta);
            self.tracker = ProgressTracker::new(
                &conf,
                self.log.last_index() + 1,
                self.config.max_inflight_msgs,
            );
            reply.index = self.log.last_index();
        }
        self.send_after_persist(reply);
        Ok(())
    }
}

/// Checks an append's entries follow its previous entry: contiguous
/// indexes, terms non-decreasing, at least the previous term, at most the
/// message's term.
fn check_append(m: &Message, entries: &[Entry]) -> Result<(), &'static str> {
    let mut prev_term = m.log_term;
    if m.log_term > m.term {
        return Err("previous term after the leader's term");
    }
    for (k, entry) in entries.iter().enumerate() {
        if Some(entry.index) != m.index.checked_add(k as u64 + 1) {
            return Err("entries not contiguous after the previous index");
        }
        if entry.term < prev_term || entry.term > m.term {
            return Err("entry terms out of order");
        }
        prev_term = entry.term;
    }
    Ok(())
}
