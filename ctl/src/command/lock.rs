//! `lock <lockname> [exec-command arg1 arg2 ...]`: etcdctl's `lock`, on
//! the `v3lockpb.Lock` service.
//!
//! Holds a lease of `--ttl` seconds (a [`Session`]) and asks the server to
//! lock `lockname` under it, waiting as long as others hold it. Then
//! either prints the lock's key (as `get` would) and holds the lock until
//! SIGINT or SIGTERM, unlocking before it exits, or runs the command with
//! `ETCD_LOCK_KEY` and `ETCD_LOCK_REV` in its environment and unlocks when
//! it ends. A signal while waiting ends the wait (`context canceled`);
//! the server removes the queued key.

use std::process::Stdio;

use oxetcd_proto::etcdserverpb::RangeRequest;
use oxetcd_proto::v3lockpb::LockRequest;

use super::interrupt::Interrupt;
use super::session::Session;
use super::watch::{go_exit_status, go_spawn_error};
use super::{Context, Failure};
use crate::output::View;

/// etcdctl's message for a wait cut short by a signal.
pub(crate) const CANCELED: &str = "context canceled";

/// `lock [options] <lockname> [exec-command arg1 arg2 ...]`.
#[derive(clap::Args, Clone, Debug)]
pub struct LockArgs {
    /// timeout for session
    #[arg(long, default_value_t = 10)]
    pub ttl: i64,
    /// <lockname> [exec-command arg1 arg2 ...]
    pub args: Vec<String>,
}

/// `lock …`.
pub async fn lock(ctx: &Context, a: &LockArgs) -> Result<(), Failure> {
    let Some((name, command)) = a.args.split_first() else {
        return Err(Failure::bad_args(
            "lock takes a lock name argument and an optional command to execute",
        ));
    };
    let mut interrupt = Interrupt::install()?;
    let mut session = Session::new(&ctx.client, a.ttl)
        .await
        .map_err(Failure::error)?;
    let request = LockRequest {
        name: name.as_bytes().to_vec(),
        lease: session.lease(),
    };
    let locked = tokio::select! {
        locked = ctx.client.lock(request) => locked.map_err(Failure::error)?,
        () = interrupt.recv() => return Err(Failure::error(CANCELED)),
    };
    let key = locked.key;

    if let Some((program, args)) = command.split_first() {
        let revision = locked.header.map_or(0, |h| h.revision);
        let ran = run(program.clone(), args.to_vec(), &key, revision).await;
        let unlocked = ctx.client.unlock(key).await;
        ran.map_err(Failure::error)?;
        return unlocked.map(|_| ()).map_err(Failure::error);
    }

    let got = ctx
        .client
        .range(RangeRequest {
            key: key.clone(),
            ..Default::default()
        })
        .await
        .map_err(Failure::error)?;
    if got.kvs.is_empty() {
        return Err(Failure::error("lock lost on init"));
    }
    ctx.print(&View::Get(&got))?;

    tokio::select! {
        () = interrupt.recv() => {
            ctx.client.unlock(key).await.map(|_| ()).map_err(Failure::error)
        }
        () = session.lost() => Err(Failure::error("session expired")),
    }
}

/// Runs the command with the lock's key and revision in its environment
/// (the caller's own variables win, as Go's exec keeps the last of two),
/// its output on ours; Go's words for its failure.
async fn run(program: String, args: Vec<String>, key: &[u8], revision: i64) -> Result<(), String> {
    let mut command = std::process::Command::new(&program);
    command
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    let lock_env = [
        ("ETCD_LOCK_KEY", String::from_utf8_lossy(key).into_owned()),
        ("ETCD_LOCK_REV", revision.to_string()),
    ];
    for (name, value) in lock_env {
        if std::env::var_os(name).is_none() {
            command.env(name, value);
        }
    }
    // The wait blocks; the lease's renewals go on on the other workers.
    let status = tokio::task::spawn_blocking(move || command.status())
        .await
        .map_err(|e| e.to_string())?;
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(go_exit_status(status)),
        Err(e) => Err(go_spawn_error(&program, &e)),
    }
}
