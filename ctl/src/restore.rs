//! `snapshot restore`: the data directory of a member of a new cluster,
//! holding a snapshot file's data (an etcd bolt snapshot, saved from oxetcd
//! or from etcd: this is also how an etcd cluster's data moves to oxetcd).
//!
//! Design. The flags are checked as the server checks them when it starts
//! (name in `--initial-cluster`, advertised peer URLs matching), by the
//! same functions (`oxetcd_urls`), and the IDs are derived as the server
//! derives them, so a restore that succeeds describes a member that can
//! start, under the ID the server will give it. (It lives here, with its
//! only user, rather than in the server, which oxetcdctl does not link.)
//! The backend is written by `oxetcd_storage::snapshot_file`, without the
//! old cluster's membership and raft position; the raft log stays empty.
//! The member started on the directory with the same `--name`,
//! `--initial-cluster`, `--initial-cluster-token` and
//! `--initial-advertise-peer-urls` therefore bootstraps the new cluster as
//! any new member does — the members and the cluster ID come from those
//! flags — and applies the new cluster's entries on top of the restored
//! revisions. Every member of the new cluster is restored from the same
//! snapshot, each with its own name.

use std::fmt;
use std::path::PathBuf;

use oxetcd_storage::snapshot_file::{self, SnapshotFileError, SnapshotStatus};
use oxetcd_urls::{cluster_id, member_id, parse_initial_cluster, parse_urls, InvalidValue};

/// What to restore, and the new member's identity (etcdctl's flags).
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// The snapshot file.
    pub snapshot: PathBuf,
    /// The data directory to create; `<name>.etcd` when `None`, as etcd.
    pub data_dir: Option<PathBuf>,
    /// `--name`.
    pub name: String,
    /// `--initial-cluster`.
    pub initial_cluster: String,
    /// `--initial-cluster-token`.
    pub initial_cluster_token: String,
    /// `--initial-advertise-peer-urls`.
    pub initial_advertise_peer_urls: String,
    /// `--skip-hash-check`: accept a snapshot without checksum, and do not
    /// compare the one it has.
    pub skip_hash_check: bool,
}

/// What a restore made.
#[derive(Clone, Debug)]
pub struct Restored {
    /// The data directory created.
    pub data_dir: PathBuf,
    /// The new member's ID.
    pub member_id: u64,
    /// The new cluster's ID.
    pub cluster_id: u64,
    /// The snapshot restored.
    pub snapshot: SnapshotStatus,
}

/// Why a restore failed; nothing was left behind.
#[derive(Debug)]
#[non_exhaustive]
pub enum RestoreError {
    /// The member's flags would not start a server.
    Flags(InvalidValue),
    /// The snapshot could not be read or the directory written.
    Snapshot(SnapshotFileError),
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The reason says which flag; etcd prints the reason.
            Self::Flags(e) => write!(f, "{}", e.reason),
            Self::Snapshot(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RestoreError {}

/// Restores `options.snapshot` into a new data directory (which must not
/// exist).
pub fn restore(options: &RestoreOptions) -> Result<Restored, RestoreError> {
    let data_dir = match &options.data_dir {
        Some(dir) if dir.as_os_str().is_empty() => {
            let empty = InvalidValue::new("data-dir", "", "must not be empty");
            return Err(RestoreError::Flags(empty));
        }
        Some(dir) => dir.clone(),
        None => PathBuf::from(format!("{}.etcd", options.name)),
    };
    let (member_id, cluster_id) = identity(options).map_err(RestoreError::Flags)?;
    let snapshot =
        snapshot_file::restore_backend(&options.snapshot, &data_dir, !options.skip_hash_check)
            .map_err(RestoreError::Snapshot)?;
    Ok(Restored {
        data_dir,
        member_id,
        cluster_id,
        snapshot,
    })
}

/// The new member's ID and its cluster's, once its flags pass the checks
/// the server makes of them at startup.
fn identity(options: &RestoreOptions) -> Result<(u64, u64), InvalidValue> {
    let token = &options.initial_cluster_token;
    let advertised = parse_urls(
        "initial-advertise-peer-urls",
        &options.initial_advertise_peer_urls,
    )?;
    let members = parse_initial_cluster(&options.name, &advertised, &options.initial_cluster)?;
    Ok((member_id(&advertised, token), cluster_id(&members, token)))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn options(dir: &Path) -> RestoreOptions {
        RestoreOptions {
            snapshot: dir.join("missing.db"),
            data_dir: Some(dir.join("new")),
            name: "default".into(),
            initial_cluster: "default=http://localhost:2380".into(),
            initial_cluster_token: "etcd-cluster".into(),
            initial_advertise_peer_urls: "http://localhost:2380".into(),
            skip_hash_check: false,
        }
    }

    #[test]
    fn flags_are_checked_as_the_server_checks_them() {
        let dir = tempfile::tempdir().unwrap();
        let error = restore(&RestoreOptions {
            name: "x".into(),
            initial_cluster: "a=http://localhost:2380".into(),
            ..options(dir.path())
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "couldn't find local name \"x\" in the initial cluster configuration"
        );
        let error = restore(&RestoreOptions {
            initial_advertise_peer_urls: "http://localhost:9".into(),
            ..options(dir.path())
        })
        .unwrap_err();
        assert!(error.to_string().contains("missing from"), "{error}");
        assert!(!dir.path().join("new").exists());
    }

    #[test]
    fn a_missing_snapshot_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let error = restore(&options(dir.path())).unwrap_err();
        assert!(matches!(error, RestoreError::Snapshot(_)), "{error}");
        assert!(!dir.path().join("new").exists());
    }
}
