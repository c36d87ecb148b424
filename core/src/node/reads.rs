//! Reads that wait for a read index: linearizable ranges, lease queries,
//! linearizable member lists, and forwarded time-to-live answers waiting
//! for this member's apply step.
//!
//! Design. [`Reads`] owns the three stages a read passes through and
//! nothing else: a batch (reads that arrived since the last drain), the
//! rounds in flight (one raft ReadIndex request per batch, tagged with its
//! round number and the leadership it was asked of), and the confirmed
//! reads (their index known, waiting until the apply step reaches it). It
//! never answers anyone itself: each operation hands the reads it releases
//! back to the node, which serves or fails them. Invariants: a read is in
//! exactly one stage; round numbers only grow; a confirmed read is released
//! exactly once, when `applied >= index`. The node's side — asking the
//! raft for a round, serving what is released — is the `impl Node` below.

use std::collections::BTreeMap;

use bytes::Bytes;
use oxetcd_proto::etcdserverpb::{
    LeaseCheckpoint, LeaseCheckpointRequest, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseTimeToLiveResponse, MemberListResponse, RangeRequest, ResponseHeader,
};
use oxetcd_proto::oxetcdpb::proposal;
use tracing::debug;

use super::{DirectReads, Held, Leadership, Node, Origin, Output, Ticket};
use crate::auth::{Access, AuthInfo, AuthRead};
use crate::error::Error;
use crate::lease::Renewal;
use crate::raft::{self, ReadState, Role};
use crate::storage::{KvStore, LogStore};
use crate::{Request, Response};

/// A read waiting for its read index.
#[derive(Debug)]
pub(super) enum ReadKind {
    /// A range, with who asked: checked again when it is served.
    Range(RangeRequest, AuthInfo),
    /// A lease query or keep-alive (answered by the leader only).
    Lease(Request),
    /// The leader's answer to a forwarded time-to-live, to be completed
    /// with the lease's keys from this member's applied state.
    LeaseKeys(LeaseTimeToLiveResponse),
    MemberList,
    /// Users, roles, permissions or auth status.
    Auth(AuthRead),
    /// A downgrade VALIDATE of this target, checked on the applied state.
    Downgrade(String),
}

#[derive(Debug)]
pub(super) struct PendingRead {
    pub(super) ticket: Ticket,
    pub(super) kind: ReadKind,
}

/// The reads of one node, by stage.
#[derive(Debug)]
pub(super) struct Reads {
    /// Reads not yet in a read-index round.
    batch: Vec<PendingRead>,
    /// Read-index rounds in flight, by round number, with the leadership
    /// they were asked of.
    rounds: BTreeMap<u64, (Leadership, Vec<PendingRead>)>,
    next_round: u64,
    /// Reads whose index is confirmed, waiting for the apply step.
    confirmed: Vec<(u64, PendingRead)>,
}

impl Default for Reads {
    fn default() -> Self {
        Self {
            batch: Vec::new(),
            rounds: BTreeMap::new(),
            next_round: 1,
            confirmed: Vec::new(),
        }
    }
}

impl Reads {
    /// A read joins the next round.
    pub(super) fn queue(&mut self, ticket: Ticket, kind: ReadKind) {
        self.batch.push(PendingRead { ticket, kind });
    }

    /// The batch waiting for a round, with the round's number and the
    /// context to ask the raft with; `None` when no read waits.
    pub(super) fn next_batch(&mut self) -> Option<(u64, Bytes, Vec<PendingRead>)> {
        if self.batch.is_empty() {
            return None;
        }
        let round = self.next_round;
        self.next_round += 1;
        let context = Bytes::copy_from_slice(&round.to_be_bytes());
        Some((round, context, std::mem::take(&mut self.batch)))
    }

    /// The raft took the round's request.
    pub(super) fn round_started(&mut self, round: u64, asked: Leadership, batch: Vec<PendingRead>) {
        debug_assert!(
            round < self.next_round,
            "round {round} was never handed out"
        );
        let previous = self.rounds.insert(round, (asked, batch));
        debug_assert!(previous.is_none(), "round {round} started twice");
    }

    /// The raft confirmed the round whose context is `context` at `index`:
    /// its reads wait for the apply step. False if the context is not one
    /// of ours or its round was already dropped.
    pub(super) fn confirm(&mut self, context: &[u8], index: u64) -> bool {
        let Ok(round) = <[u8; 8]>::try_from(context) else {
            return false;
        };
        let Some((_, reads)) = self.rounds.remove(&u64::from_be_bytes(round)) else {
            return false;
        };
        self.confirmed
            .extend(reads.into_iter().map(|read| (index, read)));
        true
    }

    /// A read already confirmed at `index` by other means (the leader's
    /// answer to a forwarded query carries its applied index).
    pub(super) fn confirmed_at(&mut self, index: u64, read: PendingRead) {
        self.confirmed.push((index, read));
    }

    /// The confirmed reads the apply step has reached, oldest first.
    pub(super) fn release(&mut self, applied: u64) -> Vec<PendingRead> {
        if self.confirmed.iter().all(|(index, _)| *index > applied) {
            return Vec::new();
        }
        let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.confirmed)
            .into_iter()
            .partition(|(index, _)| *index <= applied);
        self.confirmed = later;
        ready.into_iter().map(|(_, read)| read).collect()
    }

    /// The leadership changed to `current` (`None`: no leader): rounds
    /// asked of another leadership can no longer be confirmed. Returns
    /// their reads.
    pub(super) fn leadership_changed(&mut self, current: Option<Leadership>) -> Vec<PendingRead> {
        let rounds = std::mem::take(&mut self.rounds);
        let mut lost = Vec::new();
        for (round, (asked, reads)) in rounds {
            if current == Some(asked) {
                self.rounds.insert(round, (asked, reads));
            } else {
                lost.extend(reads);
            }
        }
        lost
    }

    /// Reads waiting, at any stage.
    pub(super) fn len(&self) -> usize {
        self.batch.len()
            + self
                .rounds
                .values()
                .map(|(_, reads)| reads.len())
                .sum::<usize>()
            + self.confirmed.len()
    }

    /// Drops every read whose ticket no longer waits.
    pub(super) fn retain(&mut self, waits: impl Fn(Ticket) -> bool) {
        self.batch.retain(|r| waits(r.ticket));
        self.rounds.retain(|_, (_, reads)| {
            reads.retain(|r| waits(r.ticket));
            !reads.is_empty()
        });
        self.confirmed.retain(|(_, r)| waits(r.ticket));
    }
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// What the runtime must now be told about serializable ranges (see
    /// [`DirectReads`]), if it changed since it was last told.
    pub(super) fn direct_reads_changed(&mut self) -> Option<DirectReads> {
        let now = DirectReads {
            open: !self.auth.enabled() && !self.poisoned,
            header: ResponseHeader {
                revision: 0,
                ..self.header()
            },
        };
        if now == self.direct_reads {
            return None;
        }
        self.direct_reads = now;
        Some(now)
    }

    pub(super) fn queue_read(&mut self, ticket: Ticket, kind: ReadKind) {
        self.reads.queue(ticket, kind);
    }

    /// Reads that arrived since the last drain share one round.
    pub(super) fn start_read_round(&mut self) {
        let Some((round, context, batch)) = self.reads.next_batch() else {
            return;
        };
        match self.raft.read_index(context) {
            Ok(()) => {
                let leadership = self.leadership();
                self.reads.round_started(round, leadership, batch);
            }
            Err(raft::ReadIndexError::NoLeader) => {
                for read in batch {
                    self.hold_for_leader(read.ticket, Held::Read(read.kind));
                }
            }
            Err(raft::ReadIndexError::TooManyReads) => {
                for read in batch {
                    self.answer(read.ticket, Err(Error::TooManyRequests));
                }
            }
        }
    }

    pub(super) fn read_ready(&mut self, state: ReadState) {
        if !self.reads.confirm(&state.context, state.index) {
            debug!("read index answer for no round of ours");
            return;
        }
        self.release_reads();
    }

    pub(super) fn release_reads(&mut self) {
        for read in self.reads.release(self.meta.applied_index) {
            self.serve_read(read.ticket, read.kind);
        }
    }

    pub(super) fn serve_read(&mut self, ticket: Ticket, kind: ReadKind) {
        match kind {
            ReadKind::Range(request, who) => {
                // Checked at admission, and again here, at the state the
                // read sees: an auth change in between fails it with
                // `revision of auth store is old`, as etcd's does.
                let allowed = self
                    .auth
                    .check(&who, Access::Read, &request.key, &request.range_end);
                if let Err(e) = allowed {
                    return self.answer(ticket, Err(e));
                }
                // Ranges come from clients only.
                if let Some(Origin::Client(id)) = self.requests.take(ticket) {
                    let header = self.header();
                    self.outputs.push_back(Output::Read {
                        id,
                        request,
                        header,
                    });
                }
            }
            ReadKind::Downgrade(target) => self.answer_downgrade_validate(ticket, &target),
            ReadKind::MemberList => {
                let response = MemberListResponse {
                    header: Some(self.header()),
                    members: self.members.list(),
                };
                self.answer(ticket, Ok(Response::MemberList(response)));
            }
            ReadKind::Lease(request) => {
                if self.raft.role() == Role::Leader || matches!(request, Request::LeaseLeases) {
                    self.answer_lease_read(ticket, request);
                } else {
                    self.answer(ticket, Err(Error::LeaderChanged));
                }
            }
            ReadKind::LeaseKeys(response) => self.answer_lease_keys(ticket, response),
            ReadKind::Auth(read) => {
                let header = self.header();
                let answer = self
                    .auth
                    .read(&read)
                    .map(|r| Response::Auth(r.with_header(header)));
                self.answer(ticket, answer);
            }
        }
    }

    /// A lease request this member serves as leader. With
    /// `fast_lease_keep_alive` (etcd 3.7's `FastLeaseKeepAlive`) a
    /// keep-alive for a lease the lessor holds is answered at once; every
    /// other one waits for a read-index round, so that the applied state
    /// covers every lease granted before it arrived.
    pub(super) fn serve_lease_as_leader(&mut self, ticket: Ticket, request: Request) {
        let fast = matches!(&request, Request::LeaseKeepAlive(r)
            if self.config.fast_lease_keep_alive
                && self.raft.role() == Role::Leader
                && self.lessor.contains(r.id));
        if fast {
            self.answer_lease_read(ticket, request);
        } else {
            self.queue_read(ticket, ReadKind::Lease(request));
        }
    }

    pub(super) fn answer_lease_read(&mut self, ticket: Ticket, request: Request) {
        let header = Some(self.header());
        let response = match request {
            Request::LeaseKeepAlive(keep_alive) => {
                let lease_id = keep_alive.id;
                let ttl = match self.lessor.renew(lease_id, self.now) {
                    Renewal::Renewed {
                        ttl_secs,
                        clear_checkpoint,
                    } => {
                        if clear_checkpoint {
                            let checkpoints = vec![LeaseCheckpoint {
                                id: lease_id,
                                remaining_ttl: 0,
                            }];
                            self.propose_internal(proposal::Request::LeaseCheckpoint(
                                LeaseCheckpointRequest { checkpoints },
                            ));
                        }
                        ttl_secs
                    }
                    Renewal::Expiring => {
                        self.parked_renewals
                            .entry(lease_id)
                            .or_default()
                            .push(ticket);
                        return;
                    }
                    Renewal::NotFound => 0,
                };
                Response::LeaseKeepAlive(LeaseKeepAliveResponse {
                    header,
                    id: lease_id,
                    ttl,
                })
            }
            Request::LeaseTimeToLive(query) => {
                let found = self.lessor.time_to_live(query.id, self.now, query.keys);
                Response::LeaseTimeToLive(match found {
                    Some(found) => LeaseTimeToLiveResponse {
                        header,
                        id: query.id,
                        ttl: found.remaining_secs,
                        granted_ttl: found.granted_secs,
                        keys: found.keys,
                    },
                    None => LeaseTimeToLiveResponse {
                        header,
                        id: query.id,
                        ttl: -1,
                        ..Default::default()
                    },
                })
            }
            Request::LeaseLeases => Response::LeaseLeases(LeaseLeasesResponse {
                header,
                leases: self.lessor.statuses(),
            }),
            other => {
                debug!(?other, "not a lease read");
                return;
            }
        };
        self.answer(ticket, Ok(response));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leadership(leader: u64, term: u64) -> Leadership {
        Leadership { leader, term }
    }

    fn tickets(reads: &[PendingRead]) -> Vec<Ticket> {
        reads.iter().map(|r| r.ticket).collect()
    }

    #[test]
    fn a_read_passes_batch_round_confirmation_and_apply() {
        let mut reads = Reads::default();
        assert!(reads.next_batch().is_none());
        reads.queue(1, ReadKind::MemberList);
        reads.queue(2, ReadKind::MemberList);
        let (round, context, batch) = reads.next_batch().expect("a batch");
        assert_eq!(tickets(&batch), [1, 2]);
        assert!(reads.next_batch().is_none(), "the batch is taken once");
        reads.round_started(round, leadership(7, 3), batch);
        assert!(!reads.confirm(b"other", 10), "a foreign context");
        assert!(reads.confirm(&context, 10));
        assert!(!reads.confirm(&context, 10), "a round confirms once");
        assert!(reads.release(9).is_empty());
        assert_eq!(tickets(&reads.release(10)), [1, 2]);
        assert!(reads.release(11).is_empty(), "released once");
    }

    #[test]
    fn a_new_leadership_loses_the_rounds_of_the_old_one() {
        let mut reads = Reads::default();
        reads.queue(1, ReadKind::MemberList);
        let (old, _, batch) = reads.next_batch().expect("a batch");
        reads.round_started(old, leadership(7, 3), batch);
        reads.queue(2, ReadKind::MemberList);
        let (new, _, batch) = reads.next_batch().expect("a batch");
        reads.round_started(new, leadership(8, 4), batch);
        let lost = reads.leadership_changed(Some(leadership(8, 4)));
        assert_eq!(tickets(&lost), [1]);
        assert_eq!(tickets(&reads.leadership_changed(None)), [2]);
    }

    #[test]
    fn expired_tickets_leave_every_stage() {
        let mut reads = Reads::default();
        reads.queue(1, ReadKind::MemberList);
        reads.queue(2, ReadKind::MemberList);
        let (round, context, batch) = reads.next_batch().expect("a batch");
        reads.round_started(round, leadership(1, 1), batch);
        reads.queue(3, ReadKind::MemberList);
        reads.confirmed_at(
            5,
            PendingRead {
                ticket: 4,
                kind: ReadKind::MemberList,
            },
        );
        reads.retain(|t| t % 2 == 1);
        assert!(reads.confirm(&context, 5));
        assert_eq!(tickets(&reads.release(5)), [1]);
        let (_, _, batch) = reads.next_batch().expect("ticket 3 still waits");
        assert_eq!(tickets(&batch), [3]);
    }
}
