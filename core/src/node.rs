//! The node: one member's consensus, apply and request bookkeeping.
//!
//! Design. A client write becomes a [`Proposal`] in a log entry appended to
//! the in-memory log; entries leave as one `Output::Persist` at a time, so
//! every write that arrives while an fsync is in flight rides the next one
//! (group commit). When the runtime answers `Input::Persisted`, the entries
//! count toward the commit quorum; committed entries are applied to the
//! backend in one transaction that also records the applied index, and only
//! then are the waiting clients answered. A range waits until everything
//! committed when it arrived is applied (the read index), then is handed
//! back to the runtime to run on a read snapshot, so reads never queue behind
//! the apply step.
//!
//! Consensus is the single-voter case of Raft: on start the member begins a
//! new term and appends an empty entry, whose commit also commits whatever
//! the log held before the restart. This module never reads the clock and
//! never touches storage except through the traits in [`crate::storage`].
//!
//! Leases and watches hang off the apply step: every applied write moves
//! keys between leases ([`crate::lease`]) and is matched against the synced
//! watchers ([`crate::watch`]), whose outputs leave with the batch's
//! answers. Lease expiry and checkpoints are timers of the node; lease
//! queries and keep-alives wait for the read index as linearizable ranges do.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use hashbrown::HashMap;
use prost::Message;
use tracing::{debug, info};

use oxetcd_proto::eraftpb::{Entry, EntryType, HardState};
use oxetcd_proto::etcdserverpb::{
    request_op, DeleteRangeRequest, LeaseCheckpoint, LeaseCheckpointRequest, LeaseGrantResponse,
    LeaseKeepAliveResponse, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseTimeToLiveResponse, RangeRequest, RequestOp, ResponseHeader, StatusResponse, TxnRequest,
    WatchRequest, WatchResponse,
};
use oxetcd_proto::oxetcdpb::{proposal, Proposal};

use crate::error::Error;
use crate::lease::{self, LeaseConfig, Lessor, Renewal};
use crate::mvcc;
use crate::storage::{KvMeta, KvRead, KvStore, KvWrite, LogStore, StorageError};
use crate::watch::{self, CatchUp, StreamId, WatchRegistry};
use crate::{Instant, Request, Response};

/// Identifies a client request; chosen by the runtime, echoed in `Respond`.
pub type RequestId = u64;

/// Proposals allowed between the applied index and the last index before
/// new writes are refused with `etcdserver: too many requests`: etcd's gap
/// between commit and apply.
const UNAPPLIED_ENTRIES_MAX: u64 = 5_000;

/// Entries applied in one backend transaction at most, so one apply step
/// stays short and responses flow while a long backlog replays.
const APPLY_BATCH_MAX: usize = 1_024;

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// This member's ID.
    pub member_id: u64,
    /// The cluster's ID.
    pub cluster_id: u64,
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
}

impl Config {
    /// A single-member node named `name` with etcd's default peer URL and
    /// cluster token, so its IDs match a default etcd's.
    pub fn single(name: &str) -> Self {
        let member_id = crate::ids::member_id(
            &["http://localhost:2380"],
            crate::ids::DEFAULT_CLUSTER_TOKEN,
        );
        Self {
            name: name.to_owned(),
            member_id,
            cluster_id: crate::ids::cluster_id(&[member_id]),
            max_request_bytes: 1_572_864,
            limits: crate::mvcc::Limits::default(),
            rng_seed: member_id,
            lease: LeaseConfig::default(),
            watch_progress_notify_interval: watch::PROGRESS_NOTIFY_INTERVAL_DEFAULT,
        }
    }
}

/// An event fed to the node.
#[derive(Clone, Debug)]
pub enum Input {
    /// A client request. Every request is answered exactly once, by
    /// `Output::Respond` or (for a range) `Output::Read`.
    Client(RequestId, Request),
    /// The runtime finished the oldest outstanding `Output::Persist`; `index`
    /// is the index of its last entry (0 if it had none). Each `Persist` is
    /// answered once, in order.
    Persisted {
        /// Last entry index of the persisted batch.
        index: u64,
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
    /// Make these entries and this hard state durable, then answer
    /// `Input::Persisted`.
    Persist {
        /// Entries to append, in index order.
        entries: Vec<Entry>,
        /// Hard state to store, if it changed.
        hard_state: Option<HardState>,
    },
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
    /// Send a watcher history from storage with [`crate::watch::catch_up`],
    /// in the stream's order, then answer `Input::WatchCaughtUp`.
    WatchCatchUp(CatchUp),
}

/// A range waiting for the apply step to reach its read index.
#[derive(Debug)]
struct PendingRead {
    read_index: u64,
    id: RequestId,
    request: RangeRequest,
}

/// One member of an oxetcd cluster, as a state machine.
pub struct Node<L: LogStore, K: KvStore> {
    config: Config,
    kv: K,
    _log: std::marker::PhantomData<L>,
    /// Term, vote and commit as last handed out for persisting.
    hard_state: HardState,
    /// The hard state changed since the last `Persist`.
    hard_state_dirty: bool,
    /// Entries after the applied index, in index order.
    entries: VecDeque<Entry>,
    /// Index of the last entry handed out in a `Persist`.
    persist_sent: u64,
    /// Index of the last entry known durable.
    persisted: u64,
    /// Last-entry indexes of the outstanding `Persist`s, oldest first.
    persist_inflight: VecDeque<u64>,
    /// Index of the empty entry this leader appended when its term began:
    /// until it is applied, the leader does not know everything committed
    /// before it, so linearizable reads wait for it.
    term_start_index: u64,
    /// The backend's meta as of the last apply.
    meta: KvMeta,
    /// Client requests waiting for their entry to apply, by entry index.
    proposals: HashMap<u64, RequestId>,
    /// Ranges waiting for their read index, in arrival order (so read
    /// indexes are non-decreasing).
    reads: VecDeque<PendingRead>,
    outputs: VecDeque<Output>,
    /// Set after a storage error: nothing more is done.
    poisoned: bool,
    /// The latest time an input brought.
    now: Instant,
    /// Leases and their attached keys.
    lessor: Lessor,
    /// Every watcher.
    watches: WatchRegistry,
    /// Lease queries and keep-alives waiting for their read index, in
    /// arrival order.
    lease_reads: VecDeque<PendingLeaseRead>,
    /// Keep-alives of expired leases, answered once the revoke applies.
    parked_renewals: HashMap<i64, Vec<RequestId>>,
}

/// A lease query waiting for the apply step to reach its read index.
#[derive(Debug)]
struct PendingLeaseRead {
    read_index: u64,
    id: RequestId,
    request: Request,
}

/// What applying one entry needs besides the transaction, borrowed from
/// the node's fields.
struct ApplyContext<'a> {
    lessor: &'a mut Lessor,
    watches: &'a mut WatchRegistry,
    now: Instant,
    cluster_id: u64,
    identity: ResponseHeader,
    /// Watch outputs of the batch, released after it commits.
    watch_outputs: &'a mut Vec<Output>,
    /// Leases revoked in the batch (parked keep-alives are answered).
    revoked: &'a mut Vec<i64>,
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Starts a node on what `log` and `kv` hold, replaying log entries the
    /// backend has not applied yet.
    pub fn new(config: Config, log: L, kv: K, now: Instant) -> Result<Self, Error> {
        let _ = now;
        let state = log.state()?;
        let meta = kv.read()?.meta()?;
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
        let replay = log.entries(meta.applied_index + 1, state.last_index + 1)?;
        let lessor = Lessor::recover(config.lease, &kv.read()?)?;
        let watches = WatchRegistry::new(config.watch_progress_notify_interval);
        let mut hard_state = state.hard_state.clone();
        hard_state.commit = hard_state.commit.max(meta.applied_index);
        let mut node = Self {
            config,
            kv,
            _log: std::marker::PhantomData,
            hard_state,
            hard_state_dirty: false,
            entries: replay.into(),
            persist_sent: state.last_index,
            persisted: state.last_index,
            persist_inflight: VecDeque::new(),
            term_start_index: 0,
            meta,
            proposals: HashMap::new(),
            reads: VecDeque::new(),
            outputs: VecDeque::new(),
            poisoned: false,
            now,
            lessor,
            watches,
            lease_reads: VecDeque::new(),
            parked_renewals: HashMap::new(),
        };
        node.campaign();
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
            Input::Client(id, request) => self.handle_client(id, request),
            Input::Persisted { index } => self.handle_persisted(index),
            Input::Watch { stream, request } => {
                let header = self.header();
                let mut cx = watch::Context {
                    now: self.now,
                    header,
                    outputs: &mut self.outputs,
                };
                self.watches.handle_request(stream, request, &mut cx);
            }
            Input::WatchClosed { stream } => self.watches.handle_closed(stream),
            Input::WatchStalled {
                stream,
                watch_id,
                from_revision,
            } => {
                let header = self.header();
                let mut cx = watch::Context {
                    now: self.now,
                    header,
                    outputs: &mut self.outputs,
                };
                self.watches
                    .handle_stalled(stream, watch_id, from_revision, &mut cx);
            }
            Input::WatchCaughtUp {
                stream,
                watch_id,
                upto,
                compacted,
            } => {
                let header = self.header();
                let mut cx = watch::Context {
                    now: self.now,
                    header,
                    outputs: &mut self.outputs,
                };
                self.watches
                    .handle_caught_up(stream, watch_id, upto, compacted, &mut cx);
            }
        }
    }

    /// The next thing to do, if any. Drain until `None` after every input.
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some(output) = self.outputs.pop_front() {
            return Some(output);
        }
        self.poll_persist()
    }

    /// When the node next needs [`Node::handle_timeout`], if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.poisoned {
            return None;
        }
        earliest(self.lessor.poll_timeout(), self.watches.poll_timeout())
    }

    /// Lets timers fire whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.poisoned {
            return;
        }
        self.handle_lease_timers();
        let header = self.header();
        let mut cx = watch::Context {
            now: self.now,
            header,
            outputs: &mut self.outputs,
        };
        self.watches.handle_timeout(&mut cx);
    }

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

    /// Appends a proposal no client waits for.
    fn propose_internal(&mut self, request: proposal::Request) {
        let proposal = Proposal {
            id: 0,
            request: Some(request),
        };
        self.append(
            EntryType::EntryNormal,
            Bytes::from(proposal.encode_to_vec()),
        );
    }

    /// This member's ID.
    pub fn member_id(&self) -> u64 {
        self.config.member_id
    }

    /// The cluster's ID.
    pub fn cluster_id(&self) -> u64 {
        self.config.cluster_id
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.meta.applied_index
    }

    fn last_index(&self) -> u64 {
        self.entries
            .back()
            .map_or(self.meta.applied_index, |e| e.index)
    }

    /// Starts a new term as the only voter and appends its empty entry.
    fn campaign(&mut self) {
        self.hard_state.term += 1;
        self.hard_state.vote = self.config.member_id;
        self.hard_state_dirty = true;
        let term = self.hard_state.term;
        self.term_start_index = self.append(EntryType::EntryNormal, Bytes::new());
        self.lessor.promote(self.now);
        info!(
            member_id = %format_args!("{:x}", self.config.member_id),
            term,
            "became leader"
        );
    }

    fn append(&mut self, entry_type: EntryType, data: Bytes) -> u64 {
        let index = self.last_index() + 1;
        let entry = Entry {
            entry_type,
            term: self.hard_state.term,
            index,
            data,
            ..Default::default()
        };
        self.entries.push_back(entry);
        index
    }

    fn header(&self) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.config.cluster_id,
            member_id: self.config.member_id,
            revision: self.meta.revision,
            raft_term: self.hard_state.term,
        }
    }

    fn handle_client(&mut self, id: RequestId, request: Request) {
        if let Err(e) = mvcc::validate(&request, &self.config.limits) {
            self.outputs.push_back(Output::Respond(id, Err(e)));
            return;
        }
        let write = match request {
            Request::Range(request) => return self.handle_range(id, request),
            Request::Status => {
                let status = self.status();
                self.outputs
                    .push_back(Output::Respond(id, Ok(Response::Status(status))));
                return;
            }
            Request::Put(r) => proposal::Request::Put(r),
            Request::DeleteRange(r) => proposal::Request::DeleteRange(r),
            Request::Txn(r) => proposal::Request::Txn(r),
            Request::Compact(r) => proposal::Request::Compaction(r),
            Request::LeaseGrant(r) => proposal::Request::LeaseGrant(r),
            Request::LeaseRevoke(r) => proposal::Request::LeaseRevoke(r),
            request @ (Request::LeaseKeepAlive(_)
            | Request::LeaseTimeToLive(_)
            | Request::LeaseLeases) => return self.handle_lease_read(id, request),
        };
        if self.last_index() - self.meta.applied_index >= UNAPPLIED_ENTRIES_MAX {
            self.outputs
                .push_back(Output::Respond(id, Err(Error::TooManyRequests)));
            return;
        }
        let proposal = Proposal {
            id,
            request: Some(write),
        };
        let data = proposal.encode_to_vec();
        if data.len() > self.config.max_request_bytes {
            self.outputs
                .push_back(Output::Respond(id, Err(Error::RequestTooLarge)));
            return;
        }
        let index = self.append(EntryType::EntryNormal, Bytes::from(data));
        self.proposals.insert(index, id);
    }

    fn handle_range(&mut self, id: RequestId, request: RangeRequest) {
        // A serializable read may see any applied state; a linearizable one
        // must see everything committed before it arrived, which a new
        // leader knows only once its term's first entry is applied. With one
        // voter the leader needs no heartbeat round to confirm leadership.
        let read_index = if request.serializable {
            0
        } else {
            self.hard_state.commit.max(self.term_start_index)
        };
        if read_index <= self.meta.applied_index && self.reads.is_empty() {
            let header = self.header();
            self.outputs.push_back(Output::Read {
                id,
                request,
                header,
            });
        } else {
            self.reads.push_back(PendingRead {
                read_index,
                id,
                request,
            });
        }
    }

    /// Lease queries and keep-alives see everything committed before they
    /// arrived, as etcd's leader waits for its applied index first.
    fn handle_lease_read(&mut self, id: RequestId, request: Request) {
        let read_index = self.hard_state.commit.max(self.term_start_index);
        if read_index <= self.meta.applied_index && self.lease_reads.is_empty() {
            self.answer_lease_read(id, request);
        } else {
            self.lease_reads.push_back(PendingLeaseRead {
                read_index,
                id,
                request,
            });
        }
    }

    fn release_lease_reads(&mut self) {
        while self
            .lease_reads
            .front()
            .is_some_and(|r| r.read_index <= self.meta.applied_index)
        {
            let Some(read) = self.lease_reads.pop_front() else {
                break;
            };
            self.answer_lease_read(read.id, read.request);
        }
    }

    fn answer_lease_read(&mut self, id: RequestId, request: Request) {
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
                        self.parked_renewals.entry(lease_id).or_default().push(id);
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
        self.outputs.push_back(Output::Respond(id, Ok(response)));
    }

    fn status(&self) -> StatusResponse {
        StatusResponse {
            header: Some(self.header()),
            leader: self.config.member_id,
            raft_index: self.hard_state.commit,
            raft_term: self.hard_state.term,
            raft_applied_index: self.meta.applied_index,
            ..Default::default()
        }
    }

    /// Hands out the unpersisted tail of the log, unless a `Persist` is
    /// still outstanding: the wait is what batches writes into one fsync.
    fn poll_persist(&mut self) -> Option<Output> {
        if self.poisoned || !self.persist_inflight.is_empty() {
            return None;
        }
        let last = self.last_index();
        if last == self.persist_sent && !self.hard_state_dirty {
            return None;
        }
        let first = self.meta.applied_index + 1;
        let from = (self.persist_sent + 1).max(first);
        let entries: Vec<Entry> = self
            .entries
            .iter()
            .skip((from - first) as usize)
            .cloned()
            .collect();
        let hard_state = self.hard_state_dirty.then(|| self.hard_state.clone());
        self.hard_state_dirty = false;
        self.persist_sent = last;
        let index = entries.last().map_or(0, |e| e.index);
        self.persist_inflight.push_back(index);
        Some(Output::Persist {
            entries,
            hard_state,
        })
    }

    fn handle_persisted(&mut self, index: u64) {
        let Some(expected) = self.persist_inflight.pop_front() else {
            debug!(index, "persisted with nothing outstanding");
            return;
        };
        debug_assert_eq!(index, expected, "persist acknowledgements out of order");
        if expected != 0 {
            self.persisted = self.persisted.max(expected);
        }
        // One voter: durable on this member is durable on a quorum. Only
        // entries of the current term commit by counting; earlier ones
        // commit with them.
        let commit = self.persisted;
        let current_term_durable = self
            .entries
            .iter()
            .rev()
            .find(|e| e.index <= commit)
            .is_some_and(|e| e.term == self.hard_state.term);
        if commit > self.hard_state.commit && current_term_durable {
            self.hard_state.commit = commit;
        }
        self.apply_committed();
    }

    /// Applies committed entries in batches, each batch in one backend
    /// transaction with its applied index, then answers their clients and
    /// releases the reads they satisfy.
    fn apply_committed(&mut self) {
        while self.meta.applied_index < self.hard_state.commit && !self.poisoned {
            if let Err(e) = self.apply_batch() {
                self.poison(e);
                return;
            }
            self.release_reads();
        }
        self.release_reads();
    }

    fn apply_batch(&mut self) -> Result<(), StorageError> {
        let mut txn = self.kv.write()?;
        let mut meta = self.meta;
        let identity = self.header();
        let mut responses = Vec::new();
        let mut watch_outputs = Vec::new();
        let mut revoked = Vec::new();
        let mut cx = ApplyContext {
            lessor: &mut self.lessor,
            watches: &mut self.watches,
            now: self.now,
            cluster_id: self.config.cluster_id,
            identity,
            watch_outputs: &mut watch_outputs,
            revoked: &mut revoked,
        };
        let mut applied = 0;
        while meta.applied_index < self.hard_state.commit && applied < APPLY_BATCH_MAX {
            let Some(entry) = self.entries.get(applied) else {
                return Err(StorageError::new(format!(
                    "committed entry {} is missing from memory",
                    meta.applied_index + 1
                )));
            };
            assert_eq!(
                entry.index,
                meta.applied_index + 1,
                "entries out of order at {}",
                meta.applied_index + 1
            );
            let result = apply_entry(&mut txn, &mut meta, entry, &mut cx).map(|answer| {
                answer.map(|mut response| {
                    stamp(
                        &mut response,
                        &ResponseHeader {
                            revision: meta.revision,
                            ..identity
                        },
                    );
                    response
                })
            });
            meta.applied_index = entry.index;
            meta.applied_term = entry.term;
            if let Some(id) = self.proposals.remove(&entry.index) {
                responses.push((id, result?));
            } else {
                // Replayed or not ours: nobody waits for the answer, but
                // storage errors still stop the node.
                let _answer = result?;
            }
            applied += 1;
        }
        txn.set_meta(&meta)?;
        txn.commit()?;
        self.entries.drain(..applied);
        self.meta = meta;
        for (id, result) in responses {
            self.outputs.push_back(Output::Respond(id, result));
        }
        self.outputs.extend(watch_outputs);
        for lease_id in revoked {
            let header = Some(self.header());
            for id in self.parked_renewals.remove(&lease_id).unwrap_or_default() {
                let response = LeaseKeepAliveResponse {
                    header,
                    id: lease_id,
                    ttl: 0,
                };
                self.outputs
                    .push_back(Output::Respond(id, Ok(Response::LeaseKeepAlive(response))));
            }
        }
        Ok(())
    }

    fn release_reads(&mut self) {
        while self
            .reads
            .front()
            .is_some_and(|r| r.read_index <= self.meta.applied_index)
        {
            let Some(read) = self.reads.pop_front() else {
                break;
            };
            let header = self.header();
            self.outputs.push_back(Output::Read {
                id: read.id,
                request: read.request,
                header,
            });
        }
        self.release_lease_reads();
    }

    fn poison(&mut self, error: StorageError) {
        self.poisoned = true;
        self.outputs.push_back(Output::Fatal(error));
        for (_, id) in self.proposals.drain() {
            self.outputs
                .push_back(Output::Respond(id, Err(Error::Stopped)));
        }
        for read in self.reads.drain(..) {
            self.outputs
                .push_back(Output::Respond(read.id, Err(Error::Stopped)));
        }
        for read in self.lease_reads.drain(..) {
            self.outputs
                .push_back(Output::Respond(read.id, Err(Error::Stopped)));
        }
        for (_, ids) in self.parked_renewals.drain() {
            for id in ids {
                self.outputs
                    .push_back(Output::Respond(id, Err(Error::Stopped)));
            }
        }
    }
}

/// Applies one entry. The outer error is a storage failure (fatal); the
/// inner one is the client's answer.
fn apply_entry(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    entry: &Entry,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    if entry.entry_type != EntryType::EntryNormal || entry.data.is_empty() {
        return Ok(Err(Error::Stopped));
    }
    let proposal = match Proposal::decode(entry.data.as_ref()) {
        Ok(p) => p,
        Err(e) => {
            return Err(StorageError::new(format!(
                "entry {} does not decode: {e}",
                entry.index
            )))
        }
    };
    let request = match proposal.request {
        Some(proposal::Request::Put(r)) => Request::Put(r),
        Some(proposal::Request::DeleteRange(r)) => Request::DeleteRange(r),
        Some(proposal::Request::Txn(r)) => Request::Txn(r),
        Some(proposal::Request::Compaction(r)) => Request::Compact(r),
        Some(proposal::Request::LeaseGrant(grant)) => {
            let id = if grant.id == 0 {
                let lessor = &*cx.lessor;
                lease::choose_id(cx.cluster_id, entry.index, |id| lessor.contains(id))
            } else {
                grant.id
            };
            let granted = cx.lessor.grant(txn, id, grant.ttl, cx.now)?;
            return Ok(granted.map(|ttl| {
                Response::LeaseGrant(LeaseGrantResponse {
                    header: Some(ResponseHeader {
                        revision: meta.revision,
                        ..cx.identity
                    }),
                    id,
                    ttl,
                    error: String::new(),
                })
            }));
        }
        Some(proposal::Request::LeaseRevoke(revoke)) => {
            return apply_revoke(txn, meta, revoke.id, cx);
        }
        Some(proposal::Request::LeaseCheckpoint(request)) => {
            for checkpoint in &request.checkpoints {
                cx.lessor.checkpoint(txn, checkpoint, cx.now)?;
            }
            return Ok(Err(Error::Stopped));
        }
        None => return Ok(Err(Error::Stopped)),
    };
    apply_kv(txn, meta, &request, cx)
}

/// Applies a key-space write, then moves keys between leases and tells the
/// watchers.
fn apply_kv(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    request: &Request,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let mut changes = Vec::new();
    let result = mvcc::apply_recording(txn, meta, request, &*cx.lessor, &mut changes);
    if let Err(Error::Storage(e)) = result {
        return Err(e);
    }
    if !changes.is_empty() {
        cx.lessor.on_changes(&changes);
        cx.watches.on_revision(
            meta.revision,
            &changes,
            &*txn,
            cx.identity,
            cx.watch_outputs,
        )?;
    }
    Ok(result)
}

/// A revoke: the lease goes, and its keys are deleted in one revision.
fn apply_revoke(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    id: i64,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let Some(keys) = cx.lessor.revoke(txn, id)? else {
        return Ok(Err(Error::LeaseNotFound));
    };
    cx.revoked.push(id);
    if !keys.is_empty() {
        let deletes = keys
            .into_iter()
            .map(|key| RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key,
                        ..Default::default()
                    },
                )),
            })
            .collect();
        let txn_request = Request::Txn(TxnRequest {
            compare: Vec::new(),
            success: deletes,
            failure: Vec::new(),
        });
        if let Err(e) = apply_kv(txn, meta, &txn_request, cx)? {
            return Err(StorageError::new(format!(
                "deleting the keys of lease {id:x}: {e}"
            )));
        }
    }
    Ok(Ok(Response::LeaseRevoke(LeaseRevokeResponse {
        header: Some(ResponseHeader {
            revision: meta.revision,
            ..cx.identity
        }),
    })))
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Stamps the member's identity and term on an answer's header. mvcc sets
/// the revision each answer must report (its own write's, not the batch's).
fn stamp(response: &mut Response, identity: &ResponseHeader) {
    let header = match response {
        Response::Put(r) => &mut r.header,
        Response::DeleteRange(r) => &mut r.header,
        Response::Txn(r) => &mut r.header,
        Response::Compact(r) => &mut r.header,
        Response::Range(r) => &mut r.header,
        Response::Status(r) => &mut r.header,
        Response::LeaseGrant(r) => &mut r.header,
        Response::LeaseRevoke(r) => &mut r.header,
        Response::LeaseKeepAlive(r) => &mut r.header,
        Response::LeaseTimeToLive(r) => &mut r.header,
        Response::LeaseLeases(r) => &mut r.header,
    };
    let header = header.get_or_insert(ResponseHeader {
        revision: identity.revision,
        ..Default::default()
    });
    header.cluster_id = identity.cluster_id;
    header.member_id = identity.member_id;
    header.raft_term = identity.raft_term;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryKv, MemoryLog};
    use oxetcd_proto::etcdserverpb::{PutRequest, RangeResponse};

    struct Harness {
        node: Node<MemoryLog, MemoryKv>,
        log: MemoryLog,
        kv: MemoryKv,
        /// Persist outputs not yet acknowledged, oldest first.
        unpersisted: VecDeque<Output>,
        answers: Vec<(RequestId, Result<Response, Error>)>,
        watched: Vec<(StreamId, WatchResponse)>,
        now: Instant,
    }

    impl Harness {
        fn new(log: MemoryLog, kv: MemoryKv) -> Self {
            let node = Node::new(
                Config::single("test"),
                log.clone(),
                kv.clone(),
                Instant::ZERO,
            )
            .unwrap();
            let mut h = Self {
                node,
                log,
                kv,
                unpersisted: VecDeque::new(),
                answers: Vec::new(),
                watched: Vec::new(),
                now: Instant::ZERO,
            };
            h.settle();
            h
        }

        /// Drains outputs without acknowledging persists.
        fn drain(&mut self) {
            while let Some(output) = self.node.poll_output() {
                match output {
                    Output::Persist { .. } => self.unpersisted.push_back(output),
                    Output::Respond(id, result) => self.answers.push((id, result)),
                    Output::Read {
                        id,
                        request,
                        mut header,
                    } => {
                        let view = self.kv.read().unwrap();
                        header.revision = view.meta().unwrap().revision.max(1);
                        let result = mvcc::range(&view, &request).map(|mut r| {
                            r.header = Some(header);
                            Response::Range(r)
                        });
                        self.answers.push((id, result));
                    }
                    Output::Fatal(e) => panic!("fatal: {e}"),
                    Output::Watch {
                        stream, response, ..
                    } => self.watched.push((stream, response)),
                    Output::WatchCatchUp(job) => {
                        let view = self.kv.read().unwrap();
                        let outcome = watch::catch_up(&view, &job).unwrap();
                        match &outcome {
                            watch::CatchUpOutcome::Events { response, .. } => {
                                if let Some(response) = response {
                                    self.watched.push((job.stream, response.clone()));
                                }
                            }
                            watch::CatchUpOutcome::Compacted { response } => {
                                self.watched.push((job.stream, response.clone()));
                            }
                        }
                        self.node.handle(self.now, outcome.input(&job));
                    }
                }
            }
        }

        /// Persists the oldest outstanding batch; returns its entry count.
        fn persist_one(&mut self) -> usize {
            let Some(Output::Persist {
                entries,
                hard_state,
            }) = self.unpersisted.pop_front()
            else {
                return 0;
            };
            self.log.append(&entries, hard_state.as_ref()).unwrap();
            let index = entries.last().map_or(0, |e| e.index);
            self.node.handle(Instant::ZERO, Input::Persisted { index });
            self.drain();
            entries.len()
        }

        fn settle(&mut self) {
            self.drain();
            for _ in 0..1_000 {
                if self.persist_one() == 0 && self.unpersisted.is_empty() {
                    break;
                }
            }
        }

        fn put(&mut self, id: RequestId, key: &str, value: &str) {
            let put = PutRequest {
                key: key.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
                ..Default::default()
            };
            self.node
                .handle(Instant::ZERO, Input::Client(id, Request::Put(put)));
            self.drain();
        }

        fn get(&mut self, id: RequestId, key: &str) {
            let range = RangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            };
            self.node
                .handle(Instant::ZERO, Input::Client(id, Request::Range(range)));
            self.drain();
        }

        fn answer(&mut self, id: RequestId) -> Option<Result<Response, Error>> {
            let at = self.answers.iter().position(|(i, _)| *i == id)?;
            Some(self.answers.remove(at).1)
        }

        fn range_answer(&mut self, id: RequestId) -> RangeResponse {
            match self.answer(id) {
                Some(Ok(Response::Range(r))) => r,
                other => panic!("expected a range answer, got {other:?}"),
            }
        }

        /// Feeds a request at the harness's time and settles.
        fn call(&mut self, id: RequestId, request: Request) -> Result<Response, Error> {
            self.node.handle(self.now, Input::Client(id, request));
            self.settle();
            self.answer(id).expect("request answered")
        }

        fn watch(&mut self, stream: StreamId, request: WatchRequest) {
            self.node.handle(self.now, Input::Watch { stream, request });
            self.settle();
        }

        /// Lets time pass and fires due timers.
        fn advance(&mut self, by: Duration) {
            self.now = self.now + by;
            self.node.handle_timeout(self.now);
            self.settle();
        }

        fn take_watched(&mut self) -> Vec<(StreamId, WatchResponse)> {
            std::mem::take(&mut self.watched)
        }
    }

    fn create_watch(key: &str, end: &str, start_revision: i64) -> WatchRequest {
        use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
        WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(
                oxetcd_proto::etcdserverpb::WatchCreateRequest {
                    key: key.as_bytes().to_vec(),
                    range_end: end.as_bytes().to_vec(),
                    start_revision,
                    prev_kv: true,
                    ..Default::default()
                },
            )),
        }
    }

    /// (watch id, header revision, [(key, mod revision, is delete, prev value)])
    fn summary(responses: &[(StreamId, WatchResponse)]) -> Vec<(i64, i64, Vec<String>)> {
        responses
            .iter()
            .map(|(_, r)| {
                let events = r
                    .events
                    .iter()
                    .map(|e| {
                        let kv = e.kv.clone().unwrap_or_default();
                        let prev = e
                            .prev_kv
                            .as_ref()
                            .map(|p| String::from_utf8_lossy(&p.value).into_owned());
                        format!(
                            "{}{}@{}{}",
                            if e.r#type == 1 { "-" } else { "+" },
                            String::from_utf8_lossy(&kv.key),
                            kv.mod_revision,
                            prev.map_or(String::new(), |p| format!(" prev {p}"))
                        )
                    })
                    .collect();
                (r.watch_id, r.header.unwrap_or_default().revision, events)
            })
            .collect()
    }

    #[test]
    fn lease_attaches_keys_expires_on_time_and_deletes_them_in_one_revision() {
        use oxetcd_proto::etcdserverpb::{
            LeaseGrantRequest, LeaseKeepAliveRequest, LeaseTimeToLiveRequest,
        };
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        let grant = h.call(1, Request::LeaseGrant(LeaseGrantRequest { ttl: 1, id: 0 }));
        let Ok(Response::LeaseGrant(grant)) = grant else {
            panic!("{grant:?}");
        };
        assert_eq!(grant.ttl, 2, "raised to the minimum TTL");
        assert!(grant.id > 0);
        let with_lease = |key: &str, lease| {
            Request::Put(PutRequest {
                key: key.as_bytes().to_vec(),
                value: b"v".to_vec(),
                lease,
                ..Default::default()
            })
        };
        assert!(h.call(2, with_lease("a", grant.id)).is_ok());
        assert!(h.call(3, with_lease("b", grant.id)).is_ok());
        assert_eq!(h.call(4, with_lease("c", 99)), Err(Error::LeaseNotFound));
        let ttl = h.call(
            5,
            Request::LeaseTimeToLive(LeaseTimeToLiveRequest {
                id: grant.id,
                keys: true,
            }),
        );
        let Ok(Response::LeaseTimeToLive(ttl)) = ttl else {
            panic!("{ttl:?}");
        };
        assert_eq!(ttl.keys, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(ttl.granted_ttl, 2);
        h.watch(1, create_watch("a", "c", 0));
        // Granted at time 0 by the leader: it expires at 2 s unless renewed.
        h.advance(Duration::from_millis(1_900));
        let keep_alive = Request::LeaseKeepAlive(LeaseKeepAliveRequest { id: grant.id });
        let Ok(Response::LeaseKeepAlive(renewed)) = h.call(6, keep_alive.clone()) else {
            panic!("keep-alive failed");
        };
        assert_eq!(renewed.ttl, 2);
        h.advance(Duration::from_millis(1_900));
        h.get(7, "a");
        assert_eq!(
            h.range_answer(7).kvs.len(),
            1,
            "renewed lease expired early"
        );
        h.advance(Duration::from_millis(200));
        h.get(8, "a");
        let range = h.range_answer(8);
        assert!(range.kvs.is_empty());
        assert_eq!(
            range.header.unwrap().revision,
            4,
            "both keys in one revision"
        );
        let Ok(Response::LeaseKeepAlive(gone)) = h.call(9, keep_alive) else {
            panic!("keep-alive failed");
        };
        assert_eq!(gone.ttl, 0);
        let watched = summary(&h.take_watched());
        assert_eq!(
            watched,
            vec![
                (0, 3, vec![]),
                (0, 4, vec!["-a@4 prev v".into(), "-b@4 prev v".into()])
            ]
        );
    }

    #[test]
    fn watch_delivers_live_and_historical_events_once_each() {
        use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "k1", "a");
        h.settle();
        h.watch(7, create_watch("k", "l", 0));
        h.put(2, "k2", "b");
        h.put(3, "x", "c");
        h.put(4, "k1", "d");
        h.settle();
        // A second watcher on the same stream replays history from rev 1.
        h.watch(7, create_watch("k", "l", 1));
        h.put(5, "k2", "e");
        h.settle();
        h.watch(
            7,
            WatchRequest {
                request_union: Some(RequestUnion::ProgressRequest(Default::default())),
            },
        );
        let watched = summary(&h.take_watched());
        assert_eq!(
            watched,
            vec![
                (0, 2, vec![]),
                (0, 3, vec!["+k2@3".into()]),
                (0, 5, vec!["+k1@5 prev a".into()]),
                (1, 5, vec![]),
                (
                    1,
                    5,
                    vec!["+k1@2".into(), "+k2@3".into(), "+k1@5 prev a".into()]
                ),
                (0, 6, vec!["+k2@6 prev b".into()]),
                (1, 6, vec!["+k2@6 prev b".into()]),
                (-1, 6, vec![]),
            ]
        );
    }

    #[test]
    fn leases_survive_a_restart_with_their_checkpointed_ttl() {
        use oxetcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseTimeToLiveRequest};
        let log = MemoryLog::default();
        let kv = MemoryKv::default();
        let mut config = Config::single("test");
        config.lease.checkpoint_interval = Duration::from_secs(10);
        let node = Node::new(config.clone(), log.clone(), kv.clone(), Instant::ZERO).unwrap();
        let mut h = Harness {
            node,
            log: log.clone(),
            kv: kv.clone(),
            unpersisted: VecDeque::new(),
            answers: Vec::new(),
            watched: Vec::new(),
            now: Instant::ZERO,
        };
        h.settle();
        let grant = Request::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 42 });
        assert!(h.call(1, grant.clone()).is_ok());
        assert_eq!(h.call(2, grant), Err(Error::LeaseExists));
        h.advance(Duration::from_secs(10));
        h.advance(Duration::from_secs(10));
        drop(h);
        let node = Node::new(config, log.clone(), kv.clone(), Instant::ZERO).unwrap();
        let mut h = Harness {
            node,
            log,
            kv,
            unpersisted: VecDeque::new(),
            answers: Vec::new(),
            watched: Vec::new(),
            now: Instant::ZERO,
        };
        h.settle();
        let Ok(Response::LeaseTimeToLive(ttl)) = h.call(
            3,
            Request::LeaseTimeToLive(LeaseTimeToLiveRequest {
                id: 42,
                keys: false,
            }),
        ) else {
            panic!("time to live failed");
        };
        // 40 s were left at the last checkpoint; the new leader adds its
        // election timeout (1 s) and truncates to whole seconds.
        assert_eq!((ttl.ttl, ttl.granted_ttl), (41, 60));
    }

    #[test]
    fn put_is_answered_after_persist_and_apply() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "foo", "bar");
        assert!(
            h.answer(1).is_none(),
            "answered before the entry was durable"
        );
        h.settle();
        let Some(Ok(Response::Put(put))) = h.answer(1) else {
            panic!("no put answer");
        };
        let header = put.header.unwrap();
        assert_eq!(header.revision, 2);
        assert_eq!(header.member_id, h.node.member_id());
        assert_eq!(header.raft_term, 1);
        h.get(2, "foo");
        let range = h.range_answer(2);
        assert_eq!(range.kvs.len(), 1);
        assert_eq!(range.kvs[0].value, b"bar");
        assert_eq!(range.header.unwrap().revision, 2);
    }

    #[test]
    fn writes_during_an_fsync_share_the_next_one() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "a", "1");
        assert_eq!(h.unpersisted.len(), 1, "first write goes out at once");
        for id in 2..=100 {
            h.put(id, "a", "x");
        }
        assert_eq!(
            h.unpersisted.len(),
            1,
            "no second persist while one is in flight"
        );
        assert_eq!(h.persist_one(), 1);
        assert_eq!(
            h.persist_one(),
            99,
            "the 99 waiting writes ride one persist"
        );
        for id in 1..=100 {
            let Some(Ok(Response::Put(put))) = h.answer(id) else {
                panic!("put {id} not answered");
            };
            // Each write reports its own revision, not its batch's.
            assert_eq!(put.header.unwrap().revision, 1 + id as i64);
        }
    }

    #[test]
    fn linearizable_read_waits_for_pending_apply() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "k", "v1");
        h.settle();
        h.put(2, "k", "v2");
        // The second put is not committed yet: a read may answer at once
        // with the committed state.
        h.get(3, "k");
        assert_eq!(h.range_answer(3).kvs[0].value, b"v1");
        h.settle();
        h.get(4, "k");
        assert_eq!(h.range_answer(4).kvs[0].value, b"v2");
    }

    #[test]
    fn oversized_proposal_is_refused_and_nothing_is_lost() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "k", "small");
        h.settle();
        let big = "x".repeat(1_572_864);
        h.put(2, "k", &big);
        assert_eq!(h.answer(2), Some(Err(Error::RequestTooLarge)));
        h.get(3, "k");
        assert_eq!(h.range_answer(3).kvs[0].value, b"small");
    }

    #[test]
    fn empty_key_is_refused() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "", "v");
        assert_eq!(h.answer(1), Some(Err(Error::EmptyKey)));
    }

    #[test]
    fn restart_replays_unapplied_entries_once() {
        let log = MemoryLog::default();
        let kv = MemoryKv::default();
        let mut h = Harness::new(log.clone(), kv.clone());
        for id in 1..=10 {
            h.put(id, &format!("k{id}"), "v");
        }
        h.settle();
        drop(h);
        // Restart on a backend that applied only part of the log: a read
        // that arrives before the new term's first entry commits waits for
        // the replay instead of answering from the old state.
        let lagging = MemoryKv::default();
        let node = Node::new(
            Config::single("test"),
            log.clone(),
            lagging.clone(),
            Instant::ZERO,
        );
        let mut h = Harness {
            node: node.unwrap(),
            log: log.clone(),
            kv: lagging,
            unpersisted: VecDeque::new(),
            answers: Vec::new(),
            watched: Vec::new(),
            now: Instant::ZERO,
        };
        h.get(1, "k10");
        assert!(h.answer(1).is_none(), "read answered before the replay");
        h.settle();
        assert_eq!(h.range_answer(1).kvs.len(), 1);
        drop(h);
        // Same backend: nothing is applied twice.
        let mut h = Harness::new(log.clone(), kv.clone());
        h.get(1, "k1");
        let range = h.range_answer(1);
        assert_eq!(range.header.unwrap().revision, 11);
        assert_eq!(range.kvs[0].version, 1);
        drop(h);
        // A backend that lost everything (never made durable): the log
        // replays into the same revisions.
        let mut h = Harness::new(log, MemoryKv::default());
        h.get(2, "k10");
        let range = h.range_answer(2);
        assert_eq!(range.header.unwrap().revision, 11);
        assert_eq!(range.kvs[0].mod_revision, 11);
        assert_eq!(h.node.applied_index(), h.log.state().unwrap().last_index);
    }
}
