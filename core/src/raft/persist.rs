//! Durability ordering as data: writes handed out, acknowledged in order,
//! and what waits for them.
//!
//! Entries, a received snapshot and the hard state leave as one
//! [`Persist`] at a time ([`PERSIST_INFLIGHT_MAX`]); what accumulates
//! meanwhile rides the next one (group commit). Messages that promise
//! durability — vote grants, append acknowledgements, a candidate's own
//! vote — wait in order for the write that covers them ([`Deferred`]).
//! Committed entries are handed out to apply only once durable here, and
//! the log is compacted only below what is applied and durable.
//!
//! Invariants, asserted in debug builds: acknowledgements arrive in order
//! and never for a write not handed out; at most [`PERSIST_INFLIGHT_MAX`]
//! writes are in flight.

use oxetcd_proto::eraftpb::{Entry, EntryType, HardState, Message, MessageType, SnapshotMetadata};
use tracing::{debug, warn};

use super::{
    log_error, LogSource, Raft, Role, APPLY_BATCH_BYTES_MAX, PERSIST_INFLIGHT_MAX,
    PERSIST_WAITING_MESSAGES_MAX,
};
use crate::storage::StorageError;
use crate::Instant;

/// Numbers a [`Persist`]; acknowledged with [`Raft::persisted`], in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PersistId(pub u64);

/// A write to make durable, in this order: install the snapshot, append the
/// entries, store the hard state — then call [`Raft::persisted`].
#[derive(Clone, Debug, PartialEq)]
pub struct Persist {
    /// Acknowledge with this.
    pub id: PersistId,
    /// If set, the runtime installs the state-machine snapshot it received
    /// for this point (data and applied index), and replaces the whole log
    /// with an empty one compacted at `index`/`term`; the membership it
    /// records is `conf_state`. A newer snapshot may be received while an
    /// older one is being installed, so the runtime keeps received
    /// snapshots by index until one is installed, then drops older ones.
    pub snapshot: Option<SnapshotMetadata>,
    /// Entries to append, replacing any stored at or after the first one's
    /// index.
    pub entries: Vec<Entry>,
    /// Hard state to store, when the term or the vote changed, a snapshot
    /// is installed, or a committed membership change waits for its commit
    /// index to be stored before it applies; then it is the current one.
    /// Otherwise a change of the commit index alone is stored with the
    /// next hard state (after a crash the commit index is recovered from
    /// the applied index and the leader).
    pub hard_state: Option<HardState>,
}

/// A message held until a write is durable.
#[derive(Clone, Debug)]
pub(super) enum Deferred {
    Send(Message),
    /// This member's vote for itself in `term` counts once it is durable.
    SelfVote {
        term: u64,
    },
}

impl<S: LogSource> Raft<S> {
    /// Writes up to `id` are durable.
    pub fn persisted(&mut self, now: Instant, id: PersistId) {
        self.observe(now);
        if self.fatal.is_some() {
            return;
        }
        if id.0 <= self.persist_acked || id.0 > self.persist_issued {
            warn!(
                id = id.0,
                acked = self.persist_acked,
                issued = self.persist_issued,
                "unexpected persist acknowledgement"
            );
            return;
        }
        self.persist_acked = id.0;
        self.log.persisted(id.0);
        if let Some((issued, commit)) = self.commit_issued {
            if issued <= id.0 {
                self.commit_durable = self.commit_durable.max(commit);
                self.commit_issued = None;
            }
        }
        while self.waiting.front().is_some_and(|(seq, _)| *seq <= id.0) {
            let (_, deferred) = self.waiting.pop_front().expect("front exists");
            match deferred {
                Deferred::Send(m) => self.send(m),
                Deferred::SelfVote { term } => {
                    if self.role == Role::Candidate && self.term == term {
                        self.votes.insert(self.id, true);
                        self.tally_votes();
                    }
                }
            }
        }
        if self.role == Role::Leader {
            let stable = self.log.stable();
            let id = self.id;
            if let Some(p) = self.tracker.get_mut(id) {
                p.maybe_update(stable);
            }
            let result = self.maybe_commit();
            self.check(result.map(|_| ()));
            debug_assert!(
                self.fatal.is_some() || self.tracker.get(id).map(|p| p.matched()) == Some(stable),
                "a leader's own match index is its durable index {stable}"
            );
        }
    }

    /// Storage compacted the log up to and including `index` (a snapshot of
    /// the state machine covers it). Only applied, durable entries may be
    /// compacted; returns whether the raft moved its compaction point.
    /// Tell the raft before storage drops the entries.
    pub fn compact_log(&mut self, index: u64) -> bool {
        match self.log.compact_to(index) {
            Ok(moved) => moved,
            Err(e) => {
                self.check(Err(log_error(e)));
                false
            }
        }
    }

    /// The next write, unless one is in flight or there is nothing to write.
    pub(super) fn poll_persist(&mut self) -> Option<Persist> {
        let outstanding = (self.persist_issued - self.persist_acked) as usize;
        if outstanding >= PERSIST_INFLIGHT_MAX {
            return None;
        }
        if !self.log.has_unpersisted() && !self.hard_state_dirty {
            return None;
        }
        self.persist_issued += 1;
        let (snapshot, entries) = self.log.take_unpersisted(self.persist_issued);
        // A change of the commit index alone is not worth a write of its
        // own: storing the hard state costs the log store another page per
        // append, and after a crash the commit index is recovered from the
        // applied index and the leader. A membership change asks for one
        // (`hard_state_dirty`) before it is applied.
        let hard_state = (self.hard_state_dirty || snapshot.is_some()).then(|| self.hard_state());
        self.hard_state_dirty = false;
        if let Some(hs) = &hard_state {
            self.commit_issued = Some((self.persist_issued, hs.commit));
        }
        debug_assert!(
            self.persist_issued - self.persist_acked <= PERSIST_INFLIGHT_MAX as u64,
            "more writes in flight than allowed"
        );
        Some(Persist {
            id: PersistId(self.persist_issued),
            snapshot,
            entries,
            hard_state,
        })
    }

    /// The next committed, durable entries to apply; membership changes
    /// among them take effect in the raft as they are handed out.
    ///
    /// A membership change is handed out only once a stored hard state says
    /// it is committed (one write of the hard state is asked for it, and
    /// entries after it wait). The commit index is otherwise stored lazily,
    /// and a member restarted after applying a change, its backend's last
    /// commits lost, would go back to the configuration before it without
    /// knowing the change committed: the member that a removal left alone
    /// would wait for the removed member's vote for ever.
    pub(super) fn poll_apply(&mut self) -> Result<Option<Vec<Entry>>, StorageError> {
        let durable = self.commit_durable;
        let mut held = None;
        let entries = self
            .log
            .next_to_apply(APPLY_BATCH_BYTES_MAX, |e| {
                let hold = e.entry_type != EntryType::EntryNormal && e.index > durable;
                if hold {
                    held = Some(e.index);
                }
                hold
            })
            .map_err(log_error)?;
        if let Some(index) = held {
            let storing = self
                .commit_issued
                .is_some_and(|(_, commit)| commit >= index);
            if !storing {
                self.hard_state_dirty = true;
            }
        }
        if entries.is_empty() {
            return Ok(None);
        }
        for entry in &entries {
            if entry.entry_type == EntryType::EntryConfChange {
                self.apply_conf_change(entry);
            } else if entry.entry_type == EntryType::EntryConfChangeV2 {
                warn!(
                    index = entry.index,
                    "ConfChangeV2 entries are not supported; skipped"
                );
            }
        }
        Ok(Some(entries))
    }

    /// Sends `m` once everything now unpersisted is durable.
    pub(super) fn send_after_persist(&mut self, m: Message) {
        self.defer(Deferred::Send(m));
    }

    /// Holds `deferred` until the write that covers everything now
    /// unpersisted is durable, or releases it at once when nothing is.
    pub(super) fn defer(&mut self, deferred: Deferred) {
        let seq = if self.log.has_unpersisted() || self.hard_state_dirty {
            self.persist_issued + 1
        } else if self.persist_issued > self.persist_acked {
            self.persist_issued
        } else {
            match deferred {
                Deferred::Send(m) => self.send(m),
                Deferred::SelfVote { term } => {
                    if self.role == Role::Candidate && self.term == term {
                        self.votes.insert(self.id, true);
                    }
                }
            }
            return;
        };
        if self.waiting.len() >= PERSIST_WAITING_MESSAGES_MAX {
            debug!("too many messages waiting for persistence; dropping one");
            return;
        }
        debug_assert!(
            self.waiting.back().is_none_or(|(last, _)| *last <= seq),
            "held messages out of write order"
        );
        self.waiting.push_back((seq, deferred));
    }

    /// Entries from `index` on were replaced: acknowledgements that vouch
    /// for them must not go out.
    pub(super) fn forget_acks_from(&mut self, index: u64) {
        self.waiting.retain(|(_, d)| match d {
            Deferred::Send(m) => {
                !(m.msg_type == MessageType::MsgAppendResponse && !m.reject && m.index >= index)
            }
            Deferred::SelfVote { .. } => true,
        });
    }
}
