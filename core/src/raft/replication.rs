//! The leader's side of replication: proposals appended to its log, sent
//! to each member as its progress allows, acknowledgements counted into
//! the commit index.
//!
//! Appends go out lazily, once per drain however many proposals arrived,
//! and without waiting for the leader's own write: the leader counts
//! itself toward a commit only once its write is durable (its own match
//! index is its durable index). Only an entry of the leader's own term
//! commits by counting (Raft §5.4.2). A member that needs compacted
//! entries gets a snapshot instead ([`Action::SendSnapshot`]), streamed by
//! the runtime while heartbeats and appends to the others go on.
//!
//! Invariants, asserted in debug builds: the commit index never decreases
//! and never passes the last index; a leader's own match index is its
//! durable index.

use std::fmt;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{Entry, EntryType, Message, MessageType, Snapshot, SnapshotMetadata};
use tracing::{debug, info};

use super::log::{self, entry_bytes, LogError};
use super::read_only::{parse_round, round_context};
use super::{log_error, Action, LogSource, ProgressState, Raft, Role};
use crate::storage::StorageError;

/// Why a proposal was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposeError {
    /// Only the leader accepts proposals.
    NotLeader {
        /// The leader, if known, to forward to.
        leader: Option<u64>,
    },
    /// Leadership is being transferred; retry on the new leader.
    TransferringLeadership,
    /// Too many bytes are proposed and not yet committed.
    Busy,
    /// A membership change is proposed and not yet applied.
    ConfChangePending,
    /// The membership change is not allowed.
    InvalidConfChange(&'static str),
}

impl fmt::Display for ProposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProposeError::NotLeader { leader: Some(id) } => {
                write!(f, "not leader; leader is {id:x}")
            }
            ProposeError::NotLeader { leader: None } => write!(f, "not leader; no leader known"),
            ProposeError::TransferringLeadership => write!(f, "leadership transfer in progress"),
            ProposeError::Busy => write!(f, "too many uncommitted proposals"),
            ProposeError::ConfChangePending => write!(f, "a membership change is still pending"),
            ProposeError::InvalidConfChange(why) => write!(f, "invalid membership change: {why}"),
        }
    }
}

impl std::error::Error for ProposeError {}

/// Builds the message that ends a snapshot stream (see
/// [`Action::SendSnapshot`]): the follower's raft decides from it whether to
/// install the snapshot it received.
pub fn snapshot_message(from: u64, to: u64, term: u64, metadata: SnapshotMetadata) -> Message {
    Message {
        msg_type: MessageType::MsgSnapshot,
        from,
        to,
        term,
        snapshot: Some(Snapshot {
            metadata: Some(metadata).into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

impl<S: LogSource> Raft<S> {
    /// Proposes `data` as a normal entry; returns its index. The entry may
    /// still be lost if leadership changes before it commits: the caller
    /// learns the outcome from the entry applied at that index.
    pub fn propose(&mut self, data: Bytes) -> Result<u64, ProposeError> {
        self.check_can_propose()?;
        let size = (data.len() + log::ENTRY_OVERHEAD_BYTES) as u64;
        if self.uncommitted_bytes > 0
            && self.uncommitted_bytes + size > self.config.max_uncommitted_bytes
        {
            return Err(ProposeError::Busy);
        }
        Ok(self.append_entry(EntryType::EntryNormal, data))
    }

    /// The runtime finished streaming a snapshot to `to` (`delivered`), or
    /// gave up. Either way the member is probed again after its next
    /// heartbeat answer.
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        if self.role != Role::Leader {
            return;
        }
        let Some(p) = self.tracker.get_mut(to) else {
            return;
        };
        if p.state() != ProgressState::Snapshot {
            return;
        }
        debug!(to, delivered, "snapshot stream finished");
        if !delivered {
            // Forget the snapshot: probing restarts from what is known.
            p.become_snapshot(0);
        }
        p.become_probe();
        p.sent_append(None); // wait for a heartbeat answer before probing
    }

    /// The runtime could not reach `to`: stop streaming appends to it
    /// until it answers again.
    pub fn report_unreachable(&mut self, to: u64) {
        if self.role != Role::Leader {
            return;
        }
        if let Some(p) = self.tracker.get_mut(to) {
            if p.state() == ProgressState::Replicate {
                p.become_probe();
            }
        }
    }

    /// Proposals go to a leader that is not handing over.
    pub(super) fn check_can_propose(&self) -> Result<(), ProposeError> {
        if self.fatal.is_some() || self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader.filter(|&l| l != self.id),
            });
        }
        if self.lead_transferee.is_some() {
            return Err(ProposeError::TransferringLeadership);
        }
        Ok(())
    }

    /// Appends an entry of this leader's term to its log; it goes out with
    /// the next drain. Returns its index.
    pub(super) fn append_entry(&mut self, entry_type: EntryType, data: Bytes) -> u64 {
        debug_assert_eq!(
            self.role,
            Role::Leader,
            "only a leader appends its own entries"
        );
        let entry = Entry {
            entry_type,
            term: self.term,
            index: self.log.last_index() + 1,
            data,
            ..Default::default()
        };
        self.uncommitted_bytes += entry_bytes(&entry) as u64;
        let index = self.log.append(vec![entry]);
        self.broadcast_pending = true;
        index
    }

    /// Commits what a majority of voters holds, if it is of this term.
    pub(super) fn maybe_commit(&mut self) -> Result<bool, StorageError> {
        let index = self.tracker.committed_index();
        let committed = self.log.committed();
        if index <= committed {
            return Ok(false);
        }
        // Only an entry of the leader's own term commits by counting
        // (Raft §5.4.2); earlier ones commit with it.
        match self.log.term(index) {
            Ok(term) if term == self.term => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(log_error(e)),
        }
        self.log.commit_to(index);
        debug_assert_eq!(
            self.log.committed(),
            index,
            "a quorum's match index {index} is past the last index {}",
            self.log.last_index()
        );
        let released = self.log.memory_bytes_between(committed + 1, index);
        self.uncommitted_bytes = if index == self.log.last_index() {
            0
        } else {
            self.uncommitted_bytes.saturating_sub(released)
        };
        if !self.term_committed {
            self.term_committed = true;
            self.reads.term_committed(index);
        }
        // Followers learn the new commit index with the next append.
        self.commit_pending = true;
        Ok(true)
    }

    /// Sends `to` the entries it lacks, if its progress allows. Returns
    /// whether something was sent (an append, or a snapshot request).
    pub(super) fn send_append(
        &mut self,
        to: u64,
        send_if_empty: bool,
    ) -> Result<bool, StorageError> {
        if to == self.id {
            return Ok(false);
        }
        let Some(p) = self.tracker.get(to) else {
            return Ok(false);
        };
        if p.is_paused() {
            return Ok(false);
        }
        let next = p.next_index();
        let prev = next - 1;
        let prev_term = match self.log.term(prev) {
            Ok(term) => term,
            Err(LogError::Compacted) => return Ok(self.request_snapshot(to)),
            Err(LogError::Unavailable) => {
                // Cannot happen with a consistent progress; recover by probing.
                debug!(to, next, "next index beyond the log; probing");
                let p = self.tracker.get_mut(to).expect("member checked");
                p.become_probe();
                return Ok(false);
            }
            Err(LogError::Storage(e)) => return Err(e),
        };
        let last_index = self.log.last_index();
        let entries = match self
            .log
            .entries(next, last_index + 1, self.config.max_msg_bytes)
        {
            Ok(entries) => entries,
            Err(LogError::Compacted) => return Ok(self.request_snapshot(to)),
            Err(LogError::Unavailable) => Vec::new(),
            Err(LogError::Storage(e)) => return Err(e),
        };
        if entries.is_empty() && !send_if_empty {
            return Ok(false);
        }
        let p = self.tracker.get_mut(to).expect("member checked");
        p.sent_append(entries.last().map(|e| e.index));
        let mut m = self.message(to, MessageType::MsgAppend);
        m.index = prev;
        m.log_term = prev_term;
        m.commit = self.log.committed();
        m.entries = entries.into();
        self.send(m);
        Ok(true)
    }

    fn request_snapshot(&mut self, to: u64) -> bool {
        let now = self.now;
        let window = self.config.election_timeout;
        let snapshot_index = self.log.snapshot_index();
        let p = self.tracker.get_mut(to).expect("member checked by caller");
        if !p.recently_heard(now, window) {
            debug!(to, "member needs a snapshot but is not answering; waiting");
            return false;
        }
        info!(to = %format_args!("{to:x}"), snapshot_index, "member needs a snapshot");
        p.become_snapshot(snapshot_index);
        self.actions.push_back(Action::SendSnapshot {
            to,
            term: self.term,
        });
        true
    }

    pub(super) fn broadcast_heartbeat(&mut self) {
        let context = self
            .reads
            .current_round()
            .map(round_context)
            .unwrap_or_default();
        let committed = self.log.committed();
        for id in self.tracker.peers(self.id) {
            let matched = self.tracker.get(id).map_or(0, |p| p.matched());
            let mut m = self.message(id, MessageType::MsgHeartbeat);
            // Never more than the member holds: it may not have the rest.
            m.commit = matched.min(committed);
            m.context = context.clone();
            self.send(m);
        }
    }

    /// Appends for new entries or a new commit index, to every member
    /// whose window allows.
    pub(super) fn flush_appends(&mut self) -> Result<(), StorageError> {
        if self.broadcast_pending || self.commit_pending {
            // New entries go to everyone whose window allows; a member that
            // has them all still needs a new commit index, which one empty
            // append carries.
            let send_if_empty = self.commit_pending;
            self.broadcast_pending = false;
            self.commit_pending = false;
            for id in self.tracker.peers(self.id) {
                let mut sent = self.send_append(id, send_if_empty)?;
                while sent {
                    sent = self.send_append(id, false)?;
                }
            }
        }
        Ok(())
    }

    /// A member accepted entries up to `m.index` (its progress moves on,
    /// the commit index may too), or rejected the append at `m.index` (its
    /// next index backs off to the hint).
    pub(super) fn handle_append_response(&mut self, m: &Message) -> Result<(), StorageError> {
        let last_index = self.log.last_index();
        if !m.reject && m.index > last_index {
            debug!(
                from = m.from,
                index = m.index,
                last_index,
                "acknowledgement beyond the log; dropped"
            );
            return Ok(());
        }
        let now = self.now;
        let Some(p) = self.tracker.get_mut(m.from) else {
            debug!(from = m.from, "append response from a non-member");
            return Ok(());
        };
        p.heard_at(now);
        if m.reject {
            let mut next_probe = m.reject_hint;
            if m.log_term > 0 {
                next_probe = self.log.find_conflict_by_term(m.reject_hint, m.log_term)?.0;
            }
            let p = self.tracker.get_mut(m.from).expect("member checked");
            if p.maybe_decr_to(m.index, next_probe) {
                debug!(
                    from = m.from,
                    rejected = m.index,
                    next = p.next_index(),
                    "backing off"
                );
                if p.state() == ProgressState::Replicate {
                    p.become_probe();
                }
                self.send_append(m.from, false)?;
            }
            return Ok(());
        }
        let was_paused = p.is_paused();
        if !p.maybe_update(m.index) {
            return Ok(());
        }
        debug_assert!(p.matched() <= last_index, "a member matches past the log");
        let snapshot_index = self.log.snapshot_index();
        match p.state() {
            ProgressState::Probe => p.become_replicate(),
            ProgressState::Snapshot if p.matched() >= snapshot_index => {
                p.become_probe();
                p.become_replicate();
            }
            ProgressState::Replicate => p.ack_inflights(m.index),
            ProgressState::Snapshot => {}
        }
        if !self.maybe_commit()? && was_paused {
            self.send_append(m.from, false)?;
        }
        while self.send_append(m.from, false)? {}
        if self.lead_transferee == Some(m.from)
            && self
                .tracker
                .get(m.from)
                .is_some_and(|p| p.matched() == self.log.last_index())
        {
            self.send_timeout_now(m.from);
        }
        Ok(())
    }

    /// A member answered a heartbeat: it is alive (probing resumes, and an
    /// append follows if it lacks entries), and it confirms the read round
    /// the heartbeat carried.
    pub(super) fn handle_heartbeat_response(&mut self, m: &Message) -> Result<(), StorageError> {
        let now = self.now;
        let last_index = self.log.last_index();
        let Some(p) = self.tracker.get_mut(m.from) else {
            debug!(from = m.from, "heartbeat response from a non-member");
            return Ok(());
        };
        p.heard_at(now);
        p.resume();
        p.free_one_if_full();
        let behind = p.matched() < last_index;
        if self.tracker.is_voter(m.from) {
            if let Some(round) = parse_round(&m.context) {
                self.reads.ack(m.from, round);
            }
        }
        if behind {
            self.send_append(m.from, true)?;
        }
        Ok(())
    }
}
