//! oxetcd-storage: core's storage interfaces on a write-ahead log and redb.
//!
//! A member's data directory holds:
//!
//! ```text
//! <data-dir>/member/wal/       raft log and hard state      WalLog:  LogStore
//! <data-dir>/member/kv.redb    MVCC backend and its meta    RedbKv:  KvStore
//! ```
//!
//! A directory etcd wrote (`member/snap/db`, `member/wal/*.wal`, no
//! `kv.redb`) is imported into this layout first, by the server at start
//! ([`etcd_dir`], reading etcd's WAL with [`etcd_wal`] and its members with
//! [`etcd_members`]); etcd's files stay, and oxetcd's WAL segments sit
//! beside etcd's (their names differ).
//!
//! The raft log is a segmented, preallocated, append-only WAL ([`wal`]): an
//! append is one write and one `fdatasync`, which is all a put has to wait
//! for. The runtime's log thread appends while the apply step commits the
//! backend on another thread, and neither waits for the other. Data
//! directories from before the WAL hold the log in `log.redb` ([`RedbLog`]);
//! [`open`] imports it into the WAL once and removes it.
//!
//! # Durability and recovery
//!
//! Only the raft log is fsync'd on every write. Backend commits are
//! non-durable ([`redb::Durability::None`]): they become visible to new
//! readers at once but reach the disk only with the next durable commit. The
//! applied index ([`oxetcd_core::storage::KvMeta::applied_index`]) is written
//! in the same transaction as the data it describes, so after a crash the
//! backend is the state of some earlier commit together with the index of the
//! last entry in it, and the node replays the log from that index. No entry is
//! lost (the log has it) and none is applied twice (the index moved with the
//! data).
//!
//! [`RedbKv`] still makes a durable commit at least every
//! [`kv::DURABLE_INTERVAL`] or every [`kv::DURABLE_EVERY_COMMITS`] commits:
//! redb reclaims the pages freed by non-durable commits only after a durable
//! one, and the replay after a crash should stay short. On a clean close redb
//! makes pending commits durable itself; [`oxetcd_core::storage::KvStore::sync`]
//! forces it (shutdown, snapshots).
//!
//! # Formats
//!
//! Each redb database stores a format version and what it holds in its
//! `meta` table; each WAL segment starts with the WAL's own format version.
//! [`open`] refuses a file written by a newer format version, and one that
//! holds another file's contents, with an [`OpenError`] naming the file.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod bolt;
mod codec;
mod crc32c;
pub mod defrag;
mod error;
pub mod etcd_dir;
pub mod etcd_members;
pub mod etcd_wal;
mod format;
#[cfg(test)]
mod fuzz_tests;
pub mod go_json;
pub mod kv;
pub mod log;
mod sealed;
pub mod snapshot;
pub mod snapshot_file;
pub mod wal;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use error::OpenError;
pub use kv::{RedbKv, RedbKvRead, RedbKvWrite};
pub use log::RedbLog;
pub use wal::{WalLog, WalOptions};

/// Name of the folder inside the data directory that holds the databases.
pub const MEMBER_DIR: &str = "member";
/// File name of the raft log database inside [`MEMBER_DIR`] before the WAL:
/// imported into [`WAL_DIR`] at [`open`], then removed.
pub const LOG_FILE: &str = "log.redb";
/// Directory of the raft log's WAL segments inside [`MEMBER_DIR`].
pub const WAL_DIR: &str = "wal";
/// File name of the MVCC backend database inside [`MEMBER_DIR`].
pub const KV_FILE: &str = "kv.redb";

/// Opens the member's storage in `data_dir`, creating the directory, its
/// `member/` folder, the WAL and the backend if they are missing, and
/// importing a `log.redb` from before the WAL.
///
/// An unusable directory (a file in its place, no permission, another process
/// holding the files, a corrupt or newer-format file) is an [`OpenError`]
/// that says which path and why.
pub fn open(data_dir: &Path) -> Result<(WalLog, RedbKv), OpenError> {
    ensure_dir(data_dir)?;
    let member = data_dir.join(MEMBER_DIR);
    ensure_dir(&member)?;
    // The backend first: it refuses a directory another process holds
    // before anything in the log is touched.
    let kv = RedbKv::open(&member.join(KV_FILE))?;
    wal::import::import_legacy_log(&member, LOG_FILE, WAL_DIR, WalOptions::default())?;
    let log = WalLog::open(&member.join(WAL_DIR))?;
    Ok((log, kv))
}

/// Creates `path` as a directory if it is missing; refuses anything else in
/// its place.
fn ensure_dir(path: &Path) -> Result<(), OpenError> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(OpenError::NotADirectory {
                path: path.to_path_buf(),
            })
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(dir_error(path, error)),
    }
    fs::create_dir_all(path).map_err(|error| dir_error(path, error))
}

fn dir_error(path: &Path, error: io::Error) -> OpenError {
    match error.kind() {
        // A file somewhere along the path shows up as one of these kinds.
        io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => OpenError::NotADirectory {
            path: first_non_dir(path),
        },
        _ => OpenError::from_io(path, error),
    }
}

/// The first ancestor of `path` (or `path` itself) that exists and is not a
/// directory, for an error message that points at the culprit.
fn first_non_dir(path: &Path) -> PathBuf {
    path.ancestors()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find(|p| fs::metadata(p).is_ok_and(|m| !m.is_dir()))
        .unwrap_or(path)
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("a/b/data");
        let (log, kv) = open(&data_dir).unwrap();
        assert!(data_dir.join("member/wal").is_dir());
        assert!(!data_dir.join("member/log.redb").exists());
        assert!(data_dir.join("member/kv.redb").is_file());
        assert!(kv.size_bytes().unwrap() > 0);
        assert_eq!(log.segment_count(), 1);
    }

    #[test]
    fn file_where_a_directory_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        fs::write(&file, b"not a dir").unwrap();
        let error = open(&file).unwrap_err();
        assert!(
            matches!(&error, OpenError::NotADirectory { path } if *path == file),
            "{error}"
        );
        assert!(error.to_string().contains("not a directory"), "{error}");

        // A file in place of `member/`, and a file further up the path.
        let data_dir = dir.path().join("other");
        fs::create_dir(&data_dir).unwrap();
        fs::write(data_dir.join(MEMBER_DIR), b"").unwrap();
        let error = open(&data_dir).unwrap_err();
        assert!(
            matches!(&error, OpenError::NotADirectory { path } if *path == data_dir.join(MEMBER_DIR))
        );
        let error = open(&file.join("below")).unwrap_err();
        assert!(
            matches!(&error, OpenError::NotADirectory { path } if *path == file),
            "{error}"
        );
    }

    #[test]
    fn garbage_database_file_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let member = dir.path().join(MEMBER_DIR);
        fs::create_dir(&member).unwrap();
        for file in [LOG_FILE, KV_FILE] {
            fs::write(member.join(file), vec![0x5a; 8192]).unwrap();
            let error = open(dir.path()).unwrap_err();
            assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
            assert!(error.to_string().contains(file), "{error}");
            fs::remove_file(member.join(file)).unwrap();
        }
    }

    #[test]
    fn swapped_databases_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()).unwrap());
        let member = dir.path().join(MEMBER_DIR);
        // A backend where the log to import should be.
        fs::remove_dir_all(member.join(WAL_DIR)).unwrap();
        fs::copy(member.join(KV_FILE), member.join(LOG_FILE)).unwrap();
        let error = open(dir.path()).unwrap_err();
        assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
        assert!(error.to_string().contains("log.redb"), "{error}");
        // A log where the backend should be.
        fs::remove_file(member.join(KV_FILE)).unwrap();
        drop(RedbLog::open(&member.join(KV_FILE)).unwrap());
        let error = open(dir.path()).unwrap_err();
        assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn second_open_of_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = open(dir.path()).unwrap();
        let error = open(dir.path()).unwrap_err();
        assert!(matches!(error, OpenError::AlreadyOpen { .. }), "{error}");
    }

    #[test]
    fn newer_format_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()).unwrap());
        let path = dir.path().join(MEMBER_DIR).join(KV_FILE);
        format::tests::set_format_version(&path, format::FORMAT_VERSION + 1);
        let error = open(dir.path()).unwrap_err();
        assert!(
            matches!(&error, OpenError::NewerFormat { path: p, found, .. }
                if *p == path && *found == format::FORMAT_VERSION + 1),
            "{error}"
        );
        assert!(error.to_string().contains("newer"), "{error}");
        format::tests::set_format_version(&path, format::FORMAT_VERSION);
        open(dir.path()).unwrap();
    }

    #[test]
    fn older_format_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()).unwrap());
        let path = dir.path().join(MEMBER_DIR).join(KV_FILE);
        format::tests::set_format_version(&path, 1);
        let error = open(dir.path()).unwrap_err();
        assert!(
            matches!(&error, OpenError::OlderFormat { path: p, found: 1, .. } if *p == path),
            "{error}"
        );
        assert!(error.to_string().contains("format version 1"), "{error}");
    }
}
