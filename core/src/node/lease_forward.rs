//! Lease keep-alives, time-to-live queries and member promotes that reach
//! a follower.
//!
//! A promote goes to the leader as well: only the leader knows whether the
//! learner is in sync with it, as in etcd, whose follower forwards the
//! promote over peer HTTP. The leader checks and proposes it as if a client
//! had asked it, and its answer (the member list, or etcd's refusal:
//! member not found, not a learner, not in sync, too few started) goes
//! back to the follower over the same messages as a lease answer.
//!
//! Only the leader knows when leases expire, so a follower forwards these
//! two requests to it, as etcd's followers do over their peer HTTP. Ours go
//! over the raft message stream that already links the members: a
//! `MsgPropose` with no entries whose context is an encoded
//! [`LeaseForward`]. The node takes such messages before its raft sees
//! them (the raft takes proposals only from its own member anyway), so the
//! peer transport needs no new frame. The leader admits a forwarded request
//! like a client's (same read-index round, same deadline, same parking of
//! keep-alives for a lease being revoked) and answers it with a message
//! back; the keep-alive therefore renews on the leader and nowhere else.
//!
//! When the leader changes before it answers, the follower dispatches the
//! request again (to the new leader, or to itself if it now leads), as
//! etcd's follower retries until its request deadline; a keep-alive renews
//! at most once more, which is harmless. A leader that says it no longer
//! leads is waited out the same way. Every forwarded request stays bounded
//! by the follower's request deadline.
//!
//! **Keys of a time-to-live.** A lease may hold very many keys (100,000
//! keys of 100 bytes make 10 MB), more than one peer frame carries, and
//! etcd sets no limit here: its follower reads the leader's whole answer
//! from an HTTP body, and its gRPC answers may be up to 2 GiB. So the
//! leader is never asked for keys. Which keys a lease holds is applied
//! state that every member has, while only the remaining TTL is the
//! leader's. The follower forwards the query without `keys`, and the
//! leader answers with the TTL and its applied index (at or past the read
//! index it confirmed for the query). The follower then lists the keys
//! from its own state once it has applied that far, reusing the
//! read-index queue. The answer is as linearizable as the leader's would
//! be: the keys are read at a point after the query arrived. A lease
//! revoked in between is reported as not found, as it would be at that
//! point. The peer messages stay small whatever the number of keys.
//!
//! This module never reads the clock.

use bytes::Bytes;
use prost::Message as _;
use tracing::debug;

use crate::auth::AuthInfo;

use oxetcd_proto::eraftpb::{ConfChangeType, Message, MessageType};
use oxetcd_proto::etcdserverpb::{LeaseTimeToLiveRequest, LeaseTimeToLiveResponse};
use oxetcd_proto::oxetcdpb::{
    lease_forward, lease_forward_answer, lease_forward_request, LeaseForward, LeaseForwardAnswer,
    LeaseForwardRequest,
};

use super::{Leadership, Node, Origin, PendingRead, ReadKind, Ticket};
use crate::error::Error;
use crate::raft::Role;
use crate::storage::{KvStore, LogStore};
use crate::{Request, Response};

/// Forwarded lease requests a leader holds at once, from all followers
/// together; beyond it they are refused with `etcdserver: too many
/// requests`. Each follower bounds its own client requests too, so this
/// only guards the leader against a flood.
pub(super) const FORWARDED_LEASE_REQUESTS_MAX: usize = 8_192;

/// A lease request this member forwarded, waiting for the leader's answer.
#[derive(Debug)]
pub(super) struct Forwarded {
    pub(super) ticket: Ticket,
    /// Kept to dispatch again when the leader changes, as who asked.
    pub(super) request: Request,
    pub(super) who: AuthInfo,
    /// The leader it went to, and its term then.
    pub(super) leader: Leadership,
}

/// Error codes of a [`LeaseForwardAnswer`]. Only errors a follower acts on
/// differently get their own code.
const ERROR_NOT_LEADER: u32 = 1;
const ERROR_TOO_MANY_REQUESTS: u32 = 2;
const ERROR_TIMEOUT: u32 = 3;
const ERROR_STOPPED: u32 = 4;
const ERROR_MEMBER_NOT_FOUND: u32 = 5;
const ERROR_MEMBER_NOT_LEARNER: u32 = 6;
const ERROR_LEARNER_NOT_READY: u32 = 7;
const ERROR_MEMBER_NOT_ENOUGH_STARTED: u32 = 8;

fn error_code(error: &Error) -> u32 {
    match error {
        Error::NotLeader | Error::LeaderChanged | Error::NoLeader => ERROR_NOT_LEADER,
        Error::TooManyRequests => ERROR_TOO_MANY_REQUESTS,
        Error::Timeout => ERROR_TIMEOUT,
        Error::MemberNotFound => ERROR_MEMBER_NOT_FOUND,
        Error::MemberNotLearner => ERROR_MEMBER_NOT_LEARNER,
        Error::LearnerNotReady => ERROR_LEARNER_NOT_READY,
        Error::MemberNotEnoughStarted => ERROR_MEMBER_NOT_ENOUGH_STARTED,
        _ => ERROR_STOPPED,
    }
}

/// The error a follower answers its client for a leader's error code
/// (`None`: the leader no longer leads; dispatch again).
fn code_error(code: u32) -> Option<Error> {
    Some(match code {
        ERROR_NOT_LEADER => return None,
        ERROR_TOO_MANY_REQUESTS => Error::TooManyRequests,
        ERROR_TIMEOUT => Error::Timeout,
        ERROR_MEMBER_NOT_FOUND => Error::MemberNotFound,
        ERROR_MEMBER_NOT_LEARNER => Error::MemberNotLearner,
        ERROR_LEARNER_NOT_READY => Error::LearnerNotReady,
        ERROR_MEMBER_NOT_ENOUGH_STARTED => Error::MemberNotEnoughStarted,
        _ => Error::Stopped,
    })
}

/// True for a message that carries a lease forward rather than a proposal.
pub(super) fn is_lease_forward(message: &Message) -> bool {
    message.msg_type == MessageType::MsgPropose
        && message.entries.is_empty()
        && !message.context.is_empty()
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// A keep-alive, time-to-live or promote on a follower goes to the
    /// leader (the caller checked that one is known and it is not this
    /// member).
    pub(super) fn forward_lease(
        &mut self,
        ticket: Ticket,
        leader: u64,
        request: Request,
        who: AuthInfo,
    ) {
        let forward_request = match &request {
            Request::LeaseKeepAlive(r) => lease_forward_request::Request::KeepAlive(*r),
            // The keys come from this member's state (see the module docs).
            Request::LeaseTimeToLive(r) => {
                lease_forward_request::Request::TimeToLive(LeaseTimeToLiveRequest {
                    keys: false,
                    ..*r
                })
            }
            Request::MemberPromote(r) => lease_forward_request::Request::MemberPromote(*r),
            other => {
                debug!(?other, "not a forwarded lease request");
                return self.answer(ticket, Err(Error::Unimplemented("this request")));
            }
        };
        self.next_forward += 1;
        let id = self.next_forward;
        let kind = lease_forward::Kind::Request(LeaseForwardRequest {
            id,
            request: Some(forward_request),
        });
        self.send_lease_forward(leader, kind);
        let leader = self.leadership();
        self.forwarded.insert(
            id,
            Forwarded {
                ticket,
                request,
                who,
                leader,
            },
        );
    }

    /// A lease forward from a peer: a request to serve as leader, or the
    /// leader's answer to one of ours.
    pub(super) fn handle_lease_forward(&mut self, message: &Message) {
        if message.to != self.config.member_id || self.members.get(message.from).is_none() {
            debug!(
                from = message.from,
                "lease forward from a non-member; dropped"
            );
            return;
        }
        let forward = match LeaseForward::decode(message.context.as_ref()) {
            Ok(forward) => forward,
            Err(e) => {
                debug!(from = message.from, error = %e, "lease forward does not decode; dropped");
                return;
            }
        };
        match forward.kind {
            Some(lease_forward::Kind::Request(request)) => {
                self.serve_forwarded(message.from, request)
            }
            Some(lease_forward::Kind::Answer(answer)) => {
                self.forward_answered(message.from, answer)
            }
            None => debug!(from = message.from, "empty lease forward; dropped"),
        }
    }

    /// As leader, admits a follower's lease request like a client's.
    fn serve_forwarded(&mut self, from: u64, forwarded: LeaseForwardRequest) {
        let request = match forwarded.request {
            Some(lease_forward_request::Request::KeepAlive(r)) => Request::LeaseKeepAlive(r),
            Some(lease_forward_request::Request::TimeToLive(r)) => Request::LeaseTimeToLive(r),
            Some(lease_forward_request::Request::MemberPromote(r)) => Request::MemberPromote(r),
            None => return debug!(from, "lease forward without a request; dropped"),
        };
        let origin = Origin::Peer {
            member: from,
            forward_id: forwarded.id,
        };
        if self.raft.role() != Role::Leader {
            return self.reply_forwarded(from, forwarded.id, Err(Error::NotLeader));
        }
        if self.requests.forwarded_in() >= FORWARDED_LEASE_REQUESTS_MAX {
            return self.reply_forwarded(from, forwarded.id, Err(Error::TooManyRequests));
        }
        let ticket = self.admit_origin(origin);
        match request {
            Request::MemberPromote(r) => {
                self.member_change(ticket, ConfChangeType::AddNode, r.id, Bytes::new())
            }
            request => self.serve_lease_as_leader(ticket, request),
        }
    }

    /// Sends the answer to a forwarded request back to its follower.
    pub(super) fn reply_forwarded(
        &mut self,
        member: u64,
        forward_id: u64,
        result: Result<Response, Error>,
    ) {
        let result = match result {
            Ok(Response::LeaseKeepAlive(r)) => lease_forward_answer::Result::KeepAlive(r),
            Ok(Response::LeaseTimeToLive(r)) => lease_forward_answer::Result::TimeToLive(r),
            Ok(Response::MemberPromote(r)) => lease_forward_answer::Result::MemberPromote(r),
            Ok(other) => {
                debug!(
                    ?other,
                    "not a lease answer; the follower's request times out"
                );
                return;
            }
            Err(e) => lease_forward_answer::Result::Error(error_code(&e)),
        };
        let kind = lease_forward::Kind::Answer(LeaseForwardAnswer {
            id: forward_id,
            result: Some(result),
            applied_index: self.meta.applied_index,
        });
        self.send_lease_forward(member, kind);
    }

    /// The leader answered one of our forwarded requests.
    fn forward_answered(&mut self, from: u64, answer: LeaseForwardAnswer) {
        let matches = self
            .forwarded
            .get(&answer.id)
            .is_some_and(|f| f.leader.leader == from);
        if !matches {
            // Answered already, expired, or dispatched again elsewhere.
            return;
        }
        let header = Some(self.header());
        let result = match answer.result {
            // etcd fills the header of a forwarded answer on the member
            // the client asked.
            Some(lease_forward_answer::Result::KeepAlive(mut r)) => {
                r.header = header;
                Ok(Response::LeaseKeepAlive(r))
            }
            Some(lease_forward_answer::Result::TimeToLive(mut r)) => {
                r.header = header;
                Ok(Response::LeaseTimeToLive(r))
            }
            Some(lease_forward_answer::Result::MemberPromote(mut r)) => {
                r.header = header;
                Ok(Response::MemberPromote(r))
            }
            // It no longer leads: wait until this member learns who does,
            // then dispatch again (see `redispatch_forwarded`).
            Some(lease_forward_answer::Result::Error(code)) => match code_error(code) {
                Some(e) => Err(e),
                None => return,
            },
            None => Err(Error::Stopped),
        };
        let forwarded = self.forwarded.remove(&answer.id).expect("checked");
        let wants_keys = matches!(forwarded.request, Request::LeaseTimeToLive(r) if r.keys);
        match result {
            // A lease the leader knows: its keys are read here once this
            // member has applied what the leader had.
            Ok(Response::LeaseTimeToLive(response)) if wants_keys && response.ttl != -1 => {
                let read = PendingRead {
                    ticket: forwarded.ticket,
                    kind: ReadKind::LeaseKeys(response),
                };
                self.reads.confirmed_at(answer.applied_index, read);
                self.release_reads();
            }
            result => self.answer(forwarded.ticket, result),
        }
    }

    /// Completes the leader's answer to a forwarded time-to-live with the
    /// lease's keys, read from this member's applied state.
    pub(super) fn answer_lease_keys(
        &mut self,
        ticket: Ticket,
        mut response: LeaseTimeToLiveResponse,
    ) {
        response.header = Some(self.header());
        match self.lessor.keys(response.id) {
            Some(keys) => response.keys = keys,
            // Revoked since the leader answered.
            None => {
                response = LeaseTimeToLiveResponse {
                    header: response.header,
                    id: response.id,
                    ttl: -1,
                    ..Default::default()
                }
            }
        }
        self.answer(ticket, Ok(Response::LeaseTimeToLive(response)));
    }

    /// The leader changed: requests forwarded to another leader (or term)
    /// go out again; a member that now leads serves them itself.
    pub(super) fn redispatch_forwarded(&mut self) {
        let current = self.leadership();
        if current.leader == 0 {
            // Nobody to ask yet; the next change dispatches them.
            return;
        }
        let stale: Vec<u64> = self
            .forwarded
            .iter()
            .filter(|(_, f)| f.leader != current)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            let forwarded = self.forwarded.remove(&id).expect("listed");
            if self.requests.waits(forwarded.ticket) {
                self.dispatch(forwarded.ticket, forwarded.request, forwarded.who);
            }
        }
    }

    fn send_lease_forward(&mut self, to: u64, kind: lease_forward::Kind) {
        let forward = LeaseForward { kind: Some(kind) };
        let message = Message {
            msg_type: MessageType::MsgPropose,
            to,
            from: self.config.member_id,
            term: self.raft.term(),
            context: Bytes::from(forward.encode_to_vec()),
            ..Default::default()
        };
        self.outputs.push_back(super::Output::Send(message));
    }
}
