//! ReadIndex: linearizable reads without writing to the log.
//!
//! A read may be served once the state machine has applied the leader's
//! commit index *as of the read's arrival*, provided the leader was still
//! the leader after the read arrived. The leader proves that with a
//! heartbeat round answered by a majority of voters.
//!
//! Rounds are batched: every read waiting when a round starts is confirmed
//! by it, and at most one round is started per batch of reads — the reads
//! that arrive while a round is in flight share the next one. Rounds are
//! numbered within a term; a heartbeat carries its round number in its
//! context, and a follower's answer to round `r` also confirms every earlier
//! round (it was sent after they all started).
//!
//! A new leader does not know its commit index until it has committed an
//! entry of its own term, so reads that arrive before that wait for it.
//! This module never sends anything itself; the raft carries rounds on its
//! heartbeats.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::quorum::MajorityConfig;

/// Reads waiting for confirmation on the leader, at most. etcd bounds its
/// pending reads by client count; a request beyond this is refused so a
/// flood of reads cannot grow the leader's memory without limit.
pub const READ_INDEX_PENDING_MAX: usize = 8_192;

/// A read that may proceed once the local state machine applied `index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadState {
    /// The commit index the read must observe.
    pub index: u64,
    /// The context the read was requested with.
    pub context: Bytes,
}

/// Who asked for a read: this member, or a follower that forwarded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadOrigin {
    Local,
    Peer(u64),
}

/// A read confirmed by a heartbeat round.
#[derive(Clone, Debug)]
pub(crate) struct ConfirmedRead {
    pub(crate) origin: ReadOrigin,
    pub(crate) state: ReadState,
}

#[derive(Clone, Debug)]
struct PendingRead {
    context: Bytes,
    origin: ReadOrigin,
    /// The commit index at arrival, or `None` while the leader has not yet
    /// committed an entry of its term.
    index: Option<u64>,
    /// The round that confirms it: the first started after it arrived.
    round: u64,
}

/// The leader's queue of reads waiting for their heartbeat round.
#[derive(Clone, Debug, Default)]
pub struct ReadIndexQueue {
    /// In arrival order, so rounds (and indexes) are non-decreasing.
    pending: VecDeque<PendingRead>,
    last_started: u64,
    last_confirmed: u64,
    /// The highest round each voter has answered.
    acked: BTreeMap<u64, u64>,
}

impl ReadIndexQueue {
    /// Queues a read. `commit` is the leader's commit index if it has
    /// committed an entry of its term, else `None`. Refused when full.
    pub(crate) fn push(
        &mut self,
        context: Bytes,
        origin: ReadOrigin,
        commit: Option<u64>,
    ) -> Result<(), Bytes> {
        if self.pending.len() >= READ_INDEX_PENDING_MAX {
            return Err(context);
        }
        self.pending.push_back(PendingRead {
            context,
            origin,
            index: commit,
            round: self.last_started + 1,
        });
        Ok(())
    }

    /// The leader committed its first entry of the term at `commit`.
    pub(crate) fn term_committed(&mut self, commit: u64) {
        for read in &mut self.pending {
            read.index.get_or_insert(commit);
        }
    }

    /// Reads are waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// No reads are waiting.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// A round should start now: some read waits for a round not yet
    /// started, and none is in flight.
    pub(crate) fn wants_round(&self) -> bool {
        self.last_confirmed == self.last_started
            && self
                .pending
                .back()
                .is_some_and(|r| r.round > self.last_started)
    }

    /// Some read is waiting for confirmation.
    pub(crate) fn has_unconfirmed(&self) -> bool {
        self.pending
            .back()
            .is_some_and(|r| r.round > self.last_confirmed)
    }

    /// Starts the next round; returns its number, to carry on heartbeats.
    pub(crate) fn start_round(&mut self) -> u64 {
        self.last_started += 1;
        self.last_started
    }

    /// The round whose context heartbeats carry, if any read waits.
    pub(crate) fn current_round(&self) -> Option<u64> {
        (self.last_started > self.last_confirmed).then_some(self.last_started)
    }

    /// `voter` answered a heartbeat of `round`.
    pub(crate) fn ack(&mut self, voter: u64, round: u64) {
        if round > self.last_started {
            return; // Not a round of ours (another term's numbering).
        }
        let acked = self.acked.entry(voter).or_default();
        *acked = (*acked).max(round);
    }

    /// Confirms every round a majority of `voters` has answered (the
    /// leader, `self_id`, answers all of its own), and returns the reads
    /// that are ready, in arrival order.
    pub(crate) fn confirm(&mut self, voters: &MajorityConfig, self_id: u64) -> Vec<ConfirmedRead> {
        let last_started = self.last_started;
        let confirmed = voters.committed_index(|id| {
            if id == self_id {
                last_started
            } else {
                self.acked.get(&id).copied().unwrap_or(0)
            }
        });
        self.last_confirmed = self.last_confirmed.max(confirmed);
        let mut ready = Vec::new();
        while let Some(read) = self.pending.front() {
            let Some(index) = read.index else { break };
            if read.round > self.last_confirmed {
                break;
            }
            let read = self.pending.pop_front().expect("front exists");
            ready.push(ConfirmedRead {
                origin: read.origin,
                state: ReadState {
                    index,
                    context: read.context,
                },
            });
        }
        ready
    }

    /// Forgets everything (the leader stepped down or a new term began).
    /// Returns the reads that were waiting, so the caller can tell.
    pub(crate) fn clear(&mut self) -> usize {
        let dropped = self.pending.len();
        *self = Self::default();
        dropped
    }
}

/// Encodes a round number as a heartbeat context.
pub(crate) fn round_context(round: u64) -> Bytes {
    Bytes::copy_from_slice(&round.to_be_bytes())
}

/// Decodes a heartbeat answer's context; anything but eight bytes is no round.
pub(crate) fn parse_round(context: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(context.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(n: u64) -> Bytes {
        round_context(n)
    }

    #[test]
    fn reads_share_rounds_and_wait_for_a_majority() {
        let voters = MajorityConfig::new([1, 2, 3]);
        let mut q = ReadIndexQueue::default();
        q.push(ctx(1), ReadOrigin::Local, Some(5)).unwrap();
        q.push(ctx(2), ReadOrigin::Peer(2), Some(5)).unwrap();
        assert!(q.wants_round());
        assert_eq!(q.start_round(), 1);
        // Reads arriving while round 1 is in flight wait for round 2.
        q.push(ctx(3), ReadOrigin::Local, Some(6)).unwrap();
        assert!(!q.wants_round(), "one round in flight at a time");
        assert!(
            q.confirm(&voters, 1).is_empty(),
            "the leader alone is no majority"
        );
        q.ack(2, 1);
        let ready = q.confirm(&voters, 1);
        assert_eq!(ready.len(), 2);
        assert_eq!(ready[1].origin, ReadOrigin::Peer(2));
        assert!(q.wants_round());
        assert_eq!(q.start_round(), 2);
        q.ack(3, 2);
        let ready = q.confirm(&voters, 1);
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].state.index, 6);
        assert!(q.is_empty());
    }

    #[test]
    fn reads_wait_for_the_terms_first_commit() {
        let voters = MajorityConfig::new([1]);
        let mut q = ReadIndexQueue::default();
        q.push(ctx(1), ReadOrigin::Local, None).unwrap();
        q.start_round();
        assert!(q.confirm(&voters, 1).is_empty());
        q.term_committed(9);
        let ready = q.confirm(&voters, 1);
        assert_eq!(ready[0].state.index, 9);
    }

    #[test]
    fn queue_is_bounded_and_foreign_rounds_are_ignored() {
        let mut q = ReadIndexQueue::default();
        for i in 0..READ_INDEX_PENDING_MAX as u64 {
            q.push(ctx(i), ReadOrigin::Local, Some(1)).unwrap();
        }
        assert!(q.push(ctx(0), ReadOrigin::Local, Some(1)).is_err());
        q.ack(2, 99);
        assert!(q.acked.is_empty());
        assert_eq!(parse_round(b"short"), None);
        assert_eq!(parse_round(&round_context(7)), Some(7));
    }
}
