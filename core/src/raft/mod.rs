//! Raft consensus as a pure state machine.
//!
//! [`Raft`] is driven, it never drives, with the crate's contract: feed it
//! inputs with the current time ([`Raft::step`] for peer messages,
//! [`Raft::handle_timeout`] when [`Raft::poll_timeout`] says so,
//! [`Raft::persisted`] when a write is durable, and the client-facing
//! [`Raft::propose`], [`Raft::read_index`], [`Raft::transfer_leader`]), then
//! drain [`Raft::poll_action`] until it returns `None`.
//!
//! Durability ordering is data. Entries and hard state leave as
//! [`Action::Persist`], numbered by a [`PersistId`]; messages that promise
//! durability (vote grants, append acknowledgements) are held back until the
//! runtime reports the write that covers them with [`Raft::persisted`]. A
//! leader's appends to followers are not held back: they go out while its
//! own write is in flight, and the leader counts itself toward a commit only
//! once its write is durable.
//!
//! Implemented: elections with randomized timeouts drawn from the raft's own
//! seeded RNG, pre-vote, check-quorum (a leader steps down once a majority
//! has been silent for an election timeout; followers in contact with a
//! leader ignore vote requests), log replication with per-member progress
//! ([`progress`]), ReadIndex with batched rounds ([`read_only`]), leader
//! transfer (`MsgTimeoutNow`), single-step membership changes through the log
//! (voters and learners; learners never vote or count), and snapshot hooks
//! ([`Action::SendSnapshot`] on the leader, `MsgSnapshot` on a follower,
//! [`Persist::snapshot`] to install it). Joint consensus is not implemented.
//!
//! This module never reads the clock, draws ambient randomness, or writes
//! storage; it reads durable entries back only through a [`LogSource`].
//! Malformed or stale peer messages are dropped and logged at debug; they
//! never reach an assertion.

mod log;
mod progress;
mod quorum;
mod read_only;
mod rng;

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod sim;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState, Message, MessageType,
    Snapshot, SnapshotMetadata,
};
use protobuf::Message as _;
use tracing::{debug, info, warn};

use self::log::{entry_bytes, AppendOutcome, LogError, RaftLog};
use self::progress::ProgressTracker;
use self::read_only::{parse_round, round_context, ReadOrigin};
use self::rng::Rng;
use crate::storage::StorageError;
use crate::Instant;

pub use self::log::{LogSource, ENTRIES_PER_BATCH_MAX, LOG_CACHE_BYTES_MAX, LOG_CACHE_ENTRIES_MAX};
pub use self::progress::{Inflights, Progress, ProgressState};
pub use self::quorum::{MajorityConfig, VoteResult};
pub use self::read_only::{ReadIndexQueue, ReadState, READ_INDEX_PENDING_MAX};

/// Messages queued for sending at most. The runtime drains after every
/// input, so this is only reached when it does not; beyond it messages are
/// dropped, which Raft tolerates like any network loss.
pub const OUTBOX_MESSAGES_MAX: usize = 16_384;

/// Messages waiting for a write to become durable, at most (beyond it they
/// are dropped: a lost acknowledgement is resent by the protocol).
pub const PERSIST_WAITING_MESSAGES_MAX: usize = 16_384;

/// Writes handed out and not yet acknowledged, at most. One: while a write is
/// in flight, everything new accumulates and rides the next one (group
/// commit), and acknowledgements arrive in order by construction.
pub const PERSIST_INFLIGHT_MAX: usize = 1;

/// Bytes of committed entries handed out in one [`Action::Apply`] at most,
/// so one apply step stays short.
pub const APPLY_BATCH_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// Context of vote requests sent on a leader's request (`MsgTimeoutNow`):
/// voters grant them even while in contact with the old leader.
pub const CAMPAIGN_TRANSFER_CONTEXT: &[u8] = b"CampaignTransfer";

/// Static configuration of one member's raft.
#[derive(Clone, Debug)]
pub struct Config {
    /// This member's ID; never 0.
    pub id: u64,
    /// Base election timeout (`--election-timeout`). A follower that hears
    /// no leader for a random time in `[timeout, 2 × timeout)` campaigns.
    pub election_timeout: Duration,
    /// Heartbeat interval (`--heartbeat-interval`).
    pub heartbeat_interval: Duration,
    /// Campaign with a pre-vote first, so a member that cannot win does
    /// not raise everyone's term.
    pub pre_vote: bool,
    /// A leader steps down when a majority has been silent for an election
    /// timeout; followers in contact with a leader ignore vote requests.
    pub check_quorum: bool,
    /// Unacknowledged appends per member in replication, at most.
    pub max_inflight_msgs: usize,
    /// Bytes of entries per append message, at most (at least one entry is
    /// always sent).
    pub max_msg_bytes: u64,
    /// Bytes of proposed, uncommitted entries a leader accepts before it
    /// refuses proposals with [`ProposeError::Busy`].
    pub max_uncommitted_bytes: u64,
    /// Seed of the election jitter; same seed, same behaviour.
    pub rng_seed: u64,
}

impl Config {
    /// etcd's defaults (1000 ms election timeout, 100 ms heartbeat,
    /// pre-vote and check-quorum on) for member `id`, seeded by its ID.
    pub fn new(id: u64) -> Self {
        Self {
            id,
            election_timeout: Duration::from_millis(1_000),
            heartbeat_interval: Duration::from_millis(100),
            pre_vote: true,
            check_quorum: true,
            max_inflight_msgs: 512,
            max_msg_bytes: 1024 * 1024,
            max_uncommitted_bytes: 64 * 1024 * 1024,
            rng_seed: id,
        }
    }

    fn validate(&self) -> Result<(), StartError> {
        let problem = if self.id == 0 {
            "member id 0 is reserved for \"none\""
        } else if self.heartbeat_interval.is_zero() {
            "heartbeat interval must be positive"
        } else if self.election_timeout <= self.heartbeat_interval {
            "election timeout must exceed the heartbeat interval"
        } else if self.max_inflight_msgs == 0 {
            "max in-flight messages must be at least 1"
        } else if self.max_msg_bytes == 0 {
            "max message bytes must be at least 1"
        } else {
            return Ok(());
        };
        Err(StartError::Config(problem))
    }
}

/// What storage holds when the raft starts.
#[derive(Clone, Debug, Default)]
pub struct DurableState {
    /// Term, vote and commit as last persisted.
    pub hard_state: HardState,
    /// Membership as of `applied`. Entries after it are applied again,
    /// membership changes included.
    pub conf_state: ConfState,
    /// Index of the last entry the state machine holds (durably).
    pub applied: u64,
    /// The log is compacted up to here (0: never).
    pub snapshot_index: u64,
    /// Term of the entry at `snapshot_index`.
    pub snapshot_term: u64,
    /// Index of the last stored entry (`snapshot_index` if none).
    pub last_index: u64,
}

/// A member's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Follows a leader, or waits for one.
    Follower,
    /// Asking whether it could win an election, without raising its term.
    PreCandidate,
    /// Campaigning in its term.
    Candidate,
    /// Leads its term.
    Leader,
}

/// Numbers a [`Persist`]; acknowledged with [`Raft::persisted`], in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PersistId(pub u64);

/// A write to make durable, in this order: install the snapshot, append the
/// entries, store the hard state — then call [`Raft::persisted`].
#[derive(Clone, Debug, PartialEq)]
pub struct Persist {
    /// Acknowledge with this.
    pub id: PersistId,
    /// If set, the runtime installs the state-machine snapshot it received
    /// for this point (data and applied index), and replaces the whole log
    /// with an empty one compacted at `index`/`term`; the membership it
    /// records is `conf_state`. A newer snapshot may be received while an
    /// older one is being installed, so the runtime keeps received
    /// snapshots by index until one is installed, then drops older ones.
    pub snapshot: Option<SnapshotMetadata>,
    /// Entries to append, replacing any stored at or after the first one's
    /// index.
    pub entries: Vec<Entry>,
    /// Hard state to store, when the term or the vote changed or a snapshot
    /// is installed; then it is the current one. A write is issued only
    /// when entries, a snapshot, the term or the vote changed; a change of
    /// the commit index alone is stored with the next hard state (after a
    /// crash the commit index is recovered from the applied index and the
    /// leader).
    pub hard_state: Option<HardState>,
}

/// Something the raft wants done.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send this message to `message.to`. Loss is tolerated.
    Send(Message),
    /// Make this durable, then call [`Raft::persisted`].
    Persist(Persist),
    /// Apply these committed entries to the state machine, in order.
    /// Membership changes among them are already in effect in the raft;
    /// the state machine records them with its applied index.
    Apply(Vec<Entry>),
    /// A read requested with [`Raft::read_index`] may run once the state
    /// machine has applied `index`.
    ReadReady(ReadState),
    /// Member `to` needs entries this leader has compacted: stream it a
    /// snapshot of the state machine, then send it the message built by
    /// [`snapshot_message`] with `term`, and report the outcome with
    /// [`Raft::report_snapshot`]. Heartbeats and appends to others go on.
    SendSnapshot {
        /// The member to send to.
        to: u64,
        /// The leader term the request belongs to.
        term: u64,
    },
    /// The role or the known leader changed. Reads requested on a leader
    /// that stops leading are dropped without a [`Action::ReadReady`];
    /// proposals may or may not commit.
    RoleChanged {
        /// The new role.
        role: Role,
        /// The current term.
        term: u64,
        /// The leader, if known.
        leader: Option<u64>,
    },
    /// Reading the log failed. The raft does nothing more; the runtime
    /// stops the process.
    Fatal(StorageError),
}

/// Why the raft could not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartError {
    /// The configuration is invalid.
    Config(&'static str),
    /// The durable state is inconsistent or unreadable.
    Storage(StorageError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(problem) => write!(f, "raft config: {problem}"),
            StartError::Storage(e) => write!(f, "raft start: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Why a proposal was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposeError {
    /// Only the leader accepts proposals.
    NotLeader {
        /// The leader, if known, to forward to.
        leader: Option<u64>,
    },
    /// Leadership is being transferred; retry on the new leader.
    TransferringLeadership,
    /// Too many bytes are proposed and not yet committed.
    Busy,
    /// A membership change is proposed and not yet applied.
    ConfChangePending,
    /// The membership change is not allowed.
    InvalidConfChange(&'static str),
}

impl fmt::Display for ProposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProposeError::NotLeader { leader: Some(id) } => {
                write!(f, "not leader; leader is {id:x}")
            }
            ProposeError::NotLeader { leader: None } => write!(f, "not leader; no leader known"),
            ProposeError::TransferringLeadership => write!(f, "leadership transfer in progress"),
            ProposeError::Busy => write!(f, "too many uncommitted proposals"),
            ProposeError::ConfChangePending => write!(f, "a membership change is still pending"),
            ProposeError::InvalidConfChange(why) => write!(f, "invalid membership change: {why}"),
        }
    }
}

impl std::error::Error for ProposeError {}

/// Why a read could not be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadIndexError {
    /// No leader is known to confirm the read.
    NoLeader,
    /// Too many reads wait on this leader ([`READ_INDEX_PENDING_MAX`]).
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

/// Why a leadership transfer could not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferLeaderError {
    /// Only the leader transfers leadership.
    NotLeader,
    /// The target is not a voter (a learner cannot lead).
    NotVoter(u64),
}

impl fmt::Display for TransferLeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferLeaderError::NotLeader => write!(f, "not leader"),
            TransferLeaderError::NotVoter(id) => write!(f, "member {id:x} is not a voter"),
        }
    }
}

impl std::error::Error for TransferLeaderError {}

/// Why [`Raft::bootstrap`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapError {
    /// The log or term is not empty: this member already has history.
    NotEmpty,
    /// At least one voter is needed, and IDs must not be 0.
    InvalidMembers,
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::NotEmpty => write!(f, "cannot bootstrap a member with history"),
            BootstrapError::InvalidMembers => {
                write!(f, "bootstrap needs at least one voter and non-zero IDs")
            }
        }
    }
}

impl std::error::Error for BootstrapError {}

/// Builds the message that ends a snapshot stream (see
/// [`Action::SendSnapshot`]): the follower's raft decides from it whether to
/// install the snapshot it received.
pub fn snapshot_message(from: u64, to: u64, term: u64, metadata: SnapshotMetadata) -> Message {
    Message {
        msg_type: MessageType::MsgSnapshot,
        from,
        to,
        term,
        snapshot: Some(Snapshot {
            metadata: Some(metadata).into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

/// A message held until a write is durable.
#[derive(Clone, Debug)]
enum Deferred {
    Send(Message),
    /// This member's vote for itself in `term` counts once it is durable.
    SelfVote {
        term: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CampaignKind {
    PreVote,
    Election,
    Transfer,
}

/// One member's Raft state machine. See the module documentation.
pub struct Raft<S: LogSource> {
    config: Config,
    id: u64,
    term: u64,
    vote: u64,
    role: Role,
    leader: Option<u64>,
    log: RaftLog<S>,
    tracker: ProgressTracker,
    /// Votes received in the current (pre-)campaign.
    votes: BTreeMap<u64, bool>,
    rng: Rng,
    /// The latest time seen with any input.
    now: Instant,
    election_deadline: Instant,
    heartbeat_deadline: Option<Instant>,
    transfer_deadline: Option<Instant>,
    /// When this follower last heard its leader (check-quorum's lease).
    leader_contact: Option<Instant>,
    lead_transferee: Option<u64>,
    /// No membership change may be proposed until this index is applied.
    pending_conf_index: u64,
    /// The leader committed an entry of its own term.
    term_committed: bool,
    uncommitted_bytes: u64,
    reads: ReadIndexQueue,
    outbox: VecDeque<Message>,
    actions: VecDeque<Action>,
    waiting: VecDeque<(u64, Deferred)>,
    hard_state_dirty: bool,
    /// Number of the last write handed out, and of the last acknowledged.
    persist_issued: u64,
    persist_acked: u64,
    /// Appends should go to every member at the next drain.
    broadcast_pending: bool,
    /// The commit index moved: every member should hear it at the next drain.
    commit_pending: bool,
    /// The last role change reported.
    reported: Option<(Role, u64, Option<u64>)>,
    fatal: Option<StorageError>,
    fatal_reported: bool,
}

impl<S: LogSource> Raft<S> {
    /// Starts from durable state, as a follower with no leader. The election
    /// timer starts in full: a restarted member waits a whole randomized
    /// election timeout before campaigning.
    pub fn new(
        config: Config,
        durable: DurableState,
        source: S,
        now: Instant,
    ) -> Result<Self, StartError> {
        config.validate()?;
        let hs = &durable.hard_state;
        let log = RaftLog::new(
            source,
            durable.snapshot_index,
            durable.snapshot_term,
            durable.last_index,
            hs.commit,
            durable.applied,
        )
        .map_err(StartError::Storage)?;
        let tracker = ProgressTracker::new(
            &durable.conf_state,
            log.last_index() + 1,
            config.max_inflight_msgs,
        );
        let mut raft = Self {
            id: config.id,
            rng: Rng::new(config.rng_seed),
            term: hs.term,
            vote: hs.vote,
            role: Role::Follower,
            leader: None,
            log,
            tracker,
            votes: BTreeMap::new(),
            now,
            election_deadline: now,
            heartbeat_deadline: None,
            transfer_deadline: None,
            leader_contact: None,
            lead_transferee: None,
            pending_conf_index: 0,
            term_committed: false,
            uncommitted_bytes: 0,
            reads: ReadIndexQueue::default(),
            outbox: VecDeque::new(),
            actions: VecDeque::new(),
            waiting: VecDeque::new(),
            hard_state_dirty: false,
            persist_issued: 0,
            persist_acked: 0,
            broadcast_pending: false,
            commit_pending: false,
            reported: None,
            fatal: None,
            fatal_reported: false,
            config,
        };
        raft.reset_election_timer(now);
        info!(
            member_id = %format_args!("{:x}", raft.id),
            term = raft.term,
            last_index = raft.log.last_index(),
            committed = raft.log.committed(),
            "raft started"
        );
        Ok(raft)
    }

    /// Makes a brand-new member of a new cluster: the initial membership
    /// becomes the first log entries (one `AddNode`/`AddLearnerNode` each,
    /// term 1, committed), identical on every initial member, so a member
    /// added later learns it from the log. Call once, before anything else.
    pub fn bootstrap(&mut self, voters: &[u64], learners: &[u64]) -> Result<(), BootstrapError> {
        if self.term != 0 || self.log.last_index() != 0 {
            return Err(BootstrapError::NotEmpty);
        }
        if voters.is_empty() || voters.iter().chain(learners).any(|&id| id == 0) {
            return Err(BootstrapError::InvalidMembers);
        }
        let mut voters = voters.to_vec();
        voters.sort_unstable();
        voters.dedup();
        let mut learners: Vec<u64> = learners
            .iter()
            .copied()
            .filter(|id| !voters.contains(id))
            .collect();
        learners.sort_unstable();
        learners.dedup();
        let changes = voters
            .iter()
            .map(|&id| (ConfChangeType::AddNode, id))
            .chain(
                learners
                    .iter()
                    .map(|&id| (ConfChangeType::AddLearnerNode, id)),
            );
        let mut entries = Vec::new();
        for (k, (change_type, node_id)) in changes.enumerate() {
            let cc = ConfChange {
                change_type,
                node_id,
                ..Default::default()
            };
            entries.push(Entry {
                entry_type: EntryType::EntryConfChange,
                term: 1,
                index: k as u64 + 1,
                data: encode_conf_change(&cc),
                ..Default::default()
            });
        }
        let last = self.log.append(entries);
        self.log.commit_to(last);
        self.term = 1;
        self.hard_state_dirty = true;
        // The membership is in effect at once (the entries apply it again,
        // harmlessly), so the member can campaign as soon as its timer fires.
        let conf = ConfState {
            voters,
            learners,
            ..Default::default()
        };
        self.tracker = ProgressTracker::new(&conf, last + 1, self.config.max_inflight_msgs);
        Ok(())
    }

    // ----- inputs -------------------------------------------------------

    /// Handles a message from a peer.
    pub fn step(&mut self, now: Instant, message: Message) {
        self.observe(now);
        if self.fatal.is_some() {
            return;
        }
        if message.to != self.id || message.from == 0 || message.from == self.id {
            debug!(
                to = message.to,
                from = message.from,
                "dropping misaddressed message"
            );
            return;
        }
        if matches!(
            message.msg_type,
            MessageType::MsgHup
                | MessageType::MsgBeat
                | MessageType::MsgPropose
                | MessageType::MsgUnreachable
                | MessageType::MsgSnapStatus
                | MessageType::MsgCheckQuorum
        ) {
            debug!(msg_type = ?message.msg_type, from = message.from, "dropping local-only message from a peer");
            return;
        }
        let result = self.step_inner(message);
        self.check(result);
    }

    /// Fires the timers due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.observe(now);
        if self.fatal.is_some() {
            return;
        }
        let result = self.tick();
        self.check(result);
    }

    /// When [`Raft::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.fatal.is_some() {
            return None;
        }
        match self.role {
            Role::Leader => match (self.heartbeat_deadline, self.transfer_deadline) {
                (Some(h), Some(t)) => Some(h.min(t)),
                (h, t) => h.or(t),
            },
            _ => Some(self.election_deadline),
        }
    }

    /// Writes up to `id` are durable.
    pub fn persisted(&mut self, now: Instant, id: PersistId) {
        self.observe(now);
        if self.fatal.is_some() {
            return;
        }
        if id.0 <= self.persist_acked || id.0 > self.persist_issued {
            warn!(
                id = id.0,
                acked = self.persist_acked,
                issued = self.persist_issued,
                "unexpected persist acknowledgement"
            );
            return;
        }
        self.persist_acked = id.0;
        self.log.persisted(id.0);
        while self.waiting.front().is_some_and(|(seq, _)| *seq <= id.0) {
            let (_, deferred) = self.waiting.pop_front().expect("front exists");
            match deferred {
                Deferred::Send(m) => self.send(m),
                Deferred::SelfVote { term } => {
                    if self.role == Role::Candidate && self.term == term {
                        self.votes.insert(self.id, true);
                        self.tally_votes();
                    }
                }
            }
        }
        if self.role == Role::Leader {
            let stable = self.log.stable();
            let id = self.id;
            if let Some(p) = self.tracker.get_mut(id) {
                p.maybe_update(stable);
            }
            let result = self.maybe_commit();
            self.check(result.map(|_| ()));
        }
    }

    /// Proposes `data` as a normal entry; returns its index. The entry may
    /// still be lost if leadership changes before it commits: the caller
    /// learns the outcome from the entry applied at that index.
    pub fn propose(&mut self, data: Bytes) -> Result<u64, ProposeError> {
        self.check_can_propose()?;
        let size = (data.len() + log::ENTRY_OVERHEAD_BYTES) as u64;
        if self.uncommitted_bytes > 0
            && self.uncommitted_bytes + size > self.config.max_uncommitted_bytes
        {
            return Err(ProposeError::Busy);
        }
        Ok(self.append_entry(EntryType::EntryNormal, data))
    }

    /// Proposes a single-step membership change: add a voter (`AddNode`,
    /// also promotes a learner), add a learner, or remove a member. One
    /// change at a time: refused until the previous one is applied, and
    /// until the leader's first entry of its term is applied.
    pub fn propose_conf_change(&mut self, change: &ConfChange) -> Result<u64, ProposeError> {
        self.check_can_propose()?;
        if self.pending_conf_index > self.log.applied() {
            return Err(ProposeError::ConfChangePending);
        }
        let id = change.node_id;
        if id == 0 {
            return Err(ProposeError::InvalidConfChange("member id 0"));
        }
        match change.change_type {
            ConfChangeType::AddNode if self.tracker.is_voter(id) => {
                return Err(ProposeError::InvalidConfChange("already a voter"))
            }
            ConfChangeType::AddLearnerNode if self.tracker.is_voter(id) => {
                return Err(ProposeError::InvalidConfChange(
                    "a voter cannot be demoted to learner",
                ))
            }
            ConfChangeType::AddLearnerNode if self.tracker.is_learner(id) => {
                return Err(ProposeError::InvalidConfChange("already a learner"))
            }
            ConfChangeType::RemoveNode
                if !self.tracker.is_voter(id) && !self.tracker.is_learner(id) =>
            {
                return Err(ProposeError::InvalidConfChange("not a member"))
            }
            ConfChangeType::RemoveNode
                if self.tracker.is_voter(id) && self.tracker.voters().len() == 1 =>
            {
                return Err(ProposeError::InvalidConfChange(
                    "cannot remove the last voter",
                ))
            }
            _ => {}
        }
        let index = self.append_entry(EntryType::EntryConfChange, encode_conf_change(change));
        self.pending_conf_index = index;
        Ok(index)
    }

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

    /// Hands leadership to voter `to` once its log is caught up (it is sent
    /// `MsgTimeoutNow` and campaigns at once). Proposals are refused
    /// meanwhile; the transfer is abandoned after an election timeout.
    pub fn transfer_leader(&mut self, now: Instant, to: u64) -> Result<(), TransferLeaderError> {
        self.observe(now);
        if self.role != Role::Leader {
            return Err(TransferLeaderError::NotLeader);
        }
        if to == self.id {
            return Ok(());
        }
        if !self.tracker.is_voter(to) {
            return Err(TransferLeaderError::NotVoter(to));
        }
        if self.lead_transferee == Some(to) {
            return Ok(());
        }
        info!(member_id = %format_args!("{:x}", self.id), to = %format_args!("{to:x}"), term = self.term, "transferring leadership");
        self.lead_transferee = Some(to);
        self.transfer_deadline = Some(now + self.config.election_timeout);
        let caught_up = self
            .tracker
            .get(to)
            .is_some_and(|p| p.matched() == self.log.last_index());
        if caught_up {
            self.send_timeout_now(to);
        } else {
            let result = self.send_append(to, false);
            self.check(result.map(|_| ()));
        }
        Ok(())
    }

    /// Campaigns now, as if the election timer had fired (with a pre-vote
    /// if configured). Ignored on a leader or a non-voter.
    pub fn campaign(&mut self, now: Instant) {
        self.observe(now);
        if self.fatal.is_some() || self.role == Role::Leader {
            return;
        }
        let kind = if self.config.pre_vote {
            CampaignKind::PreVote
        } else {
            CampaignKind::Election
        };
        let result = self.start_campaign(kind);
        self.check(result);
    }

    /// The runtime finished streaming a snapshot to `to` (`delivered`), or
    /// gave up. Either way the member is probed again after its next
    /// heartbeat answer.
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        if self.role != Role::Leader {
            return;
        }
        let Some(p) = self.tracker.get_mut(to) else {
            return;
        };
        if p.state() != ProgressState::Snapshot {
            return;
        }
        debug!(to, delivered, "snapshot stream finished");
        if !delivered {
            // Forget the snapshot: probing restarts from what is known.
            p.become_snapshot(0);
        }
        p.become_probe();
        p.sent_append(None); // wait for a heartbeat answer before probing
    }

    /// The runtime could not reach `to`: stop streaming appends to it
    /// until it answers again.
    pub fn report_unreachable(&mut self, to: u64) {
        if self.role != Role::Leader {
            return;
        }
        if let Some(p) = self.tracker.get_mut(to) {
            if p.state() == ProgressState::Replicate {
                p.become_probe();
            }
        }
    }

    /// Storage compacted the log up to and including `index` (a snapshot of
    /// the state machine covers it). Only applied, durable entries may be
    /// compacted; returns whether the raft moved its compaction point.
    /// Tell the raft before storage drops the entries.
    pub fn compact_log(&mut self, index: u64) -> bool {
        match self.log.compact_to(index) {
            Ok(moved) => moved,
            Err(e) => {
                self.check(Err(log_error(e)));
                false
            }
        }
    }

    // ----- outputs ------------------------------------------------------

    /// The next thing to do, if any. Drain until `None` after every input.
    pub fn poll_action(&mut self) -> Option<Action> {
        if let Some(e) = &self.fatal {
            if self.fatal_reported {
                return None;
            }
            self.fatal_reported = true;
            return Some(Action::Fatal(e.clone()));
        }
        let current = (self.role, self.term, self.leader);
        if self
            .reported
            .is_none_or(|(role, _, leader)| (role, leader) != (current.0, current.2))
        {
            self.reported = Some(current);
            return Some(Action::RoleChanged {
                role: current.0,
                term: current.1,
                leader: current.2,
            });
        }
        if self.role == Role::Leader {
            let result = self.flush_leader();
            self.check(result);
            if self.fatal.is_some() {
                return self.poll_action();
            }
        }
        if let Some(m) = self.outbox.pop_front() {
            return Some(Action::Send(m));
        }
        if let Some(action) = self.actions.pop_front() {
            return Some(action);
        }
        if let Some(persist) = self.poll_persist() {
            return Some(Action::Persist(persist));
        }
        match self.poll_apply() {
            Ok(Some(entries)) => Some(Action::Apply(entries)),
            Ok(None) => None,
            Err(e) => {
                self.check(Err(e));
                self.poll_action()
            }
        }
    }

    // ----- observers ----------------------------------------------------

    /// This member's ID.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The current role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The leader, if known.
    pub fn leader(&self) -> Option<u64> {
        self.leader
    }

    /// The vote cast in the current term (0: none).
    pub fn vote(&self) -> u64 {
        self.vote
    }

    /// The commit index.
    pub fn committed(&self) -> u64 {
        self.log.committed()
    }

    /// Index of the last entry handed out in an [`Action::Apply`] (or
    /// covered by an installed snapshot).
    pub fn applied(&self) -> u64 {
        self.log.applied()
    }

    /// Index of the last log entry.
    pub fn last_index(&self) -> u64 {
        self.log.last_index()
    }

    /// Index up to which the log is durable.
    pub fn persisted_index(&self) -> u64 {
        self.log.stable()
    }

    /// The log's compaction point.
    pub fn snapshot_index(&self) -> u64 {
        self.log.snapshot_index()
    }

    /// The term of the entry at `index`, if the log holds it (or it is the
    /// compaction point). Reads storage for old entries; a storage failure
    /// reads as `None`.
    pub fn log_term(&self, index: u64) -> Option<u64> {
        self.log.term(index).ok()
    }

    /// The membership in effect: as of the last entry handed out to apply.
    /// A snapshot taken of the state machine at [`Raft::applied`] records
    /// this.
    pub fn conf_state(&self) -> ConfState {
        self.tracker.conf_state()
    }

    /// True if this member may campaign: it is a voter.
    pub fn is_voter(&self) -> bool {
        self.tracker.is_voter(self.id)
    }

    /// The leader's view of member `id` (on the leader).
    pub fn progress(&self, id: u64) -> Option<&Progress> {
        if self.role == Role::Leader {
            self.tracker.get(id)
        } else {
            None
        }
    }

    /// The voter (other than this member) with the most of the log, for a
    /// graceful hand-over on shutdown. Leader only.
    pub fn most_caught_up_voter(&self) -> Option<u64> {
        if self.role != Role::Leader {
            return None;
        }
        self.tracker
            .voters()
            .iter()
            .filter(|&id| id != self.id)
            .max_by_key(|&id| {
                (
                    self.tracker.get(id).map_or(0, |p| p.matched()),
                    std::cmp::Reverse(id),
                )
            })
    }

    /// The hard state as it stands (not necessarily durable yet).
    pub fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.log.committed(),
            ..Default::default()
        }
    }

    // ----- message handling ---------------------------------------------

    fn step_inner(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        if m.term > self.term {
            if matches!(m.msg_type, MsgRequestVote | MsgRequestPreVote) {
                let forced = m.context.as_ref() == CAMPAIGN_TRANSFER_CONTEXT;
                if !forced && self.in_leader_lease() {
                    debug!(
                        from = m.from,
                        term = m.term,
                        "ignoring vote request: in contact with a leader"
                    );
                    return Ok(());
                }
            }
            match m.msg_type {
                // A pre-vote never changes terms; a granted pre-vote
                // carries the term the candidate will campaign in.
                MsgRequestPreVote => {}
                MsgRequestPreVoteResponse if !m.reject => {}
                MsgAppend | MsgHeartbeat | MsgSnapshot => {
                    self.become_follower(m.term, Some(m.from))
                }
                _ => self.become_follower(m.term, None),
            }
        } else if m.term < self.term {
            if (self.config.check_quorum || self.config.pre_vote)
                && matches!(m.msg_type, MsgHeartbeat | MsgAppend)
            {
                // A leader cut off in an older term hears the current term
                // and steps down (its followers ignore its messages, and with
                // pre-vote it would otherwise never learn it lost).
                let reply = self.message(m.from, MsgAppendResponse);
                self.send(reply);
            } else if m.msg_type == MsgRequestPreVote {
                let mut reply = self.message(m.from, MsgRequestPreVoteResponse);
                reply.reject = true;
                self.send(reply);
            } else {
                debug!(from = m.from, term = m.term, msg_type = ?m.msg_type, "dropping message of an older term");
            }
            return Ok(());
        }
        if matches!(m.msg_type, MsgRequestVote | MsgRequestPreVote) {
            self.handle_vote_request(&m);
            return Ok(());
        }
        match self.role {
            Role::Leader => self.step_leader(m),
            Role::Candidate | Role::PreCandidate => self.step_candidate(m),
            Role::Follower => self.step_follower(m),
        }
    }

    fn handle_vote_request(&mut self, m: &Message) {
        let pre = m.msg_type == MessageType::MsgRequestPreVote;
        let reply_type = if pre {
            MessageType::MsgRequestPreVoteResponse
        } else {
            MessageType::MsgRequestVoteResponse
        };
        let can_vote = self.vote == m.from
            || (self.vote == 0 && self.leader.is_none())
            || (pre && m.term > self.term);
        let up_to_date = m.log_term > self.log.last_term()
            || (m.log_term == self.log.last_term() && m.index >= self.log.last_index());
        let mut reply = self.message(m.from, reply_type);
        if can_vote && up_to_date {
            debug!(from = m.from, term = m.term, pre, "granting vote");
            reply.term = m.term;
            if pre {
                self.send(reply);
            } else {
                if self.vote != m.from {
                    self.vote = m.from;
                    self.hard_state_dirty = true;
                }
                self.reset_election_timer(self.now);
                self.send_after_persist(reply);
            }
        } else {
            debug!(
                from = m.from,
                term = m.term,
                pre,
                can_vote,
                up_to_date,
                "rejecting vote"
            );
            reply.reject = true;
            self.send(reply);
        }
    }

    fn step_leader(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        match m.msg_type {
            MsgAppendResponse => self.handle_append_response(&m),
            MsgHeartbeatResponse => self.handle_heartbeat_response(&m),
            MsgTransferLeader => {
                if let Err(e) = self.transfer_leader(self.now, m.from) {
                    debug!(from = m.from, error = %e, "refusing transfer request");
                }
                Ok(())
            }
            MsgReadIndex => {
                if self.tracker.get(m.from).is_none() {
                    debug!(from = m.from, "read index from a non-member");
                    return Ok(());
                }
                let commit = self.term_committed.then(|| self.log.committed());
                if self
                    .reads
                    .push(m.context, ReadOrigin::Peer(m.from), commit)
                    .is_err()
                {
                    debug!(from = m.from, "read queue full; dropping forwarded read");
                }
                Ok(())
            }
            _ => {
                debug!(from = m.from, msg_type = ?m.msg_type, "leader ignoring message");
                Ok(())
            }
        }
    }

    fn step_candidate(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        match m.msg_type {
            MsgAppend | MsgHeartbeat | MsgSnapshot => {
                // Someone won this term.
                self.become_follower(m.term, Some(m.from));
                self.step_follower(m)
            }
            MsgRequestPreVoteResponse if self.role == Role::PreCandidate => {
                // Grants carry the term we would campaign in; rejections
                // of our term count too (higher ones made us follow).
                let ours = if m.reject {
                    m.term == self.term
                } else {
                    m.term == self.term + 1
                };
                if ours {
                    self.record_vote(m.from, !m.reject);
                }
                Ok(())
            }
            MsgRequestVoteResponse if self.role == Role::Candidate => {
                self.record_vote(m.from, !m.reject);
                Ok(())
            }
            _ => {
                debug!(from = m.from, msg_type = ?m.msg_type, "candidate ignoring message");
                Ok(())
            }
        }
    }

    fn step_follower(&mut self, m: Message) -> Result<(), StorageError> {
        use MessageType::*;
        match m.msg_type {
            MsgAppend | MsgHeartbeat | MsgSnapshot => {
                if self.leader != Some(m.from) {
                    self.leader = Some(m.from);
                }
                self.leader_contact = Some(self.now);
                self.reset_election_timer(self.now);
                match m.msg_type {
                    MsgAppend => self.handle_append(m),
                    MsgHeartbeat => {
                        self.handle_heartbeat(m);
                        Ok(())
                    }
                    _ => self.handle_snapshot(m),
                }
            }
            MsgTimeoutNow => {
                if self.is_voter() {
                    info!(member_id = %format_args!("{:x}", self.id), from = m.from, term = self.term, "campaigning at the leader's request");
                    self.start_campaign(CampaignKind::Transfer)
                } else {
                    debug!(from = m.from, "not a voter; ignoring timeout-now");
                    Ok(())
                }
            }
            MsgReadIndexResp => {
                self.actions.push_back(Action::ReadReady(ReadState {
                    index: m.index,
                    context: m.context,
                }));
                Ok(())
            }
            _ => {
                debug!(from = m.from, msg_type = ?m.msg_type, "follower ignoring message");
                Ok(())
            }
        }
    }

    fn handle_append(&mut self, mut m: Message) -> Result<(), StorageError> {
        let entries = m.take_entries().into_vec();
        if let Err(problem) = check_append(&m, &entries) {
            debug!(from = m.from, problem, "dropping malformed append");
            return Ok(());
        }
        let committed = self.log.committed();
        let mut reply = self.message(m.from, MessageType::MsgAppendResponse);
        if m.index < committed {
            reply.index = committed;
            self.send_after_persist(reply);
            return Ok(());
        }
        match self
            .log
            .maybe_append(m.index, m.log_term, m.commit, entries)?
        {
            AppendOutcome::Accepted {
                last_new,
                truncated_at,
            } => {
                if let Some(index) = truncated_at {
                    self.forget_acks_from(index);
                }
                reply.index = last_new;
                self.send_after_persist(reply);
            }
            AppendOutcome::Mismatch => {
                let hint = m.index.min(self.log.last_index());
                let (hint_index, hint_term) = self.log.find_conflict_by_term(hint, m.log_term)?;
                debug!(
                    from = m.from,
                    index = m.index,
                    log_term = m.log_term,
                    hint_index,
                    hint_term,
                    "rejecting append"
                );
                reply.index = m.index;
                reply.reject = true;
                reply.reject_hint = hint_index;
                reply.log_term = hint_term;
                self.send_after_persist(reply);
            }
            AppendOutcome::ConflictsWithCommitted(index) => {
                warn!(
                    from = m.from,
                    index, committed, "append conflicts with committed entries; dropped"
                );
            }
        }
        Ok(())
    }

    fn handle_heartbeat(&mut self, m: Message) {
        // The leader sends at most what this member acknowledged as durable.
        self.log.commit_to(m.commit);
        let mut reply = self.message(m.from, MessageType::MsgHeartbeatResponse);
        reply.context = m.context;
        self.send(reply);
    }

    fn handle_snapshot(&mut self, m: Message) -> Result<(), StorageError> {
        let meta = m.get_snapshot().get_metadata().clone();
        if meta.index == 0 || meta.get_conf_state().voters.is_empty() {
            debug!(
                from = m.from,
                "dropping snapshot message without metadata or voters"
            );
            return Ok(());
        }
        let mut reply = self.message(m.from, MessageType::MsgAppendResponse);
        if meta.index <= self.log.committed() {
            debug!(
                from = m.from,
                index = meta.index,
                committed = self.log.committed(),
                "ignoring stale snapshot"
            );
            reply.index = self.log.committed();
        } else if self.log.match_term(meta.index, meta.term)? {
            // The log already holds the snapshot's last entry: just commit.
            debug!(
                from = m.from,
                index = meta.index,
                "snapshot already in the log; fast-forwarding commit"
            );
            self.log.commit_to(meta.index);
            reply.index = self.log.committed();
        } else {
            info!(
                member_id = %format_args!("{:x}", self.id),
                index = meta.index,
                term = meta.term,
                "installing snapshot"
            );
            let old_committed = self.log.committed();
            self.forget_acks_from(old_committed + 1);
            let conf = meta.get_conf_state().clone();
            self.log.restore(meta);
            self.tracker = ProgressTracker::new(
                &conf,
                self.log.last_index() + 1,
                self.config.max_inflight_msgs,
            );
            reply.index = self.log.last_index();
        }
        self.send_after_persist(reply);
        Ok(())
    }

    fn handle_append_response(&mut self, m: &Message) -> Result<(), StorageError> {
        let last_index = self.log.last_index();
        if !m.reject && m.index > last_index {
            debug!(
                from = m.from,
                index = m.index,
                last_index,
                "acknowledgement beyond the log; dropped"
            );
            return Ok(());
        }
        let now = self.now;
        let Some(p) = self.tracker.get_mut(m.from) else {
            debug!(from = m.from, "append response from a non-member");
            return Ok(());
        };
        p.heard_at(now);
        if m.reject {
            let mut next_probe = m.reject_hint;
            if m.log_term > 0 {
                next_probe = self.log.find_conflict_by_term(m.reject_hint, m.log_term)?.0;
            }
            let p = self.tracker.get_mut(m.from).expect("member checked");
            if p.maybe_decr_to(m.index, next_probe) {
                debug!(
                    from = m.from,
                    rejected = m.index,
                    next = p.next_index(),
                    "backing off"
                );
                if p.state() == ProgressState::Replicate {
                    p.become_probe();
                }
                self.send_append(m.from, false)?;
            }
            return Ok(());
        }
        let was_paused = p.is_paused();
        if !p.maybe_update(m.index) {
            return Ok(());
        }
        let snapshot_index = self.log.snapshot_index();
        match p.state() {
            ProgressState::Probe => p.become_replicate(),
            ProgressState::Snapshot if p.matched() >= snapshot_index => {
                p.become_probe();
                p.become_replicate();
            }
            ProgressState::Replicate => p.ack_inflights(m.index),
            ProgressState::Snapshot => {}
        }
        if !self.maybe_commit()? && was_paused {
            self.send_append(m.from, false)?;
        }
        while self.send_append(m.from, false)? {}
        if self.lead_transferee == Some(m.from)
            && self
                .tracker
                .get(m.from)
                .is_some_and(|p| p.matched() == self.log.last_index())
        {
            self.send_timeout_now(m.from);
        }
        Ok(())
    }

    fn handle_heartbeat_response(&mut self, m: &Message) -> Result<(), StorageError> {
        let now = self.now;
        let last_index = self.log.last_index();
        let Some(p) = self.tracker.get_mut(m.from) else {
            debug!(from = m.from, "heartbeat response from a non-member");
            return Ok(());
        };
        p.heard_at(now);
        p.resume();
        p.free_one_if_full();
        let behind = p.matched() < last_index;
        if self.tracker.is_voter(m.from) {
            if let Some(round) = parse_round(&m.context) {
                self.reads.ack(m.from, round);
            }
        }
        if behind {
            self.send_append(m.from, true)?;
        }
        Ok(())
    }

    // ----- timers -------------------------------------------------------

    fn tick(&mut self) -> Result<(), StorageError> {
        let now = self.now;
        if self.role == Role::Leader {
            if self.transfer_deadline.is_some_and(|d| now >= d) {
                info!(member_id = %format_args!("{:x}", self.id), transferee = ?self.lead_transferee, "leadership transfer timed out");
                self.abort_transfer();
            }
            if self.heartbeat_deadline.is_some_and(|d| now >= d) {
                self.heartbeat_deadline = Some(now + self.config.heartbeat_interval);
                if self.config.check_quorum
                    && !self
                        .tracker
                        .quorum_active(self.id, now, self.config.election_timeout)
                {
                    warn!(member_id = %format_args!("{:x}", self.id), term = self.term, "lost contact with a quorum; stepping down");
                    self.become_follower(self.term, None);
                    return Ok(());
                }
                // Reads waiting for a round that was lost get a fresh one.
                if self.reads.has_unconfirmed() {
                    self.reads.start_round();
                }
                self.broadcast_heartbeat();
            }
            return Ok(());
        }
        if now >= self.election_deadline {
            self.reset_election_timer(now);
            if self.is_voter() {
                let kind = if self.config.pre_vote {
                    CampaignKind::PreVote
                } else {
                    CampaignKind::Election
                };
                return self.start_campaign(kind);
            }
        }
        Ok(())
    }

    fn reset_election_timer(&mut self, now: Instant) {
        let base = self.config.election_timeout;
        let jitter = self
            .rng
            .below(u64::try_from(base.as_nanos()).unwrap_or(u64::MAX));
        self.election_deadline = now + base + Duration::from_nanos(jitter);
    }

    /// With check-quorum, a follower that heard its leader within an
    /// election timeout refuses to help depose it, and a leader (which
    /// steps down by itself once it loses its quorum) ignores challengers.
    fn in_leader_lease(&self) -> bool {
        self.config.check_quorum
            && (self.role == Role::Leader
                || (self.leader.is_some()
                    && self.leader_contact.is_some_and(|t| {
                        self.now.saturating_since(t) < self.config.election_timeout
                    })))
    }

    // ----- roles --------------------------------------------------------

    fn become_follower(&mut self, term: u64, leader: Option<u64>) {
        if term > self.term {
            self.term = term;
            self.vote = 0;
            self.hard_state_dirty = true;
        }
        if self.role == Role::Leader {
            let dropped = self.reads.clear();
            if dropped > 0 {
                debug!(dropped, "dropping reads: no longer leader");
            }
        }
        self.role = Role::Follower;
        self.leader = leader;
        if leader.is_some() {
            self.leader_contact = Some(self.now);
        }
        self.votes.clear();
        self.lead_transferee = None;
        self.transfer_deadline = None;
        self.heartbeat_deadline = None;
        self.broadcast_pending = false;
        self.commit_pending = false;
        self.reset_election_timer(self.now);
    }

    fn start_campaign(&mut self, kind: CampaignKind) -> Result<(), StorageError> {
        if !self.is_voter() {
            debug!("not a voter; not campaigning");
            return Ok(());
        }
        if self.has_unapplied_conf_change()? {
            debug!("a committed membership change is not applied yet; not campaigning");
            return Ok(());
        }
        let now = self.now;
        self.votes.clear();
        self.leader = None;
        self.reset_election_timer(now);
        let (request, term) = if kind == CampaignKind::PreVote {
            self.role = Role::PreCandidate;
            self.votes.insert(self.id, true);
            (MessageType::MsgRequestPreVote, self.term + 1)
        } else {
            self.role = Role::Candidate;
            self.term += 1;
            self.vote = self.id;
            self.hard_state_dirty = true;
            // Our own vote counts once it is durable.
            let term = self.term;
            self.defer(Deferred::SelfVote { term });
            (MessageType::MsgRequestVote, self.term)
        };
        info!(member_id = %format_args!("{:x}", self.id), term, ?kind, "campaigning");
        for id in self.tracker.voters().iter().collect::<Vec<_>>() {
            if id == self.id {
                continue;
            }
            let mut m = self.message(id, request);
            m.term = term;
            m.index = self.log.last_index();
            m.log_term = self.log.last_term();
            if kind == CampaignKind::Transfer {
                m.context = Bytes::from_static(CAMPAIGN_TRANSFER_CONTEXT);
            }
            self.send(m);
        }
        self.tally_votes();
        Ok(())
    }

    fn record_vote(&mut self, from: u64, granted: bool) {
        if !self.tracker.is_voter(from) {
            debug!(from, "vote from a non-voter ignored");
            return;
        }
        self.votes.entry(from).or_insert(granted);
        self.tally_votes();
    }

    fn tally_votes(&mut self) {
        let result = self
            .tracker
            .voters()
            .vote_result(|id| self.votes.get(&id).copied());
        match (result, self.role) {
            (VoteResult::Won, Role::PreCandidate) => {
                let result = self.start_campaign(CampaignKind::Election);
                self.check(result);
            }
            (VoteResult::Won, Role::Candidate) => self.become_leader(),
            (VoteResult::Lost, Role::PreCandidate | Role::Candidate) => {
                debug!(term = self.term, "lost the election");
                self.become_follower(self.term, None);
            }
            _ => {}
        }
    }

    fn become_leader(&mut self) {
        assert_eq!(
            self.role,
            Role::Candidate,
            "only a candidate becomes leader"
        );
        let now = self.now;
        self.role = Role::Leader;
        self.leader = Some(self.id);
        self.votes.clear();
        let next = self.log.last_index() + 1;
        self.tracker
            .reset_all(next, now, self.id, self.log.stable());
        self.lead_transferee = None;
        self.transfer_deadline = None;
        self.reads.clear();
        self.term_committed = false;
        self.uncommitted_bytes = 0;
        self.heartbeat_deadline = Some(now + self.config.heartbeat_interval);
        info!(member_id = %format_args!("{:x}", self.id), term = self.term, "became leader");
        // The term's first entry: committing it commits everything before,
        // tells the leader its commit index (reads wait for it), and no
        // membership change may be proposed until it is applied.
        self.pending_conf_index = self.append_entry(EntryType::EntryNormal, Bytes::new());
    }

    // ----- replication --------------------------------------------------

    fn check_can_propose(&self) -> Result<(), ProposeError> {
        if self.fatal.is_some() || self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader.filter(|&l| l != self.id),
            });
        }
        if self.lead_transferee.is_some() {
            return Err(ProposeError::TransferringLeadership);
        }
        Ok(())
    }

    fn append_entry(&mut self, entry_type: EntryType, data: Bytes) -> u64 {
        let entry = Entry {
            entry_type,
            term: self.term,
            index: self.log.last_index() + 1,
            data,
            ..Default::default()
        };
        self.uncommitted_bytes += entry_bytes(&entry) as u64;
        let index = self.log.append(vec![entry]);
        self.broadcast_pending = true;
        index
    }

    /// Commits what a majority of voters holds, if it is of this term.
    fn maybe_commit(&mut self) -> Result<bool, StorageError> {
        let index = self.tracker.committed_index();
        let committed = self.log.committed();
        if index <= committed {
            return Ok(false);
        }
        // Only an entry of the leader's own term commits by counting
        // (Raft §5.4.2); earlier ones commit with it.
        match self.log.term(index) {
            Ok(term) if term == self.term => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(log_error(e)),
        }
        self.log.commit_to(index);
        let released = self.log.memory_bytes_between(committed + 1, index);
        self.uncommitted_bytes = if index == self.log.last_index() {
            0
        } else {
            self.uncommitted_bytes.saturating_sub(released)
        };
        if !self.term_committed {
            self.term_committed = true;
            self.reads.term_committed(index);
        }
        // Followers learn the new commit index with the next append.
        self.commit_pending = true;
        Ok(true)
    }

    /// Sends `to` the entries it lacks, if its progress allows. Returns
    /// whether something was sent (an append, or a snapshot request).
    fn send_append(&mut self, to: u64, send_if_empty: bool) -> Result<bool, StorageError> {
        if to == self.id {
            return Ok(false);
        }
        let Some(p) = self.tracker.get(to) else {
            return Ok(false);
        };
        if p.is_paused() {
            return Ok(false);
        }
        let next = p.next_index();
        let prev = next - 1;
        let prev_term = match self.log.term(prev) {
            Ok(term) => term,
            Err(LogError::Compacted) => return Ok(self.request_snapshot(to)),
            Err(LogError::Unavailable) => {
                // Cannot happen with a consistent progress; recover by probing.
                debug!(to, next, "next index beyond the log; probing");
                let p = self.tracker.get_mut(to).expect("member checked");
                p.become_probe();
                return Ok(false);
            }
            Err(LogError::Storage(e)) => return Err(e),
        };
        let last_index = self.log.last_index();
        let entries = match self
            .log
            .entries(next, last_index + 1, self.config.max_msg_bytes)
        {
            Ok(entries) => entries,
            Err(LogError::Compacted) => return Ok(self.request_snapshot(to)),
            Err(LogError::Unavailable) => Vec::new(),
            Err(LogError::Storage(e)) => return Err(e),
        };
        if entries.is_empty() && !send_if_empty {
            return Ok(false);
        }
        let p = self.tracker.get_mut(to).expect("member checked");
        p.sent_append(entries.last().map(|e| e.index));
        let mut m = self.message(to, MessageType::MsgAppend);
        m.index = prev;
        m.log_term = prev_term;
        m.commit = self.log.committed();
        m.entries = entries.into();
        self.send(m);
        Ok(true)
    }

    fn request_snapshot(&mut self, to: u64) -> bool {
        let now = self.now;
        let window = self.config.election_timeout;
        let snapshot_index = self.log.snapshot_index();
        let p = self.tracker.get_mut(to).expect("member checked by caller");
        if !p.recently_heard(now, window) {
            debug!(to, "member needs a snapshot but is not answering; waiting");
            return false;
        }
        info!(to = %format_args!("{to:x}"), snapshot_index, "member needs a snapshot");
        p.become_snapshot(snapshot_index);
        self.actions.push_back(Action::SendSnapshot {
            to,
            term: self.term,
        });
        true
    }

    fn broadcast_heartbeat(&mut self) {
        let context = self
            .reads
            .current_round()
            .map(round_context)
            .unwrap_or_default();
        let committed = self.log.committed();
        for id in self.tracker.peers(self.id) {
            let matched = self.tracker.get(id).map_or(0, |p| p.matched());
            let mut m = self.message(id, MessageType::MsgHeartbeat);
            // Never more than the member holds: it may not have the rest.
            m.commit = matched.min(committed);
            m.context = context.clone();
            self.send(m);
        }
    }

    /// The leader's lazy work: appends for new entries or a new commit index
    /// go out once per drain, however many proposals arrived; reads start a
    /// round when none is in flight; confirmed reads are answered.
    fn flush_leader(&mut self) -> Result<(), StorageError> {
        if self.broadcast_pending || self.commit_pending {
            // New entries go to everyone whose window allows; a member that
            // has them all still needs a new commit index, which one empty
            // append carries.
            let send_if_empty = self.commit_pending;
            self.broadcast_pending = false;
            self.commit_pending = false;
            for id in self.tracker.peers(self.id) {
                let mut sent = self.send_append(id, send_if_empty)?;
                while sent {
                    sent = self.send_append(id, false)?;
                }
            }
        }
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
        Ok(())
    }

    fn send_timeout_now(&mut self, to: u64) {
        info!(to = %format_args!("{to:x}"), term = self.term, "transferee caught up; sending timeout-now");
        let m = self.message(to, MessageType::MsgTimeoutNow);
        self.send(m);
    }

    fn abort_transfer(&mut self) {
        self.lead_transferee = None;
        self.transfer_deadline = None;
    }

    // ----- persistence and apply ----------------------------------------

    fn poll_persist(&mut self) -> Option<Persist> {
        let outstanding = (self.persist_issued - self.persist_acked) as usize;
        if outstanding >= PERSIST_INFLIGHT_MAX {
            return None;
        }
        if !self.log.has_unpersisted() && !self.hard_state_dirty {
            return None;
        }
        self.persist_issued += 1;
        let (snapshot, entries) = self.log.take_unpersisted(self.persist_issued);
        // A change of the commit index alone is not worth a write of its
        // own: storing the hard state costs the log store another page per
        // append, and after a crash the commit index is recovered from the
        // applied index and the leader.
        let hard_state = (self.hard_state_dirty || snapshot.is_some()).then(|| self.hard_state());
        self.hard_state_dirty = false;
        Some(Persist {
            id: PersistId(self.persist_issued),
            snapshot,
            entries,
            hard_state,
        })
    }

    fn poll_apply(&mut self) -> Result<Option<Vec<Entry>>, StorageError> {
        let entries = self
            .log
            .next_to_apply(APPLY_BATCH_BYTES_MAX)
            .map_err(log_error)?;
        if entries.is_empty() {
            return Ok(None);
        }
        for entry in &entries {
            if entry.entry_type == EntryType::EntryConfChange {
                self.apply_conf_change(entry);
            } else if entry.entry_type == EntryType::EntryConfChangeV2 {
                warn!(
                    index = entry.index,
                    "ConfChangeV2 entries are not supported; skipped"
                );
            }
        }
        Ok(Some(entries))
    }

    fn apply_conf_change(&mut self, entry: &Entry) {
        let cc = match ConfChange::parse_from_bytes(&entry.data) {
            Ok(cc) => cc,
            Err(e) => {
                warn!(index = entry.index, error = %e, "membership change does not decode; skipped");
                return;
            }
        };
        let id = cc.node_id;
        let next = self.log.last_index() + 1;
        let now = self.now;
        match cc.change_type {
            ConfChangeType::AddNode => {
                self.tracker.add_voter(id, next);
                if let Some(p) = self.tracker.get_mut(id) {
                    if p.last_heard().is_none() {
                        p.heard_at(now);
                    }
                }
            }
            ConfChangeType::AddLearnerNode => {
                if self.tracker.is_voter(id) {
                    warn!(
                        index = entry.index,
                        id, "membership change would demote a voter; skipped"
                    );
                    return;
                }
                self.tracker.add_learner(id, next);
                if let Some(p) = self.tracker.get_mut(id) {
                    p.heard_at(now);
                }
            }
            ConfChangeType::RemoveNode => self.tracker.remove(id),
        }
        info!(
            member_id = %format_args!("{:x}", self.id),
            index = entry.index,
            change = ?cc.change_type,
            node = %format_args!("{id:x}"),
            voters = ?self.tracker.voters().iter().collect::<Vec<_>>(),
            "applied membership change"
        );
        if self.role != Role::Leader {
            return;
        }
        if !self.is_voter() {
            // A leader removed from the voters steps down; the others elect.
            self.become_follower(self.term, None);
            return;
        }
        if self
            .lead_transferee
            .is_some_and(|t| !self.tracker.is_voter(t))
        {
            self.abort_transfer();
        }
        // The quorum changed: what counts as committed may have too.
        let result = self.maybe_commit();
        self.check(result.map(|_| ()));
        self.broadcast_pending = true;
    }

    fn has_unapplied_conf_change(&self) -> Result<bool, StorageError> {
        let entries = self.log.unapplied(u64::MAX).map_err(log_error)?;
        Ok(entries
            .iter()
            .any(|e| e.entry_type != EntryType::EntryNormal))
    }

    // ----- sending ------------------------------------------------------

    fn message(&self, to: u64, msg_type: MessageType) -> Message {
        Message {
            msg_type,
            to,
            from: self.id,
            term: self.term,
            ..Default::default()
        }
    }

    fn send(&mut self, m: Message) {
        if self.outbox.len() >= OUTBOX_MESSAGES_MAX {
            debug!(to = m.to, msg_type = ?m.msg_type, "outbox full; dropping message");
            return;
        }
        self.outbox.push_back(m);
    }

    /// Sends `m` once everything now unpersisted is durable.
    fn send_after_persist(&mut self, m: Message) {
        self.defer(Deferred::Send(m));
    }

    fn defer(&mut self, deferred: Deferred) {
        let seq = if self.log.has_unpersisted() || self.hard_state_dirty {
            self.persist_issued + 1
        } else if self.persist_issued > self.persist_acked {
            self.persist_issued
        } else {
            match deferred {
                Deferred::Send(m) => self.send(m),
                Deferred::SelfVote { term } => {
                    if self.role == Role::Candidate && self.term == term {
                        self.votes.insert(self.id, true);
                    }
                }
            }
            return;
        };
        if self.waiting.len() >= PERSIST_WAITING_MESSAGES_MAX {
            debug!("too many messages waiting for persistence; dropping one");
            return;
        }
        self.waiting.push_back((seq, deferred));
    }

    /// Entries from `index` on were replaced: acknowledgements that vouch
    /// for them must not go out.
    fn forget_acks_from(&mut self, index: u64) {
        self.waiting.retain(|(_, d)| match d {
            Deferred::Send(m) => {
                !(m.msg_type == MessageType::MsgAppendResponse && !m.reject && m.index >= index)
            }
            Deferred::SelfVote { .. } => true,
        });
    }

    // ----- bookkeeping --------------------------------------------------

    fn observe(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    fn check(&mut self, result: Result<(), StorageError>) {
        if let Err(e) = result {
            warn!(error = %e, "raft stopped: reading the log failed");
            self.fatal.get_or_insert(e);
        }
    }

    /// Checks internal invariants (tests).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        self.log.check_invariants();
        if self.role == Role::Leader {
            assert_eq!(self.leader, Some(self.id), "a leader leads");
            assert_eq!(self.vote, self.id, "a leader voted for itself");
        }
        assert!(
            self.persist_acked <= self.persist_issued,
            "more persists acknowledged than issued"
        );
    }
}

/// Converts an unexpected log error into a storage failure.
fn log_error(e: LogError) -> StorageError {
    match e {
        LogError::Storage(e) => e,
        LogError::Compacted => StorageError::invariant("needed a compacted log entry"),
        LogError::Unavailable => StorageError::invariant("needed a log entry past the end"),
    }
}

fn encode_conf_change(cc: &ConfChange) -> Bytes {
    Bytes::from(cc.write_to_bytes().expect("a ConfChange always encodes"))
}

/// Checks an append's entries follow its previous entry: contiguous
/// indexes, terms non-decreasing, at least the previous term, at most the
/// message's term.
fn check_append(m: &Message, entries: &[Entry]) -> Result<(), &'static str> {
    let mut prev_term = m.log_term;
    if m.log_term > m.term {
        return Err("previous term after the leader's term");
    }
    for (k, entry) in entries.iter().enumerate() {
        if Some(entry.index) != m.index.checked_add(k as u64 + 1) {
            return Err("entries not contiguous after the previous index");
        }
        if entry.term < prev_term || entry.term > m.term {
            return Err("entry terms out of order");
        }
        prev_term = entry.term;
    }
    Ok(())
}
