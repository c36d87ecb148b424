//! A backend snapshot as a byte stream: what a leader sends a member that
//! needs entries its log no longer holds.
//!
//! Design. [`SnapshotExport`] walks one read view (so it sees exactly the
//! state at its applied index) and yields chunks of whole records;
//! [`import`] reads such a stream into one write transaction, after
//! removing everything the transaction's store held, so a commit replaces
//! the backend's contents atomically and a bad stream (dropped without a
//! commit) changes nothing. Both work on core's [`KvRead`] / [`KvWrite`]
//! traits, so they serve the redb backend and the in-memory one alike, and
//! neither opens a file: the caller owns the I/O.
//!
//! Format (ours, versioned by the magic):
//!
//! ```text
//! "OXSNAP01"
//! record*         tag: u8, body length: u32 LE, body
//!   1 meta        applied index u64, applied term u64, revision i64, compact revision i64
//!   2 membership  Membership::encode
//!   3 lease       ID i64, TTL i64, remaining TTL i64
//!   4 version     main i64, sub i64, create i64, version i64, lease i64, tombstone u8,
//!                 key length u32, key, value
//!   5 auth        AuthState::encode
//!   6 alarms      encode_alarms (only when some alarm is active)
//!   255 end       number of records before it, u64
//! ```
//!
//! Records come in that order: meta, then membership, auth and alarms if any, leases,
//! versions in revision order, end. Every integer is little-endian.

use std::io::{self, Read};
use std::ops::ControlFlow;

use oxetcd_core::storage::{
    decode_alarms, encode_alarms, Alarms, AuthState, KeyVersion, KvMeta, KvRead, KvWrite,
    LeaseRecord, Membership, Revision, StorageError,
};

/// First bytes of every snapshot stream; the digits are the format version.
pub const MAGIC: &[u8; 8] = b"OXSNAP01";

/// A chunk is cut once it holds at least this many bytes (records are never
/// split, so one large record makes a larger chunk).
pub const CHUNK_BYTES_DEFAULT: usize = 1024 * 1024;

/// Largest record body [`import`] accepts: a version carries one key and
/// one value, each bounded by the request size limit, far below this. A
/// larger length is a corrupt stream, refused before allocating.
pub const RECORD_BYTES_MAX: usize = 256 * 1024 * 1024;

const TAG_META: u8 = 1;
const TAG_MEMBERSHIP: u8 = 2;
const TAG_LEASE: u8 = 3;
const TAG_AUTH: u8 = 5;
const TAG_ALARMS: u8 = 6;
const TAG_VERSION: u8 = 4;
const TAG_END: u8 = 255;

/// Bytes of a version record before its key.
const VERSION_FIXED_BYTES: usize = 5 * 8 + 1 + 4;

/// Yields a read view's whole state as chunks of the snapshot format.
pub struct SnapshotExport<R: KvRead> {
    view: R,
    chunk_bytes: usize,
    stage: Stage,
    /// Revision of the last version written; the next page starts after it.
    last: Option<Revision>,
    /// Store revision at the view: no version is newer.
    revision: i64,
    records: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Head,
    Versions,
    End,
    Done,
}

impl<R: KvRead> SnapshotExport<R> {
    /// An export of `view` in chunks of about `chunk_bytes`.
    pub fn new(view: R, chunk_bytes: usize) -> Self {
        Self {
            view,
            chunk_bytes: chunk_bytes.max(1),
            stage: Stage::Head,
            last: None,
            revision: 0,
            records: 0,
        }
    }

    fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StorageError> {
        let mut chunk = Vec::with_capacity(self.chunk_bytes.min(CHUNK_BYTES_DEFAULT) + 1024);
        if self.stage == Stage::Head {
            chunk.extend_from_slice(MAGIC);
            let meta = self.view.meta()?;
            self.revision = meta.revision;
            self.record(&mut chunk, TAG_META, &encode_meta(&meta));
            if let Some(membership) = self.view.membership()? {
                self.record(&mut chunk, TAG_MEMBERSHIP, &membership.encode());
            }
            if let Some(auth) = self.view.auth()? {
                self.record(&mut chunk, TAG_AUTH, &auth.encode());
            }
            let alarms = self.view.alarms()?;
            if !alarms.is_empty() {
                self.record(&mut chunk, TAG_ALARMS, &encode_alarms(&alarms));
            }
            let mut leases = Vec::new();
            self.view.leases(&mut |lease| {
                leases.push(lease);
                ControlFlow::Continue(())
            })?;
            for lease in &leases {
                self.record(&mut chunk, TAG_LEASE, &encode_lease(lease));
            }
            self.stage = Stage::Versions;
        }
        while self.stage == Stage::Versions && chunk.len() < self.chunk_bytes {
            let from = self.last.map_or(0, |r| r.main);
            let last = self.last;
            let mut page = Vec::new();
            let mut page_bytes = chunk.len();
            let chunk_bytes = self.chunk_bytes;
            self.view.changes(from, self.revision, &mut |version| {
                if last.is_some_and(|l| version.mod_revision <= l) {
                    return ControlFlow::Continue(());
                }
                page_bytes += VERSION_FIXED_BYTES + version.key.len() + version.value.len();
                page.push(version);
                if page_bytes >= chunk_bytes {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            if page.is_empty() {
                self.stage = Stage::End;
            }
            for version in &page {
                self.record(&mut chunk, TAG_VERSION, &encode_version(version));
                self.last = Some(version.mod_revision);
            }
        }
        if self.stage == Stage::End {
            let count = self.records;
            self.record(&mut chunk, TAG_END, &count.to_le_bytes());
            self.stage = Stage::Done;
            return Ok(Some(chunk));
        }
        Ok((!chunk.is_empty()).then_some(chunk))
    }

    fn record(&mut self, out: &mut Vec<u8>, tag: u8, body: &[u8]) {
        out.push(tag);
        // Bodies are bounded well below 4 GiB (see RECORD_BYTES_MAX).
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
        self.records += 1;
    }
}

impl<R: KvRead> Iterator for SnapshotExport<R> {
    type Item = io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stage == Stage::Done {
            return None;
        }
        match self.next_chunk() {
            Ok(chunk) => chunk.map(Ok),
            Err(e) => {
                self.stage = Stage::Done;
                Some(Err(io::Error::other(e.to_string())))
            }
        }
    }
}

/// Why [`import`] refused a stream.
#[derive(Debug)]
#[non_exhaustive]
pub enum ImportError {
    /// Reading the stream failed.
    Io(io::Error),
    /// The stream is not a whole snapshot of this format.
    Corrupt(String),
    /// The backend failed.
    Storage(StorageError),
    /// The snapshot holds state this oxetcd cannot honour.
    Unsupported(String),
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "reading the snapshot: {e}"),
            Self::Corrupt(why) => write!(f, "corrupt snapshot: {why}"),
            Self::Storage(e) => write!(f, "writing the snapshot: {e}"),
            Self::Unsupported(why) => write!(f, "cannot restore this snapshot: {why}"),
        }
    }
}

impl std::error::Error for ImportError {}

impl From<StorageError> for ImportError {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

/// Replaces everything `write` holds with the snapshot read from `stream`
/// and returns the snapshot's meta record. The caller commits `write`; on
/// an error it drops it, and the store is unchanged.
pub fn import<W: KvWrite>(write: &mut W, stream: impl Read) -> Result<KvMeta, ImportError> {
    let mut records = Records::new(stream)?;
    clear(write)?;
    while let Some(record) = records.next_record()? {
        match record {
            Record::Meta(meta) => write.set_meta(&meta)?,
            Record::Membership(membership) => write.set_membership(&membership)?,
            Record::Auth(auth) => write.set_auth(&auth)?,
            Record::Alarms(alarms) => write.set_alarms(&alarms)?,
            Record::Lease(lease) => write.put_lease(&lease)?,
            Record::Version(version) => write.put_version(&version)?,
        }
    }
    records.meta()
}

/// One decoded record of a snapshot stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// The backend's meta record (always first).
    Meta(KvMeta),
    /// The stored membership.
    Membership(Membership),
    /// The stored auth store.
    Auth(AuthState),
    /// The active alarms.
    Alarms(Alarms),
    /// One lease.
    Lease(LeaseRecord),
    /// One version of a key (tombstones included).
    Version(KeyVersion),
}

/// Reads a snapshot stream record by record, checking its framing: the
/// magic, the meta record first, known tags, bounded bodies, and the end
/// record's count. It reads exactly the stream's bytes and no further, so
/// whatever follows the end record (a file's checksum) is left unread.
pub struct Records<S: Read> {
    stream: S,
    /// Records read so far, the end record excluded.
    count: u64,
    meta: Option<KvMeta>,
    body: Vec<u8>,
    done: bool,
}

impl<S: Read> Records<S> {
    /// Starts reading `stream`, which must begin with [`MAGIC`].
    pub fn new(mut stream: S) -> Result<Self, ImportError> {
        let mut magic = [0u8; 8];
        read_exact(&mut stream, &mut magic)?;
        if &magic != MAGIC {
            return Err(ImportError::Corrupt("not an oxetcd snapshot".into()));
        }
        Ok(Self {
            stream,
            count: 0,
            meta: None,
            body: Vec::new(),
            done: false,
        })
    }

    /// The next record, or `None` after a valid end record.
    pub fn next_record(&mut self) -> Result<Option<Record>, ImportError> {
        if self.done {
            return Ok(None);
        }
        let mut head = [0u8; 5];
        read_exact(&mut self.stream, &mut head)?;
        let tag = head[0];
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > RECORD_BYTES_MAX {
            return Err(ImportError::Corrupt(format!("record of {len} bytes")));
        }
        self.body.resize(len, 0);
        read_exact(&mut self.stream, &mut self.body)?;
        if self.meta.is_none() && tag != TAG_META {
            return Err(ImportError::Corrupt(format!(
                "record tag {tag} before the meta record"
            )));
        }
        let mut fields = Fields(&self.body);
        let record = match tag {
            TAG_META => {
                let meta = KvMeta {
                    applied_index: fields.u64()?,
                    applied_term: fields.u64()?,
                    revision: fields.i64()?,
                    compact_revision: fields.i64()?,
                };
                self.meta = Some(meta);
                Record::Meta(meta)
            }
            TAG_MEMBERSHIP => Record::Membership(
                Membership::decode(&self.body).map_err(|e| ImportError::Corrupt(e.to_string()))?,
            ),
            TAG_AUTH => Record::Auth(
                AuthState::decode(&self.body).map_err(|e| ImportError::Corrupt(e.to_string()))?,
            ),
            TAG_ALARMS => Record::Alarms(
                decode_alarms(&self.body).map_err(|e| ImportError::Corrupt(e.to_string()))?,
            ),
            TAG_LEASE => Record::Lease(LeaseRecord {
                id: fields.i64()?,
                ttl_secs: fields.i64()?,
                remaining_ttl_secs: fields.i64()?,
            }),
            TAG_VERSION => {
                let mod_revision = Revision {
                    main: fields.i64()?,
                    sub: fields.i64()?,
                };
                let create_revision = fields.i64()?;
                let version = fields.i64()?;
                let lease = fields.i64()?;
                let tombstone = fields.u8()? != 0;
                let key_len = fields.u32()? as usize;
                let key = fields.take(key_len)?.to_vec();
                let value = fields.0.to_vec();
                Record::Version(KeyVersion {
                    key,
                    mod_revision,
                    create_revision,
                    version,
                    lease,
                    value,
                    tombstone,
                })
            }
            TAG_END => {
                let count = fields.u64()?;
                if count != self.count {
                    return Err(ImportError::Corrupt(format!(
                        "{} records, the end record says {count}",
                        self.count
                    )));
                }
                self.done = true;
                return Ok(None);
            }
            other => return Err(ImportError::Corrupt(format!("unknown record tag {other}"))),
        };
        self.count += 1;
        Ok(Some(record))
    }

    /// The meta record, once read.
    pub fn meta(&self) -> Result<KvMeta, ImportError> {
        self.meta
            .ok_or_else(|| ImportError::Corrupt("no meta record".into()))
    }

    /// Records read so far, the end record excluded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The stream, positioned after the last record read.
    pub fn into_inner(self) -> S {
        self.stream
    }
}

/// `read_exact`, with a stream that ends early reported as a corrupt
/// (truncated) snapshot rather than an I/O failure.
fn read_exact(stream: &mut impl Read, buf: &mut [u8]) -> Result<(), ImportError> {
    stream.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ImportError::Corrupt("the stream ends before its end record".into())
        } else {
            ImportError::Io(e)
        }
    })
}

/// Removes every version and lease `write` holds.
fn clear<W: KvWrite>(write: &mut W) -> Result<(), StorageError> {
    let mut versions = Vec::new();
    write.changes(0, i64::MAX, &mut |v| {
        versions.push((v.key, v.mod_revision));
        ControlFlow::Continue(())
    })?;
    for (key, revision) in versions {
        write.remove_version(&key, revision)?;
    }
    let mut leases = Vec::new();
    write.leases(&mut |lease| {
        leases.push(lease.id);
        ControlFlow::Continue(())
    })?;
    for id in leases {
        write.remove_lease(id)?;
    }
    // A snapshot without an auth record comes from a store without one.
    if write.auth()?.is_some() {
        write.set_auth(&AuthState::default())?;
    }
    if !write.alarms()?.is_empty() {
        write.set_alarms(&[])?;
    }
    Ok(())
}

fn encode_meta(meta: &KvMeta) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    out.extend_from_slice(&meta.applied_index.to_le_bytes());
    out.extend_from_slice(&meta.applied_term.to_le_bytes());
    out.extend_from_slice(&meta.revision.to_le_bytes());
    out.extend_from_slice(&meta.compact_revision.to_le_bytes());
    out
}

fn encode_lease(lease: &LeaseRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&lease.id.to_le_bytes());
    out.extend_from_slice(&lease.ttl_secs.to_le_bytes());
    out.extend_from_slice(&lease.remaining_ttl_secs.to_le_bytes());
    out
}

fn encode_version(v: &KeyVersion) -> Vec<u8> {
    let mut out = Vec::with_capacity(VERSION_FIXED_BYTES + v.key.len() + v.value.len());
    for word in [
        v.mod_revision.main,
        v.mod_revision.sub,
        v.create_revision,
        v.version,
        v.lease,
    ] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.push(u8::from(v.tombstone));
    out.extend_from_slice(&(v.key.len() as u32).to_le_bytes());
    out.extend_from_slice(&v.key);
    out.extend_from_slice(&v.value);
    out
}

/// Reads fixed fields off the front of a record body.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ImportError> {
        if self.0.len() < n {
            return Err(ImportError::Corrupt("truncated record".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, ImportError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, ImportError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, ImportError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn i64(&mut self) -> Result<i64, ImportError> {
        Ok(self.u64()? as i64)
    }
}

#[cfg(test)]
mod tests {
    use oxetcd_core::memory::MemoryKv;
    use oxetcd_core::storage::KvStore;

    use super::*;

    fn version(key: &str, main: i64, sub: i64, value: &str) -> KeyVersion {
        KeyVersion {
            key: key.as_bytes().to_vec(),
            mod_revision: Revision { main, sub },
            create_revision: main,
            version: 1,
            lease: 0,
            value: value.as_bytes().to_vec(),
            tombstone: false,
        }
    }

    fn fill<K: KvStore>(kv: &K, versions: usize, tag: &str) {
        let mut w = kv.write().unwrap();
        for i in 0..versions {
            let main = 2 + i as i64 / 3;
            w.put_version(&version(&format!("k{i:04}"), main, i as i64 % 3, tag))
                .unwrap();
        }
        w.put_lease(&LeaseRecord {
            id: 7,
            ttl_secs: 30,
            remaining_ttl_secs: 12,
        })
        .unwrap();
        w.set_meta(&KvMeta {
            applied_index: 40,
            applied_term: 3,
            revision: 2 + versions as i64 / 3,
            compact_revision: -1,
        })
        .unwrap();
        w.commit().unwrap();
    }

    fn dump<R: KvRead>(view: &R) -> (KvMeta, Vec<KeyVersion>, Vec<LeaseRecord>) {
        let mut versions = Vec::new();
        view.changes(0, i64::MAX, &mut |v| {
            versions.push(v);
            ControlFlow::Continue(())
        })
        .unwrap();
        let mut leases = Vec::new();
        view.leases(&mut |l| {
            leases.push(l);
            ControlFlow::Continue(())
        })
        .unwrap();
        (view.meta().unwrap(), versions, leases)
    }

    fn export_bytes<R: KvRead>(view: R, chunk_bytes: usize) -> (Vec<u8>, usize) {
        let mut all = Vec::new();
        let mut chunks = 0;
        for chunk in SnapshotExport::new(view, chunk_bytes) {
            all.extend_from_slice(&chunk.unwrap());
            chunks += 1;
        }
        (all, chunks)
    }

    /// Small chunks page through the versions; the target's own older
    /// contents are gone after the import.
    #[test]
    fn export_then_import_replaces_the_state() {
        let source = MemoryKv::default();
        fill(&source, 200, "source");
        let (bytes, chunks) = export_bytes(source.read().unwrap(), 256);
        assert!(chunks > 10, "{chunks} chunks");

        let target = MemoryKv::default();
        fill(&target, 500, "stale");
        let mut w = target.write().unwrap();
        let meta = import(&mut w, bytes.as_slice()).unwrap();
        w.commit().unwrap();
        assert_eq!(meta.applied_index, 40);
        assert_eq!(dump(&target.read().unwrap()), dump(&source.read().unwrap()));
    }

    /// Alarms travel with the snapshot, and a snapshot without any clears
    /// the target's; the bytes in use follow the data.
    #[test]
    fn alarms_travel_and_bytes_in_use_follow() {
        let alarms = [oxetcd_proto::etcdserverpb::AlarmMember {
            member_id: 3,
            alarm: 1,
        }];
        let source = MemoryKv::default();
        fill(&source, 20, "source");
        let mut w = source.write().unwrap();
        w.set_alarms(&alarms).unwrap();
        w.commit().unwrap();
        let (bytes, _) = export_bytes(source.read().unwrap(), 256);
        let target = MemoryKv::default();
        fill(&target, 50, "stale");
        let mut w = target.write().unwrap();
        import(&mut w, bytes.as_slice()).unwrap();
        w.commit().unwrap();
        let (read, expected) = (target.read().unwrap(), source.read().unwrap());
        assert_eq!(read.alarms().unwrap(), alarms.to_vec());
        assert_eq!(read.used_bytes().unwrap(), expected.used_bytes().unwrap());
        let empty = MemoryKv::default();
        let (bytes, _) = export_bytes(empty.read().unwrap(), 256);
        let mut w = target.write().unwrap();
        import(&mut w, bytes.as_slice()).unwrap();
        w.commit().unwrap();
        let read = target.read().unwrap();
        assert!(read.alarms().unwrap().is_empty());
        assert_eq!(read.used_bytes().unwrap(), 0);
    }

    #[test]
    fn the_redb_backend_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let (_, source) = crate::open(&dir.path().join("a")).unwrap();
        fill(&source, 50, "v");
        let (bytes, _) = export_bytes(source.read().unwrap(), CHUNK_BYTES_DEFAULT);
        let (_, target) = crate::open(&dir.path().join("b")).unwrap();
        fill(&target, 80, "old");
        let mut w = target.write().unwrap();
        import(&mut w, bytes.as_slice()).unwrap();
        w.commit().unwrap();
        assert_eq!(dump(&target.read().unwrap()), dump(&source.read().unwrap()));
    }

    /// A cut or altered stream is refused and the uncommitted write leaves
    /// the store as it was.
    #[test]
    fn truncated_or_corrupt_streams_are_refused() {
        let source = MemoryKv::default();
        fill(&source, 20, "v");
        let (bytes, _) = export_bytes(source.read().unwrap(), 64);
        let target = MemoryKv::default();
        fill(&target, 5, "kept");
        let before = dump(&target.read().unwrap());
        for cut in [0, 5, 8, 20, bytes.len() - 1] {
            let mut w = target.write().unwrap();
            assert!(import(&mut w, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[8] = 99;
        let mut w = target.write().unwrap();
        assert!(matches!(
            import(&mut w, bad.as_slice()),
            Err(ImportError::Corrupt(_))
        ));
        drop(w);
        assert_eq!(dump(&target.read().unwrap()), before);
    }
}
