//! A leader's farewell: after it applies its own removal, it keeps telling
//! the remaining voters the commit index for a while.
//!
//! Design. A leader removed from the voters steps down when it applies the
//! removal (see `conf_change`), and the runtime then stops the member. The
//! remaining voters learn that the removal committed only from the leader's
//! next append or heartbeat. Without it they still count the removed member
//! among the voters; where they are too few to elect a leader without it (a
//! two-member cluster left with one) they would wait for ever. etcd keeps a
//! removed member running for ten heartbeats for this reason.
//!
//! So the stepping-down leader records, per remaining voter, the commit
//! index it may tell (never beyond what that voter holds), and until each
//! has answered one of them, or an election timeout has passed, it sends
//! them a heartbeat of its old term every heartbeat interval. The
//! heartbeats carry [`FAREWELL_CONTEXT`], which followers echo in their
//! answers, so an answer to an older heartbeat does not count. Once the
//! term moves on (another member campaigns), no more are sent: a heartbeat
//! of the new term would claim a leadership this member does not hold.
//! The member still runs until the farewell ends, so it can vote for a
//! remaining voter that campaigns without knowing of the removal.
//! [`Raft::saying_farewell`] tells the runtime not to stop yet.

use std::collections::BTreeMap;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{Message, MessageType};
use tracing::info;

use super::{LogSource, Raft};
use crate::Instant;

/// The context of a farewell heartbeat: not eight bytes, so no read round.
pub(super) const FAREWELL_CONTEXT: &[u8] = b"farewell";

/// What a removed leader still owes the remaining voters.
#[derive(Debug)]
pub(super) struct Farewell {
    /// The term it led, the only one its heartbeats may carry.
    term: u64,
    /// Voters that have not answered yet, each with the commit index to tell.
    unheard: BTreeMap<u64, u64>,
    /// The next heartbeats go out then.
    next_send: Instant,
    /// The farewell ends then, answered or not.
    deadline: Instant,
}

impl<S: LogSource> Raft<S> {
    /// Begins the farewell of a leader that applied its own removal,
    /// before it steps down, and sends the first heartbeats at once.
    pub(super) fn begin_farewell(&mut self) {
        let committed = self.log.committed();
        let unheard: BTreeMap<u64, u64> = self
            .tracker
            .voters()
            .iter()
            .filter(|&id| id != self.id)
            .map(|id| {
                let matched = self.tracker.get(id).map_or(0, |p| p.matched());
                (id, matched.min(committed))
            })
            .collect();
        if unheard.is_empty() {
            return;
        }
        self.farewell = Some(Farewell {
            term: self.term,
            unheard,
            next_send: self.now,
            deadline: self.now + self.config.election_timeout,
        });
        self.farewell_tick();
    }

    /// Whether this member still owes the remaining voters its farewell:
    /// it should keep running until then.
    pub fn saying_farewell(&self) -> bool {
        self.farewell.is_some()
    }

    /// When the farewell next needs [`Raft::handle_timeout`].
    pub(super) fn farewell_timeout(&self) -> Option<Instant> {
        self.farewell.as_ref().map(|f| f.next_send.min(f.deadline))
    }

    /// Ends the farewell at its deadline, or sends its heartbeats when due.
    pub(super) fn farewell_tick(&mut self) {
        let now = self.now;
        let Some(farewell) = self.farewell.as_mut() else {
            return;
        };
        if now >= farewell.deadline {
            info!(member_id = %format_args!("{:x}", self.id), unheard = ?farewell.unheard.keys().collect::<Vec<_>>(), "farewell ended unanswered");
            self.farewell = None;
            return;
        }
        if now < farewell.next_send {
            return;
        }
        farewell.next_send = now + self.config.heartbeat_interval;
        if farewell.term != self.term {
            return;
        }
        let sends: Vec<(u64, u64)> = farewell.unheard.iter().map(|(&id, &c)| (id, c)).collect();
        for (to, commit) in sends {
            let mut m = self.message(to, MessageType::MsgHeartbeat);
            m.commit = commit;
            m.context = Bytes::from_static(FAREWELL_CONTEXT);
            self.send(m);
        }
    }

    /// A heartbeat answer reached this member while it says farewell.
    pub(super) fn farewell_heard(&mut self, m: &Message) {
        let Some(farewell) = self.farewell.as_mut() else {
            return;
        };
        if m.term != farewell.term || m.context.as_ref() != FAREWELL_CONTEXT {
            return;
        }
        farewell.unheard.remove(&m.from);
        if farewell.unheard.is_empty() {
            info!(member_id = %format_args!("{:x}", self.id), "the remaining voters heard the removal");
            self.farewell = None;
        }
    }
}
