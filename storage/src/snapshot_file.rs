//! The snapshot file that `snapshot save` writes: a backend snapshot stream
//! (module [`crate::snapshot`]) followed by the SHA-256 of that stream, as
//! etcd's Maintenance `Snapshot` call appends the SHA-256 of its database.
//! Here are the three things done with such a file: export it
//! ([`FileExport`], served to clients), inspect it ([`status`], `snapshot
//! status`), and restore a fresh backend from it ([`restore_backend`],
//! `snapshot restore`).
//!
//! Layout. The stream (self-delimiting: it ends with its end record), then
//! zeros up to a multiple of [`SECTOR_BYTES`], then [`HASH_BYTES`] of
//! SHA-256 over everything before it. The padding is etcd's rule, not ours:
//! etcd's clients accept a snapshot only if its size is 32 more than a
//! multiple of 512 (a bolt file plus its checksum), and Debian's etcdctl
//! saves oxetcd's snapshots too. A file's checksum is present exactly when
//! its size follows that rule, as etcd decides it; a file without one
//! (its checksum cut off) is accepted only when the check is skipped.
//!
//! Everything is checked before anything is written: [`restore_backend`]
//! reads the file twice, once to verify framing and checksum, once to
//! import. A restored backend keeps the snapshot's data, revisions, compact
//! revision and leases, and drops what belonged to the old cluster: its
//! membership and its raft position (applied index and term go back to 0),
//! so that the member started on it bootstraps a new cluster from its flags
//! and applies that cluster's first entries on top of the restored data.
//!
//! An etcd snapshot is a bolt database, which oxetcd does not read; it is
//! recognised by bolt's magic and refused with an error that says so.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use oxetcd_core::storage::{KvRead, KvStore, KvWrite, StorageError};
use sha2::{Digest, Sha256};

use crate::snapshot::{ImportError, Record, Records, SnapshotExport, MAGIC};
use crate::OpenError;

/// Bytes of the checksum that ends a snapshot file.
pub const HASH_BYTES: usize = 32;

/// The stream is padded to a multiple of this many bytes before the
/// checksum (etcd's clients check that a snapshot's size is one more
/// checksum than a multiple of it).
pub const SECTOR_BYTES: u64 = 512;

/// bolt's meta page magic (0xED0CDAED, little-endian), 16 bytes into the
/// file: what an etcd snapshot starts with.
const BOLT_MAGIC_OFFSET: usize = 16;
const BOLT_MAGIC: [u8; 4] = [0xed, 0xda, 0x0c, 0xed];

/// A read view's snapshot stream, its padding and its SHA-256: the chunks
/// of a snapshot file, in order.
pub struct FileExport<R: KvRead> {
    export: SnapshotExport<R>,
    hasher: Option<Sha256>,
    /// Bytes yielded so far.
    bytes: u64,
}

impl<R: KvRead> FileExport<R> {
    /// The file form of `view`, in chunks of about `chunk_bytes`.
    pub fn new(view: R, chunk_bytes: usize) -> Self {
        Self {
            export: SnapshotExport::new(view, chunk_bytes),
            hasher: Some(Sha256::new()),
            bytes: 0,
        }
    }
}

impl<R: KvRead> Iterator for FileExport<R> {
    type Item = io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.export.next() {
            Some(Ok(chunk)) => {
                if let Some(hasher) = &mut self.hasher {
                    hasher.update(&chunk);
                }
                self.bytes += chunk.len() as u64;
                Some(Ok(chunk))
            }
            Some(Err(e)) => {
                self.hasher = None;
                Some(Err(e))
            }
            None => self.hasher.take().map(|mut hasher| {
                let padding = (SECTOR_BYTES - self.bytes % SECTOR_BYTES) % SECTOR_BYTES;
                let mut tail = vec![0u8; padding as usize];
                hasher.update(&tail);
                tail.extend_from_slice(&hasher.finalize());
                Ok(tail)
            }),
        }
    }
}

/// What `snapshot status` reports about a snapshot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// CRC-32C (Castagnoli, as etcd's) of the stream and its padding.
    pub hash: u32,
    /// The store revision the snapshot was taken at.
    pub revision: i64,
    /// Records the snapshot holds: every key version (each revision of each
    /// key, deletions included), every lease, the meta record and the
    /// membership; etcd counts every key of every bucket the same way.
    pub total_key: u64,
    /// Bytes of the stream and its padding, the checksum excluded (etcd:
    /// the database size).
    pub total_size: u64,
    /// Whether the file ends with a checksum (it was verified).
    pub has_hash: bool,
}

/// Why a snapshot file could not be inspected or restored.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotFileError {
    /// The file could not be read.
    Io {
        /// The snapshot file.
        path: PathBuf,
        /// What failed.
        error: io::Error,
    },
    /// The file is an etcd (bolt) snapshot.
    EtcdSnapshot {
        /// The snapshot file.
        path: PathBuf,
    },
    /// The file is not an oxetcd snapshot at all.
    NotASnapshot {
        /// The snapshot file.
        path: PathBuf,
    },
    /// The file's framing is broken.
    Corrupt {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The checksum does not match the stream.
    HashMismatch {
        /// The checksum the file ends with.
        expected: [u8; HASH_BYTES],
        /// The checksum of the stream read.
        got: [u8; HASH_BYTES],
    },
    /// The file has no checksum and the check was not skipped.
    MissingHash,
    /// The target data directory exists already.
    DataDirExists {
        /// The directory.
        path: PathBuf,
    },
    /// The new backend could not be created.
    Open(OpenError),
    /// Writing the new backend failed.
    Storage(StorageError),
}

impl fmt::Display for SnapshotFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
            Self::EtcdSnapshot { path } => write!(
                f,
                "{} is an etcd (bolt) snapshot; oxetcd reads only snapshots saved from oxetcd",
                path.display()
            ),
            Self::NotASnapshot { path } => {
                write!(f, "{} is not an oxetcd snapshot", path.display())
            }
            Self::Corrupt { path, detail } => write!(
                f,
                "snapshot file integrity check failed: {}: {detail}",
                path.display()
            ),
            // etcd's wording; both in Go's notation for byte slices.
            Self::HashMismatch { expected, got } => write!(
                f,
                "expected sha256 {}, got {}",
                go_bytes(expected),
                go_bytes(got)
            ),
            Self::MissingHash => write!(f, "snapshot missing hash but --skip-hash-check=false"),
            Self::DataDirExists { path } => write!(f, "data-dir {:?} exists", path.display()),
            Self::Open(e) => write!(f, "{e}"),
            Self::Storage(e) => write!(f, "writing the restored backend: {e}"),
        }
    }
}

impl std::error::Error for SnapshotFileError {}

/// Reads `path` through, checking its framing and, when it has one, its
/// checksum. `verify_hash` false skips the checksum comparison (etcd's
/// `--skip-hash-check`); a missing checksum is then accepted too.
pub fn status(path: &Path, verify_hash: bool) -> Result<SnapshotStatus, SnapshotFileError> {
    let file = open(path)?;
    let io_error = |error| SnapshotFileError::Io {
        path: path.to_path_buf(),
        error,
    };
    let corrupt = |detail: String| SnapshotFileError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let len = file.metadata().map_err(io_error)?.len();
    let has_hash = len % SECTOR_BYTES == HASH_BYTES as u64;
    let content_bytes = if has_hash {
        len - HASH_BYTES as u64
    } else {
        len
    };
    let mut reader = BufReader::new(file);
    let mut content = Hashing::new((&mut reader).take(content_bytes));
    let mut records = Records::new(&mut content).map_err(|e| classify(path, e))?;
    while records
        .next_record()
        .map_err(|e| classify(path, e))?
        .is_some()
    {}
    let meta = records.meta().map_err(|e| classify(path, e))?;
    let total_key = records.count();
    drop(records);
    // What follows the end record, up to the checksum, is padding.
    let mut rest = [0u8; 4096];
    loop {
        let n = content.read(&mut rest).map_err(io_error)?;
        if n == 0 {
            break;
        }
        if rest[..n].iter().any(|&b| b != 0) {
            return Err(corrupt(format!(
                "unexpected bytes after the end record{}",
                if has_hash {
                    ""
                } else {
                    " (and no checksum: its size is not 32 more than a multiple of 512)"
                }
            )));
        }
    }
    let (sha, crc, total_size) = content.finish();
    let mut expected = [0u8; HASH_BYTES];
    if has_hash {
        reader.read_exact(&mut expected).map_err(io_error)?;
    }
    if verify_hash {
        if !has_hash {
            return Err(SnapshotFileError::MissingHash);
        }
        if expected != sha {
            return Err(SnapshotFileError::HashMismatch { expected, got: sha });
        }
    }
    Ok(SnapshotStatus {
        hash: crc,
        revision: meta.revision,
        total_key,
        total_size,
        has_hash,
    })
}

/// Creates the data directory `data_dir` (it must not exist) with a backend
/// holding the snapshot at `path`, made ready for a new cluster (see the
/// module doc). The snapshot is verified first ([`status`]); on a failure
/// after the directory was created, the directory is removed again.
pub fn restore_backend(
    path: &Path,
    data_dir: &Path,
    verify_hash: bool,
) -> Result<SnapshotStatus, SnapshotFileError> {
    if data_dir.exists() {
        return Err(SnapshotFileError::DataDirExists {
            path: data_dir.to_path_buf(),
        });
    }
    let summary = status(path, verify_hash)?;
    let result = write_backend(path, data_dir);
    if result.is_err() {
        // The directory is ours: it did not exist before.
        let _ = std::fs::remove_dir_all(data_dir);
    }
    result.map(|()| summary)
}

fn write_backend(path: &Path, data_dir: &Path) -> Result<(), SnapshotFileError> {
    // Private to this user, as the server creates a data directory.
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(data_dir)
        .map_err(|e| SnapshotFileError::Open(OpenError::from_io(data_dir, e)))?;
    let (log, kv) = crate::open(data_dir).map_err(SnapshotFileError::Open)?;
    drop(log);
    let file = open(path)?;
    let mut write = kv.write().map_err(SnapshotFileError::Storage)?;
    let corrupt = |e: ImportError| classify(path, e);
    let mut records = Records::new(BufReader::new(file)).map_err(corrupt)?;
    let storage = SnapshotFileError::Storage;
    while let Some(record) = records.next_record().map_err(corrupt)? {
        match record {
            Record::Meta(meta) => {
                // The old cluster's raft position means nothing to the new
                // cluster's log, which starts empty.
                let meta = oxetcd_core::storage::KvMeta {
                    applied_index: 0,
                    applied_term: 0,
                    ..meta
                };
                write.set_meta(&meta).map_err(storage)?;
            }
            // The new cluster's members come from the restored member's
            // flags, as the bootstrap of any new cluster.
            Record::Membership(_) => {}
            Record::Lease(lease) => write.put_lease(&lease).map_err(storage)?,
            Record::Version(version) => write.put_version(&version).map_err(storage)?,
        }
    }
    write.commit().map_err(storage)?;
    kv.sync().map_err(storage)
}

fn open(path: &Path) -> Result<File, SnapshotFileError> {
    let mut file = File::open(path).map_err(|error| SnapshotFileError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let mut head = [0u8; BOLT_MAGIC_OFFSET + 4];
    let mut read = 0;
    while read < head.len() {
        match file.read(&mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                return Err(SnapshotFileError::Io {
                    path: path.to_path_buf(),
                    error,
                })
            }
        }
    }
    if read == head.len() && head[BOLT_MAGIC_OFFSET..] == BOLT_MAGIC {
        return Err(SnapshotFileError::EtcdSnapshot {
            path: path.to_path_buf(),
        });
    }
    if read < MAGIC.len() || &head[..MAGIC.len()] != MAGIC {
        return Err(SnapshotFileError::NotASnapshot {
            path: path.to_path_buf(),
        });
    }
    // Reopened rather than rewound: one code path for the whole read.
    File::open(path).map_err(|error| SnapshotFileError::Io {
        path: path.to_path_buf(),
        error,
    })
}

fn classify(path: &Path, error: ImportError) -> SnapshotFileError {
    match error {
        ImportError::Io(error) => SnapshotFileError::Io {
            path: path.to_path_buf(),
            error,
        },
        ImportError::Storage(e) => SnapshotFileError::Storage(e),
        other => SnapshotFileError::Corrupt {
            path: path.to_path_buf(),
            detail: match other {
                ImportError::Corrupt(detail) => detail,
                other => other.to_string(),
            },
        },
    }
}

/// Go's `%v` of a byte slice: `[1 2 3]`.
fn go_bytes(bytes: &[u8]) -> String {
    let words: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!("[{}]", words.join(" "))
}

/// A reader that hashes (SHA-256 and CRC-32C) and counts what passes
/// through it.
struct Hashing<R> {
    inner: R,
    sha: Sha256,
    crc: u32,
    bytes: u64,
}

impl<R: Read> Hashing<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            sha: Sha256::new(),
            crc: !0,
            bytes: 0,
        }
    }

    /// The SHA-256, the CRC-32C and the number of bytes read.
    fn finish(self) -> ([u8; HASH_BYTES], u32, u64) {
        (self.sha.finalize().into(), !self.crc, self.bytes)
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.crc = crc32c_update(self.crc, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum
/// etcd's `snapshot status` reports, one byte at a time from a table.
fn crc32c_update(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use oxetcd_core::storage::{KeyVersion, KvMeta, LeaseRecord, Membership, Revision};

    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(!crc32c_update(!0, b"123456789"), 0xe306_9283);
    }

    /// A backend with two keys over three revisions, a deletion, a lease
    /// and a membership record, saved as a file in `dir`.
    fn saved(dir: &Path) -> PathBuf {
        let (_, kv) = crate::open(&dir.join("source")).unwrap();
        let mut w = kv.write().unwrap();
        for (main, key, value, tombstone) in [
            (2, "a", "1", false),
            (3, "b", "2", false),
            (4, "a", "3", false),
            (5, "b", "", true),
        ] {
            w.put_version(&KeyVersion {
                key: key.into(),
                mod_revision: Revision { main, sub: 0 },
                create_revision: main,
                version: 1,
                lease: if key == "a" { 7 } else { 0 },
                value: value.into(),
                tombstone,
            })
            .unwrap();
        }
        w.put_lease(&LeaseRecord {
            id: 7,
            ttl_secs: 60,
            remaining_ttl_secs: 50,
        })
        .unwrap();
        w.set_membership(&Membership::default()).unwrap();
        w.set_meta(&KvMeta {
            applied_index: 12,
            applied_term: 2,
            revision: 5,
            compact_revision: 3,
        })
        .unwrap();
        w.commit().unwrap();
        let file = dir.join("snap.db");
        let mut bytes = Vec::new();
        for chunk in FileExport::new(kv.read().unwrap(), 64) {
            bytes.extend_from_slice(&chunk.unwrap());
        }
        std::fs::write(&file, bytes).unwrap();
        file
    }

    #[test]
    fn status_reports_revision_records_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let status = status(&file, true).unwrap();
        assert_eq!(status.revision, 5);
        // meta, membership, one lease, four versions
        assert_eq!(status.total_key, 7);
        let len = std::fs::metadata(&file).unwrap().len();
        assert_eq!(len % SECTOR_BYTES, HASH_BYTES as u64, "etcd's size rule");
        assert_eq!(status.total_size, len - HASH_BYTES as u64);
        assert!(status.has_hash);
    }

    #[test]
    fn restore_keeps_data_and_drops_the_old_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let target = dir.path().join("restored");
        restore_backend(&file, &target, true).unwrap();
        let (_, kv) = crate::open(&target).unwrap();
        let view = kv.read().unwrap();
        let meta = view.meta().unwrap();
        assert_eq!((meta.applied_index, meta.applied_term), (0, 0));
        assert_eq!((meta.revision, meta.compact_revision), (5, 3));
        assert!(view.membership().unwrap().is_none());
        let mut versions = 0;
        view.changes(0, i64::MAX, &mut |_| {
            versions += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(versions, 4);
        let mut leases = Vec::new();
        view.leases(&mut |l| {
            leases.push(l);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(leases.len(), 1);
        drop(view);
        drop(kv);
        assert!(matches!(
            restore_backend(&file, &target, true),
            Err(SnapshotFileError::DataDirExists { .. })
        ));
    }

    #[test]
    fn flipped_byte_fails_the_hash_unless_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let mut bytes = std::fs::read(&file).unwrap();
        // The value "3" of key "a" at revision 4.
        let at = bytes.windows(2).rposition(|w| w == b"a3").unwrap() + 1;
        bytes[at] = b'9';
        std::fs::write(&file, &bytes).unwrap();
        let error = status(&file, true).unwrap_err();
        assert!(
            error.to_string().starts_with("expected sha256 ["),
            "{error}"
        );
        let target = dir.path().join("restored");
        assert!(matches!(
            restore_backend(&file, &target, true),
            Err(SnapshotFileError::HashMismatch { .. })
        ));
        assert!(!target.exists());
        restore_backend(&file, &target, false).unwrap();
    }

    #[test]
    fn missing_hash_needs_the_skip() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - HASH_BYTES]).unwrap();
        assert!(matches!(
            status(&file, true),
            Err(SnapshotFileError::MissingHash)
        ));
        assert!(!status(&file, false).unwrap().has_hash);
        std::fs::write(&file, &bytes[..bytes.len() - 5]).unwrap();
        let error = status(&file, false).unwrap_err();
        assert!(
            matches!(error, SnapshotFileError::Corrupt { .. }),
            "{error}"
        );
    }

    #[test]
    fn other_files_are_refused_with_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let bolt = dir.path().join("etcd.db");
        let mut page = vec![0u8; 4096];
        page[16..20].copy_from_slice(&BOLT_MAGIC);
        std::fs::write(&bolt, &page).unwrap();
        let error = status(&bolt, true).unwrap_err();
        assert!(matches!(error, SnapshotFileError::EtcdSnapshot { .. }));
        assert!(
            error.to_string().contains("etcd (bolt) snapshot"),
            "{error}"
        );
        let other = dir.path().join("other");
        std::fs::write(&other, b"hello").unwrap();
        assert!(matches!(
            status(&other, true),
            Err(SnapshotFileError::NotASnapshot { .. })
        ));
        assert!(matches!(
            status(&dir.path().join("missing"), true),
            Err(SnapshotFileError::Io { .. })
        ));
    }
}
