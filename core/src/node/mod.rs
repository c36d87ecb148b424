//! The node: one member's consensus, apply and request bookkeeping.
//!
//! Design. Consensus is [`crate::raft::Raft`]; the node turns client
//! requests into raft proposals and read-index rounds, applies what the raft
//! hands out, and answers clients once their entry is applied. A write on
//! the leader is proposed there; a write on a follower is forwarded to the
//! leader as a raft `MsgPropose` carrying the encoded proposal (as etcd's
//! raft forwards proposals), and the follower answers its client when it
//! applies the entry itself: every proposal carries an ID unique to its
//! proposer, so each member recognises its own entries in the log. Entries
//! leave as one `Output::Persist` at a time (the raft's rule), so writes
//! that arrive while an fsync is in flight ride the next one (group commit).
//!
//! Reads. A linearizable read (and a lease query, and a linearizable member
//! list) waits for a ReadIndex round: reads that arrive between two drains
//! share one round. Once the raft confirms an index and the apply step
//! reaches it, a range is handed back to the runtime to run on a read
//! snapshot, so reads never queue behind the apply step. Serializable reads
//! run at once on the local state.
//!
//! Leadership. Requests that need a leader while none is known wait for one
//! at most an election timeout, then fail with `etcdserver: no leader`. When
//! the leader changes, requests whose outcome this member can no longer
//! learn (forwarded proposals, uncommitted proposals of an old leader, reads
//! waiting for a round) fail with `etcdserver: leader changed` instead of
//! hanging; every waiting request fails with `etcdserver: request timed out`
//! after [`Config::request_timeout`]. Lease expiry is the leader's alone:
//! the lessor is promoted when this member becomes leader and demoted when
//! it stops; followers forward keep-alives and time-to-live queries to the
//! leader ([`lease_forward`]). Learners answer status and serializable ranges only, as etcd's.
//!
//! Membership. Member add, remove and promote become raft membership
//! entries whose context carries the member's record; a peer URL update is
//! a normal entry. Once a leader is known, a member publishes its own name
//! and client URLs through the log (as etcd's publish after start), again
//! every election timeout until its record shows them. A member that
//! applies its own removal reports it ([`Node::is_removed`]); the runtime
//! stops it. The list of members ([`membership`]) and the raft
//! configuration are stored in the backend with the applied index, in the
//! same transaction. A new cluster is bootstrapped from the configured
//! initial members; a data directory written before membership was stored
//! takes its membership from the configuration.
//!
//! Snapshots and compaction. Every [`Config::snapshot_count`] applied
//! entries the log is compacted, keeping [`Config::snapshot_catch_up_entries`]
//! for slow followers (`Output::CompactLog`). A follower that needs compacted
//! entries gets a snapshot of the backend (`Output::SendSnapshot` on the
//! leader, `Input::SnapshotReceived` on the follower, installed with the
//! `Output::Persist` that carries its metadata).
//!
//! Leases and watches hang off the apply step: every applied write moves
//! keys between leases ([`crate::lease`]) and is matched against the synced
//! watchers ([`crate::watch`]) on every member.
//!
//! This module never reads the clock and never touches storage except
//! through the traits in [`crate::storage`].

mod apply;
mod lease_forward;
mod membership;
mod proposals;
mod publication;
mod reads;
mod requests;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use hashbrown::HashMap;
use prost::Message as _;
use protobuf::Message as _;
use tracing::{debug, info, warn};

use oxetcd_proto::eraftpb::{
    ConfChange, ConfChangeType, Entry, EntryType, Message, MessageType, SnapshotMetadata,
};
use oxetcd_proto::etcdserverpb::{
    LeaseCheckpoint, LeaseCheckpointRequest, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseTimeToLiveResponse, Member, MemberAddRequest, MemberAddResponse,
    MemberListResponse, MemberPromoteResponse, MemberRemoveResponse, MemberUpdateResponse,
    MoveLeaderResponse, RangeRequest, ResponseHeader, StatusResponse, WatchRequest, WatchResponse,
};
use oxetcd_proto::oxetcdpb::{proposal, MemberAttributes, Proposal};

use self::apply::{apply_proposal, stamp, ApplyContext};
use self::lease_forward::{is_lease_forward, Forwarded};
use self::membership::{enough_started, Members};
use self::proposals::Proposals;
use self::publication::{Publication, Step};
use self::reads::{PendingRead, ReadKind, Reads};
use self::requests::{Leaderless, Requests};
use crate::error::Error;
use crate::lease::{LeaseConfig, Lessor, Renewal};
use crate::mvcc;
use crate::raft::{self, Action, DurableState, PersistId, ProposeError, Raft, ReadState, Role};
use crate::storage::{KvMeta, KvRead, KvStore, KvWrite, LogStore, Membership, StorageError};
use crate::watch::{self, CatchUp, StreamId, WatchRegistry};
use crate::{Instant, Request, Response};

/// Identifies a client request; chosen by the runtime, echoed in `Respond`.
pub type RequestId = u64;

/// Proposals allowed between the applied index and the last index before
/// new writes are refused with `etcdserver: too many requests`: etcd's gap
/// between commit and apply.
const UNAPPLIED_ENTRIES_MAX: u64 = 5_000;

/// Requests held while no leader is known, at most; beyond it they fail at
/// once with `etcdserver: no leader`. Each holds a decoded request, so the
/// bound is the runtime's own in-flight bound.
const LEADERLESS_REQUESTS_MAX: usize = 8_192;

/// A learner may be promoted once its log holds this share of the leader's
/// (etcd's `readyPercent`).
const LEARNER_READY_PERCENT: u64 = 90;

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// This member's ID.
    pub member_id: u64,
    /// The cluster's ID. A member joining an existing cluster starts with 0
    /// until its peers tell it the ID ([`Node::set_cluster_id`]).
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
    /// `--initial-cluster-token`: a member added at run time gets the ID
    /// its peer URLs and this token give, the ID it computes for itself
    /// when it starts with `--initial-cluster-state existing` (there is no
    /// way yet for it to ask the cluster).
    pub cluster_token: String,
    /// A request not answered by then fails with `etcdserver: request timed
    /// out` (etcd: 5 s plus two election timeouts).
    pub request_timeout: Duration,
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
            cluster_token: crate::ids::DEFAULT_CLUSTER_TOKEN.to_owned(),
            request_timeout: Duration::from_secs(5) + 2 * election_timeout,
        }
    }
}

/// An event fed to the node.
#[derive(Clone, Debug)]
pub enum Input {
    /// A client request. Every request is answered exactly once, by
    /// `Output::Respond` or (for a range) `Output::Read`.
    Client(RequestId, Request),
    /// A raft message from a peer.
    Peer(Message),
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
    /// data received for its index, then [`LogStore::install_snapshot`]),
    /// append the entries, store the hard state — then answer
    /// `Input::Persisted` with its ID. One is outstanding at a time.
    Persist(raft::Persist),
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
    /// fragmented like `Watch` when it asks.
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
    /// backend durable ([`KvStore::sync`]), then drop the entries with
    /// [`LogStore::compact`]`(index + 1)`.
    CompactLog {
        /// Last index to drop.
        index: u64,
    },
}

/// Numbers the requests the node holds; unlike a [`RequestId`] it is never
/// reused, so a late answer can never reach a newer request.
type Ticket = u64;

/// Who waits for a request's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A client of this member's runtime.
    Client(RequestId),
    /// A follower that forwarded a lease request to this leader.
    Peer { member: u64, forward_id: u64 },
}

/// One member of an oxetcd cluster, as a state machine.
pub struct Node<L: LogStore, K: KvStore> {
    config: Config,
    raft: Raft<L>,
    kv: K,
    /// The backend's meta as of the last apply.
    meta: KvMeta,
    members: Members,
    /// The membership must be written with the next apply (it came from
    /// the configuration, not from the backend).
    membership_unsaved: bool,
    /// The raft configuration has exactly one voter: this member.
    sole_voter: bool,
    /// Requests waiting for an answer, with their deadlines.
    requests: Requests,
    /// Lease requests this member forwarded to the leader, by forward ID.
    forwarded: HashMap<u64, Forwarded>,
    next_forward: u64,
    /// Proposals of this member not yet applied.
    proposals: Proposals,
    /// Requests waiting for a leader.
    leaderless: Leaderless,
    /// Reads waiting for a read index or for the apply step.
    reads: Reads,
    /// Leader transfers waiting for the new leader: (ticket, target).
    move_leaders: Vec<(Ticket, u64)>,
    /// The write that installs a snapshot, until it is durable.
    restoring: Option<PersistId>,
    /// The applied index at the last log compaction.
    compacted_at: u64,
    /// The role, term and leader last reported by the raft.
    role: Role,
    leader: Option<u64>,
    outputs: VecDeque<Output>,
    /// Set after a storage error: nothing more is done.
    poisoned: bool,
    /// The latest time an input brought.
    now: Instant,
    /// Leases and their attached keys.
    lessor: Lessor,
    /// Every watcher.
    watches: WatchRegistry,
    /// Keep-alives of expired leases, answered once the revoke applies.
    parked_renewals: HashMap<i64, Vec<Ticket>>,
    /// This member's name and client URLs on their way to the membership.
    publication: Publication,
    /// This member applied its own removal.
    removed: bool,
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Starts a node on what `log` and `kv` hold. Entries the backend has
    /// not applied are applied again as the raft hands them out. An empty
    /// member of a new cluster bootstraps it from the initial members.
    pub fn new(config: Config, log: L, kv: K, now: Instant) -> Result<Self, Error> {
        let state = log.state()?;
        let view = kv.read()?;
        let meta = view.meta()?;
        let meta = KvMeta {
            revision: meta.revision.max(1),
            ..meta
        };
        if meta.applied_index > state.last_index {
            return Err(Error::Storage(StorageError::new(format!(
                "backend applied index {} is past the last log index {}",
                meta.applied_index, state.last_index
            ))));
        }
        if state.first_index > meta.applied_index + 1 {
            return Err(Error::Storage(StorageError::new(format!(
                "log starts at {} but the backend has applied only up to {}",
                state.first_index, meta.applied_index
            ))));
        }
        let fresh = state.last_index == 0 && state.hard_state.term == 0;
        let initial_voters: Vec<u64> = config.initial_members.iter().map(|m| m.id).collect();
        let (conf_state, members, membership_unsaved) = match view.membership()? {
            Some(stored) => (stored.conf_state, Members::from_list(stored.members), false),
            None if fresh => Default::default(),
            None => {
                // Written before membership was stored: a single member
                // whose flags say who it is.
                let conf_state = oxetcd_proto::eraftpb::ConfState {
                    voters: initial_voters.clone(),
                    ..Default::default()
                };
                let members = Members::from_initial(&config.initial_members);
                (conf_state, members, true)
            }
        };
        let lessor = Lessor::recover(config.lease, &view)?;
        drop(view);
        let durable = DurableState {
            hard_state: state.hard_state.clone(),
            conf_state,
            applied: meta.applied_index,
            snapshot_index: state.first_index - 1,
            snapshot_term: state.snapshot_term,
            last_index: state.last_index,
        };
        let raft_config = raft::Config {
            election_timeout: config.election_timeout,
            heartbeat_interval: config.heartbeat_interval,
            rng_seed: config.rng_seed,
            ..raft::Config::new(config.member_id)
        };
        let mut raft = Raft::new(raft_config, durable, log, now)
            .map_err(|e| Error::Storage(StorageError::new(e)))?;
        if fresh && config.initial_cluster_state == ClusterState::New {
            raft.bootstrap(&initial_voters, &[])
                .map_err(|e| Error::Storage(StorageError::new(e)))?;
            info!(
                member_id = %format_args!("{:x}", config.member_id),
                members = initial_voters.len(),
                "bootstrapped a new cluster"
            );
        }
        let proposal_base = mix(&[
            config.member_id,
            state.hard_state.term,
            state.hard_state.commit,
            state.last_index,
            meta.applied_index,
        ]);
        let watches = WatchRegistry::new(config.watch_progress_notify_interval);
        let mut node = Self {
            sole_voter: false,
            raft,
            kv,
            meta,
            members,
            membership_unsaved,
            requests: Requests::default(),
            forwarded: HashMap::new(),
            next_forward: 0,
            proposals: Proposals::new(proposal_base),
            leaderless: Leaderless::default(),
            reads: Reads::default(),
            move_leaders: Vec::new(),
            restoring: None,
            compacted_at: state.first_index - 1,
            role: Role::Follower,
            leader: None,
            outputs: VecDeque::new(),
            poisoned: false,
            now,
            lessor,
            watches,
            parked_renewals: HashMap::new(),
            publication: Publication::default(),
            removed: false,
            config,
        };
        node.update_sole_voter();
        Ok(node)
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) {
        self.now = self.now.max(now);
        if self.poisoned {
            if let Input::Client(id, _) = input {
                self.outputs
                    .push_back(Output::Respond(id, Err(Error::Stopped)));
            }
            return;
        }
        match input {
            Input::Client(id, request) => {
                let ticket = self.admit(id);
                self.dispatch(ticket, request);
            }
            Input::Peer(message) => self.handle_peer(message),
            Input::Persisted { id } => self.handle_persisted(id),
            Input::SnapshotReceived { message } => self.raft.step(self.now, message),
            Input::SnapshotSent { to, delivered } => self.raft.report_snapshot(to, delivered),
            Input::Unreachable { to } => self.raft.report_unreachable(to),
            Input::Watch { stream, request } => {
                self.with_watches(|watches, cx| watches.handle_request(stream, request, cx));
            }
            Input::WatchClosed { stream } => self.watches.handle_closed(stream),
            Input::WatchStalled {
                stream,
                watch_id,
                from_revision,
            } => {
                self.with_watches(|watches, cx| {
                    watches.handle_stalled(stream, watch_id, from_revision, cx)
                });
            }
            Input::WatchCaughtUp {
                stream,
                watch_id,
                upto,
                compacted,
            } => {
                self.with_watches(|watches, cx| {
                    watches.handle_caught_up(stream, watch_id, upto, compacted, cx)
                });
            }
        }
    }

    /// The next thing to do, if any. Drain until `None` after every input.
    pub fn poll_output(&mut self) -> Option<Output> {
        loop {
            if let Some(output) = self.outputs.pop_front() {
                return Some(output);
            }
            if self.poisoned {
                return None;
            }
            self.start_read_round();
            self.campaign_if_alone();
            self.maybe_publish();
            let action = self.raft.poll_action()?;
            self.handle_action(action);
        }
    }

    /// When the node next needs [`Node::handle_timeout`], if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.poisoned {
            return None;
        }
        [
            self.raft.poll_timeout(),
            self.lessor.poll_timeout(),
            self.watches.poll_timeout(),
            self.requests.poll_timeout(),
            self.leaderless.poll_timeout(),
            self.publication.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Lets timers fire whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.poisoned {
            return;
        }
        self.raft.handle_timeout(self.now);
        self.handle_lease_timers();
        self.expire_requests();
        self.with_watches(|watches, cx| watches.handle_timeout(cx));
    }

    /// Runs `f` on the watch registry with what a watch operation needs
    /// from the node: the time, a header at the current revision, and the
    /// output queue.
    fn with_watches(&mut self, f: impl FnOnce(&mut WatchRegistry, &mut watch::Context<'_>)) {
        let mut cx = watch::Context {
            now: self.now,
            header: self.header(),
            outputs: &mut self.outputs,
        };
        f(&mut self.watches, &mut cx);
    }

    /// Before a graceful stop: a leader hands leadership to the most
    /// caught-up voter (`MsgTimeoutNow`). Returns the member it hands to;
    /// the runtime then drains and waits (bounded) until
    /// [`Node::leader`] is no longer this member.
    pub fn transfer_leadership_for_shutdown(&mut self, now: Instant) -> Option<u64> {
        self.now = self.now.max(now);
        let to = self.raft.most_caught_up_voter()?;
        self.raft.transfer_leader(self.now, to).ok()?;
        Some(to)
    }

    /// True once this member applied its own removal from the cluster:
    /// the runtime should stop it (etcd exits such a member).
    pub fn is_removed(&self) -> bool {
        // A member re-added under the same ID (IDs come from peer URLs)
        // replays its old removal while catching up: only a removal that
        // still holds once everything committed is applied counts.
        self.removed
            && self.members.get(self.config.member_id).is_none()
            && self.meta.applied_index >= self.raft.committed()
    }

    /// True once this member is ready to serve as etcd means it: it knows
    /// a leader, has applied an entry of the leader's term (so what it
    /// serves is current), and its own name and client URLs are applied
    /// in the membership. The runtime logs the readiness lines and starts
    /// serving clients then.
    pub fn is_ready(&self) -> bool {
        let applied = self.meta.applied_index;
        self.publication.is_published()
            && self.raft.leader().is_some()
            && self.raft.log_term(applied) == Some(self.raft.term())
    }

    /// This member's ID.
    pub fn member_id(&self) -> u64 {
        self.config.member_id
    }

    /// The cluster's ID; 0 while a member joining an existing cluster has
    /// not learned it yet.
    pub fn cluster_id(&self) -> u64 {
        self.config.cluster_id
    }

    /// Sets the cluster ID a joining member learned from its peers (see
    /// [`Config::cluster_id`]); the caller stores it. It must arrive before
    /// any message from the cluster, so every entry is applied with it
    /// (lease IDs derive from the cluster ID). A known ID is never replaced.
    pub fn set_cluster_id(&mut self, cluster_id: u64) {
        if self.config.cluster_id != 0 || cluster_id == 0 {
            if self.config.cluster_id != cluster_id {
                warn!(
                    known = %format_args!("{:x}", self.config.cluster_id),
                    offered = %format_args!("{cluster_id:x}"),
                    "ignoring another cluster ID"
                );
            }
            return;
        }
        info!(cluster_id = %format_args!("{cluster_id:x}"), "learned the cluster ID from a peer");
        self.config.cluster_id = cluster_id;
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.meta.applied_index
    }

    /// The leader as this member knows it.
    pub fn leader(&self) -> Option<u64> {
        self.raft.leader()
    }

    /// This member's raft role.
    pub fn role(&self) -> Role {
        self.raft.role()
    }

    /// The current raft term.
    pub fn term(&self) -> u64 {
        self.raft.term()
    }

    /// True if this member is a learner.
    pub fn is_learner(&self) -> bool {
        !self.raft.is_voter() && self.members.is_learner(self.config.member_id)
    }

    /// Every member, as this member knows the list.
    pub fn members(&self) -> Vec<Member> {
        self.members.list()
    }

    // ----- requests -----------------------------------------------------

    /// Starts waiting for a request: it is answered once, by ticket.
    fn admit(&mut self, id: RequestId) -> Ticket {
        self.admit_origin(Origin::Client(id))
    }

    fn admit_origin(&mut self, origin: Origin) -> Ticket {
        let deadline = self.now + self.config.request_timeout;
        self.requests.admit(origin, deadline)
    }

    /// Answers the request behind `ticket`, unless it was answered already
    /// (it timed out, for one).
    fn answer(&mut self, ticket: Ticket, result: Result<Response, Error>) {
        match self.requests.take(ticket) {
            Some(Origin::Client(id)) => self.outputs.push_back(Output::Respond(id, result)),
            Some(Origin::Peer { member, forward_id }) => {
                self.reply_forwarded(member, forward_id, result);
            }
            None => {}
        }
    }

    fn dispatch(&mut self, ticket: Ticket, request: Request) {
        if let Err(e) = mvcc::validate(&request, &self.config.limits) {
            return self.answer(ticket, Err(e));
        }
        // Learners answer status and serializable ranges only, as etcd's.
        let learner_may = matches!(&request, Request::Status)
            || matches!(&request, Request::Range(r) if r.serializable);
        if !learner_may && self.is_learner() {
            return self.answer(ticket, Err(Error::NotSupportedForLearner));
        }
        let write = match request {
            Request::Status => {
                let status = self.status();
                return self.answer(ticket, Ok(Response::Status(status)));
            }
            Request::Range(range) if range.serializable => {
                return self.serve_read(ticket, ReadKind::Range(range));
            }
            Request::MemberList(list) if !list.linearizable => {
                return self.serve_read(ticket, ReadKind::MemberList);
            }
            Request::Put(r) => proposal::Request::Put(r),
            Request::DeleteRange(r) => proposal::Request::DeleteRange(r),
            Request::Txn(r) => proposal::Request::Txn(r),
            Request::Compact(r) => proposal::Request::Compaction(r),
            Request::LeaseGrant(r) => proposal::Request::LeaseGrant(r),
            Request::LeaseRevoke(r) => proposal::Request::LeaseRevoke(r),
            Request::MemberUpdate(r) => {
                if let Err(e) = self.members.check_update(&r) {
                    return self.answer(ticket, Err(e));
                }
                proposal::Request::MemberUpdate(r)
            }
            request => {
                if self.raft.leader().is_none() {
                    return self.hold_for_leader(ticket, Held::Request(request));
                }
                return match request {
                    Request::Range(range) => self.queue_read(ticket, ReadKind::Range(range)),
                    Request::MemberList(_) => self.queue_read(ticket, ReadKind::MemberList),
                    // Every member knows which leases exist (etcd lists
                    // them on the member asked, too).
                    Request::LeaseLeases => {
                        self.queue_read(ticket, ReadKind::Lease(Request::LeaseLeases))
                    }
                    request @ (Request::LeaseKeepAlive(_) | Request::LeaseTimeToLive(_)) => {
                        // Only the leader knows when leases expire.
                        match self.raft.leader() {
                            Some(leader) if leader != self.config.member_id => {
                                self.forward_lease(ticket, leader, request)
                            }
                            _ => self.queue_read(ticket, ReadKind::Lease(request)),
                        }
                    }
                    Request::MemberAdd(r) => self.member_add(ticket, r),
                    Request::MemberRemove(r) => {
                        self.member_change(ticket, ConfChangeType::RemoveNode, r.id, Bytes::new())
                    }
                    Request::MemberPromote(r) => {
                        self.member_change(ticket, ConfChangeType::AddNode, r.id, Bytes::new())
                    }
                    Request::MoveLeader(r) => self.move_leader(ticket, r.target_id),
                    other => {
                        debug!(?other, "request kind not dispatched");
                        self.answer(ticket, Err(Error::Unimplemented("this request")))
                    }
                };
            }
        };
        let proposal = Proposal {
            id: self.next_proposal_id(),
            request: Some(write),
        };
        let data = proposal.encode_to_vec();
        if data.len() > self.config.max_request_bytes {
            return self.answer(ticket, Err(Error::RequestTooLarge));
        }
        self.propose(
            ticket,
            proposal.id,
            EntryType::EntryNormal,
            Bytes::from(data),
        );
    }

    fn next_proposal_id(&mut self) -> u64 {
        self.proposals.next_id()
    }

    /// Proposes an entry on the leader, or forwards it to the leader.
    fn propose(&mut self, ticket: Ticket, proposal_id: u64, entry_type: EntryType, data: Bytes) {
        let Some(leader) = self.raft.leader() else {
            // Keep the encoded request: it goes out once a leader is known.
            return self.hold_entry(ticket, proposal_id, entry_type, data);
        };
        if leader == self.config.member_id {
            if self.unapplied() >= UNAPPLIED_ENTRIES_MAX {
                return self.answer(ticket, Err(Error::TooManyRequests));
            }
            let proposed = match entry_type {
                EntryType::EntryConfChange => ConfChange::parse_from_bytes(&data)
                    .map_err(|_| ProposeError::InvalidConfChange("does not decode"))
                    .and_then(|cc| self.raft.propose_conf_change(&cc)),
                _ => self.raft.propose(data.clone()),
            };
            match proposed {
                Ok(index) => {
                    let leadership = self.leadership();
                    self.proposals
                        .proposed(proposal_id, ticket, leadership, Some(index), data);
                }
                Err(ProposeError::TransferringLeadership | ProposeError::NotLeader { .. }) => {
                    self.hold_entry(ticket, proposal_id, entry_type, data)
                }
                Err(ProposeError::Busy | ProposeError::ConfChangePending) => {
                    self.answer(ticket, Err(Error::TooManyRequests))
                }
                Err(ProposeError::InvalidConfChange(why)) => {
                    debug!(why, "membership change refused by the raft");
                    self.answer(ticket, Err(Error::MemberNotFound))
                }
            }
            return;
        }
        let mut m = Message {
            msg_type: MessageType::MsgPropose,
            to: leader,
            from: self.config.member_id,
            term: self.raft.term(),
            ..Default::default()
        };
        m.entries = vec![Entry {
            entry_type,
            data: data.clone(),
            ..Default::default()
        }]
        .into();
        self.outputs.push_back(Output::Send(m));
        let leadership = self.leadership();
        self.proposals
            .proposed(proposal_id, ticket, leadership, None, data);
    }

    /// An encoded proposal waits for a leader, as a request that proposes
    /// it again once one is known.
    fn hold_entry(&mut self, ticket: Ticket, proposal_id: u64, entry_type: EntryType, data: Bytes) {
        let held = Held::Entry {
            proposal_id,
            entry_type,
            data,
        };
        self.hold_for_leader(ticket, held);
    }

    fn hold_for_leader(&mut self, ticket: Ticket, held: Held) {
        // An election takes at most about one election timeout.
        let give_up = self.now + self.config.election_timeout;
        let held = self
            .leaderless
            .hold(ticket, held, give_up, LEADERLESS_REQUESTS_MAX);
        if held.is_err() {
            self.answer(ticket, Err(Error::NoLeader));
        }
    }

    /// A leader is known: the requests held for one go on.
    fn release_leaderless(&mut self) {
        for (ticket, held) in self.leaderless.release() {
            if !self.requests.waits(ticket) {
                continue;
            }
            match held {
                Held::Request(request) => self.dispatch(ticket, request),
                Held::Entry {
                    proposal_id,
                    entry_type,
                    data,
                } => self.propose(ticket, proposal_id, entry_type, data),
                Held::Read(kind) => self.queue_read(ticket, kind),
            }
        }
    }

    fn unapplied(&self) -> u64 {
        self.raft
            .last_index()
            .saturating_sub(self.meta.applied_index)
    }

    fn member_add(&mut self, ticket: Ticket, request: MemberAddRequest) {
        if let Err(e) = self.members.check_add(&request, self.config.max_learners) {
            return self.answer(ticket, Err(e));
        }
        // etcd salts a new member's ID with the time and the new member
        // learns it from the cluster. Ours cannot ask yet, so the ID is the
        // one it derives itself: its peer URLs and the cluster token.
        let urls: Vec<&str> = request.peer_ur_ls.iter().map(String::as_str).collect();
        let id = crate::ids::member_id(&urls, &self.config.cluster_token);
        if self.members.get(id).is_some() {
            return self.answer(ticket, Err(Error::MemberExists));
        }
        let record = Member {
            id,
            name: String::new(),
            peer_ur_ls: request.peer_ur_ls.clone(),
            client_ur_ls: Vec::new(),
            is_learner: request.is_learner,
        };
        let change = if request.is_learner {
            ConfChangeType::AddLearnerNode
        } else {
            ConfChangeType::AddNode
        };
        self.member_change(ticket, change, id, Bytes::from(record.encode_to_vec()));
    }

    /// Proposes a membership change after etcd's checks.
    fn member_change(&mut self, ticket: Ticket, change: ConfChangeType, id: u64, context: Bytes) {
        let adding = change != ConfChangeType::RemoveNode && !context.is_empty();
        let checked = match change {
            ConfChangeType::RemoveNode => self.members.check_remove(id),
            ConfChangeType::AddNode if !adding => self.members.check_promote(id),
            _ => Ok(()),
        };
        if let Err(e) = checked.and_then(|()| self.check_quorum_safe(change, id, adding)) {
            return self.answer(ticket, Err(e));
        }
        let cc = ConfChange {
            id: self.next_proposal_id(),
            change_type: change,
            node_id: id,
            context,
            ..Default::default()
        };
        let data = match cc.write_to_bytes() {
            Ok(data) => Bytes::from(data),
            Err(e) => {
                warn!(error = %e, "membership change does not encode");
                return self.answer(ticket, Err(Error::Stopped));
            }
        };
        self.propose(ticket, cc.id, EntryType::EntryConfChange, data);
    }

    /// etcd's strict reconfiguration checks, which need the leader's view
    /// of who is running (a follower forwards and lets the leader decide).
    fn check_quorum_safe(
        &self,
        change: ConfChangeType,
        id: u64,
        adding: bool,
    ) -> Result<(), Error> {
        if self.raft.role() != Role::Leader {
            return Ok(());
        }
        let conf = self.raft.conf_state();
        let started = |voter: &u64| {
            *voter == self.config.member_id
                || self.raft.progress(*voter).is_some_and(|p| {
                    p.last_heard().is_some_and(|t| {
                        self.now.saturating_since(t) < self.config.election_timeout
                    })
                })
        };
        let voters = conf.voters.len();
        let running = conf.voters.iter().filter(|v| started(v)).count();
        match change {
            ConfChangeType::AddNode if adding => {
                // Adding a second member to a lone one is allowed (etcd's
                // exception for restoring a cluster).
                let lone = running == 1 && voters == 1;
                if !lone && !enough_started(voters + 1, running) {
                    return Err(Error::MemberNotEnoughStarted);
                }
            }
            ConfChangeType::AddNode => {
                let leader_match = self
                    .raft
                    .progress(self.config.member_id)
                    .map_or(0, |p| p.matched());
                let learner_match = self.raft.progress(id).map_or(0, |p| p.matched());
                if learner_match * 100 < leader_match * LEARNER_READY_PERCENT {
                    return Err(Error::LearnerNotReady);
                }
                // The learner counts as running once promoted.
                if !enough_started(voters + 1, running + 1) {
                    return Err(Error::MemberNotEnoughStarted);
                }
            }
            ConfChangeType::RemoveNode => {
                if conf.voters.contains(&id) {
                    let running_after = conf
                        .voters
                        .iter()
                        .filter(|v| **v != id && started(v))
                        .count();
                    if !enough_started(voters - 1, running_after) {
                        return Err(Error::MemberNotEnoughStarted);
                    }
                }
            }
            ConfChangeType::AddLearnerNode => {}
        }
        Ok(())
    }

    fn move_leader(&mut self, ticket: Ticket, target: u64) {
        if self.raft.role() != Role::Leader {
            return self.answer(ticket, Err(Error::NotLeader));
        }
        if target == self.config.member_id {
            let response = MoveLeaderResponse {
                header: Some(self.header()),
            };
            return self.answer(ticket, Ok(Response::MoveLeader(response)));
        }
        match self.raft.transfer_leader(self.now, target) {
            Ok(()) => self.move_leaders.push((ticket, target)),
            Err(_) => self.answer(ticket, Err(Error::BadLeaderTransferee)),
        }
    }

    /// A peer's message. Forwarded proposals are the node's business (the
    /// raft takes proposals only from its own member); everything else is
    /// the raft's.
    fn handle_peer(&mut self, mut message: Message) {
        if message.msg_type != MessageType::MsgPropose {
            return self.raft.step(self.now, message);
        }
        if is_lease_forward(&message) {
            return self.handle_lease_forward(&message);
        }
        if message.to != self.config.member_id || self.raft.role() != Role::Leader {
            debug!(
                from = message.from,
                "not the leader; dropping a forwarded proposal"
            );
            return;
        }
        if self.members.get(message.from).is_none() {
            debug!(
                from = message.from,
                "forwarded proposal from a non-member; dropped"
            );
            return;
        }
        for entry in message.take_entries().into_vec() {
            if entry.data.len() > self.config.max_request_bytes
                || self.unapplied() >= UNAPPLIED_ENTRIES_MAX
            {
                debug!(
                    from = message.from,
                    "forwarded proposal too large or too many; dropped"
                );
                continue;
            }
            // Peer input never reaches the apply step undecoded: an entry
            // that would not decode there is dropped here.
            let result = match entry.entry_type {
                EntryType::EntryNormal if Proposal::decode(entry.data.as_ref()).is_ok() => {
                    self.raft.propose(entry.data).map(|_| ())
                }
                EntryType::EntryConfChange => match ConfChange::parse_from_bytes(&entry.data) {
                    Ok(cc) => self
                        .check_quorum_safe(cc.change_type, cc.node_id, !cc.context.is_empty())
                        .map_err(|_| ProposeError::InvalidConfChange("not safe now"))
                        .and_then(|()| self.raft.propose_conf_change(&cc).map(|_| ())),
                    Err(_) => Err(ProposeError::InvalidConfChange("does not decode")),
                },
                _ => Err(ProposeError::InvalidConfChange("not a proposal")),
            };
            if let Err(e) = result {
                debug!(from = message.from, error = %e, "forwarded proposal refused");
            }
        }
    }

    // ----- reads ----------------------------------------------------------

    fn queue_read(&mut self, ticket: Ticket, kind: ReadKind) {
        self.reads.queue(ticket, kind);
    }

    /// Reads that arrived since the last drain share one round.
    fn start_read_round(&mut self) {
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

    fn read_ready(&mut self, state: ReadState) {
        if !self.reads.confirm(&state.context, state.index) {
            debug!("read index answer for no round of ours");
            return;
        }
        self.release_reads();
    }

    fn release_reads(&mut self) {
        for read in self.reads.release(self.meta.applied_index) {
            self.serve_read(read.ticket, read.kind);
        }
    }

    fn serve_read(&mut self, ticket: Ticket, kind: ReadKind) {
        match kind {
            ReadKind::Range(request) => {
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
        }
    }

    fn answer_lease_read(&mut self, ticket: Ticket, request: Request) {
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

    // ----- timers -------------------------------------------------------

    /// Proposes the revokes of expired leases and the due checkpoints
    /// (the lessor holds deadlines only while this member leads).
    fn handle_lease_timers(&mut self) {
        let (revokes, checkpoints) = self.lessor.poll_due(self.now);
        for id in revokes {
            debug!(lease_id = id, "lease expired; revoking");
            self.propose_internal(proposal::Request::LeaseRevoke(LeaseRevokeRequest { id }));
        }
        if !checkpoints.is_empty() {
            self.propose_internal(proposal::Request::LeaseCheckpoint(LeaseCheckpointRequest {
                checkpoints,
            }));
        }
    }

    /// Proposes, as leader, an entry no client waits for. Refusals are
    /// dropped: the lessor proposes again later.
    fn propose_internal(&mut self, request: proposal::Request) {
        let proposal = Proposal {
            id: 0,
            request: Some(request),
        };
        if let Err(e) = self.raft.propose(Bytes::from(proposal.encode_to_vec())) {
            debug!(error = %e, "internal proposal refused");
        }
    }

    /// Requests past their deadline fail: held for a leader for an
    /// election timeout → no leader; waiting for the request timeout →
    /// timed out.
    fn expire_requests(&mut self) {
        for ticket in self.leaderless.expired(self.now) {
            self.answer(ticket, Err(Error::NoLeader));
        }
        let expired = self.requests.expired(self.now);
        if expired.is_empty() {
            return;
        }
        for ticket in expired {
            self.answer(ticket, Err(Error::Timeout));
        }
        // Forget what the expired requests left behind.
        let requests = &self.requests;
        self.proposals.retain(|t| requests.waits(t));
        self.leaderless.retain(|t| requests.waits(t));
        self.reads.retain(|t| requests.waits(t));
        self.move_leaders.retain(|(t, _)| requests.waits(*t));
        for tickets in self.parked_renewals.values_mut() {
            tickets.retain(|t| requests.waits(*t));
        }
        self.forwarded.retain(|_, f| requests.waits(f.ticket));
    }

    // ----- raft actions ---------------------------------------------------

    fn handle_action(&mut self, action: Action) {
        match action {
            Action::Send(m) => self.outputs.push_back(Output::Send(m)),
            Action::Persist(persist) => {
                if persist.snapshot.is_some() {
                    self.restoring = Some(persist.id);
                }
                self.outputs.push_back(Output::Persist(persist));
            }
            Action::Apply(entries) => {
                if let Err(e) = self.apply(entries) {
                    self.poison(e);
                }
            }
            Action::ReadReady(state) => self.read_ready(state),
            Action::SendSnapshot { to, term } => self.send_snapshot(to, term),
            Action::RoleChanged { role, term, leader } => self.role_changed(role, term, leader),
            Action::Fatal(e) => self.poison(e),
        }
    }

    fn role_changed(&mut self, role: Role, term: u64, leader: Option<u64>) {
        info!(
            member_id = %format_args!("{:x}", self.config.member_id),
            ?role,
            term,
            leader = ?leader.map(|l| format!("{l:x}")),
            "raft role changed"
        );
        let was_leader = self.role == Role::Leader;
        if role == Role::Leader && !was_leader {
            self.lessor.promote(self.now);
        }
        if was_leader && role != Role::Leader {
            self.lessor.demote();
            for ticket in std::mem::take(&mut self.parked_renewals)
                .into_values()
                .flatten()
            {
                self.answer(ticket, Err(Error::LeaderChanged));
            }
        }
        if leader != self.leader {
            self.leader_changed(leader);
        }
        self.role = role;
        self.leader = leader;
        if leader.is_some() {
            self.release_leaderless();
            self.redispatch_forwarded();
        }
    }

    /// Requests whose outcome this member can no longer learn fail: those
    /// that went to another leader, or to this one in an earlier term. (The
    /// raft reports changes lazily, so requests may already have gone to
    /// the leader being reported.)
    fn leader_changed(&mut self, leader: Option<u64>) {
        let committed = self.raft.committed();
        let current = Leadership {
            leader: leader.unwrap_or(0),
            term: self.raft.term(),
        };
        let current = leader.map(|_| current);
        for ticket in self.proposals.leadership_changed(current, committed) {
            self.answer(ticket, Err(Error::LeaderChanged));
        }
        for read in self.reads.leadership_changed(current) {
            self.answer(read.ticket, Err(Error::LeaderChanged));
        }
        if let Some(leader) = leader {
            let (done, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut self.move_leaders)
                .into_iter()
                .partition(|(_, target)| *target == leader);
            for (ticket, _) in done {
                let response = MoveLeaderResponse {
                    header: Some(self.header()),
                };
                self.answer(ticket, Ok(Response::MoveLeader(response)));
            }
            for (ticket, _) in pending {
                self.answer(ticket, Err(Error::LeaderChanged));
            }
        }
    }

    /// The leader streams a snapshot of the backend as of the applied
    /// index, which the raft's applied index matches: entries are applied
    /// as soon as the raft hands them out.
    fn send_snapshot(&mut self, to: u64, term: u64) {
        let index = self.raft.applied();
        let Some(snapshot_term) = self.raft.log_term(index) else {
            warn!(to, index, "no term for the snapshot index; not sending");
            return self.raft.report_snapshot(to, false);
        };
        assert_eq!(
            index, self.meta.applied_index,
            "raft applied {index} but the backend holds {}",
            self.meta.applied_index
        );
        let metadata = SnapshotMetadata {
            conf_state: Some(self.raft.conf_state()).into(),
            index,
            term: snapshot_term,
            ..Default::default()
        };
        let message = raft::snapshot_message(self.config.member_id, to, term, metadata);
        self.outputs.push_back(Output::SendSnapshot { to, message });
    }

    fn handle_persisted(&mut self, id: PersistId) {
        if self.restoring.is_some_and(|r| r <= id) {
            self.restoring = None;
            if let Err(e) = self.reload_backend() {
                return self.poison(e);
            }
        }
        self.raft.persisted(self.now, id);
    }

    /// The runtime installed a snapshot in the backend: everything derived
    /// from it is read again.
    fn reload_backend(&mut self) -> Result<(), StorageError> {
        let view = self.kv.read()?;
        let meta = view.meta()?;
        self.meta = KvMeta {
            revision: meta.revision.max(1),
            ..meta
        };
        if let Some(stored) = view.membership()? {
            self.members = Members::from_list(stored.members);
        }
        self.membership_unsaved = false;
        self.lessor = Lessor::recover(self.config.lease, &view)?;
        if self.raft.role() == Role::Leader {
            self.lessor.promote(self.now);
        }
        info!(
            member_id = %format_args!("{:x}", self.config.member_id),
            applied_index = self.meta.applied_index,
            revision = self.meta.revision,
            "installed a snapshot"
        );
        // Proposals the snapshot covers may or may not be in it.
        let applied = self.meta.applied_index;
        for ticket in self.proposals.covered_by_snapshot(applied) {
            self.answer(ticket, Err(Error::LeaderChanged));
        }
        self.with_watches(|watches, cx| watches.handle_restored(cx));
        self.update_sole_voter();
        self.release_reads();
        Ok(())
    }

    /// Publishes this member's name and client URLs through the log until
    /// its record shows them ([`Publication`] decides when). A member
    /// forwards its publish to the leader only once its own record exists,
    /// so the leader knows the member that forwards it.
    fn maybe_publish(&mut self) {
        // Checked first: this runs on every drain.
        if self.removed || self.publication.is_published() {
            return;
        }
        let id = self.config.member_id;
        let leader = self.raft.leader();
        let situation = publication::Situation {
            now: self.now,
            shown: self
                .members
                .shows(id, &self.config.name, &self.config.client_urls),
            can_propose: leader.is_some() && self.members.get(id).is_some(),
            retry: self.config.election_timeout,
        };
        match self.publication.poll(situation) {
            Step::Wait => {}
            Step::Published => info!(
                member_id = %format_args!("{id:x}"),
                name = %self.config.name,
                client_urls = ?self.config.client_urls,
                "member attributes applied"
            ),
            Step::Propose => {
                let proposal = Proposal {
                    id: 0,
                    request: Some(proposal::Request::MemberAttributes(MemberAttributes {
                        id,
                        name: self.config.name.clone(),
                        client_urls: self.config.client_urls.clone(),
                    })),
                };
                let data = Bytes::from(proposal.encode_to_vec());
                if leader == Some(id) {
                    if let Err(e) = self.raft.propose(data) {
                        debug!(error = %e, "publishing member attributes refused; retrying later");
                    }
                    return;
                }
                let mut m = Message {
                    msg_type: MessageType::MsgPropose,
                    to: leader.unwrap_or(0),
                    from: id,
                    term: self.raft.term(),
                    ..Default::default()
                };
                m.entries = vec![Entry {
                    entry_type: EntryType::EntryNormal,
                    data,
                    ..Default::default()
                }]
                .into();
                self.outputs.push_back(Output::Send(m));
            }
        }
    }

    /// A sole voter need not wait for an election timeout: nobody else
    /// could lead, and nobody is disrupted (a restarted single member
    /// serves again at once, as before consensus was general).
    fn campaign_if_alone(&mut self) {
        if self.sole_voter
            && self.raft.role() == Role::Follower
            && self.raft.leader().is_none()
            && self.raft.applied() == self.raft.committed()
        {
            self.raft.campaign(self.now);
        }
    }

    fn update_sole_voter(&mut self) {
        self.sole_voter = self.raft.conf_state().voters == [self.config.member_id];
    }

    // ----- apply ----------------------------------------------------------

    /// Applies a batch of committed entries in one backend transaction with
    /// its applied index (and the membership, if it changed), then answers
    /// the clients whose entries they are and releases the reads they
    /// satisfy.
    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        let Some(last) = entries.last() else {
            return Ok(());
        };
        let last_index = last.index;
        let mut txn = self.kv.write()?;
        let mut meta = self.meta;
        let identity = self.header();
        let mut answers: Vec<(Ticket, Result<Response, Error>)> = Vec::new();
        let mut revoked = Vec::new();
        let mut membership_changed = self.membership_unsaved;
        for entry in &entries {
            assert_eq!(
                entry.index,
                meta.applied_index + 1,
                "entries out of order at {}",
                meta.applied_index + 1
            );
            let (proposal_id, result) = match entry.entry_type {
                EntryType::EntryConfChange => {
                    membership_changed = true;
                    self.apply_conf_change(entry, &meta)
                }
                EntryType::EntryNormal if !entry.data.is_empty() => {
                    let proposal = Proposal::decode(entry.data.as_ref()).map_err(|e| {
                        StorageError::new(format!("entry {} does not decode: {e}", entry.index))
                    })?;
                    let result = match proposal.request {
                        Some(proposal::Request::MemberUpdate(update)) => {
                            membership_changed = true;
                            self.members.apply_update(&update);
                            Ok(Response::MemberUpdate(MemberUpdateResponse {
                                header: Some(ResponseHeader {
                                    revision: meta.revision,
                                    ..identity
                                }),
                                members: self.members.list(),
                            }))
                        }
                        Some(proposal::Request::MemberAttributes(attributes)) => {
                            membership_changed = true;
                            self.members.apply_attributes(&attributes);
                            Err(Error::Stopped)
                        }
                        Some(request) => {
                            let mut cx = ApplyContext {
                                lessor: &mut self.lessor,
                                watches: &mut self.watches,
                                now: self.now,
                                cluster_id: self.config.cluster_id,
                                identity,
                                revoked: &mut revoked,
                            };
                            apply_proposal(&mut txn, &mut meta, entry.index, request, &mut cx)?
                        }
                        None => Err(Error::Stopped),
                    };
                    (proposal.id, result)
                }
                // Empty entries (a new leader's first) and unsupported
                // kinds change nothing.
                _ => (0, Err(Error::Stopped)),
            };
            meta.applied_index = entry.index;
            meta.applied_term = entry.term;
            let result = result.map(|mut response| {
                stamp(
                    &mut response,
                    &ResponseHeader {
                        revision: meta.revision,
                        ..identity
                    },
                );
                response
            });
            self.settle_proposal(entry, proposal_id, result, &mut answers);
        }
        if membership_changed {
            let membership = Membership {
                conf_state: self.raft.conf_state(),
                members: self.members.list(),
            };
            txn.set_membership(&membership)?;
            self.membership_unsaved = false;
            self.update_sole_voter();
        }
        txn.set_meta(&meta)?;
        txn.commit()?;
        self.meta = meta;
        for (ticket, result) in answers {
            self.answer(ticket, result);
        }
        self.watches.flush_events(&mut self.outputs);
        for lease_id in revoked {
            let header = Some(self.header());
            for ticket in self.parked_renewals.remove(&lease_id).unwrap_or_default() {
                let response = LeaseKeepAliveResponse {
                    header,
                    id: lease_id,
                    ttl: 0,
                };
                self.answer(ticket, Ok(Response::LeaseKeepAlive(response)));
            }
        }
        debug_assert_eq!(self.meta.applied_index, last_index);
        self.release_reads();
        self.maybe_compact();
        Ok(())
    }

    /// Records a committed membership change; returns its proposal ID and
    /// the answer for its proposer.
    fn apply_conf_change(
        &mut self,
        entry: &Entry,
        meta: &KvMeta,
    ) -> (u64, Result<Response, Error>) {
        let cc = match ConfChange::parse_from_bytes(&entry.data) {
            Ok(cc) => cc,
            Err(e) => {
                // The raft skipped it too.
                warn!(index = entry.index, error = %e, "membership entry does not decode; skipped");
                return (0, Err(Error::Stopped));
            }
        };
        let changed = self
            .members
            .apply_conf_change(&cc, &self.config.initial_members);
        if cc.node_id == self.config.member_id && cc.change_type != ConfChangeType::RemoveNode {
            self.removed = false;
        }
        if cc.change_type == ConfChangeType::RemoveNode && cc.node_id == self.config.member_id {
            warn!(
                member_id = %format_args!("{:x}", self.config.member_id),
                index = entry.index,
                "applied this member's removal from the cluster"
            );
            self.removed = true;
        }
        let header = Some(ResponseHeader {
            revision: meta.revision,
            ..self.header()
        });
        let members = self.members.list();
        let response = match cc.change_type {
            ConfChangeType::RemoveNode => {
                Response::MemberRemove(MemberRemoveResponse { header, members })
            }
            ConfChangeType::AddNode if cc.context.is_empty() => {
                Response::MemberPromote(MemberPromoteResponse { header, members })
            }
            _ => Response::MemberAdd(MemberAddResponse {
                header,
                member: changed,
                members,
            }),
        };
        (cc.id, Ok(response))
    }

    /// Matches an applied entry to the proposal waiting for it. A proposal
    /// this member appended at this index that is not this entry was lost
    /// to a leader change.
    fn settle_proposal(
        &mut self,
        entry: &Entry,
        proposal_id: u64,
        result: Result<Response, Error>,
        answers: &mut Vec<(Ticket, Result<Response, Error>)>,
    ) {
        let settled = self.proposals.settle(entry.index, &entry.data, proposal_id);
        answers.extend(
            settled
                .lost
                .into_iter()
                .map(|ticket| (ticket, Err(Error::LeaderChanged))),
        );
        if let Some(ticket) = settled.ours {
            answers.push((ticket, result));
        }
    }

    /// Every `snapshot_count` applied entries, the log is compacted up to
    /// `snapshot_catch_up_entries` before the applied index.
    fn maybe_compact(&mut self) {
        let applied = self.meta.applied_index;
        if applied < self.compacted_at + self.config.snapshot_count {
            return;
        }
        self.compacted_at = applied;
        let index = applied.saturating_sub(self.config.snapshot_catch_up_entries);
        let index = index.min(self.raft.persisted_index());
        if index > self.raft.snapshot_index() && self.raft.compact_log(index) {
            debug!(index, applied, "compacting the log");
            self.outputs.push_back(Output::CompactLog { index });
        }
    }

    /// The leader requests go to now, and its term.
    fn leadership(&self) -> Leadership {
        Leadership {
            leader: self.raft.leader().unwrap_or(0),
            term: self.raft.term(),
        }
    }

    fn header(&self) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.config.cluster_id,
            member_id: self.config.member_id,
            revision: self.meta.revision,
            raft_term: self.raft.term(),
        }
    }

    fn status(&self) -> StatusResponse {
        StatusResponse {
            header: Some(self.header()),
            leader: self.raft.leader().unwrap_or(0),
            raft_index: self.raft.committed(),
            raft_term: self.raft.term(),
            raft_applied_index: self.meta.applied_index,
            is_learner: self.is_learner(),
            ..Default::default()
        }
    }

    fn poison(&mut self, error: StorageError) {
        if self.poisoned {
            return;
        }
        self.poisoned = true;
        self.outputs.push_back(Output::Fatal(error));
        // Followers waiting on this member time out on their own.
        for origin in self.requests.drain() {
            if let Origin::Client(id) = origin {
                self.outputs
                    .push_back(Output::Respond(id, Err(Error::Stopped)));
            }
        }
    }
}

/// A leader (0: none) in a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Leadership {
    leader: u64,
    term: u64,
}

/// A request held until a leader is known.
#[derive(Debug)]
enum Held {
    /// Not looked at yet beyond validation.
    Request(Request),
    /// A proposal this member encoded, to propose or forward.
    Entry {
        proposal_id: u64,
        entry_type: EntryType,
        data: Bytes,
    },
    /// A read waiting for a read-index round.
    Read(ReadKind),
}

/// Mixes numbers into one well-spread 64-bit value (splitmix64's
/// finalizer), for proposal IDs that differ between runs of a member.
fn mix(values: &[u64]) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for &v in values {
        x ^= v;
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
    }
    x
}
