//! What goes into a node and what comes out: its static configuration,
//! the inputs the runtime feeds it, and the outputs the runtime drains and
//! carries out (see the node's module documentation for the rules).

use std::time::Duration;

use oxetcd_proto::eraftpb::Message;
use oxetcd_proto::etcdserverpb::{RangeRequest, ResponseHeader, WatchRequest, WatchResponse};

use super::RequestId;
use crate::auth::Credentials;
use crate::error::Error;
use crate::lease::LeaseConfig;
use crate::raft::{self, PersistId};
use crate::storage::StorageError;
use crate::watch::{self, CatchUp, StreamId};
use crate::{Request, Response};

/// What a gRPC message may carry beyond the largest request (headers,
/// framing, a response's own fields): etcd's allowance, on top of
/// `--max-request-bytes`, for what it sends and receives.
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// The largest gRPC message for a `--max-request-bytes`: requests are
/// decoded up to it, and the responses of watchers that ask for fragments
/// are split at it, as etcd does both.
pub fn grpc_message_bytes(max_request_bytes: usize) -> usize {
    max_request_bytes.saturating_add(GRPC_OVERHEAD_BYTES)
}

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// This member's ID.
    pub member_id: u64,
    /// The cluster's ID. A member joining an existing cluster starts with 0
    /// until its peers tell it the ID ([`Input::ClusterId`]); a restarted
    /// member finds the one it stored in its log store.
    pub cluster_id: u64,
    /// The client URLs this member publishes (`--advertise-client-urls`).
    pub client_urls: Vec<String>,
    /// The members a new cluster starts with (`--initial-cluster`), this one
    /// included. A data directory written before membership was stored also
    /// takes its membership from here.
    pub initial_members: Vec<InitialMember>,
    /// Whether this member starts a new cluster or joins an existing one
    /// (`--initial-cluster-state`). Only read when the data directory is
    /// empty.
    pub initial_cluster_state: ClusterState,
    /// Proposals larger than this (encoded) are refused (`--max-request-bytes`).
    pub max_request_bytes: usize,
    /// Limits on request shape.
    pub limits: crate::mvcc::Limits,
    /// Seed of the node's RNG (election jitter); same seed, same behaviour.
    pub rng_seed: u64,
    /// Lease timing (minimum TTL, checkpoints).
    pub lease: LeaseConfig,
    /// How often watchers that asked for progress notifications get one.
    pub watch_progress_notify_interval: Duration,
    /// `--election-timeout`.
    pub election_timeout: Duration,
    /// `--heartbeat-interval`.
    pub heartbeat_interval: Duration,
    /// Applied entries between two log compactions (`--snapshot-count`).
    pub snapshot_count: u64,
    /// Entries kept before the applied index at a compaction, so a follower
    /// that lags a little catches up from the log rather than a snapshot
    /// (etcd's `SnapshotCatchUpEntries`).
    pub snapshot_catch_up_entries: u64,
    /// Learners allowed at once (`--max-learners`).
    pub max_learners: usize,
    /// Refuse membership changes that would leave fewer started voters
    /// than a quorum (`--strict-reconfig-check`, on by default).
    pub strict_reconfig_check: bool,
    /// The leader promotes a learner once it is in sync
    /// (`--feature-gates=LearnerAutoPromote=true`, off by default).
    pub learner_auto_promote: bool,
    /// A lease revoke is proposed up to twice the usual gap between the
    /// last and the applied index (`--feature-gates=PriorityRequest=true`,
    /// etcd 3.7's, off by default).
    pub priority_request: bool,
    /// The leader answers a keep-alive for a lease it holds without a
    /// read-index round (`--feature-gates=FastLeaseKeepAlive`, etcd 3.7's,
    /// on by default).
    pub fast_lease_keep_alive: bool,
    /// `--initial-cluster-token`: a member added at run time gets the ID
    /// its peer URLs and this token give, the ID it computes for itself
    /// when it starts with `--initial-cluster-state existing` (there is no
    /// way yet for it to ask the cluster).
    pub cluster_token: String,
    /// A request not answered by then fails with `etcdserver: request timed
    /// out` (etcd: 5 s plus two election timeouts).
    pub request_timeout: Duration,
    /// How long a simple token lives after its last use (`--auth-token-ttl`).
    pub auth_token_ttl: Duration,
    /// The backend quota (`--quota-backend-bytes`).
    pub quota: crate::alarm::Quota,
    /// `--auto-compaction-mode` and `--auto-compaction-retention`.
    pub auto_compaction: crate::compactor::AutoCompaction,
    /// The server version this member runs as and publishes (this
    /// build's, [`crate::version::SERVER_VERSION`], unless a test runs a
    /// member as another version).
    pub server_version: crate::version::Version,
    /// How often the leader checks whether a downgrade is complete
    /// (`--downgrade-check-time`, etcd's default 5s).
    pub downgrade_check_interval: Duration,
}

/// One member of the initial cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialMember {
    /// Its ID (derived from its peer URLs and the cluster token).
    pub id: u64,
    /// Its name (`--initial-cluster name=url`).
    pub name: String,
    /// Its peer URLs.
    pub peer_urls: Vec<String>,
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster from the initial members.
    New,
    /// Join a running cluster: membership comes from its leader.
    Existing,
}

impl Config {
    /// A single-member node named `name` with etcd's default peer URL and
    /// cluster token, so its IDs match a default etcd's.
    pub fn single(name: &str) -> Self {
        let peer_url = "http://localhost:2380";
        let member_id = crate::ids::member_id(&[peer_url], crate::ids::DEFAULT_CLUSTER_TOKEN);
        let election_timeout = Duration::from_millis(1_000);
        Self {
            name: name.to_owned(),
            member_id,
            cluster_id: crate::ids::cluster_id(&[member_id]),
            client_urls: Vec::new(),
            initial_members: vec![InitialMember {
                id: member_id,
                name: name.to_owned(),
                peer_urls: vec![peer_url.to_owned()],
            }],
            initial_cluster_state: ClusterState::New,
            max_request_bytes: 1_572_864,
            limits: crate::mvcc::Limits::default(),
            rng_seed: member_id,
            lease: LeaseConfig::default(),
            watch_progress_notify_interval: watch::PROGRESS_NOTIFY_INTERVAL_DEFAULT,
            election_timeout,
            heartbeat_interval: Duration::from_millis(100),
            snapshot_count: 10_000,
            snapshot_catch_up_entries: 5_000,
            max_learners: 1,
            strict_reconfig_check: true,
            learner_auto_promote: false,
            priority_request: false,
            fast_lease_keep_alive: true,
            cluster_token: crate::ids::DEFAULT_CLUSTER_TOKEN.to_owned(),
            request_timeout: Duration::from_secs(5) + 2 * election_timeout,
            auth_token_ttl: Duration::from_secs(300),
            quota: crate::alarm::Quota::default(),
            auto_compaction: crate::compactor::AutoCompaction::Off,
            server_version: crate::version::SERVER_VERSION,
            downgrade_check_interval: Duration::from_secs(5),
        }
    }

    /// Where a watcher that asked for fragments has its responses split.
    pub fn watch_fragment_bytes(&self) -> usize {
        grpc_message_bytes(self.max_request_bytes)
    }
}

/// An event fed to the node.
#[derive(Clone, Debug)]
pub enum Input {
    /// A client request, with who the client says it is. Every request is
    /// answered exactly once, by `Output::Respond` or (for a range)
    /// `Output::Read`.
    Client(RequestId, Request, Credentials),
    /// A raft message from a peer.
    Peer(Message),
    /// A joining member's peers told it the cluster's ID. It must arrive
    /// before any message from the cluster, so every entry is applied with
    /// it (lease IDs derive from it). A known ID is never replaced; a new
    /// one is stored first (`Output::StoreClusterId`).
    ClusterId {
        /// The ID the peers gave.
        id: u64,
    },
    /// The runtime made the `Output::Persist` with this ID durable (and
    /// every earlier one). Each is answered once, in order.
    Persisted {
        /// The persist's ID.
        id: PersistId,
    },
    /// A snapshot stream from the leader ended and the runtime holds its
    /// data, keyed by the snapshot index in `message` (the `MsgSnapshot` the
    /// leader sent last on the stream). The raft decides whether to install
    /// it; if so, an `Output::Persist` carries its metadata.
    SnapshotReceived {
        /// The message that ended the stream.
        message: Message,
    },
    /// A snapshot stream asked for with `Output::SendSnapshot` ended:
    /// `delivered` if the member got all of it and its final message.
    SnapshotSent {
        /// The member it went to.
        to: u64,
        /// Whether the whole stream arrived.
        delivered: bool,
    },
    /// The runtime could not reach member `to`.
    Unreachable {
        /// The member.
        to: u64,
    },
    /// A request on a client's watch stream (the runtime numbers streams).
    Watch {
        /// The stream it came on.
        stream: StreamId,
        /// Create, cancel or progress.
        request: WatchRequest,
        /// Who the stream's client says it is (a create is checked).
        credentials: Credentials,
    },
    /// A watch stream ended: its watchers go.
    WatchClosed {
        /// The stream.
        stream: StreamId,
    },
    /// The runtime dropped a watcher's events from `from_revision` on,
    /// because its stream's queue was full (see [`crate::watch::StreamGate`]).
    WatchStalled {
        /// The watcher's stream.
        stream: StreamId,
        /// The watcher.
        watch_id: i64,
        /// First revision it was not sent.
        from_revision: i64,
    },
    /// The runtime's log writes fail for want of space (`full`), or
    /// succeed again (`!full`). While full, new client writes are refused
    /// with [`crate::Error::DiskFull`] instead of queueing behind a write
    /// that cannot be made durable; reads are served as usual. The runtime
    /// keeps retrying the failed write and acknowledges it only once it
    /// is durable.
    DiskFull {
        /// Whether the disk is full.
        full: bool,
    },
    /// The runtime delivered an `Output::WatchCatchUp` up to `upto` (see
    /// [`crate::watch::CatchUpOutcome::input`]).
    WatchCaughtUp {
        /// The watcher's stream.
        stream: StreamId,
        /// The watcher.
        watch_id: i64,
        /// Last revision delivered.
        upto: i64,
        /// History was compacted: the watcher was canceled.
        compacted: bool,
    },
}

/// Something the node wants done.
#[derive(Clone, Debug)]
pub enum Output {
    /// Send this raft message to member `message.to`. Loss is tolerated.
    Send(Message),
    /// Make this durable, in this order — install the snapshot (the backend
    /// data received for its index, then [`crate::storage::LogStore::install_snapshot`]),
    /// append the entries, store the hard state — then answer
    /// `Input::Persisted` with its ID. One is outstanding at a time.
    Persist(raft::Persist),
    /// Store the cluster ID the peers gave with
    /// [`LogStore::store_cluster_id`](crate::storage::LogStore::store_cluster_id),
    /// before any later `Persist`: a member with entries from the cluster
    /// always finds the ID at restart.
    StoreClusterId(u64),
    /// The answer to a client request.
    Respond(RequestId, Result<Response, Error>),
    /// A range may now run: everything it must observe is applied. The
    /// runtime runs [`crate::mvcc::range`] on a fresh read snapshot and sets
    /// `header.revision` to the snapshot's revision.
    Read {
        /// The request being answered.
        id: RequestId,
        /// The range to run.
        request: RangeRequest,
        /// Header for the answer, revision to be filled in.
        header: ResponseHeader,
    },
    /// Storage failed. The node is poisoned and answers nothing more; the
    /// runtime must stop the process (a failed fsync is never retried).
    Fatal(StorageError),
    /// A response for a watch stream, in the stream's order. When
    /// `fragment` is set the runtime splits it with
    /// [`crate::watch::fragments`] if it is too large.
    Watch {
        /// The stream.
        stream: StreamId,
        /// The response.
        response: WatchResponse,
        /// The watcher asked for fragmented responses.
        fragment: bool,
    },
    /// Events of applied revisions for watchers of one stream, in the
    /// stream's order (revision order; watch ID order within a revision).
    /// Each becomes one response ([`crate::watch::WatchDelivery::response`]),
    /// fragmented like `Watch` when it asks, or, when several of a
    /// watcher's deliveries wait in the stream at once, part of one
    /// response with the others ([`crate::watch::batch`]).
    WatchEvents {
        /// The stream.
        stream: StreamId,
        /// One per watcher and revision.
        deliveries: Vec<watch::WatchDelivery>,
    },
    /// Send a watcher history from storage with [`crate::watch::catch_up`],
    /// in the stream's order, then answer `Input::WatchCaughtUp`.
    WatchCatchUp(CatchUp),
    /// Stream a snapshot of the backend to member `to`. Take a read view of
    /// the backend before polling the node again: it holds exactly the
    /// state at `message`'s snapshot index. Stream it on its own
    /// connection, then send `message`, then answer `Input::SnapshotSent`.
    /// Heartbeats and appends to others go on meanwhile.
    SendSnapshot {
        /// The member to send to.
        to: u64,
        /// The `MsgSnapshot` that ends the stream.
        message: Message,
    },
    /// The log up to and including `index` is no longer needed: make the
    /// backend durable ([`crate::storage::KvStore::sync`]), then drop the entries with
    /// [`LogStore::compact`]`(index + 1)`.
    CompactLog {
        /// Last index to drop.
        index: u64,
    },
    /// Which serializable ranges the runtime may now answer without the
    /// node. Sent when it changes, before any output queued after the
    /// change: once a client is answered that auth is on, no range slips
    /// past its permission check.
    DirectReads(DirectReads),
}

/// Whether a runtime may answer a serializable range itself, exactly as
/// the node would: check it with [`crate::mvcc::validate_range`], then
/// answer [`crate::mvcc::read`] on a fresh read snapshot with `header`.
/// Only while auth is off, and only for a request without a token (the
/// node refuses a token it does not know, auth on or off); anything else
/// goes through the node. It saves a serializable read the two thread
/// hand-offs to the node and back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectReads {
    /// Serializable ranges may be answered directly.
    pub open: bool,
    /// The answer's header, but for the revision (the snapshot's).
    pub header: ResponseHeader,
}
