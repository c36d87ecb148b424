//! ReadIndex on the raft: linearizable reads requested, forwarded to the
//! leader, confirmed by a heartbeat round and answered.
//!
//! The queue of waiting reads and its rounds are [`super::read_only`]'s;
//! this file is the raft's part — taking reads in (local or forwarded by a
//! follower), starting a round on the next heartbeat, and answering
//! confirmed reads locally ([`Action::ReadReady`]) or to the follower that
//! forwarded them (`MsgReadIndexResp`). A leader that has not committed an
//! entry of its term yet does not know its commit index: reads wait for
//! that commit.

use std::fmt;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{Message, MessageType};
use tracing::debug;

use super::read_only::{ReadOrigin, ReadState};
use super::{Action, LogSource, Raft, Role};

/// Why a read could not be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadIndexError {
    /// No leader is known to confirm the read.
    NoLeader,
    /// Too many reads wait on this leader ([`READ_INDEX_PENDING_MAX`](super::READ_INDEX_PENDING_MAX)).
    TooManyReads,
}

impl fmt::Display for ReadIndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadIndexError::NoLeader => write!(f, "no leader"),
            ReadIndexError::TooManyReads => write!(f, "too many pending reads"),
        }
    }
}

impl std::error::Error for ReadIndexError {}

impl<S: LogSource> Raft<S> {
    /// Starts a linearizable read: once a heartbeat round proves this
    /// leader still leads, [`Action::ReadReady`] carries the index the
    /// state machine must reach, with `context` echoed. On a follower, the
    /// read is forwarded to the leader. Reads on a leader that has not yet
    /// committed an entry of its term wait for that commit.
    pub fn read_index(&mut self, context: Bytes) -> Result<(), ReadIndexError> {
        match self.role {
            Role::Leader => {
                let commit = self.term_committed.then(|| self.log.committed());
                self.reads
                    .push(context, ReadOrigin::Local, commit)
                    .map_err(|_| ReadIndexError::TooManyReads)
            }
            _ => {
                let Some(leader) = self.leader else {
                    return Err(ReadIndexError::NoLeader);
                };
                let mut m = self.message(leader, MessageType::MsgReadIndex);
                m.context = context;
                self.send(m);
                Ok(())
            }
        }
    }

    /// A follower forwarded a read (`MsgReadIndex`): it waits with the
    /// local ones.
    pub(super) fn handle_read_index(&mut self, m: Message) {
        if self.tracker.get(m.from).is_none() {
            debug!(from = m.from, "read index from a non-member");
            return;
        }
        let commit = self.term_committed.then(|| self.log.committed());
        if self
            .reads
            .push(m.context, ReadOrigin::Peer(m.from), commit)
            .is_err()
        {
            debug!(from = m.from, "read queue full; dropping forwarded read");
        }
    }

    /// The leader confirmed a read this member forwarded.
    pub(super) fn handle_read_index_response(&mut self, m: Message) {
        self.actions.push_back(Action::ReadReady(ReadState {
            index: m.index,
            context: m.context,
        }));
    }

    /// Starts a round when reads wait and none is in flight, and answers
    /// the reads a round confirmed.
    pub(super) fn flush_reads(&mut self) {
        if self.reads.wants_round() {
            self.reads.start_round();
            if self.tracker.voters().len() > 1 {
                self.broadcast_heartbeat();
            }
        }
        if !self.reads.is_empty() {
            for read in self.reads.confirm(self.tracker.voters(), self.id) {
                match read.origin {
                    ReadOrigin::Local => self.actions.push_back(Action::ReadReady(read.state)),
                    ReadOrigin::Peer(to) => {
                        let mut m = self.message(to, MessageType::MsgReadIndexResp);
                        m.index = read.state.index;
                        m.context = read.state.context;
                        self.send(m);
                    }
                }
            }
        }
    }
}
