//! oxetcd-core: every protocol of oxetcd as one pure state machine.
//!
//! The [`Node`] is driven, it never drives: the runtime feeds it [`Input`]s
//! with the current time, drains [`Output`]s until there are none, and sleeps
//! until [`Node::poll_timeout`] or the next input. This crate never reads the
//! clock, opens a socket or a file, spawns a thread or draws ambient
//! randomness; durable state is reached only through the interfaces in
//! [`storage`].
//!
//! ```
//! use oxetcd_core::memory::{MemoryKv, MemoryLog};
//! use oxetcd_core::storage::LogStore;
//! use oxetcd_core::{Config, Input, Instant, Node, Output, Request};
//! use oxetcd_proto::etcdserverpb::PutRequest;
//!
//! let log = MemoryLog::default();
//! let kv = MemoryKv::default();
//! let mut node = Node::new(Config::single("default"), log.clone(), kv.clone(), Instant::ZERO).unwrap();
//! let put = PutRequest { key: b"foo".to_vec(), value: b"bar".to_vec(), ..Default::default() };
//! node.handle(Instant::ZERO, Input::Client(7, Request::Put(put), Default::default()));
//! let mut answered = false;
//! for _ in 0..10 {
//!     while let Some(output) = node.poll_output() {
//!         match output {
//!             // The runtime makes the write durable, then says so.
//!             Output::Persist(persist) => {
//!                 log.append(&persist.entries, persist.hard_state.as_ref()).unwrap();
//!                 node.handle(Instant::ZERO, Input::Persisted { id: persist.id });
//!             }
//!             Output::Respond(7, Ok(_)) => answered = true,
//!             _ => {}
//!         }
//!     }
//! }
//! assert!(answered);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod alarm;
pub mod auth;
mod canary;
pub mod compactor;
pub mod discovery;
pub mod error;
#[cfg(test)]
mod fuzz_tests;
pub mod ids;
pub mod lease;
pub mod memory;
pub mod mvcc;
mod node;
pub mod raft;
pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod time;
pub mod version;
pub mod watch;

pub use error::{Code, Error};
pub use node::{
    grpc_message_bytes, live_keys, ClusterState, Config, DirectReads, InitialMember, Input, Node,
    NodeMetrics, Output, RequestId, GRPC_OVERHEAD_BYTES,
};
pub use time::{GoDuration, Instant};

use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, DowngradeRequest, DowngradeResponse, LeaseGrantRequest,
    LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, MoveLeaderRequest, MoveLeaderResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, StatusResponse, TxnRequest, TxnResponse,
};

/// A client request the node handles.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// A read, answered by `Output::Read` once the node has applied what it must see.
    Range(RangeRequest),
    /// A write through the log.
    Put(PutRequest),
    /// A write through the log.
    DeleteRange(DeleteRangeRequest),
    /// A write through the log (reads inside run at apply time).
    Txn(TxnRequest),
    /// A write through the log.
    Compact(CompactionRequest),
    /// Maintenance status: answered at once from the node's raft state.
    Status,
    /// A lease grant, through the log.
    LeaseGrant(LeaseGrantRequest),
    /// A lease revoke, through the log; deletes the lease's keys in one
    /// revision.
    LeaseRevoke(LeaseRevokeRequest),
    /// One keep-alive, answered by the leader once it has applied what was
    /// committed (TTL 0 when the lease does not exist, as etcd answers).
    LeaseKeepAlive(LeaseKeepAliveRequest),
    /// A lease's remaining TTL (-1 when it does not exist, as etcd answers).
    LeaseTimeToLive(LeaseTimeToLiveRequest),
    /// Every lease.
    LeaseLeases,
    /// Adds a member (voter or learner), through the log.
    MemberAdd(MemberAddRequest),
    /// Removes a member, through the log.
    MemberRemove(MemberRemoveRequest),
    /// Changes a member's peer URLs, through the log.
    MemberUpdate(MemberUpdateRequest),
    /// Promotes a caught-up learner to voter, through the log.
    MemberPromote(MemberPromoteRequest),
    /// Every member (after a read barrier when `linearizable`).
    MemberList(MemberListRequest),
    /// Hands leadership to another voter; answered once it leads.
    MoveLeader(MoveLeaderRequest),
    /// A change to users, roles or permissions (through the log), or a
    /// read of them (after a read barrier).
    Auth(auth::AuthRequest),
    /// Lists, raises or clears alarms, through the log (as etcd's
    /// `Maintenance.Alarm`). The server raises CORRUPT with it too.
    Alarm(AlarmRequest),
    /// Validates, enables or cancels a downgrade (`Maintenance.Downgrade`):
    /// validation after a read barrier, enable and cancel through the log.
    Downgrade(DowngradeRequest),
}

/// A write as the log carries it: the one form a write has from
/// admission to apply.
pub use oxetcd_proto::oxetcdpb::proposal::Request as Write;

impl Request {
    /// The write this request is, as the log carries it; any other
    /// request comes back as it is. Membership changes other than an
    /// update travel as raft configuration changes, not as writes.
    pub fn into_write(self) -> Result<Write, Self> {
        Ok(match self {
            Self::Put(r) => Write::Put(r),
            Self::DeleteRange(r) => Write::DeleteRange(r),
            Self::Txn(r) => Write::Txn(r),
            Self::Compact(r) => Write::Compaction(r),
            Self::LeaseGrant(r) => Write::LeaseGrant(r),
            Self::LeaseRevoke(r) => Write::LeaseRevoke(r),
            Self::MemberUpdate(r) => Write::MemberUpdate(r),
            Self::Alarm(r) => Write::Alarm(r),
            Self::Auth(auth::AuthRequest::Change(change)) => {
                Write::Auth(oxetcd_proto::oxetcdpb::AuthChange {
                    change: Some(change),
                })
            }
            other => return Err(other),
        })
    }
}

/// The node's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// Answer to a range (produced by [`mvcc::range`], not by the node).
    Range(RangeResponse),
    /// Answer to a put.
    Put(PutResponse),
    /// Answer to a delete range.
    DeleteRange(DeleteRangeResponse),
    /// Answer to a txn.
    Txn(TxnResponse),
    /// Answer to a compaction.
    Compact(CompactionResponse),
    /// Raft fields of a status answer; the server adds version and sizes.
    Status(StatusResponse),
    /// Answer to a lease grant.
    LeaseGrant(LeaseGrantResponse),
    /// Answer to a lease revoke.
    LeaseRevoke(LeaseRevokeResponse),
    /// Answer to one keep-alive.
    LeaseKeepAlive(LeaseKeepAliveResponse),
    /// Answer to a time-to-live query.
    LeaseTimeToLive(LeaseTimeToLiveResponse),
    /// Answer to a lease listing.
    LeaseLeases(LeaseLeasesResponse),
    /// Answer to a member add.
    MemberAdd(MemberAddResponse),
    /// Answer to a member remove.
    MemberRemove(MemberRemoveResponse),
    /// Answer to a member update.
    MemberUpdate(MemberUpdateResponse),
    /// Answer to a member promote.
    MemberPromote(MemberPromoteResponse),
    /// Answer to a member list.
    MemberList(MemberListResponse),
    /// Answer to a leader transfer.
    MoveLeader(MoveLeaderResponse),
    /// Answer to an auth request.
    Auth(auth::AuthResponse),
    /// Answer to an alarm request.
    Alarm(AlarmResponse),
    /// Answer to a downgrade request.
    Downgrade(DowngradeResponse),
}
