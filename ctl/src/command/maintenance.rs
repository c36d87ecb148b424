//! `snapshot save|status|restore`, `defrag`, `alarm`, `move-leader` and
//! `downgrade`.
//!
//! `snapshot status`, `snapshot restore` and `defrag --data-dir` work on
//! local files and reach no server; what they do to the storage format lives
//! in `oxetcd_storage` (`snapshot_file`, `defrag`) and [`crate::restore`],
//! and these commands only parse flags and print.

use std::io::Write;
use std::path::Path;

use clap::{Args, Subcommand};
use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::downgrade_request::DowngradeAction;
use oxetcd_proto::etcdserverpb::{AlarmRequest, AlarmResponse, DowngradeRequest, SnapshotRequest};
use tokio::time::Instant;

use super::endpoint::endpoints;
use super::{exit, parse_hex_u64, Context, Failure};
use crate::client::maintenance;
use crate::output::{DbStatus, DowngradeStep, View};
use crate::restore::{restore, RestoreOptions};
use crate::Error;

/// `snapshot <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum SnapshotCommand {
    /// Stores an etcd node backend snapshot to a given file
    Save {
        /// <filename>
        args: Vec<String>,
    },
    /// Restores an etcd member snapshot to an etcd directory
    Restore(RestoreArgs),
    /// Gets backend snapshot status of a given file
    Status {
        /// <filename>
        args: Vec<String>,
    },
}

/// `snapshot restore <filename> [options]`, with etcdctl's flags and
/// defaults.
#[derive(Args, Clone, Debug)]
pub struct RestoreArgs {
    /// <filename>
    pub args: Vec<String>,
    /// Path to the data directory
    #[arg(long, default_value = "")]
    pub data_dir: String,
    /// Path to the WAL directory (use --data-dir if none given)
    #[arg(long, default_value = "")]
    pub wal_dir: String,
    /// Initial cluster configuration for restore bootstrap
    #[arg(long, default_value = "default=http://localhost:2380")]
    pub initial_cluster: String,
    /// Initial cluster token for the etcd cluster during restore bootstrap
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// List of this member's peer URLs to advertise to the rest of the cluster
    #[arg(long, default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: String,
    /// Human-readable name for this member
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Ignore snapshot integrity hash value (required if copied from data directory)
    #[arg(long)]
    pub skip_hash_check: bool,
}

/// `defrag [options]`.
#[derive(Args, Clone, Debug, Default)]
pub struct DefragArgs {
    /// use all endpoints from the cluster member list
    #[arg(long)]
    pub cluster: bool,
    /// Optional. If present, defragments a data directory not in use by etcd.
    #[arg(long)]
    pub data_dir: Option<String>,
}

/// `alarm <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum AlarmCommand {
    /// Disarms all alarms
    Disarm {
        /// none
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Lists all alarms
    List {
        /// none
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

/// `downgrade <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum DowngradeCommand {
    /// Validate downgrade capability before starting downgrade
    Validate {
        /// <TARGET_VERSION>
        args: Vec<String>,
    },
    /// Start a downgrade action to cluster
    Enable {
        /// <TARGET_VERSION>
        args: Vec<String>,
    },
    /// Cancel the ongoing downgrade action to cluster
    Cancel {
        /// none
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

/// `snapshot save|status|restore`.
pub async fn snapshot(ctx: &Context, command: &SnapshotCommand) -> Result<(), Failure> {
    match command {
        SnapshotCommand::Save { args } => snapshot_save(ctx, args).await,
        SnapshotCommand::Status { args } => snapshot_status(ctx, args),
        SnapshotCommand::Restore(a) => snapshot_restore(a),
    }
}

/// `snapshot status <filename>`: hash, revision, total keys, total size.
fn snapshot_status(ctx: &Context, args: &[String]) -> Result<(), Failure> {
    if args.len() != 1 {
        return Err(Failure::bad_args(
            "snapshot status requires exactly one argument",
        ));
    }
    // A checksum is verified when the file has one; a backend copied out
    // of a data directory has none and is read as etcdctl reads it.
    let status = oxetcd_storage::snapshot_file::status(
        Path::new(&args[0]),
        oxetcd_storage::snapshot_file::HashCheck::IfPresent,
    )
    .map_err(Failure::error)?;
    ctx.print(&View::DbStatus(DbStatus {
        hash: status.hash,
        revision: status.revision,
        total_key: status.total_key,
        total_size: status.total_size,
    }))
}

/// `snapshot restore <filename>`: a new member's data directory.
fn snapshot_restore(a: &RestoreArgs) -> Result<(), Failure> {
    if a.args.len() != 1 {
        return Err(Failure::bad_args(
            "snapshot restore requires exactly one argument",
        ));
    }
    if !a.wal_dir.is_empty() {
        return Err(Failure::error(
            "--wal-dir is not supported: oxetcd keeps its raft log inside --data-dir",
        ));
    }
    let options = RestoreOptions {
        snapshot: a.args[0].clone().into(),
        data_dir: (!a.data_dir.is_empty()).then(|| a.data_dir.clone().into()),
        name: a.name.clone(),
        initial_cluster: a.initial_cluster.clone(),
        initial_cluster_token: a.initial_cluster_token.clone(),
        initial_advertise_peer_urls: a.initial_advertise_peer_urls.clone(),
        skip_hash_check: a.skip_hash_check,
    };
    let restored = restore(&options).map_err(Failure::error)?;
    // etcd logs its restore on stderr; so does this, in a sentence.
    eprintln!(
        "restored snapshot {} (revision {}) into {}: member {:x} of new cluster {:x}; \
         start it with the same --name, --initial-cluster, --initial-cluster-token \
         and --initial-advertise-peer-urls",
        a.args[0],
        restored.snapshot.revision,
        restored.data_dir.display(),
        restored.member_id,
        restored.cluster_id
    );
    Ok(())
}

/// `snapshot save <filename>`: streams the backend into `<filename>.part`
/// and renames it into place once complete.
async fn snapshot_save(ctx: &Context, args: &[String]) -> Result<(), Failure> {
    if args.len() != 1 {
        return Err(Failure::bad_args("snapshot save expects one argument"));
    }
    let path = &args[0];
    let interrupted = |e: &dyn std::fmt::Display| Failure::new(exit::INTERRUPTED, e);
    let endpoints = &ctx.client.config().endpoints;
    if endpoints.len() != 1 {
        // A snapshot is one member's backend: which one must be explicit.
        return Err(interrupted(&format!(
            "snapshot must be requested to one selected node, not multiple {}",
            crate::output::go::string_list(endpoints)
        )));
    }
    let command_timeout = ctx.client.config().command_timeout;
    let save = async {
        let (index, transport) = ctx
            .client
            .transport(Instant::now() + command_timeout)
            .await?;
        let mut stream = match maintenance(transport).snapshot(SnapshotRequest {}).await {
            Ok(s) => s.into_inner(),
            Err(status) => {
                if crate::client::endpoint_failed(&status) {
                    ctx.client.failed(index);
                }
                return Err(Error::from_status(&status));
            }
        };
        let partial = format!("{path}.part");
        let mut file = std::fs::File::create(&partial)
            .map_err(|e| Error::Protocol(format!("could not open {partial} ({e})")))?;
        let mut size = 0u64;
        while let Some(chunk) = stream.message().await? {
            file.write_all(&chunk.blob)
                .map_err(|e| Error::Protocol(format!("could not write {partial} ({e})")))?;
            size += chunk.blob.len() as u64;
        }
        // etcd's rule for a complete snapshot: a whole number of 512-byte
        // sectors (bolt pages) plus a 32-byte SHA-256.
        if size % 512 != 32 {
            return Err(Error::Protocol(format!(
                "sha256 checksum not found [bytes: {size}]"
            )));
        }
        file.sync_all()
            .map_err(|e| Error::Protocol(format!("could not fsync {partial} ({e})")))?;
        std::fs::rename(&partial, path)
            .map_err(|e| Error::Protocol(format!("could not rename {partial} to {path} ({e})")))?;
        Ok::<(), Error>(())
    };
    let result = if ctx.command_timeout_given {
        tokio::time::timeout(command_timeout, save)
            .await
            .unwrap_or(Err(Error::DeadlineExceeded { last: None }))
    } else {
        save.await
    };
    if result.is_err() {
        // A partial file is never left behind, whatever failed.
        let _ = std::fs::remove_file(format!("{path}.part"));
    }
    result.map_err(|e| interrupted(&e))?;
    println!("Snapshot saved at {path}");
    Ok(())
}

/// `defrag`: each endpoint in turn.
pub async fn defrag(ctx: &Context, a: &DefragArgs) -> Result<(), Failure> {
    if let Some(dir) = a.data_dir.as_deref().filter(|d| !d.is_empty()) {
        // etcdctl prints nothing when the offline defragmentation succeeds.
        return match oxetcd_storage::defrag::defragment(Path::new(dir)) {
            Ok(_) => Ok(()),
            Err(e) => {
                eprintln!("Failed to defragment etcd data[{dir}] ({e})");
                Err(Failure::silent(exit::ERROR))
            }
        };
    }
    let mut failures = 0;
    for endpoint in endpoints(ctx, a.cluster).await? {
        let answer = match ctx.client.for_endpoint(&endpoint) {
            Ok(client) => client.defragment().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(_) => println!("Finished defragmenting etcd member[{endpoint}]"),
            Err(e) => {
                eprintln!("Failed to defragment etcd member[{endpoint}] ({e})");
                failures += 1;
            }
        }
    }
    if failures > 0 {
        return Err(Failure::silent(exit::ERROR));
    }
    Ok(())
}

/// `alarm list|disarm`.
pub async fn alarm(ctx: &Context, command: &AlarmCommand) -> Result<(), Failure> {
    let response = match command {
        AlarmCommand::List { args } => {
            if !args.is_empty() {
                return Err(Failure::bad_args("alarm list command accepts no arguments"));
            }
            ctx.client
                .alarm(AlarmRequest {
                    action: AlarmAction::Get as i32,
                    ..Default::default()
                })
                .await?
        }
        AlarmCommand::Disarm { args } => {
            if !args.is_empty() {
                return Err(Failure::bad_args(
                    "alarm disarm command accepts no arguments",
                ));
            }
            // etcd's client disarms "everything" by listing the alarms and
            // disarming each; the combined answer has no header.
            let raised = ctx
                .client
                .alarm(AlarmRequest {
                    action: AlarmAction::Get as i32,
                    ..Default::default()
                })
                .await?;
            let mut combined = AlarmResponse::default();
            for alarm in raised.alarms {
                let answer = ctx
                    .client
                    .alarm(AlarmRequest {
                        action: AlarmAction::Deactivate as i32,
                        member_id: alarm.member_id,
                        alarm: alarm.alarm,
                    })
                    .await?;
                combined.alarms.extend(answer.alarms);
            }
            combined
        }
    };
    ctx.print(&View::Alarm(&response))
}

/// `move-leader <transferee-member-id>`: finds the leader among the
/// endpoints and asks it to hand over.
pub async fn move_leader(ctx: &Context, args: &[String]) -> Result<(), Failure> {
    if args.len() != 1 {
        return Err(Failure::bad_args("move-leader command needs 1 argument"));
    }
    let target = parse_hex_u64(&args[0]).map_err(Failure::bad_args)?;
    let endpoints = ctx.client.config().endpoints.clone();
    for endpoint in &endpoints {
        let client = ctx.client.for_endpoint(endpoint)?;
        let status = client.status().await?;
        let member_id = status.header.as_ref().map_or(0, |h| h.member_id);
        if member_id == status.leader {
            let response = client.move_leader(target).await?;
            return ctx.print(&View::MoveLeader {
                leader: status.leader,
                target,
                response: &response,
            });
        }
    }
    Err(Failure::bad_args(format!(
        "no leader endpoint given at {}",
        crate::output::go::string_list(&endpoints)
    )))
}

/// `downgrade validate|enable <TARGET_VERSION>`, `downgrade cancel`.
pub async fn downgrade(ctx: &Context, command: &DowngradeCommand) -> Result<(), Failure> {
    let (step, action, args) = match command {
        DowngradeCommand::Validate { args } => {
            (DowngradeStep::Validate, DowngradeAction::Validate, args)
        }
        DowngradeCommand::Enable { args } => (DowngradeStep::Enable, DowngradeAction::Enable, args),
        DowngradeCommand::Cancel { args } => (DowngradeStep::Cancel, DowngradeAction::Cancel, args),
    };
    let version = if step == DowngradeStep::Cancel {
        if !args.is_empty() {
            return Err(Failure::bad_args("too many arguments"));
        }
        String::new()
    } else {
        match args.as_slice() {
            [] => return Err(Failure::bad_args("TARGET_VERSION not provided")),
            [v] if v.is_empty() => return Err(Failure::bad_args("target version not provided")),
            [v] => v.clone(),
            _ => return Err(Failure::bad_args("too many arguments")),
        }
    };
    let response = ctx
        .client
        .downgrade(DowngradeRequest {
            action: action as i32,
            version,
        })
        .await?;
    ctx.print(&View::Downgrade(step, &response))
}
