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
//!
//! One concept per file. This one holds the contract: the configuration,
//! the [`Raft`] state, its constructor, the output queue
//! ([`Raft::poll_action`]) and the observers. The rest:
//!
//! - `step.rs`: every peer message enters there, is checked against the
//!   term and dispatched by role;
//! - `election.rs`: campaigns, votes and role transitions; `timers.rs`: the
//!   deadlines that start campaigns and heartbeats;
//! - `replication.rs` (the leader's side: proposals, appends, commit) and
//!   `follow.rs` (the follower's: appends, heartbeats and snapshots
//!   accepted);
//! - `persist.rs`: writes handed out and acknowledged, what waits for them,
//!   and committed entries handed out to apply;
//! - `read_index.rs` (on the queue of `read_only.rs`), `transfer.rs`,
//!   `conf_change.rs`; the log view (`log.rs`), per-member progress
//!   (`progress.rs`) and quorum arithmetic (`quorum.rs`).
//!
//! The invariants that hold between inputs are asserted in debug builds
//! where the state changes (term and commit never decrease, one vote per
//! term, commit within the log, a leader's own match at its durable index),
//! and all together after every drain.

mod conf_change;
mod election;
mod farewell;
mod follow;
mod log;
mod persist;
mod progress;
mod quorum;
mod read_index;
mod read_only;
mod replication;
mod rng;
mod step;
mod timers;
mod transfer;

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod sim;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use oxetcd_proto::eraftpb::{ConfState, Entry, HardState, Message, MessageType};
use tracing::{debug, info, warn};

use self::log::{LogError, RaftLog};
use self::persist::Deferred;
use self::progress::ProgressTracker;
use self::rng::Rng;
use crate::storage::StorageError;
use crate::Instant;

pub use self::conf_change::{encode_conf_change, BootstrapError};
pub use self::election::CAMPAIGN_TRANSFER_CONTEXT;
pub use self::log::{LogSource, ENTRIES_PER_BATCH_MAX, LOG_CACHE_BYTES_MAX, LOG_CACHE_ENTRIES_MAX};
pub use self::persist::{Persist, PersistId};
pub use self::progress::{Inflights, Progress, ProgressState};
pub use self::quorum::{MajorityConfig, VoteResult};
pub use self::read_index::ReadIndexError;
pub use self::read_only::{ReadIndexQueue, ReadState, READ_INDEX_PENDING_MAX};
pub use self::replication::{snapshot_message, ProposeError};
pub use self::transfer::TransferLeaderError;

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
    /// A removed leader's last word to the remaining voters.
    farewell: Option<farewell::Farewell>,
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
    /// The commit index a durable hard state (or the applied state) holds:
    /// membership changes up to it are handed out to apply.
    commit_durable: u64,
    /// The last write that stores a hard state, and the commit index it
    /// stores, until acknowledged.
    commit_issued: Option<(u64, u64)>,
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
    /// etcd's defaults (1000 ms election timeout, 100 ms heartbeat,
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
            farewell: None,
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
            commit_durable: 0,
            commit_issued: None,
            broadcast_pending: false,
            commit_pending: false,
            reported: None,
            fatal: None,
            fatal_reported: false,
            config,
        };
        // What the log starts with as committed is durable: the stored
        // commit index, or the applied index the backend holds.
        raft.commit_durable = raft.log.committed();
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
            // A membership change waits for its commit index to be stored.
            Ok(None) if self.hard_state_dirty => self.poll_persist().map(Action::Persist),
            Ok(None) => {
                // Drained: the input that started this drain is handled.
                if cfg!(debug_assertions) && self.fatal.is_none() {
                    self.assert_invariants();
                }
                None
            }
            Err(e) => {
                self.check(Err(e));
                self.poll_action()
            }
        }
    }

    /// The leader's lazy work, once per drain: appends for new entries or a
    /// new commit index, however many proposals arrived; a read round when
    /// reads wait and none is in flight; answers to confirmed reads.
    fn flush_leader(&mut self) -> Result<(), StorageError> {
        self.flush_appends()?;
        self.flush_reads();
        Ok(())
    }

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

    /// The hard state as it stands (not necessarily durable yet).
    pub fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.log.committed(),
            ..Default::default()
        }
    }

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

    fn observe(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    fn check(&mut self, result: Result<(), StorageError>) {
        if let Err(e) = result {
            warn!(error = %e, "raft stopped: reading the log failed");
            self.fatal.get_or_insert(e);
        }
    }

    /// The invariants that hold between inputs. Checked after every drain
    /// in debug builds, and after every event by the simulator.
    fn assert_invariants(&self) {
        let (committed, last_index, stable) = (
            self.log.committed(),
            self.log.last_index(),
            self.log.stable(),
        );
        assert!(
            committed <= last_index,
            "commit {committed} > last index {last_index}"
        );
        assert!(
            self.log.applied() <= committed,
            "applied {} > commit {committed}",
            self.log.applied()
        );
        assert!(
            stable <= last_index,
            "durable index {stable} > last index {last_index}"
        );
        assert!(
            self.persist_acked <= self.persist_issued
                && self.persist_issued - self.persist_acked <= PERSIST_INFLIGHT_MAX as u64,
            "writes acknowledged {} of issued {}",
            self.persist_acked,
            self.persist_issued
        );
        match self.role {
            Role::Leader => {
                assert_eq!(self.leader, Some(self.id), "a leader leads");
                assert_eq!(self.vote, self.id, "a leader voted for itself");
                assert_eq!(
                    self.tracker.get(self.id).map(Progress::matched),
                    Some(stable),
                    "a leader's own match index is its durable index"
                );
            }
            Role::Candidate => assert_eq!(self.vote, self.id, "a candidate voted for itself"),
            Role::PreCandidate | Role::Follower => {
                assert_ne!(self.leader, Some(self.id), "only a leader leads");
                assert!(
                    self.lead_transferee.is_none() && self.heartbeat_deadline.is_none(),
                    "leader state left on a {:?}",
                    self.role
                );
            }
        }
    }

    /// Checks internal invariants, the log's in full (tests).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        self.log.check_invariants();
        self.assert_invariants();
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
