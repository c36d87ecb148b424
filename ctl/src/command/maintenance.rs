//! `snapshot save`, `defrag`, `alarm`, `move-leader` and `downgrade`.

use std::io::Write;

use clap::{Args, Subcommand};
use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::downgrade_request::DowngradeAction;
use oxetcd_proto::etcdserverpb::{AlarmRequest, AlarmResponse, DowngradeRequest, SnapshotRequest};
use tokio::time::Instant;

use super::endpoint::endpoints;
use super::{exit, parse_hex_u64, Context, Failure};
use crate::client::maintenance;
use crate::output::{DowngradeStep, View};
use crate::Error;

/// `snapshot <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum SnapshotCommand {
    /// Stores an etcd node backend snapshot to a given file
    Save {
        /// <filename>
        args: Vec<String>,
    },
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

/// `snapshot save <filename>`: streams the backend into `<filename>.part`
/// and renames it into place once complete.
pub async fn snapshot(ctx: &Context, command: &SnapshotCommand) -> Result<(), Failure> {
    let SnapshotCommand::Save { args } = command;
    if args.len() != 1 {
        return Err(Failure::bad_args("snapshot save expects one argument"));
    }
    let path = &args[0];
    let interrupted = |e: &dyn std::fmt::Display| Failure::new(exit::INTERRUPTED, e);
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
        while let Some(chunk) = stream.message().await? {
            file.write_all(&chunk.blob)
                .map_err(|e| Error::Protocol(format!("could not write {partial} ({e})")))?;
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
    result.map_err(|e| interrupted(&e))?;
    println!("Snapshot saved at {path}");
    Ok(())
}

/// `defrag`: each endpoint in turn.
pub async fn defrag(ctx: &Context, a: &DefragArgs) -> Result<(), Failure> {
    if a.data_dir.is_some() {
        return Err(Failure::error(
            "defrag --data-dir (offline defragmentation) is not supported by oxetcdctl",
        ));
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
