//! etcd 3.4's backend schema in a bolt file: what oxetcd writes as a
//! snapshot ([`image`]), reads back into its own backend ([`import`]), and
//! reports with `snapshot status` ([`status`]).
//!
//! Design. etcd keeps its whole state in ten top-level buckets:
//!
//! ```text
//! key              revision (8 bytes BE main, '_', 8 bytes BE sub, 't' if a
//!                  deletion) -> mvccpb.KeyValue (a deletion: the key alone)
//! meta             consistent_index -> 8 bytes BE; scheduledCompactRev and
//!                  finishedCompactRev -> a revision, as in `key`, once compacted
//! lease            lease ID, 8 bytes BE -> leasepb.Lease {ID, TTL, RemainingTTL}
//! members          member ID in hex -> JSON {id, peerURLs, isLearner, name, clientURLs}
//! members_removed  member ID in hex -> "removed"
//! cluster          clusterVersion -> "3.4.0"
//! alarm            etcdserverpb.AlarmMember {memberID, alarm} -> empty
//! auth             authEnabled -> 1 byte, authRevision -> 8 bytes BE
//! authUsers        name -> authpb.User (password: its bcrypt hash)
//! authRoles        name -> authpb.Role
//! ```
//!
//! The image of a backend read view holds every stored version (each key
//! at every revision not compacted, deletions included), the leases, the
//! members and the consistent index (the view's applied index), so that
//! etcd's `snapshot restore` and an etcd member started on the result see
//! oxetcd's data at the same revisions, with the same active alarms (as
//! etcd's own snapshots keep them). oxetcd keeps no record of removed
//! members in its backend, so that bucket is empty; users and roles are
//! written as etcd writes them, with auth's flag and revision.
//! The `key` bucket is paged out of the view in bounded batches, twice
//! (see [`super::write`]); everything else is small and read once.
//!
//! [`import`] is the other way: the versions, leases, compaction, auth and
//! alarms of an etcd (or oxetcd) bolt backend, as oxetcd's own records. It
//! keeps none of the old cluster's membership: a restored member starts a
//! new cluster (see `snapshot_file`).

use std::collections::VecDeque;
use std::io;
use std::ops::ControlFlow;

use oxetcd_core::storage::{AuthState, KeyVersion, KvMeta, KvRead, KvWrite, LeaseRecord, Revision};
use oxetcd_proto::{authpb, mvccpb};
use prost::Message;

use super::read::{BoltError, BoltReader, Bucket, ReadAt};
use super::write::{BoltWriter, Entry, EntrySource, VecSource};
use crate::crc32c::Crc32c;
use crate::snapshot::ImportError;

/// The key space's bucket.
pub const KEY_BUCKET: &[u8] = b"key";
/// The bucket of the consistent index and the compaction marks.
pub const META_BUCKET: &[u8] = b"meta";
/// The bucket of leases.
pub const LEASE_BUCKET: &[u8] = b"lease";
/// The bucket of members.
pub const MEMBERS_BUCKET: &[u8] = b"members";
/// The bucket of removed members' IDs.
pub const MEMBERS_REMOVED_BUCKET: &[u8] = b"members_removed";
/// The bucket of the cluster version.
pub const CLUSTER_BUCKET: &[u8] = b"cluster";
/// The bucket of raised alarms.
pub const ALARM_BUCKET: &[u8] = b"alarm";
/// The bucket of auth's flag and revision.
pub const AUTH_BUCKET: &[u8] = b"auth";
/// The bucket of users.
pub const AUTH_USERS_BUCKET: &[u8] = b"authUsers";
/// The bucket of roles.
pub const AUTH_ROLES_BUCKET: &[u8] = b"authRoles";

pub(crate) const CONSISTENT_INDEX_KEY: &[u8] = b"consistent_index";
pub(crate) const SCHEDULED_COMPACT_KEY: &[u8] = b"scheduledCompactRev";
const FINISHED_COMPACT_KEY: &[u8] = b"finishedCompactRev";
const CLUSTER_VERSION_KEY: &[u8] = b"clusterVersion";
const AUTH_REVISION_KEY: &[u8] = b"authRevision";
const AUTH_ENABLED_KEY: &[u8] = b"authEnabled";

/// Bytes of a revision key: main, '_', sub.
const REVISION_KEY_BYTES: usize = 17;
/// A deletion's revision key ends with this mark.
const TOMBSTONE_MARK: u8 = b't';

/// The `key` bucket is read from the view in batches of at most this many
/// versions (or [`BATCH_BYTES_MAX`]), so a snapshot never holds more of
/// the key space than that in memory.
const BATCH_VERSIONS_MAX: usize = 1024;
/// See [`BATCH_VERSIONS_MAX`].
const BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;

/// etcd's lease record (leasepb.Lease), which oxetcd's protos do not carry.
#[derive(Clone, PartialEq, Message)]
struct LeaseProto {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
    #[prost(int64, tag = "3")]
    remaining_ttl: i64,
}

/// The `key` bucket's key of a version at `revision`.
pub fn revision_key(revision: Revision, tombstone: bool) -> Vec<u8> {
    let mut key = Vec::with_capacity(REVISION_KEY_BYTES + 1);
    key.extend_from_slice(&revision.main.to_be_bytes());
    key.push(b'_');
    key.extend_from_slice(&revision.sub.to_be_bytes());
    if tombstone {
        key.push(TOMBSTONE_MARK);
    }
    key
}

/// The revision and deletion mark of a `key` bucket key, `None` if it is
/// not one.
pub fn parse_revision_key(key: &[u8]) -> Option<(Revision, bool)> {
    let tombstone = match key.len() {
        REVISION_KEY_BYTES => false,
        n if n == REVISION_KEY_BYTES + 1 && key[REVISION_KEY_BYTES] == TOMBSTONE_MARK => true,
        _ => return None,
    };
    if key[8] != b'_' {
        return None;
    }
    let main = i64::from_be_bytes(key[..8].try_into().ok()?);
    let sub = i64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((Revision { main, sub }, tombstone))
}

/// The bolt image of `view`, in chunks of about `chunk_bytes`, recording
/// `cluster_version` (etcd's `major.minor.0`) as the cluster's version.
pub fn image<R: KvRead + Send + 'static>(
    view: R,
    cluster_version: &str,
    chunk_bytes: usize,
) -> io::Result<BoltWriter> {
    let meta = view.meta().map_err(io::Error::other)?;
    let mut meta_entries = vec![(
        CONSISTENT_INDEX_KEY.to_vec(),
        meta.applied_index.to_be_bytes().to_vec(),
    )];
    if meta.compact_revision > 0 {
        let mark = revision_key(
            Revision {
                main: meta.compact_revision,
                sub: 0,
            },
            false,
        );
        meta_entries.push((SCHEDULED_COMPACT_KEY.to_vec(), mark.clone()));
        meta_entries.push((FINISHED_COMPACT_KEY.to_vec(), mark));
    }
    let mut leases = Vec::new();
    view.leases(&mut |lease| {
        let record = LeaseProto {
            id: lease.id,
            ttl: lease.ttl_secs,
            remaining_ttl: lease.remaining_ttl_secs,
        };
        leases.push((lease.id.to_be_bytes().to_vec(), record.encode_to_vec()));
        ControlFlow::Continue(())
    })
    .map_err(io::Error::other)?;
    let mut members = Vec::new();
    if let Some(membership) = view.membership().map_err(io::Error::other)? {
        for member in &membership.members {
            members.push((
                format!("{:x}", member.id).into_bytes(),
                member_json(member).into_bytes(),
            ));
        }
    }
    let auth = view.auth().map_err(io::Error::other)?.unwrap_or_default();
    // etcd writes authEnabled once auth was ever switched; a store that
    // never enabled it has only the revision.
    let mut auth_entries = vec![(
        AUTH_REVISION_KEY.to_vec(),
        auth.revision.max(1).to_be_bytes().to_vec(),
    )];
    if auth.enabled {
        auth_entries.insert(0, (AUTH_ENABLED_KEY.to_vec(), vec![1]));
    }
    let users = auth
        .users
        .iter()
        .map(|u| (u.name.clone(), u.encode_to_vec()))
        .collect();
    let roles = auth
        .roles
        .iter()
        .map(|r| (r.name.clone(), r.encode_to_vec()))
        .collect();
    let mut alarms: Vec<Entry> = view
        .alarms()
        .map_err(io::Error::other)?
        .iter()
        .map(|alarm| (alarm.encode_to_vec(), Vec::new()))
        .collect();
    // A bucket's entries go in key order.
    alarms.sort();
    let bucket = |entries: Vec<Entry>| Box::new(VecSource::new(entries)) as Box<_>;
    let buckets: Vec<(Vec<u8>, Box<dyn EntrySource + Send>)> = vec![
        (
            KEY_BUCKET.to_vec(),
            Box::new(VersionSource::new(view)) as Box<_>,
        ),
        (META_BUCKET.to_vec(), bucket(meta_entries)),
        (LEASE_BUCKET.to_vec(), bucket(leases)),
        (MEMBERS_BUCKET.to_vec(), bucket(members)),
        (MEMBERS_REMOVED_BUCKET.to_vec(), bucket(Vec::new())),
        (
            CLUSTER_BUCKET.to_vec(),
            bucket(vec![(
                CLUSTER_VERSION_KEY.to_vec(),
                cluster_version.as_bytes().to_vec(),
            )]),
        ),
        (ALARM_BUCKET.to_vec(), bucket(alarms)),
        (AUTH_BUCKET.to_vec(), bucket(auth_entries)),
        (AUTH_USERS_BUCKET.to_vec(), bucket(users)),
        (AUTH_ROLES_BUCKET.to_vec(), bucket(roles)),
    ];
    BoltWriter::new(buckets, chunk_bytes)
}

/// The `key` bucket of a read view: every stored version in revision
/// order (which is the bucket's key order), read in batches.
struct VersionSource<R> {
    view: R,
    batch: VecDeque<Entry>,
    /// Revision of the last version batched; the next batch starts after.
    last: Option<Revision>,
    done: bool,
}

impl<R: KvRead> VersionSource<R> {
    fn new(view: R) -> Self {
        Self {
            view,
            batch: VecDeque::new(),
            last: None,
            done: false,
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        let from = self.last.map_or(0, |r| r.main);
        let last = self.last;
        let mut bytes = 0;
        let mut batch = Vec::new();
        self.view
            .changes(from, i64::MAX, &mut |version| {
                if last.is_some_and(|l| version.mod_revision <= l) {
                    return ControlFlow::Continue(());
                }
                bytes += version.key.len() + version.value.len();
                batch.push(version);
                if batch.len() >= BATCH_VERSIONS_MAX || bytes >= BATCH_BYTES_MAX {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .map_err(io::Error::other)?;
        self.done = batch.is_empty();
        for version in batch {
            self.last = Some(version.mod_revision);
            self.batch.push_back((
                revision_key(version.mod_revision, version.tombstone),
                key_value(&version).encode_to_vec(),
            ));
        }
        Ok(())
    }
}

impl<R: KvRead> EntrySource for VersionSource<R> {
    fn rewind(&mut self) -> io::Result<()> {
        self.batch.clear();
        self.last = None;
        self.done = false;
        Ok(())
    }

    fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        if self.batch.is_empty() && !self.done {
            self.fill()?;
        }
        Ok(self.batch.pop_front())
    }
}

/// A version as etcd stores it: a deletion is its key alone.
pub(super) fn key_value(version: &KeyVersion) -> mvccpb::KeyValue {
    if version.tombstone {
        return mvccpb::KeyValue {
            key: version.key.clone(),
            ..Default::default()
        };
    }
    mvccpb::KeyValue {
        key: version.key.clone(),
        create_revision: version.create_revision,
        mod_revision: version.mod_revision.main,
        version: version.version,
        value: version.value.clone(),
        lease: version.lease,
    }
}

/// etcd's JSON of a member (Go's `encoding/json` of membership.Member).
fn member_json(member: &oxetcd_proto::etcdserverpb::Member) -> String {
    let list = |urls: &[String]| {
        let quoted: Vec<String> = urls.iter().map(|u| crate::go_json::string(u)).collect();
        format!("[{}]", quoted.join(","))
    };
    let mut json = format!(
        r#"{{"id":{},"peerURLs":{}"#,
        member.id,
        list(&member.peer_ur_ls)
    );
    if member.is_learner {
        json.push_str(r#","isLearner":true"#);
    }
    if !member.name.is_empty() {
        json.push_str(&format!(
            r#","name":{}"#,
            crate::go_json::string(&member.name)
        ));
    }
    if !member.client_ur_ls.is_empty() {
        json.push_str(&format!(r#","clientURLs":{}"#, list(&member.client_ur_ls)));
    }
    json.push('}');
    json
}

impl From<BoltError> for ImportError {
    fn from(e: BoltError) -> Self {
        match e {
            BoltError::Io(e) => Self::Io(e),
            other => Self::Corrupt(other.to_string()),
        }
    }
}

/// Writes the versions and leases of the etcd backend in `reader` into
/// `write`, with a meta record holding its revision and compaction and no
/// raft position (applied index and term 0); returns that meta. Nothing
/// that `write` held is removed: give it an empty store.
pub fn import<F: ReadAt, W: KvWrite>(
    reader: &BoltReader<F>,
    write: &mut W,
) -> Result<KvMeta, ImportError> {
    let root = reader.root();
    let key_bucket = reader
        .bucket(&root, KEY_BUCKET)?
        .ok_or_else(|| ImportError::Corrupt("no \"key\" bucket: not an etcd backend".into()))?;
    let mut revision = 1;
    reader.for_each::<ImportError>(&key_bucket, &mut |key, value| {
        let bad = |why: &str| ImportError::Corrupt(format!("key bucket entry {key:?}: {why}"));
        let (mod_revision, tombstone) =
            parse_revision_key(key).ok_or_else(|| bad("not a revision"))?;
        let value = value.ok_or_else(|| bad("a bucket, not a value"))?;
        let kv = mvccpb::KeyValue::decode(value).map_err(|e| bad(&e.to_string()))?;
        revision = revision.max(mod_revision.main);
        write.put_version(&KeyVersion {
            key: kv.key,
            mod_revision,
            create_revision: kv.create_revision,
            version: kv.version,
            lease: kv.lease,
            value: kv.value,
            tombstone,
        })?;
        Ok(())
    })?;
    let mut compact_revision = -1;
    if let Some(meta) = reader.bucket(&root, META_BUCKET)? {
        reader.for_each::<ImportError>(&meta, &mut |key, value| {
            if key == FINISHED_COMPACT_KEY {
                let (mark, _) = value.and_then(parse_revision_key).ok_or_else(|| {
                    ImportError::Corrupt("finishedCompactRev is not a revision".into())
                })?;
                compact_revision = mark.main;
            }
            Ok(())
        })?;
    }
    if let Some(leases) = reader.bucket(&root, LEASE_BUCKET)? {
        reader.for_each::<ImportError>(&leases, &mut |key, value| {
            let lease = value
                .and_then(|v| LeaseProto::decode(v).ok())
                .ok_or_else(|| ImportError::Corrupt(format!("lease entry {key:?}")))?;
            write.put_lease(&LeaseRecord {
                id: lease.id,
                ttl_secs: lease.ttl,
                remaining_ttl_secs: lease.remaining_ttl,
            })?;
            Ok(())
        })?;
    }
    write.set_auth(&import_auth(reader)?)?;
    write.set_alarms(&import_alarms(reader)?)?;
    let meta = KvMeta {
        applied_index: 0,
        applied_term: 0,
        revision: revision.max(compact_revision),
        compact_revision,
    };
    write.set_meta(&meta)?;
    Ok(meta)
}

/// The users, roles and auth state of an etcd (or oxetcd) bolt backend.
fn import_auth<F: ReadAt>(reader: &BoltReader<F>) -> Result<AuthState, ImportError> {
    let root = reader.root();
    let mut auth = AuthState::default();
    if let Some(bucket) = reader.bucket(&root, AUTH_BUCKET)? {
        reader.for_each::<ImportError>(&bucket, &mut |key, value| {
            let value = value.unwrap_or_default();
            if key == AUTH_ENABLED_KEY {
                auth.enabled = value == [1];
            } else if key == AUTH_REVISION_KEY {
                let bytes: [u8; 8] = value
                    .try_into()
                    .map_err(|_| ImportError::Corrupt("authRevision is not 8 bytes".into()))?;
                auth.revision = u64::from_be_bytes(bytes);
            }
            Ok(())
        })?;
    }
    if let Some(bucket) = reader.bucket(&root, AUTH_USERS_BUCKET)? {
        reader.for_each::<ImportError>(&bucket, &mut |key, value| {
            let user = value
                .and_then(|v| authpb::User::decode(v).ok())
                .ok_or_else(|| ImportError::Corrupt(format!("user entry {key:?}")))?;
            auth.users.push(user);
            Ok(())
        })?;
    }
    if let Some(bucket) = reader.bucket(&root, AUTH_ROLES_BUCKET)? {
        reader.for_each::<ImportError>(&bucket, &mut |key, value| {
            let role = value
                .and_then(|v| authpb::Role::decode(v).ok())
                .ok_or_else(|| ImportError::Corrupt(format!("role entry {key:?}")))?;
            auth.roles.push(role);
            Ok(())
        })?;
    }
    Ok(auth)
}

/// The active alarms of an etcd (or oxetcd) bolt backend.
fn import_alarms<F: ReadAt>(
    reader: &BoltReader<F>,
) -> Result<Vec<oxetcd_proto::etcdserverpb::AlarmMember>, ImportError> {
    let mut alarms = Vec::new();
    if let Some(bucket) = reader.bucket(&reader.root(), ALARM_BUCKET)? {
        reader.for_each::<ImportError>(&bucket, &mut |key, _| {
            let alarm = oxetcd_proto::etcdserverpb::AlarmMember::decode(key)
                .map_err(|e| ImportError::Corrupt(format!("alarm entry {key:?}: {e}")))?;
            alarms.push(alarm);
            Ok(())
        })?;
    }
    Ok(alarms)
}

/// What `snapshot status` reports about a bolt backend, computed as
/// etcdctl computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// CRC-32C over each top-level bucket's name followed by its keys and
    /// values, in bolt order.
    pub hash: u32,
    /// Main revision of the last entry of the `key` bucket.
    pub revision: i64,
    /// Entries of all top-level buckets.
    pub total_key: u64,
    /// Bytes of the database.
    pub total_size: u64,
}

/// Checks `reader`'s pages as bbolt's `tx.Check` does, walks every
/// top-level bucket and sums it up as etcdctl's `snapshot status` does.
pub fn status<F: ReadAt>(reader: &BoltReader<F>) -> Result<Status, BoltError> {
    reader.check()?;
    let mut buckets = Vec::new();
    reader.for_each::<BoltError>(&reader.root(), &mut |name, value| {
        if value.is_some() {
            return Err(BoltError::Corrupt(format!(
                "cannot get hash of bucket {}",
                String::from_utf8_lossy(name)
            )));
        }
        buckets.push(name.to_vec());
        Ok(())
    })?;
    let mut crc = Crc32c::default();
    let mut revision = 0;
    let mut total_key = 0;
    for name in buckets {
        let bucket: Bucket = reader
            .bucket(&reader.root(), &name)?
            .ok_or_else(|| BoltError::Corrupt("a bucket vanished".into()))?;
        crc.update(&name);
        let is_key = name == KEY_BUCKET;
        reader.for_each::<BoltError>(&bucket, &mut |key, value| {
            crc.update(key);
            crc.update(value.unwrap_or_default());
            if is_key {
                let main = key
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(i64::from_be_bytes)
                    .ok_or_else(|| {
                        BoltError::Corrupt(format!("key bucket entry {key:?} is not a revision"))
                    })?;
                revision = main;
            }
            total_key += 1;
            Ok(())
        })?;
    }
    Ok(Status {
        hash: crc.sum(),
        revision,
        total_key,
        total_size: reader.size_bytes(),
    })
}
