//! `snapshot restore`: the data directory of a member of a new cluster,
//! holding a snapshot file's data (an etcd bolt snapshot, saved from oxetcd
//! or from etcd: this is also how an etcd cluster's data moves to oxetcd).
//!
//! Design. The flags are checked exactly as the server checks them when it
//! starts (name in `--initial-cluster`, advertised peer URLs matching), by
//! the same parser, so a restore that succeeds describes a member that can
//! start. The backend is written by `oxetcd_storage::snapshot_file`, without
//! the old cluster's membership and raft position; the raft log stays empty.
//! The member started on the directory with the same `--name`,
//! `--initial-cluster`, `--initial-cluster-token` and
//! `--initial-advertise-peer-urls` therefore bootstraps the new cluster as
//! any new member does — the members and the cluster ID come from those
//! flags — and applies the new cluster's entries on top of the restored
//! revisions. Every member of the new cluster is restored from the same
//! snapshot, each with its own name.

use std::fmt;
use std::path::{Path, PathBuf};

use oxetcd_storage::snapshot_file::{self, SnapshotFileError, SnapshotStatus};

use crate::config::{self, Command, ConfigError};

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
    Flags(ConfigError),
    /// The snapshot could not be read or the directory written.
    Snapshot(SnapshotFileError),
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The parser's reason says which flag; etcd prints the reason.
            Self::Flags(ConfigError::InvalidValue { reason, .. }) => write!(f, "{reason}"),
            Self::Flags(e) => write!(f, "{e}"),
            Self::Snapshot(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RestoreError {}

/// Restores `options.snapshot` into a new data directory (which must not
/// exist).
pub fn restore(options: &RestoreOptions) -> Result<Restored, RestoreError> {
    let data_dir = options
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", options.name)));
    let member = member_config(options, &data_dir)?;
    let snapshot =
        snapshot_file::restore_backend(&options.snapshot, &data_dir, !options.skip_hash_check)
            .map_err(RestoreError::Snapshot)?;
    Ok(Restored {
        data_dir,
        member_id: member.member_id(),
        cluster_id: member.cluster_id(),
        snapshot,
    })
}

/// The configuration the server would start the new member with.
fn member_config(
    options: &RestoreOptions,
    data_dir: &Path,
) -> Result<config::Config, RestoreError> {
    let args = [
        "--name".to_owned(),
        options.name.clone(),
        "--data-dir".to_owned(),
        data_dir.display().to_string(),
        "--initial-cluster".to_owned(),
        options.initial_cluster.clone(),
        "--initial-cluster-token".to_owned(),
        options.initial_cluster_token.clone(),
        "--initial-advertise-peer-urls".to_owned(),
        options.initial_advertise_peer_urls.clone(),
    ];
    match config::parse(args, Vec::<(String, String)>::new()) {
        Ok(Command::Run(config)) => Ok(config),
        // Only `--help` and `--version` ask for these, and no flag here does.
        Ok(Command::Help | Command::Version) => Err(RestoreError::Flags(ConfigError::NotAFlag(
            options.name.clone(),
        ))),
        Err(e) => Err(RestoreError::Flags(e)),
    }
}

#[cfg(test)]
mod tests {
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
