//! Taking over a data directory that etcd wrote: when `--data-dir` holds
//! etcd's layout and no oxetcd data, [`import`] turns it into oxetcd's, so
//! that a member stopped under etcd starts under oxetcd with the same
//! flags and carries on as the same member of the same cluster.
//!
//! Design. etcd's layout is `member/snap/db` (its bolt backend, read by
//! [`crate::bolt::etcd`]), `member/snap/*.snap` (raft snapshots: only the
//! newest valid one's index and term are used, [`read_snap`]) and
//! `member/wal/*.wal` ([`crate::etcd_wal`]). What is imported: every key
//! version, the compaction, leases, auth and alarms of the backend, as of
//! its consistent index A; the members (IDs, peer and client URLs, names,
//! learner flags) from its `members` bucket; this member's and the
//! cluster's IDs from the WAL's metadata; the hard state from the WAL.
//! oxetcd's raft log starts compacted at A (with the term of entry A), and
//! holds etcd's committed entries after A, up to the commit index C,
//! translated into oxetcd's own entries (`translate`): key and lease
//! requests become the same requests in oxetcd's `Proposal`, and the node
//! applies them when it starts, as it replays its own log after a crash.
//! Entries that changed nothing oxetcd keeps (empty entries, v2 requests,
//! reads) or whose effect the backend already shows (membership changes
//! etcd saved at once) become empty entries. Auth changes after A cannot
//! be replayed (etcd hashes passwords when it applies them) and a
//! membership change the backend does not show cannot be either: such a
//! directory is refused, naming how many entries, and how to get a clean
//! one. Entries after C were never acknowledged and are dropped.
//!
//! Atomicity: the oxetcd data is written in a scratch directory inside
//! `member/`, its WAL segments are moved next to etcd's (their names,
//! `%016x.wal`, are not etcd's `%016x-%016x.wal`; etcd ignores them), and
//! renaming the backend `kv.redb` into `member/` is the commit point: a
//! directory without it is imported again from scratch. etcd's files are
//! only read, so etcd can be started on the directory again (it will not
//! see what oxetcd wrote).

use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{KvStore, KvWrite, LogStore, Membership};
use oxetcd_proto::etcdserverpb::{
    AlarmRequest, CompactionRequest, DeleteRangeRequest, LeaseCheckpointRequest, LeaseGrantRequest,
    LeaseRevokeRequest, Member, PutRequest, TxnRequest,
};
use oxetcd_proto::oxetcdpb::{proposal, Proposal};
use prost::Message;
use protobuf::Message as _;
use raft_proto::eraftpb::{ConfState, Entry, EntryType, HardState};

use crate::bolt::{etcd, BoltReader};
use crate::crc32c::Crc32c;
use crate::etcd_wal::{self, EtcdWal, WalError};
use crate::snapshot::ImportError;
use crate::{KV_FILE, MEMBER_DIR, WAL_DIR};

/// etcd's folder of the backend and raft snapshots, inside `member/`.
pub const SNAP_DIR: &str = "snap";
/// etcd's backend file inside [`SNAP_DIR`].
pub const ETCD_DB_FILE: &str = "db";
/// Scratch directory of an import in progress, inside `member/`.
const SCRATCH_DIR: &str = "oxetcd-import.tmp";

/// What an import took over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// This member's ID (WAL metadata).
    pub member_id: u64,
    /// The cluster's ID (WAL metadata).
    pub cluster_id: u64,
    /// Key versions (every revision of every key, deletions included).
    pub versions: u64,
    /// Leases.
    pub leases: u64,
    /// Members.
    pub members: u64,
    /// The store's revision and compacted revision.
    pub revision: i64,
    /// See [`Self::revision`].
    pub compact_revision: i64,
    /// The backend's consistent index: oxetcd's log starts after it.
    pub applied_index: u64,
    /// The commit index: the log's committed entries end there.
    pub commit_index: u64,
    /// Committed entries after the consistent index, replayed at start.
    pub replayed: u64,
    /// Entries after the commit index, dropped.
    pub dropped: u64,
    /// The raft term.
    pub term: u64,
    /// Bytes of etcd's backend file.
    pub backend_bytes: u64,
    /// How long the import took.
    pub took: Duration,
}

/// Why an etcd data directory could not be imported (nothing was changed).
#[derive(Debug)]
#[non_exhaustive]
pub enum EtcdDirError {
    /// etcd's WAL could not be read.
    Wal(WalError),
    /// A file is not what etcd writes.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A file or directory could not be read or written.
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// The directory belongs to another member than the flags describe.
    OtherMember {
        /// The member ID in etcd's WAL.
        found: u64,
        /// The member ID the flags give.
        expected: u64,
    },
    /// Committed entries that the backend does not hold and oxetcd cannot
    /// replay.
    Unapplied {
        /// How many.
        count: u64,
        /// What the first one is.
        first: String,
    },
    /// oxetcd's storage failed while writing the imported data.
    Storage(String),
}

impl fmt::Display for EtcdDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Wal(e) => write!(f, "{e}"),
            Self::Corrupt { path, detail } => write!(f, "{}: {detail}", path.display()),
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
            Self::OtherMember { found, expected } => write!(
                f,
                "the etcd data directory belongs to member {found:x}, \
                 but the flags describe member {expected:x}"
            ),
            Self::Unapplied { count, first } => write!(
                f,
                "etcd's WAL holds {count} committed entries its backend does not, \
                 which oxetcd cannot replay (the first: {first}); start etcd on the \
                 directory and stop it cleanly (SIGTERM), which applies them, then \
                 start oxetcd again"
            ),
            Self::Storage(e) => write!(f, "writing the imported data: {e}"),
        }
    }
}

impl std::error::Error for EtcdDirError {}

impl From<WalError> for EtcdDirError {
    fn from(e: WalError) -> Self {
        Self::Wal(e)
    }
}

/// Whether `data_dir` holds etcd's layout and no oxetcd backend.
pub fn holds_etcd_data(data_dir: &Path) -> bool {
    let member = data_dir.join(MEMBER_DIR);
    member.join(SNAP_DIR).join(ETCD_DB_FILE).is_file() && !member.join(KV_FILE).exists()
}

/// The member the flags describe, which the directory must belong to.
#[derive(Clone, Copy, Debug)]
pub struct FlagsMember<'a> {
    /// The member ID the flags derive.
    pub id: u64,
    /// Its advertised peer URLs.
    pub peer_urls: &'a [String],
}

impl FlagsMember<'_> {
    /// Whether etcd's member `id` is this one: the same ID, or (an ID
    /// `member add` chose, or another cluster token) the same peer URLs.
    fn is(&self, id: u64, members: &[Member]) -> bool {
        let same_urls = |theirs: &[String]| {
            let norm = |urls: &[String]| {
                let mut out: Vec<String> = urls
                    .iter()
                    .map(|u| u.trim_end_matches('/').to_ascii_lowercase())
                    .collect();
                out.sort();
                out
            };
            norm(theirs) == norm(self.peer_urls)
        };
        id == self.id
            || members
                .iter()
                .any(|m| m.id == id && same_urls(&m.peer_ur_ls))
    }
}

/// Imports the etcd data in `data_dir` if it holds etcd's layout and no
/// oxetcd data (see the module note); `None` when there is nothing to
/// import. `expected_member` is the member the flags describe: a
/// directory of another member is refused.
pub fn import(
    data_dir: &Path,
    expected_member: Option<FlagsMember<'_>>,
) -> Result<Option<Imported>, EtcdDirError> {
    if !holds_etcd_data(data_dir) {
        return Ok(None);
    }
    let started = Instant::now();
    let member = data_dir.join(MEMBER_DIR);
    let snap = read_snap(&member.join(SNAP_DIR))?;
    let wal =
        etcd_wal::read_dir_after(&member.join(WAL_DIR), snap.as_ref().map_or(0, |s| s.index))?;
    let db_path = member.join(SNAP_DIR).join(ETCD_DB_FILE);
    let io = |path: &Path, error| EtcdDirError::Io {
        path: path.to_path_buf(),
        error,
    };
    let corrupt = |path: &Path, detail: String| EtcdDirError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let file = File::open(&db_path).map_err(|e| io(&db_path, e))?;
    let reader = BoltReader::open(file).map_err(|e| corrupt(&db_path, e.to_string()))?;
    let mut facts = Facts::read(&reader).map_err(|e| corrupt(&db_path, e.to_string()))?;
    // The members as etcd rebuilds them (v2 store and log), else the
    // backend's copy.
    let from = snap.as_ref().map_or(0, |s| s.index);
    let commit = wal.hard_state.commit.max(facts.consistent_index);
    let replay: Option<Vec<&Entry>> = (from + 1..=commit).map(|i| wal.entry(i)).collect();
    if let Some(members) = replay.and_then(|entries| {
        crate::etcd_members::members(snap.as_ref().map(|s| s.data.as_slice()), &entries)
    }) {
        facts.membership = membership(members);
    }
    if facts.membership.members.is_empty() {
        return Err(corrupt(
            &db_path,
            "no member found in the backend or the log".into(),
        ));
    }
    if let Some(expected) = expected_member {
        if !expected.is(wal.member_id, &facts.membership.members) {
            return Err(EtcdDirError::OtherMember {
                found: wal.member_id,
                expected: expected.id,
            });
        }
    }
    if expected_member.is_some()
        && !facts
            .membership
            .members
            .iter()
            .any(|m| m.id == wal.member_id)
    {
        return Err(corrupt(
            &db_path,
            format!(
                "member {:x} is not among the members it holds",
                wal.member_id
            ),
        ));
    }
    let plan = plan(&wal, snap.as_ref(), &facts)?;

    let scratch = member.join(SCRATCH_DIR);
    if scratch.exists() {
        fs::remove_dir_all(&scratch).map_err(|e| io(&scratch, e))?;
    }
    let result = write_scratch(&scratch, &reader, &facts, &wal, &plan);
    let counts = match result {
        Ok(counts) => counts,
        Err(e) => {
            let _ = fs::remove_dir_all(&scratch);
            return Err(e);
        }
    };
    move_into_place(&scratch, &member)?;
    let _ = fs::remove_dir_all(&scratch);
    Ok(Some(Imported {
        member_id: wal.member_id,
        cluster_id: wal.cluster_id,
        versions: counts.versions,
        leases: counts.leases,
        members: facts.membership.members.len() as u64,
        revision: counts.revision,
        compact_revision: counts.compact_revision,
        applied_index: plan.applied_index,
        commit_index: plan.hard_state.commit,
        replayed: plan.entries.len() as u64,
        dropped: plan.dropped,
        term: plan.hard_state.term,
        backend_bytes: reader.size_bytes(),
        took: started.elapsed(),
    }))
}

/// What the backend holds besides the key space, as the import needs it.
struct Facts {
    consistent_index: u64,
    membership: Membership,
}

impl Facts {
    fn read<F: crate::bolt::ReadAt>(reader: &BoltReader<F>) -> Result<Self, String> {
        let root = reader.root();
        let mut consistent_index = 0;
        if let Some(meta) = reader
            .bucket(&root, etcd::META_BUCKET)
            .map_err(|e| e.to_string())?
        {
            reader
                .for_each::<crate::bolt::BoltError>(&meta, &mut |key, value| {
                    if key == etcd::CONSISTENT_INDEX_KEY {
                        if let Some(bytes) = value.and_then(|v| <[u8; 8]>::try_from(v).ok()) {
                            consistent_index = u64::from_be_bytes(bytes);
                        }
                    }
                    Ok(())
                })
                .map_err(|e| e.to_string())?;
        }
        let mut members = Vec::new();
        let mut bad = None;
        if let Some(bucket) = reader
            .bucket(&root, etcd::MEMBERS_BUCKET)
            .map_err(|e| e.to_string())?
        {
            reader
                .for_each::<crate::bolt::BoltError>(&bucket, &mut |key, value| {
                    match parse_member(key, value.unwrap_or_default()) {
                        Ok(member) => members.push(member),
                        Err(e) => bad = Some(e),
                    }
                    Ok(())
                })
                .map_err(|e| e.to_string())?;
        }
        if let Some(e) = bad {
            return Err(e);
        }
        members.sort_by_key(|m| m.id);
        Ok(Self {
            consistent_index,
            membership: membership(members),
        })
    }
}

/// `members` and the raft configuration they make.
fn membership(members: Vec<Member>) -> Membership {
    let mut conf_state = ConfState::default();
    for member in &members {
        if member.is_learner {
            conf_state.learners.push(member.id);
        } else {
            conf_state.voters.push(member.id);
        }
    }
    // The versions are left undecided: the members publish their own
    // once they run, and the leader decides the cluster version from
    // those (etcd's recorded cluster version is of its own releases).
    Membership {
        conf_state,
        members,
        ..Membership::default()
    }
}

/// A member of etcd's `members` bucket: its ID in hex, and the JSON of
/// membership.Member.
fn parse_member(key: &[u8], value: &[u8]) -> Result<Member, String> {
    let bad = |why: &str| {
        format!(
            "member entry {}: {why}",
            String::from_utf8_lossy(key).escape_debug()
        )
    };
    let id = std::str::from_utf8(key)
        .ok()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or_else(|| bad("the key is not a hex ID"))?;
    let json: serde_json::Value =
        serde_json::from_slice(value).map_err(|e| bad(&format!("not JSON: {e}")))?;
    let urls = |field: &str| -> Vec<String> {
        json.get(field)
            .and_then(|v| v.as_array())
            .map(|list| {
                list.iter()
                    .filter_map(|u| u.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    if json
        .get("id")
        .and_then(|v| v.as_u64())
        .is_some_and(|j| j != id)
    {
        return Err(bad("its JSON names another ID"));
    }
    Ok(Member {
        id,
        name: json
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned(),
        peer_ur_ls: urls("peerURLs"),
        client_ur_ls: urls("clientURLs"),
        is_learner: json
            .get("isLearner")
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
    })
}

/// etcd's snappb.Snapshot: a raftpb.Snapshot and its CRC-32C.
#[derive(Clone, PartialEq, Message)]
struct SnapFileProto {
    #[prost(uint32, tag = "1")]
    crc: u32,
    #[prost(bytes = "vec", tag = "2")]
    data: Vec<u8>,
}

/// A raft snapshot of etcd's: its index, term and data (etcd 3.4's v2
/// store, as JSON).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snap {
    /// The index of the last entry it holds.
    pub index: u64,
    /// That entry's term.
    pub term: u64,
    /// The state machine's data.
    pub data: Vec<u8>,
}

/// The newest valid raft snapshot in etcd's `snap` directory
/// (`%016x-%016x.snap`), `None` if there is none. As etcd does, a file
/// that fails its checksum is passed over for an older one.
pub fn read_snap(dir: &Path) -> Result<Option<Snap>, EtcdDirError> {
    let io = |path: &Path, error| EtcdDirError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let entry = entry.map_err(|e| io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            if parse_snap_name(name).is_some() {
                names.push(name.to_owned());
            }
        }
    }
    names.sort();
    for name in names.iter().rev() {
        let path = dir.join(name);
        let bytes = fs::read(&path).map_err(|e| io(&path, e))?;
        if let Some(found) = decode_snap(&bytes) {
            return Ok(Some(found));
        }
        tracing::warn!(path = %path.display(), "skipping an etcd snapshot file that does not verify");
    }
    Ok(None)
}

/// The term and index a snap file's name stands for.
fn parse_snap_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".snap")?;
    let (term, index) = stem.split_once('-')?;
    if term.len() != 16 || index.len() != 16 {
        return None;
    }
    Some((
        u64::from_str_radix(term, 16).ok()?,
        u64::from_str_radix(index, 16).ok()?,
    ))
}

/// A snap file's raft snapshot, if it verifies.
pub fn decode_snap(bytes: &[u8]) -> Option<Snap> {
    let file = SnapFileProto::decode(bytes).ok()?;
    let mut crc = Crc32c::default();
    crc.update(&file.data);
    if crc.sum() != file.crc || file.data.is_empty() {
        return None;
    }
    let snapshot = raft_proto::eraftpb::Snapshot::parse_from_bytes(&file.data).ok()?;
    let meta = snapshot.metadata.as_ref()?;
    Some(Snap {
        index: meta.index,
        term: meta.term,
        data: snapshot.data.to_vec(),
    })
}

/// The raft side of an import.
struct Plan {
    applied_index: u64,
    applied_term: u64,
    hard_state: HardState,
    /// The entries after the applied index, up to the commit index, in
    /// oxetcd's form.
    entries: Vec<Entry>,
    dropped: u64,
}

fn plan(wal: &EtcdWal, snap: Option<&Snap>, facts: &Facts) -> Result<Plan, EtcdDirError> {
    let applied_index = facts.consistent_index;
    let commit = wal.hard_state.commit.max(applied_index);
    let term_of = |index: u64| -> Option<u64> {
        if index == 0 {
            return Some(0);
        }
        if let Some(entry) = wal.entry(index) {
            return Some(entry.term);
        }
        snap.map(|s| (s.index, s.term))
            .filter(|(i, _)| *i == index)
            .or_else(|| wal.snapshots.iter().copied().find(|(i, _)| *i == index))
            .map(|(_, term)| term)
    };
    let missing = |index: u64| EtcdDirError::Corrupt {
        path: PathBuf::from(WAL_DIR),
        detail: format!("the WAL does not hold entry {index}, which the import needs"),
    };
    let applied_term = term_of(applied_index).ok_or_else(|| missing(applied_index))?;
    let mut entries = Vec::new();
    let mut unapplied = 0u64;
    let mut first = None;
    for index in applied_index + 1..=commit {
        let entry = wal.entry(index).ok_or_else(|| missing(index))?;
        match translate(entry) {
            Ok(data) => {
                entries.push(Entry {
                    index: entry.index,
                    term: entry.term,
                    entry_type: EntryType::EntryNormal,
                    data: data.into(),
                    ..Default::default()
                });
            }
            Err(why) => {
                unapplied += 1;
                first.get_or_insert_with(|| format!("entry {index}: {why}"));
            }
        }
    }
    if unapplied > 0 {
        return Err(EtcdDirError::Unapplied {
            count: unapplied,
            first: first.unwrap_or_default(),
        });
    }
    let last_index = wal.entries.last().map_or(0, |e| e.index);
    let last_term = entries.last().map_or(applied_term, |e| e.term);
    let mut hard_state = wal.hard_state.clone();
    hard_state.commit = commit;
    hard_state.term = hard_state.term.max(last_term);
    Ok(Plan {
        applied_index,
        applied_term,
        hard_state,
        entries,
        dropped: last_index.saturating_sub(commit),
    })
}

/// Just enough of an etcd entry's data to tell a v3 request (it has a
/// header) from a v2 one.
#[derive(Clone, PartialEq, Message)]
struct HeaderProbe {
    #[prost(bytes = "vec", optional, tag = "100")]
    header: Option<Vec<u8>>,
}

/// etcd's InternalRaftRequest: the requests oxetcd replays, and the
/// presence of those it cannot.
#[derive(Clone, PartialEq, Message)]
struct RaftRequestProto {
    #[prost(message, optional, tag = "4")]
    put: Option<PutRequest>,
    #[prost(message, optional, tag = "5")]
    delete_range: Option<DeleteRangeRequest>,
    #[prost(message, optional, tag = "6")]
    txn: Option<TxnRequest>,
    #[prost(message, optional, tag = "7")]
    compaction: Option<CompactionRequest>,
    #[prost(message, optional, tag = "8")]
    lease_grant: Option<LeaseGrantRequest>,
    #[prost(message, optional, tag = "9")]
    lease_revoke: Option<LeaseRevokeRequest>,
    #[prost(message, optional, tag = "10")]
    alarm: Option<AlarmRequest>,
    #[prost(message, optional, tag = "11")]
    lease_checkpoint: Option<LeaseCheckpointRequest>,
    #[prost(bytes = "vec", optional, tag = "1000")]
    auth_enable: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1011")]
    auth_disable: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1100")]
    auth_user_add: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1101")]
    auth_user_delete: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1103")]
    auth_user_change_password: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1104")]
    auth_user_grant_role: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1105")]
    auth_user_revoke_role: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1200")]
    auth_role_add: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1201")]
    auth_role_delete: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1203")]
    auth_role_grant_permission: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1204")]
    auth_role_revoke_permission: Option<Vec<u8>>,
}

impl RaftRequestProto {
    fn changes_auth(&self) -> bool {
        [
            &self.auth_enable,
            &self.auth_disable,
            &self.auth_user_add,
            &self.auth_user_delete,
            &self.auth_user_change_password,
            &self.auth_user_grant_role,
            &self.auth_user_revoke_role,
            &self.auth_role_add,
            &self.auth_role_delete,
            &self.auth_role_grant_permission,
            &self.auth_role_revoke_permission,
        ]
        .iter()
        .any(|field| field.is_some())
    }
}

/// The data of oxetcd's entry for etcd's committed `entry` that the
/// backend does not reflect yet: a
/// `Proposal` to apply, or nothing (an empty entry) when there is nothing
/// to apply; an error saying what it is when oxetcd cannot replay it.
pub(crate) fn translate(entry: &Entry) -> Result<Vec<u8>, String> {
    match entry.entry_type {
        EntryType::EntryNormal => {}
        // The imported membership is the one as of the commit index
        // (module `etcd_members`): nothing left to apply.
        EntryType::EntryConfChange => return Ok(Vec::new()),
        EntryType::EntryConfChangeV2 => return Err("a ConfChangeV2".into()),
    }
    if entry.data.is_empty() {
        return Ok(Vec::new());
    }
    let probe = HeaderProbe::decode(entry.data.as_ref())
        .map_err(|e| format!("data that does not decode: {e}"))?;
    if probe.header.is_none() {
        // A v2 request (publishing a member's attributes, the cluster
        // version): what it changes, etcd keeps in the backend already.
        return Ok(Vec::new());
    }
    let request = RaftRequestProto::decode(entry.data.as_ref())
        .map_err(|e| format!("a request that does not decode: {e}"))?;
    if request.changes_auth() {
        return Err("an auth change".into());
    }
    let replay = if let Some(put) = request.put {
        proposal::Request::Put(put)
    } else if let Some(delete) = request.delete_range {
        proposal::Request::DeleteRange(delete)
    } else if let Some(txn) = request.txn {
        proposal::Request::Txn(txn)
    } else if let Some(compaction) = request.compaction {
        proposal::Request::Compaction(compaction)
    } else if let Some(grant) = request.lease_grant {
        proposal::Request::LeaseGrant(grant)
    } else if let Some(revoke) = request.lease_revoke {
        proposal::Request::LeaseRevoke(revoke)
    } else if let Some(checkpoint) = request.lease_checkpoint {
        proposal::Request::LeaseCheckpoint(checkpoint)
    } else if let Some(alarm) = request.alarm {
        proposal::Request::Alarm(alarm)
    } else {
        // Reads, authentications, auth reads: nothing to apply.
        return Ok(Vec::new());
    };
    // No proposal ID: the node applies it as it does its own entries,
    // without a permission check (etcd admitted it already).
    Ok(Proposal {
        id: 0,
        request: Some(replay),
        user: String::new(),
        auth_revision: 0,
    }
    .encode_to_vec())
}

struct Counts {
    versions: u64,
    leases: u64,
    revision: i64,
    compact_revision: i64,
}

/// Writes oxetcd's backend and log for the import into `scratch`.
fn write_scratch<F: crate::bolt::ReadAt>(
    scratch: &Path,
    reader: &BoltReader<F>,
    facts: &Facts,
    wal: &EtcdWal,
    plan: &Plan,
) -> Result<Counts, EtcdDirError> {
    let storage = |e: &dyn fmt::Display| EtcdDirError::Storage(e.to_string());
    let (log, kv) = crate::open(scratch).map_err(|e| storage(&e))?;
    let mut write = kv.write().map_err(|e| storage(&e))?;
    let mut meta = etcd::import(reader, &mut write).map_err(|e| match e {
        ImportError::Storage(e) => storage(&e),
        other => EtcdDirError::Corrupt {
            path: PathBuf::from(format!("{MEMBER_DIR}/{SNAP_DIR}/{ETCD_DB_FILE}")),
            detail: other.to_string(),
        },
    })?;
    meta.applied_index = plan.applied_index;
    meta.applied_term = plan.applied_term;
    write.set_meta(&meta).map_err(|e| storage(&e))?;
    write
        .set_membership(&facts.membership)
        .map_err(|e| storage(&e))?;
    write.commit().map_err(|e| storage(&e))?;
    kv.sync().map_err(|e| storage(&e))?;
    let view = kv.read().map_err(|e| storage(&e))?;
    let mut versions = 0u64;
    let mut leases = 0u64;
    {
        use oxetcd_core::storage::KvRead as _;
        use std::ops::ControlFlow;
        view.changes(0, i64::MAX, &mut |_| {
            versions += 1;
            ControlFlow::Continue(())
        })
        .map_err(|e| storage(&e))?;
        view.leases(&mut |_| {
            leases += 1;
            ControlFlow::Continue(())
        })
        .map_err(|e| storage(&e))?;
    }
    drop(view);
    if wal.cluster_id != 0 {
        log.store_cluster_id(wal.cluster_id)
            .map_err(|e| storage(&e))?;
    }
    log.install_snapshot(plan.applied_index, plan.applied_term)
        .map_err(|e| storage(&e))?;
    log.append(&plan.entries, Some(&plan.hard_state))
        .map_err(|e| storage(&e))?;
    drop(log);
    drop(kv);
    Ok(Counts {
        versions,
        leases,
        revision: meta.revision,
        compact_revision: meta.compact_revision,
    })
}

/// Moves the scratch directory's WAL segments next to etcd's WAL files,
/// then its backend into `member/` (the commit point).
fn move_into_place(scratch: &Path, member: &Path) -> Result<(), EtcdDirError> {
    let io = |path: &Path, error| EtcdDirError::Io {
        path: path.to_path_buf(),
        error,
    };
    let wal_dir = member.join(WAL_DIR);
    // Segments of an earlier import that did not finish.
    for entry in fs::read_dir(&wal_dir).map_err(|e| io(&wal_dir, e))? {
        let entry = entry.map_err(|e| io(&wal_dir, e))?;
        let name = entry.file_name();
        let ours = name
            .to_str()
            .is_some_and(|n| crate::wal::is_segment_name(n) || n == crate::wal::SPARE_NAME);
        if ours {
            fs::remove_file(entry.path()).map_err(|e| io(&entry.path(), e))?;
        }
    }
    let from = scratch.join(MEMBER_DIR).join(WAL_DIR);
    for entry in fs::read_dir(&from).map_err(|e| io(&from, e))? {
        let entry = entry.map_err(|e| io(&from, e))?;
        let name = entry.file_name();
        if name.to_str().is_some_and(crate::wal::is_segment_name) {
            let to = wal_dir.join(&name);
            fs::rename(entry.path(), &to).map_err(|e| io(&to, e))?;
        }
    }
    sync_dir(&wal_dir).map_err(|e| io(&wal_dir, e))?;
    let kv_from = scratch.join(MEMBER_DIR).join(KV_FILE);
    let kv_to = member.join(KV_FILE);
    fs::rename(&kv_from, &kv_to).map_err(|e| io(&kv_to, e))?;
    sync_dir(member).map_err(|e| io(member, e))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(data: Vec<u8>) -> Entry {
        Entry {
            index: 5,
            term: 2,
            data: data.into(),
            ..Default::default()
        }
    }

    #[test]
    fn requests_become_proposals_and_the_rest_empty_entries() {
        #[derive(Clone, PartialEq, Message)]
        struct Wrapped {
            #[prost(bytes = "vec", optional, tag = "100")]
            header: Option<Vec<u8>>,
            #[prost(message, optional, tag = "4")]
            put: Option<PutRequest>,
            #[prost(bytes = "vec", optional, tag = "1100")]
            user_add: Option<Vec<u8>>,
            #[prost(bytes = "vec", optional, tag = "3")]
            range: Option<Vec<u8>>,
        }
        let put = PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        };
        let data = Wrapped {
            header: Some(vec![8, 1]),
            put: Some(put.clone()),
            user_add: None,
            range: None,
        }
        .encode_to_vec();
        let out = translate(&normal(data)).unwrap();
        let proposal = Proposal::decode(out.as_slice()).unwrap();
        assert_eq!(proposal.id, 0);
        assert_eq!(proposal.request, Some(proposal::Request::Put(put)));

        let range = Wrapped {
            header: Some(vec![8, 1]),
            put: None,
            user_add: None,
            range: Some(vec![10, 1, b'k']),
        };
        assert!(translate(&normal(range.encode_to_vec()))
            .unwrap()
            .is_empty());
        let auth = Wrapped {
            header: Some(vec![8, 1]),
            put: None,
            user_add: Some(vec![10, 1, b'u']),
            range: None,
        };
        let why = translate(&normal(auth.encode_to_vec())).unwrap_err();
        assert!(why.contains("auth"), "{why}");
        // A v2 request (no header): nothing to apply.
        let v2 = [8, 7, 18, 3, b'P', b'U', b'T', 26, 2, b'/', b'0'];
        assert!(translate(&normal(v2.to_vec())).unwrap().is_empty());
        assert!(translate(&normal(Vec::new())).unwrap().is_empty());
        assert!(translate(&normal(vec![0xff; 9])).is_err());
    }

    #[test]
    fn committed_entries_after_the_consistent_index_are_replayed_or_refused() {
        #[derive(Clone, PartialEq, Message)]
        struct Request {
            #[prost(bytes = "vec", optional, tag = "100")]
            header: Option<Vec<u8>>,
            #[prost(message, optional, tag = "4")]
            put: Option<PutRequest>,
            #[prost(bytes = "vec", optional, tag = "1000")]
            auth_enable: Option<Vec<u8>>,
        }
        let entry = |index: u64, request: Option<Request>| Entry {
            index,
            term: 2,
            data: request
                .map(|r| r.encode_to_vec())
                .unwrap_or_default()
                .into(),
            ..Default::default()
        };
        let put = Request {
            header: Some(vec![8, 1]),
            put: Some(PutRequest {
                key: b"k".to_vec(),
                ..Default::default()
            }),
            auth_enable: None,
        };
        let auth = Request {
            header: Some(vec![8, 2]),
            put: None,
            auth_enable: Some(Vec::new()),
        };
        let mut wal = EtcdWal {
            entries: vec![entry(1, None), entry(2, Some(put)), entry(3, None)],
            ..Default::default()
        };
        wal.hard_state.commit = 2;
        wal.hard_state.term = 2;
        let facts = Facts {
            consistent_index: 1,
            membership: Membership::default(),
        };
        let planned = plan(&wal, None, &facts).unwrap();
        assert_eq!((planned.applied_index, planned.applied_term), (1, 2));
        assert_eq!(planned.entries.len(), 1);
        assert!(Proposal::decode(planned.entries[0].data.as_ref()).is_ok());
        assert_eq!(planned.hard_state.commit, 2);
        // Entry 3 was never committed: dropped.
        assert_eq!(planned.dropped, 1);

        wal.entries.push(entry(4, Some(auth)));
        wal.hard_state.commit = 4;
        let error = plan(&wal, None, &facts).err().unwrap();
        assert!(
            matches!(&error, EtcdDirError::Unapplied { count: 1, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("stop it cleanly"), "{error}");
        // An entry the import needs that the log does not hold.
        wal.entries.remove(0);
        wal.hard_state.commit = 2;
        let facts = Facts {
            consistent_index: 0,
            ..facts
        };
        assert!(plan(&wal, None, &facts).is_err());
    }

    #[test]
    fn members_parse_from_etcd_json() {
        let member = parse_member(
            b"8e9e05c52164694d",
            br#"{"id":10276657743932975437,"peerURLs":["http://localhost:2380"],"name":"default","clientURLs":["http://localhost:2379"]}"#,
        )
        .unwrap();
        assert_eq!(member.id, 0x8e9e05c52164694d);
        assert_eq!(member.name, "default");
        assert_eq!(member.peer_ur_ls, vec!["http://localhost:2380"]);
        assert!(!member.is_learner);
        assert!(parse_member(b"zz", b"{}").is_err());
        assert!(parse_member(b"10", b"{\"id\":17}").is_err());
        assert!(parse_member(b"10", b"not json").is_err());
    }

    #[test]
    fn snap_files_verify_their_checksum() {
        let mut snapshot = raft_proto::eraftpb::Snapshot::default();
        snapshot.mut_metadata().index = 12;
        snapshot.mut_metadata().term = 3;
        let data = snapshot.write_to_bytes().unwrap();
        let mut crc = Crc32c::default();
        crc.update(&data);
        let file = SnapFileProto {
            crc: crc.sum(),
            data: data.clone(),
        }
        .encode_to_vec();
        let snap = decode_snap(&file).unwrap();
        assert_eq!((snap.index, snap.term), (12, 3));
        let mut bad = file.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(decode_snap(&bad), None);
        assert_eq!(decode_snap(b"junk"), None);
        assert_eq!(
            parse_snap_name("0000000000000003-000000000000000c.snap"),
            Some((3, 12))
        );
    }
}
