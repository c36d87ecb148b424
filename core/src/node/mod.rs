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
//! a normal entry. A follower forwards a promote to the leader, which alone
//! knows whether the learner is in sync ([`lease_forward`]); with
//! `learner_auto_promote` the leader promotes an in-sync learner itself
//! ([`auto_promote`]). Once a leader is known, a member publishes its own name
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
//! Alarms and the quota ([`alarms`]). Writes are refused at admission
//! while an applied alarm forbids them or when they would take the
//! backend's bytes in use to the quota (this member then raises NOSPACE
//! through the log); the apply step checks the alarms again, on every
//! member alike.
//!
//! Auto-compaction ([`crate::compactor`]) is the leader's: the compactor
//! is fed the time and the revision, and a compaction it asks for is
//! proposed through the log like a client's, its outcome reported back.
//!
//! Versions ([`versions`], [`crate::version`]). A member publishes its
//! server version with its attributes; the leader sets the cluster version
//! through the log once every member has published, and ends a finished
//! downgrade every `--downgrade-check-time`. `Maintenance.Downgrade`
//! validates after a read barrier and enables or cancels through the log.
//! A member outside the cluster version's range reports it
//! ([`Node::version_refusal`]); the runtime stops it.
//!
//! Leases and watches hang off the apply step: every applied write moves
//! keys between leases ([`crate::lease`]) and is matched against the synced
//! watchers ([`crate::watch`]) on every member.
//!
//! This module never reads the clock and never touches storage except
//! through the traits in [`crate::storage`].

mod access;
mod alarms;
mod apply;
mod auto_promote;
mod io;
mod leadership;
mod lease_forward;
mod membership;
mod metrics;
mod proposals;
mod propose;
mod publication;
mod reads;
mod reconfigure;
mod requests;
mod snapshots;
mod versions;

#[cfg(test)]
mod canary_tests;
#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod membership_tests;
#[cfg(test)]
mod sim_hash;
#[cfg(test)]
mod sim_leases;
#[cfg(test)]
mod sim_members;
#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod sim_watches;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod version_tests;

use std::collections::VecDeque;

use bytes::Bytes;
use hashbrown::HashMap;
use prost::Message as _;
use tracing::{debug, info, warn};

use oxetcd_proto::eraftpb::{ConfChangeType, Entry, EntryType};
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, LeaseCheckpointRequest, LeaseRevokeRequest, Member, ResponseHeader,
    StatusResponse,
};
use oxetcd_proto::oxetcdpb::{proposal, Proposal};

use self::alarms::AlarmState;
pub use self::io::{
    grpc_message_bytes, ClusterState, Config, DirectReads, InitialMember, Input, Output,
    GRPC_OVERHEAD_BYTES,
};
use self::lease_forward::{is_lease_forward, Forwarded};
use self::membership::Members;
pub use self::metrics::{live_keys, NodeMetrics};
use self::proposals::Proposals;
use self::publication::Publication;
use self::reads::{PendingRead, ReadKind, Reads};
use self::requests::{Leaderless, Requests};
use self::versions::VersionMonitor;
use crate::auth::{AuthInfo, AuthRequest, AuthStore};
use crate::compactor::Compactor;
use crate::error::Error;
use crate::lease::Lessor;
use crate::mvcc;
use crate::raft::{self, Action, DurableState, PersistId, ProposeError, Raft, Role, StartError};
use crate::storage::{KvMeta, KvRead, KvStore, LogStore, StorageError};
use crate::version::ClusterVersions;
use crate::watch::{self, WatchRegistry};
use crate::{Instant, Request, Response};

/// Identifies a client request; chosen by the runtime, echoed in `Respond`.
pub type RequestId = u64;

/// Proposals allowed between the applied index and the last index before
/// new writes are refused with `etcdserver: too many requests`: etcd's gap
/// between commit and apply.
const UNAPPLIED_ENTRIES_MAX: u64 = 5_000;

/// With `priority_request` (etcd 3.7's `PriorityRequest` gate), a client's
/// lease revoke is still proposed up to this gap, so that leases can be
/// revoked, and their keys freed, while a write burst is applied.
const UNAPPLIED_PRIORITY_MAX: u64 = 10_000;

/// Requests held while no leader is known, at most; beyond it they fail at
/// once with `etcdserver: no leader`. Each holds a decoded request, so the
/// bound is the runtime's own in-flight bound.
const LEADERLESS_REQUESTS_MAX: usize = 8_192;

/// A learner may be promoted once its log holds this share of the leader's
/// (etcd's `readyPercent`).
const LEARNER_READY_PERCENT: u64 = 90;

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
    /// The node itself (an alarm it raises); the answer is dropped.
    Internal,
    /// This member's auto-compactor.
    Compactor,
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
    /// What the runtime was last told about serializable ranges.
    direct_reads: DirectReads,
    /// Set after a storage error: nothing more is done.
    poisoned: bool,
    /// The latest time an input brought.
    now: Instant,
    /// Leases and their attached keys.
    lessor: Lessor,
    /// Users, roles and permissions.
    auth: AuthStore,
    /// Every watcher.
    watches: WatchRegistry,
    /// Keep-alives of expired leases, answered once the revoke applies.
    parked_renewals: HashMap<i64, Vec<Ticket>>,
    /// When the leader compacts the history on its own.
    compactor: Compactor,
    /// This member's name and client URLs on their way to the membership.
    publication: Publication,
    /// This member applied its own removal.
    removed: bool,
    /// Alarms and the bytes in use the quota is judged on.
    alarms: AlarmState,
    /// The runtime reported that its log writes fail for want of space
    /// ([`Input::DiskFull`]): new writes are refused until it clears.
    disk_full: bool,
    /// What the runtime's metrics read ([`Node::metrics`]).
    counters: metrics::Counters,
    /// Members' server versions, the cluster version, the downgrade job.
    versions: ClusterVersions,
    /// The leader's version timers.
    version_monitor: VersionMonitor,
}

/// The log and the backend must describe one history: the backend has
/// applied no entry the log never held, and the log still holds every
/// entry the backend has not applied.
fn check_stores_agree(state: &crate::storage::LogState, meta: &KvMeta) -> Result<(), Error> {
    if meta.applied_index > state.last_index {
        return Err(Error::Storage(StorageError::invariant(format_args!(
            "backend applied index {} is past the last log index {}",
            meta.applied_index, state.last_index
        ))));
    }
    if state.first_index > meta.applied_index + 1 {
        return Err(Error::Storage(StorageError::invariant(format_args!(
            "log starts at {} but the backend has applied only up to {}",
            state.first_index, meta.applied_index
        ))));
    }
    Ok(())
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Starts a node on what `log` and `kv` hold. Entries the backend has
    /// not applied are applied again as the raft hands them out. An empty
    /// member of a new cluster bootstraps it from the initial members.
    pub fn new(mut config: Config, log: L, kv: K, now: Instant) -> Result<Self, Error> {
        let state = log.state()?;
        if config.cluster_id == 0 {
            config.cluster_id = state.cluster_id;
        }
        let view = kv.read()?;
        let meta = view.meta()?;
        let meta = KvMeta {
            revision: meta.revision.max(1),
            applied_index: crate::canary::applied_index_at_start(meta.applied_index, &state),
            ..meta
        };
        check_stores_agree(&state, &meta)?;
        let fresh = state.last_index == 0 && state.hard_state.term == 0;
        let initial_voters: Vec<u64> = config.initial_members.iter().map(|m| m.id).collect();
        let stored = view.membership()?;
        let versions = stored
            .as_ref()
            .map(|m| ClusterVersions::from_record(&m.versions))
            .unwrap_or_default();
        let (conf_state, members, membership_unsaved) = membership::stored_membership(
            stored,
            fresh || meta.applied_index == 0,
            &config,
            &initial_voters,
        );
        let lessor = Lessor::recover(config.lease, &view)?;
        let auth = AuthStore::recover(view.auth()?, config.auth_token_ttl);
        let alarms = AlarmState::recover(&view)?;
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
        let mut raft = Raft::new(raft_config, durable, log, now).map_err(|e| match e {
            StartError::Storage(e) => e,
            config @ StartError::Config(_) => StorageError::invariant(config),
        })?;
        if fresh && config.initial_cluster_state == ClusterState::New {
            membership::bootstrap(&mut raft, &config)?;
        }
        let proposal_base = proposals::mix(&[
            config.member_id,
            state.hard_state.term,
            state.hard_state.commit,
            state.last_index,
            meta.applied_index,
        ]);
        let watches = WatchRegistry::new(config.watch_progress_notify_interval);
        // What the raft knows committed before it hears from anyone.
        let commit_at_start = raft.committed();
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
            direct_reads: DirectReads::default(),
            poisoned: false,
            now,
            lessor,
            auth,
            watches,
            parked_renewals: HashMap::new(),
            compactor: Compactor::new(config.auto_compaction, now, meta.revision),
            publication: Publication::default(),
            removed: false,
            alarms,
            disk_full: false,
            counters: metrics::Counters::default(),
            versions,
            version_monitor: VersionMonitor::starting_at(commit_at_start),
            config,
        };
        node.update_sole_voter();
        Ok(node)
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) {
        self.now = self.now.max(now);
        if self.poisoned {
            if let Input::Client(id, _, _) = input {
                self.outputs
                    .push_back(Output::Respond(id, Err(Error::Stopped)));
            }
            return;
        }
        match input {
            Input::Client(id, request, credentials) => {
                let ticket = self.admit(id);
                match self.auth.resolve(&credentials, self.now) {
                    Ok(who) => self.dispatch(ticket, request, who),
                    Err(e) => self.answer(ticket, Err(e)),
                }
            }
            Input::Peer(message) => self.handle_peer(message),
            Input::ClusterId { id } => self.learn_cluster_id(id),
            Input::Persisted { id } => self.handle_persisted(id),
            Input::SnapshotReceived { message } => self.raft.step(self.now, message),
            Input::SnapshotSent { to, delivered } => self.raft.report_snapshot(to, delivered),
            Input::Unreachable { to } => self.raft.report_unreachable(to),
            Input::DiskFull { full } => self.disk_full = full,
            Input::Watch {
                stream,
                request,
                credentials,
            } => self.handle_watch_request(stream, request, &credentials),
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
            if let Some(changed) = self.direct_reads_changed() {
                return Some(Output::DirectReads(changed));
            }
            if let Some(output) = self.outputs.pop_front() {
                return Some(output);
            }
            if self.poisoned {
                return None;
            }
            self.start_read_round();
            self.campaign_if_alone();
            self.maybe_publish();
            self.maybe_set_cluster_version();
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
            self.compactor.poll_timeout(),
            self.version_monitor.poll_timeout(),
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
        self.auto_promote_learners();
        self.run_compactor();
        self.check_downgrade();
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

    /// True once this member applied its own removal from the cluster (and,
    /// as the leader, said its farewell): the runtime should stop it.
    pub fn is_removed(&self) -> bool {
        // A member re-added under the same ID (IDs come from peer URLs) replays
        // its old removal while catching up: only one that still holds counts.
        self.removed
            && self.members.get(self.config.member_id).is_none()
            && self.meta.applied_index >= self.raft.committed()
            && !self.raft.saying_farewell()
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

    /// Takes the cluster ID a joining member learned from its peers
    /// ([`Input::ClusterId`]) and has it stored.
    fn learn_cluster_id(&mut self, cluster_id: u64) {
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
        self.outputs.push_back(Output::StoreClusterId(cluster_id));
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
            Some(Origin::Compactor) => {
                let revision = self.meta.revision;
                let outcome = result.as_ref().map(|_| ());
                self.compactor.handle_result(self.now, revision, outcome);
            }
            Some(Origin::Internal) | None => {}
        }
    }

    fn dispatch(&mut self, ticket: Ticket, request: Request, who: AuthInfo) {
        if matches!(request, Request::Range(_)) {
            self.counters.ranges += 1;
        }
        if let Err(e) = mvcc::validate(&request, &self.config.limits) {
            return self.answer(ticket, Err(e));
        }
        // Learners answer status and serializable ranges only, as etcd's.
        let learner_may = matches!(&request, Request::Status)
            || matches!(&request, Request::Range(r) if r.serializable);
        if !learner_may && self.is_learner() {
            return self.answer(ticket, Err(Error::NotSupportedForLearner));
        }
        if let Err(e) = self.check_admission(&request, &who) {
            return self.answer(ticket, Err(e));
        }
        let write = match request.into_write() {
            Ok(write) => write,
            Err(request) => return self.dispatch_read_or_change(ticket, request, who),
        };
        if let crate::Write::MemberUpdate(r) = &write {
            if let Err(e) = self.members.check_update(r) {
                return self.answer(ticket, Err(e));
            }
        }
        if let Err(e) = self.check_alarms_and_quota(&write) {
            return self.answer(ticket, Err(e));
        }
        if self.disk_full {
            return self.answer(ticket, Err(Error::DiskFull));
        }
        let proposal = Proposal {
            id: self.next_proposal_id(),
            request: Some(write),
            user: who.user,
            auth_revision: who.revision,
        };
        let data = proposal.encode_to_vec();
        if data.len() > self.config.max_request_bytes {
            return self.answer(ticket, Err(Error::RequestTooLarge));
        }
        let id = proposal.id;
        self.propose(ticket, id, EntryType::EntryNormal, Bytes::from(data));
        self.proposals.keep_decoded(id, proposal);
    }

    /// Requests that are not writes: answered at once, read after a read
    /// barrier, forwarded, or turned into raft configuration changes.
    fn dispatch_read_or_change(&mut self, ticket: Ticket, request: Request, who: AuthInfo) {
        let request = match request {
            Request::Status => {
                let status = self.status();
                return self.answer(ticket, Ok(Response::Status(status)));
            }
            Request::Range(range)
                if range.serializable || crate::canary::on(crate::canary::Canary::StaleRead) =>
            {
                return self.serve_read(ticket, ReadKind::Range(range, who));
            }
            Request::MemberList(list) if !list.linearizable => {
                return self.serve_read(ticket, ReadKind::MemberList);
            }
            other => other,
        };
        if self.raft.leader().is_none() {
            return self.hold_for_leader(ticket, Held::Request(request, who));
        }
        match request {
            Request::Range(range) => self.queue_read(ticket, ReadKind::Range(range, who)),
            Request::MemberList(_) => self.queue_read(ticket, ReadKind::MemberList),
            Request::Auth(AuthRequest::Read(read)) => self.queue_read(ticket, ReadKind::Auth(read)),
            // Every member knows which leases exist (etcd lists
            // them on the member asked, too).
            Request::LeaseLeases => self.queue_read(ticket, ReadKind::Lease(Request::LeaseLeases)),
            request @ (Request::LeaseKeepAlive(_) | Request::LeaseTimeToLive(_)) => {
                // Only the leader knows when leases expire.
                match self.raft.leader() {
                    Some(leader) if leader != self.config.member_id => {
                        self.forward_lease(ticket, leader, request, who)
                    }
                    _ => self.serve_lease_as_leader(ticket, request),
                }
            }
            Request::MemberAdd(r) => self.member_add(ticket, r),
            Request::MemberRemove(r) => {
                self.member_change(ticket, ConfChangeType::RemoveNode, r.id, Bytes::new())
            }
            // Only the leader knows whether a learner is in sync with it.
            Request::MemberPromote(r) => match self.raft.leader() {
                Some(leader) if leader != self.config.member_id => {
                    self.forward_lease(ticket, leader, Request::MemberPromote(r), who)
                }
                _ => self.member_change(ticket, ConfChangeType::AddNode, r.id, Bytes::new()),
            },
            Request::MoveLeader(r) => self.move_leader(ticket, r.target_id),
            Request::Downgrade(r) => self.downgrade(ticket, r, who),
            other => {
                debug!(?other, "request kind not dispatched");
                self.answer(ticket, Err(Error::Unimplemented("this request")))
            }
        }
    }

    // ----- timers -------------------------------------------------------

    /// Proposes the revokes of expired leases and the due checkpoints
    /// (the lessor holds deadlines only while this member leads).
    fn handle_lease_timers(&mut self) {
        let (revokes, checkpoints) = self.lessor.poll_due(self.now);
        self.counters.leases_expired += revokes.len() as u64;
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

    /// The auto-compactor looks, if it is time; a leader proposes the
    /// compaction it asks for through the log, as a client's, and the
    /// compactor hears the outcome when it is answered.
    fn run_compactor(&mut self) {
        let leading = self.raft.role() == Role::Leader;
        let Some(revision) = self
            .compactor
            .handle_timeout(self.now, self.meta.revision, leading)
        else {
            return;
        };
        let ticket = self.admit_origin(Origin::Compactor);
        let proposal = Proposal {
            id: self.next_proposal_id(),
            request: Some(proposal::Request::Compaction(CompactionRequest {
                revision,
                physical: false,
            })),
            ..Proposal::default()
        };
        let data = Bytes::from(proposal.encode_to_vec());
        self.propose(ticket, proposal.id, EntryType::EntryNormal, data);
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
        let (proposals, reads) = (self.proposals.len(), self.reads.len());
        self.proposals.retain(|t| requests.waits(t));
        self.leaderless.retain(|t| requests.waits(t));
        self.reads.retain(|t| requests.waits(t));
        self.counters.proposals_failed += (proposals - self.proposals.len()) as u64;
        self.counters.slow_read_indexes += (reads - self.reads.len()) as u64;
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

    // ----- apply ----------------------------------------------------------

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
            errors: self.status_errors(),
            db_size_in_use: i64::try_from(self.alarms.used_bytes).unwrap_or(i64::MAX),
            version: self.config.server_version.to_string(),
            storage_version: self
                .versions
                .storage()
                .map(|v| v.to_string())
                .unwrap_or_default(),
            downgrade_info: Some(self.versions.downgrade_info()),
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
    /// Not looked at yet beyond validation, with who asks.
    Request(Request, AuthInfo),
    /// A proposal this member encoded, to propose or forward.
    Entry {
        proposal_id: u64,
        entry_type: EntryType,
        data: Bytes,
    },
    /// A read waiting for a read-index round.
    Read(ReadKind),
}
