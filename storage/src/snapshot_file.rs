//! The snapshot file that `snapshot save` writes: an etcd backend (a bolt
//! database with etcd's schema, module [`crate::bolt`]) followed by the
//! SHA-256 of that database, exactly what etcd's Maintenance `Snapshot`
//! call sends. Here are the three things done with such a file: export it
//! ([`FileExport`], served to clients), inspect it ([`status`], `snapshot
//! status`), and restore a fresh backend from it ([`restore_backend`],
//! `snapshot restore`). Files saved from etcd and from oxetcd are the same
//! format, so each side's tools read the other's.
//!
//! Layout. The database is whole pages of 4096 bytes, so its size is a
//! multiple of [`SECTOR_BYTES`], and [`HASH_BYTES`] of SHA-256 over it
//! follow. A file's checksum is present exactly when its size is 32 more
//! than a multiple of 512, as etcd decides it; a file without one (a
//! backend copied from a data directory) is accepted only when the check
//! is skipped or, for `status`, when it is not required ([`HashCheck`]).
//!
//! Everything is checked before anything is written: [`restore_backend`]
//! verifies the checksum and walks every bucket ([`status`]) before it
//! creates the directory. A restored backend keeps the snapshot's data,
//! revisions, compact revision and leases, and drops what belonged to the
//! old cluster: its members and its raft position (applied index and term
//! go back to 0), so that the member started on it bootstraps a new
//! cluster from its flags and applies that cluster's first entries on top
//! of the restored data.
//!
//! Snapshot files of oxetcd's earlier record-stream format (module
//! [`crate::snapshot`], which remains the format of snapshots sent between
//! members) are recognised by their magic and refused with an error that
//! says so.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use oxetcd_core::storage::{KvRead, KvStore, StorageError};
use sha2::{Digest, Sha256};

use crate::bolt::{etcd, BoltError, BoltReader, BoltWriter};
use crate::snapshot::{ImportError, MAGIC as RECORD_STREAM_MAGIC};
use crate::OpenError;

/// Bytes of the checksum that ends a snapshot file.
pub const HASH_BYTES: usize = 32;

/// etcd's clients take a snapshot's size to be one checksum more than a
/// multiple of this many bytes.
pub const SECTOR_BYTES: u64 = 512;

/// The bolt image of a read view and its SHA-256: the chunks of a
/// snapshot file, in order.
pub struct FileExport {
    image: BoltWriter,
    hasher: Option<Sha256>,
}

impl FileExport {
    /// The file form of `view`, in chunks of about `chunk_bytes`, naming
    /// `cluster_version` (`major.minor.0`) as the cluster's version.
    pub fn new<R: KvRead + Send + 'static>(
        view: R,
        cluster_version: &str,
        chunk_bytes: usize,
    ) -> io::Result<Self> {
        Ok(Self {
            image: etcd::image(view, cluster_version, chunk_bytes)?,
            hasher: Some(Sha256::new()),
        })
    }

    /// Bytes of the whole file, checksum included, once the first chunk
    /// was taken (the image is planned then).
    pub fn file_bytes(&self) -> Option<u64> {
        self.image.file_bytes().map(|b| b + HASH_BYTES as u64)
    }
}

impl Iterator for FileExport {
    type Item = io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.image.next() {
            Some(Ok(chunk)) => {
                if let Some(hasher) = &mut self.hasher {
                    hasher.update(&chunk);
                }
                Some(Ok(chunk))
            }
            Some(Err(e)) => {
                self.hasher = None;
                Some(Err(e))
            }
            None => self
                .hasher
                .take()
                .map(|hasher| Ok(hasher.finalize().to_vec())),
        }
    }
}

/// What `snapshot status` reports about a snapshot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// CRC-32C (Castagnoli) over each bucket's name, keys and values, as
    /// etcdctl computes it: both tools print the same hash for a file.
    pub hash: u32,
    /// The store revision the snapshot was taken at (of its last version).
    pub revision: i64,
    /// Entries of all buckets: every key version (each revision of each
    /// key, deletions included), every lease, member and meta entry.
    pub total_key: u64,
    /// Bytes of the database, the checksum excluded.
    pub total_size: u64,
    /// Whether the file ends with a checksum (it was verified unless the
    /// check was skipped).
    pub has_hash: bool,
}

/// What to do with a snapshot's checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashCheck {
    /// The file must end with a checksum, and it must match (restore).
    Required,
    /// A checksum, if the file has one, must match (status: a backend
    /// copied from a data directory has none).
    IfPresent,
    /// Neither (`--skip-hash-check`).
    Skip,
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
    /// The file is a snapshot of oxetcd's earlier record-stream format.
    RecordStream {
        /// The snapshot file.
        path: PathBuf,
    },
    /// The file is not a snapshot at all.
    NotASnapshot {
        /// The snapshot file.
        path: PathBuf,
    },
    /// The database in the file is broken.
    Corrupt {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The checksum does not match the database.
    HashMismatch {
        /// The checksum the file ends with.
        expected: [u8; HASH_BYTES],
        /// The checksum of the database read.
        got: [u8; HASH_BYTES],
    },
    /// The file has no checksum and the check was not skipped.
    MissingHash,
    /// The target data directory exists already.
    DataDirExists {
        /// The directory.
        path: PathBuf,
    },
    /// The snapshot holds state this oxetcd cannot honour.
    Unsupported {
        /// The snapshot file.
        path: PathBuf,
        /// What it holds.
        detail: String,
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
            Self::RecordStream { path } => write!(
                f,
                "{} is a snapshot in the format of earlier oxetcd versions; \
                 restore it with the oxetcdctl that saved it",
                path.display()
            ),
            Self::Unsupported { path, detail } => {
                write!(f, "cannot restore {}: {detail}", path.display())
            }
            Self::NotASnapshot { path } => {
                write!(f, "{} is not a snapshot (no bolt database)", path.display())
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

/// Checks `path`'s checksum as `check` says, then walks its whole
/// database and sums it up as etcdctl's `snapshot status` does.
pub fn status(path: &Path, check: HashCheck) -> Result<SnapshotStatus, SnapshotFileError> {
    let (reader, has_hash) = open(path, check)?;
    let summary = etcd::status(&reader).map_err(|e| bolt_error(path, e))?;
    Ok(SnapshotStatus {
        hash: summary.hash,
        revision: summary.revision,
        total_key: summary.total_key,
        total_size: summary.total_size,
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
    let check = if verify_hash {
        HashCheck::Required
    } else {
        HashCheck::Skip
    };
    let summary = status(path, check)?;
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
    let (reader, _) = open(path, HashCheck::Skip)?;
    let mut write = kv.write().map_err(SnapshotFileError::Storage)?;
    etcd::import(&reader, &mut write).map_err(|e| match e {
        ImportError::Io(error) => SnapshotFileError::Io {
            path: path.to_path_buf(),
            error,
        },
        ImportError::Storage(e) => SnapshotFileError::Storage(e),
        ImportError::Corrupt(detail) => SnapshotFileError::Corrupt {
            path: path.to_path_buf(),
            detail,
        },
        ImportError::Unsupported(detail) => SnapshotFileError::Unsupported {
            path: path.to_path_buf(),
            detail,
        },
    })?;
    use oxetcd_core::storage::KvWrite as _;
    write.commit().map_err(SnapshotFileError::Storage)?;
    kv.sync().map_err(SnapshotFileError::Storage)
}

/// Opens `path` as a bolt database after checking its checksum as
/// `check` says; whether it has one.
fn open(path: &Path, check: HashCheck) -> Result<(BoltReader<File>, bool), SnapshotFileError> {
    let io_error = |error| SnapshotFileError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mut file = File::open(path).map_err(io_error)?;
    let len = file.metadata().map_err(io_error)?.len();
    let has_hash = len % SECTOR_BYTES == HASH_BYTES as u64;
    let mut magic = [0u8; 8];
    if len >= 8 {
        file.read_exact(&mut magic).map_err(io_error)?;
        if &magic == RECORD_STREAM_MAGIC {
            return Err(SnapshotFileError::RecordStream {
                path: path.to_path_buf(),
            });
        }
    }
    match check {
        HashCheck::Required if !has_hash => return Err(SnapshotFileError::MissingHash),
        HashCheck::Required | HashCheck::IfPresent if has_hash => {
            let file = File::open(path).map_err(io_error)?;
            let content = len - HASH_BYTES as u64;
            let mut hasher = Sha256::new();
            let mut reader = file.take(content);
            io::copy(&mut reader, &mut hasher).map_err(io_error)?;
            let mut expected = [0u8; HASH_BYTES];
            reader
                .into_inner()
                .read_exact(&mut expected)
                .map_err(io_error)?;
            let got: [u8; HASH_BYTES] = hasher.finalize().into();
            if got != expected {
                return Err(SnapshotFileError::HashMismatch { expected, got });
            }
        }
        _ => {}
    }
    let file = File::open(path).map_err(io_error)?;
    let reader = BoltReader::open(file).map_err(|e| bolt_error(path, e))?;
    Ok((reader, has_hash))
}

fn bolt_error(path: &Path, error: BoltError) -> SnapshotFileError {
    match error {
        BoltError::Io(error) => SnapshotFileError::Io {
            path: path.to_path_buf(),
            error,
        },
        BoltError::NotBolt => SnapshotFileError::NotASnapshot {
            path: path.to_path_buf(),
        },
        other => SnapshotFileError::Corrupt {
            path: path.to_path_buf(),
            detail: other.to_string(),
        },
    }
}

/// Go's `%v` of a byte slice: `[1 2 3]`.
fn go_bytes(bytes: &[u8]) -> String {
    let words: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!("[{}]", words.join(" "))
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use oxetcd_core::storage::{KeyVersion, KvMeta, KvWrite, LeaseRecord, Membership, Revision};
    use oxetcd_proto::etcdserverpb::Member;

    use super::*;

    /// A backend with two keys over three revisions, a deletion, a lease
    /// and one member, compacted at 3, saved as a file in `dir`.
    fn saved(dir: &Path) -> PathBuf {
        let (_, kv) = crate::open(&dir.join("source")).unwrap();
        let mut w = kv.write().unwrap();
        for (main, key, value, tombstone) in [
            (2, "a", "value-1", false),
            (3, "b", "value-2", false),
            (4, "a", "value-3", false),
            (5, "b", "", true),
        ] {
            w.put_version(&KeyVersion {
                key: key.into(),
                mod_revision: Revision { main, sub: 0 },
                create_revision: if tombstone { 0 } else { main },
                version: i64::from(!tombstone),
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
        w.set_membership(&Membership {
            members: vec![Member {
                id: 0x1234,
                name: "one".into(),
                peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
                client_ur_ls: vec!["http://127.0.0.1:2379".into()],
                is_learner: false,
            }],
            ..Default::default()
        })
        .unwrap();
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
        for chunk in FileExport::new(kv.read().unwrap(), "3.6.0", 64).unwrap() {
            bytes.extend_from_slice(&chunk.unwrap());
        }
        std::fs::write(&file, bytes).unwrap();
        file
    }

    #[test]
    fn status_reports_revision_entries_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let status = status(&file, HashCheck::Required).unwrap();
        assert_eq!(status.revision, 5);
        // key: four versions; meta: consistent index and the two
        // compaction marks; lease: one; members: one; cluster: the
        // version; auth: its revision.
        assert_eq!(status.total_key, 4 + 3 + 1 + 1 + 1 + 1);
        let len = std::fs::metadata(&file).unwrap().len();
        assert_eq!(len % SECTOR_BYTES, HASH_BYTES as u64, "etcd's size rule");
        assert_eq!(status.total_size, len - HASH_BYTES as u64);
        assert_eq!(status.total_size % 4096, 0);
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
        let mut versions = Vec::new();
        view.changes(0, i64::MAX, &mut |v| {
            versions.push(v);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(versions.len(), 4);
        assert_eq!(versions[2].key, b"a");
        assert_eq!(versions[2].value, b"value-3");
        assert_eq!(versions[2].create_revision, 4);
        assert_eq!(versions[2].lease, 7);
        assert!(versions[3].tombstone && versions[3].value.is_empty());
        assert_eq!(versions[3].mod_revision, Revision { main: 5, sub: 0 });
        let mut leases = Vec::new();
        view.leases(&mut |l| {
            leases.push(l);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(
            leases,
            [LeaseRecord {
                id: 7,
                ttl_secs: 60,
                remaining_ttl_secs: 50
            }]
        );
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
        let at = bytes.windows(7).rposition(|w| w == b"value-3").unwrap() + 6;
        bytes[at] = b'9';
        std::fs::write(&file, &bytes).unwrap();
        let error = status(&file, HashCheck::IfPresent).unwrap_err();
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
        let (_, kv) = crate::open(&target).unwrap();
        let mut values = Vec::new();
        kv.read()
            .unwrap()
            .versions(b"a", &mut |v| {
                values.push(v.value);
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(values[0], b"value-9");
    }

    #[test]
    fn missing_hash_needs_the_skip() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let bytes = std::fs::read(&file).unwrap();
        let database = bytes.len() - HASH_BYTES;
        std::fs::write(&file, &bytes[..database]).unwrap();
        assert!(matches!(
            status(&file, HashCheck::Required),
            Err(SnapshotFileError::MissingHash)
        ));
        assert!(!status(&file, HashCheck::IfPresent).unwrap().has_hash);
        assert!(!status(&file, HashCheck::Skip).unwrap().has_hash);
        // Cut into the database itself: its pages are missing.
        std::fs::write(&file, &bytes[..database - 5]).unwrap();
        let error = status(&file, HashCheck::Skip).unwrap_err();
        assert!(
            matches!(error, SnapshotFileError::Corrupt { .. }),
            "{error}"
        );
    }

    #[test]
    fn other_files_are_refused_with_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.db");
        let mut stream = RECORD_STREAM_MAGIC.to_vec();
        stream.resize(512 + HASH_BYTES, 0);
        std::fs::write(&old, &stream).unwrap();
        let error = status(&old, HashCheck::Skip).unwrap_err();
        assert!(matches!(error, SnapshotFileError::RecordStream { .. }));
        assert!(error.to_string().contains("earlier oxetcd"), "{error}");
        let other = dir.path().join("other");
        std::fs::write(&other, b"hello").unwrap();
        assert!(matches!(
            status(&other, HashCheck::Skip),
            Err(SnapshotFileError::NotASnapshot { .. })
        ));
        assert!(matches!(
            status(&dir.path().join("missing"), HashCheck::Skip),
            Err(SnapshotFileError::Io { .. })
        ));
    }

    /// etcd's e2e test zeros the first 512 bytes of a saved snapshot and
    /// expects restore to fail on the checksum, before reading the file.
    #[test]
    fn zeroed_head_fails_the_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let file = saved(dir.path());
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[..512].fill(0);
        std::fs::write(&file, &bytes).unwrap();
        let error = restore_backend(&file, &dir.path().join("new"), true).unwrap_err();
        assert!(error.to_string().contains("expected sha256"), "{error}");
        // Without the check, bolt's second meta page still reads.
        assert_eq!(status(&file, HashCheck::Skip).unwrap().revision, 5);
    }
}
