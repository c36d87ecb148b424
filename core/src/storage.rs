//! The storage interfaces core is written against.
//!
//! core never opens a file. It reaches durable state through two interfaces it
//! defines here:
//!
//! - [`LogStore`]: the raft log and hard state. Core only *reads* it (at start
//!   and to serve lagging peers); writes leave core as `Output::Persist` and
//!   the runtime applies them with [`LogStore::append`], then answers
//!   `Input::Persisted`.
//! - [`KvStore`]: the MVCC backend. The apply step writes it directly inside
//!   one [`KvWrite`] transaction per batch of entries, together with the
//!   applied index in [`KvMeta`], so a crash never applies an entry twice.
//!   Those commits need no fsync of their own: the raft log is the durable
//!   record, and after a crash the node replays the log from the applied index
//!   the backend reports. Reads take a [`KvRead`] snapshot that is consistent
//!   and may be used on any thread while writes go on.
//!
//! Both have in-memory implementations in [`crate::memory`] for tests and the
//! simulator; the `oxetcd-storage` crate implements them on redb.

use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::Member;
use raft_proto::eraftpb::{ConfState, Entry, HardState};

mod error;

pub use error::{Cause, StorageError};

/// A point in the MVCC history: the main revision is bumped once per write
/// transaction, the sub revision counts the changes inside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision {
    /// Revision of the store after the write transaction.
    pub main: i64,
    /// Index of the change within its transaction, from 0.
    pub sub: i64,
}

/// One version of one key, as stored by the MVCC backend.
///
/// A deletion is stored as a tombstone version with an empty value, so that
/// historical reads and watch replay see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyVersion {
    /// The user key.
    pub key: Vec<u8>,
    /// The revision that wrote this version.
    pub mod_revision: Revision,
    /// Main revision of the put that created the key's current generation;
    /// 0 on a tombstone.
    pub create_revision: i64,
    /// Number of puts since the generation was created (1 on creation);
    /// 0 on a tombstone.
    pub version: i64,
    /// Lease the key is attached to, 0 for none.
    pub lease: i64,
    /// The value; empty on a tombstone.
    pub value: Vec<u8>,
    /// True when this version records a deletion.
    pub tombstone: bool,
}

/// What the backend records beside the data, in the same transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvMeta {
    /// Index of the last raft entry applied to this state (the consistent index).
    pub applied_index: u64,
    /// Term of that entry.
    pub applied_term: u64,
    /// Current main revision of the store (1 on a fresh store, as etcd).
    pub revision: i64,
    /// Revision up to which history has been compacted; -1 on a store never
    /// compacted (so compacting at 0 once succeeds, as etcd's does).
    pub compact_revision: i64,
}

/// The cluster's membership as the backend stores it, beside the applied
/// index and in the same transactions, so that on restart the membership
/// matches the applied index exactly (entries after it, membership changes
/// included, are applied again).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Membership {
    /// The raft configuration: voters and learners.
    pub conf_state: ConfState,
    /// Every member's record (name, URLs, learner flag), in ID order.
    pub members: Vec<Member>,
    /// Published server versions, the cluster version, the downgrade job
    /// and the storage version ([`crate::version::ClusterVersions`]).
    pub versions: VersionRecord,
}

/// The cluster's versions as the backend stores them, with the membership.
/// Empty strings mean "not set yet".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VersionRecord {
    /// Each member's published server version, in ID order.
    pub members: Vec<oxetcd_proto::oxetcdpb::MemberVersion>,
    /// The cluster version, `major.minor.0`.
    pub cluster: String,
    /// The downgrade job in progress.
    pub downgrade: Option<oxetcd_proto::oxetcdpb::DowngradeInfoSet>,
    /// The version of the backend's data format, `major.minor.0`.
    pub storage: String,
}

impl Membership {
    /// The stored form (a protobuf message of this crate's own schema).
    pub fn encode(&self) -> Vec<u8> {
        use prost::Message as _;
        oxetcd_proto::oxetcdpb::Membership {
            members: self.members.clone(),
            voters: self.conf_state.voters.clone(),
            learners: self.conf_state.learners.clone(),
            versions: self.versions.members.clone(),
            cluster_version: self.versions.cluster.clone(),
            downgrade: self.versions.downgrade.clone(),
            storage_version: self.versions.storage.clone(),
        }
        .encode_to_vec()
    }

    /// Reads the stored form back.
    pub fn decode(bytes: &[u8]) -> Result<Self, StorageError> {
        use prost::Message as _;
        let stored = oxetcd_proto::oxetcdpb::Membership::decode(bytes)
            .map_err(|e| StorageError::corrupt("membership record", e))?;
        Ok(Self {
            conf_state: ConfState {
                voters: stored.voters,
                learners: stored.learners,
                ..Default::default()
            },
            members: stored.members,
            versions: VersionRecord {
                members: stored.versions,
                cluster: stored.cluster_version,
                downgrade: stored.downgrade,
                storage: stored.storage_version,
            },
        })
    }
}

/// The auth store (users, roles, permissions) as the backend keeps it,
/// beside the applied index and in the same transactions, like the
/// membership: small, rewritten whole when it changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthState {
    /// Whether auth is enabled.
    pub enabled: bool,
    /// The auth revision: bumped by every change.
    pub revision: u64,
    /// Every user (passwords as bcrypt hashes), by name.
    pub users: Vec<oxetcd_proto::authpb::User>,
    /// Every role, by name.
    pub roles: Vec<oxetcd_proto::authpb::Role>,
}

impl AuthState {
    /// The stored form (a protobuf message of this crate's own schema).
    pub fn encode(&self) -> Vec<u8> {
        use prost::Message as _;
        oxetcd_proto::oxetcdpb::AuthState {
            enabled: self.enabled,
            revision: self.revision,
            users: self.users.clone(),
            roles: self.roles.clone(),
        }
        .encode_to_vec()
    }

    /// Reads the stored form back.
    pub fn decode(bytes: &[u8]) -> Result<Self, StorageError> {
        use prost::Message as _;
        let stored = oxetcd_proto::oxetcdpb::AuthState::decode(bytes)
            .map_err(|e| StorageError::corrupt("auth record", e))?;
        Ok(Self {
            enabled: stored.enabled,
            revision: stored.revision,
            users: stored.users,
            roles: stored.roles,
        })
    }
}

/// The active alarms as the backend keeps them, beside the applied index
/// and in the same transactions, like the auth store: etcd's `alarm`
/// bucket. Ordered by alarm type, then member ID.
pub type Alarms = Vec<oxetcd_proto::etcdserverpb::AlarmMember>;

/// The stored form of the alarms (a protobuf message of this crate's own
/// schema).
pub fn encode_alarms(alarms: &[oxetcd_proto::etcdserverpb::AlarmMember]) -> Vec<u8> {
    use prost::Message as _;
    oxetcd_proto::oxetcdpb::AlarmState {
        alarms: alarms.to_vec(),
    }
    .encode_to_vec()
}

/// Reads the stored form of the alarms back.
pub fn decode_alarms(bytes: &[u8]) -> Result<Alarms, StorageError> {
    use prost::Message as _;
    oxetcd_proto::oxetcdpb::AlarmState::decode(bytes)
        .map(|stored| stored.alarms)
        .map_err(|e| StorageError::corrupt("alarm record", e))
}

/// Bytes one stored key version counts for in [`KvRead::used_bytes`]
/// besides its key and value: its revision, create revision, version,
/// lease and flags, as every backend stores them, rounded up.
pub const VERSION_OVERHEAD_BYTES: u64 = 64;

/// Bytes one stored lease counts for in [`KvRead::used_bytes`].
pub const LEASE_BYTES: u64 = 32;

/// What one stored version counts for in [`KvRead::used_bytes`]. Every
/// backend counts with this one rule, so members with equal data report
/// equal figures whatever their backend, and the quota trips alike.
pub fn version_bytes(key_len: usize, value_len: usize) -> u64 {
    VERSION_OVERHEAD_BYTES + key_len as u64 + value_len as u64
}

/// One lease as the backend stores it, beside the key space and in the same
/// transactions, so lease state survives restarts and travels with the
/// backend. The keys attached to a lease are not stored here: they are the
/// live keys whose [`KeyVersion::lease`] names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The lease ID (never 0).
    pub id: i64,
    /// Time to live granted, in seconds.
    pub ttl_secs: i64,
    /// Remaining time to live recorded by the last checkpoint, in seconds;
    /// 0 when there is none (a new leader then grants the full TTL).
    pub remaining_ttl_secs: i64,
}

/// The upper end of a key range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeEnd<'a> {
    /// Every key at or after the start.
    Unbounded,
    /// Keys strictly before this one.
    Before(&'a [u8]),
}

/// A consistent read view of the MVCC backend.
pub trait KvRead {
    /// The meta record as of this view.
    fn meta(&self) -> Result<KvMeta, StorageError>;

    /// For each key in `[start, end)`, in ascending key order, visits the
    /// newest version whose main mod revision is `<= at`, tombstones included.
    /// Keys with no such version are skipped. Stops early when `visit` breaks.
    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError>;

    /// Where `key`'s version at revision `at` (the newest whose main mod
    /// revision is `<= at`) stands in its generation: what a put on top of
    /// it continues from. `None` when the key has no version there, or a
    /// tombstone. A backend whose key index keeps this answers without
    /// reading the version; the default reads it.
    fn generation(&self, key: &[u8], at: i64) -> Result<Option<Generation>, StorageError> {
        generation_read(self, key, at)
    }

    /// Visits every stored version of `key`, newest first.
    fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError>;

    /// Visits every stored version whose main mod revision is in
    /// `[from, to]`, in revision order (main, then sub).
    fn changes(
        &self,
        from: i64,
        to: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError>;

    /// Visits every stored lease, in ascending ID order.
    fn leases(
        &self,
        visit: &mut dyn FnMut(LeaseRecord) -> ControlFlow<()>,
    ) -> Result<(), StorageError>;

    /// The stored membership; `None` on a store that never recorded one (a
    /// fresh store, or one written before membership was stored).
    fn membership(&self) -> Result<Option<Membership>, StorageError>;

    /// The stored auth store; `None` on a store that never recorded one.
    fn auth(&self) -> Result<Option<AuthState>, StorageError>;

    /// The active alarms (empty on a store that never recorded any).
    fn alarms(&self) -> Result<Alarms, StorageError>;

    /// The bytes the stored versions and leases take, counted with
    /// [`version_bytes`] and [`LEASE_BYTES`]: exact for the data held, the
    /// same on every backend, and the same after a restart. The backend
    /// quota (`--quota-backend-bytes`) is judged on it, not on a file's
    /// size, which free pages and preallocation inflate.
    fn used_bytes(&self) -> Result<u64, StorageError>;
}

/// A live key's place in its generation ([`KvRead::generation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// The revision that created the key (its generation's first).
    pub create_revision: i64,
    /// How many times the key was put in this generation.
    pub version: i64,
}

impl Generation {
    /// Where `version` leaves its key: `None` for a tombstone.
    pub fn of(version: &KeyVersion) -> Option<Self> {
        (!version.tombstone).then_some(Self {
            create_revision: version.create_revision,
            version: version.version,
        })
    }
}

/// [`KvRead::generation`] by reading the version.
pub fn generation_read<R: KvRead + ?Sized>(
    read: &R,
    key: &[u8],
    at: i64,
) -> Result<Option<Generation>, StorageError> {
    let mut end = key.to_vec();
    end.push(0);
    let mut found = None;
    read.scan(key, RangeEnd::Before(&end), at, &mut |version| {
        found = Generation::of(&version);
        ControlFlow::Break(())
    })?;
    Ok(found)
}

/// A write transaction on the MVCC backend. Reads through it see its own
/// writes. Nothing is visible to other readers until [`KvWrite::commit`].
pub trait KvWrite: KvRead {
    /// Stores one version (its key and mod revision identify it).
    fn put_version(&mut self, version: &KeyVersion) -> Result<(), StorageError>;

    /// Removes one stored version, as compaction does.
    fn remove_version(&mut self, key: &[u8], revision: Revision) -> Result<(), StorageError>;

    /// Stores a lease, replacing the one with the same ID.
    fn put_lease(&mut self, lease: &LeaseRecord) -> Result<(), StorageError>;

    /// Removes a lease; removing a missing one does nothing.
    fn remove_lease(&mut self, id: i64) -> Result<(), StorageError>;

    /// Replaces the meta record.
    fn set_meta(&mut self, meta: &KvMeta) -> Result<(), StorageError>;

    /// Replaces the membership record. The commit that carries it is
    /// durable when it returns: a member never comes back from a crash
    /// without a membership change it applied.
    fn set_membership(&mut self, membership: &Membership) -> Result<(), StorageError>;

    /// Replaces the auth record.
    fn set_auth(&mut self, auth: &AuthState) -> Result<(), StorageError>;

    /// Replaces the alarm record.
    fn set_alarms(
        &mut self,
        alarms: &[oxetcd_proto::etcdserverpb::AlarmMember],
    ) -> Result<(), StorageError>;

    /// Applies a storage migration's steps (see
    /// [`crate::version::migration`]) in this transaction, so the new
    /// format and the storage version recorded with the membership commit
    /// together. A store that does not model tables refuses any step.
    fn migrate(&mut self, steps: &[crate::version::migration::Step]) -> Result<(), StorageError> {
        match steps.first() {
            None => Ok(()),
            Some(step) => Err(StorageError::invariant(format_args!(
                "this store cannot apply the migration step {step:?}"
            ))),
        }
    }

    /// Makes the transaction visible to new readers. It need not be durable:
    /// the raft log is the durable record.
    fn commit(self) -> Result<(), StorageError>;

    /// The history up to `revision` is about to be compacted; `meta` is
    /// the store's meta record as of now (this transaction's writes
    /// included). A store that keeps etcd's compaction hashes (3.6's
    /// compact hash check) records the hash of its key space up to
    /// `revision` here, while that history is still there, and publishes
    /// it at commit ([`KvStore::compaction_hashes`]). By default nothing
    /// is kept.
    fn before_compaction(&mut self, meta: &KvMeta, revision: i64) -> Result<(), StorageError> {
        let _ = (meta, revision);
        Ok(())
    }
}

/// The hash of a store's key space recorded when it was compacted: what
/// `HashKV` at `revision` answered just before, with the compact
/// revision of then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionHash {
    /// etcd's `HashKV` hash.
    pub hash: u32,
    /// The compact revision before the compaction.
    pub compact_revision: i64,
    /// The revision compacted to.
    pub revision: i64,
}

/// The MVCC backend: a handle that may be cloned and used from any thread.
pub trait KvStore: Clone + Send + Sync + 'static {
    /// A read snapshot.
    type Read: KvRead + Send + 'static;
    /// A write transaction.
    type Write: KvWrite;

    /// Opens a consistent read snapshot of the last committed state.
    fn read(&self) -> Result<Self::Read, StorageError>;

    /// Begins the (single) write transaction.
    fn write(&self) -> Result<Self::Write, StorageError>;

    /// Makes every committed transaction durable (shutdown, snapshots).
    fn sync(&self) -> Result<(), StorageError>;

    /// Gives the space that compactions and deletions freed back to the
    /// file system, while the member runs (`Maintenance.Defragment`).
    /// Reads and writes wait meanwhile. A store with nothing to give back
    /// does nothing.
    fn defragment(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// The hashes recorded at the last compactions, newest first (see
    /// [`KvWrite::before_compaction`]); none by default.
    fn compaction_hashes(&self) -> Vec<CompactionHash> {
        Vec::new()
    }
}

/// What a log store holds when the node starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogState {
    /// The persisted hard state (term, vote, commit).
    pub hard_state: HardState,
    /// Index of the first entry still stored (1 on a fresh log). The log
    /// is compacted up to `first_index - 1`, its snapshot point.
    pub first_index: u64,
    /// Index of the last entry stored (`first_index - 1` when none is).
    pub last_index: u64,
    /// Term of the entry at the snapshot point, `first_index - 1` (0 on a
    /// log never compacted). The membership at that point is not kept here:
    /// the backend stores it with its applied index, which is never below
    /// the snapshot point.
    pub snapshot_term: u64,
    /// The cluster ID this member learned from its peers when it joined an
    /// existing cluster ([`LogStore::store_cluster_id`]); 0 if it never
    /// had to (a member of a new cluster computes it from its flags).
    pub cluster_id: u64,
}

/// The raft log and hard state.
pub trait LogStore: Clone + Send + Sync + 'static {
    /// The state to start from.
    fn state(&self) -> Result<LogState, StorageError>;

    /// Entries with index in `[low, high)`, in order. Every index in the
    /// range must be stored.
    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError>;

    /// Durably appends `entries` (replacing any stored entries at or after
    /// the first one's index) and stores `hard_state` if given, then
    /// returns. Called by the runtime for `Output::Persist`; fsync means
    /// fsync. A [`StorageError::DiskFull`] leaves the log as it was, so the
    /// same append may be retried once space returns.
    fn append(&self, entries: &[Entry], hard_state: Option<&HardState>)
        -> Result<(), StorageError>;

    /// Drops entries before `index` (they are applied and durable in the
    /// backend), remembering the term of the entry at `index - 1` as the
    /// snapshot term. Compacting at or before the first index does nothing.
    fn compact(&self, index: u64) -> Result<(), StorageError>;

    /// Replaces the whole log with an empty one compacted at `index` (the
    /// entry there had `term`): the next entry appended is `index + 1`.
    /// Durable when it returns. Used to install a snapshot received from
    /// the leader, after the backend holds the snapshot's state.
    fn install_snapshot(&self, index: u64, term: u64) -> Result<(), StorageError>;

    /// Durably records the cluster ID learned from the peers
    /// (`Output::StoreClusterId`), read back as [`LogState::cluster_id`].
    /// Called before any entry from that cluster is appended.
    fn store_cluster_id(&self, cluster_id: u64) -> Result<(), StorageError>;
}
